use std::process::ExitCode;

use clap::Parser;
use namespace_baseline_reconciler::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    match namespace_baseline_reconciler::main(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error.report());
            ExitCode::FAILURE
        }
    }
}
