//! The borrowed views of the payload and the host's answers ([`super::view`]), under the names
//! of the public types they mirror: serde's messages name the type ("expected struct
//! PolicySettings"), and they reach the requester (unreadable settings, an unreadable host
//! answer), so they must read as they did when the public types were read.

use serde::{Deserialize, Deserializer};

use super::HolesSetting;
use super::json::Json;
use super::settings::DEFAULT_RECONCILER_USERNAME;
use super::view::{Labels, Text};
use crate::spec::Mode;

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

/// [`super::MetadataView`], borrowed.
#[derive(Deserialize, Clone, Default)]
#[serde(default)]
pub struct MetadataView<'a> {
    #[serde(borrow)]
    pub name: Text<'a>,
    #[serde(borrow)]
    pub namespace: Text<'a>,
    #[serde(borrow, deserialize_with = "null_as_empty")]
    pub labels: Labels<'a>,
}

/// `labels: null` is what some clients send for "no labels".
fn null_as_empty<'de: 'a, 'a, D>(deserializer: D) -> Result<Labels<'a>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::deserialize(deserializer)?.unwrap_or_default())
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

#[derive(Deserialize, Clone, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveBaselineSpec<'a> {
    #[serde(borrow)]
    pub namespace_label: Text<'a>,
    pub mode: Mode,
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
}

impl Default for PolicySettings<'_> {
    fn default() -> Self {
        Self {
            guard_selectors: Vec::new(),
            context_aware: false,
            reconciler_username: Text::from(DEFAULT_RECONCILER_USERNAME),
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            exempt_service_accounts: Vec::new(),
            holes: Text::from(HolesSetting::Warn.as_str()),
        }
    }
}
