//! The chart's alert rules read the reconciler's metrics by name, and so do their promtool
//! tests (e2e-tests/alerts/tests.yaml): a metric renamed or never exported would leave an
//! alert that can never fire while its tests, fed made-up series of that name, still pass.
//! This test renders the registry `/metrics` serves and fails naming every
//! `namespace_baseline_*` name the rules or their tests use that it does not serve. (The node
//! test n7 checks the same against what a real Prometheus scraped from the running reconciler.)

use std::collections::BTreeSet;
use std::path::Path;

use namespace_baseline_reconciler::base::metrics::Metrics;

const PREFIX: &str = "namespace_baseline_";

/// The sample names the registry serves (`_total`, `_bucket`, ... included).
fn exported() -> BTreeSet<String> {
    let text = Metrics::default().render().expect("the metrics render");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every `namespace_baseline_*` word of a file.
fn named_in(relative: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(PREFIX) {
        let word: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        rest = &rest[at + word.len()..];
        names.insert(word);
    }
    names
}

#[test]
fn every_metric_the_alert_rules_and_their_tests_name_is_exported() {
    let exported = exported();
    for file in [
        "charts/namespace-baseline/templates/prometheusrule.yaml",
        "e2e-tests/alerts/tests.yaml",
    ] {
        let named = named_in(file);
        // Not an empty or misread file: the rules read at least the leader, the Enforced,
        // Ready, unwalled, holes and API door gauges.
        assert!(named.len() >= 6, "{file} names only {named:?}");
        let missing: Vec<&String> = named.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics the reconciler does not export: {missing:?}; it exports {exported:?}"
        );
    }
}
