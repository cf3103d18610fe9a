//! Writes the NamespaceBaseline CRD to stdout: `cargo run -p namespace-baseline-reconciler
//! --bin crdgen > deploy/crd.yaml`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match namespace_baseline_reconciler::commands::crd::yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {}", error.report());
            ExitCode::FAILURE
        }
    }
}
