//! The policy in the admission chain as users run it, on the test node: Kubewarden 1.35 installed
//! from its own charts (`e2e-tests/node/kubewarden.sh`: the controller and the `default`
//! PolicyServer, the module pushed to the node's registry), our ClusterAdmissionPolicies applied
//! with only their module changed to the pushed one, and the controller turning them into the
//! policy-server's configuration, its Deployment's rollout and the webhook configurations. The
//! node tests read what a user reads: each policy's `status.policyStatus`, the policy-server
//! pods' own log, the API server's answers.
//!
//! Where there is no kubelet (the cluster tests) the policy-server runs as a local process
//! instead ([`crate::admission`]).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use namespace_baseline_testkit::kubewarden::{
    self, CONTROLLER_NAMESPACE, ClusterAdmissionPolicy, DEFAULT_POLICY_SERVER,
};
use namespace_baseline_testkit::policy_server_log::PolicyServerLog;
use serde_json::{Value, json};

use crate::admission::{ChainOptions, pod_selector_additions, shipped_policies};
use crate::{Cluster, TEST_MANAGER, wait_until};

/// What `e2e-tests/node/kubewarden.sh` wrote to the node's env: the policy's reference by
/// digest in the node's registry.
pub const ENV_POLICY_REF: &str = "NSB_POLICY_REF";
/// The node's registry (`host:port`) and the CA its certificate is signed by.
pub const ENV_REGISTRY: &str = "NSB_NODE_REGISTRY";
pub const ENV_REGISTRY_CA: &str = "NSB_NODE_REGISTRY_CA";
/// How long a policy may take from its apply to `active` (the controller renders the
/// configuration, rolls the policy-server's Deployment, the new pods pull and compile the
/// module and are ready).
pub const ACTIVE_WITHIN: Duration = Duration::from_secs(180);

