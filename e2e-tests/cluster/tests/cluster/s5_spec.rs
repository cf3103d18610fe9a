//! Scenario 5: `allowDNS` off and on, `deletionPolicy` Orphan and Delete (on unlabelling and on
//! baseline deletion), and `mode: Audit` writing nothing.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DeleteParams;
use namespace_baseline_cluster_tests::{
    condition, reconciler_username, tally, wait_until, wall_of,
};
use serde_json::json;

use crate::common::{
    REPAIR_BOUND, SINGLE, assert_rbac_was_enough, check_wall, create_baseline, figure, namespaces,
    patch_spec, spec, start, wait_ready, wait_wall,
};

const FINALIZER: &str = "hedronite.io/cleanup";

#[tokio::test]
async fn s5_allow_dns_off_removes_the_door_and_on_restores_it() {
    let (cluster, names, mark) = start("s5-dns").await;
    let (walled, _) = namespaces(&names, 5, 0).await;
    let baseline = names.name.clone();
    let _reconciler = cluster.start_reconciler("s5-dns", SINGLE).await.unwrap();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;

    patch_spec(&cluster, &baseline, json!({"allowDNS": false})).await;
    let off = wait_wall(&cluster, &baseline, &walled, false, Duration::from_secs(10)).await;
    let (status, _) = wait_ready(&cluster, &baseline, 5, Duration::from_secs(10)).await;
    figure(
        "s5",
        format!(
            "allowDNS=false: 5 DNS doors removed in {off:.2?} (deny-all intact), Ready={:?}",
            condition(&status, "Ready").map(|c| c.0)
        ),
    );
    assert!(off <= REPAIR_BOUND);

    patch_spec(&cluster, &baseline, json!({"allowDNS": true})).await;
    let on = wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 5, Duration::from_secs(10)).await;
    figure(
        "s5",
        format!("allowDNS=true: 5 DNS doors restored in {on:.2?}"),
    );
    assert!(on <= REPAIR_BOUND);
    assert_rbac_was_enough(&cluster, mark);
}

#[tokio::test]
async fn s5_orphan_leaves_the_wall_on_unlabel_and_on_deletion() {
    let (cluster, names, mark) = start("s5-orphan").await;
    let (walled, _) = namespaces(&names, 3, 0).await;
    let baseline = names.name.clone();
    let _reconciler = cluster.start_reconciler("s5-orphan", SINGLE).await.unwrap();
    create_baseline(&cluster, &baseline, spec(&names)).await; // deletionPolicy defaults to Orphan
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 3, Duration::from_secs(10)).await;
    let object = cluster.baselines().get(&baseline).await.unwrap();
    assert!(
        object.finalizers().is_empty(),
        "Orphan baseline carries finalizers {:?}",
        object.finalizers()
    );

    // Unlabel: the namespace leaves the baseline, its wall stays.
    names.set_namespace_label(&walled[0], None).await.unwrap();
    wait_ready(&cluster, &baseline, 2, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_wall(&cluster, &baseline, &walled, true)
        .await
        .expect("Orphan: the unlabelled namespace keeps its wall");

    // Deletion: immediate (no finalizer), the wall stays everywhere.
    let started = Instant::now();
    cluster
        .baselines()
        .delete(&baseline, &DeleteParams::default())
        .await
        .unwrap();
    let gone = cluster
        .baselines()
        .get_opt(&baseline)
        .await
        .unwrap()
        .is_none();
    let gone_in = started.elapsed();
    assert!(gone, "Orphan baseline still present right after delete");
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_wall(&cluster, &baseline, &walled, true)
        .await
        .expect("Orphan: the wall outlives its baseline");
    figure(
        "s5",
        format!(
            "Orphan: no finalizer; unlabelled namespace kept its 2 policies; baseline gone in {gone_in:.2?} (one DELETE), all 6 policies still there 2 s later"
        ),
    );
    assert_rbac_was_enough(&cluster, mark);
}

