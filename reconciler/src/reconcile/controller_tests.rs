//! Reconcile against a mocked API server with filled caches.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::controller::Action;
use namespace_baseline_core::NamespaceBaselineSpec;
use namespace_baseline_core::spec::{DeletionPolicy, Mode, NamespaceBaseline};
use namespace_baseline_core::wall::desired_wall;
use rstest::rstest;
use serde_json::{Value, json};

use super::*;
use crate::base::error::ErrorClass;
use crate::fixtures::{
    Harness, RESYNC, Recorded, baseline, failure, healthy, namespace, namespace_store_and_writer,
    stored_wall,
};
use crate::reconcile::status::{self, Findings};
use crate::view::namespace_cache::namespace_meta;
use crate::view::policy_cache::slim_policy;
use kube::runtime::reflector::store::Writer;
use namespace_baseline_core::plan::plan;
use namespace_baseline_leader::{LeaderGate, testing};

const BASELINES: &str = "/apis/hedronite.io/v1alpha1/namespacebaselines";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

fn seed() -> NamespaceBaselineSpec {
    NamespaceBaselineSpec::new("baseline=guarded")
}

fn policy_path(namespace: &str, name: &str) -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}")
}

fn guarded_namespaces() -> Vec<k8s_openapi::api::core::v1::Namespace> {
    vec![
        namespace("team-a", &[("baseline", "guarded")]),
        namespace("team-b", &[("baseline", "guarded")]),
        namespace("other", &[("baseline", "open")]),
    ]
}

/// The status a converged baseline already carries, among [`guarded_namespaces`].
fn converged(baseline: NamespaceBaseline, namespaces: u32) -> NamespaceBaseline {
    let live = u32::try_from(guarded_namespaces().len()).unwrap();
    converged_among(baseline, namespaces, live - namespaces)
}

/// The status a converged baseline already carries, covering `namespaces` and leaving out
/// `left_out`.
fn converged_among(
    mut baseline: NamespaceBaseline,
    namespaces: u32,
    left_out: u32,
) -> NamespaceBaseline {
    let report = Findings {
        generation: baseline.meta().generation,
        mode: baseline.spec.mode,
        namespaces,
        left_out: Some(left_out),
        objects_applied: 0,
        drifted: 0,
        failure: None,
        drift_repairs: 0,
        holes: Some(Vec::new()),
        dns: baseline
            .spec
            .allow_dns
            .then(crate::fixtures::healthy_dns_reachability),
    };
    let time = Time(Timestamp::from_second(1_700_000_000).unwrap());
    baseline.status = Some(status::desired(None, &report, &time));
    baseline
}

fn full_wall(
    spec: &NamespaceBaselineSpec,
    namespaces: &[&str],
) -> Vec<k8s_openapi::api::networking::v1::NetworkPolicy> {
    namespaces
        .iter()
        .flat_map(|ns| stored_wall("guarded", ns, spec))
        .collect()
}

fn status_patches(requests: &[Recorded]) -> Vec<&Value> {
    requests
        .iter()
        .filter(|r| r.is("PATCH", &format!("{BASELINES}/guarded/status")))
        .map(|r| &r.body["status"])
        .collect()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
}

fn event_reasons(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.is("POST", EVENTS))
        .map(|r| r.body["reason"].as_str().unwrap().to_owned())
        .collect()
}

fn policy_requests(requests: &[Recorded]) -> Vec<&Recorded> {
    requests
        .iter()
        .filter(|r| r.path.contains("/networkpolicies/"))
        .collect()
}

async fn run(harness: &Harness, baseline: NamespaceBaseline) -> Result<Action> {
    let ctx = harness.ctx.clone();
    tokio::time::timeout(Duration::from_secs(5), reconcile(Arc::new(baseline), ctx))
        .await
        .expect("reconcile hung")
}

#[tokio::test]
async fn installs_the_wall_with_two_applies_per_matching_namespace_then_reports() {
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(healthy));
    let action = run(&harness, baseline("guarded", seed())).await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    let requests = harness.requests().await;

    let applies = policy_requests(&requests);
    assert_eq!(applies.len(), 4, "{requests:#?}");
    for ns in ["team-a", "team-b"] {
        for desired in desired_wall("guarded", ns, &seed()) {
            let name = desired.metadata.name.clone().unwrap();
            let apply = applies
                .iter()
                .find(|r| r.path == policy_path(ns, &name))
                .unwrap_or_else(|| panic!("no apply of {ns}/{name}"));
            assert_eq!(apply.method, "PATCH");
            assert_eq!(apply.content_type, "application/apply-patch+yaml");
            assert!(
                apply.query.contains("fieldManager=namespace-baseline"),
                "{}",
                apply.query
            );
            assert!(apply.query.contains("force=true"), "{}", apply.query);
            // The whole object, every spec field named (empty rule lists included).
            assert_eq!(apply.body, serde_json::to_value(&desired).unwrap());
        }
    }
    assert!(applies.iter().all(|r| !r.path.contains("/other/")));

    let statuses = status_patches(&requests);
    assert_eq!(statuses.len(), 1);
    let status = statuses[0];
    assert_eq!(status["namespaces"], 2);
    assert_eq!(status["objectsApplied"], 4);
    assert_eq!(status["drifted"], 0);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(condition(status, "Ready")["status"], "True");
    assert_eq!(condition(status, "Ready")["reason"], "WallInPlace");
    assert_eq!(condition(status, "Degraded")["status"], "False");
    // Status is written after the wall, on the status subresource only.
    let status_at = requests
        .iter()
        .position(|r| r.path.ends_with("/status"))
        .unwrap();
    let last_apply = requests
        .iter()
        .rposition(|r| r.path.contains("/networkpolicies/"))
        .unwrap();
    assert!(last_apply < status_at);
    assert!(
        !requests
            .iter()
            .any(|r| r.is("PATCH", &format!("{BASELINES}/guarded")))
    );

    assert_eq!(event_reasons(&requests), ["WallInstalled"]);
}