/// The ClusterAdmissionPolicy kind, for dynamic requests.
pub fn cluster_admission_policies(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("policies.kubewarden.io", "v1", "ClusterAdmissionPolicy");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// The PolicyServer kind.
pub fn policy_servers(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("policies.kubewarden.io", "v1", "PolicyServer");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// The Deployment the controller runs a PolicyServer as.
pub fn deployment_name(policy_server: &str) -> String {
    format!("policy-server-{policy_server}")
}

/// The policy's reference in the node's registry, by digest (`registry://…@sha256:…`).
pub fn pushed_module() -> Result<String> {
    let reference = std::env::var(ENV_POLICY_REF).with_context(|| {
        format!(
            "{ENV_POLICY_REF} is not set: Kubewarden is not installed on this node (e2e-tests/node/kubewarden.sh, run by e2e-tests/node-tests.sh unless NSB_NODE_KUBEWARDEN=0)"
        )
    })?;
    ensure!(
        reference.starts_with("registry://") && reference.contains("@sha256:"),
        "{ENV_POLICY_REF}={reference}: not a registry:// reference by digest"
    );
    Ok(reference)
}

/// `policy` as a user applies it here: the shipped manifest with its module changed to
/// `module`, and with `options.pod_scope` and `pod_in_process` the chart's
/// `admissionPolicy.pods.scope` and `inProcess`.
pub fn as_applied(
    mut policy: ClusterAdmissionPolicy,
    module: &str,
    options: &ChainOptions,
) -> Result<ClusterAdmissionPolicy> {
    policy.spec["module"] = json!(module);
    let additions = pod_selector_additions(options);
    if !additions.is_empty() && policy.matches("", "pods") {
        policy.spec["namespaceSelector"]["matchExpressions"]
            .as_array_mut()
            .context("the Pod rule's policy has no namespaceSelector.matchExpressions")?
            .extend(additions);
    }
    Ok(policy)
}

/// The document of `policy`, to apply.
pub fn document(policy: &ClusterAdmissionPolicy) -> Value {
    json!({
        "apiVersion": "policies.kubewarden.io/v1",
        "kind": "ClusterAdmissionPolicy",
        "metadata": {"name": policy.name},
        "spec": policy.spec,
    })
}

/// Our ClusterAdmissionPolicies, served by the `default` PolicyServer of the node's
/// Kubewarden. The caller must [`ControllerChain::remove`] them (they fail closed).
pub struct ControllerChain {
    /// As applied (module by digest, scope added).
    pub policies: Vec<ClusterAdmissionPolicy>,
    admin: Client,
}

impl Cluster {
    /// The shipped ClusterAdmissionPolicies as a user applies them here (module: the one
    /// pushed to the node's registry; `options.pod_scope` added).
    pub fn shipped_as_applied(options: &ChainOptions) -> Result<Vec<ClusterAdmissionPolicy>> {
        ensure!(
            options.without_grant.is_none() && options.workers.is_none(),
            "a PolicyServer of Kubewarden's controller runs with the grants and workers its chart gives it"
        );
        let module = pushed_module()?;
        shipped_policies()?
            .into_iter()
            .map(|policy| as_applied(policy, &module, options))
            .collect()
    }

    /// Applies `policies` (with deploy/policy-server-rbac.yaml's grants) and waits until each
    /// is `active` and its webhook configuration is in place.
    pub async fn apply_policies(
        &self,
        policies: Vec<ClusterAdmissionPolicy>,
    ) -> Result<ControllerChain> {
        self.install_policy_server_access().await?;
        let chain = ControllerChain {
            policies,
            admin: self.admin.clone(),
        };
        chain.apply_all().await?;
        let took = chain.wait_active(ACTIVE_WITHIN).await?;
        eprintln!(
            "ClusterAdmissionPolicies {} active {took:.1?} after their apply, served by PolicyServer {DEFAULT_POLICY_SERVER}",
            chain
                .policies
                .iter()
                .map(|policy| format!(
                    "{} ({})",
                    policy.name,
                    policy.spec["module"].as_str().unwrap_or("?")
                ))
                .collect::<Vec<_>>()
                .join(", "),
        );
        Ok(chain)
    }

    /// What `deploy/policy-server-rbac.yaml` grants the `default` PolicyServer's
    /// ServiceAccount (the policy's reads of baselines, Namespaces and NetworkPolicies).
    pub async fn install_policy_server_access(&self) -> Result<()> {
        for object in
            crate::read_yaml_documents(&crate::repo_root().join("deploy/policy-server-rbac.yaml"))?
        {
            self.apply(&object)
                .await
                .context("applying deploy/policy-server-rbac.yaml")?;
        }
        Ok(())
    }

    /// Runs `checks` with the shipped policies in the node's Kubewarden
    /// ([`Self::with_policies`]).
    pub async fn with_controller_chain<T>(
        &self,
        options: ChainOptions,
        checks: impl AsyncFnOnce(&ControllerChain) -> T,
    ) -> std::thread::Result<T> {
        let policies =
            Self::shipped_as_applied(&options).expect("the shipped policies, as applied");
        self.with_policies(policies, checks).await
    }

    /// Runs `checks` with `policies` active in the node's Kubewarden, and removes them
    /// whatever happened (they fail closed). When `checks` panicked, the policy-server's log
    /// tail is printed and the panic is returned, for the caller to clean up before it
    /// resumes it.
    pub async fn with_policies<T>(
        &self,
        policies: Vec<ClusterAdmissionPolicy>,
        checks: impl AsyncFnOnce(&ControllerChain) -> T,
    ) -> std::thread::Result<T> {
        use futures::FutureExt as _;
        let chain = self
            .apply_policies(policies)
            .await
            .expect("our ClusterAdmissionPolicies active in the node's Kubewarden");
        let checked = std::panic::AssertUnwindSafe(checks(&chain))
            .catch_unwind()
            .await;
        if checked.is_err() {
            match chain.policy_server_log_text().await {
                Ok(text) => eprintln!(
                    "policy-server (last lines):\n{}",
                    text.lines()
                        .rev()
                        .take(60)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                Err(error) => eprintln!("policy-server's log could not be read: {error:#}"),
            }
        }
        let removed = chain.remove().await;
        match (&checked, removed) {
            (Ok(_), removed) => removed.expect("removing our ClusterAdmissionPolicies"),
            (Err(_), Err(error)) => {
                eprintln!("!! removing our ClusterAdmissionPolicies failed too: {error:#}")
            }
            (Err(_), Ok(())) => {}
        }
        checked
    }

    /// Deletes our ClusterAdmissionPolicies a dead test left in the node's Kubewarden (none
    /// where Kubewarden is not installed).
    pub(crate) async fn remove_leftover_policies(&self) -> Result<()> {
        for policy in shipped_policies()? {
            match cluster_admission_policies(&self.admin)
                .delete(&policy.name, &DeleteParams::default())
                .await
            {
                Ok(_) => eprintln!(
                    "deleting the ClusterAdmissionPolicy {} an earlier test left",
                    policy.name
                ),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    return Err(error).context("deleting a leftover ClusterAdmissionPolicy");
                }
            }
        }
        Ok(())
    }
}

impl ControllerChain {
    /// The client the chain was applied with (the cluster's admin).
    pub fn client(&self) -> &Client {
        &self.admin
    }

    /// The configuration version the controller stamps on the policy-server's Deployment
    /// (`kubewarden/config-version`): it changes with every change of its policies.
    pub async fn config_version(&self) -> Result<String> {
        let deployments: Api<Deployment> =
            Api::namespaced(self.admin.clone(), CONTROLLER_NAMESPACE);
        let name = deployment_name(DEFAULT_POLICY_SERVER);
        let deployment = deployments
            .get(&name)
            .await
            .with_context(|| format!("reading Deployment {name}"))?;
        Ok(deployment
            .metadata
            .annotations
            .and_then(|annotations| annotations.get("kubewarden/config-version").cloned())
            .unwrap_or_default())
    }

    /// Server-side applies every policy.
    pub async fn apply_all(&self) -> Result<()> {
        for policy in &self.policies {
            self.apply(policy).await?;
        }
        Ok(())
    }

    /// Server-side applies `policy` (created, or changed in place).
    pub async fn apply(&self, policy: &ClusterAdmissionPolicy) -> Result<()> {
        cluster_admission_policies(&self.admin)
            .patch(
                &policy.name,
                &PatchParams::apply(TEST_MANAGER).force(),
                &Patch::Apply(document(policy)),
            )
            .await
            .with_context(|| format!("applying ClusterAdmissionPolicy {}", policy.name))?;
        Ok(())
    }

    /// `status.policyStatus` of each policy (empty before the controller wrote one).
    pub async fn statuses(&self) -> Result<BTreeMap<String, String>> {
        let api = cluster_admission_policies(&self.admin);
        let mut statuses = BTreeMap::new();
        for policy in &self.policies {
            let object = api
                .get_opt(&policy.name)
                .await
                .with_context(|| format!("reading ClusterAdmissionPolicy {}", policy.name))?;
            let status = object
                .and_then(|object| {
                    object.data["status"]["policyStatus"]
                        .as_str()
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            statuses.insert(policy.name.clone(), status);
        }
        Ok(statuses)
    }

    /// The whole status of `name` (what `kubectl get clusteradmissionpolicy -o yaml` shows).
    pub async fn status_of(&self, name: &str) -> Result<Value> {
        Ok(cluster_admission_policies(&self.admin)
            .get(name)
            .await
            .with_context(|| format!("reading ClusterAdmissionPolicy {name}"))?
            .data["status"]
            .clone())
    }

    /// Waits until every policy is `active` and its webhook configuration exists; returns how
    /// long it took.
    pub async fn wait_active(&self, timeout: Duration) -> Result<Duration> {
        let last = std::cell::RefCell::new(BTreeMap::new());
        let waited = wait_until("our ClusterAdmissionPolicies active", timeout, || async {
            let statuses = self.statuses().await?;
            let all_active = statuses.values().all(|status| status == "active");
            *last.borrow_mut() = statuses;
            if !all_active {
                return Ok(None);
            }
            for policy in &self.policies {
                if self.webhook_configuration(policy).await?.is_none() {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })
        .await;
        match waited {
            Ok((_, took)) => Ok(took),
            Err(error) => {
                let mut report = format!("{error:#}; policyStatus: {:?}", last.borrow());
                for policy in &self.policies {
                    if let Ok(status) = self.status_of(&policy.name).await {
                        report.push_str(&format!("\n{} status: {status}", policy.name));
                    }
                }
                bail!("{report}")
            }
        }
    }

    /// The ValidatingWebhookConfiguration the controller made for `policy`, if any.
    pub async fn webhook_configuration(
        &self,
        policy: &ClusterAdmissionPolicy,
    ) -> Result<Option<Value>> {
        Ok(kubewarden::webhook_configurations(&self.admin)
            .get_opt(&policy.unique_name())
            .await
            .context("reading a ValidatingWebhookConfiguration")?
            .map(|object| serde_json::to_value(object).expect("an object serializes")))
    }

    /// The policy whose rules send `resource` of `group` to the policy-server.
    pub fn policy_for(&self, group: &str, resource: &str) -> &ClusterAdmissionPolicy {
        kubewarden::policy_for(&self.policies, group, resource)
    }

    /// Deletes the policy `name` and waits until the controller removed its webhook
    /// configuration (the API server no longer sends it anything).
    pub async fn delete(&self, name: &str) -> Result<Duration> {
        self.delete_all(&[name]).await
    }

    /// Deletes the policies `names` together (one change of the policy-server's
    /// configuration, one rollout), then waits until they and their webhook configurations
    /// are gone.
    async fn delete_all(&self, names: &[&str]) -> Result<Duration> {
        let api = cluster_admission_policies(&self.admin);
        for name in names {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    return Err(error)
                        .with_context(|| format!("deleting ClusterAdmissionPolicy {name}"));
                }
            }
        }
        let policies: Vec<&ClusterAdmissionPolicy> = self
            .policies
            .iter()
            .filter(|policy| names.contains(&policy.name.as_str()))
            .collect();
        ensure!(
            policies.len() == names.len(),
            "not every one of {names:?} is in this chain"
        );
        let (_, took) = wait_until(
            &format!("ClusterAdmissionPolicies {names:?} and their webhook configurations gone"),
            ACTIVE_WITHIN,
            || async {
                for policy in &policies {
                    if api.get_opt(&policy.name).await?.is_some()
                        || self.webhook_configuration(policy).await?.is_some()
                    {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
        .await?;
        Ok(took)
    }

    /// Deletes every policy and waits until they and their webhook configurations are gone.
    pub async fn remove(self) -> Result<()> {
        let names: Vec<&str> = self
            .policies
            .iter()
            .map(|policy| policy.name.as_str())
            .collect();
        self.delete_all(&names).await.map(|_| ())
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), CONTROLLER_NAMESPACE)
    }

    /// The pods of the `default` PolicyServer's Deployment (any phase).
    pub async fn policy_server_pods(&self) -> Result<Vec<Pod>> {
        Ok(self
            .pods()
            .list(
                &ListParams::default()
                    .labels(&format!("kubewarden/policy-server={DEFAULT_POLICY_SERVER}")),
            )
            .await
            .context("listing the policy-server's pods")?
            .items)
    }

    /// The logs of every current pod of the `default` PolicyServer, one after the other.
    pub async fn policy_server_log_text(&self) -> Result<String> {
        self.policy_server_log_since(None).await
    }

    /// [`Self::policy_server_log_text`], only the lines of the last `seconds` when given (the
    /// debug log grows by every review: a poll reads what is new).
    pub async fn policy_server_log_since(&self, seconds: Option<i64>) -> Result<String> {
        let params = LogParams {
            since_seconds: seconds,
            ..LogParams::default()
        };
        let mut text = String::new();
        for pod in self.policy_server_pods().await? {
            let name = pod.metadata.name.unwrap_or_default();
            match self.pods().logs(&name, &params).await {
                Ok(log) => text.push_str(&log),
                // A pod just created has no container yet: nothing logged.
                Err(kube::Error::Api(status)) if status.code == 400 => {}
                Err(error) => {
                    return Err(error).with_context(|| format!("reading the log of pod {name}"));
                }
            }
        }
        Ok(text)
    }

    /// The policy-server's log (JSON lines), parsed.
    pub async fn log(&self) -> Result<PolicyServerLog> {
        Ok(PolicyServerLog::parse(
            &self.policy_server_log_text().await?,
        ))
    }

    /// Whether a policy-server pod answered a review of the Pod named `name` in the last
    /// minute.
    pub async fn reviewed_pod(&self, name: &str) -> Result<bool> {
        Ok(
            PolicyServerLog::parse(&self.policy_server_log_since(Some(60)).await?)
                .reviews()
                .iter()
                .any(|review| review.resource == "v1/pods" && review.name == name),
        )
    }

    /// [`crate::admission::wait_pods_judged`] through the policy-server's pods (their log).
    pub async fn wait_pods_judged(
        &self,
        client: &Client,
        namespace: &str,
        judged: bool,
        timeout: Duration,
    ) -> Result<Duration> {
        crate::admission::wait_pods_judged(
            client,
            namespace,
            judged,
            timeout,
            async |name: &str| self.reviewed_pod(name).await,
        )
        .await
    }

    /// Sets the `default` PolicyServer's replicas (the controller scales its Deployment).
    pub async fn set_replicas(&self, replicas: u32) -> Result<()> {
        policy_servers(&self.admin)
            .patch(
                DEFAULT_POLICY_SERVER,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .context("scaling the default PolicyServer")?;
        Ok(())
    }

    /// Waits until the policy-server's Deployment has seen its latest spec and has `replicas`
    /// ready and up to date, and no other pod; returns how long it took.
    pub async fn wait_policy_server(&self, replicas: i32, timeout: Duration) -> Result<Duration> {
        let deployments: Api<Deployment> =
            Api::namespaced(self.admin.clone(), CONTROLLER_NAMESPACE);
        let name = deployment_name(DEFAULT_POLICY_SERVER);
        let (_, took) = wait_until(
            &format!("{replicas} ready replicas of Deployment {name}, and no other pod"),
            timeout,
            || async {
                let deployment = deployments.get(&name).await?;
                // The Deployment controller has seen its latest spec: a rollout the controller
                // just asked for is in the status, not yet to come.
                let observed = deployment
                    .status
                    .as_ref()
                    .and_then(|s| s.observed_generation)
                    == deployment.metadata.generation;
                let status = deployment.status.unwrap_or_default();
                let settled = observed
                    && status.ready_replicas.unwrap_or(0) == replicas
                    && status.updated_replicas.unwrap_or(0) == replicas
                    && status.replicas.unwrap_or(0) == replicas
                    && self.policy_server_pods().await?.len() == replicas as usize;
                Ok(settled.then_some(()))
            },
        )
        .await?;
        Ok(took)
    }
}
