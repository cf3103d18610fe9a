//! Pods wait for their wall (`podsWaitForWall`): every verdict of a Pod CREATE through
//! `review`, with the host capabilities counted, as rstest tables.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use rstest::rstest;
use serde_json::{Value, json};

use super::super::*;
use crate::vocabulary::identity::{BASELINE_LABEL, MANAGED_BY_LABEL};

/// What the host answers: the live baselines, the namespace `team-a`, the NetworkPolicies
/// of `team-a` by name, or a failure of one kind of read. Every read is counted.
struct Host {
    baselines: Result<Vec<LiveBaseline>, String>,
    labels: Result<Value, String>,
    policies: BTreeMap<String, Value>,
    policy_error: Option<String>,
    baseline_reads: Cell<usize>,
    namespace_reads: Cell<usize>,
    policy_reads: RefCell<Vec<String>>,
}

/// A live baseline: `(name, namespaceLabel, mode, allowDNS)`.
type Baseline<'a> = (&'a str, &'a str, &'a str, bool);

impl Host {
    fn new(baselines: &[Baseline<'_>], labels: Value, walls: &[&str]) -> Self {
        Self {
            baselines: Ok(baselines
                .iter()
                .map(|(name, label, mode, dns)| {
                    serde_json::from_value(json!({
                        "metadata": {"name": name},
                        "spec": {"namespaceLabel": label, "mode": mode, "allowDNS": dns},
                    }))
                    .unwrap()
                })
                .collect()),
            labels: Ok(labels),
            policies: walls
                .iter()
                .map(|name| (name.to_string(), wall_policy(name, "guarded")))
                .collect(),
            policy_error: None,
            baseline_reads: Cell::new(0),
            namespace_reads: Cell::new(0),
            policy_reads: RefCell::new(Vec::new()),
        }
    }

    /// `(baselines, namespace, NetworkPolicies)` reads.
    fn reads(&self) -> (usize, usize, usize) {
        (
            self.baseline_reads.get(),
            self.namespace_reads.get(),
            self.policy_reads.borrow().len(),
        )
    }
}

/// A NetworkPolicy named `name` carrying the labels the reconciler stamps for `baseline`.
fn wall_policy(name: &str, baseline: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "team-a",
        "labels": {MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: baseline}}})
}

impl BaselineSource for Host {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.baseline_reads.set(self.baseline_reads.get() + 1);
        self.baselines.clone()
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.namespace_reads.set(self.namespace_reads.get() + 1);
        assert_eq!(name, "team-a", "the pod's namespace is the one read");
        self.labels.clone().map(|labels| {
            serde_json::from_value(json!({"metadata": {"name": "team-a", "labels": labels}}))
                .unwrap()
        })
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        assert_eq!(
            namespace, "team-a",
            "the wall is looked up in the pod's namespace"
        );
        self.policy_reads.borrow_mut().push(name.to_owned());
        if let Some(error) = &self.policy_error {
            return Err(error.clone());
        }
        Ok(self
            .policies
            .get(name)
            .map(|value| serde_json::from_value(value.clone()).unwrap()))
    }
}

const GUARDED: Baseline<'static> = ("guarded", "baseline=guarded", "Enforce", true);
const DENY_ALL: &str = "nsb-guarded-default-deny";
const DNS_DOOR: &str = "nsb-guarded-allow-dns";

fn guarded_labels() -> Value {
    json!({"kubernetes.io/metadata.name": "team-a", "baseline": "guarded"})
}

fn gate(pods_wait_for_wall: bool) -> Gate {
    PolicySettings {
        context_aware: true,
        pods_wait_for_wall,
        exempt_users: vec!["breakglass-admin".into()],
        ..PolicySettings::default()
    }
    .gate()
}

fn pod_request(operation: &str, user: &str, sub_resource: &str) -> AdmissionRequest {
    serde_json::from_value(json!({
        "uid": "1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "subResource": sub_resource,
        "namespace": "team-a",
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:serviceaccounts"]},
        "object": {"metadata": {"generateName": "web-7d9f8-", "namespace": "team-a"}, "spec": {}},
    }))
    .unwrap()
}

