//! Every admission case through `review`, as rstest tables.

use rstest::rstest;
use serde_json::{Value, json};

use super::*;
use crate::vocabulary::identity::{BASELINE_LABEL, MANAGED_BY_LABEL};

const RECONCILER: &str = "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler";

struct Cluster(Result<Vec<LiveBaseline>, String>);

impl BaselineSource for Cluster {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.0.clone()
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        panic!("namespace {name} was read, but no request here opens a hole")
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        panic!("NetworkPolicy {namespace}/{name} was read, but no request here creates a pod")
    }
}

/// A source that must not be asked (settings-only mode).
struct Unreachable;

impl BaselineSource for Unreachable {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        panic!("the live baselines were read although contextAware is off")
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        panic!("namespace {name} was read although nothing needed it")
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        panic!("NetworkPolicy {namespace}/{name} was read although nothing needed it")
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
        Verdict::Warn(warnings) => panic!("allowed with warnings {warnings:?}, expected no holes"),
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

// --- Holes: NetworkPolicies that open the wall of a walled namespace ---

/// A cluster for the holes check: one namespace (or a failure to read it) and the live
/// baselines, counting reads.
struct Walls {
    namespace: Result<Value, String>,
    baselines: Result<Vec<LiveBaseline>, String>,
    namespace_reads: std::cell::Cell<usize>,
    baseline_reads: std::cell::Cell<usize>,
}

impl Walls {
    fn namespace(labels: Value) -> Self {
        Self {
            namespace: Ok(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "team-a", "labels": labels},
            })),
            baselines: Ok(Vec::new()),
            namespace_reads: std::cell::Cell::new(0),
            baseline_reads: std::cell::Cell::new(0),
        }
    }

    fn walled() -> Self {
        Self::namespace(json!({"kubernetes.io/metadata.name": "team-a", "baseline": "guarded"}))
    }

    fn unwalled() -> Self {
        Self::namespace(json!({"kubernetes.io/metadata.name": "team-a", "team": "a"}))
    }

    fn with_baselines(mut self, cluster: Cluster) -> Self {
        self.baselines = cluster.0;
        self
    }

    fn unreadable(error: &str) -> Self {
        Self {
            namespace: Err(error.to_owned()),
            ..Self::walled()
        }
    }

    fn reads(&self) -> (usize, usize) {
        (self.namespace_reads.get(), self.baseline_reads.get())
    }
}

impl BaselineSource for Walls {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.baseline_reads.set(self.baseline_reads.get() + 1);
        self.baselines.clone()
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.namespace_reads.set(self.namespace_reads.get() + 1);
        assert_eq!(name, "team-a", "the request's namespace is the one read");
        self.namespace
            .clone()
            .map(|value| serde_json::from_value(value).unwrap())
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        panic!("NetworkPolicy {namespace}/{name} was read by the holes check")
    }
}

fn holes_gate(setting: &str) -> Gate {
    PolicySettings {
        guard_selectors: vec!["baseline=guarded".into()],
        exempt_users: vec!["breakglass-admin".into()],
        holes: setting.into(),
        ..PolicySettings::default()
    }
    .gate()
}

fn team_policy(spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}},
        "spec": spec,
    })
}

fn holes_request(operation: &str, user: &str, new: Value, old: Value) -> AdmissionRequest {
    let mut request = request("NetworkPolicy", operation, user, new, old);
    request.namespace = "team-a".into();
    request
}

