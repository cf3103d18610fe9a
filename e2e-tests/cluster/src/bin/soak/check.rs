//! What the audit log says about the soak: leadership terms and overlaps, handovers (after a
//! kill, and after a graceful shutdown: did the leader release the Lease, and how long did it
//! keep it), and how long each drift took to be repaired.

use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use namespace_baseline_cluster_tests::AuditEvent;
use namespace_baseline_cluster_tests::leadership::{self, ShutdownEnd, Term};
use namespace_baseline_cluster_tests::repairs::{
    Repair, open_at, policy_writes_and_hedges, reads_and_hedges, watches_open,
};
use namespace_baseline_leader::Timing;

use crate::chaos::{Chaos, Process};
use crate::options::Options;
use crate::slow::{SLOW, SlowRepair};

/// The longest a leader told to shut down has reason to keep the Lease: a write it had in
/// flight may take its whole budget (at most the renew deadline plus the write grace after
/// it started) and be abandoned, and the release then waits the write grace after it
/// (leader/README.md). A leader holding the Lease longer waited for something else:
/// its release's retries after such a write (within the reconciler's `RELEASE_BUDGET`), or
/// work it should not have waited for (running reconciles, a hanging election round).
pub fn write_budget() -> Duration {
    let timing = Timing::DEFAULT;
    timing.renew_deadline + timing.write_grace() * 2
}

/// A leader stopped (SIGKILL, or SIGTERM when `graceful`), and how long until another held
/// the Lease and until it wrote.
pub struct Handover {
    pub stopped: String,
    pub graceful: bool,
    pub successor: Option<String>,
    pub acquired: Option<Duration>,
    pub first_write: Option<Duration>,
    /// After a SIGTERM: how the stopped leader's term ended.
    pub shutdown: Option<ShutdownEnd>,
}

impl Handover {
    /// A leader told to shut down that did not release the Lease.
    pub fn release_failed(&self) -> bool {
        self.shutdown
            .as_ref()
            .is_some_and(ShutdownEnd::release_failed)
    }

    /// A leader told to shut down that kept the Lease past [`write_budget`] (or for good).
    pub fn held_past_the_write_budget(&self) -> bool {
        match &self.shutdown {
            None | Some(ShutdownEnd::NotHolding) => false,
            Some(ShutdownEnd::StillHeld) => true,
            Some(end) => end.held().is_some_and(|held| held > write_budget()),
        }
    }
}

pub struct Verdict {
    pub terms: Vec<Term>,
    pub overlaps: Vec<String>,
    pub protected_writes: usize,
    pub handovers: Vec<Handover>,
    /// Drift repair latencies (admin's change answered → reconciler's repair answered).
    pub repairs_all: Vec<Duration>,
    /// Those whose interval meets no leaderless window (a kill until the next acquisition).
    pub repairs_led: Vec<Duration>,
    /// Those meeting neither a leaderless window nor a restart.
    pub repairs_steady: Vec<Duration>,
    /// Drift made while no one led (after a leader stop, before its successor took the
    /// Lease), from the take-over to the repair's answer: what a warm standby acts on at once
    /// (those meeting a restart of the API server, etcd or the proxy left out).
    pub repairs_at_takeover: Vec<Duration>,
    /// Of the steady repairs, those of drift made while the leader's NetworkPolicy watch was
    /// down (cut, resuming or relisting), and those made while it was open.
    pub repairs_watch_down: Vec<Duration>,
    pub repairs_watch_open: Vec<Duration>,
    /// The steady repairs slower than [`SLOW`], with what the report needs to say where
    /// their time went.
    pub slow_repairs: Vec<SlowRepair>,
    /// The reconcilers' NetworkPolicy writes that reached the API server: first requests,
    /// and hedges (issue 38).
    pub first_writes: usize,
    pub hedges: usize,
    /// The reconcilers' reads that reached the API server, and the hedges among them.
    pub reads: usize,
    pub hedged_reads: usize,
    /// Drift the audit log shows no repair for (overwritten by later drift, or lost: the
    /// final state check decides).
    pub unmatched: usize,
    pub panics: usize,
    pub unexpected_exits: Vec<String>,
    pub lease_released: bool,
}

fn since(from: Timestamp, to: Timestamp) -> Duration {
    to.duration_since(from)
        .max(SignedDuration::ZERO)
        .try_into()
        .unwrap_or_default()
}

