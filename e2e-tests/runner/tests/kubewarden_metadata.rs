//! The files Kubewarden reads besides the module agree with what the module does:
//!
//! - `hostCapabilities` of `metadata.yml` (Kubewarden 1.35+: the allow-list of host calls, as
//!   `namespace/operation`) is exactly the set of host calls the policy makes, both as written
//!   in `src/` and as made by the built `policy.wasm` while it answers every fixture;
//! - `questions-ui.yml` (Rancher's UI) asks for every field of the policy's settings once, and
//!   its defaults are settings the policy's own reader accepts;
//! - `artifacthub-pkg.yml` embeds `questions-ui.yml` as `kwctl scaffold artifacthub` does, and
//!   `artifacthub-repo.yml` names the policy's authors.
//!
//! Needs the built module: `POLICY_WASM`, else `policy.wasm` at the repository root (`make
//! policy.wasm`), like `size.rs`. Without it the host-call test fails; it never skips.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use namespace_baseline_core::admission::{PolicySettings, check_settings};
use namespace_baseline_e2e::{Cluster, PolicyHost};
use namespace_baseline_formats::{fixture, yaml};
use serde_json::{Map, Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read_yaml(path: &str) -> Value {
    yaml::read_document(&repo().join(path)).unwrap_or_else(|e| panic!("{e}"))
}

fn text<'a>(value: &'a Value, key: &str, file: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{file}: {key} missing or not a string in {value}"))
}

// ---------------------------------------------------------------------------------------------
// hostCapabilities

/// The binding every Kubewarden host capability is called on.
const BINDING: &str = "kubewarden";

/// `hostCapabilities` of metadata.yml, each entry checked to be one exact `namespace/operation`
/// (a wildcard would allow more than the policy calls).
fn declared_capabilities() -> BTreeSet<String> {
    let metadata = read_yaml("metadata.yml");
    let list = metadata["hostCapabilities"]
        .as_array()
        .unwrap_or_else(|| panic!("metadata.yml: hostCapabilities missing or not a list"));
    let mut declared = BTreeSet::new();
    for entry in list {
        let entry = entry.as_str().unwrap_or_else(|| {
            panic!("metadata.yml: hostCapabilities entry {entry} is not a string")
        });
        let (namespace, operation) = entry.split_once('/').unwrap_or_else(|| {
            panic!("metadata.yml: hostCapabilities entry {entry:?} is not namespace/operation")
        });
        assert!(
            !namespace.is_empty() && !operation.is_empty() && !entry.contains('*'),
            "metadata.yml: hostCapabilities entry {entry:?} must name one call exactly (namespace/operation, no wildcard)"
        );
        assert!(
            declared.insert(entry.to_owned()),
            "metadata.yml: hostCapabilities lists {entry:?} twice"
        );
    }
    declared
}

fn policy_wasm() -> (PathBuf, Vec<u8>) {
    namespace_baseline_e2e::built_policy()
}

fn difference(declared: &BTreeSet<String>, found: &BTreeSet<String>, found_where: &str) -> String {
    format!(
        "metadata.yml hostCapabilities {declared:?} differ from the host calls {found_where} {found:?}: \
         missing from metadata.yml {:?}, declared but never called {:?}. Update hostCapabilities \
         (and deploy/policy-server-rbac.yaml and contextAwareResources for a new Kubernetes read).",
        found.difference(declared).collect::<Vec<_>>(),
        declared.difference(found).collect::<Vec<_>>(),
    )
}

