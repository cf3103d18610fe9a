//! What one drift repair costs the reconciler's reconcile, natively and at several cluster
//! sizes: a repair must cost the same at 1,000 and at 20,000 namespaces (issue 38). The
//! cluster bench (`e2e-tests/cluster-bench.sh`) measures the whole process against a real
//! API server, TLS, watches and all; this one measures the two scoped reconciles of a repair
//! over in-memory caches, against an API server stand-in in the same thread, so that a cost
//! that grows with the cluster shows without a cluster and without the noise of one.
//!
//! A repair, as the watches drive it: the deny-all (or the DNS door) of one namespace is
//! deleted (the policy cache, the index and the unseen writes take the event, the namespace is
//! marked for the baseline), a reconcile re-creates it (a repair: its Event is sent); the
//! apply's echo comes back the same way, clearing the apply from the unseen writes, and a
//! second reconcile writes the status back to `objectsApplied: 0`. Measured: the thread's CPU time
//! (`/proc/thread-self/schedstat`, which counts in scheduler ticks here) over rounds of
//! `--repairs` repairs, divided by the repairs, as the cluster bench divides the process's CPU:
//! the stand-in's answers and the feeding of the caches included. Each size reports the
//! median and the spread of `--rounds` rounds.
//!
//! ```sh
//! cargo bench -p namespace-baseline-reconciler --bench repair            # 1,000, 5,000, 20,000
//! cargo bench -p namespace-baseline-reconciler --bench repair -- --sizes 5000 --repairs 400 --rounds 5
//! ```
//! Under callgrind (instruction counts that do not depend on the machine's load), the sizes
//! one at a time: `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='repair::measured_repairs' target/release/deps/repair-<hash> --sizes 5000
//! --rounds 1 --repairs 50`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::client::Body;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Lookup, Store, store::Writer};
use kube::runtime::watcher::Event;
use namespace_baseline_core::identity::{deny_all_policy_name, dns_policy_name};
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineSpec};
use namespace_baseline_core::wall::desired_wall;
use namespace_baseline_leader::LeaderGate;
use namespace_baseline_reconciler::reconcile::context::{Context, Settings};
use namespace_baseline_reconciler::reconcile::controller::reconcile;
use namespace_baseline_reconciler::reconcile::state::State;
use namespace_baseline_reconciler::view::caches::{Caches, DnsCaches};
use namespace_baseline_reconciler::view::namespace_cache::{CachedNamespace, namespace_meta};
use namespace_baseline_reconciler::view::policy_cache::{CachedPolicy, PolicyCache};
use namespace_baseline_reconciler::view::watched_cache::{WatchedCache, same_content};
use serde_json::{Value, json};

const BASELINE: &str = "bench";
const LABEL: &str = "baseline";
const RESYNC: Duration = Duration::from_secs(3600);

