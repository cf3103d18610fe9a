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

pub mod bindings;
pub mod cluster;
pub mod document;
pub mod evaluate;
pub mod wall;

use serde::Serialize;

pub use cluster::{ClusterView, DnsView, HoleView, inspect_cluster};
pub use evaluate::{EvaluateInput, Evaluation, Outcome, StaticCluster, Summary, evaluate};
pub use wall::{WallView, render_wall};

/// The editors of the page.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Field {
    Settings,
    Baselines,
    HostError,
    /// The cluster objects (Namespaces, NetworkPolicies, the DNS Service...).
    Objects,
    Request,
    /// The baseline picked for the wall.
    Baseline,
    /// The namespace of the wall.
    Namespace,
    /// The text given to [`to_yaml`].
    Document,
}

impl Field {
    pub fn label(self) -> &'static str {
        match self {
            Self::Settings => "settings",
            Self::Baselines => "baselines",
            Self::HostError => "host error",
            Self::Objects => "objects",
            Self::Request => "request",
            Self::Baseline => "baseline",
            Self::Namespace => "namespace",
            Self::Document => "document",
        }
    }
}

/// A problem with one editor's content, shown next to it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FieldError {
    pub field: Field,
    pub message: String,
}

/// JSON (an example as stored) written as YAML for an editor; blank stays blank.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Converted {
    pub text: Option<String>,
    pub errors: Vec<FieldError>,
}

pub fn to_yaml(text: &str) -> Converted {
    let converted = document::parse(text).and_then(|value| match value {
        None => Ok(String::new()),
        Some(value) => document::to_yaml(&value),
    });
    match converted {
        Ok(text) => Converted {
            text: Some(text),
            errors: Vec::new(),
        },
        Err(message) => Converted {
            text: None,
            errors: vec![FieldError {
                field: Field::Document,
                message,
            }],
        },
    }
}

/// An answer as the JSON the page reads. Serializing these types cannot fail (strings,
/// numbers and lists only); if it ever did, the page still gets an error it can show.
pub fn to_json<T: Serialize>(answer: &T) -> String {
    serde_json::to_string(answer).unwrap_or_else(|error| {
        serde_json::json!({
            "outcome": "inputError",
            "errors": [{"field": "request", "message": format!("internal error: {error}")}],
        })
        .to_string()
    })
}

#[cfg(test)]
mod tests;
