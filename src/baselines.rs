//! What the policy reads through the policy-server's host capabilities
//! (`contextAwareResources` in metadata.yml): the live NamespaceBaselines when the policy runs
//! context-aware, and a Namespace's labels for the holes check.

use std::collections::BTreeSet;

use kubewarden_policy_sdk::host_capabilities::kubernetes::{
    GetResourceRequest, ListAllResourcesRequest, list_all_resources,
};
use kubewarden_policy_sdk::wapc_guest::host_call;
use namespace_baseline_core::admission::{BaselineSource, LiveBaseline, ObjectView};

/// The fields of a Namespace the holes check reads.
pub const NAMESPACE_FIELD_MASKS: [&str; 2] = ["metadata.name", "metadata.labels"];

/// Reads the cluster through the policy-server.
pub struct ClusterBaselines;

impl BaselineSource for ClusterBaselines {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        let request = ListAllResourcesRequest {
            api_version: "hedronite.io/v1alpha1".to_owned(),
            kind: "NamespaceBaseline".to_owned(),
            label_selector: None,
            field_selector: None,
            // Only what the rules read: the host prunes the rest before it crosses into wasm.
            field_masks: Some(BTreeSet::from(
                ["metadata.name", "spec.namespaceLabel", "spec.mode"].map(str::to_owned),
            )),
        };
        list_all_resources::<LiveBaseline>(&request)
            .map(|list| list.items)
            .map_err(|error| error.to_string())
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        let request = GetResourceRequest {
            api_version: "v1".to_owned(),
            kind: "Namespace".to_owned(),
            name: name.to_owned(),
            namespace: None,
            // The policy-server's 5-second cache: a label added a moment ago may be missed,
            // which the reconciler's holes report makes up for.
            disable_cache: false,
            field_masks: Some(BTreeSet::from(NAMESPACE_FIELD_MASKS.map(str::to_owned))),
        };
        // The SDK's `get_resource`, but read with `from_str` like the request: its
        // `from_slice` would add a second copy of the object reader to the module (6 KB).
        let payload = serde_json::to_vec(&request).map_err(|error| error.to_string())?;
        let answer = host_call("kubewarden", "kubernetes", "get_resource", &payload)
            .map_err(|error| error.to_string())?;
        std::str::from_utf8(&answer)
            .map_err(|error| error.to_string())
            .and_then(|text| serde_json::from_str(text).map_err(|error| error.to_string()))
    }
}
