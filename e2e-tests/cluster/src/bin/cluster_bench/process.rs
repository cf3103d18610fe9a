//! The reconciler process under measurement (spawned here rather than through the harness's
//! `start_reconciler`, to time its startup at 10 ms resolution), and what `/proc` says about
//! it and about the control plane's processes.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use namespace_baseline_cluster_tests::{Cluster, ENV_RECONCILER_BIN, http_get};
use namespace_baseline_core::identity::RECONCILER_NAMESPACE;

pub struct Reconciler {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    pub spawned: Instant,
}

/// How long the process took to get ready and to finish its first reconcile.
pub struct Startup {
    /// `/readyz` answers 200 while this process leads (so its caches are synced).
    pub ready: Duration,
    pub reconciled: Duration,
}

impl Reconciler {
    /// Spawns the reconciler as its ServiceAccount (`run`, a free `--listen` port, `args`).
    pub async fn spawn(cluster: &Cluster, instance: &str, args: &[String]) -> Result<Self> {
        let binary = std::env::var_os(ENV_RECONCILER_BIN).with_context(|| {
            format!("{ENV_RECONCILER_BIN} is not set (cluster-bench.sh sets it)")
        })?;
        let kubeconfig = cluster.reconciler_kubeconfig().await?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = kubeconfig.with_file_name(format!("bench-{instance}.log"));
        let file = std::fs::File::create(&log)?;
        let spawned = Instant::now();
        let child = Command::new(&binary)
            .arg("run")
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", instance)
            .env("POD_NAMESPACE", RECONCILER_NAMESPACE)
            .env(
                "RUST_LOG",
                std::env::var("NSB_RECONCILER_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", Path::new(&binary).display()))?;
        eprintln!(
            "   reconciler {instance}: pid {}, port {port}, log {}",
            child.id(),
            log.display()
        );
        Ok(Self {
            child: Some(child),
            port,
            log,
            spawned,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Polls `/readyz` and (when `reconcile`: there is a baseline) the reconcile counter every
    /// 10 ms: the time from spawn to ready, and to the first successful reconcile.
    pub async fn wait_started(&mut self, reconcile: bool, timeout: Duration) -> Result<Startup> {
        let mut ready = None;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("reconciler exited ({status}); log {}", self.log.display());
            }
            let elapsed = self.spawned.elapsed();
            // A standby is ready too: wait for the leader gauge, then for /readyz.
            if ready.is_none()
                && self.metric("namespace_baseline_leader").unwrap_or(0.0) >= 1.0
                && matches!(http_get(self.port, "/readyz"), Ok((200, _)))
            {
                ready = Some(elapsed);
            }
            if let Some(ready) = ready
                && (!reconcile || self.successful_reconciles().unwrap_or(0.0) >= 1.0)
            {
                return Ok(Startup {
                    ready,
                    reconciled: elapsed,
                });
            }
            if elapsed > timeout {
                bail!(
                    "reconciler not ready and reconciled within {timeout:?}; log {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn metric(&self, series: &str) -> Result<f64> {
        let (code, body) = http_get(self.port, "/metrics")?;
        ensure!(code == 200, "/metrics answered {code}");
        Ok(body
            .lines()
            .find_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                (name == series).then(|| value.parse().ok()).flatten()
            })
            .unwrap_or(0.0))
    }

    pub fn successful_reconciles(&self) -> Result<f64> {
        self.metric(r#"namespace_baseline_reconciles_total{result="success"}"#)
    }

    /// (count, sum in seconds) of the reconcile duration histogram.
    pub fn reconcile_time(&self) -> Result<(f64, f64)> {
        Ok((
            self.metric("namespace_baseline_reconcile_duration_seconds_count")?,
            self.metric("namespace_baseline_reconcile_duration_seconds_sum")?,
        ))
    }

    pub fn memory(&self) -> Result<Memory> {
        Memory::of(self.pid())
    }

    /// SIGTERM, then waits (25 s at most) for the exit.
    pub async fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        ensure!(status.success(), "kill -TERM failed");
        let started = Instant::now();
        while child.try_wait()?.is_none() {
            if started.elapsed() > Duration::from_secs(25) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the reconciler did not exit within 25 s of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Resident memory, from `/proc/<pid>/status`, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl Memory {
    pub fn of(pid: u32) -> Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse().ok())
                .with_context(|| format!("no {name} in /proc/{pid}/status"))
        };
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            hwm_kib: field("VmHWM:")?,
        })
    }

    pub fn describe(self) -> String {
        format!(
            "RSS {:.1} MiB, HWM {:.1} MiB",
            mib(self.rss_kib),
            mib(self.hwm_kib)
        )
    }
}

pub fn mib(kib: u64) -> f64 {
    // Memory figures stay far below 2^52 KiB: the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let kib = kib as f64;
    kib / 1024.0
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`; `None` when
/// the pid is unknown or gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU used by the processes that matter during a window: the API server, etcd, the
/// reconciler and the bench itself.
pub struct CpuMeter {
    pids: Vec<(&'static str, u32)>,
    start: Vec<Option<f64>>,
    started: Instant,
}

impl CpuMeter {
    pub fn start(reconciler: u32) -> Self {
        let env_pid = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|pid| pid.trim().parse::<u32>().ok())
        };
        let mut pids = vec![("reconciler", reconciler), ("bench", std::process::id())];
        if let Some(pid) = env_pid("NSB_APISERVER_PID") {
            pids.insert(0, ("kube-apiserver", pid));
        }
        if let Some(pid) = env_pid("NSB_ETCD_PID") {
            pids.insert(1, ("etcd", pid));
        }
        let start = pids.iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
        Self {
            pids,
            start,
            started: Instant::now(),
        }
    }

    /// "kube-apiserver 3.1 s, etcd 0.4 s, ... in 2.0 s wall".
    pub fn describe(&self) -> String {
        let wall = self.started.elapsed().as_secs_f64();
        let used: Vec<String> = self
            .pids
            .iter()
            .zip(&self.start)
            .filter_map(|((name, pid), start)| {
                let used = cpu_seconds(*pid)? - (*start)?;
                Some(format!("{name} {used:.2}"))
            })
            .collect();
        format!("CPU s: {} in {wall:.2} s wall", used.join(", "))
    }
}
