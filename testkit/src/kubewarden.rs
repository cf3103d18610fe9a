//! Kubewarden's controller, as far as the tests need it to put the policy in a real API
//! server's admission chain without Kubewarden: the ClusterAdmissionPolicy of
//! `deploy/admission-policy.yaml` read as the controller reads it, rendered into the
//! `ValidatingWebhookConfiguration` the controller would create for it, registered and
//! removed. The webhook points at the stand-in policy-server (`e2e-tests/webhook`,
//! `nsb-policy-server`) by URL, where Kubewarden points at its policy-server's Service.
//!
//! What is copied from Kubewarden, and from where (read in their sources, not guessed):
//! - The webhook configuration of a policy: `reconcileValidatingWebhookConfiguration` in
//!   kubewarden/kubewarden-controller `internal/controller/policy_subreconciler_webhook.go`
//!   (commit 04ee88d4f339): one webhook named `<unique name>.kubewarden.admission`, the
//!   policy's `rules`, `failurePolicy`, `matchPolicy`, `objectSelector`, `timeoutSeconds` and
//!   `matchConditions` as they are, `sideEffects` defaulting to `None`,
//!   `admissionReviewVersions: [v1]`, admission path `/validate/<unique name>`, the labels
//!   `app.kubernetes.io/part-of: kubewarden` and `kubewardenPolicyScope: cluster`, the
//!   annotations `kubewardenPolicyName` / `kubewardenPolicyNamespace`. The current monorepo
//!   (kubewarden/adm-controller `internal/controller/policy_subreconciler.go`, commit
//!   4c0b884e9d88) still dispatches a non-mutating policy to that function.
//! - The namespace selector of a ClusterAdmissionPolicy: `namespaceSelector` in the same
//!   file and the table of `policy_subreconciler_webhook_test.go` (commit a63d9ffdcd84):
//!   `kubernetes.io/metadata.name NotIn [<controller namespace>]` first, then the policy's
//!   own `matchExpressions`; with `allowInsideAdmissionControllerNamespace: true` the
//!   policy's selector unchanged.
//! - The defaults the CRD gives (`timeoutSeconds` 10, `failurePolicy` Fail): Kubewarden
//!   v1.35.0's CRD, as `e2e-tests/manifests/kubewarden-clusteradmissionpolicy-crd.yaml`
//!   copies it.
//! - The unique name `clusterwide-<name>`: `ClusterAdmissionPolicy.GetUniqueName` of the
//!   releases up to 1.35. The monorepo has since moved to an unambiguous `kw.<kind>.` encoding
//!   (its legacy-migration code names the old one); any name works for a stand-in as long as
//!   the path and the webhook agree, and both come from [`ClusterAdmissionPolicy::unique_name`].
//!
//! The rules come from `metadata.yml` (the one source `kwctl scaffold` renders a policy
//! from); a ClusterAdmissionPolicy whose rules differ is an error, not a silent choice.

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
/// `timeoutSeconds` when the policy sets none (the CRD's default).
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
/// The field manager the webhook configuration is applied with.
pub const FIELD_MANAGER: &str = "nsb-kubewarden-stand-in";

/// How the policy-server treats the policy's verdicts (`spec.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Verdicts are returned to the API server.
    Protect,
    /// Every request is allowed; verdicts are only logged.
    Monitor,
}

/// A `policies.kubewarden.io/v1` ClusterAdmissionPolicy, as read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterAdmissionPolicy {
    pub name: String,
    pub spec: Value,
}

