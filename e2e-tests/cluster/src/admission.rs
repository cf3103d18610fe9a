//! The admission policy in the API server's admission chain, through Kubewarden's own
//! policy-server (`POLICY_SERVER`, 1.35.0, installed by `e2e-tests/cluster-tests.sh`) but
//! without Kubewarden's controller: the policy-server runs as a local process, as the
//! policy-server's ServiceAccount with exactly the RBAC of `deploy/policy-server-rbac.yaml`,
//! serving every ClusterAdmissionPolicy of `deploy/admission-policy.yaml` from the annotated
//! module (`ANNOTATED_WASM`), and each policy gets the ValidatingWebhookConfiguration
//! the controller would create for it, pointing at that process. The configurations fail
//! closed (`failurePolicy: Fail`): a test must remove them before it ends
//! ([`AdmissionChain::remove`], and [`Cluster::connect`] removes those a test that died left),
//! else every later write they cover would fail.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use namespace_baseline_testkit::kubeconfig;
use namespace_baseline_testkit::kubewarden::{
    self, CONTROLLER_NAMESPACE, ClusterAdmissionPolicy, POLICY_SERVER_SERVICE_ACCOUNT,
};
use namespace_baseline_testkit::policy_server::{LogLevel, PolicyServerProcess, Spawn};
use namespace_baseline_testkit::policy_server_log::{PolicyServerLog, Review};
use serde_json::{Value, json};

use crate::{
    Cluster, TEST_MANAGER, can_i, client_from, read_yaml_documents, repo_root, wait_until,
};

pub use namespace_baseline_testkit::policy_server::{ENV_ANNOTATED_WASM, ENV_POLICY_SERVER};

/// The manifest whose ClusterAdmissionPolicies the chain runs.
pub fn admission_policy_path() -> PathBuf {
    repo_root().join("deploy/admission-policy.yaml")
}

/// The ClusterAdmissionPolicies of `deploy/admission-policy.yaml`.
pub fn shipped_policies() -> Result<Vec<ClusterAdmissionPolicy>> {
    ClusterAdmissionPolicy::read_all(&admission_policy_path())
}

/// How a test wants its policy-server.
#[derive(Debug, Clone, Copy)]
pub struct ChainOptions {
    /// `Debug` to read its reviews back ([`AdmissionChain::reviews`]); `Info` to measure it
    /// as a cluster runs it.
    pub log_level: LogLevel,
    /// `--workers`; `None`: its default, one per CPU.
    pub workers: Option<usize>,
    /// A grant of `deploy/policy-server-rbac.yaml` its ServiceAccount goes without (API
    /// group, resource), to see what a user meets then.
    pub without_grant: Option<(&'static str, &'static str)>,
    /// A label key the Pod rule's namespaceSelector also requires to exist: the chart's
    /// `admissionPolicy.pods.scope: [{key: KEY, operator: Exists}]`, set to the label the
    /// baselines select by.
    pub pod_scope: Option<&'static str>,
    /// The namespaceLabel (key, value) of a baseline the chart's `admissionPolicy.pods.inProcess`
    /// lists: the Pod rule's namespaceSelector leaves its namespaces out (`NotIn [value]`), as
    /// the chart renders it, since the API server gates their pods itself.
    pub pod_in_process: Option<(&'static str, &'static str)>,
}

/// What `options` adds to the Pod rule's `namespaceSelector.matchExpressions`, as the chart's
/// `admissionPolicy.pods.scope` and `inProcess` do.
pub fn pod_selector_additions(options: &ChainOptions) -> Vec<Value> {
    let mut additions = Vec::new();
    if let Some(key) = options.pod_scope {
        additions.push(json!({"key": key, "operator": "Exists"}));
    }
    if let Some((key, value)) = options.pod_in_process {
        additions.push(json!({"key": key, "operator": "NotIn", "values": [value]}));
    }
    additions
}

impl Default for ChainOptions {
    fn default() -> Self {
        Self {
            log_level: LogLevel::Debug,
            workers: None,
            without_grant: None,
            pod_scope: None,
            pod_in_process: None,
        }
    }
}

