//! Scenario 14: OpenReports, against the real `openreports.io` CRDs (reports-api v0.2.1, the
//! file `NSB_OPENREPORTS_CRD` names; `e2e-tests/cluster-tests.sh` downloads it).
//!
//! - Without the CRDs the reconciler walls as ever: it asks discovery, is told 404, and
//!   makes no request on reports.
//! - The CRDs installed later are found (discovery every 20 s): one Report per covered
//!   namespace, accepted by the API server's schema, wall passing.
//! - A hole opened shows up in its namespace's report (a failing `hole` result, severity by
//!   width) and goes away when closed; at rest no report is written.
//! - A namespace leaving the baseline loses its report; with `deletionPolicy: Delete` the
//!   reports go with the walls.

use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::{
    Cluster, read_yaml_documents, reconciler_username, wait_until,
};
use namespace_baseline_core::report::{Outcome, RULE_HOLE, RULE_WALL, Severity};
use namespace_baseline_reconciler::view::reports::OpenReport as Report;
use namespace_baseline_reconciler::view::reports::object::report_name;
use serde_json::json;

use crate::common::{
    SINGLE, assert_no_writes_for, assert_rbac_was_enough, create_baseline, figure, namespaces,
    patch_spec, settle, spec, start, wait_ready, wait_wall,
};

const CRD_NAME: &str = "reports.openreports.io";
/// Discovery every 20 s, and a margin for the list and the writes.
const DETECTION: Duration = Duration::from_secs(30);

fn crd_path() -> std::path::PathBuf {
    std::env::var_os("NSB_OPENREPORTS_CRD")
        .map(std::path::PathBuf::from)
        .expect("NSB_OPENREPORTS_CRD names openreports.io_reports.yaml (e2e-tests/cluster-tests.sh downloads it)")
}

