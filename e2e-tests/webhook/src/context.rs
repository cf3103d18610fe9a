//! What the policy's host calls can ask about one AdmissionRequest, read from the live API
//! server before the policy runs, into the runner's [`Cluster`] (the waPC host answers the
//! calls from it synchronously; the policy-server answers them from its own watch caches and
//! GETs, so this snapshot is never staler than the policy-server's answers would be).
//!
//! Read with the stand-in's kubeconfig: run it as the policy-server's ServiceAccount and the
//! reads succeed or fail exactly as `deploy/policy-server-rbac.yaml` lets them. A read that
//! fails makes every host call of that evaluation fail with the API server's message
//! ([`Cluster::host_error`]), which is how the policy sees an unreachable or forbidding API
//! (coarser than the policy-server, where only the call reading that kind fails: the
//! runner's `Cluster` has one error for every call).
//!
//! Adding a kind the policy reads is one line in [`read`] (with its [`Kind`] and the field of
//! [`Cluster`] that the runner answers it from).

use anyhow::{Context as _, Result};
use kube::Client;
use namespace_baseline_core::identity::{deny_all_policy_name, dns_policy_name};
use namespace_baseline_e2e::{BASELINE_API_VERSION, BASELINE_KIND, Cluster};
use serde_json::Value;

use crate::review::AdmissionRequest;

/// A kind the host calls read, and where the API serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// The resource, plural, as in the URL.
    pub plural: &'static str,
}

pub const BASELINES: Kind = Kind {
    api_version: BASELINE_API_VERSION,
    kind: BASELINE_KIND,
    plural: "namespacebaselines",
};

pub const NAMESPACES: Kind = Kind {
    api_version: "v1",
    kind: "Namespace",
    plural: "namespaces",
};

pub const NETWORK_POLICIES: Kind = Kind {
    api_version: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    plural: "networkpolicies",
};

impl Kind {
    /// The URL path of the collection, in `namespace` when given.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let root = if self.api_version.contains('/') {
            format!("/apis/{}", self.api_version)
        } else {
            format!("/api/{}", self.api_version)
        };
        match namespace {
            Some(namespace) => format!("{root}/namespaces/{namespace}/{}", self.plural),
            None => format!("{root}/{}", self.plural),
        }
    }

    /// A list's items carry no `apiVersion` and `kind` for built-in kinds: add them, as a
    /// single GET has them.
    fn typed(&self, mut object: Value) -> Value {
        if let Value::Object(map) = &mut object {
            map.entry("apiVersion")
                .or_insert_with(|| self.api_version.into());
            map.entry("kind").or_insert_with(|| self.kind.into());
        }
        object
    }
}

/// The namespaces a request concerns: its own, and for a Namespace the one it changes.
pub fn request_namespaces(request: &AdmissionRequest) -> Vec<String> {
    let mut names: Vec<String> = request.namespace.iter().cloned().collect();
    if request.resource.group.is_empty() && request.resource.resource == NAMESPACES.plural {
        names.extend(request.name.iter().cloned());
    }
    names.sort();
    names.dedup();
    names
}

/// A Pod request (the only kind whose rule reads NetworkPolicies).
fn is_pod(request: &AdmissionRequest) -> bool {
    request.resource.group.is_empty() && request.resource.resource == "pods"
}

/// The [`Cluster`] the policy's host calls are answered from for `request`; a failed read
/// becomes a [`Cluster::host_error`].
pub async fn snapshot(client: &Client, request: &AdmissionRequest) -> Cluster {
    read(client, request).await.unwrap_or_else(|error| Cluster {
        host_error: Some(host_error(&error)),
        ..Cluster::default()
    })
}

/// What a failed host call says: the API server's own message when it answered (as the
/// policy-server passes it on), else the whole error.
pub fn host_error(error: &anyhow::Error) -> String {
    error
        .chain()
        .find_map(|cause| match cause.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some(status.message.clone()),
            _ => None,
        })
        .unwrap_or_else(|| format!("{error:#}"))
}

/// Everything the host calls can ask about `request`, one line per kind.
async fn read(client: &Client, request: &AdmissionRequest) -> Result<Cluster> {
    let baselines = list(client, &BASELINES, None).await?;
    // The pod rule (podsWaitForWall) GETs a guarding baseline's wall by name in the pod's
    // namespace, as the policy-server does and as deploy/policy-server-rbac.yaml grants
    // (get, not list): every live baseline's wall names, a missing one left out.
    let network_policies = match (&request.namespace, is_pod(request)) {
        (Some(namespace), true) => {
            let names = wall_names(&baselines);
            get_each(client, &NETWORK_POLICIES, Some(namespace), &names).await?
        }
        _ => Vec::new(),
    };
    Ok(Cluster {
        namespaces: get_each(client, &NAMESPACES, None, &request_namespaces(request)).await?,
        baselines,
        network_policies,
        ..Cluster::default()
    })
}

