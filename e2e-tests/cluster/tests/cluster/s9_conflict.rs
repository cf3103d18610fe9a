//! Scenario 9 (conflicts): another field manager keeps editing a managed policy's spec in a
//! tight loop (merge patches, then forced server-side applies that take the fields over).
//! The reconciler wins the desired state back without a hot loop: about one write per
//! foreign edit at most, none once the edits stop. A server-side apply that does not force
//! is refused by the API server (409): the fields are the reconciler's.

use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use namespace_baseline_cluster_tests::faults::{policy_writes, writes_by_object};
use namespace_baseline_cluster_tests::{
    deny_all_policy_name, expected_deny_all_spec, get_policy, reconciler_username, spec_json,
    tally, wait_until,
};
use serde_json::{Value, json};

use crate::common::{
    SINGLE, assert_rbac_was_enough, create_baseline, figure, namespaces, settle, spec, start,
    wait_ready, wait_wall,
};

/// The stated window after the rival stopped in which the reconciler must neither write nor
/// reconcile (measured by the API server between two marker requests).
const QUIET_WINDOW: Duration = Duration::from_secs(5);
use crate::s9_common::{reconciler_requests, writes_among};

const EDITS: usize = 20;
const RIVAL: &str = "e2e-rival";
/// Edits made one at a time, each after the previous one was repaired.
const PACED: usize = 5;

fn edit(round: usize) -> Value {
    match round % 3 {
        0 => json!({"spec": {"egress": [{}]}}),
        1 => json!({"spec": {"podSelector": {"matchLabels": {"app": format!("rival-{round}")}}}}),
        _ => json!({"spec": {"policyTypes": ["Ingress"]}}),
    }
}

/// How long until the managed deny-all has the desired spec again (10 s at most).
async fn wait_desired_spec(
    admin: &Client,
    namespace: &str,
    name: &str,
    what: &str,
) -> anyhow::Result<Duration> {
    let (_, took) = wait_until(what, Duration::from_secs(10), || async {
        Ok(get_policy(admin, namespace, name)
            .await?
            .filter(|p| spec_json(p) == expected_deny_all_spec()))
    })
    .await?;
    Ok(took)
}

