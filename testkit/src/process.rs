//! The reconciler binary run as a local process, as the demo and the cluster tests run it:
//! as its ServiceAccount (a kubeconfig with a TokenRequest token), on a free `--listen` port,
//! its log in a file; probed over HTTP (`/readyz`, `/metrics`); stopped with SIGTERM (the
//! graceful path) or SIGKILL (a crash). Dropping it kills it, and a panicking test prints the
//! tail of its log.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use namespace_baseline_core::identity::RECONCILER_NAMESPACE;

use crate::http_get;

/// How to start one reconciler process.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    /// The reconciler binary.
    pub binary: &'a Path,
    /// A kubeconfig for its ServiceAccount.
    pub kubeconfig: &'a Path,
    /// `POD_NAME`: its identity as a Lease holder.
    pub instance: &'a str,
    /// Arguments after `run` (the `--listen` port is added).
    pub args: &'a [&'a str],
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    /// `RUST_LOG`.
    pub rust_log: &'a str,
}

pub struct ReconcilerProcess {
    child: Option<Child>,
    pub instance: String,
    pub log: PathBuf,
    pub port: u16,
    pub started: Instant,
}

/// The last `lines` lines of a process's log file, under a header naming the file.
pub fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut out = format!(
        "--- last {} lines of {} ---\n",
        all.len() - start,
        log.display()
    );
    for line in &all[start..] {
        writeln!(out, "{line}").expect("writing to a String");
    }
    out
}

/// Starts `command` (a test's program: the reconciler, Kubewarden's policy-server) against
/// the cluster of `kubeconfig` (never the in-cluster one), its stdout and stderr appended to
/// the file `log` (created), with no stdin.
pub fn spawn_logged(command: &mut Command, kubeconfig: &Path, log: &Path) -> Result<Child> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {}", command.get_program().to_string_lossy()))
}

/// A free port on 127.0.0.1 (bound, then released for the child to bind).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl ReconcilerProcess {
    pub fn spawn(spawn: Spawn<'_>) -> Result<Self> {
        let port = free_port()?;
        let child = spawn_logged(
            Command::new(spawn.binary)
                .arg("run")
                .arg(format!("--listen=127.0.0.1:{port}"))
                .args(spawn.args)
                .env("POD_NAME", spawn.instance)
                .env("POD_NAMESPACE", RECONCILER_NAMESPACE)
                .env("RUST_LOG", spawn.rust_log),
            spawn.kubeconfig,
            &spawn.log,
        )?;
        Ok(Self {
            child: Some(child),
            instance: spawn.instance.to_owned(),
            log: spawn.log,
            port,
            started: Instant::now(),
        })
    }

    /// 0 once stopped or killed.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// `Err` when the process has exited (with its log tail).
    pub fn check_alive(&self) -> Result<()> {
        // `try_wait` needs `&mut`; ask the kernel instead.
        let pid = self.pid();
        let alive = pid != 0
            && Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z"));
        if alive {
            Ok(())
        } else {
            Err(anyhow!(
                "reconciler {} exited\n{}",
                self.instance,
                self.log_tail(40)
            ))
        }
    }

    pub fn http(&self, path: &str) -> Result<(u16, String)> {
        http_get(self.port, path)
    }

    /// Its `/metrics`, parsed.
    pub fn metrics(&self) -> Result<Metrics> {
        let (code, body) = self.http("/metrics")?;
        ensure!(code == 200, "/metrics answered {code}");
        Ok(Metrics::parse(&body))
    }

    /// The value of one series (exact name with labels, as /metrics prints it). An absent
    /// series is an error: a renamed or never-exported metric fails the test that reads it
    /// instead of reading as 0.
    pub fn metric(&self, series: &str) -> Result<f64> {
        self.metrics()?.value(series)
    }

    /// [`Metrics::counter_or_zero`]: a labelled counter that may not have counted yet.
    pub fn counter_or_zero(&self, series: &str) -> Result<f64> {
        self.metrics()?.counter_or_zero(series)
    }

    /// SIGKILL, as a crash or an evicted pod.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An already exited child is fine: either way it is gone.
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// SIGTERM, then waits up to `timeout` for it to exit; returns its exit status and how
    /// long it took. Past the timeout it is killed and this is an error.
    pub async fn stop(&mut self, timeout: Duration) -> Result<(ExitStatus, Duration)> {
        let mut child = self.child.take().context("already stopped")?;
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        ensure!(status.success(), "kill -TERM failed");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok((status, started.elapsed()));
            }
            if started.elapsed() > timeout {
                child.kill().ok();
                child.wait().ok();
                bail!(
                    "reconciler {} did not exit within {timeout:?} of SIGTERM",
                    self.instance
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

impl Drop for ReconcilerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("reconciler {}:\n{}", self.instance, self.log_tail(200));
        }
    }
}

