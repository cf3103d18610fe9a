//! Scenario 9 (crash): the reconciler is SIGKILLed in the middle of walling 1,000 namespaces
//! and started again: it finishes the job from the cluster's state, with no duplicate and no
//! stray object (exactly the two managed policies in each namespace, nothing else).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::runtime::watcher;
use namespace_baseline_cluster_tests::faults::{policy_writes, writes_by_object};
use namespace_baseline_cluster_tests::repairs::is_hedge;
use namespace_baseline_cluster_tests::wait_until;
use namespace_baseline_core::identity;

use crate::common::{SINGLE, assert_rbac_was_enough, create_baseline, figure, settle, spec, start};
use crate::s9_common::{
    Wall, assert_writes_only_walls, check_exact, reconciler_requests, wait_exact, wait_status_right,
};

const NAMESPACES: usize = 1_000;
/// Kill once this many of the 2,000 policies exist.
const KILL_AT: usize = 600;

#[tokio::test]
async fn s9_kill_sigkill_while_walling_a_thousand_namespaces() {
    let (cluster, names, mark) = start("s9-kill").await;
    let walled: Vec<String> = (0..NAMESPACES)
        .map(|i| names.namespace(&format!("n{i:04}")))
        .collect();
    let created = Instant::now();
    names
        .create_namespaces(&walled, &names.walled_labels())
        .await
        .unwrap();
    let created_in = created.elapsed();
    let scope: BTreeSet<String> = walled.iter().cloned().collect();
    let baseline = names.name.clone();

    // Counts the wall's policies as they appear (a watch: no polling LIST of 2,000 objects).
    let appeared = Arc::new(AtomicUsize::new(0));
    let counter = {
        let appeared = appeared.clone();
        let api: Api<NetworkPolicy> = Api::all(cluster.admin.clone());
        let selector = format!(
            "{}={}",
            identity::BASELINE_LABEL,
            identity::baseline_label_value(&baseline)
        );
        tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            let mut events = watcher(api, watcher::Config::default().labels(&selector)).boxed();
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(policy) | watcher::Event::InitApply(policy)) = event
                {
                    seen.insert((policy.metadata.namespace, policy.metadata.name));
                    appeared.store(seen.len(), Ordering::SeqCst);
                }
            }
        })
    };

    let mut first = cluster.start_reconciler("s9-kill-1", SINGLE).await.unwrap();
    let install_mark = cluster.audit.mark();
    let started = Instant::now();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_until(
        &format!("{KILL_AT} policies to exist"),
        Duration::from_secs(120),
        || async { Ok((appeared.load(Ordering::SeqCst) >= KILL_AT).then_some(())) },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", first.log_tail(40)));
    first.kill();
    let killed_at = started.elapsed();
    let at_kill = appeared.load(Ordering::SeqCst);
    // Requests the first process had in flight may still land: wait until none has.
    settle(&cluster).await;
    let restart_mark = cluster.audit.mark();
    let before_restart = appeared.load(Ordering::SeqCst);

    let second = cluster.start_reconciler("s9-kill-2", SINGLE).await.unwrap();
    let restarted = Instant::now();
    let walls = [Wall {
        baseline: &baseline,
        namespaces: &walled,
        dns: true,
    }];
    let converged = wait_exact(
        &cluster,
        &walls,
        &scope,
        &BTreeSet::new(),
        Duration::from_secs(240),
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", second.log_tail(40)));
    wait_status_right(
        &cluster,
        &baseline,
        u32::try_from(NAMESPACES).unwrap(),
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", second.log_tail(40)));
    let status_in = restarted.elapsed();
    counter.abort();
    check_exact(&cluster, &walls, &scope, &BTreeSet::new())
        .await
        .unwrap();

    figure(
        "s9-kill",
        format!(
            "{NAMESPACES} namespaces created in {created_in:.1?}; first reconciler SIGKILLed {killed_at:.1?} after the baseline was created, with {at_kill} of {} policies in place ({before_restart} once its in-flight requests landed); the second one made the wall exact in {converged:.1?} and the status right in {status_in:.1?}",
            2 * NAMESPACES
        ),
    );
    let all = [baseline.as_str()];
    assert_writes_only_walls(&cluster, install_mark, &all, &scope);
    if let (Some(first_requests), Some(second_requests)) = (
        cluster.audit.requests_since(
            install_mark,
            &namespace_baseline_cluster_tests::reconciler_username(),
        ),
        reconciler_requests(&cluster, restart_mark),
    ) {
        let all_second_writes = policy_writes(&second_requests);
        let first_writes = policy_writes(&first_requests).len() - all_second_writes.len();
        // A hedge is a second copy of one of its writes that went unanswered past the hedge
        // bound (design.md, "Hedged writes": the last writes of a pass can be, on a loaded
        // machine): counted apart, never a rewrite of its own.
        let (hedges, second_writes): (Vec<_>, Vec<_>) = all_second_writes
            .into_iter()
            .partition(|event| is_hedge(event));
        let per_object = writes_by_object(&second_writes);
        let rewritten = per_object.values().filter(|count| **count > 1).count();
        let creates_needed = 2 * NAMESPACES - before_restart;
        figure(
            "s9-kill",
            format!(
                "audit: {first_writes} NetworkPolicy writes by the first process, {} by the second ({} objects, {rewritten} of them more than once; {creates_needed} were missing at its start) and {} hedges of its writes",
                second_writes.len(),
                per_object.len(),
                hedges.len()
            ),
        );
        // At most one hedge per write, each of an object the process wrote.
        let hedged = writes_by_object(&hedges);
        for (object, count) in &hedged {
            assert!(
                per_object.get(object).is_some_and(|writes| count <= writes),
                "{count} hedges of {object:?}, written {:?} times otherwise",
                per_object.get(object)
            );
        }
        // The second process wrote what was missing, and not the whole wall again.
        assert!(
            second_writes.len() >= creates_needed,
            "{} writes cannot have created the {creates_needed} missing policies",
            second_writes.len()
        );
        assert!(
            second_writes.len() <= creates_needed + 32,
            "the restarted reconciler rewrote objects that were in place: {} writes for {creates_needed} missing",
            second_writes.len()
        );
        assert_eq!(rewritten, 0, "objects written twice after the restart");
    }
    assert_rbac_was_enough(&cluster, mark);
}
