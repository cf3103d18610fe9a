//! n8: the window of issue 26, measured on the real node, as a user meets it. One apply of a
//! Namespace carrying a baseline's guard label and a Deployment (2 replicas) whose pods,
//! from their first instant, try TCP and UDP to a listener pod in another (unwalled)
//! namespace, which tries to connect in; repeated R rounds with `podsWaitForWall` on (the
//! built policy in the API server's admission chain, core/src/decisions/admission/pods.rs) and R with
//! its Pod CREATE rule out of the chain, and R with the gate in the API server itself (the
//! chart's `admissionPolicy.pods.inProcess` listing the baseline: its ValidatingAdmissionPolicy
//! and bindings, and the webhook's Pod rule out of the chain, as the chart's negation takes
//! these namespaces out of it; docs/design.md, "The wall checked in the API server").
//!
//! What it tells: from the audit log, how many pods were admitted before the wall's
//! NetworkPolicies were created (gate on and in-process: asserted 0; off: reported); from the pods' own
//! records, how many attempts got through before the enforcer acted (kube-router v2.1.0's
//! own window, kube-router#873: reported, never asserted); and what the gate costs, the
//! Namespace create to the first pod Running (p50/p99).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};
use namespace_baseline_cluster_tests::admission::ChainOptions;
use namespace_baseline_cluster_tests::in_process::{ChartObjects, delete_bindings};
use namespace_baseline_cluster_tests::kubewarden_stack::{ACTIVE_WITHIN, ControllerChain};
use namespace_baseline_cluster_tests::{
    AuditEvent, AuditMark, Cluster, Scenario, deny_all_policy_name, dns_policy_name,
};
use serde_json::{Value, json};

use crate::common::{self, figure};
use crate::pods::{
    Node, TestPod, Watch, no_labels, now_us, percentile, settled_run, start_pod, watch_record,
    whoami_container,
};
use crate::wait_namespace_gone;

/// The number of rounds per gate setting: CI runs the default; the figures README.md quotes
/// come from 30 (`NSB_N8_ROUNDS=30`).
const ROUNDS_ENV: &str = "NSB_N8_ROUNDS";
const DEFAULT_ROUNDS: usize = 10;
const REPLICAS: usize = 2;
const APP_LABEL: &str = "nsb-n8";
/// The pods' probers: an attempt every 100 ms, each given 300 ms; they outlive any round.
const PROBE_EVERY_MS: u64 = 100;
const PROBE_TIMEOUT_MS: u64 = 300;
const PROBE_FOR_MS: u64 = 600_000;
/// The containers of the Deployment's pods that probe outward, and their transports.
const PROBERS: [(&str, &str); 2] = [("tcp-out", "tcp"), ("udp-out", "udp")];
/// A path counts as enforced once every attempt for this long was blocked.
const ENFORCED_SETTLE: Duration = Duration::from_secs(1);
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a webhook configuration change may take to reach the admission chain.
const CHAIN_UPDATE: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    On,
    Off,
    /// In the API server (the chart's `admissionPolicy.pods.inProcess`).
    InProcess,
}

impl Gate {
    fn label(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
            Self::InProcess => "api",
        }
    }
}

/// What the scenario runs on: the listener in its unwalled namespace, the reconciler, the
/// baseline (`names.name`) and the admission chain.
struct Bed<'a> {
    cluster: &'a Cluster,
    names: &'a Scenario,
    node: &'a Node,
    listener: &'a TestPod,
    chain: &'a ControllerChain,
}

/// One round: a Namespace and its Deployment applied, until the wall holds on the wire.
#[derive(Debug)]
struct Round {
    namespace: String,
    /// Pods persisted before the wall's last NetworkPolicy was (etcd's order): admitted
    /// while the wall did not exist.
    admitted_before_wall: usize,
    /// Pod CREATEs answered 201 before the wall's last NetworkPolicy was (the audit log's
    /// times: a pod admitted just after the wall was stored may be answered before the
    /// wall's own request is, so this may count a pod the gate rightly let in).
    answered_before_wall: usize,
    /// Pod CREATEs refused (the gate, or the namespace's ServiceAccount not there yet).
    refused: usize,
    /// Attempts that got through before enforcement: the pods' own, out (tcp, udp).
    through_out: [usize; 2],
    /// The listener's, in (tcp, udp).
    through_in: [usize; 2],
    to_running: Duration,
}

