//! Namespaces as the namespace cache holds them: name, labels and whether they are going
//! away, all a plan or a trigger reads. The watch is metadata-only; this drops what is left
//! of an `ObjectMeta` (a 340-byte struct of empty fields) and the store key's resourceVersion
//! and uid, about a third of a cached namespace.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;
use namespace_baseline_core::plan::NamespaceFacts;

use crate::caches::NamespaceMeta;

#[derive(Debug, Clone, PartialEq)]
pub struct CachedNamespace {
    name: String,
    labels: BTreeMap<String, String>,
    terminating: bool,
}

impl From<&NamespaceMeta> for CachedNamespace {
    fn from(namespace: &NamespaceMeta) -> Self {
        Self {
            name: NamespaceFacts::name(namespace).to_owned(),
            labels: namespace.labels().clone(),
            terminating: namespace.terminating(),
        }
    }
}

impl NamespaceFacts for CachedNamespace {
    fn name(&self) -> &str {
        &self.name
    }

    fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    fn terminating(&self) -> bool {
        self.terminating
    }
}

impl Lookup for CachedNamespace {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        "Namespace".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "namespaces".into()
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// The same event, for the cache.
pub fn cached_event(event: &watcher::Event<NamespaceMeta>) -> watcher::Event<CachedNamespace> {
    match event {
        watcher::Event::Apply(namespace) => watcher::Event::Apply(namespace.into()),
        watcher::Event::Delete(namespace) => watcher::Event::Delete(namespace.into()),
        watcher::Event::InitApply(namespace) => watcher::Event::InitApply(namespace.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caches::namespace_meta;
    use crate::fixtures::namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_cached_namespace_reads_as_the_watched_one() {
        let mut watched = namespace_meta(namespace("team-a", &[("baseline", "guarded")]));
        let cached = CachedNamespace::from(&watched);
        assert_eq!(NamespaceFacts::name(&cached), "team-a");
        assert_eq!(cached.labels(), watched.labels());
        assert!(!cached.terminating());
        watched.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(CachedNamespace::from(&watched).terminating());
    }
}
