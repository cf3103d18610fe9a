//! The watches and the controller of a term against a mocked API server that serves lists
//! and watch streams: what a watch's relist after a gap makes the controller write.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::channel::mpsc;
use http::{Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use kube::Client;
use kube::client::Body;
use namespace_baseline_core::NamespaceBaselineSpec;
use namespace_baseline_leader::LeaderGate;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::*;
use crate::base::retry::ServerRetry;
use crate::fixtures::{RESYNC, Recorded, baseline, failure, healthy, stored_wall};

const NAMESPACES: &str = "/api/v1/namespaces";
const POLICIES: &str = "/apis/networking.k8s.io/v1/networkpolicies";
const BASELINES: &str = "/apis/hedronite.io/v1alpha1/namespacebaselines";

type MockBody = UnsyncBoxBody<Bytes, Infallible>;
type WatchSender = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

/// What the mocked API server holds: the objects each collection lists, the watch stream
/// open on each, the writes it received (by which client, when) and how it answers some.
#[derive(Default)]
struct Held {
    lists: HashMap<&'static str, Vec<Value>>,
    resource_version: u64,
    watches: HashMap<String, WatchSender>,
    writes: Vec<Recorded>,
    received: Vec<(&'static str, tokio::time::Instant)>,
    scripted: Vec<(String, Scripted)>,
}

/// How the next write to a path is answered instead of as a healthy API server would.
#[derive(Debug, Clone, Copy)]
enum Scripted {
    /// Never: the request stalls.
    Stall,
    /// `429 Too Many Requests` with `Retry-After: 1`.
    TooManyRequests,
}

/// An API server that lists what the test sets, opens a watch stream per watch request (quiet
/// until the test ends it), and answers writes as a healthy API server does.
#[derive(Clone)]
struct MockApi {
    held: Arc<Mutex<Held>>,
    /// Bumped on every write received.
    written: watch::Sender<usize>,
}

impl MockApi {
    fn new() -> Self {
        Self {
            held: Arc::default(),
            written: watch::channel(0).0,
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on, `collection` lists `objects`.
    fn set_list(&self, collection: &'static str, objects: Vec<Value>) {
        let mut held = self.held();
        held.resource_version += 1;
        held.lists.insert(collection, objects);
    }

    /// Ends the watch open on `collection` as kube-apiserver ends one resumed from a
    /// compacted resourceVersion (`410 Expired`): its watcher lists again.
    fn expire_watch(&self, collection: &str) {
        let watch = self
            .held()
            .watches
            .remove(collection)
            .unwrap_or_else(|| panic!("no watch open on {collection}"));
        let gone = json!({
            "type": "ERROR",
            "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410,
            },
        });
        let _ = watch.unbounded_send(Ok(Frame::data(Bytes::from(format!("{gone}\n")))));
    }

    /// Sends a live event on the watch open on `collection` (`ADDED`, `MODIFIED`, `DELETED`).
    fn send_event(&self, collection: &str, kind: &str, object: Value) {
        let held = self.held();
        let watch = held
            .watches
            .get(collection)
            .unwrap_or_else(|| panic!("no watch open on {collection}"));
        let event = json!({"type": kind, "object": object});
        let _ = watch.unbounded_send(Ok(Frame::data(Bytes::from(format!("{event}\n")))));
    }

    fn writes(&self) -> Vec<Recorded> {
        self.held().writes.clone()
    }

    /// Which client sent each write, and when it arrived.
    fn received(&self) -> Vec<(&'static str, tokio::time::Instant)> {
        self.held().received.clone()
    }

    /// The next write to `path` is answered as `scripted` says.
    fn script(&self, path: &str, scripted: Scripted) {
        self.held().scripted.push((path.to_owned(), scripted));
    }

    /// The writes received, once `done` says they are complete; fails after `within`.
    async fn writes_when(
        &self,
        within: Duration,
        done: impl Fn(&[Recorded]) -> bool,
    ) -> Vec<Recorded> {
        let mut written = self.written.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let writes = self.writes();
            if done(&writes) {
                return writes;
            }
            if tokio::time::timeout_at(deadline, written.changed())
                .await
                .is_err()
            {
                panic!("not within {within:?}; the writes: {writes:#?}");
            }
        }
    }

    /// The reconciler's client: with its retry of 429, 503 and 504 (`ServerRetry`), as the
    /// client stack builds it.
    fn client(&self) -> Client {
        let service = tower::ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(ServerRetry::default()))
            .service(self.service("main"));
        Client::new(service, "default")
    }

    /// The hedge client: no retry.
    fn hedge_client(&self) -> Client {
        Client::new(self.service("hedge"), "default")
    }

    fn service(
        &self,
        origin: &'static str,
    ) -> tower_test::mock::Mock<Request<Body>, Response<MockBody>> {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<MockBody>>();
        let api = self.clone();
        tokio::spawn(async move {
            let mut stalled = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                match api.answer(origin, request).await {
                    Some(response) => send.send_response(response),
                    None => stalled.push(send),
                }
            }
        });
        service
    }

    /// The answer to `request` (`None`: it stalls).
    async fn answer(
        &self,
        origin: &'static str,
        request: Request<Body>,
    ) -> Option<Response<MockBody>> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        let query = parts.uri.query().unwrap_or_default().to_owned();
        if parts.method == Method::GET {
            let mut held = self.held();
            if query.split('&').any(|pair| pair == "watch=true") {
                let (sender, stream) = mpsc::unbounded();
                held.watches.insert(path, sender);
                return Some(Response::new(StreamBody::new(stream).boxed_unsync()));
            }
            let items = held.lists.get(path.as_str()).cloned().unwrap_or_default();
            let list = json!({
                "apiVersion": "v1", "kind": "List",
                "metadata": {"resourceVersion": held.resource_version.to_string()},
                "items": items,
            });
            return Some(json_response(200, &list));
        }
        let bytes = body.collect_bytes().await.unwrap();
        let recorded = Recorded {
            method: parts.method.to_string(),
            path,
            query,
            content_type: String::new(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        let (count, scripted) = {
            let mut held = self.held();
            let scripted = held
                .scripted
                .iter()
                .position(|(path, _)| *path == recorded.path)
                .map(|index| held.scripted.remove(index).1);
            held.writes.push(recorded.clone());
            held.received.push((origin, tokio::time::Instant::now()));
            (held.writes.len(), scripted)
        };
        self.written.send_replace(count);
        match scripted {
            Some(Scripted::Stall) => None,
            Some(Scripted::TooManyRequests) => {
                let (code, body) = failure(429, "TooManyRequests");
                let mut response = json_response(code, &body);
                response
                    .headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("1"));
                Some(response)
            }
            None => {
                let (code, answer) = healthy(&recorded);
                Some(json_response(code, &answer))
            }
        }
    }
}

