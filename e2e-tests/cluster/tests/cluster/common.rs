//! Steps shared by the scenarios.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::{
    AuditEvent, AuditMark, Cluster, Scenario, check_policy, condition, deny_all_policy_name,
    dns_policy_name, expected_deny_all_spec, expected_dns_spec, forbidden, reconciler_username,
    wait_until,
};
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};
use serde_json::{Value, json};

/// How long a wall may take to appear or come back (the bound).
pub const REPAIR_BOUND: Duration = Duration::from_secs(2);

/// Connects, removes leftover baselines, and names the scenario.
pub async fn start(scenario: &str) -> (Cluster, Scenario, AuditMark) {
    let cluster = Cluster::connect()
        .await
        .expect("connecting to the cluster under test");
    let names = cluster.scenario(scenario);
    let mark = cluster.audit.mark();
    eprintln!("== scenario {scenario}: names start with {}", names.name);
    (cluster, names, mark)
}

/// A key figure of the scenario, collected by the script.
pub fn figure(scenario: &str, text: impl AsRef<str>) {
    eprintln!("FIGURE {scenario}: {}", text.as_ref());
}

/// The reconciler's RBAC was enough: none of its requests since `mark` got a 403, but for
/// `plan`'s GET of the Pod rule's ClusterAdmissionPolicy, which its role does not grant on
/// purpose (only `plan` reads it, and notes when it cannot; docs/reference.md).
pub fn assert_rbac_was_enough(cluster: &Cluster, mark: AuditMark) {
    if let Some(mut events) = cluster.audit.requests_since(mark, &reconciler_username()) {
        events.retain(|event| {
            !(event.verb == "get" && event.resource() == "clusteradmissionpolicies")
        });
        let refused = forbidden(&events);
        assert!(
            refused.is_empty(),
            "the reconciler was refused (RBAC too narrow): {refused:#?}"
        );
    }
}

