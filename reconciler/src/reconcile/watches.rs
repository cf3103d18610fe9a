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

use futures::StreamExt;
use futures::channel::mpsc;
use futures::stream::{self, BoxStream};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use namespace_baseline_core::facts::PolicyFacts;
use namespace_baseline_core::spec::NamespaceBaseline;
use tokio::task::JoinHandle;
use tracing::debug;

use crate::base::watch_errors::{Watch, watch_events};
use crate::reconcile::context::{Context, Hedging, Settings};
use crate::reconcile::controller::{dns_check, error_policy, reconcile};
use crate::reconcile::handoff::Handoff;
use crate::reconcile::state::State;
use crate::reconcile::status;
use crate::view::caches::{Caches, DnsWatches, ListTracker};
use crate::view::namespace_cache::{CachedNamespace, NamespaceMeta};
use crate::view::policy_cache::{CachedPolicy, PolicyCache, slim_policy};
use crate::view::reports::follow;
use crate::view::triggers::{NamespaceEvents, Trigger, Triggered, baselines_for_policy};
use crate::view::watched_cache::{WatchedCache, same_content, same_version};

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

/// The baselines whose DNS door the DNS namespace's caches now check otherwise than their
/// status says (the one this term last wrote, or the cache's).
fn doors_turned(caches: &Caches, store: &Store<NamespaceBaseline>) -> Vec<Trigger> {
    let Some(dns) = &caches.dns else {
        return Vec::new();
    };
    let turned = |baseline: &NamespaceBaseline| {
        let check = dns_check(&baseline.spec, dns);
        !status::tells(caches.unseen.status(baseline).as_ref(), &check)
    };
    (store.state().iter())
        .filter(|baseline| baseline.spec.allow_dns && turned(baseline))
        .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
        .collect()
}

/// Where the watches' triggers go: to the controller of the current term, or nowhere; and
/// the term's handoff, which forgets a baseline the watch shows gone.
#[derive(Clone, Default)]
struct Relay {
    term: Arc<Mutex<Option<TermLink>>>,
}

/// The current term's trigger channel and handoff.
type TermLink = (mpsc::UnboundedSender<Trigger>, Handoff);

impl Relay {
    fn send(&self, trigger: Trigger) {
        let term = self.term.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((term, _)) = term.as_ref() {
            // A closed channel is a term that just ended: its next term starts whole.
            let _ = term.unbounded_send(trigger);
        }
    }

