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

/// The plan for people.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for baseline in &report.baselines {
        let _ = writeln!(
            out,
            "NamespaceBaseline {} (namespaceLabel {}; {}, deletionPolicy {}, allowDNS {}; from {})",
            baseline.name,
            baseline.namespace_label,
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
            let shown: Vec<&str> = baseline
                .guarded
                .iter()
                .take(TEXT_NAMESPACES)
                .map(String::as_str)
                .collect();
            let more = baseline.guarded.len().saturating_sub(shown.len());
            let _ = writeln!(
                out,
                "  guards {} namespace{}{}{}{}",
                baseline.guarded.len(),
                if baseline.guarded.len() == 1 { "" } else { "s" },
                if shown.is_empty() { "" } else { ": " },
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
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
