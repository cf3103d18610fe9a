//! The probe's loop, for one leadership term: every `--probe-interval` (and soon after a
//! baseline's spec changes or its wall is repaired) it runs one round per Enforce baseline
//! that has a canary namespace, records the verdict (results.rs) and triggers that
//! baseline's reconcile, which writes the `Enforced` condition (condition.rs).
//!
//! A round, all pods of the reconciler's image, each ending on its own:
//! 1. a listener in the unwalled control namespace;
//! 2. the canary in the walled canary namespace: listens, connects to the listener (egress
//!    across the wall), resolves a name through its own resolver;
//! 3. a client in the control namespace: connects to the canary (ingress across the wall)
//!    and to the listener (the positive control), resolves the same name (the DNS control).
//!
//! No pod can call the reconciler (the canary's egress is walled): each writes what it saw
//! to its termination message, which the reconciler reads from the pod's status (`get
//! pods` in the two namespaces, the only rights it has there).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use namespace_baseline_core::facts::NamespaceFacts;
use namespace_baseline_core::identity::{deny_all_policy_name, dns_policy_name};
use namespace_baseline_core::spec::{Mode, NamespaceBaseline};
use namespace_baseline_leader::TermId;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::agent::ProbeArgs;
use super::options::ProbeOptions;
use super::pods::{CANARY_FOR_LABEL, Image, PORT, PROBE_FOR_LABEL, Role, pod};
use super::report::PodFindings;
use super::results::LastRound;
use super::verdict::{Observed, Verdict, decide};
use crate::reconcile::state::State;
use crate::view::caches::Caches;

/// How often the loop looks for baselines whose spec changed.
const LOOK: Duration = Duration::from_secs(2);
/// How soon a baseline whose canary's wall was not in the cache yet is looked at again.
const WALL_PENDING: Duration = Duration::from_secs(10);
/// How often a pod's status is read while waiting for it.
const POLL: Duration = Duration::from_secs(1);
/// The limit of each probe connection and of the name resolution.
const ATTEMPT: Duration = Duration::from_secs(3);

