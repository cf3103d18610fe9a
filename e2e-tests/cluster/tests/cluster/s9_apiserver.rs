//! Scenario 9 (disconnection): the reconciler loses the API server and finds it again by
//! itself. First a partition (the proxy between them cuts every connection and refuses new
//! ones for 10 s) while the wall is broken behind its back: once the partition heals, it
//! repairs everything that drifted. Then a real restart of the API server
//! (`restart.sh kube-apiserver`, same etcd): its next drift repair works.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::faults::{
    self, restart_apiserver, restartable_state_dir, retrying,
};
use namespace_baseline_cluster_tests::{
    deny_all_policy_name, dns_policy_name, expected_deny_all_spec, get_policy, spec_json,
    wait_until,
};
use serde_json::json;

use crate::common::{
    SINGLE, assert_rbac_was_enough, create_baseline, figure, namespaces, spec, start, wait_ready,
};
use crate::s9_common::{Wall, reconciler_requests, wait_exact, wait_status_right};

const PARTITION: Duration = Duration::from_secs(10);
/// How long after the API server is reachable again the first repair may take: a watch
/// waits at most 5 s between reconnection attempts, then relists.
const RECONNECT_BOUND: Duration = Duration::from_secs(10);

#[tokio::test]
async fn s9_apiserver_partition_and_restart_are_survived() {
    let (cluster, names, mark) = start("s9-apiserver").await;
    let (mut walled, _) = namespaces(&names, 4, 0).await;
    let baseline = names.name.clone();
    let deny = deny_all_policy_name(&baseline);
    let dns = dns_policy_name(&baseline);

    // Part 1: a partition between the reconciler and the API server.
    let proxy = cluster.fault_proxy(0x5EED_0010).unwrap();
    let mut reconciler = cluster
        .start_reconciler_at("s9-apiserver-1", SINGLE, Some(&faults::endpoint(&proxy)))
        .await
        .unwrap();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    let mut scope: BTreeSet<String> = walled.iter().cloned().collect();
    let none = BTreeSet::new();
    wait_exact(
        &cluster,
        &[Wall {
            baseline: &baseline,
            namespaces: &walled,
            dns: true,
        }],
        &scope,
        &none,
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    wait_ready(&cluster, &baseline, 4, Duration::from_secs(10)).await;

    proxy.partition();
    let partitioned = Instant::now();
    // Every connection of the reconciler is closed before the drift is made.
    wait_until(
        "the partition to close every connection",
        Duration::from_secs(5),
        || async { Ok((proxy.report().open_connections == 0).then_some(())) },
    )
    .await
    .unwrap();
    // Drift the reconciler cannot see: made directly, not through the proxy.
    let policies = |namespace: &str| -> Api<NetworkPolicy> {
        Api::namespaced(cluster.admin.clone(), namespace)
    };
    policies(&walled[0])
        .delete(&deny, &DeleteParams::default())
        .await
        .unwrap();
    policies(&walled[1])
        .patch(
            &deny,
            &PatchParams {
                field_manager: Some("e2e-tamper".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"egress": [{}]}})),
        )
        .await
        .unwrap();
    policies(&walled[2])
        .delete(&dns, &DeleteParams::default())
        .await
        .unwrap();
    let late = names.namespace("late");
    names
        .create_namespaces(std::slice::from_ref(&late), &names.walled_labels())
        .await
        .unwrap();
    walled.push(late.clone());
    scope.insert(late);
    tokio::time::sleep(PARTITION.saturating_sub(partitioned.elapsed())).await;
    reconciler.check_alive().unwrap();
    let (_, health) = reconciler.http("/healthz").unwrap();
    proxy.heal();
    let walls = [Wall {
        baseline: &baseline,
        namespaces: &walled,
        dns: true,
    }];
    let repaired = wait_exact(&cluster, &walls, &scope, &none, Duration::from_secs(60))
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(40)));
    let status = wait_status_right(&cluster, &baseline, 5, Duration::from_secs(30))
        .await
        .unwrap();
    let report = proxy.report();
    figure(
        "s9-apiserver",
        format!(
            "partition of {PARTITION:?} ({} connections cut, {} refused; /healthz during it: {health:?}): 4 drifts made meanwhile (deny-all deleted, deny-all opened, DNS door deleted, namespace labelled) all repaired {repaired:.2?} after the partition healed (status right {:.2?} later)",
            report.cut_connections, report.refused_connections, status
        ),
    );
    // Each watch retries at most every 5 s (WatchBackoff::CAP), each on its own: the repair
    // follows the heal within seconds.
    assert!(
        repaired <= RECONNECT_BOUND,
        "repaired {repaired:?} after the partition healed"
    );
    assert!(
        report.cut_connections > 0,
        "the partition cut nothing: {report}"
    );
    assert!(
        report.refused_connections > 0,
        "the reconciler did not try to reconnect during the partition: {report}"
    );
    reconciler.stop().await.unwrap();
    drop(proxy);
    assert_rbac_was_enough(&cluster, mark);

    // Part 2: the API server itself restarts underneath a reconciler connected to it.
    let Some(state_dir) = restartable_state_dir() else {
        return;
    };
    let restart_mark = cluster.audit.mark();
    let reconciler = cluster
        .start_reconciler("s9-apiserver-2", SINGLE)
        .await
        .unwrap();
    let restart_took = restart_apiserver(state_dir).await.unwrap();
    let restarted = Instant::now();
    // Drift right after the restart: the reconciler must have reconnected to see it.
    let namespace = walled[3].clone();
    let api = policies(&namespace);
    let before = retrying("reading the deny-all after the restart", 25, || async {
        Ok(api.get(&deny).await?)
    })
    .await
    .unwrap()
    .uid();
    retrying("deleting the deny-all after the restart", 25, || async {
        api.delete(&deny, &DeleteParams::default()).await?;
        Ok(())
    })
    .await
    .unwrap();
    let deleted = Instant::now();
    let admin = cluster.admin.clone();
    wait_until(
        "the deny-all deleted after the restart to come back",
        Duration::from_secs(60),
        || async {
            Ok(get_policy(&admin, &namespace, &deny)
                .await
                .ok()
                .flatten()
                .filter(|p| p.uid() != before && spec_json(p) == expected_deny_all_spec()))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(40)));
    let back_in = deleted.elapsed();
    let ready = reconciler.http("/readyz").map(|(code, _)| code).ok();
    figure(
        "s9-apiserver",
        format!(
            "restart.sh kube-apiserver took {restart_took:.1?}; a deny-all deleted {:.2?} after it came back was recreated in {back_in:.2?} (/readyz now {ready:?})",
            deleted.duration_since(restarted)
        ),
    );
    assert!(
        back_in <= RECONNECT_BOUND,
        "the first repair after the restart took {back_in:?}"
    );
    assert_eq!(ready, Some(200));
    reconciler.check_alive().unwrap();
    // A starting API server refuses requests (403) until its RBAC caches are filled; the
    // reconciler's watches retry through that. A refused write would be a real problem.
    if let Some(events) = reconciler_requests(&cluster, restart_mark) {
        let (writes, reads): (Vec<_>, Vec<_>) = events
            .iter()
            .filter(|e| e.code() == Some(403))
            .partition(|e| e.is_write());
        let writes: Vec<String> = writes.iter().map(|e| e.describe()).collect();
        figure(
            "s9-apiserver",
            format!(
                "requests refused (403) by the API server while it started: {} reads, {} writes",
                reads.len(),
                writes.len()
            ),
        );
        assert!(
            writes.is_empty(),
            "writes refused after the restart: {writes:#?}"
        );
    }
}
