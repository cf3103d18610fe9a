//! Whether this replica may write now, for how long a write may take, and which writes are
//! still under way: the Lease is handed over only after the last of them.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Timing;

/// The write gate. The elector opens it with each successful Lease write and closes it on
/// any doubt; the reconciler checks it immediately before every write, and holds an
/// [`InFlightWrite`] while the write is under way. On shutdown it closes for good
/// ([`LeaderGate::close`]), and the release waits for [`LeaderGate::writes_settled`].
#[derive(Debug)]
pub struct LeaderGate {
    /// `None` without leader election: the single replica always writes.
    timing: Option<Timing>,
    state: Mutex<GateState>,
    /// Bumped on every change, for the waiters of [`LeaderGate::wait_leading`] and the term
    /// loop.
    changes: watch::Sender<u64>,
}

/// A leadership term of this replica: the writes started in it are admitted only while it
/// lasts ([`LeaderGate::current_term`]), never in a later term of the same replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermId(u64);

#[derive(Debug, Default, Clone, Copy)]
struct GateState {
    /// The current term (or the last one, while standing by): counts the acquisitions.
    term: u64,
    /// Whether the elector has completed one round (a standby then knows it is one).
    known: bool,
    /// This replica holds the Lease: its controller runs.
    holding: bool,
    /// The last Lease request conflicted: no write until a renewal succeeds.
    doubt: bool,
    /// The start of the last successful Lease write.
    renewed_at: Option<Instant>,
    /// Shutting down: no write is admitted any more, whatever the Lease says.
    closed: bool,
    /// Writes admitted and not yet answered or abandoned.
    in_flight: usize,
    /// When the last write that got no answer (timed out, dropped, or its connection failed)
    /// was given up: the API server may still apply it for up to the write grace.
    last_abandoned: Option<Instant>,
}

/// A write the gate admitted, counted as in flight until it is dropped. Dropped without
/// [`InFlightWrite::answered`], it counts as abandoned: the request may still reach the API
/// server, so the Lease is not released until the write grace after it.
#[derive(Debug)]
#[must_use = "the write is in flight only while this is held"]
pub struct InFlightWrite<'gate> {
    gate: &'gate LeaderGate,
    budget: Duration,
    answered: bool,
}

