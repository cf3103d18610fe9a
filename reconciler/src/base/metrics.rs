//! Prometheus metrics. Labels are bounded enums: never object names.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::collections::HashMap;

use namespace_baseline_core::holes::{Direction, Hole, Width};

use crate::base::error::ErrorClass;

/// How a reconcile ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReconcileResult {
    Success,
    TransientError,
    PermanentError,
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Success => "success",
            Self::TransientError => "transient_error",
            Self::PermanentError => "permanent_error",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: ReconcileResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HedgeLabels {
    answered_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

/// One baseline's holes by (width, direction).
type HoleCounts = HashMap<(Width, Direction), i64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HoleLabels {
    width: &'static str,
    direction: &'static str,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ClassLabels, Counter>,
    drift_repairs: Counter,
    objects_applied: Counter,
    hedged_writes: Family<HedgeLabels, Counter>,
    reconcile_duration: Histogram,
    leader: Gauge,
    holes: Family<HoleLabels, Gauge>,
    /// Each baseline's holes by (width, direction): the gauge is their sum.
    holes_by_baseline: std::sync::Mutex<HashMap<String, HoleCounts>>,
    api_door_mismatch: Gauge,
    /// The enforcement probe's metrics (base/probe_metrics.rs).
    pub probe: crate::base::probe_metrics::ProbeMetrics,
    /// The baselines by `Ready`, and the covered namespaces without their wall
    /// (base/baseline_gauges.rs).
    pub baselines: crate::base::baseline_gauges::BaselineGauges,
    /// The watches' errors (base/watch_errors.rs).
    pub watches: crate::base::watch_errors::WatchErrors,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("namespace_baseline");
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles of NamespaceBaselines, by result",
            reconciles.clone(),
        );
        let errors = Family::<ClassLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error class",
            errors.clone(),
        );
        let drift_repairs = Counter::default();
        registry.register(
            "drift_repairs",
            "Managed NetworkPolicies found drifted and repaired",
            drift_repairs.clone(),
        );
        let objects_applied = Counter::default();
        registry.register(
            "objects_applied",
            "NetworkPolicy writes (server-side applies and deletes)",
            objects_applied.clone(),
        );
        let hedged_writes = Family::<HedgeLabels, Counter>::default();
        registry.register(
            "hedged_writes",
            "Wall applies sent a second time on a fresh connection after going unanswered past the hedge bound, by which request answered first (first, hedge)",
            hedged_writes.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 12));
        registry.register_with_unit(
            "reconcile_duration",
            "Duration of one reconcile",
            prometheus_client::registry::Unit::Seconds,
            reconcile_duration.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader lease and reconciles",
            leader.clone(),
        );
        let holes = Family::<HoleLabels, Gauge>::default();
        registry.register(
            "holes",
            "Rules of other NetworkPolicies opening the walls, by width and direction, summed over the baselines",
            holes.clone(),
        );
        let api_door_mismatch = Gauge::default();
        registry.register(
            "api_door_mismatch",
            "1 while the reconciler's own egress door does not open every API server endpoint (EndpointSlice default/kubernetes): it is locked out, or will be at the next restart",
            api_door_mismatch.clone(),
        );
        let probe = crate::base::probe_metrics::ProbeMetrics::default();
        probe.register(&mut registry);
        let baselines = crate::base::baseline_gauges::BaselineGauges::default();
        baselines.register(&mut registry);
        let watches = crate::base::watch_errors::WatchErrors::default();
        watches.register(&mut registry);
        // Every series exists from the start, at 0: an absent series is then a bug (renamed,
        // never exported), never "nothing happened yet".
        for result in [
            ReconcileResult::Success,
            ReconcileResult::TransientError,
            ReconcileResult::PermanentError,
        ] {
            drop(reconciles.get_or_create(&ResultLabels { result }));
        }
        for answered_by in HEDGE_ANSWERS {
            drop(hedged_writes.get_or_create(&HedgeLabels { answered_by }));
        }
        for class in [ErrorClass::Transient, ErrorClass::Permanent] {
            drop(errors.get_or_create(&ClassLabels {
                class: class.as_str(),
            }));
        }
        for width in Width::ALL {
            for direction in [Direction::Ingress, Direction::Egress] {
                drop(holes.get_or_create(&HoleLabels {
                    width: width.as_str(),
                    direction: direction.as_str(),
                }));
            }
        }
        Self {
            registry,
            reconciles,
            errors,
            drift_repairs,
            objects_applied,
            hedged_writes,
            reconcile_duration,
            leader,
            holes,
            holes_by_baseline: std::sync::Mutex::default(),
            api_door_mismatch,
            probe,
            baselines,
            watches,
        }
    }
}