#[test]
fn the_declared_host_capabilities_are_the_calls_the_built_module_makes() {
    let declared = declared_capabilities();
    let (path, wasm) = policy_wasm();
    let mut host = PolicyHost::new(&wasm)
        .unwrap_or_else(|error| panic!("{} does not load: {error:?}", path.display()));
    let fixtures = fixture::load_all(&repo().join(fixture::DIR)).expect("the fixtures");
    assert!(!fixtures.is_empty(), "no fixture in {}", fixture::DIR);

    // Every (namespace/operation) the module called, with the first fixture that made it call.
    let mut observed: BTreeMap<String, String> = BTreeMap::new();
    let mut problems = Vec::new();
    for fixture in &fixtures {
        let mut calls = Vec::new();
        match host.validate_settings(&fixture.settings) {
            Ok(settings) => {
                calls.extend(settings.host_calls.clone());
                if settings.response.valid {
                    match host.validate_in(
                        &fixture.settings,
                        &fixture.request,
                        &Cluster::from(fixture),
                    ) {
                        Ok(validation) => calls.extend(validation.host_calls),
                        Err(error) => {
                            problems.push(format!("{}: validate: {error:?}", fixture.name))
                        }
                    }
                }
            }
            // The policy-server reads a guest error of validate_settings as invalid settings.
            Err(error) if error.guest_error().is_some() => {}
            Err(error) => problems.push(format!("{}: validate_settings: {error:?}", fixture.name)),
        }
        for call in calls.iter().filter(|call| !call.is_log()) {
            if call.binding != BINDING {
                problems.push(format!(
                    "{}: host call on binding {:?}: {call}",
                    fixture.name, call.binding
                ));
            }
            observed
                .entry(format!("{}/{}", call.namespace, call.operation))
                .or_insert_with(|| fixture.name.clone());
        }
    }
    assert!(
        problems.is_empty(),
        "the module could not answer every fixture, so its host calls are not all known:\n{}",
        problems.join("\n")
    );
    for (capability, first) in &observed {
        eprintln!("{capability}: first called by fixture {first}");
    }
    eprintln!("{} fixtures run through {}", fixtures.len(), path.display());
    let observed: BTreeSet<String> = observed.into_keys().collect();
    assert_eq!(
        declared,
        observed,
        "{}",
        difference(
            &declared,
            &observed,
            &format!("{} made while answering the fixtures", path.display())
        )
    );
}

/// The source of the module's non-test code, file by file. A `#[cfg(test)] mod x;` leaves out
/// the line and the file it names; a `#[cfg(test)] mod x { … }` ends the file's code (clippy's
/// `items_after_test_module`, denied in CI, keeps it last).
fn module_sources() -> Vec<(PathBuf, String)> {
    let src = repo().join("src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&src)
        .expect("src/")
        .map(|entry| entry.expect("a src/ entry").path())
        .collect();
    assert!(
        files
            .iter()
            .all(|path| path.extension().is_some_and(|ext| ext == "rs")),
        "src/ holds something other than .rs files ({files:?}): teach module_sources to read it"
    );
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut sources = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        let mut code = String::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "#[cfg(test)]" {
                let item = lines.next().unwrap_or_default().trim();
                if let Some(name) = item
                    .strip_prefix("mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
                {
                    test_files.insert(src.join(format!("{name}.rs")));
                    continue;
                }
                assert!(
                    item.starts_with("mod ") && item.ends_with('{'),
                    "{}: #[cfg(test)] on {item:?}: only test modules are expected",
                    path.display()
                );
                break;
            }
            code.push_str(line);
            code.push('\n');
        }
        sources.push((path.clone(), code));
    }
    sources.retain(|(path, _)| !test_files.contains(path));
    sources
}

/// The SDK's wrappers around the Kubernetes capabilities (kubewarden_policy_sdk::
/// host_capabilities::kubernetes), should the policy call one instead of `host_call`.
const SDK_KUBERNETES_WRAPPERS: [(&str, &str); 4] = [
    (
        "list_resources_by_namespace",
        "kubernetes/list_resources_by_namespace",
    ),
    ("list_all_resources", "kubernetes/list_resources_all"),
    ("get_resource", "kubernetes/get_resource"),
    ("can_i", "kubernetes/can_i"),
];

/// The string literal at the start of `text` (after whitespace), and what follows it.
fn string_literal(text: &str) -> Option<(&str, &str)> {
    let rest = text.trim_start().strip_prefix('"')?;
    let end = rest.find('"')?;
    Some((&rest[..end], &rest[end + 1..]))
}