impl Round {
    fn through(&self) -> usize {
        self.through_out.iter().chain(&self.through_in).sum()
    }
}

#[tokio::test]
async fn n8_pods_wait_for_their_wall_and_the_enforcers_window_is_measured() {
    let (cluster, names, _) = common::start("n8").await;
    let node = Node::from_env();
    let rounds = rounds();
    let listener_namespace = names.namespace("listener");
    names
        .create_namespaces(std::slice::from_ref(&listener_namespace), &no_labels())
        .await
        .expect("creating the listener's namespace");
    let listener = start_pod(&cluster.admin, &node, &listener_namespace, "listener").await;
    let _reconciler = cluster
        .start_reconciler("n8", common::SINGLE)
        .await
        .expect("starting the reconciler");
    common::create_baseline(&cluster, &names.name, common::spec(&names)).await;
    let measured = cluster
        .with_controller_chain(ChainOptions::default(), async |chain| {
            let bed = Bed {
                cluster: &cluster,
                names: &names,
                node: &node,
                listener: &listener,
                chain,
            };
            measure(&bed, rounds).await
        })
        .await;
    let mut namespaces = vec![listener_namespace];
    if let Ok(by_gate) = &measured {
        namespaces.extend(by_gate.iter().flatten().map(|r| r.namespace.clone()));
    }
    let bindings: Vec<String> = ["default-deny", "allow-dns"]
        .iter()
        .map(|part| format!("pods-wait-for-nsb-{}-{part}", names.name))
        .collect();
    delete_bindings(&cluster.admin, &bindings).await;
    names.delete_namespaces(&namespaces).await;
    let by_gate = measured.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    for namespace in &namespaces {
        wait_namespace_gone(&cluster, namespace, Duration::from_secs(180)).await;
    }
    let admitted: usize = by_gate[0].iter().map(|r| r.admitted_before_wall).sum();
    assert_eq!(
        admitted, 0,
        "with podsWaitForWall, pods were admitted before their wall: {:#?}",
        by_gate[0]
    );
    let admitted: usize = by_gate[2].iter().map(|r| r.admitted_before_wall).sum();
    assert_eq!(
        admitted, 0,
        "with the gate in the API server, pods were admitted before their wall: {:#?}",
        by_gate[2]
    );
}

fn rounds() -> usize {
    std::env::var(ROUNDS_ENV)
        .ok()
        .map(|value| value.parse().expect("NSB_N8_ROUNDS: a number of rounds"))
        .unwrap_or(DEFAULT_ROUNDS)
}

/// The three gate settings, `rounds` each (gate on first): the rounds, and the FIGURE lines.
async fn measure(bed: &Bed<'_>, rounds: usize) -> [Vec<Round>; 3] {
    let mut by_gate = [Vec::new(), Vec::new(), Vec::new()];
    for (gate, results) in [Gate::On, Gate::Off, Gate::InProcess]
        .into_iter()
        .zip(&mut by_gate)
    {
        set_gate(bed, gate).await;
        for round in 0..rounds {
            let result = run_round(bed, gate, round).await;
            eprintln!(
                "n8 gate {} round {round:02} ({}): admitted before the wall {} (answered before it {}), refused {}, through out tcp/udp {:?}, in tcp/udp {:?}, namespace -> Running {:.2} s",
                gate.label(),
                result.namespace,
                result.admitted_before_wall,
                result.answered_before_wall,
                result.refused,
                result.through_out,
                result.through_in,
                result.to_running.as_secs_f64()
            );
            results.push(result);
        }
        report(gate, results);
    }
    by_gate
}

fn report(gate: Gate, rounds: &[Round]) {
    let sum = |field: fn(&Round) -> usize| rounds.iter().map(field).sum::<usize>();
    let seconds: Vec<f64> = rounds.iter().map(|r| r.to_running.as_secs_f64()).collect();
    figure(
        "n8",
        format!(
            "gate {:<3} {} rounds: pods admitted before the wall {} (stored before it, etcd's order; answered 201 before its 201 in the audit log {}; pod CREATEs refused {}); attempts through before enforcement {} (out tcp {} udp {}, in tcp {} udp {}; in {} of {} rounds); namespace -> first pod Running p50 {:.2} s p99 {:.2} s",
            gate.label(),
            rounds.len(),
            sum(|r| r.admitted_before_wall),
            sum(|r| r.answered_before_wall),
            sum(|r| r.refused),
            sum(Round::through),
            sum(|r| r.through_out[0]),
            sum(|r| r.through_out[1]),
            sum(|r| r.through_in[0]),
            sum(|r| r.through_in[1]),
            rounds.iter().filter(|r| r.through() > 0).count(),
            rounds.len(),
            percentile(&seconds, 50.0),
            percentile(&seconds, 99.0)
        ),
    );
}