    /// The current term's handoff forgets `baseline`.
    fn forget(&self, baseline: &str) {
        let term = self.term.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, handoff)) = term.as_ref() {
            handoff.forget(baseline);
        }
    }

    /// The triggers from now on, until [`Relay::disconnect`] or the next `connect`.
    fn connect(&self, handoff: Handoff) -> mpsc::UnboundedReceiver<Trigger> {
        let (sender, receiver) = mpsc::unbounded();
        *self.term.lock().unwrap_or_else(PoisonError::into_inner) = Some((sender, handoff));
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
    hedging: Option<Hedging>,
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
        let (policies, policy_writer) = reflector::store::<CachedPolicy>();
        let (baselines, baseline_writer) = reflector::store::<NamespaceBaseline>();
        state.watch_baselines(baselines.clone());
        let dns = settings
            .dns_namespace
            .as_deref()
            .map(|namespace| DnsWatches::new(&client, namespace, &state.metrics.watches));
        let caches = Caches::new(
            namespaces,
            policies,
            dns.as_ref().map(|dns| dns.caches.clone()),
            synced,
        );

        // A namespace event concerns its namespace only: the baselines it triggers plan and
        // write for that namespace (scope.rs).
        let namespace_triggers = {
            let listed = tracker.watch();
            let mut events = NamespaceEvents::new(
                namespace_writer,
                caches.dirty.clone(),
                baselines.clone(),
                caches.live.clone(),
            );
            watch_events(
                watcher(
                    Api::<NamespaceMeta>::all(client.clone()),
                    watcher::Config::default().any_semantic(),
                ),
                Watch::all("namespaces"),
                state.metrics.watches.clone(),
            )
            .map(move |event| {
                let triggered = events.observe(&event);
                listed.observe(&event);
                triggered
            })
            .flat_map(stream::iter)
        };

        // A policy event concerns its namespace only, as a namespace event does. The store
        // holds the compact form; the triggers, the index and the unseen writes read the
        // changes the store took in.
        let policy_triggers = {
            let listed = tracker.watch();
            let (baselines, caches) = (baselines.clone(), caches.clone());
            let policy_cache = PolicyCache::default();
            let mut cache = WatchedCache::new(policy_writer);
            watch_events(
                watcher(
                    Api::<NetworkPolicy>::all(client.clone()),
                    watcher::Config::default().any_semantic(),
                )
                .modify(slim_policy),
                Watch::all("networkpolicies"),
                state.metrics.watches.clone(),
            )
            .map(move |event| {
                caches.index.observe(&event);
                let baselines = baselines.state();
                let mut triggered = Triggered::new(&caches.dirty);
                let event = policy_cache.event(&event);
                cache.apply(&event, same_content, |before, after| {
                    caches.unseen.changed(before, after);
                    for policy in [before, after].into_iter().flatten() {
                        triggered.add(
                            PolicyFacts::namespace(policy).unwrap_or_default(),
                            baselines_for_policy(policy, &baselines, |name| caches.namespace(name)),
                        );
                    }
                });
                listed.observe(&event);
                triggered.into_baselines()
            })
            .flat_map(stream::iter)
        };

        let relay = Relay::default();
        // A new or changed baseline (`baseline_changes`) is seen whole; one gone, or replaced
        // by another of the same name, is forgotten.
        let baseline_triggers = {
            let listed = tracker.watch();
            let (dirty, unseen) = (caches.dirty.clone(), caches.unseen.clone());
            let (state, caches, relay) = (state.clone(), caches.clone(), relay.clone());
            let mut cache = WatchedCache::new(baseline_writer);
            watch_events(
                watcher(
                    Api::<NamespaceBaseline>::all(client.clone()),
                    watcher::Config::default().any_semantic(),
                ),
                Watch::all("namespacebaselines"),
                state.metrics.watches.clone(),
            )
            .map(move |event| {
                let mut triggered = Vec::new();
                cache.apply(&event, same_version, |before, after| {
                    unseen.changed(before, after);
                    if let Some(gone) = before
                        .filter(|before| after.is_none_or(|after| after.uid() != before.uid()))
                    {
                        debug!(baseline = %gone.name_any(), "baseline gone: forgotten");
                        state.forget_baseline(&caches, gone);
                        state.retries.succeeded(&gone.name_any());
                        relay.forget(&gone.name_any());
                    }
                    let Some(after) = after else {
                        return;
                    };
                    if before.and_then(baseline_changes) != baseline_changes(after) {
                        debug!(baseline = %after.name_any(), "baseline new or changed");
                        dirty.all(&after.name_any());
                        triggered.push(ObjectRef::from_obj(after));
                    }
                });
                listed.observe(&event);
                triggered
            })
            .flat_map(stream::iter)
        };

        let mut triggers: Vec<BoxStream<'static, Trigger>> = vec![
            baseline_triggers.boxed(),
            namespace_triggers.boxed(),
            policy_triggers.boxed(),
        ];
        if let Some(dns) = dns {
            // A change of what a DNS door depends on re-checks the doors it serves, here: only
            // a door that its baseline's status says otherwise of is reconciled (its status,
            // its Event and every namespace's report tell the door).
            let (caches, store) = (caches.clone(), baselines.clone());
            triggers.push(
                dns.changes
                    .flat_map(move |()| stream::iter(doors_turned(&caches, &store)))
                    .boxed(),
            );
        }
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
            hedging: None,
        }
    }

    /// Each term's writes of the wall are hedged so (`writes.rs`).
    #[must_use]
    pub fn with_hedging(mut self, hedging: Option<Hedging>) -> Self {
        self.hedging = hedging;
        self
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
        // The handoff's answers ask for the reconcile that reports them.
        let (landed, landed_triggers) = mpsc::unbounded();
        let handoff = Handoff::new(self.caches.dirty.clone(), landed);
        let triggers = self.relay.connect(handoff.clone());
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
        let ctx = Arc::new(
            Context::new(
                client,
                self.caches.clone(),
                self.settings.clone(),
                state,
                instance,
            )
            .with_handoff(handoff)
            .with_hedging(self.hedging.clone()),
        );
        // OpenReports: followed beside the controller; their appearance reconciles every baseline.
        let (reports, reports_appeared) = follow::follow(
            ctx.client.clone(),
            ctx.reports.clone(),
            ctx.caches.unseen.clone(),
            ctx.state.metrics.watches.clone(),
        );
        // Every baseline the store holds at the start; those it lists later (a cold start)
        // come through the triggers, marked whole.
        let controller = Controller::for_stream(stream::empty(), self.baselines.clone())
            .reconcile_all_on(stream::once(std::future::ready(())))
            .reconcile_all_on(reports_appeared)
            .reconcile_on(triggers)
            .reconcile_on(probe_triggers)
            .reconcile_on(landed_triggers)
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

#[cfg(test)]
#[path = "watches_tests.rs"]
mod tests;
