//! One version everywhere the reconciler image and the policy artifact are named: the
//! workspace version of Cargo.toml is the tag `make image` gives the image and `make push`
//! gives the policy (`make image-ref`), the chart's version and appVersion (so the chart's
//! default `reconciler.image.tag`), and the tag in deploy/reconciler.yaml; the repositories
//! agree too (the Makefile's defaults, the chart's values, deploy/, metadata.yml's ociUrl).

use std::path::Path;
use std::process::Command;

use namespace_baseline_formats::yaml;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> Value {
    yaml::read_document(&Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing or not a string"))
}

/// `make image-ref`: the image and the policy reference, as `make image` and `make push`
/// name them without REGISTRY.
fn make_image_ref() -> (String, String) {
    let mut make = Command::new("make");
    make.args(["-s", "--no-print-directory", "image-ref"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // Not what an outer `make VAR=...` passes down, nor a REGISTRY of the environment.
    for name in [
        "MAKEFLAGS",
        "MFLAGS",
        "MAKEOVERRIDES",
        "MAKELEVEL",
        "REGISTRY",
        "IMAGE",
        "IMAGE_REPOSITORY",
        "POLICY_REF",
        "POLICY_REPOSITORY",
        "VERSION",
    ] {
        make.env_remove(name);
    }
    let output = make.output().expect("make runs");
    assert!(
        output.status.success(),
        "make image-ref: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "make image-ref printed {stdout:?}");
    (lines[0].to_owned(), lines[1].to_owned())
}

#[test]
fn the_image_tag_is_the_workspace_version_everywhere() {
    let (image, policy) = make_image_ref();
    let chart = read("charts/namespace-baseline/Chart.yaml");
    let values = read("charts/namespace-baseline/values.yaml");
    let metadata = read("metadata.yml");
    let deployment =
        yaml::read_documents(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/reconciler.yaml"))
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .find(|doc| doc["kind"] == "Deployment")
            .expect("deploy/reconciler.yaml has a Deployment");

    let repository = text(&values, "/reconciler/image/repository");
    assert_eq!(image, format!("{repository}:{VERSION}"), "make image-ref");
    assert_eq!(
        text(&chart, "/appVersion"),
        VERSION,
        "Chart.yaml appVersion"
    );
    assert_eq!(text(&chart, "/version"), VERSION, "Chart.yaml version");
    // An empty tag means the appVersion; a digest, when set, would replace the tag.
    assert_eq!(
        text(&values, "/reconciler/image/tag"),
        "",
        "values.yaml reconciler.image.tag"
    );
    assert_eq!(
        text(&values, "/reconciler/image/digest"),
        "",
        "values.yaml reconciler.image.digest"
    );
    assert_eq!(
        text(&deployment, "/spec/template/spec/containers/0/image"),
        image,
        "deploy/reconciler.yaml"
    );
    assert_eq!(
        text(&deployment, "/metadata/labels/app.kubernetes.io~1version"),
        VERSION,
        "deploy/reconciler.yaml app.kubernetes.io/version"
    );
    assert_eq!(
        policy,
        format!(
            "{}:v{VERSION}",
            text(&metadata, "/annotations/io.kubewarden.policy.ociUrl")
        ),
        "make image-ref (policy) and metadata.yml's ociUrl"
    );
}

/// The Containerfile takes the version and the revision from `make image` (no version of its
/// own to forget), and runs as the uid/gid of the Deployment's securityContext.
#[test]
fn the_containerfile_takes_its_version_from_the_build() {
    let containerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Containerfile"))
            .expect("Containerfile");
    let lines: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(lines.contains(&"FROM scratch"));
    assert!(
        lines.contains(&"ARG VERSION"),
        "ARG VERSION without a default"
    );
    assert!(
        lines.contains(&"ARG REVISION"),
        "ARG REVISION without a default"
    );
    assert!(lines.contains(&"USER 65532:65532"));
    assert!(lines.contains(&r#"ENTRYPOINT ["/namespace-baseline-reconciler"]"#));
    for label in ["version=\"${VERSION}\"", "revision=\"${REVISION}\""] {
        assert!(
            containerfile.contains(&format!("org.opencontainers.image.{label}")),
            "label {label}"
        );
    }
}
