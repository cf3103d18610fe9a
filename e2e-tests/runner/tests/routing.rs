//! A fixture's verdict only matters if the API server sends the request to the policy: every
//! request a fixture expects to be rejected (the bypass catalogue included) must be matched
//! by the rules of `metadata.yml` and of one of the ClusterAdmissionPolicies of
//! `deploy/admission-policy.yaml` (resource, subresource, operation, and the namespace names
//! a `namespaceSelector` leaves out; they have no `matchConditions`). And every host call the policy makes
//! must be allowed to the policy-server's ServiceAccount by `deploy/policy-server-rbac.yaml`. A rule that misses a subresource
//! writing labels (`namespaces/status`) is a way around the wall no fixture would catch.

use std::path::PathBuf;

use namespace_baseline_formats::{fixture, yaml};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read_yaml(path: &str) -> Value {
    yaml::read_document(&repo().join(path)).unwrap_or_else(|e| panic!("{e}"))
}

/// Rejections the policy still decides but deploy/ never asks for: the Pod rule's
/// `namespaceSelector` leaves the reconciler's own namespace out (pods there never wait on the
/// policy-server; SECURITY.md), where a chart installed elsewhere may not.
const LEFT_OUT_BY_DEPLOY: [&str; 1] = ["pods-reconciler-namespace-other-pod-waits"];

/// The ClusterAdmissionPolicies of `deploy/admission-policy.yaml`.
fn shipped_policies() -> Vec<Value> {
    let policies = yaml::read_documents(&repo().join("deploy/admission-policy.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        policies
            .iter()
            .all(|policy| policy["kind"] == "ClusterAdmissionPolicy")
    );
    policies
}

/// Whether a policy's `namespaceSelector` leaves out the namespace `name` by its name (the
/// only label a fixture's namespace is known to carry).
fn leaves_out(policy: &Value, name: &str) -> bool {
    policy["spec"]["namespaceSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|term| {
            term["key"] == "kubernetes.io/metadata.name"
                && term["operator"] == "NotIn"
                && term["values"]
                    .as_array()
                    .is_some_and(|values| values.iter().any(|value| value == name))
        })
}

