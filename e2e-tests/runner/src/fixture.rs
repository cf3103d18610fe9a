//! The fixture format (`e2e-tests/fixtures/*.json`) and the checks applied to one fixture.
//! See `e2e-tests/README.md`.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Cluster, Evaluation, HostCall, PolicyHost, SettingsResponse};

/// One AdmissionReview case with its expected verdict.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fixture {
    /// The file stem; not part of the JSON.
    #[serde(skip)]
    pub name: String,
    pub description: String,
    /// The policy settings, as in the ClusterAdmissionPolicy's `spec.settings`.
    #[serde(default = "empty_object")]
    pub settings: Value,
    /// The NamespaceBaseline objects the host capabilities list.
    #[serde(default)]
    pub baselines: Vec<Value>,
    /// When set, the Kubernetes host capabilities fail with this message.
    #[serde(default)]
    pub host_error: Option<String>,
    /// The `request` of the AdmissionReview, as kube-apiserver sends it.
    #[serde(default = "empty_object")]
    pub request: Value,
    pub expect: Expect,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// The verdict of `validate`; required unless `settingsValid` is false.
    #[serde(default)]
    pub allowed: Option<bool>,
    /// A substring of the rejection (or settings) message. Without it an accepted request
    /// must come back with no message.
    #[serde(default)]
    pub message_contains: Option<String>,
    #[serde(default = "yes")]
    pub settings_valid: bool,
    /// How many host capability calls (logging excluded) `validate` must make.
    #[serde(default)]
    pub host_calls: Option<usize>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn yes() -> bool {
    true
}

impl Fixture {
    pub fn parse(name: &str, text: &str) -> Result<Self, String> {
        let mut fixture: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        fixture.name = name.to_owned();
        if fixture.expect.settings_valid && fixture.expect.allowed.is_none() {
            return Err("expect.allowed is required unless expect.settingsValid is false".into());
        }
        Ok(fixture)
    }

    pub fn cluster(&self) -> Cluster {
        Cluster {
            baselines: self.baselines.clone(),
            host_error: self.host_error.clone(),
        }
    }

    /// Whether the settings turn on context-aware mode.
    pub fn context_aware(&self) -> bool {
        self.settings.get("contextAware") == Some(&Value::Bool(true))
    }

    /// What the table shows as expected.
    pub fn expected(&self) -> String {
        let verdict = if !self.expect.settings_valid {
            "settings invalid"
        } else if self.expect.allowed == Some(true) {
            "allow"
        } else {
            "reject"
        };
        verdict.to_owned()
    }
}

/// A fixture file that could not be read or parsed, kept as a failure of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    pub name: String,
    pub error: String,
}

/// The `*.json` files of `dir` whose stem contains `filter`, sorted by name.
pub fn load_dir(
    dir: &Path,
    filter: Option<&str>,
) -> std::io::Result<Vec<Result<Fixture, Unreadable>>> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .filter_map(|path| {
            let name = path.file_stem()?.to_string_lossy().into_owned();
            if filter.is_some_and(|filter| !name.contains(filter)) {
                return None;
            }
            let loaded = fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| Fixture::parse(&name, &text))
                .map_err(|error| Unreadable {
                    name: name.clone(),
                    error,
                });
            Some(loaded)
        })
        .collect())
}

/// The outcome of one fixture (`--report json` writes these as they are).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub name: String,
    pub expected: String,
    pub got: String,
    /// Host capability calls made by `validate_settings` and `validate` (logging excluded).
    pub host_calls: usize,
    /// Every mismatch; empty when the fixture passed.
    pub failures: Vec<String>,
    /// The message the policy returned, for the detailed listing.
    pub message: Option<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn unreadable(unreadable: &Unreadable) -> Self {
        Self {
            name: unreadable.name.clone(),
            expected: "-".into(),
            got: "unreadable".into(),
            host_calls: 0,
            failures: vec![format!("unreadable fixture: {}", unreadable.error)],
            message: None,
        }
    }
}