impl ClusterAdmissionPolicy {
    /// The one ClusterAdmissionPolicy among the YAML documents of `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let documents =
            yaml::read_documents(path).with_context(|| format!("reading {}", path.display()))?;
        let mut policies = documents
            .iter()
            .filter(|document| document["kind"] == "ClusterAdmissionPolicy");
        let (Some(policy), None) = (policies.next(), policies.next()) else {
            bail!(
                "{} must hold exactly one ClusterAdmissionPolicy",
                path.display()
            );
        };
        Self::from_document(policy).with_context(|| format!("in {}", path.display()))
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
        ensure!(
            document["spec"].is_object(),
            "ClusterAdmissionPolicy {name} without a spec"
        );
        ensure!(
            document["spec"]["mutating"] != true,
            "ClusterAdmissionPolicy {name} is mutating: the stand-in only validates"
        );
        Ok(Self {
            name: name.to_owned(),
            spec: document["spec"].clone(),
        })
    }

    /// The name Kubewarden's controller gives the policy's webhook configuration and
    /// admission path.
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

    /// `spec.settings`, `{}` when absent (what the policy-server passes).
    pub fn settings(&self) -> Value {
        match &self.spec["settings"] {
            Value::Null => json!({}),
            settings => settings.clone(),
        }
    }

    /// `spec.mode` (`protect` when absent, the CRD's default).
    pub fn mode(&self) -> Result<Mode> {
        match self.spec["mode"].as_str().unwrap_or("protect") {
            "protect" => Ok(Mode::Protect),
            "monitor" => Ok(Mode::Monitor),
            other => bail!(
                "ClusterAdmissionPolicy {}: unknown mode {other:?}",
                self.name
            ),
        }
    }

    /// `spec.timeoutEvalSeconds`: how long one evaluation may run, when set.
    pub fn timeout_eval_seconds(&self) -> Option<u64> {
        self.spec["timeoutEvalSeconds"].as_u64()
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

/// The `rules` of a policy's `metadata.yml`.
pub fn metadata_rules(path: &Path) -> Result<Value> {
    let metadata = yaml::read_documents(path)
        .with_context(|| format!("reading {}", path.display()))?
        .into_iter()
        .next()
        .with_context(|| format!("{} is empty", path.display()))?;
    let rules = metadata["rules"].clone();
    ensure!(
        rules.as_array().is_some_and(|rules| !rules.is_empty()),
        "{} has no rules",
        path.display()
    );
    Ok(rules)
}

/// The `ValidatingWebhookConfiguration` Kubewarden's controller would create for `policy`,
/// its rules being `rules` (from `metadata.yml`), calling the policy-server at `server`
/// (`https://host:port`, the certificate signed by the CA `ca_pem`).
pub fn webhook_configuration(
    policy: &ClusterAdmissionPolicy,
    rules: &Value,
    server: &str,
    ca_pem: &str,
) -> Result<Value> {
    let spec = &policy.spec;
    if !spec["rules"].is_null() {
        ensure!(
            &spec["rules"] == rules,
            "the rules of ClusterAdmissionPolicy {} differ from metadata.yml's: {} against {rules}",
            policy.name,
            spec["rules"]
        );
    }
    let mut webhook = json!({
        "name": policy.webhook_name(),
        "clientConfig": {
            "url": format!("{}{}", server.trim_end_matches('/'), policy.validate_path()),
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        },
        "rules": rules,
        "failurePolicy": spec["failurePolicy"].as_str().unwrap_or("Fail"),
        "sideEffects": spec["sideEffects"].as_str().unwrap_or("None"),
        "timeoutSeconds": spec["timeoutSeconds"].as_i64().unwrap_or(DEFAULT_TIMEOUT_SECONDS),
        "admissionReviewVersions": ["v1"],
    });
    for (field, value) in [
        ("namespaceSelector", policy.namespace_selector()),
        ("objectSelector", spec["objectSelector"].clone()),
        ("matchPolicy", spec["matchPolicy"].clone()),
        ("matchConditions", spec["matchConditions"].clone()),
    ] {
        if !value.is_null() {
            webhook[field] = value;
        }
    }
    Ok(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": policy.unique_name(),
            "labels": {
                "app.kubernetes.io/part-of": "kubewarden",
                "kubewardenPolicyScope": "cluster",
            },
            "annotations": {
                "kubewardenPolicyName": policy.name,
                "kubewardenPolicyNamespace": "",
            },
        },
        "webhooks": [webhook],
    }))
}

