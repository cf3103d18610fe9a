//! `plan` over the manifests of `tests/plan-fixtures/`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use serde_json::Value;

use crate::base::error::Error;

use super::input::*;
use super::render::*;
use super::report::*;
use super::*;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/plan-fixtures")
        .join(path)
}

fn options(baselines: &[&str], manifests: Option<&str>) -> PlanOptions {
    PlanOptions {
        baseline: baselines.iter().map(|path| fixture(path)).collect(),
        manifests: manifests.map(fixture),
        cluster: false,
        pod_policy: "namespace-baseline-pods".to_owned(),
        output: OutputFormat::Json,
    }
}

fn plan_of(baselines: &[&str], manifests: &str) -> PrintedPlan {
    plan(&from_manifests(&options(baselines, Some(manifests))).expect("readable fixtures"))
}

fn error_of(baselines: &[&str], manifests: Option<&str>) -> String {
    let error = from_manifests(&options(baselines, manifests)).expect_err("an input error");
    Error::from(error).report()
}

/// `(action, namespace/name, fields)` of a baseline's changes.
fn changes(items: &[ChangeItem]) -> Vec<(Action, String, Vec<String>)> {
    items
        .iter()
        .map(|c| {
            (
                c.action,
                format!("{}/{}", c.namespace, c.name),
                c.fields.clone(),
            )
        })
        .collect()
}

fn baseline<'r>(report: &'r PrintedPlan, name: &str) -> &'r BaselineReport {
    report
        .baselines
        .iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("no baseline {name} in {report:#?}"))
}

#[test]
fn a_converged_cluster_plans_nothing_and_exits_0() {
    let report = plan_of(&["converged/baseline.yaml"], "converged/cluster");
    assert_eq!(report.exit_code(), EXIT_NO_CHANGES);
    assert!(!report.pending);
    let guarded = baseline(&report, "guarded");
    assert_eq!(guarded.guarded, vec!["team-a"]);
    assert!(guarded.changes.is_empty() && guarded.orphaned.is_empty());
    assert!(report.notes.is_empty(), "{:?}", report.notes);
    let text = render_text(&report);
    assert!(text.contains("guards 1 namespace: team-a"), "{text}");
    assert!(
        text.ends_with("No changes: the wall is in place.\n"),
        "{text}"
    );
}

#[test]
fn the_baselines_may_come_from_among_the_manifests() {
    let report = plan_of(&[], "converged");
    assert_eq!(report.exit_code(), EXIT_NO_CHANGES);
    assert_eq!(report.baselines.len(), 1);
    assert!(
        report.baselines[0]
            .origin
            .ends_with("converged/baseline.yaml: document 1")
    );
}