/// What a holes review should come to.
#[derive(Debug)]
enum Expect {
    Silent,
    Warned(&'static str),
    Denied(&'static str),
}

fn assert_holes(verdict: &Verdict, expect: &Expect) {
    match (expect, verdict) {
        (Expect::Silent, Verdict::Allow) => {}
        (Expect::Warned(wanted), Verdict::Warn(warnings)) => assert!(
            warnings.iter().any(|warning| warning.contains(wanted)),
            "{warnings:?} lacks {wanted:?}"
        ),
        (Expect::Denied(wanted), Verdict::Deny(message)) => {
            assert!(message.contains(wanted), "{message:?} lacks {wanted:?}")
        }
        (expect, verdict) => panic!("expected {expect:?}, got {verdict:?}"),
    }
}

const WORLD_IN: &str = "NetworkPolicy web ingress rule 0 opens every port to the whole internet";
const WORLD_OUT: &str = "NetworkPolicy web egress rule 0 opens every port to the whole internet";
const CLUSTER_IN: &str =
    "NetworkPolicy web ingress rule 0 opens every port to every pod of the cluster";

fn ingress_from_anywhere() -> Value {
    json!({"podSelector": {}, "ingress": [{}]})
}

fn egress_to(cidr: Value) -> Value {
    json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": cidr}]}]})
}

#[rstest]
#[case::ingress_from_anywhere_warn("Warn", ingress_from_anywhere(), Expect::Warned(WORLD_IN), 1)]
#[case::empty_from_list_warn("Warn", json!({"podSelector": {}, "ingress": [{"from": []}]}), Expect::Warned(WORLD_IN), 1)]
#[case::internet_v4_warn("Warn", egress_to(json!({"cidr": "0.0.0.0/0"})), Expect::Warned(WORLD_OUT), 1)]
#[case::internet_v4_except_warn("Warn", egress_to(json!({"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]})), Expect::Warned(WORLD_OUT), 1)]
#[case::internet_v6_warn("Warn", egress_to(json!({"cidr": "::/0"})), Expect::Warned(WORLD_OUT), 1)]
#[case::every_namespace_warn("Warn", json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}), Expect::Warned(CLUSTER_IN), 1)]
#[case::narrow_pods_warn("Warn", json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "lb"}}}]}]}), Expect::Silent, 0)]
#[case::some_namespaces_warn("Warn", json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}), Expect::Silent, 0)]
#[case::subnet_warn("Warn", egress_to(json!({"cidr": "10.1.0.0/16"})), Expect::Silent, 0)]
#[case::ingress_from_anywhere_deny("Deny", ingress_from_anywhere(), Expect::Denied(WORLD_IN), 1)]
#[case::empty_from_list_deny("Deny", json!({"podSelector": {}, "ingress": [{"from": []}]}), Expect::Denied(WORLD_IN), 1)]
#[case::internet_v4_deny("Deny", egress_to(json!({"cidr": "0.0.0.0/0"})), Expect::Denied(WORLD_OUT), 1)]
#[case::internet_v4_except_deny("Deny", egress_to(json!({"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]})), Expect::Denied(WORLD_OUT), 1)]
#[case::internet_v6_deny("Deny", egress_to(json!({"cidr": "::/0"})), Expect::Denied(WORLD_OUT), 1)]
#[case::every_namespace_deny("Deny", json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}), Expect::Denied(CLUSTER_IN), 1)]
#[case::narrow_pods_deny("Deny", json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "lb"}}}]}]}), Expect::Silent, 0)]
#[case::ingress_from_anywhere_ignore("Ignore", ingress_from_anywhere(), Expect::Silent, 0)]
#[case::every_namespace_ignore("Ignore", json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}), Expect::Silent, 0)]
#[case::egress_not_governed("Deny", json!({"podSelector": {}, "policyTypes": ["Ingress"], "egress": [{}]}), Expect::Silent, 0)]
#[case::unreadable_spec("Deny", json!({"podSelector": {}, "ingress": "everything"}), Expect::Silent, 0)]
fn holes_in_a_walled_namespace_by_width_and_setting(
    #[case] setting: &str,
    #[case] spec: Value,
    #[case] expect: Expect,
    #[case] namespace_reads: usize,
) {
    let cluster = Walls::walled();
    let request = holes_request("CREATE", "bob", team_policy(spec), Value::Null);
    let verdict = review(&request, &holes_gate(setting), &cluster);
    assert_holes(&verdict, &expect);
    assert_eq!(cluster.reads(), (namespace_reads, 0));
}

#[test]
fn a_warning_and_a_denial_read_like_this() {
    let request = holes_request(
        "CREATE",
        "bob",
        team_policy(ingress_from_anywhere()),
        Value::Null,
    );
    assert_eq!(
        review(&request, &holes_gate("Warn"), &Walls::walled()),
        Verdict::Warn(vec![
            "NetworkPolicy web ingress rule 0 opens every port to the whole internet in namespace \"team-a\", walled by the guard label baseline=guarded: name its peers instead (pods, labelled namespaces, or a narrower ipBlock)".to_owned()
        ])
    );
    assert_eq!(
        review(&request, &holes_gate("Deny"), &Walls::walled()),
        Verdict::Deny(
            "namespace \"team-a\" is walled by the guard label baseline=guarded (policy settings), and this opens its wall: NetworkPolicy web ingress rule 0 opens every port to the whole internet. To allow only what is needed, name the peers the rule is for rather than any address: pods (podSelector), namespaces by label (namespaceSelector.matchLabels), or an ipBlock narrower than 0.0.0.0/0 and ::/0. (The policy setting holes: Deny refuses World and Cluster holes in walled namespaces; an exempt identity may still write them)".to_owned()
        )
    );
}

#[rstest]
#[case::warn("Warn")]
#[case::deny("Deny")]
fn holes_elsewhere_are_not_the_policys_concern(#[case] setting: &str) {
    let cluster = Walls::unwalled();
    let request = holes_request(
        "CREATE",
        "bob",
        team_policy(ingress_from_anywhere()),
        Value::Null,
    );
    assert_eq!(
        review(&request, &holes_gate(setting), &cluster),
        Verdict::Allow
    );
    assert_eq!(cluster.reads(), (1, 0), "settings mode reads no baseline");
}

#[rstest]
#[case::reconciler(RECONCILER)]
#[case::break_glass("breakglass-admin")]
fn exempt_identities_open_holes_unasked(#[case] user: &str) {
    let request = holes_request(
        "CREATE",
        user,
        team_policy(ingress_from_anywhere()),
        Value::Null,
    );
    assert_eq!(
        review(&request, &holes_gate("Deny"), &Unreachable),
        Verdict::Allow
    );
}

#[test]
fn managed_policies_are_not_holes() {
    // A drifted managed policy (the reconciler will repair it) whose annotations change: the
    // wall's rules allow it, and the wall's own policies are never holes.
    let drifted = policy(
        managed_labels(),
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": [{}]}),
    );
    let mut annotated = drifted.clone();
    annotated["metadata"]["annotations"] = json!({"note": "investigating"});
    let request = holes_request("UPDATE", "bob", annotated, drifted);
    assert_eq!(
        review(&request, &holes_gate("Deny"), &Unreachable),
        Verdict::Allow
    );
}

#[rstest]
#[case::live_baseline_walls(live(&[("guarded", "zone=internal", "Enforce")]), json!({"zone": "internal"}), Expect::Warned("walled by NamespaceBaseline \"guarded\""), (1, 1))]
#[case::audit_baseline_does_not(live(&[("guarded", "zone=internal", "Audit")]), json!({"zone": "internal"}), Expect::Silent, (1, 1))]
#[case::settings_guard_first(Cluster(Err("not asked".into())), json!({"baseline": "guarded"}), Expect::Warned("walled by the guard label baseline=guarded"), (1, 0))]
#[case::no_baseline_matches(live(&[("guarded", "zone=internal", "Enforce")]), json!({"zone": "external"}), Expect::Silent, (1, 1))]
#[case::baselines_unreadable(Cluster(Err("timeout".into())), json!({"zone": "internal"}), Expect::Warned("could not check whether namespace \"team-a\" is walled (timeout); if it is, NetworkPolicy web ingress rule 0 opens every port to the whole internet"), (1, 1))]
fn context_aware_walls_come_from_the_live_baselines(
    #[case] baselines: Cluster,
    #[case] labels: Value,
    #[case] expect: Expect,
    #[case] reads: (usize, usize),
) {
    let gate = PolicySettings {
        guard_selectors: vec!["baseline=guarded".into()],
        context_aware: true,
        ..PolicySettings::default()
    }
    .gate();
    let cluster = Walls::namespace(labels).with_baselines(baselines);
    let request = holes_request(
        "CREATE",
        "bob",
        team_policy(ingress_from_anywhere()),
        Value::Null,
    );
    assert_holes(&review(&request, &gate, &cluster), &expect);
    assert_eq!(cluster.reads(), reads);
}

#[rstest]
#[case::warn("Warn", Verdict::Warn(vec![
    "could not check whether namespace \"team-a\" is walled (namespaces \"team-a\" is forbidden); if it is, NetworkPolicy web ingress rule 0 opens every port to the whole internet (and 1 more World or Cluster hole). The policy-server's ServiceAccount needs get on namespaces".to_owned()
]))]
#[case::deny("Deny", Verdict::Deny(
    "could not check whether namespace \"team-a\" is walled (namespaces \"team-a\" is forbidden), and holes: Deny refuses a World or Cluster hole it cannot check: NetworkPolicy web ingress rule 0 opens every port to the whole internet (and 1 more World or Cluster hole). The policy-server's ServiceAccount needs get on namespaces (deploy/policy-server-rbac.yaml); retry once it can read them, or ask the platform team".to_owned()
))]
fn an_unreadable_namespace_warns_under_warn_and_refuses_under_deny(
    #[case] setting: &str,
    #[case] expected: Verdict,
) {
    let cluster = Walls::unreadable("namespaces \"team-a\" is forbidden");
    let request = holes_request(
        "CREATE",
        "bob",
        team_policy(
            json!({"podSelector": {}, "ingress": [{}, {"from": [{"namespaceSelector": {}}]}]}),
        ),
        Value::Null,
    );
    assert_eq!(review(&request, &holes_gate(setting), &cluster), expected);
    assert_eq!(cluster.reads(), (1, 0));
}

