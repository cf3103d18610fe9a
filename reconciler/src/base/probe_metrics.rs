//! The probe's metrics: `namespace_baseline_enforced` (baselines by the `Enforced`
//! condition's status and reason: bounded labels, never a baseline's name) and what the
//! probe costs (rounds, pods created, API requests).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Every (status, reason) the condition can take, so each series exists from the start.
pub const CONDITIONS: [(&str, &str); 11] = [
    ("True", "WallHoldsOnPackets"),
    ("False", "NotEnforced"),
    ("False", "DNSBlocked"),
    ("Unknown", "ProbeOff"),
    ("Unknown", "NotProbedYet"),
    ("Unknown", "NotProbed"),
    ("Unknown", "NoCanary"),
    ("Unknown", "WallNotInPlace"),
    ("Unknown", "ProbeFailed"),
    ("Unknown", "ControlFailed"),
    ("Unknown", "ProbeTooSlow"),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    status: &'static str,
    reason: &'static str,
}

#[derive(Debug, Default)]
pub struct ProbeMetrics {
    enforced: Family<ConditionLabels, Gauge>,
    by_baseline: Mutex<HashMap<String, (&'static str, &'static str)>>,
    rounds: Counter,
    pods_created: Counter,
    api_requests: Counter,
}

impl ProbeMetrics {
    /// Registers the probe's metrics (the registry's prefix is `namespace_baseline`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "enforced",
            "NamespaceBaselines by their Enforced condition (status, reason): True is a wall proven on packets",
            self.enforced.clone(),
        );
        registry.register(
            "probe_rounds",
            "Enforcement probe rounds run",
            self.rounds.clone(),
        );
        registry.register(
            "probe_pods_created",
            "Probe pods created",
            self.pods_created.clone(),
        );
        registry.register(
            "probe_api_requests",
            "Requests the enforcement probe made to the API server",
            self.api_requests.clone(),
        );
        for (status, reason) in CONDITIONS {
            drop(
                self.enforced
                    .get_or_create(&ConditionLabels { status, reason }),
            );
        }
    }

    /// `baseline`'s condition now is (status, reason); `None`: the baseline is gone.
    pub fn set(&self, baseline: &str, condition: Option<(&'static str, &'static str)>) {
        let mut by_baseline = self
            .by_baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match condition {
            Some(condition) => by_baseline.insert(baseline.to_owned(), condition),
            None => by_baseline.remove(baseline),
        };
        for (status, reason) in CONDITIONS {
            let count = by_baseline
                .values()
                .filter(|seen| **seen == (status, reason))
                .count();
            self.enforced
                .get_or_create(&ConditionLabels { status, reason })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// The baselines the gauge counts.
    pub fn baselines(&self) -> Vec<String> {
        self.by_baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    pub fn round(&self) {
        self.rounds.inc();
    }

    pub fn pod_created(&self) {
        self.pods_created.inc();
    }

    pub fn api_request(&self) {
        self.api_requests.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_counts_baselines_by_condition_without_their_names() {
        let metrics = ProbeMetrics::default();
        let mut registry = Registry::with_prefix("namespace_baseline");
        metrics.register(&mut registry);
        metrics.set("a", Some(("True", "WallHoldsOnPackets")));
        metrics.set("b", Some(("False", "NotEnforced")));
        metrics.set("c", Some(("False", "NotEnforced")));
        metrics.set("c", None);
        metrics.round();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"namespace_baseline_enforced{status="True",reason="WallHoldsOnPackets"} 1"#,
            r#"namespace_baseline_enforced{status="False",reason="NotEnforced"} 1"#,
            r#"namespace_baseline_enforced{status="False",reason="DNSBlocked"} 0"#,
            "namespace_baseline_probe_rounds_total 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("\"a\""), "{text}");
    }
}
