//! The watch caches a reconcile reads the cluster from, and what they keep of each object.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use namespace_baseline_core::DnsSpec;
use namespace_baseline_core::doors::{
    DnsObjects, Reachability, SERVICE_NAME_LABEL, check_dns_objects,
};
use tokio::sync::watch;
use tracing::info;

use crate::base::error::{Error, Result};
use crate::base::watch_errors::{Watch, WatchErrors, watch_events};
use crate::view::namespace_cache::CachedNamespace;
use crate::view::policy_cache::CachedPolicy;
use crate::view::scope::{Dirty, LiveNamespaces, MatchedNamespaces, PolicyIndex, Scope};
use crate::view::unseen_writes::UnseenWrites;
use crate::view::watched_cache::{Same, WatchedCache, same_content};

/// The watch caches a reconcile reads the cluster from: no LIST or GET on the hot path.
#[derive(Clone)]
pub struct Caches {
    pub namespaces: Store<CachedNamespace>,
    /// Every NetworkPolicy: the managed ones are the wall, the others may open holes in it.
    pub policies: Store<CachedPolicy>,
    /// The DNS namespace's Services, EndpointSlices and pods, for the `DNSReachable` check
    /// (`None`: not checked).
    pub dns: Option<DnsCaches>,
    /// The policies' names by namespace, for scoped reconciles.
    pub index: PolicyIndex,
    /// What the triggers marked for the next reconcile of each baseline.
    pub dirty: Dirty,
    /// What this term wrote (statuses, policy applies and deletions) that the watches have
    /// not shown yet, and the policies someone else deleted, until re-created.
    pub unseen: UnseenWrites,
    /// The namespaces each baseline matches, for the count of a scoped reconcile.
    pub matched: MatchedNamespaces,
    /// How many namespaces are live, for the count of those a baseline leaves out.
    pub live: LiveNamespaces,
    /// Turns `true` once every watch has completed its first list.
    synced: watch::Receiver<bool>,
}

impl Caches {
    pub fn new(
        namespaces: Store<CachedNamespace>,
        policies: Store<CachedPolicy>,
        dns: Option<DnsCaches>,
        synced: watch::Receiver<bool>,
    ) -> Self {
        Self {
            live: LiveNamespaces::new(namespaces.clone()),
            namespaces,
            policies,
            dns,
            index: PolicyIndex::default(),
            dirty: Dirty::default(),
            unseen: UnseenWrites::default(),
            matched: MatchedNamespaces::default(),
            synced,
        }
    }

    /// A cached namespace.
    pub fn namespace(&self, name: &str) -> Option<Arc<CachedNamespace>> {
        self.namespaces.get(&ObjectRef::new(name))
    }

    /// The cached namespaces and policies a reconcile of `scope` reads: all of them, or those
    /// of the scope's namespaces (found through the policy index, without a scan).
    pub fn scoped(&self, scope: &Scope) -> (Vec<Arc<CachedNamespace>>, Vec<Arc<CachedPolicy>>) {
        match scope {
            Scope::All => (self.namespaces.state(), self.policies.state()),
            Scope::Namespaces(names) => {
                let namespaces = names
                    .iter()
                    .filter_map(|name| self.namespace(name))
                    .collect();
                let policies = names
                    .iter()
                    .flat_map(|namespace| {
                        self.index
                            .names_in(namespace)
                            .into_iter()
                            .filter_map(|name| {
                                self.policies.get(&ObjectRef::new(&name).within(namespace))
                            })
                    })
                    .collect();
                (namespaces, policies)
            }
        }
    }

    /// Waits for the first list of every watch: acting on an empty cache would read as "no
    /// namespace matches" or "no wall installed". (Not `Store::wait_until_ready`: its
    /// one-shot signal wakes only one of several concurrent waiters.)
    pub(crate) async fn synced(&self) -> Result<()> {
        let mut synced = self.synced.clone();
        synced
            .wait_for(|synced| *synced)
            .await
            .map(|_| ())
            .map_err(|_| Error::CachesNotSynced)
    }
}

/// The Services (metadata), EndpointSlices and pods (metadata) of the one namespace the
/// cluster's DNS runs in (`--dns-namespace`). Listed apart from the wall's caches: a DNS
/// namespace the reconciler may not read (RBAC) leaves `DNSReachable` Unknown, never the wall
/// unattended. Each keeps only what a DNS door's check reads ([`slim_meta`], [`slim_slice`]),
/// and compares by it: in a busy namespace (pods annotated, rolled, their status updated)
/// only a change that could turn a door is one.
#[derive(Clone)]
pub struct DnsCaches {
    pub namespace: String,
    pub services: Store<PartialObjectMeta<Service>>,
    pub slices: Store<EndpointSlice>,
    pub pods: Store<PartialObjectMeta<Pod>>,
    listed: Arc<[AtomicBool; 3]>,
}

