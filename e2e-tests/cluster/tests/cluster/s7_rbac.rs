//! Scenario 7: the reconciler's ServiceAccount can do each thing `deploy/rbac.yaml` lists and
//! nothing else that matters: no Secrets, no Pods or ConfigMaps, no Leases elsewhere.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use namespace_baseline_cluster_tests::{can_i, read_yaml_documents, repo_root};
use namespace_baseline_core::identity::{RECONCILER_NAMESPACE, RECONCILER_SERVICE_ACCOUNT};
use serde_json::{Value, json};

use crate::common::{figure, start};

/// (verb, API group, resource, subresource, namespace).
type Access = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn is_forbidden<T>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.code == 403)
}

#[tokio::test]
async fn s7_the_service_account_can_do_what_rbac_lists_and_no_more() {
    let (cluster, names, _) = start("s7").await;
    let sa = cluster.reconciler_client().await.unwrap();
    let rbac = read_yaml_documents(&repo_root().join("deploy/rbac.yaml")).unwrap();

    // Every granted (group, resource, verb), where it is granted: allowed.
    let mut granted = 0;
    let mut allowed_cluster_wide = Vec::new();
    for document in &rbac {
        let kind = document["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        let namespace = document["metadata"]["namespace"].as_str();
        for rule in document["rules"].as_array().into_iter().flatten() {
            let text = rule.to_string();
            assert!(!text.contains('*'), "wildcard in {kind} rule {text}");
            assert!(
                rule.get("resourceNames").is_none() || kind == "Role",
                "{text}"
            );
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    let (resource, subresource) = match resource.split_once('/') {
                        Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                        None => (resource.clone(), None),
                    };
                    for verb in strings(&rule["verbs"]) {
                        let allowed = can_i(
                            &sa,
                            &verb,
                            &group,
                            &resource,
                            subresource.as_deref(),
                            namespace,
                        )
                        .await
                        .unwrap();
                        assert!(
                            allowed,
                            "{kind} grants {verb} {group}/{resource} {subresource:?} but the API server says no"
                        );
                        granted += 1;
                        if kind == "ClusterRole" {
                            allowed_cluster_wide.push(format!(
                                "{verb} {resource}{}",
                                subresource
                                    .as_deref()
                                    .map(|s| format!("/{s}"))
                                    .unwrap_or_default()
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        granted >= 10,
        "rbac.yaml grants suspiciously little ({granted})"
    );

    // The blast radius: what must be refused.
    let refused: &[Access] = &[
        ("get", "", "secrets", None, Some(RECONCILER_NAMESPACE)),
        ("list", "", "secrets", None, None),
        ("watch", "", "secrets", None, Some("kube-system")),
        ("create", "", "pods", None, Some(RECONCILER_NAMESPACE)),
        ("create", "", "pods", None, Some("default")),
        ("create", "", "configmaps", None, Some(RECONCILER_NAMESPACE)),
        ("get", "", "configmaps", None, Some("kube-system")),
        (
            "create",
            "coordination.k8s.io",
            "leases",
            None,
            Some("default"),
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-system"),
        ),
        (
            "patch",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-node-lease"),
        ),
        (
            "delete",
            "coordination.k8s.io",
            "leases",
            None,
            Some(RECONCILER_NAMESPACE),
        ),
        // Every Lease write is a conditional update: patch is not needed.
        (
            "patch",
            "coordination.k8s.io",
            "leases",
            None,
            Some(RECONCILER_NAMESPACE),
        ),
        ("create", "", "namespaces", None, None),
        ("delete", "", "namespaces", None, None),
        ("update", "", "namespaces", None, None),
        ("patch", "", "namespaces", None, None),
        (
            "create",
            "",
            "serviceaccounts",
            Some("token"),
            Some(RECONCILER_NAMESPACE),
        ),
        (
            "impersonate",
            "",
            "serviceaccounts",
            None,
            Some("kube-system"),
        ),
        (
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
            None,
        ),
        (
            "escalate",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            None,
        ),
        (
            "bind",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            None,
        ),
        (
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            None,
            Some(RECONCILER_NAMESPACE),
        ),
        ("create", "hedronite.io", "namespacebaselines", None, None),
        ("delete", "hedronite.io", "namespacebaselines", None, None),
        (
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            None,
        ),
        (
            "update",
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            None,
            None,
        ),
        (
            "create",
            "apps",
            "deployments",
            None,
            Some(RECONCILER_NAMESPACE),
        ),
        (
            "deletecollection",
            "networking.k8s.io",
            "networkpolicies",
            None,
            None,
        ),
    ];
    let mut wrongly_allowed = Vec::new();
    for (verb, group, resource, subresource, namespace) in refused {
        if can_i(&sa, verb, group, resource, *subresource, *namespace)
            .await
            .unwrap()
        {
            wrongly_allowed.push(format!(
                "{verb} {group}/{resource} {subresource:?} in {namespace:?}"
            ));
        }
    }
    assert!(
        wrongly_allowed.is_empty(),
        "the reconciler may do more than it needs: {wrongly_allowed:#?}"
    );

    // Real calls, not only reviews: the refusals...
    let secrets: Api<Secret> = Api::namespaced(sa.clone(), RECONCILER_NAMESPACE);
    assert!(
        is_forbidden(secrets.list(&ListParams::default()).await),
        "listed Secrets"
    );
    let all_secrets: Api<Secret> = Api::all(sa.clone());
    assert!(
        is_forbidden(all_secrets.list(&ListParams::default()).await),
        "listed Secrets cluster-wide"
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(sa.clone(), RECONCILER_NAMESPACE);
    let configmap: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "e2e-forbidden"}})).unwrap();
    assert!(
        is_forbidden(configmaps.create(&PostParams::default(), &configmap).await),
        "created a ConfigMap"
    );
    let pods: Api<Pod> = Api::namespaced(sa.clone(), RECONCILER_NAMESPACE);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "e2e-forbidden"},
        "spec": {"serviceAccountName": RECONCILER_SERVICE_ACCOUNT, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    assert!(
        is_forbidden(pods.create(&PostParams::default(), &pod).await),
        "created a Pod"
    );
    let foreign_leases: Api<Lease> = Api::namespaced(sa.clone(), "default");
    let lease: Lease =
        serde_json::from_value(json!({"metadata": {"name": format!("{}-lease", names.name)}}))
            .unwrap();
    assert!(
        is_forbidden(foreign_leases.create(&PostParams::default(), &lease).await),
        "created a Lease in default"
    );
    let namespaces: Api<Namespace> = Api::all(sa.clone());
    let namespace = names.namespace("rbac");
    assert!(
        is_forbidden(
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap()
                )
                .await
        ),
        "created a Namespace"
    );

    // ...and what it needs, done for real.
    names
        .create_namespaces(std::slice::from_ref(&namespace), &names.walled_labels())
        .await
        .unwrap();
    assert!(
        !namespaces
            .list(&ListParams::default().limit(1))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let policies: Api<NetworkPolicy> = Api::namespaced(sa.clone(), &namespace);
    let policy = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "e2e-rbac"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    });
    policies
        .patch(
            "e2e-rbac",
            &PatchParams::apply("namespace-baseline").force(),
            &Patch::Apply(&policy),
        )
        .await
        .unwrap();
    policies.get("e2e-rbac").await.unwrap();
    policies
        .delete("e2e-rbac", &DeleteParams::default())
        .await
        .unwrap();
    let own_leases: Api<Lease> = Api::namespaced(sa.clone(), RECONCILER_NAMESPACE);
    own_leases
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let mut created = own_leases
        .get(&lease.metadata.name.clone().unwrap())
        .await
        .unwrap();
    created.spec = Some(serde_json::from_value(json!({"holderIdentity": "e2e"})).unwrap());
    own_leases
        .replace(
            &lease.metadata.name.clone().unwrap(),
            &PostParams::default(),
            &created,
        )
        .await
        .unwrap();
    figure(
        "s7",
        format!(
            "{granted} granted (verb, resource) pairs all allowed by SelfSubjectAccessReview; {} out-of-scope requests all denied; real calls: Secrets list, ConfigMap/Pod create, Lease in default, Namespace create -> 403; NetworkPolicy apply/get/delete and own-namespace Lease create/update -> OK",
            refused.len()
        ),
    );
    figure(
        "s7",
        format!("cluster-wide grants: {}", allowed_cluster_wide.join(", ")),
    );
}
