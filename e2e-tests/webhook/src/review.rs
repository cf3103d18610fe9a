//! The AdmissionReview translation, as Kubewarden's policy-server does it: the
//! `admission.k8s.io/v1` AdmissionReview the API server posts becomes the `request` of the
//! policy's `validate` call (the AdmissionRequest re-serialized through policy-evaluator's own
//! model of it, `crates/policy-evaluator/src/admission_request.rs`, so unknown fields and
//! nulls are dropped as there), and the policy's ValidationResponse becomes the
//! AdmissionReview answered (`AdmissionResponse::from_policy_validation_response` of
//! `crates/policy-evaluator/src/admission_response.rs`): the uid echoed, `allowed`, a
//! `status` with the policy's message and code when it gives either, its warnings. A guest
//! call that fails is a rejection with code 500 and `internal server error: ...`, as the
//! policy-server's waPC runtime answers it. Pure functions: no I/O here.

use namespace_baseline_e2e::ValidationResponse;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// A body that is not an AdmissionReview this stand-in can evaluate. The policy-server
/// refuses such a body with a 4xx before any policy runs; so does the stand-in
/// ([`BadReview::body`]).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BadReview {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error("not an admission.k8s.io/v1 AdmissionReview: apiVersion {api_version}, kind {kind}")]
    NotAReview { api_version: Value, kind: Value },
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("the AdmissionReview's request is malformed: {0}")]
    BadRequest(String),
}

impl BadReview {
    /// The HTTP status the stand-in answers it with.
    pub const STATUS: u16 = 400;