/// Creates a NamespaceBaseline from a spec (as JSON).
pub async fn create_baseline(cluster: &Cluster, name: &str, spec: Value) -> NamespaceBaseline {
    let object: NamespaceBaseline = serde_json::from_value(json!({
        "apiVersion": "hedronite.io/v1alpha1",
        "kind": "NamespaceBaseline",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a baseline");
    cluster
        .baselines()
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|error| panic!("creating baseline {name}: {error}"))
}

/// Merge-patches a baseline's spec; returns the new generation.
pub async fn patch_spec(cluster: &Cluster, name: &str, spec: Value) -> i64 {
    cluster
        .baselines()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap_or_else(|error| panic!("patching baseline {name}: {error}"))
        .metadata
        .generation
        .expect("a generation")
}

/// Waits for a status of the current generation with `Ready=True`, `namespaces` matched and
/// nothing left drifted (Enforce). Returns it and how long it took.
pub async fn wait_ready(
    cluster: &Cluster,
    name: &str,
    namespaces: u32,
    timeout: Duration,
) -> (NamespaceBaselineStatus, Duration) {
    let api = cluster.baselines();
    let result = wait_until(
        &format!("baseline {name} Ready with {namespaces} namespaces"),
        timeout,
        || {
            let api = api.clone();
            async move {
                let baseline = api.get(name).await?;
                let generation = baseline.metadata.generation;
                Ok(baseline.status.filter(|status| {
                    status.observed_generation == generation
                        && status.namespaces == namespaces
                        && condition(status, "Ready").is_some_and(|(s, _, _)| s == "True")
                }))
            }
        },
    )
    .await;
    match result {
        Ok(found) => found,
        Err(error) => {
            let now = api.get(name).await.map(|b| b.status);
            panic!("{error:#}; status now: {now:?}")
        }
    }
}

/// The policies a baseline should have: deny-all everywhere, the DNS door when `dns`.
pub fn expected_wall(
    baseline: &str,
    namespaces: &[String],
    dns: bool,
) -> BTreeSet<(String, String)> {
    let mut wall = BTreeSet::new();
    for namespace in namespaces {
        wall.insert((namespace.clone(), deny_all_policy_name(baseline)));
        if dns {
            wall.insert((namespace.clone(), dns_policy_name(baseline)));
        }
    }
    wall
}

/// Checks that a baseline's managed policies are exactly the wall in `namespaces` (set of
/// objects, every spec in full, labels), now.
pub async fn check_wall(
    cluster: &Cluster,
    baseline: &str,
    namespaces: &[String],
    dns: bool,
) -> Result<()> {
    let api: Api<k8s_openapi::api::networking::v1::NetworkPolicy> = Api::all(cluster.admin.clone());
    let selector = format!(
        "{},{}={}",
        namespace_baseline_core::identity::managed_selector(),
        namespace_baseline_core::identity::BASELINE_LABEL,
        namespace_baseline_core::identity::baseline_label_value(baseline)
    );
    let policies = api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items;
    let found: BTreeSet<(String, String)> = policies
        .iter()
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    let expected = expected_wall(baseline, namespaces, dns);
    ensure!(
        found == expected,
        "wall of {baseline}: {} policies found, {} expected; missing {:?}, unexpected {:?}",
        found.len(),
        expected.len(),
        expected.difference(&found).take(5).collect::<Vec<_>>(),
        found.difference(&expected).take(5).collect::<Vec<_>>()
    );
    for policy in &policies {
        let spec = if policy.name_any() == deny_all_policy_name(baseline) {
            expected_deny_all_spec()
        } else {
            expected_dns_spec()
        };
        check_policy(policy, baseline, &spec)?;
    }
    Ok(())
}

/// Waits until [`check_wall`] holds; returns how long it took.
pub async fn wait_wall(
    cluster: &Cluster,
    baseline: &str,
    namespaces: &[String],
    dns: bool,
    timeout: Duration,
) -> Duration {
    wait_until(&format!("the wall of {baseline}"), timeout, || async {
        check_wall(cluster, baseline, namespaces, dns)
            .await
            .map(Some)
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"))
    .1
}

/// The standard set of scenario namespaces: `count` walled, `others` not.
pub async fn namespaces(
    names: &Scenario,
    count: usize,
    others: usize,
) -> (Vec<String>, Vec<String>) {
    let walled: Vec<String> = (0..count)
        .map(|i| names.namespace(&format!("w{i:02}")))
        .collect();
    let outside: Vec<String> = (0..others)
        .map(|i| names.namespace(&format!("o{i:02}")))
        .collect();
    names
        .create_namespaces(&walled, &names.walled_labels())
        .await
        .expect("creating walled namespaces");
    let (labelled, bare) = outside.split_at(others / 2);
    names
        .create_namespaces(labelled, &names.other_labels())
        .await
        .expect("creating other namespaces");
    names
        .create_namespaces(bare, &Default::default())
        .await
        .expect("creating unlabelled namespaces");
    (walled, outside)
}

/// The spec every test baseline starts from.
pub fn spec(names: &Scenario) -> Value {
    json!({"namespaceLabel": names.selector()})
}

/// Reconciler flags for a single replica.
pub const SINGLE: &[&str] = &["--leader-election=false"];

/// The reconciler's writes among `events` (Lease renewals excepted), described.
pub fn reconciler_writes(events: &[AuditEvent], resource: Option<&str>) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is_write() && e.resource() != "leases")
        .filter(|e| resource.is_none_or(|resource| e.resource() == resource))
        .map(AuditEvent::describe)
        .collect()
}

/// Proves that the reconciler writes nothing (`resource`: no such object) during a stated
/// window, observed between two marker requests so its length is the API server's. Returns
/// the window's measured length.
pub async fn assert_no_writes_for(
    cluster: &Cluster,
    label: &str,
    window: Duration,
    resource: Option<&str>,
) -> Duration {
    let observed = cluster
        .observe_window(label, window)
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    if let Some(events) = observed.requests_of(&reconciler_username()) {
        let writes = reconciler_writes(&events, resource);
        assert!(
            writes.is_empty(),
            "{label}: the reconciler wrote during the {:?} window: {writes:#?}",
            observed.length
        );
    }
    observed.length
}

/// No request of the reconciler for [`SETTLED`]: what it was doing has landed.
pub async fn settle(cluster: &Cluster) -> Duration {
    cluster
        .settle(&reconciler_username(), SETTLED, Duration::from_secs(20))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"))
}

/// How long the reconciler must be silent to count as settled.
pub const SETTLED: Duration = Duration::from_millis(500);