async fn remove_crd(cluster: &Cluster) {
    let api: Api<CustomResourceDefinition> = Api::all(cluster.admin.clone());
    match api.delete(CRD_NAME, &DeleteParams::default()).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(error) => panic!("deleting {CRD_NAME}: {error}"),
    }
    wait_until("the Report CRD gone", Duration::from_secs(30), || {
        let api = api.clone();
        async move { Ok(api.get_opt(CRD_NAME).await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
}

async fn install_crd(cluster: &Cluster) {
    for document in read_yaml_documents(&crd_path()).unwrap() {
        cluster.apply(&document).await.unwrap();
    }
    let reports: Api<Report> = Api::all(cluster.admin.clone());
    wait_until("the Report CRD served", Duration::from_secs(30), || {
        let reports = reports.clone();
        async move { Ok(reports.list(&ListParams::default()).await.ok().map(|_| ())) }
    })
    .await
    .unwrap();
}

fn reports(cluster: &Cluster, namespace: &str) -> Api<Report> {
    Api::namespaced(cluster.admin.clone(), namespace)
}

/// Waits until `baseline`'s report in `namespace` satisfies `check` (`None`: until there is
/// none); returns it.
async fn wait_report(
    cluster: &Cluster,
    namespace: &str,
    baseline: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(Option<&Report>) -> bool,
) -> Option<Report> {
    let api = reports(cluster, namespace);
    let name = report_name(baseline);
    let check = &check;
    wait_until(
        &format!("report {namespace}/{name}: {what}"),
        timeout,
        || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let report = api.get_opt(&name).await?;
                Ok(check(report.as_ref()).then_some(report))
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"))
    .0
}

fn rules(report: &Report) -> Vec<(&str, Outcome, Option<Severity>)> {
    report
        .results
        .iter()
        .map(|result| (result.rule.as_str(), result.result, result.severity))
        .collect()
}

#[tokio::test]
async fn s14_reports_follow_the_wall_and_its_holes() {
    let (cluster, names, mark) = start("s14").await;
    remove_crd(&cluster).await;
    let (walled, _) = namespaces(&names, 2, 0).await;
    let baseline = names.name.clone();
    let mut reconciler = cluster.start_reconciler(&names.name, SINGLE).await.unwrap();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    wait_ready(&cluster, &baseline, 2, Duration::from_secs(10)).await;
    settle(&cluster).await;

    // Without the CRDs: discovery said 404, and no request touched reports.
    if let Some(events) = cluster.audit.requests_since(mark, &reconciler_username()) {
        let asked = events
            .iter()
            .filter(|e| e.request_uri.starts_with("/apis/openreports.io/v1alpha1"))
            .map(|e| e.code())
            .collect::<Vec<_>>();
        assert!(
            asked.contains(&Some(404)),
            "the reconciler did not ask discovery for openreports.io: {asked:?}"
        );
        let touched: Vec<String> = events
            .iter()
            .filter(|e| e.resource() == "reports")
            .map(|e| e.describe())
            .collect();
        assert!(
            touched.is_empty(),
            "requests on reports without the CRDs: {touched:?}"
        );
    }

    // The CRDs come: every covered namespace gets its report, the wall passing.
    let installed = tokio::time::Instant::now();
    install_crd(&cluster).await;
    for namespace in &walled {
        let report = wait_report(
            &cluster,
            namespace,
            &baseline,
            "the wall passing",
            DETECTION,
            |r| r.is_some_and(|r| rules(r).first() == Some(&(RULE_WALL, Outcome::Pass, None))),
        )
        .await
        .unwrap();
        assert_eq!(report.source.as_deref(), Some("namespace-baseline"));
        let scope = report.scope.as_ref().unwrap();
        assert_eq!(
            (scope.kind.as_deref(), scope.name.as_deref()),
            (Some("Namespace"), Some(namespace.as_str()))
        );
    }
    figure(
        "s14",
        format!(
            "reports in every covered namespace {:?} after the CRD was applied",
            installed.elapsed()
        ),
    );
    let stored: kube::api::DynamicObject = {
        let resource = kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
            "reports",
        );
        Api::namespaced_with(cluster.admin.clone(), &walled[0], &resource)
            .get(&report_name(&baseline))
            .await
            .unwrap()
    };
    let mut shown = serde_json::to_value(&stored).unwrap();
    shown["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    eprintln!(
        "REPORT as stored:\n{}",
        serde_json::to_string_pretty(&shown).unwrap()
    );

    // A hole opened: a policy letting everything in.
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled[0]);
    let hole: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "let-everything-in"},
        "spec": {"podSelector": {}, "ingress": [{}]}
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &hole)
        .await
        .unwrap();
    let opened = tokio::time::Instant::now();
    let report = wait_report(
        &cluster,
        &walled[0],
        &baseline,
        "the hole reported",
        Duration::from_secs(10),
        |r| r.is_some_and(|r| rules(r).iter().any(|(rule, _, _)| *rule == RULE_HOLE)),
    )
    .await
    .unwrap();
    figure(
        "s14",
        format!(
            "a hole in the report {:?} after its policy was created",
            opened.elapsed()
        ),
    );
    let reported = report.results.iter().find(|r| r.rule == RULE_HOLE).unwrap();
    assert_eq!(
        (reported.result, reported.severity),
        (Outcome::Fail, Some(Severity::Critical))
    );
    assert_eq!(reported.properties["networkPolicy"], "let-everything-in");
    assert_eq!(report.summary.fail, 1);

    // At rest: no report written.
    settle(&cluster).await;
    assert_no_writes_for(
        &cluster,
        "s14-rest",
        Duration::from_secs(3),
        Some("reports"),
    )
    .await;

    // Closed: the result goes.
    policies
        .delete("let-everything-in", &DeleteParams::default())
        .await
        .unwrap();
    wait_report(
        &cluster,
        &walled[0],
        &baseline,
        "the hole gone",
        Duration::from_secs(10),
        |r| {
            r.is_some_and(|r| {
                !rules(r).iter().any(|(rule, _, _)| *rule == RULE_HOLE) && r.summary.fail == 0
            })
        },
    )
    .await;

    // A namespace leaving the baseline loses its report.
    names.set_namespace_label(&walled[1], None).await.unwrap();
    wait_report(
        &cluster,
        &walled[1],
        &baseline,
        "removed",
        Duration::from_secs(10),
        |r| r.is_none(),
    )
    .await;

    // deletionPolicy: Delete: the reports go with the walls.
    patch_spec(&cluster, &baseline, json!({"deletionPolicy": "Delete"})).await;
    wait_until("the cleanup finalizer", Duration::from_secs(10), || async {
        Ok((!cluster
            .baselines()
            .get(&baseline)
            .await?
            .finalizers()
            .is_empty())
        .then_some(()))
    })
    .await
    .unwrap();
    cluster
        .baselines()
        .delete(&baseline, &DeleteParams::default())
        .await
        .unwrap();
    wait_report(
        &cluster,
        &walled[0],
        &baseline,
        "removed with its baseline",
        Duration::from_secs(10),
        |r| r.is_none(),
    )
    .await;
    wait_wall(&cluster, &baseline, &[], true, Duration::from_secs(10)).await;

    // Every report write was accepted by the CRD's schema.
    if let Some(events) = cluster.audit.requests_since(mark, &reconciler_username()) {
        let refused: Vec<String> = events
            .iter()
            .filter(|e| e.resource() == "reports" && e.is_write())
            .filter(|e| e.code().is_none_or(|code| code >= 400 && code != 404))
            .map(|e| e.describe())
            .collect();
        assert!(refused.is_empty(), "report writes refused: {refused:#?}");
        let writes = events
            .iter()
            .filter(|e| e.resource() == "reports" && e.is_write())
            .count();
        figure(
            "s14",
            format!("{writes} report writes in the whole scenario, none refused"),
        );
    }
    assert_rbac_was_enough(&cluster, mark);
    reconciler.stop().await.unwrap();
    // The next scenarios run without the CRDs, as before this one.
    remove_crd(&cluster).await;
    names.delete_namespaces(&walled).await;
}
