//! Kubewarden's controller, as far as the cluster tests need it to run the policy in a real API
//! server's admission chain where no kubelet runs (the test node runs the real controller): every
//! ClusterAdmissionPolicy of `deploy/admission-policy.yaml` read as the controller reads it,
//! rendered into the policy-server's policies file (`policies.yml`) and into the
//! `ValidatingWebhookConfiguration` the controller creates for each policy, registered and
//! removed. The webhooks point at the policy-server by URL (it runs as a local process, see
//! [`crate::policy_server`]), where Kubewarden points at its policy-server's Service; the
//! policies file differs from the controller's only in the module, a `file://` URL of the
//! locally annotated module instead of the manifest's registry reference.
//!
//! The rules are Kubewarden v1.35.0's (github.com/kubewarden/adm-controller, tag `v1.35.0`:
//! `buildPoliciesMap` and `policyServerConfigEntry.MarshalJSON` in
//! `internal/controller/policyserver_controller_configmap.go`,
//! `reconcileValidatingWebhookConfiguration` in
//! `internal/controller/policy_subreconciler_webhook.go`, `GetUniqueName` in
//! `api/policies/v1/clusteradmissionpolicy_types.go`), and node test n10 holds the rendering to
//! the real controller: for the shipped manifests' and the chart's policies, the controller's
//! `policies.yml` and webhook configurations equal this module's field by field, but for where
//! the webhook calls. The CRD's defaults (`mode` protect, `timeoutSeconds` 10) come from the
//! CRD copy in `e2e-tests/manifests/kubewarden-clusteradmissionpolicy-crd.yaml` (a test holds
//! them together, and fails when the CRD has a spec field this file does not place).

use std::path::Path;

use anyhow::{Context as _, Result, bail, ensure};
use base64::Engine as _;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use namespace_baseline_formats::yaml;
use serde_json::{Value, json};

/// The namespace Kubewarden's controller and policy-servers run in (its charts' default).
pub const CONTROLLER_NAMESPACE: &str = "kubewarden";
/// The ServiceAccount of the `default` PolicyServer (what `deploy/policy-server-rbac.yaml`
/// binds).
pub const POLICY_SERVER_SERVICE_ACCOUNT: &str = "policy-server";
/// The PolicyServer every policy names when it names none (the CRD's default).
pub const DEFAULT_POLICY_SERVER: &str = "default";
/// `spec.mode` when the policy sets none (the CRD's default).
pub const DEFAULT_MODE: &str = "protect";
/// `timeoutSeconds` when the policy sets none (the CRD's default).
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
/// The field manager the webhook configurations are applied with.
pub const FIELD_MANAGER: &str = "nsb-kubewarden-controller-in-tests";

/// Where the controller puts a field of a ClusterAdmissionPolicy's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// Into the policy's entry of the policy-server's policies file.
    PoliciesFile,
    /// Into the policy's ValidatingWebhookConfiguration.
    Webhook,
    /// Neither: the controller's own business (which policy-server; the audit scanner), with
    /// what the tests require of it.
    Controller,
}

/// Every field of a `policies.kubewarden.io/v1` ClusterAdmissionPolicy's spec in Kubewarden
/// 1.35, and where the controller puts it. A manifest with any other field is refused, and a
/// test fails when the CRD copy has a field this list does not name.
pub const SPEC_FIELDS: [(&str, Destination); 18] = [
    ("module", Destination::PoliciesFile),
    ("mode", Destination::PoliciesFile),
    ("mutating", Destination::PoliciesFile),
    ("settings", Destination::PoliciesFile),
    ("contextAwareResources", Destination::PoliciesFile),
    ("message", Destination::PoliciesFile),
    ("timeoutEvalSeconds", Destination::PoliciesFile),
    ("rules", Destination::Webhook),
    ("failurePolicy", Destination::Webhook),
    ("matchPolicy", Destination::Webhook),
    ("matchConditions", Destination::Webhook),
    ("namespaceSelector", Destination::Webhook),
    ("objectSelector", Destination::Webhook),
    ("sideEffects", Destination::Webhook),
    ("timeoutSeconds", Destination::Webhook),
    (
        "allowInsideAdmissionControllerNamespace",
        Destination::Webhook,
    ),
    // Which PolicyServer serves the policy: the tests run one, the `default`.
    ("policyServer", Destination::Controller),
    // The audit scanner's, which the tests do not run.
    ("backgroundAudit", Destination::Controller),
];

