//! The cache of our reports: for each, where it is (its name, then its namespace) and what is
//! known of it ([`KnownReport`]: whose it is and a fingerprint of what it says), nothing more.
//!
//! Why not kube's reflector store, as the other watches use: it keeps each object behind an
//! `Arc` under an `ObjectRef` key (name, namespace, resourceVersion and uid: 96 bytes and two
//! strings of its own), beside the same name and namespace in the object, several times the
//! three small fields kept of a report, in every covered namespace. Here the reports are grouped by name
//! (one name per baseline: `nsb-<baseline>`), each is a 40-byte slot and one string (its
//! namespace), and a baseline's label is kept once for all its reports. A relist is taken in
//! as kube's store takes it: the relisted reports replace the cached ones only once the
//! relist is complete (`InitDone`), so a reconcile never reads a half-listed cache.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::runtime::watcher;
use tokio::sync::watch;

use super::known::{KnownReport, ShownReport};

/// Our reports by name, then by namespace.
type ByName = HashMap<Box<str>, HashMap<Box<str>, KnownReport>>;

/// The cache the reconciles read; cloned cheaply, all clones the same cache.
#[derive(Clone)]
pub struct ReportCache {
    reports: Arc<RwLock<ByName>>,
    listed: watch::Receiver<bool>,
}

/// What the watch feeds its events to: the one writer of its [`ReportCache`].
pub struct ReportCacheWriter {
    reports: Arc<RwLock<ByName>>,
    /// The reports of a relist in progress (`Init` to `InitDone`).
    relist: Option<ByName>,
    /// Each baseline label the cache holds, once.
    labels: HashSet<Arc<str>>,
    listed: watch::Sender<bool>,
}

/// An empty cache, not listed yet, and its writer.
pub fn report_cache() -> (ReportCache, ReportCacheWriter) {
    let reports = Arc::<RwLock<ByName>>::default();
    let (listed_tx, listed) = watch::channel(false);
    (
        ReportCache {
            reports: reports.clone(),
            listed,
        },
        ReportCacheWriter {
            reports,
            relist: None,
            labels: HashSet::new(),
            listed: listed_tx,
        },
    )
}

impl ReportCache {
    fn read(&self) -> RwLockReadGuard<'_, ByName> {
        self.reports.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The report `namespace/name`, if the cache holds it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<KnownReport> {
        self.read().get(name)?.get(namespace).cloned()
    }

    /// The namespaces holding a report labelled as the baseline `label`'s, whatever its name.
    pub fn namespaces_labelled(&self, label: &str) -> Vec<String> {
        self.read()
            .values()
            .flatten()
            .filter(|(_, known)| known.baseline() == Some(label))
            .map(|(namespace, _)| namespace.to_string())
            .collect()
    }

    /// Resolves once the watch's first list is in the cache; an error if the writer is gone
    /// before that.
    pub async fn wait_until_listed(&self) -> Result<(), watch::error::RecvError> {
        let mut listed = self.listed.clone();
        listed.wait_for(|listed| *listed).await?;
        Ok(())
    }

    /// A cache that listed `reports`, its writer gone (tests).
    #[cfg(test)]
    pub fn listed(reports: impl IntoIterator<Item = ShownReport>) -> Self {
        let (cache, mut writer) = report_cache();
        writer.apply(&watcher::Event::Init);
        for report in reports {
            writer.apply(&watcher::Event::InitApply(report));
        }
        writer.apply(&watcher::Event::InitDone);
        cache
    }
}

fn write(reports: &RwLock<ByName>) -> RwLockWriteGuard<'_, ByName> {
    reports.write().unwrap_or_else(PoisonError::into_inner)
}

impl ReportCacheWriter {
    /// Takes one watch event in.
    pub fn apply(&mut self, event: &watcher::Event<ShownReport>) {
        match event {
            watcher::Event::Apply(report) => {
                let replaced = insert(&mut write(&self.reports), &mut self.labels, report);
                release(&mut self.labels, replaced);
            }
            watcher::Event::Delete(report) => {
                let removed = remove(&mut write(&self.reports), report);
                release(&mut self.labels, removed);
            }
            watcher::Event::Init => self.relist = Some(ByName::new()),
            watcher::Event::InitApply(report) => {
                let relist = self.relist.get_or_insert_default();
                insert(relist, &mut self.labels, report);
            }
            watcher::Event::InitDone => {
                let relisted = self.relist.take().unwrap_or_default();
                let before = std::mem::replace(&mut *write(&self.reports), relisted);
                drop(before);
                self.labels.retain(|label| Arc::strong_count(label) > 1);
                self.listed.send_replace(true);
            }
        }
    }
}

/// Puts `report` into `reports`, its label shared: what it replaced, if anything.
fn insert(
    reports: &mut ByName,
    labels: &mut HashSet<Arc<str>>,
    report: &ShownReport,
) -> Option<KnownReport> {
    let label = report.known.baseline().map(|label| {
        labels.get(label).cloned().unwrap_or_else(|| {
            let label: Arc<str> = label.into();
            labels.insert(label.clone());
            label
        })
    });
    let known = report.known.with_baseline(label);
    let name = report.name.as_str();
    if !reports.contains_key(name) {
        reports.insert(name.into(), HashMap::new());
    }
    reports
        .get_mut(name)?
        .insert(report.namespace.as_str().into(), known)
}

/// Takes `report` out of `reports`: what was there, if anything.
fn remove(reports: &mut ByName, report: &ShownReport) -> Option<KnownReport> {
    let name = report.name.as_str();
    let in_name = reports.get_mut(name)?;
    let removed = in_name.remove(report.namespace.as_str());
    if in_name.is_empty() {
        reports.remove(name);
    }
    removed
}

