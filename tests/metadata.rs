//! metadata.yml (embedded in the module) and artifacthub-pkg.yml (published) describe the
//! same policy: same name, version, rules and context-aware resources, and the version is
//! the crate's.

use std::path::Path;

use namespace_baseline_formats::yaml;
use serde_json::Value;

fn read(path: &str) -> Value {
    yaml::read_document(&Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing or not a string"))
}

/// A YAML document held as a string inside an annotation.
fn embedded(annotations: &Value, key: &str) -> Value {
    yaml::from_str(text(annotations, key)).unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[test]
fn name_and_version_agree_everywhere() {
    let metadata = read("metadata.yml");
    let package = read("artifacthub-pkg.yml");
    let annotations = &metadata["annotations"];
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(text(annotations, "io.kubewarden.policy.version"), version);
    assert_eq!(text(&package, "version"), version);
    assert_eq!(
        text(annotations, "io.kubewarden.policy.title"),
        text(&package, "name")
    );
    assert_eq!(
        text(annotations, "io.artifacthub.displayName"),
        text(&package, "displayName")
    );
    assert_eq!(
        text(annotations, "io.kubewarden.policy.description"),
        text(&package, "description")
    );
    let image = format!(
        "{}:v{version}",
        text(annotations, "io.kubewarden.policy.ociUrl")
    );
    assert_eq!(
        package["containersImages"][0]["image"].as_str(),
        Some(image.as_str())
    );
    assert!(text(&package, "install").contains(&image[..]));
}

#[test]
fn rules_and_resources_agree() {
    let metadata = read("metadata.yml");
    let package = read("artifacthub-pkg.yml");
    let annotations = &package["annotations"];
    assert_eq!(embedded(annotations, "kubewarden/rules"), metadata["rules"]);
    assert_eq!(
        embedded(annotations, "kubewarden/contextAwareResources"),
        metadata["contextAwareResources"]
    );
    assert_eq!(
        text(annotations, "kubewarden/resources"),
        text(&metadata["annotations"], "io.artifacthub.resources")
    );
    let mutating = metadata["mutating"]
        .as_bool()
        .expect("mutating is a boolean");
    assert_eq!(
        text(annotations, "kubewarden/mutation"),
        mutating.to_string()
    );
    let keywords: Vec<_> = text(&metadata["annotations"], "io.artifacthub.keywords")
        .split(',')
        .map(|k| Value::from(k.trim()))
        .collect();
    assert_eq!(package["keywords"], Value::Array(keywords));
}

#[test]
fn the_policy_guards_exactly_what_the_design_names() {
    let metadata = read("metadata.yml");
    assert_eq!(metadata["mutating"], Value::Bool(false));
    assert_eq!(metadata["backgroundAudit"], Value::Bool(false));
    assert_eq!(text(&metadata, "executionMode"), "kubewarden-wapc");
    let rules: Vec<(String, String, Vec<String>)> = metadata["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|rule| {
            let list = |key: &str| -> Vec<String> {
                serde_json::from_value(rule[key].clone()).expect("a list of strings")
            };
            (
                list("apiGroups").join(","),
                list("resources").join(","),
                list("operations"),
            )
        })
        .collect();
    assert_eq!(
        rules,
        vec![
            (
                "networking.k8s.io".into(),
                "networkpolicies".into(),
                vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]
            ),
            (
                "".into(),
                "namespaces,namespaces/status,namespaces/finalize".into(),
                vec!["CREATE".into(), "UPDATE".into()]
            ),
            ("".into(), "pods".into(), vec!["CREATE".into()]),
        ]
    );
    let resource = &metadata["contextAwareResources"][0];
    assert_eq!(text(resource, "apiVersion"), "hedronite.io/v1alpha1");
    assert_eq!(text(resource, "kind"), "NamespaceBaseline");
}
