//! The glue's own behaviour: payload parsing, the host capability and the response. The
//! rules themselves are tested in the core; the e2e fixtures run the built module.

use std::cell::Cell;

use namespace_baseline_core::admission::{BaselineSource, LiveBaseline, ObjectView, Verdict};
use rstest::rstest;
use serde_json::{Value, json};

use super::evaluate;

/// Stands in for the policy-server's host capabilities, counting calls.
struct FakeCluster {
    answer: Result<Vec<LiveBaseline>, String>,
    calls: Cell<usize>,
    /// The labels of namespace `team-a`; `None`: it cannot be read.
    namespace: Option<Value>,
    namespace_calls: Cell<usize>,
}

impl FakeCluster {
    fn with(baselines: &[(&str, &str)]) -> Self {
        let answer = baselines
            .iter()
            .map(|(name, label)| {
                serde_json::from_value(
                    json!({"metadata": {"name": name}, "spec": {"namespaceLabel": label}}),
                )
                .unwrap()
            })
            .collect();
        Self {
            answer: Ok(answer),
            calls: Cell::new(0),
            namespace: Some(json!({"baseline": "guarded"})),
            namespace_calls: Cell::new(0),
        }
    }

    fn failing() -> Self {
        Self {
            answer: Err("connection refused".into()),
            calls: Cell::new(0),
            namespace: None,
            namespace_calls: Cell::new(0),
        }
    }
}

impl BaselineSource for FakeCluster {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.calls.set(self.calls.get() + 1);
        self.answer.clone()
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.namespace_calls.set(self.namespace_calls.get() + 1);
        match (name, &self.namespace) {
            ("team-a", Some(labels)) => Ok(serde_json::from_value(
                json!({"metadata": {"name": name, "labels": labels}}),
            )
            .unwrap()),
            _ => Err(format!("namespaces {name:?} not found")),
        }
    }

    /// No wall exists: the pod rule's look-up finds nothing.
    fn network_policy(&self, _namespace: &str, _name: &str) -> Result<Option<ObjectView>, String> {
        Ok(None)
    }
}

fn namespace(labels: Value) -> Value {
    json!({"metadata": {"name": "team-a", "labels": labels}})
}

fn namespace_update(old: Value, new: Value) -> Value {
    json!({
        "uid": "1",
        "kind": {"group": "", "version": "v1", "kind": "Namespace"},
        "operation": "UPDATE",
        "userInfo": {"username": "bob", "groups": ["system:authenticated"]},
        "object": namespace(new),
        "oldObject": namespace(old),
    })
}

fn run(settings: Value, request: Value, cluster: &FakeCluster) -> Result<Verdict, String> {
    let payload = json!({"settings": settings, "request": request});
    evaluate(payload.to_string().as_bytes(), cluster)
}

#[test]
fn a_guarded_namespace_cannot_drop_its_label() {
    let cluster = FakeCluster::with(&[]);
    let verdict = run(
        json!({"guardSelectors": ["baseline=guarded"]}),
        namespace_update(json!({"baseline": "guarded"}), json!({})),
        &cluster,
    )
    .unwrap();
    assert!(matches!(verdict, Verdict::Deny(m) if m.contains("baseline=guarded")));
    assert_eq!(cluster.calls.get(), 0, "settings mode never calls the host");
}

#[rstest]
#[case::live_baseline_guards(&[("guarded", "baseline=guarded")], false)]
#[case::no_live_baseline(&[], true)]
#[case::invalid_live_label_guards_nothing(&[("broken", "baseline!=open")], true)]
fn context_aware_guards_come_from_the_cluster(
    #[case] baselines: &[(&str, &str)],
    #[case] allowed: bool,
) {
    let cluster = FakeCluster::with(baselines);
    let verdict = run(
        json!({"contextAware": true}),
        namespace_update(json!({"baseline": "guarded"}), json!({"baseline": "open"})),
        &cluster,
    )
    .unwrap();
    assert_eq!(verdict.is_allowed(), allowed, "{verdict:?}");
    assert_eq!(cluster.calls.get(), 1);
}