#[test]
fn unreadable_baselines_under_deny_name_the_list_permission() {
    let cluster = Walls::unwalled().with_baselines(Cluster(Err(
        "namespacebaselines.hedronite.io is forbidden".to_owned(),
    )));
    let request = holes_request(
        "CREATE",
        "bob",
        team_policy(ingress_from_anywhere()),
        Value::Null,
    );
    let gate = PolicySettings {
        context_aware: true,
        holes: "Deny".into(),
        ..PolicySettings::default()
    }
    .gate();
    assert_verdict(
        review(&request, &gate, &cluster),
        false,
        "needs list and watch on namespacebaselines.hedronite.io",
    );
}

#[rstest]
#[case::label_added_to_a_policy_with_a_hole(
    json!({"podSelector": {}, "ingress": [{}]}),
    json!({"podSelector": {}, "ingress": [{}]}),
    Expect::Silent, 0
)]
#[case::the_same_hole_moved(
    json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}, {}]}),
    json!({"podSelector": {}, "ingress": [{}, {"from": [{"podSelector": {}}]}]}),
    Expect::Silent, 0
)]
#[case::another_rule_narrowed(
    json!({"podSelector": {}, "ingress": [{}, {"from": [{"podSelector": {}}]}]}),
    json!({"podSelector": {}, "ingress": [{}, {"from": [{"podSelector": {"matchLabels": {"app": "lb"}}}]}]}),
    Expect::Silent, 0
)]
#[case::a_hole_made_wider(
    json!({"podSelector": {}, "ingress": [{"ports": [{"port": 443}]}]}),
    json!({"podSelector": {}, "ingress": [{}]}),
    Expect::Denied(WORLD_IN), 1
)]
#[case::a_narrow_rule_opened(
    json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
    json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}),
    Expect::Denied(CLUSTER_IN), 1
)]
#[case::egress_governed_now(
    json!({"podSelector": {}, "policyTypes": ["Ingress"], "egress": [{}]}),
    json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": [{}]}),
    Expect::Denied(WORLD_OUT), 1
)]
fn an_update_is_judged_on_the_holes_it_opens(
    #[case] old_spec: Value,
    #[case] new_spec: Value,
    #[case] expect: Expect,
    #[case] namespace_reads: usize,
) {
    let cluster = Walls::walled();
    let mut new = team_policy(new_spec);
    new["metadata"]["labels"]["reviewed"] = json!("yes");
    let request = holes_request("UPDATE", "bob", new, team_policy(old_spec));
    assert_holes(&review(&request, &holes_gate("Deny"), &cluster), &expect);
    assert_eq!(cluster.reads(), (namespace_reads, 0));
}

