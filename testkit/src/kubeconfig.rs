//! Kubeconfigs for a ServiceAccount (the reconciler's, the policy-server's), so that the demo
//! and the cluster tests run each program with exactly the permissions `deploy/` grants it,
//! not the admin's; and where a kubeconfig reaches the API server ([`endpoint`]).

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{Cluster, Kubeconfig};
use namespace_baseline_core::identity::{RECONCILER_NAMESPACE, RECONCILER_SERVICE_ACCOUNT};
use namespace_baseline_formats::yaml;
use serde_json::{Value, json};

/// Where a client reaches the API server: its URL and certificate authority (PEM).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub server: String,
    pub ca_pem: String,
}

/// Where a kubeconfig's current context reaches the API server, its CA read from the data or
/// the file the kubeconfig names (e.g. for a proxy to forward to).
pub fn endpoint(kubeconfig: &Kubeconfig) -> Result<Endpoint> {
    let cluster = current_cluster(kubeconfig)?;
    let server = cluster.server.clone().context("cluster without a server")?;
    let ca_pem = if let Some(data) = &cluster.certificate_authority_data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .context("certificate-authority-data is not base64")?;
        String::from_utf8(bytes).context("CA data is not PEM")?
    } else if let Some(path) = &cluster.certificate_authority {
        std::fs::read_to_string(path)
            .with_context(|| format!("reading certificate-authority {path}"))?
    } else {
        bail!("the cluster has no certificate authority")
    };
    Ok(Endpoint { server, ca_pem })
}

/// The cluster (server, certificate authority) of a kubeconfig's current context.
pub fn current_cluster(kubeconfig: &Kubeconfig) -> Result<&Cluster> {
    let context = kubeconfig
        .current_context
        .clone()
        .or_else(|| kubeconfig.contexts.first().map(|c| c.name.clone()))
        .context("kubeconfig without a context")?;
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .context("kubeconfig: its current context is not defined")?;
    kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .with_context(|| format!("kubeconfig: cluster {cluster_name} is not defined"))
}

/// Writes to `path` a kubeconfig that reaches `cluster` (the `cluster` entry of a kubeconfig,
/// as JSON) as the reconciler's ServiceAccount, with an hour-long TokenRequest token that
/// `admin` asks for.
pub async fn write_reconciler_kubeconfig(
    admin: &Client,
    cluster: Value,
    path: &Path,
) -> Result<()> {
    write_service_account_kubeconfig(
        admin,
        cluster,
        (RECONCILER_NAMESPACE, RECONCILER_SERVICE_ACCOUNT),
        path,
    )
    .await
}

/// Writes to `path` a kubeconfig that reaches `cluster` as the ServiceAccount `account`
/// (namespace, name), with an hour-long TokenRequest token that `admin` asks for.
pub async fn write_service_account_kubeconfig(
    admin: &Client,
    cluster: Value,
    account: (&str, &str),
    path: &Path,
) -> Result<()> {
    let (namespace, name) = account;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("TokenRequest for the ServiceAccount {namespace}/{name}"))?
        .status
        .context("TokenRequest without status")?
        .token;
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {
            "cluster": "local", "user": name, "namespace": namespace}}],
        "current-context": name,
    });
    std::fs::write(path, yaml::to_string(&kubeconfig)?)
        .with_context(|| format!("writing {}", path.display()))
}