/// A namespace that starts matching while a full pass is writing gets its wall next, not
/// after the rest of the pass (ahead.rs): here it is created when the pass's first apply
/// reaches the API server, and the pass then has 78 applies left.
#[tokio::test]
async fn a_namespace_created_during_a_full_pass_gets_its_wall_ahead_of_the_rest() {
    let guarded = (0..40)
        .map(|i| namespace(&format!("team-{i:02}"), &[("baseline", "guarded")]))
        .collect();
    let (store, writer) = namespace_store_and_writer(guarded);
    // What the namespace watch does when "late" is created: the cache, then the mark.
    let watch = Arc::new(std::sync::Mutex::new(
        None::<(Writer<CachedNamespace>, crate::view::scope::Dirty)>,
    ));
    let responder = {
        let watch = watch.clone();
        Box::new(move |request: &Recorded| {
            if request.method == "PATCH"
                && request.path.contains("/networkpolicies/")
                && let Some((mut writer, dirty)) = watch.lock().unwrap().take()
            {
                let late = namespace("late", &[("baseline", "guarded")]);
                let cached = CachedNamespace::from(&namespace_meta(late));
                writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(cached));
                dirty.namespace("guarded", "late");
            }
            healthy(request)
        })
    };
    let harness = Harness::over_namespace_store(store, vec![], responder);
    *watch.lock().unwrap() = Some((writer, harness.ctx.caches.dirty.clone()));

    run(&harness, baseline("guarded", seed())).await.unwrap();

    let requests = harness.requests().await;
    let applied: Vec<&str> = policy_requests(&requests)
        .iter()
        .map(|r| r.path.split('/').nth(5).unwrap())
        .collect();
    assert_eq!(applied.len(), 2 * 41, "every wall once: {applied:?}");
    let late: Vec<usize> = applied
        .iter()
        .enumerate()
        .filter(|(_, namespace)| **namespace == "late")
        .map(|(index, _)| index)
        .collect();
    // The concurrency (4) was in flight when it was marked; its two applies are next.
    assert_eq!(late.len(), 2, "{applied:?}");
    assert!(
        late[1] < 4 + 2 + 2,
        "late's wall at {late:?} of {}: {applied:?}",
        applied.len()
    );
}

#[tokio::test]
async fn a_converged_cluster_costs_no_request_at_all() {
    let harness = Harness::new(
        guarded_namespaces(),
        full_wall(&seed(), &["team-a", "team-b"]),
        Box::new(healthy),
    );
    let action = run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    let requests = harness.requests().await;
    assert!(
        requests.is_empty(),
        "expected no request, got {requests:#?}"
    );
}

#[rstest]
#[case::egress_slipped_into_deny_all(0, json!({"egress": [{}]}))]
#[case::pod_selector_narrowed(0, json!({"podSelector": {"matchLabels": {"app": "web"}}}))]
#[case::dns_door_widened(1, json!({"egress": [{"to": [{"podSelector": {}}]}]}))]
#[tokio::test]
async fn drift_is_repaired_with_one_whole_object_apply(#[case] index: usize, #[case] edit: Value) {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    let mut drifted = serde_json::to_value(&policies[index]).unwrap();
    for (key, value) in edit.as_object().unwrap() {
        drifted["spec"][key] = value.clone();
    }
    policies[index] = serde_json::from_value(drifted).unwrap();
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let state = harness.state.clone();
    let requests = harness.requests().await;

    let applies = policy_requests(&requests);
    assert_eq!(applies.len(), 1, "{requests:#?}");
    let desired = &desired_wall("guarded", "team-a", &seed())[index];
    assert_eq!(
        applies[0].path,
        policy_path("team-a", desired.metadata.name.as_ref().unwrap())
    );
    assert_eq!(applies[0].body, serde_json::to_value(desired).unwrap());
    assert!(applies[0].query.contains("force=true"));

    let statuses = status_patches(&requests);
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0]["objectsApplied"], 1);
    assert_eq!(event_reasons(&requests), ["DriftRepaired"]);
    assert!(
        state
            .metrics
            .render()
            .unwrap()
            .contains("namespace_baseline_drift_repairs_total 1")
    );
}

/// The echo of a repair's policy write can reconcile before the baseline cache shows the
/// repair's status write (a lagging or cut watch): that reconcile still brings
/// `objectsApplied` back to 0 with the repair counted, comparing with the status it wrote,
/// not the cache's older one (which already says 0 and no repair).
#[tokio::test]
async fn a_reconcile_ahead_of_the_baseline_cache_compares_with_the_status_it_wrote() {
    let intact = full_wall(&seed(), &["team-a", "team-b"]);
    let mut drifted = intact.clone();
    drifted[0] = serde_json::from_value(json!({
        "metadata": serde_json::to_value(&intact[0].metadata).unwrap(),
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"]},
    }))
    .unwrap();
    let harness = Harness::new(guarded_namespaces(), drifted, Box::new(healthy));
    let cached = converged(baseline("guarded", seed()), 2);
    run(&harness, cached.clone()).await.unwrap();

    let echo = harness.with_policies(intact);
    reconcile(Arc::new(cached), echo.clone()).await.unwrap();
    drop(echo);
    let requests = harness.requests().await;
    assert_eq!(policy_requests(&requests).len(), 1, "{requests:#?}");
    let statuses = status_patches(&requests);
    let counts: Vec<_> = statuses
        .iter()
        .map(|status| (&status["objectsApplied"], &status["driftRepairs"]))
        .collect();
    assert_eq!(
        counts,
        [(&json!(1), &json!(1)), (&json!(0), &json!(1))],
        "{statuses:#?}"
    );
}

/// The two applies of a namespace echo separately: a reconcile triggered by the first echo
/// finds the second object not in the cache yet, and must not write it again.
#[tokio::test]
async fn a_policy_being_written_is_not_written_again_before_the_watch_shows_it() {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    let dns = policies.remove(3); // team-b's DNS door: applied, its echo not arrived
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    let (namespace, name) = (
        dns.metadata.namespace.as_deref().unwrap(),
        dns.metadata.name.as_deref().unwrap(),
    );
    harness.ctx.caches.unseen.applying(namespace, name);
    harness.ctx.caches.unseen.applied(namespace, name);
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    // The echo arrives, then the object is deleted: the next reconcile writes it.
    harness
        .ctx
        .caches
        .unseen
        .observe(&kube::runtime::watcher::Event::Apply(dns.clone()));
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let requests = harness.requests().await;
    let applies = policy_requests(&requests);
    assert_eq!(applies.len(), 1, "{applies:#?}");
    assert_eq!(applies[0].path, policy_path(namespace, name));
}

#[tokio::test]
async fn a_deleted_policy_is_recreated() {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    policies.remove(2); // team-b's deny-all
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let requests = harness.requests().await;
    let applies = policy_requests(&requests);
    assert_eq!(applies.len(), 1);
    assert_eq!(
        applies[0].path,
        policy_path("team-b", "nsb-guarded-default-deny")
    );
}

/// A policy someone deleted (the watch saw it go) is re-created as the repair of a
/// deletion: counted, in the status and in a `DriftRepaired` Event naming it; one never seen
/// before is an install.
#[tokio::test]
async fn a_policy_seen_deleted_is_repaired_and_reported_as_deleted() {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    let deleted = policies.remove(2); // team-b's deny-all
    policies.remove(0); // team-a's deny-all: never seen, an install
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    harness
        .ctx
        .caches
        .unseen
        .observe(&kube::runtime::watcher::Event::Delete(deleted.clone()));
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let state = harness.state.clone();
    let unseen = harness.ctx.caches.unseen.clone();
    let requests = harness.requests().await;
    assert_eq!(policy_requests(&requests).len(), 2);
    assert_eq!(event_reasons(&requests), ["WallInstalled", "DriftRepaired"]);
    let repaired = requests
        .iter()
        .find(|r| r.is("POST", EVENTS) && r.body["reason"] == "DriftRepaired")
        .unwrap();
    assert_eq!(
        repaired.body["note"],
        "repaired drifted NetworkPolicies: team-b/nsb-guarded-default-deny (deleted)"
    );
    assert_eq!(status_patches(&requests)[0]["driftRepairs"], 1);
    let metrics = state.metrics.render().unwrap();
    assert!(
        metrics.contains("namespace_baseline_drift_repairs_total 1"),
        "{metrics}"
    );
    assert!(
        !unseen.deleted_by_others("team-b", "nsb-guarded-default-deny"),
        "the tombstone is consumed"
    );
}

