//! What the demo, `nsb-manifests` and the cluster tests share: reading manifests, comparing
//! them as objects, applying them to a cluster with server-side apply whatever their kind,
//! and kubeconfigs for the reconciler's ServiceAccount.

pub mod apply;
pub mod kubeconfig;
pub mod manifests;

use std::time::Instant;

/// Seconds since `start`, formatted for a log column: `[  12.3s]`.
pub fn stamp(start: Instant) -> String {
    format!("[{:>6.1}s]", start.elapsed().as_secs_f64())
}
