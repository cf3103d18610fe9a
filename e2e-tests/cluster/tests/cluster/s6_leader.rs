//! Scenario 6: two replicas with leader election: only the Lease holder writes; the standby
//! keeps its caches warm (ready, and no LIST at its take-over); when the leader is killed
//! (SIGKILL, no release), the other takes over and repairs within the lease duration plus 2 s.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::DeleteParams;
use namespace_baseline_cluster_tests::leadership::lease_holder;
use namespace_baseline_cluster_tests::{
    Reconciler, deny_all_policy_name, expected_deny_all_spec, get_policy, reconciler_username,
    spec_json, tally, wait_until,
};
use namespace_baseline_core::identity::RECONCILER_NAMESPACE;
use namespace_baseline_testkit::audit::AuditEvent;

use crate::common::{
    assert_rbac_was_enough, create_baseline, figure, namespaces, settle, spec, start, wait_ready,
    wait_wall,
};

/// The reconciler's lease duration (leader/src/lib.rs, `Timing::DEFAULT`).
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// The resources the watches cache (`reconciler/src/reconcile/watches.rs`).
const CACHED: [&str; 6] = [
    "namespacebaselines",
    "namespaces",
    "networkpolicies",
    "services",
    "endpointslices",
    "pods",
];

/// NetworkPolicy writes of a replica; both series are exported from the start, so an absent
/// one fails the test.
fn applied(reconciler: &Reconciler) -> f64 {
    reconciler
        .metric("namespace_baseline_objects_applied_total")
        .unwrap()
}

fn leading(reconciler: &Reconciler) -> f64 {
    reconciler.metric("namespace_baseline_leader").unwrap()
}

#[tokio::test]
async fn s6_only_the_leader_writes_and_the_standby_takes_over() {
    let (cluster, names, mark) = start("s6").await;
    let (walled, _) = namespaces(&names, 5, 0).await;
    let baseline = names.name.clone();
    let lease_name = format!("{}-lease", names.name);
    let args = [
        "--leader-election=true".to_owned(),
        format!("--lease-name={lease_name}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a_name = format!("{}-a", names.name);
    let b_name = format!("{}-b", names.name);
    let mut a = cluster.start_reconciler(&a_name, &args).await.unwrap();
    let mut b = cluster.start_reconciler(&b_name, &args).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(cluster.admin.clone(), RECONCILER_NAMESPACE);
    // A missing Lease is created only after a lease duration of seeing it missing.
    let (first_holder, _) = wait_until(
        "a lease holder",
        LEASE_DURATION + Duration::from_secs(10),
        || async { Ok(lease_holder(&leases, &lease_name).await) },
    )
    .await
    .unwrap();
    assert!(
        first_holder == a_name || first_holder == b_name,
        "unknown holder {first_holder}"
    );
    let (leader, standby) = if first_holder == a_name {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    let install = cluster.audit.mark();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 5, Duration::from_secs(10)).await;
    // The leader counts its writes as they are answered: wait for the 10 to be counted, then
    // for it to settle (a surplus write would be counted by then).
    wait_until(
        "the leader to count its 10 writes",
        Duration::from_secs(10),
        || async { Ok((applied(leader) >= 10.0).then_some(())) },
    )
    .await
    .unwrap();
    settle(&cluster).await;
    let (leader_applied, standby_applied) = (applied(leader), applied(standby));
    figure(
        "s6",
        format!(
            "lease {lease_name} held by {first_holder}; leader metric: {} vs standby {}; objects applied: leader {leader_applied}, standby {standby_applied}",
            leading(leader),
            leading(standby)
        ),
    );
    assert_eq!(
        leader_applied, 10.0,
        "the leader should have made the 10 writes"
    );
    assert_eq!(standby_applied, 0.0, "the standby wrote");
    // Both replicas are the same ServiceAccount: the audit log must show exactly the
    // leader's 10 NetworkPolicy writes, none more.
    if let Some(events) = cluster
        .audit
        .requests_since(install, &reconciler_username())
    {
        let policy_writes = events
            .iter()
            .filter(|e| e.is_write() && e.resource() == "networkpolicies")
            .count();
        figure(
            "s6",
            format!(
                "audit log: {policy_writes} NetworkPolicy writes by the ServiceAccount during the install (leader's counter: {leader_applied})"
            ),
        );
        assert_eq!(policy_writes, 10, "{:?}", tally(&events));
    }
    assert_eq!(leading(standby), 0.0);
    assert_eq!(
        lease_holder(&leases, &lease_name).await.as_deref(),
        Some(first_holder.as_str())
    );
    // The standby is ready as a standby: its caches are synced (warm), its gate closed.
    assert_eq!(
        standby.http("/readyz").unwrap(),
        (200, "ready (standby)\n".to_owned())
    );
    let before_kill = cluster.audit.mark();

    // The leader dies without releasing the lease; the wall is breached at once.
    leader.kill();
    let killed = Instant::now();
    let namespace = walled[0].clone();
    let deny = deny_all_policy_name(&baseline);
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &namespace);
    let uid = policies.get(&deny).await.unwrap().metadata.uid;
    policies
        .delete(&deny, &DeleteParams::default())
        .await
        .unwrap();
    // Polled every 10 ms: when the standby says it leads, and when the policy is back.
    let admin = cluster.admin.clone();
    let mut took_over = None;
    let back_in = loop {
        if took_over.is_none() && leading(standby) >= 1.0 {
            took_over = Some(killed.elapsed());
        }
        let restored = get_policy(&admin, &namespace, &deny)
            .await
            .unwrap()
            .is_some_and(|p| p.metadata.uid != uid && spec_json(&p) == expected_deny_all_spec());
        if restored {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() <= LEASE_DURATION + Duration::from_secs(10),
            "the standby did not restore the policy\n{}",
            standby.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let took_over = took_over.unwrap_or(back_in);
    let new_holder = lease_holder(&leases, &lease_name).await;
    figure(
        "s6",
        format!(
            "leader killed (SIGKILL); the standby led after {took_over:.2?}; deleted policy restored after {back_in:.2?} ({:.2?} after the take-over; bound {:?}); lease now held by {new_holder:?}; standby applied {}",
            back_in.saturating_sub(took_over),
            LEASE_DURATION + Duration::from_secs(2),
            applied(standby)
        ),
    );
    // Warm: the standby listed what its caches hold before the kill, and only watched after it
    // (the per-term parts, such as the OpenReports follower, may list their own resources).
    if let Some(events) = cluster
        .audit
        .requests_since(before_kill, &reconciler_username())
    {
        let agent = format!("({})", standby.instance);
        let lists: Vec<String> = events
            .iter()
            .filter(|e| e.user_agent.contains(&agent) && e.verb == "list")
            .filter(|e| CACHED.contains(&e.resource()))
            .map(AuditEvent::describe)
            .collect();
        figure(
            "s6",
            format!("the standby's LISTs from the kill to the restore: {lists:?}"),
        );
        assert!(
            lists.is_empty(),
            "the standby listed at its take-over: its caches were not warm: {lists:?}"
        );
    }
    assert_eq!(new_holder.as_deref(), Some(standby.instance.as_str()));
    assert!(
        applied(standby) >= 1.0,
        "the restore was not made by the standby"
    );
    assert!(
        back_in <= LEASE_DURATION + Duration::from_secs(2),
        "took {back_in:?}"
    );
    standby.stop().await.unwrap();
    assert_rbac_was_enough(&cluster, mark);
}
