//! NetworkPolicies as the policy cache holds them. The wall's objects of a baseline are
//! thousands of copies of two specs under one label set: each cached policy keeps its own
//! name and namespace, and shares its labels and spec with every cached policy that has equal
//! ones: as k8s-openapi structs each would hold a `BTreeMap` node of ~540 bytes per selector
//! and label set.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;
use namespace_baseline_core::facts::PolicyFacts;
use namespace_baseline_core::identity::claims_management;
use serde::Serialize;

/// One cached NetworkPolicy: what the planner and the holes report read.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedPolicy {
    name: Box<str>,
    namespace: Box<str>,
    labels: Option<Arc<BTreeMap<String, String>>>,
    spec: Option<Arc<NetworkPolicySpec>>,
}

impl PolicyFacts for CachedPolicy {
    fn name(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn namespace(&self) -> Option<&str> {
        Some(&self.namespace)
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.labels.as_deref()
    }

    fn spec(&self) -> Option<&NetworkPolicySpec> {
        self.spec.as_deref()
    }
}

/// The store's key. No resourceVersion or uid: the store does not need them, and they would
/// be two more strings per policy.
impl Lookup for CachedPolicy {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        "NetworkPolicy".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "networking.k8s.io".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "networkpolicies".into()
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.namespace))
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// Turns watched policies (already slimmed: [`slim_policy`]) into cached ones,
/// sharing equal label sets and specs.
#[derive(Default)]
pub struct PolicyCache {
    labels: Shared<BTreeMap<String, String>>,
    specs: Shared<NetworkPolicySpec>,
}

impl PolicyCache {
    pub fn cached(&self, policy: &NetworkPolicy) -> CachedPolicy {
        CachedPolicy {
            name: policy.metadata.name.as_deref().unwrap_or_default().into(),
            namespace: policy
                .metadata
                .namespace
                .as_deref()
                .unwrap_or_default()
                .into(),
            labels: policy
                .metadata
                .labels
                .as_ref()
                .map(|labels| self.labels.share(labels)),
            spec: policy.spec.as_ref().map(|spec| self.specs.share(spec)),
        }
    }

    /// The same event, for the cache.
    pub fn event(&self, event: &watcher::Event<NetworkPolicy>) -> watcher::Event<CachedPolicy> {
        match event {
            watcher::Event::Apply(policy) => watcher::Event::Apply(self.cached(policy)),
            watcher::Event::Delete(policy) => watcher::Event::Delete(self.cached(policy)),
            watcher::Event::InitApply(policy) => watcher::Event::InitApply(self.cached(policy)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
        }
    }
}

/// Values handed out once per distinct value, by the hash of their JSON. Holds them weakly:
/// a value no cached policy uses any more is dropped with its last user.
struct Shared<T> {
    inner: Mutex<SharedValues<T>>,
}

struct SharedValues<T> {
    by_hash: HashMap<u64, Weak<T>>,
    /// Values shared since dead entries were last swept.
    since_sweep: usize,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(SharedValues {
                by_hash: HashMap::new(),
                since_sweep: 0,
            }),
        }
    }
}

/// How many values are shared between two sweeps of the entries no policy uses any more.
const SWEEP_EVERY: usize = 4096;

impl<T: Serialize + PartialEq + Clone> Shared<T> {
    fn share(&self, value: &T) -> Arc<T> {
        let hash = json_hash(value);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = inner.by_hash.get(&hash).and_then(Weak::upgrade)
            && *existing == *value
        {
            return existing;
        }
        // New, or (rarely) another value with the same hash: this one takes the slot.
        let shared = Arc::new(value.clone());
        inner.by_hash.insert(hash, Arc::downgrade(&shared));
        inner.since_sweep += 1;
        if inner.since_sweep >= SWEEP_EVERY {
            inner.by_hash.retain(|_, value| value.strong_count() > 0);
            inner.since_sweep = 0;
        }
        shared
    }

    #[cfg(test)]
    fn entries(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_hash
            .len()
    }
}