impl InFlightWrite<'_> {
    /// How long the write may take before it must be abandoned.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The API server answered: nothing of this write can land later.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlightWrite<'_> {
    fn drop(&mut self) {
        let answered = self.answered;
        self.gate.update(|state| {
            state.in_flight = state.in_flight.saturating_sub(1);
            if !answered {
                state.last_abandoned = Some(Instant::now());
            }
        });
    }
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
            state: Mutex::new(GateState::default()),
            changes: watch::channel(0).0,
        }
    }

    fn state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this replica may write now.
    pub fn is_leading(&self) -> bool {
        self.open_until()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Until when the gate stays open without another renewal; `None` when it is closed.
    fn open_until(&self) -> Option<Instant> {
        let state = *self.state();
        Self::term_open_until(&state, self.timing)
    }

    /// [`LeaderGate::open_until`] of a term.
    fn term_open_until(state: &GateState, timing: Option<Timing>) -> Option<Instant> {
        if state.closed {
            return None;
        }
        let Some(timing) = timing else {
            return Some(Instant::now() + Duration::from_secs(3600));
        };
        if !state.holding || state.doubt {
            return None;
        }
        state.renewed_at.map(|at| at + timing.renew_deadline)
    }

    /// How long a write starting now may take before it must be abandoned: it then cannot
    /// reach the API server after another replica may have taken the Lease over. `None` when
    /// the gate is closed.
    pub fn write_budget(&self, cap: Duration) -> Option<Duration> {
        self.budget(&self.state(), None, cap)
    }

    /// The term this replica is in (or was last in, while standing by). A write started in it
    /// is refused once it has ended, even while this replica holds the Lease again: the writes
    /// of an ended term (a write handed over, a hedge) never go out in the next.
    pub fn current_term(&self) -> TermId {
        TermId(self.state().term)
    }

    /// The budget of a write of `term` (`None`: of whichever term is current).
    fn budget(&self, state: &GateState, term: Option<TermId>, cap: Duration) -> Option<Duration> {
        if term.is_some_and(|term| term.0 != state.term) {
            return None;
        }
        let until = Self::term_open_until(state, self.timing)?;
        let now = Instant::now();
        if now >= until {
            return None;
        }
        Some(cap.min(until + self.write_grace() - now))
    }

    /// Admits one write starting now with [`LeaderGate::write_budget`], counted in flight
    /// until the returned guard is dropped; `None` when the gate is closed. Checked and
    /// counted under one lock, so that a write is either refused after
    /// [`LeaderGate::close`] or seen in flight by the release.
    pub fn admit(&self, cap: Duration) -> Option<InFlightWrite<'_>> {
        self.admit_in(None, cap)
    }

    /// [`LeaderGate::admit`] for a write of `term` (`None`: of whichever term is current).
    pub fn admit_in(&self, term: Option<TermId>, cap: Duration) -> Option<InFlightWrite<'_>> {
        let budget = {
            let mut state = self.state();
            let budget = self.budget(&state, term, cap)?;
            state.in_flight += 1;
            budget
        };
        Some(InFlightWrite {
            gate: self,
            budget,
            answered: false,
        })
    }

    /// How long after the gate closes a write under way may still reach the API server.
    pub(crate) fn write_grace(&self) -> Duration {
        self.timing.map_or(Duration::ZERO, |t| t.write_grace())
    }

    /// Shutdown: no write is admitted from now on, and none waits for the gate to reopen.
    /// The Lease is not touched; the writes already admitted go on within their budgets.
    pub fn close(&self) {
        self.update(|state| state.closed = true);
    }

    /// Writes admitted and not yet answered or abandoned.
    pub fn writes_in_flight(&self) -> usize {
        self.state().in_flight
    }

    /// Resolves once no write is in flight.
    pub async fn no_writes_in_flight(&self) {
        let mut changes = self.changes.subscribe();
        while self.writes_in_flight() > 0 {
            // The sender lives in `self`: `changed` cannot fail while it is borrowed.
            let _ = changes.changed().await;
        }
    }

    /// Resolves once no write is in flight and the write grace has passed since the last
    /// abandoned one: from then on no write of this replica can reach the API server. Call
    /// it after [`LeaderGate::close`], else new writes may keep it waiting.
    pub async fn writes_settled(&self) {
        loop {
            self.no_writes_in_flight().await;
            let settles_at = self
                .state()
                .last_abandoned
                .map(|at| at + self.write_grace());
            match settles_at {
                Some(at) if Instant::now() < at => tokio::time::sleep_until(at).await,
                _ if self.writes_in_flight() == 0 => return,
                _ => {}
            }
        }
    }

    /// Waits up to `max` for the gate to open; whether it is open.
    pub async fn wait_leading(&self, max: Duration) -> bool {
        self.wait_leading_in(None, max).await
    }

    /// [`LeaderGate::wait_leading`] for a write of `term` (`None`: of whichever term is
    /// current): `false` at once when that term has ended.
    pub async fn wait_leading_in(&self, term: Option<TermId>, max: Duration) -> bool {
        let mut changes = self.changes.subscribe();
        let deadline = Instant::now() + max;
        loop {
            let ended = term.is_some_and(|term| term.0 != self.state().term);
            if self.is_leading() && !ended {
                return true;
            }
            if ended || !self.holding() || self.state().closed {
                // A standby's gate opens only with a new term, a closed one never again: no
                // point in waiting.
                return false;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return self.is_leading() && term.is_none_or(|term| term.0 == self.state().term);
            }
        }
    }

    /// Whether this replica holds the Lease (its term runs, though writes may be paused).
    pub fn holding(&self) -> bool {
        self.timing.is_none() || self.state().holding
    }

    /// Whether this replica knows if it leads (for readiness).
    pub fn is_known(&self) -> bool {
        self.timing.is_none() || self.state().known
    }

    /// Whether the holder has gone `renew_deadline` without a successful renewal: it must
    /// give the term up.
    pub(crate) fn renewal_overdue(&self) -> bool {
        let Some(timing) = self.timing else {
            return false;
        };
        let state = *self.state();
        state.holding
            && state
                .renewed_at
                .is_none_or(|at| at.elapsed() >= timing.renew_deadline)
    }

    /// A Lease write naming this replica, started at `started`, succeeded: a new term if it
    /// did not hold the Lease.
    pub(crate) fn renewed(&self, started: Instant) {
        self.update(|state| {
            if !state.holding {
                state.term += 1;
            }
            state.known = true;
            state.holding = true;
            state.doubt = false;
            if state.renewed_at.is_none_or(|at| at < started) {
                state.renewed_at = Some(started);
            }
        });
    }

    /// A Lease request of the holder conflicted: writes stop until a renewal succeeds.
    pub(crate) fn doubt(&self) {
        self.update(|state| state.doubt = true);
    }

    /// This replica does not hold the Lease (or gives it up).
    pub(crate) fn stand_by(&self) {
        self.update(|state| {
            state.known = true;
            state.holding = false;
            state.doubt = false;
            state.renewed_at = None;
        });
    }

    fn update(&self, change: impl FnOnce(&mut GateState)) {
        change(&mut self.state());
        self.changes.send_modify(|version| *version += 1);
    }

    /// Resolves at the next change of the gate.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
