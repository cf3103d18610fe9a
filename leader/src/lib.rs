//! Leader election on a `coordination.k8s.io/v1` Lease, and the gate every write goes through.
//!
//! At most one replica may write at any time. Two rules make that hold by construction,
//! whatever the network does to the requests (the rules of client-go's `leaderelection`):
//!
//! - Every Lease write (acquire, renew, release) is conditional on the `resourceVersion` this
//!   replica last read, so a write based on a stale read fails with 409 and changes nothing.
//!   A replica takes a Lease over only after it has itself seen the Lease unchanged for the
//!   lease duration, by its own monotonic clock, never by comparing `renewTime` with its own
//!   wall clock ([`election`]).
//! - The holder stops writing before anyone else may take over: its [`LeaderGate`] opens for
//!   the renew deadline after the *start* of its last successful renewal (10 s, shorter than
//!   the 15 s others wait after they *saw* that renewal), closes at a conflicting renewal
//!   until one succeeds, and bounds every write so that it is abandoned before the lease can
//!   pass to another replica.
//! - A Lease nobody holds is taken only when no write of its last holder can still land:
//!   a Lease its holder released is free at once, because the holder emptied it only after
//!   its last write was answered (or abandoned a write grace before); a *missing* Lease is
//!   created only after this replica has seen it missing for the lease duration, since a
//!   deleted Lease says nothing about its holder's writes.

//!
//! The rules, in full: README.md beside this crate.

mod election;
mod gate;
mod hedge;
mod write;

pub use election::{Elector, KubeLeases, LeaseStore, RELEASE_BUDGET, StoreError};
pub use gate::{InFlightWrite, LeaderGate, TermId};
pub use hedge::{Attempt, HedgeBounds, Hedged};
pub use write::{NotLeader, WriteBounds};

use std::time::Duration;

/// The longest a round's delay gets with its jitter ([`election`] waits ±10 %).
const MAX_JITTER: f64 = 1.1;

/// The shortest write grace the clocks may leave ([`Timing::write_grace`]: half the time
/// between the holder's gate closing and the earliest takeover). A write admitted just before
/// the gate closes has the write grace to be answered, and the other half covers clocks that
/// run at slightly different rates and the request's transit: a grace of a few milliseconds
/// would abandon most such writes and leave no margin at all.
pub const MIN_WRITE_GRACE: Duration = Duration::from_secs(1);

/// The election's clocks, as client-go's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a standby waits, after it last saw the Lease change, before it takes over.
    pub lease_duration: Duration,
    /// How long after the start of its last successful renewal the holder may write.
    pub renew_deadline: Duration,
    /// How often the holder renews.
    pub retry_period: Duration,
}

/// Clocks the election cannot keep its promises with (client-go refuses them too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error(
        "the lease duration must be a whole number of seconds, at least 1 (the Lease records seconds); got {0:?}"
    )]
    LeaseDuration(Duration),
    #[error("the renew deadline ({0:?}) must be longer than zero: the leader could never write")]
    NoRenewDeadline(Duration),
    #[error(
        "the renew deadline ({renew_deadline:?}) must end at least twice the minimum write grace ({MIN_WRITE_GRACE:?}) before the lease duration ({lease_duration:?}): the write grace, half their difference, is {write_grace:?}, and a leader's last write must end within it, a margin as long again before a standby may take the Lease over"
    )]
    RenewDeadline {
        lease_duration: Duration,
        renew_deadline: Duration,
        write_grace: Duration,
    },
    #[error(
        "the retry period ({retry_period:?}, up to {jittered:?} with its 10 % jitter) must be shorter than the renew deadline ({renew_deadline:?}): the leader must renew at least once before its writes stop"
    )]
    RetryPeriod {
        retry_period: Duration,
        jittered: Duration,
        renew_deadline: Duration,
    },
}

impl Timing {
    pub const DEFAULT: Self = Self {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };

    /// Clocks checked as client-go checks them, and stricter: the renew deadline leaves a
    /// write grace of at least [`MIN_WRITE_GRACE`] (and a margin as long) before the lease
    /// duration, and the leader renews (jitter included) within the renew deadline.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, TimingError> {
        let timing = Self {
            lease_duration,
            renew_deadline,
            retry_period,
        };
        if lease_duration < Duration::from_secs(1) || lease_duration.subsec_nanos() != 0 {
            return Err(TimingError::LeaseDuration(lease_duration));
        }
        if renew_deadline.is_zero() {
            return Err(TimingError::NoRenewDeadline(renew_deadline));
        }
        let write_grace = timing.write_grace();
        if write_grace < MIN_WRITE_GRACE {
            return Err(TimingError::RenewDeadline {
                lease_duration,
                renew_deadline,
                write_grace,
            });
        }
        let jittered = retry_period.mul_f64(MAX_JITTER);
        if retry_period.is_zero() || jittered >= renew_deadline {
            return Err(TimingError::RetryPeriod {
                retry_period,
                jittered,
                renew_deadline,
            });
        }
        Ok(timing)
    }

    /// How long after the gate closes a write already under way may still take: half the
    /// time between the gate closing and the earliest takeover, the other half a margin for
    /// clocks that run at slightly different rates and for the request's own transit.
    pub fn write_grace(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_deadline) / 2
    }

    /// The Lease's `leaseDurationSeconds`.
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// This replica's holder identity: `POD_NAME`, or the hostname with a random suffix.
pub fn identity(pod_name: Option<String>) -> String {
    pod_name.filter(|name| !name.is_empty()).unwrap_or_else(|| {
        let host = hostname::get()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "reconciler".to_owned());
        format!("{host}-{:08x}", rand::random::<u32>())
    })
}

#[cfg(test)]
mod tests;

/// Puts a gate in the states its elector would, for the tests of a program that writes
/// through it (a standby, a leader, a leader whose renewal failed). Only with the
/// `test-support` feature: in a real process the elector alone moves the gate.
#[cfg(feature = "test-support")]
pub mod testing {
    use tokio::time::Instant;

    use crate::LeaderGate;

    /// A renewal started at `started` succeeded: the gate opens for the renew deadline.
    pub fn renewed(gate: &LeaderGate, started: Instant) {
        gate.renewed(started);
    }

    /// A renewal conflicted: writes wait until one succeeds.
    pub fn doubt(gate: &LeaderGate) {
        gate.doubt();
    }

    /// This replica is a known standby.
    pub fn stand_by(gate: &LeaderGate) {
        gate.stand_by();
    }
}
