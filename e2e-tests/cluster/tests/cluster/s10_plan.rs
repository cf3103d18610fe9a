//! Scenario 10: `plan --cluster`, run as the reconciler's ServiceAccount, reads only (GET and
//! LIST in the audit log) and predicts exactly the NetworkPolicy writes `run` then makes:
//! the same set of (namespace, name, create|update|delete), nothing more, nothing less,
//! checked in the audit log and against uids and resourceVersions. Planned again, nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::{
    AuditEvent, Cluster, ENV_RECONCILER_BIN, Scenario, deny_all_policy_name, dns_policy_name,
    reconciler_username, tally,
};
use namespace_baseline_core::identity::{BASELINE_LABEL, managed_selector};
use namespace_baseline_core::spec::NamespaceBaselineSpec;
use namespace_baseline_core::wall::desired_wall;
use serde_json::{Value, json};

use crate::common::{
    SINGLE, assert_rbac_was_enough, check_wall, create_baseline, figure, settle, spec, start,
    wait_ready,
};

/// One predicted or observed write: (namespace, policy, create|update|delete).
type Write = (String, String, String);

/// Runs `plan --cluster --output json` as the reconciler's ServiceAccount.
async fn plan_as_reconciler(cluster: &Cluster) -> (Output, Value) {
    let kubeconfig = cluster.reconciler_kubeconfig().await.unwrap();
    let binary = std::env::var_os(ENV_RECONCILER_BIN)
        .unwrap_or_else(|| panic!("{ENV_RECONCILER_BIN} is not set"));
    let output = tokio::task::spawn_blocking(move || {
        Command::new(binary)
            .args(["plan", "--cluster", "--output", "json"])
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
    })
    .await
    .unwrap()
    .expect("running plan");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("plan printed no JSON ({error}); stderr: {stderr}"));
    (output, json)
}

/// The writes a plan predicts, for the scenario's baselines only.
fn predicted(plan: &Value, baselines: &[&str]) -> BTreeSet<Write> {
    items(plan, baselines, "changes")
}

fn items(plan: &Value, baselines: &[&str], list: &str) -> BTreeSet<Write> {
    plan["baselines"]
        .as_array()
        .expect("baselines")
        .iter()
        .filter(|b| baselines.contains(&b["name"].as_str().unwrap_or_default()))
        .flat_map(|b| b[list].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["namespace"].as_str().unwrap_or_default().to_owned(),
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["action"].as_str().unwrap_or("orphaned").to_owned(),
            )
        })
        .collect()
}

