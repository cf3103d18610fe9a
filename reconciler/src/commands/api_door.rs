//! `api-door`: the reconciler's own NetworkPolicy for the cluster of the kubeconfig, its egress
//! door naming the API server's endpoints exactly (from the EndpointSlices of
//! `default/kubernetes`), as chart values or as the manifest. The guard that checks the door
//! while the reconciler runs is `reconcile::api_door_guard`.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use namespace_baseline_core::doors::{ApiEndpoints, SERVICE_NAME_LABEL};

use crate::base::error::{Error, Result};
use crate::runtime::cli::ApiDoorFormat;

/// The name of the reconciler's API door in `deploy/` (the chart names it after the release's
/// reconciler).
pub const API_DOOR_POLICY: &str = "namespace-baseline-reconciler-api-door";

/// `api-door`: the door for the cluster of the kubeconfig, read from its EndpointSlices.
pub async fn render(format: ApiDoorFormat) -> Result<String> {
    let client = crate::runtime::api_client::client(crate::runtime::run::config().await?)?;
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    let listed = slices
        .list(&kube::api::ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}=kubernetes")))
        .await
        .map_err(|error| Error::Client(Box::new(error)))?;
    let api = ApiEndpoints::of(&listed.items.iter().collect::<Vec<_>>());
    if api.addresses.is_empty() {
        return Err(Error::Client(Box::new(kube::Error::Service(
            "the EndpointSlices of default/kubernetes list no ready endpoint".into(),
        ))));
    }
    Ok(render_door(&api, format))
}

/// The door as chart values or as the NetworkPolicy.
pub fn render_door(api: &ApiEndpoints, format: ApiDoorFormat) -> String {
    let addresses: Vec<String> = api
        .addresses
        .iter()
        .map(|address| namespace_baseline_core::cidr::Cidr::host(*address).to_string())
        .collect();
    let ports: Vec<String> = api.ports.iter().map(|(_, port)| port.to_string()).collect();
    match format {
        ApiDoorFormat::Values => format!(
            "# The API server's endpoints (EndpointSlices of default/kubernetes): {api}\n\
             reconciler:\n  networkPolicy:\n    apiServer:\n      addresses: [{}]\n      ports: [{}]\n",
            addresses.join(", "),
            ports.join(", ")
        ),
        ApiDoorFormat::Manifest => {
            let rule = serde_json::to_value(api.door()).unwrap_or_default();
            let policy = serde_json::json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {
                    "name": API_DOOR_POLICY,
                    "namespace": namespace_baseline_core::identity::RECONCILER_NAMESPACE,
                    "labels": {
                        "app.kubernetes.io/name": "namespace-baseline-reconciler",
                        "app.kubernetes.io/part-of": "namespace-baseline",
                    },
                },
                "spec": {
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "namespace-baseline-reconciler"}},
                    "policyTypes": ["Egress"],
                    "egress": [rule],
                },
            });
            format!(
                "# The reconciler's door to the API server: {api}\n{}",
                yaml_serde::to_string(&policy).unwrap_or_default()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use namespace_baseline_core::doors::check_api_door;
    use serde_json::json;

    fn endpoints() -> ApiEndpoints {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.12"]}, {"addresses": ["10.0.0.11"]}],
            "ports": [{"name": "https", "protocol": "TCP", "port": 6443}],
        }))
        .unwrap();
        ApiEndpoints::of(&[&slice])
    }

    #[test]
    fn the_door_is_printed_as_chart_values() {
        assert_eq!(
            render_door(&endpoints(), ApiDoorFormat::Values),
            "# The API server's endpoints (EndpointSlices of default/kubernetes): 10.0.0.11, 10.0.0.12 on TCP 6443\n\
             reconciler:\n  networkPolicy:\n    apiServer:\n      addresses: [10.0.0.11/32, 10.0.0.12/32]\n      ports: [6443]\n"
        );
    }

    /// The chart renders the same door from the same endpoints: charts/check.sh compares its
    /// default rendering with deploy/ plus this file.
    #[test]
    fn the_committed_example_door_is_what_the_command_prints() {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["192.0.2.10"]}],
            "ports": [{"name": "https", "protocol": "TCP", "port": 6443}],
        }))
        .unwrap();
        let printed = render_door(&ApiEndpoints::of(&[&slice]), ApiDoorFormat::Manifest);
        let committed = include_str!("../../../charts/tests/api-door-policy.yaml");
        assert_eq!(
            printed, committed,
            "charts/tests/api-door-policy.yaml is stale: regenerate it from this test's output"
        );
    }

    #[test]
    fn the_door_is_printed_as_the_reconcilers_network_policy() {
        let text = render_door(&endpoints(), ApiDoorFormat::Manifest);
        let policy: NetworkPolicy = yaml_serde::from_str(text.split_once('\n').unwrap().1).unwrap();
        let rules = policy.spec.unwrap().egress.unwrap();
        assert!(check_api_door(&rules, &endpoints()).reachable);
        assert_eq!(rules[0].to.as_ref().unwrap().len(), 2);
    }
}
