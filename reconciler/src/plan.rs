//! `plan`: what the reconciler would write, without writing.
//!
//! The decision is the reconcile's own, the core's [`decide`] (the wall, the drift and the
//! changes); this module only gathers the state it decides from
//! (manifests offline, or the cluster read-only), describes the decision and prints it.
//! Exit codes: [`EXIT_NO_CHANGES`], [`EXIT_PENDING`], and 1 on any error.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use namespace_baseline_core::LabelSelector;
use namespace_baseline_core::holes::namespace_reach;
use namespace_baseline_core::identity::{GROUP, KIND, VERSION, dns_policy_name, managed_selector};
use namespace_baseline_core::spec::{DeletionPolicy, Mode, NamespaceBaseline};
use namespace_baseline_core::wall::{Change, drifted_fields};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::{OutputFormat, PlanOptions};
use namespace_baseline_core::plan::{Baseline, Decision, NamespacePlan, decide};

use crate::controller::{self, NamespaceMeta};
use crate::error::{Error, Result};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Nothing would change.
pub const EXIT_NO_CHANGES: u8 = 0;
/// An error: unreadable input, an unreachable cluster, or a baseline whose spec the
/// reconciler cannot act on.
pub const EXIT_ERROR: u8 = 1;
/// The reconciler would write.
pub const EXIT_PENDING: u8 = 2;

/// The version of the JSON shape (`--output json`); bumped on any incompatible change.
pub const JSON_VERSION: u32 = 1;

/// The label the API server sets on every namespace, with its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Namespaces listed by name in the text output before "and N more".
const TEXT_NAMESPACES: usize = 50;