/// The policy-server serving, and the webhook configurations of its policies registered.
pub struct AdmissionChain {
    pub policies: Vec<ClusterAdmissionPolicy>,
    pub policy_server: PolicyServerProcess,
    /// What `policy-server --version` printed.
    pub version: String,
    /// The configurations, one per policy, as registered (JSON).
    pub configurations: Vec<Value>,
    admin: Client,
}

impl Cluster {
    /// The policy-server's namespace and ServiceAccount, and exactly what
    /// `deploy/policy-server-rbac.yaml` grants it, less the rules on `without` (API group,
    /// resource) when given: a policy-server whose ServiceAccount lacks that grant.
    pub async fn install_policy_server_identity(
        &self,
        without: Option<(&str, &str)>,
    ) -> Result<()> {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.admin.clone());
        namespaces
            .patch(
                CONTROLLER_NAMESPACE,
                &PatchParams::apply(TEST_MANAGER),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": CONTROLLER_NAMESPACE}})),
            )
            .await
            .context("creating the policy-server's namespace")?;
        self.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": POLICY_SERVER_SERVICE_ACCOUNT, "namespace": CONTROLLER_NAMESPACE}}))
            .await?;
        for mut object in read_yaml_documents(&repo_root().join("deploy/policy-server-rbac.yaml"))?
        {
            if let (Some((group, resource)), Some(rules)) = (
                without,
                object.get_mut("rules").and_then(Value::as_array_mut),
            ) {
                rules.retain(|rule| {
                    let listed = |field: &str, value: &str| {
                        rule[field]
                            .as_array()
                            .is_some_and(|values| values.iter().any(|v| v == value))
                    };
                    !(listed("apiGroups", group) && listed("resources", resource))
                });
            }
            self.apply(&object)
                .await
                .context("applying deploy/policy-server-rbac.yaml")?;
        }
        Ok(())
    }

    /// [`Self::start_admission_chain_with`] the default options (debug log).
    pub async fn start_admission_chain(&self) -> Result<AdmissionChain> {
        self.start_admission_chain_with(ChainOptions::default())
            .await
    }

    /// Starts policy-server as its ServiceAccount, serving the shipped policies, and
    /// registers a webhook configuration for each. The caller must [`AdmissionChain::remove`]
    /// it.
    pub async fn start_admission_chain_with(
        &self,
        options: ChainOptions,
    ) -> Result<AdmissionChain> {
        let binary = PolicyServerProcess::binary_from_env()?;
        let module = PolicyServerProcess::module_from_env()?;
        let version = PolicyServerProcess::version(&binary)?;
        let mut policies = shipped_policies()?;
        let additions = pod_selector_additions(&options);
        if !additions.is_empty() {
            let pods = policies
                .iter_mut()
                .find(|policy| policy.matches("", "pods"))
                .context("no shipped ClusterAdmissionPolicy judges pods")?;
            pods.spec["namespaceSelector"]["matchExpressions"]
                .as_array_mut()
                .context("the Pod rule's policy has no namespaceSelector.matchExpressions")?
                .extend(additions);
        }
        let declared = kubewarden::metadata_rules(&repo_root().join("metadata.yml"))?;
        for policy in &policies {
            kubewarden::check_rules_declared(policy, &declared)?;
        }
        self.install_policy_server_identity(options.without_grant)
            .await?;
        let kubeconfig = self.work_dir.join("policy-server.kubeconfig");
        kubeconfig::write_service_account_kubeconfig(
            &self.admin,
            serde_json::to_value(self.admin_cluster()?)?,
            (CONTROLLER_NAMESPACE, POLICY_SERVER_SERVICE_ACCOUNT),
            &kubeconfig,
        )
        .await?;
        if let Some((group, resource)) = options.without_grant {
            wait_denied(&kubeconfig, group, resource).await?;
        }
        let mut policy_server = PolicyServerProcess::spawn(Spawn {
            binary: &binary,
            kubeconfig: &kubeconfig,
            policies: &policies,
            module: &module,
            work_dir: &self.work_dir,
            log_level: options.log_level,
            workers: options.workers,
        })?;
        let ready = policy_server.wait_ready(Duration::from_secs(60)).await?;
        eprintln!(
            "{version} ({}) ready in {ready:.1?}, serving {} at {} from {}; log {}",
            binary.display(),
            policies
                .iter()
                .map(ClusterAdmissionPolicy::validate_path)
                .collect::<Vec<_>>()
                .join(", "),
            policy_server.server(),
            module.display(),
            policy_server.log.display()
        );
        let configurations = policies
            .iter()
            .map(|policy| {
                kubewarden::webhook_configuration(
                    policy,
                    &policy_server.server(),
                    &policy_server.ca_pem,
                )
            })
            .collect();
        let chain = AdmissionChain {
            policies,
            policy_server,
            version,
            configurations,
            admin: self.admin.clone(),
        };
        chain.register().await?;
        Ok(chain)
    }

    /// Runs `checks` with policy-server in the admission chain (debug log), and removes the
    /// chain whatever happened: the configurations must go before anything else runs on this
    /// API server (fail closed). When `checks` panicked, policy-server's log tail is printed
    /// and the panic is returned, for the caller to clean up before it resumes it.
    pub async fn with_admission_chain<T>(
        &self,
        checks: impl AsyncFnOnce(&AdmissionChain) -> T,
    ) -> std::thread::Result<T> {
        self.with_admission_chain_options(ChainOptions::default(), checks)
            .await
    }

    /// [`Self::with_admission_chain`] with a policy-server started with `options`.
    pub async fn with_admission_chain_options<T>(
        &self,
        options: ChainOptions,
        checks: impl AsyncFnOnce(&AdmissionChain) -> T,
    ) -> std::thread::Result<T> {
        self.with_mutable_admission_chain(options, async |chain| checks(chain).await)
            .await
    }

    /// [`Self::with_admission_chain_options`] for checks that stop and restart the
    /// policy-server ([`AdmissionChain::restart_policy_server`]).
    pub async fn with_mutable_admission_chain<T>(
        &self,
        options: ChainOptions,
        checks: impl AsyncFnOnce(&mut AdmissionChain) -> T,
    ) -> std::thread::Result<T> {
        let mut chain = self
            .start_admission_chain_with(options)
            .await
            .expect("policy-server in the admission chain");
        let checked = AssertUnwindSafe(checks(&mut chain)).catch_unwind().await;
        if checked.is_err() {
            eprintln!("policy-server:\n{}", chain.policy_server.log_tail(60));
        }
        let removed = chain.remove().await;
        match (&checked, removed) {
            (Ok(_), removed) => removed.expect("removing the webhook configurations"),
            (Err(_), Err(error)) => {
                eprintln!("!! removing the webhook configurations failed too: {error:#}");
            }
            (Err(_), Ok(())) => {}
        }
        checked
    }

    /// Removes the webhook configurations of the shipped policies that a dead test left
    /// behind.
    pub(crate) async fn remove_leftover_admission_chain(&self) -> Result<()> {
        for policy in shipped_policies()? {
            let name = policy.unique_name();
            if kubewarden::remove(&self.admin, &name).await? {
                eprintln!("removed the ValidatingWebhookConfiguration {name} an earlier test left");
            }
        }
        Ok(())
    }
}

