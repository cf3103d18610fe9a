//! Which namespaces a reconcile looks at. A watch event on one namespace or on one policy
//! concerns that namespace only: the reconcile it triggers plans and writes for it alone,
//! at a cost that does not grow with the cluster. A new or changed baseline, a resync, a
//! failed reconcile or an `Audit` baseline get the full pass over every namespace; a reconcile
//! asked for only to report (a status write answered, a probe verdict without a canary) looks
//! at none.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::view::namespace_cache::CachedNamespace;

/// The namespaces a reconcile of one baseline must look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespaces(BTreeSet<String>),
}

/// What the triggers marked, per baseline, since its last reconcile.
#[derive(Clone, Default)]
pub struct Dirty {
    inner: Arc<Mutex<DirtyState>>,
    /// Counts every namespace marked, so that a reconcile in flight sees at the cost of one
    /// atomic read that nothing was marked since it last looked ([`Dirty::marked_since`]).
    marks: Arc<AtomicU64>,
}

#[derive(Default)]
struct DirtyState {
    pending: HashMap<String, Pending>,
    /// When each baseline last had a full pass.
    full: HashMap<String, Instant>,
}

#[derive(Default)]
struct Pending {
    all: bool,
    namespaces: BTreeSet<String>,
    /// Asked for only to report: no namespace to look at, unless some are marked.
    report: bool,
}

impl Dirty {
    fn state(&self) -> MutexGuard<'_, DirtyState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next reconcile of `baseline` looks at every namespace.
    pub fn all(&self, baseline: &str) {
        self.state()
            .pending
            .entry(baseline.to_owned())
            .or_default()
            .all = true;
    }

    /// The next reconcile of `baseline` looks at `namespace` (at least).
    pub fn namespace(&self, baseline: &str, namespace: &str) {
        self.state()
            .pending
            .entry(baseline.to_owned())
            .or_default()
            .namespaces
            .insert(namespace.to_owned());
        self.marks.fetch_add(1, AtomicOrdering::Release);
    }

    /// The next reconcile of `baseline` is asked for only to report what it finds: it looks at
    /// the namespaces marked, if any, else at none.
    pub fn report(&self, baseline: &str) {
        self.state()
            .pending
            .entry(baseline.to_owned())
            .or_default()
            .report = true;
    }

    /// The namespaces marked for `baseline`'s next reconcile, when anything was marked since
    /// `seen` (which it then updates); `None` otherwise. They stay marked: a full pass in
    /// flight reads them to put a new namespace's wall ahead of its own writes
    /// (`reconcile/ahead.rs`), and the next reconcile still looks at them.
    pub fn marked_since(&self, baseline: &str, seen: &mut u64) -> Option<BTreeSet<String>> {
        let marks = self.marks.load(AtomicOrdering::Acquire);
        if marks == *seen {
            return None;
        }
        *seen = marks;
        let state = self.state();
        Some(
            state
                .pending
                .get(baseline)
                .map(|pending| pending.namespaces.clone())
                .unwrap_or_default(),
        )
    }

    /// What a reconcile of `baseline` starting now looks at: the namespaces marked (none when
    /// it was asked for only to report), or every namespace when so marked, when nothing is
    /// marked (a resync), or when the last full pass is older than `resync`.
    pub fn take(&self, baseline: &str, resync: Duration) -> Scope {
        let mut state = self.state();
        let pending = state.pending.remove(baseline).unwrap_or_default();
        let stale = state
            .full
            .get(baseline)
            .is_none_or(|at| at.elapsed() >= resync);
        if pending.all || (pending.namespaces.is_empty() && !pending.report) || stale {
            state.full.insert(baseline.to_owned(), Instant::now());
            Scope::All
        } else {
            Scope::Namespaces(pending.namespaces)
        }
    }

    /// A baseline gone: its marks and its last full pass with it.
    pub fn forget(&self, baseline: &str) {
        let mut state = self.state();
        state.pending.remove(baseline);
        state.full.remove(baseline);
    }

    /// A reconcile of `baseline` failed: its retry looks at everything again.
    pub fn failed(&self, baseline: &str) {
        let mut state = self.state();
        state.full.remove(baseline);
        state.pending.entry(baseline.to_owned()).or_default().all = true;
    }
}

/// The names of the cached NetworkPolicies by namespace, kept in step with the policy watch
/// (a relist replaces it at its end, as the reflector's store does), so that a scoped
/// reconcile reads one namespace's policies without scanning them all.
#[derive(Clone, Default)]
pub struct PolicyIndex {
    inner: Arc<RwLock<IndexState>>,
}