/// One item for each event of a watch that changed its cache (a live event, or a relist
/// that found something new, changed or gone: `watched_cache.rs`).
pub type Changes = BoxStream<'static, ()>;

/// The DNS namespace's watches, and the caches they fill.
pub struct DnsWatches {
    pub caches: DnsCaches,
    /// The changes of all three caches.
    pub changes: Changes,
}

impl DnsWatches {
    /// The three watches of `namespace` (not yet polled).
    pub fn new(client: &kube::Client, namespace: &str, errors: &WatchErrors) -> Self {
        use kube::Api;

        let (services, service_writer) = reflector::store::<PartialObjectMeta<Service>>();
        let (slices, slice_writer) = reflector::store::<EndpointSlice>();
        let (pods, pod_writer) = reflector::store::<PartialObjectMeta<Pod>>();
        let listed: Arc<[AtomicBool; 3]> = Arc::default();
        let on_listed = |index: usize| {
            let listed = listed.clone();
            move || listed[index].store(true, Ordering::Release)
        };
        let changes = futures::stream::select_all([
            changes(
                Api::namespaced(client.clone(), namespace),
                Watch::within("services", namespace),
                errors,
                (service_writer, slim_meta, same_meta),
                on_listed(0),
            ),
            changes(
                Api::namespaced(client.clone(), namespace),
                Watch::within("endpointslices", namespace),
                errors,
                (slice_writer, slim_slice, same_content),
                on_listed(1),
            ),
            changes(
                Api::namespaced(client.clone(), namespace),
                Watch::within("pods", namespace),
                errors,
                (pod_writer, slim_meta, same_meta),
                on_listed(2),
            ),
        ])
        .boxed();
        DnsWatches {
            caches: DnsCaches {
                namespace: namespace.to_owned(),
                services,
                slices,
                pods,
                listed: listed.clone(),
            },
            changes,
        }
    }
}

/// `watch`, of `api`, into the cache `writer` fills with each object as `slim` keeps it, as
/// the changes `same` tells (its errors told to `errors`); `on_listed` is told of each
/// completed list.
fn changes<K>(
    api: kube::Api<K>,
    watch: Watch<'_>,
    errors: &WatchErrors,
    (writer, slim, same): (Writer<K>, fn(&mut K), Same<K>),
    on_listed: impl Fn() + Send + 'static,
) -> Changes
where
    K: kube::Resource<DynamicType = ()>
        + Lookup<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let mut cache = WatchedCache::new(writer);
    watch_events(
        watcher(api, watcher::Config::default().any_semantic()).modify(slim),
        watch,
        errors.clone(),
    )
    .filter_map(move |event| {
        let mut changed = false;
        cache.apply(&event, same, |before, after| {
            changed |=
                !matches!((before, after), (Some(before), Some(after)) if same(before, after));
        });
        if matches!(event, watcher::Event::InitDone) {
            on_listed();
        }
        std::future::ready(changed.then_some(()))
    })
    .boxed()
}

/// Keeps of an object's metadata what a DNS door's check reads: its name and namespace (a
/// Service's existence), and its labels (a pod's).
fn slim_meta<K>(object: &mut PartialObjectMeta<K>) {
    let metadata = std::mem::take(&mut object.metadata);
    object.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        labels: metadata.labels,
        ..ObjectMeta::default()
    };
}

fn same_meta<K>(a: &PartialObjectMeta<K>, b: &PartialObjectMeta<K>) -> bool {
    a.metadata == b.metadata
}

