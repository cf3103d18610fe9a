//! The triggers: one watch per resource (baselines, namespaces, NetworkPolicies, the DNS
//! namespace's objects), feeding both the caches a reconcile reads and the mapping from each
//! event to the baselines it concerns (and, for a namespace or policy event, the namespace it
//! concerns: `scope.rs`). Runs the controller for one leadership term, and the API door's
//! guard beside it.

use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector;
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use namespace_baseline_core::spec::NamespaceBaseline;
use tracing::debug;

use crate::base::retry::{NoTriggerBackoff, WatchBackoff};
use crate::reconcile::context::{Context, Settings};
use crate::reconcile::controller::{error_policy, reconcile};
use crate::reconcile::state::State;
use crate::view::caches::{Caches, ListTracker};
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

/// Runs the controller until `stop` resolves (shutdown or lost leadership), with watches
/// on NamespaceBaselines, Namespaces, NetworkPolicies and the DNS namespace's Services,
/// EndpointSlices and pods. The caches feed both the reconcile and the triggers, so each
/// resource is watched once. The API door is checked beside it.
pub async fn run(
    client: Client,
    settings: Settings,
    state: Arc<State>,
    instance: String,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
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
        .map(|namespace| crate::view::caches::DnsWatches::new(&client, namespace));
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
        .flat_map(futures::stream::iter)
    };
    let policy_events = {
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
    };
    let baseline_events = watcher(
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
    .inspect_ok({
        // A new or changed baseline is seen whole.
        let dirty = caches.dirty.clone();
        move |baseline| {
            debug!(baseline = %baseline.name_any(), "baseline new or changed");
            dirty.all(&baseline.name_any());
        }
    });

    // A policy event concerns its namespace only, as a namespace event does.
    let for_policy = {
        let baselines = baselines.clone();
        let caches = caches.clone();
        move |policy: NetworkPolicy| {
            let triggered =
                baselines_for_policy(&policy, &baselines.state(), |name| caches.namespace(name));
            let dirty = &caches.dirty;
            let namespace = policy.metadata.namespace.as_deref().unwrap_or_default();
            for baseline in &triggered {
                dirty.namespace(&baseline.name, namespace);
            }
            triggered
        }
    };
    let api_door = settings.api_door.clone().map(|policy| {
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
        baselines.clone(),
        caches.clone(),
    );
    let ctx = Arc::new(Context::new(
        client,
        caches,
        settings,
        state.clone(),
        instance,
    ));
    // OpenReports: followed beside the controller; their appearance reconciles every baseline.
    let (reports, reports_appeared) = follow::follow(
        ctx.client.clone(),
        ctx.reports.clone(),
        ctx.caches.unseen.clone(),
    );
    let mut controller = Controller::for_stream(baseline_events, baselines.clone())
        .reconcile_all_on(reports_appeared)
        .reconcile_on(namespace_triggers)
        .reconcile_on(probe_triggers)
        .watches_stream(policy_events, for_policy);
    if let Some(dns) = dns {
        // A change in the DNS namespace re-checks the doors of the baselines it serves.
        let namespace = dns.caches.namespace.clone();
        let for_dns = move || baselines_for_dns(&namespace, &baselines.state());
        let (service, slice, pod) = (for_dns.clone(), for_dns.clone(), for_dns);
        controller = controller
            .watches_stream(dns.services, move |_| service())
            .watches_stream(dns.slices, move |_| slice())
            .watches_stream(dns.pods, move |_| pod());
    }
    let controller = controller
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
    state.health.set_caches_synced(false);
}
