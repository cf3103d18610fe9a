//! What the cache keeps of each of our reports, and what this term remembers of a report it
//! wrote: all the reconciler ever reads of a stored report, and nothing else. A reconcile asks
//! two things of it: whose report it is (its baseline label, to find a baseline's reports) and
//! whether it says what the reconcile would write (one fingerprint of everything of it the
//! reconciler owns). The watch turns each Report into a [`ShownReport`] as it arrives (a
//! Report kept whole, even slimmed to its metadata and scope, would be the biggest object the
//! reconciler holds, one per covered namespace); the cache keeps its [`KnownReport`] under its
//! name and namespace (`cache.rs`).

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Arc;

use kube::runtime::watcher;
use namespace_baseline_core::identity::{BASELINE_LABEL, MANAGED_BY_LABEL};

use super::object::OpenReport;

/// What is known of one of our reports: whose it is and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownReport {
    /// Its `hedronite.io/baseline` label: whose report it is. The cache shares one copy
    /// between all of a baseline's reports.
    baseline: Option<Arc<str>>,
    /// [`fingerprint`] of it as stored.
    fingerprint: u64,
}

impl From<&OpenReport> for KnownReport {
    fn from(report: &OpenReport) -> Self {
        Self {
            baseline: report
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(BASELINE_LABEL))
                .map(|value| value.as_str().into()),
            fingerprint: fingerprint(report),
        }
    }
}

impl KnownReport {
    /// The value of its baseline label, if it has one.
    pub fn baseline(&self) -> Option<&str> {
        self.baseline.as_deref()
    }

    /// Whether it says what `desired` (the report a reconcile would write) says, in every
    /// field the reconciler owns; labels others added do not count.
    pub fn says(&self, desired: &OpenReport) -> bool {
        self.fingerprint == fingerprint(desired)
    }

    /// The same, its baseline label replaced by `shared` (an equal copy the cache keeps once).
    pub(super) fn with_baseline(&self, shared: Option<Arc<str>>) -> Self {
        Self {
            baseline: shared,
            fingerprint: self.fingerprint,
        }
    }

    /// Its baseline label as shared with the cache (`cache.rs` counts the holders).
    pub(super) fn shared_baseline(&self) -> Option<&Arc<str>> {
        self.baseline.as_ref()
    }
}

/// A digest of everything of a report the reconciler owns, as sent: the values of its own
/// labels (present or not), the scope, the source, the results and the summary. Equal for
/// equal content within a process (SipHash with fixed keys, over the serialized JSON);
/// labels others put on the report, its annotations and the server's fields are left out.
fn fingerprint(report: &OpenReport) -> u64 {
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

/// One of our reports as the watch shows it: where it is, and what is known of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownReport {
    pub namespace: String,
    pub name: String,
    pub known: KnownReport,
}

impl From<OpenReport> for ShownReport {
    fn from(mut report: OpenReport) -> Self {
        let known = KnownReport::from(&report);
        Self {
            namespace: report.metadata.namespace.take().unwrap_or_default(),
            name: report.metadata.name.take().unwrap_or_default(),
            known,
        }
    }
}

/// The same event, for the cache: each Report is dropped as soon as it is known.
pub fn shown_event(event: watcher::Event<OpenReport>) -> watcher::Event<ShownReport> {
    match event {
        watcher::Event::Apply(report) => watcher::Event::Apply(report.into()),
        watcher::Event::Delete(report) => watcher::Event::Delete(report.into()),
        watcher::Event::InitApply(report) => watcher::Event::InitApply(report.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::reports::object::{apply_body, desired};
    use namespace_baseline_core::report::{NamespaceState, Outcome, WallState, namespace_report};

    fn wanted() -> OpenReport {
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
    fn stored(report: &OpenReport) -> OpenReport {
        let mut stored: OpenReport =
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
        let shown = ShownReport::from(stored);
        assert!(shown.known.says(&wanted));
        assert_eq!(shown.namespace, "team-a");
        assert_eq!(shown.name, "nsb-guarded");
        assert_eq!(shown.known.baseline(), Some("guarded"));
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
        let unlabelled = KnownReport::from(&OpenReport {
            metadata: Default::default(),
            ..wanted
        });
        assert_eq!(unlabelled.baseline(), None);
    }
}
