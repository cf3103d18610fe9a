//! What this term wrote that the watches have not shown yet, in one memory: the statuses it
//! wrote, the policies it is applying or deleting, and the managed policies the watch showed
//! someone else delete (until this term re-creates them). Registered where the writes happen
//! (`reconcile::writes`, `reconcile::controller`), cleared by one [`UnseenWrites::observe`] in
//! the watches: one lock, one expiring map whose keys name the fact and so the kind of object
//! ([`Fact`]), one table of lifetimes, one sweep.
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

    use crate::base::retry::WRITE_BOUNDS;

    /// A policy apply not shown by the policy watch by then may be written again (a watch
    /// that lags this much is reconnecting); a report write, likewise.
    pub const APPLY: Duration = Duration::from_secs(10);
    /// An apply not answered by then has ended without a word (its task gone): twice a
    /// write's timeout, more than its wait for the gate, its request and a hedge sent late,
    /// so that an unanswered apply stays pending while it can still land.
    pub const IN_FLIGHT: Duration = Duration::from_secs(2 * WRITE_BOUNDS.timeout.as_secs());
    const _: () = assert!(
        IN_FLIGHT.as_secs() > WRITE_BOUNDS.gate_wait.as_secs() + WRITE_BOUNDS.timeout.as_secs()
    );
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

/// The map gives its memory back when it empties after growing past this many slots: one
/// sized by a burst (an install's 40,000 applies or 20,000 report writes unseen at once) is
/// not held for the life of the process, and a small one is not reallocated each time it
/// empties.
const RELEASE_ABOVE: usize = 1024;

/// What is remembered of an object: the fact names the kind of object it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fact {
    /// A NetworkPolicy this term applies and the watch has not shown yet (since the apply
    /// went out, or since its answer).
    Applying,
    /// An apply of a NetworkPolicy went out and is not answered yet: pending whatever the
    /// age of `Applying`.
    ApplyInFlight,
    /// A NetworkPolicy this term deletes: the next deletion the watch shows is its own.
    Deleting,
    /// A managed NetworkPolicy the watch showed someone else delete, not re-created since.
    DeletedByOthers,
    /// The status this term last wrote to a NamespaceBaseline (keyed by its uid).
    StatusWritten,
    /// An OpenReports Report this term applied or deleted.
    ReportWritten,
    /// A request of an apply of a NetworkPolicy that did not give the answer (a hedged
    /// apply's) runs on and may land late, with the object it carries.
    LateApply,
}

impl Fact {
    const COUNT: usize = 7;

    /// The kind of object the fact is about.
    fn kind(self) -> &'static str {
        match self {
            Self::Applying
            | Self::ApplyInFlight
            | Self::Deleting
            | Self::DeletedByOthers
            | Self::LateApply => <NetworkPolicy as k8s_openapi::Resource>::KIND,
            Self::StatusWritten => "NamespaceBaseline",
            Self::ReportWritten => crate::view::reports::object::KIND,
        }
    }

    fn lifetime(self) -> Duration {
        match self {
            Self::Applying | Self::ReportWritten => lifetime::APPLY,
            Self::ApplyInFlight | Self::LateApply => lifetime::IN_FLIGHT,
            Self::Deleting | Self::DeletedByOthers => lifetime::DELETION,
            Self::StatusWritten => lifetime::STATUS,
        }
    }
}

/// A fact about one object, of its kind: a policy or report by namespace and name, a
/// baseline by uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    kind: &'static str,
    fact: Fact,
    namespace: Box<str>,
    name: Box<str>,
}