#[test]
fn an_existing_hole_is_not_reported_again_with_a_new_one() {
    let old = team_policy(json!({"podSelector": {}, "ingress": [{}]}));
    let new = team_policy(json!({
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{}],
        "egress": [{"to": [{"ipBlock": {"cidr": "::/0"}}]}],
    }));
    let request = holes_request("UPDATE", "bob", new, old);
    match review(&request, &holes_gate("Deny"), &Walls::walled()) {
        Verdict::Deny(message) => {
            assert!(message.contains(WORLD_OUT), "{message}");
            assert!(!message.contains("ingress rule 0"), "{message}");
            assert!(message.contains("and this opens its wall:"), "{message}");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn many_holes_are_counted_past_the_fifth() {
    let rules: Vec<Value> = (0..7).map(|_| json!({})).collect();
    let spec = json!({"podSelector": {}, "ingress": rules});
    let request = holes_request("CREATE", "bob", team_policy(spec), Value::Null);
    let Verdict::Warn(warnings) = review(&request, &holes_gate("Warn"), &Walls::walled()) else {
        panic!("expected warnings");
    };
    assert_eq!(warnings.len(), MAX_HOLES_LISTED + 1, "{warnings:?}");
    assert!(warnings[4].starts_with("NetworkPolicy web ingress rule 4 opens"));
    assert_eq!(
        warnings[5],
        "NetworkPolicy web opens 2 more World or Cluster holes in namespace \"team-a\""
    );
    let Verdict::Deny(message) = review(&request, &holes_gate("Deny"), &Walls::walled()) else {
        panic!("expected a denial");
    };
    assert!(
        message.contains("this opens its wall in 7 places: NetworkPolicy web ingress rule 0 opens"),
        "{message}"
    );
    assert!(
        message.contains("ingress rule 4 opens every port to the whole internet; and 2 more World or Cluster holes."),
        "{message}"
    );
    assert!(!message.contains("rule 5"), "{message}");
}

#[test]
fn a_denial_names_what_to_do_for_each_width() {
    let spec = json!({"podSelector": {}, "ingress": [{}, {"from": [{"namespaceSelector": {}}]}]});
    let request = holes_request("CREATE", "bob", team_policy(spec), Value::Null);
    let Verdict::Deny(message) = review(&request, &holes_gate("Deny"), &Walls::walled()) else {
        panic!("expected a denial");
    };
    assert!(message.contains("rather than any address"), "{message}");
    assert!(
        message.contains("rather than every namespace (namespaceSelector: {})"),
        "{message}"
    );
}

#[test]
fn the_wall_rules_come_before_the_holes() {
    // Claiming management is refused as such, whatever holes the policy would open.
    let spoofed = policy(
        managed_labels(),
        json!({"podSelector": {}, "ingress": [{}]}),
    );
    let request = holes_request("CREATE", "bob", spoofed, Value::Null);
    assert_verdict(
        review(&request, &holes_gate("Deny"), &Unreachable),
        false,
        "only the Namespace Baseline reconciler may set",
    );
}

#[test]
fn dry_run_opens_holes_the_same_way() {
    let mut request = holes_request(
        "CREATE",
        "bob",
        team_policy(ingress_from_anywhere()),
        Value::Null,
    );
    let real = review(&request, &holes_gate("Warn"), &Walls::walled());
    request.dry_run = true;
    assert_eq!(
        review(&request, &holes_gate("Warn"), &Walls::walled()),
        real
    );
    assert!(!real.warnings().is_empty());
}

/// A managed policy with `metadata` fields beyond its name, namespace and labels.
fn managed_with(metadata: Value) -> Value {
    let mut policy = managed();
    for (field, value) in metadata.as_object().unwrap() {
        policy["metadata"][field] = value.clone();
    }
    policy
}

const OWNER: fn() -> Value = || json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "6f1c8f8e-0000-4000-8000-000000000001"}]);

