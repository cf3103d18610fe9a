//! What each program decides from the cluster's state: the admission policy's verdicts
//! ([`admission`]) and the reconciler's plan ([`plan`]), side by side, neither importing the
//! other.

pub mod admission;
pub mod plan;
