//! Which NamespaceBaselines a change of a Namespace or a NetworkPolicy concerns (the DNS
//! namespace's changes are checked against the doors: `reconcile/watches.rs`). A change is
//! what a watch's cache took in (`watched_cache.rs`): a live event, or an object a relist
//! showed new, changed or gone.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::{Lookup, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use namespace_baseline_core::facts::PolicyFacts;
use namespace_baseline_core::identity::{
    BASELINE_LABEL, baseline_label_value, claims_management, deny_all_policy_name, dns_policy_name,
};
use namespace_baseline_core::spec::NamespaceBaseline;

use crate::view::namespace_cache::NamespaceMeta;
use crate::view::namespace_cache::{CachedNamespace, cached_event};
use crate::view::scope::{Dirty, LiveNamespaces};
use crate::view::watched_cache::{WatchedCache, same_content};

/// A baseline to reconcile, as the triggers name it.
pub type Trigger = ObjectRef<NamespaceBaseline>;

/// The baselines the changes of one event concern, each named once, with the namespace each
/// change concerns marked for it (scope.rs).
pub struct Triggered<'a> {
    dirty: &'a Dirty,
    baselines: Vec<Trigger>,
}

impl<'a> Triggered<'a> {
    pub fn new(dirty: &'a Dirty) -> Self {
        Self {
            dirty,
            baselines: Vec::new(),
        }
    }

    /// `baselines` are concerned with `namespace`.
    pub fn add(&mut self, namespace: &str, baselines: Vec<Trigger>) {
        for baseline in baselines {
            self.dirty.namespace(&baseline.name, namespace);
            if !self.baselines.contains(&baseline) {
                self.baselines.push(baseline);
            }
        }
    }

    pub fn into_baselines(self) -> Vec<Trigger> {
        self.baselines
    }
}

/// The namespace watch's events, into the namespace cache and the baselines they concern
/// (each marked to look at that namespace: scope.rs). The triggers compare a namespace with
/// the cache's version before it took the change in.
pub struct NamespaceEvents {
    cache: WatchedCache<CachedNamespace>,
    dirty: Dirty,
    baselines: Store<NamespaceBaseline>,
    /// Told of each change, for the count of live namespaces.
    live: LiveNamespaces,
}

impl NamespaceEvents {
    pub fn new(
        writer: Writer<CachedNamespace>,
        dirty: Dirty,
        baselines: Store<NamespaceBaseline>,
        live: LiveNamespaces,
    ) -> Self {
        Self {
            cache: WatchedCache::new(writer),
            dirty,
            baselines,
            live,
        }
    }

    /// Applies `event` to the cache; returns the baselines its changes concern.
    pub fn observe(&mut self, event: &watcher::Event<NamespaceMeta>) -> Vec<Trigger> {
        let baselines = self.baselines.state();
        let mut triggered = Triggered::new(&self.dirty);
        self.cache
            .apply(&cached_event(event), same_content, |before, after| {
                self.live.changed(before, after);
                if let Some(name) = after.or(before).and_then(Lookup::name) {
                    triggered.add(&name, baselines_for_namespace(before, after, &baselines));
                }
            });
        triggered.into_baselines()
    }
}

/// The baselines a change of a namespace concerns: `before` as the cache held it (`None`:
/// new), `after` as it is now (`None`: deleted). A namespace that *leaves* a baseline
/// concerns that baseline too (its count changes; with `deletionPolicy: Delete` its wall
/// goes): so the labels it had count as well as the new ones. Matching the new labels plus
/// the baselines with policies in the namespace would miss a namespace leaving an `Audit`
/// baseline or one whose wall is not installed yet.
///
/// Events that change neither the labels nor the terminating state (status, annotations,
/// resyncs) trigger nothing; those of a terminating namespace (the last is its deletion)
/// always do.
pub fn baselines_for_namespace(
    before: Option<&CachedNamespace>,
    after: Option<&CachedNamespace>,
    baselines: &[Arc<NamespaceBaseline>],
) -> Vec<Trigger> {
    if after.is_some_and(|after| !after.terminating && before == Some(after)) {
        return Vec::new();
    }
    baselines
        .iter()
        .filter(|baseline| {
            let Ok(selector) = baseline.spec.validate() else {
                return false;
            };
            [before, after]
                .into_iter()
                .flatten()
                .any(|namespace| selector.covers(namespace))
        })
        .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
        .collect()
}

