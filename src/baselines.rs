//! What the policy reads through the policy-server's host capabilities
//! (`contextAwareResources` in metadata.yml): the live NamespaceBaselines when the policy runs
//! context-aware, a Namespace's labels for the holes check and the pod rule (and whether it
//! is being deleted, for the namespace controller's exemption), and a wall's NetworkPolicy
//! by name for the pod rule (`podsWaitForWall`). The answers are handed to the
//! core as the JSON text the host returned; the core reads only the fields the rules use,
//! borrowing the text.

use kubewarden_policy_sdk::wapc_guest::host_call;
use namespace_baseline_core::admission::HostCapabilities;

/// The SDK's `ListAllResourcesRequest` for every NamespaceBaseline, pruned by the host to
/// the fields the rules read (name, namespaceLabel or namespaceSelector, mode, and allowDNS for
/// the pod rule) before it crosses into wasm: the same for every request, so written once (a
/// test checks it is what the SDK writes).
pub const LIST_BASELINES_REQUEST: &str = r#"{"api_version":"hedronite.io/v1alpha1","kind":"NamespaceBaseline","label_selector":null,"field_selector":null,"field_masks":["metadata.name","spec.allowDNS","spec.mode","spec.namespaceLabel","spec.namespaceSelector"]}"#;

/// The SDK's `GetResourceRequest` for the Namespace `name`, as the SDK writes it (a test
/// checks it).
pub fn get_namespace_request(name: &str) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(160 + name.len());
    out.extend_from_slice(br#"{"api_version":"v1","kind":"Namespace","name":"#);
    serde_json::to_writer(&mut out, name)?;
    // The policy-server's 5-second cache: a label added a moment ago may be missed, which
    // the reconciler's holes report makes up for.
    out.extend_from_slice(
        br#","namespace":null,"disable_cache":false,"field_masks":["metadata.deletionTimestamp","metadata.labels","metadata.name"]}"#,
    );
    Ok(out)
}

/// The SDK's `GetResourceRequest` for the NetworkPolicy `name` in `namespace`, as the SDK
/// writes it (a test checks it): only its name and labels, which say whether it is the
/// reconciler's.
pub fn get_network_policy_request(
    namespace: &str,
    name: &str,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(192 + namespace.len() + name.len());
    out.extend_from_slice(
        br#"{"api_version":"networking.k8s.io/v1","kind":"NetworkPolicy","name":"#,
    );
    serde_json::to_writer(&mut out, name)?;
    out.extend_from_slice(br#","namespace":"#);
    serde_json::to_writer(&mut out, namespace)?;
    // The policy-server's 5-second cache keeps only what it found (a policy that was not
    // found is asked for again on the next pod): a wall deleted a moment ago may still be
    // seen, which the deletion rule and the reconciler's repair make up for
    // (docs/design.md, "Pods wait for their wall").
    out.extend_from_slice(
        br#","disable_cache":false,"field_masks":["metadata.labels","metadata.name"]}"#,
    );
    Ok(out)
}

/// Reads the cluster through the policy-server.
pub struct ClusterBaselines;

impl HostCapabilities for ClusterBaselines {
    fn list_baselines(&self) -> Result<Vec<u8>, String> {
        host_call(
            "kubewarden",
            "kubernetes",
            "list_resources_all",
            LIST_BASELINES_REQUEST.as_bytes(),
        )
        // As the SDK's `list_all_resources` says it.
        .map_err(|error| {
            format!("error invoking host capability kubernetes.list_resources_all: {error}")
        })
    }

    fn get_namespace(&self, name: &str) -> Result<Vec<u8>, String> {
        let payload = get_namespace_request(name).map_err(|error| error.to_string())?;
        host_call("kubewarden", "kubernetes", "get_resource", &payload)
            .map_err(|error| error.to_string())
    }

    fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String> {
        let payload =
            get_network_policy_request(namespace, name).map_err(|error| error.to_string())?;
        host_call("kubewarden", "kubernetes", "get_resource", &payload)
            .map_err(|error| error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kubewarden_policy_sdk::host_capabilities::kubernetes::{
        GetResourceRequest, ListAllResourcesRequest,
    };

    use super::*;

    /// The fields of a Namespace the rules read: its labels for the holes check, whether it
    /// is being deleted for the namespace controller's exemption.
    const NAMESPACE_FIELD_MASKS: [&str; 3] = [
        "metadata.deletionTimestamp",
        "metadata.labels",
        "metadata.name",
    ];

    /// The fields of a NamespaceBaseline the rules read.
    const BASELINE_FIELD_MASKS: [&str; 5] = [
        "metadata.name",
        "spec.allowDNS",
        "spec.mode",
        "spec.namespaceLabel",
        "spec.namespaceSelector",
    ];

    /// The fields of a wall's NetworkPolicy the pod rule reads.
    const NETWORK_POLICY_FIELD_MASKS: [&str; 2] = ["metadata.labels", "metadata.name"];

    #[test]
    fn the_list_request_is_the_sdks() {
        let request = ListAllResourcesRequest {
            api_version: "hedronite.io/v1alpha1".to_owned(),
            kind: "NamespaceBaseline".to_owned(),
            label_selector: None,
            field_selector: None,
            field_masks: Some(BTreeSet::from(BASELINE_FIELD_MASKS.map(str::to_owned))),
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            LIST_BASELINES_REQUEST
        );
    }

    #[test]
    fn the_namespace_request_is_the_sdks() {
        for name in ["team-a", "a\"b\\c", ""] {
            let request = GetResourceRequest {
                api_version: "v1".to_owned(),
                kind: "Namespace".to_owned(),
                name: name.to_owned(),
                namespace: None,
                disable_cache: false,
                field_masks: Some(BTreeSet::from(NAMESPACE_FIELD_MASKS.map(str::to_owned))),
            };
            assert_eq!(
                get_namespace_request(name).unwrap(),
                serde_json::to_vec(&request).unwrap()
            );
        }
    }

    #[test]
    fn the_network_policy_request_is_the_sdks() {
        for (namespace, name) in [
            ("team-a", "nsb-guarded-default-deny"),
            ("a\"b", "c\\d"),
            ("", ""),
        ] {
            let request = GetResourceRequest {
                api_version: "networking.k8s.io/v1".to_owned(),
                kind: "NetworkPolicy".to_owned(),
                name: name.to_owned(),
                namespace: Some(namespace.to_owned()),
                disable_cache: false,
                field_masks: Some(BTreeSet::from(
                    NETWORK_POLICY_FIELD_MASKS.map(str::to_owned),
                )),
            };
            assert_eq!(
                get_network_policy_request(namespace, name).unwrap(),
                serde_json::to_vec(&request).unwrap()
            );
        }
    }
}