fn open_policy(
    namespace: &str,
    name: &str,
    spec: Value,
) -> k8s_openapi::api::networking::v1::NetworkPolicy {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": namespace}, "spec": spec}),
    )
    .unwrap()
}

/// `allow-all-in` in `namespace`: every pod open to every source, the widest hole.
fn allow_all_in(namespace: &str) -> k8s_openapi::api::networking::v1::NetworkPolicy {
    open_policy(
        namespace,
        "allow-all-in",
        json!({"podSelector": {}, "ingress": [{}]}),
    )
}

/// Another policy opening the wall to the world in a covered namespace unseals it: the
/// status counts the hole and says which, one `HoleOpened` Event per new hole, the metric
/// counts it; a hole in a namespace the baseline does not cover is none of its business.
#[tokio::test]
async fn holes_in_covered_namespaces_unseal_the_wall_and_are_announced() {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    policies.push(allow_all_in("team-a"));
    policies.push(open_policy("team-b", "web", json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "lb"}}}]}]})));
    policies.push(allow_all_in("other"));
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let state = harness.state.clone();
    let requests = harness.requests().await;
    assert!(
        policy_requests(&requests).is_empty(),
        "holes are reported, never closed"
    );
    let status = status_patches(&requests)[0].clone();
    assert_eq!(status["holes"]["World"], 1);
    assert_eq!(status["holes"]["Pods"], 1);
    let sealed = condition(&status, "Sealed");
    assert_eq!(sealed["status"], "False");
    assert_eq!(sealed["reason"], "OpenToWorld");
    assert_eq!(
        sealed["message"],
        "team-a: NetworkPolicy allow-all-in ingress rule 0 opens every port to the whole internet"
    );
    assert_eq!(event_reasons(&requests), ["HoleOpened", "HoleOpened"]);
    let metrics = state.metrics.render().unwrap();
    assert!(
        metrics.contains(r#"namespace_baseline_holes{width="World",direction="Ingress"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_hole_reported_before_gets_no_second_event() {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    policies.push(allow_all_in("team-a"));
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let requests = harness.requests().await;
    assert_eq!(event_reasons(&requests), ["HoleOpened"]);
}

/// The DNS door checked against the DNS Service's endpoints: OpenShift's DNS listens on 5353;
/// a door on 53 is reported (condition, Event), never blocked: the wall is installed.
#[tokio::test]
async fn a_door_that_misses_the_dns_endpoints_is_reported_not_blocked() {
    let dns = crate::fixtures::healthy_dns();
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "kube-dns-x", "namespace": "kube-system", "labels": {"kubernetes.io/service-name": "kube-dns"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "namespace": "kube-system", "name": "coredns-a"}}],
        "ports": [{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}],
    }))
    .unwrap();
    let dns = crate::view::caches::DnsCaches::of(
        "kube-system",
        dns.services.clone(),
        crate::fixtures::store(vec![slice]),
        dns.pods.clone(),
    );
    let harness = Harness::with_dns(guarded_namespaces(), vec![], Box::new(healthy), dns);
    run(&harness, baseline("guarded", seed())).await.unwrap();
    let requests = harness.requests().await;
    assert_eq!(
        policy_requests(&requests).len(),
        4,
        "the wall is installed anyway"
    );
    let status = status_patches(&requests)[0].clone();
    let reachable = condition(&status, "DNSReachable");
    assert_eq!(reachable["status"], "False");
    assert_eq!(reachable["reason"], "PortMismatch");
    assert!(
        reachable["message"]
            .as_str()
            .unwrap()
            .contains("listen on TCP 5353, UDP 5353 but the door opens UDP 53, TCP 53")
    );
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert!(event_reasons(&requests).contains(&"DNSUnreachable".to_owned()));
}

