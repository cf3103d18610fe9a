//! Scenario 12: the admission policy in the real API server's admission chain. The built
//! module, annotated by kwctl, runs in Kubewarden's policy-server 1.35 (as the policy-server's
//! ServiceAccount with `deploy/policy-server-rbac.yaml`, configured from
//! `deploy/admission-policy.yaml` as Kubewarden's controller configures it), registered by the
//! ValidatingWebhookConfigurations the controller would create. Through it, kube-apiserver
//! itself refuses an admin's DELETE of a managed deny-all and the removal of a guarded
//! namespace's label with the policy's messages, lets an unrelated NetworkPolicy through, and
//! lets the reconciler's ServiceAccount repair a deleted wall.

use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use namespace_baseline_cluster_tests::admission::AdmissionChain;
use namespace_baseline_cluster_tests::{
    Cluster, Scenario, deny_all_policy_name, dns_policy_name, reconciler_username, wait_until,
};
use serde_json::json;

use crate::common::{SINGLE, create_baseline, figure, namespaces, spec, start, wait_wall};

/// How long a webhook configuration change may take to reach the API server's admission
/// chain (it watches the configurations).
const CHAIN_UPDATE: Duration = Duration::from_secs(15);

/// The API server's refusal of a request, as the client sees it: (code, message).
fn refusal<T>(result: Result<T, kube::Error>) -> Option<(u16, String)> {
    match result {
        Err(kube::Error::Api(status)) => Some((status.code, status.message)),
        _ => None,
    }
}