/// Which request of a hedged write answered first, as the metric's label says it.
const HEDGE_ANSWERS: [&str; 2] = ["first", "hedge"];

impl Metrics {
    /// A write was hedged; `by_hedge`: its hedge answered first.
    pub fn hedged(&self, by_hedge: bool) {
        self.hedged_writes
            .get_or_create(&HedgeLabels {
                answered_by: HEDGE_ANSWERS[usize::from(by_hedge)],
            })
            .inc();
    }

    pub fn reconciled(&self, result: ReconcileResult, duration: Duration) {
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .inc();
        self.reconcile_duration.observe(duration.as_secs_f64());
    }

    pub fn error(&self, class: ErrorClass) {
        self.errors
            .get_or_create(&ClassLabels {
                class: class.as_str(),
            })
            .inc();
    }

    pub fn drift_repaired(&self, count: u32) {
        self.drift_repairs.inc_by(u64::from(count));
    }

    pub fn objects_applied(&self, count: u32) {
        self.objects_applied.inc_by(u64::from(count));
    }

    /// Replaces `baseline`'s holes in the `holes` gauge.
    pub fn set_holes<'a>(&self, baseline: &str, holes: impl IntoIterator<Item = &'a Hole>) {
        let mut counts = HoleCounts::new();
        for hole in holes {
            *counts.entry((hole.width, hole.direction)).or_insert(0) += 1;
        }
        let mut by_baseline = self
            .holes_by_baseline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        by_baseline.insert(baseline.to_owned(), counts);
        self.count_holes(&by_baseline);
    }

    /// Keeps the shares of the baselines `live` says exist in every gauge summed over the
    /// baselines (holes, `Enforced`, `Ready`, the unwalled namespaces): a baseline deleted
    /// without a reconcile seeing it go (`Orphan`: no finalizer) takes its share away.
    pub fn retain_baselines(&self, live: impl Fn(&str) -> bool) {
        {
            let mut by_baseline = self
                .holes_by_baseline
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            by_baseline.retain(|name, _| live(name));
            self.count_holes(&by_baseline);
        }
        for gone in self.probe.baselines() {
            if !live(&gone) {
                self.probe.set(&gone, None);
            }
        }
        self.baselines.retain(live);
    }

    fn count_holes(&self, by_baseline: &HashMap<String, HoleCounts>) {
        for width in Width::ALL {
            for direction in [Direction::Ingress, Direction::Egress] {
                let total: i64 = by_baseline
                    .values()
                    .map(|counts| counts.get(&(width, direction)).copied().unwrap_or(0))
                    .sum();
                self.holes
                    .get_or_create(&HoleLabels {
                        width: width.as_str(),
                        direction: direction.as_str(),
                    })
                    .set(total);
            }
        }
    }

    pub fn set_api_door_mismatch(&self, mismatch: bool) {
        self.api_door_mismatch.set(i64::from(mismatch));
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        self.baselines.refresh();
        let mut text = String::new();
        encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_metric_without_object_names() {
        let metrics = Metrics::default();
        metrics.reconciled(ReconcileResult::Success, Duration::from_millis(20));
        metrics.reconciled(ReconcileResult::TransientError, Duration::from_millis(20));
        metrics.error(ErrorClass::Transient);
        metrics.drift_repaired(2);
        metrics.objects_applied(4);
        metrics.set_leader(true);
        metrics.hedged(true);
        let text = metrics.render().unwrap();
        for line in [
            r#"namespace_baseline_reconciles_total{result="success"} 1"#,
            r#"namespace_baseline_reconciles_total{result="transient_error"} 1"#,
            r#"namespace_baseline_reconcile_errors_total{class="transient"} 1"#,
            "namespace_baseline_drift_repairs_total 2",
            "namespace_baseline_objects_applied_total 4",
            "namespace_baseline_reconcile_duration_seconds_count 2",
            "namespace_baseline_leader 1",
            r#"namespace_baseline_hedged_writes_total{answered_by="hedge"} 1"#,
            r#"namespace_baseline_hedged_writes_total{answered_by="first"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
