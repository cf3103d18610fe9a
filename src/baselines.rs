//! The live NamespaceBaselines, read through the policy-server's host capabilities when
//! the policy runs context-aware (`contextAwareResources` in metadata.yml).

use std::collections::BTreeSet;

use kubewarden_policy_sdk::host_capabilities::kubernetes::{
    ListAllResourcesRequest, list_all_resources,
};
use namespace_baseline_core::admission::{BaselineSource, LiveBaseline};

/// Reads the baselines from the cluster through the policy-server.
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
}