fn json_response(code: u16, body: &Value) -> Response<MockBody> {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::from(body.to_string())).boxed_unsync())
        .unwrap()
}

fn seed() -> NamespaceBaselineSpec {
    NamespaceBaselineSpec::new("baseline=guarded")
}

/// A namespace as a metadata list holds it.
fn namespace_item(name: &str, labels: &[(&str, &str)]) -> Value {
    let mut labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), json!(value)))
        .collect();
    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1", "labels": labels},
    })
}

fn wall_items(namespace: &str) -> Vec<Value> {
    stored_wall("guarded", namespace, &seed())
        .iter()
        .map(|policy| serde_json::to_value(policy).unwrap())
        .collect()
}

/// team-a's wall, its deny-all deleted.
fn without_deny_all() -> Vec<Value> {
    wall_items("team-a")
        .into_iter()
        .filter(|policy| policy["metadata"]["name"] != "nsb-guarded-default-deny")
        .collect()
}

fn settings() -> Settings {
    Settings {
        concurrency: 4,
        resync: RESYNC,
        dns_namespace: None,
        api_door: None,
        reports: false,
    }
}

/// `(method, path)` of each write, for messages and comparisons.
fn described(writes: &[Recorded]) -> Vec<(String, String)> {
    writes
        .iter()
        .map(|write| (write.method.clone(), write.path.clone()))
        .collect()
}

fn policy_path(namespace: &str, name: &str) -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}")
}

const STATUS: &str = "/apis/hedronite.io/v1alpha1/namespacebaselines/guarded/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

fn fresh_state() -> Arc<State> {
    Arc::new(State::new(Arc::new(LeaderGate::always())))
}

