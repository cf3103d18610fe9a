//! The `Enforced` condition and `status.lastProbeTime`, set on the status a reconcile is
//! about to write, from the probe's last round (results.rs); an Event when the condition
//! changes; the `namespace_baseline_enforced` gauge. Also where a reconcile that installed
//! or repaired the wall asks for a round soon.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::runtime::events::EventType;
use namespace_baseline_core::spec::{Mode, NamespaceBaseline, NamespaceBaselineStatus};
use tracing::{info, warn};

use crate::base::probe_metrics::CONDITIONS;
use crate::reconcile::context::Context;
use crate::reconcile::state::State;
use crate::reconcile::status::Findings;
use crate::reconcile::writes::publish;

pub const ENFORCED: &str = "Enforced";

/// A change of the condition, to announce once the status is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    status: String,
    reason: String,
    message: String,
}

/// Adds `Enforced` (and the last probe's time) to `desired`; returns the change to announce
/// after the write, if the condition changed.
pub fn set(
    desired: &mut NamespaceBaselineStatus,
    previous: Option<&NamespaceBaselineStatus>,
    baseline: &NamespaceBaseline,
    report: &Findings,
    state: &State,
    now: &Time,
) -> Option<Change> {
    let name = baseline.name_any();
    let probes = &state.probes;
    let before = previous.and_then(|status| {
        status
            .conditions
            .iter()
            .find(|condition| condition.type_ == ENFORCED)
    });
    let wall_written = report.drift_repairs > 0 || report.objects_applied > 0;
    if probes.enabled() && report.mode == Mode::Enforce && wall_written {
        // The wall was installed or repaired: prove it again without waiting for the period.
        probes.request(&name);
    }
    let (status, reason, message, probed_at) = if !probes.enabled() {
        // Off: no condition, as before the probe existed (no status write on upgrade);
        // one proven earlier turns Unknown, so that no stale True stands.
        before?;
        (
            "Unknown".to_owned(),
            "ProbeOff".to_owned(),
            "the enforcement probe is off (the chart's probe.enabled, the reconciler's --probe-image)".to_owned(),
            previous.and_then(|status| status.last_probe_time.clone()),
        )
    } else if report.mode == Mode::Audit {
        (
            "Unknown".to_owned(),
            "NotProbed".to_owned(),
            "audit mode: the baseline installs no wall, so none is probed".to_owned(),
            None,
        )
    } else if let Some(outcome) = probes.last(&name) {
        let (status, reason, message) = outcome.verdict.condition();
        (
            status.to_owned(),
            reason.to_owned(),
            message.to_owned(),
            Some(outcome.at),
        )
    } else if let Some(before) = before {
        // A new leader before its first round: what was last proven stands.
        (
            before.status.clone(),
            before.reason.clone(),
            before.message.clone(),
            previous.and_then(|status| status.last_probe_time.clone()),
        )
    } else {
        (
            "Unknown".to_owned(),
            "NotProbedYet".to_owned(),
            "the first probe round has not ended yet".to_owned(),
            None,
        )
    };
    let last_transition_time = before
        .filter(|condition| condition.status == status)
        .map_or_else(
            || now.clone(),
            |condition| condition.last_transition_time.clone(),
        );
    desired.conditions.push(Condition {
        type_: ENFORCED.to_owned(),
        status: status.clone(),
        reason: reason.clone(),
        message: message.clone(),
        observed_generation: report.generation,
        last_transition_time,
    });
    desired.last_probe_time = probed_at;
    let gauged = CONDITIONS
        .iter()
        .find(|(s, r)| *s == status && *r == reason)
        .copied();
    state.metrics.probe.set(&name, gauged);
    let changed = before.is_none_or(|before| before.status != status || before.reason != reason);
    // A first status that only says "not probed" is no news.
    let news = changed && (before.is_some() || status != "Unknown");
    news.then_some(Change {
        status,
        reason,
        message,
    })
}

