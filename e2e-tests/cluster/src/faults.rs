//! Helpers for the fault scenarios (`s9_*`): the fault-injecting proxy between a reconciler
//! and the API server, the reconciler's writes as the audit log tells them, and restarting
//! the local control plane's API server.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
pub use fault_proxy::{
    Fault, FaultProxy, ProxyCa, RETRY_AFTER_SECONDS, Received, Report, STALL, Upstream,
};

use crate::{AuditEvent, Cluster, Endpoint, repo_root};

/// The control plane's state directory (`e2e-tests/cluster-tests.sh` exports it from the
/// control plane's `env` file).
pub const ENV_STATE_DIR: &str = "NSB_STATE_DIR";
/// `1`: the cluster under test is not the local control plane; skip (loudly) the scenario
/// steps that restart its API server.
pub const ENV_SKIP_APISERVER_RESTART: &str = "NSB_SKIP_APISERVER_RESTART";

impl Cluster {
    /// A fault proxy in front of this cluster's API server (faults off until asked).
    pub fn fault_proxy(&self, seed: u64) -> Result<FaultProxy> {
        let api = self.api_server()?;
        let upstream = Upstream::new(&api.server, api.ca_pem.as_bytes())?;
        FaultProxy::start(upstream, seed)
    }
}

/// Where a client behind `proxy` reaches the API server.
pub fn endpoint(proxy: &FaultProxy) -> Endpoint {
    Endpoint {
        server: proxy.url(),
        ca_pem: proxy.ca_pem().to_owned(),
    }
}

/// Faults by kind, for reports: `429=12 500=9 ...`.
pub fn faults_by_kind(report: &Report) -> String {
    Fault::ALL
        .iter()
        .map(|fault| format!("{fault}={}", report.count(*fault)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The writes (create, update, patch, delete) to NetworkPolicies among `events`.
pub fn policy_writes(events: &[AuditEvent]) -> Vec<&AuditEvent> {
    events
        .iter()
        .filter(|event| event.is_write() && event.resource() == "networkpolicies")
        .collect()
}

/// Writes by `(namespace, name)` of the objects written.
pub fn writes_by_object(events: &[&AuditEvent]) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for event in events {
        let object = event.object_ref.clone().unwrap_or_default();
        *counts
            .entry((
                object.namespace.unwrap_or_default(),
                object.name.unwrap_or_default(),
            ))
            .or_insert(0) += 1;
    }
    counts
}

/// Writes that do not target one of `allowed` `(namespace, name)` objects, described.
pub fn writes_outside(events: &[&AuditEvent], allowed: &BTreeSet<(String, String)>) -> Vec<String> {
    events
        .iter()
        .filter(|event| {
            let object = event.object_ref.clone().unwrap_or_default();
            let key = (
                object.namespace.unwrap_or_default(),
                object.name.unwrap_or_default(),
            );
            !allowed.contains(&key)
        })
        .map(|event| event.describe())
        .collect()
}

/// Whether this run may restart the API server: `Ok(Some(state dir))` on the local control
/// plane, `Ok(None)` when `NSB_SKIP_APISERVER_RESTART=1` says to skip (printed loudly), and a
/// panic otherwise: a cluster that cannot be restarted must never look like a pass.
pub fn restartable_state_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(ENV_STATE_DIR) {
        return Some(PathBuf::from(dir));
    }
    if std::env::var(ENV_SKIP_APISERVER_RESTART).is_ok_and(|v| v == "1") {
        eprintln!(
            "!! SKIPPED the API server restart ({ENV_SKIP_APISERVER_RESTART}=1): reconnection after a real restart NOT verified"
        );
        return None;
    }
    panic!(
        "{ENV_STATE_DIR} is not set: this scenario restarts the API server of the local control plane (e2e-tests/cluster-tests.sh exports it); against another cluster set {ENV_SKIP_APISERVER_RESTART}=1 to skip that step"
    );
}

/// Restarts the API server of the control plane in `state_dir` (same port and flags, etcd
/// untouched) without blocking the test's runtime; returns how long it took.
pub async fn restart_apiserver(state_dir: PathBuf) -> Result<Duration> {
    restart("kube-apiserver", state_dir).await
}

/// Restarts etcd (same ports and data, the API server untouched, then ready again); returns
/// how long it took.
pub async fn restart_etcd(state_dir: PathBuf) -> Result<Duration> {
    restart("etcd", state_dir).await
}

/// Runs `e2e-tests/control-plane/restart.sh STATE_DIR COMPONENT`.
async fn restart(component: &'static str, state_dir: PathBuf) -> Result<Duration> {
    let script = repo_root().join("e2e-tests/control-plane/restart.sh");
    let started = Instant::now();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&script)
            .arg(&state_dir)
            .arg(component)
            .output()
            .with_context(|| format!("running {}", script.display()))
    })
    .await??;
    ensure!(
        output.status.success(),
        "restart.sh {component} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(started.elapsed())
}

/// Retries `operation` (e.g. an admin request right after the API server came back, whose
/// pooled connection may be dead) up to `attempts` times, 200 ms apart.
pub async fn retrying<T, F, Fut>(what: &str, attempts: u32, mut operation: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut last = None;
    for _ in 0..attempts.max(1) {
        match operation().await {
            Ok(value) => return Ok(value),
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last.map_or_else(
        || anyhow::anyhow!("no attempt"),
        |error| error.context(what.to_owned()),
    ))
}
