//! What the cache keeps of each of our reports, and what this term remembers of a report it
//! wrote: all the reconciler ever reads of a stored report, and nothing else. A reconcile asks
//! two things of it: whose report it is (its baseline label, to find a baseline's reports) and
//! whether it says what the reconcile would write (one fingerprint of everything of it the
//! reconciler owns). The watch turns each Report into this as it arrives (issue 38: at 5,000
//! namespaces the slimmed Reports, metadata and scope kept, cost 12.5 MiB of the reconciler's
//! 38.3).

use std::borrow::Cow;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;
use namespace_baseline_core::identity::{BASELINE_LABEL, MANAGED_BY_LABEL};

use super::object::{GROUP, KIND, PLURAL, Report, VERSION};

/// One of our reports, as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownReport {
    name: Box<str>,
    namespace: Box<str>,
    /// Its `hedronite.io/baseline` label: whose report it is.
    baseline: Option<Box<str>>,
    /// [`fingerprint`] of it as stored.
    fingerprint: u64,
}

impl From<&Report> for KnownReport {
    fn from(report: &Report) -> Self {
        let metadata = &report.metadata;
        Self {
            name: metadata.name.as_deref().unwrap_or_default().into(),
            namespace: metadata.namespace.as_deref().unwrap_or_default().into(),
            baseline: metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(BASELINE_LABEL))
                .map(|value| value.as_str().into()),
            fingerprint: fingerprint(report),
        }
    }
}

impl KnownReport {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The value of its baseline label, if it has one.
    pub fn baseline(&self) -> Option<&str> {
        self.baseline.as_deref()
    }

    /// Whether it says what `desired` (the report a reconcile would write) says, in every
    /// field the reconciler owns; labels others added do not count.
    pub fn says(&self, desired: &Report) -> bool {
        self.fingerprint == fingerprint(desired)
    }
}

/// A digest of everything of a report the reconciler owns, as sent: the values of its own
/// labels (present or not), the scope, the source, the results and the summary. Equal for
/// equal content within a process (SipHash with fixed keys, over the serialized JSON);
/// labels others put on the report, its annotations and the server's fields are left out.
fn fingerprint(report: &Report) -> u64 {
    let labels = report.metadata.labels.as_ref();
    let ours = [MANAGED_BY_LABEL, BASELINE_LABEL].map(|key| {
        labels
            .and_then(|labels| labels.get(key))
            .map(String::as_str)
    });
    let mut hasher = DefaultHasher::new();
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_vec(&(
        ours,
        &report.scope,
        &report.source,
        &report.results,
        &report.summary,
    ))
    .unwrap_or_default()
    .hash(&mut hasher);
    hasher.finish()
}

impl Lookup for KnownReport {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.namespace))
    }

    /// None: the store's key is the name and namespace alone (a resourceVersion and uid in
    /// each key would cost as much again).
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// The same event, for the cache: each Report is dropped as soon as it is known.
pub fn known_event(event: watcher::Event<Report>) -> watcher::Event<KnownReport> {
    match event {
        watcher::Event::Apply(report) => watcher::Event::Apply((&report).into()),
        watcher::Event::Delete(report) => watcher::Event::Delete((&report).into()),
        watcher::Event::InitApply(report) => watcher::Event::InitApply((&report).into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::reports::object::{apply_body, desired};
    use namespace_baseline_core::report::{NamespaceState, Outcome, WallState, namespace_report};

    fn wanted() -> Report {
        desired(
            "guarded",
            "team-a",
            namespace_report(&NamespaceState {
                baseline: "guarded",
                wall: &WallState::InPlace,
                holes: &[],
                dns: None,
                enforced: None,
            }),
        )
    }

    /// The report as the API server stores and the watch shows it.
    fn stored(report: &Report) -> Report {
        let mut stored: Report =
            serde_json::from_value(apply_body(report)).expect("our own body reads back");
        stored.metadata.resource_version = Some("42".into());
        stored.metadata.uid = Some("uid-42".into());
        stored
    }

    #[test]
    fn a_stored_report_says_the_same_whatever_the_server_and_others_added() {
        let wanted = wanted();
        let mut stored = stored(&wanted);
        let labels = stored.metadata.labels.get_or_insert_default();
        labels.insert("team".into(), "a".into());
        stored
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("note".into(), "kept".into());
        let known = KnownReport::from(&stored);
        assert!(known.says(&wanted));
        assert_eq!(known.namespace(), "team-a");
        assert_eq!(known.baseline(), Some("guarded"));
        assert_eq!(
            known.to_object_ref(()),
            kube::runtime::reflector::ObjectRef::new("nsb-guarded").within("team-a")
        );
    }

    #[test]
    fn a_stored_report_differs_in_any_field_the_reconciler_owns() {
        let wanted = wanted();
        let mut failed = stored(&wanted);
        failed.results[0].result = Outcome::Fail;
        let mut recounted = stored(&wanted);
        recounted.summary.pass += 1;
        let mut unlabelled = stored(&wanted);
        unlabelled
            .metadata
            .labels
            .get_or_insert_default()
            .remove(BASELINE_LABEL);
        let mut unmanaged = stored(&wanted);
        unmanaged
            .metadata
            .labels
            .get_or_insert_default()
            .insert(MANAGED_BY_LABEL.into(), "someone-else".into());
        let mut rescoped = stored(&wanted);
        rescoped.scope.get_or_insert_default().name = Some("team-b".into());
        let mut resourced = stored(&wanted);
        resourced.source = Some("kyverno".into());
        for (what, report) in [
            ("a result", failed),
            ("the summary", recounted),
            ("the baseline label", unlabelled),
            ("the managed-by label", unmanaged),
            ("the scope", rescoped),
            ("the source", resourced),
        ] {
            assert!(
                !KnownReport::from(&report).says(&wanted),
                "{what} changed, and the report still says the same"
            );
        }
        let unlabelled = KnownReport::from(&Report {
            metadata: Default::default(),
            ..wanted
        });
        assert_eq!(unlabelled.baseline(), None);
    }
}
