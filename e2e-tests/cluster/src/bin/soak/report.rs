//! The soak's table (Markdown, for BENCHMARKS.md).

use std::fmt::Write as _;
use std::time::Duration;

use namespace_baseline_cluster_tests::leadership::ShutdownEnd;

use crate::chaos::{Chaos, Process};
use crate::check::{Handover, Verdict, write_budget};
use crate::floor;
use crate::options::Options;
use crate::slow::{self, SLOW};

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
    let of = |graceful: bool, measure: fn(&Handover) -> Option<Duration>| -> Vec<Duration> {
        verdict
            .handovers
            .iter()
            .filter(|h| h.graceful == graceful)
            .filter_map(measure)
            .collect()
    };
    let acquired_after_kill = of(false, |h| h.acquired);
    let acquired_after_sigterm = of(true, |h| h.acquired);
    let first_writes: Vec<Duration> = verdict
        .handovers
        .iter()
        .filter_map(|h| h.first_write)
        .collect();
    let shutdowns: Vec<&Handover> = verdict.shutdowns().collect();
    let held_after_sigterm: Vec<Duration> = shutdowns
        .iter()
        .filter_map(|h| h.shutdown.as_ref().and_then(ShutdownEnd::held))
        .collect();
    let failed_releases = shutdowns.iter().filter(|h| h.release_failed()).count();
    let held_past = shutdowns
        .iter()
        .filter(|h| h.held_past_the_write_budget())
        .count();
    let kills = verdict.handovers.iter().filter(|h| !h.graceful).count();
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
    // Issue 38: repairs that do not wait for a stalled request.
    let (repair_p50_goal, repair_goal) = (Duration::from_millis(500), Duration::from_millis(1500));
    let floor_ratio_goal = 1.2;
    let floor = floor::floor(
        options.faults,
        options.seed,
        verdict.repairs_steady.len(),
        repair_goal,
    );
    let repair_p99 = quantile(&verdict.repairs_steady, 0.99);
    let ratio = repair_p99.map(|p99| p99.as_secs_f64() / floor.p99.as_secs_f64().max(1e-3));
    let hedges_per_1000 = verdict.hedges as f64 * 1000.0 / verdict.first_writes.max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(out, "Soak: {options}.\n");
    let _ = writeln!(
        out,
        "**Checks**: the soak fails when one fails (`soak: FAIL`).\n"
    );
    let _ = writeln!(out, "| check | value | must be |");
    let _ = writeln!(out, "|---|---|---|");
    let _ = writeln!(
        out,
        "| writes outside the writer's lease term (overlaps) | **{}** of {} NetworkPolicy, baseline and Event writes | 0 |",
        verdict.overlaps.len(),
        verdict.protected_writes
    );
    let _ = writeln!(
        out,
        "| leader stops made / succeeded by another replica | {} / {} | {} / {} |",
        verdict.handovers.len(),
        verdict
            .handovers
            .iter()
            .filter(|h| h.acquired.is_some())
            .count(),
        options.kills,
        options.kills
    );
    let _ = writeln!(
        out,
        "| panics / exits not caused by the soak / lease released at the end | {} / {} / {} | 0 / 0 / yes |",
        verdict.panics,
        verdict.unexpected_exits.len(),
        if verdict.lease_released { "yes" } else { "no" }
    );
    let _ = writeln!(
        out,
        "| the wall and the status converged after the chaos (faults off) | in {} | within 180 s |",
        ms(Some(converged))
    );
    let _ = writeln!(
        out,
        "\n**Figures**: measured against their goals; a missed goal is reported here and does not fail the soak.\n"
    );
    let _ = writeln!(out, "| figure | value | goal |");
    let _ = writeln!(out, "|---|---|---|");
    let _ = writeln!(
        out,
        "| drift repair, outside leaderless windows and restarts | {} | p50 ≤ {} ms ({}), p99 ≤ {} ms ({}) |",
        spread(&verdict.repairs_steady),
        repair_p50_goal.as_millis(),
        verdict_of(quantile(&verdict.repairs_steady, 0.5), repair_p50_goal),
        repair_goal.as_millis(),
        verdict_of(repair_p99, repair_goal)
    );
    let _ = writeln!(
        out,
        "| the fault model's floor for that p99: a client that hedges every stalled write at once, retries every other failure at once and honours a 429's Retry-After (no hedge meanwhile), drawn from the proxy's odds at {:.0} % faults | p99 {} over many repairs (p50 {}); over this soak's n = {} repairs, that client's own p99: median {}, 90th percentile {}, ≥ {} ms in {:.0} % of soaks; ours {} = **{}** the floor's p99 | ≤ {floor_ratio_goal}× ({}) |",
        options.faults * 100.0,
        ms(Some(floor.p99)),
        ms(Some(floor.p50)),
        verdict.repairs_steady.len(),
        ms(Some(floor.soak_p99_median)),
        ms(Some(floor.soak_p99_p90)),
        repair_goal.as_millis(),
        floor.soaks_at_goal * 100.0,
        ms(repair_p99),
        ratio.map_or_else(|| "–".to_owned(), |ratio| format!("{ratio:.2}×")),
        match ratio {
            Some(ratio) if ratio <= floor_ratio_goal => "met",
            Some(_) => "missed",
            None => "no sample",
        }
    );
    let over_goal = verdict
        .repairs_steady
        .iter()
        .filter(|latency| **latency > repair_goal)
        .count();
    let _ = writeln!(
        out,
        "| the same repairs over {} ms: ours, and the floor's client on average over as many repairs ({:.2} % of its repairs) | ours {over_goal}, the floor's {:.1} | – |",
        repair_goal.as_millis(),
        floor.share_over_goal * 100.0,
        floor.share_over_goal * verdict.repairs_steady.len() as f64
    );
    let _ = writeln!(
        out,
        "| the same repairs, drift made while the leader's NetworkPolicy watch was open | {} | – |",
        spread(&verdict.repairs_watch_open)
    );
    let _ = writeln!(
        out,
        "| the same repairs, drift made while the leader's NetworkPolicy watch was down (cut, resuming or relisting) | {} | – |",
        spread(&verdict.repairs_watch_down)
    );
    let _ = writeln!(
        out,
        "| hedged writes: hedge requests that reached the API server per 1,000 first requests | {hedges_per_1000:.1} ({} hedges, {} first requests, NetworkPolicy writes of every replica) | – |",
        verdict.hedges, verdict.first_writes
    );
    let (stalled, hedged) = slow::stalled_applies_hedged(&chaos.received);
    let _ = writeln!(
        out,
        "| stalled wall applies hedged: of the replicas' applies the proxy stalled, those whose hedge reached it within 1 s | {hedged} of {stalled} | all but those of a pass (more than {} writes in flight) or of a replica no longer leading |",
        namespace_baseline_reconciler::reconcile::context::Hedging::MAX_IN_FLIGHT
    );
    let _ = writeln!(
        out,
        "| hedged reads: hedge requests (get, list, watch) that reached the API server per 1,000 first requests | {:.1} ({} hedges, {} first requests) | – |",
        verdict.hedged_reads as f64 * 1000.0 / verdict.reads.max(1) as f64,
        verdict.hedged_reads,
        verdict.reads
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
        "| handover: successor takes the Lease → a repair pending at the take-over answered (restarts left out) | {} | ≤ 1 s at the median ({}) |",
        spread(&verdict.repairs_at_takeover),
        verdict_of(
            quantile(&verdict.repairs_at_takeover, 0.5),
            Duration::from_secs(1)
        )
    );
    let _ = writeln!(
        out,
        "| lease terms / handovers | {} terms, {} leader stops: {kills} SIGKILL, {} SIGTERM | ≥ 20 handovers (FULL) |",
        verdict.terms.len(),
        verdict.handovers.len(),
        verdict.handovers.len() - kills
    );
    let _ = writeln!(
        out,
        "| handover: SIGKILL → successor holds the lease | {} | ≤ {} ms ({}) |",
        spread(&acquired_after_kill),
        handover_goal.as_millis(),
        verdict_of(quantile(&acquired_after_kill, 1.0), handover_goal)
    );
    let _ = writeln!(
        out,
        "| handover: SIGTERM → successor holds the lease | {} | – |",
        spread(&acquired_after_sigterm)
    );
    let _ = writeln!(
        out,
        "| handover: stop → successor's first write | {} | – |",
        spread(&first_writes)
    );
    let _ = writeln!(
        out,
        "| shutdown: SIGTERM → the leader's Lease released or taken over | {} | – |",
        spread(&held_after_sigterm)
    );
    let _ = writeln!(
        out,
        "| shutdowns whose release failed / that held the Lease past the write budget ({} ms) | {failed_releases} / {held_past} of {} leaders sent SIGTERM | 0 / 0 ({}) |",
        write_budget().as_millis(),
        shutdowns.len(),
        if failed_releases + held_past == 0 {
            "met"
        } else {
            "missed"
        }
    );
    let _ = writeln!(
        out,
        "| max RSS of a replica | {:.1} MiB | – |",
        max_rss as f64 / 1024.0
    );
    let _ = writeln!(out, "| drift made | {} | – |", actions.join(", "));
    let handovers: Vec<String> = verdict
        .handovers
        .iter()
        .map(|h| {
            let how = match &h.shutdown {
                None => "SIGKILL".to_owned(),
                Some(ShutdownEnd::Released { held }) => {
                    format!("SIGTERM, released after {}", ms(Some(*held)))
                }
                Some(ShutdownEnd::TakenOver { held, .. }) => {
                    format!(
                        "SIGTERM, not released: taken over after {}",
                        ms(Some(*held))
                    )
                }
                Some(ShutdownEnd::StillHeld) => "SIGTERM, never released".to_owned(),
                Some(ShutdownEnd::NotHolding) => "SIGTERM, no longer leading".to_owned(),
            };
            format!(
                "{} → {} in {} ({how})",
                h.stopped,
                h.successor.as_deref().unwrap_or("nobody"),
                ms(h.acquired)
            )
        })
        .collect();
    let _ = writeln!(out, "| handovers | {} | – |", handovers.join(", "));
    let _ = writeln!(out, "| restarts | {} | – |", restarts.join(", "));
    let mut slow: Vec<_> = verdict.slow_repairs.iter().collect();
    slow.sort_by_key(|repair| std::cmp::Reverse(repair.repair.latency()));
    let _ = writeln!(
        out,
        "\n**Slow repairs**: the {} steady repairs over {} ms, slowest first (at most {SLOW_LISTED}), with the requests the proxy received between the drift and the repair (to the policy, from any replica; the leader's others but its Events and other policies), `+ms` after the drift, each fault drawn in bold.\n",
        slow.len(),
        SLOW.as_millis()
    );
    for repair in slow.iter().take(SLOW_LISTED) {
        let _ = writeln!(out, "- {}", repair.describe(&chaos.received));
    }
    out
}

/// The most slow repairs the report accounts for.
const SLOW_LISTED: usize = 16;

fn verdict_of(value: Option<Duration>, goal: Duration) -> &'static str {
    match value {
        Some(value) if value <= goal => "met",
        Some(_) => "missed",
        None => "no sample",
    }
}
