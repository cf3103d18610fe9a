//! What this term wrote that the watches have not shown yet, in one memory: the statuses it
//! wrote, the policies it is applying or deleting, and the managed policies the watch showed
//! someone else delete (until this term re-creates them). Registered where the writes happen
//! (`reconcile::writes`, `reconcile::controller`), cleared by one [`UnseenWrites::observe`] in
//! the watches, one lock, one table of lifetimes, one sweep.
//!
//! - **Statuses.** A reconcile reads a baseline from the watch cache, and the cache can lag the
//!   reconciler's own status write: the echo of a policy write often triggers the next
//!   reconcile before the status write's watch event arrives (under a cut watch, seconds
//!   before). Compared against that older status, a status that goes back to an earlier value
//!   is never written: `objectsApplied` returning to 0 after a repair, `Ready` after a
//!   failure; and the cumulative `driftRepairs` counts on from a stale base. So the status a
//!   reconcile compares with is the one it last wrote, until the cache shows the
//!   resourceVersion that write produced (the "expectations" pattern of Kubernetes' own
//!   controllers).
//! - **Policy applies.** The two applies of a namespace answer and echo separately: a scoped
//!   reconcile triggered by the first echo would find the second object missing (or still
//!   drifted) in the cache and write it again. A change to a policy being applied is left out
//!   of the plan ([`UnseenWrites::snapshot`]); the echo that clears it triggers the reconcile
//!   that checks it. Marked before the request goes out, since the watch can show an apply
//!   before its answer arrives.
//! - **Deletions.** When this term re-creates a managed policy the watch showed someone else
//!   delete, that is the repair of a deletion (an Event `DriftRepaired`, the drift repair
//!   counter), not an install. Its own deletions (pruning under `deletionPolicy: Delete`) are
//!   announced first and are no one else's: marked before the request, excused when the watch
//!   shows them.
//! - **Reports.** An OpenReports Report this term applied (slimmed, as the cache keeps it) or
//!   deleted is what the next reconcile compares with until the report watch shows it, so
//!   that a reconcile running before the echo does not write it again.
//!
//! Within a leadership term the reconciler is the only writer of the wall and the status. The
//! memory lives as long as the watches that clear it (the process, `watches.rs`): a standby
//! writes nothing, so what it holds at a take-over is what its watches saw (someone else's
//! deletions, to be repaired) and the expiring traces of its own earlier term.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::runtime::watcher;
use namespace_baseline_core::facts::PolicyFacts;
use namespace_baseline_core::identity::claims_management;
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};
use tokio::time::Instant;

use crate::view::policy_cache::CachedPolicy;
use crate::view::reports::known::{KnownReport, ShownReport};

/// How long each kind of memory waits for the watch, in one place.
pub mod lifetime {
    use std::time::Duration;

    /// A policy apply not shown by the policy watch by then may be written again (a watch
    /// that lags this much is reconnecting); a report write, likewise.
    pub const APPLY: Duration = Duration::from_secs(10);
    /// An apply not answered by then has ended without a word (its task gone): longer than
    /// any write's own budget (the client's 30 s timeout), so an unanswered apply stays
    /// pending while it can still land.
    pub const IN_FLIGHT: Duration = Duration::from_secs(60);
    /// A written status is preferred to the cache's for this long when the cache never shows
    /// the write's resourceVersion (a re-list can skip it): the expectations timeout of
    /// Kubernetes' controllers.
    pub const STATUS: Duration = Duration::from_secs(5 * 60);
    /// A deletion by someone else not repaired by then (its namespace went away, or left the
    /// baseline) is forgotten; an own deletion the watch never showed, too.
    pub const DELETION: Duration = Duration::from_secs(600);
}

/// How many memories are registered between two sweeps of the expired ones.
const SWEEP_EVERY: usize = 1024;

/// A table that emptied gives its memory back when it had grown past this many slots: one
/// sized by a burst (an install's 40,000 applies or 20,000 report writes unseen at once) is
/// not held for the life of the process, and a small one is not reallocated each time it
/// empties.
const RELEASE_ABOVE: usize = 1024;

/// Frees `table`'s slots if it is empty and has grown past [`RELEASE_ABOVE`].
fn release_if_empty<K: Eq + std::hash::Hash, V>(table: &mut HashMap<K, V>) {
    if table.is_empty() && table.capacity() > RELEASE_ABOVE {
        table.shrink_to_fit();
    }
}

