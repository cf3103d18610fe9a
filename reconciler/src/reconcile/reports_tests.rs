//! The reports a reconcile writes, against a mocked API server: what differs is applied,
//! what the cache already says costs no request, a namespace no longer covered loses its
//! report, and without the CRDs nothing is asked.

use namespace_baseline_core::NamespaceBaselineSpec;
use namespace_baseline_core::holes::{Direction, Hole, Width};
use namespace_baseline_core::report::{NamespaceState, WallState, namespace_report};
use namespace_baseline_core::spec::Mode;

use crate::fixtures::{Harness, Recorded, baseline, healthy, namespace};
use crate::reconcile::reports::{remove_all, write};
use crate::reconcile::status;
use crate::view::reports::ReportCache;
use crate::view::reports::object::{OpenReport, desired};
use crate::view::scope::Scope;

const REPORTS: &str = "/apis/openreports.io/v1alpha1/namespaces";

fn guarded() -> crate::fixtures::Harness {
    Harness::new(
        vec![
            namespace("team-a", &[("baseline", "guarded")]),
            namespace("team-b", &[("baseline", "guarded")]),
            namespace("other", &[("baseline", "open")]),
        ],
        vec![],
        Box::new(healthy),
    )
}

/// The openreports.io CRDs are served and the cache of our reports lists `reports`.
fn crds_served(harness: &Harness, reports: Vec<OpenReport>) {
    harness.ctx.reports.set_cache(
        Some(ReportCache::listed(reports.into_iter().map(Into::into))),
        &harness.ctx.caches.unseen,
    );
}

fn spec() -> NamespaceBaselineSpec {
    NamespaceBaselineSpec {
        allow_dns: false,
        ..NamespaceBaselineSpec::new("baseline=guarded")
    }
}

fn hole() -> Hole {
    Hole {
        policy: "let-everything-in".to_owned(),
        direction: Direction::Ingress,
        rule: 0,
        width: Width::World,
        all_ports: true,
        reach: None,
    }
}

/// A successful Enforce reconcile's outcome: a World hole in team-a.
fn outcome() -> status::Findings {
    status::Findings {
        generation: Some(1),
        mode: Mode::Enforce,
        namespaces: 2,
        left_out: Some(1),
        objects_applied: 0,
        drifted: 0,
        failure: None,
        drift_repairs: 0,
        holes: Some(vec![("team-a".to_owned(), hole())]),
        dns: None,
    }
}

/// The report `outcome` calls for in `namespace`, as the API server would store it.
fn stored(namespace: &str) -> OpenReport {
    let opened = hole();
    let holes: Vec<&Hole> = if namespace == "team-a" {
        vec![&opened]
    } else {
        vec![]
    };
    let mut report = desired(
        "guarded",
        namespace,
        namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::InPlace,
            holes: &holes,
            dns: None,
            enforced: None,
        }),
    );
    report.metadata.resource_version = Some("7".to_owned());
    report
}

fn report_requests(requests: &[Recorded]) -> Vec<(String, String)> {
    requests
        .iter()
        .filter(|r| r.path.starts_with(REPORTS))
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect()
}

#[tokio::test]
async fn each_covered_namespace_gets_its_report_applied() {
    let harness = guarded();
    crds_served(&harness, vec![]);
    let baseline = baseline("guarded", spec());
    write(&harness.ctx, &baseline, &Scope::All, &outcome()).await;
    let requests = harness.requests().await;
    let mut made = report_requests(&requests);
    made.sort();
    assert_eq!(
        made,
        [
            (
                "PATCH".into(),
                format!("{REPORTS}/team-a/reports/nsb-guarded")
            ),
            (
                "PATCH".into(),
                format!("{REPORTS}/team-b/reports/nsb-guarded")
            ),
        ]
    );
    let team_a = requests
        .iter()
        .find(|r| r.path.ends_with("/team-a/reports/nsb-guarded"))
        .unwrap();
    assert_eq!(team_a.content_type, "application/apply-patch+yaml");
    assert!(team_a.query.contains("fieldManager=namespace-baseline"));
    assert_eq!(team_a.body["kind"], "Report");
    assert_eq!(team_a.body["results"][1]["rule"], "hole");
    assert_eq!(team_a.body["results"][1]["severity"], "critical");
    assert_eq!(team_a.body["summary"]["fail"], 1);
}

#[tokio::test]
async fn reports_that_say_the_same_cost_no_request() {
    let harness = guarded();
    crds_served(&harness, vec![stored("team-a"), stored("team-b")]);
    write(
        &harness.ctx,
        &baseline("guarded", spec()),
        &Scope::All,
        &outcome(),
    )
    .await;
    assert_eq!(report_requests(&harness.requests().await), []);
}

