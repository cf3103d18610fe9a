//! The reconciler's Kubernetes clients: kube's default stack, with `TCP_NODELAY` on its
//! connections and our retry (base/retry.rs: it tells a write of each 429, and retries the
//! failures of a request that may be sent twice); and the client of hedged writes, whose
//! every request opens a connection of its own.
//!
//! kube 4.2 builds its connector with hyper-util's default, Nagle's algorithm on. On a new
//! connection whose TLS session is resumed, the client's `Finished` and its first request
//! leave as two small writes; Nagle holds the request until the server acknowledges the
//! `Finished`, which a Go API server, with nothing to send then, delays by Linux's delayed
//! acknowledgement: the first request of every resumed connection (the first repair after a
//! restart, any write finding no idle connection) waited for it. Go's own clients set
//! `TCP_NODELAY`, as this one does.
//!
//! The pooled connections idle after a burst are capped at [`IDLE_CONNECTIONS`]: a pass
//! writes `--concurrency` requests at a time, each on a connection of its own (HTTP/1.1, as
//! kube speaks it), and hyper-util would keep every one of them open, idle, for 90 s, each
//! with its TLS and HTTP buffers on both ends. At rest this reconciler sends a Lease renewal
//! and a repair now and then, which [`IDLE_CONNECTIONS`] covers; a burst beyond it opens new
//! connections (a resumed TLS session). The measurements: docs/benchmarks-history.md,
//! "Measurements behind the reconciler's code".
//!
//! kube does not expose its connector, so the stack is rebuilt here from kube's public parts,
//! layer for layer as `ClientBuilder::try_from(Config)` builds it (kube-client 4.2,
//! `client/builder.rs`, without its `gzip` feature, which this workspace does not enable).
//! A configuration with a proxy is refused with the error kube's builder gives it: the
//! workspace enables neither of kube's proxy features (`http-proxy`, `socks5`).

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::ServiceBuilder;
use tower::retry::RetryLayer;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::TraceLayer;
use tracing::Span;

use crate::base::error::{Error, Result};
use crate::base::retry::ServerRetry;
use crate::runtime::hedged_reads::HedgedReads;

/// The idle pooled connections kept per API server; the rest close as they go idle.
pub const IDLE_CONNECTIONS: usize = 8;

/// A client for `config`, as kube would build it but with `TCP_NODELAY` set and our retry
/// (`ServerRetry`) in place of kube's.
pub fn client(config: Config) -> Result<Client> {
    build(config, Stack::Pooled, None)
}

/// The reconciler's client: [`client`]'s, with its reads hedged after `hedge_reads_after`
/// (`hedged_reads.rs`; `None`: never).
pub fn reconciler_client(config: Config, hedge_reads_after: Option<Duration>) -> Result<Client> {
    build(config, Stack::Pooled, hedge_reads_after)
}

/// The client of hedged writes (reconcile/writes.rs): the same stack, except that each
/// request opens a connection of its own, closed after its answer (a stalled request's
/// pooled connection may be the stalled one; in a real cluster a new connection may reach
/// another API server instance behind the load balancer).
pub fn hedge_client(config: Config) -> Result<Client> {
    build(config, Stack::Hedge, None)
}

/// How a client's requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    /// kube's: pooled connections.
    Pooled,
    /// A connection per request.
    Hedge,
}

/// The connections under a client: pooled, or one per request.
fn connections(
    config: &Config,
    stack: Stack,
) -> Result<
    impl tower::Service<
        Request<Body>,
        Response = Response<Incoming>,
        Error: Into<tower::BoxError> + Send,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static,
> {
    let wrap = |error: kube::Error| Error::Client(Box::new(error));
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(wrap)?;
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let mut builder = hyper_util::client::legacy::Builder::new(TokioExecutor::new());
    builder.pool_max_idle_per_host(match stack {
        Stack::Pooled => IDLE_CONNECTIONS,
        Stack::Hedge => 0,
    });
    let connections: hyper_util::client::legacy::Client<_, Body> = builder.build(connector);
    Ok(connections)
}