/// The baselines a NetworkPolicy (as watched, or as cached) concerns. A managed policy
/// belongs to its baseline: by its baseline label, or by its name when that label was
/// tampered with (the policy is then ours to repair). Any other policy may open a hole in
/// the walls of the baselines that cover its namespace (`namespace_of` reads it from the
/// namespace cache).
pub fn baselines_for_policy(
    policy: &impl PolicyFacts,
    baselines: &[Arc<NamespaceBaseline>],
    namespace_of: impl Fn(&str) -> Option<Arc<CachedNamespace>>,
) -> Vec<Trigger> {
    let labels = policy.labels();
    if !labels.is_some_and(claims_management) {
        let Some(namespace) = policy.namespace().and_then(&namespace_of) else {
            return Vec::new();
        };
        return baselines
            .iter()
            .filter(|baseline| {
                baseline
                    .spec
                    .validate()
                    .is_ok_and(|selector| selector.covers(namespace.as_ref()))
            })
            .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
            .collect();
    }
    let label = labels.and_then(|labels| labels.get(BASELINE_LABEL));
    let name = policy.name().unwrap_or_default();
    baselines
        .iter()
        .filter(|baseline| {
            let baseline_name = baseline.name_any();
            label == Some(&baseline_label_value(&baseline_name))
                || name == deny_all_policy_name(&baseline_name)
                || name == dns_policy_name(&baseline_name)
        })
        .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{baseline, namespace, stored_wall};
    use crate::view::namespace_cache::namespace_meta;
    use crate::view::scope::Scope;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kube::runtime::reflector;
    use namespace_baseline_core::NamespaceBaselineSpec;
    use std::collections::BTreeMap;

    fn no_namespaces(_: &str) -> Option<Arc<CachedNamespace>> {
        None
    }

    fn names(refs: Vec<ObjectRef<NamespaceBaseline>>) -> Vec<String> {
        let mut names: Vec<_> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    fn baselines() -> Vec<Arc<NamespaceBaseline>> {
        vec![
            Arc::new(baseline(
                "guarded",
                NamespaceBaselineSpec::new("baseline=guarded"),
            )),
            Arc::new(baseline("tiered", NamespaceBaselineSpec::new("tier"))),
            Arc::new(baseline("broken", NamespaceBaselineSpec::new("a!=b"))),
        ]
    }

    fn cached(name: &str, labels: &[(&str, &str)]) -> CachedNamespace {
        CachedNamespace::from(&namespace_meta(namespace(name, labels)))
    }

    fn terminating(name: &str, labels: &[(&str, &str)]) -> CachedNamespace {
        let mut ns = namespace(name, labels);
        ns.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        CachedNamespace::from(&namespace_meta(ns))
    }

    #[test]
    fn a_new_namespace_triggers_the_baselines_matching_it() {
        let ns = cached("team-a", &[("baseline", "guarded"), ("tier", "1")]);
        assert_eq!(
            names(baselines_for_namespace(None, Some(&ns), &baselines())),
            ["guarded", "tiered"]
        );
        let other = cached("other", &[("a", "c")]);
        assert!(baselines_for_namespace(None, Some(&other), &baselines()).is_empty());
    }

    #[test]
    fn a_namespace_leaving_a_baseline_triggers_it() {
        let before = cached("team-a", &[("baseline", "guarded")]);
        let left = cached("team-a", &[("baseline", "open")]);
        assert_eq!(
            names(baselines_for_namespace(
                Some(&before),
                Some(&left),
                &baselines()
            )),
            ["guarded"]
        );
        // ... and once it has left, it concerns that baseline no more.
        let moved = cached("team-a", &[("tier", "2")]);
        assert_eq!(
            names(baselines_for_namespace(
                Some(&left),
                Some(&moved),
                &baselines()
            )),
            ["tiered"]
        );
    }

    #[test]
    fn events_that_change_no_label_trigger_nothing() {
        let mut ns = namespace("team-a", &[("baseline", "guarded")]);
        let before = CachedNamespace::from(&namespace_meta(ns.clone()));
        ns.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
        let now = CachedNamespace::from(&namespace_meta(ns));
        assert!(baselines_for_namespace(Some(&before), Some(&now), &baselines()).is_empty());
    }

    #[test]
    fn every_event_of_a_namespace_going_away_triggers_its_baselines() {
        let before = cached("team-a", &[("baseline", "guarded")]);
        let going = terminating("team-a", &[("baseline", "guarded")]);
        assert_eq!(
            names(baselines_for_namespace(
                Some(&before),
                Some(&going),
                &baselines()
            )),
            ["guarded"]
        );
        // Its later events (the last is the deletion) are the same, and still trigger.
        assert_eq!(
            names(baselines_for_namespace(
                Some(&going),
                Some(&going),
                &baselines()
            )),
            ["guarded"]
        );
    }

    #[test]
    fn the_namespace_watch_compares_each_change_with_the_cache_before_it() {
        let dirty = Dirty::default();
        let resync = std::time::Duration::from_secs(300);
        assert_eq!(dirty.take("guarded", resync), Scope::All, "first pass");
        assert_eq!(dirty.take("tiered", resync), Scope::All, "first pass");
        let (cache, writer) = reflector::store();
        let live = LiveNamespaces::new(cache.clone());
        let mut events = NamespaceEvents::new(
            writer,
            dirty.clone(),
            crate::fixtures::store(baselines().iter().map(|b| (**b).clone()).collect()),
            live.clone(),
        );
        let meta = |name: &str, labels: &[(&str, &str)]| namespace_meta(namespace(name, labels));
        let mut observe = |event| names(events.observe(&event));

        // The first list triggers at its end, when the cache holds it.
        assert!(observe(watcher::Event::Init).is_empty());
        assert!(
            observe(watcher::Event::InitApply(meta(
                "team-a",
                &[("baseline", "guarded")]
            )))
            .is_empty()
        );
        assert_eq!(observe(watcher::Event::InitDone), ["guarded"]);
        assert_eq!(
            cache.get(&ObjectRef::new("team-a")).as_deref(),
            Some(&cached("team-a", &[("baseline", "guarded")])),
            "the cache holds the list"
        );
        // Leaving: only the labels the cache held say which baseline it left.
        assert_eq!(
            observe(watcher::Event::Apply(meta("team-a", &[("tier", "1")]))),
            ["guarded", "tiered"]
        );
        assert!(
            observe(watcher::Event::Apply(meta("team-a", &[("tier", "1")]))).is_empty(),
            "no change"
        );
        let one = |name: &str| Scope::Namespaces([name.to_owned()].into());
        assert_eq!(dirty.take("guarded", resync), one("team-a"));
        assert_eq!(dirty.take("tiered", resync), one("team-a"));
        // A watch gap: team-a deleted (no event), team-b created guarded. The relist
        // triggers nothing before its end, then both, each for its own namespace.
        assert_eq!(
            observe(watcher::Event::Apply(meta("team-c", &[("tier", "3")]))),
            ["tiered"]
        );
        assert_eq!(dirty.take("tiered", resync), one("team-c"));
        assert!(observe(watcher::Event::Init).is_empty());
        for relisted in [
            meta("team-b", &[("baseline", "guarded")]),
            meta("team-c", &[("tier", "3")]),
        ] {
            assert!(observe(watcher::Event::InitApply(relisted)).is_empty());
        }
        assert_eq!(observe(watcher::Event::InitDone), ["guarded", "tiered"]);
        assert_eq!(dirty.take("guarded", resync), one("team-b"));
        assert_eq!(
            dirty.take("tiered", resync),
            one("team-a"),
            "team-a left by deletion; team-c, unchanged, concerns nobody"
        );
        // Each change is counted among the live namespaces too.
        assert_eq!(live.count(), 2);
        let mut leaving = meta("team-b", &[("baseline", "guarded")]);
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(observe(watcher::Event::Apply(leaving)), ["guarded"]);
        assert_eq!(live.count(), 1, "team-b is being deleted");
    }

    #[test]
    fn a_policy_maps_to_its_baseline_by_label() {
        let policies = stored_wall(
            "guarded",
            "team-a",
            &NamespaceBaselineSpec::new("baseline=guarded"),
        );
        for policy in &policies {
            assert_eq!(
                names(baselines_for_policy(policy, &baselines(), no_namespaces)),
                ["guarded"]
            );
        }
    }

    #[test]
    fn a_policy_with_a_tampered_label_maps_by_name() {
        let mut policy = stored_wall(
            "guarded",
            "team-a",
            &NamespaceBaselineSpec::new("baseline=guarded"),
        )
        .remove(0);
        policy
            .labels_mut()
            .insert(BASELINE_LABEL.into(), "someone-else".into());
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines(), no_namespaces)),
            ["guarded"]
        );
    }

    #[test]
    fn a_long_baseline_name_maps_through_its_hashed_label() {
        let long = format!("{}-x", "a".repeat(80));
        let spec = NamespaceBaselineSpec::new("baseline=guarded");
        let baselines = vec![
            Arc::new(baseline(&long, spec.clone())),
            Arc::new(baseline(&format!("{}-y", "a".repeat(80)), spec.clone())),
        ];
        let mut policy = stored_wall(&long, "team-a", &spec).remove(0);
        policy.metadata.name = Some("renamed".into());
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines, no_namespaces)),
            [long]
        );
    }

    #[test]
    fn a_policy_of_a_deleted_baseline_maps_to_nothing() {
        let policy = stored_wall("gone", "team-a", &NamespaceBaselineSpec::new("x")).remove(0);
        assert!(baselines_for_policy(&policy, &baselines(), no_namespaces).is_empty());
    }

    #[test]
    fn another_policy_triggers_the_baselines_covering_its_namespace() {
        let policy: NetworkPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "team-open", "namespace": "team-a"},
            "spec": {"podSelector": {}, "ingress": [{}]},
        }))
        .unwrap();
        let labels = |name: &str| {
            (name == "team-a")
                .then(|| Arc::new(cached(name, &[("baseline", "guarded"), ("tier", "1")])))
        };
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines(), labels)),
            ["guarded", "tiered"]
        );
        let elsewhere = |name: &str| Some(Arc::new(cached(name, &[("x", "y")])));
        assert!(baselines_for_policy(&policy, &baselines(), elsewhere).is_empty());
        // An unknown namespace (not cached yet) concerns nobody.
        assert!(baselines_for_policy(&policy, &baselines(), no_namespaces).is_empty());
    }
}
