//! `src/api_client.rs` rebuilds kube's client stack layer for layer (to set `TCP_NODELAY`,
//! which kube does not expose). That copy is only right while kube builds its stack the way
//! it did when we copied it: this test compares kube-client's builder, from the source cargo
//! compiled, with the text we followed (`tests/kube-client-builder.rs.txt`), and fails with
//! the difference when a kube update changed it. The workspace pins kube to `~4.2` so that
//! such an update is a deliberate edit of Cargo.toml, and this test says what to re-read.

use std::path::{Path, PathBuf};

const FOLLOWED: &str = include_str!("kube-client-builder.rs.txt");
const START: &str = "impl TryFrom<Config> for ClientBuilder<GenericService>";
const LAST_FN: &str = "fn make_generic_builder";

/// Where cargo took kube-client's sources from for this workspace: the version Cargo.lock
/// pins, as cargo unpacked it to compile it (`$CARGO_HOME/registry/src/<index>/kube-client-<version>`).
/// Not `cargo metadata`: offline, it needs every package of the resolve downloaded, those of
/// other platforms and unused features too, which a fresh machine's build never fetches.
fn kube_client_dir() -> (String, PathBuf) {
    let lock_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", lock_path.display()));
    let version = lock
        .split("[[package]]")
        .find(|package| package.lines().any(|line| line == "name = \"kube-client\""))
        .and_then(|package| {
            package
                .lines()
                .find_map(|line| line.strip_prefix("version = \""))
                .and_then(|version| version.strip_suffix('"'))
        })
        .expect("kube-client is a dependency of the workspace, pinned in Cargo.lock")
        .to_owned();
    let cargo_home = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"),
        PathBuf::from,
    );
    let sources = cargo_home.join("registry/src");
    let unpacked = std::fs::read_dir(&sources)
        .unwrap_or_else(|error| panic!("reading {}: {error}", sources.display()))
        .filter_map(|index| Some(index.ok()?.path().join(format!("kube-client-{version}"))))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "kube-client {version} is not unpacked under {}: cargo unpacks it when it builds the reconciler",
                sources.display()
            )
        });
    (version, unpacked)
}

/// The builder's text: from `impl TryFrom<Config>` to the end of `make_generic_builder`.
fn builder_text(source: &str) -> Option<String> {
    let start = source.find(START)?;
    let last = start + source[start..].find(LAST_FN)?;
    let end = last + source[last..].find("\n}\n")? + 3;
    Some(source[start..end].to_owned())
}

#[test]
fn kube_builds_its_client_as_api_client_copies_it() {
    let (version, dir) = kube_client_dir();
    let path = dir.join("src/client/builder.rs");
    let source = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    let current = builder_text(&source)
        .unwrap_or_else(|| panic!("{} no longer has `{START}` … `{LAST_FN}`: kube {version} builds its client another way; re-read it and update src/api_client.rs and tests/kube-client-builder.rs.txt", path.display()));
    let followed = builder_text(FOLLOWED).expect("the followed copy has the builder");
    if current != followed {
        let first_difference = current
            .lines()
            .zip(followed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(followed.lines().count()));
        panic!(
            "kube-client {version} builds its client differently from the copy src/api_client.rs follows (first difference at line {} of the builder):\n  kube now: {:?}\n  followed: {:?}\nRe-read {} and update src/api_client.rs, then tests/kube-client-builder.rs.txt",
            first_difference + 1,
            current.lines().nth(first_difference).unwrap_or("<end>"),
            followed.lines().nth(first_difference).unwrap_or("<end>"),
            path.display()
        );
    }
}

#[test]
fn a_changed_builder_is_seen() {
    let followed = builder_text(FOLLOWED).expect("the followed copy has the builder");
    let changed = FOLLOWED.replace(
        "connector.enforce_http(false);",
        "connector.set_nodelay(true);",
    );
    assert_ne!(builder_text(&changed), Some(followed));
    assert_eq!(builder_text("fn unrelated() {}\n"), None);
}
