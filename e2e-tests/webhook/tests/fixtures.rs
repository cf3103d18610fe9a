//! Every admission fixture through the stand-in's whole path, without a cluster: the
//! fixture's request posted as an AdmissionReview body, its live objects served by a fake API
//! server (its baselines as the NamespaceBaseline list, its namespaces and NetworkPolicies by
//! name, its host error as a failing API), the built `policy.wasm`
//! evaluating, and the AdmissionReview answered.
//! Each must come back with the fixture's expected verdict, message and warnings, the uid
//! echoed; a request policy-server could not read is a 400, never a verdict; settings the
//! policy refuses stop the stand-in from starting, as they stop the policy-server.
//!
//! Needs the built module: `POLICY_WASM`, else `policy.wasm` at the repository root (`make
//! policy.wasm`). Without it the tests fail; they never skip.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::Full;
use namespace_baseline_formats::fixture::{self, Fixture};
use namespace_baseline_testkit::kubewarden::ClusterAdmissionPolicy;
use namespace_baseline_webhook::policy::Policy;
use namespace_baseline_webhook::review::BadReview;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn policy_wasm() -> Vec<u8> {
    namespace_baseline_e2e::built_policy().1
}

/// `deploy/admission-policy.yaml`'s ClusterAdmissionPolicy with other settings (and mode).
fn admission_policy(settings: &Value, mode: &str) -> ClusterAdmissionPolicy {
    let mut policy =
        ClusterAdmissionPolicy::read(&repo().join("deploy/admission-policy.yaml")).unwrap();
    policy.spec["settings"] = settings.clone();
    policy.spec["mode"] = json!(mode);
    policy
}

/// What the fake API server holds: one fixture's live objects.
#[derive(Default)]
struct Live {
    baselines: Vec<Value>,
    namespaces: Vec<Value>,
    network_policies: Vec<Value>,
    host_error: Option<String>,
}

fn status(code: u16, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "code": code}),
    )
}

fn serve(live: &Live, path: &str) -> (u16, Value) {
    if let Some(message) = &live.host_error {
        return status(500, message);
    }
    if path == "/apis/hedronite.io/v1alpha1/namespacebaselines" {
        return (
            200,
            json!({"apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaselineList",
                   "metadata": {"resourceVersion": "1"}, "items": live.baselines}),
        );
    }
    // The wall's NetworkPolicies by name, as the policy-server's ServiceAccount may read them
    // (get, not list: deploy/policy-server-rbac.yaml).
    if let Some((namespace, name)) = path
        .strip_prefix("/apis/networking.k8s.io/v1/namespaces/")
        .and_then(|rest| rest.split_once("/networkpolicies/"))
    {
        return live
            .network_policies
            .iter()
            .find(|policy| {
                policy["metadata"]["namespace"] == namespace && policy["metadata"]["name"] == name
            })
            .map_or_else(
                || {
                    status(
                        404,
                        &format!("networkpolicies.networking.k8s.io \"{name}\" not found"),
                    )
                },
                |policy| (200, policy.clone()),
            );
    }
    if let Some(name) = path.strip_prefix("/api/v1/namespaces/") {
        return live
            .namespaces
            .iter()
            .find(|namespace| namespace["metadata"]["name"] == name)
            .map_or_else(
                || status(404, &format!("namespaces \"{name}\" not found")),
                |namespace| (200, namespace.clone()),
            );
    }
    status(404, &format!("the fake API server has nothing at {path}"))
}

/// A client of a fake API server answering from `live`.
fn fake_api(live: Arc<Mutex<Live>>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let live = Arc::clone(&live);
        async move {
            let (code, body) = serve(
                &live.lock().unwrap_or_else(PoisonError::into_inner),
                request.uri().path(),
            );
            let mut response = http::Response::new(Full::new(Bytes::from(body.to_string())));
            *response.status_mut() = http::StatusCode::from_u16(code).unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

fn review_body(request: &Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}),
    )
    .unwrap()
}

/// The fixtures that make an admission request, grouped by settings (one module load each).
fn fixtures_by_settings() -> BTreeMap<String, Vec<Fixture>> {
    let mut groups: BTreeMap<String, Vec<Fixture>> = BTreeMap::new();
    for fixture in fixture::load_all(&repo().join("e2e-tests/fixtures")).unwrap() {
        if fixture.expect.settings_valid {
            groups
                .entry(fixture.settings.to_string())
                .or_default()
                .push(fixture);
        }
    }
    groups
}