/// The probe for one term: the task (aborted when dropped) and the reconcile triggers it
/// sends. Off (`--probe-image` empty): no task, and a trigger stream that never yields.
pub struct Probe {
    task: Option<JoinHandle<()>>,
    _idle: Option<mpsc::UnboundedSender<ObjectRef<NamespaceBaseline>>>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts the probe for a term.
pub fn start(
    client: Client,
    state: Arc<State>,
    baselines: Store<NamespaceBaseline>,
    caches: Caches,
) -> (Probe, mpsc::UnboundedReceiver<ObjectRef<NamespaceBaseline>>) {
    let (triggers, receiver) = mpsc::unbounded();
    let Some(options) = state.probes.options() else {
        return (
            Probe {
                task: None,
                _idle: Some(triggers),
            },
            receiver,
        );
    };
    state.probes.enable();
    let driver = Driver {
        client,
        options,
        term: state.leader.current_term(),
        state,
        baselines,
        caches,
        triggers,
    };
    (
        Probe {
            task: Some(tokio::spawn(driver.run())),
            _idle: None,
        },
        receiver,
    )
}

struct Driver {
    client: Client,
    options: ProbeOptions,
    state: Arc<State>,
    baselines: Store<NamespaceBaseline>,
    caches: Caches,
    triggers: mpsc::UnboundedSender<ObjectRef<NamespaceBaseline>>,
    /// The leadership term the probe runs for: its writes are refused once it ends.
    term: TermId,
}

/// When each baseline is due again, and the generation it was last probed at.
type Probed = HashMap<String, (Instant, Option<i64>)>;

impl Driver {
    async fn run(self) {
        if self.caches.synced().await.is_err() {
            return;
        }
        info!(
            interval = ?self.options.probe_interval,
            control_namespace = %self.options.probe_control_namespace,
            "enforcement probe started"
        );
        let mut probed = Probed::new();
        loop {
            let requested = self.state.probes.take_requested();
            let baselines = self.baselines.state();
            let live: BTreeSet<String> = baselines.iter().map(|b| b.name_any()).collect();
            self.state.probes.retain(&live);
            for gone in self.state.metrics.probe.baselines() {
                if !live.contains(&gone) {
                    self.state.metrics.probe.set(&gone, None);
                }
            }
            probed.retain(|name, _| live.contains(name));
            for baseline in baselines {
                if baseline.spec.mode != Mode::Enforce
                    || baseline.metadata.deletion_timestamp.is_some()
                {
                    continue;
                }
                let name = baseline.name_any();
                let due = probed.get(&name).is_none_or(|(next, generation)| {
                    Instant::now() >= *next || *generation != baseline.metadata.generation
                });
                if due || requested.contains(&name) {
                    // Rounds start one interval apart (a round's own time included).
                    let started = Instant::now();
                    let next = match self.probe(&baseline).await {
                        Ran::Round | Ran::NoCanary => started + self.options.probe_interval,
                        Ran::WallPending => started + WALL_PENDING.min(self.options.probe_interval),
                    };
                    probed.insert(name, (next, baseline.metadata.generation));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(LOOK) => {}
                () = self.state.probes.requested() => {}
            }
        }
    }

    /// One round for `baseline`: the verdict recorded, the reconcile triggered. Without a
    /// canary (or its wall), no pod is created, and only a new finding is recorded.
    async fn probe(&self, baseline: &NamespaceBaseline) -> Ran {
        let name = baseline.name_any();
        let started = Instant::now();
        let cpu_before = super::usage::cpu_ms();
        let mut cost = Cost::default();
        let canary = self.canary_of(baseline);
        let (verdict, ran) = match &canary {
            Err(verdict) => {
                let ran = match verdict {
                    Verdict::Unknown {
                        reason: "WallNotInPlace",
                        ..
                    } => Ran::WallPending,
                    _ => Ran::NoCanary,
                };
                let known = self.state.probes.last(&name);
                if known.is_some_and(|known| known.verdict == *verdict) {
                    return ran;
                }
                (verdict.clone(), ran)
            }
            Ok(canary) => {
                let verdict = self.round(baseline, canary, &mut cost).await;
                self.remove_pods(&name, canary, &mut cost).await;
                (verdict, Ran::Round)
            }
        };
        let (status, reason, message) = verdict.condition();
        info!(
            baseline = %name,
            status,
            reason,
            // Not `message`: that is the event's own ("probe round"), and a field of the same
            // name would overwrite it in the JSON log line.
            condition_message = message,
            seconds = started.elapsed().as_secs_f64(),
            pods_created = cost.pods,
            api_requests = cost.requests,
            probe_pods_cpu_ms = cost.pod_cpu_ms,
            probe_pods_max_rss_kib = cost.pod_max_rss_kib,
            reconciler_cpu_ms = super::usage::cpu_ms()
                .zip(cpu_before)
                .map(|(after, before)| after.saturating_sub(before)),
            "probe round"
        );
        self.state.metrics.probe.round();
        // A verdict that changes the condition is reported in every covered namespace's
        // OpenReports Report: the reconcile it triggers then looks at every namespace.
        let changed = self
            .state
            .probes
            .last(&name)
            .is_none_or(|last| last.verdict.condition() != verdict.condition());
        self.state.probes.record(
            &name,
            LastRound {
                verdict,
                at: now(),
                generation: baseline.metadata.generation,
            },
        );
        match &canary {
            _ if changed => self.caches.dirty.all(&name),
            // The reconcile this triggers looks at the canary namespace only (scope.rs), or,
            // without one, at none: it reports the verdict in the status.
            Ok(canary) => self.caches.dirty.namespace(&name, canary),
            Err(_) => self.caches.dirty.report(&name),
        }
        let _ = self.triggers.unbounded_send(ObjectRef::from_obj(baseline));
        ran
    }

    /// The baseline's canary namespace: labelled for it, and walled by it (its wall's
    /// policies in the cache: the probe pods are created behind a wall already there).
    fn canary_of(&self, baseline: &NamespaceBaseline) -> Result<String, Verdict> {
        let name = baseline.name_any();
        let canary = self
            .caches
            .namespaces
            .state()
            .iter()
            .find(|namespace| {
                namespace.label(CANARY_FOR_LABEL) == Some(name.as_str()) && !namespace.terminating()
            })
            .map(|namespace| NamespaceFacts::name(namespace.as_ref()).to_owned());
        let Some(canary) = canary else {
            return Err(Verdict::Unknown {
                reason: "NoCanary",
                message: format!(
                    "no namespace labelled {CANARY_FOR_LABEL}={name} (and by the baseline's namespaceLabel): create one to probe this wall (the chart's probe.canaries)"
                ),
            });
        };
        let mut wall = vec![deny_all_policy_name(&name)];
        if baseline.spec.allow_dns {
            wall.push(dns_policy_name(&name));
        }
        let missing: Vec<&String> = wall
            .iter()
            .filter(|policy| {
                self.caches
                    .policies
                    .get(&ObjectRef::new(policy).within(&canary))
                    .is_none()
            })
            .collect();
        if !missing.is_empty() {
            return Err(Verdict::Unknown {
                reason: "WallNotInPlace",
                message: format!(
                    "the canary namespace {canary} lacks the wall's {missing:?}: is it labelled with the baseline's namespaceLabel?"
                ),
            });
        }
        Ok(canary)
    }

    async fn round(&self, baseline: &NamespaceBaseline, canary: &str, cost: &mut Cost) -> Verdict {
        let name = baseline.name_any();
        let control = self.options.probe_control_namespace.as_str();
        let window = self.options.probe_listen_window;
        // The canary tests its egress and DNS a quarter of the window after its start, once
        // the enforcer has caught up with the new pod (kube-router on the test node let the
        // first packets of a pod started a second before through).
        let listen = |connect: Vec<String>, resolve: Option<String>| ProbeArgs {
            listen_port: Some(PORT),
            listen_for: window,
            connect_after: window / 4,
            connect,
            resolve,
            timeout: ATTEMPT,
            report: "/dev/termination-log".into(),
        };
        let dns_name = Some(self.options.probe_dns_name.clone());

        let listener = match self
            .start(
                &name,
                control,
                Role::ControlListener,
                &listen(Vec::new(), None),
                cost,
            )
            .await
        {
            Ok(running) => running,
            Err(verdict) => return verdict,
        };
        let control_target = format!("{}:{PORT}", listener.ip);
        let canary_pod = match self
            .start(
                &name,
                canary,
                Role::Canary,
                &listen(vec![control_target.clone()], dns_name.clone()),
                cost,
            )
            .await
        {
            Ok(running) => running,
            Err(verdict) => return verdict,
        };
        let canary_target = format!("{}:{PORT}", canary_pod.ip);
        let client_args = ProbeArgs {
            listen_port: None,
            listen_for: window,
            connect_after: Duration::ZERO,
            connect: vec![canary_target.clone(), control_target.clone()],
            resolve: dns_name,
            timeout: ATTEMPT,
            report: "/dev/termination-log".into(),
        };
        let client = match self
            .start(&name, control, Role::ControlClient, &client_args, cost)
            .await
        {
            Ok(created) => created,
            Err(verdict) => return verdict,
        };
        let client_report = match self.finished(control, &client.name, window, cost).await {
            Ok(report) => report,
            Err(verdict) => return verdict,
        };
        // Both listeners still up once the client is done: its attempts met them.
        let up = self.running(canary, &canary_pod.name, cost).await
            && self.running(control, &listener.name, cost).await;
        tokio::time::sleep_until(canary_pod.started + window).await;
        let canary_report = match self.finished(canary, &canary_pod.name, window, cost).await {
            Ok(report) => report,
            Err(verdict) => return verdict,
        };
        let listener_report = match self.finished(control, &listener.name, window, cost).await {
            Ok(report) => report,
            Err(verdict) => return verdict,
        };
        for report in [&listener_report, &canary_report, &client_report] {
            cost.pod_cpu_ms += report.cpu_ms.unwrap_or(0);
            cost.pod_max_rss_kib = cost.pod_max_rss_kib.max(report.max_rss_kib.unwrap_or(0));
        }
        decide(&Observed {
            canary_namespace: canary,
            control_namespace: control,
            control_target: &control_target,
            canary_target: &canary_target,
            control_listener: &listener_report,
            canary: &canary_report,
            control_client: &client_report,
            listeners_up_during_client: up,
            allow_dns: baseline.spec.allow_dns,
        })
    }

    /// Creates a probe pod and waits until it runs with an address (the client: until it
    /// is created).
    async fn start(
        &self,
        baseline: &str,
        namespace: &str,
        role: Role,
        args: &ProbeArgs,
        cost: &mut Cost,
    ) -> Result<Running, Verdict> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let image = Image {
            reference: self.options.probe_image.clone(),
            pull_policy: self.options.probe_image_pull_policy.clone(),
        };
        cost.requests += 1;
        self.state.metrics.probe.api_request();
        let created = self
            .state
            .write(
                self.term,
                api.create(&PostParams::default(), &pod(baseline, role, &image, args)),
            )
            .await
            .map_err(|error| {
                failed(format!(
                    "creating the {} pod in {namespace}: {}",
                    role.as_str(),
                    error.report()
                ))
            })?
            .map_err(|error| {
                failed(format!(
                    "creating the {} pod in {namespace}: {error}",
                    role.as_str()
                ))
            })?;
        cost.pods += 1;
        self.state.metrics.probe.pod_created();
        let name = created.name_any();
        debug!(%baseline, %namespace, pod = %name, role = role.as_str(), "probe pod created");
        if role == Role::ControlClient {
            return Ok(Running {
                name,
                ip: String::new(),
                started: Instant::now(),
            });
        }
        let deadline = Instant::now() + self.options.probe_listen_window;
        loop {
            let pod = self.get(&api, &name, cost).await?;
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
            let ip = status.and_then(|s| s.pod_ip.clone()).unwrap_or_default();
            if phase == "Running" && !ip.is_empty() {
                return Ok(Running {
                    name,
                    ip,
                    started: Instant::now(),
                });
            }
            if matches!(phase, "Succeeded" | "Failed") || Instant::now() >= deadline {
                return Err(failed(format!(
                    "the {} pod {namespace}/{name} is {} after {:?}{}",
                    role.as_str(),
                    if phase.is_empty() {
                        "not scheduled"
                    } else {
                        phase
                    },
                    self.options.probe_listen_window,
                    waiting_reason(&pod)
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn get(&self, api: &Api<Pod>, name: &str, cost: &mut Cost) -> Result<Pod, Verdict> {
        cost.requests += 1;
        self.state.metrics.probe.api_request();
        api.get(name)
            .await
            .map_err(|error| failed(format!("reading the probe pod {name}: {error}")))
    }

    async fn running(&self, namespace: &str, name: &str, cost: &mut Cost) -> bool {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        self.get(&api, name, cost)
            .await
            .is_ok_and(|pod| pod.status.and_then(|s| s.phase).as_deref() == Some("Running"))
    }

    /// Waits for a pod to end; its report.
    async fn finished(
        &self,
        namespace: &str,
        name: &str,
        window: Duration,
        cost: &mut Cost,
    ) -> Result<PodFindings, Verdict> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + window + Duration::from_secs(30);
        loop {
            let pod = self.get(&api, name, cost).await?;
            let terminated = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.clone());
            if let Some(terminated) = terminated {
                let message = terminated.message.unwrap_or_default();
                return PodFindings::parse(&message).map_err(|error| {
                    failed(format!(
                        "the probe pod {namespace}/{name} ended ({}, exit code {}) without its report: {error}",
                        terminated.reason.unwrap_or_default(),
                        terminated.exit_code
                    ))
                });
            }
            if Instant::now() >= deadline {
                return Err(failed(format!(
                    "the probe pod {namespace}/{name} had not ended after {:?}{}",
                    window + Duration::from_secs(30),
                    waiting_reason(&pod)
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Deletes this baseline's probe pods in both namespaces (this round's, and any left by
    /// an interrupted one).
    async fn remove_pods(&self, baseline: &str, canary: &str, cost: &mut Cost) {
        for namespace in [canary, self.options.probe_control_namespace.as_str()] {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            cost.requests += 1;
            self.state.metrics.probe.api_request();
            let selector = format!("{PROBE_FOR_LABEL}={baseline}");
            let pods = match api.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => list.items,
                Err(error) => {
                    warn!(%baseline, %namespace, %error, "cannot list the probe pods to delete them");
                    continue;
                }
            };
            for pod in pods {
                cost.requests += 1;
                self.state.metrics.probe.api_request();
                let deleted = self
                    .state
                    .write(
                        self.term,
                        api.delete(&pod.name_any(), &DeleteParams::default()),
                    )
                    .await;
                if !matches!(deleted, Ok(Ok(_))) {
                    debug!(%baseline, %namespace, pod = %pod.name_any(), "probe pod not deleted");
                }
            }
        }
    }
}

/// What [`Driver::probe`] did.
enum Ran {
    Round,
    NoCanary,
    /// The canary's wall is not in the cache yet (a new baseline): looked at again soon.
    WallPending,
}

/// A probe pod once it runs.
struct Running {
    name: String,
    ip: String,
    started: Instant,
}

/// What a round cost.
#[derive(Debug, Default)]
struct Cost {
    pods: u32,
    requests: u32,
    pod_cpu_ms: u64,
    pod_max_rss_kib: u64,
}

fn failed(message: String) -> Verdict {
    Verdict::Unknown {
        reason: "ProbeFailed",
        message,
    }
}

/// ": ImagePullBackOff (message)" when the pod's container waits for a reason.
fn waiting_reason(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .map(|waiting| {
            format!(
                ": {} ({})",
                waiting.reason.clone().unwrap_or_default(),
                waiting.message.clone().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}

/// Now, to the second: the precision the API server keeps.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}
