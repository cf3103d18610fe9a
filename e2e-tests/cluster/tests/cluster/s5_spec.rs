//! Scenario 5: `allowDNS` off and on, `deletionPolicy` Orphan and Delete (on unlabelling and on
//! baseline deletion), and `mode: Audit` writing nothing.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DeleteParams;
use namespace_baseline_cluster_tests::{
    AuditMark, Cluster, Reconciler, Scenario, condition, reconciler_username, tally, wait_until,
    wall_of,
};
use serde_json::{Value, json};

use crate::common::{
    REPAIR_BOUND, SINGLE, assert_no_writes_for, assert_rbac_was_enough, check_wall,
    create_baseline, figure, namespaces, patch_spec, spec, start, wait_ready, wait_wall,
};

const FINALIZER: &str = "hedronite.io/cleanup";
/// How long an Orphan wall is watched for a removal that must not come (after the
/// reconciler reported the change): longer than a reconcile and its retries take.
const ORPHAN_WINDOW: Duration = Duration::from_secs(2);
/// How long Audit mode is watched for a NetworkPolicy write that must not come.
const AUDIT_WINDOW: Duration = Duration::from_secs(2);

/// What every s5 scenario starts from: `count` walled namespaces, one reconciler, and a
/// baseline of the standard spec with `changes` merged in.
struct Started {
    cluster: Cluster,
    names: Scenario,
    /// Before anything was created (the RBAC check reads from here).
    mark: AuditMark,
    /// Right before the baseline was created.
    created: AuditMark,
    walled: Vec<String>,
    baseline: String,
    reconciler: Reconciler,
}

impl Started {
    /// The cluster, the scenario's names, the mark before anything was created, the walled
    /// namespaces and the baseline's name.
    fn parts(&self) -> (&Cluster, &Scenario, AuditMark, &[String], &str) {
        (
            &self.cluster,
            &self.names,
            self.mark,
            &self.walled,
            &self.baseline,
        )
    }

    async fn new(scenario: &str, count: usize, changes: Value) -> Self {
        let (cluster, names, mark) = start(scenario).await;
        let (walled, _) = namespaces(&names, count, 0).await;
        let baseline = names.name.clone();
        let reconciler = cluster.start_reconciler(scenario, SINGLE).await.unwrap();
        let mut baseline_spec = spec(&names);
        for (key, value) in changes.as_object().into_iter().flatten() {
            baseline_spec[key] = value.clone();
        }
        let created = cluster.audit.mark();
        create_baseline(&cluster, &baseline, baseline_spec).await;
        Self {
            cluster,
            names,
            mark,
            created,
            walled,
            baseline,
            reconciler,
        }
    }

    /// [`Started::new`], then the wall in place and the baseline Ready.
    async fn walled(scenario: &str, count: usize, changes: Value) -> Self {
        let started = Self::new(scenario, count, changes).await;
        let Self {
            cluster,
            baseline,
            walled,
            ..
        } = &started;
        wait_wall(cluster, baseline, walled, true, Duration::from_secs(10)).await;
        wait_ready(cluster, baseline, count as u32, Duration::from_secs(10)).await;
        started
    }
}

#[tokio::test]
async fn s5_allow_dns_off_removes_the_door_and_on_restores_it() {
    let setup = Started::walled("s5-dns", 5, json!({})).await;
    let (cluster, _, mark, walled, baseline) = setup.parts();

    patch_spec(cluster, baseline, json!({"allowDNS": false})).await;
    let off = wait_wall(cluster, baseline, walled, false, Duration::from_secs(10)).await;
    let (status, _) = wait_ready(cluster, baseline, 5, Duration::from_secs(10)).await;
    figure(
        "s5",
        format!(
            "allowDNS=false: 5 DNS doors removed in {off:.2?} (deny-all intact), Ready={:?}",
            condition(&status, "Ready").map(|c| c.0)
        ),
    );
    assert!(off <= REPAIR_BOUND);

    patch_spec(cluster, baseline, json!({"allowDNS": true})).await;
    let on = wait_wall(cluster, baseline, walled, true, Duration::from_secs(10)).await;
    wait_ready(cluster, baseline, 5, Duration::from_secs(10)).await;
    figure(
        "s5",
        format!("allowDNS=true: 5 DNS doors restored in {on:.2?}"),
    );
    assert!(on <= REPAIR_BOUND);
    assert_rbac_was_enough(cluster, mark);
}

