//! What the demo, `nsb-manifests` and the cluster tests share: reading manifests, comparing
//! them as objects, applying them to a cluster with server-side apply whatever their kind,
//! kubeconfigs for the reconciler's ServiceAccount, and a GET of its health and metrics port.

pub mod apply;
pub mod kubeconfig;
pub mod manifests;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

/// Seconds since `start`, formatted for a log column: `[  12.3s]`.
pub fn stamp(start: Instant) -> String {
    format!("[{:>6.1}s]", start.elapsed().as_secs_f64())
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
