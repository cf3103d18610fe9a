//! Scenarios 1 (second half) and 8: a `namespaceLabel` the schema lets through but that is
//! invalid by length is reported as a permanent failure (`Ready=False`), written once, and not
//! retried: the reconciler's requests are counted in the audit log.

use std::time::Duration;

use namespace_baseline_cluster_tests::{
    AuditEvent, condition, reconciler_username, tally, wait_until, wall_of,
};
use serde_json::json;

use crate::common::{
    assert_rbac_was_enough, create_baseline, figure, patch_spec, settle, spec, start, wait_ready,
    wait_wall,
};

/// The stated window of silence after the report: two resync intervals (3 s) and a second.
const SILENCE: Duration = Duration::from_secs(7);

#[tokio::test]
async fn s8_a_label_invalid_by_length_is_permanent_and_not_retried() {
    let (cluster, names, mark) = start("s8").await;
    let walled = vec![names.namespace("w00")];
    names
        .create_namespaces(&walled, &names.walled_labels())
        .await
        .unwrap();
    let baseline = names.name.clone();
    // Resync on: a permanent failure must not come back with each resync either.
    let reconciler = cluster
        .start_reconciler("s8", &["--leader-election=false", "--resync-interval=3s"])
        .await
        .unwrap();

    // 64 characters: within the schema's pattern, over the 63-character label name limit.
    let key = "a".repeat(64);
    let audit = cluster.audit.mark();
    create_baseline(&cluster, &baseline, json!({"namespaceLabel": key})).await;
    let (status, reported_in) = wait_until("Ready=False", Duration::from_secs(10), || async {
        let object = cluster.baselines().get(&baseline).await?;
        let generation = object.metadata.generation;
        Ok(object.status.filter(|s| {
            s.observed_generation == generation
                && condition(s, "Ready").is_some_and(|(status, _, _)| status == "False")
        }))
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(30)));
    let (_, reason, message) = condition(&status, "Ready").unwrap();
    assert!(
        message.contains("namespaceLabel"),
        "the message should name the field: {message}"
    );
    figure(
        "s1",
        format!(
            "64-character key accepted by the schema, reported in {reported_in:.2?}: Ready=False reason={reason} message={message:?}"
        ),
    );

    // The report (a status patch, an Event), then silence: once the reconciler has settled,
    // a stated window of two resync intervals and a second with no request at all: no retry,
    // no resync, no hot loop.
    settle(&cluster).await;
    let silence = cluster.observe_window("s8-silence", SILENCE).await.unwrap();
    if let Some(events) = cluster.audit.requests_since(audit, &reconciler_username()) {
        let requests: Vec<&AuditEvent> =
            events.iter().filter(|e| e.resource() != "leases").collect();
        let writes: Vec<String> = requests
            .iter()
            .filter(|e| e.is_write())
            .map(|e| e.describe())
            .collect();
        let later = silence
            .requests_of(&reconciler_username())
            .unwrap_or_default();
        figure(
            "s8",
            format!(
                "{} requests from creating the invalid baseline to the end of the silence window: {:?}; writes: {writes:?}; requests in the {:.1?} window after the reconciler settled: {}",
                requests.len(),
                tally(&events),
                silence.length,
                later.len()
            ),
        );
        assert!(
            writes.len() <= 4,
            "more than a status patch and an event or two: {writes:#?}"
        );
        assert!(requests.len() <= 4, "hot loop? {:#?}", tally(&events));
        assert!(
            later.is_empty(),
            "the reconciler kept calling after reporting: {:#?}",
            tally(&later)
        );
    }
    // The failure was counted (the series exists once it was), and not retried.
    let reconciles = reconciler
        .metric(r#"namespace_baseline_reconciles_total{result="permanent_error"}"#)
        .unwrap();
    assert!(reconciles >= 1.0, "the permanent failure was not counted");
    figure("s8", format!("permanent_error reconciles: {reconciles}"));
    assert!(
        reconciles <= 3.0,
        "the failure was retried {reconciles} times"
    );
    assert!(wall_of(&cluster.admin, &baseline).await.unwrap().is_empty());

    // A spec change is what clears it.
    patch_spec(&cluster, &baseline, spec(&names)).await;
    let fixed_in = wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 1, Duration::from_secs(10)).await;
    figure(
        "s8",
        format!("fixing the spec: wall in {fixed_in:.2?}, Ready=True"),
    );
    assert_rbac_was_enough(&cluster, mark);
}
