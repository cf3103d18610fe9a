//! The floor the soak's own fault model puts under a repair's latency, so that the measured
//! p99 can be read against what no client could beat under the same faults (issue 38).
//!
//! The client modelled is the best one the model allows that keeps our rules: every request
//! answered at once unless faulted; a stalled write hedged at once (one hedge per write, the
//! hedge itself not hedged); any other failure retried at once, the hedge's too; a 429's
//! `Retry-After` honoured, nothing hedged while it runs (the server asked to slow down), the
//! retry after it a request like any other. The
//! faults are the fault proxy's own odds ([`Fault::odds_for_a_request`], [`STALL`],
//! [`RETRY_AFTER_SECONDS`]), drawn for many repairs from the soak's seed. What the model
//! does to the watches (a drift seen late because its watch was cut) is left out here: the
//! soak reports the repairs of drift made while the leader's policy watch was down apart.

use std::time::Duration;

use namespace_baseline_cluster_tests::faults::{Fault, RETRY_AFTER_SECONDS, STALL};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};

/// Repairs drawn: enough for a p99 stable to a few milliseconds.
const DRAWS: usize = 200_000;

/// The modelled client's repair latencies: their median and 99th percentile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub p50: Duration,
    pub p99: Duration,
}

/// The floor at fault probability `probability`, drawn from `seed`.
pub fn floor(probability: f64, seed: u64) -> Floor {
    let model = Model {
        odds: Fault::odds_for_a_request(probability),
        rng: StdRng::seed_from_u64(seed),
    };
    model.floor()
}

struct Model {
    odds: Vec<(Fault, f64)>,
    rng: StdRng,
}

impl Model {
    fn floor(mut self) -> Floor {
        let mut latencies: Vec<Duration> = (0..DRAWS).map(|_| self.write()).collect();
        latencies.sort();
        let at = |p: f64| latencies[((p * DRAWS as f64).ceil() as usize).clamp(1, DRAWS) - 1];
        Floor {
            p50: at(0.5),
            p99: at(0.99),
        }
    }

    /// The fault one request meets, if any.
    fn draw(&mut self) -> Option<Fault> {
        let mut point: f64 = self.rng.random();
        for (fault, chance) in &self.odds {
            if point < *chance {
                return Some(*fault);
            }
            point -= chance;
        }
        None
    }

    fn stall(&mut self) -> Duration {
        let (low, high) = STALL;
        low + (high - low).mul_f64(self.rng.random())
    }

    /// How long one write takes to its first success.
    fn write(&mut self) -> Duration {
        match self.draw() {
            Some(Fault::TooManyRequests) => self.retry_after() + self.write(),
            Some(Fault::InternalError | Fault::ServiceUnavailable | Fault::DropConnection) => {
                self.write()
            }
            Some(Fault::Stall) => {
                let stall = self.stall();
                stall.min(self.hedge())
            }
            // Not faulted (the watch-only faults never hit a write).
            _ => Duration::ZERO,
        }
    }

    /// How long a write's hedge takes to its first success: as a write, except that its own
    /// stall is waited out (one hedge per write).
    fn hedge(&mut self) -> Duration {
        match self.draw() {
            Some(Fault::TooManyRequests) => self.retry_after() + self.hedge(),
            Some(Fault::InternalError | Fault::ServiceUnavailable | Fault::DropConnection) => {
                self.hedge()
            }
            Some(Fault::Stall) => self.stall(),
            _ => Duration::ZERO,
        }
    }

    fn retry_after(&self) -> Duration {
        Duration::from_secs(RETRY_AFTER_SECONDS.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without faults the floor is nothing; at the soak's 30 %, about 7 % of writes meet a 429
    /// (some after retries) and wait its second: the p99 is that second, while the median is
    /// untouched.
    #[test]
    fn the_floor_is_the_retry_after_of_a_429_at_the_soaks_faults() {
        assert_eq!(
            floor(0.0, 1),
            Floor {
                p50: Duration::ZERO,
                p99: Duration::ZERO
            }
        );
        let soak = floor(0.3, 1);
        assert_eq!(soak.p50, Duration::ZERO);
        assert_eq!(soak.p99, Duration::from_secs(1), "{soak:?}");
        assert_eq!(floor(0.3, 1), soak, "drawn from the seed");
    }
}
