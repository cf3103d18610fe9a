//! What the admission policy decides. The policy (waPC) and the playground only parse and
//! translate; every verdict comes from here.

mod payload;
mod request;
mod rules;
mod settings;

use std::fmt;

use serde::Deserialize;

pub use payload::{check_settings, evaluate, read_request};
pub use request::{AdmissionRequest, GroupVersionKind, MetadataView, ObjectView, UserInfo};
pub use rules::{
    review_namespace_update, review_policy_create, review_policy_delete, review_policy_update,
};
pub use settings::{CONTROL_PLANE_USERS, Gate, PolicySettings};

use crate::selector::LabelSelector;
use crate::spec::Mode;

/// The outcome of a review. A denial carries the message shown to the requester.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
}

impl Verdict {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allow)
    }
}

/// A label that puts namespaces behind a wall, and the baseline it comes from when it was
/// read from the cluster rather than the policy's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub selector: LabelSelector,
    pub baseline: Option<String>,
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.baseline {
            Some(name) => write!(
                f,
                "NamespaceBaseline {name:?} (namespaceLabel {})",
                self.selector
            ),
            None => write!(f, "the guard label {} (policy settings)", self.selector),
        }
    }
}

/// The fields of a live NamespaceBaseline the policy reads through host capabilities.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct LiveBaseline {
    pub metadata: LiveBaselineMetadata,
    pub spec: LiveBaselineSpec,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct LiveBaselineMetadata {
    pub name: String,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveBaselineSpec {
    pub namespace_label: String,
    pub mode: Mode,
}

impl LiveBaseline {
    /// The guard this baseline enforces, if any. A baseline whose `namespaceLabel` does not
    /// parse guards nothing (the reconciler reports it; reading it as some other selector
    /// could wall in the wrong namespaces), and an `Audit` baseline only observes.
    pub fn guard(&self) -> Option<Guard> {
        if self.spec.mode == Mode::Audit {
            return None;
        }
        let selector = LabelSelector::parse(&self.spec.namespace_label).ok()?;
        Some(Guard {
            selector,
            baseline: Some(self.metadata.name.clone()),
        })
    }
}

/// `hedronite.io/v1alpha1` `NamespaceBaseline`, so the policy can list them with the
/// Kubewarden SDK's typed host capabilities.
impl k8s_openapi::Resource for LiveBaseline {
    const API_VERSION: &'static str = "hedronite.io/v1alpha1";
    const GROUP: &'static str = crate::identity::GROUP;
    const KIND: &'static str = crate::identity::KIND;
    const VERSION: &'static str = crate::identity::VERSION;
    const URL_PATH_SEGMENT: &'static str = "namespacebaselines";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for LiveBaseline {
    const LIST_KIND: &'static str = "NamespaceBaselineList";
}

/// Reads the live baselines, when the settings ask for them. Called at most once per
/// request, and only when the answer can change the verdict.
pub trait BaselineSource {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String>;
}

/// Reviews one admission request. Requests this policy does not guard, or cannot read, are
/// allowed: the policy stands only in front of the wall.
pub fn review(request: &AdmissionRequest, gate: &Gate, source: &dyn BaselineSource) -> Verdict {
    if gate.exempts(&request.user_info) {
        return Verdict::Allow;
    }
    let live = || {
        if gate.context_aware {
            source.baselines().map(Some)
        } else {
            Ok(None)
        }
    };
    let operation = request.operation.as_str();
    let (new, old) = (request.object.as_ref(), request.old_object.as_ref());
    if request.is_network_policy() {
        match (operation, new, old) {
            ("CREATE", Some(new), _) => review_policy_create(new),
            ("UPDATE", Some(new), Some(old)) => review_policy_update(old, new),
            ("DELETE", _, Some(old)) => review_policy_delete(old, live),
            _ => Verdict::Allow,
        }
    } else if request.is_namespace() {
        match (operation, new, old) {
            ("UPDATE", Some(new), Some(old)) => {
                review_namespace_update(old, new, &gate.guards, live)
            }
            _ => Verdict::Allow,
        }
    } else {
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests;