/// The capabilities `code` calls: `host_call("kubewarden", "<namespace>", "<operation>", …)`
/// (also as `guest::host_call`, across lines) and the SDK's Kubernetes wrappers. `Err` for what
/// cannot be read that way: a call whose names are not literals, a renamed `host_call`, another
/// SDK capability.
fn written_calls(code: &str) -> Result<BTreeSet<String>, String> {
    let mut written = BTreeSet::new();
    if code.contains("host_call as") {
        return Err("host_call is renamed: this test finds calls by their name".to_owned());
    }
    for (at, _) in code.match_indices("host_call(") {
        // host_call(binding, namespace, operation, payload), each of the first three a literal.
        let mut rest = &code[at + "host_call(".len()..];
        let mut args = Vec::new();
        for _ in 0..3 {
            let Some((arg, after)) = string_literal(rest) else {
                break;
            };
            args.push(arg);
            rest = after.trim_start().strip_prefix(',').unwrap_or("");
        }
        let call = code[at..].lines().next().unwrap_or_default();
        let [binding, namespace, operation] = args[..] else {
            return Err(format!(
                "a host_call whose binding, namespace and operation are not string literals: {call}: write them as literals so that this test can read them"
            ));
        };
        if binding != BINDING {
            return Err(format!("a host_call on binding {binding:?}: {call}"));
        }
        written.insert(format!("{namespace}/{operation}"));
    }
    for line in code
        .lines()
        .filter(|line| line.contains("host_capabilities::"))
    {
        let wrapper = SDK_KUBERNETES_WRAPPERS
            .iter()
            .find(|(function, _)| line.contains(&format!("kubernetes::{function}")));
        match wrapper {
            Some((_, capability)) => {
                written.insert((*capability).to_owned());
            }
            None => {
                return Err(format!(
                    "an SDK host capability ({}): add what it calls to this test",
                    line.trim()
                ));
            }
        }
    }
    Ok(written)
}

#[test]
fn the_source_scan_reads_calls_as_they_are_written() {
    let code = r#"
        host_call(
            "kubewarden",
            "kubernetes",
            "list_resources_all",
            REQUEST.as_bytes(),
        )
        guest::host_call("kubewarden", "net", "v1/dns_lookup_host", &payload)
        let ok = kubewarden_policy_sdk::host_capabilities::kubernetes::can_i(request);
    "#;
    assert_eq!(
        written_calls(code),
        Ok(BTreeSet::from(
            [
                "kubernetes/list_resources_all",
                "net/v1/dns_lookup_host",
                "kubernetes/can_i"
            ]
            .map(str::to_owned)
        ))
    );
    for unreadable in [
        r#"host_call("kubewarden", NAMESPACE, "get_resource", &payload)"#,
        r#"host_call("other", "kubernetes", "get_resource", &payload)"#,
        "use kubewarden_policy_sdk::wapc_guest::host_call as call;",
        "let digest = host_capabilities::oci::get_manifest_digest(image);",
    ] {
        assert!(written_calls(unreadable).is_err(), "{unreadable}");
    }
}