/// A cluster of one guarded namespace whose wall is in place, and a term leading over it
/// with `state` and `hedging`; `test` runs once the term's first pass has reported the
/// baseline.
async fn leading(
    api: &MockApi,
    state: Arc<State>,
    hedging: Option<Hedging>,
    test: impl Future<Output = ()>,
) {
    api.set_list(
        NAMESPACES,
        vec![namespace_item("team-a", &[("baseline", "guarded")])],
    );
    api.set_list(POLICIES, wall_items("team-a"));
    api.set_list(
        BASELINES,
        vec![serde_json::to_value(baseline("guarded", seed())).unwrap()],
    );
    let watches = Watches::start(api.client(), settings(), state).with_hedging(hedging);
    let test = async {
        // The first pass finds the wall in place and writes the baseline's status only.
        let first = api
            .writes_when(Duration::from_secs(5), |writes| !writes.is_empty())
            .await;
        assert_eq!(
            described(&first),
            [("PATCH".to_owned(), STATUS.to_owned())],
            "the first pass"
        );
        test.await;
    };
    tokio::select! {
        () = watches.lead("test".to_owned(), std::future::pending()) => panic!("the term ended"),
        () = test => {}
    }
}

/// Issue 38: kube's store swaps a relist in at `InitDone` only, and a policy deleted while
/// the watch was down sends no event. The wall deleted during the gap is put back as soon as
/// the relist is complete (not at the resync, 300 s later), reported as the repair of a
/// deletion, with no other write; a relist that finds nothing changed writes nothing.
#[tokio::test(start_paused = true)]
async fn a_wall_deleted_while_the_policy_watch_was_down_is_put_back_when_the_relist_ends() {
    let api = MockApi::new();
    leading(&api, fresh_state(), None, async {
        let before = api.writes().len();
        // A gap in which nothing changed: the relist writes nothing.
        api.expire_watch(POLICIES);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            api.writes().len(),
            before,
            "{:#?}",
            described(&api.writes())
        );

        // A gap in which someone deleted the deny-all: the relist does not show it.
        let deny_all = policy_path("team-a", "nsb-guarded-default-deny");
        api.set_list(POLICIES, without_deny_all());
        api.expire_watch(POLICIES);
        let repaired = api
            .writes_when(Duration::from_secs(2), |writes| {
                writes[before..].iter().any(|write| write.path == deny_all)
            })
            .await;
        // Whatever follows the repair within the next 10 s is its report.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = api.writes()[before..].to_vec();
        assert_eq!(
            described(&after),
            [
                ("PATCH".to_owned(), deny_all.clone()),
                ("PATCH".to_owned(), STATUS.to_owned()),
                ("POST".to_owned(), EVENTS.to_owned()),
            ],
            "the repair, its status and its Event, and nothing else"
        );
        assert!(repaired.len() > before);
        assert_eq!(
            after[1].body["status"]["driftRepairs"],
            json!(1),
            "{:#?}",
            after[1].body
        );
        assert_eq!(
            after[2].body["reason"],
            json!("DriftRepaired"),
            "{:#?}",
            after[2].body
        );
    })
    .await;
}

/// The same for the namespace watch: a namespace labelled into the baseline during the gap
/// gets its wall once the relist is complete.
#[tokio::test(start_paused = true)]
async fn a_namespace_that_joined_while_the_namespace_watch_was_down_is_walled_when_the_relist_ends()
{
    let api = MockApi::new();
    leading(&api, fresh_state(), None, async {
        let before = api.writes().len();
        api.set_list(
            NAMESPACES,
            vec![
                namespace_item("team-a", &[("baseline", "guarded")]),
                namespace_item("team-b", &[("baseline", "guarded")]),
            ],
        );
        api.expire_watch(NAMESPACES);
        let wall = [
            policy_path("team-b", "nsb-guarded-default-deny"),
            policy_path("team-b", "nsb-guarded-allow-dns"),
        ];
        let written = api
            .writes_when(Duration::from_secs(2), |writes| {
                wall.iter()
                    .all(|path| writes[before..].iter().any(|write| &write.path == path))
            })
            .await;
        let policies = written[before..]
            .iter()
            .filter(|write| write.path.contains("/networkpolicies/"))
            .count();
        assert_eq!(policies, 2, "{:#?}", described(&written[before..]));
    })
    .await;
}