#[test]
fn the_host_is_not_asked_when_labels_did_not_change() {
    let cluster = FakeCluster::failing();
    let labels = json!({"baseline": "guarded"});
    let verdict = run(
        json!({"contextAware": true}),
        namespace_update(labels.clone(), labels),
        &cluster,
    )
    .unwrap();
    assert_eq!(verdict, Verdict::Allow);
    assert_eq!(cluster.calls.get(), 0);
}

#[test]
fn a_failing_host_fails_closed_for_label_changes() {
    let cluster = FakeCluster::failing();
    let verdict = run(
        json!({"contextAware": true}),
        namespace_update(json!({"baseline": "guarded"}), json!({})),
        &cluster,
    )
    .unwrap();
    assert!(matches!(verdict, Verdict::Deny(m) if m.contains("connection refused")));
}

#[rstest]
#[case::not_json(b"\xff\x00garbage".as_slice())]
#[case::settings_of_the_wrong_shape(br#"{"settings": {"guardSelectors": "baseline"}, "request": {}}"#.as_slice())]
#[case::unknown_setting(br#"{"settings": {"guards": []}, "request": {}}"#.as_slice())]
fn unreadable_payloads_are_errors(#[case] payload: &[u8]) {
    let error = evaluate(payload, &FakeCluster::with(&[])).unwrap_err();
    assert!(
        error.starts_with("cannot read the validation payload"),
        "{error}"
    );
}

#[rstest]
#[case::no_request(json!(null))]
#[case::request_is_a_number(json!(5))]
#[case::labels_are_a_list(json!({
    "kind": {"group": "", "kind": "Namespace"},
    "operation": "UPDATE",
    "object": {"metadata": {"labels": ["baseline"]}},
    "oldObject": {"metadata": {"labels": {"baseline": "guarded"}}},
}))]
#[case::username_is_a_number(json!({"userInfo": {"username": 7}}))]
fn unreadable_requests_are_allowed(#[case] request: Value) {
    let verdict = run(
        json!({"guardSelectors": ["baseline"]}),
        request,
        &FakeCluster::with(&[]),
    );
    assert_eq!(verdict, Ok(Verdict::Allow));
}

fn policy_create(spec: Value) -> Value {
    json!({
        "uid": "2",
        "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "bob", "groups": ["system:authenticated"]},
        "object": {
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": spec,
        },
    })
}

#[rstest]
#[case::warn("Warn", true)]
#[case::deny("Deny", false)]
fn a_hole_in_a_walled_namespace_reads_the_namespace_once(
    #[case] setting: &str,
    #[case] allowed: bool,
) {
    let cluster = FakeCluster::with(&[]);
    let verdict = run(
        json!({"guardSelectors": ["baseline=guarded"], "holes": setting}),
        policy_create(json!({"podSelector": {}, "ingress": [{}]})),
        &cluster,
    )
    .unwrap();
    assert_eq!(verdict.is_allowed(), allowed, "{verdict:?}");
    assert_eq!(verdict.warnings().len(), usize::from(allowed));
    assert_eq!(cluster.namespace_calls.get(), 1);
    assert_eq!(
        cluster.calls.get(),
        0,
        "no baseline list without contextAware"
    );
}

#[test]
fn a_policy_without_holes_costs_no_host_call() {
    let cluster = FakeCluster::failing();
    let verdict = run(
        json!({"contextAware": true, "holes": "Deny"}),
        policy_create(json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})),
        &cluster,
    )
    .unwrap();
    assert_eq!(verdict, Verdict::Allow);
    assert_eq!((cluster.namespace_calls.get(), cluster.calls.get()), (0, 0));
}