fn build(config: Config, stack: Stack, hedge_reads_after: Option<Duration>) -> Result<Client> {
    let wrap = |error: kube::Error| Error::Client(Box::new(error));
    if let Some(proxy_url) = &config.proxy_url {
        let proxy_url = proxy_url.clone();
        let protocol_feature = match proxy_url.scheme_str() {
            Some("socks5") => "kube/socks5",
            Some("http" | "https") => "kube/http-proxy",
            _ => return Err(wrap(kube::Error::ProxyProtocolUnsupported { proxy_url })),
        };
        return Err(wrap(kube::Error::ProxyProtocolDisabled {
            proxy_url,
            protocol_feature,
        }));
    }
    let hyper_client = HedgedReads::new(
        connections(&config, stack)?,
        connections(&config, Stack::Hedge)?,
        hedge_reads_after,
    );

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(ServerRetry::default())),
        )
        .option_layer(config.auth_layer().map_err(wrap)?)
        .layer(config.extra_headers_layer().map_err(wrap)?)
        .layer(
            // kube's spans and messages (under this module's log target instead of
            // `kube_client::client::builder`).
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request<Body>| {
                    tracing::debug_span!(
                        "HTTP",
                        http.method = %request.method(),
                        http.url = %request.uri(),
                        http.status_code = tracing::field::Empty,
                        otel.name = request.extensions().get::<&'static str>().unwrap_or(&"HTTP"),
                        otel.kind = "client",
                        otel.status_code = tracing::field::Empty,
                    )
                })
                .on_request(|_: &Request<Body>, _: &Span| tracing::debug!("requesting"))
                .on_response(|response: &Response<Incoming>, _: Duration, span: &Span| {
                    let status = response.status();
                    span.record("http.status_code", status.as_u16());
                    if status.is_client_error() || status.is_server_error() {
                        span.record("otel.status_code", "ERROR");
                    }
                })
                .on_body_chunk(())
                .on_eos(|_: Option<&http::HeaderMap>, _: Duration, _: &Span| {
                    tracing::debug!("stream closed");
                })
                .on_failure(
                    |class: ServerErrorsFailureClass, _: Duration, span: &Span| {
                        span.record("otel.status_code", "ERROR");
                        match class {
                            ServerErrorsFailureClass::StatusCode(status) => {
                                span.record("http.status_code", status.as_u16());
                                tracing::error!("failed with status {status}");
                            }
                            ServerErrorsFailureClass::Error(error) => {
                                tracing::error!("failed with error {error}");
                            }
                        }
                    },
                ),
        )
        .map_err(tower::BoxError::from)
        .service(hyper_client);
    Ok(Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::HeaderValue;
    use http::header::USER_AGENT;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::base::retry::Idempotent;

    const VERSION: &str = r#"{"major":"1","minor":"36","gitVersion":"v1.36.5","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#;

    /// A plain-HTTP API server that answers each request in turn with the next of `statuses`
    /// (the version document on 200) and keeps the head of every request it read.
    async fn server(statuses: &'static [u16]) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        tokio::spawn(async move {
            for &status in statuses {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    if socket.read(&mut byte).await.unwrap() == 0 {
                        break;
                    }
                    head.push(byte[0]);
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).to_lowercase());
                let body = if status == 200 { VERSION } else { "{}" };
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                socket.write_all(response.as_bytes()).await.unwrap();
            }
        });
        (url, heads)
    }

    /// The layers kube's own client has are all there: the cluster URL, the bearer token, the
    /// extra headers (the reconciler's User-Agent) and the retry of a 503.
    #[tokio::test]
    async fn requests_go_out_as_kubes_own_client_sends_them() {
        let (url, heads) = server(&[503, 200]).await;
        let mut config = Config::new(url.parse().unwrap());
        config.auth_info.token = Some("secret-token".to_owned().into());
        config.headers.push((
            USER_AGENT,
            HeaderValue::from_static("namespace-baseline-reconciler/test"),
        ));
        let version = client(config).unwrap().apiserver_version().await.unwrap();
        assert_eq!(version.git_version, "v1.36.5");
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 2, "the 503 was not retried: {heads:?}");
        for head in heads.iter() {
            assert!(head.starts_with("get /version "), "{head}");
            assert!(
                head.contains("authorization: bearer secret-token"),
                "{head}"
            );
            assert!(
                head.contains("user-agent: namespace-baseline-reconciler/test"),
                "{head}"
            );
        }
    }

    /// A 429 is retried after its `Retry-After`, and the request that carried a
    /// `Throttled` learns it was asked to slow down (its write is then not hedged).
    #[tokio::test]
    async fn a_429_is_retried_and_tells_the_request_it_was_throttled() {
        let (url, heads) = server(&[429, 200]).await;
        let client = client(Config::new(url.parse().unwrap())).unwrap();
        let throttled = crate::base::retry::Throttled::default();
        let mut request = http::Request::get("/version").body(Vec::new()).unwrap();
        request.extensions_mut().insert(throttled.clone());
        let asked = tokio::time::Instant::now();
        let version: k8s_openapi::apimachinery::pkg::version::Info =
            client.request(request).await.unwrap();
        assert_eq!(version.git_version, "v1.36.5");
        assert_eq!(heads.lock().unwrap().len(), 2);
        let retry_at = throttled.retry_at().expect("told of the 429");
        assert!(retry_at >= asked && retry_at <= tokio::time::Instant::now());

        let (url, _) = server(&[200]).await;
        let client = super::client(Config::new(url.parse().unwrap())).unwrap();
        let calm = crate::base::retry::Throttled::default();
        let mut request = http::Request::get("/version").body(Vec::new()).unwrap();
        request.extensions_mut().insert(calm.clone());
        let _: k8s_openapi::apimachinery::pkg::version::Info =
            client.request(request).await.unwrap();
        assert_eq!(calm.retry_at(), None);
    }

    /// An API server that keeps connections open and answers every request with the version
    /// document, each only once `answer_after` connections are open (so that as many requests
    /// overlap); counts the connections it accepted and those still open.
    async fn keep_alive_server(
        answer_after: usize,
    ) -> (String, Arc<Mutex<usize>>, Arc<Mutex<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(Mutex::new(0));
        let open = Arc::new(Mutex::new(0));
        let (count, still_open) = (accepted.clone(), open.clone());
        let (opened, all_open) = tokio::sync::watch::channel(0);
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                *count.lock().unwrap() += 1;
                *still_open.lock().unwrap() += 1;
                opened.send_modify(|opened| *opened += 1);
                let mut all_open = all_open.clone();
                let still_open = still_open.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while socket.read(&mut byte).await.is_ok_and(|n| n == 1) {
                        head.push(byte[0]);
                        if head.ends_with(b"\r\n\r\n") {
                            head.clear();
                            all_open
                                .wait_for(|open| *open >= answer_after)
                                .await
                                .unwrap();
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{VERSION}",
                                VERSION.len()
                            );
                            socket.write_all(response.as_bytes()).await.unwrap();
                        }
                    }
                    *still_open.lock().unwrap() -= 1;
                });
            }
        });
        (url, accepted, open)
    }

    /// The main client reuses its connection; the hedge client opens one per request.
    #[tokio::test]
    async fn a_hedge_goes_out_on_a_fresh_connection() {
        for (build, connections) in [
            (client as fn(Config) -> Result<Client>, 1),
            (hedge_client, 3),
        ] {
            let (url, accepted, _) = keep_alive_server(1).await;
            let client = build(Config::new(url.parse().unwrap())).unwrap();
            for _ in 0..3 {
                client.apiserver_version().await.unwrap();
            }
            assert_eq!(*accepted.lock().unwrap(), connections);
        }
    }

    /// A burst of requests, each on a connection of its own, leaves IDLE_CONNECTIONS of them
    /// open: the others close as they go idle, and the next requests reuse the ones kept.
    #[tokio::test]
    async fn a_burst_leaves_at_most_the_idle_connections_open() {
        let burst = IDLE_CONNECTIONS * 3;
        let (url, accepted, open) = keep_alive_server(burst).await;
        let client = client(Config::new(url.parse().unwrap())).unwrap();
        let requests = (0..burst).map(|_| client.apiserver_version());
        for answer in futures::future::join_all(requests).await {
            answer.unwrap();
        }
        assert_eq!(*accepted.lock().unwrap(), burst, "the requests overlapped");
        let closed = async {
            while *open.lock().unwrap() > IDLE_CONNECTIONS {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), closed)
            .await
            .unwrap_or_else(|_| panic!("{} connections still open", open.lock().unwrap()));
        for _ in 0..IDLE_CONNECTIONS {
            client.apiserver_version().await.unwrap();
        }
        assert_eq!(*open.lock().unwrap(), IDLE_CONNECTIONS);
        assert_eq!(
            *accepted.lock().unwrap(),
            burst,
            "an idle connection was reused"
        );
    }

    /// A write that may be sent twice is retried after a 500 as well (a bounded number of
    /// times), as a read is; any other write is not: the reconcile's error routing decides.
    #[tokio::test]
    async fn an_idempotent_request_is_retried_after_a_server_error() {
        let version = |client: &Client| {
            let client = client.clone();
            async move {
                let mut request = http::Request::put("/version").body(Vec::new()).unwrap();
                request.extensions_mut().insert(Idempotent);
                client
                    .request::<k8s_openapi::apimachinery::pkg::version::Info>(request)
                    .await
            }
        };
        let (url, heads) = server(&[500, 503, 200]).await;
        let answer = version(&hedge_client(Config::new(url.parse().unwrap())).unwrap()).await;
        assert_eq!(answer.unwrap().git_version, "v1.36.5");
        assert_eq!(heads.lock().unwrap().len(), 3);

        let (url, heads) = server(&[500, 500, 500, 500, 200]).await;
        let error = version(&client(Config::new(url.parse().unwrap())).unwrap())
            .await
            .unwrap_err();
        assert!(matches!(error, kube::Error::Api(_)), "{error:?}");
        let attempts = heads.lock().unwrap().len();
        assert_eq!(attempts, 1 + ServerRetry::FAILURES as usize);
    }

    /// A proxy is refused as kube's own builder refuses it without its proxy features.
    #[test]
    fn a_proxy_is_refused_as_kube_refuses_it() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        for (proxy, wanted) in [
            (
                "http://proxy:3128",
                "requires the disabled feature \"kube/http-proxy\"",
            ),
            (
                "socks5://proxy:1080",
                "requires the disabled feature \"kube/socks5\"",
            ),
            ("ftp://proxy:21", "unsupported"),
        ] {
            config.proxy_url = Some(proxy.parse().unwrap());
            let Err(Error::Client(ours)) = client(config.clone()) else {
                panic!("{proxy}: not refused as a client error");
            };
            let ours = ours.to_string();
            let kubes = Client::try_from(config.clone())
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(ours.contains(wanted), "{ours}");
            assert!(ours.contains(&kubes), "ours: {ours}; kube's: {kubes}");
        }
    }

    /// A 500 answering a write not marked idempotent is not retried by the client: the
    /// reconcile's own error routing decides. A read is retried.
    #[tokio::test]
    async fn a_server_error_is_returned_not_retried_for_a_write_retried_for_a_read() {
        let (url, heads) = server(&[500, 200]).await;
        let request = http::Request::put("/version").body(Vec::new()).unwrap();
        let error = client(Config::new(url.parse().unwrap()))
            .unwrap()
            .request::<k8s_openapi::apimachinery::pkg::version::Info>(request)
            .await
            .unwrap_err();
        assert!(matches!(error, kube::Error::Api(_)), "{error:?}");
        assert_eq!(heads.lock().unwrap().len(), 1);

        let (url, heads) = server(&[500, 200]).await;
        let version = client(Config::new(url.parse().unwrap()))
            .unwrap()
            .apiserver_version()
            .await
            .unwrap();
        assert_eq!(version.git_version, "v1.36.5");
        assert_eq!(heads.lock().unwrap().len(), 2);
    }
}
