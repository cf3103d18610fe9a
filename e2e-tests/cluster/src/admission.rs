//! The admission policy in the API server's admission chain, without Kubewarden: the stand-in
//! policy-server (`NSB_WEBHOOK_BIN`, built by `e2e-tests/cluster-tests.sh`) run as the
//! policy-server's ServiceAccount with the RBAC of `deploy/policy-server-rbac.yaml`, and the
//! ValidatingWebhookConfiguration Kubewarden's controller would create for
//! `deploy/admission-policy.yaml` pointing at it. The configuration fails closed
//! (`failurePolicy: Fail`): a test must remove it before it ends ([`AdmissionChain::remove`],
//! and [`Cluster::connect`] removes one left by a test that died), else every later
//! NetworkPolicy write would fail.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::FutureExt as _;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use namespace_baseline_testkit::kubeconfig;
use namespace_baseline_testkit::kubewarden::{
    self, CONTROLLER_NAMESPACE, ClusterAdmissionPolicy, POLICY_SERVER_SERVICE_ACCOUNT,
};
use namespace_baseline_testkit::policy_server::{PolicyServerProcess, Spawn};
use serde_json::json;

use crate::{Cluster, TEST_MANAGER, read_yaml_documents, repo_root};

pub use namespace_baseline_testkit::policy_server::ENV_WEBHOOK_BIN;

/// The ClusterAdmissionPolicy the chain runs.
pub fn admission_policy_path() -> PathBuf {
    repo_root().join("deploy/admission-policy.yaml")
}

/// The ClusterAdmissionPolicy of `deploy/admission-policy.yaml`.
pub fn shipped_policy() -> Result<ClusterAdmissionPolicy> {
    ClusterAdmissionPolicy::read(&admission_policy_path())
}

/// The stand-in serving, and its webhook configuration registered.
pub struct AdmissionChain {
    pub policy: ClusterAdmissionPolicy,
    pub policy_server: PolicyServerProcess,
    /// The configuration as registered (JSON).
    pub configuration: serde_json::Value,
    admin: Client,
}

impl Cluster {
    /// The policy-server's namespace and ServiceAccount, and what `deploy/policy-server-rbac.yaml`
    /// grants it.
    pub async fn install_policy_server_identity(&self) -> Result<()> {
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
        for object in read_yaml_documents(&repo_root().join("deploy/policy-server-rbac.yaml"))? {
            self.apply(&object)
                .await
                .context("applying deploy/policy-server-rbac.yaml")?;
        }
        Ok(())
    }

    /// Starts the stand-in as the policy-server's ServiceAccount and registers the webhook
    /// configuration for it. The caller must [`AdmissionChain::remove`] it.
    pub async fn start_admission_chain(&self) -> Result<AdmissionChain> {
        let binary = PolicyServerProcess::binary_from_env()?;
        self.install_policy_server_identity().await?;
        let kubeconfig = self.work_dir.join("policy-server.kubeconfig");
        kubeconfig::write_service_account_kubeconfig(
            &self.admin,
            serde_json::to_value(self.admin_cluster()?)?,
            (CONTROLLER_NAMESPACE, POLICY_SERVER_SERVICE_ACCOUNT),
            &kubeconfig,
        )
        .await?;
        let wasm = PolicyServerProcess::wasm_from_env(&repo_root());
        let policy_path = admission_policy_path();
        let mut policy_server = PolicyServerProcess::spawn(Spawn {
            binary: &binary,
            kubeconfig: &kubeconfig,
            wasm: &wasm,
            admission_policy: &policy_path,
            work_dir: &self.work_dir,
        })?;
        let ca_pem = policy_server.wait_ready(Duration::from_secs(60)).await?;
        eprintln!(
            "started the stand-in policy-server ({}, {}, log {})",
            policy_server.server(),
            wasm.display(),
            policy_server.log.display()
        );
        let policy = shipped_policy()?;
        let rules = kubewarden::metadata_rules(&repo_root().join("metadata.yml"))?;
        let configuration =
            kubewarden::webhook_configuration(&policy, &rules, &policy_server.server(), &ca_pem)?;
        let chain = AdmissionChain {
            policy,
            policy_server,
            configuration,
            admin: self.admin.clone(),
        };
        chain.register().await?;
        Ok(chain)
    }

    /// Runs `checks` with the stand-in policy-server in the admission chain, and removes the
    /// chain whatever happened: the configuration must go before anything else runs on this
    /// API server (fail closed). When `checks` panicked, the stand-in's log tail is printed
    /// and the panic is returned, for the caller to clean up before it resumes it.
    pub async fn with_admission_chain<T>(
        &self,
        checks: impl AsyncFnOnce(&AdmissionChain) -> T,
    ) -> std::thread::Result<T> {
        let chain = self
            .start_admission_chain()
            .await
            .expect("the stand-in policy-server in the admission chain");
        let checked = AssertUnwindSafe(checks(&chain)).catch_unwind().await;
        if checked.is_err() {
            eprintln!(
                "stand-in policy-server:\n{}",
                chain.policy_server.log_tail(60)
            );
        }
        let removed = chain.remove().await;
        match (&checked, removed) {
            (Ok(_), removed) => removed.expect("removing the webhook configuration"),
            (Err(_), Err(error)) => {
                eprintln!("!! removing the webhook configuration failed too: {error:#}");
            }
            (Err(_), Ok(())) => {}
        }
        checked
    }

    /// Removes a webhook configuration of the shipped policy that a dead test left behind.
    pub(crate) async fn remove_leftover_admission_chain(&self) -> Result<()> {
        let name = shipped_policy()?.unique_name();
        if kubewarden::remove(&self.admin, &name).await? {
            eprintln!("removed the ValidatingWebhookConfiguration {name} an earlier test left");
        }
        Ok(())
    }
}

impl AdmissionChain {
    /// The configuration's name.
    pub fn name(&self) -> String {
        self.policy.unique_name()
    }

    /// (Re-)registers the webhook configuration.
    pub async fn register(&self) -> Result<()> {
        kubewarden::register(&self.admin, &self.configuration).await
    }

    /// Removes the webhook configuration (the stand-in keeps running until dropped).
    pub async fn unregister(&self) -> Result<()> {
        kubewarden::remove(&self.admin, &self.name()).await?;
        Ok(())
    }

    /// Removes the configuration and stops the stand-in.
    pub async fn remove(mut self) -> Result<()> {
        let removed = self.unregister().await;
        self.policy_server.kill();
        removed
    }

    /// The stand-in's log lines, one per AdmissionReview it answered.
    pub fn reviews(&self) -> Vec<String> {
        self.policy_server
            .log_text()
            .lines()
            .filter(|line| line.starts_with("review "))
            .map(str::to_owned)
            .collect()
    }
}
