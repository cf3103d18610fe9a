//! The stand-in policy-server (`nsb-policy-server` of `e2e-tests/webhook`) run as a local
//! process, as the reconciler is run: the binary comes from `NSB_WEBHOOK_BIN` (the tests never
//! link wasmtime), it reads the cluster with the kubeconfig it is given (the policy-server's
//! ServiceAccount), listens on a free port of 127.0.0.1 and writes its CA there once it
//! serves. Dropping it kills it; a panicking test prints the tail of its log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};

use crate::process::{free_port, log_tail, spawn_logged};
use crate::wait_until;

/// The stand-in binary (`cargo build -p namespace-baseline-webhook`).
pub const ENV_WEBHOOK_BIN: &str = "NSB_WEBHOOK_BIN";
/// The policy module it runs (default: the repository's `policy.wasm`, `make policy.wasm`):
/// the variable the runner's tests read too.
pub const ENV_POLICY_WASM: &str = "POLICY_WASM";

/// How to start the stand-in.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    /// The `nsb-policy-server` binary.
    pub binary: &'a Path,
    /// A kubeconfig the host calls are answered with (the policy-server's identity).
    pub kubeconfig: &'a Path,
    /// The policy module.
    pub wasm: &'a Path,
    /// The manifest holding the ClusterAdmissionPolicy (settings, mode).
    pub admission_policy: &'a Path,
    /// A directory of its own: its log and its CA.
    pub work_dir: &'a Path,
}

pub struct PolicyServerProcess {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    pub ca_file: PathBuf,
}

impl PolicyServerProcess {
    /// The binary named by [`ENV_WEBHOOK_BIN`]; an error saying how to build it when unset.
    pub fn binary_from_env() -> Result<PathBuf> {
        let binary = std::env::var_os(ENV_WEBHOOK_BIN).with_context(|| {
            format!("{ENV_WEBHOOK_BIN} is not set: build the stand-in policy-server (`cargo build -p namespace-baseline-webhook`) and point {ENV_WEBHOOK_BIN} at target/debug/nsb-policy-server (e2e-tests/cluster-tests.sh does both)")
        })?;
        let binary = PathBuf::from(binary);
        anyhow::ensure!(
            binary.is_file(),
            "{ENV_WEBHOOK_BIN}={} is not a file",
            binary.display()
        );
        Ok(binary)
    }

    /// The policy module named by [`ENV_POLICY_WASM`], else `policy.wasm` under `root`.
    pub fn wasm_from_env(root: &Path) -> PathBuf {
        std::env::var_os(ENV_POLICY_WASM).map_or_else(|| root.join("policy.wasm"), PathBuf::from)
    }

    /// Starts it on a free port, without waiting (see [`Self::wait_ready`]).
    pub fn spawn(spawn: Spawn<'_>) -> Result<Self> {
        let port = free_port()?;
        let log = spawn.work_dir.join(format!("policy-server-{port}.log"));
        let ca_file = spawn.work_dir.join(format!("policy-server-{port}.ca.crt"));
        let child = spawn_logged(
            Command::new(spawn.binary)
                .arg(format!("--listen=127.0.0.1:{port}"))
                .arg("--policy-wasm")
                .arg(spawn.wasm)
                .arg("--admission-policy")
                .arg(spawn.admission_policy)
                .arg("--ca-file")
                .arg(&ca_file),
            spawn.kubeconfig,
            &log,
        )?;
        Ok(Self {
            child: Some(child),
            port,
            log,
            ca_file,
        })
    }

    /// Waits until it serves (it writes its CA file then) and returns the CA (PEM); fails
    /// with its log when it exits or does not get there within `timeout`.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<String> {
        let result = wait_until("the stand-in policy-server to serve", timeout, || {
            // Exited is final: stop waiting (with its status) instead of timing out.
            let outcome = match self.exit_status() {
                Some(status) => Some(Err(anyhow!("it exited ({status})"))),
                None => std::fs::read_to_string(&self.ca_file).ok().map(Ok),
            };
            async move { Ok(outcome) }
        })
        .await;
        match result.and_then(|(outcome, _)| outcome) {
            Ok(ca) => Ok(ca),
            Err(error) => Err(error.context(self.log_tail(40))),
        }
    }

    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// `https://127.0.0.1:<port>`, where the webhook configuration points.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Already exited is fine: either way it is gone.
            child.kill().ok();
            child.wait().ok();
        }
    }
}

impl Drop for PolicyServerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("stand-in policy-server:\n{}", self.log_tail(200));
        }
    }
}
