//! The soak's world: the namespaces, the baseline, the replicas behind the fault proxy, and
//! what is done to them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::faults::{
    FaultProxy, ProxyCa, Received, Upstream, endpoint, restart_apiserver, restart_etcd,
};
use namespace_baseline_cluster_tests::leadership::lease_holder;
use namespace_baseline_cluster_tests::{
    Cluster, Endpoint, Reconciler, Scenario, check_policy, condition, deny_all_policy_name,
    dns_policy_name, expected_deny_all_spec, expected_dns_spec,
};
use namespace_baseline_core::identity::{RECONCILER_NAMESPACE, managed_selector};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::options::Options;

/// A leader stopped by the soak: SIGKILLed, or sent SIGTERM (`graceful`).
pub struct LeaderStop {
    pub identity: String,
    /// When the signal was sent.
    pub at: Timestamp,
    pub graceful: bool,
}

/// A control plane or proxy restart: requests fail meanwhile.
pub struct Window {
    pub what: &'static str,
    pub from: Timestamp,
    pub until: Timestamp,
}

/// What became of one replica process.
pub struct Process {
    pub identity: String,
    pub killed: bool,
    /// The exit status after its SIGTERM, mid-soak or at the end (`None`: killed, already
    /// gone, or not exited within 25 s of the SIGTERM).
    pub exit: Option<ExitStatus>,
    /// Alive until its SIGTERM, unless killed.
    pub alive_at_end: bool,
    pub panics: usize,
    pub max_rss_kib: u64,
}

struct Replica {
    process: Reconciler,
    max_rss_kib: u64,
}

pub struct Chaos<'c> {
    cluster: &'c Cluster,
    pub scenario: Scenario,
    pub baseline: String,
    pub lease: String,
    endpoint: Endpoint,
    proxy: Option<FaultProxy>,
    proxy_ca: ProxyCa,
    upstream: Upstream,
    proxy_address: std::net::SocketAddr,
    state_dir: PathBuf,
    replicas: Vec<Replica>,
    gone: Vec<Process>,
    /// Leaders sent SIGTERM, shutting down while the chaos goes on.
    stopping: Vec<JoinHandle<Process>>,
    next_replica: usize,
    next_namespace: usize,
    /// The namespaces walled from the start: `w00000` .. `w{walled - 1}`.
    walled: usize,
    unlabelled: Vec<String>,
    rng: StdRng,
    seed: u64,
    faults: f64,
    pub stops: Vec<LeaderStop>,
    pub restarts: Vec<Window>,
    /// Drift made, by kind; `skipped`: admin requests that failed (e.g. during a restart).
    pub actions: BTreeMap<&'static str, usize>,
    /// Every request the proxy received during the chaos, with the fault it drew.
    pub received: Vec<Received>,
}

impl<'c> Chaos<'c> {
    pub async fn set_up(
        cluster: &'c Cluster,
        options: &Options,
        state_dir: PathBuf,
    ) -> Result<Self> {
        let scenario = cluster.scenario("soak");
        let walled: Vec<String> = (0..options.namespaces)
            .map(|i| scenario.namespace(&format!("w{i:05}")))
            .collect();
        let unlabelled: Vec<String> = (0..options.namespaces.div_ceil(10))
            .map(|i| scenario.namespace(&format!("u{i:05}")))
            .collect();
        scenario
            .create_namespaces(&walled, &scenario.walled_labels())
            .await?;
        scenario
            .create_namespaces(&unlabelled, &scenario.other_labels())
            .await?;
        let baseline = scenario.name.clone();
        cluster
            .create(&json!({
                "apiVersion": "hedronite.io/v1alpha1",
                "kind": "NamespaceBaseline",
                "metadata": {"name": baseline},
                "spec": {"namespaceLabel": scenario.selector(), "allowDNS": true},
            }))
            .await
            .context("creating the soak's NamespaceBaseline")?;
        let proxy = cluster.fault_proxy(options.seed)?;
        proxy.keep_received(true);
        let mut chaos = Self {
            cluster,
            lease: format!("{baseline}-lease"),
            baseline,
            endpoint: endpoint(&proxy),
            proxy_ca: proxy.ca(),
            upstream: proxy.upstream(),
            proxy_address: proxy.address(),
            proxy: Some(proxy),
            state_dir,
            replicas: Vec::new(),
            gone: Vec::new(),
            stopping: Vec::new(),
            next_replica: 1,
            next_namespace: 0,
            walled: options.namespaces,
            unlabelled,
            rng: StdRng::seed_from_u64(options.seed),
            seed: options.seed,
            faults: options.faults,
            stops: Vec::new(),
            restarts: Vec::new(),
            actions: BTreeMap::new(),
            received: Vec::new(),
            scenario,
        };
        for _ in 0..options.replicas {
            chaos.spawn_replica().await?;
        }
        Ok(chaos)
    }