/// Managed policies in the scenario's namespaces: (namespace, name) → (uid, resourceVersion).
async fn snapshot(
    cluster: &Cluster,
    names: &Scenario,
) -> BTreeMap<(String, String), (String, String)> {
    let api: Api<NetworkPolicy> = Api::all(cluster.admin.clone());
    api.list(&ListParams::default().labels(&managed_selector()))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.namespace()
                .is_some_and(|ns| ns.starts_with(&format!("{}-", names.name)))
        })
        .map(|p| {
            (
                (p.namespace().unwrap_or_default(), p.name_any()),
                (
                    p.uid().unwrap_or_default(),
                    p.resource_version().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// A wall object of `baseline` in `namespace` as JSON, for the harness to apply as admin.
fn wall_object(
    baseline: &str,
    namespace: &str,
    spec: &NamespaceBaselineSpec,
    index: usize,
) -> Value {
    serde_json::to_value(&desired_wall(baseline, namespace, spec)[index]).unwrap()
}

#[tokio::test]
async fn s10_plan_predicts_exactly_the_writes_of_run() {
    let (cluster, names, mark) = start("s10").await;
    let seed = names.name.clone();
    let strict = format!("{}-strict", names.name);
    let audit = format!("{}-audit", names.name);
    let strict_label = (
        "e2e.hedronite.io/s10-strict".to_owned(),
        names.label_value.clone(),
    );
    let audit_label = (
        "e2e.hedronite.io/s10-audit".to_owned(),
        names.label_value.clone(),
    );
    let ns = |suffix: &str| names.namespace(suffix);

    // Namespaces: the seed baseline's (some walled already, some drifted), one it no longer
    // selects, the strict baseline's, and the audit baseline's.
    let walled = [ns("new"), ns("ok"), ns("wide"), ns("relabel")];
    names
        .create_namespaces(&walled, &names.walled_labels())
        .await
        .unwrap();
    names
        .create_namespaces(&[ns("gone"), ns("strict-gone")], &BTreeMap::new())
        .await
        .unwrap();
    names
        .create_namespaces(&[ns("strict")], &BTreeMap::from([strict_label.clone()]))
        .await
        .unwrap();
    names
        .create_namespaces(&[ns("audit")], &BTreeMap::from([audit_label.clone()]))
        .await
        .unwrap();

    let seed_spec = NamespaceBaselineSpec::new(names.selector());
    let strict_json = json!({
        "namespaceLabel": format!("{}={}", strict_label.0, strict_label.1),
        "allowDNS": false,
        "deletionPolicy": "Delete",
    });
    let strict_spec: NamespaceBaselineSpec = serde_json::from_value(strict_json.clone()).unwrap();
    let audit_json = json!({
        "namespaceLabel": format!("{}={}", audit_label.0, audit_label.1),
        "mode": "Audit",
    });

    // The cluster as found, with drift: applied as admin, with no reconciler running.
    for namespace in [ns("ok"), ns("wide"), ns("relabel"), ns("gone")] {
        for index in 0..2 {
            let mut object = wall_object(&seed, &namespace, &seed_spec, index);
            if namespace == ns("wide") && index == 0 {
                object["spec"]["egress"] = json!([{}]); // allow all egress: a hole
            }
            if namespace == ns("relabel") && index == 1 {
                object["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove(BASELINE_LABEL);
            }
            cluster.apply(&object).await.unwrap();
        }
    }
    // The strict baseline: its wall in ns-strict with a DNS door it no longer wants, and in
    // a namespace it no longer selects.
    let with_dns = NamespaceBaselineSpec {
        allow_dns: true,
        ..strict_spec.clone()
    };
    for object in [
        wall_object(&strict, &ns("strict"), &strict_spec, 0),
        wall_object(&strict, &ns("strict"), &with_dns, 1),
        wall_object(&strict, &ns("strict-gone"), &strict_spec, 0),
    ] {
        cluster.apply(&object).await.unwrap();
    }
    let mut narrowed = wall_object(&audit, &ns("audit"), &seed_spec, 0);
    narrowed["spec"]["podSelector"] = json!({"matchLabels": {"app": "web"}});
    cluster.apply(&narrowed).await.unwrap();

    create_baseline(&cluster, &seed, spec(&names)).await;
    create_baseline(&cluster, &strict, strict_json).await;
    create_baseline(&cluster, &audit, audit_json).await;
    let ours = [seed.as_str(), strict.as_str(), audit.as_str()];
    let before = snapshot(&cluster, &names).await;

    // 1. plan, as the reconciler's ServiceAccount: it only reads.
    let plan_mark = cluster.audit.mark();
    let (output, plan) = plan_as_reconciler(&cluster).await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "changes are pending: {plan:#}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan_requests = cluster
        .audit
        .requests_since(plan_mark, &reconciler_username());
    if let Some(requests) = &plan_requests {
        let not_reads: Vec<String> = requests
            .iter()
            .filter(|e| e.verb != "get" && e.verb != "list")
            .map(AuditEvent::describe)
            .collect();
        assert!(
            not_reads.is_empty(),
            "plan did more than read: {not_reads:#?}"
        );
        assert!(
            !requests.is_empty(),
            "plan's LISTs are not in the audit log"
        );
    }
    let expected: BTreeSet<Write> = [
        (ns("new"), deny_all_policy_name(&seed), "create"),
        (ns("new"), dns_policy_name(&seed), "create"),
        (ns("wide"), deny_all_policy_name(&seed), "update"),
        (ns("relabel"), dns_policy_name(&seed), "update"),
        (ns("strict"), dns_policy_name(&strict), "delete"),
        (ns("strict-gone"), deny_all_policy_name(&strict), "delete"),
    ]
    .into_iter()
    .map(|(namespace, name, action)| (namespace, name, action.to_owned()))
    .collect();
    // No Kubewarden here (and the reconciler may not read its policies): plan says what it
    // could not check rather than claiming every guarded namespace is gated.
    assert!(
        plan["notes"]
            .as_array()
            .is_some_and(|notes| notes.iter().any(|note| note
                .as_str()
                .is_some_and(|note| note.starts_with(
                    "no ClusterAdmissionPolicy namespace-baseline-pods read from the cluster"
                )))),
        "plan's notes: {:#}",
        plan["notes"]
    );
    let prediction = predicted(&plan, &ours);
    assert_eq!(prediction, expected, "the plan: {plan:#}");
    let orphaned = items(&plan, &ours, "orphaned");
    assert_eq!(
        orphaned.len(),
        2,
        "the seed's wall in ns-gone is left: {orphaned:?}"
    );
    assert_eq!(
        items(&plan, &ours, "drift").len(),
        2,
        "audit: 2 drifted, none written"
    );

    // 2. run: the reconciler's NetworkPolicy writes, from the audit log.
    let run_mark = cluster.audit.mark();
    let mut reconciler = cluster.start_reconciler("s10", SINGLE).await.unwrap();
    let seed_namespaces: Vec<String> = walled.iter().cloned().chain([ns("gone")]).collect();
    for (baseline, namespaces, dns) in [
        (&seed, seed_namespaces.as_slice(), true),
        (&strict, &[ns("strict")][..], false),
    ] {
        crate::common::wait_wall(&cluster, baseline, namespaces, dns, Duration::from_secs(10))
            .await;
    }
    wait_ready(&cluster, &seed, 4, Duration::from_secs(10)).await;
    wait_ready(&cluster, &strict, 1, Duration::from_secs(10)).await;
    wait_ready(&cluster, &audit, 1, Duration::from_secs(10)).await;
    settle(&cluster).await;
    reconciler.stop().await.unwrap();
    check_wall(&cluster, &seed, &seed_namespaces, true)
        .await
        .unwrap();
    let after = snapshot(&cluster, &names).await;

    if let Some(requests) = cluster
        .audit
        .requests_since(run_mark, &reconciler_username())
    {
        let writes: Vec<&AuditEvent> = requests
            .iter()
            .filter(|e| e.resource() == "networkpolicies" && e.is_write())
            .collect();
        let observed: BTreeSet<Write> = writes
            .iter()
            .map(|e| {
                let object = e.object_ref.clone().unwrap_or_default();
                let key = (
                    object.namespace.unwrap_or_default(),
                    object.name.unwrap_or_default(),
                );
                let action = match e.verb.as_str() {
                    "delete" => "delete",
                    _ if before.contains_key(&key) => "update",
                    _ => "create",
                };
                (key.0, key.1, action.to_owned())
            })
            .collect();
        figure(
            "s10",
            format!(
                "plan predicted {} writes ({} orphaned, 2 audit drift) with {} read requests {:?}; run made {} NetworkPolicy write requests ({}), all requests {:?}",
                prediction.len(),
                orphaned.len(),
                plan_requests.as_ref().map_or(0, Vec::len),
                plan_requests.as_deref().map(tally).unwrap_or_default(),
                writes.len(),
                writes
                    .iter()
                    .map(|e| e.describe())
                    .collect::<Vec<_>>()
                    .join(", "),
                tally(&requests)
            ),
        );
        assert_eq!(
            observed, prediction,
            "run's writes (left) differ from plan's prediction (right)"
        );
        // The API server agrees on creation: 201 for an apply that created, 200 otherwise.
        for event in &writes {
            let object = event.object_ref.clone().unwrap_or_default();
            let key = (
                object.namespace.unwrap_or_default(),
                object.name.unwrap_or_default(),
            );
            let expected = if event.verb != "delete" && !before.contains_key(&key) {
                201
            } else {
                200
            };
            assert_eq!(event.code(), Some(expected), "{}", event.describe());
        }
    }

    // The same, from the objects: uids and resourceVersions before and after.
    let mut changed = BTreeSet::new();
    for (key, (uid, version)) in &before {
        match after.get(key) {
            None => changed.insert((key.0.clone(), key.1.clone(), "delete".to_owned())),
            Some((new_uid, _)) if new_uid != uid => panic!("{key:?} was replaced"),
            Some((_, new_version)) if new_version != version => {
                changed.insert((key.0.clone(), key.1.clone(), "update".to_owned()))
            }
            Some(_) => false,
        };
    }
    for key in after.keys().filter(|key| !before.contains_key(*key)) {
        changed.insert((key.0.clone(), key.1.clone(), "create".to_owned()));
    }
    assert_eq!(
        changed, prediction,
        "objects changed (left) vs plan (right)"
    );

    // 3. plan again: nothing to do (the audit baseline's drift is reported, not written).
    let (output, plan) = plan_as_reconciler(&cluster).await;
    assert_eq!(output.status.code(), Some(0), "converged: {plan:#}");
    assert!(predicted(&plan, &ours).is_empty());
    assert_eq!(items(&plan, &ours, "drift").len(), 2);
    assert_eq!(items(&plan, &ours, "orphaned").len(), 2);
    assert_rbac_was_enough(&cluster, mark);
}