/// A Prometheus text exposition: each series (name with labels) and the families declared
/// by `# TYPE` lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub series: BTreeMap<String, f64>,
    pub families: BTreeSet<String>,
}

impl Metrics {
    pub fn parse(text: &str) -> Self {
        let mut metrics = Self::default();
        for line in text.lines() {
            if let Some(declaration) = line.strip_prefix("# TYPE ") {
                if let Some(name) = declaration.split_whitespace().next() {
                    metrics.families.insert(name.to_owned());
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            if let Some((name, value)) = line.rsplit_once(' ')
                && let Ok(value) = value.parse()
            {
                metrics.series.insert(name.to_owned(), value);
            }
        }
        metrics
    }

    /// The value of `series`; an error when it is absent.
    pub fn value(&self, series: &str) -> Result<f64> {
        self.series.get(series).copied().with_context(|| {
            format!(
                "metric series {series} is not exported; the reconciler exports: {}",
                self.series.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// For a labelled counter (`name_total{label="value"}`) that is exported only once that
    /// label set has counted (prometheus-client's families): absent reads as 0, but its family
    /// (`# TYPE name counter`) must be declared, so a renamed metric is still an error.
    pub fn counter_or_zero(&self, series: &str) -> Result<f64> {
        if let Some(value) = self.series.get(series) {
            return Ok(*value);
        }
        let name = series.split('{').next().unwrap_or(series);
        let family = name.strip_suffix("_total").unwrap_or(name);
        ensure!(
            self.families.contains(family) || self.families.contains(name),
            "metric family {family} is not declared in /metrics (renamed or not exported?)"
        );
        Ok(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "\
# HELP namespace_baseline_reconciles Reconciles by result.
# TYPE namespace_baseline_reconciles counter
namespace_baseline_reconciles_total{result=\"success\"} 7
# TYPE namespace_baseline_leader gauge
namespace_baseline_leader 1
# EOF
";

    #[test]
    fn an_absent_series_is_an_error_not_zero() {
        let metrics = Metrics::parse(EXPOSITION);
        assert_eq!(
            metrics
                .value("namespace_baseline_reconciles_total{result=\"success\"}")
                .unwrap(),
            7.0
        );
        assert_eq!(metrics.value("namespace_baseline_leader").unwrap(), 1.0);
        let absent = metrics
            .value("namespace_baseline_reconciles_total{result=\"permanent_error\"}")
            .unwrap_err();
        assert!(absent.to_string().contains("not exported"), "{absent}");
    }

    #[test]
    fn counter_or_zero_needs_the_family() {
        let metrics = Metrics::parse(EXPOSITION);
        assert_eq!(
            metrics
                .counter_or_zero("namespace_baseline_reconciles_total{result=\"permanent_error\"}")
                .unwrap(),
            0.0
        );
        assert_eq!(
            metrics
                .counter_or_zero("namespace_baseline_reconciles_total{result=\"success\"}")
                .unwrap(),
            7.0
        );
        assert!(
            metrics
                .counter_or_zero("namespace_baseline_renamed_total{result=\"success\"}")
                .is_err()
        );
    }
}
