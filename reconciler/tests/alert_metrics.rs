//! The chart's alert rules read metrics by name, and so do their promtool tests
//! (e2e-tests/alerts/tests.yaml): a metric renamed or never exported would leave an alert that
//! can never fire while its tests, fed made-up series of that name, still pass.
//!
//! - The reconciler's (`namespace_baseline_*`): this test renders the registry `/metrics`
//!   serves and fails naming every one the rules or their tests use that it does not serve.
//!   (The node test n7 checks the same against what a real Prometheus scraped from the running
//!   reconciler.)
//! - The admission side's (`apiserver_*`, `kubewarden_*`), which other programs export: each
//!   one the rules or their tests name must be in [`ADMISSION_METRICS`], which says where it
//!   comes from, as read in that program's source at the version named; and each one listed
//!   must be used, so that the list says what the rules read. Nothing here runs those programs:
//!   a rename upstream is caught by reading their sources again when the versions change.

use std::collections::BTreeSet;
use std::path::Path;

use namespace_baseline_reconciler::base::metrics::Metrics;

const PREFIX: &str = "namespace_baseline_";

/// The files that name metrics: the rules and their promtool tests.
const FILES: [&str; 2] = [
    "charts/namespace-baseline/templates/prometheusrule.yaml",
    "e2e-tests/alerts/tests.yaml",
];

/// The prefixes of the metrics of the admission side, exported by the API server and by
/// Kubewarden.
const ADMISSION_PREFIXES: [&str; 2] = ["apiserver_", "kubewarden_"];

/// The admission side's metrics the rules may read (as Prometheus names the samples: a
/// histogram's `_bucket`), each with where it comes from.
const ADMISSION_METRICS: &[(&str, &str)] = &[
    (
        "apiserver_admission_webhook_rejection_count",
        "kube-apiserver: k8s.io/apiserver pkg/admission/metrics (v0.36.5, ALPHA), a counter by \
         name (the webhook), type, operation, error_type (calling_webhook_error when the call \
         failed under failurePolicy Fail, no_error for a denial) and rejection_code; \
         incremented in pkg/admission/plugin/webhook/validating/dispatcher.go",
    ),
    (
        "apiserver_admission_webhook_fail_open_count",
        "kube-apiserver: k8s.io/apiserver pkg/admission/metrics (v0.36.5, ALPHA), a counter by \
         name and type: a call that failed under failurePolicy Ignore, the request let through",
    ),
    (
        "apiserver_admission_webhook_admission_duration_seconds_bucket",
        "kube-apiserver: k8s.io/apiserver pkg/admission/metrics (v0.36.5, STABLE), the \
         histogram webhook_admission_duration_seconds by name, type, operation and rejected \
         (buckets 0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25 s)",
    ),
    (
        "kubewarden_policy_total",
        "kubewarden-controller: internal/metrics/metrics.go (v1.35.0), an OpenTelemetry counter \
         of policy reconciles by name (the policy's unique name, clusterwide-<name>), \
         policy_server, module, mutating, namespace, failure_policy and policy_status; exported \
         only with Kubewarden's telemetry on (the kubewarden-controller chart's \
         telemetry.metrics), through its OpenTelemetry collector's Prometheus exporter",
    ),
];

/// The sample names the registry serves (`_total`, `_bucket`, ... included).
fn exported() -> BTreeSet<String> {
    let text = Metrics::default().render().expect("the metrics render");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every word of a file that starts with `prefix`: a metric name, not the tail of a longer
/// word nor a prefix (`…_namespace_baseline_x`, `apiserver_admission_*` are not).
fn named_in(relative: &str, prefix: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    let mut from = 0;
    while let Some(found) = text[from..].find(prefix) {
        let at = from + found;
        let word: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        from = at + word.len().max(1);
        // The tail of a longer name, or a prefix in prose (`apiserver_admission_webhook_*`).
        if text[..at].chars().next_back().is_some_and(is_word) || word.ends_with('_') {
            continue;
        }
        names.insert(word);
    }
    names
}

#[test]
fn every_metric_the_alert_rules_and_their_tests_name_is_exported() {
    let exported = exported();
    for file in FILES {
        let named = named_in(file, PREFIX);
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

#[test]
fn every_admission_metric_the_alert_rules_and_their_tests_name_is_a_known_one() {
    let declared: BTreeSet<String> = ADMISSION_METRICS
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    let mut used = BTreeSet::new();
    for file in FILES {
        let named: BTreeSet<String> = ADMISSION_PREFIXES
            .iter()
            .flat_map(|prefix| named_in(file, prefix))
            .collect();
        let unknown: Vec<&String> = named.difference(&declared).collect();
        assert!(
            unknown.is_empty(),
            "{file} names admission-side metrics that are not in ADMISSION_METRICS: {unknown:?}; \
             read the API server's or Kubewarden's source for the real name and add it with where \
             it comes from"
        );
        used.extend(named);
    }
    let unused: Vec<&String> = declared.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "ADMISSION_METRICS lists metrics no rule or test reads: {unused:?}"
    );
    for (name, source) in ADMISSION_METRICS {
        assert!(
            ADMISSION_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix)),
            "{name} has none of the prefixes {ADMISSION_PREFIXES:?}"
        );
        assert!(!source.is_empty(), "{name}: say where it comes from");
    }
}