#[tokio::test]
async fn s9_conflict_a_rival_field_manager_loses_without_a_hot_loop() {
    let (cluster, names, mark) = start("s9-conflict").await;
    let (walled, _) = namespaces(&names, 3, 0).await;
    let baseline = names.name.clone();
    let reconciler = cluster
        .start_reconciler("s9-conflict", SINGLE)
        .await
        .unwrap();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 3, Duration::from_secs(10)).await;
    settle(&cluster).await;

    let namespace = walled[0].clone();
    let deny = deny_all_policy_name(&baseline);
    let api: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &namespace);

    // Without force, a server-side apply of the reconciler's fields conflicts.
    let unforced = api
        .patch(
            &deny,
            &PatchParams::apply(RIVAL),
            &Patch::Apply(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": deny, "namespace": namespace},
                "spec": {"podSelector": {"matchLabels": {"app": "rival"}}},
            })),
        )
        .await;
    let conflict = matches!(&unforced, Err(kube::Error::Api(status)) if status.code == 409);
    assert!(
        conflict,
        "an unforced apply of the reconciler's fields was not refused: {unforced:?}"
    );

    let edits_mark = cluster.audit.mark();
    let started = Instant::now();
    let merge = PatchParams {
        field_manager: Some(RIVAL.to_owned()),
        ..PatchParams::default()
    };
    let mut landed = 0;
    for round in 0..EDITS {
        let result = if round < EDITS / 2 {
            api.patch(&deny, &merge, &Patch::Merge(edit(round))).await
        } else {
            // Forced server-side apply: the rival takes the fields over.
            let mut config = edit(round);
            config["apiVersion"] = json!("networking.k8s.io/v1");
            config["kind"] = json!("NetworkPolicy");
            config["metadata"] = json!({"name": deny, "namespace": namespace});
            api.patch(
                &deny,
                &PatchParams::apply(RIVAL).force(),
                &Patch::Apply(config),
            )
            .await
        };
        landed += usize::from(result.is_ok());
    }
    let edits_took = started.elapsed();
    let admin = cluster.admin.clone();
    let won_in = wait_desired_spec(
        &admin,
        &namespace,
        &deny,
        "the reconciler to win the spec back",
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(40)));

    // The tight loop's writes, once its repair has settled.
    settle(&cluster).await;
    let tight_events = reconciler_requests(&cluster, edits_mark);

    // Paced: each edit waits for the repair before the next one: exactly one write each.
    let paced_mark = cluster.audit.mark();
    let mut paced_repairs = Vec::new();
    for round in 0..PACED {
        api.patch(&deny, &merge, &Patch::Merge(edit(round)))
            .await
            .unwrap();
        let repaired =
            wait_desired_spec(&admin, &namespace, &deny, "the paced edit to be repaired")
                .await
                .unwrap();
        paced_repairs.push(repaired);
        // The repair's own follow-ups (status) land before the next edit.
        settle(&cluster).await;
    }

    // Settled, then a stated quiet window: no write and no reconcile at all.
    settle(&cluster).await;
    let successes = r#"namespace_baseline_reconciles_total{result="success"}"#;
    let quiet_reconciles = reconciler.metric(successes).unwrap();
    let quiet = cluster
        .observe_window("s9-conflict-quiet", QUIET_WINDOW)
        .await
        .unwrap();
    let quiet_reconciles = reconciler.metric(successes).unwrap() - quiet_reconciles;
    let final_policy = get_policy(&admin, &namespace, &deny)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(spec_json(&final_policy), expected_deny_all_spec());

    if let Some(events) = tight_events {
        let writes = policy_writes(&events);
        let per_object = writes_by_object(&writes);
        let on_target = per_object
            .get(&(namespace.clone(), deny.clone()))
            .copied()
            .unwrap_or(0);
        let elsewhere: usize = per_object.values().sum::<usize>() - on_target;
        let conflicts = writes.iter().filter(|e| e.code() == Some(409)).count();
        figure(
            "s9-conflict",
            format!(
                "{landed} rival edits ({} merge patches, {} forced applies) in {edits_took:.2?}; desired spec back {won_in:.2?} after the last one; reconciler writes to the policy: {on_target} (elsewhere {elsewhere}, 409s {conflicts}); in the {:.2?} quiet window: {quiet_reconciles} reconciles, requests {:?}",
                EDITS / 2,
                EDITS - EDITS / 2,
                quiet.length,
                quiet.requests_of(&reconciler_username()).map(|e| tally(&e))
            ),
        );
        assert!(on_target >= 1, "the reconciler never wrote the policy back");
        assert!(
            on_target <= landed + 2,
            "{on_target} writes for {landed} rival edits: a hot loop"
        );
        assert_eq!(
            elsewhere, 0,
            "writes to policies nobody touched: {per_object:?}"
        );
    }
    if let Some(events) = reconciler_requests(&cluster, paced_mark) {
        let writes = policy_writes(&events);
        let per_object = writes_by_object(&writes);
        figure(
            "s9-conflict",
            format!(
                "{PACED} paced rival edits, each repaired in {:?}: {} reconciler writes ({per_object:?})",
                paced_repairs,
                writes.len()
            ),
        );
        assert_eq!(
            writes.len(),
            PACED,
            "one write per paced edit: {per_object:?}"
        );
    }
    if let Some(events) = quiet.requests_of(&reconciler_username()) {
        let writes = writes_among(&events);
        assert!(
            writes.is_empty(),
            "writes once the rival stopped: {writes:#?}"
        );
    }
    assert_eq!(
        quiet_reconciles, 0.0,
        "reconciles kept running once the rival stopped"
    );
    assert_rbac_was_enough(&cluster, mark);
}
