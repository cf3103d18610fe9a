//! What the admission policy decides. The policy (waPC) and the playground only parse and
//! translate; every verdict comes from here.
//!
//! The public types ([`AdmissionRequest`], [`PolicySettings`], [`LiveBaseline`], ...) own
//! their data; the policy's `validate` reads its payload into borrowed views of the same
//! shape instead ([`view`]), and its host answers as JSON text ([`HostCapabilities`]), and
//! both go through the same rules.

mod borrowed;
pub(crate) mod json;
mod netpol;
mod payload;
mod pods;
mod request;
mod rules;
mod settings;
mod view;

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubernetesSelector;
use serde::Deserialize;

pub use payload::{check_settings, evaluate, evaluate_in_host, read_request, settings_problem};
pub use pods::NETWORK_POLICY_NOT_FOUND;
pub use request::{AdmissionRequest, GroupVersionKind, MetadataView, ObjectView, UserInfo};
pub use rules::{LiveBaselines, MAX_HOLES_LISTED};
pub use settings::{
    ANONYMOUS_USER, CONTROL_PLANE_USERS, EVERYONE_GROUPS, Exemption, Gate, HolesSetting,
    PolicySettings, SettingsRef,
};
pub use view::Text;

use crate::selector::LabelSelector;
use crate::spec::Mode;
use view::{GuardRef, ObjectRef, RequestRef};

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

/// What puts namespaces behind a wall, and the baseline it comes from when it was read from
/// the cluster rather than the policy's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub selector: LabelSelector,
    pub baseline: Option<String>,
    /// Written as a `namespaceSelector` (else a `namespaceLabel`).
    pub namespace_selector: bool,
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&GuardRef::of(self), f)
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

#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveBaselineSpec {
    pub namespace_label: String,
    pub namespace_selector: Option<KubernetesSelector>,
    pub mode: Mode,
    /// Whether its wall has a DNS door (the CRD's default: `true`).
    #[serde(rename = "allowDNS")]
    pub allow_dns: bool,
}

/// As the CRD defaults an absent field: `allowDNS` is `true`.
impl Default for LiveBaselineSpec {
    fn default() -> Self {
        Self {
            namespace_label: String::new(),
            namespace_selector: None,
            mode: Mode::default(),
            allow_dns: true,
        }
    }
}

impl LiveBaseline {
    /// The guard this baseline enforces, if any. A baseline whose `namespaceLabel` or
    /// `namespaceSelector` does not read (or that sets both) guards nothing (the reconciler
    /// reports it; reading it as some other selector could wall in the wrong namespaces),
    /// and an `Audit` baseline only observes.
    pub fn guard(&self) -> Option<Guard> {
        let live = view::LiveBaselineRef::of(self);
        let guard = live.guard()?;
        let namespace_selector = matches!(guard.selection, view::Selection::Selector(_));
        let selector = match guard.selection {
            view::Selection::Selector(selector) => selector.into_owned(),
            view::Selection::Label(..) => LabelSelector::parse(&self.spec.namespace_label).ok()?,
        };
        Some(Guard {
            selector,
            baseline: Some(self.metadata.name.clone()),
            namespace_selector,
        })
    }
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

    /// The NetworkPolicy `name` in `namespace` (its name and labels), read for a Pod CREATE
    /// in a namespace a live baseline guards (`podsWaitForWall`): `Ok(None)` when it does not
    /// exist, an error when it could not be read.
    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String>;
}

/// The same reads as [`BaselineSource`], answered as the policy-server answers them: the JSON
/// text of the host capability's answer, which [`evaluate_in_host`] reads without copying
/// more of it than the rules use. Each read is made at most once per request, and only when
/// the answer can change the verdict.
pub trait HostCapabilities {
    /// `kubernetes/list_resources_all` of the NamespaceBaselines: a `NamespaceBaselineList`
    /// (the field masks may have left only `metadata.name`, `spec.namespaceLabel` and
    /// `spec.mode` of each), or why the call failed.
    fn list_baselines(&self) -> Result<Vec<u8>, String>;

    /// `kubernetes/get_resource` of the Namespace `name`, or why the call failed.
    fn get_namespace(&self, name: &str) -> Result<Vec<u8>, String>;

    /// `kubernetes/get_resource` of the NetworkPolicy `name` in `namespace`, or why the call
    /// failed: a policy that does not exist fails with the policy-server's "not found"
    /// message ([`NETWORK_POLICY_NOT_FOUND`]), which the rules read as "missing".
    fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String>;
}