#[tokio::test]
async fn s5_orphan_leaves_the_wall_on_unlabel_and_on_deletion() {
    // deletionPolicy defaults to Orphan.
    let setup = Started::walled("s5-orphan", 3, json!({})).await;
    let (cluster, names, mark, walled, baseline) = setup.parts();
    let object = cluster.baselines().get(baseline).await.unwrap();
    assert!(
        object.finalizers().is_empty(),
        "Orphan baseline carries finalizers {:?}",
        object.finalizers()
    );

    // Unlabel: the namespace leaves the baseline, its wall stays: no NetworkPolicy write in
    // the window after the reconciler reported it.
    names.set_namespace_label(&walled[0], None).await.unwrap();
    wait_ready(cluster, baseline, 2, Duration::from_secs(10)).await;
    let unlabel_window = assert_no_writes_for(
        cluster,
        "s5-orphan-unlabel",
        ORPHAN_WINDOW,
        Some("networkpolicies"),
    )
    .await;
    check_wall(cluster, baseline, walled, true)
        .await
        .expect("Orphan: the unlabelled namespace keeps its wall");

    // Deletion: immediate (no finalizer), the wall stays everywhere.
    let started = Instant::now();
    cluster
        .baselines()
        .delete(baseline, &DeleteParams::default())
        .await
        .unwrap();
    let gone = cluster
        .baselines()
        .get_opt(baseline)
        .await
        .unwrap()
        .is_none();
    let gone_in = started.elapsed();
    assert!(gone, "Orphan baseline still present right after delete");
    let deletion_window = assert_no_writes_for(
        cluster,
        "s5-orphan-delete",
        ORPHAN_WINDOW,
        Some("networkpolicies"),
    )
    .await;
    check_wall(cluster, baseline, walled, true)
        .await
        .expect("Orphan: the wall outlives its baseline");
    figure(
        "s5",
        format!(
            "Orphan: no finalizer; unlabelled namespace kept its 2 policies (no NetworkPolicy write in {unlabel_window:.2?}); baseline gone in {gone_in:.2?} (one DELETE), all 6 policies still there and none written in the {deletion_window:.2?} after"
        ),
    );
    assert_rbac_was_enough(cluster, mark);
}

#[tokio::test]
async fn s5_delete_removes_the_wall_on_unlabel_and_on_deletion() {
    let setup = Started::walled("s5-delete", 3, json!({"deletionPolicy": "Delete"})).await;
    let (cluster, names, mark, walled, baseline) = setup.parts();
    let reconciler = &setup.reconciler;
    let (_, finalizer_in) = wait_until("the cleanup finalizer", Duration::from_secs(5), || async {
        let object = cluster.baselines().get(baseline).await?;
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
        cluster,
        baseline,
        &walled[1..],
        true,
        Duration::from_secs(10),
    )
    .await;
    wait_ready(cluster, baseline, 2, Duration::from_secs(10)).await;
    assert!(
        unlabel_in <= REPAIR_BOUND,
        "unlabelled namespace cleaned in {unlabel_in:?}"
    );

    // Deletion: held by the finalizer until the wall is gone, then gone.
    let started = Instant::now();
    cluster
        .baselines()
        .delete(baseline, &DeleteParams::default())
        .await
        .unwrap();
    let held = cluster.baselines().get_opt(baseline).await.unwrap();
    let wall_present = !wall_of(&cluster.admin, baseline).await.unwrap().is_empty();
    wait_until(
        "the baseline to be gone",
        Duration::from_secs(10),
        || async {
            Ok(cluster
                .baselines()
                .get_opt(baseline)
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(30)));
    let deleted_in = started.elapsed();
    let left = wall_of(&cluster.admin, baseline).await.unwrap();
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
    assert_rbac_was_enough(cluster, mark);
}

#[tokio::test]
async fn s5_audit_mode_writes_nothing_and_reports_drift() {
    let setup = Started::new("s5-audit", 3, json!({"mode": "Audit"})).await;
    let (cluster, _, mark, walled, baseline) = setup.parts();
    let audit_mark = setup.created;
    let (status, took) = wait_until("an audit status", Duration::from_secs(10), || async {
        let object = cluster.baselines().get(baseline).await?;
        let generation = object.metadata.generation;
        Ok(object
            .status
            .filter(|s| s.observed_generation == generation && s.namespaces == 3))
    })
    .await
    .unwrap();
    assert_no_writes_for(cluster, "s5-audit", AUDIT_WINDOW, Some("networkpolicies")).await;
    let policies = wall_of(&cluster.admin, baseline).await.unwrap();
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
    let object = cluster.baselines().get(baseline).await.unwrap();
    assert!(object.finalizers().is_empty());
    figure(
        "s5",
        format!(
            "Audit: status in {took:.2?}: drifted={:?}, Ready={} ({}: {}), Degraded={:?}; 0 NetworkPolicy writes",
            status.drifted, ready.0, ready.1, ready.2, degraded
        ),
    );

    // Switching to Enforce installs the wall.
    patch_spec(cluster, baseline, json!({"mode": "Enforce"})).await;
    let enforced_in = wait_wall(cluster, baseline, walled, true, Duration::from_secs(10)).await;
    let (status, _) = wait_ready(cluster, baseline, 3, Duration::from_secs(10)).await;
    figure(
        "s5",
        format!(
            "Audit -> Enforce: wall installed in {enforced_in:.2?}, drifted={:?}",
            status.drifted
        ),
    );
    assert_rbac_was_enough(cluster, mark);
}
