//! Test helpers: objects as the API server returns them, filled caches, and a mocked API
//! server that records every request (so a test can assert that none was made).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::client::Body;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use namespace_baseline_core::doors::Reachability;
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineSpec};
use namespace_baseline_core::wall::desired_wall;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::base::retry::Retries;
use crate::reconcile::context::{Context, Settings};
use crate::reconcile::state::State;
use crate::view::caches::{Caches, DnsCaches};
use crate::view::namespace_cache::CachedNamespace;
use crate::view::namespace_cache::namespace_meta;
use crate::view::policy_cache::{CachedPolicy, PolicyCache};
use namespace_baseline_leader::LeaderGate;

pub const RESYNC: Duration = Duration::from_secs(300);

pub fn baseline(name: &str, spec: NamespaceBaselineSpec) -> NamespaceBaseline {
    let mut baseline = NamespaceBaseline::new(name, spec);
    let meta = baseline.meta_mut();
    meta.uid = Some(format!("uid-{name}"));
    meta.generation = Some(1);
    meta.resource_version = Some("100".into());
    baseline
}

pub fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let mut all: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    all.insert("kubernetes.io/metadata.name".into(), name.into());
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(all),
            uid: Some(format!("uid-ns-{name}")),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The wall as the API server stores it: empty lists dropped, server fields set.
pub fn stored_wall(
    baseline: &str,
    namespace: &str,
    spec: &NamespaceBaselineSpec,
) -> Vec<NetworkPolicy> {
    desired_wall(baseline, namespace, spec)
        .into_iter()
        .map(|policy| {
            let mut value = serde_json::to_value(&policy).unwrap();
            value["spec"]
                .as_object_mut()
                .unwrap()
                .retain(|_, v| v.as_array().is_none_or(|a| !a.is_empty()));
            value["metadata"]["uid"] =
                json!(format!("uid-{}", policy.metadata.name.as_ref().unwrap()));
            value["metadata"]["resourceVersion"] = json!("7");
            serde_json::from_value(value).unwrap()
        })
        .collect()
}

/// A synced store holding `objects`.
/// The cluster's DNS as the default door expects it: the Service `kube-system/kube-dns`, one
/// ready `k8s-app=kube-dns` pod behind it listening on UDP and TCP 53.
pub fn healthy_dns() -> DnsCaches {
    let service: PartialObjectMeta<Service> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
    }))
    .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "kube-dns-x", "namespace": "kube-system", "labels": {"kubernetes.io/service-name": "kube-dns"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "namespace": "kube-system", "name": "coredns-a"}}],
        "ports": [{"name": "dns", "protocol": "UDP", "port": 53}, {"name": "dns-tcp", "protocol": "TCP", "port": 53}],
    }))
    .unwrap();
    let pod: PartialObjectMeta<Pod> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "coredns-a", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
    }))
    .unwrap();
    DnsCaches::of(
        "kube-system",
        store(vec![service]),
        store(vec![slice]),
        store(vec![pod]),
    )
}

/// What the reconcile finds of [`healthy_dns`] with the default door.
pub fn healthy_dns_reachability() -> crate::reconcile::status::DnsCheck {
    crate::reconcile::status::DnsCheck::Checked(healthy_dns_door())
}

fn healthy_dns_door() -> Reachability {
    healthy_dns().check(&namespace_baseline_core::DnsSpec::default())
}

pub fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    // The reader must outlive the writer being dropped.
    store_and_writer(objects).0
}

/// A cache a watch that listed `objects` filled, and its writer, for the events after.
fn store_and_writer<K>(objects: Vec<K>) -> (Store<K>, Writer<K>)
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (reader, writer)
}

fn cached_namespaces(namespaces: Vec<Namespace>) -> Vec<CachedNamespace> {
    namespaces
        .into_iter()
        .map(|namespace| CachedNamespace::from(&namespace_meta(namespace)))
        .collect()
}

/// The namespace cache a watch that listed `namespaces` fills.
fn namespace_store(namespaces: Vec<Namespace>) -> Store<CachedNamespace> {
    store(cached_namespaces(namespaces))
}

/// The same, and its writer: a test that creates a namespace while a reconcile runs.
pub fn namespace_store_and_writer(
    namespaces: Vec<Namespace>,
) -> (Store<CachedNamespace>, Writer<CachedNamespace>) {
    store_and_writer(cached_namespaces(namespaces))
}

/// The policy cache a watch that listed `policies` fills.
fn policy_store(policies: &[NetworkPolicy]) -> Store<CachedPolicy> {
    let cache = PolicyCache::default();
    store(policies.iter().map(|policy| cache.cached(policy)).collect())
}

/// The policy index a watch that listed `policies` builds.
fn policy_index(policies: &[NetworkPolicy]) -> crate::view::scope::PolicyIndex {
    let index = crate::view::scope::PolicyIndex::default();
    index.observe(&watcher::Event::<NetworkPolicy>::Init);
    for policy in policies {
        index.observe(&watcher::Event::InitApply(policy.clone()));
    }
    index.observe(&watcher::Event::<NetworkPolicy>::InitDone);
    index
}

/// One request the mocked API server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

impl Recorded {
    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path == path
    }
}

/// How the mocked API server answers: status code and JSON body.
pub type Responder = Box<dyn Fn(&Recorded) -> (u16, Value) + Send + Sync>;

