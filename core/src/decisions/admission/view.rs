//! The request as the rules read it, borrowing the payload's text: the same fields, types and
//! defaults as the public [`super::AdmissionRequest`] (so that exactly the same requests can
//! be read), without a copy of every string per request. The public types are read into
//! these views by borrowing (`RequestRef::of`, in `request`; `LiveBaselineRef::of` and
//! `GuardRef::of`, in `baselines`), so both go through the same rules.

use std::borrow::Cow;
use std::fmt;

pub(crate) use super::borrowed::{
    AdmissionRequest as RequestRef, GroupVersionKind as KindRef, Labels,
    LiveBaseline as LiveBaselineRef, LiveBaselineMetadata as LiveBaselineMetadataRef,
    LiveBaselineSpec as LiveBaselineSpecRef, MetadataView as MetadataRef, ObjectView as ObjectRef,
    UserInfo as UserRef,
};
use super::borrowed::{is_namespace, is_network_policy, is_pod};
use crate::vocabulary::identity::{BASELINE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::vocabulary::selector::{
    LabelSelector, NAMESPACE_NAME_LABEL, is_system_namespace, short_form_holds,
};
use crate::vocabulary::spec::Mode;

/// Whether labels claim an object is managed by Namespace Baseline
/// ([`crate::vocabulary::identity::claims_management`]).
pub(crate) fn claims_management(labels: &Labels<'_>) -> bool {
    labels.get(MANAGED_BY_LABEL).map(|value| &**value) == Some(MANAGED_BY_VALUE)
        || labels.contains_key(BASELINE_LABEL)
}

impl RequestRef<'_> {
    pub fn is_network_policy(&self) -> bool {
        is_network_policy(&self.kind.group, &self.kind.kind)
    }

    pub fn is_namespace(&self) -> bool {
        is_namespace(&self.kind.group, &self.kind.kind)
    }

    /// A Pod itself, not one of its subresources (`pods/binding`, `pods/eviction`, ...).
    pub fn is_pod(&self) -> bool {
        is_pod(&self.kind.group, &self.kind.kind, &self.sub_resource)
    }
}

/// What puts namespaces behind a wall ([`super::Guard`], borrowed): a `namespaceLabel` or a
/// `namespaceSelector`, and the baseline it comes from when it was read from the cluster
/// rather than the policy's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuardRef<'a> {
    pub selection: Selection<'a>,
    pub baseline: Option<&'a str>,
}

/// A guard's selector, evaluated by the one selector engine ([`crate::vocabulary::selector`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection<'a> {
    /// A `namespaceLabel`: its key and value, borrowed from where it was read (no copy per
    /// request).
    Label(&'a str, Option<&'a str>),
    /// A `namespaceSelector`, read.
    Selector(Cow<'a, LabelSelector>),
}

impl<'a> GuardRef<'a> {
    /// The guard of a `namespaceLabel`, if it parses ([`LabelSelector::split`]).
    pub fn parse(namespace_label: &'a str, baseline: Option<&'a str>) -> Option<Self> {
        let (key, value) = LabelSelector::split(namespace_label).ok()?;
        Some(Self {
            selection: Selection::Label(key, value),
            baseline,
        })
    }

    /// Whether the namespace `name` with these labels is covered ([`LabelSelector::selects`]:
    /// its [`NAMESPACE_NAME_LABEL`] is its name, whether the labels carry it or not).
    pub fn matches(&self, labels: &Labels<'_>, name: &str) -> bool {
        self.unmet(labels, name).is_none()
    }

    /// What the namespace `name` with these labels does not meet, for a message (`None`: it
    /// is covered).
    pub fn unmet(&self, labels: &Labels<'_>, name: &str) -> Option<String> {
        if is_system_namespace(name) {
            return Some(format!(
                "{name} is a system namespace, which no baseline covers"
            ));
        }
        let label = |key: &str| {
            labels
                .get(key)
                .map(|value| &**value)
                .or_else(|| (key == NAMESPACE_NAME_LABEL).then_some(name))
        };
        match &self.selection {
            Selection::Label(key, value) => {
                (!short_form_holds(*value, label(key))).then(|| self.selection.to_string())
            }
            Selection::Selector(selector) => selector.first_unmet(label).map(ToString::to_string),
        }
    }

