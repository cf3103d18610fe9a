//! cluster-bench: the reconciler's performance against a real kube-apiserver.
//!
//! For each size N: N namespaces carrying a scenario label (created in parallel before any
//! timer starts), then, with one reconciler process running as its ServiceAccount:
//!
//! 1. convergence: create a NamespaceBaseline, time until every wall object is seen by a
//!    watch and the status says Ready for N namespaces; the reconciler's requests by verb
//!    (audit log); repeated (`--reps`, the walls of the previous baseline removed between);
//! 2. memory: the reconciler's VmRSS / VmHWM once converged;
//! 3. steady state: requests over two resync intervals; with `--rest S`, the RSS again after
//!    S seconds idle;
//! 4. drift repair: delete a managed policy (`--samples` times, spread over namespaces), time
//!    until a watch sees it again, with the reconciler restarted at `--repair-resync` (default:
//!    the reconciler's own default, 300 s; the short `--resync` of the steady-state phase
//!    would put a full pass in front of a repair every few seconds);
//! 5. startup: restart the process on the converged cluster, time to /readyz and to the first
//!    reconcile, and the writes it makes (with `--dns-churn`, first the DNS namespace's churn,
//!    on a reconciler of its own: its CPU and reconciles over a window at rest and one in which
//!    annotations change in kube-system a few times a second, `cluster_bench/dns_churn.rs`);
//! 6. new namespace: label a namespace, time until both wall objects are seen;
//! 7. the floor: the same 2N server-side applies by a plain client at several concurrencies,
//!    each `--reps` times, the lowest median against the convergence's median.
//!
//! Without `--reps`, sizes up to [`SMALL_SIZE`] are repeated [`SMALL_REPS`] times and larger
//! ones [`REPS`] times: at 100 namespaces a run takes ~0.1 s and about one run in three, the
//! reconciler's and the floor's alike, meets an API server that spends about twice the CPU on
//! the same applies, so the median of a few runs says more about which runs were slow than
//! about the reconciler (docs/benchmarks-history.md, "Small N with more repetitions").
//!
//! Usage: `cluster-bench [--large] [--sizes 100,1000] [--reps 15|3] [--samples 50]
//! [--startups 3] [--takeovers 1] [--restart-only] [--resync 5] [--repair-resync 300] [--rest 0] [--create-concurrency 32]
//! [--dns-churn] [--dns-churn-window 60] [--dns-churn-rate 3.5] [--dns-churn-reps 1]
//! [--out FILE] [-- reconciler args...]`. Needs TEST_KUBECONFIG and NSB_RECONCILER_BIN; NSB_AUDIT_LOG for
//! request counts; NSB_APISERVER_PID / NSB_ETCD_PID (the control plane's env) for CPU time;
//! NSB_BENCH_PERF=<file> for a `perf record` of the reconciler over the drift repairs.
//! `e2e-tests/cluster-bench.sh` builds, starts a fresh control plane per size and runs it.

#[path = "cluster_bench/dns_churn.rs"]
mod dns_churn;
#[path = "cluster_bench/floor.rs"]
mod floor;
#[path = "cluster_bench/list_floor.rs"]
mod list_floor;
#[path = "cluster_bench/observe.rs"]
mod observe;
#[path = "cluster_bench/process.rs"]
mod process;
#[path = "cluster_bench/report.rs"]
mod report;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use namespace_baseline_cluster_tests::flags::Flags;
use namespace_baseline_cluster_tests::{
    AuditMark, Cluster, ENV_AUDIT_LOG, Scenario, deny_all_policy_name, dns_policy_name,
    reconciler_username, wait_until_every,
};
use namespace_baseline_core::identity::{BASELINE_LABEL, baseline_label_value, managed_selector};
use namespace_baseline_core::spec::NamespaceBaseline;
use namespace_baseline_testkit::namespaces;
use serde_json::json;

const USAGE: &str = "cluster-bench [--large] [--sizes 100,1000] [--reps 15|3] [--samples 50] [--startups 3] [--takeovers 1] [--restart-only] [--resync 5] [--repair-resync 300] [--rest 0] [--create-concurrency 32] [--dns-churn] [--dns-churn-window 60] [--dns-churn-rate 3.5] [--dns-churn-reps 1] [--out FILE] [-- reconciler args]";

use dns_churn::ChurnOptions;
use observe::{BaselineWatch, Key, PolicyWatch, is_ready};
use process::{CpuMeter, Memory, Profile, Reconciler, mib};
use report::{Requests, Row, Samples, Verdict, ms};

const LARGE_SIZE: usize = 5_000;
/// Repetitions of the convergence and of each floor run, unless `--reps` says otherwise.
const REPS: usize = 3;
/// Sizes up to this one are repeated [`SMALL_REPS`] times by default.
const SMALL_SIZE: usize = 100;
const SMALL_REPS: usize = 15;

