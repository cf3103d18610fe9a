//! The checks applied to one fixture in the waPC host. The fixture format and its reader are
//! `namespace_baseline_formats::fixture` (re-exported here); see `e2e-tests/README.md`.

use serde::Serialize;

pub use namespace_baseline_formats::fixture::{Expect, Fixture, Unreadable, load_dir};

use crate::{Cluster, Evaluation, HostCall, PolicyHost, SettingsResponse};

impl From<&Fixture> for Cluster {
    /// What the host capabilities answer for this fixture.
    fn from(fixture: &Fixture) -> Self {
        Self {
            baselines: fixture.baselines.clone(),
            namespaces: fixture.namespaces.clone(),
            network_policies: fixture.network_policies.clone(),
            host_error: fixture.host_error.clone(),
        }
    }
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
    /// The warnings the policy returned (`validate` only).
    pub warnings: Vec<String>,
    /// The host calls of `validate`, in order (logging included); `None` when `validate` did
    /// not run. What `--kwctl-sessions` replays.
    #[serde(skip)]
    pub validate_calls: Option<Vec<HostCall>>,
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
            warnings: Vec::new(),
            validate_calls: None,
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

/// Each warning must contain its expected substring, in order, and there must be as many
/// warnings as substrings (none when none are expected).
fn check_warnings(expected: &[String], warnings: &[String], failures: &mut Vec<String>) {
    let matches = expected.len() == warnings.len()
        && expected
            .iter()
            .zip(warnings)
            .all(|(wanted, warning)| warning.contains(wanted.as_str()));
    if !matches {
        failures.push(format!(
            "warnings {warnings:?} do not match the expected {expected:?} (one substring per warning, in order)"
        ));
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
        warnings: Vec::new(),
        validate_calls: None,
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

    let validation =
        match host.validate_in(&fixture.settings, &fixture.request, &Cluster::from(fixture)) {
            Ok(validation) => validation,
            Err(error) => {
                report.got = "error".into();
                report
                    .failures
                    .push(format!("validate: {}", describe_error(&error)));
                return report;
            }
        };
    report.validate_calls = Some(validation.host_calls.clone());
    let calls: Vec<&HostCall> = validation.capability_calls().collect();
    report.host_calls += calls.len();
    check_calls(&validation, "validate", &mut report.failures);
    let response = &validation.response;
    report.got = if response.accepted { "allow" } else { "reject" }.into();
    report.message = response.message.clone();
    report.warnings = response.warnings.clone().unwrap_or_default();
    check_warnings(
        &fixture.expect.warnings_contain,
        &report.warnings,
        &mut report.failures,
    );
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
    // Without contextAware the policy may read a Namespace (the holes check), never the
    // NamespaceBaselines.
    let lists: Vec<&&HostCall> = calls
        .iter()
        .filter(|call| call.is_baseline_list())
        .collect();
    if !fixture.context_aware() && !lists.is_empty() {
        report.failures.push(format!(
            "contextAware is false but the policy listed the NamespaceBaselines {} time(s): {}",
            lists.len(),
            lists
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
    fn a_fixture_sets_what_the_host_answers() {
        let fixture = Fixture::parse(
            "x",
            r#"{"description": "d", "baselines": [{"kind": "NamespaceBaseline"}],
                "namespaces": [{"metadata": {"name": "team-a"}}],
                "hostError": "boom", "expect": {"allowed": false}}"#,
        )
        .expect("parses");
        let cluster = Cluster::from(&fixture);
        assert_eq!(cluster.host_error.as_deref(), Some("boom"));
        assert_eq!(cluster.baselines, fixture.baselines);
        assert_eq!(cluster.namespaces, fixture.namespaces);
    }

    #[test]
    fn warnings_one_substring_each_in_order() {
        let mut failures = Vec::new();
        let warnings = [
            "ingress rule 0 opens".to_owned(),
            "egress rule 1".to_owned(),
        ];
        check_warnings(&[], &[], &mut failures);
        check_warnings(
            &["rule 0".into(), "egress".into()],
            &warnings,
            &mut failures,
        );
        assert!(failures.is_empty(), "{failures:?}");
        check_warnings(&[], &warnings, &mut failures);
        check_warnings(&["rule 0".into()], &warnings, &mut failures);
        check_warnings(
            &["egress".into(), "rule 0".into()],
            &warnings,
            &mut failures,
        );
        check_warnings(&["rule 0".into()], &[], &mut failures);
        assert_eq!(failures.len(), 4, "{failures:?}");
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