/// Issue 38, part 1: a repair whose apply stalls is hedged once the bound has passed, on the
/// hedge client, and reported as soon as the hedge answers (the stalled request never does
/// here). A repair whose apply the API server answers 429 is not hedged: the client waits the
/// `Retry-After` (1 s), and its retry lands.
#[tokio::test(start_paused = true)]
async fn a_stalled_repair_is_hedged_and_a_throttled_one_is_not() {
    let api = MockApi::new();
    let state = fresh_state();
    let hedging = Hedging::new(api.hedge_client(), Duration::from_millis(300));
    let metrics = state.clone();
    leading(&api, state, Some(hedging), async {
        let deny_all = policy_path("team-a", "nsb-guarded-default-deny");
        let applies = |from: usize| {
            let (writes, received) = (api.writes(), api.received());
            (from..writes.len())
                .filter(|index| writes[*index].path == deny_all)
                .map(|index| received[index])
                .collect::<Vec<_>>()
        };

        // The deny-all deleted during a gap, its repair's apply stalled: hedged at 300 ms.
        let before = api.writes().len();
        api.script(&deny_all, Scripted::Stall);
        api.set_list(POLICIES, without_deny_all());
        api.expire_watch(POLICIES);
        let written = api
            .writes_when(Duration::from_secs(2), |writes| {
                writes[before..]
                    .iter()
                    .filter(|write| write.path == deny_all)
                    .count()
                    == 2
            })
            .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let hedged = applies(before);
        assert_eq!(
            hedged.iter().map(|(origin, _)| *origin).collect::<Vec<_>>(),
            ["main", "hedge"],
            "{:#?}",
            described(&written[before..])
        );
        assert_eq!(hedged[1].1 - hedged[0].1, Duration::from_millis(300));
        // The repair is reported (its status counts it) as soon as the hedge answered.
        let (writes, received) = (api.writes(), api.received());
        let reported = (before..writes.len())
            .find(|index| {
                writes[*index].path == STATUS
                    && writes[*index].body["status"]["driftRepairs"] == json!(1)
            })
            .map(|index| received[index].1);
        assert_eq!(
            reported,
            Some(hedged[1].1),
            "{:#?}",
            described(&writes[before..])
        );
        let text = metrics.metrics.render().unwrap();
        assert!(
            text.contains(r#"namespace_baseline_hedged_writes_total{answered_by="hedge"} 1"#),
            "{text}"
        );

        // The watch shows the deny-all back; then it is deleted again, and the API server
        // answers the repair's apply 429: no hedge, the retry 1 s later.
        api.set_list(POLICIES, wall_items("team-a"));
        api.expire_watch(POLICIES);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let before = api.writes().len();
        api.script(&deny_all, Scripted::TooManyRequests);
        api.set_list(POLICIES, without_deny_all());
        api.expire_watch(POLICIES);
        api.writes_when(Duration::from_secs(3), |writes| {
            writes[before..]
                .iter()
                .filter(|write| write.path == deny_all)
                .count()
                == 2
        })
        .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let throttled = applies(before);
        assert_eq!(
            throttled
                .iter()
                .map(|(origin, _)| *origin)
                .collect::<Vec<_>>(),
            ["main", "main"],
            "no hedge after a 429"
        );
        assert_eq!(throttled[1].1 - throttled[0].1, Duration::from_secs(1));
        assert!(
            api.received()[before..]
                .iter()
                .all(|(origin, _)| *origin == "main"),
            "{:#?}",
            described(&api.writes()[before..])
        );
    })
    .await;
}

/// `allow-all-in` in `namespace`: a hole in its wall, as a list holds it.
fn hole_item(namespace: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "allow-all-in", "namespace": namespace, "resourceVersion": "3"},
        "spec": {"podSelector": {}, "ingress": [{}]},
    })
}

/// The baseline `guarded` as a list holds it, with `uid`.
fn baseline_item(uid: &str) -> Value {
    let mut guarded = baseline("guarded", seed());
    guarded.metadata.uid = Some(uid.to_owned());
    serde_json::to_value(guarded).unwrap()
}

fn hole_events(writes: &[Recorded]) -> usize {
    writes
        .iter()
        .filter(|write| write.path == EVENTS && write.body["reason"] == "HoleOpened")
        .count()
}