fn create_pod(host: &Host) -> Verdict {
    review(
        &pod_request(
            "CREATE",
            "system:serviceaccount:kube-system:replicaset-controller",
            "",
        ),
        &gate(true),
        host,
    )
}

/// Every verdict, with the reads that reached it: `(baselines, namespace, NetworkPolicies)`.
#[rstest]
#[case::no_enforcing_baseline_reads_only_the_list(
    &[("audit", "baseline=guarded", "Audit", true)], guarded_labels(), &[], None, (1, 0, 0)
)]
#[case::no_baseline_at_all(&[], guarded_labels(), &[], None, (1, 0, 0))]
#[case::unguarded_namespace_reads_no_wall(
    &[GUARDED], json!({"kubernetes.io/metadata.name": "team-a", "team": "a"}), &[], None, (1, 1, 0)
)]
#[case::other_value_is_unguarded(
    &[GUARDED], json!({"baseline": "open"}), &[], None, (1, 1, 0)
)]
#[case::invalid_live_label_guards_nothing(
    &[("broken", "baseline!=guarded", "Enforce", true)], guarded_labels(), &[], None, (1, 0, 0)
)]
#[case::walled(&[GUARDED], guarded_labels(), &[DENY_ALL, DNS_DOOR], None, (1, 1, 2))]
#[case::walled_without_dns(
    &[("guarded", "baseline=guarded", "Enforce", false)], guarded_labels(), &[DENY_ALL], None, (1, 1, 1)
)]
#[case::no_deny_all(
    &[GUARDED], guarded_labels(), &[], Some("NetworkPolicy \"nsb-guarded-default-deny\" (its deny-all) does not exist"), (1, 1, 1)
)]
#[case::deny_all_without_dns_door(
    &[GUARDED], guarded_labels(), &[DENY_ALL], Some("NetworkPolicy \"nsb-guarded-allow-dns\" (its DNS door (allowDNS: true)) does not exist"), (1, 1, 2)
)]
#[case::key_only_baseline(
    &[("tiered", "tier", "Enforce", false)], json!({"tier": "gold"}), &[], Some("NetworkPolicy \"nsb-tiered-default-deny\""), (1, 1, 1)
)]
#[case::every_guarding_baseline_owes_its_wall(
    &[("zeta", "zone", "Enforce", false), GUARDED], json!({"baseline": "guarded", "zone": "x"}), &[DENY_ALL, DNS_DOOR],
    Some("guarded by NamespaceBaseline \"zeta\" (namespaceLabel zone)"), (1, 1, 3)
)]
fn a_pod_waits_for_its_namespaces_wall(
    #[case] baselines: &[Baseline<'_>],
    #[case] labels: Value,
    #[case] walls: &[&str],
    #[case] refused: Option<&str>,
    #[case] reads: (usize, usize, usize),
) {
    let host = Host::new(baselines, labels, walls);
    let verdict = create_pod(&host);
    match (refused, &verdict) {
        (None, Verdict::Allow) => {}
        (Some(wanted), Verdict::Deny(message)) => {
            assert!(message.contains(wanted), "{message:?} lacks {wanted:?}")
        }
        _ => panic!("expected {refused:?}, got {verdict:?}"),
    }
    assert_eq!(host.reads(), reads);
}

#[test]
fn the_refusal_names_the_namespace_the_baseline_what_is_missing_and_that_it_passes() {
    let host = Host::new(&[GUARDED], guarded_labels(), &[]);
    let Verdict::Deny(message) = create_pod(&host) else {
        panic!("allowed without a wall");
    };
    assert_eq!(
        message,
        "pod \"web-7d9f8-\"... (generateName) cannot be created in namespace \"team-a\" yet: the namespace is guarded by NamespaceBaseline \"guarded\" (namespaceLabel baseline=guarded), and its network wall is not in place: NetworkPolicy \"nsb-guarded-default-deny\" (its deny-all) does not exist. This is temporary: the Namespace Baseline reconciler installs the wall moments after a namespace matches, and the pod's controller (ReplicaSet, Job, DaemonSet, StatefulSet) retries on its own; a pod created by hand can be created again once `kubectl get networkpolicy -n team-a` lists \"nsb-guarded-default-deny\". If it does not appear, check that the reconciler is running (podsWaitForWall keeps pods out of guarded namespaces until their wall exists)"
    );
}

