//! Scenario 9 (faults): the reconciler talks to the API server through a proxy injecting 30 %
//! faults (429 with Retry-After, 500, 503, dropped connections, stalls, watch streams cut
//! mid-way, 410 Gone on watch resumption) for 60 s while the cluster keeps changing:
//! namespaces join a baseline, managed policies are deleted, edited and relabelled, a
//! baseline's spec flips. Once the faults stop every wall converges, every status is right,
//! and the audit log shows the reconciler never wrote anything but its own walls.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::faults::{self, faults_by_kind};
use namespace_baseline_cluster_tests::{
    deny_all_policy_name, dns_policy_name, reconciler_username, tally,
};
use serde_json::json;

use crate::common::{
    assert_rbac_was_enough, create_baseline, figure, namespaces, patch_spec, spec, start,
};
use crate::s9_common::{
    Rng, Wall, assert_writes_only_walls, check_exact, reconciler_requests, wait_exact,
    wait_status_right, writes_among,
};

const FAULT_PROBABILITY: f64 = 0.3;
const FAULT_WINDOW: Duration = Duration::from_secs(60);
/// Time between two changes made to the cluster during the window.
const CHANGE_EVERY: Duration = Duration::from_millis(1500);
/// How long the walls may take to converge once the faults stop.
const CONVERGE_BOUND: Duration = Duration::from_secs(90);
/// The stated window after convergence in which the reconciler must write nothing.
const QUIET_WINDOW: Duration = Duration::from_secs(3);
/// Settled means silent for longer than the proxy's longest stall (3 s): a write stalled when
/// the faults stopped, handed to the baseline's writer, still lands (and the reconcile its
/// answer asks for writes the status after it) up to that long after the stop, unseen by the
/// audit log meanwhile.
const SETTLED_AFTER_FAULTS: Duration = Duration::from_secs(4);

/// The two walls of the scenario: baseline A's (with the DNS door) in `walled`, baseline
/// B's (without) in `in_b`.
fn two_walls<'a>(
    baseline_a: &'a str,
    walled: &'a [String],
    baseline_b: &'a str,
    in_b: &'a [String],
) -> [Wall<'a>; 2] {
    [
        Wall {
            baseline: baseline_a,
            namespaces: walled,
            dns: true,
        },
        Wall {
            baseline: baseline_b,
            namespaces: in_b,
            dns: false,
        },
    ]
}

