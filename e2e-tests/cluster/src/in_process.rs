//! The chart's in-process pod gate (`admissionPolicy.pods.inProcess`, docs/design.md "The wall
//! checked in the API server"), as the tests apply it: the ValidatingAdmissionPolicy and the
//! bindings of `charts/tests/in-process-objects.yaml`, which `charts/check.sh` holds to the
//! chart's rendering, so that the cluster (s17) and node (n9) tests apply what the chart
//! renders and not a copy of it.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use crate::{Cluster, read_yaml_documents, repo_root};

/// The chart's rendering for `charts/tests/in-process.yaml`.
pub const CHART_OBJECTS: &str = "charts/tests/in-process-objects.yaml";
pub const POLICY_NAME: &str = "namespace-baseline-pods-wait-for-wall";
/// The binding that keeps the API server's NetworkPolicy informer: never deleted
/// (kubernetes#130887).
pub const ANCHOR_NAME: &str = "namespace-baseline-pods-wait-for-wall-anchor";
/// The API server's own text when a binding's param is missing (`parameterNotFoundAction:
/// Deny`).
pub const NO_PARAMS: &str =
    "no params found for policy binding with `Deny` parameterNotFoundAction";
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The chart's rendering: the policy, the anchor binding, and the bindings by name.
pub struct ChartObjects {
    pub policy: Value,
    pub anchor: Value,
    pub bindings: BTreeMap<String, Value>,
}

impl ChartObjects {
    pub fn read() -> Result<Self> {
        let mut policy = None;
        let mut anchor = None;
        let mut bindings = BTreeMap::new();
        for object in read_yaml_documents(&repo_root().join(CHART_OBJECTS))? {
            let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
            match object["kind"].as_str() {
                Some("ValidatingAdmissionPolicy") => policy = Some(object),
                Some("ValidatingAdmissionPolicyBinding") if name == ANCHOR_NAME => {
                    anchor = Some(object);
                }
                Some("ValidatingAdmissionPolicyBinding") => {
                    bindings.insert(name, object);
                }
                _ => {}
            }
        }
        Ok(Self {
            policy: policy.context("no ValidatingAdmissionPolicy in the chart's rendering")?,
            anchor: anchor.context("no anchor binding in the chart's rendering")?,
            bindings,
        })
    }

    /// The chart's binding for `baseline`'s wall part (`default-deny`, `allow-dns`), checked to
    /// select the namespaces `namespace_label` selects.
    pub fn binding(&self, baseline: &str, part: &str, namespace_label: &str) -> Result<Value> {
        let name = format!("pods-wait-for-nsb-{baseline}-{part}");
        let binding = self.bindings.get(&name).with_context(|| {
            format!("{CHART_OBJECTS} has no binding {name}: add the baseline to charts/tests/in-process.yaml")
        })?;
        let requirement =
            &binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0];
        ensure!(
            *requirement == requirement_of(namespace_label),
            "binding {name} selects {requirement}, not the baseline's {namespace_label}"
        );
        Ok(binding.clone())
    }

    /// The chart's binding of the `guarded` baseline's wall part, rewritten for another
    /// baseline `baseline` selecting by `namespace_label`: what the chart renders for an entry
    /// `{baseline, namespaceLabel}` (charts/check.sh renders such entries too).
    pub fn binding_for(&self, baseline: &str, part: &str, namespace_label: &str) -> Result<Value> {
        let mut binding = self.binding("guarded", part, "baseline=guarded")?;
        let wall = format!("nsb-{baseline}-{part}");
        binding["metadata"]["name"] = json!(format!("pods-wait-for-{wall}"));
        binding["spec"]["paramRef"]["name"] = json!(wall);
        binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0] =
            requirement_of(namespace_label);
        Ok(binding)
    }

    /// Applies the policy and the anchor binding (server-side apply, as Helm would create
    /// them; the anchor stays).
    pub async fn apply_policy_and_anchor(&self, cluster: &Cluster) -> Result<()> {
        cluster
            .apply(&self.policy)
            .await
            .context("applying the chart's ValidatingAdmissionPolicy")?;
        cluster
            .apply(&self.anchor)
            .await
            .context("applying the chart's anchor binding")?;
        Ok(())
    }
}

/// A namespaceLabel as the chart's binding selects it: `key=value` as `In`, `key` as `Exists`.
fn requirement_of(namespace_label: &str) -> Value {
    match namespace_label.split_once('=') {
        Some((key, value)) => json!({"key": key, "operator": "In", "values": [value]}),
        None => json!({"key": namespace_label, "operator": "Exists"}),
    }
}

/// `binding`, renamed with `suffix` and confined to the namespace `only`; the namespaces it
/// leaves out by name are renamed by `rename` (so that a fixture's own names keep their
/// meaning).
pub fn confined(
    binding: &Value,
    suffix: &str,
    only: &str,
    rename: &dyn Fn(&str) -> String,
) -> Value {
    let mut binding = binding.clone();
    let name = format!(
        "{}-{suffix}",
        binding["metadata"]["name"].as_str().unwrap_or("")
    );
    binding["metadata"]["name"] = json!(name);
    if let Some(expressions) =
        binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].as_array_mut()
    {
        for expression in expressions.iter_mut() {
            if expression["key"] == NAME_LABEL && expression["operator"] == "NotIn" {
                let renamed: Vec<String> = expression["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(rename)
                    .collect();
                expression["values"] = json!(renamed);
            }
        }
        expressions.push(json!({"key": NAME_LABEL, "operator": "In", "values": [only]}));
    }
    binding
}

/// Deletes the bindings named, never the anchor.
pub async fn delete_bindings(client: &Client, names: &[String]) {
    let api: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for name in names {
        assert_ne!(name, ANCHOR_NAME, "the anchor binding is never deleted");
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}
