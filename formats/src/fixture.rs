//! The admission fixture format (`e2e-tests/fixtures/*.json`, described in
//! `e2e-tests/README.md`) and its reader. Everything that reads a fixture reads it here, so
//! the defaults (`settings` and `request` `{}`, `settingsValid` true) and the checks (unknown
//! fields refused, a verdict required) are the same for the e2e runner, its tests and
//! benchmark, and the playground.

pub mod kwctl_session;

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The directory of the fixtures, from the workspace root.
pub const DIR: &str = "e2e-tests/fixtures";

/// One AdmissionReview case with its expected verdict.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fixture {
    /// The file stem; not part of the JSON.
    #[serde(skip_deserializing)]
    pub name: String,
    pub description: String,
    /// The policy settings, as in the ClusterAdmissionPolicy's `spec.settings`.
    #[serde(default = "empty_object")]
    pub settings: Value,
    /// The NamespaceBaseline objects the host capabilities list.
    #[serde(default)]
    pub baselines: Vec<Value>,
    /// The Namespace objects the host capabilities get by name (the holes check); a name not
    /// among them is not found.
    #[serde(default)]
    pub namespaces: Vec<Value>,
    /// The NetworkPolicy objects the host capabilities get by namespace and name (the pod
    /// rule's look-up of a wall, `podsWaitForWall`); one not among them is not found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_policies: Vec<Value>,
    /// When set, the Kubernetes host capabilities fail with this message.
    #[serde(default)]
    pub host_error: Option<String>,
    /// The `request` of the AdmissionReview, as kube-apiserver sends it.
    #[serde(default = "empty_object")]
    pub request: Value,
    pub expect: Expect,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// The verdict of `validate`; required unless `settingsValid` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<bool>,
    /// A substring of the rejection (or settings) message. Without it an accepted request
    /// must come back with no message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_contains: Option<String>,
    #[serde(default = "yes")]
    pub settings_valid: bool,
    /// How many host capability calls (logging excluded) `validate` must make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_calls: Option<usize>,
    /// One substring per warning the response must carry, in order. Empty (the default): the
    /// response carries no warning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings_contain: Vec<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn yes() -> bool {
    true
}

/// What a fixture expects, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// `validate_settings` refuses the settings; `validate` is not called.
    SettingsInvalid,
}

impl Fixture {
    /// Reads one fixture's JSON; `name` is its file stem.
    pub fn parse(name: &str, text: &str) -> Result<Self, String> {
        let mut fixture: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        fixture.name = name.to_owned();
        if fixture.expect.settings_valid && fixture.expect.allowed.is_none() {
            return Err("expect.allowed is required unless expect.settingsValid is false".into());
        }
        Ok(fixture)
    }

    /// Reads the fixture file `path`.
    pub fn read(path: &Path) -> Result<Self, Unreadable> {
        let name = path
            .file_stem()
            .map_or_else(String::new, |stem| stem.to_string_lossy().into_owned());
        fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| Self::parse(&name, &text))
            .map_err(|error| Unreadable {
                name: name.clone(),
                error,
            })
    }

    /// Whether the settings turn on context-aware mode.
    pub fn context_aware(&self) -> bool {
        self.settings.get("contextAware") == Some(&Value::Bool(true))
    }

    /// The NetworkPolicy `name` in `namespace` among [`Fixture::network_policies`].
    pub fn network_policy(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.network_policies.iter().find(|policy| {
            policy["metadata"]["namespace"] == namespace && policy["metadata"]["name"] == name
        })
    }

    /// The Namespace named `name` among [`Fixture::namespaces`].
    pub fn namespace(&self, name: &str) -> Option<&Value> {
        self.namespaces
            .iter()
            .find(|namespace| namespace["metadata"]["name"] == name)
    }

    pub fn verdict(&self) -> Verdict {
        if !self.expect.settings_valid {
            Verdict::SettingsInvalid
        } else if self.expect.allowed == Some(true) {
            Verdict::Allowed
        } else {
            Verdict::Denied
        }
    }

    /// What the runner's table shows as expected.
    pub fn expected(&self) -> String {
        match self.verdict() {
            Verdict::SettingsInvalid => "settings invalid",
            Verdict::Allowed => "allow",
            Verdict::Denied => "reject",
        }
        .to_owned()
    }
}