fn json_hash(value: &impl Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    // Serializing k8s-openapi types cannot fail: they hold only JSON-representable data.
    serde_json::to_vec(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// What the policy cache keeps: identity, labels and spec, all the drift check and the holes
/// report compare.
/// Another policy keeps only what the holes report reads: its name and its rules (not its
/// labels, its pod selector nor the `except` lists of its ipBlocks).
pub fn slim_policy(policy: &mut NetworkPolicy) {
    let metadata = std::mem::take(&mut policy.metadata);
    let managed = metadata.labels.as_ref().is_some_and(claims_management);
    policy.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        labels: metadata.labels.filter(|_| managed),
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
    if !managed && let Some(spec) = policy.spec.as_mut() {
        spec.pod_selector = None;
        let peers = spec
            .ingress
            .iter_mut()
            .flatten()
            .flat_map(|rule| rule.from.iter_mut().flatten())
            .chain(
                spec.egress
                    .iter_mut()
                    .flatten()
                    .flat_map(|rule| rule.to.iter_mut().flatten()),
            );
        for peer in peers {
            if let Some(block) = peer.ip_block.as_mut() {
                block.except = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::stored_wall;
    use namespace_baseline_core::NamespaceBaselineSpec;
    use namespace_baseline_core::holes::holes;
    use serde_json::json;

    fn wall(namespace: &str) -> Vec<NetworkPolicy> {
        stored_wall(
            "guarded",
            namespace,
            &NamespaceBaselineSpec::new("baseline=guarded"),
        )
    }

    #[test]
    fn a_cached_policy_reads_as_the_watched_one() {
        let cache = PolicyCache::default();
        for policy in wall("team-a") {
            let cached = cache.cached(&policy);
            assert_eq!(PolicyFacts::name(&cached), policy.metadata.name.as_deref());
            assert_eq!(
                PolicyFacts::namespace(&cached),
                policy.metadata.namespace.as_deref()
            );
            assert_eq!(cached.labels(), policy.metadata.labels.as_ref());
            assert_eq!(cached.spec(), policy.spec.as_ref());
        }
    }

    #[test]
    fn equal_labels_and_specs_are_held_once() {
        let cache = PolicyCache::default();
        let a: Vec<CachedPolicy> = wall("team-a").iter().map(|p| cache.cached(p)).collect();
        let b: Vec<CachedPolicy> = wall("team-b").iter().map(|p| cache.cached(p)).collect();
        for (a, b) in a.iter().zip(&b) {
            assert!(Arc::ptr_eq(
                a.spec.as_ref().unwrap(),
                b.spec.as_ref().unwrap()
            ));
            assert!(Arc::ptr_eq(
                a.labels.as_ref().unwrap(),
                b.labels.as_ref().unwrap()
            ));
        }
        // The deny-all and the DNS door differ in spec, not in labels.
        assert!(!Arc::ptr_eq(
            a[0].spec.as_ref().unwrap(),
            a[1].spec.as_ref().unwrap()
        ));
        assert_eq!(cache.specs.entries(), 2);
    }

    #[test]
    fn a_drifted_spec_is_its_own_and_leaves_the_others_alone() {
        let cache = PolicyCache::default();
        let intact = cache.cached(&wall("team-a")[0]);
        let mut edited = wall("team-b")[0].clone();
        edited.spec.as_mut().unwrap().egress = Some(vec![Default::default()]);
        let drifted = cache.cached(&edited);
        assert_eq!(drifted.spec(), edited.spec.as_ref());
        assert_ne!(intact.spec(), drifted.spec());
        assert_eq!(intact.spec(), wall("team-a")[0].spec.as_ref());
    }

    #[test]
    fn a_value_no_policy_uses_is_dropped() {
        let cache = PolicyCache::default();
        let cached = cache.cached(&wall("team-a")[0]);
        let weak = Arc::downgrade(cached.spec.as_ref().unwrap());
        drop(cached);
        assert!(weak.upgrade().is_none());
        // And a later equal spec is shared anew.
        let again = cache.cached(&wall("team-b")[0]);
        assert_eq!(again.spec(), wall("team-b")[0].spec.as_ref());
    }

    /// The cache keeps of another policy only what the holes report reads: the report on the
    /// slimmed policy is the report on the whole one.
    #[test]
    fn another_policy_keeps_what_its_holes_need() {
        let full: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "team", "namespace": "a", "labels": {"team": "a"},
                         "annotations": {"big": "x".repeat(1000)}, "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"namespaceSelector": {}}]}, {"from": [{"podSelector": {"matchLabels": {"x": "y"}}}], "ports": [{"port": 80}]}],
                "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "192.168.0.0/16"]}}]}],
            },
        }))
        .unwrap();
        let mut slim = full.clone();
        slim_policy(&mut slim);
        assert_eq!(holes(&slim), holes(&full));
        assert_eq!(holes(&full).len(), 3);
        assert!(slim.metadata.labels.is_none() && slim.metadata.annotations.is_none());
        assert!(slim.metadata.managed_fields.is_none());
        assert!(slim.spec.as_ref().unwrap().pod_selector.is_none());
    }

    /// A managed policy keeps its labels and whole spec: the drift check compares them.
    #[test]
    fn a_managed_policy_keeps_its_labels_and_spec() {
        let spec = namespace_baseline_core::NamespaceBaselineSpec::new("a=b");
        let mut wall = namespace_baseline_core::wall::desired_wall("guarded", "team-a", &spec);
        let full = wall.remove(1);
        let mut slim = full.clone();
        slim_policy(&mut slim);
        assert_eq!(slim.spec, full.spec);
        assert_eq!(slim.metadata.labels, full.metadata.labels);
    }
}