fn configurations(client: &Client) -> Api<DynamicObject> {
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
    configurations(client)
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
    match configurations(client)
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

    fn shipped() -> ClusterAdmissionPolicy {
        ClusterAdmissionPolicy::read(&repo().join("deploy/admission-policy.yaml")).unwrap()
    }

    fn rendered(policy: &ClusterAdmissionPolicy) -> Value {
        let rules = metadata_rules(&repo().join("metadata.yml")).unwrap();
        webhook_configuration(
            policy,
            &rules,
            "https://127.0.0.1:8443",
            "-----BEGIN CERTIFICATE-----\n",
        )
        .unwrap()
    }

    #[test]
    fn the_shipped_policy_renders_as_kubewarden_renders_it() {
        let policy = shipped();
        let configuration = rendered(&policy);
        assert_eq!(
            configuration["metadata"]["name"],
            "clusterwide-namespace-baseline"
        );
        let webhook = &configuration["webhooks"][0];
        assert_eq!(
            webhook["name"],
            "clusterwide-namespace-baseline.kubewarden.admission"
        );
        assert_eq!(
            webhook["clientConfig"]["url"],
            "https://127.0.0.1:8443/validate/clusterwide-namespace-baseline"
        );
        assert_eq!(
            webhook["clientConfig"]["caBundle"],
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
        );
        assert_eq!(
            webhook["rules"],
            metadata_rules(&repo().join("metadata.yml")).unwrap()
        );
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["sideEffects"], "None");
        // The shipped policy's own timeout, as the controller copies it.
        assert_eq!(webhook["timeoutSeconds"], policy.spec["timeoutSeconds"]);
        assert_eq!(webhook["admissionReviewVersions"], json!(["v1"]));
        assert_eq!(
            webhook["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kubewarden"]}]})
        );
        for absent in ["objectSelector", "matchPolicy", "matchConditions"] {
            assert!(webhook.get(absent).is_none(), "{absent}: {webhook}");
        }
        assert_eq!(policy.mode().unwrap(), Mode::Protect);
        assert_eq!(policy.settings()["contextAware"], true);
    }

    #[test]
    fn defaults_and_selectors_follow_the_controller() {
        let mut policy = shipped();
        let spec = policy.spec.as_object_mut().unwrap();
        spec.remove("timeoutSeconds");
        spec.remove("failurePolicy");
        spec.insert(
            "namespaceSelector".into(),
            json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}),
        );
        let webhook = rendered(&policy)["webhooks"][0].clone();
        assert_eq!(webhook["timeoutSeconds"], DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(
            webhook["namespaceSelector"]["matchExpressions"],
            json!([
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kubewarden"]},
                {"key": "env", "operator": "In", "values": ["prod"]},
            ])
        );
        policy.spec["allowInsideAdmissionControllerNamespace"] = json!(true);
        policy.spec["namespaceSelector"] = json!({"matchLabels": {"env": "prod"}});
        let webhook = rendered(&policy)["webhooks"][0].clone();
        assert_eq!(
            webhook["namespaceSelector"],
            json!({"matchLabels": {"env": "prod"}})
        );
    }

    #[test]
    fn rules_that_differ_from_the_metadata_are_an_error() {
        let mut policy = shipped();
        policy.spec["rules"][0]["operations"] = json!(["CREATE"]);
        let rules = metadata_rules(&repo().join("metadata.yml")).unwrap();
        let error = webhook_configuration(&policy, &rules, "https://127.0.0.1:1", "")
            .unwrap_err()
            .to_string();
        assert!(error.contains("differ from metadata.yml"), "{error}");
    }

    #[test]
    fn bad_policies_are_refused_with_a_reason() {
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
                json!({"apiVersion": "policies.kubewarden.io/v1", "metadata": {"name": "x"}, "spec": {"mutating": true}}),
                "is mutating",
            ),
        ] {
            let error = ClusterAdmissionPolicy::from_document(&document)
                .unwrap_err()
                .to_string();
            assert!(error.contains(reason), "{error}");
        }
        let monitor = ClusterAdmissionPolicy::from_document(
            &json!({"apiVersion": "policies.kubewarden.io/v1", "metadata": {"name": "x"}, "spec": {"mode": "monitor"}}),
        )
        .unwrap();
        assert_eq!(monitor.mode().unwrap(), Mode::Monitor);
        assert_eq!(monitor.settings(), json!({}));
    }
}
