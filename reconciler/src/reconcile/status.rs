//! What a NamespaceBaseline's status should say after a reconcile, and whether that differs
//! from what it says now. Pure: the controller decides whether to write from [`changed`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use namespace_baseline_core::doors::Reachability;
use namespace_baseline_core::holes::{Hole, Width, count_by_width};
use namespace_baseline_core::spec::{Mode, NamespaceBaselineStatus};

use crate::base::error::{Error, ErrorClass};

pub const READY: &str = "Ready";
pub const DEGRADED: &str = "Degraded";
pub const SEALED: &str = "Sealed";
pub const DNS_REACHABLE: &str = "DNSReachable";

/// How many policies a `Sealed=False` message names.
const NAMED_BREACHES: usize = 5;

/// Why a reconcile did not complete, as the status tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub class: ErrorClass,
    pub reason: &'static str,
    pub message: String,
}

impl From<&Error> for Failure {
    fn from(error: &Error) -> Self {
        Self {
            class: error.class(),
            reason: error.reason(),
            message: error.report(),
        }
    }
}

/// What one reconcile found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Findings {
    /// The `metadata.generation` the reconcile acted on.
    pub generation: Option<i64>,
    pub mode: Mode,
    /// Namespaces matched by the selector.
    pub namespaces: u32,
    /// Live namespaces the selector leaves out; `None` when not counted (an invalid spec).
    pub left_out: Option<u32>,
    /// NetworkPolicy writes (applies and deletes) made.
    pub objects_applied: u32,
    /// Wall objects that still differ from the desired wall after this reconcile: in
    /// `Audit` mode everything found missing, drifted or unwanted; in `Enforce` mode what
    /// could not be repaired (0 when the reconcile succeeded).
    pub drifted: u32,
    pub failure: Option<Failure>,
    /// Managed policies repaired (deleted, or spec or labels changed) that no status written
    /// counts yet: this reconcile's, and those of earlier ones whose status was not written.
    pub drift_repairs: u32,
    /// The holes other policies open in the covered namespaces, with their namespace;
    /// `None` when not computed (an invalid spec).
    pub holes: Option<Vec<(String, Hole)>>,
    /// Whether the DNS door reaches the DNS Service's endpoints; `None` without a door or
    /// without the check (`--dns-namespace` empty).
    pub dns: Option<DnsCheck>,
}

/// The DNS door's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsCheck {
    Checked(Reachability),
    /// The DNS namespace's objects are not listed yet (or cannot be: RBAC): `Unknown`.
    NotYet(String),
}

/// The status `report` calls for. Conditions keep their `lastTransitionTime` from
/// `previous` unless their status flips, so an unchanged outcome yields an equal status.
pub fn desired(
    previous: Option<&NamespaceBaselineStatus>,
    report: &Findings,
    now: &Time,
) -> NamespaceBaselineStatus {
    let (ready, degraded) = conditions(report);
    let previous_conditions = previous.map_or(&[][..], |status| &status.conditions[..]);
    let stamp_as = |status: &str, reason: &str, message: String, type_: &str| {
        let last_transition_time = previous_conditions
            .iter()
            .find(|condition| condition.type_ == type_ && condition.status == status)
            .map_or_else(
                || now.clone(),
                |condition| condition.last_transition_time.clone(),
            );
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: report.generation,
            last_transition_time,
        }
    };
    let stamp = |(status, reason, message): (bool, &str, String), type_: &str| {
        stamp_as(
            if status { "True" } else { "False" },
            reason,
            message,
            type_,
        )
    };
    let mut conditions = vec![stamp(ready, READY), stamp(degraded, DEGRADED)];
    if let Some(holes) = &report.holes {
        conditions.push(stamp(sealed(holes), SEALED));
    }
    match &report.dns {
        Some(DnsCheck::Checked(dns)) => conditions.push(stamp(
            (dns.reachable, dns.reason, dns.message.clone()),
            DNS_REACHABLE,
        )),
        // Not listed yet (a restart, a re-list): what was last checked stands, so that a
        // restart on a converged cluster writes no status and announces no change.
        Some(DnsCheck::NotYet(message)) => conditions.push(
            previous_conditions
                .iter()
                .find(|condition| condition.type_ == DNS_REACHABLE)
                .cloned()
                .unwrap_or_else(|| {
                    stamp_as("Unknown", "NotListedYet", message.clone(), DNS_REACHABLE)
                }),
        ),
        None => {}
    }
    let previous_repairs = previous
        .and_then(|status| status.drift_repairs)
        .unwrap_or(0);
    NamespaceBaselineStatus {
        observed_generation: report.generation,
        namespaces: report.namespaces,
        namespaces_left_out: report.left_out,
        objects_applied: report.objects_applied,
        drifted: Some(report.drifted),
        drift_repairs: Some(previous_repairs + u64::from(report.drift_repairs)),
        holes: report.holes.as_ref().map(|holes| hole_counts(holes)),
        conditions,
        // Set by the enforcement probe's hook (probe/condition.rs).
        last_probe_time: None,
    }
}