#[tokio::test]
async fn s9_faults_thirty_percent_api_faults_lose_nothing() {
    let (cluster, names, mark) = start("s9-faults").await;
    // Baseline A covers the `w*` namespaces (and those labelled later); baseline B, without
    // DNS door, the first half of them too: two walls in one namespace.
    let (mut walled, _) = namespaces(&names, 10, 0).await;
    let tier_key = "e2e.hedronite.io/tier";
    let tier_value = format!("{}-b", names.label_value);
    let in_b: Vec<String> = walled[..5].to_vec();
    for namespace in &in_b {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.admin.clone());
        api.patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {tier_key: tier_value}}})),
        )
        .await
        .unwrap();
    }
    let baseline_a = names.name.clone();
    let baseline_b = format!("{}-b", names.name);

    // An unmanaged policy in a walled namespace: never to be written.
    let bystanders_api: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled[0]);
    let bystander: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "e2e-bystander", "labels": {"app": "bystander"}},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {}}]}]},
    }))
    .unwrap();
    let bystander_version = bystanders_api
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap()
        .resource_version();
    let bystanders = BTreeSet::from([(walled[0].clone(), "e2e-bystander".to_owned())]);

    let proxy = cluster.fault_proxy(0x5EED_0009).unwrap();
    let reconciler = cluster
        .start_reconciler_at(
            "s9-faults",
            &["--leader-election=false"],
            Some(&faults::endpoint(&proxy)),
        )
        .await
        .unwrap();
    create_baseline(&cluster, &baseline_a, spec(&names)).await;
    create_baseline(
        &cluster,
        &baseline_b,
        json!({"namespaceLabel": format!("{tier_key}={tier_value}"), "allowDNS": false}),
    )
    .await;
    let mut scope: BTreeSet<String> = walled.iter().cloned().collect();
    wait_exact(
        &cluster,
        &two_walls(&baseline_a, &walled, &baseline_b, &in_b),
        &scope,
        &bystanders,
        Duration::from_secs(20),
    )
    .await
    .unwrap();

    // The fault window.
    let window_mark = cluster.audit.mark();
    let before = proxy.report();
    proxy.set_probability(FAULT_PROBABILITY);
    let window_started = Instant::now();
    let mut rng = Rng::new(0x5EED_0009);
    let mut changes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut dns_on = true;
    let tamper = PatchParams {
        field_manager: Some("e2e-tamper".to_owned()),
        ..PatchParams::default()
    };
    let mut late = 0;
    while window_started.elapsed() < FAULT_WINDOW {
        let namespace = walled[rng.below(walled.len())].clone();
        let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &namespace);
        let door = if dns_on && rng.below(2) == 0 {
            dns_policy_name(&baseline_a)
        } else {
            deny_all_policy_name(&baseline_a)
        };
        // Changes race the reconciler (and its faults): a target may be missing right now,
        // which is fine; the change is counted only when the API server took it.
        let kind = match rng.below(6) {
            0 => {
                let done = policies
                    .delete(&door, &DeleteParams::default())
                    .await
                    .is_ok();
                done.then_some("delete a managed policy")
            }
            1 => {
                let patch = if door.ends_with("deny") {
                    json!({"spec": {"egress": [{}]}})
                } else {
                    json!({"spec": {"egress": [{"to": [{"namespaceSelector": {}}]}]}})
                };
                let done = policies
                    .patch(&door, &tamper, &Patch::Merge(&patch))
                    .await
                    .is_ok();
                done.then_some("edit a managed policy's spec")
            }
            2 => {
                let patch =
                    json!({"metadata": {"labels": {"hedronite.io/baseline": "someone-else"}}});
                let done = policies
                    .patch(&door, &tamper, &Patch::Merge(&patch))
                    .await
                    .is_ok();
                done.then_some("relabel a managed policy")
            }
            3 => {
                let name = names.namespace(&format!("late{late:02}"));
                late += 1;
                names
                    .create_namespaces(std::slice::from_ref(&name), &names.walled_labels())
                    .await
                    .unwrap();
                walled.push(name.clone());
                scope.insert(name);
                Some("label a new namespace into the baseline")
            }
            4 => {
                dns_on = !dns_on;
                patch_spec(&cluster, &baseline_a, json!({"allowDNS": dns_on})).await;
                Some("flip the baseline's allowDNS")
            }
            _ => {
                // Baseline B's deny-all, in a namespace both baselines wall.
                let namespace = in_b[rng.below(in_b.len())].clone();
                let policies: Api<NetworkPolicy> =
                    Api::namespaced(cluster.admin.clone(), &namespace);
                let done = policies
                    .patch(
                        &deny_all_policy_name(&baseline_b),
                        &tamper,
                        &Patch::Merge(
                            json!({"spec": {"podSelector": {"matchLabels": {"app": "one"}}}}),
                        ),
                    )
                    .await
                    .is_ok();
                done.then_some("edit the other baseline's deny-all")
            }
        };
        if let Some(kind) = kind {
            *changes.entry(kind).or_default() += 1;
        }
        tokio::time::sleep(CHANGE_EVERY).await;
    }
    if !dns_on {
        patch_spec(&cluster, &baseline_a, json!({"allowDNS": true})).await;
        *changes.entry("flip the baseline's allowDNS").or_default() += 1;
    }
    proxy.set_probability(0.0);
    let stopped = Instant::now();
    let injected = proxy.report().since(&before);
    reconciler.check_alive().unwrap();

    // Convergence, once the faults stop.
    let walls = two_walls(&baseline_a, &walled, &baseline_b, &in_b);
    let converged = wait_exact(&cluster, &walls, &scope, &bystanders, CONVERGE_BOUND)
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(60)));
    let status_a = wait_status_right(&cluster, &baseline_a, count(walled.len()), CONVERGE_BOUND)
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", reconciler.log_tail(60)));
    let status_b = wait_status_right(&cluster, &baseline_b, count(in_b.len()), CONVERGE_BOUND)
        .await
        .unwrap();
    let status_after = stopped.elapsed();

    // Quiet: converged and settled, the reconciler writes nothing more in a stated window.
    cluster
        .settle(
            &reconciler_username(),
            SETTLED_AFTER_FAULTS,
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let quiet = cluster
        .observe_window("s9-faults-quiet", QUIET_WINDOW)
        .await
        .unwrap();
    check_exact(&cluster, &walls, &scope, &bystanders)
        .await
        .unwrap();

    let figure_text = format!(
        "{FAULT_PROBABILITY} fault probability for {FAULT_WINDOW:?}: {injected}; by kind: {}; changes made meanwhile: {changes:?}",
        faults_by_kind(&injected)
    );
    figure("s9-faults", figure_text);
    figure(
        "s9-faults",
        format!(
            "after the faults stopped: {} walls ({} policies) exact in {converged:.2?}; statuses right in {:.2?} / {:.2?} ({status_after:.2?} in all)",
            walled.len() + in_b.len(),
            2 * walled.len() + in_b.len(),
            status_a,
            status_b
        ),
    );
    assert!(injected.total_faults() > 0, "no fault was injected");
    for fault in faults::Fault::ALL {
        assert!(
            injected.count(fault) > 0,
            "no {fault} fault was injected: {injected}"
        );
    }

    // The audit log: every NetworkPolicy write by the reconciler targeted one of its walls;
    // the unmanaged policy was never written.
    let all_baselines = [baseline_a.as_str(), baseline_b.as_str()];
    if let Some(writes) = assert_writes_only_walls(&cluster, window_mark, &all_baselines, &scope) {
        let requests = reconciler_requests(&cluster, window_mark).unwrap_or_default();
        let failed = requests
            .iter()
            .filter(|e| e.code().is_some_and(|c| c >= 400))
            .count();
        figure(
            "s9-faults",
            format!(
                "audit: {writes} NetworkPolicy writes by the reconciler since the faults began, all to its own walls; {} requests reached the API server ({failed} refused there)",
                requests.len()
            ),
        );
    }
    if let Some(events) = quiet.requests_of(&reconciler_username()) {
        let writes = writes_among(&events);
        assert!(
            writes.is_empty(),
            "writes in the {:?} window after convergence (a hot loop?): {writes:#?}; all: {:?}",
            quiet.length,
            tally(&events)
        );
    }
    let bystander_now = bystanders_api.get("e2e-bystander").await.unwrap();
    assert_eq!(
        bystander_now.resource_version(),
        bystander_version,
        "the unmanaged policy was written"
    );
    reconciler.check_alive().unwrap();
    drop(proxy);
    assert_rbac_was_enough(&cluster, mark);
}

fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}