/// The one memory of what this term wrote and the watches have not shown yet (module docs).
#[derive(Clone, Default)]
pub struct UnseenWrites {
    inner: Arc<Mutex<Memory>>,
}

/// What [`UnseenWrites`] holds, opaque outside this module (named by [`Watched`]).
#[derive(Default)]
pub struct Memory {
    /// By namespace and name.
    policies: HashMap<(String, String), PolicyMemory>,
    /// By baseline uid.
    statuses: HashMap<String, WrittenStatus>,
    /// Reports written (`Some`, slimmed) or deleted (`None`), by namespace and name.
    reports: HashMap<(String, String), WrittenReport>,
    /// Memories registered since the expired ones were last swept.
    registered: usize,
}

/// What is remembered of one policy; empty ones are dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PolicyMemory {
    /// This term applies it (since then, or since the answer) and the watch has not shown it
    /// yet.
    applying: Option<Instant>,
    /// An apply of it went out then and is not answered yet: pending whatever the age of
    /// `applying`, up to [`lifetime::IN_FLIGHT`].
    in_flight: Option<Instant>,
    /// This term deletes it (since then): the next deletion the watch shows is its own.
    deleting: Option<Instant>,
    /// The watch showed someone else delete it (then), and this term has not re-created it.
    deleted_by_others: Option<Instant>,
}

impl PolicyMemory {
    fn expire(&mut self, now: Instant) {
        let live = |at: &Instant, lifetime: Duration| now.duration_since(*at) < lifetime;
        self.applying = self.applying.filter(|at| live(at, lifetime::APPLY));
        self.in_flight = self.in_flight.filter(|at| live(at, lifetime::IN_FLIGHT));
        self.deleting = self.deleting.filter(|at| live(at, lifetime::DELETION));
        self.deleted_by_others = self
            .deleted_by_others
            .filter(|at| live(at, lifetime::DELETION));
    }

    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A report this term wrote (`Some`, as the cache would keep it) or deleted (`None`), and
/// when.
type WrittenReport = (Option<KnownReport>, Instant);

struct WrittenStatus {
    resource_version: String,
    status: Option<NamespaceBaselineStatus>,
    at: Instant,
}

fn object_key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_owned(), name.to_owned())
}

impl Memory {
    /// Registers one more memory, sweeping the expired ones every [`SWEEP_EVERY`].
    fn registering(&mut self) {
        self.registered += 1;
        if self.registered < SWEEP_EVERY {
            return;
        }
        self.registered = 0;
        let now = Instant::now();
        self.policies.retain(|_, memory| {
            memory.expire(now);
            !memory.is_empty()
        });
        self.statuses
            .retain(|_, written| now.duration_since(written.at) < lifetime::STATUS);
        self.reports
            .retain(|_, (_, at)| now.duration_since(*at) < lifetime::APPLY);
        release_if_empty(&mut self.policies);
        release_if_empty(&mut self.statuses);
        release_if_empty(&mut self.reports);
    }

    fn policy(&mut self, namespace: &str, name: &str) -> &mut PolicyMemory {
        self.policies
            .entry(object_key(namespace, name))
            .or_default()
    }

    /// Changes the memory of one policy, if there is one, dropping it when it empties.
    fn update_policy(
        &mut self,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut PolicyMemory),
    ) {
        // Asked for every object a reconcile writes: no key built when nothing is remembered.
        if self.policies.is_empty() {
            return;
        }
        let key = object_key(namespace, name);
        if let Some(memory) = self.policies.get_mut(&key) {
            change(memory);
            if memory.is_empty() {
                self.policies.remove(&key);
                release_if_empty(&mut self.policies);
            }
        }
    }

    fn read_policy(&self, namespace: &str, name: &str) -> PolicyMemory {
        if self.policies.is_empty() {
            return PolicyMemory::default();
        }
        let mut memory = self
            .policies
            .get(&object_key(namespace, name))
            .copied()
            .unwrap_or_default();
        memory.expire(Instant::now());
        memory
    }
}

/// The objects whose watch events clear the memory: NetworkPolicies, NamespaceBaselines and
/// reports.
pub trait Watched {
    /// The watch showed `self` (`deleted`: its deletion).
    fn shown(&self, memory: &mut Memory, deleted: bool);
}

