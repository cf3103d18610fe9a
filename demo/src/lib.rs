//! What the demo and `nsb-manifests` share: reading manifests, comparing them as objects,
//! and applying them to a cluster with server-side apply, whatever their kind.

pub mod apply;
pub mod manifests;

use std::time::Instant;

/// Seconds since `start`, formatted for a log column: `[  12.3s]`.
pub fn stamp(start: Instant) -> String {
    format!("[{:>6.1}s]", start.elapsed().as_secs_f64())
}
