//! Whether this replica may write now, and for how long a write may take.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Timing;

/// The write gate. The elector opens it with each successful Lease write and closes it on
/// any doubt; the reconciler checks it immediately before every write.
#[derive(Debug)]
pub struct LeaderGate {
    /// `None` without leader election: the single replica always writes.
    timing: Option<Timing>,
    term: Mutex<Term>,
    /// Bumped on every change, for the waiters of [`LeaderGate::wait_leading`] and the term
    /// loop.
    changes: watch::Sender<u64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Term {
    /// Whether the elector has completed one round (a standby then knows it is one).
    known: bool,
    /// This replica holds the Lease: its controller runs.
    holding: bool,
    /// The last Lease request failed or conflicted: no write until a renewal succeeds.
    doubt: bool,
    /// The start of the last successful Lease write.
    renewed_at: Option<Instant>,
}

impl LeaderGate {
    /// A gate for a single replica: always open.
    pub fn always() -> Self {
        Self::new(None)
    }

    /// A gate opened by a leader election with these clocks.
    pub fn elected(timing: Timing) -> Self {
        Self::new(Some(timing))
    }

    fn new(timing: Option<Timing>) -> Self {
        Self {
            timing,
            term: Mutex::new(Term::default()),
            changes: watch::channel(0).0,
        }
    }

    fn term(&self) -> MutexGuard<'_, Term> {
        self.term.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this replica may write now.
    pub fn is_leading(&self) -> bool {
        self.open_until()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Until when the gate stays open without another renewal; `None` when it is closed.
    fn open_until(&self) -> Option<Instant> {
        let Some(timing) = self.timing else {
            return Some(Instant::now() + Duration::from_secs(3600));
        };
        let term = *self.term();
        if !term.holding || term.doubt {
            return None;
        }
        term.renewed_at.map(|at| at + timing.renew_deadline)
    }

    /// How long a write starting now may take before it must be abandoned: it then cannot
    /// reach the API server after another replica may have taken the Lease over. `None` when
    /// the gate is closed.
    pub fn write_budget(&self, cap: Duration) -> Option<Duration> {
        let until = self.open_until()?;
        let now = Instant::now();
        if now >= until {
            return None;
        }
        let grace = self.timing.map_or(Duration::ZERO, |t| t.write_grace());
        Some(cap.min(until + grace - now))
    }

    /// Waits up to `max` for the gate to open; whether it is open.
    pub async fn wait_leading(&self, max: Duration) -> bool {
        let mut changes = self.changes.subscribe();
        let deadline = Instant::now() + max;
        loop {
            if self.is_leading() {
                return true;
            }
            if !self.holding() {
                // A standby's gate opens only with a new term; no point in waiting.
                return false;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return self.is_leading();
            }
        }
    }

    /// Whether this replica holds the Lease (its term runs, though writes may be paused).
    pub fn holding(&self) -> bool {
        self.timing.is_none() || self.term().holding
    }

    /// Whether this replica knows if it leads (for readiness).
    pub fn is_known(&self) -> bool {
        self.timing.is_none() || self.term().known
    }

    /// Whether the holder has gone `renew_deadline` without a successful renewal: it must
    /// give the term up.
    pub(crate) fn renewal_overdue(&self) -> bool {
        let Some(timing) = self.timing else {
            return false;
        };
        let term = *self.term();
        term.holding
            && term
                .renewed_at
                .is_none_or(|at| at.elapsed() >= timing.renew_deadline)
    }

    /// A Lease write naming this replica, started at `started`, succeeded.
    pub(crate) fn renewed(&self, started: Instant) {
        self.update(|term| {
            term.known = true;
            term.holding = true;
            term.doubt = false;
            if term.renewed_at.is_none_or(|at| at < started) {
                term.renewed_at = Some(started);
            }
        });
    }

    /// A Lease request of the holder failed: writes stop until a renewal succeeds.
    pub(crate) fn doubt(&self) {
        self.update(|term| term.doubt = true);
    }

    /// This replica does not hold the Lease (or gives it up).
    pub(crate) fn stand_by(&self) {
        self.update(|term| {
            term.known = true;
            term.holding = false;
            term.doubt = false;
            term.renewed_at = None;
        });
    }

    fn update(&self, change: impl FnOnce(&mut Term)) {
        change(&mut self.term());
        self.changes.send_modify(|version| *version += 1);
    }

    /// Resolves at the next change of the gate.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