    /// Whether it covers every namespace created without a label of its own
    /// ([`LabelSelector::selects_new_namespaces`]): never a `namespaceLabel`.
    pub fn covers_new_namespaces(&self) -> bool {
        match &self.selection {
            Selection::Label(..) => false,
            Selection::Selector(selector) => selector.selects_new_namespaces(),
        }
    }
}

/// `key=value` or `key` as written, or the selector's Kubernetes string form, as
/// [`LabelSelector`] displays itself.
impl fmt::Display for Selection<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Label(key, value) => {
                f.write_str(key)?;
                if let Some(value) = value {
                    f.write_str("=")?;
                    f.write_str(value)?;
                }
                Ok(())
            }
            Self::Selector(selector) => fmt::Display::fmt(selector, f),
        }
    }
}

/// The selector with the field it was written in.
pub(crate) struct Worded<'s, 'a>(pub &'s Selection<'a>);

impl fmt::Display for Worded<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Selection::Label(..) => write!(f, "namespaceLabel {}", self.0),
            Selection::Selector(_) => write!(f, "namespaceSelector {}", self.0),
        }
    }
}

/// As [`super::Guard`] displays itself.
impl fmt::Display for GuardRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.baseline, &self.selection) {
            (Some(name), selection) => {
                write!(f, "NamespaceBaseline {name:?} ({})", Worded(selection))
            }
            (None, Selection::Label(..)) => {
                write!(f, "the guard label {} (policy settings)", self.selection)
            }
            (None, Selection::Selector(_)) => {
                write!(f, "the guard selector {} (policy settings)", self.selection)
            }
        }
    }
}

impl LiveBaselineRef<'_> {
    /// The guard this baseline enforces, if any ([`super::LiveBaseline::guard`]).
    pub fn guard(&self) -> Option<GuardRef<'_>> {
        if self.spec.mode == Mode::Audit {
            return None;
        }
        let name = Some(&*self.metadata.name);
        match (&*self.spec.namespace_label, &self.spec.namespace_selector) {
            (label, None) => GuardRef::parse(label, name),
            ("", Some(selector)) => Some(GuardRef {
                selection: Selection::Selector(Cow::Owned(
                    super::netpol::label_selector(selector).ok()?,
                )),
                baseline: name,
            }),
            // Both: the reconciler reports the spec invalid and acts on neither.
            _ => None,
        }
    }

    /// Whether it may cover a namespace with these labels, read without parsing its
    /// selector: a `namespaceLabel` only a namespace carrying its key (or any namespace, when
    /// the key is [`NAMESPACE_NAME_LABEL`]); a `namespaceSelector` any namespace.
    pub fn may_cover(&self, labels: &Labels<'_>) -> bool {
        if self.spec.namespace_selector.is_some() {
            return true;
        }
        let label: &str = &self.spec.namespace_label;
        let key = label.split_once('=').map_or(label, |(key, _)| key);
        key == NAMESPACE_NAME_LABEL || labels.contains_key(key)
    }
}

/// The list the host answers is a `NamespaceBaselineList`, read with k8s-openapi's `List`.
impl k8s_openapi::Resource for LiveBaselineRef<'_> {
    const API_VERSION: &'static str = "hedronite.io/v1alpha1";
    const GROUP: &'static str = crate::vocabulary::identity::GROUP;
    const KIND: &'static str = crate::vocabulary::identity::KIND;
    const VERSION: &'static str = crate::vocabulary::identity::VERSION;
    const URL_PATH_SEGMENT: &'static str = "namespacebaselines";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for LiveBaselineRef<'_> {
    const LIST_KIND: &'static str = "NamespaceBaselineList";
}
