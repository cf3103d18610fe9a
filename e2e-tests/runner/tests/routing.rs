//! A fixture's verdict only matters if the API server sends the request to the policy: every
//! request a fixture expects to be rejected (the bypass catalogue included) must be matched
//! by the rules of `metadata.yml` and of `deploy/admission-policy.yaml` (resource,
//! subresource, operation) and pass its `matchConditions`. A rule that misses a subresource
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

/// What a webhook rule matches a request on.
#[derive(Debug)]
struct Target {
    group: String,
    version: String,
    /// `resource` or `resource/subresource`.
    resource: String,
    operation: String,
    namespace: String,
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
        namespace: text(&request["namespace"]),
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
    let policy = read_yaml("deploy/admission-policy.yaml");
    let conditions: Vec<String> = policy["spec"]["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| text(&c["expression"]))
        .collect();
    assert_eq!(
        conditions,
        ["request.namespace != 'kubewarden'"],
        "matchConditions changed: update this test's evaluation of them"
    );
    let mut checked = Vec::new();
    let mut missed = Vec::new();
    for fixture in fixture::load_all(&repo().join(fixture::DIR)).expect("the fixtures") {
        if fixture.expect.allowed != Some(false) {
            continue;
        }
        let name = fixture.name.clone();
        let target = target(&fixture.request);
        for (file, rules) in [
            ("metadata.yml", &metadata["rules"]),
            ("deploy/admission-policy.yaml", &policy["spec"]["rules"]),
        ] {
            if !matches(rules, &target) || target.namespace == "kubewarden" {
                missed.push(format!(
                    "{name}: {target:?} not sent to the policy by {file}"
                ));
            }
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
