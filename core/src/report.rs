//! What a namespace's OpenReports `Report` says: the results for the wall, each hole, the
//! DNS door and the enforcement probe's verdict, and their summary. Pure: the reconciler writes it (`reconciler/src/reconcile/reports.rs`),
//! and whoever reads the cluster's policy results (Policy Reporter, `kubectl get reports`)
//! sees the wall beside every other engine's results.
//!
//! Results carry no timestamp (the field is optional): a report is rewritten only when what it
//! says changes, never because time passed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use serde::{Deserialize, Serialize};

use crate::network::doors::Reachability;
use crate::network::hole::{Hole, Width};
use crate::network::wall::Change;
use crate::vocabulary::identity::{deny_all_policy_name, dns_policy_name};

/// The `source` of every report and result this product writes.
pub const SOURCE: &str = "namespace-baseline";
/// The `category` of every result.
pub const CATEGORY: &str = "Network isolation";

/// The result names (`rule`): one per thing a report checks.
pub const RULE_WALL: &str = "wall";
pub const RULE_HOLE: &str = "hole";
pub const RULE_DNS_DOOR: &str = "dns-door";
pub const RULE_ENFORCED: &str = "enforced";

/// An OpenReports result status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    Warn,
    Error,
    Skip,
}

/// An OpenReports severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
    Info,
}

impl Severity {
    /// The severity of a hole: how far it opens the wall. The two breaches (`World`,
    /// `Cluster`: what the `Sealed` condition reports) are `critical` and `high`; a hole to
    /// some namespaces is `medium`; holes that name their peers (some pods, some addresses)
    /// are `low`; `info` is left to results that open nothing.
    pub fn of_width(width: Width) -> Self {
        match width {
            Width::World => Self::Critical,
            Width::Cluster => Self::High,
            Width::Namespaces => Self::Medium,
            Width::Pods | Width::Addresses => Self::Low,
        }
    }
}

/// One result of a report, as the `openreports.io/v1alpha1` schema names its fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportResult {
    pub source: String,
    /// The NamespaceBaseline that checks it.
    pub policy: String,
    pub rule: String,
    pub category: String,
    pub result: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    pub message: String,
    /// The objects the result is about (the NetworkPolicy opening a hole).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ObjectReference>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// How many results of each status a report holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(default)]
    pub pass: u32,
    #[serde(default)]
    pub fail: u32,
    #[serde(default)]
    pub warn: u32,
    #[serde(default)]
    pub error: u32,
    #[serde(default)]
    pub skip: u32,
}

impl Summary {
    pub fn of(results: &[ReportResult]) -> Self {
        results.iter().fold(Self::default(), |mut summary, result| {
            *match result.result {
                Outcome::Pass => &mut summary.pass,
                Outcome::Fail => &mut summary.fail,
                Outcome::Warn => &mut summary.warn,
                Outcome::Error => &mut summary.error,
                Outcome::Skip => &mut summary.skip,
            } += 1;
            summary
        })
    }
}

/// A report's content: its results and their summary.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportContent {
    pub results: Vec<ReportResult>,
    pub summary: Summary,
}

/// The wall in one namespace, after a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WallState {
    /// Every object of the wall is there and as desired.
    InPlace,
    /// What is missing or differs, one phrase per object (`nsb-x-default-deny missing`).
    Off(Vec<String>),
}

impl WallState {
    /// The wall as a plan of its namespace finds it: in place when nothing is to be written.
    pub fn from_changes(changes: &[Change]) -> Self {
        if changes.is_empty() {
            return Self::InPlace;
        }
        Self::Off(
            changes
                .iter()
                .map(|change| match change {
                    Change::Create(policy) => format!("{} missing", policy_name(policy)),
                    Change::Repair(policy, drift) => {
                        format!("{} {}", policy_name(policy), drift.describe())
                    }
                    Change::Delete { name, .. } => format!("{name} no longer wanted"),
                })
                .collect(),
        )
    }
}

fn policy_name(policy: &k8s_openapi::api::networking::v1::NetworkPolicy) -> &str {
    policy.metadata.name.as_deref().unwrap_or_default()
}

