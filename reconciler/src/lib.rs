//! The Namespace Baseline reconciler: installs the network wall declared by each
//! NamespaceBaseline in every matching namespace, repairs drift, and reports through the
//! baseline's status. Every decision about the wall comes from `namespace-baseline-core`;
//! this crate translates between the core and the Kubernetes API.

pub mod api_client;
pub mod api_door;
pub mod caches;
pub mod cli;
pub mod controller;
pub mod crd;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod namespace_cache;
pub mod panics;
pub mod plan;
pub mod policy_cache;
pub mod probe;
pub mod retry;
pub mod run;
pub mod scope;
pub mod state;
pub mod status;
pub mod telemetry;
pub mod triggers;
pub mod watches;
pub mod writes;
pub mod written;

#[cfg(test)]
mod deploy_tests;
#[cfg(test)]
mod fixtures;

pub use error::{Error, ErrorClass, Result};

use std::process::ExitCode;

use cli::{Cli, Command};

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
        Command::Plan(options) => plan::main(&options).await,
        Command::ApiDoor(options) => {
            print!("{}", api_door::render(options.output).await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Probe(args) => Ok(match probe::agent::run(&args).await {
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