/// Why `plan` could not read its input. Every message names the file and document, or the
/// request, it is about.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{path}: cannot be read")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: not valid YAML")]
    Yaml {
        origin: String,
        #[source]
        source: yaml_serde::Error,
    },
    #[error("{origin}: not valid JSON")]
    Json {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{origin}: {what}")]
    Invalid { origin: String, what: String },
    #[error("{origin}: {kind} {name} cannot be read")]
    Object {
        origin: String,
        kind: &'static str,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{kind} {name} is given twice: in {first} and in {second}")]
    Duplicate {
        kind: &'static str,
        name: String,
        first: String,
        second: String,
    },
    #[error("no NamespaceBaseline to plan: {0}")]
    NoBaseline(String),
    #[error("listing {what} (read-only)")]
    List {
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("writing the plan to stdout")]
    Output(#[source] std::io::Error),
}

/// Runs `plan`: gathers the state, decides, prints; the exit code.
pub async fn main(options: &PlanOptions) -> Result<ExitCode> {
    let state = if options.cluster {
        from_cluster(options).await?
    } else {
        from_manifests(options)?
    };
    let report = plan(&state);
    let text = match options.output {
        OutputFormat::Text => {
            for note in &report.notes {
                eprintln!("note: {note}");
            }
            render_text(&report)
        }
        OutputFormat::Json => {
            // Serializing plain structs of strings, numbers and lists cannot fail.
            let mut json = serde_json::to_string_pretty(&report).unwrap_or_default();
            json.push('\n');
            json
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(PlanError::Output)?;
    for baseline in report.baselines.iter().filter(|b| b.invalid.is_some()) {
        eprintln!(
            "error: {}: NamespaceBaseline {}: {}",
            baseline.origin,
            baseline.name,
            baseline.invalid.as_deref().unwrap_or_default()
        );
    }
    Ok(ExitCode::from(report.exit_code()))
}

/// What a plan decides from: the baselines, and the namespaces and managed NetworkPolicies
/// as the reconciler's watch caches would hold them.
#[derive(Debug, Default)]
pub struct State {
    pub source: Source,
    /// Each with where it came from ("file: document N" or "cluster"), sorted by name.
    pub baselines: Vec<(String, NamespaceBaseline)>,
    /// Sorted by name.
    pub namespaces: Vec<Arc<NamespaceMeta>>,
    /// Every NetworkPolicy (the reconciler watches them all: the wall, and the holes).
    pub policies: Vec<Arc<NetworkPolicy>>,
    /// Services, EndpointSlices and Pods, for the DNS door check (none: not checked).
    pub dns: Vec<DnsObject>,
    /// What was read but ignored, and why.
    pub notes: Vec<String>,
}

impl State {
    /// The NetworkPolicy `name` in `namespace`, if it was read.
    fn policy(&self, namespace: &str, name: &str) -> Option<&NetworkPolicy> {
        self.policies
            .iter()
            .find(|policy| {
                policy.metadata.namespace.as_deref() == Some(namespace)
                    && policy.metadata.name.as_deref() == Some(name)
            })
            .map(|policy| &**policy)
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    #[default]
    Manifests,
    Cluster,
}

/// One YAML or JSON document, with where it came from.
#[derive(Debug)]
struct Document {
    origin: String,
    value: Value,
}

/// A document, by kind.
enum Object {
    Namespace(Namespace),
    Policy(NetworkPolicy),
    Baseline(NamespaceBaseline),
    /// A Service, an EndpointSlice or a Pod: what the DNS door is checked against.
    Dns(DnsObject),
    /// Not one `plan` reads: the note says what and why.
    Ignored(String),
}

/// The state from `--manifests` (and the baselines from `--baseline`, else from among the
/// manifests).
pub fn from_manifests(options: &PlanOptions) -> Result<State, PlanError> {
    let mut collected = Collected::default();
    let baselines_given = !options.baseline.is_empty();
    collected.read_baselines(&options.baseline)?;
    if let Some(path) = &options.manifests {
        for document in read_manifests(path)? {
            match classify(&document)? {
                Object::Namespace(namespace) => collected.namespace(&document.origin, namespace)?,
                Object::Policy(policy) => collected.policy(&document.origin, policy)?,
                Object::Dns(object) => collected.dns.push(object),
                Object::Baseline(baseline) if !baselines_given => {
                    collected.baseline(&document.origin, baseline)?;
                }
                Object::Baseline(baseline) => collected.notes.push(format!(
                    "{}: NamespaceBaseline {} ignored: --baseline gives the baselines",
                    document.origin,
                    baseline.name_any()
                )),
                Object::Ignored(note) => collected.notes.push(note),
            }
        }
    }
    if collected.baselines.is_empty() {
        return Err(PlanError::NoBaseline(
            "give --baseline FILE, or include NamespaceBaselines in --manifests".to_owned(),
        ));
    }
    // A policy in a namespace the manifests do not declare: the reconciler would only see
    // it if the namespace existed, which the manifests do not say.
    let declared: std::collections::BTreeSet<&str> =
        collected.namespaces.keys().map(String::as_str).collect();
    for ((namespace, name), (origin, _)) in &collected.policies {
        if !declared.contains(namespace.as_str()) {
            collected.notes.push(format!(
                "{origin}: NetworkPolicy {namespace}/{name}: namespace {namespace} is not among the manifests, so the plan does not see it"
            ));
        }
    }
    Ok(collected.into_state(Source::Manifests))
}

/// The state from the cluster of the kubeconfig: only LIST requests (namespaces, managed
/// NetworkPolicies, and NamespaceBaselines when `--baseline` is not given).
pub async fn from_cluster(options: &PlanOptions) -> Result<State> {
    let mut collected = Collected::default();
    collected.read_baselines(&options.baseline)?;
    let config = crate::run::config().await?;
    let client = crate::api_client::client(config)?;
    for namespace in list_all(
        Api::<Namespace>::all(client.clone()),
        ListParams::default(),
        "namespaces",
    )
    .await?
    {
        collected.namespace("cluster", namespace)?;
    }
    // All of them, as the reconciler watches them: the managed ones are the wall, the
    // others may open holes in it.
    for policy in list_all(
        Api::<NetworkPolicy>::all(client.clone()),
        ListParams::default(),
        "NetworkPolicies",
    )
    .await?
    {
        collected.policy("cluster", policy)?;
    }
    if options.baseline.is_empty() {
        for baseline in list_all(
            Api::<NamespaceBaseline>::all(client.clone()),
            ListParams::default(),
            "NamespaceBaselines",
        )
        .await?
        {
            collected.baseline("cluster", baseline)?;
        }
    }
    // What each DNS door is checked against: the Services, EndpointSlices and Pods of the
    // namespaces of the doors' Services.
    let dns_namespaces: std::collections::BTreeSet<String> = collected
        .baselines
        .values()
        .filter(|(_, baseline)| baseline.spec.allow_dns)
        .map(|(_, baseline)| baseline.spec.dns_target().service_ref().0.to_owned())
        .collect();
    for namespace in dns_namespaces {
        let params = ListParams::default;
        for service in list_all(
            Api::<Service>::namespaced(client.clone(), &namespace),
            params(),
            "Services",
        )
        .await?
        {
            collected.dns.push(DnsObject::Service(Box::new(service)));
        }
        for slice in list_all(
            Api::<EndpointSlice>::namespaced(client.clone(), &namespace),
            params(),
            "EndpointSlices",
        )
        .await?
        {
            collected.dns.push(DnsObject::Slice(Box::new(slice)));
        }
        for pod in list_all(
            Api::<Pod>::namespaced(client.clone(), &namespace),
            params(),
            "Pods",
        )
        .await?
        {
            collected.dns.push(DnsObject::Pod(Box::new(pod)));
        }
    }
    Ok(collected.into_state(Source::Cluster))
}

/// Every object of a LIST, page by page.
async fn list_all<K>(api: Api<K>, params: ListParams, what: &'static str) -> Result<Vec<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(500);
    let mut items = Vec::new();
    loop {
        let page = api.list(&params).await.map_err(|source| PlanError::List {
            what,
            source: Box::new(source),
        })?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params.continue_token = Some(token),
            _ => return Ok(items),
        }
    }
}

/// Objects by name, with where each came from; a name given twice is an error.
#[derive(Default)]
struct Collected {
    baselines: BTreeMap<String, (String, NamespaceBaseline)>,
    namespaces: BTreeMap<String, (String, NamespaceMeta)>,
    policies: BTreeMap<(String, String), (String, NetworkPolicy)>,
    dns: Vec<DnsObject>,
    notes: Vec<String>,
}

impl Collected {
    fn read_baselines(&mut self, paths: &[PathBuf]) -> Result<(), PlanError> {
        for path in paths {
            let before = self.baselines.len();
            for document in read_manifests(path)? {
                match classify(&document)? {
                    Object::Baseline(baseline) => self.baseline(&document.origin, baseline)?,
                    Object::Namespace(_) | Object::Policy(_) | Object::Dns(_) => self.notes.push(format!(
                        "{}: ignored: --baseline reads only NamespaceBaselines (give Namespaces and NetworkPolicies with --manifests)",
                        document.origin
                    )),
                    Object::Ignored(note) => self.notes.push(note),
                }
            }
            if self.baselines.len() == before {
                return Err(PlanError::NoBaseline(format!(
                    "{} holds no NamespaceBaseline ({GROUP}/{VERSION} {KIND})",
                    path.display()
                )));
            }
        }
        Ok(())
    }

    fn baseline(&mut self, origin: &str, baseline: NamespaceBaseline) -> Result<(), PlanError> {
        let name = baseline.name_any();
        if let Some((first, _)) = self.baselines.get(&name) {
            return Err(PlanError::Duplicate {
                kind: KIND,
                name,
                first: first.clone(),
                second: origin.to_owned(),
            });
        }
        self.baselines.insert(name, (origin.to_owned(), baseline));
        Ok(())
    }

    fn namespace(&mut self, origin: &str, mut namespace: Namespace) -> Result<(), PlanError> {
        // As the reconciler's cache holds it: metadata, slimmed (below).
        let name = namespace.name_any();
        if let Some((first, _)) = self.namespaces.get(&name) {
            return Err(PlanError::Duplicate {
                kind: "Namespace",
                name,
                first: first.clone(),
                second: origin.to_owned(),
            });
        }
        // As the API server does on every namespace (a namespaceLabel may select on it).
        namespace
            .labels_mut()
            .insert(NAMESPACE_NAME_LABEL.to_owned(), name.clone());
        self.namespaces.insert(
            name,
            (origin.to_owned(), controller::namespace_meta(namespace)),
        );
        Ok(())
    }

    /// Keeps every policy: the managed ones (the reconciler's watch label) are the wall, the
    /// others may open holes in it. A managed one must name its namespace; another without
    /// one is noted and left out.
    fn policy(&mut self, origin: &str, mut policy: NetworkPolicy) -> Result<(), PlanError> {
        if !watched(&policy) && policy.namespace().is_none() {
            self.notes.push(format!(
                "{origin}: NetworkPolicy {} ignored: no metadata.namespace",
                policy.name_any()
            ));
            return Ok(());
        }
        let Some(namespace) = policy.namespace() else {
            return Err(PlanError::Invalid {
                origin: origin.to_owned(),
                what: format!(
                    "NetworkPolicy {} carries the managed labels but no metadata.namespace",
                    policy.name_any()
                ),
            });
        };
        let key = (namespace, policy.name_any());
        if let Some((first, _)) = self.policies.get(&key) {
            return Err(PlanError::Duplicate {
                kind: "NetworkPolicy",
                name: format!("{}/{}", key.0, key.1),
                first: first.clone(),
                second: origin.to_owned(),
            });
        }
        controller::slim_policy(&mut policy);
        self.policies.insert(key, (origin.to_owned(), policy));
        Ok(())
    }

    fn into_state(self, source: Source) -> State {
        State {
            source,
            baselines: self.baselines.into_values().collect(),
            namespaces: self
                .namespaces
                .into_values()
                .map(|(_, namespace)| Arc::new(namespace))
                .collect(),
            policies: self
                .policies
                .into_values()
                .map(|(_, policy)| Arc::new(policy))
                .collect(),
            dns: self.dns,
            notes: self.notes,
        }
    }
}

/// Whether the reconciler's NetworkPolicy watch (label selector
/// [`managed_selector`]) would see `policy`.
fn watched(policy: &NetworkPolicy) -> bool {
    LabelSelector::parse(&managed_selector())
        .is_ok_and(|selector| selector.matches(policy.labels()))
}

/// Every document of a file, or of every `.yaml`, `.yml` and `.json` file under a directory
/// (recursively, in name order, hidden entries skipped); `kind: List` items one by one.
fn read_manifests(path: &Path) -> Result<Vec<Document>, PlanError> {
    let mut documents = Vec::new();
    for file in manifest_files(path)? {
        read_file(&file, &mut documents)?;
    }
    Ok(documents)
}

fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, PlanError> {
    let read_error = |source| PlanError::Read {
        path: path.display().to_string(),
        source,
    };
    if !std::fs::metadata(path).map_err(read_error)?.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_error)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<std::io::Result<_>>()
        .map_err(read_error)?;
    entries.sort();
    let mut files = Vec::new();
    for entry in entries {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if entry.is_dir() {
            files.extend(manifest_files(&entry)?);
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(entry);
        }
    }
    Ok(files)
}

fn read_file(path: &Path, documents: &mut Vec<Document>) -> Result<(), PlanError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PlanError::Read {
        path: display.clone(),
        source,
    })?;
    let origin = |index: usize| format!("{display}: document {}", index + 1);
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        let stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
        for (index, value) in stream.enumerate() {
            let value = value.map_err(|source| PlanError::Json {
                origin: origin(index),
                source,
            })?;
            push_document(documents, origin(index), value)?;
        }
    } else {
        for (index, document) in yaml_serde::Deserializer::from_str(&text).enumerate() {
            let value = Value::deserialize(document).map_err(|source| PlanError::Yaml {
                origin: origin(index),
                source,
            })?;
            push_document(documents, origin(index), value)?;
        }
    }
    Ok(())
}

