//! The `plan` subcommand as a process: exit codes 0 (nothing to change), 2 (changes
//! pending) and 1 (error, with a message naming the input), never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/plan-fixtures")
        .join(path)
}

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_namespace-baseline-reconciler"))
        .arg("plan")
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("running the reconciler binary")
}

fn path(relative: &str) -> String {
    fixture(relative).display().to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert!(
        !text(&output.stderr).contains("panicked"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn nothing_to_change_exits_0() {
    let output = plan(&[
        "--baseline",
        &path("converged/baseline.yaml"),
        "--manifests",
        &path("converged/cluster"),
    ]);
    assert_exit(&output, 0);
    assert!(text(&output.stdout).contains("No changes: the wall is in place."));
}

#[test]
fn pending_changes_exit_2_with_json_on_stdout() {
    let output = plan(&[
        "--baseline",
        &path("pending/baselines.yaml"),
        "--manifests",
        &path("pending/cluster"),
        "--output",
        "json",
    ]);
    assert_exit(&output, 2);
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is the JSON plan");
    assert_eq!(json["pending"], true);
    assert_eq!(json["summary"]["create"], 2);
    assert_eq!(json["summary"]["update"], 2);
    assert_eq!(json["summary"]["delete"], 2);
    assert_eq!(json["summary"]["orphaned"], 2);
    assert_eq!(json["baselines"].as_array().map(Vec::len), Some(2));
}

#[test]
fn text_output_lists_the_writes_and_notes_go_to_stderr() {
    let output = plan(&[
        "--baseline",
        &path("pending/baselines.yaml"),
        "--manifests",
        &path("pending/cluster"),
    ]);
    assert_exit(&output, 2);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("  + create   team-a/nsb-guarded-default-deny: missing"));
    assert!(stdout.contains("Plan: 2 to create, 2 to update, 2 to delete"));
    assert!(text(&output.stderr).contains("note: "));
    assert!(text(&output.stderr).contains("ConfigMap ignored"));
}

#[test]
fn bad_yaml_exits_1_naming_the_file_and_document() {
    let output = plan(&[
        "--baseline",
        &path("converged/baseline.yaml"),
        "--manifests",
        &path("bad/broken.yaml"),
    ]);
    assert_exit(&output, 1);
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("bad/broken.yaml: document 2: not valid YAML"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no plan on bad input");
}

#[test]
fn an_invalid_spec_exits_1_with_the_plan_and_the_reason() {
    let output = plan(&[
        "--baseline",
        &path("bad/invalid-spec.yaml"),
        "--manifests",
        &path("converged/cluster"),
        "-o",
        "json",
    ]);
    assert_exit(&output, 1);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["summary"]["invalid"], 1);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("bad/invalid-spec.yaml: document 1: NamespaceBaseline inverted: invalid spec: spec.namespaceLabel: '!=' is not supported"),
        "{stderr}"
    );
}

#[test]
fn usage_errors_exit_1_not_2() {
    // clap's own usage exit code (2) would read as "changes pending".
    for args in [&[][..], &["--cluster", "--manifests", "x"][..]] {
        let output = plan(args);
        assert_exit(&output, 1);
        assert!(text(&output.stderr).contains("Usage"));
    }
}

#[test]
fn an_unreachable_cluster_exits_1_saying_what_it_was_reading() {
    let dir = std::env::temp_dir().join(format!("nsb-plan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
         current-context: x\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_namespace-baseline-reconciler"))
        .args(["plan", "--cluster"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_exit(&output, 1);
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: listing namespaces (read-only)"),
        "{stderr}"
    );
}
