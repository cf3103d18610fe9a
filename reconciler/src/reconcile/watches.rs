//! The triggers: one watch per resource (baselines, namespaces, NetworkPolicies, the DNS
//! namespace's objects), feeding both the caches a reconcile reads and the mapping from each
//! event to the baselines it concerns (and, for a namespace or policy event, the namespace it
//! concerns: `scope.rs`).
//!
//! The watches run for the whole life of the process, leader or standby: a standby keeps its
//! caches warm (reads only: the gate stays closed, no status, no Event), so that a take-over
//! starts its first pass over caches already listed instead of with a full LIST. Their
//! triggers reach the controller of the current leadership term, and nothing while standing
//! by (a term begins with a full pass of every baseline). The controller, the enforcement
//! probe, the OpenReports follower and the API door's guard run for one term each.

use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use namespace_baseline_core::spec::NamespaceBaseline;
use tokio::task::JoinHandle;
use tracing::debug;

use crate::base::retry::{NoTriggerBackoff, WatchBackoff};
use crate::reconcile::context::{Context, Settings};
use crate::reconcile::controller::{error_policy, reconcile};
use crate::reconcile::state::State;
use crate::reconcile::writer::Writer;
use crate::view::caches::{Caches, DnsWatches, ListTracker};
use crate::view::namespace_cache::CachedNamespace;
use crate::view::namespace_cache::NamespaceMeta;
use crate::view::policy_cache::slim_policy;
use crate::view::policy_cache::{CachedPolicy, PolicyCache};
use crate::view::reports::follow;
use crate::view::triggers::{NamespaceEvents, baselines_for_dns, baselines_for_policy};