/// Adds a document: nothing for an empty one, each item of a list.
fn push_document(
    documents: &mut Vec<Document>,
    origin: String,
    value: Value,
) -> Result<(), PlanError> {
    match value {
        Value::Null => Ok(()),
        Value::Object(map) => {
            let is_list = map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|kind| kind.ends_with("List"));
            match map.get("items") {
                Some(Value::Array(items)) if is_list => {
                    for (index, item) in items.iter().enumerate() {
                        push_document(
                            documents,
                            format!("{origin}, item {}", index + 1),
                            item.clone(),
                        )?;
                    }
                    Ok(())
                }
                Some(Value::Null) if is_list => Ok(()),
                Some(_) if is_list => Err(PlanError::Invalid {
                    origin,
                    what: "items of a List must be a list of objects".to_owned(),
                }),
                _ => {
                    documents.push(Document {
                        origin,
                        value: Value::Object(map),
                    });
                    Ok(())
                }
            }
        }
        _ => Err(PlanError::Invalid {
            origin,
            what: "not a Kubernetes object (expected a mapping with apiVersion, kind and metadata)"
                .to_owned(),
        }),
    }
}

fn classify(document: &Document) -> Result<Object, PlanError> {
    let field = |name: &str| document.value.get(name).and_then(Value::as_str);
    let Some(kind) = field("kind") else {
        return Ok(Object::Ignored(format!(
            "{}: no kind: not a Kubernetes object, ignored",
            document.origin
        )));
    };
    let api_version = field("apiVersion").unwrap_or_default();
    let baseline_version = format!("{GROUP}/{VERSION}");
    let expected = match kind {
        "Namespace" | "Service" | "Pod" => "v1",
        "EndpointSlice" => "discovery.k8s.io/v1",
        "NetworkPolicy" => "networking.k8s.io/v1",
        KIND => baseline_version.as_str(),
        other => {
            return Ok(Object::Ignored(format!(
                "{}: {other} ignored: plan reads Namespaces, NetworkPolicies, NamespaceBaselines, and Services, EndpointSlices and Pods for the DNS check",
                document.origin
            )));
        }
    };
    if api_version != expected {
        return Err(PlanError::Invalid {
            origin: document.origin.clone(),
            what: format!("{kind} with apiVersion {api_version:?}: expected {expected}"),
        });
    }
    let name = document
        .value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .ok_or_else(|| PlanError::Invalid {
            origin: document.origin.clone(),
            what: format!("{kind} without metadata.name"),
        })?;
    Ok(match kind {
        "Namespace" => Object::Namespace(typed(document, "Namespace", name)?),
        "NetworkPolicy" => Object::Policy(typed(document, "NetworkPolicy", name)?),
        "Service" => Object::Dns(DnsObject::Service(Box::new(typed(
            document, "Service", name,
        )?))),
        "EndpointSlice" => Object::Dns(DnsObject::Slice(Box::new(typed(
            document,
            "EndpointSlice",
            name,
        )?))),
        "Pod" => Object::Dns(DnsObject::Pod(Box::new(typed(document, "Pod", name)?))),
        _ => Object::Baseline(typed(document, KIND, name)?),
    })
}

