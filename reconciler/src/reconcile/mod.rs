//! One leadership term's controller, in kube-rs's shape: the watches feed
//! [`controller::reconcile`] and [`controller::error_policy`] with a shared
//! [`context::Context`]; every write goes through the leader gate ([`context`]); writes still
//! in flight after a short wait go on in the baseline's [`handoff`]; the status and Events
//! report the outcome. Beside it, the guard of the reconciler's own API door.

pub mod ahead;
pub mod api_door_guard;
pub mod context;
pub mod controller;
pub mod handoff;
pub mod probe;
pub mod reports;
pub mod state;
pub mod status;
pub mod watches;
pub mod writes;

#[cfg(test)]
mod reports_tests;
