//! What Kubewarden's policy-server tells in its log (`--log-fmt json`), read back for the
//! tests: each AdmissionReview it answered and its verdict, the host calls the policy made,
//! the reflectors (watches) it started, and its errors. At `--log-level debug` policy-server
//! 1.35 logs the review it received (`admission_review`, inside the `validation` span of
//! `crates/policy-server/src/api/handlers.rs`) and, once evaluated, the response
//! (`policy evaluated`, in the same span, which carries the request's uid); each host call as
//! `Sending request via callback channel` (`crates/policy-evaluator/src/runtimes/callback.rs`),
//! and at info level every reflector it creates and every error. The response is logged with
//! Rust's `Debug`, so its fields are read from that text.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// One AdmissionReview the policy-server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub uid: String,
    /// The policy's unique name (its path `/validate/<policy>`).
    pub policy: String,
    pub operation: String,
    /// `group/version/resource`, `version/resource` for the core group, then
    /// `/subresource` when there is one.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub username: String,
    pub dry_run: bool,
    pub allowed: bool,
    /// The refusal's message.
    pub message: Option<String>,
}

impl fmt::Display for Review {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}/{} by {}{}: {}",
            self.operation,
            self.resource,
            self.namespace,
            self.name,
            self.username,
            if self.dry_run { " (dry run)" } else { "" },
            if self.allowed { "allowed" } else { "denied" }
        )
    }
}

/// One host call the policy made while judging a review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCall {
    /// The review's uid.
    pub uid: String,
    /// `get_resource`, `list_resources_all`, ...
    pub operation: String,
    /// The request as the policy-server logs it (`GetResourceRequest { … }`).
    pub request: String,
}

/// A policy-server log, one JSON object per line (other lines are ignored).
#[derive(Debug, Clone, Default)]
pub struct PolicyServerLog {
    lines: Vec<Value>,
}

impl PolicyServerLog {
    pub fn parse(text: &str) -> Self {
        Self {
            lines: text
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect(),
        }
    }

    fn message(line: &Value) -> &str {
        line["fields"]["message"].as_str().unwrap_or_default()
    }

