//! The editors of the page, and a problem with one editor's content: every answer names the
//! editor its errors belong to.

use serde::Serialize;

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
