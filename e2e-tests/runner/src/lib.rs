//! A waPC host for the Namespace Baseline admission policy, built like Kubewarden's
//! policy-server builds its own: `wapc` over `wasmtime-provider`, WASI enabled (the policy is
//! a `wasm32-wasip1` module), epoch interruption as the evaluation deadline, and a host
//! callback that answers the Kubernetes host capabilities.
//!
//! The module is compiled once per [`PolicyHost`] and one instance is reused across
//! evaluations, as the policy-server does. What the "cluster" answers is set per evaluation
//! ([`Cluster`]); every host call the policy makes is recorded and returned with the response
//! ([`Evaluation`]), so a caller can assert how the policy reached the API server. After a
//! failed guest call (a trap, a deadline) the instance is replaced by a fresh one from the
//! already-compiled module, so one bad request cannot poison the next.
//!
//! [`fixture`] holds the fixture format and the checks the `e2e-runner` binary applies;
//! [`kwctl_session`] writes the calls a fixture made as the session kwctl replays.

pub mod fixture;
pub mod kwctl_session;
pub mod memory;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use wapc::{WapcHost, WasiParams};
use wasmtime_provider::wasmtime;
use wasmtime_provider::{
    EpochDeadlines, ResourceLimits, WasmtimeEngineProviderBuilder, WasmtimeEngineProviderPre,
};

/// The custom resource the policy reads in context-aware mode.
pub const BASELINE_API_VERSION: &str = "hedronite.io/v1alpha1";
pub const BASELINE_KIND: &str = "NamespaceBaseline";
pub const BASELINE_LIST_KIND: &str = "NamespaceBaselineList";

/// The guest functions of a Kubewarden policy.
pub const VALIDATE: &str = "validate";
pub const VALIDATE_SETTINGS: &str = "validate_settings";
pub const PROTOCOL_VERSION: &str = "protocol_version";

/// The policy-server's default evaluation timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the epoch advances: the deadline's resolution.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Everything that can go wrong while hosting the policy. A trap or a deadline inside the
/// guest is a [`Error::GuestCall`]: for the policy-server it would reject the request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot configure the wasmtime engine")]
    Engine(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot compile the policy module")]
    Compile(#[source] wasmtime_provider::errors::Error),
    #[error("cannot instantiate the policy module (wapc_init)")]
    Instantiate(#[source] wapc::errors::Error),
    #[error("guest call {operation:?} failed")]
    GuestCall {
        operation: String,
        #[source]
        source: wapc::errors::Error,
    },
    #[error("cannot encode the payload of guest call {operation:?}")]
    Payload {
        operation: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("guest call {operation:?} answered something that is not its response: {raw}")]
    Response {
        operation: String,
        raw: String,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The message of a guest call that failed, trap or not.
    pub fn guest_message(&self) -> Option<&str> {
        match self {
            Self::GuestCall {
                source: wapc::errors::Error::GuestCallFailure(message),
                ..
            } => Some(message),
            _ => None,
        }
    }

    /// Whether a guest call died (a wasm trap, a panic compiled to `unreachable`, the
    /// deadline) rather than returned an error of its own through waPC. Both reach the host
    /// on the same channel; wasmtime's trap messages tell them apart.
    pub fn is_trap(&self) -> bool {
        self.guest_message().is_some_and(looks_like_trap)
    }

    /// The error the guest returned on purpose (`CallResult::Err`), if that is what this is.
    pub fn guest_error(&self) -> Option<&str> {
        self.guest_message()
            .filter(|message| !looks_like_trap(message))
    }
}

fn looks_like_trap(message: &str) -> bool {
    [
        "wasm trap",
        "wasm backtrace",
        "execution deadline exceeded",
        "unreachable",
    ]
    .iter()
    .any(|marker| message.contains(marker))
}

/// A Kubewarden `ValidationResponse`, as the policy returns it from `validate`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct ValidationResponse {
    pub accepted: bool,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub code: Option<u16>,
    /// A validating policy must never set it: the policy-server would refuse the response.
    #[serde(default)]
    pub mutated_object: Option<Value>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

/// A Kubewarden `SettingsValidationResponse`, as the policy returns it from
/// `validate_settings`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct SettingsResponse {
    pub valid: bool,
    #[serde(default)]
    pub message: Option<String>,
}

/// The built policy module the tests run, and where it was read: `POLICY_WASM`, else
/// `policy.wasm` at the repository root (`make policy.wasm`). For tests: a module that cannot
/// be read panics with how to build it, so a test without it fails rather than skips.
pub fn built_policy() -> (PathBuf, Vec<u8>) {
    let path = std::env::var_os("POLICY_WASM").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policy.wasm"),
        PathBuf::from,
    );
    match std::fs::read(&path) {
        Ok(wasm) => (path, wasm),
        Err(error) => panic!(
            "the policy module {} cannot be read ({error}): build it with make policy.wasm (or point POLICY_WASM at it)",
            path.display()
        ),
    }
}

/// What the host capabilities answer during one evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    /// The `NamespaceBaseline` objects `list_resources_all` returns.
    pub baselines: Vec<Value>,
    /// The `Namespace` objects `get_resource` returns by name; another name is not found.
    pub namespaces: Vec<Value>,
    /// The `NetworkPolicy` objects `get_resource` returns by namespace and name; another is
    /// not found, as the policy-server says it.
    pub network_policies: Vec<Value>,
    /// When set, every Kubernetes host capability fails with this message.
    pub host_error: Option<String>,
}