    /// The uid of the review a line was logged for, from its spans.
    fn request_uid(line: &Value) -> Option<&str> {
        line["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .chain([&line["span"]])
            .find_map(|span| span["request_uid"].as_str())
    }

    /// Every review answered (debug level), in the order answered.
    pub fn reviews(&self) -> Vec<Review> {
        // The request of each uid received, and the policy it was sent to.
        let mut received: BTreeMap<String, (Value, String)> = BTreeMap::new();
        let mut reviews = Vec::new();
        for line in &self.lines {
            if let Some(text) = line["fields"]["admission_review"].as_str() {
                let Ok(mut review) = serde_json::from_str::<Value>(text) else {
                    continue;
                };
                let request = review["request"].take();
                if let Some(uid) = request["uid"].as_str() {
                    let policy = line["span"]["policy_id"].as_str().unwrap_or_default();
                    received.insert(uid.to_owned(), (request.clone(), policy.to_owned()));
                }
            } else if Self::message(line) == "policy evaluated" {
                let Some((request, policy)) =
                    Self::request_uid(line).and_then(|uid| received.get(uid))
                else {
                    continue;
                };
                let response = line["fields"]["response"].as_str().unwrap_or_default();
                reviews.push(review_of(request, policy, response));
            }
        }
        reviews
    }

    /// The (namespace, name) of every review received (debug level), answered or not.
    pub fn received(&self) -> Vec<(String, String)> {
        self.lines
            .iter()
            .filter_map(|line| line["fields"]["admission_review"].as_str())
            .filter_map(|text| serde_json::from_str::<Value>(text).ok())
            .map(|review| {
                let request = &review["request"];
                let text = |field: &str| request[field].as_str().unwrap_or_default().to_owned();
                (text("namespace"), text("name"))
            })
            .collect()
    }

    /// Every host call the policy made (debug level).
    pub fn host_calls(&self) -> Vec<HostCall> {
        self.lines
            .iter()
            .filter(|line| Self::message(line) == "Sending request via callback channel")
            .map(|line| HostCall {
                uid: Self::request_uid(line).unwrap_or_default().to_owned(),
                operation: line["fields"]["operation"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                request: line["fields"]["req"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect()
    }

    /// The watches it started to answer list calls: (kind, selectors), one line each.
    pub fn reflectors_created(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|line| Self::message(line) == "creating new reflector")
            .map(|line| {
                let fields = &line["fields"];
                format!(
                    "{}/{} {} (namespace {}, labels {}, fields {})",
                    fields["group"].as_str().unwrap_or_default(),
                    fields["version"].as_str().unwrap_or_default(),
                    fields["kind"].as_str().unwrap_or_default(),
                    fields["namespace"].as_str().unwrap_or_default(),
                    fields["label_selector"].as_str().unwrap_or_default(),
                    fields["field_selector"].as_str().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Its ERROR lines: message, then the error when there is one.
    pub fn errors(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|line| line["level"] == "ERROR")
            .map(|line| {
                let error = line["fields"]["error"].as_str().unwrap_or_default();
                format!("{}: {error}", Self::message(line))
            })
            .collect()
    }

    /// Its WARN lines' messages.
    pub fn warnings(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|line| line["level"] == "WARN")
            .map(|line| Self::message(line).to_owned())
            .collect()
    }
}

fn review_of(request: &Value, policy: &str, response: &str) -> Review {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let resource = &request["resource"];
    let mut path = [
        &resource["group"],
        &resource["version"],
        &resource["resource"],
    ]
    .iter()
    .filter_map(|part| part.as_str().filter(|part| !part.is_empty()))
    .collect::<Vec<_>>()
    .join("/");
    if let Some(sub) = request["subResource"].as_str() {
        path = format!("{path}/{sub}");
    }
    Review {
        uid: text(&request["uid"]),
        policy: policy.to_owned(),
        operation: text(&request["operation"]),
        resource: path,
        namespace: text(&request["namespace"]),
        name: text(&request["name"]),
        username: text(&request["userInfo"]["username"]),
        dry_run: request["dryRun"] == true,
        allowed: response.contains("allowed: true"),
        message: debug_string_after(response, "message: Some(\""),
    }
}

/// The string Rust's `Debug` printed right after `marker` (which ends with its opening quote),
/// unescaped.
fn debug_string_after(text: &str, marker: &str) -> Option<String> {
    let start = text.find(marker)? + marker.len();
    let mut out = String::new();
    let mut chars = text[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'u' => {
                    // \u{…}
                    let hex: String = chars.by_ref().skip(1).take_while(|c| *c != '}').collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as policy-server 1.35.0 wrote them (`--log-fmt json --log-level debug`),
    /// shortened to the fields read here.
    const LOG: &str = r#"{"timestamp":"2026-12-05T12:17:19.536201Z","level":"INFO","fields":{"message":"policy timeout protection is enabled","execution_limit_seconds":2},"target":"policy_server"}
not json: a line another writer left
{"timestamp":"2026-12-05T12:17:23.302208Z","level":"DEBUG","fields":{"admission_review":"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\",\"request\":{\"uid\":\"26e4\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},\"resource\":{\"group\":\"\",\"version\":\"v1\",\"resource\":\"pods\"},\"name\":\"p\",\"namespace\":\"team-a\",\"operation\":\"CREATE\",\"userInfo\":{\"username\":\"admin\"},\"dryRun\":false}}"},"target":"policy_server::api::handlers","span":{"policy_id":"clusterwide-namespace-baseline","name":"validation"}}
{"timestamp":"2026-12-05T12:17:23.302875Z","level":"DEBUG","fields":{"message":"Sending request via callback channel","eval_ctx.policy_id":"clusterwide-namespace-baseline","binding":"kubewarden","operation":"get_resource","req":"GetResourceRequest { api_version: \"v1\", kind: \"Namespace\", name: \"team-a\", namespace: None, disable_cache: false, field_masks: None }"},"target":"policy_evaluator::runtimes::callback","span":{"name":"validate"},"spans":[{"name":"request"},{"request_uid":"26e4","name":"validation"},{"name":"validate"}]}
{"timestamp":"2026-12-05T12:17:23.311716Z","level":"INFO","fields":{"message":"creating new reflector","group":"hedronite.io","version":"v1alpha1","kind":"NamespaceBaseline","namespace":"None","label_selector":"None","field_selector":"None"},"target":"policy_evaluator::callback_handler::kubernetes::reflector"}
{"timestamp":"2026-12-05T12:17:23.384634Z","level":"ERROR","fields":{"message":"callback evaluation failed","operation":"get_resource","error":"Cannot find networking.k8s.io/v1/NetworkPolicy named 'nsb-g-default-deny'"},"target":"policy_evaluator::runtimes::callback"}
{"timestamp":"2026-12-05T12:17:23.683391Z","level":"DEBUG","fields":{"message":"policy evaluated","response":"AdmissionResponse { uid: \"26e4\", allowed: false, patch_type: None, patch: None, status: Some(AdmissionResponseStatus { status: None, message: Some(\"pod \\\"p\\\" cannot be created\\nyet \\u{1f6a7}\"), reason: None, details: None, code: None }), audit_annotations: None, warnings: None }"},"target":"policy_server::api::handlers","span":{"policy_id":"clusterwide-namespace-baseline","request_uid":"26e4","name":"validation"},"spans":[{"name":"request"},{"request_uid":"26e4","name":"validation"}]}
{"timestamp":"2026-12-05T12:17:24.003987Z","level":"DEBUG","fields":{"admission_review":"{\"request\":{\"uid\":\"14a3\",\"resource\":{\"group\":\"networking.k8s.io\",\"version\":\"v1\",\"resource\":\"networkpolicies\"},\"name\":\"w\",\"namespace\":\"team-a\",\"operation\":\"DELETE\",\"userInfo\":{\"username\":\"system:serviceaccount:x:y\"},\"dryRun\":true}}"},"span":{"policy_id":"clusterwide-namespace-baseline","name":"validation"}}
{"timestamp":"2026-12-05T12:17:24.014780Z","level":"DEBUG","fields":{"message":"policy evaluated","response":"AdmissionResponse { uid: \"14a3\", allowed: true, patch_type: None, patch: None, status: None, audit_annotations: None, warnings: None }"},"span":{"policy_id":"clusterwide-namespace-baseline","request_uid":"14a3","name":"validation"}}
"#;

    #[test]
    fn reviews_join_the_request_and_its_verdict() {
        let log = PolicyServerLog::parse(LOG);
        let reviews = log.reviews();
        assert_eq!(reviews.len(), 2);
        assert_eq!(
            reviews[0].to_string(),
            "CREATE v1/pods team-a/p by admin: denied"
        );
        assert_eq!(reviews[0].policy, "clusterwide-namespace-baseline");
        assert_eq!(
            reviews[0].message.as_deref(),
            Some("pod \"p\" cannot be created\nyet \u{1f6a7}")
        );
        assert_eq!(
            reviews[1].to_string(),
            "DELETE networking.k8s.io/v1/networkpolicies team-a/w by system:serviceaccount:x:y (dry run): allowed"
        );
        assert_eq!(reviews[1].message, None);
        assert_eq!(
            log.received(),
            [
                ("team-a".to_owned(), "p".to_owned()),
                ("team-a".to_owned(), "w".to_owned())
            ]
        );
    }

    #[test]
    fn host_calls_reflectors_and_errors() {
        let log = PolicyServerLog::parse(LOG);
        let calls = log.host_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].uid, "26e4");
        assert_eq!(calls[0].operation, "get_resource");
        assert!(calls[0].request.contains("kind: \"Namespace\""));
        assert_eq!(
            log.reflectors_created(),
            ["hedronite.io/v1alpha1 NamespaceBaseline (namespace None, labels None, fields None)"]
        );
        assert_eq!(
            log.errors(),
            [
                "callback evaluation failed: Cannot find networking.k8s.io/v1/NetworkPolicy named 'nsb-g-default-deny'"
            ]
        );
        assert!(log.warnings().is_empty());
    }
}