/// A Pod CREATE as `client` in `namespace`, dry run: the whole admission chain runs (a webhook
/// gets `dryRun: true`, and every policy here has `sideEffects: None`), nothing is stored.
/// `Ok(Err((code, message)))` when the API server refuses it.
pub async fn dry_run_pod_create(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<std::result::Result<(), (u16, String)>> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "registry.invalid/never-pulled"}]},
    }))?;
    dry_run_create(client, namespace, &pod).await
}

/// `pod` created as `client` in `namespace`, dry run, as [`dry_run_pod_create`] does.
pub async fn dry_run_create(
    client: &Client,
    namespace: &str,
    pod: &Pod,
) -> Result<std::result::Result<(), (u16, String)>> {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&dry_run, pod)
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(status)) => Ok(Err((status.code, status.message))),
        Err(error) => Err(error).with_context(|| format!("creating a pod in {namespace}")),
    }
}

impl Cluster {
    /// The `default` ServiceAccount of `namespace`, which every Pod CREATE there needs (the
    /// API server's ServiceAccount admission; no controller-manager runs here to make it).
    pub async fn default_service_account(&self, namespace: &str) -> Result<()> {
        self.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": namespace}}))
            .await
            .map(|_| ())
    }
}

/// Waits until the API server's authorizer denies the identity of `kubeconfig` (the
/// policy-server's ServiceAccount) `list` on `resource`: a ClusterRole change reaches the
/// authorizer through its own watch, and a policy-server started before it would still be
/// granted its first read, so a test of the missing grant would test nothing.
async fn wait_denied(kubeconfig: &Path, group: &str, resource: &str) -> Result<()> {
    let client = client_from(Kubeconfig::read_from(kubeconfig)?).await?;
    let what = format!("the policy-server's ServiceAccount denied list {resource}.{group}");
    wait_until(&what, Duration::from_secs(10), || async {
        let allowed = can_i(&client, "list", group, resource, None, None).await?;
        Ok((!allowed).then_some(()))
    })
    .await?;
    Ok(())
}