#[test]
fn pending_changes_name_each_write_and_what_differs() {
    let report = plan_of(&["pending/baselines.yaml"], "pending/cluster");
    assert_eq!(report.exit_code(), EXIT_PENDING);
    assert_eq!(report.baselines.len(), 2, "both documents are planned");

    let guarded = baseline(&report, "guarded");
    // team-c is no longer selected, team-f is terminating: neither is guarded.
    assert_eq!(guarded.guarded, vec!["team-a", "team-b"]);
    assert_eq!(
        changes(&guarded.changes),
        vec![
            (
                Action::Create,
                "team-a/nsb-guarded-default-deny".into(),
                vec![]
            ),
            (
                Action::Create,
                "team-a/nsb-guarded-allow-dns".into(),
                vec![]
            ),
            (
                Action::Update,
                "team-b/nsb-guarded-default-deny".into(),
                vec!["spec.egress".into()]
            ),
            (
                Action::Update,
                "team-b/nsb-guarded-allow-dns".into(),
                vec!["metadata.labels[hedronite.io/baseline]".into()]
            ),
        ]
    );
    // Orphan: the wall of a namespace no longer selected stays, and is not a write.
    let orphaned: Vec<_> = guarded
        .orphaned
        .iter()
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect();
    assert_eq!(
        orphaned,
        vec![
            "team-c/nsb-guarded-allow-dns",
            "team-c/nsb-guarded-default-deny"
        ]
    );

    let strict = baseline(&report, "strict");
    assert_eq!(strict.guarded, vec!["team-d"]);
    assert_eq!(
        changes(&strict.changes),
        vec![
            (Action::Delete, "team-d/nsb-strict-allow-dns".into(), vec![]),
            (
                Action::Delete,
                "team-e/nsb-strict-default-deny".into(),
                vec![]
            ),
        ]
    );
    assert_eq!(
        strict.changes[0].reason,
        "not part of the wall: allowDNS is off"
    );
    assert!(strict.changes[1].reason.contains("deletionPolicy Delete"));
    assert!(strict.orphaned.is_empty(), "Delete leaves no orphan");

    let summary = &report.summary;
    assert_eq!(
        (
            summary.create,
            summary.update,
            summary.delete,
            summary.orphaned
        ),
        (2, 2, 2, 2)
    );
    // Other kinds are ignored with a note naming the document; so is nothing else.
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert!(
        report.notes[0].ends_with("more.yml: document 2: ConfigMap ignored: plan reads Namespaces, NetworkPolicies, NamespaceBaselines, Services, EndpointSlices and Pods for the DNS check, and the Pod rule's ClusterAdmissionPolicy"),
        "{:?}",
        report.notes
    );

    let text = render_text(&report);
    for line in [
        "  + create   team-a/nsb-guarded-default-deny: missing",
        "  ~ update   team-b/nsb-guarded-default-deny: differs from the wall: spec.egress",
        "  - delete   team-d/nsb-strict-allow-dns: not part of the wall: allowDNS is off",
        "  = orphaned team-c/nsb-guarded-allow-dns: ",
        "Plan: 2 to create, 2 to update, 2 to delete; 2 orphaned (left in place).",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
}

#[test]
fn the_plan_is_the_reconciles_decision() {
    // The same state through the reconcile's own planner: the same writes, in order.
    let state = from_manifests(&options(
        &["pending/baselines.yaml"],
        Some("pending/cluster"),
    ))
    .unwrap();
    let report = plan(&state);
    for (_, object) in &state.baselines {
        let selector = object.spec.validate().unwrap();
        let reconcile = namespace_baseline_core::plan::plan(
            &object.name_any(),
            &object.spec,
            &selector,
            &state.namespaces,
            &state.policies,
        );
        let planned: Vec<(String, String)> = reconcile
            .writes
            .iter()
            .flat_map(|(_, changes)| changes.iter().map(ChangeItem::of))
            .map(|c| (c.namespace, c.name))
            .collect();
        let reported: Vec<(String, String)> = baseline(&report, &object.name_any())
            .changes
            .iter()
            .map(|c| (c.namespace.clone(), c.name.clone()))
            .collect();
        assert_eq!(planned, reported);
        assert_eq!(
            reconcile.namespaces as usize,
            baseline(&report, &object.name_any()).guarded.len()
        );
    }
}

#[test]
fn audit_mode_reports_drift_and_writes_nothing() {
    let report = plan_of(&["audit.json"], "pending/cluster");
    assert_eq!(report.exit_code(), EXIT_NO_CHANGES);
    let guarded = baseline(&report, "guarded");
    assert!(guarded.changes.is_empty());
    assert_eq!(guarded.drift.len(), 4);
    assert_eq!(report.summary.drift, 4);
    assert!(render_text(&report).contains("(Audit: reported, not written)"));
}

#[test]
fn json_has_the_documented_shape() {
    let report = plan_of(&["pending/baselines.yaml"], "pending/cluster");
    let json = serde_json::to_value(&report).unwrap();
    let keys = |value: &Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&json),
        [
            "baselines",
            "notes",
            "pending",
            "source",
            "summary",
            "version"
        ]
    );
    assert_eq!(json["version"], 1);
    assert_eq!(json["source"], "manifests");
    assert_eq!(json["pending"], true);
    assert_eq!(
        keys(&json["summary"]),
        [
            "breaches", "create", "delete", "drift", "holes", "invalid", "orphaned", "ungated",
            "update"
        ]
    );
    let strict = &json["baselines"][1];
    assert_eq!(
        keys(strict),
        [
            "allowDNS",
            "changes",
            "deleting",
            "deletionPolicy",
            "dns",
            "drift",
            "enforced",
            "guarded",
            "holes",
            "invalid",
            "leftOut",
            "mode",
            "name",
            "namespaceLabel",
            "origin",
            "orphaned",
            "podsUngated",
            "selector"
        ]
    );
    assert_eq!(strict["name"], "strict");
    assert_eq!(strict["mode"], "Enforce");
    assert_eq!(strict["deletionPolicy"], "Delete");
    assert_eq!(strict["allowDNS"], false);
    assert_eq!(strict["invalid"], Value::Null);
    assert_eq!(
        keys(&strict["changes"][0]),
        ["action", "fields", "name", "namespace", "reason"]
    );
    assert_eq!(strict["changes"][0]["action"], "delete");
    assert_eq!(json["baselines"][0]["changes"][2]["action"], "update");
    assert_eq!(
        keys(&json["baselines"][0]["orphaned"][0]),
        ["name", "namespace", "reason"]
    );
}

#[test]
fn an_invalid_spec_is_reported_and_exits_1() {
    let report = plan_of(&["bad/invalid-spec.yaml"], "pending/cluster");
    assert_eq!(report.exit_code(), EXIT_ERROR);
    let inverted = baseline(&report, "inverted");
    let invalid = inverted.invalid.as_deref().unwrap();
    assert!(
        invalid.starts_with("invalid spec: spec.namespaceLabel: '!=' is not supported"),
        "{invalid}"
    );
    assert!(inverted.changes.is_empty() && inverted.guarded.is_empty());
}

