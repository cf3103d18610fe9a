//! The request as the rules read it, borrowing the payload's text: the same fields, types and
//! defaults as the public [`AdmissionRequest`] (so that exactly the same requests can be
//! read), without a copy of every string per request. [`AdmissionRequest`] itself is read
//! into these views by borrowing ([`RequestRef::of`]), so both go through the same rules.

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;

use serde::Deserialize;

pub(crate) use super::borrowed::{
    AdmissionRequest as RequestRef, GroupVersionKind as KindRef, LiveBaseline as LiveBaselineRef,
    LiveBaselineMetadata as LiveBaselineMetadataRef, LiveBaselineSpec as LiveBaselineSpecRef,
    MetadataView as MetadataRef, ObjectView as ObjectRef, UserInfo as UserRef,
};
use super::json::Json;
use super::{AdmissionRequest, ObjectView};
use crate::identity::{BASELINE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::selector::{LabelSelector, NAMESPACE_NAME_LABEL, short_form_holds};
use crate::spec::Mode;

/// A string of the payload: borrowed unless it had escapes to undo.
#[derive(Deserialize, Clone, Default)]
#[serde(transparent)]
pub struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Text<'_> {
    /// A copy that owns its text.
    pub fn into_owned(self) -> Text<'static> {
        Text(Cow::Owned(self.0.into_owned()))
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Self(Cow::Borrowed(text))
    }
}

impl Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        *self.0 == *other.0
    }
}

impl Eq for Text<'_> {}

impl PartialOrd for Text<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (*self.0).cmp(&*other.0)
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Labels, as a `BTreeMap<String, String>` holds them (the last of a repeated key wins).
pub type Labels<'a> = BTreeMap<Text<'a>, Text<'a>>;

/// Whether labels claim an object is managed by Namespace Baseline
/// ([`crate::identity::claims_management`]).
pub(crate) fn claims_management(labels: &Labels<'_>) -> bool {
    labels.get(MANAGED_BY_LABEL).map(|value| &**value) == Some(MANAGED_BY_VALUE)
        || labels.contains_key(BASELINE_LABEL)
}

impl<'a> RequestRef<'a> {
    /// The view of a request read into the public types.
    pub fn of(request: &'a AdmissionRequest) -> Self {
        let text = |value: &'a String| Text::from(value.as_str());
        Self {
            uid: text(&request.uid),
            kind: KindRef {
                group: text(&request.kind.group),
                version: text(&request.kind.version),
                kind: text(&request.kind.kind),
            },
            sub_resource: text(&request.sub_resource),
            name: text(&request.name),
            namespace: text(&request.namespace),
            operation: text(&request.operation),
            user_info: UserRef {
                username: text(&request.user_info.username),
                groups: request.user_info.groups.iter().map(text).collect(),
            },
            object: request.object.as_ref().map(ObjectRef::of),
            old_object: request.old_object.as_ref().map(ObjectRef::of),
            dry_run: request.dry_run,
        }
    }

    pub fn is_network_policy(&self) -> bool {
        super::request::is_network_policy(&self.kind.group, &self.kind.kind)
    }

    pub fn is_namespace(&self) -> bool {
        super::request::is_namespace(&self.kind.group, &self.kind.kind)
    }

    /// A Pod itself, not one of its subresources (`pods/binding`, `pods/eviction`, ...).
    pub fn is_pod(&self) -> bool {
        super::request::is_pod(&self.kind.group, &self.kind.kind, &self.sub_resource)
    }
}

impl<'a> ObjectRef<'a> {
    /// The view of an object read into the public types.
    pub fn of(object: &'a ObjectView) -> Self {
        Self {
            metadata: MetadataRef {
                name: Text::from(object.metadata.name.as_str()),
                namespace: Text::from(object.metadata.namespace.as_str()),
                labels: object
                    .metadata
                    .labels
                    .iter()
                    .map(|(key, value)| (Text::from(key.as_str()), Text::from(value.as_str())))
                    .collect(),
                other: object
                    .metadata
                    .other
                    .iter()
                    .map(|(key, value)| (Text::from(key.as_str()), owned_json(value)))
                    .collect(),
            },
            // The same JSON, read as the payload's is (the typed path is the tests' and the
            // playground's, never the policy's: a copy does no harm there).
            spec: owned_json(&object.spec),
        }
    }
}

/// A `serde_json::Value` as the payload's reader reads it: the same JSON, read as the
/// payload's is (the typed path is the tests' and the playground's, never the policy's: a
/// copy does no harm there).
fn owned_json(value: &serde_json::Value) -> Json<'static> {
    serde_json::from_slice::<Json<'_>>(value.to_string().as_bytes())
        .map(Json::into_owned)
        .unwrap_or_default()
}

/// What puts namespaces behind a wall ([`super::Guard`], borrowed): a `namespaceLabel` or a
/// `namespaceSelector`, and the baseline it comes from when it was read from the cluster
/// rather than the policy's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuardRef<'a> {
    pub selection: Selection<'a>,
    pub baseline: Option<&'a str>,
}

/// A guard's selector, evaluated by the one selector engine ([`crate::selector`]).
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

    /// The guard of the public [`super::Guard`].
    pub fn of(guard: &'a super::Guard) -> Self {
        let selection = match guard.selector.short_form() {
            Some((key, value)) if !guard.namespace_selector => Selection::Label(key, value),
            _ => Selection::Selector(Cow::Borrowed(&guard.selector)),
        };
        Self {
            selection,
            baseline: guard.baseline.as_deref(),
        }
    }

    /// Whether the namespace `name` with these labels is covered ([`LabelSelector::selects`]:
    /// its [`NAMESPACE_NAME_LABEL`] is its name, whether the labels carry it or not).
    pub fn matches(&self, labels: &Labels<'_>, name: &str) -> bool {
        self.unmet(labels, name).is_none()
    }

    /// What the namespace `name` with these labels does not meet, for a message (`None`: it
    /// is covered).
    pub fn unmet(&self, labels: &Labels<'_>, name: &str) -> Option<String> {
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

impl<'a> LiveBaselineRef<'a> {
    pub fn of(baseline: &'a super::LiveBaseline) -> Self {
        Self {
            metadata: LiveBaselineMetadataRef {
                name: Text::from(baseline.metadata.name.as_str()),
            },
            spec: LiveBaselineSpecRef {
                namespace_label: Text::from(baseline.spec.namespace_label.as_str()),
                namespace_selector: baseline.spec.namespace_selector.as_ref().map(|selector| {
                    owned_json(&serde_json::to_value(selector).unwrap_or_default())
                }),
                mode: baseline.spec.mode,
                allow_dns: baseline.spec.allow_dns,
            },
        }
    }

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
    const GROUP: &'static str = crate::identity::GROUP;
    const KIND: &'static str = crate::identity::KIND;
    const VERSION: &'static str = crate::identity::VERSION;
    const URL_PATH_SEGMENT: &'static str = "namespacebaselines";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for LiveBaselineRef<'_> {
    const LIST_KIND: &'static str = "NamespaceBaselineList";
}
