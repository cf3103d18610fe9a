//! The reconciler's entry point: parses the command line and runs the library's `main` as a
//! task of the runtime's worker pool.

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
    // Spawned onto the worker pool, not run here: the future `#[tokio::main]` blocks on
    // runs on the main thread, outside the pool that drives the sockets, so the controller
    // polled in it (run.rs drives each term in place) was woken across threads for every
    // watch event and every answer, a futex wake and a context switch each way. A panic
    // stays a panic.
    let result = match tokio::spawn(namespace_baseline_reconciler::main(cli)).await {
        Ok(result) => result,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", error.report());
            ExitCode::FAILURE
        }
    }
}
