//! The DNS namespace's churn (issue 52). Every baseline with a DNS door has the reconciler
//! watch the Services, EndpointSlices and pods of the DNS namespace, and a real kube-system is
//! never still: its pods are annotated and relabelled by controllers and operators a few times
//! a second. A change that cannot turn a door must cost no reconcile (before issue 52 each one
//! was a full pass over every namespace), and the reconciler about what a quiet kube-system
//! costs it. So, on the converged cluster, with the bench's baseline and its default DNS door
//! checked against the harness's stand-in DNS objects (`Cluster::connect` installs them): a
//! window at rest, then a window as long in which an annotation changes at a steady rate on the
//! DNS namespace's pods (the bench's own, which no door reads, and the DNS pods, which the door
//! reads but not their annotations), on the DNS Service and on its EndpointSlices; the
//! reconciler's CPU and reconciles in each, its requests (audit log), and the door's condition
//! before and after. `--dns-churn-reps` quiet-then-busy pairs; the medians.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use namespace_baseline_cluster_tests::{
    AuditMark, Cluster, TEST_MANAGER, condition, percentile, reconciler_username,
};
use namespace_baseline_core::DnsSpec;
use namespace_baseline_core::doors::SERVICE_NAME_LABEL;
use serde_json::json;

use crate::process::{CpuMeter, Reconciler, thread_run_seconds};
use crate::report::{Requests, Row, Verdict, ms};

/// The phase's reconciler resyncs less often than this: a resync is a full pass, and one in
/// either window would be neither rest nor churn.
pub const RESYNC: Duration = Duration::from_secs(3_600);

/// Pods annotated in the busy window: the DNS pods and enough of the bench's own to make this
/// many (issue 52's measurement annotated 20 kube-system pods).
const PODS: usize = 20;

/// The annotation the busy window changes.
const ANNOTATION: &str = "bench.hedronite.io/churn";

/// The condition a DNS door's check sets on the baseline.
const DNS_REACHABLE: &str = "DNSReachable";

/// Issue 52's goal: the busy window's reconciler CPU at most this many times the quiet one's.
const GOAL_RATIO: f64 = 1.1;

/// `--dns-churn`, `--dns-churn-window S`, `--dns-churn-rate R`, `--dns-churn-reps K`.
pub struct ChurnOptions {
    /// How long each window, quiet and busy, lasts.
    pub window: Duration,
    /// Annotation changes a second in the busy window, over all targets.
    pub per_second: f64,
    /// Quiet-then-busy pairs.
    pub reps: usize,
}

impl Default for ChurnOptions {
    /// Issue 52's measurement: 60 s, 3.5 changes a second.
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
            per_second: 3.5,
            reps: 1,
        }
    }
}

/// What an annotated object is to a DNS door.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A pod of the bench's in the DNS namespace: no door reads it.
    OwnPod,
    /// A pod with the door's labels: the door reads its name and labels.
    DnsPod,
    /// The door's Service: the door reads that it exists.
    DnsService,
    /// An EndpointSlice of that Service: the door reads its endpoints and ports.
    DnsSlice,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Self::OwnPod => "pods no door reads",
            Self::DnsPod => "DNS pods",
            Self::DnsService => "the DNS Service",
            Self::DnsSlice => "its EndpointSlices",
        }
    }
}

struct Target {
    kind: Kind,
    name: String,
    api: Api<DynamicObject>,
}

/// What the busy window annotates, in turn: the DNS pods and the bench's own pods (the bench
/// creates and removes these), the DNS Service, its EndpointSlices.
pub struct Targets {
    namespace: String,
    own_pods: Vec<String>,
    in_turn: Vec<Target>,
}