/// A `policies.kubewarden.io/v1` ClusterAdmissionPolicy, as read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterAdmissionPolicy {
    pub name: String,
    pub spec: Value,
}

impl ClusterAdmissionPolicy {
    /// Every ClusterAdmissionPolicy among the YAML documents of `path`, in their order (at
    /// least one).
    pub fn read_all(path: &Path) -> Result<Vec<Self>> {
        let documents =
            yaml::read_documents(path).with_context(|| format!("reading {}", path.display()))?;
        let policies = documents
            .iter()
            .filter(|document| document["kind"] == "ClusterAdmissionPolicy")
            .map(Self::from_document)
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("in {}", path.display()))?;
        ensure!(
            !policies.is_empty(),
            "{} holds no ClusterAdmissionPolicy",
            path.display()
        );
        Ok(policies)
    }

    pub fn from_document(document: &Value) -> Result<Self> {
        ensure!(
            document["apiVersion"] == "policies.kubewarden.io/v1",
            "not a policies.kubewarden.io/v1 object: apiVersion {}",
            document["apiVersion"]
        );
        let name = document["metadata"]["name"]
            .as_str()
            .filter(|name| !name.is_empty())
            .context("ClusterAdmissionPolicy without metadata.name")?;
        let spec = document["spec"]
            .as_object()
            .with_context(|| format!("ClusterAdmissionPolicy {name} without a spec"))?;
        for field in spec.keys() {
            ensure!(
                SPEC_FIELDS.iter().any(|(known, _)| known == field),
                "ClusterAdmissionPolicy {name}: spec.{field} is not a field of Kubewarden 1.35's ClusterAdmissionPolicy"
            );
        }
        ensure!(
            document["spec"]["mutating"] != true,
            "ClusterAdmissionPolicy {name} is mutating: the tests register validating webhooks only"
        );
        let server = document["spec"]["policyServer"]
            .as_str()
            .unwrap_or(DEFAULT_POLICY_SERVER);
        ensure!(
            server == DEFAULT_POLICY_SERVER,
            "ClusterAdmissionPolicy {name} names PolicyServer {server:?}: the tests run one, the {DEFAULT_POLICY_SERVER:?}"
        );
        ensure!(
            document["spec"]["rules"]
                .as_array()
                .is_some_and(|rules| !rules.is_empty()),
            "ClusterAdmissionPolicy {name} has no rules (the CRD requires them)"
        );
        Ok(Self {
            name: name.to_owned(),
            spec: document["spec"].clone(),
        })
    }

    /// The name Kubewarden's controller gives the policy's webhook configuration, its entry
    /// in the policies file and its admission path.
    pub fn unique_name(&self) -> String {
        format!("clusterwide-{}", self.name)
    }

    /// The policy-server path that evaluates this policy.
    pub fn validate_path(&self) -> String {
        format!("/validate/{}", self.unique_name())
    }

    /// The name of the one webhook in the configuration.
    pub fn webhook_name(&self) -> String {
        format!("{}.kubewarden.admission", self.unique_name())
    }

    /// `spec.mode`, the CRD's default when absent.
    pub fn mode(&self) -> &str {
        self.spec["mode"].as_str().unwrap_or(DEFAULT_MODE)
    }

    /// `spec.rules`.
    pub fn rules(&self) -> &[Value] {
        self.spec["rules"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Whether one of the policy's rules sends `resource` (e.g. `pods`, `namespaces/status`)
    /// of the API group `group` to it.
    pub fn matches(&self, group: &str, resource: &str) -> bool {
        self.rules().iter().any(|rule| {
            let listed = |field: &str, value: &str| {
                rule[field]
                    .as_array()
                    .is_some_and(|values| values.iter().any(|v| v == value || v == "*"))
            };
            listed("apiGroups", group) && listed("resources", resource)
        })
    }

    /// The policy's entry in the policies file, its module at `module`.
    fn policies_file_entry(&self, module: &str) -> Value {
        let spec = &self.spec;
        let mut entry = json!({
            "namespacedName": {"Namespace": "", "Name": self.name},
            "module": module,
            "policyMode": self.mode(),
            "allowedToMutate": spec["mutating"] == true,
            // What the controller marshals when the policy has none: a null RawExtension.
            "settings": spec["settings"],
            // A cluster-wide policy gets every host capability (hostCapabilitiesForPolicy).
            "hostCapabilities": ["*"],
        });
        for field in ["contextAwareResources", "message", "timeoutEvalSeconds"] {
            // omitempty: absent, empty or zero is left out.
            let value = &spec[field];
            let empty = value.is_null()
                || value.as_array().is_some_and(Vec::is_empty)
                || value.as_str().is_some_and(str::is_empty)
                || value.as_i64() == Some(0);
            if !empty {
                entry[field] = value.clone();
            }
        }
        entry
    }

    /// The namespace selector Kubewarden's controller renders for a cluster-wide policy.
    fn namespace_selector(&self) -> Value {
        let own = &self.spec["namespaceSelector"];
        if self.spec["allowInsideAdmissionControllerNamespace"] == true {
            return own.clone();
        }
        let mut expressions = vec![json!({
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": [CONTROLLER_NAMESPACE],
        })];
        if let Some(more) = own["matchExpressions"].as_array() {
            expressions.extend(more.iter().cloned());
        }
        json!({"matchExpressions": expressions})
    }
}

/// The policy-server's policies file (`policies.yml`) for `policies`, every module at the URL
/// `module` (e.g. `file:///…/annotated-policy.wasm`): the policies must all name the same
/// module in the manifest, so that one local file stands for it.
pub fn policies_file(policies: &[ClusterAdmissionPolicy], module: &str) -> Result<Value> {
    let mut modules = policies.iter().map(|policy| &policy.spec["module"]);
    if let Some(first) = modules.next() {
        ensure!(
            modules.all(|other| other == first),
            "the ClusterAdmissionPolicies name different modules: one local module cannot stand for them"
        );
    }
    let mut file = serde_json::Map::new();
    for policy in policies {
        let previous = file.insert(policy.unique_name(), policy.policies_file_entry(module));
        ensure!(
            previous.is_none(),
            "two ClusterAdmissionPolicies named {}",
            policy.name
        );
    }
    Ok(Value::Object(file))
}

/// The policy among `policies` whose rules send `resource` (`pods`, `networkpolicies`,
/// `namespaces`) of the API group `group` to the policy-server.
pub fn policy_for<'a>(
    policies: &'a [ClusterAdmissionPolicy],
    group: &str,
    resource: &str,
) -> &'a ClusterAdmissionPolicy {
    policies
        .iter()
        .find(|policy| policy.matches(group, resource))
        .unwrap_or_else(|| panic!("no ClusterAdmissionPolicy judges {group}/{resource}"))
}