fn typed<K: DeserializeOwned>(
    document: &Document,
    kind: &'static str,
    name: &str,
) -> Result<K, PlanError> {
    K::deserialize(&document.value).map_err(|source| PlanError::Object {
        origin: document.origin.clone(),
        kind,
        name: name.to_owned(),
        source,
    })
}

/// The plan: for each baseline, the reconcile's decision ([`decide`]) over
/// `state`, described.
pub fn plan(state: &State) -> Report {
    let baselines: Vec<BaselineReport> = state
        .baselines
        .iter()
        .map(|(origin, baseline)| describe(origin, baseline, state))
        .collect();
    let mut summary = Summary::default();
    for baseline in &baselines {
        for change in &baseline.changes {
            match change.action {
                Action::Create => summary.create += 1,
                Action::Update => summary.update += 1,
                Action::Delete => summary.delete += 1,
            }
        }
        summary.orphaned += baseline.orphaned.len();
        summary.holes += baseline.holes.len();
        summary.breaches += baseline
            .holes
            .iter()
            .filter(|item| item.hole.width.is_breach())
            .count();
        summary.drift += baseline.drift.len();
        summary.invalid += usize::from(baseline.invalid.is_some());
    }
    Report {
        version: JSON_VERSION,
        source: state.source,
        pending: summary.create + summary.update + summary.delete > 0,
        summary,
        baselines,
        notes: state.notes.clone(),
    }
}

