//! `namespace-baseline-reconciler probe`: what runs inside a probe pod. It listens on a TCP
//! port, connects to the addresses it is given, resolves a name through the pod's own
//! resolver, and writes what it saw to its termination message (report.rs), the only way
//! out of a walled pod that needs no packet. Standard library and tokio only: the same
//! static binary as the reconciler, FROM scratch, non-root, read-only root filesystem.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::report::{Connect, ConnectResult, PodFindings, Resolve};

/// `probe`: the flags the reconciler gives each probe pod.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ProbeArgs {
    /// Listen on this TCP port (all addresses) and count who connects. (Not `--listen`:
    /// that is `run`'s global flag.)
    #[arg(long, value_name = "PORT")]
    pub listen_port: Option<u16>,

    /// How long to keep listening, from the start ("20s").
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub listen_for: Duration,

    /// Wait this long after the start (listening already) before connecting and resolving:
    /// an enforcer learns of a new pod a moment after it starts, and the wall is judged as it
    /// stands, not in that moment.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub connect_after: Duration,

    /// Connect to IP:PORT over TCP; repeatable.
    #[arg(long, value_name = "IP:PORT")]
    pub connect: Vec<String>,

    /// Resolve this name through /etc/resolv.conf.
    #[arg(long, value_name = "NAME")]
    pub resolve: Option<String>,

    /// The limit of each connection attempt and of the resolution.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Where the report goes besides stdout: the container's termination message file.
    #[arg(long, default_value = "/dev/termination-log")]
    pub report: PathBuf,
}

/// Runs the probe and writes its report; fails only when the report cannot be written.
pub async fn run(args: &ProbeArgs) -> std::io::Result<()> {
    let started = Instant::now();
    let mut report = PodFindings::default();
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let listener = match args.listen_port {
        Some(port) => match TcpListener::bind(("0.0.0.0", port)).await {
            Ok(listener) => {
                report.listening = Some(port);
                Some(tokio::spawn(accept(listener, accepted.clone())))
            }
            Err(error) => {
                report.error = Some(format!("cannot listen on TCP port {port}: {error}"));
                None
            }
        },
        None => None,
    };
    tokio::time::sleep(args.connect_after.saturating_sub(started.elapsed())).await;
    for target in &args.connect {
        report.connects.push(connect(target, args.timeout).await);
    }
    if let Some(name) = &args.resolve {
        report.resolve = Some(resolve(name, args.timeout).await);
    }
    if let Some(task) = listener {
        tokio::time::sleep(args.listen_for.saturating_sub(started.elapsed())).await;
        task.abort();
    }
    report.accepted = std::mem::take(&mut *accepted.lock().unwrap_or_else(PoisonError::into_inner));
    report.cpu_ms = super::usage::cpu_ms();
    report.max_rss_kib = super::usage::max_rss_kib();
    let message = report.to_message();
    println!("{message}");
    std::fs::write(&args.report, message)
}

async fn accept(listener: TcpListener, accepted: Arc<Mutex<Vec<String>>>) {
    loop {
        match listener.accept().await {
            Ok((mut stream, from)) => {
                accepted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(from.to_string());
                let _ = stream.write_all(b"namespace-baseline probe\n").await;
            }
            Err(error) => {
                eprintln!("accept: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connect(target: &str, timeout: Duration) -> Connect {
    let started = Instant::now();
    let (outcome, detail) = match tokio::time::timeout(timeout, TcpStream::connect(target)).await {
        Ok(Ok(_)) => (ConnectResult::Connected, String::new()),
        Ok(Err(error)) => (classify(&error), error.to_string()),
        Err(_) => (ConnectResult::Timeout, format!("no answer in {timeout:?}")),
    };
    Connect {
        target: target.to_owned(),
        outcome,
        ms: millis(started),
        detail,
    }
}

fn classify(error: &std::io::Error) -> ConnectResult {
    match error.kind() {
        ErrorKind::ConnectionRefused => ConnectResult::Refused,
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => ConnectResult::Unreachable,
        ErrorKind::TimedOut => ConnectResult::Timeout,
        _ => ConnectResult::Error,
    }
}

/// Resolves `name` as any program in the pod would: getaddrinfo, /etc/resolv.conf, its
/// search domains and nameserver (kube-dns, NodeLocal DNSCache, whatever the kubelet wrote).
async fn resolve(name: &str, timeout: Duration) -> Resolve {
    let started = Instant::now();
    let (addresses, detail) =
        match tokio::time::timeout(timeout, tokio::net::lookup_host((name, 0))).await {
            Ok(Ok(found)) => {
                let mut addresses: Vec<String> = found.map(|a| a.ip().to_string()).collect();
                addresses.sort();
                addresses.dedup();
                (addresses, String::new())
            }
            Ok(Err(error)) => (Vec::new(), error.to_string()),
            Err(_) => (Vec::new(), format!("no answer in {timeout:?}")),
        };
    Resolve {
        name: name.to_owned(),
        addresses,
        ms: millis(started),
        detail,
    }
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(report: PathBuf) -> ProbeArgs {
        ProbeArgs {
            listen_port: None,
            listen_for: Duration::from_millis(300),
            connect_after: Duration::ZERO,
            connect: Vec::new(),
            resolve: None,
            timeout: Duration::from_secs(2),
            report,
        }
    }

    /// On 127.0.0.1: a listener that answers, a port nobody listens on (refused), and the
    /// report written to its file as the kubelet would read it.
    #[tokio::test]
    async fn it_reports_what_it_reached_and_what_refused_it() {
        let open = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open_address = open.local_addr().unwrap().to_string();
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_address = closed.local_addr().unwrap().to_string();
        drop(closed);
        let dir = std::env::temp_dir().join(format!("nsb-probe-agent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("termination-log");
        let mut args = args(file.clone());
        args.connect = vec![open_address.clone(), closed_address.clone()];
        run(&args).await.unwrap();
        let report = PodFindings::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            report.connect_to(&open_address).unwrap().outcome,
            ConnectResult::Connected
        );
        assert_eq!(
            report.connect_to(&closed_address).unwrap().outcome,
            ConnectResult::Refused
        );
        assert_eq!(report.listening, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Its listener counts a connection made while it listens, and it keeps listening for
    /// the time asked.
    #[tokio::test]
    async fn its_listener_counts_who_connected() {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let dir = std::env::temp_dir().join(format!("nsb-probe-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("termination-log");
        let mut args = args(file.clone());
        args.listen_port = Some(port);
        args.listen_for = Duration::from_millis(800);
        let started = Instant::now();
        let probe = tokio::spawn(async move { run(&args).await });
        let mut connected = false;
        for _ in 0..40 {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                connected = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(connected, "the probe's listener never answered");
        probe.await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(800));
        let report = PodFindings::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(report.listening, Some(port));
        assert_eq!(report.accepted.len(), 1, "{report:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_name_that_cannot_resolve_is_a_failure_with_the_reason() {
        // `.invalid` never resolves (RFC 6761); a machine without DNS fails it too.
        let found = resolve("nothing.invalid", Duration::from_secs(5)).await;
        assert!(!found.resolved(), "{found:?}");
        assert!(!found.detail.is_empty());
        let local = resolve("localhost", Duration::from_secs(5)).await;
        assert!(local.resolved(), "{local:?}");
    }
}