/// Forgets the label of a report no longer cached once no cached report has it (the relist's
/// swap forgets the rest: a reader may still hold one here).
fn release(labels: &mut HashSet<Arc<str>>, gone: Option<KnownReport>) {
    let Some(label) = gone.as_ref().and_then(KnownReport::shared_baseline) else {
        return;
    };
    // Held by `labels` and by `gone` alone.
    if Arc::strong_count(label) == 2 {
        labels.remove(&**label);
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt as _;
    use namespace_baseline_core::report::{NamespaceState, WallState, namespace_report};

    use super::*;
    use crate::view::reports::object::desired;

    /// The report `baseline` writes in `namespace`, as the watch shows it.
    fn shown(baseline: &str, namespace: &str) -> ShownReport {
        let report = desired(
            baseline,
            namespace,
            namespace_report(&NamespaceState {
                baseline,
                wall: &WallState::InPlace,
                holes: &[],
                dns: None,
                enforced: None,
            }),
        );
        ShownReport::from(report)
    }

    fn label_of(cache: &ReportCache, namespace: &str, name: &str) -> Arc<str> {
        let known = cache.get(namespace, name).expect("cached");
        known.shared_baseline().expect("labelled").clone()
    }

    #[test]
    fn a_report_is_found_by_namespace_and_name_and_by_its_label() {
        let cache = ReportCache::listed([
            shown("guarded", "team-a"),
            shown("guarded", "team-b"),
            shown("open", "team-a"),
        ]);
        let known = cache.get("team-a", "nsb-guarded").expect("cached");
        assert_eq!(known.baseline(), Some("guarded"));
        assert_eq!(known, shown("guarded", "team-a").known);
        assert_eq!(cache.get("team-c", "nsb-guarded"), None);
        assert_eq!(cache.get("team-a", "nsb-other"), None);
        let mut guarded = cache.namespaces_labelled("guarded");
        guarded.sort();
        assert_eq!(guarded, ["team-a", "team-b"]);
        assert_eq!(cache.namespaces_labelled("open"), ["team-a"]);
        assert!(cache.namespaces_labelled("gone").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_cache_only_once_complete() {
        let (cache, mut writer) = report_cache();
        assert!(cache.wait_until_listed().now_or_never().is_none());
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(shown("guarded", "team-a")));
        writer.apply(&watcher::Event::InitApply(shown("guarded", "team-b")));
        assert_eq!(cache.get("team-a", "nsb-guarded"), None, "half listed");
        assert!(cache.wait_until_listed().now_or_never().is_none());
        writer.apply(&watcher::Event::InitDone);
        assert!(matches!(
            cache.wait_until_listed().now_or_never(),
            Some(Ok(()))
        ));
        assert!(cache.get("team-b", "nsb-guarded").is_some());

        // The watch is cut; team-b's report is deleted meanwhile (no event) and team-c's
        // written; the relist shows team-a's and team-c's.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(shown("guarded", "team-a")));
        writer.apply(&watcher::Event::InitApply(shown("guarded", "team-c")));
        assert!(
            cache.get("team-b", "nsb-guarded").is_some(),
            "before the relist ends"
        );
        assert_eq!(cache.get("team-c", "nsb-guarded"), None);
        writer.apply(&watcher::Event::InitDone);
        assert_eq!(cache.get("team-b", "nsb-guarded"), None);
        assert!(cache.get("team-c", "nsb-guarded").is_some());
        let mut guarded = cache.namespaces_labelled("guarded");
        guarded.sort();
        assert_eq!(guarded, ["team-a", "team-c"]);
    }

    #[test]
    fn live_events_change_the_cache_at_once() {
        let (cache, mut writer) = report_cache();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitDone);
        writer.apply(&watcher::Event::Apply(shown("guarded", "team-a")));
        assert!(cache.get("team-a", "nsb-guarded").is_some());
        let mut changed = shown("guarded", "team-a");
        changed.known = shown("guarded", "team-b").known;
        writer.apply(&watcher::Event::Apply(changed.clone()));
        assert_eq!(cache.get("team-a", "nsb-guarded"), Some(changed.known));
        writer.apply(&watcher::Event::Delete(shown("guarded", "team-a")));
        assert_eq!(cache.get("team-a", "nsb-guarded"), None);
        assert!(writer.labels.is_empty());
        assert!(write(&writer.reports).is_empty(), "no empty group left");
    }

    #[test]
    fn a_baselines_reports_share_its_label_until_the_last_goes() {
        let (cache, mut writer) = report_cache();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(shown("guarded", "team-a")));
        writer.apply(&watcher::Event::InitApply(shown("guarded", "team-b")));
        writer.apply(&watcher::Event::InitDone);
        writer.apply(&watcher::Event::Apply(shown("open", "team-a")));
        assert!(Arc::ptr_eq(
            &label_of(&cache, "team-a", "nsb-guarded"),
            &label_of(&cache, "team-b", "nsb-guarded")
        ));
        assert_eq!(writer.labels.len(), 2);

        writer.apply(&watcher::Event::Delete(shown("guarded", "team-a")));
        assert_eq!(writer.labels.len(), 2, "team-b's report still has it");
        writer.apply(&watcher::Event::Delete(shown("guarded", "team-b")));
        assert_eq!(writer.labels.len(), 1);

        // A relist without open's report forgets its label too.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitDone);
        assert!(writer.labels.is_empty());
    }
}