/// Whether `status` already tells what `dns` found: a check not listed yet tells nothing new
/// ([`desired`] keeps the last one).
pub fn tells(status: Option<&NamespaceBaselineStatus>, dns: &DnsCheck) -> bool {
    let DnsCheck::Checked(dns) = dns else {
        return true;
    };
    let told = status.and_then(|status| {
        status
            .conditions
            .iter()
            .find(|condition| condition.type_ == DNS_REACHABLE)
    });
    told.is_some_and(|told| {
        (told.status == "True") == dns.reachable
            && told.reason == dns.reason
            && told.message == dns.message
    })
}

/// Holes by width, every width named (0 included) so that a closed hole shows as 0.
pub fn hole_counts(holes: &[(String, Hole)]) -> BTreeMap<String, u32> {
    count_by_width(holes.iter().map(|(_, hole)| hole))
        .into_iter()
        .map(|(width, count)| (width.as_str().to_owned(), count))
        .collect()
}

/// `Sealed`: no hole to the whole internet or the whole cluster; else which (up to five).
fn sealed(holes: &[(String, Hole)]) -> ConditionText {
    let breaches: Vec<&(String, Hole)> =
        holes.iter().filter(|(_, h)| h.width.is_breach()).collect();
    if breaches.is_empty() {
        let narrower = holes.len();
        let message = if narrower == 0 {
            "no other NetworkPolicy opens the wall".to_owned()
        } else {
            format!(
                "{} opening the wall to some namespaces, pods or addresses, none to the world or the whole cluster",
                plural(u32::try_from(narrower).unwrap_or(u32::MAX), "rule")
            )
        };
        return (true, "NoBreach", message);
    }
    let reason = if breaches.iter().any(|(_, h)| h.width == Width::World) {
        "OpenToWorld"
    } else {
        "OpenToCluster"
    };
    let mut named: Vec<String> = breaches
        .iter()
        .take(NAMED_BREACHES)
        .map(|(namespace, hole)| format!("{namespace}: {hole}"))
        .collect();
    if breaches.len() > NAMED_BREACHES {
        named.push(format!("and {} more", breaches.len() - NAMED_BREACHES));
    }
    (false, reason, named.join("; "))
}

/// Whether writing `desired` would change anything.
pub fn changed(
    previous: Option<&NamespaceBaselineStatus>,
    desired: &NamespaceBaselineStatus,
) -> bool {
    previous != Some(desired)
}