/// Checks one answer against the fixture; the failure, if any.
fn check(fixture: &Fixture, status: u16, body: &Value) -> Result<(), String> {
    let name = &fixture.name;
    if status == BadReview::STATUS {
        // Refused before any policy runs: only a request policy-server cannot read.
        return if fixture.request["uid"].is_string() {
            Err(format!("{name}: refused a readable request: {body}"))
        } else {
            Ok(())
        };
    }
    let response = &body["response"];
    let mut problems = Vec::new();
    if status != 200
        || body["apiVersion"] != "admission.k8s.io/v1"
        || body["kind"] != "AdmissionReview"
    {
        problems.push(format!("not an AdmissionReview answer: {status} {body}"));
    }
    if response["uid"] != fixture.request["uid"] {
        problems.push(format!("uid {} not echoed", fixture.request["uid"]));
    }
    if let Some(allowed) = fixture.expect.allowed
        && response["allowed"] != allowed
    {
        problems.push(format!("allowed should be {allowed}"));
    }
    if let Some(text) = &fixture.expect.message_contains
        && !response["status"]["message"]
            .as_str()
            .is_some_and(|message| message.contains(text.as_str()))
    {
        problems.push(format!("the message should contain {text:?}"));
    }
    for warning in &fixture.expect.warnings_contain {
        let warned = response["warnings"].as_array().is_some_and(|warnings| {
            warnings
                .iter()
                .any(|w| w.as_str().is_some_and(|w| w.contains(warning.as_str())))
        });
        if !warned {
            problems.push(format!("a warning should contain {warning:?}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}; answered {body}", problems.join("; ")))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_fixture_gets_its_verdict_through_the_stand_in() {
    let wasm = policy_wasm();
    let live = Arc::new(Mutex::new(Live::default()));
    let client = fake_api(Arc::clone(&live));
    let mut failures = Vec::new();
    let (mut answered, mut refused) = (0, 0);
    for (_, fixtures) in fixtures_by_settings() {
        let policy = admission_policy(&fixtures[0].settings, "protect");
        let policy = Policy::load(wasm.clone(), &policy, client.clone())
            .unwrap_or_else(|error| panic!("{}: {error:#}", fixtures[0].name));
        for fixture in &fixtures {
            *live.lock().unwrap() = Live {
                baselines: fixture.baselines.clone(),
                namespaces: fixture.namespaces.clone(),
                network_policies: fixture.network_policies.clone(),
                host_error: fixture.host_error.clone(),
            };
            let answer = policy.answer(&review_body(&fixture.request)).await;
            if answer.status == BadReview::STATUS {
                refused += 1;
            } else {
                answered += 1;
            }
            if let Err(problem) = check(fixture, answer.status, &answer.body) {
                failures.push(problem);
            }
        }
    }
    eprintln!("{answered} fixtures answered by the policy, {refused} refused before it ran");
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(answered >= 100, "only {answered} fixtures answered");
    // odd-empty-request: `{}` has no uid, kind, resource, operation nor userInfo.
    assert_eq!(refused, 1, "requests refused before the policy ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn settings_the_policy_refuses_stop_the_stand_in() {
    let wasm = policy_wasm();
    let client = fake_api(Arc::default());
    let mut checked = 0;
    for fixture in fixture::load_all(&repo().join("e2e-tests/fixtures")).unwrap() {
        if fixture.expect.settings_valid {
            continue;
        }
        let policy = admission_policy(&fixture.settings, "protect");
        let error = match Policy::load(wasm.clone(), &policy, client.clone()) {
            Ok(_) => panic!(
                "{}: the stand-in started with refused settings",
                fixture.name
            ),
            Err(error) => format!("{error:#}"),
        };
        let expected = fixture.expect.message_contains.as_deref().unwrap_or("");
        assert!(
            error.contains("the policy refuses its settings") && error.contains(expected),
            "{}: {error}",
            fixture.name
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} settings fixtures");
}

#[tokio::test(flavor = "multi_thread")]
async fn monitor_mode_allows_what_protect_denies() {
    let wasm = policy_wasm();
    let fixture = fixture::load(
        &repo().join("e2e-tests/fixtures"),
        "policy-delete-managed-deny-all",
    )
    .unwrap();
    let client = fake_api(Arc::default());
    let body = review_body(&fixture.request);
    let protect = Policy::load(
        wasm.clone(),
        &admission_policy(&fixture.settings, "protect"),
        client.clone(),
    )
    .unwrap();
    let denied = protect.answer(&body).await;
    assert_eq!(denied.body["response"]["allowed"], false, "{}", denied.log);
    assert_eq!(denied.body["response"]["status"]["code"], 403);
    let monitor = Policy::load(
        wasm,
        &admission_policy(&fixture.settings, "monitor"),
        client,
    )
    .unwrap();
    let allowed = monitor.answer(&body).await;
    assert_eq!(
        allowed.body["response"],
        json!({"uid": fixture.request["uid"], "allowed": true})
    );
    // The verdict is still in the log.
    assert!(allowed.log.contains("denied (403)"), "{}", allowed.log);
}
