//! The borrowed views of the payload and the host's answers ([`super::view`]), under the names
//! of the public types they mirror: serde's messages name the type ("expected struct
//! PolicySettings"), and they reach the requester (unreadable settings, an unreadable host
//! answer), so they must read as they did when the public types were read.

use std::collections::BTreeMap;

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::holes_setting::HolesSetting;
use crate::vocabulary::identity::RECONCILER_USERNAME;
use crate::vocabulary::json::{Json, Text};
use crate::vocabulary::spec::Mode;

/// Labels, as a `BTreeMap<String, String>` holds them (the last of a repeated key wins).
pub type Labels<'a> = BTreeMap<Text<'a>, Text<'a>>;

/// [`super::AdmissionRequest`], borrowed.
#[derive(Deserialize, Clone, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct AdmissionRequest<'a> {
    #[serde(borrow)]
    pub uid: Text<'a>,
    #[serde(borrow)]
    pub kind: GroupVersionKind<'a>,
    #[serde(borrow)]
    pub sub_resource: Text<'a>,
    #[serde(borrow)]
    pub name: Text<'a>,
    #[serde(borrow)]
    pub namespace: Text<'a>,
    #[serde(borrow)]
    pub operation: Text<'a>,
    #[serde(borrow)]
    pub user_info: UserInfo<'a>,
    #[serde(borrow)]
    pub object: Option<ObjectView<'a>>,
    #[serde(borrow)]
    pub old_object: Option<ObjectView<'a>>,
    pub dry_run: bool,
}

/// [`super::GroupVersionKind`], borrowed.
#[derive(Deserialize, Clone, Default)]
#[serde(default)]
pub struct GroupVersionKind<'a> {
    #[serde(borrow)]
    pub group: Text<'a>,
    #[serde(borrow)]
    pub version: Text<'a>,
    #[serde(borrow)]
    pub kind: Text<'a>,
}

/// [`super::UserInfo`], borrowed.
#[derive(Deserialize, Clone, Default)]
#[serde(default)]
pub struct UserInfo<'a> {
    #[serde(borrow)]
    pub username: Text<'a>,
    #[serde(borrow)]
    pub groups: Vec<Text<'a>>,
}

/// [`super::ObjectView`], borrowed: a NetworkPolicy or Namespace, its metadata and its spec (read as
/// JSON, so that a change to any field of it counts).
#[derive(Deserialize, Clone, Default)]
#[serde(default)]
pub struct ObjectView<'a> {
    #[serde(borrow)]
    pub metadata: MetadataView<'a>,
    #[serde(borrow)]
    pub spec: Json<'a>,
}

/// [`super::MetadataView`], borrowed. Read by [`read_metadata`] rather than derived: its
/// `other` fields are the compared ones only, without the buffering serde's `flatten` adds
/// to the wasm module.
#[derive(Clone, Default)]
pub struct MetadataView<'a> {
    pub name: Text<'a>,
    pub namespace: Text<'a>,
    pub labels: Labels<'a>,
    /// Every other field of `metadata`, as JSON.
    pub other: BTreeMap<Text<'a>, Json<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for MetadataView<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = read_metadata::<D, Text<'a>, Labels<'a>, Json<'a>>(deserializer)?;
        Ok(Self {
            name: fields.name,
            namespace: fields.namespace,
            labels: fields.labels,
            other: fields.other,
        })
    }
}

/// The fields of `metadata` the rules read, in either reader's types: text `T` (a borrowed
/// [`Text`] or a `String`), labels `L` and JSON values `V`.
pub(crate) struct MetadataFields<T, L, V> {
    pub name: T,
    pub namespace: T,
    pub labels: L,
    pub other: BTreeMap<T, V>,
}

/// Reads `metadata` the one way both readers ([`MetadataView`] and
/// [`super::MetadataView`]) read it: `name`, `namespace` and `labels` (`null` labels are
/// none, as some clients send "no labels"), each at most once, every field the rules compare
/// kept as JSON (the last of a repeated one winning), and the others skipped unread
/// ([`is_compared_metadata`]).
pub(crate) fn read_metadata<'de, D, T, L, V>(
    deserializer: D,
) -> Result<MetadataFields<T, L, V>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default + Ord + Deref<Target = str>,
    L: Deserialize<'de> + Default,
    V: Deserialize<'de>,
{
    deserializer.deserialize_map(MetadataVisitor(PhantomData))
}

struct MetadataVisitor<T, L, V>(PhantomData<(T, L, V)>);