#[test]
fn bad_yaml_names_the_file_and_document() {
    let message = error_of(&["converged/baseline.yaml"], Some("bad/broken.yaml"));
    assert!(
        message.contains("bad/broken.yaml: document 2: not valid YAML: "),
        "{message}"
    );
}

#[test]
fn an_object_of_the_wrong_shape_names_the_file_document_and_object() {
    let message = error_of(&["converged/baseline.yaml"], Some("bad/bad-object.yaml"));
    assert!(
        message.contains(
            "bad/bad-object.yaml: document 1: NetworkPolicy nsb-guarded-default-deny cannot be read: invalid type"
        ),
        "{message}"
    );
}

#[test]
fn a_baseline_without_a_selector_is_invalid_and_says_which_fields() {
    let report = plan_of(&["bad/no-label.yaml"], "converged/cluster");
    let invalid = report.baselines[0].invalid.clone().unwrap_or_default();
    assert!(
        invalid.contains(namespace_baseline_core::spec::ONE_SELECTOR_MESSAGE),
        "{invalid}"
    );
    assert_eq!(report.exit_code(), super::EXIT_ERROR);
}

#[rstest::rstest]
#[case::file_without_baseline(&["bad/namespace-only.yaml"], Some("converged/cluster"), "holds no NamespaceBaseline")]
#[case::no_baseline_anywhere(&[], Some("converged/cluster"), "no NamespaceBaseline to plan: give --baseline FILE")]
#[case::missing_file(&["nowhere.yaml"], None, "nowhere.yaml: cannot be read: No such file")]
#[case::baseline_twice(&["converged/baseline.yaml", "converged/baseline.yaml"], None, "NamespaceBaseline guarded is given twice")]
fn unusable_input_is_an_error_that_says_why(
    #[case] baselines: &[&str],
    #[case] manifests: Option<&str>,
    #[case] expected: &str,
) {
    let message = error_of(baselines, manifests);
    assert!(message.contains(expected), "{message}");
}

#[test]
fn a_document_that_is_not_an_object_is_an_error() {
    let mut documents = Vec::new();
    let error = push_document(&mut documents, "x.yaml: document 3".into(), Value::from(7))
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("x.yaml: document 3: not a Kubernetes object"),
        "{error}"
    );
}

/// The first baseline's holes as `namespace: hole`.
fn hole_lines(report: &PrintedPlan) -> Vec<String> {
    report.baselines[0]
        .holes
        .iter()
        .map(|item| format!("{}: {}", item.namespace, item.hole))
        .collect()
}

/// A hole that selects namespaces says how many of the cluster's live namespaces it reaches:
/// `NotIn` terms alone are a `Cluster` hole (every namespace created later joins it), and
/// `plan` counts what it opens today.
#[test]
fn a_hole_that_selects_namespaces_counts_the_namespaces_it_reaches() {
    let mut state = from_manifests(&options(
        &["converged/baseline.yaml"],
        Some("converged/cluster"),
    ))
    .unwrap();
    let all_but_team_b: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "from-all-but-team-b", "namespace": "team-a"},
        "spec": {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["team-b"]}
        ]}}]}]},
    }))
    .unwrap();
    state.policies.push(Arc::new(all_but_team_b));
    let live = state
        .namespaces
        .iter()
        .filter(|namespace| namespace.metadata.deletion_timestamp.is_none())
        .count();
    let report = plan(&state);
    assert_eq!(
        hole_lines(&report),
        [format!(
            "team-a: NetworkPolicy from-all-but-team-b ingress rule 0 opens every port to every pod of the cluster ({} of {live} namespaces)",
            live - 1
        )]
    );
}

/// Every policy is read, as the reconciler watches them all: the managed ones are the wall,
/// the others are holes in it where the baseline guards their namespace (allow-web,
/// `ingress: [{}]`, in team-b once team-b is guarded too).
#[test]
fn every_policy_is_read_and_the_others_are_holes() {
    let mut state = from_manifests(&options(
        &["converged/baseline.yaml"],
        Some("converged/cluster"),
    ))
    .unwrap();
    let names: Vec<String> = state.policies.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        names,
        vec![
            "nsb-guarded-allow-dns",
            "nsb-guarded-default-deny",
            "allow-web"
        ]
    );
    assert!(
        plan(&state).baselines[0].holes.is_empty(),
        "team-b is not guarded"
    );
    for namespace in &mut state.namespaces {
        if namespace.name_any() == "team-b" {
            let mut guarded = (**namespace).clone();
            guarded
                .labels_mut()
                .insert("baseline".into(), "guarded".into());
            *namespace = Arc::new(guarded);
        }
    }
    let report = plan(&state);
    assert_eq!(
        hole_lines(&report),
        ["team-b: NetworkPolicy allow-web ingress rule 0 opens every port to the whole internet"]
    );
    assert_eq!((report.summary.holes, report.summary.breaches), (1, 1));
    assert!(
        report.baselines[0]
            .changes
            .iter()
            .all(|change| change.namespace == "team-b"),
        "a hole is reported, never written: the only writes are team-b's new wall"
    );
    let text = render_text(&report);
    assert!(text.contains("  ! hole     team-b: NetworkPolicy allow-web ingress rule 0 opens every port to the whole internet (World)"), "{text}");
    // The API server's own namespace label is there, as in a cluster.
    assert_eq!(
        state.namespaces[0].labels().get(NAMESPACE_NAME_LABEL),
        Some(&"team-a".to_owned())
    );
}

