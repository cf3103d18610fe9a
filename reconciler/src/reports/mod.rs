//! OpenReports: while the `openreports.io` CRDs are served (found through discovery,
//! [`detect`]), each NamespaceBaseline's outcome in every namespace it covers is also written
//! as an `openreports.io/v1alpha1` `Report` ([`write`]), where the cluster's other policy
//! results are read. Written only when what it says changes, through the leader's write gate;
//! removed when its namespace leaves the baseline and, under `deletionPolicy: Delete`, with
//! the baseline.

pub mod detect;
pub mod object;
pub mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::runtime::reflector::{ObjectRef, Store};

pub use object::Report;

/// The reports side of one leadership term: whether it is on, the cache of our reports
/// while the CRDs are served, and the writes of this term the cache does not show yet.
#[derive(Clone)]
pub struct Reports {
    enabled: bool,
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `Some` while the CRDs are served and our reports are listed.
    store: Mutex<Option<Store<Report>>>,
    /// Reports written (`Some`) or deleted (`None`) by this term and not yet seen by the
    /// watch, by (namespace, name): compared with instead of the cache, so that a reconcile
    /// running before a write's echo does not write it again.
    unseen: Mutex<HashMap<(String, String), Option<Report>>>,
}

impl Reports {
    /// `enabled`: `--openreports`; off, nothing is detected, watched or written.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            inner: Arc::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache of our reports, while the CRDs are served and it is listed.
    pub fn store(&self) -> Option<Store<Report>> {
        Self::lock(&self.inner.store).clone()
    }

    /// The CRDs came (a listed cache) or went (`None`).
    fn set_store(&self, store: Option<Store<Report>>) {
        Self::lock(&self.inner.unseen).clear();
        *Self::lock(&self.inner.store) = store;
    }

    /// The report `namespace/name` as this term last knows it: its own unseen write, else
    /// the cache.
    pub(crate) fn stored(
        &self,
        store: &Store<Report>,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Report>> {
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(written) = Self::lock(&self.inner.unseen).get(&key) {
            return written.clone().map(Arc::new);
        }
        store.get(&ObjectRef::new(name).within(namespace))
    }

    /// This term wrote (`Some`) or deleted (`None`) `namespace/name`.
    pub(crate) fn wrote(&self, namespace: &str, name: &str, report: Option<Report>) {
        Self::lock(&self.inner.unseen).insert((namespace.to_owned(), name.to_owned()), report);
    }

    /// The watch showed `namespace/name`: the cache knows at least as much as the memory.
    fn seen(&self, namespace: &str, name: &str) {
        let mut unseen = Self::lock(&self.inner.unseen);
        if !unseen.is_empty() {
            unseen.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests;
