//! One write sent a second time when its first request goes unanswered for too long (a
//! *hedge*, after "The Tail at Scale", Dean and Barroso, 2013), inside the gate's rules.
//!
//! Why: a request stalled on its way (a connection that stopped moving, an API server
//! instance behind the load balancer that answers late) holds its write for as long as the
//! stall lasts, and no retry helps: the request has not failed. For a write that may be sent
//! twice with one outcome (a forced server-side apply of the same object by the same field
//! manager), sending it again on another connection once a bound has passed and taking the
//! first answer cuts that wait to the bound plus one healthy answer.
//!
//! The gate's rules hold for each request of the write (README.md, "Hedged writes"): each is
//! admitted right before it goes out, the hedge only if the gate is open at that moment (it
//! never waits for a closed gate); each has its own budget, ending before another replica
//! could take the Lease over; each counts in flight until answered or abandoned, and the
//! release waits for both. The request that does not answer first is neither cancelled nor
//! waited for: it runs on to its answer or its budget, counted by the gate meanwhile.
//!
//! What bounds the extra load: at most one hedge per write; none when the first request
//! answers within the bound; none while the first was told to slow down (a 429 whose
//! `Retry-After` its client honours: the hedge is then timed from the retry); none while
//! more than a few writes are in flight (a write slow among many waits in the server's
//! queue, which a copy would lengthen).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tracing::debug;

use crate::write::answered_by_the_server;
use crate::{LeaderGate, NotLeader, TermId, WriteBounds};

/// When a write's hedge may go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HedgeBounds {
    /// The first request unanswered this long: the hedge goes out.
    pub after: Duration,
    /// No hedge while more writes than this are in flight (the first request included).
    pub max_in_flight: usize,
}

/// Which request of a write gave the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    First,
    Hedge,
}

/// A hedged write's outcome: the answer taken, which request gave it, and whether a hedge
/// went out.
#[derive(Debug)]
pub struct Hedged<T> {
    pub answer: kube::Result<T>,
    pub answered_by: Attempt,
    pub hedged: bool,
    /// The request that did not give the answer, when it is still running: it may land
    /// later; this ends when nothing of it can land any more (answered, or the write grace
    /// after it was abandoned).
    pub unsettled: Option<JoinHandle<()>>,
}

/// What one request of a write answered, as its task ends.
type RequestAnswer<T> = Result<kube::Result<T>, NotLeader>;

impl LeaderGate {
    /// Runs one write as [`LeaderGate::write`] does, and sends `second()` (the same write, on
    /// another connection) if the first request is still unanswered `hedge.after` after it
    /// went out, and no more than `hedge.max_in_flight` writes are in flight then. While
    /// `held()` names an instant to come (the first request was answered 429 and waits the
    /// `Retry-After` the server gave), the hedge waits for it: it is due `hedge.after` past
    /// it, when the first request's retry has gone unanswered that long. The first success
    /// of either is the answer; when neither succeeds, the first request's outcome is.
    /// Both requests are of `term` ([`LeaderGate::write_in`]). `Err(NotLeader)`: the first
    /// request was not admitted.
    pub async fn write_hedged<T, R>(
        self: &Arc<Self>,
        term: Option<TermId>,
        bounds: WriteBounds,
        hedge: HedgeBounds,
        first: R,
        held: impl Fn() -> Option<Instant>,
        second: impl FnOnce() -> R,
    ) -> Result<Hedged<T>, NotLeader>
    where
        R: Future<Output = kube::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        // The wait for the gate is the first request's; its hedge is timed from its start.
        if !self.wait_leading_in(term, bounds.gate_wait).await {
            return Err(NotLeader);
        }
        let at_once = WriteBounds {
            gate_wait: Duration::ZERO,
            ..bounds
        };
        let mut first = self.spawn_write(term, at_once, first);
        let unhedged = |outcome: RequestAnswer<T>| {
            outcome.map(|answer| Hedged {
                answer,
                answered_by: Attempt::First,
                hedged: false,
                unsettled: None,
            })
        };
        let mut due = Instant::now() + hedge.after;
        loop {
            tokio::select! {
                joined = &mut first => return unhedged(settled(joined)),
                () = tokio::time::sleep_until(due) => {}
            }
            match held() {
                Some(until) if until + hedge.after > due => due = until + hedge.after,
                _ => break,
            }
        }
        let in_flight = self.writes_in_flight();
        if in_flight > hedge.max_in_flight || !self.is_leading() {
            debug!(
                in_flight,
                leading = self.is_leading(),
                "a write unanswered past the hedge bound is not hedged"
            );
            return unhedged(settled(first.await));
        }
        debug!(in_flight, "a write unanswered past the hedge bound: hedged");
        let mut second = self.spawn_write(term, at_once, second());
        let (attempt, outcome) = tokio::select! {
            joined = &mut first => (Attempt::First, settled(joined)),
            joined = &mut second => (Attempt::Hedge, settled(joined)),
        };
        let answered = |answered_by: Attempt, outcome: RequestAnswer<T>| {
            outcome.map(|answer| Hedged {
                answer,
                answered_by,
                hedged: true,
                unsettled: None,
            })
        };
        if matches!(outcome, Ok(Ok(_))) {
            let other = match attempt {
                Attempt::First => second,
                Attempt::Hedge => first,
            };
            let gate = self.clone();
            return answered(attempt, outcome).map(|hedged| Hedged {
                unsettled: Some(tokio::spawn(async move {
                    let answered = matches!(settled(other.await), Ok(answer) if answered_by_the_server(&answer));
                    if !answered {
                        tokio::time::sleep(gate.write_grace()).await;
                    }
                })),
                ..hedged
            });
        }
        // The first to end failed: the other may still succeed.
        let (other, other_outcome) = match attempt {
            Attempt::First => (Attempt::Hedge, settled(second.await)),
            Attempt::Hedge => (Attempt::First, settled(first.await)),
        };
        if matches!(other_outcome, Ok(Ok(_))) {
            return answered(other, other_outcome);
        }
        match attempt {
            Attempt::First => answered(Attempt::First, outcome),
            Attempt::Hedge => answered(Attempt::First, other_outcome),
        }
    }

    /// One request through the gate, as its own task: it runs to its answer or its budget
    /// whether or not anyone still waits for it.
    fn spawn_write<T, R>(
        self: &Arc<Self>,
        term: Option<TermId>,
        bounds: WriteBounds,
        request: R,
    ) -> JoinHandle<RequestAnswer<T>>
    where
        R: Future<Output = kube::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let gate = self.clone();
        tokio::spawn(async move { gate.write_in(term, bounds, request).await })
    }
}