fn describe_error(error: &crate::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn check_calls<T>(evaluation: &Evaluation<T>, during: &str, failures: &mut Vec<String>) {
    for call in evaluation.unexpected_calls() {
        failures.push(format!("{during}: {call}"));
    }
}

fn check_message(
    expected: Option<&str>,
    message: Option<&str>,
    empty_required: bool,
    failures: &mut Vec<String>,
) {
    match (expected, message) {
        (Some(wanted), Some(message)) if message.contains(wanted) => {}
        (Some(wanted), message) => {
            failures.push(format!("message {message:?} does not contain {wanted:?}"))
        }
        (None, Some(message)) if empty_required && !message.is_empty() => {
            failures.push(format!(
                "an accepted request carries a message: {message:?}"
            ));
        }
        (None, _) => {}
    }
}

/// Runs one fixture: `validate_settings`, then (settings valid) `validate`.
pub fn run(host: &mut PolicyHost, fixture: &Fixture) -> Report {
    let mut report = Report {
        name: fixture.name.clone(),
        expected: fixture.expected(),
        got: String::new(),
        host_calls: 0,
        failures: Vec::new(),
        message: None,
    };
    let (valid, message, how) = match host.validate_settings(&fixture.settings) {
        Ok(settings) => {
            report.host_calls += settings.capability_calls().count();
            check_calls(&settings, "validate_settings", &mut report.failures);
            let SettingsResponse { valid, message } = settings.response;
            (valid, message, "")
        }
        // The policy-server reads an error returned by validate_settings as invalid settings
        // ("Error invoking settings validation callback: ..."); a trap stays a failure.
        Err(error) => match error.guest_error() {
            Some(message) => (false, Some(message.to_owned()), " (guest error)"),
            None => {
                report.got = "error".into();
                report
                    .failures
                    .push(format!("validate_settings: {}", describe_error(&error)));
                return report;
            }
        },
    };
    if !valid || !fixture.expect.settings_valid {
        let state = if valid {
            "settings valid"
        } else {
            "settings invalid"
        };
        report.got = format!("{state}{how}");
        report.message = message.clone();
        if valid != fixture.expect.settings_valid {
            report.failures.push(format!(
                "settings valid: expected {}, got {valid} (message {message:?})",
                fixture.expect.settings_valid
            ));
        } else {
            check_message(
                fixture.expect.message_contains.as_deref(),
                message.as_deref(),
                false,
                &mut report.failures,
            );
        }
        return report;
    }

    let validation = match host.validate_in(&fixture.settings, &fixture.request, &fixture.cluster())
    {
        Ok(validation) => validation,
        Err(error) => {
            report.got = "error".into();
            report
                .failures
                .push(format!("validate: {}", describe_error(&error)));
            return report;
        }
    };
    let calls: Vec<&HostCall> = validation.capability_calls().collect();
    report.host_calls += calls.len();
    check_calls(&validation, "validate", &mut report.failures);
    let response = &validation.response;
    report.got = if response.accepted { "allow" } else { "reject" }.into();
    report.message = response.message.clone();
    let allowed = fixture.expect.allowed.unwrap_or(true);
    if response.accepted != allowed {
        report.failures.push(format!(
            "accepted: expected {allowed}, got {} (message {:?})",
            response.accepted, response.message
        ));
    } else {
        check_message(
            fixture.expect.message_contains.as_deref(),
            response.message.as_deref(),
            response.accepted,
            &mut report.failures,
        );
    }
    if response.mutated_object.is_some() {
        report
            .failures
            .push("a validating policy returned a mutated_object".into());
    }
    if !fixture.context_aware() && !calls.is_empty() {
        report.failures.push(format!(
            "contextAware is false but the policy made {} host call(s): {}",
            calls.len(),
            calls
                .iter()
                .map(|call| call.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    if let Some(wanted) = fixture.expect.host_calls
        && wanted != calls.len()
    {
        report.failures.push(format!(
            "host calls: expected {wanted}, got {}",
            calls.len()
        ));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_fixture() {
        let fixture = Fixture::parse(
            "x",
            r#"{"description": "d", "settings": {"contextAware": true}, "baselines": [{}],
                "hostError": "boom", "request": {"uid": "1"},
                "expect": {"allowed": false, "messageContains": "m", "hostCalls": 1}}"#,
        )
        .expect("parses");
        assert_eq!(fixture.name, "x");
        assert!(fixture.context_aware());
        assert!(fixture.expect.settings_valid);
        assert_eq!(fixture.cluster().host_error.as_deref(), Some("boom"));
        assert_eq!(fixture.expected(), "reject");
    }

    #[test]
    fn settings_only_fixtures_need_no_verdict() {
        let fixture = Fixture::parse(
            "s",
            r#"{"description": "d", "settings": {}, "expect": {"settingsValid": false}}"#,
        )
        .expect("parses");
        assert_eq!(fixture.expected(), "settings invalid");
    }

    #[test]
    fn a_verdict_is_required_otherwise_and_typos_are_refused() {
        let missing = Fixture::parse("m", r#"{"description": "d", "expect": {}}"#);
        assert!(missing.expect_err("refused").contains("expect.allowed"));
        let typo = Fixture::parse("t", r#"{"description": "d", "expect": {"alowed": true}}"#);
        assert!(typo.expect_err("refused").contains("unknown field"));
    }

    #[test]
    fn messages() {
        let mut failures = Vec::new();
        check_message(Some("abc"), Some("xxabcxx"), false, &mut failures);
        check_message(None, None, true, &mut failures);
        check_message(None, Some(""), true, &mut failures);
        check_message(None, Some("anything"), false, &mut failures);
        assert!(failures.is_empty(), "{failures:?}");
        check_message(Some("abc"), None, false, &mut failures);
        check_message(Some("abc"), Some("ab"), false, &mut failures);
        check_message(None, Some("why"), true, &mut failures);
        assert_eq!(failures.len(), 3, "{failures:?}");
    }
}