fn main() {
    let options = Options::parse(std::env::args().skip(1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "| namespaces | rounds × repairs | CPU per repair, median of the rounds | spread (min–max) | median / the first size's |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let mut first = None;
    for &size in &options.sizes {
        let rounds = measure(&runtime, size, options.repairs, options.rounds);
        let median = percentile(&rounds, 50.0);
        let ratio = median / *first.get_or_insert(median);
        println!(
            "| {size} | {} × {} | {} | {}–{} | {ratio:.2} |",
            options.rounds,
            options.repairs,
            micros(median),
            micros(percentile(&rounds, 0.0)),
            micros(percentile(&rounds, 100.0)),
        );
    }
}

struct Options {
    sizes: Vec<usize>,
    repairs: usize,
    rounds: usize,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Self {
        let mut options = Self {
            sizes: vec![1_000, 5_000, 20_000],
            repairs: 200,
            rounds: 5,
        };
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
            match arg.as_str() {
                "--sizes" => {
                    options.sizes = value()
                        .split(',')
                        .map(|size| size.parse().expect("--sizes 1000,5000"))
                        .collect();
                }
                "--repairs" => options.repairs = value().parse().expect("--repairs 200"),
                "--rounds" => options.rounds = value().parse().expect("--rounds 5"),
                // What `cargo bench` adds.
                "--bench" => {}
                other => panic!(
                    "unknown argument {other}: --sizes 1000,5000,20000 --repairs 200 --rounds 5"
                ),
            }
        }
        options
    }
}

/// The CPU time per repair (both reconciles), in seconds, of each of `rounds` rounds of
/// `repairs` repairs at `size` namespaces.
fn measure(
    runtime: &tokio::runtime::Runtime,
    size: usize,
    repairs: usize,
    rounds: usize,
) -> Vec<f64> {
    let mut rig = {
        // The client starts its buffer's task on the runtime.
        let _runtime = runtime.enter();
        Rig::new(size)
    };
    runtime.block_on(async {
        // The first reconcile is the full pass (every namespace, nothing to write): it fills
        // what the scoped reconciles count from.
        rig.reconcile().await;
        // A few repairs first, so that the measured ones find every lazily built thing built.
        for i in 0..repairs.min(10) {
            rig.repair(size - 1 - i).await;
        }
    });
    let mut per_repair = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = thread_cpu();
        measured_repairs(runtime, &mut rig, size, repairs);
        #[allow(clippy::cast_precision_loss)]
        per_repair.push((thread_cpu() - started) / repairs as f64);
    }
    // Each repair was the reconciler's: seen as someone else's deletion and counted, and its
    // apply's echo seen (nothing left pending for the next reconcile to step around).
    let made = repairs.min(10) + rounds * repairs;
    assert_eq!(
        rig.drift_repairs(),
        made as u64,
        "repairs counted in the status"
    );
    assert!(
        rig.pending().is_empty(),
        "applies whose echo was not seen: {:?}",
        rig.pending()
    );
    per_repair
}

/// The measured loop (callgrind's `--toggle-collect` names it): `repairs` repairs spread over
/// the namespaces.
#[inline(never)]
fn measured_repairs(runtime: &tokio::runtime::Runtime, rig: &mut Rig, size: usize, repairs: usize) {
    runtime.block_on(async {
        for i in 0..repairs {
            rig.repair(i * size / repairs).await;
        }
    });
}

/// A converged baseline over `size` namespaces, its caches and the writers that feed them as
/// the watches would.
struct Rig {
    ctx: Arc<Context>,
    baseline: Arc<NamespaceBaseline>,
    spec: NamespaceBaselineSpec,
    policies: WatchedCache<CachedPolicy>,
    policy_cache: PolicyCache,
    namespaces: Vec<String>,
}

impl Rig {
    fn new(size: usize) -> Self {
        let spec = NamespaceBaselineSpec::new(format!("{LABEL}={BASELINE}"));
        let namespaces: Vec<String> = (0..size).map(|i| format!("team-{i:05}")).collect();
        let namespace_store = filled(namespaces.iter().map(|name| {
            CachedNamespace::from(&namespace_meta(Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(
                        [
                            (LABEL.to_owned(), BASELINE.to_owned()),
                            ("kubernetes.io/metadata.name".to_owned(), name.clone()),
                        ]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            }))
        }))
        .0;
        let policy_cache = PolicyCache::default();
        let wall: Vec<NetworkPolicy> = namespaces
            .iter()
            .flat_map(|namespace| desired_wall(BASELINE, namespace, &spec))
            .collect();
        let (policy_store, policies) =
            filled(wall.iter().map(|policy| policy_cache.cached(policy)));
        let (_, synced) = tokio::sync::watch::channel(true);
        let caches = Caches::new(namespace_store, policy_store, Some(dns()), synced);
        for event in [Event::Init]
            .into_iter()
            .chain(wall.into_iter().map(Event::InitApply))
            .chain([Event::InitDone])
        {
            caches.index.observe(&event);
        }
        let settings = Settings {
            concurrency: 64,
            resync: RESYNC,
            dns_namespace: Some("kube-system".to_owned()),
            api_door: None,
            reports: false,
        };
        let state = Arc::new(State::new(Arc::new(LeaderGate::always())));
        let ctx = Arc::new(Context::new(
            api_server(),
            caches,
            settings,
            state,
            "bench".to_owned(),
        ));
        let mut baseline = NamespaceBaseline::new(BASELINE, spec.clone());
        baseline.metadata.uid = Some("uid-bench".to_owned());
        baseline.metadata.generation = Some(1);
        baseline.metadata.resource_version = Some("100".to_owned());
        Self {
            ctx,
            baseline: Arc::new(baseline),
            spec,
            policies: WatchedCache::new(policies),
            policy_cache,
            namespaces,
        }
    }

