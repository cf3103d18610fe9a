//! The test kit: what the cluster tests, the node tests, the cluster bench, the soak, the
//! demo and `nsb-manifests` share, each idea once: reading manifests (YAML documents) and
//! comparing them as objects ([`manifests`]), applying or creating them whatever their kind,
//! found by discovery ([`apply`]), labelled namespaces created many at once ([`namespaces`]), the API server's audit log ([`audit`]), kubeconfigs for a
//! ServiceAccount and where a kubeconfig reaches the API server ([`kubeconfig`]), the
//! reconciler as a local process probed over HTTP ([`process`]), Kubewarden's policy-server as
//! a local process, what its log says, its serving certificate, and its configuration and
//! webhook configurations rendered as Kubewarden's controller renders them for the policy
//! ([`policy_server`], [`policy_server_log`], [`serving_tls`], [`kubewarden`]), and one way to
//! wait for a condition ([`wait_until`]). No wasm host: the policy runs in the policy-server.
//!
//! The control plane itself is started by `e2e-tests/control-plane/start.sh` (the demo's and
//! the cluster tests' scripts call it); this crate reaches it through a kubeconfig.

pub mod apply;
pub mod audit;
pub mod kubeconfig;
pub mod kubewarden;
pub mod manifests;
pub mod namespaces;
pub mod policy_server;
pub mod policy_server_log;
pub mod process;
pub mod serving_tls;

use std::future::Future;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// Seconds since `start`, formatted for a log column: `[  12.3s]`.
pub fn stamp(start: Instant) -> String {
    format!("[{:>6.1}s]", start.elapsed().as_secs_f64())
}

/// How often [`wait_until`] checks.
pub const POLL_EVERY: Duration = Duration::from_millis(50);

/// Checks `check` every [`POLL_EVERY`] until it yields `Some`, or fails after `timeout` with
/// the last error seen (an `Err` from `check` means "not yet", and is kept for the message).
/// Returns the value and the time it took. The one way the test kit, the cluster and node
/// tests, the bench and the demo wait for something to happen: never a bare sleep.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, check: F) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    wait_until_every(what, timeout, POLL_EVERY, check).await
}

/// [`wait_until`], checking every `every` (a check that only reads memory may poll faster;
/// one that sends a packet, slower).
pub async fn wait_until_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok((value, started.elapsed())),
            Ok(None) => {}
            Err(error) => last_error = Some(error),
        }
        if started.elapsed() >= timeout {
            let detail =
                last_error.map_or_else(String::new, |error| format!(" (last error: {error:#})"));
            bail!("timed out after {timeout:?} waiting for {what}{detail}");
        }
        tokio::time::sleep(every).await;
    }
}

/// A minimal HTTP/1.1 GET on localhost: status code and body.
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("malformed HTTP response")?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_until_returns_the_value_or_times_out_with_the_last_error() {
        let mut calls = 0;
        let (value, _) = wait_until("the third call", Duration::from_secs(5), || {
            calls += 1;
            let calls = calls;
            async move { Ok((calls >= 3).then_some(calls)) }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);

        let started = Instant::now();
        let error = wait_until::<(), _, _>("nothing", Duration::from_millis(120), || async {
            bail!("not there")
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(started.elapsed() >= Duration::from_millis(120));
        assert!(
            error.contains("waiting for nothing") && error.contains("not there"),
            "{error}"
        );
    }
}