/// Waits until the API server sends Pod CREATEs in `namespace` to the policy-server
/// (`judged`), or no longer does (three in a row not reviewed), from dry-run creates whose
/// reviews `reviewed` looks for in the policy-server's debug log: a webhook's answer is logged
/// before the API server answers the create. Returns how long it took.
pub async fn wait_pods_judged(
    client: &Client,
    namespace: &str,
    judged: bool,
    timeout: Duration,
    reviewed: impl AsyncFn(&str) -> Result<bool>,
) -> Result<Duration> {
    let attempt = std::cell::Cell::new(0);
    let unreviewed_in_a_row = std::cell::Cell::new(0);
    let what = format!(
        "Pod CREATEs in {namespace} {} policy-server",
        if judged {
            "sent to"
        } else {
            "no longer sent to"
        }
    );
    let reviewed = &reviewed;
    let (_, took) = wait_until(&what, timeout, || {
        attempt.set(attempt.get() + 1);
        let name = format!("judged-check-{}", attempt.get());
        let unreviewed_in_a_row = &unreviewed_in_a_row;
        async move {
            if let Err((code, message)) = dry_run_pod_create(client, namespace, &name).await? {
                eprintln!("dry-run create of pod {namespace}/{name}: {code} {message}");
            }
            let reviewed = reviewed(&name).await?;
            unreviewed_in_a_row.set(if reviewed {
                0
            } else {
                unreviewed_in_a_row.get() + 1
            });
            let settled = if judged {
                reviewed
            } else {
                unreviewed_in_a_row.get() >= 3
            };
            Ok(settled.then_some(()))
        }
    })
    .await?;
    Ok(took)
}

impl AdmissionChain {
    /// [`wait_pods_judged`] through this chain's policy-server (its debug log).
    pub async fn wait_pods_judged(
        &self,
        client: &Client,
        namespace: &str,
        judged: bool,
        timeout: Duration,
    ) -> Result<Duration> {
        wait_pods_judged(client, namespace, judged, timeout, async |name: &str| {
            Ok(self.reviewed_pod(name))
        })
        .await
    }

    /// The policy whose rules send `resource` (`pods`, `networkpolicies`, `namespaces`) of the
    /// API group `group` to the policy-server.
    pub fn policy_for(&self, group: &str, resource: &str) -> &ClusterAdmissionPolicy {
        kubewarden::policy_for(&self.policies, group, resource)
    }

    /// How the API server begins a refusal of `resource` by its webhook.
    pub fn denied_by(&self, group: &str, resource: &str) -> String {
        format!(
            "admission webhook \"{}\" denied the request: ",
            self.policy_for(group, resource).webhook_name()
        )
    }

    /// (Re-)registers every webhook configuration.
    pub async fn register(&self) -> Result<()> {
        for configuration in &self.configurations {
            kubewarden::register(&self.admin, configuration).await?;
        }
        Ok(())
    }

    /// Registers the configurations with every rule that sends `resource` of `group` taken
    /// out (a configuration left with no rule is removed): the chain as if the policies did
    /// not judge that resource, e.g. the Pod CREATE gate off.
    pub async fn register_without(&self, group: &str, resource: &str) -> Result<()> {
        for configuration in &self.configurations {
            let name = configuration["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            match without_resource(configuration, group, resource) {
                Some(narrowed) => kubewarden::register(&self.admin, &narrowed).await?,
                None => {
                    kubewarden::remove(&self.admin, name).await?;
                }
            }
        }
        Ok(())
    }

