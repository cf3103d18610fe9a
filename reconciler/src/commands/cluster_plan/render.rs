//! `plan`'s report for people (`--output text`); `--output json` is the report serialized.

use std::fmt::Write as _;

use namespace_baseline_core::spec::{DeletionPolicy, Mode};

use crate::commands::cluster_plan::report::{Action, Report};

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

/// The plan for people.
pub fn render_text(report: &Report) -> String {
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