type ConditionText = (bool, &'static str, String);

fn conditions(report: &Findings) -> (ConditionText, ConditionText) {
    let namespaces = plural(report.namespaces, "namespace");
    if let Some(failure) = &report.failure {
        let message = match failure.class {
            ErrorClass::Permanent => {
                format!("{}; not retried until the spec changes", failure.message)
            }
            ErrorClass::Transient => format!("{}; retrying", failure.message),
        };
        return (
            (false, failure.reason, message.clone()),
            (true, failure.reason, message),
        );
    }
    match report.mode {
        Mode::Enforce => (
            (
                true,
                "WallInPlace",
                format!("the wall is in place in {namespaces}"),
            ),
            (false, "AsExpected", "no failure".to_owned()),
        ),
        Mode::Audit => {
            let drifted = plural(report.drifted, "object");
            let ready = (
                true,
                "Audited",
                format!(
                    "audit mode: {namespaces} checked, {drifted} differing from the wall, nothing written"
                ),
            );
            let degraded = if report.drifted > 0 {
                (
                    true,
                    "DriftDetected",
                    format!("{drifted} differing from the wall, left as found (audit mode)"),
                )
            } else {
                (false, "AsExpected", "no drift".to_owned())
            };
            (ready, degraded)
        }
    }
}

fn plural(count: u32, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn report() -> Findings {
        Findings {
            generation: Some(3),
            mode: Mode::Enforce,
            namespaces: 2,
            left_out: Some(3),
            objects_applied: 4,
            drifted: 0,
            failure: None,
            drift_repairs: 0,
            holes: None,
            dns: None,
        }
    }

    fn condition<'a>(status: &'a NamespaceBaselineStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn a_converged_enforce_reconcile_is_ready() {
        let status = desired(None, &report(), &time(100));
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.namespaces, 2);
        assert_eq!(status.namespaces_left_out, Some(3));
        assert_eq!(status.objects_applied, 4);
        assert_eq!(status.drifted, Some(0));
        let ready = condition(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "WallInPlace")
        );
        assert_eq!(ready.message, "the wall is in place in 2 namespaces");
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(ready.last_transition_time, time(100));
        assert_eq!(condition(&status, DEGRADED).status, "False");
    }

    #[test]
    fn the_same_outcome_later_is_no_change() {
        let first = desired(None, &report(), &time(100));
        let again = desired(Some(&first), &report(), &time(200));
        assert_eq!(again, first);
        assert!(!changed(Some(&first), &again));
    }

    #[test]
    fn a_new_count_is_a_change_but_keeps_transition_times() {
        let first = desired(None, &report(), &time(100));
        let converged = Findings {
            objects_applied: 0,
            ..report()
        };
        let next = desired(Some(&first), &converged, &time(200));
        assert!(changed(Some(&first), &next));
        assert_eq!(condition(&next, READY).last_transition_time, time(100));
    }

    #[test]
    fn a_flip_moves_the_transition_time_only_of_the_flipped_condition() {
        let first = desired(None, &report(), &time(100));
        let failed = Findings {
            failure: Some(Failure {
                class: ErrorClass::Permanent,
                reason: "Forbidden",
                message: "applying NetworkPolicy a/b: denied (Forbidden, 403)".into(),
            }),
            ..report()
        };
        let next = desired(Some(&first), &failed, &time(200));
        let ready = condition(&next, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Forbidden")
        );
        assert_eq!(ready.last_transition_time, time(200));
        assert!(ready.message.contains("not retried until the spec changes"));
        let degraded = condition(&next, DEGRADED);
        assert_eq!(degraded.status, "True");
        assert_eq!(degraded.last_transition_time, time(200));
        // Failing again the same way writes nothing new.
        assert!(!changed(
            Some(&next),
            &desired(Some(&next), &failed, &time(300))
        ));
    }

    #[test]
    fn a_transient_failure_says_it_is_retrying() {
        let failed = Findings {
            failure: Some(Failure {
                class: ErrorClass::Transient,
                reason: "ServerError",
                message: "boom".into(),
            }),
            ..report()
        };
        let status = desired(None, &failed, &time(1));
        assert_eq!(condition(&status, READY).message, "boom; retrying");
    }

    #[test]
    fn audit_mode_reports_drift_as_degraded() {
        let audit = Findings {
            mode: Mode::Audit,
            objects_applied: 0,
            drifted: 1,
            namespaces: 1,
            ..report()
        };
        let status = desired(None, &audit, &time(1));
        assert_eq!(status.drifted, Some(1));
        let ready = condition(&status, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Audited")
        );
        assert_eq!(
            ready.message,
            "audit mode: 1 namespace checked, 1 object differing from the wall, nothing written"
        );
        let degraded = condition(&status, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "DriftDetected")
        );
    }

    #[test]
    fn the_status_round_trips_through_json_unchanged() {
        // What the API server returns must compare equal to what we wrote, or every
        // reconcile would write again.
        let status = desired(None, &report(), &time(100));
        let json = serde_json::to_value(&status).unwrap();
        let back: NamespaceBaselineStatus = serde_json::from_value(json).unwrap();
        assert!(!changed(Some(&back), &status));
    }

    fn hole(policy: &str, width: Width) -> (String, Hole) {
        (
            "team-a".to_owned(),
            Hole {
                policy: policy.to_owned(),
                direction: namespace_baseline_core::holes::Direction::Ingress,
                rule: 0,
                width,
                all_ports: true,
                reach: None,
            },
        )
    }

    #[test]
    fn a_cluster_breach_says_how_many_live_namespaces_it_reaches() {
        let mut all = hole("all-but-one", Width::Cluster);
        all.1.reach = Some(namespace_baseline_core::holes::NamespaceReach {
            reached: 212,
            of: 214,
        });
        let breached = Findings {
            holes: Some(vec![all]),
            ..report()
        };
        let sealed = condition(&desired(None, &breached, &time(100)), SEALED).clone();
        assert_eq!(
            (
                sealed.status.as_str(),
                sealed.reason.as_str(),
                sealed.message.as_str()
            ),
            (
                "False",
                "OpenToCluster",
                "team-a: NetworkPolicy all-but-one ingress rule 0 opens every port to every pod of the cluster (212 of 214 namespaces)"
            )
        );
    }

    #[test]
    fn holes_are_counted_by_width_and_only_world_or_cluster_unseal_the_wall() {
        let narrow = Findings {
            holes: Some(vec![hole("web", Width::Pods), hole("db", Width::Addresses)]),
            ..report()
        };
        let status = desired(None, &narrow, &time(100));
        let counts = status.holes.clone().unwrap();
        assert_eq!(counts["Pods"], 1);
        assert_eq!(counts["Addresses"], 1);
        assert_eq!(counts["World"], 0);
        let sealed = condition(&status, SEALED);
        assert_eq!(
            (sealed.status.as_str(), sealed.reason.as_str()),
            ("True", "NoBreach")
        );

        let open: Vec<_> = (0..7)
            .map(|i| hole(&format!("open-{i}"), Width::World))
            .collect();
        let breached = Findings {
            holes: Some([open, vec![hole("all", Width::Cluster)]].concat()),
            ..report()
        };
        let status = desired(Some(&status), &breached, &time(200));
        let sealed = condition(&status, SEALED);
        assert_eq!(
            (sealed.status.as_str(), sealed.reason.as_str()),
            ("False", "OpenToWorld")
        );
        assert!(
            sealed.message.contains(
                "team-a: NetworkPolicy open-0 ingress rule 0 opens every port to the whole internet"
            ),
            "{}",
            sealed.message
        );
        assert!(
            sealed.message.ends_with("and 3 more"),
            "five named: {}",
            sealed.message
        );
        assert_eq!(sealed.last_transition_time, time(200));
        assert_eq!(status.holes.unwrap()["World"], 7);
    }

    #[test]
    fn the_dns_condition_says_what_the_check_found() {
        let unreachable = Findings {
            dns: Some(DnsCheck::Checked(Reachability {
                reachable: false,
                reason: "PortMismatch",
                message: "the endpoints listen on UDP 5353".to_owned(),
            })),
            ..report()
        };
        let status = desired(None, &unreachable, &time(100));
        let dns = condition(&status, DNS_REACHABLE);
        assert_eq!(
            (dns.status.as_str(), dns.reason.as_str()),
            ("False", "PortMismatch")
        );
        assert_eq!(dns.message, "the endpoints listen on UDP 5353");
        assert!(
            !desired(None, &report(), &time(100))
                .conditions
                .iter()
                .any(|c| c.type_ == DNS_REACHABLE),
            "no door, no condition"
        );
        let unlisted = Findings {
            dns: Some(DnsCheck::NotYet("not listed".to_owned())),
            ..report()
        };
        let status = desired(None, &unlisted, &time(100));
        let dns = condition(&status, DNS_REACHABLE);
        assert_eq!(
            (dns.status.as_str(), dns.reason.as_str()),
            ("Unknown", "NotListedYet")
        );
    }

    /// A restart: the DNS namespace's caches list after the first reconcile; until then the
    /// stored check stands, so a converged baseline's status is written again by no one.
    #[test]
    fn a_dns_check_not_listed_yet_keeps_the_last_one() {
        let reachable = Findings {
            dns: Some(DnsCheck::Checked(Reachability {
                reachable: true,
                reason: "EndpointsInsideDoor",
                message: "1 ready endpoint inside the door".to_owned(),
            })),
            ..report()
        };
        let stored = desired(None, &reachable, &time(100));
        let unlisted = Findings {
            dns: Some(DnsCheck::NotYet("not listed".to_owned())),
            ..report()
        };
        let restarted = desired(Some(&stored), &unlisted, &time(200));
        assert!(!changed(Some(&stored), &restarted), "{restarted:?}");
    }

    #[test]
    fn drift_repairs_add_up_across_reconciles() {
        let repaired = Findings {
            drift_repairs: 2,
            ..report()
        };
        let first = desired(None, &repaired, &time(100));
        assert_eq!(first.drift_repairs, Some(2));
        let second = desired(Some(&first), &repaired, &time(200));
        assert_eq!(second.drift_repairs, Some(4));
        let quiet = desired(Some(&second), &report(), &time(300));
        assert_eq!(quiet.drift_repairs, Some(4));
    }
}