impl Cluster {
    pub fn with_baselines(baselines: Vec<Value>) -> Self {
        Self {
            baselines,
            ..Self::default()
        }
    }
}

/// One host call the guest made.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCall {
    pub binding: String,
    pub namespace: String,
    pub operation: String,
    /// The payload, as JSON when it parses, else as a (lossy) string.
    pub payload: Value,
    pub outcome: CallOutcome,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// Answered from the [`Cluster`].
    Answered,
    /// Failed as the [`Cluster`] asked (`host_error`).
    Failed(String),
    /// Not a call this policy has any reason to make; failed, and a test failure.
    Unexpected(String),
}

impl HostCall {
    /// A list of the NamespaceBaselines (what only `contextAware` may read).
    pub fn is_baseline_list(&self) -> bool {
        (
            self.binding.as_str(),
            self.namespace.as_str(),
            self.operation.as_str(),
        ) == ("kubewarden", "kubernetes", "list_resources_all")
    }

    /// Logging through `kubewarden/tracing/log` is not a read of the cluster.
    pub fn is_log(&self) -> bool {
        (
            self.binding.as_str(),
            self.namespace.as_str(),
            self.operation.as_str(),
        ) == ("kubewarden", "tracing", "log")
    }

    pub fn is_unexpected(&self) -> bool {
        matches!(self.outcome, CallOutcome::Unexpected(_))
    }
}

impl fmt::Display for HostCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{} {}",
            self.binding, self.namespace, self.operation, self.payload
        )?;
        match &self.outcome {
            CallOutcome::Answered => Ok(()),
            CallOutcome::Failed(message) => write!(f, " -> error {message:?}"),
            CallOutcome::Unexpected(message) => write!(f, " -> {message}"),
        }
    }
}

/// A guest response and the host calls made while computing it.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation<T> {
    pub response: T,
    pub host_calls: Vec<HostCall>,
    pub elapsed: Duration,
}

impl<T> Evaluation<T> {
    /// The calls that read the cluster (every call but logging).
    pub fn capability_calls(&self) -> impl Iterator<Item = &HostCall> {
        self.host_calls.iter().filter(|call| !call.is_log())
    }

    pub fn unexpected_calls(&self) -> impl Iterator<Item = &HostCall> {
        self.host_calls.iter().filter(|call| call.is_unexpected())
    }
}

#[derive(Debug, Default)]
struct HostState {
    /// Shared with the caller of [`PolicyHost::call_shared`]: what the cluster answers is
    /// not copied per call (the benchmark reuses one cluster of 1,000 baselines).
    cluster: Arc<Cluster>,
    calls: Vec<HostCall>,
}

fn lock(state: &Mutex<HostState>) -> MutexGuard<'_, HostState> {
    // A panic while holding the lock cannot leave the state half-written in a way that
    // matters here: every evaluation starts by resetting it.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

type CallbackResult = std::result::Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>>;