struct Options {
    sizes: Vec<usize>,
    /// `--reps`; `None`: [`Options::reps_for`] decides by size.
    reps: Option<usize>,
    samples: usize,
    startups: usize,
    /// Leader kills with a warm standby beside it.
    takeovers: usize,
    /// Only convergence, restarts and take-overs: no steady state, repair, new namespaces or
    /// apply floor (a restart table at 20,000 namespaces in minutes).
    restart_only: bool,
    resync_secs: u64,
    /// The resync interval during the drift-repair phase.
    repair_resync_secs: u64,
    /// Seconds the converged reconciler idles before its RSS is read again (0: not).
    rest_secs: u64,
    create_concurrency: usize,
    /// The DNS namespace's churn phase (`--dns-churn*`), off unless asked for: it adds two
    /// windows (2 minutes by default) per size.
    dns_churn: Option<ChurnOptions>,
    out: Option<PathBuf>,
    reconciler_args: Vec<String>,
}

impl Options {
    fn parse() -> Result<Self> {
        let mut options = Self {
            sizes: vec![100, 1_000],
            reps: None,
            samples: 50,
            startups: 3,
            takeovers: 1,
            restart_only: false,
            resync_secs: 5,
            repair_resync_secs: 300,
            rest_secs: 0,
            create_concurrency: 32,
            dns_churn: None,
            out: None,
            reconciler_args: Vec::new(),
        };
        let mut large = std::env::var("NSB_BENCH_LARGE").is_ok_and(|v| v == "1");
        let mut sizes = None;
        let mut flags = Flags::new(std::env::args().skip(1), USAGE);
        while let Some(flag) = flags.next_flag() {
            let mut value = || flags.value(&flag);
            match flag.name.as_str() {
                "--large" => large = true,
                "--sizes" => {
                    sizes = Some(
                        value()?
                            .split(',')
                            .map(|size| size.trim().parse::<usize>())
                            .collect::<Result<Vec<_>, _>>()
                            .context("--sizes: comma-separated namespace counts")?,
                    );
                }
                "--reps" => options.reps = Some(value()?.parse()?),
                "--samples" => options.samples = value()?.parse()?,
                "--startups" => options.startups = value()?.parse()?,
                "--takeovers" => options.takeovers = value()?.parse()?,
                "--restart-only" => options.restart_only = true,
                "--resync" => options.resync_secs = value()?.parse()?,
                "--repair-resync" => options.repair_resync_secs = value()?.parse()?,
                "--rest" => options.rest_secs = value()?.parse()?,
                "--create-concurrency" => options.create_concurrency = value()?.parse()?,
                "--dns-churn" => {
                    options.dns_churn.get_or_insert_default();
                }
                "--dns-churn-window" => {
                    options.dns_churn.get_or_insert_default().window =
                        Duration::from_secs(value()?.parse()?);
                }
                "--dns-churn-rate" => {
                    options.dns_churn.get_or_insert_default().per_second = value()?.parse()?;
                }
                "--dns-churn-reps" => {
                    options.dns_churn.get_or_insert_default().reps = value()?.parse()?;
                }
                "--out" => options.out = Some(value()?.into()),
                "--" => {
                    options.reconciler_args.extend(flags.rest());
                }
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other} (try --help)"),
            }
        }
        match sizes {
            Some(sizes) => options.sizes = sizes,
            None if large => options.sizes.push(LARGE_SIZE),
            None => {}
        }
        if options.reps == Some(0)
            || options.samples == 0
            || options.startups == 0
            || options.sizes.contains(&0)
        {
            bail!("--reps, --samples, --startups and sizes must be positive");
        }
        if let Some(churn) = &options.dns_churn
            && (churn.window.is_zero() || churn.reps == 0 || churn.per_second <= 0.0)
        {
            bail!("--dns-churn-window, --dns-churn-rate and --dns-churn-reps must be positive");
        }
        Ok(options)
    }

    /// How many times the convergence and each floor run are repeated at `n` namespaces.
    fn reps_for(&self, n: usize) -> usize {
        self.reps
            .unwrap_or(if n <= SMALL_SIZE { SMALL_REPS } else { REPS })
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let options = Options::parse()?;
    let cluster = Cluster::connect().await?;
    let version = cluster.admin.apiserver_version().await?;
    let machine = machine();
    println!(
        "== cluster-bench: sizes {:?}, convergence reps {}, {} samples, resync {} s (drift repair: {} s), reconciler args {:?}",
        options.sizes,
        options
            .sizes
            .iter()
            .map(|&n| options.reps_for(n).to_string())
            .collect::<Vec<_>>()
            .join(", "),
        options.samples,
        options.resync_secs,
        options.repair_resync_secs,
        options.reconciler_args
    );
    println!(
        "== machine: {machine}; kube-apiserver {}",
        version.git_version
    );
    let mut rows = Vec::new();
    for &size in &options.sizes {
        let started = Instant::now();
        println!("\n== N = {size}");
        let size_rows = bench_size(&cluster, &options, size)
            .await
            .with_context(|| format!("benchmark with {size} namespaces"))?;
        for row in &size_rows {
            println!("{}", row.markdown());
        }
        println!(
            "== N = {size} done in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        rows.extend(size_rows);
    }
    println!("\n{}", report::table(&rows));
    if let Some(out) = &options.out {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .with_context(|| format!("opening {}", out.display()))?;
        for row in &rows {
            writeln!(file, "{}", row.markdown())?;
        }
    }
    let missed = rows.iter().filter(|r| r.verdict == Verdict::Missed).count();
    println!("\n== {missed} target(s) missed");
    Ok(())
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or_else(String::new, |kib| format!(", {:.1} GiB", mib(kib) / 1024.0));
    format!("{cpus} vCPU{memory}")
}

/// Everything measured for one size.
async fn bench_size(cluster: &Cluster, options: &Options, n: usize) -> Result<Vec<Row>> {
    let scenario = cluster.scenario(&format!("bench{n}"));
    let walled: Vec<String> = (0..n)
        .map(|i| scenario.namespace(&format!("g{i:05}")))
        .collect();
    let fresh: Vec<String> = (0..options.samples)
        .map(|i| scenario.namespace(&format!("new{i:03}")))
        .collect();
    let mut rows = Vec::new();

    let started = Instant::now();
    namespaces::create(
        &cluster.admin,
        &walled,
        &scenario.walled_labels(),
        options.create_concurrency,
    )
    .await?;
    namespaces::create(
        &cluster.admin,
        &fresh,
        &scenario.other_labels(),
        options.create_concurrency,
    )
    .await?;
    let setup = started.elapsed();
    eprintln!(
        "   created {} namespaces in {:.1} s",
        walled.len() + fresh.len(),
        setup.as_secs_f64()
    );
    rows.push(Row {
        what: format!(
            "setup: create namespaces ({} at a time, admin)",
            options.create_concurrency
        ),
        size: n,
        median: ms(setup.as_secs_f64() * 1e3),
        spread: "-".to_owned(),
        target: "-".to_owned(),
        verdict: Verdict::Info,
        detail: format!("{} namespaces", walled.len() + fresh.len()),
    });

    let policies = PolicyWatch::start(cluster.admin.clone()).await?;
    let statuses = BaselineWatch::start(cluster.admin.clone());
    let reconciler_args = |resync_secs: u64| {
        let mut args = vec![
            format!("--resync-interval={resync_secs}s"),
            format!("--lease-name={}-lease", scenario.name),
        ];
        args.extend(options.reconciler_args.iter().cloned());
        args
    };
    let args = reconciler_args(options.resync_secs);
    let mut reconciler = Reconciler::spawn(cluster, &format!("bench{n}-a"), &args).await?;
    reconciler
        .wait_started(false, Duration::from_secs(60))
        .await?;
    // The audit log is written after the responses: let the startup's requests land before
    // the first mark.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. Convergence, repeated; the last baseline stays for the next phases.
    let expected = 2 * n;
    let mut times = Vec::new();
    let mut details = Vec::new();
    let mut all_writes_ok = true;
    let mut converged_memory = None;
    let mut baseline = String::new();
    let reps = options.reps_for(n);
    for rep in 1..=reps {
        baseline = format!("{}-r{rep}", scenario.name);
        let label = baseline_label_value(&baseline);
        let mark = cluster.audit.mark();
        let cpu = CpuMeter::start(reconciler.pid());
        let before = reconciler.reconcile_time()?;
        let t0 = Instant::now();
        create_baseline(cluster, &baseline, &scenario).await?;
        let created = t0.elapsed();
        let deadline = Duration::from_secs(30) + Duration::from_millis(30) * u32::try_from(n)?;
        let (walls_at, ready_at) = loop {
            let walls = (policies.count(&label) >= expected)
                .then(|| policies.last_applied(&label))
                .flatten();
            let ready = statuses.first_after(&baseline, t0, |generation, status| {
                is_ready(generation, status, u32::try_from(n).unwrap_or(u32::MAX))
            });
            if let (Some(walls), Some((ready, _))) = (walls, &ready) {
                break (walls, *ready);
            }
            if t0.elapsed() > deadline {
                bail!(
                    "convergence of {n} namespaces: not done after {deadline:?} ({} of {expected} objects, ready: {})",
                    policies.count(&label),
                    ready.is_some()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let converged = walls_at.max(ready_at) - t0;
        let cpu = cpu.describe();
        // Settle: the reconcile triggered by its own writes finds everything in place.
        let settled = wait_for(Duration::from_secs(10), || {
            statuses
                .first_after(&baseline, t0, |generation, status| {
                    is_ready(generation, status, u32::try_from(n).unwrap_or(u32::MAX))
                        && status.objects_applied == 0
                })
                .is_some()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = reconciler.reconcile_time()?;
        if rep == 1 {
            converged_memory = Some(reconciler.memory()?);
        }
        let requests = requests_since(cluster, mark);
        let writes_ok = requests
            .as_ref()
            .is_none_or(|r| r.policy_writes == expected && r.lists == 0 && r.throttled == 0);
        all_writes_ok &= writes_ok;
        // Where the fixed costs are: the create's answer, the baseline seen by a watch (the
        // bench's, like the reconciler's), the first object seen.
        let since_t0 = |at: Option<Instant>| {
            at.map_or_else(|| "-".to_owned(), |at| ms((at - t0).as_secs_f64() * 1e3))
        };
        let seen = since_t0(
            statuses
                .first_after(&baseline, t0, |_, _| true)
                .map(|(at, _)| at),
        );
        let first_wall = since_t0(policies.first_applied(&label));
        let detail = format!(
            "rep {rep}: {} (created {}, seen {seen}, first object {first_wall}, walls {}, Ready {}); {}; reconciles {} taking {} in all; {}{}",
            ms(converged.as_secs_f64() * 1e3),
            ms(created.as_secs_f64() * 1e3),
            ms((walls_at - t0).as_secs_f64() * 1e3),
            ms((ready_at - t0).as_secs_f64() * 1e3),
            describe(&requests),
            after.0 - before.0,
            ms((after.1 - before.1) * 1e3),
            cpu,
            if settled {
                ""
            } else {
                "; NOT settled (objectsApplied never 0)"
            }
        );
        eprintln!("   convergence {detail}");
        if let Some(requests) = &requests {
            eprintln!("     requests: {}", requests.by_verb);
        }
        times.push(converged);
        details.push(detail);
        if rep < reps {
            remove_baseline_and_wall(cluster, &policies, &baseline, &walled).await?;
        }
    }
    let samples = Samples::new(&times);
    let target_time = n == 1_000;
    let time_ok = !target_time || samples.p(50.0) <= 5_000.0;
    rows.push(Row {
        what: "convergence: baseline created → every wall seen + status Ready".to_owned(),
        size: n,
        median: samples.median(),
        spread: samples.spread(),
        target: if target_time {
            "≤ 5 s; policy writes = 2N; no LIST".to_owned()
        } else {
            "policy writes = 2N; no LIST".to_owned()
        },
        verdict: Verdict::of(time_ok && all_writes_ok),
        detail: details.join(" ;; "),
    });
    let memory = converged_memory.context("no convergence rep")?;
    rows.push(memory_row(
        "memory: reconciler RSS once converged (first rep)",
        n,
        memory,
    ));

    // 2. and 3.: not with --restart-only.
    if !options.restart_only {
        // 2. Steady state, once the install's report writes (if the Report CRD is served)
        // have ended: one reconcile writes every namespace's report after the walls, and at
        // 20,000 those writes outlast the convergence.
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some((writes, took)) = report_writes_ended(cluster, Duration::from_secs(600)).await?
        {
            eprintln!(
                "   report writes after the convergence: {writes}; none in the 2 s interval ending {} after the wait began",
                ms(took.as_secs_f64() * 1e3)
            );
        }
        let mark = cluster.audit.mark();
        let before = reconciler.successful_reconciles()?;
        let window = Duration::from_secs(2 * options.resync_secs + 1);
        tokio::time::sleep(window).await;
        let resyncs = reconciler.successful_reconciles()? - before;
        let requests = requests_since(cluster, mark);
        let per_resync = |count: usize| {
            // Counts stay far below 2^52.
            #[allow(clippy::cast_precision_loss)]
            let count = count as f64;
            count / resyncs.max(1.0)
        };
        let steady_ok = resyncs >= 1.0
            && requests
                .as_ref()
                .is_none_or(|r| r.writes() == 0 && r.lists == 0);
        rows.push(Row {
            what: format!(
                "steady state: requests per resync (resync {} s, window {} s)",
                options.resync_secs,
                window.as_secs()
            ),
            size: n,
            median: requests.as_ref().map_or_else(
                || "n/a".to_owned(),
                |r| {
                    format!(
                        "{:.1} req, {:.1} writes",
                        per_resync(r.total - r.lease),
                        per_resync(r.writes())
                    )
                },
            ),
            spread: format!("{resyncs} resyncs"),
            target: "0 writes, no LIST".to_owned(),
            verdict: Verdict::of(steady_ok),
            detail: format!(
                "{}; {}",
                describe(&requests),
                reconciler.memory()?.describe()
            ),
        });

        // Memory once the caches have lived a while: what a quiet cluster's reconciler holds.
        if options.rest_secs > 0 {
            tokio::time::sleep(Duration::from_secs(options.rest_secs)).await;
            rows.push(memory_row(
                &format!(
                    "memory: reconciler RSS after {} s at rest",
                    options.rest_secs
                ),
                n,
                reconciler.memory()?,
            ));
        }

        // 3. Drift repair, at the repair phase's resync interval.
        if options.repair_resync_secs != options.resync_secs {
            reconciler.stop().await?;
            reconciler = Reconciler::spawn(
                cluster,
                &format!("bench{n}-r"),
                &reconciler_args(options.repair_resync_secs),
            )
            .await?;
            reconciler
                .wait_started(true, Duration::from_secs(60))
                .await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mark = cluster.audit.mark();
        let profile = Profile::start(reconciler.pid());
        let cpu = CpuMeter::start(reconciler.pid());
        let before = reconciler.reconcile_time()?;
        let samples_n = options.samples;
        let targets: Vec<Key> = (0..samples_n)
            .map(|i| {
                let name = if i % 2 == 0 {
                    deny_all_policy_name(&baseline)
                } else {
                    dns_policy_name(&baseline)
                };
                (walled[i * n / samples_n].clone(), name)
            })
            .collect();
        let (latencies, failures) = time_each(
            &targets,
            |(namespace, name)| async move {
                let api: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), namespace);
                api.delete(name, &DeleteParams::default()).await?;
                Ok(())
            },
            |key, t0| policies.back_after(key, t0),
        )
        .await?;
        let cpu_seconds = cpu.seconds();
        let cpu = cpu.describe();
        drop(profile);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = reconciler.reconcile_time()?;
        let requests = requests_since(cluster, mark);
        // The same repairs as the API server saw them: delete answered → re-create answered.
        let audited = cluster.audit.all_requests_since(mark).map(|events| {
            let managed = [deny_all_policy_name(&baseline), dns_policy_name(&baseline)];
            namespace_baseline_cluster_tests::repairs::repairs(
                &events,
                &reconciler_username(),
                &managed,
            )
        });
        if let Some((repairs, unmatched)) = &audited {
            let latencies: Vec<Duration> = repairs.iter().map(|repair| repair.latency()).collect();
            let audit_samples = Samples::new(&latencies);
            #[allow(clippy::cast_precision_loss)]
            let per_repair = cpu_seconds * 1e3 / repairs.len().max(1) as f64;
            rows.push(Row {
            what: format!(
                "drift repair (audit log, resync {} s): delete answered → re-create answered",
                options.repair_resync_secs
            ),
            size: n,
            median: audit_samples.median(),
            spread: audit_samples.spread(),
            target: "p99 ≤ 50 ms; ≤ 5 ms reconciler CPU per repair".to_owned(),
            verdict: Verdict::of(audit_samples.p(99.0) <= 50.0 && per_repair <= 5.0),
            detail: format!(
                "{} repairs ({unmatched} deletions without a repair); reconciler CPU {per_repair:.2} ms per repair",
                repairs.len()
            ),
        });
        }
        rows.push(latency_row(
        "drift repair: managed policy deleted → seen again",
        n,
        &latencies,
        failures,
        format!(
            "{} deletions, {failures} not repaired within 10 s; {}; reconciles {} taking {} in all (resyncs included); {cpu}",
            latencies.len(),
            describe(&requests),
            after.0 - before.0,
            ms((after.1 - before.1) * 1e3),
        ),
    ));
    }

    // 3b. The DNS namespace's churn (`--dns-churn`), on a reconciler of its own whose resync
    // falls in neither window, started once the bench's pods are in the DNS namespace (their
    // creation is no part of either window); the restarts below stop it.
    if let Some(churn) = &options.dns_churn {
        reconciler.stop().await?;
        let targets = dns_churn::Targets::create(cluster).await?;
        reconciler = Reconciler::spawn(
            cluster,
            &format!("bench{n}-d"),
            &reconciler_args(dns_churn::RESYNC.as_secs()),
        )
        .await?;
        reconciler
            .wait_started(true, Duration::from_secs(60))
            .await?;
        rows.push(dns_churn::measure(cluster, &reconciler, &baseline, n, churn, &targets).await?);
        targets.remove(&cluster.admin).await?;
    }

    // 4. Restart on the converged cluster, each start just after the floor it is compared
    // with: a bare client's LIST of the same Namespaces and NetworkPolicies (list_floor.rs).
    let mut ready_times = Vec::new();
    let mut reconciled_times = Vec::new();
    let mut floor_times = Vec::new();
    let mut startup_writes = 0;
    let mut startup_details = Vec::new();
    let mut startup_memory = None;
    let mut startup_ready = true;
    for k in 1..=options.startups {
        reconciler.stop().await?;
        let listed = list_floor::list(cluster.reconciler_client().await?).await?;
        floor_times.push(listed.took);
        let mark = cluster.audit.mark();
        let mut next = Reconciler::spawn(cluster, &format!("bench{n}-s{k}"), &args).await?;
        let startup = next.wait_started(true, Duration::from_secs(60)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = cluster
            .baselines()
            .get(&baseline)
            .await?
            .status
            .context("no status")?;
        let generation = cluster
            .baselines()
            .get(&baseline)
            .await?
            .metadata
            .generation;
        let ready = is_ready(generation, &status, u32::try_from(n)?);
        let requests = requests_since(cluster, mark);
        startup_writes += requests.as_ref().map_or(0, Requests::writes);
        startup_memory = Some(next.memory()?);
        startup_details.push(format!(
            "start {k}: floor {} ({} namespaces, {} policies, {} pages); ready {}, first pass done {}, status Ready {ready}; {}",
            ms(listed.took.as_secs_f64() * 1e3),
            listed.namespaces,
            listed.policies,
            listed.pages,
            ms(startup.ready.as_secs_f64() * 1e3),
            ms(startup.reconciled.as_secs_f64() * 1e3),
            describe(&requests)
        ));
        startup_ready &= ready;
        ready_times.push(startup.ready);
        reconciled_times.push(startup.reconciled);
        reconciler = next;
    }
    let ready_samples = Samples::new(&ready_times);
    let reconciled_samples = Samples::new(&reconciled_times);
    let floor_samples = Samples::new(&floor_times);
    let restart_ratio = reconciled_samples.p(50.0) / floor_samples.p(50.0);
    rows.push(Row {
        what: "restart floor: a bare client LISTs the Namespaces (metadata) and NetworkPolicies, paged as the watches page".to_owned(),
        size: n,
        median: floor_samples.median(),
        spread: floor_samples.spread(),
        target: "-".to_owned(),
        verdict: Verdict::Info,
        detail: "resourceVersion=0 (not older than), pages of 500, both at once, on a fresh connection".to_owned(),
    });
    rows.push(Row {
        what: "restart on a converged cluster: spawn → leading and /readyz 200".to_owned(),
        size: n,
        median: ready_samples.median(),
        spread: ready_samples.spread(),
        target: "-".to_owned(),
        verdict: Verdict::Info,
        detail: startup_details.join(" ;; "),
    });
    rows.push(Row {
        what: "restart on a converged cluster: spawn → first full pass done (status Ready)"
            .to_owned(),
        size: n,
        median: reconciled_samples.median(),
        spread: format!("{}; ratio {restart_ratio:.2}", reconciled_samples.spread()),
        target: "≤ 1.2 × the restart floor; 0 writes (lease excluded)".to_owned(),
        verdict: Verdict::of(restart_ratio <= 1.2 && startup_writes == 0 && startup_ready),
        detail: format!(
            "floor median {}; writes in all {} starts: {startup_writes}; status Ready after each: {startup_ready}",
            floor_samples.median(),
            options.startups
        ),
    });
    if let Some(memory) = startup_memory {
        rows.push(memory_row(
            "memory: reconciler RSS after a restart on the converged cluster (HWM: the initial LIST)",
            n,
            memory,
        ));
    }

    // 4b. Take-over: a warm standby beside the leader, the leader SIGKILLed (no release), timed
    // from the standby taking the Lease (its expiry excluded) to its first full pass done.
    let mut takeover_times = Vec::new();
    let mut takeover_writes = 0;
    let mut takeover_details = Vec::new();
    let mut standby_memory_ok = true;
    for k in 1..=options.takeovers {
        let mut standby = Reconciler::spawn(cluster, &format!("bench{n}-t{k}"), &args).await?;
        let warm = standby.wait_standby(Duration::from_secs(60)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (standby_memory, leader_memory) = (standby.memory()?, reconciler.memory()?);
        standby_memory_ok &= standby_memory.rss_kib <= leader_memory.rss_kib;
        let mark = cluster.audit.mark();
        reconciler.kill();
        let takeover = standby.wait_take_over(Duration::from_secs(60)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let requests = requests_since(cluster, mark);
        takeover_writes += requests.as_ref().map_or(0, Requests::writes);
        takeover_details.push(format!(
            "take-over {k}: standby ready (warm) {} after spawn; RSS standby {} / leader {}; SIGKILL → Lease {}; Lease → first pass done {} ({}); {}",
            ms(warm.as_secs_f64() * 1e3),
            standby_memory.describe(),
            leader_memory.describe(),
            ms(takeover.led.as_secs_f64() * 1e3),
            ms(takeover.first_pass.as_secs_f64() * 1e3),
            takeover.pass_took.map_or_else(
                || "its duration not read alone".to_owned(),
                |took| format!(
                    "the pass took {}: it began ≤ {} after the Lease",
                    ms(took.as_secs_f64() * 1e3),
                    ms(takeover.first_pass.saturating_sub(took).as_secs_f64() * 1e3)
                )
            ),
            describe(&requests)
        ));
        takeover_times.push(takeover.first_pass);
        reconciler = standby;
    }
    if !takeover_times.is_empty() {
        let takeover_samples = Samples::new(&takeover_times);
        let ratio = takeover_samples.p(50.0) / floor_samples.p(50.0);
        rows.push(Row {
            what: "take-over after a leader SIGKILL: Lease taken → first full pass done (warm standby)".to_owned(),
            size: n,
            median: takeover_samples.median(),
            spread: format!("{}; ratio {ratio:.2}", takeover_samples.spread()),
            target: "≤ 1.2 × the restart floor; 0 writes; standby RSS ≤ leader's".to_owned(),
            verdict: Verdict::of(ratio <= 1.2 && takeover_writes == 0 && standby_memory_ok),
            detail: takeover_details.join(" ;; "),
        });
    }

    // 5. and 6.: not with --restart-only.
    if options.restart_only {
        reconciler.stop().await?;
        return Ok(rows);
    }

    // 5. New namespaces.
    let mark = cluster.audit.mark();
    let before = reconciler.reconcile_time()?;
    let scenario = &scenario;
    let (latencies, failures) = time_each(
        &fresh,
        |namespace| async move {
            scenario
                .set_namespace_label(namespace, Some(&scenario.label_value))
                .await
        },
        |namespace, t0| {
            let first = policies
                .applied_after(&(namespace.clone(), deny_all_policy_name(&baseline)), t0)?;
            let second =
                policies.applied_after(&(namespace.clone(), dns_policy_name(&baseline)), t0)?;
            Some(first.max(second))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = reconciler.reconcile_time()?;
    let requests = requests_since(cluster, mark);
    rows.push(latency_row(
        "new namespace: label set → both wall objects seen",
        n,
        &latencies,
        failures,
        format!(
            "{} namespaces labelled, {failures} not walled within 10 s; {}; reconciles {} taking {} in all (resyncs included); {}",
            latencies.len(),
            describe(&requests),
            after.0 - before.0,
            ms((after.1 - before.1) * 1e3),
            reconciler.memory()?.describe()
        ),
    ));
    reconciler.stop().await?;

    // 6. The floor: the same writes by a plain client as the reconciler's ServiceAccount, at
    // several concurrencies, each repeated as often as the convergence (`--reps`): the lowest
    // median is the floor, compared median to median with the convergence. Each run writes a
    // new wall (every apply creates an object) and removes it after, as a convergence rep's
    // is: both meet the API server in the same state.
    let client = cluster.reconciler_client().await?;
    let mut floor_runs = Vec::new();
    for concurrency in [16, 32, 64] {
        let mut runs = Vec::new();
        let mut run_requests = None;
        for rep in 1..=reps {
            let name = format!("{}-floor{concurrency}-{rep}", scenario.name);
            let mark = cluster.audit.mark();
            let took = floor::run(&client, &name, &walled, concurrency).await?;
            let requests = requests_since(cluster, mark);
            remove_wall(cluster, &policies, &name, &walled).await?;
            eprintln!(
                "   floor: {} applies at concurrency {concurrency} in {}; {}",
                2 * n,
                ms(took.as_secs_f64() * 1e3),
                describe(&requests)
            );
            runs.push(took);
            run_requests = Some(requests);
        }
        floor_runs.push((concurrency, Samples::new(&runs), run_requests.flatten()));
    }
    let (best_concurrency, best, best_requests) = floor_runs
        .iter()
        .min_by(|(_, a, _), (_, b, _)| a.p(50.0).total_cmp(&b.p(50.0)))
        .context("no floor run")?;
    let floor_ms = best.p(50.0);
    let converged_ms = samples.p(50.0);
    let ratio = converged_ms / floor_ms;
    rows.push(Row {
        what: "floor: 2N server-side applies by a plain client (best concurrency, median) vs convergence (median)"
            .to_owned(),
        size: n,
        median: ms(floor_ms),
        spread: format!("ratio {ratio:.2}"),
        target: "convergence ≤ 1.2 × floor".to_owned(),
        verdict: Verdict::of(ratio <= 1.2),
        detail: format!(
            "floor at concurrency {best_concurrency} ({}); medians (spread) by concurrency: {}; convergence median {}",
            describe(best_requests),
            floor_runs
                .iter()
                .map(|(concurrency, runs, _)| format!(
                    "{concurrency} → {} ({})",
                    ms(runs.p(50.0)),
                    runs.spread()
                ))
                .collect::<Vec<_>>()
                .join(", "),
            ms(converged_ms)
        ),
    });
    Ok(rows)
}

/// The RSS goal at `n` namespaces (MiB), where there is one.
fn memory_goal(n: usize) -> Option<f64> {
    match n {
        20_000.. => Some(64.0),
        LARGE_SIZE.. => Some(32.0),
        _ => None,
    }
}

fn memory_row(what: &str, n: usize, memory: Memory) -> Row {
    let goal = memory_goal(n);
    Row {
        what: what.to_owned(),
        size: n,
        median: format!("{:.1} MiB", mib(memory.rss_kib)),
        spread: format!("HWM {:.1} MiB", mib(memory.hwm_kib)),
        target: goal.map_or_else(|| "-".to_owned(), |goal| format!("≤ {goal} MiB")),
        verdict: goal.map_or(Verdict::Info, |goal| {
            Verdict::of(mib(memory.rss_kib) <= goal)
        }),
        detail: memory.describe(),
    }
}

/// The reconciler's requests since `mark`, when the audit log is known.
/// A row of latencies whose target is a p99 of at most 1 s, with no miss.
fn latency_row(
    what: &str,
    n: usize,
    latencies: &[Duration],
    failures: usize,
    detail: String,
) -> Row {
    let samples = Samples::new(latencies);
    Row {
        what: what.to_owned(),
        size: n,
        median: samples.median(),
        spread: samples.spread(),
        target: "p99 ≤ 1 s".to_owned(),
        verdict: Verdict::of(failures == 0 && samples.p(99.0) <= 1_000.0),
        detail,
    }
}

/// The reconciler's requests, or why they are not known.
fn describe(requests: &Option<Requests>) -> String {
    requests
        .as_ref()
        .map_or_else(|| "no audit log".to_owned(), Requests::describe)
}

/// Waits until a whole 2 s interval passes with no report write by the reconciler (audit
/// log): how many there were before, and how long that took. `None` without an audit log,
/// or when there were none; an error if they go on past `timeout`.
async fn report_writes_ended(
    cluster: &Cluster,
    timeout: Duration,
) -> Result<Option<(usize, Duration)>> {
    let t0 = Instant::now();
    let mut writes = 0;
    loop {
        let mark = cluster.audit.mark();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Some(requests) = requests_since(cluster, mark) else {
            return Ok(None);
        };
        if requests.report_writes == 0 {
            return Ok((writes > 0).then(|| (writes, t0.elapsed())));
        }
        writes += requests.report_writes;
        if t0.elapsed() > timeout {
            bail!(
                "report writes still going on {timeout:?} after the convergence ({writes} so far)"
            );
        }
    }
}

fn requests_since(cluster: &Cluster, mark: AuditMark) -> Option<Requests> {
    std::env::var_os(ENV_AUDIT_LOG)?;
    cluster
        .audit
        .requests_since(mark, &reconciler_username())
        .map(|events| Requests::of(&events))
}

/// Times `act` on each item, one at a time: from just before it until `seen(item, t0)` tells
/// when the admin's watch saw its effect. A miss (10 s) counts as 10 s and as a failure.
/// Returns the latencies and the number of misses.
async fn time_each<'i, T, F, Fut>(
    items: &'i [T],
    mut act: F,
    seen: impl Fn(&T, Instant) -> Option<Instant>,
) -> Result<(Vec<Duration>, usize)>
where
    F: FnMut(&'i T) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    const MISS: Duration = Duration::from_secs(10);
    let mut latencies = Vec::new();
    let mut failures = 0;
    for item in items {
        let t0 = Instant::now();
        act(item).await?;
        match wait_value(MISS, || seen(item, t0)).await {
            Some(at) => latencies.push(at - t0),
            None => {
                failures += 1;
                latencies.push(MISS);
            }
        }
        // One change at a time: the next starts once this one's repair had room to finish.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((latencies, failures))
}

async fn wait_for(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    wait_value(timeout, || check().then_some(()))
        .await
        .is_some()
}

/// Polls `check` (in memory: no request) every 2 ms until it yields a value; `None` after
/// `timeout` (a miss is a figure here, not an error).
async fn wait_value<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let every = Duration::from_millis(2);
    wait_until_every("a value", timeout, every, || {
        let value = check();
        async move { Ok(value) }
    })
    .await
    .ok()
    .map(|(value, _)| value)
}

async fn create_baseline(cluster: &Cluster, name: &str, scenario: &Scenario) -> Result<()> {
    let object: NamespaceBaseline = serde_json::from_value(json!({
        "apiVersion": "hedronite.io/v1alpha1",
        "kind": "NamespaceBaseline",
        "metadata": {"name": name},
        "spec": {"namespaceLabel": scenario.selector()},
    }))?;
    cluster
        .baselines()
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating baseline {name}"))?;
    Ok(())
}

/// Deletes a baseline (`Orphan`: its wall stays) and then its wall ([`remove_wall`]).
async fn remove_baseline_and_wall(
    cluster: &Cluster,
    policies: &PolicyWatch,
    baseline: &str,
    namespaces: &[String],
) -> Result<()> {
    cluster
        .baselines()
        .delete(baseline, &DeleteParams::default())
        .await?;
    remove_wall(cluster, policies, baseline, namespaces).await
}

/// Deletes, as the admin, the wall objects of `baseline`, one collection per namespace;
/// waits until the watch has seen every object go, then a second more.
async fn remove_wall(
    cluster: &Cluster,
    policies: &PolicyWatch,
    baseline: &str,
    namespaces: &[String],
) -> Result<()> {
    let label = baseline_label_value(baseline);
    let selector = format!("{},{BASELINE_LABEL}={label}", managed_selector());
    stream::iter(namespaces.iter().cloned())
        .map(|namespace| {
            let api: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &namespace);
            let selector = selector.clone();
            async move {
                api.delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&selector),
                )
                .await
                .with_context(|| format!("removing the wall in {namespace}"))
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    if !wait_for(Duration::from_secs(60), || policies.count(&label) == 0).await {
        bail!("the wall of {baseline} was not gone within 60 s");
    }
    // Let the reconciler's caches take in the deletions too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}