#[tokio::test]
async fn a_written_report_is_not_written_again_before_its_echo() {
    let harness = guarded();
    crds_served(&harness, vec![]);
    let baseline = baseline("guarded", spec());
    write(&harness.ctx, &baseline, &Scope::All, &outcome()).await;
    // The watch has not shown the writes yet: a second reconcile finds them in memory.
    write(&harness.ctx, &baseline, &Scope::All, &outcome()).await;
    assert_eq!(report_requests(&harness.requests().await).len(), 2);
}

#[tokio::test]
async fn a_closed_hole_rewrites_only_its_namespace() {
    let harness = guarded();
    crds_served(&harness, vec![stored("team-a"), stored("team-b")]);
    let closed = status::Findings {
        holes: Some(vec![]),
        ..outcome()
    };
    write(
        &harness.ctx,
        &baseline("guarded", spec()),
        &Scope::All,
        &closed,
    )
    .await;
    let requests = harness.requests().await;
    assert_eq!(
        report_requests(&requests),
        [(
            "PATCH".into(),
            format!("{REPORTS}/team-a/reports/nsb-guarded")
        )]
    );
    let patch = requests
        .iter()
        .find(|r| r.path.starts_with(REPORTS))
        .unwrap();
    assert_eq!(patch.body["results"].as_array().unwrap().len(), 1);
    assert_eq!(patch.body["summary"]["pass"], 1);
}

#[tokio::test]
async fn a_namespace_no_longer_covered_loses_its_report() {
    let harness = guarded();
    crds_served(
        &harness,
        vec![stored("team-a"), stored("team-b"), stored("other")],
    );
    let scope = Scope::Namespaces(["other".to_owned()].into());
    write(
        &harness.ctx,
        &baseline("guarded", spec()),
        &scope,
        &outcome(),
    )
    .await;
    assert_eq!(
        report_requests(&harness.requests().await),
        [(
            "DELETE".into(),
            format!("{REPORTS}/other/reports/nsb-guarded")
        )]
    );
}

#[tokio::test]
async fn a_deleted_baseline_takes_its_reports_and_no_others() {
    let harness = guarded();
    let mut foreign = stored("team-a");
    foreign.metadata.name = Some("nsb-someone-else".to_owned());
    foreign.metadata.labels.get_or_insert_default().insert(
        namespace_baseline_core::identity::BASELINE_LABEL.into(),
        "someone-else".into(),
    );
    crds_served(&harness, vec![stored("team-a"), stored("team-b"), foreign]);
    remove_all(&harness.ctx, "guarded").await.unwrap();
    let mut made = report_requests(&harness.requests().await);
    made.sort();
    assert_eq!(
        made,
        [
            (
                "DELETE".into(),
                format!("{REPORTS}/team-a/reports/nsb-guarded")
            ),
            (
                "DELETE".into(),
                format!("{REPORTS}/team-b/reports/nsb-guarded")
            ),
        ]
    );
}

#[tokio::test]
async fn without_the_crds_nothing_is_asked() {
    let harness = guarded();
    write(
        &harness.ctx,
        &baseline("guarded", spec()),
        &Scope::All,
        &outcome(),
    )
    .await;
    remove_all(&harness.ctx, "guarded").await.unwrap();
    assert_eq!(report_requests(&harness.requests().await), []);
}

#[tokio::test]
async fn the_enforced_condition_is_reported_in_each_namespace() {
    let harness = guarded();
    crds_served(&harness, vec![]);
    let mut baseline = baseline("guarded", spec());
    baseline.status = Some(namespace_baseline_core::spec::NamespaceBaselineStatus {
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: crate::reconcile::probe::condition::ENFORCED.to_owned(),
            status: "False".to_owned(),
            reason: "NotEnforced".to_owned(),
            message: "egress: the canary connected".to_owned(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }],
        ..Default::default()
    });
    write(&harness.ctx, &baseline, &Scope::All, &outcome()).await;
    let requests = harness.requests().await;
    let bodies: Vec<_> = requests
        .iter()
        .filter(|r| r.path.starts_with(REPORTS))
        .map(|r| &r.body)
        .collect();
    assert_eq!(bodies.len(), 2);
    for body in bodies {
        let last = body["results"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["rule"], "enforced");
        assert_eq!(last["result"], "fail");
        assert_eq!(last["severity"], "critical");
        assert_eq!(last["message"], "egress: the canary connected");
    }
}
