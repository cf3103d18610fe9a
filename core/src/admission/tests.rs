//! Every admission case through `review`, as rstest tables.

use rstest::rstest;
use serde_json::{Value, json};

use super::*;
use crate::identity::{BASELINE_LABEL, MANAGED_BY_LABEL};

const RECONCILER: &str = "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler";

struct Cluster(Result<Vec<LiveBaseline>, String>);

impl BaselineSource for Cluster {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.0.clone()
    }
}

/// A source that must not be asked (settings-only mode).
struct Unreachable;

impl BaselineSource for Unreachable {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        panic!("the live baselines were read although contextAware is off")
    }
}

fn live(pairs: &[(&str, &str, &str)]) -> Cluster {
    Cluster(Ok(pairs
        .iter()
        .map(|(name, label, mode)| {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"namespaceLabel": label, "mode": mode},
            }))
            .unwrap()
        })
        .collect()))
}

fn managed_labels() -> Value {
    json!({MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "guarded", "team": "a"})
}

fn deny_all_spec() -> Value {
    json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
}

fn policy(labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "nsb-guarded-default-deny", "namespace": "team-a", "labels": labels},
        "spec": spec,
    })
}

fn managed() -> Value {
    policy(managed_labels(), deny_all_spec())
}

fn request(kind: &str, operation: &str, user: &str, new: Value, old: Value) -> AdmissionRequest {
    let group = if kind == "NetworkPolicy" {
        "networking.k8s.io"
    } else {
        ""
    };
    serde_json::from_value(json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
    }))
    .unwrap()
}

fn settings_gate() -> Gate {
    PolicySettings {
        guard_selectors: vec!["baseline=guarded".into(), "tier".into()],
        exempt_users: vec!["breakglass-admin".into()],
        ..PolicySettings::default()
    }
    .gate()
}

fn context_gate() -> Gate {
    PolicySettings {
        context_aware: true,
        ..PolicySettings::default()
    }
    .gate()
}

fn assert_verdict(verdict: Verdict, allowed: bool, message: &str) {
    match verdict {
        Verdict::Allow => assert!(allowed, "allowed, expected a denial containing {message:?}"),
        Verdict::Deny(text) => {
            assert!(!allowed, "denied ({text}), expected allowed");
            assert!(text.contains(message), "{text:?} lacks {message:?}");
        }
    }
}

#[rstest]
#[case::delete_managed("DELETE", Value::Null, managed(), false, "cannot be deleted")]
#[case::delete_names_baseline(
    "DELETE",
    Value::Null,
    managed(),
    false,
    "NamespaceBaseline \"guarded\""
)]
#[case::delete_says_how_to_leave("DELETE", Value::Null, managed(), false, "deletionPolicy: Delete")]
#[case::delete_without_old_object("DELETE", Value::Null, Value::Null, true, "")]
#[case::delete_unmanaged("DELETE", Value::Null, policy(json!({"app": "web"}), deny_all_spec()), true, "")]
#[case::delete_helm_managed("DELETE", Value::Null, policy(json!({MANAGED_BY_LABEL: "Helm"}), deny_all_spec()), true, "")]
#[case::spec_narrowed("UPDATE", policy(managed_labels(), json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"]})), managed(), false, "its spec cannot be changed")]
#[case::egress_opened("UPDATE", policy(managed_labels(), json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": [{}]})), managed(), false, "its spec cannot be changed")]
#[case::policy_types_cut("UPDATE", policy(managed_labels(), json!({"podSelector": {}, "policyTypes": ["Ingress"]})), managed(), false, "its spec cannot be changed")]
#[case::empty_lists_are_no_change("UPDATE", policy(managed_labels(), json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []})), managed(), true, "")]
#[case::managed_by_removed("UPDATE", policy(json!({BASELINE_LABEL: "guarded"}), deny_all_spec()), managed(), false, "label app.kubernetes.io/managed-by cannot be removed")]
#[case::baseline_label_changed("UPDATE", policy(json!({MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "other"}), deny_all_spec()), managed(), false, "label hedronite.io/baseline cannot be removed or changed")]
#[case::other_label_removed("UPDATE", policy(json!({MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "guarded"}), deny_all_spec()), managed(), true, "")]
#[case::annotation_added("UPDATE", {
    let mut p = managed();
    p["metadata"]["annotations"] = json!({"note": "reviewed"});
    p
}, managed(), true, "")]
#[case::unmanaged_edited("UPDATE", policy(json!({"app": "web"}), json!({"podSelector": {}})), policy(json!({"app": "web"}), deny_all_spec()), true, "")]
#[case::unmanaged_claims_management("UPDATE", policy(json!({MANAGED_BY_LABEL: "namespace-baseline"}), deny_all_spec()), policy(json!({"app": "web"}), deny_all_spec()), false, "only the Namespace Baseline reconciler may set")]
#[case::create_spoofed(
    "CREATE",
    managed(),
    Value::Null,
    false,
    "only the Namespace Baseline reconciler may set"
)]
#[case::create_spoofed_baseline_label_only("CREATE", policy(json!({BASELINE_LABEL: "guarded"}), deny_all_spec()), Value::Null, false, "only the Namespace Baseline reconciler may set")]
#[case::create_unmanaged("CREATE", policy(json!({"app": "web"}), json!({"podSelector": {}})), Value::Null, true, "")]
#[case::create_without_object("CREATE", Value::Null, Value::Null, true, "")]
#[case::connect("CONNECT", managed(), managed(), true, "")]
fn network_policy_requests(
    #[case] operation: &str,
    #[case] new: Value,
    #[case] old: Value,
    #[case] allowed: bool,
    #[case] message: &str,
) {
    let request = request("NetworkPolicy", operation, "bob", new, old);
    assert_verdict(
        review(&request, &settings_gate(), &Unreachable),
        allowed,
        message,
    );
}

