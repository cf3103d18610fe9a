//! Every e2e fixture through the playground, its inputs written as the page writes them
//! (settings and baselines as YAML, the request as JSON): the verdict, the message and the
//! number of baseline reads must be the ones the fixture expects of the policy. The page
//! itself is checked against the e2e runner's answers in headless Chromium
//! (`make playground-tests`).

use std::path::Path;

use namespace_baseline_formats::fixture::{self, Verdict};
use serde_json::Value;

use super::*;
use crate::editors::document;

fn yaml(value: Option<&Value>) -> String {
    match value {
        None => String::new(),
        Some(Value::Array(items)) if items.is_empty() => String::new(),
        Some(value) => {
            let converted = to_yaml(&value.to_string());
            assert!(converted.errors.is_empty(), "{:?}", converted.errors);
            converted.text.unwrap()
        }
    }
}

#[test]
fn every_fixture_gives_the_verdict_it_expects() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(fixture::DIR);
    let mut checked = 0;
    let mut failures = Vec::new();
    for fixture in fixture::load_all(&dir).unwrap_or_else(|error| panic!("{error}")) {
        let name = &fixture.name;
        let settings = yaml(Some(&fixture.settings));
        let baselines = yaml(Some(&Value::Array(fixture.baselines.clone())));
        let objects = yaml(Some(&Value::Array(
            fixture
                .namespaces
                .iter()
                .chain(&fixture.network_policies)
                .cloned()
                .collect(),
        )));
        let request = serde_json::to_string_pretty(&fixture.request).unwrap();
        let evaluation = evaluate(&EvaluateInput {
            settings: &settings,
            baselines: &baselines,
            host_error: fixture.host_error.as_deref().unwrap_or(""),
            objects: &objects,
            request: &request,
        });
        let expected = match fixture.verdict() {
            Verdict::SettingsInvalid => Outcome::SettingsInvalid,
            Verdict::Allowed => Outcome::Allowed,
            Verdict::Denied => Outcome::Denied,
        };
        checked += 1;
        if evaluation.outcome != expected {
            failures.push(format!(
                "{name}: expected {expected:?}, got {:?} {:?} {:?}",
                evaluation.outcome, evaluation.message, evaluation.errors
            ));
            continue;
        }
        if let Some(wanted) = fixture.expect.message_contains.as_deref()
            && !evaluation
                .message
                .as_deref()
                .is_some_and(|message| message.contains(wanted))
        {
            failures.push(format!(
                "{name}: message {:?} does not contain {wanted:?}",
                evaluation.message
            ));
        }
        let reads = evaluation.baseline_reads
            + evaluation.namespace_reads
            + evaluation.network_policy_reads;
        if let Some(wanted) = fixture.expect.host_calls
            && wanted != reads
        {
            failures.push(format!(
                "{name}: {reads} reads of the cluster, expected {wanted}"
            ));
        }
        let expected_warnings = &fixture.expect.warnings_contain;
        let warned = expected_warnings.len() == evaluation.warnings.len()
            && expected_warnings
                .iter()
                .zip(&evaluation.warnings)
                .all(|(wanted, warning)| warning.contains(wanted.as_str()));
        if !warned {
            failures.push(format!(
                "{name}: warnings {:?}, expected one containing each of {expected_warnings:?}",
                evaluation.warnings
            ));
        }
        if expected == Outcome::Allowed && evaluation.message.is_some() {
            failures.push(format!("{name}: allowed with a message"));
        }
    }
    assert!(
        checked > 100,
        "only {checked} fixtures in {}",
        dir.display()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn answers_are_json_the_page_reads() {
    let answer: Value = serde_json::from_str(&bindings::evaluate("{}", "", "", "", "{}")).unwrap();
    assert_eq!(answer["outcome"], "settingsInvalid");
    assert_eq!(answer["errors"][0]["field"], "settings");
    let wall: Value = serde_json::from_str(&bindings::render_wall(
        "metadata: {name: g}\nspec: {namespaceLabel: b}",
        "",
        "x",
    ))
    .unwrap();
    assert_eq!(wall["policies"][0], "nsb-g-default-deny");
    let yaml: Value = serde_json::from_str(&bindings::to_yaml("{\"a\": [1]}")).unwrap();
    assert_eq!(yaml["text"], "a:\n- 1\n");
    let broken: Value = serde_json::from_str(&bindings::to_yaml("{\"a\": ")).unwrap();
    assert_eq!(broken["errors"][0]["field"], "document");
    let cluster: Value = serde_json::from_str(&bindings::inspect_cluster(
        "metadata: {name: g}\nspec: {namespaceLabel: b}",
        "kind: Namespace\nmetadata: {name: a, labels: {b: x}}\n---\nkind: NetworkPolicy\nmetadata: {name: p, namespace: a}\nspec: {podSelector: {}, ingress: [{}]}",
    ))
    .unwrap();
    assert_eq!(cluster["holes"][0]["width"], "World");
    assert_eq!(cluster["holes"][0]["breach"], true);
    assert_eq!(bindings::version(), env!("CARGO_PKG_VERSION"));
}

/// Hostile text in any editor is answered, never panicked on, and the answer is the one
/// the page can show: an error next to that editor (and only that one) whenever the text
/// cannot be read there, a verdict with no error otherwise, and JSON the page parses back.
#[test]
fn hostile_text_is_answered_next_to_its_editor() {
    let inputs = [
        "",
        "\u{0}",
        "{{{{{{{{{{{{{{{{{{{{{{{{{{{{",
        &"[".repeat(10_000),
        "a: &a [*a]",
        "--- !!binary AAAA",
        "? - a\n: b",
        "request: {kind: 5}",
        "request: null",
        "\"just a string\"",
        "- - - -",
        "a: b\n\t c",
    ];
    let mut refused = 0;
    for text in inputs {
        for (field, settings, baselines, objects, request) in [
            (Field::Settings, text, "", "", "{}"),
            (Field::Baselines, "contextAware: true", text, "", "{}"),
            (Field::Objects, "contextAware: true", "", text, "{}"),
            (Field::Request, "contextAware: true", "", "", text),
        ] {
            let evaluation = evaluate(&EvaluateInput {
                settings,
                baselines,
                host_error: "",
                objects,
                request,
            });
            let case = format!("{field:?} = {text:.40?}: {evaluation:?}");
            let stray: Vec<_> = evaluation
                .errors
                .iter()
                .filter(|e| e.field != field)
                .collect();
            assert!(stray.is_empty(), "an error on another editor: {case}");
            match evaluation.outcome {
                Outcome::Allowed | Outcome::Denied => {
                    assert!(
                        evaluation.errors.is_empty(),
                        "a verdict with errors: {case}"
                    )
                }
                Outcome::SettingsInvalid | Outcome::InputError => {
                    assert!(!evaluation.errors.is_empty(), "no error shown: {case}");
                    refused += 1;
                }
            }
            // Text that is neither JSON nor YAML is always refused where it was typed.
            let unreadable = match field {
                Field::Baselines | Field::Objects => document::parse_all(text).is_err(),
                _ => document::parse(text).is_err(),
            };
            if unreadable {
                assert_eq!(evaluation.outcome, Outcome::InputError, "{case}");
            }
            let answer: Value = serde_json::from_str(&to_json(&evaluation))
                .unwrap_or_else(|error| panic!("not JSON ({error}): {case}"));
            assert_eq!(
                answer["outcome"],
                serde_json::to_value(evaluation.outcome).unwrap(),
                "{case}"
            );
        }

        // The holes and DNS panel answers too, with problems next to the objects editor.
        let cluster = inspect_cluster("metadata: {name: g}\nspec: {namespaceLabel: b}", text);
        assert!(
            cluster.errors.iter().all(|e| e.field == Field::Objects),
            "{text:.40?}: {cluster:?}"
        );
        if document::parse_all(text).is_err() {
            assert!(!cluster.errors.is_empty(), "{text:.40?}: {cluster:?}");
        }
        serde_json::from_str::<Value>(&to_json(&cluster))
            .unwrap_or_else(|error| panic!("not JSON ({error}): {text:.40?}"));

        // None of these is a namespace name: no wall, an error on the namespace, even for a
        // valid baseline (and hostile text as the baselines is refused there too).
        let wall = render_wall("metadata: {name: g}\nspec: {namespaceLabel: b}", "", text);
        assert!(
            wall.yaml.is_none(),
            "a wall in namespace {text:.40?}: {wall:?}"
        );
        assert!(
            wall.errors.iter().all(|e| e.field == Field::Namespace) && !wall.errors.is_empty(),
            "{text:.40?}: {wall:?}"
        );
        let wall = render_wall(text, text, "team-a");
        assert!(
            wall.yaml.is_none(),
            "a wall from baselines {text:.40?}: {wall:?}"
        );

        // Converted, or refused as a document; what converts reads back as the same value.
        let converted = to_yaml(text);
        match (&converted.text, converted.errors.as_slice()) {
            (Some(yaml), []) => assert_eq!(
                document::parse(yaml).unwrap(),
                document::parse(text).unwrap(),
                "{text:.40?} does not round-trip through {yaml:?}"
            ),
            (None, [error]) => assert_eq!(error.field, Field::Document, "{converted:?}"),
            _ => panic!("{text:.40?}: {converted:?}"),
        }
    }
    // The inputs are hostile: most are refused somewhere (a test that refused nothing would
    // be testing nothing).
    assert!(refused >= inputs.len(), "only {refused} refusals");
}