/// After a full pass, a watch event on one namespace makes the next reconcile plan and write
/// for that namespace only; the status still counts every namespace.
#[tokio::test]
async fn a_namespace_event_reconciles_that_namespace_alone() {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    policies.remove(2); // team-b's deny-all
    policies.remove(0); // team-a's deny-all
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    // A full pass was made a moment ago ...
    assert_eq!(
        harness.ctx.caches.dirty.take("guarded", RESYNC),
        crate::view::scope::Scope::All
    );
    // ... and the watch saw something in team-b only.
    harness.ctx.caches.dirty.namespace("guarded", "team-b");
    run(&harness, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    let requests = harness.requests().await;
    let applies = policy_requests(&requests);
    assert_eq!(applies.len(), 1, "{applies:#?}");
    assert_eq!(
        applies[0].path,
        policy_path("team-b", "nsb-guarded-default-deny")
    );
    assert_eq!(status_patches(&requests)[0]["namespaces"], 2);
}

/// A scoped reconcile counts the baseline's namespaces from its last full pass and its own
/// namespaces: one joining, then one leaving, move the status's count.
#[tokio::test]
async fn a_scoped_reconcile_counts_the_namespaces_that_joined_and_left() {
    let harness = Harness::new(
        guarded_namespaces(),
        full_wall(&seed(), &["team-a", "team-b"]),
        Box::new(healthy),
    );
    let cached = converged(baseline("guarded", seed()), 2);
    // The first reconcile is the full pass: everything in place, nothing written.
    run(&harness, cached.clone()).await.unwrap();

    let joined = harness.with_namespaces(vec![
        namespace("team-a", &[("baseline", "guarded")]),
        namespace("team-b", &[("baseline", "guarded")]),
        namespace("other", &[("baseline", "guarded")]),
    ]);
    joined.caches.dirty.namespace("guarded", "other");
    reconcile(Arc::new(cached.clone()), joined.clone())
        .await
        .unwrap();
    let left = harness.with_namespaces(vec![
        namespace("team-a", &[("baseline", "guarded")]),
        namespace("team-b", &[("baseline", "open")]),
        namespace("other", &[("baseline", "guarded")]),
    ]);
    left.caches.dirty.namespace("guarded", "team-b");
    reconcile(Arc::new(cached), left.clone()).await.unwrap();
    drop((joined, left));

    let requests = harness.requests().await;
    let counts: Vec<_> = status_patches(&requests)
        .iter()
        .map(|status| status["namespaces"].clone())
        .collect();
    assert_eq!(counts, [json!(3), json!(2)], "{requests:#?}");
}

#[tokio::test]
async fn an_invalid_selector_is_a_permanent_failure_reported_once() {
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(healthy));
    let broken = baseline("guarded", NamespaceBaselineSpec::new("baseline!=guarded"));
    let action = run(&harness, broken).await.unwrap();
    assert_eq!(action, Action::await_change());
    let state = harness.state.clone();
    let requests = harness.requests().await;

    assert!(
        policy_requests(&requests).is_empty(),
        "never read as another selector"
    );
    let statuses = status_patches(&requests);
    assert_eq!(statuses.len(), 1);
    let ready = condition(statuses[0], "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("'!=' is not supported")
    );
    assert_eq!(condition(statuses[0], "Degraded")["status"], "True");
    let events: Vec<_> = requests.iter().filter(|r| r.is("POST", EVENTS)).collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].body["type"], "Warning");
    assert_eq!(events[0].body["reason"], "InvalidSpec");
    assert_eq!(events[0].body["regarding"]["name"], "guarded");
    let metrics = state.metrics.render().unwrap();
    assert!(metrics.contains(r#"namespace_baseline_reconcile_errors_total{class="permanent"} 1"#));
    assert!(metrics.contains(r#"namespace_baseline_reconciles_total{result="permanent_error"} 1"#));
    assert_eq!(state.retries.attempts("guarded"), 0, "no retry scheduled");
}

#[tokio::test]
async fn a_permanent_failure_already_reported_is_not_announced_again() {
    let broken = baseline("guarded", NamespaceBaselineSpec::new("baseline!=guarded"));
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(healthy));
    run(&harness, broken.clone()).await.unwrap();
    let reported =
        serde_json::from_value(status_patches(&harness.requests().await)[0].clone()).unwrap();

    let mut again = broken;
    again.status = Some(reported);
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(healthy));
    assert_eq!(run(&harness, again).await.unwrap(), Action::await_change());
    let requests = harness.requests().await;
    assert!(requests.is_empty(), "{requests:#?}");
}

#[tokio::test]
async fn a_forbidden_apply_is_permanent() {
    let responder = |request: &Recorded| {
        if request.path.contains("/networkpolicies/") {
            failure(403, "Forbidden")
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(responder));
    let action = run(&harness, baseline("guarded", seed())).await.unwrap();
    assert_eq!(action, Action::await_change());
    let requests = harness.requests().await;
    let statuses = status_patches(&requests);
    assert_eq!(statuses.len(), 1);
    let ready = condition(statuses[0], "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("Forbidden"))
    );
    assert_eq!(statuses[0]["drifted"], 4, "nothing could be applied");
    assert_eq!(event_reasons(&requests), ["Forbidden"]);
}

/// What the alerts read (base/baseline_gauges.rs): a wall that cannot be written leaves its
/// namespaces unwalled and its baseline `Ready=False` with the reason; the same baseline in
/// `Audit` mode promises no wall; a converged one is Ready and leaves none unwalled.
#[tokio::test]
async fn the_alerts_gauges_count_unwalled_namespaces_and_baselines_by_ready() {
    fn has(harness: &Harness, lines: &[&str]) {
        let text = harness.state.metrics.render().unwrap();
        for line in lines {
            assert!(
                text.lines().any(|l| l == *line),
                "missing {line} in\n{text}"
            );
        }
    }
    let forbidden = |request: &Recorded| {
        if request.path.contains("/networkpolicies/") {
            failure(403, "Forbidden")
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(forbidden));
    run(&harness, baseline("guarded", seed())).await.unwrap();
    has(
        &harness,
        &[
            "namespace_baseline_unwalled_namespaces 2",
            r#"namespace_baseline_ready{status="False",reason="Forbidden"} 1"#,
        ],
    );
    let audit = NamespaceBaselineSpec {
        mode: Mode::Audit,
        ..seed()
    };
    run(&harness, baseline("guarded", audit)).await.unwrap();
    has(
        &harness,
        &[
            "namespace_baseline_unwalled_namespaces 0",
            r#"namespace_baseline_ready{status="True",reason="Audited"} 1"#,
            r#"namespace_baseline_ready{status="False",reason="Forbidden"} 0"#,
        ],
    );

    let walled = Harness::new(
        guarded_namespaces(),
        full_wall(&seed(), &["team-a", "team-b"]),
        Box::new(healthy),
    );
    run(&walled, converged(baseline("guarded", seed()), 2))
        .await
        .unwrap();
    has(
        &walled,
        &[
            "namespace_baseline_unwalled_namespaces 0",
            "namespace_baseline_unwalled_seconds 0.0",
            r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 1"#,
        ],
    );
}

#[tokio::test]
async fn a_server_error_requeues_with_growing_backoff_and_success_resets_it() {
    let responder = |request: &Recorded| {
        if request.path == policy_path("team-b", "nsb-guarded-default-deny") {
            failure(500, "InternalError")
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(responder));
    let guarded = Arc::new(baseline("guarded", seed()));

    let error = run(&harness, guarded.as_ref().clone()).await.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Transient);
    let first = error_policy(guarded.clone(), &error, harness.ctx.clone());
    let error = run(&harness, guarded.as_ref().clone()).await.unwrap_err();
    let second = error_policy(guarded.clone(), &error, harness.ctx.clone());
    assert_eq!(harness.state.retries.attempts("guarded"), 2);
    // The harness's retries have no jitter: exactly half the exponential ceiling (0.2 s, then
    // 0.4 s).
    assert_eq!(first, Action::requeue(Duration::from_millis(100)));
    assert_eq!(second, Action::requeue(Duration::from_millis(200)));

    // The other namespace was still written, and the status says it is retrying.
    let state = harness.state.clone();
    let requests = harness.requests().await;
    assert!(
        requests
            .iter()
            .any(|r| r.path == policy_path("team-a", "nsb-guarded-default-deny"))
    );
    let ready = condition(status_patches(&requests)[0], "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("ServerError"))
    );
    assert!(ready["message"].as_str().unwrap().ends_with("retrying"));
    assert!(
        event_reasons(&requests).is_empty(),
        "no permanent-failure Event"
    );
    assert!(
        state
            .metrics
            .render()
            .unwrap()
            .contains(r#"namespace_baseline_reconcile_errors_total{class="transient"} 2"#)
    );
}

/// A write that never answers does not hold its baseline: the reconcile hands it to the
/// writer after HANDOFF and returns; a reconcile meanwhile (a repair elsewhere) plans and
/// writes without writing that object again; the write's failure, once its budget is spent,
/// is reported by the reconcile its answer asks for.
#[tokio::test(start_paused = true)]
async fn a_write_that_never_answers_is_handed_over_and_its_failure_reported_later() {
    // The first apply of team-a's deny-all never answers; later ones do.
    let stalled = policy_path("team-a", "nsb-guarded-default-deny");
    let answered_once = std::sync::atomic::AtomicBool::new(false);
    let responder = move |request: &Recorded| {
        if request.path == stalled && !answered_once.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            (crate::fixtures::NO_ANSWER, Value::Null)
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(responder));
    let started = tokio::time::Instant::now();
    let first = reconcile(Arc::new(baseline("guarded", seed())), harness.ctx.clone())
        .await
        .unwrap();
    assert_eq!(first, Action::requeue(crate::fixtures::RESYNC));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the reconcile waited {:?} for a write that never answers",
        started.elapsed()
    );

    // Another reconcile while the write is in flight: a full pass finds team-a's deny-all
    // missing from the cache, and leaves it to the write in flight.
    let second = reconcile(Arc::new(baseline("guarded", seed())), harness.ctx.clone())
        .await
        .unwrap();
    assert_eq!(second, Action::requeue(crate::fixtures::RESYNC));

    // Its budget spent, the write fails; the handoff keeps the failure for the next reconcile.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let third = reconcile(Arc::new(baseline("guarded", seed())), harness.ctx.clone()).await;
    let error = third.unwrap_err();
    assert_eq!(error.class(), ErrorClass::Transient);
    assert!(
        error.report().contains("no answer within 30s"),
        "{}",
        error.report()
    );

    let requests = harness.requests().await;
    let writes = policy_requests(&requests);
    let stalled_writes = writes
        .iter()
        .filter(|r| r.path == policy_path("team-a", "nsb-guarded-default-deny"))
        .count();
    // The first reconcile's 4 applies (the second's full pass adds none: all pending), then
    // the third's, scoped to team-a, where the handoff's answer was: the failed apply again,
    // and the DNS door, which this test's cache never shows (a watch would have). Never a
    // second apply of an object while one was in flight.
    assert_eq!(stalled_writes, 2, "{writes:#?}");
    assert_eq!(writes.len(), 6, "{writes:#?}");
    let statuses = status_patches(&requests);
    assert_eq!(statuses[0]["objectsApplied"], json!(3), "{statuses:#?}");
    let ready = condition(statuses.last().unwrap(), "Ready");
    assert_eq!(ready["status"], json!("False"), "{ready:#?}");
}

/// One status write at a time per baseline: while one is in flight (handed over),
/// the next reconcile leaves its status to the reconcile that the answer asks for, so an
/// older status never lands after a newer one; a status write that fails is reported then.
#[tokio::test(start_paused = true)]
async fn a_status_write_in_flight_holds_back_the_next_status_until_answered() {
    let status_path = format!("{BASELINES}/guarded/status");
    let answered_once = std::sync::atomic::AtomicBool::new(false);
    let responder = move |request: &Recorded| {
        if request.path == status_path
            && !answered_once.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            (crate::fixtures::NO_ANSWER, Value::Null)
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(responder));
    run(&harness, baseline("guarded", seed())).await.unwrap();
    assert!(harness.ctx.handoff.status_in_flight("guarded"));

    // The wall is in the cache now: the next status (objectsApplied 0) waits.
    let later = harness.with_policies(full_wall(&seed(), &["team-a", "team-b"]));
    reconcile(Arc::new(baseline("guarded", seed())), later.clone())
        .await
        .unwrap();
    assert!(later.handoff.status_in_flight("guarded"));

    // The stalled status write gives up; the reconcile its answer asks for reports that and
    // writes its own status.
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert!(!later.handoff.status_in_flight("guarded"));
    let error = reconcile(Arc::new(baseline("guarded", seed())), later.clone())
        .await
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Transient);
    assert!(
        error.report().contains("no answer within 30s"),
        "{}",
        error.report()
    );
    drop(later);

    let requests = harness.requests().await;
    let statuses = status_patches(&requests);
    assert_eq!(statuses.len(), 2, "{statuses:#?}");
    assert_eq!(statuses[0]["objectsApplied"], json!(4));
    assert_eq!(condition(statuses[1], "Ready")["status"], json!("False"));
    assert_eq!(policy_requests(&requests).len(), 4);
}

#[tokio::test]
async fn success_resets_the_backoff() {
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(healthy));
    harness.state.retries.failed("guarded");
    harness.state.retries.failed("guarded");
    run(&harness, baseline("guarded", seed())).await.unwrap();
    assert_eq!(harness.state.retries.attempts("guarded"), 0);
}

#[rstest]
#[case::orphan(DeletionPolicy::Orphan, 0)]
#[case::delete(DeletionPolicy::Delete, 2)]
#[tokio::test]
async fn a_namespace_that_stops_matching(#[case] policy: DeletionPolicy, #[case] deletes: usize) {
    let spec = NamespaceBaselineSpec {
        deletion_policy: policy,
        ..seed()
    };
    // team-b was relabelled: its wall is still there.
    let namespaces = vec![
        namespace("team-a", &[("baseline", "guarded")]),
        namespace("team-b", &[("baseline", "open")]),
    ];
    let mut guarded = baseline("guarded", spec.clone());
    if policy == DeletionPolicy::Delete {
        guarded.meta_mut().finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    }
    let harness = Harness::new(
        namespaces,
        full_wall(&spec, &["team-a", "team-b"]),
        Box::new(healthy),
    );
    run(&harness, converged(guarded, 1)).await.unwrap();
    let requests = harness.requests().await;
    let writes = policy_requests(&requests);
    assert_eq!(writes.len(), deletes, "{requests:#?}");
    assert!(
        writes
            .iter()
            .all(|r| r.method == "DELETE" && r.path.contains("/team-b/"))
    );
}

#[tokio::test]
async fn turning_dns_off_removes_the_dns_door() {
    let spec = NamespaceBaselineSpec {
        allow_dns: false,
        ..seed()
    };
    let harness = Harness::new(
        guarded_namespaces(),
        full_wall(&seed(), &["team-a", "team-b"]),
        Box::new(healthy),
    );
    run(&harness, converged(baseline("guarded", spec), 2))
        .await
        .unwrap();
    let requests = harness.requests().await;
    let mut writes: Vec<_> = policy_requests(&requests)
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    writes.sort();
    assert_eq!(
        writes,
        [
            (
                "DELETE".to_owned(),
                policy_path("team-a", "nsb-guarded-allow-dns")
            ),
            (
                "DELETE".to_owned(),
                policy_path("team-b", "nsb-guarded-allow-dns")
            ),
        ]
    );
}

#[tokio::test]
async fn policies_without_the_managed_labels_are_never_touched() {
    let spec = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    // Same names as the wall, but no managed label: not ours, even under Delete.
    let mut foreign = stored_wall("guarded", "team-b", &spec);
    for policy in &mut foreign {
        policy.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    }
    let namespaces = vec![namespace("team-b", &[("baseline", "open")])];
    let mut guarded = baseline("guarded", spec);
    guarded.meta_mut().finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    let harness = Harness::new(namespaces, foreign, Box::new(healthy));
    run(&harness, converged_among(guarded, 0, 1)).await.unwrap();
    assert!(harness.requests().await.is_empty());
}

#[tokio::test]
async fn audit_mode_reports_drift_and_writes_no_policy() {
    let spec = NamespaceBaselineSpec {
        mode: Mode::Audit,
        ..seed()
    };
    // team-a is walled but its deny-all drifted; team-b has no wall at all.
    let mut policies = full_wall(&spec, &["team-a"]);
    policies[0].spec.as_mut().unwrap().egress = Some(vec![Default::default()]);
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    let action = run(&harness, baseline("guarded", spec)).await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    let requests = harness.requests().await;
    assert!(policy_requests(&requests).is_empty(), "{requests:#?}");
    let statuses = status_patches(&requests);
    assert_eq!(statuses[0]["drifted"], 3);
    assert_eq!(statuses[0]["objectsApplied"], 0);
    assert_eq!(
        condition(statuses[0], "Degraded")["reason"],
        "DriftDetected"
    );
    assert_eq!(event_reasons(&requests), ["DriftDetected"]);
}

#[tokio::test]
async fn delete_policy_adds_the_finalizer_and_orphan_removes_it() {
    let spec = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    let wall = full_wall(&spec, &["team-a", "team-b"]);
    let harness = Harness::new(guarded_namespaces(), wall.clone(), Box::new(healthy));
    run(&harness, converged(baseline("guarded", spec), 2))
        .await
        .unwrap();
    let requests = harness.requests().await;
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert!(requests[0].is("PATCH", &format!("{BASELINES}/guarded")));
    assert_eq!(requests[0].content_type, "application/json-patch+json");
    assert_eq!(
        requests[0].body,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [CLEANUP_FINALIZER]},
        ])
    );

    let mut orphan = baseline("guarded", seed());
    orphan.meta_mut().finalizers = Some(vec!["other/keep".into(), CLEANUP_FINALIZER.into()]);
    let harness = Harness::new(guarded_namespaces(), wall, Box::new(healthy));
    run(&harness, converged(orphan, 2)).await.unwrap();
    let requests = harness.requests().await;
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(
        requests[0].body,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["other/keep", CLEANUP_FINALIZER]},
            {"op": "add", "path": "/metadata/finalizers", "value": ["other/keep"]},
        ])
    );
}

