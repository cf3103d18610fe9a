//! The watch caches a reconcile reads the cluster from, and what they keep of each object.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::watch;
use tracing::info;

use crate::error::{Error, Result};
use crate::state::State;

/// The watch caches a reconcile reads the cluster from: no LIST or GET on the hot path.
#[derive(Clone)]
pub struct Caches {
    pub namespaces: Store<Namespace>,
    /// Only policies carrying the managed-by label.
    pub policies: Store<NetworkPolicy>,
    /// Turns `true` once every watch has completed its first list.
    synced: watch::Receiver<bool>,
}

impl Caches {
    pub fn new(
        namespaces: Store<Namespace>,
        policies: Store<NetworkPolicy>,
        synced: watch::Receiver<bool>,
    ) -> Self {
        Self {
            namespaces,
            policies,
            synced,
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

/// Which watches have completed their first list; says so on a channel (and in the health
/// state) once all have.
pub(crate) struct ListTracker {
    listed: [AtomicBool; 3],
    synced: watch::Sender<bool>,
    state: Arc<State>,
}

impl ListTracker {
    pub const BASELINES: usize = 0;
    pub const NAMESPACES: usize = 1;
    pub const POLICIES: usize = 2;

    pub fn new(state: Arc<State>) -> (Arc<Self>, watch::Receiver<bool>) {
        let (synced, receiver) = watch::channel(false);
        let tracker = Self {
            listed: Default::default(),
            synced,
            state,
        };
        (Arc::new(tracker), receiver)
    }

    /// Observes one event of watch `index`, after the reflector applied it.
    pub fn observe<K>(&self, index: usize, event: &watcher::Event<K>) {
        if !matches!(event, watcher::Event::InitDone)
            || self.listed[index].swap(true, Ordering::AcqRel)
        {
            return;
        }
        if self
            .listed
            .iter()
            .all(|listed| listed.load(Ordering::Acquire))
        {
            info!("caches synced");
            self.state.health.set_caches_synced(true);
            self.synced.send_replace(true);
        }
    }
}

/// What the namespace cache keeps: name, labels and deletion timestamp, all a plan or a
/// trigger reads. At thousands of namespaces the rest (managed fields, annotations, spec,
/// status, uid, resourceVersion) is most of the cache's memory. (The store's keys ignore
/// uid and resourceVersion.)
pub fn slim_namespace(namespace: &mut Namespace) {
    let metadata = std::mem::take(&mut namespace.metadata);
    namespace.metadata = ObjectMeta {
        name: metadata.name,
        labels: metadata.labels,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
    namespace.spec = None;
    namespace.status = None;
}

/// What the policy cache keeps: identity, labels and spec, all the drift check compares.
pub fn slim_policy(policy: &mut NetworkPolicy) {
    let metadata = std::mem::take(&mut policy.metadata);
    policy.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        labels: metadata.labels,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
}
