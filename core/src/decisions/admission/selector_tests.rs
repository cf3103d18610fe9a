//! The guard of a `namespaceSelector` baseline ("every namespace except..."), through
//! `review`, as rstest tables: a Namespace UPDATE that takes it out of a live baseline, and a
//! Namespace CREATE that a baseline would leave out by its exclusions.

use rstest::rstest;
use serde_json::{Value, json};

use super::*;

/// The baseline shipped in `deploy/examples/every-namespace.yaml`: every namespace except
/// the system ones, the product's and the policy-server's, and those carrying the opt-out
/// label.
fn every_namespace() -> Value {
    json!({
        "metadata": {"name": "every-namespace"},
        "spec": {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "kube-public", "kube-node-lease", "namespace-baseline", "kubewarden"]},
            {"key": "hedronite.io/baseline-opt-out", "operator": "DoesNotExist"},
        ]}},
    })
}

/// A baseline of teams: only the namespaces whose `tier` is `a` or `b`.
fn tiers() -> Value {
    json!({
        "metadata": {"name": "tiers"},
        "spec": {"namespaceSelector": {"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
        ]}},
    })
}

struct Live(Vec<LiveBaseline>);

impl BaselineSource for Live {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        Ok(self.0.clone())
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        Err(format!(
            "namespace {name} is not read by a Namespace request"
        ))
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        Err(format!(
            "NetworkPolicy {namespace}/{name} is not read by a Namespace request"
        ))
    }
}

struct Unreadable;

impl BaselineSource for Unreadable {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        Err("connection refused".to_owned())
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        Err(format!(
            "namespace {name} is not read by a Namespace request"
        ))
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        Err(format!(
            "NetworkPolicy {namespace}/{name} is not read by a Namespace request"
        ))
    }
}

fn live(baselines: &[Value]) -> Live {
    Live(
        baselines
            .iter()
            .map(|baseline| serde_json::from_value(baseline.clone()).unwrap())
            .collect(),
    )
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn request(operation: &str, user: &str, new: Value, old: Value) -> AdmissionRequest {
    serde_json::from_value(json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Namespace"},
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
    }))
    .unwrap()
}

fn gate(guard_selectors: &[&str]) -> Gate {
    PolicySettings {
        guard_selectors: guard_selectors
            .iter()
            .map(|text| (*text).to_owned())
            .collect(),
        context_aware: true,
        exempt_users: vec!["breakglass-admin".into()],
        ..PolicySettings::default()
    }
    .gate()
}

/// `""`: allowed; anything else: denied with a message containing it.
fn assert_verdict(verdict: &Verdict, denial: &str) {
    match (verdict, denial) {
        (Verdict::Allow, "") => {}
        (Verdict::Deny(text), wanted) if !wanted.is_empty() => {
            assert!(text.contains(wanted), "{text:?} lacks {wanted:?}");
        }
        (verdict, wanted) => panic!("{verdict:?}, expected {wanted:?}"),
    }
}

#[rstest]
#[case::opt_out_added(
    json!({"team": "a"}), json!({"team": "a", "hedronite.io/baseline-opt-out": "true"}),
    "namespace \"team-a\" is guarded by NamespaceBaseline \"every-namespace\" (namespaceSelector kubernetes.io/metadata.name notin (kube-system,kube-public,kube-node-lease,namespace-baseline,kubewarden),!hedronite.io/baseline-opt-out)"
)]
#[case::opt_out_added_names_the_term(
    json!({}), json!({"hedronite.io/baseline-opt-out": ""}),
    "It would no longer meet !hedronite.io/baseline-opt-out: undo that change"
)]
#[case::other_label_added(json!({}), json!({"team": "a"}), "")]
#[case::other_label_removed(json!({"team": "a"}), json!({}), "")]
#[case::already_opted_out_stays_out(
    json!({"hedronite.io/baseline-opt-out": "true"}), json!({"hedronite.io/baseline-opt-out": "yes"}), ""
)]
#[case::opting_back_in(json!({"hedronite.io/baseline-opt-out": "true"}), json!({}), "")]
fn an_opt_out_selector_guards_the_labels_it_reads(
    #[case] before: Value,
    #[case] after: Value,
    #[case] denial: &str,
) {
    let verdict = review(
        &request(
            "UPDATE",
            "alice",
            namespace("team-a", after),
            namespace("team-a", before),
        ),
        &gate(&[]),
        &live(&[every_namespace()]),
    );
    assert_verdict(&verdict, denial);
}