impl Key {
    fn new(fact: Fact, namespace: &str, name: &str) -> Self {
        Self {
            kind: fact.kind(),
            fact,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// What is remembered with a fact.
#[derive(Debug, Clone)]
enum Remembered {
    /// Nothing more than the fact.
    Fact,
    /// The status written, and the resourceVersion the API server gave it.
    Status {
        resource_version: String,
        status: Option<NamespaceBaselineStatus>,
    },
    /// The report written, as the cache would keep it (`None`: deleted).
    Report(Option<KnownReport>),
    /// The object a request carries.
    Policy(Box<NetworkPolicy>),
}

#[derive(Debug)]
struct Entry {
    since: Instant,
    remembered: Remembered,
}

impl Entry {
    fn live(&self, fact: Fact, now: Instant) -> bool {
        now.duration_since(self.since) < fact.lifetime()
    }
}

/// The one memory of what this term wrote and the watches have not shown yet (module docs).
#[derive(Clone, Default)]
pub struct UnseenWrites {
    inner: Arc<Mutex<Memory>>,
}

/// What [`UnseenWrites`] holds, opaque outside this module (named by [`Watched`]): one
/// expiring map.
#[derive(Default)]
pub struct Memory {
    entries: HashMap<Key, Entry>,
    /// Entries held by fact (expired ones included until swept): a question about a fact
    /// nothing holds (asked of every object a reconcile writes) builds no key.
    held: [usize; Fact::COUNT],
    /// Memories registered since the expired ones were last swept.
    registered: usize,
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
        self.entries.retain(|key, entry| entry.live(key.fact, now));
        self.held = [0; Fact::COUNT];
        for key in self.entries.keys() {
            self.held[key.fact as usize] += 1;
        }
        self.release_if_empty();
    }

    fn release_if_empty(&mut self) {
        if self.entries.is_empty() && self.entries.capacity() > RELEASE_ABOVE {
            self.entries.shrink_to_fit();
        }
    }

    fn remember(&mut self, fact: Fact, namespace: &str, name: &str, remembered: Remembered) {
        let entry = Entry {
            since: Instant::now(),
            remembered,
        };
        if self
            .entries
            .insert(Key::new(fact, namespace, name), entry)
            .is_none()
        {
            self.held[fact as usize] += 1;
        }
    }

    /// The live memory of `fact` about `namespace/name`.
    fn recall(&self, fact: Fact, namespace: &str, name: &str) -> Option<&Entry> {
        if self.held[fact as usize] == 0 {
            return None;
        }
        self.entries
            .get(&Key::new(fact, namespace, name))
            .filter(|entry| entry.live(fact, Instant::now()))
    }

    /// Drops the memory of `fact` about `namespace/name`; returns it if it was live.
    fn forget(&mut self, fact: Fact, namespace: &str, name: &str) -> Option<Entry> {
        if self.held[fact as usize] == 0 {
            return None;
        }
        let entry = self.entries.remove(&Key::new(fact, namespace, name))?;
        self.held[fact as usize] -= 1;
        self.release_if_empty();
        entry.live(fact, Instant::now()).then_some(entry)
    }

    /// Restarts the lifetime of `fact` about `namespace/name`, if it is remembered.
    fn renew(&mut self, fact: Fact, namespace: &str, name: &str) {
        if self.held[fact as usize] == 0 {
            return;
        }
        if let Some(entry) = self.entries.get_mut(&Key::new(fact, namespace, name)) {
            entry.since = Instant::now();
        }
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
    memory.forget(Fact::Applying, namespace, name);
    if !deleted || !policy.labels().is_some_and(claims_management) {
        return;
    }
    if memory.forget(Fact::Deleting, namespace, name).is_none() {
        memory.registering();
        memory.remember(Fact::DeletedByOthers, namespace, name, Remembered::Fact);
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
        let caught_up = memory
            .recall(Fact::StatusWritten, "", &uid)
            .is_some_and(|entry| {
                matches!(&entry.remembered, Remembered::Status { resource_version, .. }
                if self.resource_version().as_deref() == Some(resource_version.as_str()))
            });
        if deleted || caught_up {
            memory.forget(Fact::StatusWritten, "", &uid);
        }
    }
}

impl Watched for ShownReport {
    fn shown(&self, memory: &mut Memory, _deleted: bool) {
        memory.forget(Fact::ReportWritten, &self.namespace, &self.name);
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
        memory.remember(Fact::Applying, namespace, name, Remembered::Fact);
        memory.remember(Fact::ApplyInFlight, namespace, name, Remembered::Fact);
    }

    /// The apply of `namespace/name` was answered: unless the watch has shown it already, it
    /// has [`lifetime::APPLY`] from now to show it (a write that was long in flight, handed
    /// over by its reconcile to the baseline's writer, is not forgotten meanwhile).
    pub fn applied(&self, namespace: &str, name: &str) {
        let mut memory = self.memory();
        memory.forget(Fact::ApplyInFlight, namespace, name);
        memory.renew(Fact::Applying, namespace, name);
    }

    /// The apply of `namespace/name` failed: nothing for the watch to show (or nothing known),
    /// and the next plan may write it.
    pub fn apply_failed(&self, namespace: &str, name: &str) {
        let mut memory = self.memory();
        memory.forget(Fact::Applying, namespace, name);
        memory.forget(Fact::ApplyInFlight, namespace, name);
    }

    /// This term re-created `namespace/name` after someone else deleted it: that deletion is
    /// repaired.
    pub fn recreated(&self, namespace: &str, name: &str) {
        self.memory().forget(Fact::DeletedByOthers, namespace, name);
    }

    /// This term is about to delete `namespace/name` itself.
    pub fn deleting(&self, namespace: &str, name: &str) {
        let mut memory = self.memory();
        memory.registering();
        memory.remember(Fact::Deleting, namespace, name, Remembered::Fact);
    }

    /// A request of the apply of `sent` that did not give the answer runs on and may land
    /// late: until [`UnseenWrites::late_apply_ended`], no other object is written in its
    /// place, so that it never lands over a newer one (to be read as drift).
    pub fn late_apply(&self, sent: &NetworkPolicy) {
        let (Some(namespace), Some(name)) = (&sent.metadata.namespace, &sent.metadata.name) else {
            return;
        };
        let mut memory = self.memory();
        memory.registering();
        let sent = Remembered::Policy(Box::new(sent.clone()));
        memory.remember(Fact::LateApply, namespace, name, sent);
    }

    /// Nothing of the late request of `namespace/name` can land any more.
    pub fn late_apply_ended(&self, namespace: &str, name: &str) {
        self.memory().forget(Fact::LateApply, namespace, name);
    }

    /// Whether a request that may still land carries another object than `planned`.
    pub fn late_apply_differs(&self, planned: &NetworkPolicy) -> bool {
        let (Some(namespace), Some(name)) = (&planned.metadata.namespace, &planned.metadata.name)
        else {
            return false;
        };
        matches!(
            self.memory().recall(Fact::LateApply, namespace, name),
            Some(Entry { remembered: Remembered::Policy(sent), .. }) if **sent != *planned
        )
    }

    /// Whether the watch showed someone else delete `namespace/name` (and this term has not
    /// re-created it since).
    pub fn deleted_by_others(&self, namespace: &str, name: &str) -> bool {
        self.memory()
            .recall(Fact::DeletedByOthers, namespace, name)
            .is_some()
    }

    /// The applies still to be shown by the watch, now. A reconcile takes it before it reads
    /// the cache: an apply not in the snapshot is in what it reads.
    pub fn snapshot(&self) -> PendingWrites {
        let memory = self.memory();
        if memory.held[Fact::Applying as usize] + memory.held[Fact::ApplyInFlight as usize] == 0 {
            return PendingWrites::default();
        }
        let now = Instant::now();
        PendingWrites(
            memory
                .entries
                .iter()
                .filter(|(key, entry)| {
                    matches!(key.fact, Fact::Applying | Fact::ApplyInFlight)
                        && entry.live(key.fact, now)
                })
                .map(|(key, _)| (key.namespace.to_string(), key.name.to_string()))
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
        let written = match memory.recall(Fact::StatusWritten, "", &uid) {
            Some(Entry {
                remembered:
                    Remembered::Status {
                        resource_version,
                        status,
                    },
                ..
            }) if cached.resource_version().as_deref() != Some(resource_version.as_str()) => {
                return status.clone();
            }
            written => written.is_some(),
        };
        if written {
            memory.forget(Fact::StatusWritten, "", &uid);
        }
        cached.status.clone()
    }

    /// `written` is what the API server answered to a status write for `baseline`.
    pub fn status_written(&self, baseline: &NamespaceBaseline, written: NamespaceBaseline) {
        let (Some(uid), Some(resource_version)) = (baseline.uid(), written.resource_version())
        else {
            return;
        };
        let mut memory = self.memory();
        memory.registering();
        let status = Remembered::Status {
            resource_version,
            status: written.status,
        };
        memory.remember(Fact::StatusWritten, "", &uid, status);
    }

    // --- Reports ---

    /// This term applied `report` (as the cache would keep it) as `namespace/name`, or
    /// deleted it (`None`).
    pub fn report_written(&self, namespace: &str, name: &str, report: Option<KnownReport>) {
        let mut memory = self.memory();
        memory.registering();
        memory.remember(
            Fact::ReportWritten,
            namespace,
            name,
            Remembered::Report(report),
        );
    }

    /// What this term last wrote to the report `namespace/name` and the watch has not shown
    /// yet: `Some(None)` a deletion, `None` nothing unseen (the cache knows).
    pub fn report(&self, namespace: &str, name: &str) -> Option<Option<KnownReport>> {
        match self.memory().recall(Fact::ReportWritten, namespace, name) {
            Some(Entry {
                remembered: Remembered::Report(report),
                ..
            }) => Some(report.clone()),
            _ => None,
        }
    }

    /// The reports' CRDs came or went: nothing written before is compared with.
    pub fn forget_reports(&self) {
        let mut memory = self.memory();
        memory
            .entries
            .retain(|key, _| key.fact != Fact::ReportWritten);
        memory.held[Fact::ReportWritten as usize] = 0;
        memory.release_if_empty();
    }

    /// A baseline gone (its finalizer removed, or deleted without one).
    pub fn forget(&self, baseline: &NamespaceBaseline) {
        if let Some(uid) = baseline.uid() {
            self.memory().forget(Fact::StatusWritten, "", &uid);
        }
    }
}

/// The applies a reconcile leaves to their echoes ([`UnseenWrites::snapshot`]).
#[derive(Debug, Default)]
pub struct PendingWrites(HashSet<(String, String)>);

impl PendingWrites {
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        !self.0.is_empty() && self.0.contains(&(namespace.to_owned(), name.to_owned()))
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
        assert!(unseen.memory().entries.capacity() >= burst.len());
        for namespace in &burst[..burst.len() - 1] {
            unseen.observe(&apply(namespace, "deny"));
        }
        // One left: the table keeps its slots while it holds anything.
        assert!(unseen.memory().entries.capacity() >= burst.len());
        unseen.observe(&apply(&burst[burst.len() - 1], "deny"));
        assert_eq!(unseen.memory().entries.capacity(), 0);
        // A small table that empties keeps its few slots.
        unseen.applying("team-a", "deny");
        unseen.applied("team-a", "deny");
        unseen.observe(&apply("team-a", "deny"));
        assert!(unseen.memory().entries.capacity() > 0);
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
        let holds = |fact, namespace, name| {
            memory
                .entries
                .contains_key(&Key::new(fact, namespace, name))
        };
        assert!(!holds(Fact::StatusWritten, "", "uid-1"));
        assert!(!holds(Fact::DeletedByOthers, "team-a", "gone"));
        assert!(!holds(Fact::Deleting, "team-a", "pruned"));
        assert!(holds(Fact::Deleting, "team-b", "live"));
        assert_eq!(
            memory.entries.len(),
            1 + 2 * SWEEP_EVERY,
            "the live deletion, the applies (each in flight too)"
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
