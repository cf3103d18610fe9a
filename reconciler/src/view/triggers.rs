//! Which NamespaceBaselines a Namespace or NetworkPolicy event concerns.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use namespace_baseline_core::identity::{
    BASELINE_LABEL, baseline_label_value, claims_management, deny_all_policy_name, dns_policy_name,
};
use namespace_baseline_core::plan::NamespaceFacts;
use namespace_baseline_core::spec::NamespaceBaseline;

use crate::view::namespace_cache::NamespaceMeta;
use crate::view::namespace_cache::{CachedNamespace, cached_event};
use crate::view::scope::Dirty;

/// The namespace watch's events, into the namespace cache and the baselines they concern
/// (each marked to look at that namespace: scope.rs). The triggers compare an event with the
/// namespace as the cache held it, so each event is read against the cache before the cache
/// applies it.
pub struct NamespaceEvents {
    cache: Store<CachedNamespace>,
    writer: Writer<CachedNamespace>,
    dirty: Dirty,
    baselines: Store<NamespaceBaseline>,
}

impl NamespaceEvents {
    pub fn new(
        (cache, writer): (Store<CachedNamespace>, Writer<CachedNamespace>),
        dirty: Dirty,
        baselines: Store<NamespaceBaseline>,
    ) -> Self {
        Self {
            cache,
            writer,
            dirty,
            baselines,
        }
    }

    /// Applies `event` to the cache; returns the baselines it concerns.
    pub fn observe(
        &mut self,
        event: &watcher::Event<NamespaceMeta>,
    ) -> Vec<ObjectRef<NamespaceBaseline>> {
        let event = cached_event(event);
        let triggered = match &event {
            watcher::Event::Apply(namespace)
            | watcher::Event::InitApply(namespace)
            | watcher::Event::Delete(namespace) => {
                let before = self.cache.get(&ObjectRef::from_obj(namespace));
                let triggered =
                    baselines_for_namespace(before.as_deref(), namespace, &self.baselines.state());
                for baseline in &triggered {
                    self.dirty.namespace(&baseline.name, namespace.name());
                }
                triggered
            }
            watcher::Event::Init | watcher::Event::InitDone => Vec::new(),
        };
        self.writer.apply_watcher_event(&event);
        triggered
    }
}

/// The baselines an event on `namespace` concerns, `cached` being the namespace as the cache
/// held it before the event. A watch event carries only the new object, but a namespace that
/// *leaves* a baseline concerns that baseline too (its count changes; with
/// `deletionPolicy: Delete` its wall goes): so the labels it had count as well as the new
/// ones. Matching the new labels plus the baselines with policies in the namespace would miss
/// a namespace leaving an `Audit` baseline or one whose wall is not installed yet.
///
/// Events that change neither the labels nor the terminating state (status, annotations,
/// resyncs) trigger nothing; those of a terminating namespace (the last is its deletion)
/// always do.
pub fn baselines_for_namespace(
    cached: Option<&CachedNamespace>,
    namespace: &CachedNamespace,
    baselines: &[Arc<NamespaceBaseline>],
) -> Vec<ObjectRef<NamespaceBaseline>> {
    if !namespace.terminating() && cached == Some(namespace) {
        return Vec::new();
    }
    baselines
        .iter()
        .filter(|baseline| {
            let Ok(selector) = baseline.spec.validate() else {
                return false;
            };
            selector.selects(namespace) || cached.is_some_and(|cached| selector.selects(cached))
        })
        .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
        .collect()
}

