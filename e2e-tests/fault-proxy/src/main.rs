//! `fault-proxy --upstream https://127.0.0.1:6443 --ca ca.crt [--listen 127.0.0.1:0]
//!  [--probability 0.3] [--seed 1] [--ca-out proxy-ca.crt]`
//!
//! Runs the fault-injecting proxy by hand (the cluster tests use the library in-process):
//! point a kubeconfig's `server` at the printed URL and its certificate authority at
//! `--ca-out`. Prints what was injected every 10 s and on Ctrl-C.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use fault_proxy::{FaultProxy, Upstream};

const USAGE: &str = "usage: fault-proxy --upstream <https url> --ca <pem file> [--listen <addr>] [--probability <0..1>] [--seed <n>] [--ca-out <file>]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut upstream = None;
    let mut ca = None;
    let mut listen: SocketAddr = "127.0.0.1:0".parse()?;
    let mut probability = 0.3;
    let mut seed = 1;
    let mut ca_out = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--upstream" => upstream = Some(value()?),
            "--ca" => ca = Some(value()?),
            "--listen" => listen = value()?.parse()?,
            "--probability" => probability = value()?.parse()?,
            "--seed" => seed = value()?.parse()?,
            "--ca-out" => ca_out = Some(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let upstream = upstream.with_context(|| format!("--upstream is required\n{USAGE}"))?;
    let ca = ca.with_context(|| format!("--ca is required\n{USAGE}"))?;
    let ca_pem = std::fs::read(&ca).with_context(|| format!("reading {ca}"))?;
    let proxy = FaultProxy::start_on(Upstream::new(&upstream, &ca_pem)?, seed, listen)?;
    if let Some(path) = &ca_out {
        std::fs::write(path, proxy.ca_pem()).with_context(|| format!("writing {path}"))?;
    }
    proxy.set_probability(probability);
    println!(
        "fault proxy {} -> {upstream}, fault probability {probability}, CA {}",
        proxy.url(),
        ca_out.as_deref().unwrap_or("(not written: use --ca-out)")
    );
    let mut ticker = tokio::time::interval(Duration::from_secs(10));
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => println!("{}", proxy.report()),
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    println!("{}", proxy.report());
    Ok(())
}