/// The `rules` of a policy's `metadata.yml`: the operations the module says it judges.
pub fn metadata_rules(path: &Path) -> Result<Vec<Value>> {
    let metadata = yaml::read_documents(path)
        .with_context(|| format!("reading {}", path.display()))?
        .into_iter()
        .next()
        .with_context(|| format!("{} is empty", path.display()))?;
    let rules = metadata["rules"]
        .as_array()
        .filter(|rules| !rules.is_empty())
        .with_context(|| format!("{} has no rules", path.display()))?;
    Ok(rules.clone())
}

/// Fails when a rule of `policy` is not one of the module's own (`metadata.yml`'s): the API
/// server would send the policy requests its module never meant to judge.
pub fn check_rules_declared(policy: &ClusterAdmissionPolicy, declared: &[Value]) -> Result<()> {
    for rule in policy.rules() {
        if !declared.contains(rule) {
            bail!(
                "ClusterAdmissionPolicy {} has a rule metadata.yml does not declare: {rule}",
                policy.name
            );
        }
    }
    Ok(())
}

/// The `ValidatingWebhookConfiguration` Kubewarden's controller creates for `policy`,
/// calling the policy-server at `server` (`https://host:port`, its certificate signed by the
/// CA `ca_pem`).
pub fn webhook_configuration(policy: &ClusterAdmissionPolicy, server: &str, ca_pem: &str) -> Value {
    let spec = &policy.spec;
    let mut webhook = json!({
        "name": policy.webhook_name(),
        "clientConfig": {
            "url": format!("{}{}", server.trim_end_matches('/'), policy.validate_path()),
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        },
        "rules": spec["rules"],
        "namespaceSelector": policy.namespace_selector(),
        "sideEffects": spec["sideEffects"].as_str().unwrap_or("None"),
        "timeoutSeconds": spec["timeoutSeconds"].as_i64().unwrap_or(DEFAULT_TIMEOUT_SECONDS),
        "admissionReviewVersions": ["v1"],
    });
    // Copied as they are; absent, the API server's defaults apply (failurePolicy Fail,
    // matchPolicy Equivalent).
    for field in [
        "failurePolicy",
        "matchPolicy",
        "objectSelector",
        "matchConditions",
    ] {
        if !spec[field].is_null() {
            webhook[field] = spec[field].clone();
        }
    }
    if webhook["namespaceSelector"].is_null() {
        webhook
            .as_object_mut()
            .expect("an object")
            .remove("namespaceSelector");
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": policy.unique_name(),
            "labels": {"app.kubernetes.io/part-of": "kubewarden"},
            "annotations": {
                "kubewardenPolicyName": policy.name,
                "kubewardenPolicyNamespace": "",
            },
        },
        "webhooks": [webhook],
    })
}