/// The baselines a NetworkPolicy event concerns. A managed policy belongs to its baseline:
/// by its baseline label, or by its name when that label was tampered with (the policy is
/// then ours to repair). Any other policy may open a hole in the walls of the baselines that
/// cover its namespace (`namespace_of` reads it from the namespace cache).
pub fn baselines_for_policy<N: NamespaceFacts>(
    policy: &NetworkPolicy,
    baselines: &[Arc<NamespaceBaseline>],
    namespace_of: impl Fn(&str) -> Option<N>,
) -> Vec<ObjectRef<NamespaceBaseline>> {
    if !claims_management(policy.labels()) {
        let Some(namespace) = policy.metadata.namespace.as_deref().and_then(&namespace_of) else {
            return Vec::new();
        };
        return baselines
            .iter()
            .filter(|baseline| {
                baseline
                    .spec
                    .validate()
                    .is_ok_and(|selector| selector.selects(&namespace))
            })
            .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
            .collect();
    }
    let label = policy.labels().get(BASELINE_LABEL);
    let name = policy.name_any();
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

/// The baselines whose DNS door is checked against the DNS namespace's objects: those with
/// a door whose Service is in `namespace`.
pub fn baselines_for_dns(
    namespace: &str,
    baselines: &[Arc<NamespaceBaseline>],
) -> Vec<ObjectRef<NamespaceBaseline>> {
    baselines
        .iter()
        .filter(|baseline| {
            baseline.spec.allow_dns && baseline.spec.dns_target().service_ref().0 == namespace
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kube::runtime::reflector;
    use namespace_baseline_core::NamespaceBaselineSpec;
    use std::collections::BTreeMap;

    fn no_namespaces(_: &str) -> Option<CachedNamespace> {
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
            names(baselines_for_namespace(None, &ns, &baselines())),
            ["guarded", "tiered"]
        );
        let other = cached("other", &[("a", "c")]);
        assert!(baselines_for_namespace(None, &other, &baselines()).is_empty());
    }

    #[test]
    fn a_namespace_leaving_a_baseline_triggers_it() {
        let before = cached("team-a", &[("baseline", "guarded")]);
        let left = cached("team-a", &[("baseline", "open")]);
        assert_eq!(
            names(baselines_for_namespace(Some(&before), &left, &baselines())),
            ["guarded"]
        );
        // ... and once it has left, it concerns that baseline no more.
        let moved = cached("team-a", &[("tier", "2")]);
        assert_eq!(
            names(baselines_for_namespace(Some(&left), &moved, &baselines())),
            ["tiered"]
        );
    }

    #[test]
    fn events_that_change_no_label_trigger_nothing() {
        let mut ns = namespace("team-a", &[("baseline", "guarded")]);
        let before = CachedNamespace::from(&namespace_meta(ns.clone()));
        ns.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
        let now = CachedNamespace::from(&namespace_meta(ns));
        assert!(baselines_for_namespace(Some(&before), &now, &baselines()).is_empty());
    }

    #[test]
    fn every_event_of_a_namespace_going_away_triggers_its_baselines() {
        let before = cached("team-a", &[("baseline", "guarded")]);
        let going = terminating("team-a", &[("baseline", "guarded")]);
        assert_eq!(
            names(baselines_for_namespace(Some(&before), &going, &baselines())),
            ["guarded"]
        );
        // Its later events (the last is the deletion) are the same, and still trigger.
        assert_eq!(
            names(baselines_for_namespace(Some(&going), &going, &baselines())),
            ["guarded"]
        );
    }

    #[test]
    fn the_namespace_watch_compares_each_event_with_the_cache_before_applying_it() {
        let dirty = Dirty::default();
        let resync = std::time::Duration::from_secs(300);
        assert_eq!(dirty.take("guarded", resync), Scope::All, "first pass");
        assert_eq!(dirty.take("tiered", resync), Scope::All, "first pass");
        let (cache, writer) = reflector::store();
        let mut events = NamespaceEvents::new(
            (cache.clone(), writer),
            dirty.clone(),
            crate::fixtures::store(baselines().iter().map(|b| (**b).clone()).collect()),
        );
        let meta = |labels: &[(&str, &str)]| namespace_meta(namespace("team-a", labels));
        let mut observe = |event| names(events.observe(&event));

        assert!(observe(watcher::Event::Init).is_empty());
        assert_eq!(
            observe(watcher::Event::InitApply(meta(&[("baseline", "guarded")]))),
            ["guarded"]
        );
        assert!(observe(watcher::Event::InitDone).is_empty());
        assert_eq!(
            cache
                .get(&ObjectRef::new("team-a"))
                .and_then(|ns| ns.label("baseline").map(str::to_owned)),
            Some("guarded".to_owned()),
            "the cache holds the event"
        );
        // Leaving: only the labels the cache held say which baseline it left.
        assert_eq!(
            observe(watcher::Event::Apply(meta(&[("tier", "1")]))),
            ["guarded", "tiered"]
        );
        assert!(
            observe(watcher::Event::Apply(meta(&[("tier", "1")]))).is_empty(),
            "no change"
        );
        let one = |name: &str| Scope::Namespaces([name.to_owned()].into());
        assert_eq!(dirty.take("guarded", resync), one("team-a"));
        assert_eq!(dirty.take("tiered", resync), one("team-a"));
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
            (name == "team-a").then(|| cached(name, &[("baseline", "guarded"), ("tier", "1")]))
        };
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines(), labels)),
            ["guarded", "tiered"]
        );
        let elsewhere = |name: &str| Some(cached(name, &[("x", "y")]));
        assert!(baselines_for_policy(&policy, &baselines(), elsewhere).is_empty());
        // An unknown namespace (not cached yet) concerns nobody.
        assert!(baselines_for_policy(&policy, &baselines(), no_namespaces).is_empty());
    }

    #[test]
    fn dns_objects_trigger_the_baselines_whose_door_they_serve() {
        let mut openshift = NamespaceBaselineSpec::new("os");
        openshift.dns = Some(
            serde_json::from_value(serde_json::json!({"service": "openshift-dns/dns-default"}))
                .unwrap(),
        );
        let mut no_door = NamespaceBaselineSpec::new("closed");
        no_door.allow_dns = false;
        let all = vec![
            Arc::new(baseline(
                "guarded",
                NamespaceBaselineSpec::new("baseline=guarded"),
            )),
            Arc::new(baseline("openshift", openshift)),
            Arc::new(baseline("closed", no_door)),
        ];
        assert_eq!(names(baselines_for_dns("kube-system", &all)), ["guarded"]);
        assert_eq!(
            names(baselines_for_dns("openshift-dns", &all)),
            ["openshift"]
        );
        assert!(baselines_for_dns("default", &all).is_empty());
    }
}
