//! The soak's table (Markdown, for BENCHMARKS.md).

use std::fmt::Write as _;
use std::time::Duration;

use crate::chaos::{Chaos, Process};
use crate::check::Verdict;
use crate::options::Options;

/// The value at quantile `p` (0..=1) of `samples`, nearest rank.
fn quantile(samples: &[Duration], p: f64) -> Option<Duration> {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied()
}

fn ms(duration: Option<Duration>) -> String {
    duration.map_or_else(|| "–".to_owned(), |d| format!("{} ms", d.as_millis()))
}

fn spread(samples: &[Duration]) -> String {
    format!(
        "n = {}: p50 {}, p99 {}, max {}",
        samples.len(),
        ms(quantile(samples, 0.5)),
        ms(quantile(samples, 0.99)),
        ms(quantile(samples, 1.0))
    )
}

pub fn table(
    options: &Options,
    chaos: &Chaos<'_>,
    verdict: &Verdict,
    converged: Duration,
    processes: &[Process],
) -> String {
    let acquired: Vec<Duration> = verdict
        .handovers
        .iter()
        .filter_map(|h| h.acquired)
        .collect();
    let first_writes: Vec<Duration> = verdict
        .handovers
        .iter()
        .filter_map(|h| h.first_write)
        .collect();
    let max_rss = processes.iter().map(|p| p.max_rss_kib).max().unwrap_or(0);
    let actions: Vec<String> = chaos
        .actions
        .iter()
        .map(|(kind, n)| format!("{kind} ×{n}"))
        .collect();
    let restarts: Vec<String> = chaos
        .restarts
        .iter()
        .map(|w| {
            format!(
                "{} ({} ms)",
                w.what,
                w.until.duration_since(w.from).as_millis()
            )
        })
        .collect();
    let handover_goal = Duration::from_secs(17);
    let repair_goal = Duration::from_secs(5);
    let mut out = String::new();
    let _ = writeln!(out, "Soak: {options}.\n");
    let _ = writeln!(out, "| measure | value | goal |");
    let _ = writeln!(out, "|---|---|---|");
    let _ = writeln!(
        out,
        "| lease terms / handovers | {} terms, {} leader kills | ≥ 20 handovers (FULL) |",
        verdict.terms.len(),
        verdict.handovers.len()
    );
    let _ = writeln!(
        out,
        "| writes outside the writer's lease term (overlaps) | **{}** of {} NetworkPolicy, baseline and Event writes | 0 |",
        verdict.overlaps.len(),
        verdict.protected_writes
    );
    let _ = writeln!(
        out,
        "| handover: kill → successor holds the lease | {} | ≤ {} ms ({}) |",
        spread(&acquired),
        handover_goal.as_millis(),
        verdict_of(quantile(&acquired, 1.0), handover_goal)
    );
    let _ = writeln!(
        out,
        "| handover: kill → successor's first write | {} | – |",
        spread(&first_writes)
    );
    let _ = writeln!(
        out,
        "| drift repair, outside leaderless windows and restarts | {} | p99 ≤ {} ms ({}) |",
        spread(&verdict.repairs_steady),
        repair_goal.as_millis(),
        verdict_of(quantile(&verdict.repairs_steady, 0.99), repair_goal)
    );
    let _ = writeln!(
        out,
        "| drift repair, outside leaderless windows | {} | – |",
        spread(&verdict.repairs_led)
    );
    let _ = writeln!(
        out,
        "| drift repair, all | {} ({} drifts with no repair of their own: overwritten, or caught by the final check) | – |",
        spread(&verdict.repairs_all),
        verdict.unmatched
    );
    let _ = writeln!(
        out,
        "| convergence after the chaos (faults off → exact wall and status) | {} | – |",
        ms(Some(converged))
    );
    let _ = writeln!(
        out,
        "| max RSS of a replica | {:.1} MiB | – |",
        max_rss as f64 / 1024.0
    );
    let _ = writeln!(
        out,
        "| panics / exits not caused by the soak / lease released on SIGTERM | {} / {} / {} | 0 / 0 / yes |",
        verdict.panics,
        verdict.unexpected_exits.len(),
        if verdict.lease_released { "yes" } else { "no" }
    );
    let _ = writeln!(out, "| drift made | {} | – |", actions.join(", "));
    let handovers: Vec<String> = verdict
        .handovers
        .iter()
        .map(|h| {
            format!(
                "{} → {} in {}",
                h.killed,
                h.successor.as_deref().unwrap_or("nobody"),
                ms(h.acquired)
            )
        })
        .collect();
    let _ = writeln!(out, "| handovers | {} | – |", handovers.join(", "));
    let _ = writeln!(out, "| restarts | {} | – |", restarts.join(", "));
    out
}

fn verdict_of(value: Option<Duration>, goal: Duration) -> &'static str {
    match value {
        Some(value) if value <= goal => "met",
        Some(_) => "missed",
        None => "no sample",
    }
}