    async fn reconcile(&self) {
        reconcile(self.baseline.clone(), self.ctx.clone())
            .await
            .expect("the reconcile succeeds");
    }

    /// The baseline's cumulative `driftRepairs`, as this reconciler last wrote it.
    fn drift_repairs(&self) -> u64 {
        self.ctx
            .caches
            .unseen
            .status(&self.baseline)
            .and_then(|status| status.drift_repairs)
            .unwrap_or(0)
    }

    /// The wall objects whose apply is still to be shown by the watch.
    fn pending(&self) -> Vec<String> {
        let pending = self.ctx.caches.unseen.snapshot();
        self.namespaces
            .iter()
            .flat_map(|namespace| {
                [deny_all_policy_name(BASELINE), dns_policy_name(BASELINE)]
                    .into_iter()
                    .filter(|name| pending.contains(namespace, name))
                    .map(move |name| format!("{namespace}/{name}"))
            })
            .collect()
    }

    /// One repair in the `index`th namespace.
    async fn repair(&mut self, index: usize) {
        let namespace = self.namespaces[index].clone();
        let name = if index.is_multiple_of(2) {
            deny_all_policy_name(BASELINE)
        } else {
            dns_policy_name(BASELINE)
        };
        let policy = desired_wall(BASELINE, &namespace, &self.spec)
            .into_iter()
            .find(|policy| policy.metadata.name.as_deref() == Some(name.as_str()))
            .expect("a wall object of that name");
        for event in [Event::Delete(policy.clone()), Event::Apply(policy)] {
            self.observe(&event, &namespace);
            self.reconcile().await;
        }
    }

    /// What the policy watch does with an event (`reconcile/watches.rs`): the index, the
    /// cache and the unseen writes take it, and the namespace is marked for the baseline.
    fn observe(&mut self, event: &Event<NetworkPolicy>, namespace: &str) {
        self.ctx.caches.index.observe(event);
        let unseen = &self.ctx.caches.unseen;
        self.policies.apply(
            &self.policy_cache.event(event),
            same_content,
            |before, after| {
                unseen.changed(before, after);
            },
        );
        self.ctx.caches.dirty.namespace(BASELINE, namespace);
    }
}

/// A store listed with `objects`, and its writer for the events after.
fn filled<K>(objects: impl Iterator<Item = K>) -> (Store<K>, Writer<K>)
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    (reader, writer)
}

/// The DNS namespace, listed and empty (as on the bench's control plane, which runs no DNS).
fn dns() -> DnsCaches {
    DnsCaches::of(
        "kube-system",
        filled(std::iter::empty::<PartialObjectMeta<Service>>()).0,
        filled(std::iter::empty::<EndpointSlice>()).0,
        filled(std::iter::empty::<PartialObjectMeta<Pod>>()).0,
    )
}

/// An API server stand-in that answers at once as a healthy one would: an apply or an Event
/// with its own body, a status patch with the baseline carrying that status.
fn api_server() -> kube::Client {
    let service = tower::service_fn(|request: Request<Body>| async move {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let answer = if parts.uri.path().starts_with("/apis/hedronite.io/") {
            json!({
                "apiVersion": "hedronite.io/v1alpha1",
                "kind": "NamespaceBaseline",
                "metadata": {"name": BASELINE, "uid": "uid-bench", "resourceVersion": "101"},
                "spec": {"namespaceLabel": format!("{LABEL}={BASELINE}")},
                "status": body["status"],
            })
        } else {
            body
        };
        let status = if parts.method == http::Method::POST {
            201
        } else {
            200
        };
        Ok::<_, Infallible>(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
                .expect("a response"),
        )
    });
    kube::Client::new(service, "default")
}

/// This thread's CPU time so far, in seconds (the scheduler's nanoseconds on a CPU).
fn thread_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let nanos: u64 = stat
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .expect("schedstat's first field");
    #[allow(clippy::cast_precision_loss)]
    let seconds = nanos as f64 / 1e9;
    seconds
}

fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let index = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[index]
}

fn micros(seconds: f64) -> String {
    format!("{:.0} µs", seconds * 1e6)
}
