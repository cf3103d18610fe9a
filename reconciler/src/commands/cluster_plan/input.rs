//! `plan`'s input: what the reconcile would decide from, gathered from manifests (offline) or
//! from the cluster (LIST requests only), each object with where it came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use namespace_baseline_core::LabelSelector;
use namespace_baseline_core::identity::{GROUP, KIND, VERSION, managed_selector};
use namespace_baseline_core::spec::NamespaceBaseline;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::base::error::{PlanInputError, Result};
use crate::runtime::cli::PlanOptions;
use crate::view::namespace_cache::{NamespaceMeta, namespace_meta};
use crate::view::policy_cache::slim_policy;

/// The label the API server sets on every namespace, with its name.
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What a plan decides from: the baselines, and the namespaces and managed NetworkPolicies
/// as the reconciler's watch caches would hold them.
#[derive(Debug, Default)]
pub struct PlanInput {
    pub source: Source,
    /// Each with where it came from ("file: document N" or "cluster"), sorted by name.
    pub baselines: Vec<(String, NamespaceBaseline)>,
    /// Sorted by name.
    pub namespaces: Vec<Arc<NamespaceMeta>>,
    /// Every NetworkPolicy (the reconciler watches them all: the wall, and the holes).
    pub policies: Vec<Arc<NetworkPolicy>>,
    /// Services, EndpointSlices and Pods, for the DNS door check (none: not checked).
    pub dns: Vec<DnsObject>,
    /// The Pod rule's ClusterAdmissionPolicy (`--pod-policy`), when it was read: which
    /// namespaces' pods reach the gate at all.
    pub pod_policy: Option<PodPolicy>,
    /// What was read but ignored, and why.
    pub notes: Vec<String>,
}

/// The ClusterAdmissionPolicy of the Pod rule (`podsWaitForWall`): the API server sends a Pod
/// CREATE to the policy-server only when its `namespaceSelector` matches the pod's namespace,
/// so a guarded namespace it leaves out has its pods admitted before their wall exists.
#[derive(Debug)]
pub struct PodPolicy {
    pub name: String,
    /// "FILE: document N", or "cluster".
    pub origin: String,
    /// Its `spec.namespaceSelector`; `None`: it has none, so it matches every namespace.
    pub selector: Option<LabelSelector>,
}

/// The API group and version of Kubewarden's ClusterAdmissionPolicy.
const KUBEWARDEN_POLICIES: &str = "policies.kubewarden.io/v1";

impl PodPolicy {
    /// Reads the policy `name` from its JSON (a manifest's document or the cluster's answer).
    fn read(name: &str, origin: &str, value: &Value) -> Result<Self, PlanInputError> {
        let invalid = |what: String| PlanInputError::Invalid {
            origin: origin.to_owned(),
            what: format!("ClusterAdmissionPolicy {name}: {what}"),
        };
        let selector = match value.pointer("/spec/namespaceSelector") {
            None | Some(Value::Null) => None,
            Some(selector) => {
                let kubernetes =
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector::deserialize(
                        selector,
                    )
                    .map_err(|error| invalid(format!("spec.namespaceSelector: {error}")))?;
                Some(
                    LabelSelector::from_kubernetes(&kubernetes)
                        .map_err(|error| invalid(format!("spec.namespaceSelector: {error}")))?,
                )
            }
        };
        Ok(Self {
            name: name.to_owned(),
            origin: origin.to_owned(),
            selector,
        })
    }

    /// `None` when its selector matches `namespace` (its pods reach the gate); else the
    /// requirement the namespace does not meet, as a selector says it (`!hedronite.io/pod-gate`).
    pub fn leaves_out(&self, namespace: &NamespaceMeta) -> Option<String> {
        let selector = self.selector.as_ref()?;
        selector
            .first_unmet(|key| namespace.labels().get(key).map(String::as_str))
            .map(ToString::to_string)
    }
}