impl<'de, T, L, V> Visitor<'de> for MetadataVisitor<T, L, V>
where
    T: Deserialize<'de> + Default + Ord + Deref<Target = str>,
    L: Deserialize<'de> + Default,
    V: Deserialize<'de>,
{
    type Value = MetadataFields<T, L, V>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("struct MetadataView")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut metadata = MetadataFields {
            name: T::default(),
            namespace: T::default(),
            labels: L::default(),
            other: BTreeMap::new(),
        };
        let mut seen = [false; 3];
        let mut first = |index: usize, field: &'static str| {
            if std::mem::replace(&mut seen[index], true) {
                Err(de::Error::duplicate_field(field))
            } else {
                Ok(())
            }
        };
        while let Some(key) = map.next_key::<T>()? {
            match &*key {
                "name" => {
                    first(0, "name")?;
                    metadata.name = map.next_value()?;
                }
                "namespace" => {
                    first(1, "namespace")?;
                    metadata.namespace = map.next_value()?;
                }
                "labels" => {
                    first(2, "labels")?;
                    metadata.labels = map.next_value::<Option<L>>()?.unwrap_or_default();
                }
                field if !is_compared_metadata(field) => {
                    map.next_value::<de::IgnoredAny>()?;
                }
                _ => {
                    let value = map.next_value()?;
                    metadata.other.insert(key, value);
                }
            }
        }
        Ok(metadata)
    }
}

/// The fields of `metadata` the API server sets itself on every write (or keeps from the
/// stored object whatever the request says): they differ between a request and the stored
/// object without anyone having changed them, so the rules never compare them.
const SERVER_SET_METADATA: [&str; 8] = [
    "resourceVersion",
    "managedFields",
    "generation",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// Whether the rules read this field of `metadata` (beyond name, namespace and labels):
/// every field but the annotations, which anyone may edit, and the ones the API server sets,
/// except `deletionTimestamp`, which says a policy or namespace is being deleted. The others
/// are skipped unread, so that their size and depth (a `managedFields` entry mirrors the
/// object) never make a request unreadable.
pub(crate) fn is_compared_metadata(field: &str) -> bool {
    field == "deletionTimestamp"
        || (field != "annotations" && !SERVER_SET_METADATA.contains(&field))
}

/// [`super::LiveBaseline`], borrowed from the host's answer.
#[derive(Deserialize, Clone, Default)]
#[serde(default)]
pub struct LiveBaseline<'a> {
    #[serde(borrow)]
    pub metadata: LiveBaselineMetadata<'a>,
    #[serde(borrow)]
    pub spec: LiveBaselineSpec<'a>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(default)]
pub struct LiveBaselineMetadata<'a> {
    #[serde(borrow)]
    pub name: Text<'a>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveBaselineSpec<'a> {
    #[serde(borrow)]
    pub namespace_label: Text<'a>,
    /// Read as JSON ([`super::netpol::label_selector`]): k8s-openapi's reader of the type
    /// would cost the module more than the rules' own JSON reader it already holds.
    #[serde(borrow)]
    pub namespace_selector: Option<Json<'a>>,
    pub mode: Mode,
    #[serde(rename = "allowDNS")]
    pub allow_dns: bool,
}

/// As the CRD defaults an absent field: `allowDNS` is `true`.
impl Default for LiveBaselineSpec<'_> {
    fn default() -> Self {
        Self {
            namespace_label: Text::default(),
            namespace_selector: None,
            mode: Mode::default(),
            allow_dns: true,
        }
    }
}

/// [`super::PolicySettings`] as they are read from a payload, borrowing its text: the fields, their
/// defaults and checks of the settings, without a copy per request.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PolicySettings<'a> {
    #[serde(borrow)]
    pub guard_selectors: Vec<Text<'a>>,
    pub context_aware: bool,
    #[serde(borrow)]
    pub reconciler_username: Text<'a>,
    #[serde(borrow)]
    pub exempt_users: Vec<Text<'a>>,
    #[serde(borrow)]
    pub exempt_groups: Vec<Text<'a>>,
    #[serde(borrow)]
    pub exempt_service_accounts: Vec<Text<'a>>,
    #[serde(borrow)]
    pub holes: Text<'a>,
    pub pods_wait_for_wall: bool,
}

impl Default for PolicySettings<'_> {
    fn default() -> Self {
        Self {
            guard_selectors: Vec::new(),
            context_aware: false,
            reconciler_username: Text::from(RECONCILER_USERNAME),
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            exempt_service_accounts: Vec::new(),
            holes: Text::from(HolesSetting::Warn.as_str()),
            pods_wait_for_wall: false,
        }
    }
}

/// What a request is about, from its kind: one definition for the public request
/// ([`super::AdmissionRequest`]) and its borrowed view.
pub(crate) fn is_network_policy(group: &str, kind: &str) -> bool {
    group == "networking.k8s.io" && kind == "NetworkPolicy"
}

pub(crate) fn is_namespace(group: &str, kind: &str) -> bool {
    group.is_empty() && kind == "Namespace"
}

pub(crate) fn is_pod(group: &str, kind: &str, sub_resource: &str) -> bool {
    group.is_empty() && kind == "Pod" && sub_resource.is_empty()
}