impl Targets {
    /// Finds the DNS objects of the default door and creates the bench's pods beside them (so
    /// that their creation falls before either window: call it before the phase's reconciler
    /// starts). The pods are never scheduled (no node), as the harness's DNS pod.
    pub async fn create(cluster: &Cluster) -> Result<Self> {
        let door = DnsSpec::default();
        let namespace = door.namespace.clone();
        let client = &cluster.admin;
        let selector = door
            .pod_labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",");
        let dns_pods: Vec<String> = Api::<Pod>::namespaced(client.clone(), &namespace)
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("listing the DNS pods ({selector}) in {namespace}"))?
            .items
            .into_iter()
            .filter_map(|pod| pod.metadata.name)
            .collect();
        let own_pods: Vec<String> = (dns_pods.len()..PODS)
            .map(|i| format!("nsb-bench-churn-{i:02}"))
            .collect();
        for name in &own_pods {
            cluster
                .apply(&json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": {"app.kubernetes.io/managed-by": TEST_MANAGER}},
                    "spec": {"nodeName": "no-such-node",
                             "containers": [{"name": "churn", "image": "churn:stand-in"}]},
                }))
                .await
                .with_context(|| format!("creating the pod {namespace}/{name}"))?;
        }
        let (service_namespace, service) = door.service_ref();
        let service_exists = Api::<Service>::namespaced(client.clone(), service_namespace)
            .get_metadata_opt(service)
            .await?
            .is_some();
        let slices: Vec<String> =
            Api::<EndpointSlice>::namespaced(client.clone(), service_namespace)
                .list_metadata(
                    &ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")),
                )
                .await?
                .items
                .into_iter()
                .filter_map(|slice| slice.metadata.name)
                .collect();

        let target = |kind, namespace: &str, name: &str, resource: &ApiResource| Target {
            kind,
            name: name.to_owned(),
            api: Api::namespaced_with(client.clone(), namespace, resource),
        };
        let pods = ApiResource::erase::<Pod>(&());
        let mut in_turn: Vec<Target> = dns_pods
            .iter()
            .map(|name| target(Kind::DnsPod, &namespace, name, &pods))
            .chain(
                own_pods
                    .iter()
                    .map(|name| target(Kind::OwnPod, &namespace, name, &pods)),
            )
            .collect();
        if service_exists {
            in_turn.push(target(
                Kind::DnsService,
                service_namespace,
                service,
                &ApiResource::erase::<Service>(&()),
            ));
        }
        let slice_resource = ApiResource::erase::<EndpointSlice>(&());
        in_turn.extend(
            slices
                .iter()
                .map(|name| target(Kind::DnsSlice, service_namespace, name, &slice_resource)),
        );
        Ok(Self {
            namespace,
            own_pods,
            in_turn,
        })
    }

    /// Deletes the bench's pods (at once: no kubelet would confirm a graceful deletion).
    pub async fn remove(self, client: &Client) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.namespace);
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        for name in &self.own_pods {
            pods.delete(name, &now)
                .await
                .with_context(|| format!("deleting the pod {}/{name}", self.namespace))?;
        }
        Ok(())
    }

    /// Changes the annotation on the targets in turn, `per_second` times a second, for
    /// `window`; each value new (`stamp` and a count). How many changes each kind had.
    async fn annotate_for(
        &self,
        window: Duration,
        per_second: f64,
        stamp: &str,
    ) -> Result<BTreeMap<Kind, usize>> {
        let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
        // A slow answer delays the next change rather than bunching the ones after it.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let started = Instant::now();
        let mut sent = BTreeMap::new();
        for count in 0.. {
            ticks.tick().await;
            if started.elapsed() >= window {
                break;
            }
            let target = &self.in_turn[count % self.in_turn.len()];
            let patch =
                json!({"metadata": {"annotations": {ANNOTATION: format!("{stamp}-{count}")}}});
            target
                .api
                .patch_metadata(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| {
                    format!("annotating {} {}", target.kind.describe(), target.name)
                })?;
            *sent.entry(target.kind).or_default() += 1;
        }
        Ok(sent)
    }
}