/// Names in a plain list per namespace: a namespace holds a few policies (the wall and the
/// team's own), and a set would take ~130 more bytes per namespace.
type ByNamespace = HashMap<Box<str>, Vec<Box<str>>>;

#[derive(Default)]
struct IndexState {
    by_namespace: ByNamespace,
    relisting: Option<ByNamespace>,
}

fn key<K: Lookup>(object: &K) -> Option<(Cow<'_, str>, Cow<'_, str>)> {
    Some((object.namespace()?, object.name()?))
}

fn insert(by_namespace: &mut ByNamespace, namespace: &str, name: &str) {
    match by_namespace.get_mut(namespace) {
        Some(names) if names.iter().any(|known| known.as_ref() == name) => {}
        Some(names) => names.push(name.into()),
        None => {
            by_namespace.insert(namespace.into(), vec![name.into()]);
        }
    }
}

impl PolicyIndex {
    /// The watch (of any namespaced kind) showed `event`.
    pub fn observe<K: Lookup>(&self, event: &watcher::Event<K>) {
        let mut state = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => state.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(policy) => {
                if let (Some(relisting), Some((namespace, name))) =
                    (state.relisting.as_mut(), key(policy))
                {
                    insert(relisting, &namespace, &name);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relisted) = state.relisting.take() {
                    state.by_namespace = relisted;
                }
            }
            watcher::Event::Apply(policy) => {
                if let Some((namespace, name)) = key(policy) {
                    insert(&mut state.by_namespace, &namespace, &name);
                }
            }
            watcher::Event::Delete(policy) => {
                if let Some((namespace, name)) = key(policy)
                    && let Some(names) = state.by_namespace.get_mut(namespace.as_ref())
                {
                    names.retain(|known| known.as_ref() != name);
                    if names.is_empty() {
                        state.by_namespace.remove(namespace.as_ref());
                    }
                }
            }
        }
    }

    /// The names of the policies in `namespace`.
    pub fn names_in(&self, namespace: &str) -> Vec<String> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_namespace
            .get(namespace)
            .map(|names| names.iter().map(|name| name.to_string()).collect())
            .unwrap_or_default()
    }
}

/// How many namespaces are live (in the cache and not terminating), counted without a scan:
/// the cache's size less the namespaces being deleted, which the namespace watch records here
/// as it takes each change in (a handful, held by name so that a change seen twice counts
/// once). A baseline's `namespacesLeftOut` is this count less the namespaces it matches
/// ([`MatchedNamespaces`]): counted over every namespace on each reconcile, it would make a
/// repair's cost grow with the cluster.
#[derive(Clone)]
pub struct LiveNamespaces {
    cache: Store<CachedNamespace>,
    terminating: Arc<Mutex<HashSet<Box<str>>>>,
}

impl LiveNamespaces {
    /// The live namespaces of `cache`: those it holds terminating now are read once (none at
    /// a process's start); the watch reports the changes after.
    pub fn new(cache: Store<CachedNamespace>) -> Self {
        let terminating = cache
            .state()
            .iter()
            .filter(|namespace| namespace.terminating)
            .filter_map(|namespace| namespace.name().map(|name| name.as_ref().into()))
            .collect();
        Self {
            cache,
            terminating: Arc::new(Mutex::new(terminating)),
        }
    }

    fn terminating(&self) -> MutexGuard<'_, HashSet<Box<str>>> {
        self.terminating
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache took in a change of a namespace: `before` as it held it (`None`: new),
    /// `after` as it holds it now (`None`: gone).
    pub fn changed(&self, before: Option<&CachedNamespace>, after: Option<&CachedNamespace>) {
        let Some(name) = after.or(before).and_then(Lookup::name) else {
            return;
        };
        if after.is_some_and(|after| after.terminating) {
            self.terminating().insert(name.as_ref().into());
        } else if before.is_some_and(|before| before.terminating) {
            self.terminating().remove(name.as_ref());
        }
    }

    /// The namespaces in the cache, less those being deleted.
    pub fn count(&self) -> u32 {
        let terminating = self.terminating().len();
        u32::try_from(self.cache.len().saturating_sub(terminating)).unwrap_or(u32::MAX)
    }
}

