//! The gauges an alert on a broken promise reads, summed over the baselines with each
//! baseline's share kept apart, so that its next reconcile replaces its share and a baseline
//! gone takes its share away: the baselines by their `Ready` condition, and the covered
//! namespaces whose wall is missing or differs from the baseline's, with how long the one that
//! has waited longest has been without it. Labels are bounded (a status and a reason), never
//! a baseline's or a namespace's name.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::time::Instant;

/// The `Ready` conditions of a reconcile that succeeded: their series exist from the start.
/// A failure's series (`False` with the error's reason) appears with the first baseline that
/// has it, and stays (at 0 once none has it).
const READY_SUCCESS: [(&str, &str); 2] = [("True", "WallInPlace"), ("True", "Audited")];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    status: String,
    reason: String,
}

/// Each baseline's share.
#[derive(Debug, Default)]
struct Shares {
    /// Its `Ready` condition, (status, reason).
    ready: HashMap<String, (String, String)>,
    /// Its covered namespaces without their wall (`Enforce` baselines only), since when.
    unwalled: HashMap<String, HashMap<String, Instant>>,
    /// Every `Ready` series exported so far: one that no baseline has now is set to 0.
    ready_series: BTreeSet<(String, String)>,
}

#[derive(Debug, Default)]
pub struct BaselineGauges {
    ready: Family<ConditionLabels, Gauge>,
    unwalled: Gauge,
    unwalled_seconds: Gauge<f64, AtomicU64>,
    shares: Mutex<Shares>,
}

