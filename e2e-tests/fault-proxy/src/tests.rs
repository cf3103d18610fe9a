//! The proxy against a small HTTPS upstream of its own: every fault comes back as what it
//! claims to be, and the partition cuts and refuses.

use std::convert::Infallible;
use std::time::Instant;

use super::*;

/// An HTTPS server answering `/hello` with `hello <Host header>` and streaming one line every
/// 100 ms (forever) to any `watch=true` request. Returns its URL and CA.
async fn upstream() -> (String, String) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (config, ca) = server_tls(
        &provider,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &ProxyCa::generate().unwrap(),
    )
    .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(|request: Request<Incoming>| async move {
                    let host = request
                        .headers()
                        .get(HOST)
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body: ProxyBody = if RequestShape::of(request.uri()).watch {
                        let stream = futures_stream(Duration::from_millis(100));
                        BoxBody::new(stream)
                    } else {
                        full(format!("hello {host}"))
                    };
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (format!("https://{address}"), ca)
}

/// A body yielding `{"n":i}\n` every `every`, forever.
fn futures_stream(every: Duration) -> impl Body<Data = Bytes, Error = BoxError> + Send + Sync {
    struct Ticks {
        n: u64,
        sleep: Pin<Box<tokio::time::Sleep>>,
        every: Duration,
    }
    impl Body for Ticks {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            let this = self.get_mut();
            match this.sleep.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    this.n += 1;
                    let every = this.every;
                    this.sleep
                        .as_mut()
                        .reset(tokio::time::Instant::now() + every);
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
                        "{{\"n\":{}}}\n",
                        this.n
                    ))))))
                }
            }
        }
    }
    Ticks {
        n: 0,
        sleep: Box::pin(tokio::time::sleep(every)),
        every,
    }
}

async fn proxy() -> FaultProxy {
    let (url, ca) = upstream().await;
    FaultProxy::start(Upstream::new(&url, ca.as_bytes()).unwrap(), 7).unwrap()
}

/// A client connection to the proxy, trusting its CA.
async fn client(proxy: &FaultProxy) -> Result<SendRequest<Full<Bytes>>> {
    client_trusting(proxy, proxy.ca_pem()).await
}