#[tokio::test]
async fn deleting_a_delete_baseline_removes_its_wall_then_the_finalizer() {
    let spec = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    let mut guarded = baseline("guarded", spec.clone());
    guarded.meta_mut().finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    guarded.meta_mut().deletion_timestamp = Some(Time(Timestamp::now()));
    let mut policies = full_wall(&spec, &["team-a", "team-b"]);
    policies.extend(stored_wall("other-baseline", "team-a", &spec));
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(healthy));
    let action = run(&harness, guarded).await.unwrap();
    assert_eq!(action, Action::await_change());
    let requests = harness.requests().await;
    let deletes: Vec<_> = requests.iter().filter(|r| r.method == "DELETE").collect();
    assert_eq!(deletes.len(), 4);
    assert!(deletes.iter().all(|r| r.path.contains("nsb-guarded-")));
    let last = requests.last().unwrap();
    assert!(last.is("PATCH", &format!("{BASELINES}/guarded")));
    assert_eq!(last.body[1]["value"], json!([]));
}

#[tokio::test]
async fn deleting_an_orphan_baseline_touches_nothing() {
    let mut guarded = baseline("guarded", seed());
    guarded.meta_mut().deletion_timestamp = Some(Time(Timestamp::now()));
    let harness = Harness::new(
        guarded_namespaces(),
        full_wall(&seed(), &["team-a"]),
        Box::new(healthy),
    );
    assert_eq!(
        run(&harness, guarded).await.unwrap(),
        Action::await_change()
    );
    assert!(harness.requests().await.is_empty());
}

