//! A request against settings and NamespaceBaselines, decided by the policy's own code:
//! the settings go through [`admission::check_settings`] (the policy's `validate_settings`)
//! and the request through [`admission::evaluate`] (the policy's `validate`), with the
//! baselines and the Namespaces of the editors instead of the policy-server's host
//! capabilities.

use std::cell::Cell;

use namespace_baseline_core::admission::{
    self, AdmissionRequest, BaselineSource, LiveBaseline, ObjectView,
};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::editors::document;
use crate::editors::field::{Field, FieldError};
use crate::editors::objects::{baseline_objects, cluster_objects, of_kind};

/// What the editors hold. Blank settings, baselines or host error are taken from the
/// request document when it carries them (a whole e2e fixture pasted into the request).
#[derive(Debug, Clone, Copy, Default)]
pub struct EvaluateInput<'a> {
    pub settings: &'a str,
    pub baselines: &'a str,
    /// When not blank, reading the cluster (the live baselines, a Namespace) fails with this
    /// message (what the policy-server answers when the API server cannot be reached).
    pub host_error: &'a str,
    /// The cluster objects editor: its Namespaces answer the policy's namespace reads, its
    /// NetworkPolicies the pod rule's reads of a wall (`podsWaitForWall`).
    pub objects: &'a str,
    pub request: &'a str,
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// The policy accepts the request (with `warnings`, if any).
    Allowed,
    /// The policy rejects the request (HTTP 403) with `message`.
    Denied,
    /// `validate_settings` refuses the settings (`message`): the policy-server would not
    /// load the policy at all.
    SettingsInvalid,
    /// An editor holds something that cannot be read; see `errors`.
    InputError,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Evaluation {
    pub outcome: Outcome,
    /// The rejection message, or why the settings are invalid.
    pub message: Option<String>,
    /// The warnings of an accepted request (kubectl prints each as `Warning: ...`).
    pub warnings: Vec<String>,
    /// The request as a person reads it.
    pub summary: Option<Summary>,
    /// Input problems, each shown next to its editor.
    pub errors: Vec<FieldError>,
    /// How many times the policy asked for the live NamespaceBaselines (host calls).
    pub baseline_reads: usize,
    /// How many times the policy asked for a Namespace (host calls).
    pub namespace_reads: usize,
    /// How many times the policy asked for a NetworkPolicy of a wall (host calls).
    pub network_policy_reads: usize,
    /// How the inputs were read (e.g. settings taken from the pasted fixture).
    pub notes: Vec<String>,
}

/// Who asks what, on which object.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// False when the request cannot be read as an AdmissionRequest (the policy allows it).
    pub readable: bool,
    pub operation: String,
    pub kind: String,
    pub sub_resource: String,
    pub name: String,
    pub namespace: String,
    pub username: String,
    pub groups: Vec<String>,
    pub dry_run: bool,
    /// One sentence.
    pub text: String,
}

impl Summary {
    fn of(request: Option<&AdmissionRequest>) -> Self {
        let Some(request) = request else {
            return Self {
                text: "The request cannot be read as an AdmissionRequest; the policy allows what it cannot read.".to_owned(),
                ..Self::default()
            };
        };
        let gvk = &request.kind;
        let kind = match (gvk.group.as_str(), gvk.version.as_str()) {
            (_, "") => gvk.kind.clone(),
            ("", version) => format!("{version} {}", gvk.kind),
            (group, version) => format!("{group}/{version} {}", gvk.kind),
        };
        let mut text = format!(
            "{} asks to {} {}",
            if request.user_info.username.is_empty() {
                "An anonymous user"
            } else {
                &request.user_info.username
            },
            if request.operation.is_empty() {
                "(no operation)"
            } else {
                &request.operation
            },
            if gvk.kind.is_empty() {
                "(no kind)"
            } else {
                &gvk.kind
            },
        );
        if !request.name.is_empty() {
            text.push_str(&format!(" {:?}", request.name));
        }
        if !request.sub_resource.is_empty() {
            text.push_str(&format!(" (subresource {})", request.sub_resource));
        }
        if !request.namespace.is_empty() && gvk.kind != "Namespace" {
            text.push_str(&format!(" in namespace {:?}", request.namespace));
        }
        if !request.user_info.groups.is_empty() {
            text.push_str(&format!(
                ", as a member of {}",
                request.user_info.groups.join(", ")
            ));
        }
        if request.dry_run {
            text.push_str(" (dry run)");
        }
        text.push('.');
        Self {
            readable: true,
            operation: request.operation.clone(),
            kind,
            sub_resource: request.sub_resource.clone(),
            name: request.name.clone(),
            namespace: request.namespace.clone(),
            username: request.user_info.username.clone(),
            groups: request.user_info.groups.clone(),
            dry_run: request.dry_run,
            text,
        }
    }
}

