//! What every layer uses and that uses nothing of the reconciler: the one [`error::Error`]
//! with its Permanent/Transient classification, the metrics, the retry and backoff
//! policies, the watches' errors, and the catching of panics.

pub mod baseline_gauges;
pub mod error;
pub mod metrics;
pub mod panics;
pub mod probe_metrics;
pub mod retry;
pub mod watch_errors;