/// The DNS door of a namespace, as checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorState<'a> {
    Checked(&'a Reachability),
    /// Not checked yet (the DNS namespace is not listed): the reason.
    Unknown(&'a str),
}

/// The enforcement probe's last verdict on the baseline's wall: its `Enforced` condition
/// (proven on packets from the baseline's canary namespace, so the same in each namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnforcedState<'a> {
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Everything a namespace's report says, as the reconciler knows it after a reconcile.
#[derive(Debug, Clone)]
pub struct NamespaceState<'a> {
    pub baseline: &'a str,
    pub wall: &'a WallState,
    /// The holes other policies open in this namespace.
    pub holes: &'a [&'a Hole],
    /// The DNS door: `None` without a door (`allowDNS: false`) or without the check.
    pub dns: Option<DoorState<'a>>,
    /// The `Enforced` condition: `None` while the baseline has none (the probe is off).
    pub enforced: Option<EnforcedState<'a>>,
}

/// The report of one namespace: the wall first, then each hole (in the order given), then
/// the DNS door, then the enforcement probe's verdict. One more check is one more `chain`
/// here.
pub fn namespace_report(state: &NamespaceState<'_>) -> ReportContent {
    let baseline = state.baseline;
    let results: Vec<ReportResult> = std::iter::once(wall_result(baseline, state.wall))
        .chain(state.holes.iter().map(|hole| hole_result(baseline, hole)))
        .chain(state.dns.map(|door| dns_result(baseline, door)))
        .chain(
            state
                .enforced
                .map(|enforced| enforced_result(baseline, enforced)),
        )
        .collect();
    ReportContent {
        summary: Summary::of(&results),
        results,
    }
}

fn result(baseline: &str, rule: &str, outcome: Outcome, message: String) -> ReportResult {
    ReportResult {
        source: SOURCE.to_owned(),
        policy: baseline.to_owned(),
        rule: rule.to_owned(),
        category: CATEGORY.to_owned(),
        result: outcome,
        severity: None,
        message,
        resources: Vec::new(),
        properties: BTreeMap::new(),
    }
}

/// Pass when the wall is in place; fail (critical: without its wall the namespace is open in
/// both directions) when something is missing or differs.
fn wall_result(baseline: &str, wall: &WallState) -> ReportResult {
    let deny = deny_all_policy_name(baseline);
    match wall {
        WallState::InPlace => result(
            baseline,
            RULE_WALL,
            Outcome::Pass,
            format!(
                "the wall is in place: NetworkPolicy {deny} denies all traffic not let through a door"
            ),
        ),
        WallState::Off(differences) => ReportResult {
            severity: Some(Severity::Critical),
            ..result(
                baseline,
                RULE_WALL,
                Outcome::Fail,
                format!("the wall is not as declared: {}", differences.join(", ")),
            )
        },
    }
}

/// A hole: fail when it undoes the wall (`World`, `Cluster`), warn otherwise; its width as
/// the severity ([`Severity::of_width`]); the NetworkPolicy as the resource.
fn hole_result(baseline: &str, hole: &Hole) -> ReportResult {
    let outcome = if hole.width.is_breach() {
        Outcome::Fail
    } else {
        Outcome::Warn
    };
    let mut properties = BTreeMap::from([
        ("networkPolicy".to_owned(), hole.policy.clone()),
        ("direction".to_owned(), hole.direction.as_str().to_owned()),
        ("ruleIndex".to_owned(), hole.rule.to_string()),
        ("width".to_owned(), hole.width.as_str().to_owned()),
        ("allPorts".to_owned(), hole.all_ports.to_string()),
    ]);
    if let Some(reach) = hole.reach {
        properties.insert(
            "reach".to_owned(),
            format!("{} of {} namespaces", reach.reached, reach.of),
        );
    }
    ReportResult {
        severity: Some(Severity::of_width(hole.width)),
        resources: vec![ObjectReference {
            api_version: Some("networking.k8s.io/v1".to_owned()),
            kind: Some("NetworkPolicy".to_owned()),
            name: Some(hole.policy.clone()),
            ..ObjectReference::default()
        }],
        properties,
        ..result(baseline, RULE_HOLE, outcome, hole.to_string())
    }
}

/// The DNS door: pass when it reaches the DNS Service's ready endpoints (`DNSReachable`),
/// fail (medium: pods cannot resolve names, an outage rather than an opening) when it does
/// not, skip while it cannot be checked yet.
fn dns_result(baseline: &str, door: DoorState<'_>) -> ReportResult {
    let policy = dns_policy_name(baseline);
    let mut reported = match door {
        DoorState::Checked(reach) if reach.reachable => result(
            baseline,
            RULE_DNS_DOOR,
            Outcome::Pass,
            reach.message.clone(),
        ),
        DoorState::Checked(reach) => ReportResult {
            severity: Some(Severity::Medium),
            ..result(
                baseline,
                RULE_DNS_DOOR,
                Outcome::Fail,
                reach.message.clone(),
            )
        },
        DoorState::Unknown(reason) => {
            result(baseline, RULE_DNS_DOOR, Outcome::Skip, reason.to_owned())
        }
    };
    if let DoorState::Checked(reach) = door {
        reported
            .properties
            .insert("reason".to_owned(), reach.reason.to_owned());
    }
    reported
        .properties
        .insert("networkPolicy".to_owned(), policy);
    reported
}