/// The ValidatingWebhookConfiguration kind, for dynamic requests.
pub fn webhook_configurations(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
    );
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Creates or replaces (server-side apply) a webhook configuration made by
/// [`webhook_configuration`].
pub async fn register(client: &Client, configuration: &Value) -> Result<()> {
    let name = configuration["metadata"]["name"]
        .as_str()
        .context("webhook configuration without a name")?;
    webhook_configurations(client)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(configuration),
        )
        .await
        .with_context(|| format!("registering ValidatingWebhookConfiguration {name}"))?;
    Ok(())
}

/// Removes the webhook configuration `name`; `false` when there was none.
pub async fn remove(client: &Client, name: &str) -> Result<bool> {
    match webhook_configurations(client)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => {
            Err(error).with_context(|| format!("removing ValidatingWebhookConfiguration {name}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn shipped() -> Vec<ClusterAdmissionPolicy> {
        ClusterAdmissionPolicy::read_all(&repo().join("deploy/admission-policy.yaml")).unwrap()
    }

    fn document(spec: Value) -> Value {
        json!({"apiVersion": "policies.kubewarden.io/v1", "kind": "ClusterAdmissionPolicy",
               "metadata": {"name": "x"}, "spec": spec})
    }

    fn minimal() -> ClusterAdmissionPolicy {
        ClusterAdmissionPolicy::from_document(&document(json!({
            "module": "registry://example/p:v1",
            "mutating": false,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
        })))
        .unwrap()
    }

    const MODULE: &str = "file:///tmp/annotated-policy.wasm";

    #[test]
    fn defaults_and_selectors_follow_the_controller() {
        let mut policy = minimal();
        assert_eq!(policy.mode(), "protect");
        let entry = &policies_file(std::slice::from_ref(&policy), MODULE).unwrap()["clusterwide-x"];
        assert_eq!(entry["settings"], Value::Null);
        for omitted in ["contextAwareResources", "message", "timeoutEvalSeconds"] {
            assert!(entry.get(omitted).is_none(), "{omitted}: {entry}");
        }
        let webhook =
            webhook_configuration(&policy, "https://127.0.0.1:1", "")["webhooks"][0].clone();
        assert_eq!(webhook["timeoutSeconds"], DEFAULT_TIMEOUT_SECONDS);
        for absent in [
            "failurePolicy",
            "matchPolicy",
            "objectSelector",
            "matchConditions",
        ] {
            assert!(webhook.get(absent).is_none(), "{absent}: {webhook}");
        }
        policy.spec["namespaceSelector"] = json!({"matchLabels": {"env": "prod"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]});
        let webhook =
            webhook_configuration(&policy, "https://127.0.0.1:1", "")["webhooks"][0].clone();
        assert_eq!(
            webhook["namespaceSelector"],
            json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kubewarden"]},
                {"key": "env", "operator": "In", "values": ["prod"]},
            ]})
        );
        policy.spec["allowInsideAdmissionControllerNamespace"] = json!(true);
        let webhook =
            webhook_configuration(&policy, "https://127.0.0.1:1", "")["webhooks"][0].clone();
        assert_eq!(
            webhook["namespaceSelector"],
            policy.spec["namespaceSelector"]
        );
    }

    /// The fields and defaults above are the CRD's: a Kubewarden release that adds a spec
    /// field (or changes a default) fails here until this file places it.
    #[test]
    fn every_field_of_the_crd_is_placed_and_the_defaults_are_the_crds() {
        let crd = yaml::read_documents(
            &repo().join("e2e-tests/manifests/kubewarden-clusteradmissionpolicy-crd.yaml"),
        )
        .unwrap()
        .remove(0);
        let version = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|version| version["name"] == "v1")
            .unwrap();
        let fields = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let mut in_crd: Vec<&str> = fields
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut placed: Vec<&str> = SPEC_FIELDS.iter().map(|(field, _)| *field).collect();
        in_crd.sort_unstable();
        placed.sort_unstable();
        assert_eq!(placed, in_crd);
        assert_eq!(fields["mode"]["default"], DEFAULT_MODE);
        assert_eq!(fields["timeoutSeconds"]["default"], DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(fields["policyServer"]["default"], DEFAULT_POLICY_SERVER);
    }

    /// The shipped policies judge only what the module declares; one that judges more is an
    /// error.
    #[test]
    fn rules_the_metadata_does_not_declare_are_an_error() {
        let declared = metadata_rules(&repo().join("metadata.yml")).unwrap();
        for policy in shipped() {
            check_rules_declared(&policy, &declared).unwrap();
        }
        let mut policy = shipped().remove(0);
        policy.spec["rules"][0]["operations"] = json!(["CONNECT"]);
        let error = check_rules_declared(&policy, &declared)
            .unwrap_err()
            .to_string();
        assert!(error.contains("metadata.yml does not declare"), "{error}");
    }

    #[test]
    fn matches_names_the_policies_a_resource_is_sent_to() {
        let policy = minimal();
        assert!(policy.matches("", "pods"));
        assert!(!policy.matches("", "namespaces"));
        assert!(!policy.matches("networking.k8s.io", "pods"));
        let pods: Vec<String> = shipped()
            .iter()
            .filter(|policy| policy.matches("", "pods"))
            .map(|policy| policy.name.clone())
            .collect();
        assert_eq!(pods.len(), 1, "one policy judges Pod CREATEs: {pods:?}");
    }

    #[test]
    fn bad_policies_are_refused_with_a_reason() {
        let rules = json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]);
        for (document, reason) in [
            (
                json!({"apiVersion": "v1", "kind": "ClusterAdmissionPolicy"}),
                "not a policies.kubewarden.io/v1",
            ),
            (
                json!({"apiVersion": "policies.kubewarden.io/v1", "metadata": {}, "spec": {}}),
                "without metadata.name",
            ),
            (
                document(json!({"mutating": true, "rules": rules})),
                "is mutating",
            ),
            (document(json!({"module": "m"})), "has no rules"),
            (
                document(json!({"rules": rules, "policyServer": "other"})),
                "names PolicyServer \"other\"",
            ),
            (
                document(json!({"rules": rules, "timeoutSecond": 3})),
                "spec.timeoutSecond is not a field",
            ),
        ] {
            let error = ClusterAdmissionPolicy::from_document(&document)
                .unwrap_err()
                .to_string();
            assert!(error.contains(reason), "{error}");
        }
        let mut other = minimal();
        other.name = "y".into();
        other.spec["module"] = json!("registry://example/q:v1");
        let error = policies_file(&[minimal(), other], MODULE)
            .unwrap_err()
            .to_string();
        assert!(error.contains("different modules"), "{error}");
        let error = policies_file(&[minimal(), minimal()], MODULE)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("two ClusterAdmissionPolicies named x"),
            "{error}"
        );
    }
}