fn describe(origin: &str, baseline: &NamespaceBaseline, state: &State) -> BaselineReport {
    let name = baseline.name_any();
    let spec = &baseline.spec;
    let mut report = BaselineReport {
        name: name.clone(),
        origin: origin.to_owned(),
        namespace_label: spec.namespace_label.clone(),
        selector: spec.selector_words(),
        mode: spec.mode,
        deletion_policy: spec.deletion_policy,
        allow_dns: spec.allow_dns,
        deleting: baseline.metadata.deletion_timestamp.is_some(),
        invalid: None,
        guarded: Vec::new(),
        left_out: Vec::new(),
        changes: Vec::new(),
        drift: Vec::new(),
        orphaned: Vec::new(),
        holes: Vec::new(),
        dns: if spec.allow_dns {
            dns_check(spec, &state.dns)
        } else {
            None
        },
    };
    match decide(Baseline::from(baseline), &state.namespaces, &state.policies) {
        Decision::CleanUp(mut writes) => {
            writes.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, changes) in writes {
                report.changes.extend(changes.iter().map(|change| {
                    let mut item = ChangeItem::of(change);
                    item.reason =
                        "the baseline is being deleted under deletionPolicy Delete".into();
                    item
                }));
            }
        }
        Decision::Invalid(spec_error) => {
            report.invalid = Some(format!(
                "{}; the reconciler writes nothing and reports Ready=False (InvalidSpec)",
                Error::InvalidSpec(spec_error).report()
            ));
        }
        Decision::Converge(planner) => {
            report.holes = namespace_baseline_core::plan::holes(&planner, &state.policies)
                .into_iter()
                .map(|(namespace, mut hole)| {
                    hole.reach = state
                        .policy(&namespace, &hole.policy)
                        .and_then(|policy| policy.spec.as_ref())
                        .and_then(|spec| namespace_reach(spec, &hole, &state.namespaces));
                    HoleItem { namespace, hole }
                })
                .collect();
            report.left_out = planner.left_out_names().map(str::to_owned).collect();
            for namespace in planner.namespaces() {
                if namespace.selected {
                    report.guarded.push(namespace.namespace.to_owned());
                } else {
                    report.orphaned.extend(orphans(&namespace));
                }
                let items = namespace
                    .changes
                    .iter()
                    .map(|change| explain(change, &namespace, &name, baseline));
                match spec.mode {
                    Mode::Enforce => report.changes.extend(items),
                    Mode::Audit => report.drift.extend(items),
                }
            }
        }
    }
    report
}