/// The host side of every waPC host call: answers from the current [`Cluster`], records.
fn host_callback(
    state: &Mutex<HostState>,
    binding: &str,
    namespace: &str,
    operation: &str,
    payload: &[u8],
) -> CallbackResult {
    let parsed = serde_json::from_slice::<Value>(payload)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(payload).into_owned()));
    let mut state = lock(state);
    let (outcome, answer) = match (binding, namespace, operation) {
        ("kubewarden", "tracing", "log") => (CallOutcome::Answered, Ok(Vec::new())),
        ("kubewarden", "kubernetes", operation @ ("list_resources_all" | "get_resource")) => {
            let answer = if operation == "get_resource" {
                get_resource(&state.cluster, &parsed)
            } else {
                list_baselines(&state.cluster, &parsed)
            };
            match answer {
                Ok(body) => (CallOutcome::Answered, Ok(body)),
                Err(Refusal::Failed(message)) => {
                    (CallOutcome::Failed(message.clone()), Err(message))
                }
                Err(Refusal::Unexpected(message)) => {
                    (CallOutcome::Unexpected(message.clone()), Err(message))
                }
            }
        }
        _ => {
            let message = format!("unexpected host call {binding}/{namespace}/{operation}");
            (CallOutcome::Unexpected(message.clone()), Err(message))
        }
    };
    state.calls.push(HostCall {
        binding: binding.to_owned(),
        namespace: namespace.to_owned(),
        operation: operation.to_owned(),
        payload: parsed,
        outcome,
    });
    answer.map_err(Into::into)
}

/// What the host answers one host call of the guest, from `cluster`, as a [`PolicyHost`]
/// does during an evaluation (for a benchmark of the host's own share).
pub fn host_answer(
    cluster: &Arc<Cluster>,
    binding: &str,
    namespace: &str,
    operation: &str,
    payload: &[u8],
) -> std::result::Result<Vec<u8>, String> {
    let state = Mutex::new(HostState {
        cluster: Arc::clone(cluster),
        calls: Vec::new(),
    });
    host_callback(&state, binding, namespace, operation, payload).map_err(|error| error.to_string())
}

enum Refusal {
    Failed(String),
    Unexpected(String),
}

/// `list_resources_all` for `NamespaceBaseline`: a Kubernetes List of the cluster's
/// baselines, pruned to the requested field masks as the policy-server does.
fn list_baselines(cluster: &Cluster, request: &Value) -> std::result::Result<Vec<u8>, Refusal> {
    let field = |name: &str| request.get(name).unwrap_or(&Value::Null);
    if field("api_version") != BASELINE_API_VERSION || field("kind") != BASELINE_KIND {
        return Err(Refusal::Unexpected(format!(
            "unexpected host call kubewarden/kubernetes/list_resources_all for {request}: only {BASELINE_API_VERSION} {BASELINE_KIND} is expected"
        )));
    }
    for selector in ["label_selector", "field_selector"] {
        if !field(selector).is_null() {
            return Err(Refusal::Unexpected(format!(
                "unexpected host call kubewarden/kubernetes/list_resources_all with {selector} {}: the e2e host does not filter",
                field(selector)
            )));
        }
    }
    if let Some(message) = &cluster.host_error {
        return Err(Refusal::Failed(message.clone()));
    }
    let masks = field_masks("list_resources_all", request)?;
    let items: Vec<Value> = cluster
        .baselines
        .iter()
        .map(|item| match &masks {
            Some(masks) => prune(item, masks),
            None => item.clone(),
        })
        .collect();
    let list = json!({
        "apiVersion": BASELINE_API_VERSION,
        "kind": BASELINE_LIST_KIND,
        "metadata": {"resourceVersion": "424242"},
        "items": items,
    });
    serde_json::to_vec(&list).map_err(|error| Refusal::Failed(error.to_string()))
}

/// The field masks of a host call: `None` (the whole object) when absent or empty.
fn field_masks(
    operation: &str,
    request: &Value,
) -> std::result::Result<Option<BTreeSet<String>>, Refusal> {
    match request.get("field_masks").unwrap_or(&Value::Null) {
        Value::Null => Ok(None),
        Value::Array(items) if items.is_empty() => Ok(None),
        Value::Array(items) => Ok(Some(
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect(),
        )),
        other => Err(Refusal::Unexpected(format!(
            "unexpected host call kubewarden/kubernetes/{operation}: field_masks {other} is not a list"
        ))),
    }
}

/// `get_resource` of the two kinds the policy gets by name: a `v1` `Namespace` or a
/// `networking.k8s.io/v1` `NetworkPolicy`.
fn get_resource(cluster: &Cluster, request: &Value) -> std::result::Result<Vec<u8>, Refusal> {
    let field = |name: &str| request.get(name).unwrap_or(&Value::Null);
    match (field("api_version").as_str(), field("kind").as_str()) {
        (Some("v1"), Some("Namespace")) => get_namespace(cluster, request),
        (Some(NETWORK_POLICY_API_VERSION), Some(NETWORK_POLICY_KIND)) => {
            get_network_policy(cluster, request)
        }
        _ => Err(Refusal::Unexpected(format!(
            "unexpected host call kubewarden/kubernetes/get_resource for {request}: only v1 Namespace and {NETWORK_POLICY_API_VERSION} {NETWORK_POLICY_KIND} are expected"
        ))),
    }
}

