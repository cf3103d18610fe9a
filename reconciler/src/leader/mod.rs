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
//!   the 15 s others wait after they *saw* that renewal), closes at the first failed renewal
//!   until one succeeds, and bounds every write so that it is abandoned before the lease can
//!   pass to another replica.

mod election;
mod gate;

pub use election::{Elector, KubeLeases, LeaseStore, StoreError};
pub use gate::LeaderGate;

use std::time::Duration;

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

impl Timing {
    pub const DEFAULT: Self = Self {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };

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
