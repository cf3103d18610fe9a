//! The parts of an AdmissionRequest the rules read. Everything else in the request is
//! skipped unparsed: it keeps evaluation cheap, and a field we do not read can never make a
//! request unreadable.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::borrowed::read_metadata;

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

impl ObjectView {
    /// The object as a NetworkPolicy: its name, namespace and labels, and the spec read as a
    /// NetworkPolicy's. `None` when the spec is not one (the holes check then has nothing it
    /// can name, and the request is allowed like any other it cannot read); no spec at all
    /// is a policy without one.
    pub fn network_policy(&self) -> Option<NetworkPolicy> {
        let spec = match &self.spec {
            Value::Null => None,
            // Through its text: the policy reads JSON text everywhere else, and the
            // `Deserializer` for `Value` would add a second JSON reader to the wasm module.
            spec => Some(
                serde_json::to_string(spec)
                    .ok()
                    .and_then(|text| serde_json::from_str::<NetworkPolicySpec>(&text).ok())?,
            ),
        };
        let text = |value: &str| (!value.is_empty()).then(|| value.to_owned());
        Some(NetworkPolicy {
            metadata: ObjectMeta {
                name: text(&self.metadata.name),
                namespace: text(&self.metadata.namespace),
                labels: Some(self.metadata.labels.clone()),
                ..ObjectMeta::default()
            },
            spec,
        })
    }
}

impl AdmissionRequest {
    pub fn is_network_policy(&self) -> bool {
        self.kind.group == "networking.k8s.io" && self.kind.kind == "NetworkPolicy"
    }

    pub fn is_namespace(&self) -> bool {
        self.kind.group.is_empty() && self.kind.kind == "Namespace"
    }

    /// A Pod itself, not one of its subresources (`pods/binding`, `pods/eviction`, ...).
    pub fn is_pod(&self) -> bool {
        self.kind.group.is_empty() && self.kind.kind == "Pod" && self.sub_resource.is_empty()
    }
}