/// What one window cost the reconciler.
struct Spent {
    /// CPU from the threads' run times (`None`: not readable), else from `/proc/<pid>/stat`.
    run_seconds: Option<f64>,
    stat_seconds: f64,
    reconciles: f64,
    wall: Duration,
    /// Every measured process's CPU ([`CpuMeter::describe`]).
    processes: String,
    requests: Option<Requests>,
}

impl Spent {
    /// The finer of the two CPU figures.
    fn cpu_seconds(&self) -> f64 {
        self.run_seconds.unwrap_or(self.stat_seconds)
    }

    fn describe(&self) -> String {
        format!(
            "reconciler CPU {} (threads' run time; /proc/<pid>/stat: {:.2} s), reconciles {}; {}; reconciler requests: {}",
            self.run_seconds
                .map_or_else(|| "n/a".to_owned(), |seconds| ms(seconds * 1e3)),
            self.stat_seconds,
            self.reconciles,
            self.processes,
            self.requests
                .as_ref()
                .map_or_else(|| "no audit log".to_owned(), Requests::describe)
        )
    }
}

/// A window being measured.
struct Window {
    mark: AuditMark,
    meter: CpuMeter,
    run_seconds: Option<f64>,
    reconciles: f64,
    started: Instant,
}

impl Window {
    fn start(cluster: &Cluster, reconciler: &Reconciler) -> Result<Self> {
        let pid = reconciler.pid();
        Ok(Self {
            mark: cluster.audit.mark(),
            meter: CpuMeter::start(pid),
            run_seconds: thread_run_seconds(pid),
            reconciles: reconciler.reconcile_time()?.0,
            started: Instant::now(),
        })
    }

    fn end(self, cluster: &Cluster, reconciler: &Reconciler) -> Result<Spent> {
        let pid = reconciler.pid();
        let wall = self.started.elapsed();
        let since = |start: Option<f64>, now: Option<f64>| Some(now? - start?);
        let run_seconds = since(self.run_seconds, thread_run_seconds(pid));
        let stat_seconds = self.meter.seconds();
        let reconciles = reconciler.reconcile_time()?.0 - self.reconciles;
        let processes = self.meter.describe();
        let requests = requests_between(cluster, self.mark, cluster.audit.mark());
        Ok(Spent {
            run_seconds,
            stat_seconds,
            reconciles,
            wall,
            processes,
            requests,
        })
    }
}

/// The reconciler's requests between two marks, when the audit log is known.
fn requests_between(cluster: &Cluster, from: AuditMark, to: AuditMark) -> Option<Requests> {
    let username = reconciler_username();
    let events = cluster.audit.requests_between(from, to)?;
    let ours: Vec<_> = events
        .into_iter()
        .filter(|event| event.user.username == username)
        .collect();
    Some(Requests::of(&ours))
}

/// The baseline's `DNSReachable` condition: (status, reason, message).
async fn door_condition(cluster: &Cluster, baseline: &str) -> Result<(String, String, String)> {
    condition(&cluster.status(baseline).await?, DNS_REACHABLE)
        .with_context(|| format!("{baseline} has no {DNS_REACHABLE} condition"))
}