#[rstest]
#[case::guard_label_removed(json!({"baseline": "guarded"}), json!({}), false, "guarded by the guard label baseline=guarded")]
#[case::guard_value_changed(json!({"baseline": "guarded"}), json!({"baseline": "open"}), false, "Keep the label baseline=guarded")]
#[case::labels_set_to_null(json!({"baseline": "guarded"}), Value::Null, false, "baseline=guarded")]
#[case::key_only_guard_value_changed(json!({"tier": "a"}), json!({"tier": "b"}), true, "")]
#[case::key_only_guard_removed(json!({"tier": "a"}), json!({}), false, "the guard label tier")]
#[case::guard_label_added(json!({}), json!({"baseline": "guarded"}), true, "")]
#[case::other_label_changed(json!({"baseline": "guarded", "team": "a"}), json!({"baseline": "guarded", "team": "b"}), true, "")]
#[case::unguarded_namespace(json!({"team": "a"}), json!({}), true, "")]
fn namespace_updates_with_settings(
    #[case] old_labels: Value,
    #[case] new_labels: Value,
    #[case] allowed: bool,
    #[case] message: &str,
) {
    let ns = |labels: Value| json!({"metadata": {"name": "team-a", "labels": labels}});
    let request = request("Namespace", "UPDATE", "bob", ns(new_labels), ns(old_labels));
    assert_verdict(
        review(&request, &settings_gate(), &Unreachable),
        allowed,
        message,
    );
}

#[rstest]
#[case::leaves_live_baseline(live(&[("guarded", "baseline=guarded", "Enforce")]), false, "NamespaceBaseline \"guarded\" (namespaceLabel baseline=guarded)")]
#[case::audit_baseline_does_not_guard(live(&[("guarded", "baseline=guarded", "Audit")]), true, "")]
#[case::invalid_label_guards_nothing(live(&[("broken", "baseline!=open", "Enforce")]), true, "")]
#[case::other_baseline(live(&[("other", "zone=a", "Enforce")]), true, "")]
#[case::host_failure(Cluster(Err("timeout".into())), false, "could not be read to check them (timeout)")]
fn namespace_updates_against_live_baselines(
    #[case] cluster: Cluster,
    #[case] allowed: bool,
    #[case] message: &str,
) {
    let ns = |labels: Value| json!({"metadata": {"name": "team-a", "labels": labels}});
    let request = request(
        "Namespace",
        "UPDATE",
        "bob",
        ns(json!({"baseline": "open"})),
        ns(json!({"baseline": "guarded"})),
    );
    assert_verdict(
        review(&request, &context_gate(), &cluster),
        allowed,
        message,
    );
}

#[rstest]
#[case::owner_alive(live(&[("guarded", "baseline=guarded", "Enforce")]), false, "cannot be deleted")]
#[case::orphan(live(&[("other", "baseline=other", "Enforce")]), true, "")]
#[case::host_failure(Cluster(Err("timeout".into())), false, "could not be read: timeout")]
fn deleting_managed_policies_with_live_baselines(
    #[case] cluster: Cluster,
    #[case] allowed: bool,
    #[case] message: &str,
) {
    let request = request("NetworkPolicy", "DELETE", "bob", Value::Null, managed());
    assert_verdict(
        review(&request, &context_gate(), &cluster),
        allowed,
        message,
    );
}

#[rstest]
#[case::reconciler(RECONCILER, &[], true)]
#[case::namespace_controller("system:serviceaccount:kube-system:namespace-controller", &[], true)]
#[case::garbage_collector("system:serviceaccount:kube-system:generic-garbage-collector", &[], true)]
#[case::controller_manager("system:kube-controller-manager", &[], true)]
#[case::break_glass_user("breakglass-admin", &[], true)]
#[case::cluster_admin_is_not_exempt("kubernetes-admin", &["system:masters"], false)]
#[case::other_account_in_reconciler_namespace("system:serviceaccount:namespace-baseline:default", &[], false)]
fn exemptions_apply_to_every_rule(
    #[case] username: &str,
    #[case] groups: &[&str],
    #[case] allowed: bool,
) {
    let mut request = request("NetworkPolicy", "DELETE", username, Value::Null, managed());
    request.user_info.groups = groups.iter().map(|g| g.to_string()).collect();
    assert_eq!(
        review(&request, &settings_gate(), &Unreachable).is_allowed(),
        allowed
    );
}

#[rstest]
#[case::pod("Pod", "")]
#[case::configmap("ConfigMap", "")]
#[case::network_policy_of_another_group("NetworkPolicy", "crd.projectcalico.org")]
fn other_kinds_are_not_guarded(#[case] kind: &str, #[case] group: &str) {
    let mut request = request(kind, "DELETE", "bob", Value::Null, managed());
    request.kind.group = group.into();
    assert_eq!(
        review(&request, &settings_gate(), &Unreachable),
        Verdict::Allow
    );
}

#[test]
fn dry_run_gets_the_same_verdict() {
    let mut request = request("NetworkPolicy", "DELETE", "bob", Value::Null, managed());
    let real = review(&request, &settings_gate(), &Unreachable);
    request.dry_run = true;
    assert_eq!(review(&request, &settings_gate(), &Unreachable), real);
    assert!(!real.is_allowed());
}