    async fn spawn_replica(&mut self) -> Result<()> {
        let identity = format!("soak-{}", self.next_replica);
        self.next_replica += 1;
        let args = [
            "--leader-election=true".to_owned(),
            format!("--lease-name={}", self.lease),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let process = self
            .cluster
            .spawn_reconciler(&identity, &args, Some(&self.endpoint), "info")
            .await?;
        self.replicas.push(Replica {
            process,
            max_rss_kib: 0,
        });
        Ok(())
    }

    /// Faults on, then drift every 0.3–0.7 s and the disruptions spread evenly over the
    /// duration; faults off at the end.
    pub async fn run(&mut self, options: &Options) -> Result<()> {
        let mut schedule = disruptions(options);
        self.proxy().set_probability(self.faults);
        let started = Instant::now();
        // When the disruption being retried was first due.
        let mut deferred: Option<Duration> = None;
        println!(
            "[chaos] {} disruptions over {:?}",
            schedule.len(),
            options.duration
        );
        while started.elapsed() < options.duration {
            self.sample_memory();
            self.check_alive()?;
            if schedule
                .first()
                .is_some_and(|(at, _)| started.elapsed() >= *at)
            {
                let (at, disruption) = schedule.remove(0);
                // Said once per disruption, not on each retry while a handover is under way.
                if deferred.is_none() {
                    println!(
                        "[chaos {:>5.1}s] {disruption:?} (due at {at:.0?})",
                        started.elapsed().as_secs_f64()
                    );
                }
                if self.disrupt(disruption, options).await? {
                    if let Some(since) = deferred.take() {
                        println!(
                            "[chaos {:>5.1}s] {disruption:?} done, {:.0?} late: it waited for a handover",
                            started.elapsed().as_secs_f64(),
                            started.elapsed().saturating_sub(since)
                        );
                    }
                } else {
                    // A handover is under way: try again in a second.
                    if deferred.is_none() {
                        println!("[chaos] {disruption:?} waits for the handover under way");
                        deferred = Some(at);
                    }
                    schedule.insert(0, (started.elapsed() + Duration::from_secs(1), disruption));
                }
                continue;
            }
            self.drift().await;
            let pause = self.rng.random_range(300..700);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        for (_, disruption) in &schedule {
            println!("[chaos] not done before the end: {disruption:?}");
        }
        self.proxy().set_probability(0.0);
        let received = self.proxy().take_received();
        self.received.extend(received);
        Ok(())
    }

    fn proxy(&self) -> &FaultProxy {
        self.proxy
            .as_ref()
            .expect("the proxy runs except during its restart")
    }

    /// Whether the disruption happened. One at a time: none starts before a live replica
    /// holds the lease again (a restart in the middle of a handover would measure the
    /// restart, not the election).
    async fn disrupt(&mut self, disruption: Disruption, options: &Options) -> Result<bool> {
        let led = match self.holder().await {
            Some(holder) => self.replicas.iter().any(|r| r.process.instance == holder),
            None => false,
        };
        if !led {
            return Ok(false);
        }
        match disruption {
            Disruption::StopLeader => {
                let graceful = options.graceful_stop(self.stops.len());
                self.stop_leader(graceful).await
            }
            Disruption::RestartApiServer => {
                let from = Timestamp::now();
                let took = restart_apiserver(self.state_dir.clone()).await?;
                self.restarts.push(Window {
                    what: "API server",
                    from,
                    until: Timestamp::now(),
                });
                println!("[chaos] API server restarted in {took:.1?}");
                Ok(true)
            }
            Disruption::RestartEtcd => {
                let from = Timestamp::now();
                let took = restart_etcd(self.state_dir.clone()).await?;
                self.restarts.push(Window {
                    what: "etcd",
                    from,
                    until: Timestamp::now(),
                });
                println!("[chaos] etcd restarted in {took:.1?}");
                Ok(true)
            }
            Disruption::RestartProxy => {
                let from = Timestamp::now();
                if let Some(proxy) = self.proxy.take() {
                    self.received.extend(proxy.take_received());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                let proxy = FaultProxy::start_with(
                    self.upstream.clone(),
                    self.seed,
                    self.proxy_address,
                    self.proxy_ca.clone(),
                )?;
                proxy.set_probability(self.faults);
                proxy.keep_received(true);
                self.proxy = Some(proxy);
                self.restarts.push(Window {
                    what: "proxy",
                    from,
                    until: Timestamp::now(),
                });
                Ok(true)
            }
        }
    }

    async fn holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.cluster.admin.clone(), RECONCILER_NAMESPACE);
        lease_holder(&leases, &self.lease).await
    }

    /// SIGKILLs the leader, or sends it SIGTERM and lets it shut down (release the Lease)
    /// while the chaos goes on; starts a replacement either way.
    async fn stop_leader(&mut self, graceful: bool) -> Result<bool> {
        let Some(holder) = self.holder().await else {
            return Ok(false);
        };
        let Some(index) = self
            .replicas
            .iter()
            .position(|replica| replica.process.instance == holder)
        else {
            return Ok(false);
        };
        let mut replica = self.replicas.remove(index);
        replica.max_rss_kib = replica.max_rss_kib.max(peak_rss_kib(replica.process.pid()));
        if graceful {
            // The task sends the signal at once; the time taken just before can only make
            // the Lease look held longer.
            self.stops.push(LeaderStop {
                identity: holder.clone(),
                at: Timestamp::now(),
                graceful,
            });
            println!("[chaos] SIGTERM to the leader {holder}; starting a replacement");
            self.stopping.push(tokio::spawn(terminate(replica)));
        } else {
            replica.process.kill();
            self.stops.push(LeaderStop {
                identity: holder.clone(),
                at: Timestamp::now(),
                graceful,
            });
            println!("[chaos] SIGKILLed the leader {holder}; starting a replacement");
            self.gone.push(Process {
                identity: holder,
                killed: true,
                exit: None,
                alive_at_end: false,
                panics: panics(&replica.process),
                max_rss_kib: replica.max_rss_kib,
            });
        }
        self.spawn_replica().await?;
        Ok(true)
    }

    /// One admin change, chosen at random: 40 % delete a managed policy, 30 % widen one,
    /// 15 % create a labelled namespace, 15 % label an unlabelled one.
    async fn drift(&mut self) {
        let roll = self.rng.random_range(0..100);
        let labelled = self.random_walled();
        let outcome = match roll {
            0..40 => {
                let name = if self.rng.random_bool(0.5) {
                    deny_all_policy_name(&self.baseline)
                } else {
                    dns_policy_name(&self.baseline)
                };
                let api: Api<NetworkPolicy> =
                    Api::namespaced(self.cluster.admin.clone(), &labelled);
                (
                    "delete a managed policy",
                    ignore_missing(
                        api.delete(&name, &DeleteParams::default())
                            .await
                            .map(|_| ()),
                    ),
                )
            }
            40..70 => {
                let api: Api<NetworkPolicy> =
                    Api::namespaced(self.cluster.admin.clone(), &labelled);
                let patch = Patch::Merge(
                    json!({"spec": {"egress": [{}], "policyTypes": ["Ingress", "Egress"]}}),
                );
                let name = deny_all_policy_name(&self.baseline);
                (
                    "widen a managed policy",
                    ignore_missing(
                        api.patch(&name, &PatchParams::default(), &patch)
                            .await
                            .map(|_| ()),
                    ),
                )
            }
            70..85 => {
                let name = self
                    .scenario
                    .namespace(&format!("n{:05}", self.next_namespace));
                self.next_namespace += 1;
                let created = self
                    .scenario
                    .create_namespaces(std::slice::from_ref(&name), &self.scenario.walled_labels())
                    .await;
                (
                    "create a labelled namespace",
                    created.map_err(|e| e.to_string()),
                )
            }
            _ => match self.unlabelled.pop() {
                Some(name) => {
                    let value = self.scenario.walled_labels().into_values().next();
                    let labelled = self
                        .scenario
                        .set_namespace_label(&name, value.as_deref())
                        .await;
                    ("label a namespace", labelled.map_err(|e| e.to_string()))
                }
                None => ("label a namespace (none left)", Ok(())),
            },
        };
        let key = match outcome {
            (kind, Ok(())) => kind,
            (_, Err(_)) => "skipped (the API server refused or was down)",
        };
        *self.actions.entry(key).or_insert(0) += 1;
    }

    /// One of the namespaces walled from the start.
    fn random_walled(&mut self) -> String {
        let i = self.rng.random_range(0..self.walled);
        self.scenario.namespace(&format!("w{i:05}"))
    }

    fn sample_memory(&mut self) {
        for replica in &mut self.replicas {
            replica.max_rss_kib = replica.max_rss_kib.max(peak_rss_kib(replica.process.pid()));
        }
    }

    fn check_alive(&self) -> Result<()> {
        for replica in &self.replicas {
            replica.process.check_alive().with_context(|| {
                format!("replica {} exited on its own", replica.process.instance)
            })?;
        }
        Ok(())
    }

    /// Waits until every labelled namespace has exactly the wall, no managed policy is
    /// elsewhere, and the status says so; how long that took.
    pub async fn converge(&self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        let mut last = Vec::new();
        while started.elapsed() < timeout {
            self.check_alive()?;
            match self.problems().await {
                Ok(problems) if problems.is_empty() => return Ok(started.elapsed()),
                Ok(problems) => last = problems,
                Err(error) => last = vec![format!("{error:#}")],
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let shown: Vec<&String> = last.iter().take(10).collect();
        bail!(
            "not converged after {timeout:?}: {} problems, e.g. {shown:#?}",
            last.len()
        )
    }

    /// Everything that differs from the converged state, read from the API server.
    async fn problems(&self) -> Result<Vec<String>> {
        let admin = &self.cluster.admin;
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        let labelled: BTreeSet<String> = namespaces
            .list(&ListParams::default().labels(&self.scenario.selector()))
            .await?
            .items
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        let policies: Api<NetworkPolicy> = Api::all(admin.clone());
        let managed = policies
            .list(&ListParams::default().labels(&managed_selector()))
            .await?
            .items;
        let deny = deny_all_policy_name(&self.baseline);
        let dns = dns_policy_name(&self.baseline);
        let mut problems = Vec::new();
        let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for policy in &managed {
            let namespace = policy.namespace().unwrap_or_default();
            let name = policy.name_any();
            if !namespace.starts_with(&self.scenario.name) {
                continue;
            }
            if !labelled.contains(&namespace) {
                problems.push(format!(
                    "managed policy {namespace}/{name} outside the labelled namespaces"
                ));
                continue;
            }
            let expected = if name == deny {
                expected_deny_all_spec()
            } else if name == dns {
                expected_dns_spec()
            } else {
                problems.push(format!("unexpected managed policy {namespace}/{name}"));
                continue;
            };
            if let Err(error) = check_policy(policy, &self.baseline, &expected) {
                problems.push(format!("{error:#}"));
            }
            found.entry(namespace).or_default().insert(name);
        }
        for namespace in &labelled {
            let names = found.get(namespace);
            for name in [&deny, &dns] {
                if !names.is_some_and(|names| names.contains(name)) {
                    problems.push(format!("{namespace}/{name} missing"));
                }
            }
        }
        let baseline = self.cluster.baselines().get(&self.baseline).await?;
        let generation = baseline.metadata.generation;
        match &baseline.status {
            None => problems.push("no status".to_owned()),
            Some(status) => {
                if usize::try_from(status.namespaces).ok() != Some(labelled.len()) {
                    problems.push(format!(
                        "status counts {:?} namespaces, {} are labelled",
                        status.namespaces,
                        labelled.len()
                    ));
                }
                if status.observed_generation != generation {
                    problems.push("status of an older generation".to_owned());
                }
                if condition(status, "Ready").map(|(status, ..)| status) != Some("True".to_owned())
                {
                    problems.push(format!("Ready is {:?}", condition(status, "Ready")));
                }
            }
        }
        Ok(problems)
    }

    /// SIGTERM to every replica still running; what became of each, and of the leaders sent
    /// SIGTERM during the chaos.
    pub async fn finish(&mut self) -> Result<Vec<Process>> {
        let mut processes = std::mem::take(&mut self.gone);
        for stopping in self.stopping.drain(..) {
            processes.push(stopping.await.context("a replica's shutdown task failed")?);
        }
        for replica in self.replicas.drain(..) {
            processes.push(terminate(replica).await);
        }
        Ok(processes)
    }

    /// The Lease's holder now (after [`Self::finish`]: `None` when released).
    pub async fn final_holder(&self) -> Option<String> {
        self.holder().await
    }
}

/// SIGTERM, then up to 25 s for a clean exit; what became of the replica.
async fn terminate(mut replica: Replica) -> Process {
    let alive = replica.process.check_alive().is_ok();
    replica.max_rss_kib = replica.max_rss_kib.max(peak_rss_kib(replica.process.pid()));
    let exit = match replica.process.stop().await {
        Ok(status) => Some(status),
        Err(error) => {
            println!("[chaos] {error:#}");
            None
        }
    };
    Process {
        identity: replica.process.instance.clone(),
        killed: false,
        exit,
        alive_at_end: alive,
        panics: panics(&replica.process),
        max_rss_kib: replica.max_rss_kib,
    }
}

fn ignore_missing(result: Result<(), kube::Error>) -> Result<(), String> {
    match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

/// The peak resident set (VmHWM) of a process, in KiB; 0 when gone.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmHWM:")
                    .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

fn panics(process: &Reconciler) -> usize {
    process.log_text().matches("panicked").count()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    /// SIGKILL or SIGTERM to the leader ([`Options::graceful_stop`]).
    StopLeader,
    RestartApiServer,
    RestartEtcd,
    RestartProxy,
}

/// The disruptions at evenly spread offsets: leader stops at (i + ½)/K of the duration, the
/// restarts between them.
fn disruptions(options: &Options) -> Vec<(Duration, Disruption)> {
    let spread = |count: usize, phase: f64, disruption: Disruption| {
        (0..count).map(move |i| {
            let at = options.duration.mul_f64((i as f64 + phase) / count as f64);
            (at, disruption)
        })
    };
    let mut schedule: Vec<_> = spread(options.kills, 0.5, Disruption::StopLeader)
        .chain(spread(
            options.apiserver_restarts,
            0.3,
            Disruption::RestartApiServer,
        ))
        .chain(spread(options.etcd_restarts, 0.7, Disruption::RestartEtcd))
        .chain(spread(
            options.proxy_restarts,
            0.85,
            Disruption::RestartProxy,
        ))
        .collect();
    schedule.sort_by_key(|(at, _)| *at);
    schedule
}