/// Applies the policies as shipped (gate on: the Pod rule's ClusterAdmissionPolicy active) or
/// deletes the Pod rule's (off), and waits until the API server acts on it.
async fn set_gate(bed: &Bed<'_>, gate: Gate) {
    let pods_policy = &bed.chain.policy_for("", "pods").name;
    let changed = match gate {
        Gate::On => match bed.chain.apply_all().await {
            Ok(()) => bed.chain.wait_active(ACTIVE_WITHIN).await,
            Err(error) => Err(error),
        },
        Gate::Off => bed.chain.delete(pods_policy).await,
        // After Off: the webhook's Pod rule stays out; the API server's bindings come in.
        Gate::InProcess => {
            let chart = ChartObjects::read().expect("the chart's in-process objects");
            chart
                .apply_policy_and_anchor(bed.cluster)
                .await
                .expect("the in-process policy");
            for part in ["default-deny", "allow-dns"] {
                let binding = chart
                    .binding_for(&bed.names.name, part, &bed.names.selector())
                    .expect("a binding");
                bed.cluster.apply(&binding).await.expect("a binding");
            }
            // The API server refreshes its policies every second.
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok(Duration::from_secs(3))
        }
    }
    .expect("changing the ClusterAdmissionPolicies");
    figure(
        "n8",
        format!(
            "gate {}: the controller acted on the policies {changed:.1?} after the change",
            gate.label()
        ),
    );
    // Dry-run creates of a pod in the listener's unguarded namespace, which the policy admits,
    // looked for in policy-server's reviews.
    let took = bed
        .chain
        .wait_pods_judged(
            &bed.cluster.admin,
            &bed.listener.namespace,
            gate == Gate::On,
            CHAIN_UPDATE,
        )
        .await
        .unwrap_or_else(|error| panic!("the gate did not turn {}: {error:#}", gate.label()));
    figure(
        "n8",
        format!(
            "gate {}: in the admission chain after {took:?}",
            gate.label()
        ),
    );
}

/// The user's one apply: the guarded Namespace and the Deployment in it.
fn documents(bed: &Bed<'_>, namespace: &str) -> [Value; 2] {
    let target = bed.listener.server();
    let prober = |(name, transport): (&str, &str)| {
        json!({
            "name": name,
            "image": bed.node.tools_image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/netprobe", "watch", transport, target, PROBE_TIMEOUT_MS.to_string(),
                PROBE_EVERY_MS.to_string(), PROBE_FOR_MS.to_string()],
            "volumeMounts": [{"name": "netprobe", "mountPath": "/netprobe", "readOnly": true}]
        })
    };
    // The probers first: the kubelet starts containers in order, and they are what the
    // user's app does at its first instant; the server (whoami) accepts the listener's.
    let mut containers: Vec<Value> = PROBERS.into_iter().map(prober).collect();
    containers.push(whoami_container(bed.node));
    [
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": bed.names.walled_labels()}
        }),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "app", "namespace": namespace},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app": APP_LABEL}},
                "template": {
                    "metadata": {"labels": {"app": APP_LABEL}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "automountServiceAccountToken": false,
                        "containers": containers,
                        "volumes": [{"name": "netprobe", "hostPath": {
                            "path": bed.node.netprobe_static(), "type": "File"}}]
                    }
                }
            }
        }),
    ]
}

