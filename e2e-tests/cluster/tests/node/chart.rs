//! The Helm chart (charts/namespace-baseline) installed on the test node as a user would
//! install it: the reconciler image that node-tests.sh imported (`NSB_RECONCILER_IMAGE`), the
//! API door that `api-door` prints for this cluster, the admission policy left out (n10 applies
//! the chart's ClusterAdmissionPolicies through the node's Kubewarden, rendered by
//! [`template`]). One installer for every node test that runs the chart (n4, n7): a test adds
//! only the values that make it what it is.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use namespace_baseline_cluster_tests::repo_root;

/// The release name, as README installs it.
pub(crate) const RELEASE: &str = "namespace-baseline";

/// Runs helm against the node's API server: success and output.
pub(crate) fn helm_run(args: &[&str]) -> (bool, String) {
    let output = helm_output(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn helm_output(args: &[&str]) -> std::process::Output {
    let helm = std::env::var("NSB_HELM_BIN").unwrap_or_else(|_| {
        panic!("NSB_HELM_BIN is not set: node-tests.sh builds helm (charts/install-helm.sh)")
    });
    let kubeconfig = std::env::var("TEST_KUBECONFIG").expect("TEST_KUBECONFIG");
    let home = std::env::temp_dir().join("nsb-node-tests-helm");
    Command::new(&helm)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("running helm")
}

pub(crate) fn helm(args: &[&str]) -> String {
    let (ok, text) = helm_run(args);
    assert!(ok, "helm {args:?} failed:\n{text}");
    text
}

/// The installed release; uninstalled (and waited for) when dropped, also on a failure.
pub(crate) struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let (ok, text) = helm_run(&[
            "uninstall",
            RELEASE,
            "--namespace",
            "default",
            "--wait",
            "--timeout",
            "120s",
        ]);
        if !ok {
            eprintln!("!! helm uninstall {RELEASE} failed: {text}");
        }
    }
}

/// A chart installed by [`install`].
pub(crate) struct Installed {
    pub release: Release,
    /// The API door values, as `api-door -o values` printed them.
    pub door_text: String,
    /// How long `helm upgrade --install --wait` took.
    pub took: Duration,
}

/// Installs the chart into `default` (adopting the namespace and RBAC the harness applied
/// before) and waits for it (`--wait`, 180 s); `values` are more helm arguments (`--set`,
/// `--set-json`), the test's own.
pub(crate) fn install(values: &[String]) -> Installed {
    let (release_values, door_text) = release_values(values);
    let chart = repo_root().join("charts/namespace-baseline");
    let mut args: Vec<String> = [
        "upgrade",
        "--install",
        RELEASE,
        &chart.to_string_lossy(),
        "--namespace",
        "default",
        "--take-ownership",
        "--wait",
        "--timeout",
        "180s",
    ]
    .map(String::from)
    .to_vec();
    args.extend(release_values);
    let started = Instant::now();
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>());
    Installed {
        release: Release,
        door_text,
        took: started.elapsed(),
    }
}

/// One template of the chart (`show_only`, e.g. `templates/podmonitor.yaml`) rendered with the
/// values [`install`] gives the release plus `values`: what the release would hold with them.
pub(crate) fn template(values: &[String], show_only: &str) -> String {
    let (release_values, _) = release_values(values);
    let chart = repo_root().join("charts/namespace-baseline");
    let mut args: Vec<String> = [
        "template",
        RELEASE,
        &chart.to_string_lossy(),
        "--namespace",
        "default",
        "--show-only",
        show_only,
    ]
    .map(String::from)
    .to_vec();
    args.extend(release_values);
    let output = helm_output(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("helm template prints UTF-8")
}

/// The values of the release: this cluster's API door, no admission policy (the tests that
/// need it apply it themselves), the reconciler image node-tests.sh imported, then the test's
/// own `values`; and the door's text.
fn release_values(values: &[String]) -> (Vec<String>, String) {
    let image = std::env::var("NSB_RECONCILER_IMAGE").unwrap_or_else(|_| {
        panic!(
            "NSB_RECONCILER_IMAGE is not set: the chart needs the reconciler image, built by `make image` and imported into the node by e2e-tests/node-tests.sh"
        )
    });
    let (repository, tag) = image
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("image {image} has no tag"));
    let (door_values, door_text) = api_door_values();
    let mut args: Vec<String> = [
        "-f",
        &door_values.to_string_lossy(),
        "--set",
        "admissionPolicy.enabled=false",
        "--set",
        &format!("reconciler.image.repository={repository}"),
        "--set",
        &format!("reconciler.image.tag={tag}"),
    ]
    .map(String::from)
    .to_vec();
    args.extend(values.iter().cloned());
    (args, door_text)
}

/// `--set name=value` for [`install`].
pub(crate) fn set(name: &str, value: impl std::fmt::Display) -> [String; 2] {
    ["--set".into(), format!("{name}={value}")]
}

/// The API door for this cluster, printed by the reconciler from the EndpointSlices of
/// default/kubernetes (README: "Install in a cluster"), as a values file for `helm -f`: its
/// path and text.
fn api_door_values() -> (PathBuf, String) {
    let door_values =
        std::env::temp_dir().join(format!("nsb-node-api-door-{}.yaml", std::process::id()));
    let binary =
        std::env::var("NSB_RECONCILER_BIN").expect("NSB_RECONCILER_BIN: the reconciler binary");
    let printed = Command::new(&binary)
        .args(["api-door", "-o", "values"])
        .env(
            "KUBECONFIG",
            std::env::var("TEST_KUBECONFIG").expect("TEST_KUBECONFIG"),
        )
        .output()
        .expect("running api-door");
    assert!(
        printed.status.success(),
        "api-door failed: {}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let door_text = String::from_utf8(printed.stdout).unwrap();
    std::fs::write(&door_values, &door_text).unwrap();
    (door_values, door_text)
}
