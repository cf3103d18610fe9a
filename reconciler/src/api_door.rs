//! The reconciler's own door to the API server. Its namespace is walled like any other, and
//! its egress door names the API server's endpoints exactly (ipBlocks and ports, from the
//! EndpointSlice `default/kubernetes`). If the API server moves — a new control-plane node,
//! another port — the door no longer opens onto it and the reconciler is locked out at its
//! next connection. This guard watches both the EndpointSlice and the door, and says so
//! (error log, metric `namespace_baseline_api_door_mismatch`, an Event on the door) while it
//! can still reach the API server.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use namespace_baseline_core::doors::{
    ApiEndpoints, Reachability, SERVICE_NAME_LABEL, check_api_door,
};
use tracing::{error, info, warn};

use crate::cli::ApiDoorFormat;
use crate::controller::CONTROLLER_NAME;
use crate::error::{Error, Result};
use crate::retry::WatchBackoff;
use crate::state::State;
use crate::writes::gated;

/// The name of the reconciler's API door in `deploy/` (the chart names it after the release's
/// reconciler).
pub const API_DOOR_POLICY: &str = "namespace-baseline-reconciler-api-door";

/// Which of the two watches an event came from.
#[derive(Clone, Copy)]
enum Source {
    Slices,
    Door,
}

/// Checks the door at start and on every change of the EndpointSlice or the door, until the
/// future is dropped (the end of the leadership term).
pub async fn guard(client: Client, state: Arc<State>, door: (String, String), instance: String) {
    let (namespace, name) = door;
    let (slices, slice_writer) = reflector::store::<EndpointSlice>();
    let (doors, door_writer) = reflector::store::<NetworkPolicy>();
    let slice_events = watcher(
        Api::<EndpointSlice>::namespaced(client.clone(), "default"),
        watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}=kubernetes")),
    )
    .backoff(WatchBackoff::default())
    .reflect(slice_writer)
    .map_ok(|event| (Source::Slices, matches!(event, watcher::Event::InitDone)));
    let door_events = watcher(
        Api::<NetworkPolicy>::namespaced(client.clone(), &namespace),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .backoff(WatchBackoff::default())
    .reflect(door_writer)
    .map_ok(|event| (Source::Door, matches!(event, watcher::Event::InitDone)));
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: CONTROLLER_NAME.to_owned(),
            instance: Some(instance),
        },
    );
    let mut events = stream::select(slice_events, door_events).boxed();
    let (mut slices_listed, mut door_listed) = (false, false);
    let mut last: Option<Reachability> = None;
    while let Some(event) = events.next().await {
        let Ok((source, listed)) = event else {
            continue;
        };
        match source {
            Source::Slices => slices_listed |= listed,
            Source::Door => door_listed |= listed,
        }
        if !(slices_listed && door_listed) {
            continue;
        }
        let policy = doors.get(&ObjectRef::new(&name).within(&namespace));
        let outcome = match &policy {
            None => Reachability {
                reachable: false,
                reason: "DoorMissing",
                message: format!(
                    "the reconciler's NetworkPolicy {namespace}/{name} does not exist: the wall of its namespace blocks the API server"
                ),
            },
            Some(policy) => {
                let slices = slices.state();
                let api = ApiEndpoints::of(&slices.iter().map(AsRef::as_ref).collect::<Vec<_>>());
                let rules = policy
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.egress.clone())
                    .unwrap_or_default();
                check_api_door(&rules, &api)
            }
        };
        if last.as_ref() == Some(&outcome) {
            continue;
        }
        state.metrics.set_api_door_mismatch(!outcome.reachable);
        if outcome.reachable {
            info!(message = %outcome.message, "the API door opens onto the API server");
        } else {
            error!(reason = outcome.reason, message = %outcome.message, "the API door does not open onto the API server");
        }
        let changed_state = last
            .as_ref()
            .is_some_and(|last| last.reachable != outcome.reachable);
        if let Some(policy) = &policy
            && (!outcome.reachable || changed_state)
        {
            let event = Event {
                type_: if outcome.reachable {
                    EventType::Normal
                } else {
                    EventType::Warning
                },
                reason: outcome.reason.to_owned(),
                note: Some(outcome.message.clone()),
                action: "CheckApiDoor".to_owned(),
                secondary: None,
            };
            match gated(&state, recorder.publish(&event, &policy.object_ref(&()))).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => warn!(%error, "could not publish the API door Event"),
                Err(error) => warn!(error = %error.report(), "API door Event not published"),
            }
        }
        last = Some(outcome);
    }
}

/// `api-door`: the door for the cluster of the kubeconfig, read from its EndpointSlices.
pub async fn render(format: ApiDoorFormat) -> Result<String> {
    let client = crate::api_client::client(crate::run::config().await?)?;
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
        let committed = include_str!("../../charts/tests/api-door-policy.yaml");
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