/// The namespaces each baseline's selector matches, as its last full pass and the scoped
/// reconciles since saw them: a scoped reconcile updates its own namespaces and reads the
/// status's count from here, without a scan of every namespace (which would dominate a
/// repair's cost in a large cluster).
#[derive(Clone, Default)]
pub struct MatchedNamespaces {
    by_baseline: Arc<Mutex<HashMap<String, HashSet<Box<str>>>>>,
}

impl MatchedNamespaces {
    fn sets(&self) -> MutexGuard<'_, HashMap<String, HashSet<Box<str>>>> {
        self.by_baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A full pass: `matched` are all the namespaces `baseline` matches. Returns their count.
    pub fn replace<'a>(&self, baseline: &str, matched: impl Iterator<Item = &'a str>) -> u32 {
        let matched: HashSet<Box<str>> = matched.map(Box::from).collect();
        let count = u32::try_from(matched.len()).unwrap_or(u32::MAX);
        self.sets().insert(baseline.to_owned(), matched);
        count
    }

    /// A scoped reconcile: of the namespaces of `scope`, `baseline` matches `matched` (those
    /// not named stopped matching, or are gone). Returns how many it matches in all, or
    /// `None` when no full pass of it was recorded (the caller counts them all).
    pub fn update<'a>(
        &self,
        baseline: &str,
        scope: &BTreeSet<String>,
        matched: impl Iterator<Item = &'a str>,
    ) -> Option<u32> {
        let mut sets = self.sets();
        let set = sets.get_mut(baseline)?;
        for namespace in scope {
            set.remove(namespace.as_str());
        }
        set.extend(matched.map(Box::from));
        Some(u32::try_from(set.len()).unwrap_or(u32::MAX))
    }

    /// A baseline gone.
    pub fn forget(&self, baseline: &str) {
        self.sets().remove(baseline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use serde_json::json;

    fn policy(namespace: &str, name: &str) -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}})).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_in_flight_reads_what_was_marked_since_it_last_looked() {
        let dirty = Dirty::default();
        let mut seen = 0;
        assert_eq!(
            dirty.marked_since("guarded", &mut seen),
            None,
            "nothing marked"
        );
        dirty.namespace("other", "team-c");
        assert_eq!(
            dirty.marked_since("guarded", &mut seen),
            Some(BTreeSet::new()),
            "marked for another baseline"
        );
        dirty.namespace("guarded", "team-a");
        assert_eq!(
            dirty.marked_since("guarded", &mut seen),
            Some(BTreeSet::from(["team-a".to_owned()]))
        );
        assert_eq!(
            dirty.marked_since("guarded", &mut seen),
            None,
            "seen already"
        );
        assert_eq!(
            dirty.take("guarded", Duration::from_secs(300)),
            Scope::All,
            "the first pass is full"
        );
        dirty.namespace("guarded", "team-b");
        assert_eq!(
            dirty.marked_since("guarded", &mut seen),
            Some(BTreeSet::from(["team-b".to_owned()])),
            "still marked for the next reconcile, which takes them"
        );
        assert_eq!(
            dirty.take("guarded", Duration::from_secs(300)),
            Scope::Namespaces(BTreeSet::from(["team-b".to_owned()]))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn marked_namespaces_are_the_scope_until_a_full_pass_is_due() {
        let dirty = Dirty::default();
        let resync = Duration::from_secs(300);
        assert_eq!(
            dirty.take("guarded", resync),
            Scope::All,
            "the first pass is full"
        );
        dirty.namespace("guarded", "team-a");
        dirty.namespace("guarded", "team-b");
        dirty.namespace("other", "team-c");
        assert_eq!(
            dirty.take("guarded", resync),
            Scope::Namespaces(BTreeSet::from(["team-a".to_owned(), "team-b".to_owned()]))
        );
        assert_eq!(
            dirty.take("guarded", resync),
            Scope::All,
            "nothing marked: a resync"
        );
        dirty.namespace("guarded", "team-a");
        dirty.all("guarded");
        assert_eq!(
            dirty.take("guarded", resync),
            Scope::All,
            "a baseline change wins"
        );
        tokio::time::advance(resync).await;
        dirty.namespace("guarded", "team-a");
        assert_eq!(
            dirty.take("guarded", resync),
            Scope::All,
            "the last full pass is stale"
        );
        dirty.namespace("guarded", "team-a");
        dirty.failed("guarded");
        assert_eq!(
            dirty.take("guarded", resync),
            Scope::All,
            "a failure retries everything"
        );
    }

    #[test]
    fn the_index_follows_the_watch_and_its_relists() {
        let index = PolicyIndex::default();
        index.observe(&watcher::Event::<NetworkPolicy>::Init);
        index.observe(&watcher::Event::InitApply(policy("a", "p1")));
        index.observe(&watcher::Event::InitApply(policy("a", "p2")));
        assert!(
            index.names_in("a").is_empty(),
            "not before the list is complete"
        );
        index.observe(&watcher::Event::<NetworkPolicy>::InitDone);
        let mut names = index.names_in("a");
        names.sort();
        assert_eq!(names, ["p1", "p2"]);
        index.observe(&watcher::Event::Apply(policy("b", "p3")));
        index.observe(&watcher::Event::Apply(policy("b", "p3")));
        index.observe(&watcher::Event::Delete(policy("a", "p1")));
        assert_eq!(index.names_in("a"), ["p2"]);
        assert_eq!(index.names_in("b"), ["p3"]);
        // A relist replaces everything at its end (p2 and p3 are gone).
        index.observe(&watcher::Event::<NetworkPolicy>::Init);
        index.observe(&watcher::Event::InitApply(policy("c", "p4")));
        assert_eq!(index.names_in("a"), ["p2"]);
        index.observe(&watcher::Event::<NetworkPolicy>::InitDone);
        assert!(index.names_in("a").is_empty() && index.names_in("b").is_empty());
        assert_eq!(index.names_in("c"), ["p4"]);
    }
    fn scope(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn live_namespaces_are_counted_from_the_cache_and_the_changes_the_watch_reports() {
        use crate::fixtures::namespace;
        use crate::view::namespace_cache::namespace_meta;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use k8s_openapi::jiff::Timestamp;
        use kube::runtime::reflector::store::Writer;

        let cached = |name: &str, terminating: bool| {
            let mut meta = namespace_meta(namespace(name, &[]));
            if terminating {
                meta.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            }
            CachedNamespace::from(&meta)
        };
        let mut writer: Writer<CachedNamespace> = Writer::default();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(cached("a", false)),
            watcher::Event::InitApply(cached("b", false)),
            watcher::Event::InitApply(cached("gone", true)),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        let live = LiveNamespaces::new(writer.as_reader());
        assert_eq!(live.count(), 2, "the one being deleted is not live");
        // The watch takes each change in, then reports it.
        let mut change = |before: Option<CachedNamespace>, after: Option<CachedNamespace>| {
            let event = match (&before, &after) {
                (_, Some(after)) => watcher::Event::Apply(after.clone()),
                (Some(before), None) => watcher::Event::Delete(before.clone()),
                (None, None) => unreachable!(),
            };
            writer.apply_watcher_event(&event);
            live.changed(before.as_ref(), after.as_ref());
            live.count()
        };
        assert_eq!(change(None, Some(cached("c", false))), 3, "created");
        assert_eq!(
            change(Some(cached("b", false)), Some(cached("b", true))),
            2,
            "b is being deleted"
        );
        assert_eq!(
            change(Some(cached("b", true)), Some(cached("b", true))),
            2,
            "the same change seen twice counts once"
        );
        assert_eq!(change(Some(cached("b", true)), None), 2, "b is gone");
        assert_eq!(change(Some(cached("gone", true)), None), 2);
        assert_eq!(change(Some(cached("a", false)), None), 1, "deleted at once");
        assert!(live.terminating().is_empty(), "nothing left to forget");
    }

    #[test]
    fn a_scoped_count_starts_from_the_last_full_pass() {
        let matched = MatchedNamespaces::default();
        assert_eq!(matched.update("b", &scope(&["a"]), ["a"].into_iter()), None);
        assert_eq!(matched.replace("b", ["a", "b", "c"].into_iter()), 3);
        // "b" stopped matching, "d" started: the others stand.
        assert_eq!(
            matched.update("b", &scope(&["b", "d"]), ["d"].into_iter()),
            Some(3)
        );
        // A namespace seen again changes nothing; one gone is no longer counted.
        assert_eq!(
            matched.update("b", &scope(&["a"]), ["a"].into_iter()),
            Some(3)
        );
        assert_eq!(matched.update("b", &scope(&["c"]), [].into_iter()), Some(2));
        // Another baseline has its own set; a forgotten one needs a full pass again.
        assert_eq!(matched.replace("other", ["x"].into_iter()), 1);
        matched.forget("b");
        assert_eq!(matched.update("b", &scope(&["a"]), ["a"].into_iter()), None);
        assert_eq!(
            matched.update("other", &scope(&["y"]), ["y"].into_iter()),
            Some(2)
        );
    }
}