/// The baseline's policies in a namespace it no longer selects that the decision leaves in
/// place (all of them under `Orphan`, none under `Delete`).
fn orphans(namespace: &NamespacePlan<'_>) -> Vec<PolicyRef> {
    namespace
        .existing
        .iter()
        .filter(|policy| {
            !namespace.changes.iter().any(|change| {
                matches!(change, Change::Delete { name, .. } if Some(name.as_str()) == policy.name())
            })
        })
        .map(|policy| PolicyRef {
            namespace: namespace.namespace.to_owned(),
            name: policy.name().unwrap_or_default().to_owned(),
            reason: "the namespace is no longer selected; deletionPolicy Orphan leaves the policy in place, unmanaged".to_owned(),
        })
        .collect()
}

fn explain(
    change: &Change,
    namespace: &NamespacePlan<'_>,
    baseline_name: &str,
    baseline: &NamespaceBaseline,
) -> ChangeItem {
    let mut item = ChangeItem::of(change);
    match change {
        Change::Create(_) => item.reason = "missing".to_owned(),
        Change::Repair(desired, _) => {
            if let Some(actual) = namespace
                .existing
                .iter()
                .find(|policy| policy.name() == desired.metadata.name.as_deref())
            {
                item.fields = drifted_fields(desired, *actual);
            }
            item.reason = format!("differs from the wall: {}", item.fields.join(", "));
        }
        Change::Delete { name, .. } => {
            item.reason = if !namespace.selected {
                "the namespace is no longer selected; deletionPolicy Delete removes the wall"
                    .to_owned()
            } else if !baseline.spec.allow_dns && *name == dns_policy_name(baseline_name) {
                "not part of the wall: allowDNS is off".to_owned()
            } else {
                "not part of the wall".to_owned()
            };
        }
    }
    item
}

