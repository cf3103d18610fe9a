//! Kubewarden's policy-server (the upstream program, `POLICY_SERVER`: 1.35.0 from
//! `e2e-tests/kubewarden/install.sh`) run as a local process, as the reconciler is run,
//! configured the way Kubewarden's controller configures its Deployment
//! (`internal/controller/policyserver_controller_deployment.go` at v1.35.0): the policies file
//! rendered from the manifest ([`crate::kubewarden::policies_file`]), a serving certificate and
//! key (`KUBEWARDEN_CERT_FILE` / `KEY_FILE` there), `--always-accept-admission-reviews-on-namespace`
//! its own namespace (the kubewarden-controller chart's default), the API server reached with
//! the kubeconfig it is given (the policy-server's ServiceAccount). Everything it serves or
//! reaches is on 127.0.0.1: `--addr` (which its readiness port shares), the API server of the
//! kubeconfig; no metrics or traces are exported (no `--enable-metrics`, `--log-fmt json`, not
//! `otlp`), and it gets a Sigstore trust config without a trusted root, so it never fetches
//! Sigstore's TUF repository (it warns "Cannot create Sigstore trust root" and verifies no
//! signatures, which the tests do not ask of it). Its environment is emptied first, as a
//! container's is: no `RUST_BACKTRACE` (with it, every host-call error a user reads would carry
//! a stack trace), no proxy. Dropping it kills it; a panicking test prints the tail of its log.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};

use crate::kubewarden::{CONTROLLER_NAMESPACE, ClusterAdmissionPolicy, policies_file};
use crate::policy_server_log::PolicyServerLog;
use crate::process::{free_port, log_tail, spawn_logged};
use crate::serving_tls::ServingCertificate;
use crate::{http_get, wait_until};

/// The policy-server binary.
pub const ENV_POLICY_SERVER: &str = "POLICY_SERVER";
/// The module it runs: the policy annotated by `kwctl annotate` (policy-server refuses a
/// module without kwctl's annotation: "Policy is missing protocol version").
pub const ENV_ANNOTATED_WASM: &str = "ANNOTATED_WASM";

/// How much it logs. `Debug` logs every review, its verdict and its host calls (what
/// [`PolicyServerLog`] reads); `Info` is what a cluster runs, for measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Debug,
}

impl LogLevel {
    fn flag(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Debug => "debug",
        }
    }
}

/// How to start it.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    pub binary: &'a Path,
    /// A kubeconfig for the policy-server's ServiceAccount.
    pub kubeconfig: &'a Path,
    /// The policies it serves, each at `/validate/<unique name>`.
    pub policies: &'a [ClusterAdmissionPolicy],
    /// The annotated module every policy runs.
    pub module: &'a Path,
    /// A directory of its own is made in here: its configuration, certificate and log.
    pub work_dir: &'a Path,
    pub log_level: LogLevel,
    /// `--workers`; `None` keeps its default (one per CPU).
    pub workers: Option<usize>,
}

pub struct PolicyServerProcess {
    child: Option<Child>,
    /// The program, its arguments and kubeconfig: what [`Self::restart`] runs again.
    binary: PathBuf,
    args: Vec<OsString>,
    kubeconfig: PathBuf,
    /// How many times it was started (1, then one more per restart).
    starts: u32,
    pub port: u16,
    pub readiness_port: u16,
    /// Its own directory.
    pub dir: PathBuf,
    pub log: PathBuf,
    /// The CA of its serving certificate: a webhook configuration's `caBundle`.
    pub ca_pem: String,
}

fn from_env(variable: &str, fix: &str) -> Result<PathBuf> {
    let path = PathBuf::from(
        std::env::var_os(variable).with_context(|| format!("{variable} is not set: {fix}"))?,
    );
    ensure!(
        path.is_file(),
        "{variable}={} is not a file: {fix}",
        path.display()
    );
    Ok(path)
}

impl PolicyServerProcess {
    /// The binary named by [`ENV_POLICY_SERVER`]; an error saying how to get it when unset.
    pub fn binary_from_env() -> Result<PathBuf> {
        from_env(
            ENV_POLICY_SERVER,
            "run the tests through e2e-tests/cluster-tests.sh or e2e-tests/node-tests.sh (they install it), or `export POLICY_SERVER=$(e2e-tests/kubewarden/install.sh policy-server)`",
        )
    }

    /// The module named by [`ENV_ANNOTATED_WASM`]; an error saying how to make it when unset.
    pub fn module_from_env() -> Result<PathBuf> {
        from_env(
            ENV_ANNOTATED_WASM,
            "run the tests through e2e-tests/cluster-tests.sh or e2e-tests/node-tests.sh (they make it), or `make annotated-policy.wasm KWCTL=$(e2e-tests/kubewarden/install.sh kwctl) && export ANNOTATED_WASM=$PWD/annotated-policy.wasm`",
        )
    }

