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
    LiveBaselines, MAX_HOLES_LISTED, opened_breaches, review_namespace_update,
    review_policy_create, review_policy_delete, review_policy_holes, review_policy_update,
    walling_guard,
};
pub use settings::{CONTROL_PLANE_USERS, Gate, HolesSetting, PolicySettings};

use crate::selector::LabelSelector;
use crate::spec::Mode;

/// The outcome of a review. A denial carries the message shown to the requester.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Allowed, with warnings for the requester (the API server returns them as `Warning`
    /// headers; kubectl prints each as `Warning: ...`).
    Warn(Vec<String>),
    Deny(String),
}

impl Verdict {
    pub fn is_allowed(&self) -> bool {
        !matches!(self, Self::Deny(_))
    }

    /// The warnings an accepted request carries.
    pub fn warnings(&self) -> &[String] {
        match self {
            Self::Warn(warnings) => warnings,
            Self::Allow | Self::Deny(_) => &[],
        }
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

/// What the policy reads from the cluster through the policy-server's host capabilities.
/// Each read is made at most once per request, and only when the answer can change the
/// verdict.
pub trait BaselineSource {
    /// The live NamespaceBaselines, when the settings ask for them (`contextAware`).
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String>;

    /// The Namespace `name` (its name and labels), read for the holes check: only for a
    /// NetworkPolicy that opens a `World` or `Cluster` hole, to learn whether its namespace
    /// is walled. A namespace that does not exist is an error like any other failed read.
    fn namespace(&self, name: &str) -> Result<ObjectView, String>;
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
        // The wall's own rules first; what they allow may still open a hole in it.
        let (verdict, opened) = match (operation, new, old) {
            ("CREATE", Some(new), _) => (review_policy_create(new), Some((new, None))),
            ("UPDATE", Some(new), Some(old)) => {
                (review_policy_update(old, new), Some((new, Some(old))))
            }
            ("DELETE", _, Some(old)) => (review_policy_delete(old, live), None),
            _ => (Verdict::Allow, None),
        };
        match (verdict, opened) {
            (Verdict::Allow, Some((new, old))) if gate.holes != HolesSetting::Ignore => {
                let namespace = if request.namespace.is_empty() {
                    new.metadata.namespace.as_str()
                } else {
                    request.namespace.as_str()
                };
                let old = old.and_then(ObjectView::network_policy);
                match new.network_policy() {
                    Some(new) => review_policy_holes(
                        &new,
                        old.as_ref(),
                        gate.holes,
                        namespace,
                        || source.namespace(namespace),
                        &gate.guards,
                        live,
                    ),
                    // A spec that is not a NetworkPolicy's opens nothing we can name.
                    None => Verdict::Allow,
                }
            }
            (verdict, _) => verdict,
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