/// With the DNS Service's objects among the manifests, the plan checks the door against them
/// as the reconciler does: an OpenShift-shaped DNS (pods on 5353) misses the default door.
#[test]
fn the_plan_checks_the_dns_door_against_the_manifests() {
    let dir = std::env::temp_dir().join(format!("nsb-plan-dns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("dns.yaml"),
        r#"apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec: {selector: {k8s-app: kube-dns}, ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]}
---
apiVersion: v1
kind: Pod
metadata: {name: dns-a, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec: {containers: [{name: dns, image: dns}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kube-dns-a, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.5], conditions: {ready: true}, targetRef: {kind: Pod, namespace: kube-system, name: dns-a}}]
ports: [{name: dns, protocol: UDP, port: 5353}]
"#,
    )
    .unwrap();
    let mut options = options(&["converged/baseline.yaml"], None);
    options.manifests = Some(dir.clone());
    let report = plan(&from_manifests(&options).unwrap());
    let dns = report.baselines[0].dns.as_ref().expect("checked");
    assert_eq!((dns.reachable, dns.reason), (false, "PortMismatch"));
    assert!(render_text(&report).contains("  ! dns      DNSReachable False (PortMismatch): the endpoints of kube-system/kube-dns listen on UDP 5353"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The Pod rule's ClusterAdmissionPolicy (`--pod-policy`) among the manifests: the guarded
/// namespaces its namespaceSelector leaves out are named, with the requirement they miss;
/// another ClusterAdmissionPolicy is noted and ignored; none read: nothing is claimed.
#[test]
fn the_plan_names_guarded_namespaces_the_pod_policy_leaves_out() {
    let dir = std::env::temp_dir().join(format!("nsb-plan-pod-gate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let namespaces = r#"apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {baseline: guarded}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {baseline: guarded, hedronite.io/pod-gate: exempt}}
---
apiVersion: v1
kind: Namespace
metadata: {name: open}
"#;
    let pod_policy = r#"apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: namespace-baseline-pods}
spec:
  namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
      - {key: hedronite.io/pod-gate, operator: DoesNotExist}
      - {key: baseline, operator: Exists}
---
apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: namespace-baseline}
spec: {}
"#;
    std::fs::write(dir.join("namespaces.yaml"), namespaces).unwrap();
    let mut options = options(&["converged/baseline.yaml"], None);
    options.manifests = Some(dir.clone());
    let without = plan(&from_manifests(&options).unwrap());
    assert!(without.baselines[0].pods_ungated.is_empty());
    std::fs::write(dir.join("pod-policy.yaml"), pod_policy).unwrap();
    let report = plan(&from_manifests(&options).unwrap());
    let guarded = &report.baselines[0];
    assert_eq!(guarded.guarded, vec!["team-a", "team-b"]);
    let ungated: Vec<(&str, &str)> = guarded
        .pods_ungated
        .iter()
        .map(|item| (item.namespace.as_str(), item.unmet.as_str()))
        .collect();
    assert_eq!(ungated, vec![("team-b", "!hedronite.io/pod-gate")]);
    assert_eq!(report.summary.ungated, 1);
    let text = render_text(&report);
    assert!(
        text.contains("  ! ungated team-b: the pod policy's namespaceSelector leaves it out (!hedronite.io/pod-gate)"),
        "{text}"
    );
    assert!(
        text.contains("1 guarded namespace outside the pod gate"),
        "{text}"
    );
    assert!(
        report
            .notes
            .iter()
            .any(|note| note.contains("ClusterAdmissionPolicy namespace-baseline ignored")),
        "{:?}",
        report.notes
    );
    // The same policy under another name is read only when --pod-policy names it.
    options.pod_policy = "other".to_owned();
    assert!(
        plan(&from_manifests(&options).unwrap()).baselines[0]
            .pods_ungated
            .is_empty()
    );
    std::fs::remove_dir_all(dir).unwrap();
}