/// The Event of a change: `Enforced` (Normal), `NotEnforced` or `DNSBlocked` (Warning), or
/// `EnforcementUnknown` (Normal).
pub async fn announce(ctx: &Context, baseline: &NamespaceBaseline, change: Option<Change>) {
    let Some(Change {
        status,
        reason,
        message,
    }) = change
    else {
        return;
    };
    let (type_, event_reason) = match status.as_str() {
        "True" => (EventType::Normal, "Enforced"),
        "False" => (EventType::Warning, reason.as_str()),
        _ => (EventType::Normal, "EnforcementUnknown"),
    };
    if type_ == EventType::Warning {
        warn!(baseline = %baseline.name_any(), %reason, %message, "the wall does not hold on packets");
    } else {
        info!(baseline = %baseline.name_any(), %status, %reason, "Enforced changed");
    }
    publish(
        ctx,
        baseline,
        type_,
        event_reason,
        "Probe",
        format!("{reason}: {message}"),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::probe::results::LastRound;
    use crate::reconcile::probe::verdict::Verdict;
    use k8s_openapi::jiff::Timestamp;
    use namespace_baseline_core::NamespaceBaselineSpec;
    use namespace_baseline_leader::LeaderGate;
    use std::sync::Arc;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn report(mode: Mode) -> Findings {
        Findings {
            generation: Some(1),
            mode,
            namespaces: 1,
            left_out: Some(0),
            objects_applied: 0,
            drifted: 0,
            failure: None,
            drift_repairs: 0,
            holes: None,
            dns: None,
        }
    }

    fn enforced(status: &NamespaceBaselineStatus) -> &Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == ENFORCED)
            .unwrap()
    }

    fn baseline() -> NamespaceBaseline {
        crate::fixtures::baseline("team", NamespaceBaselineSpec::new("team"))
    }

    #[test]
    fn off_adds_no_condition_and_turns_an_earlier_one_unknown() {
        let state = State::new(Arc::new(LeaderGate::always()));
        let mut status = NamespaceBaselineStatus::default();
        let change = set(
            &mut status,
            None,
            &baseline(),
            &report(Mode::Enforce),
            &state,
            &time(1),
        );
        assert_eq!(change, None);
        assert!(status.conditions.is_empty(), "{status:?}");
        assert_eq!(status.last_probe_time, None);

        let earlier = NamespaceBaselineStatus {
            conditions: vec![Condition {
                type_: ENFORCED.to_owned(),
                status: "True".to_owned(),
                reason: "WallHoldsOnPackets".to_owned(),
                message: "held".to_owned(),
                observed_generation: Some(1),
                last_transition_time: time(1),
            }],
            last_probe_time: Some(time(1)),
            ..NamespaceBaselineStatus::default()
        };
        let change = set(
            &mut status,
            Some(&earlier),
            &baseline(),
            &report(Mode::Enforce),
            &state,
            &time(2),
        );
        assert_eq!(enforced(&status).reason, "ProbeOff");
        assert_eq!(enforced(&status).status, "Unknown");
        assert_eq!(change.unwrap().reason, "ProbeOff");
        assert_eq!(status.last_probe_time, Some(time(1)), "when it last ran");
    }

    #[test]
    fn a_round_sets_the_condition_its_time_and_announces_each_change_once() {
        let state = State::new(Arc::new(LeaderGate::always()));
        state.probes.enable();
        let mut first = NamespaceBaselineStatus::default();
        assert_eq!(
            set(
                &mut first,
                None,
                &baseline(),
                &report(Mode::Enforce),
                &state,
                &time(1)
            ),
            None,
            "not probed yet is no news"
        );
        assert_eq!(enforced(&first).reason, "NotProbedYet");
        state.probes.record(
            "team",
            LastRound {
                verdict: Verdict::NotEnforced {
                    directions: Vec::new(),
                    message: "ingress: through".to_owned(),
                },
                at: time(5),
                generation: Some(1),
            },
        );
        let mut second = NamespaceBaselineStatus::default();
        let change = set(
            &mut second,
            Some(&first),
            &baseline(),
            &report(Mode::Enforce),
            &state,
            &time(6),
        );
        assert_eq!(change.unwrap().reason, "NotEnforced");
        assert_eq!(enforced(&second).status, "False");
        assert_eq!(enforced(&second).last_transition_time, time(6));
        assert_eq!(second.last_probe_time, Some(time(5)));
        let mut third = NamespaceBaselineStatus::default();
        let change = set(
            &mut third,
            Some(&second),
            &baseline(),
            &report(Mode::Enforce),
            &state,
            &time(9),
        );
        assert_eq!(change, None, "the same finding again is no news");
        assert_eq!(enforced(&third).last_transition_time, time(6));
    }

    #[test]
    fn an_installed_or_repaired_wall_asks_for_a_round() {
        let state = State::new(Arc::new(LeaderGate::always()));
        state.probes.enable();
        let repaired = Findings {
            drift_repairs: 1,
            ..report(Mode::Enforce)
        };
        set(
            &mut NamespaceBaselineStatus::default(),
            None,
            &baseline(),
            &repaired,
            &state,
            &time(1),
        );
        assert!(state.probes.take_requested().contains("team"));
        set(
            &mut NamespaceBaselineStatus::default(),
            None,
            &baseline(),
            &report(Mode::Enforce),
            &state,
            &time(1),
        );
        assert!(state.probes.take_requested().is_empty());
    }
}