#[test]
fn an_unreadable_namespace_refuses_under_deny_and_warns_under_warn() {
    let cluster = FakeCluster::failing();
    let spec = json!({"podSelector": {}, "ingress": [{}]});
    let denied = run(
        json!({"contextAware": true, "holes": "Deny"}),
        policy_create(spec.clone()),
        &cluster,
    )
    .unwrap();
    assert!(
        matches!(&denied, Verdict::Deny(m) if m.contains("namespaces \"team-a\" not found") && m.contains("needs get on namespaces")),
        "{denied:?}"
    );
    let warned = run(
        json!({"contextAware": true, "holes": "Warn"}),
        policy_create(spec),
        &cluster,
    )
    .unwrap();
    assert!(
        matches!(&warned, Verdict::Warn(w) if w[0].contains("namespaces \"team-a\" not found")),
        "{warned:?}"
    );
}

#[test]
fn warnings_go_out_in_an_accepting_response() {
    let raw = super::accept_with_warnings(vec!["first".into(), "second".into()]).unwrap();
    let response: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(response["accepted"], json!(true));
    assert_eq!(response["warnings"], json!(["first", "second"]));
    assert_eq!(response["message"], Value::Null);
    assert_eq!(response["mutated_object"], Value::Null);
}

#[test]
fn responses_are_written_as_the_sdk_writes_them() {
    use kubewarden_policy_sdk::response::ValidationResponse;
    use kubewarden_policy_sdk::{accept_request, reject_request};

    assert_eq!(
        super::respond(true, None, None).unwrap(),
        accept_request().unwrap()
    );
    let message = "NetworkPolicy \"a\" is part of the network wall: \"quoted\" \\ and ünïcode";
    assert_eq!(
        super::respond(false, Some(message), None).unwrap(),
        reject_request(Some(message.to_owned()), Some(403), None, None).unwrap()
    );
    let warnings = vec!["first".to_owned(), "second \"one\"".to_owned()];
    let sdk = serde_json::to_vec(&ValidationResponse {
        accepted: true,
        message: None,
        code: None,
        mutated_object: None,
        audit_annotations: None,
        warnings: Some(warnings.clone()),
    })
    .unwrap();
    assert_eq!(super::respond(true, None, Some(&warnings)).unwrap(), sdk);
}

/// The policy's own reader of host answers ([`admission::evaluate_in_host`]) reaches the
/// verdicts the typed source does, on the same cluster.
#[rstest]
#[case::live_baseline_guards(&[("guarded", "baseline=guarded")], false)]
#[case::no_live_baseline(&[], true)]
#[case::invalid_live_label_guards_nothing(&[("broken", "baseline!=open")], true)]
fn host_answers_read_as_the_typed_source(
    #[case] baselines: &[(&str, &str)],
    #[case] allowed: bool,
) {
    struct Answers(Vec<u8>);
    impl namespace_baseline_core::admission::HostCapabilities for Answers {
        fn list_baselines(&self) -> Result<Vec<u8>, String> {
            Ok(self.0.clone())
        }
        fn get_namespace(&self, name: &str) -> Result<Vec<u8>, String> {
            Err(format!("namespaces {name:?} not found"))
        }
        fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String> {
            Err(format!(
                "networkpolicies {namespace}/{name} not read by this test"
            ))
        }
    }
    let items: Vec<Value> = baselines
        .iter()
        .map(|(name, label)| json!({"metadata": {"name": name}, "spec": {"namespaceLabel": label}}))
        .collect();
    let list = json!({"apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaselineList", "metadata": {"resourceVersion": "1"}, "items": items});
    let payload = json!({
        "settings": {"contextAware": true},
        "request": namespace_update(json!({"baseline": "guarded"}), json!({"baseline": "open"})),
    });
    let bytes = payload.to_string();
    let host = namespace_baseline_core::admission::evaluate_in_host(
        bytes.as_bytes(),
        &Answers(serde_json::to_vec(&list).unwrap()),
    )
    .unwrap();
    assert_eq!(host.is_allowed(), allowed, "{host:?}");
    assert_eq!(
        host,
        evaluate(bytes.as_bytes(), &FakeCluster::with(baselines)).unwrap()
    );
}