#[rstest]
#[case::tier_changed_out(json!({"tier": "a"}), json!({"tier": "c"}), "It would no longer meet tier in (a,b)")]
#[case::tier_removed(json!({"tier": "b"}), json!({}), "NamespaceBaseline \"tiers\"")]
#[case::tier_changed_within(json!({"tier": "a"}), json!({"tier": "b"}), "")]
#[case::never_covered(json!({"tier": "c"}), json!({}), "")]
fn an_in_selector_guards_its_label_values(
    #[case] before: Value,
    #[case] after: Value,
    #[case] denial: &str,
) {
    let verdict = review(
        &request(
            "UPDATE",
            "alice",
            namespace("team-a", after),
            namespace("team-a", before),
        ),
        &gate(&[]),
        &live(&[tiers()]),
    );
    assert_verdict(&verdict, denial);
}

#[rstest]
#[case::unlabelled("team-new", json!({}), "alice", "")]
#[case::with_the_name_label("team-new", json!({"kubernetes.io/metadata.name": "team-new"}), "alice", "")]
#[case::other_labels("team-new", json!({"team": "new"}), "alice", "")]
#[case::created_opted_out(
    "team-new", json!({"hedronite.io/baseline-opt-out": "true"}), "alice",
    "namespace \"team-new\" would be created outside NamespaceBaseline \"every-namespace\""
)]
#[case::created_opted_out_names_the_term(
    "team-new", json!({"hedronite.io/baseline-opt-out": "true"}), "alice",
    "it does not meet !hedronite.io/baseline-opt-out"
)]
#[case::named_like_an_excluded_one(
    "kubewarden", json!({}), "alice",
    "it does not meet kubernetes.io/metadata.name notin (kube-system,kube-public,kube-node-lease,namespace-baseline,kubewarden)"
)]
#[case::named_like_one_by_its_label_alone(
    "kubewarden", json!({"kubernetes.io/metadata.name": "kubewarden"}), "alice", "would be created outside"
)]
#[case::exempt_identity_may("team-new", json!({"hedronite.io/baseline-opt-out": "true"}), "breakglass-admin", "")]
#[case::reconciler_may("kubewarden", json!({}), "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler", "")]
#[case::the_api_server_recreating_its_own("kube-node-lease", json!({}), "system:apiserver", "")]
#[case::a_system_namespace_is_no_way_out("kube-public", json!({}), "alice", "")]
fn a_namespace_cannot_be_created_opted_out(
    #[case] name: &str,
    #[case] labels: Value,
    #[case] user: &str,
    #[case] denial: &str,
) {
    let verdict = review(
        &request("CREATE", user, namespace(name, labels), Value::Null),
        &gate(&[]),
        &live(&[tiers(), every_namespace()]),
    );
    assert_verdict(&verdict, denial);
}

#[rstest]
#[case::a_label_baseline_is_no_way_out(&["baseline=guarded"], json!({}), "")]
#[case::opt_in_selectors_cover_no_new_namespace(&[], json!({"tier": "c"}), "")]
fn only_selectors_that_cover_new_namespaces_guard_creation(
    #[case] guard_selectors: &[&str],
    #[case] labels: Value,
    #[case] denial: &str,
) {
    let verdict = review(
        &request(
            "CREATE",
            "alice",
            namespace("team-new", labels),
            Value::Null,
        ),
        &gate(guard_selectors),
        &live(&[tiers()]),
    );
    assert_verdict(&verdict, denial);
}

#[rstest]
#[case::with_labels(json!({"team": "new"}), "could not be read to check that none leaves it out of a baseline (connection refused)")]
#[case::without_labels(json!({}), "")]
fn an_unreadable_cluster_refuses_only_a_labelled_creation(
    #[case] labels: Value,
    #[case] denial: &str,
) {
    let verdict = review(
        &request(
            "CREATE",
            "alice",
            namespace("team-new", labels),
            Value::Null,
        ),
        &gate(&[]),
        &Unreadable,
    );
    assert_verdict(&verdict, denial);
}