/// A policy the watch showed, as watched or as the cache keeps it.
fn policy_shown(policy: &impl PolicyFacts, memory: &mut Memory, deleted: bool) {
    let (Some(namespace), Some(name)) = (policy.namespace(), policy.name()) else {
        return;
    };
    // Created, changed or deleted: an apply of it is no longer unseen.
    memory.update_policy(namespace, name, |policy| policy.applying = None);
    let managed = policy.labels().is_some_and(claims_management);
    if !deleted || !managed {
        return;
    }
    let now = Instant::now();
    let own = memory.read_policy(namespace, name).deleting.is_some();
    if own {
        memory.update_policy(namespace, name, |policy| policy.deleting = None);
    } else {
        memory.registering();
        memory.policy(namespace, name).deleted_by_others = Some(now);
    }
}

impl Watched for NetworkPolicy {
    fn shown(&self, memory: &mut Memory, deleted: bool) {
        policy_shown(self, memory, deleted);
    }
}

impl Watched for CachedPolicy {
    fn shown(&self, memory: &mut Memory, deleted: bool) {
        policy_shown(self, memory, deleted);
    }
}

impl Watched for NamespaceBaseline {
    fn shown(&self, memory: &mut Memory, deleted: bool) {
        let Some(uid) = self.uid() else {
            return;
        };
        let caught_up = memory.statuses.get(&uid).is_some_and(|written| {
            self.resource_version().as_deref() == Some(written.resource_version.as_str())
        });
        if deleted || caught_up {
            memory.statuses.remove(&uid);
        }
    }
}

impl Watched for ShownReport {
    fn shown(&self, memory: &mut Memory, _deleted: bool) {
        if memory.reports.is_empty() {
            return;
        }
        memory
            .reports
            .remove(&object_key(&self.namespace, &self.name));
        release_if_empty(&mut memory.reports);
    }
}

