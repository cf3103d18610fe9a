//! What this term wrote, until the watch caches show it: statuses and policies.
//!
//! A reconcile reads a baseline from the watch cache, and the cache can lag the reconciler's
//! own status write: the echo of a policy write often triggers the next reconcile before the
//! status write's watch event arrives (under a cut watch, seconds before). Compared against
//! that older status, a status that goes back to an earlier value is never written:
//! `objectsApplied` returning to 0 after a repair, `Ready` after a failure; and the
//! cumulative `driftRepairs` counts on from a stale base. So the status a reconcile
//! compares with is the one it last wrote, until the cache shows the resourceVersion that
//! write produced (this is the "expectations" pattern of Kubernetes' own controllers).
//!
//! Within a leadership term the reconciler is the status's only writer; a new term starts
//! with an empty memory and trusts its freshly listed cache.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::ResourceExt;
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};
use tokio::time::Instant;

/// How long a written status is preferred to the cache's when the cache never shows the
/// write's resourceVersion (a re-list can skip it): the expectations timeout of
/// Kubernetes' controllers.
pub const WRITTEN_STATUS_LIFETIME: Duration = Duration::from_secs(5 * 60);

#[derive(Clone, Default)]
pub struct WrittenStatuses {
    by_uid: Arc<Mutex<HashMap<String, Written>>>,
}

struct Written {
    resource_version: String,
    status: Option<NamespaceBaselineStatus>,
    at: Instant,
}

impl WrittenStatuses {
    /// The status `cached` (a baseline as the cache holds it) carries now: the one this term
    /// last wrote, unless the cache has caught up with that write (or it has expired).
    pub fn current(&self, cached: &NamespaceBaseline) -> Option<NamespaceBaselineStatus> {
        let Some(uid) = cached.uid() else {
            return cached.status.clone();
        };
        let mut by_uid = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(written) = by_uid.get(&uid) else {
            return cached.status.clone();
        };
        let caught_up = cached.resource_version().as_deref() == Some(&written.resource_version);
        if caught_up || written.at.elapsed() >= WRITTEN_STATUS_LIFETIME {
            by_uid.remove(&uid);
            return cached.status.clone();
        }
        written.status.clone()
    }

    /// `written` is what the API server answered to a status write for `baseline`.
    pub fn record(&self, baseline: &NamespaceBaseline, written: NamespaceBaseline) {
        let (Some(uid), Some(resource_version)) = (baseline.uid(), written.resource_version())
        else {
            return;
        };
        let mut by_uid = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        by_uid.retain(|_, old| old.at.elapsed() < WRITTEN_STATUS_LIFETIME);
        by_uid.insert(
            uid,
            Written {
                resource_version,
                status: written.status,
                at: Instant::now(),
            },
        );
    }

    /// A baseline gone (its finalizer removed, or deleted without one).
    pub fn forget(&self, baseline: &NamespaceBaseline) {
        if let Some(uid) = baseline.uid() {
            self.by_uid
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&uid);
        }
    }
}

/// How the reconciler's memories of single policies (these, and the tombstones of
/// `caches.rs`) key them.
pub(crate) fn policy_key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_owned(), name.to_owned())
}

/// How long a policy write waits for the policy watch to show it before a reconcile may
/// write it again (a watch that lags this much is reconnecting).
pub const UNSEEN_WRITE_LIFETIME: Duration = Duration::from_secs(10);

/// The managed policies this term is applying or has applied, until the policy watch shows
/// them. The two applies of a namespace answer and echo separately: a scoped reconcile
/// triggered by the first echo would find the second object missing (or still drifted) in the
/// cache and write it again. A change to a policy in this set is left out of the plan; the
/// echo that removes it triggers the reconcile that checks it. Marked before the request
/// goes out, since the watch can show an apply before its answer arrives; cleared after the
/// watch has put it in the cache. A reconcile takes its [`UnseenWrites::snapshot`] before it
/// reads the cache: a write not in the snapshot is then in what it reads.
#[derive(Clone, Default)]
pub struct UnseenWrites {
    inner: Arc<Mutex<Unseen>>,
}

#[derive(Default)]
struct Unseen {
    since: HashMap<(String, String), Instant>,
    /// Writes marked since the expired ones were last swept.
    marked: usize,
}

/// How many writes are marked between two sweeps of the expired ones.
const SWEEP_EVERY: usize = 1024;

impl UnseenWrites {
    fn since(&self) -> std::sync::MutexGuard<'_, Unseen> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An apply of `namespace/name` is about to go out.
    pub fn writing(&self, namespace: &str, name: &str) {
        let mut unseen = self.since();
        unseen.marked += 1;
        if unseen.marked >= SWEEP_EVERY {
            unseen
                .since
                .retain(|_, at| at.elapsed() < UNSEEN_WRITE_LIFETIME);
            unseen.marked = 0;
        }
        unseen
            .since
            .insert(policy_key(namespace, name), Instant::now());
    }

