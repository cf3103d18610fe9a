use std::process::ExitCode;

use clap::Parser;
use namespace_baseline_reconciler::runtime::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    // Usage errors exit with 1, not clap's 2: `plan` keeps 2 for "changes pending".
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match namespace_baseline_reconciler::main(cli).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", error.report());
            ExitCode::FAILURE
        }
    }
}
