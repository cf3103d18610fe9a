//! `plan`: what the reconciler would write, without writing.
//!
//! The decision is the reconcile's own, the core's `decide` (the wall, the drift and the
//! changes); this command only gathers the input it decides from ([`input`]: manifests
//! offline, or the cluster read-only), describes the decision ([`report`]) and prints it
//! ([`render`]). Named `cluster_plan` so as not to be taken for the core's `plan` module.
//! Exit codes: [`EXIT_NO_CHANGES`], [`EXIT_PENDING`], and 1 on any error.

use std::io::Write as _;
use std::process::ExitCode;

use crate::base::error::{PlanInputError, Result};
use crate::runtime::cli::{OutputFormat, PlanOptions};

pub mod input;
pub mod render;
pub mod report;

pub use input::{PlanInput, from_cluster, from_manifests};
pub use render::render_text;
pub use report::{EXIT_ERROR, EXIT_NO_CHANGES, EXIT_PENDING, JSON_VERSION, PrintedPlan, plan};

/// Runs `plan`: gathers the input, decides, prints; the exit code.
pub async fn main(options: &PlanOptions) -> Result<ExitCode> {
    let input = if options.cluster {
        from_cluster(options).await?
    } else {
        from_manifests(options)?
    };
    let report = plan(&input);
    let text = match options.output {
        OutputFormat::Text => {
            for note in &report.notes {
                eprintln!("note: {note}");
            }
            render_text(&report)
        }
        OutputFormat::Json => {
            // Serializing plain structs of strings, numbers and lists cannot fail.
            let mut json = serde_json::to_string_pretty(&report).unwrap_or_default();
            json.push('\n');
            json
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(PlanInputError::Output)?;
    for baseline in report.baselines.iter().filter(|b| b.invalid.is_some()) {
        eprintln!(
            "error: {}: NamespaceBaseline {}: {}",
            baseline.origin,
            baseline.name,
            baseline.invalid.as_deref().unwrap_or_default()
        );
    }
    Ok(ExitCode::from(report.exit_code()))
}

#[cfg(test)]
mod tests;