/// Answers like a healthy API server: echoes applied and created objects, confirms deletes
/// and returns a baseline for patches of baselines.
pub fn healthy(request: &Recorded) -> (u16, Value) {
    let name = request
        .path
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    if request.path.starts_with("/apis/hedronite.io/") {
        let name = request
            .path
            .trim_end_matches("/status")
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        // A status write answers with the status it set, at a new resourceVersion.
        let mut answer = json!({
            "apiVersion": "hedronite.io/v1alpha1",
            "kind": "NamespaceBaseline",
            "metadata": {"name": name, "resourceVersion": "101"},
            "spec": {"namespaceLabel": "patched"},
        });
        if request.path.ends_with("/status") {
            answer["status"] = request.body["status"].clone();
        }
        return (200, answer);
    }
    match request.method.as_str() {
        "DELETE" => (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}),
        ),
        "POST" => (201, request.body.clone()),
        _ => (200, request.body.clone()),
    }
}

/// A status code for the responder meaning: never answer this request.
pub const NO_ANSWER: u16 = 0;

/// A Kubernetes `Status` failure body.
pub fn failure(code: u16, reason: &str) -> (u16, Value) {
    (
        code,
        json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("mocked {reason}"), "reason": reason, "code": code,
        }),
    )
}

/// The mocked API server: serves until every client is dropped, then returns what it saw.
pub fn mock_client(responder: Responder) -> (Client, JoinHandle<Vec<Recorded>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut recorded = Vec::new();
        let mut unanswered = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            let request = Recorded {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                body,
            };
            let (code, response) = responder(&request);
            recorded.push(request);
            if code == NO_ANSWER {
                unanswered.push(send);
                continue;
            }
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&response).unwrap()))
                    .unwrap(),
            );
        }
        recorded
    });
    (Client::new(service, "default"), server)
}

/// A reconcile context over a mocked API server and caches holding the given objects.
pub struct Harness {
    pub ctx: Arc<Context>,
    pub state: Arc<State>,
    server: JoinHandle<Vec<Recorded>>,
}

impl Harness {
    pub fn new(
        namespaces: Vec<Namespace>,
        policies: Vec<NetworkPolicy>,
        responder: Responder,
    ) -> Self {
        Self::with_gate(namespaces, policies, responder, LeaderGate::always())
    }

    pub fn with_gate(
        namespaces: Vec<Namespace>,
        policies: Vec<NetworkPolicy>,
        responder: Responder,
        gate: LeaderGate,
    ) -> Self {
        Self::build(namespaces, policies, responder, gate, healthy_dns())
    }

    /// A harness whose DNS namespace holds `dns`.
    pub fn with_dns(
        namespaces: Vec<Namespace>,
        policies: Vec<NetworkPolicy>,
        responder: Responder,
        dns: DnsCaches,
    ) -> Self {
        Self::build(namespaces, policies, responder, LeaderGate::always(), dns)
    }

    /// A harness whose namespace cache is `namespaces`, a store the test keeps writing to
    /// (a namespace created while a reconcile runs).
    pub fn over_namespace_store(
        namespaces: Store<CachedNamespace>,
        policies: Vec<NetworkPolicy>,
        responder: Responder,
    ) -> Self {
        Self::over(
            namespaces,
            policies,
            responder,
            LeaderGate::always(),
            healthy_dns(),
        )
    }

    fn build(
        namespaces: Vec<Namespace>,
        policies: Vec<NetworkPolicy>,
        responder: Responder,
        gate: LeaderGate,
        dns: DnsCaches,
    ) -> Self {
        Self::over(namespace_store(namespaces), policies, responder, gate, dns)
    }

    fn over(
        namespaces: Store<CachedNamespace>,
        policies: Vec<NetworkPolicy>,
        responder: Responder,
        gate: LeaderGate,
        dns: DnsCaches,
    ) -> Self {
        let (client, server) = mock_client(responder);
        let mut state = State::new(Arc::new(gate));
        state.retries = Retries::default().without_jitter();
        let state = Arc::new(state);
        let (_, synced) = tokio::sync::watch::channel(true);
        let index = policy_index(&policies);
        let mut caches = Caches::new(namespaces, policy_store(&policies), Some(dns), synced);
        caches.index = index;
        let settings = Settings {
            concurrency: 4,
            resync: RESYNC,
            dns_namespace: Some("kube-system".to_owned()),
            api_door: None,
            reports: true,
        };
        let ctx = Arc::new(Context::new(
            client,
            caches,
            settings,
            state.clone(),
            "test".into(),
        ));
        Self { ctx, state, server }
    }

    /// The same reconciler a moment later, its policy cache now holding `policies` (its other
    /// caches, and what it remembers, unchanged).
    pub fn with_policies(&self, policies: Vec<NetworkPolicy>) -> Arc<Context> {
        let mut caches = self.ctx.caches.clone();
        caches.index = policy_index(&policies);
        caches.policies = policy_store(&policies);
        self.later(caches)
    }

    /// The same reconciler a moment later, its namespace cache now holding `namespaces`.
    pub fn with_namespaces(&self, namespaces: Vec<Namespace>) -> Arc<Context> {
        let mut caches = self.ctx.caches.clone();
        caches.namespaces = namespace_store(namespaces);
        caches.live = crate::view::scope::LiveNamespaces::new(caches.namespaces.clone());
        self.later(caches)
    }

    fn later(&self, caches: Caches) -> Arc<Context> {
        Arc::new(
            Context::new(
                self.ctx.client.clone(),
                caches,
                self.ctx.settings.clone(),
                self.state.clone(),
                "test".into(),
            )
            .with_handoff(self.ctx.handoff.clone()),
        )
    }

    /// Drops the client and returns every request the API server received.
    pub async fn requests(self) -> Vec<Recorded> {
        let Self { ctx, server, .. } = self;
        drop(ctx);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the client was not dropped")
            .unwrap()
    }
}