/// What the policy looks a wall's part up as.
pub const NETWORK_POLICY_API_VERSION: &str = "networking.k8s.io/v1";
pub const NETWORK_POLICY_KIND: &str = "NetworkPolicy";

/// `get_resource` of a NetworkPolicy: the cluster's NetworkPolicy of that namespace and name,
/// pruned to the requested field masks, or not found in the policy-server's words
/// (policy-evaluator's `get_resource`, wrapped by its callback: "Callback evaluation failure:
/// Cannot find <apiVersion>/<kind> named '<name>' inside of namespace '<Some("ns")>'").
fn get_network_policy(cluster: &Cluster, request: &Value) -> std::result::Result<Vec<u8>, Refusal> {
    let field = |name: &str| request.get(name).unwrap_or(&Value::Null);
    let (Some(namespace), Some(name)) = (field("namespace").as_str(), field("name").as_str())
    else {
        return Err(Refusal::Unexpected(format!(
            "unexpected host call kubewarden/kubernetes/get_resource of a NetworkPolicy without a namespace and a name: {request}"
        )));
    };
    let masks = field_masks("get_resource", request)?;
    if let Some(message) = &cluster.host_error {
        return Err(Refusal::Failed(message.clone()));
    }
    let Some(policy) = cluster.network_policies.iter().find(|policy| {
        policy["metadata"]["namespace"] == namespace && policy["metadata"]["name"] == name
    }) else {
        return Err(Refusal::Failed(format!(
            "Callback evaluation failure: Cannot find {NETWORK_POLICY_API_VERSION}/{NETWORK_POLICY_KIND} named '{name}' inside of namespace '{:?}'",
            Some(namespace)
        )));
    };
    let answer = match &masks {
        Some(masks) => prune(policy, masks),
        None => policy.clone(),
    };
    serde_json::to_vec(&answer).map_err(|error| Refusal::Failed(error.to_string()))
}

/// `get_resource` of a `v1` `Namespace`: the cluster's Namespace of that name, pruned to the
/// requested field masks, or not found as the API server says it.
fn get_namespace(cluster: &Cluster, request: &Value) -> std::result::Result<Vec<u8>, Refusal> {
    let field = |name: &str| request.get(name).unwrap_or(&Value::Null);
    if !field("namespace").is_null() {
        return Err(Refusal::Unexpected(format!(
            "unexpected host call kubewarden/kubernetes/get_resource with namespace {}: a Namespace is cluster-scoped",
            field("namespace")
        )));
    }
    let Some(name) = field("name").as_str() else {
        return Err(Refusal::Unexpected(format!(
            "unexpected host call kubewarden/kubernetes/get_resource without a name: {request}"
        )));
    };
    let masks = field_masks("get_resource", request)?;
    if let Some(message) = &cluster.host_error {
        return Err(Refusal::Failed(message.clone()));
    }
    let Some(namespace) = cluster
        .namespaces
        .iter()
        .find(|namespace| namespace["metadata"]["name"] == name)
    else {
        return Err(Refusal::Failed(format!("namespaces {name:?} not found")));
    };
    let answer = match &masks {
        Some(masks) => prune(namespace, masks),
        None => namespace.clone(),
    };
    serde_json::to_vec(&answer).map_err(|error| Refusal::Failed(error.to_string()))
}

/// Keeps `apiVersion`, `kind` and the dotted paths in `masks` (a path through a list applies
/// to every element), as Kubewarden's field masks do.
fn prune(object: &Value, masks: &BTreeSet<String>) -> Value {
    let mut kept = Map::new();
    if let Value::Object(map) = object {
        for key in ["apiVersion", "kind"] {
            if let Some(value) = map.get(key) {
                kept.insert(key.to_owned(), value.clone());
            }
        }
    }
    let mut out = Value::Object(kept);
    for mask in masks {
        let path: Vec<&str> = mask.split('.').collect();
        copy_path(object, &mut out, &path);
    }
    out
}

