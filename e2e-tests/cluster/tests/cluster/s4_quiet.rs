//! Scenario 4: a converged cluster costs zero writes, across resyncs and a restart, and the
//! resync reads from the watch caches (no LIST per resync), counted in the audit log.

use std::time::Duration;

use namespace_baseline_cluster_tests::{
    AuditEvent, Reconciler, reconciler_username, tally, wait_until,
};

use crate::common::{
    assert_rbac_was_enough, create_baseline, figure, namespaces, reconciler_writes, settle, spec,
    start, wait_ready, wait_wall,
};

const RESYNC: &str = "--resync-interval=3s";
const RESYNC_SECS: u64 = 3;
/// The stated window in which a converged cluster must cost no write: two resync intervals
/// and a second, measured by the API server between two marker requests.
const WINDOW: Duration = Duration::from_secs(2 * RESYNC_SECS + 1);

const SUCCESSES: &str = r#"namespace_baseline_reconciles_total{result="success"}"#;

/// Successful reconciles so far; an error until the first one (the series appears with it).
fn reconciles(reconciler: &Reconciler) -> anyhow::Result<f64> {
    reconciler.metric(SUCCESSES)
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
    // The reconcile that found everything in place has finished its requests.
    settle(&cluster).await;

    // Resync: a window of two intervals (and a bit) of a converged cluster.
    let before = reconciles(&first).unwrap();
    let observed = cluster.observe_window("s4-resync", WINDOW).await.unwrap();
    let window = observed.length;
    let events = observed.requests_of(&reconciler_username());
    let resyncs = reconciles(&first).unwrap() - before;
    assert!(
        resyncs >= 2.0,
        "expected at least 2 resync reconciles in {window:?}, saw {resyncs}"
    );
    if let Some(events) = events {
        let written = reconciler_writes(&events, None);
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
        || async { Ok((reconciles(&second)? >= 1.0).then_some(())) },
    )
    .await
    .unwrap();
    // From the restart to the end of a resync window: its startup and two resyncs.
    let observed = cluster.observe_window("s4-restart", WINDOW).await.unwrap();
    let events = observed
        .events
        .and(cluster.audit.requests_since(mark, &reconciler_username()));
    let restart_reconciles = reconciles(&second).unwrap();
    assert!(
        restart_reconciles >= 3.0,
        "expected the startup reconcile and 2 resyncs, saw {restart_reconciles}"
    );
    if let Some(events) = events {
        let written = reconciler_writes(&events, None);
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