    /// The JSON body of that answer.
    pub fn body(&self) -> Value {
        json!({"status": Self::STATUS, "message": self.to_string()})
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupVersionResource {
    pub group: String,
    pub version: String,
    pub resource: String,
}

/// An `admission.k8s.io/v1` AdmissionRequest, with the fields policy-evaluator keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub operation: String,
    pub user_info: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
}

impl AdmissionRequest {
    /// What the policy receives as `request` in its `validate` call.
    pub fn payload(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// `username`, for the log.
    pub fn username(&self) -> &str {
        self.user_info
            .get("username")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `CREATE networking.k8s.io/v1 networkpolicies team-a/name`, for the log.
    pub fn describe(&self) -> String {
        let resource = &self.resource;
        let group = if resource.group.is_empty() {
            String::new()
        } else {
            format!("{}/", resource.group)
        };
        let sub = self
            .sub_resource
            .as_deref()
            .map(|sub| format!("/{sub}"))
            .unwrap_or_default();
        let namespace = self
            .namespace
            .as_deref()
            .map(|namespace| format!("{namespace}/"))
            .unwrap_or_default();
        format!(
            "{} {group}{} {}{sub} {namespace}{}",
            self.operation,
            resource.version,
            resource.resource,
            self.name.as_deref().unwrap_or("")
        )
    }
}

/// The AdmissionRequest of a posted AdmissionReview body.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest, BadReview> {
    let review: Value =
        serde_json::from_slice(body).map_err(|error| BadReview::NotJson(error.to_string()))?;
    if review["apiVersion"] != API_VERSION || review["kind"] != KIND {
        return Err(BadReview::NotAReview {
            api_version: review["apiVersion"].clone(),
            kind: review["kind"].clone(),
        });
    }
    let request = review.get("request").filter(|request| !request.is_null());
    let request = request.ok_or(BadReview::NoRequest)?;
    serde_json::from_value(request.clone())
        .map_err(|error| BadReview::BadRequest(error.to_string()))
}

/// An AdmissionReview answering with `response`.
pub fn review(response: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": KIND, "response": response})
}

/// The AdmissionResponse for the policy's verdict.
pub fn verdict_response(uid: &str, verdict: &ValidationResponse) -> Value {
    if verdict.mutated_object.is_some() {
        // The policy is configured as validating (`mutating: false`): the policy-server does
        // not let it change the object.
        return rejection(
            uid,
            "internal server error: the policy returned a mutated object, but it is not configured as mutating",
            500,
        );
    }
    let mut response = json!({"uid": uid, "allowed": verdict.accepted});
    if verdict.message.is_some() || verdict.code.is_some() {
        let mut status = Map::new();
        if let Some(message) = &verdict.message {
            status.insert("message".into(), json!(message));
        }
        if let Some(code) = verdict.code {
            status.insert("code".into(), json!(code));
        }
        response["status"] = Value::Object(status);
    }
    if let Some(warnings) = &verdict.warnings {
        response["warnings"] = json!(warnings);
    }
    response
}

/// The AdmissionResponse when the policy could not give a verdict (a trap, the evaluation
/// deadline, an answer that is not a ValidationResponse).
pub fn failure_response(uid: &str, error: &str) -> Value {
    rejection(uid, &format!("internal server error: {error}"), 500)
}

/// The AdmissionResponse of a policy in `monitor` mode: the request is allowed whatever the
/// verdict (which only the log keeps).
pub fn monitor_response(uid: &str) -> Value {
    json!({"uid": uid, "allowed": true})
}

fn rejection(uid: &str, message: &str, code: u16) -> Value {
    json!({"uid": uid, "allowed": false, "status": {"message": message, "code": code}})
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn request_json() -> Value {
        json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"},
            "resource": {"group": "networking.k8s.io", "version": "v1", "resource": "networkpolicies"},
            "requestKind": {"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"},
            "requestResource": {"group": "networking.k8s.io", "version": "v1", "resource": "networkpolicies"},
            "name": "nsb-guarded-default-deny",
            "namespace": "team-a",
            "operation": "DELETE",
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": null,
            "oldObject": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "nsb-guarded-default-deny"}},
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"},
        })
    }

    fn body(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": KIND, "request": request}))
            .unwrap()
    }

    #[rstest]
    #[case::delete_drops_the_null_object(request_json(), {
        let mut expected = request_json();
        expected.as_object_mut().unwrap().remove("object");
        expected
    })]
    #[case::unknown_fields_and_nulls_are_dropped(
        {
            let mut request = request_json();
            request["subResource"] = Value::Null;
            request["somethingNew"] = json!({"a": 1});
            request
        },
        {
            let mut expected = request_json();
            expected.as_object_mut().unwrap().remove("object");
            expected
        }
    )]
    #[case::a_subresource_and_both_objects_are_kept(
        {
            let mut request = request_json();
            request["operation"] = json!("UPDATE");
            request["subResource"] = json!("status");
            request["object"] = json!({"kind": "Namespace"});
            request
        },
        {
            let mut request = request_json();
            request["operation"] = json!("UPDATE");
            request["subResource"] = json!("status");
            request["object"] = json!({"kind": "Namespace"});
            request
        }
    )]
    fn the_request_becomes_the_payload(#[case] request: Value, #[case] payload: Value) {
        let parsed = parse_review(&body(request)).unwrap();
        assert_eq!(parsed.payload(), payload);
    }

    #[test]
    fn a_request_is_described_for_the_log() {
        let mut request = request_json();
        request["subResource"] = json!("status");
        let parsed = parse_review(&body(request)).unwrap();
        assert_eq!(
            parsed.describe(),
            "DELETE networking.k8s.io/v1 networkpolicies/status team-a/nsb-guarded-default-deny"
        );
        assert_eq!(parsed.username(), "admin");
    }

    fn verdict(accepted: bool) -> ValidationResponse {
        ValidationResponse {
            accepted,
            message: None,
            code: None,
            mutated_object: None,
            warnings: None,
        }
    }

    #[rstest]
    #[case::accepted(verdict(true), json!({"uid": "u1", "allowed": true}))]
    #[case::rejected_with_message_and_code(
        ValidationResponse { message: Some("no".into()), code: Some(403), ..verdict(false) },
        json!({"uid": "u1", "allowed": false, "status": {"message": "no", "code": 403}})
    )]
    #[case::rejected_with_a_message_only(
        ValidationResponse { message: Some("no".into()), ..verdict(false) },
        json!({"uid": "u1", "allowed": false, "status": {"message": "no"}})
    )]
    #[case::accepted_with_warnings(
        ValidationResponse { warnings: Some(vec!["a hole".into()]), ..verdict(true) },
        json!({"uid": "u1", "allowed": true, "warnings": ["a hole"]})
    )]
    #[case::a_mutation_is_refused(
        ValidationResponse { mutated_object: Some(json!({})), ..verdict(true) },
        json!({"uid": "u1", "allowed": false, "status": {"message": "internal server error: the policy returned a mutated object, but it is not configured as mutating", "code": 500}})
    )]
    fn the_verdict_becomes_the_response(
        #[case] verdict: ValidationResponse,
        #[case] response: Value,
    ) {
        assert_eq!(verdict_response("u1", &verdict), response);
    }

    #[test]
    fn failures_and_monitor_mode_answer_as_the_policy_server() {
        assert_eq!(
            failure_response("u2", "guest call \"validate\" failed"),
            json!({"uid": "u2", "allowed": false, "status": {"message": "internal server error: guest call \"validate\" failed", "code": 500}})
        );
        assert_eq!(
            monitor_response("u3"),
            json!({"uid": "u3", "allowed": true})
        );
        assert_eq!(
            review(monitor_response("u3")),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u3", "allowed": true}})
        );
    }

    #[rstest]
    #[case::not_json(b"{not json".to_vec(), "the body is not JSON")]
    #[case::empty(Vec::new(), "the body is not JSON")]
    #[case::another_kind(
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": request_json()})).unwrap(),
        "not an admission.k8s.io/v1 AdmissionReview: apiVersion \"admission.k8s.io/v1beta1\""
    )]
    #[case::a_json_array(b"[1, 2]".to_vec(), "not an admission.k8s.io/v1 AdmissionReview")]
    #[case::no_request(
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": KIND, "request": null})).unwrap(),
        "has no request"
    )]
    #[case::no_uid(
        body({let mut request = request_json(); request.as_object_mut().unwrap().remove("uid"); request}),
        "missing field `uid`"
    )]
    #[case::user_info_not_an_object(
        body({let mut request = request_json(); request["userInfo"] = json!("admin"); request}),
        "request is malformed: invalid type: string \"admin\", expected a map"
    )]
    #[case::operation_not_a_string(
        body({let mut request = request_json(); request["operation"] = json!(7); request}),
        "invalid type: integer `7`, expected a string"
    )]
    fn bad_input_is_a_clear_error(#[case] body: Vec<u8>, #[case] reason: &str) {
        let error = parse_review(&body).unwrap_err();
        assert!(error.to_string().contains(reason), "{error}");
        assert_eq!(error.body()["status"], 400);
        assert_eq!(error.body()["message"], error.to_string());
    }
}