#[rstest]
#[case::owner_reference_added(managed_with(json!({"ownerReferences": OWNER()})), managed(), false, "its metadata.ownerReferences cannot be changed (an owner reference would let the garbage collector delete the wall)")]
#[case::owner_reference_removed(managed(), managed_with(json!({"ownerReferences": OWNER()})), false, "its metadata.ownerReferences cannot be changed")]
#[case::finalizer_added(managed_with(json!({"finalizers": ["example.com/hold"]})), managed(), false, "its metadata.finalizers cannot be changed (a finalizer would hold up")]
#[case::finalizer_removed_while_live(managed(), managed_with(json!({"finalizers": ["example.com/hold"]})), false, "its metadata.finalizers cannot be changed")]
#[case::finalizer_removed_in_deletion(
    managed_with(json!({"deletionTimestamp": "2026-12-04T10:00:00Z"})),
    managed_with(json!({"finalizers": ["foregroundDeletion"], "deletionTimestamp": "2026-12-04T10:00:00Z"})),
    true, ""
)]
#[case::finalizer_swapped_in_deletion(
    managed_with(json!({"finalizers": ["example.com/other"], "deletionTimestamp": "2026-12-04T10:00:00Z"})),
    managed_with(json!({"finalizers": ["foregroundDeletion"], "deletionTimestamp": "2026-12-04T10:00:00Z"})),
    false, "its metadata.finalizers cannot be changed"
)]
#[case::generate_name_set(managed_with(json!({"generateName": "nsb-"})), managed(), false, "its metadata.generateName cannot be changed.")]
#[case::a_field_newer_than_our_types(managed_with(json!({"futureField": {"a": 1}})), managed(), false, "its metadata.futureField cannot be changed")]
#[case::managed_label_added(
    policy(json!({MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "guarded", "team": "a", "x": "y"}), deny_all_spec()),
    policy(json!({MANAGED_BY_LABEL: "namespace-baseline", "team": "a"}), deny_all_spec()),
    false, "its label hedronite.io/baseline cannot be added"
)]
#[case::server_set_fields_differ(
    managed_with(json!({"resourceVersion": "2", "generation": 1, "managedFields": [{"manager": "kubectl"}], "uid": "a", "creationTimestamp": "2026-12-04T10:00:00Z"})),
    managed_with(json!({"resourceVersion": "1", "managedFields": [{"manager": "namespace-baseline"}], "uid": "a"})),
    true, ""
)]
#[case::annotations_and_labels(
    managed_with(json!({"annotations": {"note": "x"}, "labels": {MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "guarded", "team": "b"}})),
    managed(),
    true, ""
)]
#[case::empty_lists_are_nothing(managed_with(json!({"finalizers": [], "ownerReferences": null})), managed(), true, "")]
fn a_managed_policys_metadata_is_guarded_field_by_field(
    #[case] new: Value,
    #[case] old: Value,
    #[case] allowed: bool,
    #[case] message: &str,
) {
    let request = request("NetworkPolicy", "UPDATE", "bob", new, old);
    let verdict = review(&request, &settings_gate(), &Unreachable);
    assert_verdict(verdict.clone(), allowed, message);
    if !allowed {
        assert_verdict(
            verdict,
            false,
            "Only annotations and labels other than app.kubernetes.io/managed-by and hedronite.io/baseline may be edited",
        );
    }
}