#[test]
fn the_declared_host_capabilities_are_the_calls_written_in_src() {
    let declared = declared_capabilities();
    let mut written = BTreeSet::new();
    for (path, code) in module_sources() {
        let file = path
            .strip_prefix(repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        written.extend(written_calls(&code).unwrap_or_else(|error| panic!("{file}: {error}")));
    }
    assert_eq!(
        declared,
        written,
        "{}",
        difference(&declared, &written, "written in src/")
    );
}

// ---------------------------------------------------------------------------------------------
// questions-ui.yml

/// The fields of the policy's settings, as the policy-server hands them to it.
fn settings_fields() -> BTreeSet<String> {
    let Value::Object(fields) =
        serde_json::to_value(PolicySettings::default()).expect("settings serialize")
    else {
        panic!("the settings do not serialize to an object")
    };
    fields.into_iter().map(|(name, _)| name).collect()
}

/// What the policy's settings reader says about `settings`: `Err` with the reason, which starts
/// with "the settings cannot be read" when a field is unknown or of the wrong type.
fn read_settings(settings: &Value) -> Result<Value, String> {
    check_settings(settings.to_string().as_bytes())
        .map(|read| serde_json::to_value(read).expect("settings serialize"))
}

const UNREADABLE: &str = "the settings cannot be read";

fn questions() -> Vec<Value> {
    read_yaml("questions-ui.yml")["questions"]
        .as_array()
        .unwrap_or_else(|| panic!("questions-ui.yml: questions missing or not a list"))
        .clone()
}

#[test]
fn the_settings_reader_refuses_what_it_does_not_know() {
    // The premise of the next test: a question whose variable is not a settings field would
    // make the UI write settings the policy refuses.
    let error = read_settings(&json!({"contextAware": true, "guardSelector": []}))
        .expect_err("an unknown field is refused");
    assert!(
        error.starts_with(UNREADABLE) && error.contains("unknown field"),
        "{error}"
    );
}

#[test]
fn every_setting_has_one_question_whose_default_the_policy_reads() {
    let fields = settings_fields();
    let questions = questions();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut defaults = Map::new();
    for question in &questions {
        let variable = text(question, "variable", "questions-ui.yml").to_owned();
        *count.entry(variable.clone()).or_default() += 1;
        for key in ["label", "description", "group", "type"] {
            assert!(
                question[key]
                    .as_str()
                    .is_some_and(|value| !value.trim().is_empty()),
                "questions-ui.yml: question {variable}: {key} missing or empty"
            );
        }
        let default = question
            .get("default")
            .unwrap_or_else(|| panic!("questions-ui.yml: question {variable}: no default"))
            .clone();
        // The UI's types, as Kubewarden's published questions-ui.yml files write them.
        let kind = text(question, "type", "questions-ui.yml");
        let fits = match kind {
            "boolean" => default.is_boolean(),
            "string" => default.is_string(),
            "array[" => default
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            "enum" => {
                let options: Vec<&Value> = question["options"]
                    .as_array()
                    .unwrap_or_else(|| panic!("questions-ui.yml: enum {variable} without options"))
                    .iter()
                    .collect();
                default.is_string() && options.contains(&&default)
            }
            other => panic!(
                "questions-ui.yml: question {variable}: type {other:?} is not one this test knows"
            ),
        };
        assert!(
            fits,
            "questions-ui.yml: question {variable}: default {default} does not fit its type {kind}"
        );
        // Alone, the default is read: a known field, of the right type (it may still be refused
        // for what it means, e.g. nothing guarded).
        if let Err(error) = read_settings(&json!({ variable.clone(): default.clone() })) {
            assert!(
                !error.starts_with(UNREADABLE),
                "questions-ui.yml: question {variable} with its default {default}: {error}"
            );
        }
        defaults.insert(variable, default);
    }
    let duplicated: Vec<_> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(v, _)| v)
        .collect();
    assert!(
        duplicated.is_empty(),
        "questions-ui.yml asks more than once for {duplicated:?}"
    );
    let asked: BTreeSet<String> = count.into_keys().collect();
    assert_eq!(
        asked,
        fields,
        "questions-ui.yml: settings without a question {:?}, questions that are no setting {:?}",
        fields.difference(&asked).collect::<Vec<_>>(),
        asked.difference(&fields).collect::<Vec<_>>()
    );

    // Together, the defaults are settings the policy accepts and reads as given...
    let defaults = Value::Object(defaults);
    let read = read_settings(&defaults).unwrap_or_else(|error| {
        panic!("questions-ui.yml: the defaults {defaults} are refused: {error}")
    });
    assert_eq!(
        read, defaults,
        "questions-ui.yml: the defaults are not read as written"
    );
    // ...and those of the documented deployment.
    let policies = yaml::read_documents(&repo().join("deploy/admission-policy.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(policies.len(), 2, "the rules' policy and the Pod rule's");
    for deploy in &policies {
        assert_eq!(
            defaults, deploy["spec"]["settings"],
            "questions-ui.yml defaults and deploy/admission-policy.yaml settings ({}) differ",
            deploy["metadata"]["name"]
        );
    }
    // Every choice the UI offers is accepted.
    for question in questions
        .iter()
        .filter(|question| question["type"] == "enum")
    {
        let variable = text(question, "variable", "questions-ui.yml");
        for option in question["options"].as_array().expect("options") {
            let mut settings = defaults.clone();
            settings[variable] = option.clone();
            if let Err(error) = read_settings(&settings) {
                panic!("questions-ui.yml: {variable}: the option {option} is refused: {error}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Artifact Hub

#[test]
fn artifacthub_files_agree_with_metadata_and_questions() {
    let package = read_yaml("artifacthub-pkg.yml");
    let annotations = &package["annotations"];
    // What `kwctl scaffold artifacthub` embeds: the questions file's content.
    let embedded: Value = yaml::from_str(text(
        annotations,
        "kubewarden/questions-ui",
        "artifacthub-pkg.yml",
    ))
    .unwrap_or_else(|e| panic!("artifacthub-pkg.yml: kubewarden/questions-ui: {e}"));
    assert_eq!(
        embedded,
        read_yaml("questions-ui.yml"),
        "artifacthub-pkg.yml: kubewarden/questions-ui is not questions-ui.yml (regenerate it, see its header)"
    );
    // The policy link kwctl writes for a GitHub source.
    let metadata = read_yaml("metadata.yml");
    let source = text(
        &metadata["annotations"],
        "io.kubewarden.policy.source",
        "metadata.yml",
    );
    let version = text(&package, "version", "artifacthub-pkg.yml");
    let links = package["links"]
        .as_array()
        .expect("artifacthub-pkg.yml: links");
    assert!(
        links.contains(&json!({"name": "policy", "url": format!("{source}/releases/download/v{version}/policy.wasm")})),
        "artifacthub-pkg.yml: no policy link to {source}/releases/download/v{version}/policy.wasm in {links:?}"
    );
    // kwctl, policy-server and the controller are released from kubewarden/adm-controller; the
    // kwctl repository is archived.
    let raw =
        std::fs::read_to_string(repo().join("artifacthub-pkg.yml")).expect("artifacthub-pkg.yml");
    assert!(
        !raw.contains("github.com/kubewarden/kwctl"),
        "artifacthub-pkg.yml points at the archived kubewarden/kwctl repository"
    );
    assert!(
        raw.contains("kwctl scaffold artifacthub"),
        "artifacthub-pkg.yml: its header says how it is regenerated"
    );

    // artifacthub-repo.yml: a repository ID (a UUID) and owners, who are the package's
    // maintainers, the authors of metadata.yml.
    let repository = read_yaml("artifacthub-repo.yml");
    let id = text(&repository, "repositoryID", "artifacthub-repo.yml");
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    assert!(
        groups == [8, 4, 4, 4, 12] && id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "artifacthub-repo.yml: repositoryID {id:?} is not a UUID"
    );
    let owners = &repository["owners"];
    assert!(
        owners.as_array().is_some_and(|owners| !owners.is_empty()),
        "artifacthub-repo.yml: no owners"
    );
    assert_eq!(
        owners, &package["maintainers"],
        "artifacthub-repo.yml owners and artifacthub-pkg.yml maintainers differ"
    );
    let authors: Vec<Value> = text(
        &metadata["annotations"],
        "io.kubewarden.policy.author",
        "metadata.yml",
    )
    .split(',')
    .map(|author| {
        let (name, email) = author
            .trim()
            .strip_suffix('>')
            .and_then(|author| author.split_once(" <"))
            .unwrap_or_else(|| panic!("metadata.yml: author {author:?} is not `Name <email>`"));
        json!({"name": name, "email": email})
    })
    .collect();
    assert_eq!(
        owners,
        &Value::Array(authors),
        "artifacthub-repo.yml owners are not metadata.yml's authors"
    );
}