/// Either source, as the rules read it: its answers, and how each is read (borrowed from
/// the answer). Generic, so that the policy's module holds only the readers of its own
/// source.
pub(crate) trait Cluster {
    type Live: ReadBaselines;
    type Object: ReadObject;
    fn baselines(&self) -> Result<Self::Live, String>;
    fn namespace(&self, name: &str) -> Result<Self::Object, String>;
    /// `Ok(None)`: the policy does not exist.
    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<Self::Object>, String>;
}

pub(crate) trait ReadBaselines {
    /// The baselines, borrowed from the answer.
    fn read(&self) -> Result<Vec<view::LiveBaselineRef<'_>>, String>;
}

pub(crate) trait ReadObject {
    /// The object (a Namespace or a NetworkPolicy), borrowed from the answer.
    fn read(&self) -> Result<ObjectRef<'_>, String>;
}

pub(crate) struct Typed<'s>(pub &'s dyn BaselineSource);

impl Cluster for Typed<'_> {
    type Live = Vec<LiveBaseline>;
    type Object = ObjectView;

    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.0.baselines()
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.0.namespace(name)
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        self.0.network_policy(namespace, name)
    }
}

impl ReadBaselines for Vec<LiveBaseline> {
    fn read(&self) -> Result<Vec<view::LiveBaselineRef<'_>>, String> {
        Ok(self.iter().map(view::LiveBaselineRef::of).collect())
    }
}

impl ReadObject for ObjectView {
    fn read(&self) -> Result<ObjectRef<'_>, String> {
        Ok(ObjectRef::of(self))
    }
}

pub(crate) struct Host<'s>(pub &'s dyn HostCapabilities);

/// The JSON text of a `list_resources_all` answer.
pub(crate) struct ListJson(Vec<u8>);

/// The JSON text of a `get_resource` answer.
pub(crate) struct ObjectJson(Vec<u8>);

impl Cluster for Host<'_> {
    type Live = ListJson;
    type Object = ObjectJson;

    fn baselines(&self) -> Result<ListJson, String> {
        self.0.list_baselines().map(ListJson)
    }

    fn namespace(&self, name: &str) -> Result<ObjectJson, String> {
        self.0.get_namespace(name).map(ObjectJson)
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectJson>, String> {
        match self.0.get_network_policy(namespace, name) {
            Ok(answer) => Ok(Some(ObjectJson(answer))),
            Err(error) if pods::is_not_found(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl ReadBaselines for ListJson {
    fn read(&self) -> Result<Vec<view::LiveBaselineRef<'_>>, String> {
        serde_json::from_slice::<k8s_openapi::List<view::LiveBaselineRef<'_>>>(&self.0)
            .map(|list| list.items)
            // As the SDK's `list_all_resources` says it.
            .map_err(|error| format!("error deserializing list all resources response: {error}"))
    }
}

impl ReadObject for ObjectJson {
    fn read(&self) -> Result<ObjectRef<'_>, String> {
        std::str::from_utf8(&self.0)
            .map_err(|error| error.to_string())
            .and_then(|text| {
                serde_json::from_slice(text.as_bytes()).map_err(|error| error.to_string())
            })
    }
}

/// The settings as the rules use them (from a [`Gate`] or read from a payload).
pub(crate) struct Decider<'g> {
    /// How far the requester is exempt from the rules.
    pub exemption: Exemption,
    pub guards: Vec<GuardRef<'g>>,
    pub context_aware: bool,
    pub holes: HolesSetting,
    /// Refuse a Pod CREATE in a guarded namespace until its wall is in place.
    pub pods_wait_for_wall: bool,
    /// The reconciler's identity: its own pod never waits for a wall only it installs.
    pub reconciler_username: &'g str,
}

/// Reviews one admission request. Requests this policy does not guard, or cannot read, are
/// allowed: the policy stands only in front of the wall; an exempt requester is allowed as
/// far as its [`Exemption`] goes.
pub fn review(request: &AdmissionRequest, gate: &Gate, source: &dyn BaselineSource) -> Verdict {
    let decider = Decider {
        exemption: gate.exemption(&request.user_info),
        guards: gate.guards.iter().map(GuardRef::of).collect(),
        context_aware: gate.context_aware,
        holes: gate.holes,
        pods_wait_for_wall: gate.pods_wait_for_wall,
        reconciler_username: gate.reconciler_username(),
    };
    rules::review(&RequestRef::of(request), &decider, &Typed(source))
}

#[cfg(test)]
mod selector_tests;
#[cfg(test)]
mod tests;
