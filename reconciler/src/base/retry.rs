//! Retries: capped exponential backoff with jitter for transient failures, counted per object
//! and reset by the first success; the watches' reconnections; the clients' retry of the
//! answers that ask for one (429, 503, 504), which tells a write it was asked to slow down,
//! and of the failures of a request that may be sent twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use namespace_baseline_leader::WriteBounds;
use tokio::time::{Instant, Sleep};
use tower::BoxError;
use tower::retry::Policy;

/// How long a write waits for a closed gate to reopen (a failed lease renewal is retried
/// within a fraction of this) before it fails as `NotLeader`, and its upper bound: a
/// connection that stops answering is a transient failure, not a reconcile stuck for the
/// client's 295 s read timeout. (A leader's writes are also bounded by its lease.) The
/// memory of an apply in flight outlasts it (`view/unseen_writes.rs`, `lifetime::IN_FLIGHT`).
pub const WRITE_BOUNDS: WriteBounds = WriteBounds {
    gate_wait: Duration::from_secs(2),
    timeout: Duration::from_secs(30),
};

/// Retry delays: `base * 2^(attempt-1)` capped at `cap`, then "equal jitter" (a random
/// point in the upper half), so that many failing objects do not retry in lockstep.
#[derive(Debug)]
pub struct Retries {
    base: Duration,
    cap: Duration,
    /// A random point in `[0, 1)`.
    jitter: fn() -> f64,
    attempts: Mutex<HashMap<String, u32>>,
}

impl Default for Retries {
    fn default() -> Self {
        // A retry writes only what is still not in place, so retrying soon is cheap, and a
        // repair waiting behind a long backoff is a wall left open; under a sustained outage
        // one baseline costs one attempt every 30 s.
        Self::new(Duration::from_millis(200), Duration::from_secs(30))
    }
}