/// The plan, as printed (`--output json` is this, serialized).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// [`JSON_VERSION`].
    pub version: u32,
    pub source: Source,
    /// Whether the reconciler would write (exit code 2).
    pub pending: bool,
    pub summary: Summary,
    pub baselines: Vec<BaselineReport>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn exit_code(&self) -> u8 {
        if self.summary.invalid > 0 {
            EXIT_ERROR
        } else if self.pending {
            EXIT_PENDING
        } else {
            EXIT_NO_CHANGES
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub create: usize,
    pub update: usize,
    pub delete: usize,
    /// Policies left in place, unmanaged, in namespaces no longer selected (no write).
    pub orphaned: usize,
    /// Changes `Audit` baselines report without writing.
    pub drift: usize,
    /// Baselines whose spec cannot be acted on.
    pub invalid: usize,
    /// Holes in the guarded namespaces, and how many of them open the wall to the world or
    /// the whole cluster.
    pub holes: usize,
    pub breaches: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BaselineReport {
    pub name: String,
    /// "FILE: document N[, item M]", or "cluster".
    pub origin: String,
    pub namespace_label: String,
    /// How it selects its namespaces: `namespaceLabel ...` or `namespaceSelector ...`.
    pub selector: String,
    pub mode: Mode,
    pub deletion_policy: DeletionPolicy,
    #[serde(rename = "allowDNS")]
    pub allow_dns: bool,
    /// Being deleted (read from the cluster with a deletionTimestamp).
    pub deleting: bool,
    /// Why the spec cannot be acted on (nothing is then written).
    pub invalid: Option<String>,
    /// The namespaces behind its wall (selected and not terminating), by name.
    pub guarded: Vec<String>,
    /// The live namespaces its selector leaves out, by name: what "every namespace
    /// except..." excepts.
    pub left_out: Vec<String>,
    /// The writes the reconciler would make, in order.
    pub changes: Vec<ChangeItem>,
    /// `Audit`: the changes found, reported in status, not written.
    pub drift: Vec<ChangeItem>,
    pub orphaned: Vec<PolicyRef>,
    /// Rules of other policies that open the wall in the guarded namespaces.
    pub holes: Vec<HoleItem>,
    /// Whether the DNS door reaches the DNS Service's ready endpoints (`None`: no door, or
    /// no object read in the door's Service namespace).
    pub dns: Option<namespace_baseline_core::doors::Reachability>,
}

/// An object the DNS door is checked against.
#[derive(Debug)]
pub enum DnsObject {
    Service(Box<Service>),
    Slice(Box<EndpointSlice>),
    Pod(Box<Pod>),
}

impl DnsObject {
    fn namespace(&self) -> Option<&str> {
        match self {
            Self::Service(o) => o.metadata.namespace.as_deref(),
            Self::Slice(o) => o.metadata.namespace.as_deref(),
            Self::Pod(o) => o.metadata.namespace.as_deref(),
        }
    }
}

/// The DNS door of `spec` against the Services, EndpointSlices and Pods read; `None` when
/// none of them is in the door's Service namespace (nothing to check against).
fn dns_check(
    spec: &namespace_baseline_core::NamespaceBaselineSpec,
    objects: &[DnsObject],
) -> Option<namespace_baseline_core::doors::Reachability> {
    use namespace_baseline_core::doors::{DnsService, SERVICE_NAME_LABEL, check_dns_door};
    let door = spec.dns_target();
    let (namespace, name) = door.service_ref();
    let here: Vec<&DnsObject> = objects
        .iter()
        .filter(|o| o.namespace() == Some(namespace))
        .collect();
    if here.is_empty() {
        return None;
    }
    let exists = here
        .iter()
        .any(|o| matches!(o, DnsObject::Service(s) if s.metadata.name.as_deref() == Some(name)));
    let service_of = |slice: &EndpointSlice| {
        slice
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(SERVICE_NAME_LABEL))
            .cloned()
    };
    let slices: Vec<&EndpointSlice> = here
        .iter()
        .filter_map(|o| match o {
            DnsObject::Slice(slice) if service_of(slice).as_deref() == Some(name) => {
                Some(slice.as_ref())
            }
            _ => None,
        })
        .collect();
    let pod_labels = |pod: &str| {
        here.iter().find_map(|o| match o {
            DnsObject::Pod(p) if p.metadata.name.as_deref() == Some(pod) => {
                Some(p.metadata.labels.clone().unwrap_or_default())
            }
            _ => None,
        })
    };
    Some(check_dns_door(
        &door,
        &DnsService {
            exists,
            slices,
            pod_labels: &pod_labels,
        },
    ))
}

/// A hole in a guarded namespace.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HoleItem {
    pub namespace: String,
    #[serde(flatten)]
    pub hole: namespace_baseline_core::holes::Hole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A server-side apply of a policy that does not exist.
    Create,
    /// A server-side apply of the whole policy over a drifted one.
    Update,
    Delete,
}

#[derive(Debug, Serialize)]
pub struct ChangeItem {
    pub action: Action,
    pub namespace: String,
    pub name: String,
    /// `update`: what differs (`spec.egress`, `metadata.labels[...]`); empty otherwise.
    pub fields: Vec<String>,
    pub reason: String,
}

