//! Scenario 1: the CRD as the API server sees it: the seed example accepted unchanged, server-side
//! defaults, the status subresource, and malformed `namespaceLabel`s refused by the schema.
//! (The length-only invalid label, reported in status, is in `s8_invalid`.)

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::{read_yaml_documents, repo_root};
use serde_json::json;

use crate::common::{figure, start};

#[tokio::test]
async fn s1_seed_example_is_accepted_unchanged_and_defaults_apply() {
    let (cluster, names, _) = start("s1-seed").await;

    // The CRD as served: cluster-scoped, short name, status subresource, printer columns.
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.admin.clone());
    let crd = crds.get("namespacebaselines.hedronite.io").await.unwrap();
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["nsb".to_owned()][..])
    );
    let version = &crd.spec.versions[0];
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some(),
        "no status subresource"
    );
    let columns: Vec<String> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    for wanted in ["Label", "Namespaces", "Ready", "Age"] {
        assert!(
            columns.iter().any(|c| c == wanted),
            "printer column {wanted} missing: {columns:?}"
        );
    }

    // deploy/examples/seed.yaml, byte for byte what the seed wrote.
    let seed = read_yaml_documents(&repo_root().join("deploy/examples/seed.yaml")).unwrap();
    assert_eq!(seed.len(), 1);
    let created = cluster
        .create(&seed[0])
        .await
        .expect("the seed example must be accepted");
    for (field, value) in seed[0]["spec"].as_object().unwrap() {
        assert_eq!(
            &created.data["spec"][field], value,
            "spec.{field} changed by the API server"
        );
    }
    figure(
        "s1",
        format!("seed example accepted: spec {}", created.data["spec"]),
    );

    // allowDNS (and the extensions) default server-side when omitted.
    // Read back raw (a typed read would fill the default client-side).
    let name = names.name.clone();
    let minimal = cluster
        .create(&json!({
            "apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaseline",
            "metadata": {"name": name}, "spec": {"namespaceLabel": "e2e-minimal"},
        }))
        .await
        .expect("a minimal baseline");
    assert_eq!(
        minimal.data["spec"]["allowDNS"],
        json!(true),
        "allowDNS not defaulted server-side: {}",
        minimal.data["spec"]
    );
    figure(
        "s1",
        format!(
            "defaults stored server-side for {{namespaceLabel}}: spec {}",
            minimal.data["spec"]
        ),
    );

    // The status subresource: writing status never bumps the generation, and status in a
    // main-resource write is ignored.
    let api = cluster.baselines();
    let generation = minimal.metadata.generation;
    let after = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"namespaces": 7, "objectsApplied": 0, "conditions": []}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        after.metadata.generation, generation,
        "a status write bumped the generation"
    );
    assert_eq!(after.status.as_ref().map(|s| s.namespaces), Some(7));
    let after = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"namespaces": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(
        after.status.as_ref().map(|s| s.namespaces),
        Some(7),
        "status written through the main resource"
    );
    let after = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowDNS": false}})),
        )
        .await
        .unwrap();
    assert_eq!(
        after.metadata.generation,
        generation.map(|g| g + 1),
        "a spec write must bump the generation"
    );
    figure(
        "s1",
        "status subresource: status write keeps generation, status via main resource ignored, spec write bumps generation",
    );
    api.delete(&after.name_any(), &Default::default())
        .await
        .unwrap();
    cluster.remove_all_baselines().await.unwrap();
}

#[tokio::test]
async fn s1_malformed_namespace_labels_are_refused_by_the_schema() {
    let (cluster, names, _) = start("s1-schema").await;
    let mut refused = Vec::new();
    for (index, label) in ["a!=b", "a=b=c", "=x", "a b", "a=", "", "kube-system/x=y/z"]
        .iter()
        .enumerate()
    {
        let object = json!({
            "apiVersion": "hedronite.io/v1alpha1",
            "kind": "NamespaceBaseline",
            "metadata": {"name": format!("{}-{index}", names.name)},
            "spec": {"namespaceLabel": label},
        });
        match cluster.create(&object).await {
            Ok(created) => panic!("namespaceLabel {label:?} was accepted: {:?}", created.data),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{label:?}: {status:?}");
                assert!(
                    status.message.contains("spec.namespaceLabel"),
                    "{label:?}: {}",
                    status.message
                );
                refused.push(format!("{label:?}"));
            }
            Err(other) => panic!("{label:?}: unexpected error {other}"),
        }
    }
    // No namespaceLabel at all.
    let missing = json!({
        "apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaseline",
        "metadata": {"name": format!("{}-missing", names.name)}, "spec": {"allowDNS": true},
    });
    match cluster.create(&missing).await {
        Err(kube::Error::Api(status)) if status.code == 422 => refused.push("<missing>".to_owned()),
        other => panic!("a baseline without namespaceLabel: {other:?}"),
    }
    // Unknown enum values.
    let bad_mode = json!({
        "apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaseline",
        "metadata": {"name": format!("{}-mode", names.name)},
        "spec": {"namespaceLabel": "a", "mode": "Enforcing"},
    });
    assert!(matches!(cluster.create(&bad_mode).await, Err(kube::Error::Api(s)) if s.code == 422));
    figure(
        "s1",
        format!(
            "refused by the CRD schema (422): {}, mode=Enforcing",
            refused.join(", ")
        ),
    );
    assert!(
        cluster
            .baselines()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