#[rstest]
#[case::audit(json!("Audit"), "")]
#[case::enforce(json!("Enforce"), "would be created outside")]
fn an_audit_baseline_guards_nothing(#[case] mode: Value, #[case] denial: &str) {
    let mut baseline = every_namespace();
    baseline["spec"]["mode"] = mode;
    let verdict = review(
        &request(
            "CREATE",
            "alice",
            namespace("team-new", json!({"hedronite.io/baseline-opt-out": "true"})),
            Value::Null,
        ),
        &gate(&[]),
        &live(&[baseline]),
    );
    assert_verdict(&verdict, denial);
}

#[test]
fn a_baseline_setting_both_forms_guards_nothing() {
    let mut both = every_namespace();
    both["spec"]["namespaceLabel"] = json!("baseline=guarded");
    let baseline: LiveBaseline = serde_json::from_value(both).unwrap();
    assert_eq!(baseline.guard(), None);
    let selector: LiveBaseline = serde_json::from_value(every_namespace()).unwrap();
    let guard = selector.guard().unwrap();
    assert!(guard.namespace_selector);
    assert!(guard.selector.selects_new_namespaces());
}

/// No baseline covers a system namespace (`kube-system`, `kube-public`, `kube-node-lease`),
/// whatever its selector says: their labels may change, and their pods never wait.
#[rstest]
#[case::system_namespace("kube-public", "")]
#[case::any_other("team-a", "It would no longer meet tier in (a,b)")]
fn a_system_namespace_is_never_guarded(#[case] name: &str, #[case] denial: &str) {
    let verdict = review(
        &request(
            "UPDATE",
            "alice",
            namespace(name, json!({"tier": "c"})),
            namespace(name, json!({"tier": "a"})),
        ),
        &gate(&[]),
        &live(&[tiers()]),
    );
    assert_verdict(&verdict, denial);
}

/// `hedronite.io/pod-gate` keeps a namespace's pods away from the Pod rule's webhook: with
/// `podsWaitForWall`, only an exempt identity may set, change or remove it.
#[rstest]
#[case::added_at_creation("CREATE", "alice", json!({"hedronite.io/pod-gate": "exempt"}), Value::Null, "only the platform team's exempt identities")]
#[case::added("UPDATE", "alice", json!({"hedronite.io/pod-gate": "exempt"}), json!({}), "only the platform team's exempt identities")]
#[case::removed("UPDATE", "alice", json!({}), json!({"hedronite.io/pod-gate": "exempt"}), "may set, change or remove it")]
#[case::changed("UPDATE", "alice", json!({"hedronite.io/pod-gate": "x"}), json!({"hedronite.io/pod-gate": "exempt"}), "hedronite.io/pod-gate")]
#[case::kept("UPDATE", "alice", json!({"hedronite.io/pod-gate": "exempt", "team": "b"}), json!({"hedronite.io/pod-gate": "exempt"}), "")]
#[case::by_an_exempt_identity("UPDATE", "breakglass-admin", json!({"hedronite.io/pod-gate": "exempt"}), json!({}), "")]
fn only_an_exempt_identity_moves_a_namespace_out_of_the_pod_gate(
    #[case] operation: &str,
    #[case] user: &str,
    #[case] after: Value,
    #[case] before: Value,
    #[case] denial: &str,
) {
    let old = if before.is_null() {
        Value::Null
    } else {
        namespace("kube-flannel", before)
    };
    let settings = PolicySettings {
        context_aware: true,
        pods_wait_for_wall: true,
        exempt_users: vec!["breakglass-admin".into()],
        ..PolicySettings::default()
    };
    let request = request(operation, user, namespace("kube-flannel", after), old);
    assert_verdict(
        &review(&request, &settings.gate(), &live(&[tiers()])),
        denial,
    );
    // Without the pod gate, the label means nothing and is not guarded.
    assert_verdict(&review(&request, &gate(&[]), &live(&[tiers()])), "");
}