impl ChangeItem {
    fn of(change: &Change) -> Self {
        let (action, policy) = match change {
            Change::Create(policy) => (Action::Create, policy),
            Change::Repair(policy, _) => (Action::Update, policy),
            Change::Delete { namespace, name } => {
                return Self {
                    action: Action::Delete,
                    namespace: namespace.clone(),
                    name: name.clone(),
                    fields: Vec::new(),
                    reason: String::new(),
                };
            }
        };
        Self {
            action,
            namespace: policy.namespace().unwrap_or_default(),
            name: policy.name_any(),
            fields: Vec::new(),
            reason: String::new(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct PolicyRef {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "Enforce",
        Mode::Audit => "Audit",
    }
}

fn deletion_policy_name(policy: DeletionPolicy) -> &'static str {
    match policy {
        DeletionPolicy::Orphan => "Orphan",
        DeletionPolicy::Delete => "Delete",
    }
}

/// The plan for people.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for baseline in &report.baselines {
        let _ = writeln!(
            out,
            "NamespaceBaseline {} ({}; {}, deletionPolicy {}, allowDNS {}; from {})",
            baseline.name,
            baseline.selector,
            mode_name(baseline.mode),
            deletion_policy_name(baseline.deletion_policy),
            baseline.allow_dns,
            baseline.origin
        );
        if let Some(invalid) = &baseline.invalid {
            let _ = writeln!(out, "  x {invalid}");
        } else if baseline.deleting {
            let _ = writeln!(
                out,
                "  being deleted: {}",
                if baseline.changes.is_empty() {
                    "nothing to remove (its wall stays unless deletionPolicy is Delete)"
                } else {
                    "its wall is removed"
                }
            );
        } else {
            let shown: Vec<&str> = baseline
                .guarded
                .iter()
                .take(TEXT_NAMESPACES)
                .map(String::as_str)
                .collect();
            let more = baseline.guarded.len().saturating_sub(shown.len());
            let _ = writeln!(
                out,
                "  guards {} namespace{}{}{}{}",
                baseline.guarded.len(),
                if baseline.guarded.len() == 1 { "" } else { "s" },
                if shown.is_empty() { "" } else { ": " },
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
            if baseline.namespace_label.is_empty() {
                out.push_str(&crate::plan_left_out::render(&baseline.left_out));
            }
        }
        for change in &baseline.changes {
            let (sign, verb) = match change.action {
                Action::Create => ('+', "create"),
                Action::Update => ('~', "update"),
                Action::Delete => ('-', "delete"),
            };
            let _ = writeln!(
                out,
                "  {sign} {verb:<8} {}/{}: {}",
                change.namespace, change.name, change.reason
            );
        }
        for change in &baseline.drift {
            let verb = match change.action {
                Action::Create => "missing",
                Action::Update => "drifted",
                Action::Delete => "extra",
            };
            let _ = writeln!(
                out,
                "  ! {verb:<8} {}/{}: {} (Audit: reported, not written)",
                change.namespace, change.name, change.reason
            );
        }
        for orphan in &baseline.orphaned {
            let _ = writeln!(
                out,
                "  = orphaned {}/{}: {}",
                orphan.namespace, orphan.name, orphan.reason
            );
        }
        if let Some(dns) = &baseline.dns {
            let _ = writeln!(
                out,
                "  {} dns      DNSReachable {} ({}): {}",
                if dns.reachable { 'o' } else { '!' },
                if dns.reachable { "True" } else { "False" },
                dns.reason,
                dns.message
            );
        }
        for item in &baseline.holes {
            let mark = if item.hole.width.is_breach() {
                '!'
            } else {
                'o'
            };
            let _ = writeln!(
                out,
                "  {mark} hole     {}: {} ({})",
                item.namespace, item.hole, item.hole.width
            );
        }
        out.push('\n');
    }
    if report.baselines.is_empty() {
        out.push_str("No NamespaceBaseline to plan.\n");
    }
    let summary = &report.summary;
    let mut tail = Vec::new();
    if summary.orphaned > 0 {
        tail.push(format!("{} orphaned (left in place)", summary.orphaned));
    }
    if summary.drift > 0 {
        tail.push(format!(
            "{} drifted in Audit mode (not written)",
            summary.drift
        ));
    }
    if summary.holes > 0 {
        tail.push(format!(
            "{} hole{} in the walls ({} to the world or the whole cluster)",
            summary.holes,
            if summary.holes == 1 { "" } else { "s" },
            summary.breaches
        ));
    }
    if summary.invalid > 0 {
        tail.push(format!(
            "{} baseline{} with an invalid spec",
            summary.invalid,
            if summary.invalid == 1 { "" } else { "s" }
        ));
    }
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!("; {}", tail.join(", "))
    };
    if report.pending {
        let _ = writeln!(
            out,
            "Plan: {} to create, {} to update, {} to delete{tail}.",
            summary.create, summary.update, summary.delete
        );
    } else if summary.drift + summary.invalid > 0 {
        let _ = writeln!(out, "No changes: nothing would be written{tail}.");
    } else {
        let _ = writeln!(out, "No changes: the wall is in place{tail}.");
    }
    out
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
