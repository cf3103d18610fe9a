//! `make demo`: the wall held, on a real kube-apiserver, told as a person would read it.
//!
//! Run by `demo/demo.sh`, which builds this binary and the reconciler, starts
//! the local control plane (e2e-tests/control-plane) and stops it afterwards. This program:
//! installs the CRD and RBAC of `deploy/`, starts the reconciler as its own ServiceAccount,
//! creates 20 namespaces (10 labelled `baseline=guarded`) and the seed's NamespaceBaseline,
//! and shows the walls appearing, the status, a deleted and a widened policy coming back, a
//! namespace labelled late; then it asks the admission decisions (the core that `policy.wasm`
//! is compiled from) about the demo's own requests.
//!
//! Environment: `KUBECONFIG` (admin), `NSB_RECONCILER_BIN`, `NSB_DEMO_DIR` (logs; default a
//! temporary dir).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use namespace_baseline_core::admission::{self, HostCapabilities, Verdict};
use namespace_baseline_core::identity::{
    RECONCILER_NAMESPACE, deny_all_policy_name, dns_policy_name, managed_selector,
    reconciler_username,
};
use namespace_baseline_core::spec::NamespaceBaseline;
use namespace_baseline_testkit::apply::Applier;
use namespace_baseline_testkit::manifests::{self, Manifest};
use namespace_baseline_testkit::process::{ReconcilerProcess, Spawn};
use namespace_baseline_testkit::{kubeconfig, wait_until};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const FIELD_MANAGER: &str = "nsb-demo";
const BASELINE: &str = "guarded";
const GUARD_KEY: &str = "baseline";
const GUARD_VALUE: &str = "guarded";
/// How long any one step may take before the demo gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
const WIDTH: usize = 96;

#[tokio::main]
async fn main() -> ExitCode {
    let mut demo = match Demo::connect().await {
        Ok(demo) => demo,
        Err(error) => {
            eprintln!("demo: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = demo.run().await;
    let log = demo.reconciler.as_ref().map(|r| r.log.clone());
    demo.stop_reconciler().await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("\ndemo FAILED: {error:#}");
            if let Some(log) = log {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("the reconciler's log ({}), last lines:", log.display());
                for line in &lines[lines.len().saturating_sub(15)..] {
                    eprintln!("  {line}");
                }
            }
            ExitCode::FAILURE
        }
    }
}

struct Demo {
    start: Instant,
    admin: Client,
    applier: Applier,
    root: PathBuf,
    work: PathBuf,
    reconciler: Option<ReconcilerProcess>,
    /// Events already shown: uid -> series count.
    events_seen: BTreeMap<String, i32>,
    /// What happened, for the closing summary.
    figures: Vec<String>,
}

/// One change of a managed NetworkPolicy, when the watch delivered it.
struct Seen {
    at: Instant,
    deleted: bool,
    policy: NetworkPolicy,
}

/// The managed NetworkPolicies as a watch reports them.
struct PolicyWatch {
    events: mpsc::UnboundedReceiver<Seen>,
    /// (namespace, name) -> (uid, spec)
    state: BTreeMap<(String, String), (String, Value)>,
}

impl PolicyWatch {
    /// Starts watching and waits for the initial list.
    async fn start(client: Client) -> Result<Self> {
        let (sender, events) = mpsc::unbounded_channel();
        let (ready, listed) = tokio::sync::oneshot::channel();
        let api: Api<NetworkPolicy> = Api::all(client);
        tokio::spawn(async move {
            let mut ready = Some(ready);
            let config = watcher::Config::default().labels(&managed_selector());
            let mut stream = watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let at = Instant::now();
                let seen = match event {
                    Ok(watcher::Event::Apply(policy) | watcher::Event::InitApply(policy)) => Seen {
                        at,
                        deleted: false,
                        policy,
                    },
                    Ok(watcher::Event::Delete(policy)) => Seen {
                        at,
                        deleted: true,
                        policy,
                    },
                    Ok(watcher::Event::InitDone) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Init) | Err(_) => continue,
                };
                if sender.send(seen).is_err() {
                    return;
                }
            }
        });
        tokio::time::timeout(STEP_TIMEOUT, listed)
            .await
            .context("the NetworkPolicy watch did not list in time")??;
        Ok(Self {
            events,
            state: BTreeMap::new(),
        })
    }

    /// The next change before `deadline`, applied to the state.
    async fn next(&mut self, deadline: Instant) -> Result<Seen> {
        let left = deadline.saturating_duration_since(Instant::now());
        let seen = tokio::time::timeout(left, self.events.recv())
            .await
            .context("timed out waiting for the NetworkPolicy watch")?
            .context("the NetworkPolicy watch ended")?;
        let key = (
            seen.policy.namespace().unwrap_or_default(),
            seen.policy.name_any(),
        );
        if seen.deleted {
            self.state.remove(&key);
        } else {
            let uid = seen.policy.uid().unwrap_or_default();
            self.state.insert(key, (uid, spec_of(&seen.policy)));
        }
        Ok(seen)
    }

    fn has(&self, namespace: &str, name: &str) -> bool {
        self.state
            .contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    fn walled(&self, namespace: &str) -> bool {
        self.has(namespace, &deny_all_policy_name(BASELINE))
            && self.has(namespace, &dns_policy_name(BASELINE))
    }

    fn in_namespace(&self, namespace: &str) -> usize {
        self.state.keys().filter(|(ns, _)| ns == namespace).count()
    }
}