/// What a webhook rule matches a request on.
#[derive(Debug)]
struct Target {
    group: String,
    version: String,
    /// `resource` or `resource/subresource`.
    resource: String,
    operation: String,
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn target(request: &Value) -> Target {
    let resource = &request["resource"];
    let sub = text(&request["subResource"]);
    let name = text(&resource["resource"]);
    Target {
        group: text(&resource["group"]),
        version: text(&resource["version"]),
        resource: if sub.is_empty() {
            name
        } else {
            format!("{name}/{sub}")
        },
        operation: text(&request["operation"]),
    }
}

/// Webhook rule matching (admissionregistration.k8s.io/v1 `RuleWithOperations`).
fn matches(rules: &Value, target: &Target) -> bool {
    let has = |list: &Value, wanted: &str| {
        list.as_array()
            .is_some_and(|items| items.iter().any(|item| item == "*" || item == wanted))
    };
    rules.as_array().into_iter().flatten().any(|rule| {
        has(&rule["apiGroups"], &target.group)
            && has(&rule["apiVersions"], &target.version)
            && (has(&rule["resources"], &target.resource)
                || (!target.resource.contains('/') && has(&rule["resources"], "*")))
            && has(&rule["operations"], &target.operation)
    })
}

#[test]
fn every_rejected_request_of_the_fixtures_reaches_the_policy() {
    let metadata = read_yaml("metadata.yml");
    let policies = shipped_policies();
    assert!(
        policies
            .iter()
            .all(|policy| policy["spec"]["matchConditions"].is_null()),
        "matchConditions came back: update this test's evaluation of them (and SECURITY.md: a condition on a namespace name leaves any namespace of that name unguarded)"
    );
    let mut checked = Vec::new();
    let mut missed = Vec::new();
    for fixture in fixture::load_all(&repo().join(fixture::DIR)).expect("the fixtures") {
        if fixture.expect.allowed != Some(false) {
            continue;
        }
        let name = fixture.name.clone();
        let target = target(&fixture.request);
        if !matches(&metadata["rules"], &target) {
            missed.push(format!(
                "{name}: {target:?} not sent to the policy by metadata.yml"
            ));
        }
        let namespace = text(&fixture.request["namespace"]);
        if LEFT_OUT_BY_DEPLOY.contains(&name.as_str()) {
            assert!(
                policies
                    .iter()
                    .all(|policy| !matches(&policy["spec"]["rules"], &target)
                        || leaves_out(policy, &namespace)),
                "{name}: deploy/admission-policy.yaml sends it now: take it off LEFT_OUT_BY_DEPLOY"
            );
            continue;
        }
        if !policies.iter().any(|policy| {
            matches(&policy["spec"]["rules"], &target) && !leaves_out(policy, &namespace)
        }) {
            missed.push(format!(
                "{name}: {target:?} in namespace {namespace:?} not sent to the policy by deploy/admission-policy.yaml"
            ));
        }
        checked.push(name);
    }
    eprintln!(
        "{} rejected requests checked against the rules",
        checked.len()
    );
    assert!(
        checked.iter().any(|n| n.starts_with("bypass-")),
        "no bypass fixture found"
    );
    assert!(missed.is_empty(), "{missed:#?}");
}

/// Whether a ClusterRole's rules allow `verb` on `resource` of `group`.
fn allows(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |list: &Value, wanted: &str| {
        list.as_array()
            .is_some_and(|items| items.iter().any(|item| item == "*" || item == wanted))
    };
    role["rules"].as_array().into_iter().flatten().any(|rule| {
        has(&rule["apiGroups"], group)
            && has(&rule["resources"], resource)
            && has(&rule["verbs"], verb)
    })
}

#[test]
fn the_policy_servers_role_allows_every_host_call_the_policy_makes() {
    let documents = yaml::read_documents(&repo().join("deploy/policy-server-rbac.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let role = documents
        .iter()
        .find(|document| document["kind"] == "ClusterRole")
        .expect("a ClusterRole in deploy/policy-server-rbac.yaml");
    // The requests the policy sends (src/baselines.rs), read for what they ask.
    let list: Value = serde_json::from_str(namespace_baseline_policy::LIST_BASELINES_REQUEST)
        .expect("the list request is JSON");
    let get: Value = serde_json::from_slice(
        &namespace_baseline_policy::get_namespace_request("team-a").expect("encodable"),
    )
    .expect("the get request is JSON");
    assert_eq!(list["api_version"], "hedronite.io/v1alpha1");
    assert_eq!(list["kind"], "NamespaceBaseline");
    assert_eq!(
        (&get["api_version"], &get["kind"]),
        (&Value::from("v1"), &Value::from("Namespace"))
    );
    let get_wall: Value = serde_json::from_slice(
        &namespace_baseline_policy::get_network_policy_request("team-a", "nsb-a-default-deny")
            .expect("encodable"),
    )
    .expect("the get request is JSON");
    assert_eq!(
        (&get_wall["api_version"], &get_wall["kind"]),
        (
            &Value::from("networking.k8s.io/v1"),
            &Value::from("NetworkPolicy")
        )
    );
    for (group, resource, verb) in [
        ("hedronite.io", "namespacebaselines", "list"),
        ("hedronite.io", "namespacebaselines", "watch"),
        ("", "namespaces", "get"),
        ("networking.k8s.io", "networkpolicies", "get"),
    ] {
        assert!(
            allows(role, group, resource, verb),
            "deploy/policy-server-rbac.yaml does not allow {verb} on {resource} ({group:?})"
        );
    }
    // No wider than the reads: no write.
    for rule in role["rules"].as_array().expect("rules") {
        for verb in rule["verbs"].as_array().expect("verbs") {
            assert!(
                ["get", "list", "watch"].contains(&verb.as_str().unwrap_or_default()),
                "the policy-server's role may only read: {rule}"
            );
        }
    }
}

/// The policy-server hands a policy only the kinds its `contextAwareResources` list (metadata.yml,
/// and the ClusterAdmissionPolicy of deploy/): every kind the policy gets or lists is there.
#[test]
fn every_kind_the_policy_reads_is_a_context_aware_resource() {
    let metadata = read_yaml("metadata.yml");
    let policies = shipped_policies();
    let requests: Vec<Value> = [
        namespace_baseline_policy::LIST_BASELINES_REQUEST
            .as_bytes()
            .to_vec(),
        namespace_baseline_policy::get_namespace_request("team-a").expect("encodable"),
        namespace_baseline_policy::get_network_policy_request("team-a", "nsb-a-default-deny")
            .expect("encodable"),
    ]
    .iter()
    .map(|request| serde_json::from_slice(request).expect("JSON"))
    .collect();
    let listings = std::iter::once(("metadata.yml", &metadata["contextAwareResources"])).chain(
        policies.iter().map(|policy| {
            (
                "deploy/admission-policy.yaml",
                &policy["spec"]["contextAwareResources"],
            )
        }),
    );
    for (file, resources) in listings {
        let listed: Vec<(&Value, &Value)> = resources
            .as_array()
            .unwrap_or_else(|| panic!("{file}: contextAwareResources missing"))
            .iter()
            .map(|resource| (&resource["apiVersion"], &resource["kind"]))
            .collect();
        for request in &requests {
            let kind = (&request["api_version"], &request["kind"]);
            assert!(
                listed.contains(&kind),
                "{file}: contextAwareResources lacks {kind:?}, which the policy reads"
            );
        }
        assert_eq!(
            listed.len(),
            requests.len(),
            "{file}: contextAwareResources lists a kind the policy never reads"
        );
    }
}