fn copy_path(from: &Value, to: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        *to = from.clone();
        return;
    };
    match from {
        Value::Object(map) => {
            let Some(child) = map.get(*first) else {
                return;
            };
            if !to.is_object() {
                *to = Value::Object(Map::new());
            }
            if let Value::Object(target) = to {
                let slot = target
                    .entry((*first).to_owned())
                    .or_insert_with(|| empty_like(child, rest));
                copy_path(child, slot, rest);
            }
        }
        Value::Array(items) => {
            if !to.is_array() {
                *to = Value::Array(items.iter().map(|_| Value::Null).collect());
            }
            if let Value::Array(targets) = to {
                for (item, target) in items.iter().zip(targets.iter_mut()) {
                    copy_path(item, target, path);
                }
            }
        }
        _ => {}
    }
}

fn empty_like(value: &Value, rest: &[&str]) -> Value {
    match value {
        _ if rest.is_empty() => Value::Null,
        Value::Array(items) => Value::Array(items.iter().map(|_| Value::Null).collect()),
        _ => Value::Object(Map::new()),
    }
}

/// Advances the engine's epoch until dropped: the clock behind the evaluation deadline.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: wasmtime::Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // The ticker never panics; a join error would only repeat a panic already shown.
            let _ = thread.join();
        }
    }
}

/// How a [`PolicyHost`] runs the module, beyond the policy-server's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostOptions {
    /// How long each guest call may run.
    pub timeout: Duration,
    /// The most the instance's linear memory may grow to; growing past it fails, which a
    /// Rust guest turns into an abort (a trap).
    pub max_memory: Option<usize>,
    /// Allocate the linear memory in the host so that [`PolicyHost::memory_size`] can read
    /// it (see [`memory`]). Off by default: it costs speed and guard pages, and the
    /// deadline is then checked when a call returns instead of interrupting it.
    pub track_memory: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            max_memory: None,
            track_memory: false,
        }
    }
}

/// The policy loaded in a waPC host. Not `Sync`: one evaluation at a time, like one
/// policy-server worker.
pub struct PolicyHost {
    pre: WasmtimeEngineProviderPre,
    deadlines: EpochDeadlines,
    host: WapcHost,
    state: Arc<Mutex<HostState>>,
    memory: Option<memory::Gauge>,
    timeout: Duration,
    _ticker: EpochTicker,
}

impl fmt::Debug for PolicyHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyHost")
            .field("host", &self.host.id())
            .field("deadlines", &self.deadlines)
            .finish_non_exhaustive()
    }
}

impl PolicyHost {
    /// Compiles the module and instantiates it, with the policy-server's default timeout.
    pub fn new(wasm: &[u8]) -> Result<Self> {
        Self::with_timeout(wasm, DEFAULT_TIMEOUT)
    }

    /// Compiles the module and instantiates it; each guest call may run for `timeout`.
    pub fn with_timeout(wasm: &[u8], timeout: Duration) -> Result<Self> {
        Self::with_options(
            wasm,
            HostOptions {
                timeout,
                ..HostOptions::default()
            },
        )
    }