/// Waits until the reconciler's reconcile count has held still for 5 s (its first pass and
/// the reconciles its own writes ask for are over).
async fn settle(reconciler: &Reconciler) -> Result<()> {
    const STILL: Duration = Duration::from_secs(5);
    let started = Instant::now();
    let mut count = reconciler.reconcile_time()?.0;
    let mut since = Instant::now();
    while since.elapsed() < STILL {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the reconciler still reconciling 120 s after its start");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = reconciler.reconcile_time()?.0;
        if now != count {
            (count, since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// The phase, on `reconciler` (started with [`RESYNC`] after [`Targets::create`]) and the
/// converged `baseline`: one row, quiet against busy.
pub async fn measure(
    cluster: &Cluster,
    reconciler: &Reconciler,
    baseline: &str,
    n: usize,
    options: &ChurnOptions,
    targets: &Targets,
) -> Result<Row> {
    settle(reconciler).await?;
    let door_before = door_condition(cluster, baseline).await?;
    let mut quiet_cpu = Vec::new();
    let mut busy_cpu = Vec::new();
    let (mut quiet_reconciles, mut busy_reconciles, mut writes, mut changes) = (0.0, 0.0, 0, 0);
    let mut details = Vec::new();
    for rep in 1..=options.reps {
        let window = Window::start(cluster, reconciler)?;
        tokio::time::sleep(options.window).await;
        let quiet = window.end(cluster, reconciler)?;

        let window = Window::start(cluster, reconciler)?;
        let sent = targets
            .annotate_for(
                options.window,
                options.per_second,
                &format!("{baseline}-{rep}"),
            )
            .await?;
        let busy = window.end(cluster, reconciler)?;

        let total: usize = sent.values().sum();
        // Counts stay far below 2^52.
        #[allow(clippy::cast_precision_loss)]
        let total_f64 = total as f64;
        let extra_per_change = (busy.cpu_seconds() - quiet.cpu_seconds()) * 1e6 / total_f64;
        let by_kind = sent
            .iter()
            .map(|(kind, count)| format!("{} {count}", kind.describe()))
            .collect::<Vec<_>>()
            .join(", ");
        details.push(format!(
            "rep {rep}: QUIET {:.1} s: {} ;; BUSY {:.1} s: {total} annotation changes ({:.2} a second; {by_kind}): {}; {extra_per_change:.0} µs more reconciler CPU per change",
            quiet.wall.as_secs_f64(),
            quiet.describe(),
            busy.wall.as_secs_f64(),
            total_f64 / busy.wall.as_secs_f64(),
            busy.describe(),
        ));
        eprintln!("   DNS churn {}", details.last().map_or("", String::as_str));
        quiet_cpu.push(quiet.cpu_seconds() * 1e3);
        busy_cpu.push(busy.cpu_seconds() * 1e3);
        quiet_reconciles += quiet.reconciles;
        busy_reconciles += busy.reconciles;
        writes += [&quiet, &busy]
            .iter()
            .filter_map(|spent| spent.requests.as_ref())
            .map(Requests::writes)
            .sum::<usize>();
        changes += total;
    }
    let door_after = door_condition(cluster, baseline).await?;
    let door_kept = door_before == door_after;
    quiet_cpu.sort_by(f64::total_cmp);
    busy_cpu.sort_by(f64::total_cmp);
    let (quiet_ms, busy_ms) = (percentile(&quiet_cpu, 50.0), percentile(&busy_cpu, 50.0));
    let ratio = busy_ms / quiet_ms;
    let goal_met =
        ratio <= GOAL_RATIO && busy_reconciles == 0.0 && quiet_reconciles == 0.0 && writes == 0;
    Ok(Row {
        what: format!(
            "DNS namespace churn: reconciler CPU over {} s at rest / {} s with {} annotation changes a second in the DNS namespace (median of {})",
            options.window.as_secs(),
            options.window.as_secs(),
            options.per_second,
            options.reps
        ),
        size: n,
        median: format!("{} / {}", ms(quiet_ms), ms(busy_ms)),
        spread: format!(
            "ratio {ratio:.2}; reconciles {quiet_reconciles} / {busy_reconciles}; {changes} changes"
        ),
        target: format!(
            "busy ≤ {GOAL_RATIO} × quiet; 0 reconciles, 0 writes; {DNS_REACHABLE} unchanged"
        ),
        verdict: Verdict::of(goal_met && door_kept),
        detail: format!(
            "{}; reconciler writes (audit log) {writes}; {DNS_REACHABLE} before {door_before:?}, after {door_after:?}",
            details.join(" ;; ")
        ),
    })
}
