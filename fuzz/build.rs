//! Embeds the e2e fixtures so the structure-aware target mutates real requests.

use std::{env, fs, path::PathBuf};

fn main() {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../e2e-tests/fixtures");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut paths: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {}", dir.display());
    let list: String = paths
        .iter()
        .map(|path| format!("include_str!({:?}),\n", path.canonicalize().unwrap()))
        .collect();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("fixtures.rs");
    fs::write(out, format!("pub const FIXTURES: &[&str] = &[\n{list}];\n")).unwrap();
}
