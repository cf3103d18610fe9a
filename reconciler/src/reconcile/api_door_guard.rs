//! The reconciler's own door to the API server. Its namespace is walled like any other, and
//! its egress door names the API server's endpoints exactly (ipBlocks and ports, from the
//! EndpointSlice `default/kubernetes`). If the API server moves — a new control-plane node,
//! another port — the door no longer opens onto it and the reconciler is locked out at its
//! next connection. This guard watches both the EndpointSlice and the door, and says so
//! (error log, metric `namespace_baseline_api_door_mismatch`, an Event on the door) while it
//! can still reach the API server.

use std::sync::Arc;

use futures::{StreamExt, stream};
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

use crate::base::watch_errors::{Watch, watch_events};
use crate::reconcile::context::CONTROLLER_NAME;
use crate::reconcile::state::State;

/// Which of the two watches an event came from.
#[derive(Clone, Copy)]
enum Source {
    Slices,
    Door,
}

/// Checks the door at start and on every change of the EndpointSlice or the door, until the
/// future is dropped (the end of the leadership term).
pub async fn guard(client: Client, state: Arc<State>, door: (String, String), instance: String) {
    let term = state.leader.current_term();
    let (namespace, name) = door;
    let (slices, slice_writer) = reflector::store::<EndpointSlice>();
    let (doors, door_writer) = reflector::store::<NetworkPolicy>();
    let slice_events = watch_events(
        watcher(
            Api::<EndpointSlice>::namespaced(client.clone(), "default"),
            watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}=kubernetes")),
        )
        .reflect(slice_writer),
        Watch::within("endpointslices", "default"),
        state.metrics.watches.clone(),
    )
    .map(|event| (Source::Slices, matches!(event, watcher::Event::InitDone)));
    let door_events = watch_events(
        watcher(
            Api::<NetworkPolicy>::namespaced(client.clone(), &namespace),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .reflect(door_writer),
        Watch::within("networkpolicies", &namespace),
        state.metrics.watches.clone(),
    )
    .map(|event| (Source::Door, matches!(event, watcher::Event::InitDone)));
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
    while let Some((source, listed)) = events.next().await {
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
            match state
                .write(term, recorder.publish(&event, &policy.object_ref(&())))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(error)) => warn!(%error, "could not publish the API door Event"),
                Err(error) => warn!(error = %error.report(), "API door Event not published"),
            }
        }
        last = Some(outcome);
    }
}