    /// The watch showed `namespace/name` (created, changed or deleted), or the apply failed.
    pub fn settled(&self, namespace: &str, name: &str) {
        let mut unseen = self.since();
        if !unseen.since.is_empty() {
            unseen.since.remove(&policy_key(namespace, name));
        }
    }

    /// The writes still to be shown by the watch, now.
    pub fn snapshot(&self) -> PendingWrites {
        let unseen = self.since();
        PendingWrites(
            unseen
                .since
                .iter()
                .filter(|(_, at)| at.elapsed() < UNSEEN_WRITE_LIFETIME)
                .map(|(key, _)| key.clone())
                .collect(),
        )
    }
}

/// The writes a reconcile leaves to their echoes ([`UnseenWrites::snapshot`]).
#[derive(Debug, Default)]
pub struct PendingWrites(HashSet<(String, String)>);

impl PendingWrites {
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        !self.0.is_empty() && self.0.contains(&policy_key(namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::baseline;
    use namespace_baseline_core::NamespaceBaselineSpec;

    fn stored(resource_version: &str, namespaces: u32) -> NamespaceBaseline {
        let mut object = baseline("guarded", NamespaceBaselineSpec::new("team"));
        object.metadata.uid = Some("uid-1".to_owned());
        object.metadata.resource_version = Some(resource_version.to_owned());
        object.status = Some(NamespaceBaselineStatus {
            namespaces,
            ..NamespaceBaselineStatus::default()
        });
        object
    }

    fn namespaces(status: Option<NamespaceBaselineStatus>) -> Option<u32> {
        status.map(|status| status.namespaces)
    }

    #[test]
    fn without_a_write_the_cache_is_the_status() {
        let written = WrittenStatuses::default();
        assert_eq!(namespaces(written.current(&stored("1", 3))), Some(3));
    }

    #[test]
    fn a_cache_behind_the_write_yields_the_written_status_until_it_catches_up() {
        let written = WrittenStatuses::default();
        let before = stored("1", 3);
        written.record(&before, stored("2", 5));
        assert_eq!(namespaces(written.current(&before)), Some(5));
        // Another change (a spec edit) seen before the status write: still behind it.
        assert_eq!(namespaces(written.current(&stored("1b", 3))), Some(5));
        // Caught up: the cache again, and the memory is dropped.
        assert_eq!(namespaces(written.current(&stored("2", 5))), Some(5));
        assert_eq!(namespaces(written.current(&stored("3", 7))), Some(7));
        assert_eq!(namespaces(written.current(&before)), Some(3));
    }

    #[test]
    fn another_baseline_of_the_same_name_is_not_confused_with_the_one_written() {
        let written = WrittenStatuses::default();
        written.record(&stored("1", 3), stored("2", 5));
        let mut recreated = stored("9", 1);
        recreated.metadata.uid = Some("uid-2".to_owned());
        assert_eq!(namespaces(written.current(&recreated)), Some(1));
    }

    #[test]
    fn a_forgotten_baseline_reads_from_the_cache() {
        let written = WrittenStatuses::default();
        let before = stored("1", 3);
        written.record(&before, stored("2", 5));
        written.forget(&before);
        assert_eq!(namespaces(written.current(&before)), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_cache_never_shows_expires() {
        let written = WrittenStatuses::default();
        let before = stored("1", 3);
        written.record(&before, stored("2", 5));
        tokio::time::advance(WRITTEN_STATUS_LIFETIME - Duration::from_secs(1)).await;
        assert_eq!(namespaces(written.current(&before)), Some(5));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(namespaces(written.current(&before)), Some(3));
    }

    #[test]
    fn an_answer_without_a_resource_version_is_not_remembered() {
        let written = WrittenStatuses::default();
        let before = stored("1", 3);
        let mut answer = stored("2", 5);
        answer.metadata.resource_version = None;
        written.record(&before, answer);
        assert_eq!(namespaces(written.current(&before)), Some(3));
    }
    #[tokio::test(start_paused = true)]
    async fn a_policy_write_is_pending_until_the_watch_shows_it_or_it_expires() {
        let unseen = UnseenWrites::default();
        assert!(!unseen.snapshot().contains("team-a", "deny"));
        unseen.writing("team-a", "deny");
        unseen.writing("team-a", "dns");
        let before = unseen.snapshot();
        assert!(before.contains("team-a", "deny"));
        assert!(!before.contains("team-b", "deny"));
        unseen.settled("team-a", "deny");
        // A snapshot is what was pending when it was taken.
        assert!(before.contains("team-a", "deny"));
        assert!(!unseen.snapshot().contains("team-a", "deny"));
        assert!(unseen.snapshot().contains("team-a", "dns"));
        tokio::time::advance(UNSEEN_WRITE_LIFETIME).await;
        assert!(!unseen.snapshot().contains("team-a", "dns"));
    }
}