/// The wall on packets: pass when the probe saw it hold (`True`); fail when it did not
/// (`NotEnforced`, critical: no packet is stopped, whatever the objects say; `DNSBlocked`,
/// medium: pods cannot resolve, as for the door); skip while the probe could not tell.
fn enforced_result(baseline: &str, enforced: EnforcedState<'_>) -> ReportResult {
    let message = enforced.message.to_owned();
    let mut reported = match (enforced.status, enforced.reason) {
        ("True", _) => result(baseline, RULE_ENFORCED, Outcome::Pass, message),
        ("False", reason) => ReportResult {
            severity: Some(if reason == "DNSBlocked" {
                Severity::Medium
            } else {
                Severity::Critical
            }),
            ..result(baseline, RULE_ENFORCED, Outcome::Fail, message)
        },
        _ => result(baseline, RULE_ENFORCED, Outcome::Skip, message),
    };
    reported
        .properties
        .insert("reason".to_owned(), enforced.reason.to_owned());
    reported
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::hole::{Direction, NamespaceReach};
    use crate::network::wall::Drift;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use rstest::rstest;

    fn hole(width: Width) -> Hole {
        Hole {
            policy: "allow-web".to_owned(),
            direction: Direction::Ingress,
            rule: 0,
            width,
            all_ports: false,
            reach: None,
        }
    }

    fn named(name: &str) -> NetworkPolicy {
        NetworkPolicy {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..NetworkPolicy::default()
        }
    }

    fn reachability(reachable: bool) -> Reachability {
        Reachability {
            reachable,
            reason: if reachable {
                "EndpointsCovered"
            } else {
                "NoReadyEndpoints"
            },
            message: "checked".to_owned(),
        }
    }

    fn outcomes(content: &ReportContent) -> Vec<(&str, Outcome, Option<Severity>)> {
        content
            .results
            .iter()
            .map(|result| (result.rule.as_str(), result.result, result.severity))
            .collect()
    }

    #[rstest]
    #[case(Width::World, Outcome::Fail, Severity::Critical)]
    #[case(Width::Cluster, Outcome::Fail, Severity::High)]
    #[case(Width::Namespaces, Outcome::Warn, Severity::Medium)]
    #[case(Width::Pods, Outcome::Warn, Severity::Low)]
    #[case(Width::Addresses, Outcome::Warn, Severity::Low)]
    fn a_hole_is_a_result_with_its_width_as_severity(
        #[case] width: Width,
        #[case] outcome: Outcome,
        #[case] severity: Severity,
    ) {
        let opened = hole(width);
        let content = namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::InPlace,
            holes: &[&opened],
            dns: None,
            enforced: None,
        });
        assert_eq!(
            outcomes(&content),
            [
                (RULE_WALL, Outcome::Pass, None),
                (RULE_HOLE, outcome, Some(severity))
            ]
        );
        let reported = &content.results[1];
        assert_eq!(reported.properties["width"], width.as_str());
        assert_eq!(reported.properties["networkPolicy"], "allow-web");
        assert_eq!(reported.resources[0].name.as_deref(), Some("allow-web"));
        assert_eq!(reported.message, opened.to_string());
    }

    #[rstest]
    #[case::in_place(WallState::InPlace, Outcome::Pass, None, "the wall is in place")]
    #[case::missing(
        WallState::from_changes(&[Change::Create(named("nsb-guarded-default-deny"))]),
        Outcome::Fail,
        Some(Severity::Critical),
        "nsb-guarded-default-deny missing"
    )]
    #[case::drifted(
        WallState::from_changes(&[
            Change::Repair(named("nsb-guarded-allow-dns"), Drift::Spec),
            Change::Delete { namespace: "team-a".into(), name: "nsb-guarded-old".into() },
        ]),
        Outcome::Fail,
        Some(Severity::Critical),
        "nsb-guarded-allow-dns spec changed, nsb-guarded-old no longer wanted"
    )]
    fn the_wall_passes_only_in_place(
        #[case] wall: WallState,
        #[case] outcome: Outcome,
        #[case] severity: Option<Severity>,
        #[case] says: &str,
    ) {
        let content = namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &wall,
            holes: &[],
            dns: None,
            enforced: None,
        });
        assert_eq!(outcomes(&content), [(RULE_WALL, outcome, severity)]);
        assert!(
            content.results[0].message.contains(says),
            "{}",
            content.results[0].message
        );
    }

    #[rstest]
    #[case::reachable(Some(true), Outcome::Pass, None)]
    #[case::unreachable(Some(false), Outcome::Fail, Some(Severity::Medium))]
    #[case::not_checked_yet(None, Outcome::Skip, None)]
    fn the_dns_door_is_a_result(
        #[case] reachable: Option<bool>,
        #[case] outcome: Outcome,
        #[case] severity: Option<Severity>,
    ) {
        let checked = reachable.map(reachability);
        let door = match &checked {
            Some(reach) => DoorState::Checked(reach),
            None => DoorState::Unknown("not listed yet"),
        };
        let content = namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::InPlace,
            holes: &[],
            dns: Some(door),
            enforced: None,
        });
        assert_eq!(
            outcomes(&content),
            [
                (RULE_WALL, Outcome::Pass, None),
                (RULE_DNS_DOOR, outcome, severity)
            ]
        );
        assert_eq!(
            content.results[1].properties["networkPolicy"],
            "nsb-guarded-allow-dns"
        );
    }

    #[test]
    fn the_summary_counts_every_result_and_the_order_is_wall_holes_door() {
        let wide = hole(Width::World);
        let narrow = Hole {
            reach: Some(NamespaceReach { reached: 2, of: 9 }),
            ..hole(Width::Namespaces)
        };
        let unreachable = reachability(false);
        let content = namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::Off(vec!["nsb-guarded-default-deny missing".into()]),
            holes: &[&wide, &narrow],
            dns: Some(DoorState::Checked(&unreachable)),
            enforced: None,
        });
        let rules: Vec<&str> = content.results.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(rules, [RULE_WALL, RULE_HOLE, RULE_HOLE, RULE_DNS_DOOR]);
        assert_eq!(
            content.summary,
            Summary {
                pass: 0,
                fail: 3,
                warn: 1,
                error: 0,
                skip: 0
            }
        );
        assert_eq!(content.results[2].properties["reach"], "2 of 9 namespaces");
        assert!(content.results.iter().all(|r| r.source == SOURCE));
        assert!(content.results.iter().all(|r| r.policy == "guarded"));
    }

    #[test]
    fn results_serialize_with_the_openreports_field_names() {
        let opened = hole(Width::Pods);
        let content = namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::InPlace,
            holes: &[&opened],
            dns: None,
            enforced: None,
        });
        let json = serde_json::to_value(&content.results[1]).unwrap();
        assert_eq!(json["result"], "warn");
        assert_eq!(json["severity"], "low");
        assert_eq!(json["resources"][0]["kind"], "NetworkPolicy");
        assert!(json.get("timestamp").is_none());
        let back: ReportResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, content.results[1]);
        assert_eq!(
            serde_json::to_value(content.summary).unwrap(),
            serde_json::json!({"pass": 1, "fail": 0, "warn": 1, "error": 0, "skip": 0})
        );
    }

    #[rstest]
    #[case::holds("True", "WallHoldsOnPackets", Outcome::Pass, None)]
    #[case::paper_wall("False", "NotEnforced", Outcome::Fail, Some(Severity::Critical))]
    #[case::dns_blocked("False", "DNSBlocked", Outcome::Fail, Some(Severity::Medium))]
    #[case::cannot_tell("Unknown", "ControlFailed", Outcome::Skip, None)]
    fn the_probes_verdict_is_the_last_result(
        #[case] status: &str,
        #[case] reason: &str,
        #[case] outcome: Outcome,
        #[case] severity: Option<Severity>,
    ) {
        let content = namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::InPlace,
            holes: &[],
            dns: None,
            enforced: Some(EnforcedState {
                status,
                reason,
                message: "what the probe saw",
            }),
        });
        assert_eq!(
            outcomes(&content),
            [
                (RULE_WALL, Outcome::Pass, None),
                (RULE_ENFORCED, outcome, severity)
            ]
        );
        assert_eq!(content.results[1].message, "what the probe saw");
        assert_eq!(content.results[1].properties["reason"], reason);
    }
}