/// What, in a baseline, calls for a reconcile: a new object (uid), a spec change
/// (generation), its finalizers, its deletion. A status write (each reconcile that changes
/// something makes one) does not: it would only run a second reconcile that finds nothing
/// to do, at thousands of namespaces a full plan for nothing. Namespace and policy events
/// and the resync still trigger as before.
pub fn baseline_changes(baseline: &NamespaceBaseline) -> Option<u64> {
    let metadata = baseline.meta();
    let mut hasher = DefaultHasher::new();
    metadata.uid.hash(&mut hasher);
    metadata.generation.hash(&mut hasher);
    metadata.finalizers.hash(&mut hasher);
    metadata
        .deletion_timestamp
        .as_ref()
        .map(|time| time.0.as_nanosecond())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// A baseline to reconcile, as the triggers name it.
type Trigger = ObjectRef<NamespaceBaseline>;

/// Where the watches' triggers go: to the controller of the current term, or nowhere.
#[derive(Clone, Default)]
struct Relay {
    term: Arc<Mutex<Option<mpsc::UnboundedSender<Trigger>>>>,
}

impl Relay {
    fn send(&self, trigger: Trigger) {
        let term = self.term.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(term) = term.as_ref() {
            // A closed channel is a term that just ended: its next term starts whole.
            let _ = term.unbounded_send(trigger);
        }
    }

    /// The triggers from now on, until [`Relay::disconnect`] or the next `connect`.
    fn connect(&self) -> mpsc::UnboundedReceiver<Trigger> {
        let (sender, receiver) = mpsc::unbounded();
        *self.term.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        receiver
    }

    fn disconnect(&self) {
        self.term
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// The process's watches and the caches they fill, from its start to its end.
pub struct Watches {
    client: Client,
    settings: Settings,
    state: Arc<State>,
    caches: Caches,
    baselines: Store<NamespaceBaseline>,
    relay: Relay,
    task: JoinHandle<()>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watches {
    /// Starts the watches on NamespaceBaselines, Namespaces, NetworkPolicies and the DNS
    /// namespace's Services, EndpointSlices and pods. The caches feed both the reconcile and
    /// the triggers, so each resource is watched once.
    pub fn start(client: Client, settings: Settings, state: Arc<State>) -> Self {
        let (tracker, synced) = ListTracker::new({
            let state = state.clone();
            move || state.health.set_caches_synced(true)
        });
        let (namespaces, namespace_writer) = reflector::store::<CachedNamespace>();
        let (policies, mut policy_writer) = reflector::store::<CachedPolicy>();
        let (baselines, baseline_writer) = reflector::store::<NamespaceBaseline>();
        let dns = settings
            .dns_namespace
            .as_deref()
            .map(|namespace| DnsWatches::new(&client, namespace));
        let caches = Caches::new(
            namespaces,
            policies,
            dns.as_ref().map(|dns| dns.caches.clone()),
            synced,
        );

        // A namespace event concerns its namespace only: the baselines it triggers plan and
        // write for that namespace (scope.rs).
        let namespace_triggers = {
            let tracker = tracker.clone();
            let mut events = NamespaceEvents::new(
                (caches.namespaces.clone(), namespace_writer),
                caches.dirty.clone(),
                baselines.clone(),
            );
            watcher(
                Api::<NamespaceMeta>::all(client.clone()),
                watcher::Config::default().any_semantic(),
            )
            .backoff(WatchBackoff::default())
            .map(move |event| match event {
                Ok(event) => {
                    let triggered = events.observe(&event);
                    tracker.observe(ListTracker::NAMESPACES, &event);
                    triggered
                }
                Err(error) => {
                    debug!(%error, "namespace watch");
                    Vec::new()
                }
            })
            .flat_map(stream::iter)
        };

        // A policy event concerns its namespace only, as a namespace event does.
        let for_policy = {
            let baselines = baselines.clone();
            let caches = caches.clone();
            move |policy: NetworkPolicy| {
                let triggered = baselines_for_policy(&policy, &baselines.state(), |name| {
                    caches.namespace(name)
                });
                let namespace = policy.metadata.namespace.as_deref().unwrap_or_default();
                for baseline in &triggered {
                    caches.dirty.namespace(&baseline.name, namespace);
                }
                triggered
            }
        };
        let policy_triggers = {
            let tracker = tracker.clone();
            let (index, unseen) = (caches.index.clone(), caches.unseen.clone());
            let policy_cache = PolicyCache::default();
            watcher(
                Api::<NetworkPolicy>::all(client.clone()),
                watcher::Config::default().any_semantic(),
            )
            .backoff(WatchBackoff::default())
            .modify(slim_policy)
            .inspect_ok(move |event| {
                // The store holds the compact form; the triggers read the event's object.
                policy_writer.apply_watcher_event(&policy_cache.event(event));
                unseen.observe(event);
                index.observe(event);
                tracker.observe(ListTracker::POLICIES, event);
            })
            .touched_objects()
            .flat_map(move |policy| stream::iter(touched(policy, "policy").map(&for_policy)))
            .flat_map(stream::iter)
        };

        let baseline_triggers = watcher(
            Api::<NamespaceBaseline>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .backoff(WatchBackoff::default())
        .reflect(baseline_writer)
        .inspect_ok({
            let unseen = caches.unseen.clone();
            move |event| {
                unseen.observe(event);
                tracker.observe(ListTracker::BASELINES, event);
            }
        })
        .applied_objects()
        .predicate_filter(baseline_changes, PredicateConfig::default())
        .filter_map({
            // A new or changed baseline is seen whole.
            let dirty = caches.dirty.clone();
            move |baseline| {
                let baseline = touched(baseline, "baseline").map(|baseline| {
                    debug!(baseline = %baseline.name_any(), "baseline new or changed");
                    dirty.all(&baseline.name_any());
                    ObjectRef::from_obj(&baseline)
                });
                std::future::ready(baseline)
            }
        });

        let mut triggers: Vec<BoxStream<'static, Trigger>> = vec![
            baseline_triggers.boxed(),
            namespace_triggers.boxed(),
            policy_triggers.boxed(),
        ];
        if let Some(dns) = dns {
            // A change in the DNS namespace re-checks the doors of the baselines it serves.
            let namespace = dns.caches.namespace.clone();
            let store = baselines.clone();
            let for_dns = move |touched: bool| {
                if touched {
                    baselines_for_dns(&namespace, &store.state())
                } else {
                    Vec::new()
                }
            };
            let (service, slice, pod) = (for_dns.clone(), for_dns.clone(), for_dns);
            triggers.extend([
                dns.services
                    .flat_map(move |object| stream::iter(service(touched(object, "dns").is_some())))
                    .boxed(),
                dns.slices
                    .flat_map(move |object| stream::iter(slice(touched(object, "dns").is_some())))
                    .boxed(),
                dns.pods
                    .flat_map(move |object| stream::iter(pod(touched(object, "dns").is_some())))
                    .boxed(),
            ]);
        }
        let relay = Relay::default();
        let task = tokio::spawn({
            let relay = relay.clone();
            stream::select_all(triggers).for_each(move |trigger| {
                relay.send(trigger);
                std::future::ready(())
            })
        });
        Self {
            client,
            settings,
            state,
            caches,
            baselines,
            relay,
            task,
        }
    }

    /// Runs the controller for one leadership term, until `stop` resolves (shutdown or lost
    /// leadership): a first full pass of every baseline over the warm caches, then what the
    /// triggers name. The enforcement probe, the OpenReports follower and the API door's
    /// guard run beside it for the same term.
    pub async fn lead(
        &self,
        instance: String,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        let triggers = self.relay.connect();
        for baseline in self.baselines.state() {
            self.caches.dirty.all(&baseline.name_any());
        }
        let (client, state) = (self.client.clone(), self.state.clone());
        let api_door = self.settings.api_door.clone().map(|policy| {
            crate::reconcile::api_door_guard::guard(
                client.clone(),
                state.clone(),
                policy,
                instance.clone(),
            )
        });
        // The enforcement probe (probe/): its rounds trigger the reconcile that reports them.
        let (_probe, probe_triggers) = crate::reconcile::probe::driver::start(
            client.clone(),
            state.clone(),
            self.baselines.clone(),
            self.caches.clone(),
        );
        // The writer's answers ask for the reconcile that reports them.
        let (landed, landed_triggers) = mpsc::unbounded();
        let ctx = Arc::new(
            Context::new(
                client,
                self.caches.clone(),
                self.settings.clone(),
                state,
                instance,
            )
            .with_writer(Writer::new(landed)),
        );
        // OpenReports: followed beside the controller; their appearance reconciles every baseline.
        let (reports, reports_appeared) = follow::follow(
            ctx.client.clone(),
            ctx.reports.clone(),
            ctx.caches.unseen.clone(),
        );
        // Every baseline the store holds at the start; those it lists later (a cold start)
        // come through the triggers, marked whole.
        let controller = Controller::for_stream(stream::empty(), self.baselines.clone())
            .reconcile_all_on(stream::once(std::future::ready(())))
            .reconcile_all_on(reports_appeared)
            .reconcile_on(triggers)
            .reconcile_on(probe_triggers)
            .reconcile_on(landed_triggers)
            // Each watch backs off on its own; a shared pause would blind them all (retry.rs).
            .trigger_backoff(NoTriggerBackoff)
            .graceful_shutdown_on(stop)
            .run(reconcile, error_policy, ctx)
            .for_each(|result| async move {
                match result {
                    Ok((object, _)) => debug!(baseline = %object.name, "reconciled"),
                    Err(error) => debug!(%error, "controller event"),
                }
            });
        let controller = follow::alongside(reports, controller);
        match api_door {
            // The door's guard runs as long as the controller; it never ends on its own.
            Some(guard) => {
                tokio::select! {
                    () = controller => {}
                    () = guard => {}
                }
            }
            None => controller.await,
        }
        self.relay.disconnect();
    }
}

/// The object a watch touched, or `None` (logged) for the watch's error: each watch backs off
/// and resumes on its own.
fn touched<K>(object: Result<K, watcher::Error>, watch: &str) -> Option<K> {
    object
        .inspect_err(|error| debug!(%error, watch, "watch error"))
        .ok()
}