/// The cluster of the playground: fixed NamespaceBaselines, Namespaces and NetworkPolicies,
/// or a failure, counting reads.
#[derive(Debug, Default)]
pub struct StaticCluster {
    baselines: Vec<LiveBaseline>,
    namespaces: Vec<ObjectView>,
    network_policies: Vec<ObjectView>,
    failure: Option<String>,
    baseline_reads: Cell<usize>,
    namespace_reads: Cell<usize>,
    network_policy_reads: Cell<usize>,
}

impl StaticCluster {
    pub fn new(baselines: Vec<LiveBaseline>, namespaces: Vec<ObjectView>) -> Self {
        Self {
            baselines,
            namespaces,
            ..Self::default()
        }
    }

    /// With these NetworkPolicies (what the pod rule looks a wall up in).
    pub fn with_network_policies(mut self, network_policies: Vec<ObjectView>) -> Self {
        self.network_policies = network_policies;
        self
    }

    pub fn failing(message: impl Into<String>) -> Self {
        Self {
            failure: Some(message.into()),
            ..Self::default()
        }
    }

    pub fn baseline_reads(&self) -> usize {
        self.baseline_reads.get()
    }

    pub fn namespace_reads(&self) -> usize {
        self.namespace_reads.get()
    }

    pub fn network_policy_reads(&self) -> usize {
        self.network_policy_reads.get()
    }
}

impl BaselineSource for StaticCluster {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.baseline_reads.set(self.baseline_reads.get() + 1);
        match &self.failure {
            Some(message) => Err(message.clone()),
            None => Ok(self.baselines.clone()),
        }
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.namespace_reads.set(self.namespace_reads.get() + 1);
        if let Some(message) = &self.failure {
            return Err(message.clone());
        }
        self.namespaces
            .iter()
            .find(|namespace| namespace.metadata.name == name)
            .cloned()
            // What the API server answers.
            .ok_or_else(|| format!("namespaces {name:?} not found"))
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        self.network_policy_reads
            .set(self.network_policy_reads.get() + 1);
        if let Some(message) = &self.failure {
            return Err(message.clone());
        }
        Ok(self
            .network_policies
            .iter()
            .find(|policy| policy.metadata.namespace == namespace && policy.metadata.name == name)
            .cloned())
    }
}

/// The baselines as the policy reads them from the cluster.
fn live_baselines(objects: &[Value]) -> Result<Vec<LiveBaseline>, String> {
    objects
        .iter()
        .enumerate()
        .map(|(index, object)| {
            serde_json::from_value(object.clone()).map_err(|error| {
                format!(
                    "item {} cannot be read as a NamespaceBaseline: {error}",
                    index + 1
                )
            })
        })
        .collect()
}

/// The settings of a document: the settings themselves, or the `spec.settings` of a
/// (Cluster)AdmissionPolicy.
fn settings_of(document: Option<Value>, notes: &mut Vec<String>) -> Value {
    match document {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(map))
            if matches!(
                map.get("kind").and_then(Value::as_str),
                Some("ClusterAdmissionPolicy" | "AdmissionPolicy")
            ) =>
        {
            notes.push("settings: read from the policy's spec.settings".to_owned());
            map.get("spec")
                .and_then(|spec| spec.get("settings"))
                .cloned()
                .filter(|settings| !settings.is_null())
                .unwrap_or_else(|| Value::Object(Map::new()))
        }
        Some(other) => other,
    }
}

