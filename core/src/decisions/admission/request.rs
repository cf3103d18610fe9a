//! The parts of an AdmissionRequest the rules read. Everything else in the request is
//! skipped unparsed: it keeps evaluation cheap, and a field we do not read can never make a
//! request unreadable.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::borrowed::{is_namespace, is_network_policy, is_pod, read_metadata};
use super::view::{KindRef, MetadataRef, ObjectRef, RequestRef, UserRef};
use crate::vocabulary::json::{Json, Text};

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

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataView {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// The other fields of `metadata` the rules compare (ownerReferences, finalizers,
    /// deletionTimestamp, any field newer than our types), as JSON: a managed policy's
    /// metadata is guarded field by field, unknown fields included. Annotations and the
    /// fields the API server sets are skipped unread.
    pub other: BTreeMap<String, Value>,
}

/// Read as the payload's borrowed view reads it ([`read_metadata`]), so that exactly the
/// same requests read.
impl<'de> Deserialize<'de> for MetadataView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = read_metadata::<D, String, BTreeMap<String, String>, Value>(deserializer)?;
        Ok(Self {
            name: fields.name,
            namespace: fields.namespace,
            labels: fields.labels,
            other: fields.other,
        })
    }
}

impl AdmissionRequest {
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
                    .map(|(key, value)| (Text::from(key.as_str()), Json::from_value(value.clone())))
                    .collect(),
            },
            // The same JSON, read as the payload's is (the typed path is the tests' and the
            // playground's, never the policy's: a copy does no harm there).
            spec: Json::from_value(object.spec.clone()),
        }
    }
}
