//! Namespaces as the namespace cache holds them: name, labels and whether they are going
//! away, all a plan or a trigger reads. The watch is metadata-only; this drops what is left
//! of an `ObjectMeta` (a 340-byte struct of empty fields), the store key's resourceVersion
//! and uid, and keeps the labels as one sorted slice instead of a `BTreeMap` (whose first
//! node takes about 540 bytes whatever it holds, for each of many namespaces).

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;
use namespace_baseline_core::facts::NamespaceFacts;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;

/// A namespace as the reconciler watches it: its metadata only (name, labels, deletion).
pub type NamespaceMeta = PartialObjectMeta<Namespace>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedNamespace {
    name: Box<str>,
    labels: Labels,
    /// Being deleted (read it as `NamespaceFacts::terminating`; the triggers read the field).
    pub(crate) terminating: bool,
}

/// A namespace's labels: pairs sorted by key, in one boxed slice.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    fn get(&self, key: &str) -> Option<&str> {
        let found = self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok()?;
        Some(&self.0[found].1)
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    /// Sorted, as a `BTreeMap` iterates.
    fn from(labels: &BTreeMap<String, String>) -> Self {
        Self(
            labels
                .iter()
                .map(|(key, value)| (key.as_str().into(), value.as_str().into()))
                .collect(),
        )
    }
}

impl From<&NamespaceMeta> for CachedNamespace {
    fn from(namespace: &NamespaceMeta) -> Self {
        Self {
            name: NamespaceFacts::name(namespace).into(),
            labels: namespace
                .metadata
                .labels
                .as_ref()
                .map(Labels::from)
                .unwrap_or(Labels(Box::default())),
            terminating: namespace.terminating(),
        }
    }
}

impl NamespaceFacts for CachedNamespace {
    fn name(&self) -> &str {
        &self.name
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
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

/// What `plan` and the tests keep of a namespace: name, labels and deletion timestamp, all a
/// plan reads (the watch itself feeds the compact [`CachedNamespace`]).
pub fn slim_namespace(namespace: &mut NamespaceMeta) {
    namespace.metadata = slim_namespace_metadata(std::mem::take(&mut namespace.metadata));
}

fn slim_namespace_metadata(metadata: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: metadata.name,
        labels: metadata.labels,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    }
}

/// A whole Namespace as the cache holds it (for `plan` and the tests, which read whole
/// Namespaces): its slimmed metadata.
pub fn namespace_meta(namespace: Namespace) -> NamespaceMeta {
    let mut meta: NamespaceMeta = PartialObjectMeta {
        types: Some(kube::core::TypeMeta {
            api_version: "meta.k8s.io/v1".to_owned(),
            kind: "PartialObjectMetadata".to_owned(),
        }),
        metadata: namespace.metadata,
        _phantom: std::marker::PhantomData,
    };
    slim_namespace(&mut meta);
    meta
}

#[cfg(test)]
mod tests {
    use super::namespace_meta;
    use super::*;
    use crate::fixtures::namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_cached_namespace_reads_as_the_watched_one() {
        let labels = [
            ("tier", "1"),
            ("baseline", "guarded"),
            ("a", ""),
            ("zone", "z"),
        ];
        let mut watched = namespace_meta(namespace("team-a", &labels));
        let cached = CachedNamespace::from(&watched);
        assert_eq!(NamespaceFacts::name(&cached), "team-a");
        for (key, value) in labels {
            assert_eq!(cached.label(key), Some(value), "{key}");
        }
        for absent in ["", "b", "baseline2", "t", "zzz"] {
            assert_eq!(cached.label(absent), None, "{absent}");
        }
        assert_eq!(
            CachedNamespace::from(&namespace_meta(namespace("team-b", &[]))).label("a"),
            None
        );
        assert!(!cached.terminating());
        watched.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(CachedNamespace::from(&watched).terminating());
    }
}