impl BaselineGauges {
    /// Registers the gauges (the registry's prefix is `namespace_baseline`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "ready",
            "NamespaceBaselines by their Ready condition (status, reason), as their last reconcile decided it",
            self.ready.clone(),
        );
        registry.register(
            "unwalled_namespaces",
            "Namespaces covered by an Enforce baseline whose wall the last reconcile found missing or differing (a namespace of two baselines counts twice)",
            self.unwalled.clone(),
        );
        registry.register_with_unit(
            "unwalled",
            "How long the namespace waiting longest for its wall has waited: since the first reconcile that found its wall missing or differing; 0 when every covered namespace is walled",
            Unit::Seconds,
            self.unwalled_seconds.clone(),
        );
        let mut shares = self.shares();
        shares
            .ready_series
            .extend(READY_SUCCESS.map(|(status, reason)| (status.to_owned(), reason.to_owned())));
        self.count_ready(&mut shares);
    }

    fn shares(&self) -> MutexGuard<'_, Shares> {
        self.shares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `baseline`'s `Ready` condition is now `status` for `reason`.
    pub fn set_ready(&self, baseline: &str, status: &str, reason: &str) {
        let mut shares = self.shares();
        shares
            .ready
            .insert(baseline.to_owned(), (status.to_owned(), reason.to_owned()));
        self.count_ready(&mut shares);
    }

    /// What a reconcile of `baseline` planned: for each namespace it planned, whether its
    /// wall was already as the baseline wants it (`true`) or needed a write (`false`). A
    /// namespace keeps the time it was first found without its wall until a reconcile finds
    /// it walled. `scope`: the namespaces the reconcile looked at, `None` for all of them;
    /// those of the scope it did not plan are no longer covered, and forgotten.
    pub fn planned(
        &self,
        baseline: &str,
        walls: impl IntoIterator<Item = (String, bool)>,
        scope: Option<&BTreeSet<String>>,
    ) {
        let now = Instant::now();
        let mut shares = self.shares();
        let waiting = shares.unwalled.entry(baseline.to_owned()).or_default();
        let before = match scope {
            None => std::mem::take(waiting),
            Some(namespaces) => namespaces
                .iter()
                .filter_map(|namespace| Some((namespace.clone(), waiting.remove(namespace)?)))
                .collect(),
        };
        for (namespace, walled) in walls {
            if walled {
                waiting.remove(&namespace);
            } else {
                let since = before
                    .get(&namespace)
                    .or_else(|| waiting.get(&namespace))
                    .copied()
                    .unwrap_or(now);
                waiting.insert(namespace, since);
            }
        }
        if waiting.is_empty() {
            shares.unwalled.remove(baseline);
        }
        self.count_unwalled(&shares);
    }

    /// `baseline` promises no wall now (`Audit` mode, an invalid spec): none of its
    /// namespaces waits for one.
    pub fn no_wall_promised(&self, baseline: &str) {
        let mut shares = self.shares();
        shares.unwalled.remove(baseline);
        self.count_unwalled(&shares);
    }

    /// `baseline` is gone: its shares are taken away.
    pub fn forget(&self, baseline: &str) {
        self.retain(|name| name != baseline);
    }

    /// Keeps the shares of the baselines `live` says exist.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        let mut shares = self.shares();
        shares.ready.retain(|name, _| live(name));
        shares.unwalled.retain(|name, _| live(name));
        self.count_ready(&mut shares);
        self.count_unwalled(&shares);
    }

    /// Sets the age gauge to now: called before each rendering.
    pub fn refresh(&self) {
        let shares = self.shares();
        self.count_unwalled(&shares);
    }

    fn count_ready(&self, shares: &mut Shares) {
        let Shares {
            ready,
            ready_series,
            ..
        } = shares;
        ready_series.extend(ready.values().cloned());
        for (status, reason) in ready_series.iter() {
            let count = ready
                .values()
                .filter(|(s, r)| s == status && r == reason)
                .count();
            self.ready
                .get_or_create(&ConditionLabels {
                    status: status.clone(),
                    reason: reason.clone(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    fn count_unwalled(&self, shares: &Shares) {
        let now = Instant::now();
        let namespaces: usize = shares.unwalled.values().map(HashMap::len).sum();
        let oldest = shares
            .unwalled
            .values()
            .flat_map(HashMap::values)
            .min()
            .map_or(0.0, |since| now.duration_since(*since).as_secs_f64());
        self.unwalled
            .set(i64::try_from(namespaces).unwrap_or(i64::MAX));
        self.unwalled_seconds.set(oldest);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The gauges and the registry they are rendered from.
    struct Exported {
        gauges: BaselineGauges,
        registry: Registry,
    }

    impl Exported {
        fn new() -> Self {
            let gauges = BaselineGauges::default();
            let mut registry = Registry::with_prefix("namespace_baseline");
            gauges.register(&mut registry);
            Self { gauges, registry }
        }

        fn text(&self) -> String {
            self.gauges.refresh();
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
            text
        }

        fn has(&self, lines: &[&str]) {
            let text = self.text();
            for line in lines {
                assert!(
                    text.lines().any(|l| l == *line),
                    "missing {line} in\n{text}"
                );
            }
        }
    }

    fn scope(namespaces: &[&str]) -> BTreeSet<String> {
        namespaces.iter().map(|&n| n.to_owned()).collect()
    }

    fn walls(planned: &[(&str, bool)]) -> Vec<(String, bool)> {
        planned.iter().map(|&(n, w)| (n.to_owned(), w)).collect()
    }

    #[test]
    fn ready_counts_baselines_by_condition_and_keeps_a_reason_gone_at_zero() {
        let exported = Exported::new();
        exported.has(&[
            r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 0"#,
            r#"namespace_baseline_ready{status="True",reason="Audited"} 0"#,
        ]);
        exported.gauges.set_ready("a", "True", "WallInPlace");
        exported.gauges.set_ready("b", "False", "Forbidden");
        exported.has(&[
            r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 1"#,
            r#"namespace_baseline_ready{status="False",reason="Forbidden"} 1"#,
        ]);
        exported.gauges.set_ready("b", "True", "WallInPlace");
        exported.has(&[
            r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 2"#,
            r#"namespace_baseline_ready{status="False",reason="Forbidden"} 0"#,
        ]);
        exported.gauges.forget("a");
        exported.has(&[r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 1"#]);
        exported.gauges.retain(|name| name != "b");
        exported.has(&[r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 0"#]);
        assert!(!exported.text().contains("\"a\""), "no baseline names");
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_keeps_the_time_it_was_first_found_without_its_wall_until_walled() {
        let exported = Exported::new();
        let gauges = &exported.gauges;
        exported.has(&[
            "namespace_baseline_unwalled_namespaces 0",
            "namespace_baseline_unwalled_seconds 0.0",
        ]);
        // A full pass: x needs its wall, y has it.
        gauges.planned("a", walls(&[("x", false), ("y", true)]), None);
        exported.has(&[
            "namespace_baseline_unwalled_namespaces 1",
            "namespace_baseline_unwalled_seconds 0.0",
        ]);
        tokio::time::advance(Duration::from_secs(10)).await;
        // A scoped reconcile still finds it without: the first time stands.
        gauges.planned("a", walls(&[("x", false)]), Some(&scope(&["x"])));
        gauges.planned("b", walls(&[("z", false)]), None);
        exported.has(&[
            "namespace_baseline_unwalled_namespaces 2",
            "namespace_baseline_unwalled_seconds 10.0",
        ]);
        tokio::time::advance(Duration::from_secs(5)).await;
        gauges.planned("a", walls(&[("x", true)]), Some(&scope(&["x"])));
        exported.has(&[
            "namespace_baseline_unwalled_namespaces 1",
            "namespace_baseline_unwalled_seconds 5.0",
        ]);
        // z stopped matching: a scoped reconcile of it plans nothing there.
        gauges.planned("b", walls(&[]), Some(&scope(&["z"])));
        exported.has(&[
            "namespace_baseline_unwalled_namespaces 0",
            "namespace_baseline_unwalled_seconds 0.0",
        ]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pass_forgets_what_it_did_not_plan_and_audit_promises_no_wall() {
        let exported = Exported::new();
        let gauges = &exported.gauges;
        gauges.planned("a", walls(&[("x", false), ("y", false)]), None);
        tokio::time::advance(Duration::from_secs(3)).await;
        gauges.planned("a", walls(&[("y", false)]), None);
        exported.has(&[
            "namespace_baseline_unwalled_namespaces 1",
            "namespace_baseline_unwalled_seconds 3.0",
        ]);
        gauges.no_wall_promised("a");
        exported.has(&["namespace_baseline_unwalled_namespaces 0"]);
        gauges.planned("a", walls(&[("x", false)]), None);
        gauges.retain(|name| name != "a");
        exported.has(&["namespace_baseline_unwalled_namespaces 0"]);
    }
}
