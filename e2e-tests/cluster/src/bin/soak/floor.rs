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

/// Soaks drawn for the spread of a soak's own p99.
const SOAKS: usize = 2_000;

/// The modelled client's repair latencies: their median and 99th percentile over many
/// repairs; and the p99 it would itself measure over a soak's `n` repairs (the nearest rank,
/// as the soak computes its own: at n = 150, the second largest), whose spread from soak to
/// soak is wide, since about 1 % of its repairs lie at or beyond a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub p50: Duration,
    pub p99: Duration,
    /// Over `n` repairs: the median of the p99, its 90th percentile, and the share of soaks
    /// whose p99 is at least `goal`.
    pub soak_p99_median: Duration,
    pub soak_p99_p90: Duration,
    pub soaks_at_goal: f64,
    /// The share of its repairs slower than `goal`: times a soak's `n`, how many such repairs
    /// a soak of that client has on average (a steadier comparison than a p99 set by the
    /// second-slowest repair).
    pub share_over_goal: f64,
}

/// The floor at fault probability `probability`, drawn from `seed`, with the spread of the
/// p99 over `n` repairs against `goal`.
pub fn floor(probability: f64, seed: u64, n: usize, goal: Duration) -> Floor {
    let model = Model {
        odds: Fault::odds_for_a_request(probability),
        rng: StdRng::seed_from_u64(seed),
    };
    model.floor(n, goal)
}

/// The value at quantile `p` of sorted `samples`, nearest rank.
fn nearest_rank(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

struct Model {
    odds: Vec<(Fault, f64)>,
    rng: StdRng,
}

impl Model {
    fn floor(mut self, n: usize, goal: Duration) -> Floor {
        let mut latencies: Vec<Duration> = (0..DRAWS).map(|_| self.write()).collect();
        latencies.sort();
        let n = n.max(1);
        let mut soaks: Vec<Duration> = (0..SOAKS)
            .map(|_| {
                let mut soak: Vec<Duration> = (0..n).map(|_| self.write()).collect();
                soak.sort();
                nearest_rank(&soak, 0.99)
            })
            .collect();
        soaks.sort();
        Floor {
            p50: nearest_rank(&latencies, 0.5),
            p99: nearest_rank(&latencies, 0.99),
            soak_p99_median: nearest_rank(&soaks, 0.5),
            soak_p99_p90: nearest_rank(&soaks, 0.9),
            soaks_at_goal: soaks.iter().filter(|p99| **p99 >= goal).count() as f64 / SOAKS as f64,
            share_over_goal: latencies.iter().filter(|latency| **latency > goal).count() as f64
                / DRAWS as f64,
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
    /// untouched. Over a soak's 150 repairs, that client's own p99 reaches 1.5 s in about a
    /// third of the soaks: two repairs of 150 that met two 429s or a stalled hedge suffice.
    #[test]
    fn the_floor_is_the_retry_after_of_a_429_at_the_soaks_faults() {
        let goal = Duration::from_millis(1500);
        let calm = floor(0.0, 1, 150, goal);
        assert_eq!((calm.p50, calm.p99), (Duration::ZERO, Duration::ZERO));
        assert_eq!(calm.soaks_at_goal, 0.0);
        let soak = floor(0.3, 1, 150, goal);
        assert_eq!(soak.p50, Duration::ZERO);
        assert_eq!(soak.p99, Duration::from_secs(1), "{soak:?}");
        assert_eq!(soak.soak_p99_median, Duration::from_secs(1), "{soak:?}");
        assert!(soak.soak_p99_p90 >= Duration::from_secs(2), "{soak:?}");
        assert!((0.25..0.5).contains(&soak.soaks_at_goal), "{soak:?}");
        // About 1 % of its repairs take longer than 1.5 s: a 429 and then another fault,
        // or a stall whose hedge is slow too; 1 or 2 of a soak's 150.
        assert!((0.005..0.015).contains(&soak.share_over_goal), "{soak:?}");
        assert_eq!(calm.share_over_goal, 0.0);
        assert_eq!(floor(0.3, 1, 150, goal), soak, "drawn from the seed");
    }
}
