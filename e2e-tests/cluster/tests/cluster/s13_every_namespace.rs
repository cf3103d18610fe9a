//! Scenario 12: "every namespace except...". A baseline whose `namespaceSelector` excludes a
//! few named namespaces and those carrying an opt-out label walls namespaces created after it
//! without any label; its status counts the namespaces it covers and those it leaves out, and
//! `plan --cluster` (as the reconciler's ServiceAccount) names the ones it leaves out.
//!
//! Then, through the real admission chain (the built policy in Kubewarden's policy-server, as
//! in s12), kube-apiserver refuses a tenant's way out: *adding* the opt-out label to a
//! covered namespace, and *creating* a namespace that already carries it.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::admission::AdmissionChain;
use namespace_baseline_cluster_tests::{
    Cluster, ENV_RECONCILER_BIN, Scenario, condition, deny_all_policy_name, get_policy, wait_until,
};
use serde_json::{Value, json};

use crate::common::{SINGLE, assert_rbac_was_enough, create_baseline, figure, start};

/// The opt-out label of the shipped example (`deploy/examples/every-namespace.yaml`).
const OPT_OUT: &str = "hedronite.io/baseline-opt-out";

/// The namespaces the baseline excludes by name: the control plane's, the reconciler's and
/// the policy-server's (as the example), and `default` (the test control plane's clients
/// write Events there).
const EXCLUDED: [&str; 6] = [
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "namespace-baseline",
    "kubewarden",
];

/// The live namespaces, by name, with whether they carry the opt-out label.
async fn live_namespaces(cluster: &Cluster) -> Vec<(String, bool)> {
    let api: Api<Namespace> = Api::all(cluster.admin.clone());
    api.list(&ListParams::default())
        .await
        .expect("listing namespaces")
        .items
        .into_iter()
        .filter(|namespace| namespace.metadata.deletion_timestamp.is_none())
        .map(|namespace| {
            let opted_out = namespace.labels().contains_key(OPT_OUT);
            (namespace.name_any(), opted_out)
        })
        .collect()
}

/// Runs `plan --cluster --output FORMAT` as the reconciler's ServiceAccount: its stdout.
async fn plan(cluster: &Cluster, format: &str) -> String {
    let kubeconfig = cluster.reconciler_kubeconfig().await.unwrap();
    let binary = std::env::var_os(ENV_RECONCILER_BIN)
        .unwrap_or_else(|| panic!("{ENV_RECONCILER_BIN} is not set"));
    let format = format.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(binary)
            .args(["plan", "--cluster", "--output", &format])
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
    })
    .await
    .unwrap()
    .expect("running plan");
    assert!(
        matches!(output.status.code(), Some(0 | 2)),
        "plan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("plan prints UTF-8")
}

