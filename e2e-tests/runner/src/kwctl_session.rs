//! The kwctl replay session of one fixture (`e2e-runner --kwctl-sessions DIR`): the Kubernetes
//! host calls the built policy made for it in this host, in order, each with the answer the
//! fixture gives ([`host_answer`]), in kwctl's session format
//! (`namespace_baseline_formats::fixture::kwctl_session`). `e2e-tests/kwctl.bats` runs the
//! fixture through `kwctl run --replay-host-capabilities-interactions` with it: the requests
//! come from the policy itself, so they cannot fall behind its field masks or the order of its
//! calls, and kwctl still checks each one against what the policy sends under kwctl.

use std::sync::Arc;

use namespace_baseline_formats::fixture::kwctl_session::{self, Exchange};

use crate::{Cluster, HostCall, host_answer};

/// The session of `calls` (one evaluation's, logging included), answered from `cluster`.
pub fn session(cluster: &Arc<Cluster>, calls: &[HostCall]) -> Result<String, String> {
    let exchanges = calls
        .iter()
        .filter(|call| !call.is_log())
        .map(|call| exchange(cluster, call))
        .collect::<Result<Vec<_>, _>>()?;
    kwctl_session::to_yaml(&exchanges)
}

fn exchange(cluster: &Arc<Cluster>, call: &HostCall) -> Result<Exchange, String> {
    if call.is_unexpected()
        || (call.binding.as_str(), call.namespace.as_str()) != ("kubewarden", "kubernetes")
    {
        return Err(format!("no replay for an unexpected host call: {call}"));
    }
    let payload = serde_json::to_vec(&call.payload).map_err(|error| error.to_string())?;
    let answer = host_answer(
        cluster,
        &call.binding,
        &call.namespace,
        &call.operation,
        &payload,
    );
    Exchange::kubernetes(
        &call.operation,
        &call.payload,
        answer.as_deref().map_err(String::as_str),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::CallOutcome;

    fn call(operation: &str, payload: Value) -> HostCall {
        HostCall {
            binding: "kubewarden".into(),
            namespace: "kubernetes".into(),
            operation: operation.into(),
            payload,
            outcome: CallOutcome::Answered,
        }
    }

    fn get(api_version: &str, kind: &str, name: &str, namespace: Value) -> Value {
        json!({"api_version": api_version, "kind": kind, "name": name, "namespace": namespace,
               "disable_cache": false, "field_masks": ["metadata.labels", "metadata.name"]})
    }

    #[test]
    fn each_call_is_replayed_with_the_fixtures_answer_in_order() {
        let cluster = Arc::new(Cluster {
            baselines: vec![json!({"metadata": {"name": "guarded"}, "spec": {"mode": "Enforce"}})],
            namespaces: vec![json!({"metadata": {"name": "team-a", "labels": {"a": "b"}}})],
            ..Cluster::default()
        });
        let list = json!({"api_version": "hedronite.io/v1alpha1", "kind": "NamespaceBaseline",
                          "label_selector": null, "field_selector": null,
                          "field_masks": ["metadata.name"]});
        let log = HostCall {
            namespace: "tracing".into(),
            operation: "log".into(),
            ..call("log", json!({}))
        };
        let calls = [
            call("list_resources_all", list.clone()),
            log,
            call(
                "get_resource",
                get("v1", "Namespace", "team-a", Value::Null),
            ),
            call(
                "get_resource",
                get(
                    "networking.k8s.io/v1",
                    "NetworkPolicy",
                    "wall",
                    json!("team-a"),
                ),
            ),
        ];
        let exchanges = kwctl_session::parse(&session(&cluster, &calls).unwrap()).unwrap();
        assert_eq!(exchanges.len(), 3, "logging is no exchange: {exchanges:?}");
        assert_eq!(exchanges[0].call().unwrap(), ("list_resources_all", list));
        let kwctl_session::Response::Success { payload } = &exchanges[0].response else {
            panic!("{exchanges:?}")
        };
        let listed: Value = serde_json::from_str(payload).unwrap();
        assert_eq!(listed["items"], json!([{"metadata": {"name": "guarded"}}]));
        let kwctl_session::Response::Success { payload } = &exchanges[1].response else {
            panic!("{exchanges:?}")
        };
        assert_eq!(
            serde_json::from_str::<Value>(payload).unwrap(),
            json!({"metadata": {"name": "team-a", "labels": {"a": "b"}}})
        );
        // Not found, as the policy-server words it, without the prefix kwctl adds again.
        assert_eq!(
            exchanges[2].response,
            kwctl_session::Response::Error {
                message: "Cannot find networking.k8s.io/v1/NetworkPolicy named 'wall' inside of namespace 'Some(\"team-a\")'".into()
            }
        );
    }

    #[test]
    fn a_host_error_is_replayed_and_an_unexpected_call_refused() {
        let cluster = Arc::new(Cluster {
            host_error: Some("etcdserver: request timed out".into()),
            ..Cluster::default()
        });
        let namespace = get("v1", "Namespace", "team-a", Value::Null);
        let exchanges = kwctl_session::parse(
            &session(&cluster, &[call("get_resource", namespace.clone())]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            exchanges[0].response,
            kwctl_session::Response::Error {
                message: "etcdserver: request timed out".into()
            }
        );
        let unexpected = HostCall {
            outcome: CallOutcome::Unexpected("no".into()),
            ..call("get_resource", namespace)
        };
        assert!(session(&cluster, &[unexpected]).is_err());
    }
}