/// Issue 52, finding 5: a baseline deleted under `Orphan` (no finalizer: the watch shows it
/// gone, no reconcile sees it go) takes its state with it: one created again with the same
/// name announces the holes in its wall as the first did.
#[tokio::test(start_paused = true)]
async fn a_baseline_deleted_without_a_finalizer_leaves_nothing_to_its_successor() {
    let api = MockApi::new();
    api.set_list(
        NAMESPACES,
        vec![namespace_item("team-a", &[("baseline", "guarded")])],
    );
    let mut policies = wall_items("team-a");
    policies.push(hole_item("team-a"));
    api.set_list(POLICIES, policies);
    api.set_list(BASELINES, vec![baseline_item("uid-first")]);
    let watches = Watches::start(api.client(), settings(), fresh_state());
    let test = async {
        api.writes_when(Duration::from_secs(5), |writes| hole_events(writes) == 1)
            .await;
        // Deleted (no finalizer: gone at once), then created again with the same name.
        api.set_list(BASELINES, vec![]);
        api.expire_watch(BASELINES);
        tokio::time::sleep(Duration::from_secs(10)).await;
        api.set_list(BASELINES, vec![baseline_item("uid-second")]);
        api.expire_watch(BASELINES);
        api.writes_when(Duration::from_secs(5), |writes| hole_events(writes) == 2)
            .await;
    };
    tokio::select! {
        () = watches.lead("test".to_owned(), std::future::pending()) => panic!("the term ended"),
        () = test => {}
    }
}

/// Issue 52, finding 4: the request of a hedged apply that did not answer first runs on, and
/// may land late. Until it has (answered, or abandoned at its budget), its object is not
/// written again: a spec change meanwhile is written after it, so that the late request
/// never lands over the newer object (it would read as drift, repaired as tampering).
#[tokio::test(start_paused = true)]
async fn an_object_is_not_written_again_while_a_request_of_its_hedged_apply_may_land() {
    let api = MockApi::new();
    let state = fresh_state();
    let hedging = Hedging::new(api.hedge_client(), Duration::from_millis(300));
    leading(&api, state, Some(hedging), async {
        let door = policy_path("team-a", "nsb-guarded-allow-dns");
        let without_door: Vec<Value> = wall_items("team-a")
            .into_iter()
            .filter(|policy| policy["metadata"]["name"] != "nsb-guarded-allow-dns")
            .collect();
        // The DNS door deleted during a gap; its repair's first request stalls, the hedge
        // answers.
        let before = api.writes().len();
        api.script(&door, Scripted::Stall);
        api.set_list(POLICIES, without_door);
        api.expire_watch(POLICIES);
        api.writes_when(Duration::from_secs(2), |writes| {
            writes[before..].iter().filter(|w| w.path == door).count() == 2
        })
        .await;
        let stalled_at = api.received()[(before..api.writes().len())
            .find(|index| api.writes()[*index].path == door)
            .unwrap()]
        .1;
        // The watch shows the door back; 12 s later (past the memory of an answered apply)
        // the spec changes the door's ports, while the stalled request may still land (its
        // budget is 30 s).
        api.set_list(POLICIES, wall_items("team-a"));
        api.expire_watch(POLICIES);
        tokio::time::sleep(Duration::from_secs(12)).await;
        let changed_at = tokio::time::Instant::now();
        let mut respecified = baseline("guarded", seed());
        respecified.metadata.generation = Some(2);
        respecified.metadata.resource_version = Some("200".to_owned());
        respecified.spec.dns = Some(
            serde_json::from_value(json!({"ports": [{"protocol": "UDP", "port": 5353}]})).unwrap(),
        );
        api.set_list(
            BASELINES,
            vec![serde_json::to_value(respecified).unwrap()],
        );
        api.expire_watch(BASELINES);
        tokio::time::sleep(Duration::from_secs(40)).await;
        let (writes, received) = (api.writes(), api.received());
        let rewritten: Vec<_> = (before..writes.len())
            .filter(|index| writes[*index].path == door && received[*index].1 >= changed_at)
            .map(|index| received[index].1 - stalled_at)
            .collect();
        let budget = Duration::from_secs(30);
        assert!(
            rewritten.first().is_some_and(|at| *at >= budget),
            "the door was written again {rewritten:?} after its stalled request went out, which may land until {budget:?}"
        );
    })
    .await;
}

const DNS_SERVICES: &str = "/api/v1/namespaces/kube-system/services";
const DNS_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices";
const DNS_PODS: &str = "/api/v1/namespaces/kube-system/pods";