impl UnseenWrites {
    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch event, after the cache applied it: what it shows is no longer unseen (an
    /// apply's echo, the resourceVersion of a status write, an own deletion), and a managed
    /// policy someone else deleted is remembered as such.
    pub(crate) fn observe<K: Watched>(&self, event: &watcher::Event<K>) {
        let (object, deleted) = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => (object, false),
            watcher::Event::Delete(object) => (object, true),
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        object.shown(&mut self.memory(), deleted);
    }

    /// A change a watch's cache took in (`watched_cache.rs`: a live event, or an object a
    /// relist showed new, changed or gone), after the cache took it: `after` is shown, or
    /// `before` deleted. A relist shows no deletion event for what was deleted during its
    /// watch's gap: this is how such a deletion is seen.
    pub fn changed<K: Watched>(&self, before: Option<&K>, after: Option<&K>) {
        match (before, after) {
            (_, Some(after)) => after.shown(&mut self.memory(), false),
            (Some(before), None) => before.shown(&mut self.memory(), true),
            (None, None) => {}
        }
    }

    // --- Policies ---

    /// An apply of `namespace/name` is about to go out.
    pub fn applying(&self, namespace: &str, name: &str) {
        let mut memory = self.memory();
        memory.registering();
        let policy = memory.policy(namespace, name);
        let now = Instant::now();
        policy.applying = Some(now);
        policy.in_flight = Some(now);
    }

    /// The apply of `namespace/name` was answered: unless the watch has shown it already, it
    /// has [`lifetime::APPLY`] from now to show it (a write that was long in flight, handed
    /// over by its reconcile to the baseline's writer, is not forgotten meanwhile).
    pub fn applied(&self, namespace: &str, name: &str) {
        self.memory().update_policy(namespace, name, |policy| {
            policy.in_flight = None;
            if policy.applying.is_some() {
                policy.applying = Some(Instant::now());
            }
        });
    }

    /// The apply of `namespace/name` failed: nothing for the watch to show (or nothing known),
    /// and the next plan may write it.
    pub fn apply_failed(&self, namespace: &str, name: &str) {
        self.memory().update_policy(namespace, name, |policy| {
            policy.applying = None;
            policy.in_flight = None;
        });
    }

    /// This term re-created `namespace/name` after someone else deleted it: that deletion is
    /// repaired.
    pub fn recreated(&self, namespace: &str, name: &str) {
        self.memory()
            .update_policy(namespace, name, |policy| policy.deleted_by_others = None);
    }

    /// This term is about to delete `namespace/name` itself.
    pub fn deleting(&self, namespace: &str, name: &str) {
        let mut memory = self.memory();
        memory.registering();
        memory.policy(namespace, name).deleting = Some(Instant::now());
    }

    /// Whether the watch showed someone else delete `namespace/name` (and this term has not
    /// re-created it since).
    pub fn deleted_by_others(&self, namespace: &str, name: &str) -> bool {
        self.memory()
            .read_policy(namespace, name)
            .deleted_by_others
            .is_some()
    }

    /// The applies still to be shown by the watch, now. A reconcile takes it before it reads
    /// the cache: an apply not in the snapshot is in what it reads.
    pub fn snapshot(&self) -> PendingWrites {
        let memory = self.memory();
        let now = Instant::now();
        PendingWrites(
            memory
                .policies
                .iter()
                .filter(|(_, policy)| {
                    policy
                        .in_flight
                        .is_some_and(|at| now.duration_since(at) < lifetime::IN_FLIGHT)
                        || policy
                            .applying
                            .is_some_and(|at| now.duration_since(at) < lifetime::APPLY)
                })
                .map(|(key, _)| key.clone())
                .collect(),
        )
    }

    // --- Statuses ---

    /// The status `cached` (a baseline as the cache holds it) carries now: the one this term
    /// last wrote, unless the cache has caught up with that write (or it has expired).
    pub fn status(&self, cached: &NamespaceBaseline) -> Option<NamespaceBaselineStatus> {
        let Some(uid) = cached.uid() else {
            return cached.status.clone();
        };
        let mut memory = self.memory();
        let Some(written) = memory.statuses.get(&uid) else {
            return cached.status.clone();
        };
        let caught_up = cached.resource_version().as_deref() == Some(&written.resource_version);
        if caught_up || written.at.elapsed() >= lifetime::STATUS {
            memory.statuses.remove(&uid);
            return cached.status.clone();
        }
        written.status.clone()
    }

    /// `written` is what the API server answered to a status write for `baseline`.
    pub fn status_written(&self, baseline: &NamespaceBaseline, written: NamespaceBaseline) {
        let (Some(uid), Some(resource_version)) = (baseline.uid(), written.resource_version())
        else {
            return;
        };
        let mut memory = self.memory();
        memory.registering();
        memory.statuses.insert(
            uid,
            WrittenStatus {
                resource_version,
                status: written.status,
                at: Instant::now(),
            },
        );
    }

    // --- Reports ---

    /// This term applied `report` (as the cache would keep it) as `namespace/name`, or
    /// deleted it (`None`).
    pub fn report_written(&self, namespace: &str, name: &str, report: Option<KnownReport>) {
        let mut memory = self.memory();
        memory.registering();
        memory
            .reports
            .insert(object_key(namespace, name), (report, Instant::now()));
    }

    /// What this term last wrote to the report `namespace/name` and the watch has not shown
    /// yet: `Some(None)` a deletion, `None` nothing unseen (the cache knows).
    pub fn report(&self, namespace: &str, name: &str) -> Option<Option<KnownReport>> {
        let memory = self.memory();
        if memory.reports.is_empty() {
            return None;
        }
        memory
            .reports
            .get(&object_key(namespace, name))
            .filter(|(_, at)| at.elapsed() < lifetime::APPLY)
            .map(|(report, _)| report.clone())
    }

    /// The reports' CRDs came or went: nothing written before is compared with.
    pub fn forget_reports(&self) {
        self.memory().reports.clear();
    }

    /// A baseline gone (its finalizer removed, or deleted without one).
    pub fn forget(&self, baseline: &NamespaceBaseline) {
        if let Some(uid) = baseline.uid() {
            self.memory().statuses.remove(&uid);
        }
    }
}

/// The applies a reconcile leaves to their echoes ([`UnseenWrites::snapshot`]).
#[derive(Debug, Default)]
pub struct PendingWrites(HashSet<(String, String)>);

impl PendingWrites {
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        !self.0.is_empty() && self.0.contains(&object_key(namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::baseline;
    use namespace_baseline_core::NamespaceBaselineSpec;
    use rstest::rstest;

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
        let written = UnseenWrites::default();
        assert_eq!(namespaces(written.status(&stored("1", 3))), Some(3));
    }

    #[test]
    fn a_cache_behind_the_write_yields_the_written_status_until_it_catches_up() {
        let written = UnseenWrites::default();
        let before = stored("1", 3);
        written.status_written(&before, stored("2", 5));
        assert_eq!(namespaces(written.status(&before)), Some(5));
        // Another change (a spec edit) seen before the status write: still behind it.
        assert_eq!(namespaces(written.status(&stored("1b", 3))), Some(5));
        // Caught up: the cache again, and the memory is dropped.
        assert_eq!(namespaces(written.status(&stored("2", 5))), Some(5));
        assert_eq!(namespaces(written.status(&stored("3", 7))), Some(7));
        assert_eq!(namespaces(written.status(&before)), Some(3));
    }

    #[test]
    fn another_baseline_of_the_same_name_is_not_confused_with_the_one_written() {
        let written = UnseenWrites::default();
        written.status_written(&stored("1", 3), stored("2", 5));
        let mut recreated = stored("9", 1);
        recreated.metadata.uid = Some("uid-2".to_owned());
        assert_eq!(namespaces(written.status(&recreated)), Some(1));
    }

    #[test]
    fn a_forgotten_baseline_reads_from_the_cache() {
        let written = UnseenWrites::default();
        let before = stored("1", 3);
        written.status_written(&before, stored("2", 5));
        written.forget(&before);
        assert_eq!(namespaces(written.status(&before)), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_cache_never_shows_expires() {
        let written = UnseenWrites::default();
        let before = stored("1", 3);
        written.status_written(&before, stored("2", 5));
        tokio::time::advance(lifetime::STATUS - Duration::from_secs(1)).await;
        assert_eq!(namespaces(written.status(&before)), Some(5));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(namespaces(written.status(&before)), Some(3));
    }

    #[test]
    fn an_answer_without_a_resource_version_is_not_remembered() {
        let written = UnseenWrites::default();
        let before = stored("1", 3);
        let mut answer = stored("2", 5);
        answer.metadata.resource_version = None;
        written.status_written(&before, answer);
        assert_eq!(namespaces(written.status(&before)), Some(3));
    }

    // --- Policies ---

    /// A NetworkPolicy the reconciler manages (`managed`) or someone else's.
    fn policy(namespace: &str, name: &str, managed: bool) -> NetworkPolicy {
        let spec = NamespaceBaselineSpec::new("team");
        let mut policy =
            namespace_baseline_core::wall::desired_wall("guarded", namespace, &spec).remove(0);
        policy.metadata.name = Some(name.to_owned());
        if !managed {
            policy.metadata.labels = None;
        }
        policy
    }

    fn apply(namespace: &str, name: &str) -> watcher::Event<NetworkPolicy> {
        watcher::Event::Apply(policy(namespace, name, true))
    }

    fn delete(namespace: &str, name: &str, managed: bool) -> watcher::Event<NetworkPolicy> {
        watcher::Event::Delete(policy(namespace, name, managed))
    }

    #[tokio::test(start_paused = true)]
    async fn a_policy_write_is_pending_until_the_watch_shows_it_or_it_expires() {
        let unseen = UnseenWrites::default();
        assert!(!unseen.snapshot().contains("team-a", "deny"));
        unseen.applying("team-a", "deny");
        unseen.applying("team-a", "dns");
        unseen.applied("team-a", "deny");
        unseen.applied("team-a", "dns");
        let before = unseen.snapshot();
        assert!(before.contains("team-a", "deny"));
        assert!(!before.contains("team-b", "deny"));
        unseen.observe(&apply("team-a", "deny"));
        // A snapshot is what was pending when it was taken.
        assert!(before.contains("team-a", "deny"));
        assert!(!unseen.snapshot().contains("team-a", "deny"));
        assert!(unseen.snapshot().contains("team-a", "dns"));
        tokio::time::advance(lifetime::APPLY).await;
        assert!(!unseen.snapshot().contains("team-a", "dns"));
    }

    /// An install's burst of applies, all shown by the watch: the table that held them is
    /// given back, not kept at the burst's size for the life of the process.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_applies_gives_its_table_back_once_the_watch_shows_them() {
        let unseen = UnseenWrites::default();
        let burst: Vec<String> = (0..5_000).map(|i| format!("team-{i}")).collect();
        for namespace in &burst {
            unseen.applying(namespace, "deny");
            unseen.applied(namespace, "deny");
        }
        assert!(unseen.memory().policies.capacity() >= burst.len());
        for namespace in &burst[..burst.len() - 1] {
            unseen.observe(&apply(namespace, "deny"));
        }
        // One left: the table keeps its slots while it holds anything.
        assert!(unseen.memory().policies.capacity() >= burst.len());
        unseen.observe(&apply(&burst[burst.len() - 1], "deny"));
        assert_eq!(unseen.memory().policies.capacity(), 0);
        // A small table that empties keeps its few slots.
        unseen.applying("team-a", "deny");
        unseen.applied("team-a", "deny");
        unseen.observe(&apply("team-a", "deny"));
        assert!(unseen.memory().policies.capacity() > 0);
    }

    /// Whatever the watch shows of a policy being applied (its creation, a change, a re-list,
    /// its deletion) clears the apply; a failed apply clears it too; the start and end of a
    /// list do not.
    #[rstest]
    #[case::applied(apply("team-a", "deny"), false)]
    #[case::listed(watcher::Event::InitApply(policy("team-a", "deny", true)), false)]
    #[case::deleted(delete("team-a", "deny", true), false)]
    #[case::deleted_unmanaged(delete("team-a", "deny", false), false)]
    #[case::another_policy(apply("team-a", "dns"), true)]
    #[case::another_namespace(apply("team-b", "deny"), true)]
    #[case::list_start(watcher::Event::Init, true)]
    #[case::list_done(watcher::Event::InitDone, true)]
    fn the_watch_clears_the_apply_it_shows(
        #[case] event: watcher::Event<NetworkPolicy>,
        #[case] still_pending: bool,
    ) {
        let unseen = UnseenWrites::default();
        unseen.applying("team-a", "deny");
        unseen.applied("team-a", "deny");
        unseen.observe(&event);
        assert_eq!(unseen.snapshot().contains("team-a", "deny"), still_pending);
    }

    /// An apply in flight stays pending, whatever the watch shows and however long it takes
    /// (a write handed to the baseline's writer), until it is answered; then the watch has
    /// its lifetime from the answer.
    #[tokio::test(start_paused = true)]
    async fn an_apply_in_flight_is_pending_until_answered() {
        let unseen = UnseenWrites::default();
        unseen.applying("team-a", "deny");
        unseen.observe(&apply("team-a", "deny"));
        tokio::time::advance(lifetime::APPLY * 2).await;
        assert!(unseen.snapshot().contains("team-a", "deny"), "in flight");
        unseen.applying("team-a", "dns");
        tokio::time::advance(lifetime::APPLY * 2).await;
        unseen.applied("team-a", "dns");
        assert!(
            unseen.snapshot().contains("team-a", "dns"),
            "answered just now"
        );
        unseen.applied("team-a", "deny");
        assert!(
            !unseen.snapshot().contains("team-a", "deny"),
            "answered after the watch showed it"
        );
        tokio::time::advance(lifetime::APPLY).await;
        assert!(!unseen.snapshot().contains("team-a", "dns"));
        // An apply never answered (its task gone) is forgotten at last.
        unseen.applying("team-b", "deny");
        tokio::time::advance(lifetime::IN_FLIGHT).await;
        assert!(!unseen.snapshot().contains("team-b", "deny"));
    }

    #[test]
    fn a_failed_apply_is_no_longer_pending() {
        let unseen = UnseenWrites::default();
        unseen.applying("team-a", "deny");
        unseen.apply_failed("team-a", "deny");
        assert!(!unseen.snapshot().contains("team-a", "deny"));
    }

    /// Which deletions the watch shows are someone else's: a managed policy's, unless this
    /// term is deleting it.
    #[rstest]
    #[case::managed(true, false, true)]
    #[case::unmanaged(false, false, false)]
    #[case::own_deletion(true, true, false)]
    #[case::own_deletion_of_an_unmanaged_name(false, true, false)]
    fn a_deletion_is_someone_elses_unless_this_term_made_it(
        #[case] managed: bool,
        #[case] own: bool,
        #[case] by_others: bool,
    ) {
        let unseen = UnseenWrites::default();
        if own {
            unseen.deleting("team-a", "deny");
        }
        unseen.observe(&delete("team-a", "deny", managed));
        assert_eq!(unseen.deleted_by_others("team-a", "deny"), by_others);
        assert!(!unseen.deleted_by_others("team-b", "deny"));
    }

    /// The reconciler's own deletions (pruning) leave no tombstone: a policy it removed and
    /// later re-installs is no repair.
    #[test]
    fn the_reconcilers_own_deletions_leave_no_tombstone() {
        let unseen = UnseenWrites::default();
        let deleted = delete("team-a", "nsb-guarded-default-deny", true);
        unseen.deleting("team-a", "nsb-guarded-default-deny");
        unseen.observe(&deleted);
        assert!(!unseen.deleted_by_others("team-a", "nsb-guarded-default-deny"));
        unseen.observe(&deleted);
        assert!(
            unseen.deleted_by_others("team-a", "nsb-guarded-default-deny"),
            "only the one expected deletion is excused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_by_others_is_remembered_until_repaired_or_for_its_lifetime() {
        let unseen = UnseenWrites::default();
        unseen.observe(&delete("team-a", "deny", true));
        unseen.observe(&delete("team-b", "deny", true));
        unseen.recreated("team-a", "deny");
        assert!(!unseen.deleted_by_others("team-a", "deny"), "repaired");
        tokio::time::advance(lifetime::DELETION - Duration::from_secs(1)).await;
        assert!(unseen.deleted_by_others("team-b", "deny"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!unseen.deleted_by_others("team-b", "deny"), "expired");
    }

    #[tokio::test(start_paused = true)]
    async fn an_own_deletion_the_watch_never_shows_is_forgotten_after_its_lifetime() {
        let unseen = UnseenWrites::default();
        unseen.deleting("team-a", "deny");
        tokio::time::advance(lifetime::DELETION).await;
        unseen.observe(&delete("team-a", "deny", true));
        assert!(unseen.deleted_by_others("team-a", "deny"));
    }

    /// One sweep, every `SWEEP_EVERY` registrations, drops every expired memory of every
    /// kind; live ones stay.
    #[tokio::test(start_paused = true)]
    async fn one_sweep_drops_the_expired_memories_of_every_kind() {
        let unseen = UnseenWrites::default();
        unseen.observe(&delete("team-a", "gone", true));
        unseen.deleting("team-a", "pruned");
        unseen.status_written(&stored("1", 3), stored("2", 5));
        tokio::time::advance(lifetime::DELETION).await;
        unseen.deleting("team-b", "live");
        for n in 0..SWEEP_EVERY {
            unseen.applying("team-c", &format!("p{n}"));
        }
        tokio::time::advance(lifetime::APPLY).await;
        // The sweep ran at the 1,024th registration: the applies expired since stay until
        // the next one.
        let memory = unseen.memory();
        assert_eq!(memory.statuses.len(), 0);
        assert!(!memory.policies.contains_key(&object_key("team-a", "gone")));
        assert!(
            !memory
                .policies
                .contains_key(&object_key("team-a", "pruned"))
        );
        assert!(memory.policies.contains_key(&object_key("team-b", "live")));
        assert_eq!(
            memory.policies.len(),
            1 + SWEEP_EVERY,
            "the live deletion, the applies"
        );
    }

    // --- Statuses through the baseline watch ---

    #[rstest]
    #[case::the_written_version(watcher::Event::Apply(stored("2", 5)), Some(3))]
    #[case::a_relist_with_it(watcher::Event::InitApply(stored("2", 5)), Some(3))]
    #[case::an_older_version(watcher::Event::Apply(stored("1b", 3)), Some(5))]
    #[case::the_deletion(watcher::Event::Delete(stored("2", 5)), Some(3))]
    fn the_baseline_watch_clears_the_status_it_shows(
        #[case] event: watcher::Event<NamespaceBaseline>,
        #[case] read_from_a_stale_cache: Option<u32>,
    ) {
        let written = UnseenWrites::default();
        let before = stored("1", 3);
        written.status_written(&before, stored("2", 5));
        written.observe(&event);
        assert_eq!(namespaces(written.status(&before)), read_from_a_stale_cache);
    }
}