    /// The first line of what `binary --version` prints (`policy-server 1.35.0`; the OPA
    /// builtins it lists after it are left out).
    pub fn version(binary: &Path) -> Result<String> {
        let output = Command::new(binary)
            .arg("--version")
            .env_clear()
            .output()
            .with_context(|| format!("running {} --version", binary.display()))?;
        ensure!(
            output.status.success(),
            "{} --version: {}",
            binary.display(),
            output.status
        );
        let text = String::from_utf8_lossy(&output.stdout);
        Ok(text.lines().next().unwrap_or_default().trim().to_owned())
    }

    /// Writes its configuration and starts it on free ports of 127.0.0.1, without waiting
    /// (see [`Self::wait_ready`]).
    pub fn spawn(spawn: Spawn<'_>) -> Result<Self> {
        let port = free_port()?;
        let mut readiness_port = free_port()?;
        while readiness_port == port {
            readiness_port = free_port()?;
        }
        let dir = spawn.work_dir.join(format!("policy-server-{port}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let module = spawn
            .module
            .canonicalize()
            .with_context(|| format!("the module {}", spawn.module.display()))?;
        let policies = dir.join("policies.yml");
        let rendered = policies_file(spawn.policies, &format!("file://{}", module.display()))?;
        std::fs::write(&policies, serde_json::to_string_pretty(&rendered)?)
            .with_context(|| format!("writing {}", policies.display()))?;
        let serving = ServingCertificate::generate("namespace-baseline tests' policy-server")?;
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        serving.write(&cert, &key)?;
        // A ClientTrustConfig without `trustedRoot`: no Sigstore, and no download of it.
        let trust = dir.join("sigstore-trust-config.json");
        std::fs::write(&trust, "{}\n")?;
        let mut args: Vec<OsString> = vec![
            "--addr".into(),
            "127.0.0.1".into(),
            format!("--port={port}").into(),
            format!("--readiness-probe-port={readiness_port}").into(),
            "--cert-file".into(),
            cert.into(),
            "--key-file".into(),
            key.into(),
            "--policies".into(),
            policies.into(),
            "--policies-download-dir".into(),
            dir.join("downloads").into(),
            "--sigstore-cache-dir".into(),
            dir.join("sigstore").into(),
            "--sigstore-trust-config".into(),
            trust.into(),
            "--always-accept-admission-reviews-on-namespace".into(),
            CONTROLLER_NAMESPACE.into(),
            "--log-fmt".into(),
            "json".into(),
            "--log-level".into(),
            spawn.log_level.flag().into(),
        ];
        if let Some(workers) = spawn.workers {
            args.push(format!("--workers={workers}").into());
        }
        let log = dir.join("policy-server.log");
        let child = start(spawn.binary, &args, &dir, spawn.kubeconfig, &log)?;
        Ok(Self {
            child: Some(child),
            binary: spawn.binary.to_owned(),
            args,
            kubeconfig: spawn.kubeconfig.to_owned(),
            starts: 1,
            port,
            readiness_port,
            dir,
            log,
            ca_pem: serving.ca_pem,
        })
    }

    /// Waits until its readiness endpoint answers 200 (it serves once every policy is loaded
    /// and its settings validated); fails with its log when it exits or does not get there
    /// within `timeout`.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let port = self.readiness_port;
        let result = wait_until("policy-server to be ready", timeout, || {
            // Exited is final: stop waiting (with its status) instead of timing out.
            let outcome = match self.exit_status() {
                Some(status) => Some(Err(anyhow!("it exited ({status})"))),
                None => http_get(port, "/readiness")
                    .ok()
                    .filter(|(code, _)| *code == 200)
                    .map(|_| Ok(())),
            };
            async move { Ok(outcome) }
        })
        .await;
        match result.and_then(|(outcome, took)| outcome.map(|()| took)) {
            Ok(took) => Ok(took),
            Err(error) => Err(error.context(self.log_tail(40))),
        }
    }

    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// `https://127.0.0.1:<port>`, where the webhook configurations point.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Its log so far.
    pub fn log(&self) -> PolicyServerLog {
        PolicyServerLog::parse(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Kills it (if it still runs) and starts it again as it was first started: the same
    /// ports, certificate and policies, so the webhook configurations pointing at it stay as
    /// they are, as a policy-server replica comes back behind its Service with its Secret's
    /// certificate. Its log goes to a new file (`policy-server.<n>.log`), which
    /// [`Self::log`] reads from then on. Without waiting (see [`Self::wait_ready`]).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.starts += 1;
        self.log = self.dir.join(format!("policy-server.{}.log", self.starts));
        self.child = Some(start(
            &self.binary,
            &self.args,
            &self.dir,
            &self.kubeconfig,
            &self.log,
        )?);
        Ok(())
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Already exited is fine: either way it is gone.
            child.kill().ok();
            child.wait().ok();
        }
    }
}

/// Starts `binary` with `args` in `dir`, its environment emptied (as a container's is), its
/// output to `log`.
fn start(
    binary: &Path,
    args: &[OsString],
    dir: &Path,
    kubeconfig: &Path,
    log: &Path,
) -> Result<Child> {
    let mut command = Command::new(binary);
    command.env_clear().current_dir(dir).args(args);
    spawn_logged(&mut command, kubeconfig, log)
}

impl Drop for PolicyServerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("policy-server:\n{}", self.log_tail(100));
        }
    }
}