    /// Removes the webhook configurations (policy-server keeps running until dropped).
    pub async fn unregister(&self) -> Result<()> {
        for policy in &self.policies {
            kubewarden::remove(&self.admin, &policy.unique_name()).await?;
        }
        Ok(())
    }

    /// Starts the policy-server again after it was stopped (`policy_server.kill()`: an
    /// outage), on the same address and certificate: the webhook configurations are left as
    /// they are. Returns how long it took to be ready.
    pub async fn restart_policy_server(&mut self) -> Result<Duration> {
        self.policy_server.restart()?;
        self.policy_server.wait_ready(Duration::from_secs(60)).await
    }

    /// Removes the configurations and stops policy-server.
    pub async fn remove(mut self) -> Result<()> {
        let removed = self.unregister().await;
        self.policy_server.kill();
        removed
    }

    /// policy-server's log so far.
    pub fn log(&self) -> PolicyServerLog {
        self.policy_server.log()
    }

    /// The AdmissionReviews policy-server answered so far (with the debug log).
    pub fn reviews(&self) -> Vec<Review> {
        self.log().reviews()
    }

    /// Whether policy-server answered a review of the Pod named `name` (with the debug log).
    pub fn reviewed_pod(&self, name: &str) -> bool {
        self.reviews()
            .iter()
            .any(|review| review.resource == "v1/pods" && review.name == name)
    }
}

/// `configuration` without `resource` of `group` in any of its webhooks' rules; `None` when no
/// rule is left.
fn without_resource(configuration: &Value, group: &str, resource: &str) -> Option<Value> {
    let mut configuration = configuration.clone();
    let mut rules_left = 0;
    for webhook in configuration["webhooks"].as_array_mut()? {
        let Some(rules) = webhook["rules"].as_array_mut() else {
            continue;
        };
        for rule in rules.iter_mut() {
            let in_group = rule["apiGroups"]
                .as_array()
                .is_some_and(|groups| groups.iter().any(|g| g == group));
            if let (true, Some(resources)) = (in_group, rule["resources"].as_array_mut()) {
                resources.retain(|r| r != resource);
            }
        }
        rules.retain(|rule| {
            rule["resources"]
                .as_array()
                .is_some_and(|resources| !resources.is_empty())
        });
        rules_left += rules.len();
    }
    (rules_left > 0).then_some(configuration)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(rules: Value) -> Value {
        json!({"metadata": {"name": "c"}, "webhooks": [{"name": "w", "rules": rules}]})
    }

    #[test]
    fn a_resource_taken_out_of_the_rules() {
        let both = configuration(json!([
            {"apiGroups": [""], "resources": ["namespaces", "namespaces/status"], "operations": ["UPDATE"]},
            {"apiGroups": [""], "resources": ["pods"], "operations": ["CREATE"]},
        ]));
        let narrowed = without_resource(&both, "", "pods").unwrap();
        assert_eq!(
            narrowed["webhooks"][0]["rules"],
            json!([{"apiGroups": [""], "resources": ["namespaces", "namespaces/status"], "operations": ["UPDATE"]}])
        );
        assert_eq!(
            without_resource(&both, "", "namespaces").unwrap()["webhooks"][0]["rules"][0]["resources"],
            json!(["namespaces/status"])
        );
        // Another group's resource of that name stays.
        assert_eq!(without_resource(&both, "apps", "pods").unwrap(), both);
        let pods_only = configuration(json!([
            {"apiGroups": [""], "resources": ["pods"], "operations": ["CREATE"]},
        ]));
        assert_eq!(without_resource(&pods_only, "", "pods"), None);
    }

    #[test]
    fn every_resource_the_tests_touch_has_its_policy() {
        let policies = shipped_policies().unwrap();
        for (group, resource) in [
            ("", "pods"),
            ("", "namespaces"),
            ("networking.k8s.io", "networkpolicies"),
        ] {
            assert!(
                policies.iter().any(|p| p.matches(group, resource)),
                "{group}/{resource}"
            );
        }
    }
}
