//! Every e2e fixture through the playground, its inputs written as the page writes them
//! (settings and baselines as YAML, the request as JSON): the verdict, the message and the
//! number of baseline reads must be the ones the fixture expects of the policy. The page
//! itself is checked against the e2e runner's answers in headless Chromium
//! (`make playground-tests`).

use std::path::Path;

use serde_json::Value;

use super::*;

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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e-tests/fixtures");
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "json") {
            continue;
        }
        let fixture: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let expect = &fixture["expect"];
        let settings = yaml(Some(
            fixture
                .get("settings")
                .unwrap_or(&Value::Object(Default::default())),
        ));
        let baselines = yaml(fixture.get("baselines"));
        let request = serde_json::to_string_pretty(
            fixture
                .get("request")
                .unwrap_or(&Value::Object(Default::default())),
        )
        .unwrap();
        let evaluation = evaluate(&EvaluateInput {
            settings: &settings,
            baselines: &baselines,
            host_error: fixture["hostError"].as_str().unwrap_or(""),
            request: &request,
        });
        let expected = if expect["settingsValid"] == false {
            Outcome::SettingsInvalid
        } else if expect["allowed"] == true {
            Outcome::Allowed
        } else {
            Outcome::Denied
        };
        checked += 1;
        if evaluation.outcome != expected {
            failures.push(format!(
                "{name}: expected {expected:?}, got {:?} {:?} {:?}",
                evaluation.outcome, evaluation.message, evaluation.errors
            ));
            continue;
        }
        if let Some(wanted) = expect["messageContains"].as_str()
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
        if let Some(wanted) = expect["hostCalls"].as_u64()
            && wanted as usize != evaluation.baseline_reads
        {
            failures.push(format!(
                "{name}: {} baseline reads, expected {wanted}",
                evaluation.baseline_reads
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
    let answer: Value = serde_json::from_str(&bindings::evaluate("{}", "", "", "{}")).unwrap();
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
    assert_eq!(bindings::version(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn hostile_text_is_answered_not_panicked() {
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
    for text in inputs {
        for (settings, baselines, request) in [
            (text, "", "{}"),
            ("contextAware: true", text, "{}"),
            ("contextAware: true", "", text),
        ] {
            let evaluation = evaluate(&EvaluateInput {
                settings,
                baselines,
                host_error: "",
                request,
            });
            let _ = to_json(&evaluation);
        }
        let _ = render_wall(text, text, text);
        let _ = to_yaml(text);
    }
}