/// A request's task ended: its outcome (a task that panicked is a request that failed).
fn settled<T>(joined: Result<RequestAnswer<T>, JoinError>) -> RequestAnswer<T> {
    joined.unwrap_or_else(|join| {
        Ok(Err(kube::Error::Service(Box::new(std::io::Error::other(
            format!("a write's task ended: {join}"),
        )))))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::Timing;

    const BOUNDS: WriteBounds = WriteBounds {
        gate_wait: Duration::from_secs(2),
        timeout: Duration::from_secs(30),
    };
    const HEDGE: HedgeBounds = HedgeBounds {
        after: Duration::from_millis(300),
        max_in_flight: 4,
    };

    type Boxed = std::pin::Pin<Box<dyn Future<Output = kube::Result<&'static str>> + Send>>;

    fn leading() -> Arc<LeaderGate> {
        let gate = Arc::new(LeaderGate::elected(Timing::DEFAULT));
        gate.renewed(Instant::now());
        gate
    }

    /// A request answering `answer` after `after` (`None`: never).
    async fn request(
        after: Option<Duration>,
        answer: kube::Result<&'static str>,
    ) -> kube::Result<&'static str> {
        match after {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
        answer
    }

    fn server_error() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("injected", "InternalError")
                .with_code(500)
                .boxed(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_answered_within_the_bound_is_never_hedged() {
        let gate = leading();
        let hedges = AtomicUsize::new(0);
        let started = Instant::now();
        let written = gate
            .write_hedged(
                None,
                BOUNDS,
                HEDGE,
                request(Some(Duration::from_millis(299)), Ok("first")),
                || None,
                || {
                    hedges.fetch_add(1, Ordering::SeqCst);
                    request(Some(Duration::ZERO), Ok("hedge"))
                },
            )
            .await
            .unwrap();
        assert_eq!(written.answer.unwrap(), "first");
        assert!(!written.hedged);
        assert_eq!(hedges.load(Ordering::SeqCst), 0);
        assert_eq!(started.elapsed(), Duration::from_millis(299));
        assert_eq!(gate.writes_in_flight(), 0);
    }

    /// A stalled first request: the hedge goes out at the bound, its answer is taken, and the
    /// first runs on, counted in flight, to its own answer: the release waits for it.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_write_takes_the_hedges_answer_and_the_gate_counts_both() {
        let gate = leading();
        let started = Instant::now();
        let written = gate
            .write_hedged(
                None,
                BOUNDS,
                HEDGE,
                request(Some(Duration::from_secs(3)), Ok("first")),
                || None,
                || request(Some(Duration::from_millis(5)), Ok("hedge")),
            )
            .await
            .unwrap();
        assert_eq!(written.answer.unwrap(), "hedge");
        assert_eq!(written.answered_by, Attempt::Hedge);
        assert!(written.hedged);
        assert_eq!(started.elapsed(), Duration::from_millis(305));
        assert_eq!(gate.writes_in_flight(), 1, "the first request runs on");
        written
            .unsettled
            .expect("the first request runs on")
            .await
            .unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(3),
            "told when it ends"
        );
        gate.close();
        gate.writes_settled().await;
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(3),
            "settled when the first request answered, not before, and not a write grace later"
        );
    }

    /// A first request answered 429 waits the `Retry-After` the server gave (here until 1 s):
    /// no hedge meanwhile; its retry is hedged like any request, once unanswered for the bound.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_write_is_hedged_only_past_its_retry_after() {
        for (first_answers, hedged_at) in [
            (Duration::from_millis(1_200), None),
            (Duration::from_secs(3), Some(Duration::from_millis(1_300))),
        ] {
            let gate = leading();
            let started = Instant::now();
            let retry_at = started + Duration::from_secs(1);
            let sent = std::sync::Mutex::new(None);
            let written = gate
                .write_hedged(
                    None,
                    BOUNDS,
                    HEDGE,
                    request(Some(first_answers), Ok("first")),
                    || Some(retry_at),
                    || {
                        *sent.lock().unwrap() = Some(started.elapsed());
                        request(Some(Duration::from_millis(5)), Ok("hedge"))
                    },
                )
                .await
                .unwrap();
            assert_eq!(*sent.lock().unwrap(), hedged_at);
            assert_eq!(written.hedged, hedged_at.is_some());
        }
    }

    /// No hedge while many writes are in flight, nor when the gate is closed at the bound:
    /// the first request's answer is waited for.
    #[tokio::test(start_paused = true)]
    async fn no_hedge_under_load_or_with_the_gate_closed() {
        for case in ["load", "gate"] {
            let gate = leading();
            let others: Vec<_> = if case == "load" {
                (0..HEDGE.max_in_flight)
                    .map(|_| gate.admit(BOUNDS.timeout).unwrap())
                    .collect()
            } else {
                Vec::new()
            };
            let doubter = gate.clone();
            let started = Instant::now();
            let first: Boxed = Box::pin(async move {
                if case == "gate" {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    doubter.doubt();
                }
                request(Some(Duration::from_secs(2)), Ok("first")).await
            });
            let written = gate
                .write_hedged(
                    None,
                    BOUNDS,
                    HEDGE,
                    first,
                    || None,
                    || -> Boxed { panic!("{case}: hedged") },
                )
                .await
                .unwrap();
            assert_eq!(written.answer.unwrap(), "first", "{case}");
            assert!(!written.hedged, "{case}");
            let doubted = if case == "gate" { 100 } else { 0 };
            assert_eq!(
                started.elapsed(),
                Duration::from_millis(2_000 + doubted),
                "{case}: the first request's answer"
            );
            drop(others);
        }
    }

    /// The hedge failing first does not fail the write while the first request may still
    /// succeed; when both fail, the first request's failure is the answer.
    #[tokio::test(start_paused = true)]
    async fn a_failed_request_waits_for_the_other() {
        let gate = leading();
        let written = gate
            .write_hedged(
                None,
                BOUNDS,
                HEDGE,
                request(Some(Duration::from_secs(1)), Ok("first")),
                || None,
                || request(Some(Duration::from_millis(5)), Err(server_error())),
            )
            .await
            .unwrap();
        assert_eq!(written.answer.unwrap(), "first");
        assert_eq!(written.answered_by, Attempt::First);

        let written = gate
            .write_hedged(
                None,
                BOUNDS,
                HEDGE,
                request(
                    Some(Duration::from_secs(1)),
                    Err(kube::Error::Api(
                        kube::core::Status::failure("the first's own", "Conflict")
                            .with_code(409)
                            .boxed(),
                    )),
                ),
                || None,
                || request(Some(Duration::from_millis(5)), Err(server_error())),
            )
            .await
            .unwrap();
        assert!(
            matches!(&written.answer, Err(kube::Error::Api(status)) if status.code == 409),
            "{:?}",
            written.answer
        );
    }

    /// Each request has its own budget from its own start, both ending before another
    /// replica could take the Lease over: a hedge sent late in the term is abandoned with it.
    #[tokio::test(start_paused = true)]
    async fn each_request_is_bounded_by_the_lease() {
        let gate = leading();
        let renewed = Instant::now();
        tokio::time::sleep(Duration::from_secs(9)).await;
        let written = gate
            .write_hedged(
                None,
                BOUNDS,
                HEDGE,
                request(None, Ok("first")),
                || None,
                || request(None, Ok("hedge")),
            )
            .await
            .unwrap();
        assert!(written.hedged);
        let error = written.answer.unwrap_err().to_string();
        assert!(error.contains("no answer within"), "{error}");
        let last_landing = renewed + Timing::DEFAULT.renew_deadline + Timing::DEFAULT.write_grace();
        assert_eq!(Instant::now(), last_landing);
        assert_eq!(gate.writes_in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_that_does_not_lead_sends_neither() {
        let gate = Arc::new(LeaderGate::elected(Timing::DEFAULT));
        let written = gate
            .write_hedged(
                None,
                BOUNDS,
                HEDGE,
                request(Some(Duration::ZERO), Ok("first")),
                || None,
                || request(Some(Duration::ZERO), Ok("hedge")),
            )
            .await;
        assert!(matches!(written, Err(NotLeader)));
    }
}