/// Somebody else's NetworkPolicy under the wall's name is not the wall (only the reconciler
/// may create one with its labels).
#[rstest]
#[case::unlabelled(json!({"metadata": {"name": DENY_ALL, "namespace": "team-a"}}))]
#[case::another_baselines(wall_policy(DENY_ALL, "other"))]
fn a_lookalike_is_not_the_wall(#[case] lookalike: Value) {
    let mut host = Host::new(&[GUARDED], guarded_labels(), &[DNS_DOOR]);
    host.policies.insert(DENY_ALL.to_owned(), lookalike);
    let verdict = create_pod(&host);
    assert!(
        matches!(&verdict, Verdict::Deny(message) if message.contains("exists but is not the reconciler's")),
        "{verdict:?}"
    );
}

/// Fail-closed: a read that fails while the namespace could be guarded refuses the pod, with
/// what failed and the permission it needs.
#[rstest]
#[case::baselines("baselines", "the live NamespaceBaselines could not be read (etcd timeout)", "list and watch on namespacebaselines.hedronite.io", (1, 0, 0))]
#[case::namespace("namespace", "the Namespace could not be read (etcd timeout)", "get on namespaces", (1, 1, 0))]
#[case::network_policy("policy", "NetworkPolicy \"nsb-guarded-default-deny\" of NamespaceBaseline \"guarded\" could not be read (etcd timeout)", "get on networkpolicies.networking.k8s.io", (1, 1, 1))]
fn a_failed_read_refuses_the_pod(
    #[case] failing: &str,
    #[case] what: &str,
    #[case] permission: &str,
    #[case] reads: (usize, usize, usize),
) {
    let mut host = Host::new(&[GUARDED], guarded_labels(), &[DENY_ALL, DNS_DOOR]);
    let error = "etcd timeout".to_owned();
    match failing {
        "baselines" => host.baselines = Err(error),
        "namespace" => host.labels = Err(error),
        _ => host.policy_error = Some(error),
    }
    let verdict = create_pod(&host);
    let Verdict::Deny(message) = &verdict else {
        panic!("allowed although a read failed: {verdict:?}");
    };
    assert!(message.contains(what), "{message:?} lacks {what:?}");
    assert!(
        message.contains(permission),
        "{message:?} lacks {permission:?}"
    );
    assert_eq!(host.reads(), reads);
}

/// What the rule leaves alone reads nothing: the setting off, other operations, the pod's
/// subresources, and exempt identities.
#[rstest]
#[case::setting_off("CREATE", "bob", "", false)]
#[case::update("UPDATE", "bob", "", true)]
#[case::delete("DELETE", "bob", "", true)]
#[case::binding("CREATE", "bob", "binding", true)]
#[case::eviction("CREATE", "bob", "eviction", true)]
#[case::break_glass("CREATE", "breakglass-admin", "", true)]
#[case::reconciler(
    "CREATE",
    "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler",
    "",
    true
)]
fn what_the_rule_leaves_alone_reads_nothing(
    #[case] operation: &str,
    #[case] user: &str,
    #[case] sub_resource: &str,
    #[case] setting: bool,
) {
    let host = Host::new(&[GUARDED], guarded_labels(), &[]);
    let verdict = review(
        &pod_request(operation, user, sub_resource),
        &gate(setting),
        &host,
    );
    assert_eq!(verdict, Verdict::Allow);
    assert_eq!(host.reads(), (0, 0, 0));
}

/// The control plane's controllers are exempt for DELETE only: their pods wait like anyone's.
#[rstest]
#[case("system:kube-controller-manager")]
#[case("system:serviceaccount:kube-system:generic-garbage-collector")]
fn control_plane_pods_wait_too(#[case] user: &str) {
    let host = Host::new(&[GUARDED], guarded_labels(), &[]);
    let verdict = review(&pod_request("CREATE", user, ""), &gate(true), &host);
    assert!(!verdict.is_allowed(), "{verdict:?}");
}

