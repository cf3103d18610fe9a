//! The enforcement probe: proves each Enforce baseline's wall on packets inside the cluster
//! and reports it as the `Enforced` condition (docs/design.md, "Enforced"). Opt-in
//! (`--probe-image`).
//!
//! - `agent`: the `probe` subcommand, run in the probe pods;
//! - `report`: what a probe pod writes to its termination message;
//! - `pods`: the probe pods' spec;
//! - `driver`: the rounds, while leading;
//! - `verdict`: what a round's reports mean;
//! - `results`: the last verdict per baseline, shared with the reconcile;
//! - `condition`: the condition, its Events and the gauge, set by the reconcile;
//! - `options`, `usage`: its flags, its cost (its metrics are `base::probe_metrics`, beside
//!   the others).

pub mod agent;
pub mod condition;
pub mod driver;
pub mod options;
pub mod pods;
pub mod report;
pub mod results;
pub mod usage;
pub mod verdict;

pub use options::ProbeOptions;
pub use results::Results;
