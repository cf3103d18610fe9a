//! `e2e-runner --wasm <path> --fixtures <dir> [--filter substring] [--report table|json]
//! [--kwctl-sessions <dir>]`
//!
//! Loads the built policy in a real waPC host and runs every fixture through
//! `validate_settings` and `validate`. Prints one row per fixture, the details of each
//! failure, and `N passed, M failed`; exits 1 on any failure or when no fixture was found.
//! `--report json` prints one JSON document instead (every fixture's expected and actual
//! verdict and message: the playground's browser test compares the page with it), with
//! the same exit code. `--kwctl-sessions DIR` also writes, for each fixture whose `validate`
//! ran, `DIR/<fixture>.yml`: its host calls and the fixture's answers as the session
//! `kwctl run --replay-host-capabilities-interactions` replays (`[]` when it made none), for
//! `e2e-tests/kwctl.bats`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use namespace_baseline_e2e::fixture::{self, Fixture, Report};
use namespace_baseline_e2e::{Cluster, PolicyHost, kwctl_session};

const USAGE: &str = "usage: e2e-runner --wasm <policy.wasm> --fixtures <dir> [--filter <substring>] [--report table|json] [--kwctl-sessions <dir>]";

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReportFormat {
    Table,
    Json,
}

struct Args {
    wasm: PathBuf,
    fixtures: PathBuf,
    filter: Option<String>,
    report: ReportFormat,
    kwctl_sessions: Option<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut wasm = None;
    let mut fixtures = None;
    let mut filter = None;
    let mut report = ReportFormat::Table;
    let mut kwctl_sessions = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--wasm" => wasm = Some(PathBuf::from(value()?)),
            "--fixtures" => fixtures = Some(PathBuf::from(value()?)),
            "--filter" => filter = Some(value()?),
            "--kwctl-sessions" => kwctl_sessions = Some(PathBuf::from(value()?)),
            "--report" => {
                report = match value()?.as_str() {
                    "table" => ReportFormat::Table,
                    "json" => ReportFormat::Json,
                    other => bail!("--report {other:?}: use table or json\n{USAGE}"),
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(Args {
        wasm: wasm.with_context(|| format!("--wasm is required\n{USAGE}"))?,
        fixtures: fixtures.with_context(|| format!("--fixtures is required\n{USAGE}"))?,
        filter,
        report,
        kwctl_sessions,
    })
}

/// Writes the kwctl session of each fixture whose `validate` ran (see the module's doc).
fn write_kwctl_sessions(dir: &Path, runs: &[(&Fixture, &Report)]) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = 0;
    for (fixture, report) in runs {
        let Some(calls) = &report.validate_calls else {
            continue;
        };
        let session = kwctl_session::session(&Arc::new(Cluster::from(*fixture)), calls)
            .map_err(|error| anyhow::anyhow!("kwctl session of {}: {error}", fixture.name))?;
        let path = dir.join(format!("{}.yml", fixture.name));
        std::fs::write(&path, session)
            .with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    Ok(written)
}

fn print_table(reports: &[Report]) {
    let width = |pick: fn(&Report) -> &str, title: &str| {
        reports
            .iter()
            .map(|r| pick(r).len())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let name_w = width(|r| &r.name, "fixture");
    let exp_w = width(|r| &r.expected, "expected");
    let got_w = width(|r| &r.got, "got");
    println!(
        "{:<name_w$}  {:<exp_w$}  {:<got_w$}  {:>10}  result",
        "fixture", "expected", "got", "host calls"
    );
    println!("{}", "-".repeat(name_w + exp_w + got_w + 10 + 14));
    for report in reports {
        println!(
            "{:<name_w$}  {:<exp_w$}  {:<got_w$}  {:>10}  {}",
            report.name,
            report.expected,
            report.got,
            report.host_calls,
            if report.passed() { "ok" } else { "FAIL" }
        );
    }
}

fn run() -> anyhow::Result<bool> {
    let args = parse_args()?;
    let wasm = std::fs::read(&args.wasm)
        .with_context(|| format!("cannot read the policy module {}", args.wasm.display()))?;
    let fixtures = fixture::load_dir(&args.fixtures, args.filter.as_deref())
        .with_context(|| format!("cannot list the fixtures in {}", args.fixtures.display()))?;

    let json = args.report == ReportFormat::Json;
    // With `--report json`, stdout holds the JSON document alone; the rest goes to stderr.
    let say = |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let started = Instant::now();
    let mut host = PolicyHost::new(&wasm)
        .with_context(|| format!("cannot load {} in a waPC host", args.wasm.display()))?;
    let protocol = host
        .protocol_version()
        .context("the policy does not answer protocol_version")?;
    say(format!(
        "policy {} ({} bytes, protocol {protocol}) loaded in {:.2?}",
        args.wasm.display(),
        wasm.len(),
        started.elapsed()
    ));

    let started = Instant::now();
    let reports: Vec<Report> = fixtures
        .iter()
        .map(|loaded| match loaded {
            Ok(fixture) => fixture::run(&mut host, fixture),
            Err(unreadable) => Report::unreadable(unreadable),
        })
        .collect();
    let elapsed = started.elapsed();

    if let Some(dir) = &args.kwctl_sessions {
        let runs: Vec<(&Fixture, &Report)> = fixtures
            .iter()
            .zip(&reports)
            .filter_map(|(loaded, report)| loaded.as_ref().ok().map(|fixture| (fixture, report)))
            .collect();
        let written = write_kwctl_sessions(dir, &runs)?;
        say(format!(
            "{written} kwctl sessions written to {}",
            dir.display()
        ));
    }

    let failed: Vec<&Report> = reports.iter().filter(|r| !r.passed()).collect();
    if json {
        let document = serde_json::json!({
            "policy": args.wasm.display().to_string(),
            "bytes": wasm.len(),
            "fixtures": reports,
            "passed": reports.len() - failed.len(),
            "failed": failed.len(),
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        print_table(&reports);
    }
    if !failed.is_empty() {
        say("\nfailures:".to_owned());
        for report in &failed {
            say(format!("- {}:", report.name));
            for failure in &report.failures {
                say(format!("    {failure}"));
            }
        }
    }
    if reports.is_empty() {
        say(format!(
            "\nno fixture found in {}{}",
            args.fixtures.display(),
            args.filter
                .as_deref()
                .map(|f| format!(" matching {f:?}"))
                .unwrap_or_default()
        ));
    } else {
        say(format!(
            "\n{} fixtures evaluated in {elapsed:.2?}",
            reports.len()
        ));
    }
    say(format!(
        "{} passed, {} failed",
        reports.len() - failed.len(),
        failed.len()
    ));
    Ok(failed.is_empty() && !reports.is_empty())
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("e2e-runner: {error:#}");
            ExitCode::FAILURE
        }
    }
}