async fn run_round(bed: &Bed<'_>, gate: Gate, round: usize) -> Round {
    let namespace = bed.names.namespace(&format!("{}-{round:02}", gate.label()));
    let mark = bed.cluster.audit.mark();
    let since = now_us();
    let started = Instant::now();
    let pod_creations = Creations::watch::<Pod>(&bed.cluster.admin, &namespace).await;
    let wall_creations = Creations::watch::<NetworkPolicy>(&bed.cluster.admin, &namespace).await;
    for document in documents(bed, &namespace) {
        bed.cluster
            .apply(&document)
            .await
            .unwrap_or_else(|error| panic!("applying {}: {error:#}", document["kind"]));
    }
    let (pods, to_running, ingress) = wait_running(bed, &namespace, started).await;
    let mut through_in = [0; 2];
    for (transport, watch) in &ingress {
        watch
            .wait_state(since, false, ENFORCED_SETTLE, ROUND_TIMEOUT)
            .await
            .unwrap_or_else(|error| {
                panic!("{namespace}: the wall on the listener's {transport} in: {error:#}")
            });
        through_in[usize::from(*transport == "udp")] += watch
            .since(since)
            .iter()
            .filter(|(_, through)| *through)
            .count();
    }
    let through_out = wait_outward_blocked(bed, &pods, since).await;
    let (answered_before_wall, refused) = pod_creates_before_wall(bed, &namespace, mark);
    let wall = [
        deny_all_policy_name(&bed.names.name),
        dns_policy_name(&bed.names.name),
    ]
    .iter()
    .map(|policy| {
        wall_creations
            .created(policy)
            .unwrap_or_else(|| panic!("{namespace}: NetworkPolicy {policy} never seen created"))
    })
    .max()
    .expect("two policies");
    let admitted_before_wall = pod_creations
        .all()
        .iter()
        .filter(|(_, created)| *created < wall)
        .count();
    bed.names
        .delete_namespaces(std::slice::from_ref(&namespace))
        .await;
    Round {
        namespace,
        admitted_before_wall,
        answered_before_wall,
        refused,
        through_out,
        through_in,
        to_running,
    }
}