/// Decides `input` with the policy's own functions.
pub fn evaluate(input: &EvaluateInput) -> Evaluation {
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let mut error = |field: Field, message: String| errors.push(FieldError { field, message });

    // The request: an AdmissionReview, the policy's `validate` payload or an e2e fixture
    // (which may bring settings, baselines and a host error), or the request itself.
    let mut carried = Map::new();
    let request = match document::parse(input.request) {
        Ok(None) => {
            error(
                Field::Request,
                "empty: paste an AdmissionReview, its request, or pick an example".to_owned(),
            );
            None
        }
        Ok(Some(Value::Object(mut map))) if map.contains_key("request") => {
            let request = map.remove("request");
            if map.get("kind").and_then(Value::as_str) != Some("AdmissionReview") {
                carried = map;
            }
            request
        }
        Ok(Some(request)) => Some(request),
        Err(message) => {
            error(Field::Request, message);
            None
        }
    };
    let mut carried_field = |key: &str, field: Field| -> Option<Value> {
        let value = carried.remove(key)?;
        notes.push(format!(
            "{}: taken from the request document (the {} editor is empty)",
            field.label(),
            field.label()
        ));
        Some(value)
    };

    let settings_document = if input.settings.trim().is_empty() {
        Ok(carried_field("settings", Field::Settings))
    } else {
        document::parse(input.settings)
    };
    let baselines = if input.baselines.trim().is_empty() {
        carried_field("baselines", Field::Baselines)
            .map_or(Ok(Vec::new()), |value| baseline_objects(&value.to_string()))
    } else {
        baseline_objects(input.baselines)
    };
    // The Namespaces and NetworkPolicies the policy may read: the objects editor's, or the
    // pasted fixture's.
    let (namespaces, network_policies) = if input.objects.trim().is_empty() {
        let namespaces = carried_field("namespaces", Field::Objects)
            .map_or(Ok(Vec::new()), |value| namespace_views(&value.to_string()));
        let network_policies = carried_field("networkPolicies", Field::Objects)
            .map_or(Ok(Vec::new()), |value| {
                object_views(&value.to_string(), "NetworkPolicy")
            });
        (namespaces, network_policies)
    } else {
        (
            namespace_views(input.objects),
            object_views(input.objects, "NetworkPolicy"),
        )
    };
    let host_error = if input.host_error.trim().is_empty() {
        carried_field("hostError", Field::HostError)
            .and_then(|value| value.as_str().map(str::to_owned))
    } else {
        Some(input.host_error.trim().to_owned())
    };

    let settings = match settings_document {
        Ok(document) => Some(settings_of(document, &mut notes)),
        Err(message) => {
            error(Field::Settings, message);
            None
        }
    };
    // The policy-server's `validate_settings`, on the settings as JSON.
    let settings_check = settings
        .as_ref()
        .map(|settings| admission::check_settings(settings.to_string().as_bytes()));
    if let Some(Err(message)) = &settings_check {
        error(Field::Settings, message.clone());
    }
    let baselines = baselines
        .and_then(|objects| live_baselines(&objects))
        .unwrap_or_else(|message| {
            error(Field::Baselines, message);
            Vec::new()
        });
    let namespaces = namespaces.unwrap_or_else(|message| {
        error(Field::Objects, message);
        Vec::new()
    });
    let network_policies = network_policies.unwrap_or_else(|message| {
        error(Field::Objects, message);
        Vec::new()
    });
    let source = match host_error {
        Some(message) => StaticCluster::failing(message),
        None => StaticCluster::new(baselines, namespaces).with_network_policies(network_policies),
    };
    let summary = request.as_ref().map(|request| {
        let raw = serde_json::value::to_raw_value(request).ok();
        Summary::of(admission::read_request(raw.as_deref()).as_ref())
    });

    let mut evaluation = Evaluation {
        outcome: Outcome::InputError,
        message: None,
        warnings: Vec::new(),
        summary,
        errors,
        baseline_reads: 0,
        namespace_reads: 0,
        network_policy_reads: 0,
        notes,
    };
    match settings_check {
        // The policy-server would refuse to load the policy: no request reaches it.
        Some(Err(message)) => {
            evaluation.outcome = Outcome::SettingsInvalid;
            evaluation.message = Some(message);
            return evaluation;
        }
        Some(Ok(_)) if evaluation.errors.is_empty() => {}
        _ => return evaluation,
    }
    let (Some(settings), Some(request)) = (settings, request) else {
        return evaluation;
    };
    // The policy's `validate`, on the payload the policy-server sends.
    let payload = json!({"settings": settings, "request": request});
    match admission::evaluate(payload.to_string().as_bytes(), &source) {
        Ok(admission::Verdict::Allow) => evaluation.outcome = Outcome::Allowed,
        Ok(admission::Verdict::Warn(warnings)) => {
            evaluation.outcome = Outcome::Allowed;
            evaluation.warnings = warnings;
        }
        Ok(admission::Verdict::Deny(message)) => {
            evaluation.outcome = Outcome::Denied;
            evaluation.message = Some(message);
        }
        Err(message) => evaluation.errors.push(FieldError {
            field: Field::Settings,
            message,
        }),
    }
    evaluation.baseline_reads = source.baseline_reads();
    evaluation.namespace_reads = source.namespace_reads();
    evaluation.network_policy_reads = source.network_policy_reads();
    evaluation
}