#[tokio::test]
async fn s12_the_api_server_refuses_through_policy_server() {
    let (cluster, names, _) = start("s12").await;
    let baseline = names.name.clone();
    let (walled, _) = namespaces(&names, 2, 0).await;
    create_baseline(&cluster, &baseline, spec(&names)).await;
    let reconciler = cluster
        .start_reconciler("s12-a", SINGLE)
        .await
        .expect("the reconciler");
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(30)).await;

    cluster
        .with_admission_chain(async |chain| {
            through_the_chain(&cluster, &names, &baseline, &walled, chain, reconciler).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    names.delete_namespaces(&walled).await;
}

async fn through_the_chain(
    cluster: &Cluster,
    names: &Scenario,
    baseline: &str,
    walled: &[String],
    chain: &AdmissionChain,
    mut reconciler: namespace_baseline_cluster_tests::Reconciler,
) {
    figure("s12", format!("admission chain through {}", chain.version));
    let denied_by = chain.denied_by("networking.k8s.io", "networkpolicies");
    let namespace_denied_by = chain.denied_by("", "namespaces");
    let deny_all = deny_all_policy_name(baseline);
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled[0]);

    // The chain is in place once a dry-run DELETE of the wall (no side effects, so the
    // webhook is called) is refused by it.
    let (_, effective) = wait_until("the webhook in the admission chain", CHAIN_UPDATE, || {
        let policies = policies.clone();
        let deny_all = deny_all.clone();
        let denied_by = denied_by.clone();
        async move {
            let dry_run = DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            };
            Ok(refusal(policies.delete(&deny_all, &dry_run).await)
                .filter(|(_, message)| message.starts_with(&denied_by)))
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", chain.policy_server.log_tail(20)));
    figure(
        "s12",
        format!("webhook configuration effective after {effective:?}"),
    );

    // An admin's DELETE of the managed deny-all: refused by the API server, with the policy's
    // message, and the policy is still there.
    let (code, message) = refusal(policies.delete(&deny_all, &DeleteParams::default()).await)
        .expect("the API server must refuse the DELETE of the deny-all");
    let wall_message = format!(
        "NetworkPolicy \"{deny_all}\" in namespace \"{}\" is part of the network wall of NamespaceBaseline \"{baseline}\" and cannot be deleted",
        walled[0]
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with(&denied_by) && message.contains(&wall_message),
        "{message}"
    );
    assert!(policies.get_opt(&deny_all).await.unwrap().is_some());
    figure("s12", format!("DELETE deny-all as admin: {code} {message}"));

    // Removing a guarded namespace's label: refused, the label stays.
    let (code, message) = refusal(names.set_namespace_label(&walled[1], None).await.map_err(
        |error| match error.downcast::<kube::Error>() {
            Ok(error) => error,
            Err(other) => panic!("unexpected error: {other:#}"),
        },
    ))
    .expect("the API server must refuse removing the guard label");
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with(&namespace_denied_by)
            && message.contains(&format!("namespace \"{}\" is guarded by", walled[1]))
            && message.contains("would take it out of the baseline"),
        "{message}"
    );
    let namespace = get_namespace(cluster, &walled[1]).await;
    assert_eq!(
        namespace
            .metadata
            .labels
            .unwrap_or_default()
            .get(namespace_baseline_cluster_tests::SCENARIO_LABEL),
        Some(&names.label_value)
    );
    figure(
        "s12",
        format!("remove the guard label as admin: {code} {message}"),
    );

    // An unrelated NetworkPolicy: created and deleted through the chain, both allowed.
    let unrelated: NetworkPolicy = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "s12-allow-same-namespace"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {}}]}]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &unrelated)
        .await
        .expect("an unrelated NetworkPolicy is allowed");
    policies
        .delete("s12-allow-same-namespace", &DeleteParams::default())
        .await
        .expect("deleting an unrelated NetworkPolicy is allowed");
    for operation in ["CREATE", "DELETE"] {
        let reviewed = format!(
            "{operation} networking.k8s.io/v1/networkpolicies {}/s12-allow-same-namespace by admin: allowed",
            walled[0]
        );
        assert!(
            reviewed_as(chain, &reviewed),
            "policy-server never allowed {reviewed:?}: {:#?}",
            chain.reviews()
        );
    }

    // The reconciler's repair goes through the chain and is allowed. Drift made while the
    // configuration is away (and the reconciler stopped, so nothing repairs it early).
    reconciler.stop().await.expect("stopping the reconciler");
    chain.unregister().await.expect("unregistering");
    let (_, took) = wait_until(
        "the DELETE to be allowed once the webhook is gone",
        CHAIN_UPDATE,
        || async {
            match policies.delete(&deny_all, &DeleteParams::default()).await {
                Ok(_) => Ok(Some(())),
                // Still refused (the API server has not seen the change yet): not yet.
                Err(kube::Error::Api(status)) => Err(anyhow::anyhow!(status.message)),
                Err(error) => Err(error.into()),
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    figure("s12", format!("webhook configuration gone after {took:?}"));
    chain.register().await.expect("registering again");
    let dns = dns_policy_name(baseline);
    wait_until("the webhook back in the chain", CHAIN_UPDATE, || {
        let policies = policies.clone();
        let dns = dns.clone();
        let denied_by = denied_by.clone();
        async move {
            let dry_run = DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            };
            Ok(refusal(policies.delete(&dns, &dry_run).await)
                .filter(|(_, message)| message.starts_with(&denied_by)))
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    let _reconciler = cluster
        .start_reconciler("s12-b", SINGLE)
        .await
        .expect("the reconciler again");
    let repaired = wait_wall(cluster, baseline, walled, true, Duration::from_secs(30)).await;
    let repair = format!(
        "CREATE networking.k8s.io/v1/networkpolicies {}/{deny_all} by {}: allowed",
        walled[0],
        reconciler_username()
    );
    assert!(
        reviewed_as(chain, &repair),
        "the reconciler's repair did not go through policy-server: {:#?}",
        chain.reviews()
    );
    figure(
        "s12",
        format!("the reconciler's repair allowed through the chain, wall back in {repaired:?}"),
    );

    // Every review was answered by the policy itself: policy-server logged no error (a
    // failed host call, an evaluation error), and every refusal is one the policy wrote.
    let log = chain.log();
    assert_eq!(log.errors(), Vec::<String>::new(), "policy-server's errors");
    let reviews = log.reviews();
    let refused: Vec<_> = reviews.iter().filter(|review| !review.allowed).collect();
    assert!(
        refused.iter().all(|review| review.message.is_some()),
        "{refused:#?}"
    );
    figure(
        "s12",
        format!(
            "{} AdmissionReviews answered by policy-server ({} refused), {} host calls, reflectors started: {:?}",
            reviews.len(),
            refused.len(),
            log.host_calls().len(),
            log.reflectors_created()
        ),
    );
}

/// Whether policy-server answered a review that reads `line` (a [`Review`]'s text).
///
/// [`Review`]: namespace_baseline_testkit::policy_server_log::Review
fn reviewed_as(chain: &AdmissionChain, line: &str) -> bool {
    chain
        .reviews()
        .iter()
        .any(|review| review.to_string() == line)
}

async fn get_namespace(cluster: &Cluster, name: &str) -> k8s_openapi::api::core::v1::Namespace {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(cluster.admin.clone())
        .get(name)
        .await
        .expect("the namespace")
}
