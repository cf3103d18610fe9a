//! Namespace Baseline in the browser. The page sends what its editors hold; the answers come
//! from the same functions the admission policy and the reconciler run:
//!
//! - [`evaluate()`]: a request against settings and NamespaceBaselines, through the core's
//!   `admission::check_settings` (the policy's `validate_settings`) and
//!   `admission::evaluate` (the policy's `validate`), the baselines and Namespaces static
//!   lists;
//! - [`render_wall()`]: the NetworkPolicies the reconciler installs for a baseline in a
//!   namespace (the core's `wall::desired_wall`), as YAML;
//! - [`inspect_cluster()`]: the holes pasted NetworkPolicies open in walled namespaces (the
//!   core's `holes`) and each baseline's DNS door against a pasted DNS Service (the core's
//!   `doors::check_dns_objects`).
//!
//! Everything here is plain Rust, tested natively; [`bindings`] is the thin wasm-bindgen
//! layer the page imports. Nothing panics on bad input: every problem is a [`FieldError`]
//! naming the editor it belongs to.

// The layers, top to bottom: a module imports from its own layer or the ones below, never
// from above, and no files import each other in a circle (tests/layers.rs declares the order
// and checks both: `make layers`).

/// The functions the page imports (wasm-bindgen), each answer as JSON.
pub mod bindings;

/// The page's answers: a request's verdict, the wall, the cluster view, YAML for an editor.
mod answers;

/// What the editors hold, read: YAML and JSON documents, objects by kind, and which editor a
/// problem belongs to.
mod editors;

pub use answers::cluster::{ClusterView, DnsView, HoleView, inspect_cluster};
pub use answers::convert::{Converted, to_yaml};
pub use answers::evaluate::{EvaluateInput, Evaluation, Outcome, StaticCluster, Summary, evaluate};
pub use answers::wall::{WallView, render_wall};
pub use bindings::to_json;
pub use editors::field::{Field, FieldError};

#[cfg(test)]
mod tests;
