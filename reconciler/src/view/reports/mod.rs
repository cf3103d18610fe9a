//! OpenReports, as this term sees them: whether the `openreports.io` CRDs are served
//! ([`follow`]: discovery, then a watch of our reports), the cache of our reports while they
//! are ([`cache`]: each kept as a [`known::KnownReport`], whose it is and a fingerprint of what
//! it says), and the kind itself ([`object`]). The reconcile writes them (`reconcile::reports`);
//! what it wrote and the watch has not shown yet is in the one memory of unseen writes
//! ([`crate::view::unseen_writes`]).

pub mod cache;
pub mod follow;
pub mod known;
pub mod object;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use cache::ReportCache;
pub use known::KnownReport;
pub use object::OpenReport;

use crate::view::unseen_writes::UnseenWrites;

/// The reports side of one leadership term: whether it is on, and the cache of our reports
/// while the CRDs are served.
#[derive(Clone)]
pub struct Reports {
    enabled: bool,
    /// `Some` while the CRDs are served and our reports are listed.
    cache: Arc<Mutex<Option<ReportCache>>>,
}

impl Reports {
    /// `enabled`: `--openreports`; off, nothing is detected, watched or written.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            cache: Arc::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn lock(&self) -> MutexGuard<'_, Option<ReportCache>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache of our reports, while the CRDs are served and it is listed.
    pub fn cache(&self) -> Option<ReportCache> {
        self.lock().clone()
    }

    /// The CRDs came (a listed cache) or went (`None`): what this term remembers writing is
    /// dropped either way.
    pub(crate) fn set_cache(&self, cache: Option<ReportCache>, unseen: &UnseenWrites) {
        unseen.forget_reports();
        *self.lock() = cache;
    }
}

/// The report `namespace/name` as this term last knows it: its own unseen write, else the
/// cache.
pub fn stored(
    cache: &ReportCache,
    unseen: &UnseenWrites,
    namespace: &str,
    name: &str,
) -> Option<KnownReport> {
    match unseen.report(namespace, name) {
        Some(written) => written,
        None => cache.get(namespace, name),
    }
}