#[tokio::test]
async fn s13_an_opt_out_selector_walls_namespaces_that_never_carried_a_label() {
    let (cluster, names, mark) = start("s13").await;
    let mut reconciler = cluster.start_reconciler("s13", SINGLE).await.unwrap();
    let baseline = names.name.clone();
    create_baseline(
        &cluster,
        &baseline,
        json!({
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXCLUDED},
                {"key": OPT_OUT, "operator": "DoesNotExist"},
            ]},
            "allowDNS": true,
            "deletionPolicy": "Delete",
        }),
    )
    .await;

    // Created after the baseline, without a label of their own; one opted out.
    let plain: Vec<String> = (0..3).map(|i| names.namespace(&format!("p{i}"))).collect();
    let opted = vec![names.namespace("opted")];
    names
        .create_namespaces(&plain, &Default::default())
        .await
        .expect("creating unlabelled namespaces");
    names
        .create_namespaces(&opted, &[(OPT_OUT.to_owned(), "true".to_owned())].into())
        .await
        .expect("creating an opted-out namespace");
    let policies = |namespace: &str| {
        let client = cluster.admin.clone();
        let (namespace, name) = (namespace.to_owned(), deny_all_policy_name(&baseline));
        async move { get_policy(&client, &namespace, &name).await }
    };
    let (_, walled_in) = wait_until(
        "the wall in every namespace created without a label",
        Duration::from_secs(30),
        || async {
            for namespace in &plain {
                if policies(namespace).await?.is_none() {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    assert!(
        policies(&opted[0]).await.unwrap().is_none(),
        "the opted-out namespace is walled"
    );

    // The status: covered plus left out is every live namespace; left out are exactly the
    // excluded names and the opted-out ones (counted here without the selector engine).
    let (status, _) = wait_until(
        "a status counting what the selector covers and leaves out",
        Duration::from_secs(30),
        || async {
            let live = live_namespaces(&cluster).await;
            let left_out = live
                .iter()
                .filter(|(name, opted_out)| *opted_out || EXCLUDED.contains(&name.as_str()))
                .count();
            let covered = live.len() - left_out;
            let status = cluster.status(&baseline).await?;
            let counted = usize::try_from(status.namespaces)? == covered
                && status
                    .namespaces_left_out
                    .map(usize::try_from)
                    .transpose()?
                    == Some(left_out)
                && condition(&status, "Ready").is_some_and(|(ready, _, _)| ready == "True");
            Ok(counted.then_some(status))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    figure(
        "s13",
        format!(
            "3 namespaces created without a label walled in {walled_in:.2?}; status namespaces={} namespacesLeftOut={:?}",
            status.namespaces, status.namespaces_left_out
        ),
    );

    // plan names what the selector leaves out, and guards the unlabelled namespaces.
    let report: Value = serde_json::from_str(&plan(&cluster, "json").await).expect("plan JSON");
    let ours = report["baselines"]
        .as_array()
        .expect("baselines")
        .iter()
        .find(|b| b["name"] == baseline.as_str())
        .expect("the scenario's baseline in the plan")
        .clone();
    let listed = |field: &str| -> BTreeSet<String> {
        serde_json::from_value(ours[field].clone()).expect("a list of names")
    };
    let (left_out, guarded) = (listed("leftOut"), listed("guarded"));
    assert!(left_out.contains(&opted[0]), "{left_out:?}");
    for system in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(left_out.contains(system), "{system} not in {left_out:?}");
    }
    for namespace in &plain {
        assert!(guarded.contains(namespace) && !left_out.contains(namespace));
    }
    assert_eq!(
        Some(u32::try_from(left_out.len()).unwrap()),
        status.namespaces_left_out
    );
    let text = plan(&cluster, "text").await;
    let ours_text: String = text
        .split("NamespaceBaseline ")
        .find(|section| section.starts_with(&format!("{baseline} ")))
        .map(|section| format!("NamespaceBaseline {section}"))
        .expect("the scenario's baseline in the text plan");
    assert!(
        ours_text.contains(&format!("leaves out {} namespaces: ", left_out.len())),
        "{ours_text}"
    );
    figure("s13", format!("plan --cluster:\n{ours_text}"));

    // Through the real admission chain: opting out alone is refused by the API server.
    cluster
        .with_admission_chain(async |chain| {
            opting_out_is_refused(&cluster, &names, &baseline, &plain[0], chain).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    // Cleanup: deletionPolicy Delete takes the wall away with the baseline.
    cluster
        .baselines()
        .delete(&baseline, &DeleteParams::default())
        .await
        .expect("deleting the baseline");
    wait_until("the baseline gone", Duration::from_secs(30), || async {
        Ok(cluster
            .baselines()
            .get_opt(&baseline)
            .await?
            .is_none()
            .then_some(()))
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    names
        .delete_namespaces(&[plain.clone(), opted].concat())
        .await;
    reconciler.stop().await.unwrap();
    assert_rbac_was_enough(&cluster, mark);
}

/// With policy-server in the admission chain: adding the opt-out label to the
/// covered namespace `covered` is refused with the policy's message (and the label is not
/// there afterwards), and so is creating a namespace that already carries it.
async fn opting_out_is_refused(
    cluster: &Cluster,
    names: &Scenario,
    baseline: &str,
    covered: &str,
    chain: &AdmissionChain,
) {
    let denied_by = chain.denied_by("", "namespaces");
    let namespaces: Api<Namespace> = Api::all(cluster.admin.clone());
    let opt_out = Patch::Merge(json!({"metadata": {"labels": {OPT_OUT: "true"}}}));
    let refusal = |result: Result<Namespace, kube::Error>| match result {
        Err(kube::Error::Api(status)) => Some((status.code, status.message)),
        _ => None,
    };

    // The chain is in place once a dry-run of the opt-out (no side effects, so the webhook is
    // called) is refused by it.
    let (_, effective) = wait_until(
        "the webhook in the admission chain",
        Duration::from_secs(15),
        || async {
            let dry_run = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            Ok(refusal(namespaces.patch(covered, &dry_run, &opt_out).await)
                .filter(|(_, message)| message.starts_with(&denied_by)))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", chain.policy_server.log_tail(20)));
    figure(
        "s13",
        format!("webhook configuration effective after {effective:?}"),
    );

    let (code, message) = refusal(
        namespaces
            .patch(covered, &PatchParams::default(), &opt_out)
            .await,
    )
    .expect("the API server must refuse adding the opt-out label");
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with(&denied_by)
            && message.contains(&format!(
                "namespace \"{covered}\" is guarded by NamespaceBaseline \"{baseline}\""
            ))
            && message.contains("would take it out of the baseline"),
        "{message}"
    );
    let labels = namespaces.get(covered).await.unwrap().metadata.labels;
    assert!(
        !labels.unwrap_or_default().contains_key(OPT_OUT),
        "the opt-out label was added"
    );
    figure(
        "s13",
        format!("add the opt-out label as admin: {code} {message}"),
    );

    let born_opted = names.namespace("born-opted");
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": born_opted, "labels": {OPT_OUT: "true"}},
    }))
    .unwrap();
    let (code, message) = refusal(namespaces.create(&PostParams::default(), &namespace).await)
        .expect("the API server must refuse creating an opted-out namespace");
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with(&denied_by)
            && message.contains(&format!(
                "namespace \"{born_opted}\" would be created outside NamespaceBaseline \"{baseline}\""
            )),
        "{message}"
    );
    assert!(namespaces.get_opt(&born_opted).await.unwrap().is_none());
    figure(
        "s13",
        format!("create a namespace carrying the opt-out label as admin: {code} {message}"),
    );
}