/// The Namespaces among the objects of an editor, as the policy reads them.
fn namespace_views(text: &str) -> Result<Vec<ObjectView>, String> {
    object_views(text, "Namespace")
}

/// The objects of `kind` among the objects of an editor, as the policy reads them.
fn object_views(text: &str, kind: &str) -> Result<Vec<ObjectView>, String> {
    let objects = cluster_objects(text)?;
    of_kind(&objects, kind)
        .map(|(index, object)| {
            serde_json::from_value(object.clone())
                .map_err(|error| format!("item {index} ({kind}) cannot be read: {error}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARDED: &str = "guardSelectors: [baseline=guarded]";

    fn namespace_update(old: &str, new: &str, user: &str) -> String {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "1",
                "kind": {"group": "", "version": "v1", "kind": "Namespace"},
                "name": "team-a",
                "operation": "UPDATE",
                "userInfo": {"username": user, "groups": ["developers"]},
                "object": {"metadata": {"name": "team-a", "labels": {"baseline": new}}},
                "oldObject": {"metadata": {"name": "team-a", "labels": {"baseline": old}}},
            },
        })
        .to_string()
    }

    fn run(settings: &str, baselines: &str, request: &str) -> Evaluation {
        evaluate(&EvaluateInput {
            settings,
            baselines,
            request,
            ..EvaluateInput::default()
        })
    }

    #[test]
    fn a_guarded_namespace_cannot_leave() {
        let evaluation = run(GUARDED, "", &namespace_update("guarded", "open", "jane"));
        assert_eq!(evaluation.outcome, Outcome::Denied, "{evaluation:?}");
        assert!(evaluation.message.unwrap().contains("baseline=guarded"));
        assert!(evaluation.errors.is_empty());
        let summary = evaluation.summary.unwrap();
        assert!(summary.readable);
        assert_eq!(
            summary.text,
            "jane asks to UPDATE Namespace \"team-a\", as a member of developers."
        );
        assert_eq!(summary.kind, "v1 Namespace");
    }

    #[test]
    fn the_reconciler_passes() {
        let reconciler = namespace_baseline_core::identity::reconciler_username();
        let evaluation = run(
            GUARDED,
            "",
            &namespace_update("guarded", "open", &reconciler),
        );
        assert_eq!(evaluation.outcome, Outcome::Allowed);
        assert_eq!(evaluation.message, None);
    }

    #[test]
    fn context_aware_reads_the_static_list() {
        let baselines = "apiVersion: hedronite.io/v1alpha1\nkind: NamespaceBaseline\nmetadata: {name: guarded}\nspec: {namespaceLabel: baseline=guarded}\n";
        let request = namespace_update("guarded", "open", "jane");
        let evaluation = run("contextAware: true", baselines, &request);
        assert_eq!(evaluation.outcome, Outcome::Denied);
        assert!(
            evaluation
                .message
                .unwrap()
                .contains("NamespaceBaseline \"guarded\"")
        );
        assert_eq!(evaluation.baseline_reads, 1);
        assert_eq!(
            run("contextAware: true", "", &request).outcome,
            Outcome::Allowed
        );
        let failing = evaluate(&EvaluateInput {
            settings: "contextAware: true",
            baselines,
            host_error: "etcdserver: request timed out",
            request: &request,
            ..EvaluateInput::default()
        });
        assert_eq!(failing.outcome, Outcome::Denied);
        assert!(failing.message.unwrap().contains("request timed out"));
    }

    #[test]
    fn invalid_settings_are_the_policys_own_message() {
        let request = namespace_update("guarded", "open", "jane");
        for (settings, expected) in [
            ("{}", "no namespace would be guarded"),
            ("guardSelectors: [a!=b]", "'!=' is not supported"),
            ("guardSelector: [a]", "unknown field `guardSelector`"),
        ] {
            let evaluation = run(settings, "", &request);
            assert_eq!(evaluation.outcome, Outcome::SettingsInvalid, "{settings}");
            let message = evaluation.message.unwrap();
            assert!(message.contains(expected), "{message}");
            assert_eq!(
                evaluation.errors,
                vec![FieldError {
                    field: Field::Settings,
                    message: message.clone()
                }]
            );
            let policy = admission::check_settings(
                serde_json::to_string(&document::parse(settings).unwrap())
                    .unwrap()
                    .as_bytes(),
            );
            assert_eq!(policy, Err(message));
        }
    }

    #[test]
    fn unreadable_inputs_are_errors_next_to_their_field() {
        let request = namespace_update("guarded", "open", "jane");
        let bad_request = run(GUARDED, "", "{\"request\": ");
        assert_eq!(bad_request.outcome, Outcome::InputError);
        assert_eq!(bad_request.errors[0].field, Field::Request);
        assert!(bad_request.errors[0].message.starts_with("not valid JSON"));
        let empty = run(GUARDED, "", " ");
        assert_eq!(empty.errors[0].field, Field::Request);
        let bad_settings = run("guardSelectors: [", "", &request);
        assert_eq!(bad_settings.outcome, Outcome::InputError);
        assert_eq!(bad_settings.errors[0].field, Field::Settings);
        for baselines in [
            "metadata: {name: [",
            "- 5",
            "kind: Namespace\nmetadata: {name: a}",
            "metadata: {name: 5}",
        ] {
            let evaluation = run(GUARDED, baselines, &request);
            assert_eq!(evaluation.outcome, Outcome::InputError, "{baselines}");
            assert_eq!(evaluation.errors[0].field, Field::Baselines, "{baselines}");
        }
    }

    #[test]
    fn an_unreadable_request_is_allowed_like_the_policy_does() {
        let evaluation = run(GUARDED, "", "[1, 2]");
        assert_eq!(evaluation.outcome, Outcome::Allowed);
        assert!(!evaluation.summary.unwrap().readable);
    }

    #[test]
    fn a_pasted_fixture_brings_its_settings_and_baselines() {
        let fixture = json!({
            "description": "d",
            "settings": {"contextAware": true},
            "baselines": [{"metadata": {"name": "guarded"}, "spec": {"namespaceLabel": "baseline"}}],
            "request": serde_json::from_str::<Value>(&namespace_update("guarded", "open", "jane")).unwrap()["request"],
            "expect": {"allowed": true},
        });
        let evaluation = run("", "", &fixture.to_string());
        assert_eq!(evaluation.outcome, Outcome::Allowed, "{evaluation:?}");
        assert_eq!(evaluation.notes.len(), 2, "{:?}", evaluation.notes);
        // Settings typed in the editor win over the fixture's.
        let evaluation = run(GUARDED, "", &fixture.to_string());
        assert_eq!(evaluation.outcome, Outcome::Denied);
    }

    #[test]
    fn settings_from_an_admission_policy_manifest() {
        let policy = "apiVersion: policies.kubewarden.io/v1\nkind: ClusterAdmissionPolicy\nspec:\n  settings:\n    guardSelectors: [baseline=guarded]\n";
        let evaluation = run(policy, "", &namespace_update("guarded", "x", "jane"));
        assert_eq!(evaluation.outcome, Outcome::Denied);
        assert_eq!(evaluation.notes.len(), 1);
    }

    fn open_policy() -> String {
        json!({
            "request": {
                "uid": "2",
                "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"},
                "namespace": "team-a",
                "operation": "CREATE",
                "userInfo": {"username": "jane"},
                "object": {"metadata": {"name": "web", "namespace": "team-a"}, "spec": {"podSelector": {}, "ingress": [{}]}},
            },
        })
        .to_string()
    }

    const WALLED: &str = "kind: Namespace\nmetadata: {name: team-a, labels: {baseline: guarded}}";

    fn holes(settings: &str, objects: &str, host_error: &str) -> Evaluation {
        evaluate(&EvaluateInput {
            settings,
            objects,
            host_error,
            request: &open_policy(),
            ..EvaluateInput::default()
        })
    }

    #[test]
    fn a_hole_is_judged_with_the_namespaces_of_the_objects_editor() {
        let warned = holes(GUARDED, WALLED, "");
        assert_eq!(warned.outcome, Outcome::Allowed, "{warned:?}");
        assert_eq!(
            warned.warnings,
            [
                "NetworkPolicy web ingress rule 0 opens every port to the whole internet in namespace \"team-a\", walled by the guard label baseline=guarded: name its peers instead (pods, labelled namespaces, or a narrower ipBlock)"
            ]
        );
        assert_eq!((warned.namespace_reads, warned.baseline_reads), (1, 0));
        let denied = holes(
            "guardSelectors: [baseline=guarded]\nholes: Deny",
            WALLED,
            "",
        );
        assert_eq!(denied.outcome, Outcome::Denied);
        assert!(denied.warnings.is_empty());
        let missing = holes(GUARDED, "", "");
        assert_eq!(missing.outcome, Outcome::Allowed);
        assert!(
            missing.warnings[0].starts_with("could not check whether namespace \"team-a\" is walled (namespaces \"team-a\" not found)"),
            "{missing:?}"
        );
        let failing = holes(GUARDED, WALLED, "etcdserver: request timed out");
        assert!(
            failing.warnings[0].contains("(etcdserver: request timed out)"),
            "{failing:?}"
        );
        let unwalled = holes(GUARDED, "kind: Namespace\nmetadata: {name: team-a}", "");
        assert_eq!(
            (unwalled.outcome, unwalled.warnings.len()),
            (Outcome::Allowed, 0)
        );
        let broken = holes(GUARDED, "kind: Namespace\nmetadata: {name: [x]}", "");
        assert_eq!(broken.outcome, Outcome::InputError);
        assert_eq!(broken.errors[0].field, Field::Objects);
        assert!(
            broken.errors[0]
                .message
                .starts_with("item 1 (Namespace) cannot be read")
        );
    }

    #[test]
    fn a_pasted_fixture_brings_its_namespaces() {
        let mut fixture: Value = serde_json::from_str(&open_policy()).unwrap();
        fixture["settings"] = json!({"guardSelectors": ["baseline=guarded"], "holes": "Deny"});
        fixture["namespaces"] = json!([{"kind": "Namespace", "metadata": {"name": "team-a", "labels": {"baseline": "guarded"}}}]);
        let evaluation = run("", "", &fixture.to_string());
        assert_eq!(evaluation.outcome, Outcome::Denied, "{evaluation:?}");
        assert!(
            evaluation
                .notes
                .iter()
                .any(|note| note.starts_with("objects: taken from the request document")),
            "{:?}",
            evaluation.notes
        );
    }

    #[test]
    fn baseline_lists() {
        let list =
            "kind: NamespaceBaselineList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n";
        assert_eq!(baseline_objects(list).unwrap().len(), 2);
        assert_eq!(baseline_objects("[{}, {}, {}]").unwrap().len(), 3);
        assert_eq!(baseline_objects("").unwrap().len(), 0);
    }
}