pub fn analyse(
    events: &[AuditEvent],
    reconciler: &str,
    chaos: &Chaos<'_>,
    processes: &[Process],
) -> Result<Verdict> {
    let ours: Vec<AuditEvent> = events
        .iter()
        .filter(|event| event.user.username == reconciler)
        .cloned()
        .collect();
    let (lease_writes, writes) = leadership::from_audit(&ours, &chaos.lease)?;
    ensure!(
        !lease_writes.is_empty(),
        "the audit log shows no Lease write: is it the soak's?"
    );
    let terms = leadership::terms(&lease_writes);
    let overlaps = leadership::overlaps(&terms, &writes);

    let handovers: Vec<Handover> = chaos
        .stops
        .iter()
        .map(|stop| {
            let next = terms
                .iter()
                .find(|term| term.from > stop.at && term.holder != stop.identity);
            let first_write = next.and_then(|term| {
                writes
                    .iter()
                    .filter(|w| w.writer == term.holder && w.received >= term.from)
                    .map(|w| w.received)
                    .min()
            });
            Handover {
                stopped: stop.identity.clone(),
                graceful: stop.graceful,
                successor: next.map(|term| term.holder.clone()),
                acquired: next.map(|term| since(stop.at, term.from)),
                first_write: first_write.map(|at| since(stop.at, at)),
                shutdown: stop
                    .graceful
                    .then(|| leadership::shutdown_end(&lease_writes, &stop.identity, stop.at)),
            }
        })
        .collect();

    // From a leader stop until the successor's first write (it must take the lease, then
    // list the cluster into its caches), and between terms.
    let leaderless: Vec<(Timestamp, Timestamp)> = chaos
        .stops
        .iter()
        .zip(&handovers)
        .map(|(stop, handover): (_, &Handover)| {
            let end = handover
                .first_write
                .or(handover.acquired)
                .and_then(|after| stop.at.checked_add(after).ok())
                .unwrap_or(Timestamp::MAX);
            (stop.at, end)
        })
        .chain(
            terms
                .windows(2)
                .filter_map(|pair| Some((pair[0].until?, pair[1].from))),
        )
        .collect();
    let restarts: Vec<(Timestamp, Timestamp)> =
        chaos.restarts.iter().map(|w| (w.from, w.until)).collect();

    let (repairs, unmatched) = repairs(events, reconciler, chaos);
    let meets = |windows: &[(Timestamp, Timestamp)], (from, to): (Timestamp, Timestamp)| {
        windows
            .iter()
            .any(|(start, end)| from <= *end && *start <= to)
    };
    let mut verdict = Verdict {
        terms,
        overlaps,
        protected_writes: writes.len(),
        handovers,
        repairs_all: Vec::new(),
        repairs_led: Vec::new(),
        repairs_steady: Vec::new(),
        repairs_at_takeover: Vec::new(),
        repairs_watch_down: Vec::new(),
        repairs_watch_open: Vec::new(),
        slow_repairs: Vec::new(),
        first_writes: 0,
        hedges: 0,
        reads: 0,
        hedged_reads: 0,
        unmatched,
        panics: processes.iter().map(|p| p.panics).sum(),
        unexpected_exits: processes
            .iter()
            .filter(|p| !p.killed && (!p.alive_at_end || !p.exit.is_some_and(|s| s.success())))
            .map(|p| {
                format!(
                    "{}: alive at the end {}, exit {:?}",
                    p.identity, p.alive_at_end, p.exit
                )
            })
            .collect(),
        lease_released: false,
    };
    let takeovers: Vec<(Timestamp, Timestamp)> = chaos
        .stops
        .iter()
        .zip(&verdict.handovers)
        .filter_map(|(stop, handover)| {
            let acquired = stop.at.checked_add(handover.acquired?).ok()?;
            Some((stop.at, acquired))
        })
        .collect();
    for Repair {
        changed: from,
        repaired: to,
        ..
    } in &repairs
    {
        if meets(&restarts, (*from, *to)) {
            continue;
        }
        if let Some((_, acquired)) = takeovers
            .iter()
            .find(|(stopped, acquired)| *stopped <= *from && from < acquired && acquired <= to)
        {
            verdict.repairs_at_takeover.push(since(*acquired, *to));
        }
    }
    let policy_watches = watches_open(&ours, "networkpolicies");
    let holder_at = |at: Timestamp| {
        verdict
            .terms
            .iter()
            .find(|term| term.from <= at && term.until.is_none_or(|until| at < until))
            .map(|term| term.holder.clone())
    };
    let mut down = Vec::new();
    let mut open = Vec::new();
    let mut slow = Vec::new();
    for repair in repairs {
        let (from, to) = (repair.changed, repair.repaired);
        let latency = since(from, to);
        verdict.repairs_all.push(latency);
        if !meets(&leaderless, (from, to)) {
            verdict.repairs_led.push(latency);
            if !meets(&restarts, (from, to)) {
                verdict.repairs_steady.push(latency);
                let holder = holder_at(from);
                let watch_open = holder
                    .as_ref()
                    .and_then(|holder| policy_watches.get(holder))
                    .is_some_and(|windows| open_at(windows, from));
                if watch_open {
                    open.push(latency);
                } else {
                    down.push(latency);
                }
                if latency > SLOW {
                    slow.push(SlowRepair {
                        repair,
                        holder,
                        watch_open,
                    });
                }
            }
        }
    }
    verdict.slow_repairs = slow;
    verdict.repairs_watch_down = down;
    verdict.repairs_watch_open = open;
    (verdict.first_writes, verdict.hedges) = policy_writes_and_hedges(events, reconciler);
    (verdict.reads, verdict.hedged_reads) = reads_and_hedges(events, reconciler);
    Ok(verdict)
}

