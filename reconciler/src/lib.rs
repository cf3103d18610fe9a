//! The Namespace Baseline reconciler: installs the network wall declared by each
//! NamespaceBaseline in every matching namespace, repairs drift, and reports through the
//! baseline's status. Every decision about the wall comes from `namespace-baseline-core`;
//! this crate translates between the core and the Kubernetes API.

// The layers, top to bottom: a module imports from its own layer or the ones below, never
// from above, and no files import each other in a circle (tests/layers.rs declares the order,
// checks both and prints the graph: `make layers`).

/// The one-shot commands: `plan`, `api-door`, `crd`.
pub mod commands;

/// The process: the command line, `run` (leadership terms, shutdown), HTTP, the API client.
pub mod runtime;

/// One leadership term's controller: reconcile, status, writes, Events.
pub mod reconcile;

/// The term's view of the cluster: caches, triggers, scope, the writes not seen yet.
pub mod view;

/// What every layer uses: the one `Error`, metrics, retry policies, panic catching.
pub mod base;

#[cfg(test)]
mod deploy_tests;
#[cfg(test)]
mod fixtures;

pub use base::error::{Error, ErrorClass, Result};

use std::process::ExitCode;

use base::panics;
use commands::{api_door, cluster_plan, crd};
use runtime::cli::{Cli, Command};
use runtime::{run, telemetry};

/// Runs the command line: `run` (the default), `crd` or `plan`; the process's exit code
/// when it does not fail.
pub async fn main(cli: Cli) -> Result<ExitCode> {
    match cli.command.unwrap_or(Command::Run) {
        Command::Crd => {
            print!("{}", crd::yaml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Run => {
            telemetry::init(cli.run.log_format)?;
            run::run(cli.run).await.map(|()| ExitCode::SUCCESS)
        }
        Command::Plan(options) => cluster_plan::main(&options).await,
        Command::ApiDoor(options) => {
            print!("{}", api_door::render(options.output).await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Probe(args) => Ok(match reconcile::probe::agent::run(&args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!(
                    "error: writing the probe's report to {}: {error}",
                    args.report.display()
                );
                ExitCode::FAILURE
            }
        }),
        Command::SelfCheck => {
            println!("{}", panics::self_check().await?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