#[tokio::test]
async fn a_replica_without_the_lease_writes_nothing() {
    let harness = Harness::with_gate(
        guarded_namespaces(),
        vec![],
        Box::new(healthy),
        LeaderGate::elected(namespace_baseline_leader::Timing::DEFAULT),
    );
    let error = run(&harness, baseline("guarded", seed()))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::NotLeader), "{error:?}");
    assert_eq!(error.class(), ErrorClass::Transient);
    assert!(harness.requests().await.is_empty());
}

/// A holder whose last lease renewal failed writes nothing until a renewal succeeds: the
/// reconcile waits at the gate and goes on once it reopens.
#[tokio::test]
async fn a_leader_in_doubt_holds_its_writes_until_a_renewal_succeeds() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let gate = LeaderGate::elected(namespace_baseline_leader::Timing::DEFAULT);
    testing::renewed(&gate, tokio::time::Instant::now());
    testing::doubt(&gate);
    let renewed = Arc::new(AtomicBool::new(false));
    let seen = renewed.clone();
    let responder = Box::new(move |request: &crate::fixtures::Recorded| {
        assert!(
            seen.load(Ordering::SeqCst),
            "a write went out in doubt: {} {}",
            request.method,
            request.path
        );
        healthy(request)
    });
    let harness = Harness::with_gate(guarded_namespaces(), vec![], responder, gate);
    let state = harness.state.clone();
    let renewal = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        renewed.store(true, Ordering::SeqCst);
        testing::renewed(&state.leader, tokio::time::Instant::now());
    });
    run(&harness, baseline("guarded", seed())).await.unwrap();
    renewal.await.unwrap();
    let writes = harness.requests().await;
    assert!(writes.iter().any(|r| r.method == "PATCH"), "{writes:?}");
}

/// ... and fails as `NotLeader`, writing nothing, when no renewal comes: its writes wait for
/// the gate beyond HANDOFF, so the reconcile hands them over, and the reconcile after
/// their refusal reports it.
#[tokio::test(start_paused = true)]
async fn a_leader_in_doubt_that_is_not_renewed_writes_nothing() {
    let gate = LeaderGate::elected(namespace_baseline_leader::Timing::DEFAULT);
    testing::renewed(&gate, tokio::time::Instant::now());
    testing::doubt(&gate);
    let harness = Harness::with_gate(guarded_namespaces(), vec![], Box::new(healthy), gate);
    run(&harness, baseline("guarded", seed())).await.unwrap();
    // The gate's wait (2 s) ends: every write of the first reconcile is refused.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let error = run(&harness, baseline("guarded", seed()))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::NotLeader), "{error:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(harness.requests().await.is_empty());
}

#[test]
fn terminating_namespaces_are_neither_counted_nor_written() {
    let mut leaving = namespace("team-b", &[("baseline", "guarded")]);
    leaving.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let namespaces = vec![
        Arc::new(namespace("team-a", &[("baseline", "guarded")])),
        Arc::new(leaving),
    ];
    let selector = seed().validate().unwrap();
    let plan = plan(
        "guarded",
        &seed(),
        &selector,
        &namespaces,
        &[] as &[Arc<k8s_openapi::api::networking::v1::NetworkPolicy>],
    );
    assert_eq!(plan.namespaces, 1);
    assert_eq!(plan.writes.len(), 1);
    assert_eq!(plan.writes[0].0, "team-a");
}