fn repairs(events: &[AuditEvent], reconciler: &str, chaos: &Chaos<'_>) -> (Vec<Repair>, usize) {
    let managed = [
        namespace_baseline_cluster_tests::deny_all_policy_name(&chaos.baseline),
        namespace_baseline_cluster_tests::dns_policy_name(&chaos.baseline),
    ];
    namespace_baseline_cluster_tests::repairs::repairs(events, reconciler, &managed)
}

impl Verdict {
    /// Leaders told to shut down (SIGTERM) while holding the Lease.
    pub fn shutdowns(&self) -> impl Iterator<Item = &Handover> {
        self.handovers.iter().filter(|h| {
            h.shutdown
                .as_ref()
                .is_some_and(|end| *end != ShutdownEnd::NotHolding)
        })
    }

    /// Fails the soak on any overlap (graceful handovers included), panic, unexpected exit
    /// or unreleased lease at the end; the latency goals, failed releases and shutdowns that
    /// held the Lease past the write budget are reported, not enforced (they depend on the
    /// faults and the machine's load).
    pub fn enforce(&self, options: &Options) -> Result<()> {
        let mut failures = Vec::new();
        if !self.overlaps.is_empty() {
            failures.push(format!(
                "{} writes outside their writer's lease term, e.g. {:#?}",
                self.overlaps.len(),
                self.overlaps.iter().take(5).collect::<Vec<_>>()
            ));
        }
        if self.panics > 0 {
            failures.push(format!("{} panics in the replicas' logs", self.panics));
        }
        if !self.unexpected_exits.is_empty() {
            failures.push(format!(
                "replicas exited on their own: {:?}",
                self.unexpected_exits
            ));
        }
        if !self.lease_released {
            failures.push("the last leader did not release the lease on SIGTERM".to_owned());
        }
        let handed = self
            .handovers
            .iter()
            .filter(|h| h.acquired.is_some())
            .count();
        if handed < self.handovers.len() {
            failures.push(format!(
                "{} of {} stopped leaders were never succeeded",
                self.handovers.len() - handed,
                self.handovers.len()
            ));
        }
        if self.handovers.len() < options.kills {
            failures.push(format!(
                "only {} of {} leader stops happened",
                self.handovers.len(),
                options.kills
            ));
        }
        if failures.is_empty() {
            println!(
                "soak: PASS: every check passed (0 overlaps over {} terms, {} protected writes; every leader stop succeeded; no panic, no unexpected exit; the Lease released at the end). The figures above are measured against their goals, not checked.",
                self.terms.len(),
                self.protected_writes
            );
            Ok(())
        } else {
            bail!("soak: FAIL\n- {}", failures.join("\n- "))
        }
    }
}
