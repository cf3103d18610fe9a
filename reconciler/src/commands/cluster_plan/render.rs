//! `plan`'s report for people (`--output text`); `--output json` is the report serialized.

use std::fmt::Write as _;

use namespace_baseline_core::identity::deny_all_policy_name;
use namespace_baseline_core::spec::{DeletionPolicy, Mode};

use crate::commands::cluster_plan::input::Source;
use crate::commands::cluster_plan::report::{Action, BaselineReport, PrintedPlan};

/// Namespaces listed by name in the text output before "and N more".
const TEXT_NAMESPACES: usize = 50;

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "Enforce",
        Mode::Audit => "Audit",
    }
}

fn deletion_policy_name(policy: DeletionPolicy) -> &'static str {
    match policy {
        DeletionPolicy::Orphan => "Orphan",
        DeletionPolicy::Delete => "Delete",
    }
}

/// `  VERB N namespaces: a, b, c[ and M more]`, with a newline: the namespaces a baseline
/// guards, or those its `namespaceSelector` leaves out (what "every namespace except..."
/// excepts), the first [`TEXT_NAMESPACES`] by name.
fn namespace_line(verb: &str, names: &[String]) -> String {
    let shown: Vec<&str> = names
        .iter()
        .take(TEXT_NAMESPACES)
        .map(String::as_str)
        .collect();
    let more = names.len() - shown.len();
    format!(
        "  {verb} {} namespace{}{}{}{}\n",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        if shown.is_empty() { "" } else { ": " },
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// What the enforcement probe said of the baseline's wall on packets, and what a `False`
/// asks of the reader (docs/reference.md, "Enforced"); for a cluster without a condition,
/// that the probe is off and what turning it on costs. Nothing for baselines read from files.
fn enforced_line(baseline: &BaselineReport, source: Source) -> Option<String> {
    let Some(enforced) = &baseline.enforced else {
        return (source == Source::Cluster && baseline.invalid.is_none() && !baseline.deleting)
            .then(|| {
                "  ? enforced Enforced not reported: the enforcement probe is off (the chart's probe.enabled proves the wall on packets: 3 short-lived pods and about 20 API requests per probed baseline every --probe-interval, default 5m)\n".to_owned()
            });
    };
    let fix = match (enforced.status.as_str(), enforced.reason.as_str()) {
        ("False", "NotEnforced") => {
            " -> the network plugin does not enforce NetworkPolicy: switch enforcement on (e.g. Calico, Cilium, the cloud's network policy option)"
        }
        ("False", "DNSBlocked") => {
            " -> open spec.dns where the pods really send DNS (NodeLocal DNSCache's address, the DNS pods' real port)"
        }
        _ => "",
    };
    let mark = match enforced.status.as_str() {
        "True" => 'o',
        "False" => '!',
        _ => '?',
    };
    Some(format!(
        "  {mark} enforced Enforced {} ({}, last probe {}): {}{fix}\n",
        enforced.status,
        enforced.reason,
        enforced.last_probe_time.as_deref().unwrap_or("never"),
        enforced.message
    ))
}

/// The namespaces whose wall this plan creates: with the admission policy's
/// `podsWaitForWall`, their new pods are refused until it exists (docs/design.md, "Pods wait
/// for their wall"), so a reader knows what else waits on these writes.
fn pods_wait_line(baseline: &BaselineReport) -> Option<String> {
    if baseline.mode != Mode::Enforce {
        return None;
    }
    let deny_all = deny_all_policy_name(&baseline.name);
    let unwalled: Vec<String> = baseline
        .changes
        .iter()
        .filter(|change| change.action == Action::Create && change.name == deny_all)
        .map(|change| change.namespace.clone())
        .collect();
    if unwalled.is_empty() {
        return None;
    }
    let line = namespace_line("pods wait in", &unwalled);
    Some(format!(
        "{}    (no wall yet: with podsWaitForWall their new pods are refused until the creates above land)\n",
        line.replacen("  pods wait in", "  ~ pods wait in", 1)
    ))
}

/// The plan for people.
pub fn render_text(report: &PrintedPlan) -> String {
    let mut out = String::new();
    for baseline in &report.baselines {
        let _ = writeln!(
            out,
            "NamespaceBaseline {} ({}; {}, deletionPolicy {}, allowDNS {}; from {})",
            baseline.name,
            baseline.selector,
            mode_name(baseline.mode),
            deletion_policy_name(baseline.deletion_policy),
            baseline.allow_dns,
            baseline.origin
        );
        if let Some(invalid) = &baseline.invalid {
            let _ = writeln!(out, "  x {invalid}");
        } else if baseline.deleting {
            let _ = writeln!(
                out,
                "  being deleted: {}",
                if baseline.changes.is_empty() {
                    "nothing to remove (its wall stays unless deletionPolicy is Delete)"
                } else {
                    "its wall is removed"
                }
            );
        } else {
            out.push_str(&namespace_line("guards", &baseline.guarded));
            if baseline.namespace_label.is_empty() {
                out.push_str(&namespace_line("leaves out", &baseline.left_out));
            }
        }
        for change in &baseline.changes {
            let (sign, verb) = match change.action {
                Action::Create => ('+', "create"),
                Action::Update => ('~', "update"),
                Action::Delete => ('-', "delete"),
            };
            let _ = writeln!(
                out,
                "  {sign} {verb:<8} {}/{}: {}",
                change.namespace, change.name, change.reason
            );
        }
        if let Some(line) = pods_wait_line(baseline) {
            out.push_str(&line);
        }
        for item in baseline.pods_ungated.iter().take(TEXT_NAMESPACES) {
            let _ = writeln!(
                out,
                "  ! ungated {}: the pod policy's namespaceSelector leaves it out ({}): its pods are admitted before its wall exists",
                item.namespace, item.unmet
            );
        }
        if baseline.pods_ungated.len() > TEXT_NAMESPACES {
            let _ = writeln!(
                out,
                "  ! ungated and {} more",
                baseline.pods_ungated.len() - TEXT_NAMESPACES
            );
        }
        for change in &baseline.drift {
            let verb = match change.action {
                Action::Create => "missing",
                Action::Update => "drifted",
                Action::Delete => "extra",
            };
            let _ = writeln!(
                out,
                "  ! {verb:<8} {}/{}: {} (Audit: reported, not written)",
                change.namespace, change.name, change.reason
            );
        }
        for orphan in &baseline.orphaned {
            let _ = writeln!(
                out,
                "  = orphaned {}/{}: {}",
                orphan.namespace, orphan.name, orphan.reason
            );
        }
        if let Some(dns) = &baseline.dns {
            let _ = writeln!(
                out,
                "  {} dns      DNSReachable {} ({}): {}",
                if dns.reachable { 'o' } else { '!' },
                if dns.reachable { "True" } else { "False" },
                dns.reason,
                dns.message
            );
        }
        if let Some(line) = enforced_line(baseline, report.source) {
            out.push_str(&line);
        }
        for item in &baseline.holes {
            let mark = if item.hole.width.is_breach() {
                '!'
            } else {
                'o'
            };
            let _ = writeln!(
                out,
                "  {mark} hole     {}: {} ({})",
                item.namespace, item.hole, item.hole.width
            );
        }
        out.push('\n');
    }
    if report.baselines.is_empty() {
        out.push_str("No NamespaceBaseline to plan.\n");
    }
    let summary = &report.summary;
    let mut tail = Vec::new();
    if summary.orphaned > 0 {
        tail.push(format!("{} orphaned (left in place)", summary.orphaned));
    }
    if summary.drift > 0 {
        tail.push(format!(
            "{} drifted in Audit mode (not written)",
            summary.drift
        ));
    }
    if summary.holes > 0 {
        tail.push(format!(
            "{} hole{} in the walls ({} to the world or the whole cluster)",
            summary.holes,
            if summary.holes == 1 { "" } else { "s" },
            summary.breaches
        ));
    }
    if summary.ungated > 0 {
        tail.push(format!(
            "{} guarded namespace{} outside the pod gate",
            summary.ungated,
            if summary.ungated == 1 { "" } else { "s" }
        ));
    }
    if summary.invalid > 0 {
        tail.push(format!(
            "{} baseline{} with an invalid spec",
            summary.invalid,
            if summary.invalid == 1 { "" } else { "s" }
        ));
    }
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!("; {}", tail.join(", "))
    };
    if report.pending {
        let _ = writeln!(
            out,
            "Plan: {} to create, {} to update, {} to delete{tail}.",
            summary.create, summary.update, summary.delete
        );
    } else if summary.drift + summary.invalid > 0 {
        let _ = writeln!(out, "No changes: nothing would be written{tail}.");
    } else {
        let _ = writeln!(out, "No changes: the wall is in place{tail}.");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::cluster_plan::report::{ChangeItem, EnforcedItem};
    use rstest::rstest;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|index| format!("ns-{index}")).collect()
    }

    #[rstest]
    #[case(0, "  leaves out 0 namespaces\n")]
    #[case(1, "  leaves out 1 namespace: ns-0\n")]
    #[case(2, "  leaves out 2 namespaces: ns-0, ns-1\n")]
    fn names_what_is_left_out(#[case] count: usize, #[case] expected: &str) {
        assert_eq!(namespace_line("leaves out", &names(count)), expected);
    }

    fn baseline(enforced: Option<(&str, &str)>) -> BaselineReport {
        BaselineReport {
            name: "team".into(),
            origin: "cluster".into(),
            namespace_label: "team".into(),
            selector: "namespaceLabel team".into(),
            mode: Mode::Enforce,
            deletion_policy: DeletionPolicy::Orphan,
            allow_dns: true,
            deleting: false,
            invalid: None,
            guarded: Vec::new(),
            left_out: Vec::new(),
            changes: Vec::new(),
            drift: Vec::new(),
            orphaned: Vec::new(),
            holes: Vec::new(),
            enforced: enforced.map(|(status, reason)| EnforcedItem {
                status: status.into(),
                reason: reason.into(),
                message: "what the probe saw".into(),
                last_probe_time: Some("2026-12-04T21:43:47Z".into()),
            }),
            dns: None,
            pods_ungated: Vec::new(),
        }
    }

    #[rstest]
    #[case::holds(Some(("True", "WallHoldsOnPackets")), Source::Cluster, Some("  o enforced Enforced True (WallHoldsOnPackets, last probe 2026-12-04T21:43:47Z): what the probe saw\n"))]
    #[case::paper_wall(Some(("False", "NotEnforced")), Source::Cluster, Some("  ! enforced Enforced False (NotEnforced, last probe 2026-12-04T21:43:47Z): what the probe saw -> the network plugin does not enforce NetworkPolicy"))]
    #[case::dns_blocked(Some(("False", "DNSBlocked")), Source::Cluster, Some(" -> open spec.dns where the pods really send DNS"))]
    #[case::unknown(Some(("Unknown", "ControlFailed")), Source::Cluster, Some("  ? enforced Enforced Unknown (ControlFailed"))]
    #[case::probe_off(
        None,
        Source::Cluster,
        Some("  ? enforced Enforced not reported: the enforcement probe is off")
    )]
    #[case::from_files(None, Source::Manifests, None)]
    fn says_what_the_probe_saw_and_what_a_false_asks(
        #[case] enforced: Option<(&str, &str)>,
        #[case] source: Source,
        #[case] expected: Option<&str>,
    ) {
        let line = enforced_line(&baseline(enforced), source);
        match (line, expected) {
            (Some(line), Some(expected)) => assert!(line.contains(expected), "{line}"),
            (None, None) => {}
            (line, expected) => panic!("{line:?} where {expected:?} was expected"),
        }
    }

    #[test]
    fn says_which_namespaces_pods_wait_for_their_wall() {
        let mut planned = baseline(None);
        assert_eq!(pods_wait_line(&planned), None);
        planned.changes.push(ChangeItem {
            action: Action::Create,
            namespace: "team-a".into(),
            name: deny_all_policy_name("team"),
            fields: Vec::new(),
            reason: "missing".into(),
        });
        let line = pods_wait_line(&planned).unwrap();
        assert!(
            line.starts_with(
                "  ~ pods wait in 1 namespace: team-a\n    (no wall yet: with podsWaitForWall"
            ),
            "{line}"
        );
        planned.mode = Mode::Audit;
        assert_eq!(pods_wait_line(&planned), None);
    }

    #[test]
    fn counts_beyond_the_listed() {
        let line = namespace_line("guards", &names(TEXT_NAMESPACES + 3));
        assert!(line.starts_with("  guards 53 namespaces: ns-0, "), "{line}");
        assert!(
            line.ends_with(&format!("ns-{} and 3 more\n", TEXT_NAMESPACES - 1)),
            "{line}"
        );
    }
}