/// The namespace `team-a`, terminating or not, as the host answers it.
struct TeamA {
    terminating: bool,
    reads: std::cell::Cell<usize>,
}

impl TeamA {
    fn new(terminating: bool) -> Self {
        Self {
            terminating,
            reads: std::cell::Cell::new(0),
        }
    }
}

impl BaselineSource for TeamA {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        panic!("the live baselines were read although contextAware is off")
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.reads.set(self.reads.get() + 1);
        assert_eq!(name, "team-a", "the request's namespace is the one read");
        let mut namespace =
            json!({"metadata": {"name": "team-a", "labels": {"baseline": "guarded"}}});
        if self.terminating {
            namespace["metadata"]["deletionTimestamp"] = json!("2026-12-04T10:00:00Z");
        }
        Ok(serde_json::from_value(namespace).unwrap())
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        panic!("NetworkPolicy {namespace}/{name} was read, but no request here creates a pod")
    }
}

const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";
const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
const CONTROLLER_MANAGER: &str = "system:kube-controller-manager";

#[rstest]
#[case::namespace_controller_in_a_terminating_namespace(
    NAMESPACE_CONTROLLER,
    "DELETE",
    true,
    true,
    1
)]
#[case::namespace_controller_in_a_live_namespace(NAMESPACE_CONTROLLER, "DELETE", false, false, 1)]
#[case::namespace_controller_updating(NAMESPACE_CONTROLLER, "UPDATE", true, false, 0)]
#[case::namespace_controller_creating(NAMESPACE_CONTROLLER, "CREATE", true, false, 0)]
#[case::garbage_collector_deleting(GARBAGE_COLLECTOR, "DELETE", false, true, 0)]
#[case::garbage_collector_updating(GARBAGE_COLLECTOR, "UPDATE", false, false, 0)]
#[case::garbage_collector_creating(GARBAGE_COLLECTOR, "CREATE", false, false, 0)]
#[case::controller_manager_deleting(CONTROLLER_MANAGER, "DELETE", false, true, 0)]
#[case::controller_manager_updating(CONTROLLER_MANAGER, "UPDATE", false, false, 0)]
fn the_control_plane_is_exempt_only_for_the_deletes_it_needs(
    #[case] user: &str,
    #[case] operation: &str,
    #[case] terminating: bool,
    #[case] allowed: bool,
    #[case] namespace_reads: usize,
) {
    let owned = managed_with(json!({"ownerReferences": OWNER()}));
    let (new, old) = match operation {
        "DELETE" => (Value::Null, managed()),
        "UPDATE" => (owned, managed()),
        _ => (managed(), Value::Null),
    };
    let mut request = request("NetworkPolicy", operation, user, new, old);
    request.namespace = "team-a".into();
    let cluster = TeamA::new(terminating);
    assert_eq!(
        review(&request, &settings_gate(), &cluster).is_allowed(),
        allowed
    );
    assert_eq!(cluster.reads.get(), namespace_reads);
}

#[test]
fn the_namespace_controller_deletes_unmanaged_policies_without_a_read() {
    let mut request = request(
        "NetworkPolicy",
        "DELETE",
        NAMESPACE_CONTROLLER,
        Value::Null,
        policy(json!({"app": "web"}), deny_all_spec()),
    );
    request.namespace = "team-a".into();
    let cluster = TeamA::new(false);
    assert_eq!(review(&request, &settings_gate(), &cluster), Verdict::Allow);
    assert_eq!(cluster.reads.get(), 0);
}

#[rstest]
#[case::reconciler(RECONCILER, true)]
#[case::break_glass("breakglass-admin", true)]
#[case::garbage_collector(GARBAGE_COLLECTOR, false)]
#[case::namespace_controller(NAMESPACE_CONTROLLER, false)]
#[case::a_tenant("bob", false)]
fn only_the_reconciler_and_break_glass_create_a_look_alike_wall(
    #[case] user: &str,
    #[case] allowed: bool,
) {
    let request = request("NetworkPolicy", "CREATE", user, managed(), Value::Null);
    assert_eq!(
        review(&request, &settings_gate(), &Unreachable).is_allowed(),
        allowed
    );
}

mod pods;