    /// Compiles the module and instantiates it as `options` say.
    pub fn with_options(wasm: &[u8], options: HostOptions) -> Result<Self> {
        let HostOptions {
            timeout,
            max_memory,
            track_memory,
        } = options;
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        // Tracked memory turns epoch interruption off again (see `memory::configure`).
        let gauge = track_memory.then(memory::Gauge::default);
        if let Some(gauge) = &gauge {
            memory::configure(&mut config, gauge);
        }
        let engine = wasmtime::Engine::new(&config).map_err(|e| Error::Engine(e.into()))?;
        let ticks = u64::try_from(timeout.as_millis() / EPOCH_TICK.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let deadlines = EpochDeadlines {
            // Instantiation also runs the guest's start-up code; give it the same budget as
            // the policy-server gives a whole evaluation, several times over.
            wapc_init: ticks.saturating_mul(5),
            wapc_func: ticks,
        };
        let mut builder = WasmtimeEngineProviderBuilder::new()
            .engine(engine.clone())
            .module_bytes(wasm)
            .wasi_params(WasiParams::default());
        if let Some(max_memory) = max_memory {
            builder = builder.enable_resource_limits(ResourceLimits {
                max_memory_size: Some(max_memory),
                max_table_elements: None,
            });
        }
        let pre = builder.build_pre().map_err(Error::Compile)?;
        let state = Arc::new(Mutex::new(HostState::default()));
        let ticker = EpochTicker::start(engine);
        let host = Self::instantiate(&pre, deadlines, &state)?;
        Ok(Self {
            pre,
            deadlines,
            host,
            state,
            memory: gauge,
            timeout,
            _ticker: ticker,
        })
    }

    /// Bytes of linear memory the live instance has grown to; `None` unless the host was
    /// made with [`HostOptions::track_memory`].
    pub fn memory_size(&self) -> Option<usize> {
        self.memory.as_ref().map(memory::Gauge::bytes)
    }

    /// Instances made so far (the first, plus one per failed call); `None` unless the host
    /// was made with [`HostOptions::track_memory`].
    pub fn instances_created(&self) -> Option<usize> {
        self.memory.as_ref().map(memory::Gauge::memories_created)
    }

    fn instantiate(
        pre: &WasmtimeEngineProviderPre,
        deadlines: EpochDeadlines,
        state: &Arc<Mutex<HostState>>,
    ) -> Result<WapcHost> {
        let engine = pre
            .rehydrate(Some(deadlines))
            .map_err(|e| Error::Instantiate(wapc::errors::Error::ProviderFailure(Box::new(e))))?;
        let state = Arc::clone(state);
        let callback =
            move |_id: u64, binding: &str, namespace: &str, operation: &str, payload: &[u8]| {
                host_callback(&state, binding, namespace, operation, payload)
            };
        WapcHost::new(Box::new(engine), Some(Box::new(callback))).map_err(Error::Instantiate)
    }

    /// Calls a guest function with raw bytes while the host capabilities answer from
    /// `cluster`. A failed call replaces the instance before returning the error.
    pub fn call(
        &mut self,
        operation: &str,
        payload: &[u8],
        cluster: &Cluster,
    ) -> Result<Evaluation<Vec<u8>>> {
        self.call_shared(operation, payload, &Arc::new(cluster.clone()))
    }

    /// [`PolicyHost::call`] with a cluster the host keeps a reference to instead of a copy.
    pub fn call_shared(
        &mut self,
        operation: &str,
        payload: &[u8],
        cluster: &Arc<Cluster>,
    ) -> Result<Evaluation<Vec<u8>>> {
        {
            let mut state = lock(&self.state);
            state.cluster = Arc::clone(cluster);
            state.calls.clear();
        }
        let started = Instant::now();
        let mut result = self.host.call(operation, payload);
        let elapsed = started.elapsed();
        if self.memory.is_some() && elapsed > self.timeout && result.is_ok() {
            // Tracked memory runs without epoch interruption: the deadline is checked here.
            result = Err(wapc::errors::Error::GuestCallFailure(format!(
                "execution deadline exceeded: the call took {elapsed:?}, more than {:?} (measured when it returned)",
                self.timeout
            )));
        }
        let host_calls = std::mem::take(&mut lock(&self.state).calls);
        match result {
            Ok(response) => Ok(Evaluation {
                response,
                host_calls,
                elapsed,
            }),
            Err(source) => {
                // The guest may have trapped half-way through its own bookkeeping: never
                // reuse that instance. If even a fresh one cannot be made, report that.
                self.host = Self::instantiate(&self.pre, self.deadlines, &self.state)?;
                Err(Error::GuestCall {
                    operation: operation.to_owned(),
                    source,
                })
            }
        }
    }

    fn call_json<T: serde::de::DeserializeOwned>(
        &mut self,
        operation: &str,
        payload: &Value,
        cluster: &Cluster,
    ) -> Result<Evaluation<T>> {
        let bytes = serde_json::to_vec(payload).map_err(|source| Error::Payload {
            operation: operation.to_owned(),
            source,
        })?;
        let raw = self.call(operation, &bytes, cluster)?;
        let response = serde_json::from_slice(&raw.response).map_err(|source| Error::Response {
            operation: operation.to_owned(),
            raw: String::from_utf8_lossy(&raw.response).into_owned(),
            source,
        })?;
        Ok(Evaluation {
            response,
            host_calls: raw.host_calls,
            elapsed: raw.elapsed,
        })
    }

    /// `validate_settings` with the settings as written in the ClusterAdmissionPolicy.
    pub fn validate_settings(&mut self, settings: &Value) -> Result<Evaluation<SettingsResponse>> {
        self.call_json(VALIDATE_SETTINGS, settings, &Cluster::default())
    }

    /// `validate` of one AdmissionRequest, the cluster holding `baselines`.
    pub fn validate(
        &mut self,
        settings: &Value,
        request: &Value,
        baselines: &[Value],
    ) -> Result<Evaluation<ValidationResponse>> {
        self.validate_in(
            settings,
            request,
            &Cluster::with_baselines(baselines.to_vec()),
        )
    }

    /// `validate` of one AdmissionRequest against any [`Cluster`] (e.g. a failing one).
    pub fn validate_in(
        &mut self,
        settings: &Value,
        request: &Value,
        cluster: &Cluster,
    ) -> Result<Evaluation<ValidationResponse>> {
        let payload = json!({"settings": settings, "request": request});
        self.call_json(VALIDATE, &payload, cluster)
    }

    /// The Kubewarden protocol version the policy declares (`"v1"`).
    pub fn protocol_version(&mut self) -> Result<String> {
        let raw = self.call(PROTOCOL_VERSION, b"", &Cluster::default())?;
        serde_json::from_slice(&raw.response).map_err(|source| Error::Response {
            operation: PROTOCOL_VERSION.to_owned(),
            raw: String::from_utf8_lossy(&raw.response).into_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(name: &str, label: &str) -> Value {
        json!({
            "apiVersion": BASELINE_API_VERSION,
            "kind": BASELINE_KIND,
            "metadata": {"name": name, "uid": "u", "resourceVersion": "1"},
            "spec": {"namespaceLabel": label, "allowDNS": true},
            "status": {"namespaces": 3},
        })
    }

    fn list_request(masks: Value) -> Value {
        json!({
            "api_version": BASELINE_API_VERSION,
            "kind": BASELINE_KIND,
            "label_selector": null,
            "field_selector": null,
            "field_masks": masks,
        })
    }

    fn answer(cluster: &Cluster, request: &Value) -> (CallbackResult, Vec<HostCall>) {
        call(cluster, "list_resources_all", request)
    }

    fn call(
        cluster: &Cluster,
        operation: &str,
        request: &Value,
    ) -> (CallbackResult, Vec<HostCall>) {
        let state = Mutex::new(HostState {
            cluster: Arc::new(cluster.clone()),
            calls: Vec::new(),
        });
        let payload = serde_json::to_vec(request).expect("encode");
        let result = host_callback(&state, "kubewarden", "kubernetes", operation, &payload);
        let calls = lock(&state).calls.clone();
        (result, calls)
    }

    /// A `get_resource` request as the SDK writes it.
    fn get_request(api_version: &str, kind: &str, name: &str, namespace: Value) -> Value {
        json!({
            "api_version": api_version,
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "disable_cache": false,
            "field_masks": ["metadata.labels", "metadata.name"],
        })
    }

    fn walled_cluster() -> Cluster {
        Cluster {
            namespaces: vec![json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "team-a", "uid": "u", "labels": {"baseline": "guarded"}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            })],
            ..Cluster::default()
        }
    }

    #[test]
    fn gets_a_namespace_by_name_pruned_to_the_masks() {
        let request = get_request("v1", "Namespace", "team-a", Value::Null);
        let (result, calls) = call(&walled_cluster(), "get_resource", &request);
        let namespace: Value = serde_json::from_slice(&result.expect("answered")).expect("json");
        assert_eq!(
            namespace,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"baseline": "guarded"}}})
        );
        assert_eq!(calls[0].outcome, CallOutcome::Answered);
        assert!(!calls[0].is_baseline_list());
    }

    #[test]
    fn a_missing_namespace_is_not_found_and_a_host_error_fails() {
        let request = get_request("v1", "Namespace", "team-b", Value::Null);
        let (result, calls) = call(&walled_cluster(), "get_resource", &request);
        assert_eq!(
            result.expect_err("fails").to_string(),
            "namespaces \"team-b\" not found"
        );
        assert_eq!(
            calls[0].outcome,
            CallOutcome::Failed("namespaces \"team-b\" not found".into())
        );
        let failing = Cluster {
            host_error: Some("etcdserver: request timed out".into()),
            ..walled_cluster()
        };
        let request = get_request("v1", "Namespace", "team-a", Value::Null);
        let (result, _) = call(&failing, "get_resource", &request);
        assert_eq!(
            result.expect_err("fails").to_string(),
            "etcdserver: request timed out"
        );
    }

    #[test]
    fn other_gets_are_unexpected() {
        for request in [
            get_request("v1", "Pod", "team-a", Value::Null),
            get_request("v1", "Namespace", "team-a", json!("team-a")),
            json!({"api_version": "v1", "kind": "Namespace"}),
        ] {
            let (result, calls) = call(&walled_cluster(), "get_resource", &request);
            assert!(result.is_err());
            assert!(calls[0].is_unexpected(), "{:?}", calls[0]);
        }
    }

    #[test]
    fn traps_and_guest_errors_are_told_apart() {
        let failure = |message: &str| Error::GuestCall {
            operation: VALIDATE.into(),
            source: wapc::errors::Error::GuestCallFailure(message.into()),
        };
        let trap = failure(
            "error while executing at wasm backtrace:\n    0: 0x1234 - <unknown>!rust_panic\n\nCaused by:\n    wasm trap: wasm `unreachable` instruction executed",
        );
        assert!(trap.is_trap());
        assert_eq!(trap.guest_error(), None);
        assert!(failure("guest code interrupted, execution deadline exceeded").is_trap());
        let refused = failure("Deserialization error: unknown field `guardSelector`");
        assert!(!refused.is_trap());
        assert_eq!(
            refused.guest_error(),
            Some("Deserialization error: unknown field `guardSelector`")
        );
    }

    #[test]
    fn lists_the_baselines_as_a_kubernetes_list() {
        let cluster = Cluster::with_baselines(vec![baseline("guarded", "baseline=guarded")]);
        let (result, calls) = answer(&cluster, &list_request(Value::Null));
        let list: Value = serde_json::from_slice(&result.expect("answered")).expect("json");
        assert_eq!(list["kind"], BASELINE_LIST_KIND);
        assert_eq!(list["apiVersion"], BASELINE_API_VERSION);
        assert_eq!(list["items"][0], cluster.baselines[0]);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].outcome, CallOutcome::Answered);
    }

    #[test]
    fn field_masks_prune_the_items() {
        let cluster = Cluster::with_baselines(vec![baseline("guarded", "baseline=guarded")]);
        let masks = json!(["metadata.name", "spec.namespaceLabel", "spec.mode"]);
        let (result, _) = answer(&cluster, &list_request(masks));
        let list: Value = serde_json::from_slice(&result.expect("answered")).expect("json");
        assert_eq!(
            list["items"][0],
            json!({
                "apiVersion": BASELINE_API_VERSION,
                "kind": BASELINE_KIND,
                "metadata": {"name": "guarded"},
                "spec": {"namespaceLabel": "baseline=guarded"},
            })
        );
    }

    #[test]
    fn masks_through_lists_apply_to_every_element() {
        let object = json!({"spec": {"items": [{"a": 1, "b": 2}, {"a": 3}]}});
        let masks = BTreeSet::from(["spec.items.a".to_owned()]);
        assert_eq!(
            prune(&object, &masks),
            json!({"spec": {"items": [{"a": 1}, {"a": 3}]}})
        );
    }

    #[test]
    fn a_host_error_fails_the_call_and_is_recorded() {
        let cluster = Cluster {
            host_error: Some("etcdserver: request timed out".into()),
            ..Cluster::default()
        };
        let (result, calls) = answer(&cluster, &list_request(Value::Null));
        let error = result.expect_err("fails");
        assert_eq!(error.to_string(), "etcdserver: request timed out");
        assert_eq!(
            calls[0].outcome,
            CallOutcome::Failed("etcdserver: request timed out".into())
        );
    }

    #[test]
    fn other_kinds_and_selectors_are_unexpected() {
        let cluster = Cluster::default();
        let mut pods = list_request(Value::Null);
        pods["api_version"] = json!("v1");
        pods["kind"] = json!("Pod");
        let mut selected = list_request(Value::Null);
        selected["label_selector"] = json!("a=b");
        for request in [pods, selected] {
            let (result, calls) = answer(&cluster, &request);
            assert!(result.is_err());
            assert!(calls[0].is_unexpected(), "{:?}", calls[0]);
        }
    }

    #[test]
    fn unknown_capabilities_are_unexpected_and_logging_is_not() {
        let state = Mutex::new(HostState::default());
        let result = host_callback(&state, "kubewarden", "net", "v1/dns_lookup_host", b"\"x\"");
        let error = result.expect_err("refused");
        assert!(
            error
                .to_string()
                .contains("unexpected host call kubewarden/net/v1/dns_lookup_host"),
            "{error}"
        );
        assert!(host_callback(&state, "kubewarden", "tracing", "log", b"{}").is_ok());
        let calls = lock(&state).calls.clone();
        assert!(calls[0].is_unexpected());
        assert!(calls[1].is_log() && !calls[1].is_unexpected());
    }
}
