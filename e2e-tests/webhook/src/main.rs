//! `nsb-policy-server`: the stand-in policy-server for tests (see the crate's documentation).
//! Loads the module and the ClusterAdmissionPolicy, refuses to start when the policy refuses
//! its settings (as the policy-server does), listens on `--listen` with a certificate made at
//! start, writes the CA to `--ca-file` once it serves (the sign of readiness a test waits
//! for) and prints it, then logs one line per AdmissionReview to stdout.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Parser;
use namespace_baseline_testkit::kubewarden::ClusterAdmissionPolicy;
use namespace_baseline_webhook::{policy::Policy, server, tls};
use tokio_rustls::TlsAcceptor;

/// A stand-in for Kubewarden's policy-server: one validating policy, served over HTTPS.
#[derive(Debug, Parser)]
#[command(name = "nsb-policy-server")]
struct Args {
    /// Where to listen (HTTPS). The API server must reach it: 127.0.0.1 when the API server
    /// runs in this network namespace.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// The policy module.
    #[arg(long, default_value = "policy.wasm")]
    policy_wasm: PathBuf,
    /// The manifest holding the ClusterAdmissionPolicy (its settings, mode and name).
    #[arg(long, default_value = "deploy/admission-policy.yaml")]
    admission_policy: PathBuf,
    /// Where to write the CA (PEM) of the serving certificate, once serving: the webhook
    /// configuration's caBundle.
    #[arg(long)]
    ca_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("nsb-policy-server: cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("nsb-policy-server: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let admission_policy = ClusterAdmissionPolicy::read(&args.admission_policy)?;
    let wasm = std::fs::read(&args.policy_wasm)
        .with_context(|| format!("reading {}", args.policy_wasm.display()))?;
    let client = kube::Client::try_default()
        .await
        .context("a client for the API server (KUBECONFIG)")?;
    let policy = Policy::load(wasm, &admission_policy, client)?;
    let serving = tls::generate(args.listen)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let address = listener.local_addr()?;
    if let Some(path) = &args.ca_file {
        write_atomically(path, &serving.ca_pem)?;
    }
    println!(
        "serving ClusterAdmissionPolicy {} ({}) at https://{address}{}\nCA bundle:\n{}",
        admission_policy.name,
        args.policy_wasm.display(),
        policy.path(),
        serving.ca_pem.trim_end()
    );
    let acceptor = TlsAcceptor::from(Arc::new(serving.config));
    server::serve(listener, acceptor, Arc::new(policy)).await;
    Ok(())
}

/// Writes `text` to `path` through a temporary file, so a reader never sees half of it.
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}