/// A fixture file that could not be read or parsed, kept as a failure of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    pub name: String,
    pub error: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fixture {}: {}", self.name, self.error)
    }
}

impl std::error::Error for Unreadable {}

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
        .filter(|path| {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            filter.is_none_or(|filter| stem.contains(filter))
        })
        .map(|path| Fixture::read(&path))
        .collect())
}

/// Every fixture of `dir`, or the first one that cannot be read.
pub fn load_all(dir: &Path) -> Result<Vec<Fixture>, String> {
    load_dir(dir, None)
        .map_err(|error| format!("reading {}: {error}", dir.display()))?
        .into_iter()
        .map(|loaded| loaded.map_err(|unreadable| unreadable.to_string()))
        .collect()
}

/// The fixture `name` of `dir` (`name.json`).
pub fn load(dir: &Path, name: &str) -> Result<Fixture, Unreadable> {
    Fixture::read(&dir.join(format!("{name}.json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_fixture() {
        let fixture = Fixture::parse(
            "x",
            r#"{"description": "d", "settings": {"contextAware": true}, "baselines": [{}],
                "namespaces": [{"metadata": {"name": "team-a"}}],
                "networkPolicies": [{"metadata": {"name": "wall", "namespace": "team-a"}}],
                "hostError": "boom", "request": {"uid": "1"},
                "expect": {"allowed": false, "messageContains": "m", "hostCalls": 1,
                           "warningsContain": ["w"]}}"#,
        )
        .expect("parses");
        assert_eq!(fixture.name, "x");
        assert!(fixture.context_aware());
        assert!(fixture.expect.settings_valid);
        assert_eq!(fixture.host_error.as_deref(), Some("boom"));
        assert_eq!(fixture.expect.host_calls, Some(1));
        assert_eq!(fixture.expect.warnings_contain, ["w"]);
        assert!(fixture.namespace("team-a").is_some());
        assert!(fixture.namespace("team-b").is_none());
        assert!(fixture.network_policy("team-a", "wall").is_some());
        assert!(fixture.network_policy("team-b", "wall").is_none());
        assert_eq!(fixture.verdict(), Verdict::Denied);
        assert_eq!(fixture.expected(), "reject");
    }

    #[test]
    fn defaults_are_empty_settings_and_request() {
        let fixture = Fixture::parse("d", r#"{"description": "d", "expect": {"allowed": true}}"#)
            .expect("parses");
        assert_eq!(fixture.settings, serde_json::json!({}));
        assert_eq!(fixture.request, serde_json::json!({}));
        assert!(fixture.baselines.is_empty());
        assert!(fixture.namespaces.is_empty());
        assert!(fixture.network_policies.is_empty());
        assert!(fixture.expect.warnings_contain.is_empty());
        assert!(!fixture.context_aware());
        assert_eq!(fixture.verdict(), Verdict::Allowed);
    }

    #[test]
    fn settings_only_fixtures_need_no_verdict() {
        let fixture = Fixture::parse(
            "s",
            r#"{"description": "d", "settings": {}, "expect": {"settingsValid": false}}"#,
        )
        .expect("parses");
        assert_eq!(fixture.verdict(), Verdict::SettingsInvalid);
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
    fn the_repository_fixtures_all_read() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DIR);
        let fixtures = load_all(&dir).expect("every fixture reads");
        assert!(fixtures.len() > 100, "only {} fixtures", fixtures.len());
        let filtered = load_dir(&dir, Some("ca-")).unwrap();
        assert!(!filtered.is_empty() && filtered.len() < fixtures.len());
        assert!(
            filtered
                .iter()
                .all(|f| f.as_ref().is_ok_and(|f| f.name.contains("ca-")))
        );
    }
}
