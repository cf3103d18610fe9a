//! `nsb-manifests`: the two checks CI runs on the manifests, without kubectl.
//!
//! ```text
//! nsb-manifests compare LEFT.yaml... --against RIGHT.yaml...
//!     The same objects on both sides (keyed by apiVersion, kind, namespace, name), equal
//!     field by field once parsed (comments, order, quoting and null fields do not count).
//! nsb-manifests apply [--dry-run] [--field-manager NAME] FILE...
//!     Server-side apply of every object, in order, to the cluster of KUBECONFIG, with strict
//!     field validation; a CRD is waited for until Established. --dry-run: dryRun=All.
//! ```
//!
//! Exit status 1 when the sides differ or any object is refused; 2 on a usage error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use namespace_baseline_testkit::apply::Applier;
use namespace_baseline_testkit::manifests::{self, Manifest};

const USAGE: &str = "usage:\n  nsb-manifests compare LEFT.yaml... --against RIGHT.yaml...\n  nsb-manifests apply [--dry-run] [--field-manager NAME] FILE...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("compare") => compare(&args[1..]),
        Some("apply") => apply(&args[1..]),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("nsb-manifests: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<Manifest>> {
    let mut all = Vec::new();
    for path in paths {
        all.extend(manifests::read(path)?);
    }
    Ok(all)
}

fn compare(args: &[String]) -> Result<bool> {
    let Some(split) = args.iter().position(|a| a == "--against") else {
        bail!("compare needs --against\n{USAGE}");
    };
    let left: Vec<PathBuf> = args[..split].iter().map(PathBuf::from).collect();
    let right: Vec<PathBuf> = args[split + 1..].iter().map(PathBuf::from).collect();
    if left.is_empty() || right.is_empty() {
        bail!("compare needs files on both sides\n{USAGE}");
    }
    let (left, right) = (read_all(&left)?, read_all(&right)?);
    let problems = manifests::compare(&left, &right)?;
    if problems.is_empty() {
        println!(
            "same {} objects on both sides",
            manifests::index(&left)?.len()
        );
        return Ok(true);
    }
    for problem in &problems {
        println!("  {problem}");
    }
    println!("{} difference(s)", problems.len());
    Ok(false)
}

fn apply(args: &[String]) -> Result<bool> {
    let mut dry_run = false;
    let mut field_manager = "nsb-manifests".to_owned();
    let mut files = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dry-run" => dry_run = true,
            "--field-manager" => {
                field_manager = args
                    .next()
                    .context("--field-manager needs a value")?
                    .clone();
            }
            flag if flag.starts_with("--") => bail!("unknown flag {flag}\n{USAGE}"),
            file => files.push(PathBuf::from(file)),
        }
    }
    if files.is_empty() {
        bail!("apply needs files\n{USAGE}");
    }
    let manifests = read_all(&files)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .context("connecting to the cluster of KUBECONFIG")?;
        let mut applier = Applier::new(client, &field_manager);
        applier.dry_run = dry_run;
        let mode = if dry_run { " (dry run)" } else { "" };
        let mut refused = 0;
        for manifest in &manifests {
            let key = manifest.key()?;
            let started = Instant::now();
            match applier.apply(&manifest.object).await {
                Ok(outcome) => println!(
                    "  ok       {:<10} {key}{mode}  [{}, {} ms]",
                    outcome.as_str(),
                    manifest.source.display(),
                    started.elapsed().as_millis()
                ),
                Err(error) => {
                    refused += 1;
                    println!(
                        "  REFUSED  {key}{mode}  [{}]\n           {error:#}",
                        manifest.source.display()
                    );
                }
            }
        }
        println!(
            "{} object(s) applied{mode}, {refused} refused",
            manifests.len() - refused
        );
        Ok(refused == 0)
    })
}