/// The policy's reader of host answers reaches the typed source's verdicts: the host's "not
/// found" failure is a missing part, any other failure a failed read.
#[rstest]
#[case::walled(&[DENY_ALL, DNS_DOOR], None, None)]
#[case::missing(&[DENY_ALL], None, Some("(its DNS door (allowDNS: true)) does not exist"))]
#[case::failing(&[DENY_ALL, DNS_DOOR], Some("Callback evaluation failure: networkpolicies.networking.k8s.io is forbidden"), Some("could not be read (Callback evaluation failure: networkpolicies.networking.k8s.io is forbidden)"))]
fn host_answers_read_as_the_typed_source(
    #[case] walls: &[&str],
    #[case] failure: Option<&str>,
    #[case] refused: Option<&str>,
) {
    struct Answers<'h>(&'h Host);
    impl HostCapabilities for Answers<'_> {
        fn list_baselines(&self) -> Result<Vec<u8>, String> {
            Ok(serde_json::to_vec(&json!({"items": [{
                "metadata": {"name": "guarded"}, "spec": {"namespaceLabel": "baseline=guarded"}}]}))
            .unwrap())
        }
        fn get_namespace(&self, _: &str) -> Result<Vec<u8>, String> {
            Ok(serde_json::to_vec(
                &json!({"metadata": {"name": "team-a", "labels": guarded_labels()}}),
            )
            .unwrap())
        }
        fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String> {
            if let Some(error) = &self.0.policy_error {
                return Err(error.clone());
            }
            match self.0.policies.get(name) {
                Some(policy) => Ok(serde_json::to_vec(policy).unwrap()),
                // As the policy-server says it.
                None => Err(format!(
                    "Callback evaluation failure: {NETWORK_POLICY_NOT_FOUND}{name}' inside of namespace 'Some(\"{namespace}\")'"
                )),
            }
        }
    }
    let mut host = Host::new(&[GUARDED], guarded_labels(), walls);
    host.policy_error = failure.map(str::to_owned);
    let request = json!({
        "uid": "1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "bob"},
        "object": {"metadata": {"generateName": "web-7d9f8-"}},
    });
    let payload =
        json!({"settings": {"contextAware": true, "podsWaitForWall": true}, "request": request});
    let bytes = payload.to_string();
    let from_host = evaluate_in_host(bytes.as_bytes(), &Answers(&host)).unwrap();
    let typed = evaluate(bytes.as_bytes(), &host).unwrap();
    assert_eq!(from_host, typed);
    match (refused, &from_host) {
        (None, Verdict::Allow) => {}
        (Some(wanted), Verdict::Deny(message)) => {
            assert!(message.contains(wanted), "{message:?} lacks {wanted:?}")
        }
        _ => panic!("expected {refused:?}, got {from_host:?}"),
    }
}

/// The reconciler's own pod never waits for the wall only it installs (its namespace is
/// guarded in deploy/); any other pod of its namespace does, and so does a pod of another
/// namespace using a ServiceAccount of the same name.
#[rstest]
#[case::the_reconcilers_pod("system:serviceaccount:team-a:nsb", Some("nsb"), true)]
#[case::another_account("system:serviceaccount:team-a:nsb", Some("web"), false)]
#[case::no_account_is_default("system:serviceaccount:team-a:nsb", None, false)]
#[case::same_name_other_namespace("system:serviceaccount:ops:nsb", Some("nsb"), false)]
#[case::reconciler_not_a_service_account("nsb", Some("nsb"), false)]
fn the_reconcilers_own_pod_does_not_wait(
    #[case] reconciler: &str,
    #[case] account: Option<&str>,
    #[case] allowed: bool,
) {
    let gate = PolicySettings {
        context_aware: true,
        pods_wait_for_wall: true,
        reconciler_username: reconciler.to_owned(),
        ..PolicySettings::default()
    }
    .gate();
    let mut request = pod_request(
        "CREATE",
        "system:serviceaccount:kube-system:replicaset-controller",
        "",
    );
    if let Some(account) = account {
        let object = request.object.as_mut().unwrap();
        object.spec = json!({"serviceAccountName": account});
    }
    let host = Host::new(&[GUARDED], guarded_labels(), &[]);
    let verdict = review(&request, &gate, &host);
    assert_eq!(verdict.is_allowed(), allowed, "{verdict:?}");
    if allowed {
        assert_eq!(
            host.reads(),
            (0, 0, 0),
            "the reconciler's pod is let through unread"
        );
    }
}
