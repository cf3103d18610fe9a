//! The parts of an AdmissionRequest the rules read. Everything else in the request is
//! skipped unparsed: it keeps evaluation cheap, and a field we do not read can never make a
//! request unreadable.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub sub_resource: String,
    pub name: String,
    pub namespace: String,
    pub operation: String,
    pub user_info: UserInfo,
    /// The object as it would be stored (CREATE, UPDATE); `None` for DELETE.
    pub object: Option<ObjectView>,
    /// The object as it is stored (UPDATE, DELETE).
    pub old_object: Option<ObjectView>,
    pub dry_run: bool,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct GroupVersionKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

/// A NetworkPolicy or Namespace: the metadata the rules read and the spec, kept as JSON so
/// that a change to any field, even one newer than our Kubernetes types, counts.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct ObjectView {
    pub metadata: MetadataView,
    pub spec: Value,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct MetadataView {
    pub name: String,
    pub namespace: String,
    #[serde(deserialize_with = "null_as_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `labels: null` is what some clients send for "no labels".
fn null_as_empty<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Option::deserialize(deserializer)?.unwrap_or_default())
}

impl AdmissionRequest {
    pub fn is_network_policy(&self) -> bool {
        self.kind.group == "networking.k8s.io" && self.kind.kind == "NetworkPolicy"
    }

    pub fn is_namespace(&self) -> bool {
        self.kind.group.is_empty() && self.kind.kind == "Namespace"
    }
}