/// Keeps of an EndpointSlice what a DNS door's check reads: whose Service it is, its
/// endpoints' addresses, readiness and pods, and its ports.
fn slim_slice(slice: &mut EndpointSlice) {
    let metadata = std::mem::take(&mut slice.metadata);
    let service = metadata
        .labels
        .and_then(|mut labels| labels.remove_entry(SERVICE_NAME_LABEL));
    slice.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        labels: service.map(|label| [label].into()),
        ..ObjectMeta::default()
    };
    for endpoint in slice.endpoints.iter_mut().flatten() {
        *endpoint = Endpoint {
            addresses: std::mem::take(&mut endpoint.addresses),
            conditions: endpoint
                .conditions
                .take()
                .map(|conditions| EndpointConditions {
                    ready: conditions.ready,
                    terminating: conditions.terminating,
                    serving: None,
                }),
            target_ref: endpoint.target_ref.take().map(|target| ObjectReference {
                kind: target.kind,
                namespace: target.namespace,
                name: target.name,
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        };
    }
    for port in slice.ports.iter_mut().flatten() {
        port.app_protocol = None;
        port.name = None;
    }
}

impl DnsCaches {
    /// Caches holding these objects, listed (for `plan` and the tests).
    pub fn of(
        namespace: &str,
        services: Store<PartialObjectMeta<Service>>,
        slices: Store<EndpointSlice>,
        pods: Store<PartialObjectMeta<Pod>>,
    ) -> Self {
        Self {
            namespace: namespace.to_owned(),
            services,
            slices,
            pods,
            listed: Arc::new([const { AtomicBool::new(true) }; 3]),
        }
    }

    /// Whether all three watches have completed their first list.
    pub fn is_listed(&self) -> bool {
        self.listed
            .iter()
            .all(|listed| listed.load(Ordering::Acquire))
    }

    /// The DNS door checked against these caches (the core's one DNS-objects adapter).
    pub fn check(&self, door: &DnsSpec) -> Reachability {
        let (services, slices, pods) = (
            self.services.state(),
            self.slices.state(),
            self.pods.state(),
        );
        check_dns_objects(
            door,
            &DnsObjects {
                services: services.iter().map(|service| &service.metadata).collect(),
                slices: slices.iter().map(AsRef::as_ref).collect(),
                pods: pods.iter().map(|pod| &pod.metadata).collect(),
            },
        )
    }
}

/// Which watches have completed their first list; says so on a channel (and to
/// `on_synced`, for the process's health) once all have. Each watch registers itself
/// ([`ListTracker::watch`]) before any is polled: a new watch needs no place kept for it.
pub(crate) struct ListTracker {
    listed: Mutex<Vec<bool>>,
    synced: watch::Sender<bool>,
    on_synced: Box<dyn Fn() + Send + Sync>,
}

/// One watch of a [`ListTracker`].
pub(crate) struct ListedWatch {
    tracker: Arc<ListTracker>,
    index: usize,
}

impl ListTracker {
    pub fn new(on_synced: impl Fn() + Send + Sync + 'static) -> (Arc<Self>, watch::Receiver<bool>) {
        let (synced, receiver) = watch::channel(false);
        let tracker = Self {
            listed: Mutex::default(),
            synced,
            on_synced: Box::new(on_synced),
        };
        (Arc::new(tracker), receiver)
    }

    /// One more watch whose first list the caches wait for.
    pub fn watch(self: &Arc<Self>) -> ListedWatch {
        let mut listed = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
        listed.push(false);
        ListedWatch {
            tracker: self.clone(),
            index: listed.len() - 1,
        }
    }
}

impl ListedWatch {
    /// Observes one event of the watch, after its cache took it in.
    pub fn observe<K>(&self, event: &watcher::Event<K>) {
        if !matches!(event, watcher::Event::InitDone) {
            return;
        }
        let tracker = &self.tracker;
        let all = {
            let mut listed = tracker
                .listed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let first = !std::mem::replace(&mut listed[self.index], true);
            first && listed.iter().all(|listed| *listed)
        };
        if all {
            info!("caches synced");
            (tracker.on_synced)();
            tracker.synced.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use namespace_baseline_core::spec::NamespaceBaseline;
    use namespace_baseline_leader::LeaderGate;

    #[tokio::test]
    async fn caches_count_as_synced_once_every_watch_listed_and_wake_every_waiter() {
        let state = Arc::new(crate::reconcile::state::State::new(Arc::new(
            LeaderGate::always(),
        )));
        let (tracker, synced) = ListTracker::new({
            let state = state.clone();
            move || state.health.set_caches_synced(true)
        });
        let caches = Caches::new(
            crate::fixtures::store(vec![]),
            crate::fixtures::store(vec![]),
            Some(crate::fixtures::healthy_dns()),
            synced,
        );
        // Several reconciles wait at once (a one-shot readiness signal would wake only one).
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let caches = caches.clone();
                tokio::spawn(async move { caches.synced().await })
            })
            .collect();
        let [baselines, namespaces, policies] = [(); 3].map(|()| tracker.watch());
        let done = kube::runtime::watcher::Event::<NamespaceBaseline>::InitDone;
        baselines.observe(&done);
        namespaces.observe(&kube::runtime::watcher::Event::<NamespaceBaseline>::Init);
        namespaces.observe(&done);
        baselines.observe(&done);
        tokio::task::yield_now().await;
        assert!(!state.health.caches_synced());
        assert!(waiters.iter().all(|w| !w.is_finished()));
        policies.observe(&done);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(1), waiter)
                .await
                .expect("a waiter was not woken")
                .unwrap()
                .unwrap();
        }
        assert!(state.health.caches_synced());
    }
}