#[tokio::test]
async fn s5_delete_removes_the_wall_on_unlabel_and_on_deletion() {
    let (cluster, names, mark) = start("s5-delete").await;
    let (walled, _) = namespaces(&names, 3, 0).await;
    let baseline = names.name.clone();
    let reconciler = cluster.start_reconciler("s5-delete", SINGLE).await.unwrap();
    let mut delete_spec = spec(&names);
    delete_spec["deletionPolicy"] = json!("Delete");
    create_baseline(&cluster, &baseline, delete_spec).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 3, Duration::from_secs(10)).await;
    let (_, finalizer_in) = wait_until("the cleanup finalizer", Duration::from_secs(5), || async {
        let object = cluster.baselines().get(&baseline).await?;
        Ok(object
            .finalizers()
            .iter()
            .any(|f| f == FINALIZER)
            .then_some(()))
    })
    .await
    .unwrap();

    // Unlabel: that namespace's wall is removed, the others' stays.
    names.set_namespace_label(&walled[0], None).await.unwrap();
    let unlabel_in = wait_wall(
        &cluster,
        &baseline,
        &walled[1..],
        true,
        Duration::from_secs(10),
    )
    .await;
    wait_ready(&cluster, &baseline, 2, Duration::from_secs(10)).await;
    assert!(
        unlabel_in <= REPAIR_BOUND,
        "unlabelled namespace cleaned in {unlabel_in:?}"
    );

    // Deletion: held by the finalizer until the wall is gone, then gone.
    let started = Instant::now();
    cluster
        .baselines()
        .delete(&baseline, &DeleteParams::default())
        .await
        .unwrap();
    let held = cluster.baselines().get_opt(&baseline).await.unwrap();
    let wall_present = !wall_of(&cluster.admin, &baseline).await.unwrap().is_empty();
    wait_until(
        "the baseline to be gone",
        Duration::from_secs(10),
        || async {
            Ok(cluster
                .baselines()
                .get_opt(&baseline)
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(30)));
    let deleted_in = started.elapsed();
    let left = wall_of(&cluster.admin, &baseline).await.unwrap();
    assert!(
        left.is_empty(),
        "Delete: policies left after the baseline is gone: {left:?}"
    );
    if let Some(held) = &held {
        assert!(held.metadata.deletion_timestamp.is_some());
    }
    figure(
        "s5",
        format!(
            "Delete: finalizer {FINALIZER} added within {finalizer_in:.2?}; unlabelled namespace's wall removed in {unlabel_in:.2?}; on delete the baseline was {} with the wall {}, then the 4 policies and the baseline were gone in {deleted_in:.2?}",
            if held.is_some() {
                "held (deletionTimestamp set)"
            } else {
                "already gone"
            },
            if wall_present {
                "still present"
            } else {
                "already removed"
            },
        ),
    );
    assert_rbac_was_enough(&cluster, mark);
}

#[tokio::test]
async fn s5_audit_mode_writes_nothing_and_reports_drift() {
    let (cluster, names, mark) = start("s5-audit").await;
    let (walled, _) = namespaces(&names, 3, 0).await;
    let baseline = names.name.clone();
    let _reconciler = cluster.start_reconciler("s5-audit", SINGLE).await.unwrap();
    let audit_mark = cluster.audit.mark();
    let mut audit_spec = spec(&names);
    audit_spec["mode"] = json!("Audit");
    create_baseline(&cluster, &baseline, audit_spec).await;
    let (status, took) = wait_until("an audit status", Duration::from_secs(10), || async {
        let object = cluster.baselines().get(&baseline).await?;
        let generation = object.metadata.generation;
        Ok(object
            .status
            .filter(|s| s.observed_generation == generation && s.namespaces == 3))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let policies = wall_of(&cluster.admin, &baseline).await.unwrap();
    assert!(
        policies.is_empty(),
        "Audit mode wrote policies: {policies:?}"
    );
    assert_eq!(
        status.drifted,
        Some(6),
        "3 namespaces x 2 missing policies: {status:?}"
    );
    let ready = condition(&status, "Ready").expect("a Ready condition");
    let degraded = condition(&status, "Degraded");
    if let Some(events) = cluster
        .audit
        .requests_since(audit_mark, &reconciler_username())
    {
        let policy_writes: Vec<String> = events
            .iter()
            .filter(|e| e.is_write() && e.resource() == "networkpolicies")
            .map(|e| e.describe())
            .collect();
        assert!(
            policy_writes.is_empty(),
            "Audit mode wrote NetworkPolicies: {policy_writes:#?}"
        );
        figure(
            "s5",
            format!("Audit: reconciler requests {:?}", tally(&events)),
        );
    }
    let object = cluster.baselines().get(&baseline).await.unwrap();
    assert!(object.finalizers().is_empty());
    figure(
        "s5",
        format!(
            "Audit: status in {took:.2?}: drifted={:?}, Ready={} ({}: {}), Degraded={:?}; 0 NetworkPolicy writes",
            status.drifted, ready.0, ready.1, ready.2, degraded
        ),
    );

    // Switching to Enforce installs the wall.
    patch_spec(&cluster, &baseline, json!({"mode": "Enforce"})).await;
    let enforced_in = wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    let (status, _) = wait_ready(&cluster, &baseline, 3, Duration::from_secs(10)).await;
    figure(
        "s5",
        format!(
            "Audit -> Enforce: wall installed in {enforced_in:.2?}, drifted={:?}",
            status.drifted
        ),
    );
    assert_rbac_was_enough(&cluster, mark);
}