impl PlanInput {
    /// The NetworkPolicy `name` in `namespace`, if it was read.
    pub(super) fn policy(&self, namespace: &str, name: &str) -> Option<&NetworkPolicy> {
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
pub(super) struct Document {
    origin: String,
    value: Value,
}

/// A document, by kind.
enum Object {
    Namespace(Namespace),
    Policy(NetworkPolicy),
    Baseline(Box<NamespaceBaseline>),
    /// A Service, an EndpointSlice or a Pod: what the DNS door is checked against.
    Dns(DnsObject),
    /// A Kubewarden ClusterAdmissionPolicy, by name: the Pod rule's when it is the one
    /// `--pod-policy` names.
    AdmissionPolicy(String),
    /// Not one `plan` reads: the note says what and why.
    Ignored(String),
}

/// The input from `--manifests` (and the baselines from `--baseline`, else from among the
/// manifests).
pub fn from_manifests(options: &PlanOptions) -> Result<PlanInput, PlanInputError> {
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
                    collected.baseline(&document.origin, *baseline)?;
                }
                Object::Baseline(baseline) => collected.notes.push(format!(
                    "{}: NamespaceBaseline {} ignored: --baseline gives the baselines",
                    document.origin,
                    baseline.name_any()
                )),
                Object::AdmissionPolicy(name) if name == options.pod_policy => {
                    collected.pod_policy(PodPolicy::read(
                        &name,
                        &document.origin,
                        &document.value,
                    )?)?;
                }
                Object::AdmissionPolicy(name) => collected.notes.push(format!(
                    "{}: ClusterAdmissionPolicy {name} ignored: plan checks only the Pod rule's, --pod-policy {}",
                    document.origin, options.pod_policy
                )),
                Object::Ignored(note) => collected.notes.push(note),
            }
        }
    }
    if collected.baselines.is_empty() {
        return Err(PlanInputError::NoBaseline(
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
    Ok(collected.into_input(Source::Manifests))
}

/// The input from the cluster of the kubeconfig: only LIST requests (namespaces, managed
/// NetworkPolicies, and NamespaceBaselines when `--baseline` is not given).
pub async fn from_cluster(options: &PlanOptions) -> Result<PlanInput> {
    let mut collected = Collected::default();
    collected.read_baselines(&options.baseline)?;
    let config = crate::runtime::run::config().await?;
    let client = crate::runtime::api_client::client(config)?;
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
    match read_pod_policy(client, &options.pod_policy).await {
        Ok(policy) => collected.pod_policy = Some(policy),
        Err(reason) => collected.notes.push(format!(
            "no ClusterAdmissionPolicy {} read from the cluster ({reason}): whether the Pod rule sees every guarded namespace is not checked (is Kubewarden installed, the policy named otherwise (--pod-policy), or may this identity not get it?)",
            options.pod_policy
        )),
    }
    Ok(collected.into_input(Source::Cluster))
}

/// The Pod rule's ClusterAdmissionPolicy from the cluster (one GET); why not, when it cannot
/// be read or understood: Kubewarden is optional, so `plan` notes what it did not check
/// instead of failing.
async fn read_pod_policy(client: kube::Client, name: &str) -> Result<PodPolicy, String> {
    use kube::api::{ApiResource, DynamicObject};
    let group_version: kube::core::GroupVersion = KUBEWARDEN_POLICIES
        .parse()
        .map_err(|error: kube::core::gvk::ParseGroupVersionError| error.to_string())?;
    let resource = ApiResource::from_gvk(&group_version.with_kind("ClusterAdmissionPolicy"));
    let api = Api::<DynamicObject>::all_with(client, &resource);
    let object = api.get(name).await.map_err(|error| error.to_string())?;
    let value = serde_json::to_value(&object).map_err(|error| error.to_string())?;
    PodPolicy::read(name, "cluster", &value).map_err(|error| error.to_string())
}

/// Every object of a LIST, page by page.
async fn list_all<K>(api: Api<K>, params: ListParams, what: &'static str) -> Result<Vec<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(500);
    let mut items = Vec::new();
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| PlanInputError::List {
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
    pod_policy: Option<PodPolicy>,
    notes: Vec<String>,
}

impl Collected {
    fn read_baselines(&mut self, paths: &[PathBuf]) -> Result<(), PlanInputError> {
        for path in paths {
            let before = self.baselines.len();
            for document in read_manifests(path)? {
                match classify(&document)? {
                    Object::Baseline(baseline) => self.baseline(&document.origin, *baseline)?,
                    Object::Namespace(_) | Object::Policy(_) | Object::Dns(_) | Object::AdmissionPolicy(_) => self.notes.push(format!(
                        "{}: ignored: --baseline reads only NamespaceBaselines (give Namespaces and NetworkPolicies with --manifests)",
                        document.origin
                    )),
                    Object::Ignored(note) => self.notes.push(note),
                }
            }
            if self.baselines.len() == before {
                return Err(PlanInputError::NoBaseline(format!(
                    "{} holds no NamespaceBaseline ({GROUP}/{VERSION} {KIND})",
                    path.display()
                )));
            }
        }
        Ok(())
    }

    fn baseline(
        &mut self,
        origin: &str,
        baseline: NamespaceBaseline,
    ) -> Result<(), PlanInputError> {
        let name = baseline.name_any();
        if let Some((first, _)) = self.baselines.get(&name) {
            return Err(PlanInputError::Duplicate {
                kind: KIND,
                name,
                first: first.clone(),
                second: origin.to_owned(),
            });
        }
        self.baselines.insert(name, (origin.to_owned(), baseline));
        Ok(())
    }

    fn namespace(&mut self, origin: &str, mut namespace: Namespace) -> Result<(), PlanInputError> {
        // As the reconciler's cache holds it: metadata, slimmed (below).
        let name = namespace.name_any();
        if let Some((first, _)) = self.namespaces.get(&name) {
            return Err(PlanInputError::Duplicate {
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
        self.namespaces
            .insert(name, (origin.to_owned(), namespace_meta(namespace)));
        Ok(())
    }

    /// Keeps every policy: the managed ones (the reconciler's watch label) are the wall, the
    /// others may open holes in it. A managed one must name its namespace; another without
    /// one is noted and left out.
    fn policy(&mut self, origin: &str, mut policy: NetworkPolicy) -> Result<(), PlanInputError> {
        if !watched(&policy) && policy.namespace().is_none() {
            self.notes.push(format!(
                "{origin}: NetworkPolicy {} ignored: no metadata.namespace",
                policy.name_any()
            ));
            return Ok(());
        }
        let Some(namespace) = policy.namespace() else {
            return Err(PlanInputError::Invalid {
                origin: origin.to_owned(),
                what: format!(
                    "NetworkPolicy {} carries the managed labels but no metadata.namespace",
                    policy.name_any()
                ),
            });
        };
        let key = (namespace, policy.name_any());
        if let Some((first, _)) = self.policies.get(&key) {
            return Err(PlanInputError::Duplicate {
                kind: "NetworkPolicy",
                name: format!("{}/{}", key.0, key.1),
                first: first.clone(),
                second: origin.to_owned(),
            });
        }
        slim_policy(&mut policy);
        self.policies.insert(key, (origin.to_owned(), policy));
        Ok(())
    }

    fn pod_policy(&mut self, policy: PodPolicy) -> Result<(), PlanInputError> {
        if let Some(first) = &self.pod_policy {
            return Err(PlanInputError::Duplicate {
                kind: "ClusterAdmissionPolicy",
                name: policy.name,
                first: first.origin.clone(),
                second: policy.origin,
            });
        }
        self.pod_policy = Some(policy);
        Ok(())
    }

    fn into_input(self, source: Source) -> PlanInput {
        PlanInput {
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
            pod_policy: self.pod_policy,
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
fn read_manifests(path: &Path) -> Result<Vec<Document>, PlanInputError> {
    let mut documents = Vec::new();
    for file in manifest_files(path)? {
        read_file(&file, &mut documents)?;
    }
    Ok(documents)
}

fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, PlanInputError> {
    let read_error = |source| PlanInputError::Read {
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

fn read_file(path: &Path, documents: &mut Vec<Document>) -> Result<(), PlanInputError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PlanInputError::Read {
        path: display.clone(),
        source,
    })?;
    let origin = |index: usize| format!("{display}: document {}", index + 1);
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        let stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
        for (index, value) in stream.enumerate() {
            let value = value.map_err(|source| PlanInputError::Json {
                origin: origin(index),
                source,
            })?;
            push_document(documents, origin(index), value)?;
        }
    } else {
        for (index, document) in yaml_serde::Deserializer::from_str(&text).enumerate() {
            let value = Value::deserialize(document).map_err(|source| PlanInputError::Yaml {
                origin: origin(index),
                source,
            })?;
            push_document(documents, origin(index), value)?;
        }
    }
    Ok(())
}

/// Adds a document: nothing for an empty one, each item of a list.
pub(super) fn push_document(
    documents: &mut Vec<Document>,
    origin: String,
    value: Value,
) -> Result<(), PlanInputError> {
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
                Some(_) if is_list => Err(PlanInputError::Invalid {
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
        _ => Err(PlanInputError::Invalid {
            origin,
            what: "not a Kubernetes object (expected a mapping with apiVersion, kind and metadata)"
                .to_owned(),
        }),
    }
}

fn classify(document: &Document) -> Result<Object, PlanInputError> {
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
        "ClusterAdmissionPolicy" => KUBEWARDEN_POLICIES,
        KIND => baseline_version.as_str(),
        other => {
            return Ok(Object::Ignored(format!(
                "{}: {other} ignored: plan reads Namespaces, NetworkPolicies, NamespaceBaselines, Services, EndpointSlices and Pods for the DNS check, and the Pod rule's ClusterAdmissionPolicy",
                document.origin
            )));
        }
    };
    if api_version != expected {
        return Err(PlanInputError::Invalid {
            origin: document.origin.clone(),
            what: format!("{kind} with apiVersion {api_version:?}: expected {expected}"),
        });
    }
    let name = document
        .value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .ok_or_else(|| PlanInputError::Invalid {
            origin: document.origin.clone(),
            what: format!("{kind} without metadata.name"),
        })?;
    Ok(match kind {
        "ClusterAdmissionPolicy" => Object::AdmissionPolicy(name.to_owned()),
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
        _ => Object::Baseline(Box::new(typed(document, KIND, name)?)),
    })
}

fn typed<K: DeserializeOwned>(
    document: &Document,
    kind: &'static str,
    name: &str,
) -> Result<K, PlanInputError> {
    K::deserialize(&document.value).map_err(|source| PlanInputError::Object {
        origin: document.origin.clone(),
        kind,
        name: name.to_owned(),
        source,
    })
}

/// An object the DNS door is checked against.
#[derive(Debug)]
pub enum DnsObject {
    Service(Box<Service>),
    Slice(Box<EndpointSlice>),
    Pod(Box<Pod>),
}

impl DnsObject {
    pub(super) fn namespace(&self) -> Option<&str> {
        match self {
            Self::Service(o) => o.metadata.namespace.as_deref(),
            Self::Slice(o) => o.metadata.namespace.as_deref(),
            Self::Pod(o) => o.metadata.namespace.as_deref(),
        }
    }
}