fn spec_of(policy: &NetworkPolicy) -> Value {
    serde_json::to_value(&policy.spec).unwrap_or(Value::Null)
}

fn namespace_name(index: usize) -> String {
    format!("demo-{index:02}")
}

/// "74 µs" below a millisecond, "85 ms" below a second, "1.23 s" above.
fn took(duration: Duration) -> String {
    if duration < Duration::from_millis(1) {
        format!("{} µs", duration.as_micros())
    } else if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.2} s", duration.as_secs_f64())
    }
}

/// `text` wrapped at [`WIDTH`], every line after `indent` spaces.
fn wrap(text: &str, indent: usize) -> String {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > WIDTH {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    let pad = " ".repeat(indent);
    lines
        .iter()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl Demo {
    async fn connect() -> Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let root = root.canonicalize().unwrap_or(root);
        let work = match env_path("NSB_DEMO_DIR") {
            Some(dir) => dir,
            None => std::env::temp_dir().join(format!("nsb-demo-{}", std::process::id())),
        };
        std::fs::create_dir_all(&work)?;
        let admin = Client::try_default()
            .await
            .context("connecting with KUBECONFIG (the control plane's admin kubeconfig)")?;
        Ok(Self {
            start: Instant::now(),
            applier: Applier::new(admin.clone(), FIELD_MANAGER),
            admin,
            root,
            work,
            reconciler: None,
            events_seen: BTreeMap::new(),
            figures: Vec::new(),
        })
    }

    fn say(&self, text: impl AsRef<str>) {
        let stamp = namespace_baseline_testkit::stamp(self.start);
        println!("{stamp} {}", text.as_ref());
    }

    /// A continuation line under the last `say`.
    fn more(&self, text: impl AsRef<str>) {
        println!("{}", wrap(text.as_ref(), 10));
    }

    fn section(&self, title: &str) {
        println!("\n== {title}");
    }

    async fn run(&mut self) -> Result<()> {
        let version = self.admin.apiserver_version().await?;
        println!(
            "Namespace Baseline demo: a real kube-apiserver {} with etcd, as local processes",
            version.git_version
        );
        println!("(no kubelet, scheduler or controller-manager: nothing runs pods here)");

        self.section("1. Install: the CRD and the reconciler's RBAC from deploy/");
        self.install().await?;
        self.start_reconciler().await?;

        self.section("2. Twenty namespaces, ten of them labelled baseline=guarded");
        let guarded: Vec<String> = (1..=10).map(namespace_name).collect();
        let others: Vec<String> = (11..=20).map(namespace_name).collect();
        self.create_namespaces(&guarded, &others).await?;
        let mut watch = PolicyWatch::start(self.admin.clone()).await?;

        self.section("3. The seed's NamespaceBaseline (deploy/examples/seed.yaml)");
        self.create_baseline(&mut watch, &guarded, &others).await?;
        self.wait_status(10).await?;
        self.print_baselines().await?;

        self.section("4. Drift: someone deletes a wall, someone widens one");
        self.delete_a_wall(&mut watch, "demo-03").await?;
        self.widen_a_wall(&mut watch, "demo-04").await?;

        self.section("5. A namespace labelled late, one deleted");
        self.label_late(&mut watch, "demo-15").await?;
        self.wait_status(11).await?;
        self.delete_namespace("demo-10").await?;
        self.print_baselines().await?;

        self.section("6. The admission policy's decisions on the demo's requests");
        self.replay_through_policy().await?;

        self.section("7. Done");
        self.print_metrics();
        self.stop_reconciler().await;
        for figure in &self.figures {
            println!("  - {figure}");
        }
        println!(
            "  Next: `make test` runs every test; README.md \"Install in a cluster\" puts it in yours."
        );
        Ok(())
    }

    fn documents(&self, file: &str) -> Result<Vec<Manifest>> {
        manifests::read(&self.root.join(file))
    }

    async fn install(&mut self) -> Result<()> {
        for crd in self.documents("deploy/crd.yaml")? {
            let outcome = self.applier.apply(&crd.object).await?;
            self.say(format!(
                "deploy/crd.yaml         CustomResourceDefinition {}: {}, Established",
                crd.key()?.name,
                outcome.as_str()
            ));
        }
        // Only the Namespace of reconciler.yaml: its Deployment needs a kubelet; here the
        // reconciler runs as a local process instead.
        for manifest in self.documents("deploy/reconciler.yaml")? {
            if manifest.object["kind"] == "Namespace" {
                let outcome = self.applier.apply(&manifest.object).await?;
                self.say(format!(
                    "deploy/reconciler.yaml  Namespace {}: {} (its Deployment is not applied: no kubelet)",
                    manifest.key()?.name,
                    outcome.as_str()
                ));
            }
        }
        let mut kinds = Vec::new();
        for manifest in self.documents("deploy/rbac.yaml")? {
            let outcome = self.applier.apply(&manifest.object).await?;
            kinds.push(format!("{} {}", manifest.key()?.kind, outcome.as_str()));
        }
        self.say(format!("deploy/rbac.yaml        {}", kinds.join(", ")));
        Ok(())
    }

    /// A kubeconfig for the reconciler's ServiceAccount, with a TokenRequest token.
    async fn reconciler_kubeconfig(&self) -> Result<PathBuf> {
        let admin = Kubeconfig::read().context("reading KUBECONFIG")?;
        let cluster = serde_json::to_value(kubeconfig::current_cluster(&admin)?)?;
        let path = self.work.join("reconciler.kubeconfig");
        kubeconfig::write_reconciler_kubeconfig(&self.admin, cluster, &path).await?;
        Ok(path)
    }

    async fn start_reconciler(&mut self) -> Result<()> {
        let binary = env_path("NSB_RECONCILER_BIN")
            .context("NSB_RECONCILER_BIN is not set (demo/demo.sh sets it)")?;
        let kubeconfig = self.reconciler_kubeconfig().await?;
        let reconciler = ReconcilerProcess::spawn(Spawn {
            binary: &binary,
            kubeconfig: &kubeconfig,
            instance: "demo-reconciler",
            // Short election clocks: a fresh install's first leader waits one lease duration
            // for the missing Lease, and a demo should not wait 15 s for it.
            args: DEMO_ELECTION_CLOCKS,
            log: self.work.join("reconciler.log"),
            rust_log: "info",
        })?;
        // demo.sh kills it by this pid should this process die first.
        std::fs::write(
            self.work.join("reconciler.pid"),
            reconciler.pid().to_string(),
        )?;
        self.say(format!(
            "reconciler started as {} (a TokenRequest token)",
            reconciler_username()
        ));
        self.more(format!(
            "pid {}, log {}; flags: run --listen=127.0.0.1:{} {}, the defaults otherwise (--resync-interval=5m, --leader-election=true)",
            reconciler.pid(),
            reconciler.log.display(),
            reconciler.port,
            DEMO_ELECTION_CLOCKS.join(" ")
        ));
        // A replica is ready as a standby first; wait until it leads (holds the Lease).
        let (body, took_ready) =
            wait_until("the reconciler to lead (/readyz)", STEP_TIMEOUT, || {
                let answer = reconciler
                    .check_alive()
                    .and_then(|()| reconciler.http("/readyz"));
                async move {
                    Ok(answer
                        .ok()
                        .filter(|(code, body)| *code == 200 && body.contains("leader"))
                        .map(|(_, body)| body))
                }
            })
            .await?;
        self.reconciler = Some(reconciler);
        self.say(format!(
            "reconciler ready after {}: /readyz says \"{}\" (it holds the Lease {RECONCILER_NAMESPACE}/namespace-baseline-reconciler)",
            took(took_ready),
            body.trim()
        ));
        Ok(())
    }

    /// The reconciler's counters, from its /metrics.
    fn print_metrics(&self) {
        let Some(reconciler) = &self.reconciler else {
            return;
        };
        let Ok((200, text)) = reconciler.http("/metrics") else {
            return;
        };
        let wanted = [
            "namespace_baseline_reconciles_total",
            "namespace_baseline_drift_repairs_total",
            "namespace_baseline_objects_applied_total",
            "namespace_baseline_reconcile_duration_seconds_count",
            "namespace_baseline_leader",
        ];
        let lines: Vec<&str> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter(|line| wanted.iter().any(|name| line.starts_with(name)))
            .collect();
        self.say("the reconciler's /metrics:");
        self.more(lines.join(", "));
    }

    async fn stop_reconciler(&mut self) {
        let Some(mut reconciler) = self.reconciler.take() else {
            return;
        };
        if reconciler.check_alive().is_err() {
            self.say("the reconciler had already exited");
            return;
        }
        match reconciler.stop(Duration::from_secs(10)).await {
            Ok((_, stopped_in)) => {
                self.say(format!(
                    "reconciler stopped {} after SIGTERM (graceful: running reconciles finished, Lease released)",
                    took(stopped_in)
                ));
                std::fs::remove_file(self.work.join("reconciler.pid")).ok();
            }
            Err(error) => self.say(format!("reconciler killed: {error}")),
        }
    }

    async fn create_namespaces(&mut self, guarded: &[String], others: &[String]) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        for (names, labelled) in [(guarded, true), (others, false)] {
            for name in names {
                let labels = if labelled {
                    json!({GUARD_KEY: GUARD_VALUE, "team": name})
                } else {
                    json!({"team": name})
                };
                let namespace: Namespace = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": labels}
                }))?;
                api.create(&PostParams::default(), &namespace)
                    .await
                    .with_context(|| format!("creating namespace {name}"))?;
            }
        }
        self.say(format!(
            "created {}..{} with label {GUARD_KEY}={GUARD_VALUE}, {}..{} without",
            guarded[0],
            guarded[guarded.len() - 1],
            others[0],
            others[others.len() - 1]
        ));
        Ok(())
    }

    async fn create_baseline(
        &mut self,
        watch: &mut PolicyWatch,
        guarded: &[String],
        others: &[String],
    ) -> Result<()> {
        let seed = self.documents("deploy/examples/seed.yaml")?;
        let seed = seed.first().context("deploy/examples/seed.yaml is empty")?;
        println!(
            "{}",
            wrap(
                &format!(
                    "spec: {}",
                    serde_json::to_string(&seed.object["spec"]).unwrap_or_default()
                ),
                10
            )
        );
        let created = Instant::now();
        self.applier.apply(&seed.object).await?;
        self.say("NamespaceBaseline guarded created; the walls appear (time since the create):");
        let mut done = BTreeSet::new();
        let deadline = created + STEP_TIMEOUT;
        while done.len() < guarded.len() {
            let seen = watch.next(deadline).await?;
            let namespace = seen.policy.namespace().unwrap_or_default();
            if !done.contains(&namespace) && watch.walled(&namespace) {
                done.insert(namespace.clone());
                println!(
                    "          +{:>7}  {namespace}  {} + {}",
                    took(seen.at - created),
                    deny_all_policy_name(BASELINE),
                    dns_policy_name(BASELINE)
                );
            }
        }
        let elapsed = created.elapsed();
        let stray: usize = others.iter().map(|ns| watch.in_namespace(ns)).sum();
        ensure!(
            stray == 0,
            "{stray} managed policies in unlabelled namespaces"
        );
        self.say(format!(
            "the wall stands in 10 of 10 labelled namespaces ({} NetworkPolicies) and in none of the 10 others",
            watch.state.len()
        ));
        let spec = &watch.state[&("demo-01".to_owned(), deny_all_policy_name(BASELINE))].1;
        self.more(format!("deny-all spec: {spec}"));
        self.figures.push(format!(
            "the wall went up in 10 namespaces within {} of the NamespaceBaseline",
            took(elapsed)
        ));
        Ok(())
    }

    /// Waits for a Ready status of the current generation covering `namespaces`.
    async fn wait_status(&self, namespaces: u32) -> Result<()> {
        let api: Api<NamespaceBaseline> = Api::all(self.admin.clone());
        wait_until(
            &format!("{BASELINE} to be Ready with {namespaces} namespaces"),
            STEP_TIMEOUT,
            || async {
                let baseline = api.get(BASELINE).await?;
                let done = baseline.status.as_ref().is_some_and(|status| {
                    status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                        && status.namespaces == namespaces
                        && status.observed_generation == baseline.metadata.generation
                });
                ensure!(done, "status: {:?}", baseline.status);
                Ok(Some(()))
            },
        )
        .await?;
        Ok(())
    }

    /// `kubectl get nsb -o wide`, the conditions, and the Events not shown yet.
    async fn print_baselines(&mut self) -> Result<()> {
        let api: Api<NamespaceBaseline> = Api::all(self.admin.clone());
        let baselines = api.list(&ListParams::default()).await?.items;
        println!("\n$ kubectl get nsb -o wide");
        let rows: Vec<[String; 7]> = baselines
            .iter()
            .map(|b| {
                let status = b.status.clone().unwrap_or_default();
                let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
                let age = b
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| {
                        let seconds = k8s_openapi::jiff::Timestamp::now()
                            .duration_since(t.0)
                            .as_secs()
                            .max(0);
                        format!("{seconds}s")
                    })
                    .unwrap_or_default();
                [
                    b.name_any(),
                    b.spec.namespace_label.clone(),
                    status.namespaces.to_string(),
                    format!("{:?}", b.spec.mode),
                    ready.map_or("<none>".into(), |c| c.status.clone()),
                    ready.map_or("<none>".into(), |c| c.reason.clone()),
                    age,
                ]
            })
            .collect();
        let header = [
            "NAME",
            "LABEL",
            "NAMESPACES",
            "MODE",
            "READY",
            "REASON",
            "AGE",
        ];
        let mut widths = header.map(str::len);
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.len());
            }
        }
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join("   ")
                .trim_end()
                .to_owned()
        };
        println!("{}", line(header.to_vec()));
        for row in &rows {
            println!("{}", line(row.iter().map(String::as_str).collect()));
        }
        for baseline in &baselines {
            let status = baseline.status.clone().unwrap_or_default();
            println!(
                "status of {}: observedGeneration {}, objectsApplied {} (by the last reconcile), drifted {}",
                baseline.name_any(),
                status.observed_generation.unwrap_or_default(),
                status.objects_applied,
                status.drifted.unwrap_or_default()
            );
            for condition in &status.conditions {
                println!(
                    "{}",
                    wrap(
                        &format!(
                            "{}={} {}: {}",
                            condition.type_, condition.status, condition.reason, condition.message
                        ),
                        2
                    )
                );
                if condition.type_ == "DNSReachable" && condition.reason == "ServiceNotFound" {
                    println!(
                        "{}",
                        wrap(
                            "(expected here: this control plane runs no DNS, so the door's check finds no Service to reach; in a cluster it reads EndpointsInsideDoor)",
                            4
                        )
                    );
                }
            }
        }
        // Events are published just after the status: give them a moment.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let events: Api<Event> = Api::all(self.admin.clone());
        let mut new = Vec::new();
        for event in events.list(&ListParams::default()).await?.items {
            let about = event.regarding.as_ref();
            if about.and_then(|r| r.kind.as_deref()) != Some("NamespaceBaseline") {
                continue;
            }
            // The recorder folds repeats of a reason into one Event (series.count), which
            // keeps the note of the first.
            let uid = event.uid().unwrap_or_default();
            let count = event.series.as_ref().map_or(1, |s| s.count);
            if self.events_seen.insert(uid, count) != Some(count) {
                new.push(event);
            }
        }
        new.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        if !new.is_empty() {
            println!(
                "Events (kubectl get events -A --field-selector involvedObject.kind=NamespaceBaseline):"
            );
        }
        for event in new {
            let count = event.series.as_ref().map_or(String::new(), |s| {
                format!(" (x{}, the note is the first one's)", s.count)
            });
            println!(
                "{}",
                wrap(
                    &format!(
                        "{} {} on NamespaceBaseline {}{count}: {}",
                        event.type_.unwrap_or_default(),
                        event.reason.unwrap_or_default(),
                        event.regarding.and_then(|r| r.name).unwrap_or_default(),
                        event.note.unwrap_or_default()
                    ),
                    2
                )
            );
        }
        Ok(())
    }

    async fn delete_a_wall(&mut self, watch: &mut PolicyWatch, namespace: &str) -> Result<()> {
        let name = deny_all_policy_name(BASELINE);
        let api: Api<NetworkPolicy> = Api::namespaced(self.admin.clone(), namespace);
        let old_uid = api.get(&name).await?.uid().unwrap_or_default();
        let sent = Instant::now();
        api.delete(&name, &DeleteParams::default()).await?;
        self.say(format!(
            "admin deleted NetworkPolicy {namespace}/{name} (this control plane has no policy-server: the API server lets it)"
        ));
        let deadline = sent + STEP_TIMEOUT;
        let (mut gone, mut back) = (None, None);
        while back.is_none() {
            let seen = watch.next(deadline).await?;
            if seen.policy.namespace().as_deref() != Some(namespace)
                || seen.policy.name_any() != name
            {
                continue;
            }
            if seen.deleted {
                gone = Some(seen.at);
            } else if seen.policy.uid().unwrap_or_default() != old_uid {
                back = Some(seen.at);
            }
        }
        let back = back.context("not restored")?;
        let since_delete = back - gone.unwrap_or(sent);
        self.say(format!(
            "restored by the reconciler {} after the delete (a new object: uid {} -> {})",
            took(since_delete),
            &old_uid[..8.min(old_uid.len())],
            watch.state[&(namespace.to_owned(), name.clone())]
                .0
                .get(..8)
                .unwrap_or_default()
        ));
        self.more("the watch on managed NetworkPolicies triggered it, not the 5-minute resync: the hole was open for that long, not five minutes");
        self.figures.push(format!(
            "a deleted deny-all came back in {}",
            took(since_delete)
        ));
        Ok(())
    }

    async fn widen_a_wall(&mut self, watch: &mut PolicyWatch, namespace: &str) -> Result<()> {
        let name = deny_all_policy_name(BASELINE);
        let api: Api<NetworkPolicy> = Api::namespaced(self.admin.clone(), namespace);
        let wanted = spec_of(&api.get(&name).await?);
        let sent = Instant::now();
        api.patch(
            &name,
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"egress": [{}]}})),
        )
        .await?;
        self.say(format!(
            "admin patched {namespace}/{name} with spec.egress: [{{}}] (allow all egress: the wall has a hole)"
        ));
        let deadline = sent + STEP_TIMEOUT;
        let (mut widened, mut reverted) = (None, None);
        while reverted.is_none() {
            let seen = watch.next(deadline).await?;
            if seen.policy.namespace().as_deref() != Some(namespace)
                || seen.policy.name_any() != name
            {
                continue;
            }
            let spec = spec_of(&seen.policy);
            if spec != wanted {
                widened = Some(seen.at);
            } else if widened.is_some() {
                reverted = Some(seen.at);
            }
        }
        let took_back = reverted.context("not reverted")? - widened.unwrap_or(sent);
        self.say(format!(
            "reverted by the reconciler {} later: server-side apply of the whole spec, forced, resets what another manager added",
            took(took_back)
        ));
        self.figures.push(format!(
            "a widened deny-all (egress: [{{}}]) was reverted in {}",
            took(took_back)
        ));
        Ok(())
    }

    async fn label_late(&mut self, watch: &mut PolicyWatch, namespace: &str) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        let sent = Instant::now();
        api.patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {GUARD_KEY: GUARD_VALUE}}})),
        )
        .await?;
        self.say(format!(
            "admin labelled namespace {namespace} {GUARD_KEY}={GUARD_VALUE}"
        ));
        let deadline = sent + STEP_TIMEOUT;
        while !watch.walled(namespace) {
            watch.next(deadline).await?;
        }
        let elapsed = sent.elapsed();
        self.say(format!(
            "{namespace} walled {} later ({} + {})",
            took(elapsed),
            deny_all_policy_name(BASELINE),
            dns_policy_name(BASELINE)
        ));
        self.figures.push(format!(
            "a namespace labelled late was walled in {}",
            took(elapsed)
        ));
        Ok(())
    }

    async fn delete_namespace(&mut self, namespace: &str) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        api.delete(namespace, &DeleteParams::default()).await?;
        self.say(format!(
            "admin deleted namespace {namespace}: it stays Terminating here (no namespace controller)"
        ));
        self.wait_status(10).await?;
        self.more(format!(
            "the reconciler leaves a terminating namespace to the namespace controller (status: 10 namespaces); on a real cluster that controller now deletes the wall of {namespace} with the rest, and the admission policy lets it (6.)"
        ));
        Ok(())
    }

    /// Runs the built policy on the demo's requests, as Kubewarden's policy-server would
    /// with the settings of deploy/admission-policy.yaml and the live NamespaceBaselines.
    async fn replay_through_policy(&mut self) -> Result<()> {
        let policy = self.documents("deploy/admission-policy.yaml")?;
        let policy = policy
            .first()
            .context("deploy/admission-policy.yaml is empty")?;
        let settings = policy.object["spec"]["settings"].clone();
        if let Some(problem) = admission::settings_problem(settings.to_string().as_bytes()) {
            anyhow::bail!("settings refused: {problem}");
        }
        self.say(
            "asked of namespace_baseline_core natively, the code policy.wasm is compiled from (the module itself runs in a waPC host in `make e2e-tests`, under kwctl, and in the playground)",
        );
        self.more(format!(
            "settings of deploy/admission-policy.yaml: {settings} -> valid; contextAware: the guarded labels are read from the live NamespaceBaselines"
        ));
        // The host calls are answered with this API server's own bytes, as policy-server's
        // list_resources_all and get_resource answer them.
        let host =
            LiveAnswers::read(&self.admin, &["demo-03", "demo-04", "demo-05", "demo-10"]).await?;

        let live = |namespace: &str| {
            let client = self.admin.clone();
            let namespace = namespace.to_owned();
            async move {
                let api: Api<NetworkPolicy> = Api::namespaced(client, &namespace);
                let policy = api.get(&deny_all_policy_name(BASELINE)).await?;
                anyhow::Ok(json!(policy))
            }
        };
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        let admin = json!({"username": "admin", "uid": "nsb-admin", "groups": ["system:masters", "system:authenticated"]});
        let name = deny_all_policy_name(BASELINE);

        let deleted = live("demo-03").await?;
        let widened_old = live("demo-04").await?;
        let mut widened_new = widened_old.clone();
        widened_new["spec"]["egress"] = json!([{}]);
        let ns_old = json!(namespaces.get("demo-05").await?);
        let mut ns_new = ns_old.clone();
        if let Some(labels) = ns_new["metadata"]["labels"].as_object_mut() {
            labels.remove(GUARD_KEY);
        }
        let terminating = live("demo-10").await?;
        // The namespace controller's exemption holds only in a namespace being deleted: the
        // core reads it through the host, as policy-server's get_resource would.
        let cases = [
            (
                "admin deletes NetworkPolicy demo-03/".to_owned() + &name + " (step 4)",
                policy_request("DELETE", &admin, None, Some(&deleted)),
                false,
            ),
            (
                "admin widens demo-04/".to_owned() + &name + " with egress: [{}] (step 4)",
                policy_request("UPDATE", &admin, Some(&widened_new), Some(&widened_old)),
                false,
            ),
            (
                format!("admin removes the label {GUARD_KEY}={GUARD_VALUE} from namespace demo-05"),
                namespace_request(&admin, &ns_new, &ns_old),
                false,
            ),
            (
                "the namespace controller deletes demo-10/".to_owned()
                    + &name
                    + " (demo-10 is Terminating)",
                policy_request(
                    "DELETE",
                    &json!({"username": "system:serviceaccount:kube-system:namespace-controller", "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}),
                    None,
                    Some(&terminating),
                ),
                true,
            ),
            (
                "the reconciler re-applies demo-04/".to_owned() + &name + " (its repair in step 4)",
                policy_request(
                    "UPDATE",
                    &json!({"username": reconciler_username(), "groups": ["system:serviceaccounts", "system:serviceaccounts:namespace-baseline", "system:authenticated"]}),
                    Some(&widened_old),
                    Some(&widened_new),
                ),
                true,
            ),
        ];
        let (mut refused, mut allowed, mut unexpected) = (0, 0, 0);
        for (what, request, expect_allowed) in cases {
            let payload = json!({"settings": settings, "request": request}).to_string();
            host.calls.set(0);
            let started = Instant::now();
            let verdict = admission::evaluate_in_host(payload.as_bytes(), &host)
                .map_err(|error| anyhow::anyhow!("the core could not read the request: {error}"))?;
            let elapsed = started.elapsed();
            let calls = host.calls.get();
            let accepted = verdict.is_allowed();
            let shown = if accepted { "ALLOWED" } else { "DENIED " };
            let mark = if accepted == expect_allowed {
                ""
            } else {
                unexpected += 1;
                "  <- UNEXPECTED"
            };
            if accepted {
                allowed += 1;
            } else {
                refused += 1;
            }
            println!(
                "  {shown} {what}  [{}, {calls} host call{}]{mark}",
                took(elapsed),
                if calls == 1 { "" } else { "s" }
            );
            let message = match &verdict {
                Verdict::Deny(message) => Some(message.clone()),
                Verdict::Warn(warnings) => Some(warnings.join("; ")),
                Verdict::Allow => None,
            };
            if let Some(message) = message {
                println!("{}", wrap(&format!("\"{message}\""), 10));
            }
        }
        ensure!(
            unexpected == 0,
            "{unexpected} verdict(s) differ from what the design says"
        );
        self.figures.push(format!(
            "the admission decisions refused {refused} of the demo's requests and allowed {allowed} (the namespace controller, the reconciler)"
        ));
        Ok(())
    }
}

/// The answers to the core's host calls, read from the API server before the requests are
/// asked (the core's host interface is synchronous, as the waPC host's is): the baselines'
/// list and the namespaces the demo's requests name, each as the server's own JSON.
struct LiveAnswers {
    baselines: Vec<u8>,
    namespaces: BTreeMap<String, Vec<u8>>,
    calls: std::cell::Cell<usize>,
}

impl LiveAnswers {
    async fn read(client: &Client, namespaces: &[&str]) -> Result<Self> {
        let get = |path: String| {
            let client = client.clone();
            async move {
                let request = http::Request::get(&path).body(Vec::new())?;
                let text = client
                    .request_text(request)
                    .await
                    .with_context(|| format!("GET {path}"))?;
                anyhow::Ok(text.into_bytes())
            }
        };
        let baselines = get("/apis/hedronite.io/v1alpha1/namespacebaselines".to_owned()).await?;
        let mut answers = BTreeMap::new();
        for name in namespaces {
            answers.insert(
                (*name).to_owned(),
                get(format!("/api/v1/namespaces/{name}")).await?,
            );
        }
        Ok(Self {
            baselines,
            namespaces: answers,
            calls: std::cell::Cell::new(0),
        })
    }
}

impl HostCapabilities for LiveAnswers {
    fn list_baselines(&self) -> Result<Vec<u8>, String> {
        self.calls.set(self.calls.get() + 1);
        Ok(self.baselines.clone())
    }

    fn get_namespace(&self, name: &str) -> Result<Vec<u8>, String> {
        self.calls.set(self.calls.get() + 1);
        self.namespaces
            .get(name)
            .cloned()
            .ok_or_else(|| format!("the demo did not read namespace {name} beforehand"))
    }

    /// The demo asks nothing of the pod rule (none of its requests creates a pod): a call
    /// here is a question the demo did not prepare an answer for, and says so.
    fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String> {
        self.calls.set(self.calls.get() + 1);
        Err(format!(
            "the demo did not read NetworkPolicy {namespace}/{name} beforehand"
        ))
    }
}

/// An AdmissionRequest for a NetworkPolicy, as kube-apiserver sends it.
/// The demo's leader-election clocks: valid (renew deadline < lease duration minus the write
/// grace, retry period with its jitter < renew deadline) and short.
const DEMO_ELECTION_CLOCKS: &[&str] = &[
    "--lease-duration=4s",
    "--renew-deadline=2s",
    "--retry-period=500ms",
];

fn policy_request(
    operation: &str,
    user: &Value,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let metadata = &old
        .or(object)
        .map_or(Value::Null, |o| o["metadata"].clone());
    let options = match operation {
        "DELETE" => {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
        }
        "UPDATE" => json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}),
        _ => json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}),
    };
    let gvk = json!({"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"});
    let gvr = json!({"group": "networking.k8s.io", "version": "v1", "resource": "networkpolicies"});
    json!({
        "uid": format!("demo-{}-{}", operation.to_lowercase(), metadata["uid"].as_str().unwrap_or("x")),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": metadata["name"], "namespace": metadata["namespace"],
        "operation": operation, "userInfo": user,
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": false, "options": options,
    })
}

/// An AdmissionRequest for a Namespace UPDATE (its `namespace` is its own name).
fn namespace_request(user: &Value, object: &Value, old: &Value) -> Value {
    let gvk = json!({"group": "", "version": "v1", "kind": "Namespace"});
    let gvr = json!({"group": "", "version": "v1", "resource": "namespaces"});
    let name = &old["metadata"]["name"];
    json!({
        "uid": format!("demo-update-{}", old["metadata"]["uid"].as_str().unwrap_or("x")),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": name, "namespace": name,
        "operation": "UPDATE", "userInfo": user,
        "object": object, "oldObject": old,
        "dryRun": false, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
    })
}