/// The names of the NetworkPolicies of every baseline's wall (its deny-all and its DNS
/// door), as the reconciler names them in each namespace it guards.
pub fn wall_names(baselines: &[Value]) -> Vec<String> {
    baselines
        .iter()
        .filter_map(|baseline| baseline["metadata"]["name"].as_str())
        .flat_map(|name| [deny_all_policy_name(name), dns_policy_name(name)])
        .collect()
}

/// Every object of `kind` (in `namespace` when given).
pub async fn list(client: &Client, kind: &Kind, namespace: Option<&str>) -> Result<Vec<Value>> {
    let path = kind.collection_path(namespace);
    let list: Value = client
        .request(http::Request::get(&path).body(Vec::new())?)
        .await
        .with_context(|| format!("list {path}"))?;
    Ok(list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|item| kind.typed(item))
        .collect())
}

/// The objects of `kind` named `names` that exist (a missing one is left out: the host
/// call for it answers not found).
pub async fn get_each(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    names: &[String],
) -> Result<Vec<Value>> {
    let mut found = Vec::new();
    for name in names {
        let path = format!("{}/{name}", kind.collection_path(namespace));
        match client
            .request::<Value>(http::Request::get(&path).body(Vec::new())?)
            .await
        {
            Ok(object) => found.push(kind.typed(object)),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error).with_context(|| format!("get {path}")),
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    #[rstest]
    #[case::custom_resource(BASELINES, None, "/apis/hedronite.io/v1alpha1/namespacebaselines")]
    #[case::core_cluster_scoped(NAMESPACES, None, "/api/v1/namespaces")]
    #[case::namespaced(
        Kind { api_version: "networking.k8s.io/v1", kind: "NetworkPolicy", plural: "networkpolicies" },
        Some("team-a"),
        "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies"
    )]
    fn collections_are_where_the_api_serves_them(
        #[case] kind: Kind,
        #[case] namespace: Option<&str>,
        #[case] path: &str,
    ) {
        assert_eq!(kind.collection_path(namespace), path);
    }

    #[test]
    fn the_wall_is_read_by_the_names_the_reconciler_gives_it() {
        let baselines = [
            json!({"metadata": {"name": "default"}}),
            json!({"metadata": {"name": "strict"}}),
            json!({"metadata": {}}),
        ];
        assert_eq!(
            wall_names(&baselines),
            [
                deny_all_policy_name("default"),
                dns_policy_name("default"),
                deny_all_policy_name("strict"),
                dns_policy_name("strict"),
            ]
        );
    }

    #[test]
    fn a_host_error_is_the_api_servers_message() {
        let forbidden = kube::Error::Api(Box::new(
            kube::core::Status::failure("namespaces \"a\" is forbidden", "Forbidden")
                .with_code(403),
        ));
        let error = anyhow::Error::from(forbidden).context("get /api/v1/namespaces/a");
        assert_eq!(host_error(&error), "namespaces \"a\" is forbidden");
        let other = anyhow::anyhow!("connection refused").context("list /api/v1/namespaces");
        assert_eq!(
            host_error(&other),
            "list /api/v1/namespaces: connection refused"
        );
    }

    #[test]
    fn list_items_get_their_type() {
        assert_eq!(
            NAMESPACES.typed(json!({"metadata": {"name": "a"}})),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}})
        );
        let typed = json!({"apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaseline"});
        assert_eq!(BASELINES.typed(typed.clone()), typed);
    }

    fn request(
        resource: &str,
        group: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> AdmissionRequest {
        serde_json::from_value(json!({
            "uid": "u",
            "kind": {"group": group, "version": "v1", "kind": "K"},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": name,
            "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": {},
        }))
        .unwrap()
    }

    #[rstest]
    #[case::a_network_policy(request("networkpolicies", "networking.k8s.io", "deny", Some("team-a")), &["team-a"])]
    #[case::a_namespace(request("namespaces", "", "team-a", Some("team-a")), &["team-a"])]
    #[case::a_namespace_without_namespace(request("namespaces", "", "team-b", None), &["team-b"])]
    #[case::a_lookalike_group(request("namespaces", "example.com", "x", None), &[])]
    fn the_request_names_its_namespaces(#[case] request: AdmissionRequest, #[case] names: &[&str]) {
        assert_eq!(request_namespaces(&request), names);
    }
}