#[test]
fn two_baselines_never_plan_over_each_other() {
    let namespaces = vec![Arc::new(namespace(
        "team-a",
        &[("baseline", "guarded"), ("tier", "1")],
    ))];
    let tier = NamespaceBaselineSpec::new("tier");
    let policies: Vec<_> = stored_wall("guarded", "team-a", &seed())
        .into_iter()
        .chain(stored_wall("tiered", "team-a", &tier))
        .map(Arc::new)
        .collect();
    let plan_for = |name: &str, spec: &NamespaceBaselineSpec| {
        plan(
            name,
            spec,
            &spec.validate().unwrap(),
            &namespaces,
            &policies,
        )
    };
    assert_eq!(plan_for("guarded", &seed()).changes(), 0);
    assert_eq!(plan_for("tiered", &tier).changes(), 0);
    let no_dns = NamespaceBaselineSpec {
        allow_dns: false,
        ..tier.clone()
    };
    let plan = plan_for("tiered", &no_dns);
    assert_eq!(plan.changes(), 1);
    assert!(
        matches!(&plan.writes[0].1[0], Change::Delete { name, .. } if name == "nsb-tiered-allow-dns")
    );
}

/// The caches keep slimmed objects: planning over them must decide exactly as over the
/// objects the API server sent, drift included.
#[test]
fn slimmed_caches_plan_like_the_full_objects() {
    let decorate = |meta: &mut kube::api::ObjectMeta| {
        meta.uid = Some("3f1e0c4a-uid".into());
        meta.resource_version = Some("4242".into());
        meta.creation_timestamp = Some(Time(Timestamp::from_second(1_700_000_000).unwrap()));
        meta.annotations = Some([("note".to_owned(), "x".to_owned())].into());
        meta.managed_fields = Some(vec![Default::default()]);
        meta.generation = Some(3);
    };
    let mut leaving = namespace("team-c", &[("baseline", "guarded")]);
    leaving.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let full_namespaces: Vec<_> = [
        namespace("team-a", &[("baseline", "guarded")]),
        namespace("team-b", &[("baseline", "guarded")]),
        namespace("other", &[("baseline", "open")]),
        leaving,
    ]
    .into_iter()
    .map(|mut ns| {
        decorate(&mut ns.metadata);
        ns.spec = Some(k8s_openapi::api::core::v1::NamespaceSpec {
            finalizers: Some(vec!["kubernetes".into()]),
        });
        ns
    })
    .collect();
    let delete = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    // team-a converged, team-b drifted (allow-all egress slipped in), other left the baseline.
    let mut full_policies = full_wall(&seed(), &["team-a", "team-b", "other"]);
    full_policies[2].spec.as_mut().unwrap().egress = Some(vec![Default::default()]);
    for policy in &mut full_policies {
        decorate(&mut policy.metadata);
    }
    let slim_namespaces: Vec<_> = full_namespaces
        .iter()
        .cloned()
        .map(namespace_meta)
        .collect();
    let slim_policies: Vec<_> = full_policies
        .iter()
        .cloned()
        .map(|mut policy| {
            slim_policy(&mut policy);
            policy
        })
        .collect();
    assert!(
        slim_namespaces
            .iter()
            .all(|ns| ns.metadata.uid.is_none() && ns.metadata.annotations.is_none())
    );
    for spec in [seed(), delete] {
        let selector = spec.validate().unwrap();
        let full = plan(
            "guarded",
            &spec,
            &selector,
            &arcs(&full_namespaces),
            &arcs(&full_policies),
        );
        let slim = plan(
            "guarded",
            &spec,
            &selector,
            &arcs(&slim_namespaces),
            &arcs(&slim_policies),
        );
        assert_eq!(full, slim);
        assert_eq!(slim.namespaces, 2);
        assert!(!slim.writes.is_empty());
    }
}

fn arcs<T: Clone>(objects: &[T]) -> Vec<Arc<T>> {
    objects.iter().cloned().map(Arc::new).collect()
}

/// Status writes do not trigger another reconcile; a spec change, a finalizer, a deletion
/// or a new object of the same name do.
#[test]
fn only_spec_finalizers_deletion_and_identity_trigger_a_baseline_reconcile() {
    let original = baseline("guarded", seed());
    let hash = |b: &NamespaceBaseline| crate::reconcile::watches::baseline_changes(b).unwrap();
    let mut status_only = converged(original.clone(), 3);
    status_only.metadata.resource_version = Some("101".into());
    status_only.metadata.labels = Some([("team".to_owned(), "net".to_owned())].into());
    assert_eq!(hash(&status_only), hash(&original));

    let mut respecified = original.clone();
    respecified.metadata.generation = Some(2);
    let mut finalized = original.clone();
    finalized.metadata.finalizers = Some(vec![CLEANUP_FINALIZER.to_owned()]);
    let mut deleted = original.clone();
    deleted.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let mut recreated = original.clone();
    recreated.metadata.uid = Some("uid-guarded-2".into());
    for changed in [respecified, finalized, deleted, recreated] {
        assert_ne!(hash(&changed), hash(&original));
    }
}

/// Issue 52, finding 1: a reconcile takes its baseline's marks before it plans; whatever
/// error it then ends with (its finalizer write, its status write, a contained panic), its
/// retry looks at everything again, not only at the marks that arrived meanwhile: else the
/// namespaces of the failed scope wait for the resync while the status says the wall is in
/// place.
#[rstest]
#[case::finalizer_write_fails(format!("{BASELINES}/guarded"))]
#[case::status_write_fails(format!("{BASELINES}/guarded/status"))]
#[tokio::test]
async fn a_failed_reconcile_leaves_its_whole_scope_to_the_retry(#[case] failing: String) {
    let spec = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    let mut policies = full_wall(&spec, &["team-a", "team-b"]);
    policies.remove(2); // team-b's deny-all
    let failed_once = std::sync::atomic::AtomicBool::new(false);
    let responder = move |request: &Recorded| {
        if request.path == failing && !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            failure(500, "InternalError")
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), policies, Box::new(responder));
    let dirty = harness.ctx.caches.dirty.clone();
    // A full pass was made a moment ago; the watch then saw team-b change.
    assert_eq!(
        dirty.take("guarded", RESYNC),
        crate::view::scope::Scope::All
    );
    dirty.namespace("guarded", "team-b");
    let error = run(&harness, converged(baseline("guarded", spec), 2))
        .await
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Transient, "{error:?}");
    // Meanwhile the watch saw team-a change: the retry still looks at team-b.
    dirty.namespace("guarded", "team-a");
    assert_eq!(
        dirty.take("guarded", RESYNC),
        crate::view::scope::Scope::All,
        "the retry of a failed reconcile lost the scope it took"
    );
}