/// A client connection to the proxy, trusting the CA `ca_pem`.
async fn client_trusting(proxy: &FaultProxy, ca_pem: &str) -> Result<SendRequest<Full<Bytes>>> {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(certificate?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(proxy.address()).await?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn get(sender: &mut SendRequest<Full<Bytes>>, path: &str) -> Result<Response<Incoming>> {
    sender.ready().await?;
    let request = Request::get(path)
        .header(HOST, "127.0.0.1")
        .body(Full::new(Bytes::new()))?;
    Ok(sender.send_request(request).await?)
}

async fn text(response: Response<Incoming>) -> (StatusCode, HeaderMap, String) {
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// Opens a watch on `sender` and waits for its first frame.
async fn open_watch(sender: &mut SendRequest<Full<Bytes>>, path: &str) -> Incoming {
    let mut body = get(sender, path).await.unwrap().into_body();
    assert!(body.frame().await.unwrap().is_ok());
    body
}

/// Reads `body` until it ends (at most 2 s): whether it ended in an error (`Some(true)`),
/// cleanly (`Some(false)`), or with no final frame at all (`None`).
async fn watch_end(mut body: Incoming, what: &str) -> Option<bool> {
    tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match body.frame().await {
                Some(Ok(_)) => {}
                other => break other.map(|r| r.is_err()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within 2 s"))
}

#[tokio::test]
async fn without_faults_requests_are_forwarded_with_the_upstream_host() {
    let proxy = proxy().await;
    let mut sender = client(&proxy).await.unwrap();
    for _ in 0..3 {
        let (status, _, body) = text(get(&mut sender, "/hello").await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.starts_with("hello 127.0.0.1:"), "{body}");
    }
    let report = proxy.report();
    assert_eq!((report.requests, report.forwarded), (3, 3));
    assert_eq!(report.total_faults(), 0);
}

#[tokio::test]
async fn a_proxy_restarted_with_its_ca_on_its_port_is_trusted_by_its_old_clients() {
    let first = proxy().await;
    let (address, ca, ca_pem, upstream) = (
        first.address(),
        first.ca(),
        first.ca_pem().to_owned(),
        first.upstream(),
    );
    drop(first);
    let second = FaultProxy::start_with(upstream.clone(), 7, address, ca).unwrap();
    let mut sender = client_trusting(&second, &ca_pem).await.unwrap();
    let (status, _, _) = text(get(&mut sender, "/hello").await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    drop(second);
    // A proxy with a CA of its own is not.
    let other = FaultProxy::start_on(upstream, 7, address).unwrap();
    assert!(client_trusting(&other, &ca_pem).await.is_err());
}

#[tokio::test]
async fn error_statuses_carry_a_kubernetes_status() {
    let proxy = proxy().await;
    let mut sender = client(&proxy).await.unwrap();
    for (fault, code, reason) in [
        (Fault::TooManyRequests, 429, "TooManyRequests"),
        (Fault::InternalError, 500, "InternalError"),
        (Fault::ServiceUnavailable, 503, "ServiceUnavailable"),
    ] {
        proxy.set_faults(1.0, &[fault]);
        let (status, headers, body) = text(get(&mut sender, "/hello").await.unwrap()).await;
        assert_eq!(status.as_u16(), code);
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], code);
        assert_eq!(status["reason"], reason);
        if code == 429 {
            assert_eq!(headers.get(RETRY_AFTER).unwrap(), "1");
        }
    }
    assert_eq!(proxy.report().total_faults(), 3);
    assert_eq!(proxy.report().forwarded, 0);
}

/// Once asked to, the proxy keeps each request with what it drew, in order, until taken;
/// none twice, and none before it was asked or after it was told to stop.
#[tokio::test]
async fn requests_are_kept_with_their_fault_until_taken() {
    let proxy = proxy().await;
    let mut sender = client(&proxy).await.unwrap();
    text(get(&mut sender, "/hello").await.unwrap()).await;
    assert_eq!(proxy.take_received(), [], "not kept unless asked");
    proxy.keep_received(true);
    let before = SystemTime::now();
    text(get(&mut sender, "/hello?x=1").await.unwrap()).await;
    proxy.set_faults(1.0, &[Fault::TooManyRequests]);
    text(
        get(&mut sender, "/api/v1/namespaces?watch=true")
            .await
            .unwrap(),
    )
    .await;
    let received = proxy.take_received();
    let seen: Vec<(&str, &str, bool, Option<Fault>)> = received
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.watch, r.fault))
        .collect();
    assert_eq!(
        seen,
        [
            ("GET", "/hello", false, None),
            (
                "GET",
                "/api/v1/namespaces",
                true,
                Some(Fault::TooManyRequests)
            ),
        ]
    );
    assert!(received.iter().all(|r| r.at >= before));
    assert!(received[0].at <= received[1].at);
    assert_eq!(proxy.take_received(), [], "taken once");
    proxy.keep_received(false);
    text(get(&mut sender, "/hello").await.unwrap()).await;
    assert_eq!(proxy.take_received(), [], "no longer kept");
}

#[tokio::test]
async fn a_dropped_connection_gets_no_answer() {
    let proxy = proxy().await;
    proxy.set_faults(1.0, &[Fault::DropConnection]);
    let mut sender = client(&proxy).await.unwrap();
    assert!(get(&mut sender, "/hello").await.is_err());
    assert_eq!(proxy.report().count(Fault::DropConnection), 1);
}

#[tokio::test]
async fn gone_hits_only_watches_that_resume() {
    let proxy = proxy().await;
    proxy.set_faults(1.0, &[Fault::GoneOnResume]);
    let mut sender = client(&proxy).await.unwrap();
    let (status, _, body) = text(
        get(
            &mut sender,
            "/api/v1/namespaces?watch=true&resourceVersion=42",
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let event: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    // Not a watch, or a watch from "0": forwarded (nothing else is enabled).
    let (_, _, body) = text(get(&mut sender, "/hello?resourceVersion=42").await.unwrap()).await;
    assert!(body.starts_with("hello"), "{body}");
    let response = get(&mut sender, "/watch?watch=1&resourceVersion=0")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(proxy.report().count(Fault::GoneOnResume), 1);
}

#[tokio::test]
async fn a_cut_watch_breaks_mid_stream() {
    let proxy = proxy().await;
    proxy.set_faults(1.0, &[Fault::CutWatch]);
    let mut sender = client(&proxy).await.unwrap();
    let started = Instant::now();
    let response = get(&mut sender, "/watch?watch=true&resourceVersion=9")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut frames = 0;
    let error = loop {
        match body.frame().await {
            Some(Ok(_)) => frames += 1,
            Some(Err(error)) => break Some(error),
            None => break None,
        }
    };
    assert!(
        error.is_some(),
        "the stream ended cleanly after {frames} frames"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(proxy.report().count(Fault::CutWatch), 1);
}

#[tokio::test]
async fn a_stall_delays_then_forwards() {
    let proxy = proxy().await;
    proxy.set_faults(1.0, &[Fault::Stall]);
    let mut sender = client(&proxy).await.unwrap();
    let started = Instant::now();
    let (status, _, _) = text(get(&mut sender, "/hello").await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(proxy.report().forwarded, 1);
}

#[tokio::test]
async fn a_partition_cuts_open_watches_and_refuses_until_healed() {
    let proxy = proxy().await;
    let mut watching = client(&proxy).await.unwrap();
    let body = open_watch(&mut watching, "/watch?watch=true&resourceVersion=1").await;
    assert_eq!(proxy.report().open_connections, 1);
    proxy.partition();
    let ended = watch_end(body, "the watch is cut at once").await;
    assert_ne!(ended, Some(false));
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while proxy.report().open_connections > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "a connection outlived the partition");
    // New connections fail until healed.
    let refused = match client(&proxy).await {
        Err(_) => true,
        Ok(mut sender) => get(&mut sender, "/hello").await.is_err(),
    };
    assert!(refused, "a connection got through the partition");
    proxy.heal();
    let mut sender = client(&proxy).await.unwrap();
    let (status, _, _) = text(get(&mut sender, "/hello").await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let report = proxy.report();
    assert_eq!(report.cut_connections, 1);
    assert!(report.refused_connections >= 1);
}

#[test]
fn decisions_follow_the_seed_and_the_probability() {
    let draw = |seed: u64| {
        let mut rng = Rng::new(seed);
        (0..1000).map(|_| rng.unit() < 0.3).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
    let hits = draw(3).iter().filter(|hit| **hit).count();
    assert!((240..360).contains(&hits), "{hits} of 1000 at p=0.3");
}

#[test]
fn a_request_that_is_not_a_watch_meets_each_of_its_five_faults_evenly() {
    let odds = Fault::odds_for_a_request(0.3);
    let kinds: Vec<Fault> = odds.iter().map(|(fault, _)| *fault).collect();
    assert_eq!(
        kinds,
        [
            Fault::TooManyRequests,
            Fault::InternalError,
            Fault::ServiceUnavailable,
            Fault::DropConnection,
            Fault::Stall
        ]
    );
    for (fault, chance) in &odds {
        assert!((chance - 0.06).abs() < 1e-12, "{fault}: {chance}");
    }
}

#[test]
fn request_shapes() {
    let shape = |uri: &str| RequestShape::of(&uri.parse().unwrap()).shape();
    assert!(shape("/api/v1/namespaces?watch=true&resourceVersion=12").resumes_watch());
    assert!(
        shape("/api/v1/namespaces?resourceVersion=12&watch=1&timeoutSeconds=290").resumes_watch()
    );
    assert!(!shape("/api/v1/namespaces?watch=true&resourceVersion=0").resumes_watch());
    assert!(!shape("/api/v1/namespaces?watch=true").resumes_watch());
    assert!(!shape("/api/v1/namespaces?resourceVersion=12").watch);
    assert!(shape("/api/v1/namespaces?watch=true").watch);
}

#[tokio::test]
async fn turning_faults_on_cuts_the_watches_already_open() {
    let proxy = proxy().await;
    let mut sender = client(&proxy).await.unwrap();
    let body = open_watch(&mut sender, "/watch?watch=true&resourceVersion=3").await;
    // Only statuses that never hit this connection again: the watch is cut by the switch.
    proxy.set_probability(0.0001);
    let ended = watch_end(body, "the open watch is cut when faults begin").await;
    assert_ne!(ended, Some(false));
    assert_eq!(proxy.report().count(Fault::CutWatch), 1);
}