/// Waits until the Deployment's pods run; as soon as each has an address, the listener
/// starts probing it (TCP and UDP). Returns the pods, the time from `started` to the first
/// one Running, and the listener's probers.
async fn wait_running(
    bed: &Bed<'_>,
    namespace: &str,
    started: Instant,
) -> (Vec<Pod>, Duration, Vec<(&'static str, Watch)>) {
    let api: Api<Pod> = Api::namespaced(bed.cluster.admin.clone(), namespace);
    let selector = ListParams::default().labels(&format!("app={APP_LABEL}"));
    let mut watched: Vec<String> = Vec::new();
    let mut ingress = Vec::new();
    let mut first_running = None;
    loop {
        assert!(
            started.elapsed() < ROUND_TIMEOUT,
            "{namespace}: {REPLICAS} pods not running in {ROUND_TIMEOUT:?} ({} with an address)",
            watched.len()
        );
        let pods = api
            .list(&selector)
            .await
            .unwrap_or_else(|error| panic!("listing the pods of {namespace}: {error}"))
            .items;
        for pod in &pods {
            let status = pod.status.clone().unwrap_or_default();
            let (Some(ip), Some(uid)) = (status.pod_ip, pod.metadata.uid.clone()) else {
                continue;
            };
            if watched.contains(&uid) {
                continue;
            }
            watched.push(uid);
            let target = format!("{ip}:{}", crate::pods::SERVER_PORT);
            for (_, transport) in PROBERS {
                let watch = bed
                    .listener
                    .watch(
                        bed.node,
                        transport,
                        &target,
                        PROBE_TIMEOUT_MS,
                        PROBE_EVERY_MS,
                        PROBE_FOR_MS,
                    )
                    .expect("starting the listener's prober");
                ingress.push((transport, watch));
            }
        }
        let running: Vec<Pod> = pods.into_iter().filter(is_running).collect();
        if first_running.is_none() && !running.is_empty() {
            first_running = Some(started.elapsed());
        }
        if let Some(to_running) = first_running.filter(|_| running.len() >= REPLICAS) {
            return (running, to_running, ingress);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Waits until every outward prober of every pod has been blocked for [`ENFORCED_SETTLE`]
/// (the wall holds on the way out); returns how many of their attempts got through
/// (tcp, udp), read from the containers' logs.
async fn wait_outward_blocked(bed: &Bed<'_>, pods: &[Pod], since: u128) -> [usize; 2] {
    let started = Instant::now();
    loop {
        let horizon = now_us().saturating_sub(u128::from(PROBE_TIMEOUT_MS + 100) * 1000);
        let mut through = [0; 2];
        let mut all_blocked = true;
        for pod in pods {
            for (i, (container, _)) in PROBERS.into_iter().enumerate() {
                let records = outward_records(bed.node, pod, container, since, horizon);
                through[i] += records.iter().filter(|(_, through)| *through).count();
                all_blocked &= settled_run(&records, false, ENFORCED_SETTLE, horizon).is_some();
            }
        }
        if all_blocked {
            return through;
        }
        assert!(
            started.elapsed() < ROUND_TIMEOUT,
            "the wall did not hold on the pods' way out in {ROUND_TIMEOUT:?} (through so far: {through:?})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A prober container's attempts (start µs, got through) from `since` up to `horizon`.
fn outward_records(
    node: &Node,
    pod: &Pod,
    container: &str,
    since: u128,
    horizon: u128,
) -> Vec<(u128, bool)> {
    let lines = node
        .container_log(pod, container)
        .unwrap_or_else(|error| panic!("the log of {container}: {error:#}"));
    let mut records: Vec<(u128, bool)> = lines
        .iter()
        .filter_map(|line| watch_record(line))
        .filter(|(at, _)| (since..=horizon).contains(at))
        .collect();
    records.sort_unstable();
    records
}

/// When each object of a kind in a namespace was created, as its resourceVersion (the etcd
/// revision that stored it), from a watch started before the namespace exists: the order in
/// which the API server persisted them, which the audit log's times cannot tell.
struct Creations {
    seen: Arc<Mutex<Vec<(String, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Creations {
    async fn watch<K>(client: &Client, namespace: &str) -> Self
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + k8s_openapi::serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let api: Api<K> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.namespace={namespace}"));
        let seen: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let sink = seen.clone();
        let (ready, listed) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready);
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        ready.take().map(|ready| ready.send(()));
                    }
                    Ok(watcher::Event::Apply(object)) => record_creation(&sink, object.meta()),
                    _ => {}
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), listed)
            .await
            .expect("the watch of the round's namespace listed in 10 s")
            .expect("the watch of the round's namespace");
        Self { seen, task }
    }

    fn all(&self) -> Vec<(String, u64)> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn created(&self, name: &str) -> Option<u64> {
        self.all()
            .into_iter()
            .find_map(|(seen, created)| (seen == name).then_some(created))
    }
}

/// The first event of an object carries the resourceVersion that created it.
fn record_creation(seen: &Mutex<Vec<(String, u64)>>, meta: &ObjectMeta) {
    let (Some(name), Some(version)) = (meta.name.clone(), meta.resource_version.as_deref()) else {
        return;
    };
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    if !seen.iter().any(|(known, _)| *known == name) {
        seen.push((
            name,
            version
                .parse()
                .expect("a resourceVersion (an etcd revision)"),
        ));
    }
}

impl Drop for Creations {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// From the audit log since `mark`: pod CREATEs in `namespace` answered 201 before the
/// wall's last NetworkPolicy was (its 201; the policies pass the admission chain too, so a
/// pod may be admitted while they are on their way), and pod CREATEs refused.
fn pod_creates_before_wall(bed: &Bed<'_>, namespace: &str, mark: AuditMark) -> (usize, usize) {
    let events = bed
        .cluster
        .audit
        .all_requests_since(mark)
        .expect("n8 counts pod creates in the audit log");
    let in_namespace: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.object_ref.as_ref().and_then(|o| o.namespace.as_deref()) == Some(namespace))
        .collect();
    let baseline = &bed.names.name;
    let wall_created = [deny_all_policy_name(baseline), dns_policy_name(baseline)]
        .iter()
        .map(|policy| policy_created(&in_namespace, namespace, policy))
        .max()
        .expect("two policies");
    let pod_creates = in_namespace
        .iter()
        .filter(|e| e.resource() == "pods" && e.subresource().is_none() && e.verb == "create");
    let admitted = pod_creates
        .clone()
        .filter(|e| e.code() == Some(201) && e.stage_at().is_some_and(|at| at < wall_created))
        .count();
    let refused = pod_creates.filter(|e| e.code() != Some(201)).count();
    (admitted, refused)
}

/// When the API server answered 201 to the request that created NetworkPolicy `policy`.
fn policy_created(events: &[&AuditEvent], namespace: &str, policy: &str) -> Timestamp {
    events
        .iter()
        .find(|e| {
            e.resource() == "networkpolicies"
                && e.code() == Some(201)
                && e.object_ref.as_ref().and_then(|o| o.name.as_deref()) == Some(policy)
        })
        .and_then(|e| e.stage_at())
        .unwrap_or_else(|| panic!("no 201 for NetworkPolicy {namespace}/{policy} in the audit log"))
}