/// A pod of kube-system as a metadata watch shows it, at `version`, with `labels` and an
/// `annotation`.
fn dns_pod(name: &str, version: u32, labels: Value, annotation: &str) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {
            "name": name, "namespace": "kube-system", "uid": format!("uid-{name}"),
            "resourceVersion": version.to_string(), "labels": labels,
            "annotations": {"churn": annotation},
        },
    })
}

/// What the reconcile counter says of successful reconciles.
fn reconciles(state: &State) -> String {
    let text = state.metrics.render().unwrap();
    text.lines()
        .find(|line| line.starts_with(r#"namespace_baseline_reconciles_total{result="success"}"#))
        .unwrap_or_default()
        .to_owned()
}

/// Issue 52, finding 6: in a busy DNS namespace (a DaemonSet rollout, pods annotated a few
/// times a second) only a change of what a DNS door depends on (the Service, its endpoints'
/// addresses, readiness and ports, the DNS pods' labels) is looked at, and only a check that
/// comes out otherwise than the status says reconciles the baseline: 0 reconciles for the
/// rest.
#[tokio::test(start_paused = true)]
async fn changes_in_the_dns_namespace_that_cannot_turn_a_door_reconcile_nothing() {
    let api = MockApi::new();
    let dns = crate::fixtures::healthy_dns();
    let as_items = |objects: Vec<Value>| objects;
    api.set_list(
        NAMESPACES,
        vec![namespace_item("team-a", &[("baseline", "guarded")])],
    );
    api.set_list(POLICIES, wall_items("team-a"));
    api.set_list(
        BASELINES,
        vec![serde_json::to_value(baseline("guarded", seed())).unwrap()],
    );
    let service = serde_json::to_value(dns.services.state()[0].as_ref()).unwrap();
    let slice = serde_json::to_value(dns.slices.state()[0].as_ref()).unwrap();
    let labels = json!({"k8s-app": "kube-dns"});
    api.set_list(DNS_SERVICES, as_items(vec![service]));
    api.set_list(DNS_SLICES, as_items(vec![slice.clone()]));
    api.set_list(DNS_PODS, vec![dns_pod("coredns-a", 1, labels.clone(), "0")]);
    let state = fresh_state();
    let settings = Settings {
        dns_namespace: Some("kube-system".to_owned()),
        ..settings()
    };
    let watches = Watches::start(api.client(), settings, state.clone());
    let test = async {
        // The first pass writes the status, the door reachable.
        let first = api
            .writes_when(Duration::from_secs(5), |writes| {
                writes.iter().any(|write| write.path == STATUS)
            })
            .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let settled = reconciles(&state);
        let before = api.writes().len();
        assert!(
            first[0].body["status"]["conditions"]
                .to_string()
                .contains("DNSReachable")
        );

        // 200 changes that cannot turn the door: annotations, another label, a slice's
        // resourceVersion and a field the check does not read.
        for change in 0..200u32 {
            let mut other_labels = labels.clone();
            other_labels["pod-template-hash"] = json!(format!("{}", change % 3));
            api.send_event(
                DNS_PODS,
                "MODIFIED",
                dns_pod("coredns-a", change + 2, other_labels, &change.to_string()),
            );
            let mut touched = slice.clone();
            touched["metadata"]["resourceVersion"] = json!(format!("{}", change + 2));
            touched["endpoints"][0]["nodeName"] = json!(format!("node-{}", change % 5));
            api.send_event(DNS_SLICES, "MODIFIED", touched);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            reconciles(&state),
            settled,
            "changes that cannot turn a door reconciled the baseline"
        );
        assert_eq!(
            api.writes().len(),
            before,
            "{:#?}",
            described(&api.writes()[before..])
        );

        // The DNS pod loses the label the door selects: the door turns, reported.
        api.send_event(
            DNS_PODS,
            "MODIFIED",
            dns_pod("coredns-a", 900, json!({"app": "dns"}), "x"),
        );
        let turned = api
            .writes_when(Duration::from_secs(5), |writes| {
                writes[before..].iter().any(|write| write.path == STATUS)
            })
            .await;
        let status = turned[before..]
            .iter()
            .find(|write| write.path == STATUS)
            .unwrap();
        assert!(
            status.body["status"]["conditions"]
                .to_string()
                .contains("EndpointOutsideDoor"),
            "{:#?}",
            status.body
        );
    };
    tokio::select! {
        () = watches.lead("test".to_owned(), std::future::pending()) => panic!("the term ended"),
        () = test => {}
    }
}
