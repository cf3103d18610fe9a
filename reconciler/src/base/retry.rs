//! Capped exponential backoff with jitter for transient failures, counted per object and
//! reset by the first success.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

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

/// How the watches reconnect after an error: capped exponential backoff with equal jitter,
/// from [`WatchBackoff::BASE`] to [`WatchBackoff::CAP`], reset by the stream's next success.
///
/// kube's default (client-go's: 0.8 s doubling up to 30 s, reset only after 2 minutes)
/// left the reconciler blind for up to 30 s after an API server restart: every failed
/// reconnection during the outage doubled the wait, so the watches came back long after the
/// API server did, and a wall deleted meanwhile stayed down. Three watches retrying every
/// 5 s at most are no burden for a recovering API server.
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
        self.attempt = self.attempt.saturating_add(1);
        Some(self.retries.delay(self.attempt, (self.retries.jitter)()))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The controller's backoff on its merged trigger stream: none. kube's `Controller` wraps
/// the union of its trigger streams in a backoff of its own (client-go's, up to 30 s): an
/// error from any one watch then paused every trigger, the healthy watches' included, and
/// while paused no watch was polled, so none could reconnect; the pause doubled with every
/// error of an outage. Each watch already backs off on its own ([`WatchBackoff`]), so the
/// errors reaching the merged stream are spaced already.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTriggerBackoff;

impl Iterator for NoTriggerBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // `None` would end the trigger stream: never.
        Some(Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for NoTriggerBackoff {
    fn reset(&mut self) {}
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
    fn watch_reconnections_back_off_to_five_seconds_at_most_and_reset() {
        use kube::runtime::utils::Backoff as _;
        let mut backoff = WatchBackoff::default();
        let delays: Vec<Duration> = backoff.by_ref().take(12).collect();
        assert!((Duration::from_millis(250)..=WatchBackoff::BASE).contains(&delays[0]));
        assert!(
            delays.iter().all(|delay| *delay <= WatchBackoff::CAP),
            "{delays:?}"
        );
        assert!(delays[11] >= WatchBackoff::CAP / 2, "{delays:?}");
        // An outage of any length costs at most 5 s once the API server is back.
        let outage: Duration = delays.iter().sum();
        assert!(outage < Duration::from_secs(60), "{outage:?}");
        backoff.reset();
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
