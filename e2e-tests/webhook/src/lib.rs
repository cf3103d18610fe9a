//! A stand-in for Kubewarden's policy-server, for tests that need the admission policy in a
//! real API server's admission chain (the policy-server itself cannot be built here): a
//! validating admission webhook over HTTPS that runs the built `policy.wasm` in the runner's
//! waPC host (wasmtime, as the policy-server embeds it) and answers the module's host calls
//! from the live API server.
//!
//! - [`review`]: the AdmissionReview in, the AdmissionReview out, as the policy-server
//!   translates them (pure).
//! - [`context`]: what the host calls can ask, read from the API server per review.
//! - [`policy`]: the module loaded and checked, one evaluation per review.
//! - [`tls`], [`server`]: the serving certificate and the HTTPS routes.
//!
//! The binary is `nsb-policy-server`; the tests spawn it and register it with
//! `namespace_baseline_testkit::kubewarden` (which renders the webhook configuration the way
//! Kubewarden's controller does), so that they never compile wasmtime themselves.

pub mod context;
pub mod policy;
pub mod review;
pub mod server;
pub mod tls;
