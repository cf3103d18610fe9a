//! Scenario 4: a converged cluster costs zero writes, across resyncs and a restart, and the
//! resync reads from the watch caches (no LIST per resync), counted in the audit log.

use std::time::Duration;

use namespace_baseline_cluster_tests::{
    AuditEvent, Cluster, Reconciler, reconciler_username, tally, wait_until,
};

use crate::common::{
    assert_rbac_was_enough, create_baseline, figure, namespaces, spec, start, wait_ready, wait_wall,
};

const RESYNC: &str = "--resync-interval=3s";
const RESYNC_SECS: u64 = 3;

fn reconciles(reconciler: &Reconciler) -> f64 {
    reconciler
        .metric(r#"namespace_baseline_reconciles_total{result="success"}"#)
        .unwrap_or(0.0)
}

fn writes(events: &[AuditEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is_write() && e.resource() != "leases")
        .map(AuditEvent::describe)
        .collect()
}

/// Requests of `verb` on `resource`; a paginated LIST counts once (its `continue` pages are
/// the same list operation).
fn count(events: &[AuditEvent], verb: &str, resource: &str) -> usize {
    events
        .iter()
        .filter(|e| e.verb == verb && e.resource() == resource && e.subresource().is_none())
        .filter(|e| !e.request_uri.contains("continue="))
        .count()
}

/// Waits `duration` while the reconciler runs, then returns its requests since the mark.
async fn observe(
    cluster: &Cluster,
    duration: Duration,
    mark: namespace_baseline_cluster_tests::AuditMark,
) -> Option<Vec<AuditEvent>> {
    tokio::time::sleep(duration).await;
    cluster.audit.requests_since(mark, &reconciler_username())
}

#[tokio::test]
async fn s4_converged_means_zero_writes_across_resync_and_restart() {
    let (cluster, names, start_mark) = start("s4").await;
    let (walled, _) = namespaces(&names, 10, 2).await;
    let baseline = names.name.clone();
    let args = ["--leader-election=false", RESYNC];
    let mut first = cluster.start_reconciler("s4-first", &args).await.unwrap();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 10, Duration::from_secs(10)).await;
    // Converged: the status reports a reconcile that found everything in place.
    wait_until(
        "a reconcile that wrote nothing",
        Duration::from_secs(10),
        || async {
            let status = cluster.baselines().get(&baseline).await?.status;
            Ok(status.filter(|s| s.objects_applied == 0).map(|_| ()))
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Resync: two intervals (and a bit) of a converged cluster.
    let mark = cluster.audit.mark();
    let before = reconciles(&first);
    let window = Duration::from_secs(2 * RESYNC_SECS + 1);
    let events = observe(&cluster, window, mark).await;
    let resyncs = reconciles(&first) - before;
    assert!(
        resyncs >= 2.0,
        "expected at least 2 resync reconciles in {window:?}, saw {resyncs}"
    );
    if let Some(events) = events {
        let written = writes(&events);
        let lists = (
            count(&events, "list", "namespaces"),
            count(&events, "list", "networkpolicies"),
        );
        figure(
            "s4",
            format!(
                "resync: {resyncs} reconciles in {window:?}: {} writes, LIST namespaces={} networkpolicies={}, GET={}, all requests {:?}",
                written.len(),
                lists.0,
                lists.1,
                events.iter().filter(|e| e.verb == "get").count(),
                tally(&events)
            ),
        );
        assert!(
            written.is_empty(),
            "writes during resync of a converged cluster: {written:#?}"
        );
        assert_eq!(
            lists,
            (0, 0),
            "the resync listed instead of reading its caches: {:?}",
            tally(&events)
        );
    }

    // Restart: a new process, same cluster, nothing to do.
    first.stop().await.unwrap();
    let mark = cluster.audit.mark();
    let second = cluster.start_reconciler("s4-second", &args).await.unwrap();
    wait_until(
        "the restarted reconciler to reconcile",
        Duration::from_secs(10),
        || async { Ok((reconciles(&second) >= 1.0).then_some(())) },
    )
    .await
    .unwrap();
    let events = observe(&cluster, window, mark).await;
    let restart_reconciles = reconciles(&second);
    assert!(
        restart_reconciles >= 3.0,
        "expected the startup reconcile and 2 resyncs, saw {restart_reconciles}"
    );
    if let Some(events) = events {
        let written = writes(&events);
        let lists = (
            count(&events, "list", "namespaces"),
            count(&events, "list", "networkpolicies"),
            count(&events, "list", "namespacebaselines"),
        );
        figure(
            "s4",
            format!(
                "restart + {} reconciles: {} writes, LIST namespaces={} networkpolicies={} namespacebaselines={} (initial cache fill, continue pages not counted), all requests {:?}",
                restart_reconciles,
                written.len(),
                lists.0,
                lists.1,
                lists.2,
                tally(&events)
            ),
        );
        assert!(
            written.is_empty(),
            "writes after a restart on a converged cluster: {written:#?}"
        );
        assert!(
            lists.0 <= 1 && lists.1 <= 1,
            "more than the initial LIST per resource: {:?}",
            tally(&events)
        );
    }
    assert_rbac_was_enough(&cluster, start_mark);
}
