//! A watch's cache, fed the watch's events, telling what each event changed in it: the one
//! place that knows how kube's reflector store takes a relist in.
//!
//! Why: kube's store (`reflector::store::Writer`) buffers the objects of a relist
//! (`InitApply`) and swaps them in only at `InitDone`, so a reconcile triggered by an
//! `InitApply` would read the store from before the watch's gap; and an object deleted while
//! the watch was down sends no event at all, so a wall deleted during a gap would stay open
//! until an unrelated trigger or the resync. Here a relist changes nothing until it is complete; at `InitDone`
//! the store before and after the swap are compared, and each object that appeared, changed
//! or went away is reported as the live event that would have told of it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;

/// A watch's store and its writer: the events go in through [`WatchedCache::apply`], the
/// reconciles read [`WatchedCache::store`].
pub struct WatchedCache<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    writer: Writer<K>,
}

/// Whether two versions of an object are the same as far as a watch's consumers care.
pub type Same<K> = fn(&K, &K) -> bool;

/// Compares whole objects (for the compact forms the caches keep, which carry no
/// resourceVersion: every field they keep is one a consumer reads).
pub fn same_content<K: PartialEq>(a: &K, b: &K) -> bool {
    a == b
}

/// Compares resourceVersions: any change of the object at all.
pub fn same_version<K: Lookup>(a: &K, b: &K) -> bool {
    let (a, b) = (a.resource_version(), b.resource_version());
    a.is_some() && a == b
}

impl<K> WatchedCache<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    pub fn new(writer: Writer<K>) -> Self {
        Self {
            store: writer.as_reader(),
            writer,
        }
    }

    /// The cache the reconciles read.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Applies `event` to the cache, then calls `changed(before, after)` for what it changed:
    /// `before` the object as the cache held it (`None`: new), `after` as it holds it now
    /// (`None`: gone). A live event is one change, whatever `same` says (its consumers decide
    /// what matters); a relist's objects change nothing until it is complete, and then each
    /// object that `same` tells from its version before, or that is new or gone, is one.
    pub fn apply(
        &mut self,
        event: &watcher::Event<K>,
        same: Same<K>,
        mut changed: impl FnMut(Option<&K>, Option<&K>),
    ) {
        match event {
            watcher::Event::Apply(object) => {
                let before = self.store.get(&object.to_object_ref(()));
                self.writer.apply_watcher_event(event);
                changed(before.as_deref(), Some(object));
            }
            watcher::Event::Delete(object) => {
                let before = self.store.get(&object.to_object_ref(()));
                self.writer.apply_watcher_event(event);
                changed(Some(before.as_deref().unwrap_or(object)), None);
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {
                self.writer.apply_watcher_event(event);
            }
            watcher::Event::InitDone => {
                let before = self.store.state();
                self.writer.apply_watcher_event(event);
                let after = self.store.state();
                relisted(&before, &after, same, changed);
            }
        }
    }
}

/// The changes between the cache before a relist and after it, as [`WatchedCache::apply`]
/// reports them.
fn relisted<K: Lookup>(
    before: &[Arc<K>],
    after: &[Arc<K>],
    same: Same<K>,
    mut changed: impl FnMut(Option<&K>, Option<&K>),
) {
    type Key<'a> = (Option<Cow<'a, str>>, Option<Cow<'a, str>>);
    fn key<K: Lookup>(object: &K) -> Key<'_> {
        (object.namespace(), object.name())
    }
    let mut gone: HashMap<Key<'_>, &K> = before
        .iter()
        .map(|object| (key(object.as_ref()), object.as_ref()))
        .collect();
    for object in after {
        match gone.remove(&key(object.as_ref())) {
            Some(old) if same(old, object) => {}
            old => changed(old, Some(object)),
        }
    }
    for old in gone.into_values() {
        changed(Some(old), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::ObjectRef;
    use serde_json::json;

    fn map(name: &str, version: &str, data: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "data": {"k": data},
        }))
        .unwrap()
    }

    type Seen = Vec<(Option<String>, Option<String>)>;

    fn describe(object: Option<&ConfigMap>) -> Option<String> {
        object.map(|o| {
            format!(
                "{}@{}",
                o.metadata.name.as_deref().unwrap_or_default(),
                o.metadata.resource_version.as_deref().unwrap_or_default()
            )
        })
    }

    fn feed(cache: &mut WatchedCache<ConfigMap>, event: watcher::Event<ConfigMap>) -> Seen {
        let mut seen = Seen::new();
        cache.apply(&event, same_version, |before, after| {
            seen.push((describe(before), describe(after)));
        });
        seen.sort();
        seen
    }

    fn some(text: &str) -> Option<String> {
        Some(text.to_owned())
    }

    #[test]
    fn a_relist_changes_nothing_until_done_then_reports_what_appeared_changed_or_went() {
        let (_, writer) = kube::runtime::reflector::store::<ConfigMap>();
        let mut cache = WatchedCache::new(writer);
        let store = cache.store();
        // The first list: everything is new, at its end.
        assert!(feed(&mut cache, watcher::Event::Init).is_empty());
        assert!(feed(&mut cache, watcher::Event::InitApply(map("a", "1", "x"))).is_empty());
        assert!(feed(&mut cache, watcher::Event::InitApply(map("b", "1", "x"))).is_empty());
        assert!(store.is_empty(), "nothing is in the cache before InitDone");
        assert_eq!(
            feed(&mut cache, watcher::Event::InitDone),
            [(None, some("a@1")), (None, some("b@1"))]
        );
        // Live events: one change each, read against the cache before it.
        assert_eq!(
            feed(&mut cache, watcher::Event::Apply(map("a", "2", "y"))),
            [(some("a@1"), some("a@2"))]
        );
        assert_eq!(
            feed(&mut cache, watcher::Event::Apply(map("c", "3", "x"))),
            [(None, some("c@3"))]
        );
        // A gap: "a" changed, "b" was deleted, "d" created, "c" untouched. The relist's
        // objects change nothing until it is done, and the cache still answers from before.
        assert!(feed(&mut cache, watcher::Event::Init).is_empty());
        for object in [map("a", "4", "z"), map("c", "3", "x"), map("d", "5", "x")] {
            assert!(feed(&mut cache, watcher::Event::InitApply(object)).is_empty());
        }
        assert!(store.get(&ObjectRef::new("b").within("ns")).is_some());
        assert!(store.get(&ObjectRef::new("d").within("ns")).is_none());
        assert_eq!(
            feed(&mut cache, watcher::Event::InitDone),
            [
                (None, some("d@5")),
                (some("a@2"), some("a@4")),
                (some("b@1"), None),
            ]
        );
        assert!(store.get(&ObjectRef::new("b").within("ns")).is_none());
        assert_eq!(
            feed(&mut cache, watcher::Event::Delete(map("d", "6", "x"))),
            [(some("d@5"), None)],
            "a deletion reports the object as the cache held it"
        );
    }

    #[test]
    fn objects_compare_by_content_or_by_version() {
        let (a, b) = (map("a", "1", "x"), map("a", "2", "x"));
        assert!(same_content(&a, &a.clone()));
        assert!(!same_content(&a, &map("a", "1", "y")));
        assert!(same_version(&a, &a.clone()));
        assert!(!same_version(&a, &b));
        let unversioned = ConfigMap::default();
        assert!(
            !same_version(&unversioned, &unversioned.clone()),
            "without a resourceVersion, nothing says they are the same"
        );
    }
}