impl Retries {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            jitter: rand::random::<f64>,
            attempts: Mutex::default(),
        }
    }

    /// Without jitter (for tests): every delay is the lower bound.
    pub fn without_jitter(self) -> Self {
        Self {
            jitter: || 0.0,
            ..self
        }
    }

    /// Records one more failure of `key` and returns how long to wait before retrying.
    pub fn failed(&self, key: &str) -> Duration {
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
            let count = attempts.entry(key.to_owned()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        self.delay(attempt, (self.jitter)())
    }

    /// Forgets the failures of `key`: its next failure starts again from `base`.
    pub fn succeeded(&self, key: &str) {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// How many failures in a row `key` has had.
    pub fn attempts(&self, key: &str) -> u32 {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// The delay for the `attempt`-th failure in a row, with `jitter` in `[0, 1)`.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(31);
        let ceiling = self
            .base
            .checked_mul(1u32 << exponent)
            .map_or(self.cap, |delay| delay.min(self.cap));
        let half = ceiling / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// How the watches reconnect after an error: the first error at once (a stream that was
/// working and got cut, the usual case, is resumed without a pause, as client-go's reflector
/// resumes a watch that lived: a wall deleted during the pause would wait for it), then
/// capped exponential backoff with equal jitter, from [`WatchBackoff::BASE`] to
/// [`WatchBackoff::CAP`]; reset by the watch's next answer (`watch_errors::watch_events`).
///
/// Not kube's default (client-go's: 0.8 s doubling up to 30 s, reset only after 2 minutes):
/// every failed reconnection during an outage doubles the wait, so the watches would come
/// back long after the API server did, and a wall deleted meanwhile would stay down. A few
/// watches retrying every 5 s at most are no burden for a recovering API server.
#[derive(Debug)]
pub struct WatchBackoff {
    attempt: u32,
    retries: Retries,
}

impl WatchBackoff {
    pub const BASE: Duration = Duration::from_millis(500);
    pub const CAP: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            attempt: 0,
            retries: Retries::new(Self::BASE, Self::CAP),
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let retried = self.attempt;
        self.attempt = self.attempt.saturating_add(1);
        if retried == 0 {
            return Some(Duration::ZERO);
        }
        Some(self.retries.delay(retried, (self.retries.jitter)()))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Tells a write that the API server answered its request `429 Too Many Requests`, and
/// until when the client's retry ([`ServerRetry`]) waits the `Retry-After` it gave: the
/// server asked the client to slow down, so the write is not hedged meanwhile
/// (reconcile/writes.rs; a second request would be the opposite of slowing down). Carried as
/// an extension of the request.
#[derive(Debug, Clone, Default)]
pub struct Throttled(Arc<Mutex<Option<Instant>>>);

impl Throttled {
    /// When the retry of the last 429 goes out; `None`: no 429 yet.
    pub fn retry_at(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
    }
}

/// Marks a write that may be sent again with one outcome (a forced server-side apply of a
/// whole object, a merge patch of a whole status): [`ServerRetry`] also retries it, as it
/// retries every read (a list, a watch), after a `500` or when it got no answer (a dropped
/// connection), which it leaves to the caller for any other write (an Event created twice is
/// two Events).
#[derive(Debug, Clone, Copy)]
pub struct Idempotent;

/// The clients' retry: kube's server-aware policy for 429, 503 and 504 (exponential backoff
/// from 5 ms), except that a 429's `Retry-After` is waited here, on tokio's clock (kube
/// compares it with the standard clock's, which a paused test clock leaves behind), up to
/// [`ServerRetry::THROTTLED`] times, and the request's [`Throttled`] is told until when; and
/// for a read (GET) or an [`Idempotent`] write, a `500` or no answer at all, up to
/// [`ServerRetry::FAILURES`] times, [`ServerRetry::PAUSE`] apart and doubling: such a write
/// failing at once would otherwise fail its whole reconcile, retried only after the
/// baseline's backoff (which grows with every failed write of a pass), and a watch resuming
/// after a cut would wait the watches' backoff.
#[derive(Clone)]
pub struct ServerRetry {
    kube: RetryPolicy,
    throttled: u32,
    failures: u32,
}

impl ServerRetry {
    /// The most 429s one request waits out (kube's own limit of retries).
    pub const THROTTLED: u32 = 15;
    /// The most failures of an idempotent request retried.
    pub const FAILURES: u32 = 3;
    pub const PAUSE: Duration = Duration::from_millis(20);
}

impl Default for ServerRetry {
    fn default() -> Self {
        Self {
            kube: RetryPolicy::server_retry(),
            throttled: 0,
            failures: 0,
        }
    }
}

/// The `Retry-After` of a 429, in whole seconds, as the API server sends it.
fn retry_after<Res>(result: &Result<Response<Res>, BoxError>) -> Option<Duration> {
    let response = result.as_ref().ok()?;
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let seconds = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    Some(Duration::from_secs(seconds.trim().parse().ok()?))
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ServerRetry {
    type Future = Sleep;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Sleep> {
        let failed = match result {
            Ok(response) => response.status() == StatusCode::INTERNAL_SERVER_ERROR,
            Err(_) => true,
        };
        if failed {
            let idempotent = request.method() == Method::GET
                || request.extensions().get::<Idempotent>().is_some();
            if !idempotent || self.failures >= Self::FAILURES {
                return None;
            }
            let pause = Self::PAUSE * (1 << self.failures);
            self.failures += 1;
            return Some(tokio::time::sleep(pause));
        }
        let retry = match retry_after(result) {
            Some(_) if self.throttled >= Self::THROTTLED => return None,
            Some(delay) => {
                self.throttled += 1;
                Some(tokio::time::sleep(delay))
            }
            None => self.kube.retry(request, result),
        };
        if let (Ok(response), Some(retry)) = (&*result, &retry)
            && response.status() == StatusCode::TOO_MANY_REQUESTS
            && let Some(throttled) = request.extensions().get::<Throttled>()
        {
            throttled.set(retry.deadline());
        }
        retry
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        Policy::<Request<Body>, Response<Res>, BoxError>::clone_request(&mut self.kube, request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn retries() -> Retries {
        Retries::new(Duration::from_secs(1), Duration::from_secs(60))
    }

    #[rstest]
    #[case(1, 0.0, 500)]
    #[case(1, 0.999, 999)]
    #[case(2, 0.0, 1_000)]
    #[case(3, 0.0, 2_000)]
    #[case(7, 0.0, 30_000)]
    #[case(8, 0.0, 30_000)]
    #[case(40, 0.5, 45_000)]
    fn delays_grow_exponentially_up_to_the_cap(
        #[case] attempt: u32,
        #[case] jitter: f64,
        #[case] millis: u64,
    ) {
        assert_eq!(
            retries().delay(attempt, jitter).as_millis(),
            u128::from(millis)
        );
    }

    #[test]
    fn watch_reconnections_start_at_once_back_off_to_five_seconds_at_most_and_reset() {
        use kube::runtime::utils::Backoff as _;
        let mut backoff = WatchBackoff::default();
        let delays: Vec<Duration> = backoff.by_ref().take(12).collect();
        assert_eq!(delays[0], Duration::ZERO, "a cut stream is resumed at once");
        assert!((Duration::from_millis(250)..=WatchBackoff::BASE).contains(&delays[1]));
        assert!(
            delays.iter().all(|delay| *delay <= WatchBackoff::CAP),
            "{delays:?}"
        );
        assert!(delays[11] >= WatchBackoff::CAP / 2, "{delays:?}");
        // An outage of any length costs at most 5 s once the API server is back.
        let outage: Duration = delays.iter().sum();
        assert!(outage < Duration::from_secs(60), "{outage:?}");
        backoff.reset();
        assert_eq!(backoff.next(), Some(Duration::ZERO));
        assert!(backoff.next().unwrap() <= WatchBackoff::BASE);
    }

    #[test]
    fn attempts_are_counted_per_object_and_reset_by_success() {
        let retries = retries();
        let first = retries.failed("a");
        let second = retries.failed("a");
        retries.failed("b");
        assert_eq!(retries.attempts("a"), 2);
        assert_eq!(retries.attempts("b"), 1);
        assert!((Duration::from_millis(500)..Duration::from_secs(1)).contains(&first));
        assert!((Duration::from_secs(1)..Duration::from_secs(2)).contains(&second));
        retries.succeeded("a");
        assert_eq!(retries.attempts("a"), 0);
        assert!(retries.failed("a") < Duration::from_secs(1));
    }
}