/// Issue 52, finding 1: the finalizer is written with a JSON patch that tests the list it
/// was computed from (as kube's `finalizer()` does), not with the resourceVersion of the
/// cached baseline, which this reconciler's own status writes leave behind: a mocked API
/// server at resourceVersion 101 (a status write ago) refuses a stale resourceVersion with
/// 409 and a failed test with 422, as kube-apiserver does.
#[tokio::test]
async fn the_finalizer_write_tests_the_finalizers_not_the_resource_version() {
    let spec = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    let server_finalizers = Value::Null;
    let responder = move |request: &Recorded| {
        if !request.is("PATCH", &format!("{BASELINES}/guarded")) {
            return healthy(request);
        }
        let stale = request.body["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|version| version != "101");
        let tested = request.body.as_array().is_none_or(|operations| {
            operations.iter().all(|operation| {
                operation["op"] != "test"
                    || (operation["path"] == "/metadata/finalizers"
                        && operation["value"] == server_finalizers)
            })
        });
        if stale {
            failure(409, "Conflict")
        } else if !tested {
            failure(422, "Invalid")
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(
        guarded_namespaces(),
        full_wall(&spec, &["team-a", "team-b"]),
        Box::new(responder),
    );
    // The cache still holds the baseline at resourceVersion 100.
    run(&harness, converged(baseline("guarded", spec), 2))
        .await
        .expect("the finalizer write failed");
    let requests = harness.requests().await;
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0].content_type, "application/json-patch+json");
    assert_eq!(
        requests[0].body,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [CLEANUP_FINALIZER]},
        ])
    );
}

/// The wall of [`guarded_namespaces`] with its `index`th object's spec tampered with
/// (0: team-a's deny-all, 2: team-b's).
fn tampered_wall(index: usize) -> Vec<k8s_openapi::api::networking::v1::NetworkPolicy> {
    let mut policies = full_wall(&seed(), &["team-a", "team-b"]);
    policies[index].spec.as_mut().unwrap().egress = Some(vec![Default::default()]);
    policies
}

/// Issue 52, finding 2: `status.driftRepairs` counts every repair, also those of a reconcile
/// whose status write failed, or was left to the answer of a status write in flight: they
/// are carried until a status that counts them is written.
#[rstest]
#[case::its_status_write_failed(false)]
#[case::a_status_write_was_in_flight(true)]
#[tokio::test(start_paused = true)]
async fn repairs_whose_status_was_not_written_are_counted_by_the_next_status(
    #[case] in_flight: bool,
) {
    let status_path = format!("{BASELINES}/guarded/status");
    let answered_once = std::sync::atomic::AtomicBool::new(false);
    let responder = move |request: &Recorded| {
        if request.path == status_path
            && !answered_once.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            if in_flight {
                (crate::fixtures::NO_ANSWER, Value::Null)
            } else {
                failure(500, "InternalError")
            }
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(guarded_namespaces(), tampered_wall(0), Box::new(responder));
    let cached = converged(baseline("guarded", seed()), 2);
    // A repair whose status write fails, or stays unanswered (handed over).
    let first = run(&harness, cached.clone()).await;
    assert_eq!(first.is_err(), !in_flight, "{first:?}");
    let mut repairs = 1;
    if in_flight {
        // Another repair while that status write is in flight: its status waits.
        let later = harness.with_policies(tampered_wall(2));
        reconcile(Arc::new(cached.clone()), later).await.unwrap();
        repairs += 1;
        // The status write in flight gives up at its budget.
        tokio::time::sleep(Duration::from_secs(31)).await;
    }
    let intact = harness.with_policies(full_wall(&seed(), &["team-a", "team-b"]));
    let _ = reconcile(Arc::new(cached), intact.clone()).await;
    drop(intact);
    let requests = harness.requests().await;
    // The first status write failed, or never answered.
    let written = status_patches(&requests)[1..]
        .last()
        .map(|status| status["driftRepairs"].clone());
    assert_eq!(
        written,
        Some(json!(repairs)),
        "the last status written counts {written:?} of the {repairs} repairs"
    );
    assert_eq!(
        event_reasons(&requests),
        vec!["DriftRepaired"; repairs],
        "each repair is announced, whatever became of its status"
    );
}

/// Issue 52, finding 4: a write belongs to the term that started it. A status write waiting
/// at the gate (the holder in doubt) when its term ends is refused, even though this replica
/// takes the Lease again at once: it never goes out in the next term, where it could land
/// after that term's newer status.
#[tokio::test(start_paused = true)]
async fn a_write_of_an_ended_term_never_goes_out_in_the_next() {
    let gate = LeaderGate::elected(namespace_baseline_leader::Timing::DEFAULT);
    testing::renewed(&gate, tokio::time::Instant::now());
    let harness = Harness::with_gate(
        guarded_namespaces(),
        full_wall(&seed(), &["team-a", "team-b"]),
        Box::new(healthy),
        gate,
    );
    let leader = harness.state.leader.clone();
    testing::doubt(&leader);
    // The status write waits at the gate; the reconcile hands it over.
    run(&harness, baseline("guarded", seed())).await.unwrap();
    // The term ends, and this replica takes the Lease again at once: a new term.
    testing::stand_by(&leader);
    testing::renewed(&leader, tokio::time::Instant::now());
    // The ended term's write would have waited 2 s for its gate.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let requests = harness.requests().await;
    assert!(
        status_patches(&requests).is_empty(),
        "a status write of the ended term went out in the next: {requests:#?}"
    );
}

/// Issue 52, finding 6: the answer of a status write handed over asks for a
/// reconcile that reports it (a failure, the status held back meanwhile), and that reconcile
/// plans no namespace: nothing in the wall changed.
#[tokio::test]
async fn the_reconcile_a_status_answer_asks_for_plans_no_namespace() {
    let harness = Harness::new(guarded_namespaces(), vec![], Box::new(healthy));
    let dirty = harness.ctx.caches.dirty.clone();
    assert_eq!(
        dirty.take("guarded", RESYNC),
        crate::view::scope::Scope::All
    );
    let writer = harness.ctx.handoff.clone();
    writer.take_over_status(&baseline("guarded", seed()), tokio::spawn(async { Ok(()) }));
    while writer.status_in_flight("guarded") {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        dirty.take("guarded", RESYNC),
        crate::view::scope::Scope::Namespaces(Default::default()),
        "the reconcile of a status answer is a full pass"
    );
}

/// A baseline being deleted forgets what is remembered of it, but not its failures: a
/// clean-up that keeps failing backs off as any reconcile does.
#[tokio::test]
async fn a_failing_clean_up_backs_off() {
    let spec = NamespaceBaselineSpec {
        deletion_policy: DeletionPolicy::Delete,
        ..seed()
    };
    let mut guarded = baseline("guarded", spec.clone());
    guarded.meta_mut().finalizers = Some(vec![CLEANUP_FINALIZER.into()]);
    guarded.meta_mut().deletion_timestamp = Some(Time(Timestamp::now()));
    let responder = |request: &Recorded| {
        if request.method == "DELETE" {
            failure(500, "InternalError")
        } else {
            healthy(request)
        }
    };
    let harness = Harness::new(
        guarded_namespaces(),
        full_wall(&spec, &["team-a", "team-b"]),
        Box::new(responder),
    );
    let guarded = Arc::new(guarded);
    for _ in 0..2 {
        let error = run(&harness, guarded.as_ref().clone()).await.unwrap_err();
        error_policy(guarded.clone(), &error, harness.ctx.clone());
    }
    assert_eq!(harness.state.retries.attempts("guarded"), 2);
}
