//! The reconciler process under measurement (spawned through the harness, its startup timed
//! here at 10 ms resolution), and what `/proc` says about it and about the control plane's
//! processes.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use namespace_baseline_cluster_tests::{self as harness, Cluster};

const SUCCESSES: &str = r#"namespace_baseline_reconciles_total{result="success"}"#;

/// The harness's reconciler process, with what the benchmark measures of it.
pub struct Reconciler {
    process: harness::Reconciler,
}

/// How long the process took to get ready and to finish its first reconcile.
pub struct Startup {
    /// `/readyz` answers 200 while this process leads (so its caches are synced).
    pub ready: Duration,
    pub reconciled: Duration,
}

/// A standby's take-over after the leader's death.
pub struct TakeOver {
    /// From the kill to the standby leading: the Lease's expiry, mostly.
    pub led: Duration,
    /// From leading to its first full pass done.
    pub first_pass: Duration,
    /// How long that pass itself took: the reconcile duration histogram's only sample
    /// (`None` if a second reconcile ended before the poll saw the first).
    pub pass_took: Option<Duration>,
}

impl Reconciler {
    /// Spawns the reconciler as its ServiceAccount (`run`, a free `--listen` port, `args`),
    /// logging at `info` so that logging does not weigh on what is measured.
    pub async fn spawn(cluster: &Cluster, instance: &str, args: &[String]) -> Result<Self> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let process = cluster
            .spawn_reconciler(instance, &args, None, "info")
            .await?;
        Ok(Self { process })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Polls `/readyz` and (when `reconcile`: there is a baseline) the reconcile counter every
    /// 10 ms: the time from spawn to ready, and to the first successful reconcile.
    pub async fn wait_started(&mut self, reconcile: bool, timeout: Duration) -> Result<Startup> {
        let mut ready = None;
        loop {
            self.process.check_alive()?;
            let elapsed = self.process.started.elapsed();
            // A standby is ready too: wait for the leader gauge, then for /readyz. Not
            // listening yet is "not yet"; listening without the gauge is an error.
            let leading = match self.process.metrics() {
                Ok(metrics) => metrics.value("namespace_baseline_leader")? >= 1.0,
                Err(_) => false,
            };
            if ready.is_none() && leading && matches!(self.process.http("/readyz"), Ok((200, _))) {
                ready = Some(elapsed);
            }
            // Before its first reconcile the success series is not exported yet: 0 is meant.
            if let Some(ready) = ready
                && (!reconcile || self.process.counter_or_zero(SUCCESSES)? >= 1.0)
            {
                return Ok(Startup {
                    ready,
                    reconciled: elapsed,
                });
            }
            if elapsed > timeout {
                bail!(
                    "reconciler not ready and reconciled within {timeout:?}; log {}",
                    self.process.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls every 10 ms until this replica is a ready standby (`/readyz` 200 while it does
    /// not lead: its caches are synced and warm); the time from spawn.
    pub async fn wait_standby(&mut self, timeout: Duration) -> Result<Duration> {
        loop {
            self.process.check_alive()?;
            let elapsed = self.process.started.elapsed();
            if let Ok(metrics) = self.process.metrics() {
                if metrics.value("namespace_baseline_leader")? >= 1.0 {
                    bail!("{} leads: it was meant to stand by", self.process.instance);
                }
                if matches!(self.process.http("/readyz"), Ok((200, _))) {
                    return Ok(elapsed);
                }
            }
            if elapsed > timeout {
                bail!(
                    "standby not ready within {timeout:?}; log {}",
                    self.process.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// After the leader was killed: polls every 10 ms until this standby leads, then until its
    /// first reconcile (the full pass a term begins with) has succeeded.
    pub async fn wait_take_over(&mut self, timeout: Duration) -> Result<TakeOver> {
        let killed = Instant::now();
        let before = self.process.counter_or_zero(SUCCESSES)?;
        let mut led = None;
        loop {
            self.process.check_alive()?;
            let now = Instant::now();
            if led.is_none() && self.metric("namespace_baseline_leader")? >= 1.0 {
                led = Some(now);
            }
            if let Some(led) = led
                && self.process.counter_or_zero(SUCCESSES)? > before
            {
                let (count, seconds) = self.reconcile_time()?;
                return Ok(TakeOver {
                    led: led - killed,
                    first_pass: now - led,
                    pass_took: (count == 1.0).then(|| Duration::from_secs_f64(seconds)),
                });
            }
            if killed.elapsed() > timeout {
                bail!(
                    "no take-over within {timeout:?}; log {}",
                    self.process.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGKILL: no release, no drain (a crashed leader).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    pub fn metric(&self, series: &str) -> Result<f64> {
        self.process.metric(series)
    }

    pub fn successful_reconciles(&self) -> Result<f64> {
        self.metric(SUCCESSES)
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
        self.process.stop().await.map(drop)
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

/// CPU seconds the threads a process has now have run, in nanoseconds summed over
/// `/proc/<pid>/task/*/schedstat`: finer than [`cpu_seconds`]'s clock ticks (10 ms), which a
/// window at rest spends only a few of; a thread that ended before the reading is not in it.
/// `None` when the pid is unknown or gone.
pub fn thread_run_seconds(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut nanoseconds = 0u64;
    for task in tasks.flatten() {
        // A thread that ends between the listing and the read is skipped.
        let Ok(schedstat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        nanoseconds += schedstat
            .split_whitespace()
            .next()
            .and_then(|run| run.parse::<u64>().ok())?;
    }
    // CPU time in nanoseconds stays far below 2^52 for any window measured here.
    #[allow(clippy::cast_precision_loss)]
    let seconds = nanoseconds as f64 / 1e9;
    Some(seconds)
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

    /// The reconciler's CPU seconds since the start.
    pub fn seconds(&self) -> f64 {
        self.pids
            .iter()
            .zip(&self.start)
            .find(|((name, _), _)| *name == "reconciler")
            .and_then(|((_, pid), start)| Some(cpu_seconds(*pid)? - (*start)?))
            .unwrap_or(0.0)
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

/// With `NSB_BENCH_PERF=<file>`: `perf record` of the reconciler over a phase (the drift
/// repairs), call graphs from the stack's DWARF unwind tables, written to `<file>` (read it
/// with `perf report -i <file> --no-children`). Stopped, and the file written, when dropped.
pub struct Profile {
    perf: Option<std::process::Child>,
}

impl Profile {
    pub fn start(reconciler: u32) -> Self {
        let Ok(out) = std::env::var("NSB_BENCH_PERF") else {
            return Self { perf: None };
        };
        let pid = reconciler.to_string();
        let perf = std::process::Command::new("perf")
            .args(["record", "-q", "-F", "499", "--call-graph", "dwarf,16384"])
            .args(["-p", &pid, "-o", &out])
            .stdout(std::process::Stdio::null())
            .spawn()
            .inspect_err(|error| eprintln!("!! NSB_BENCH_PERF: perf record: {error}"))
            .ok();
        // perf needs a moment to attach before the phase starts.
        std::thread::sleep(Duration::from_millis(500));
        Self { perf }
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if let Some(mut perf) = self.perf.take() {
            // SIGINT: perf writes its file and exits.
            let _ = std::process::Command::new("kill")
                .args(["-INT", &perf.id().to_string()])
                .status();
            let _ = perf.wait();
        }
    }
}
