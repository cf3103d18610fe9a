//! A fault-injecting reverse proxy for the Kubernetes API, for the reconciler's fault tests.
//!
//! The proxy listens on `127.0.0.1` with HTTPS (its own CA and serving certificate, made in
//! memory), terminates TLS, and forwards each request over TLS to the real API server: the
//! client's kubeconfig points at [`FaultProxy::url`] with [`FaultProxy::ca_pem`] as its
//! certificate authority, and its bearer token passes through untouched, so the API server
//! (and its audit log) still sees the client's own identity. Each downstream connection has
//! its own upstream connection: dropping one drops the other, as a load balancer would.
//!
//! With a probability set by [`FaultProxy::set_faults`], a request is answered with a fault
//! instead of (or besides) being forwarded — see [`Fault`]. Faults are drawn from a seeded
//! xorshift generator, so a run is reproducible up to the timing of the client's requests.
//! [`FaultProxy::partition`] cuts every open connection (long-running watches included) and
//! refuses new ones until [`FaultProxy::heal`]: the reconciler's view of a network
//! partition, while the test itself still reaches the API server directly.
//!
//! The proxy runs on its own tokio runtime (two worker threads), so a test that blocks its
//! own thread (running a script, a blocking HTTP probe) never stalls the proxy.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, anyhow, ensure};
use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HOST, HeaderMap, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// How long a stalled request ([`Fault::Stall`]) is held before it is forwarded: drawn
/// evenly from this range.
pub const STALL: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(3));

/// The `Retry-After` of a 429 ([`Fault::TooManyRequests`]), in seconds.
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// Errors on the proxy's request path (what hyper wants from a service).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// What the proxy can do to a request instead of forwarding it faithfully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// `429 Too Many Requests` with `Retry-After: 1` and a `Status` body, as API Priority and
    /// Fairness answers.
    TooManyRequests,
    /// `500 Internal Server Error` with a `Status` body.
    InternalError,
    /// `503 Service Unavailable` with a `Status` body.
    ServiceUnavailable,
    /// The connection is closed without an answer.
    DropConnection,
    /// The request is held for a while (0.5–3 s), then forwarded.
    Stall,
    /// A watch is forwarded, and its response stream cut 0.2–3 s later, mid-stream.
    CutWatch,
    /// A watch resuming from a `resourceVersion` gets what the API server sends when that
    /// version is too old: `200 OK` and one `ERROR` event with a `410 Expired` Status.
    GoneOnResume,
}

impl Fault {
    pub const ALL: [Self; 7] = [
        Self::TooManyRequests,
        Self::InternalError,
        Self::ServiceUnavailable,
        Self::DropConnection,
        Self::Stall,
        Self::CutWatch,
        Self::GoneOnResume,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooManyRequests => "429",
            Self::InternalError => "500",
            Self::ServiceUnavailable => "503",
            Self::DropConnection => "dropped-connection",
            Self::Stall => "stall",
            Self::CutWatch => "cut-watch",
            Self::GoneOnResume => "410-on-watch-resume",
        }
    }

    /// Its weight among the faults that apply to a request: the faults only a watch can get
    /// weigh more (a cut 3, a 410 Gone 5, the others 1), since a watch is one request per
    /// stream, far rarer than the others.
    fn weight(self) -> usize {
        match self {
            Self::CutWatch => 3,
            Self::GoneOnResume => 5,
            _ => 1,
        }
    }

    /// The chance that a request that is not a watch (a write, a list) meets each fault, with
    /// every kind of fault on at `probability` ([`FaultProxy::set_probability`]): the model
    /// the soak computes its floor from.
    pub fn odds_for_a_request(probability: f64) -> Vec<(Self, f64)> {
        let applicable: Vec<Self> = Self::ALL
            .into_iter()
            .filter(|fault| fault.applies_to(Shape::default()))
            .collect();
        let total: usize = applicable.iter().map(|fault| fault.weight()).sum();
        applicable
            .into_iter()
            .map(|fault| (fault, probability * fault.weight() as f64 / total as f64))
            .collect()
    }

    /// Whether this fault can hit a request of this shape.
    fn applies_to(self, shape: Shape) -> bool {
        match self {
            Self::CutWatch => shape.watch,
            Self::GoneOnResume => shape.resumes_watch(),
            _ => true,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The API server the proxy forwards to.
#[derive(Clone)]
pub struct Upstream {
    /// `host:port`, for the TCP connection and the `Host` header.
    authority: String,
    server_name: ServerName<'static>,
    roots: Arc<RootCertStore>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// An `https://host[:port]` API server whose certificate chains to one of the PEM
    /// certificates in `ca_pem`.
    pub fn new(url: &str, ca_pem: &[u8]) -> Result<Self> {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("upstream URL {url:?}"))?;
        ensure!(
            uri.scheme_str() == Some("https"),
            "upstream {url:?}: only https API servers are supported"
        );
        let host = uri
            .host()
            .with_context(|| format!("upstream {url:?} has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let server_name = ServerName::try_from(host.clone())
            .with_context(|| format!("upstream host {host:?}"))?;
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(ca_pem) {
            roots
                .add(certificate.context("reading the upstream CA")?)
                .context("adding the upstream CA")?;
        }
        ensure!(!roots.is_empty(), "no certificate in the upstream CA data");
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            authority,
            server_name,
            roots: Arc::new(roots),
        })
    }
}

/// One request as the proxy received it, and the fault it drew: the soak's account of where
/// a slow repair's time went ([`FaultProxy::take_received`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// When the request arrived (the system clock, as the API server's audit log uses).
    pub at: SystemTime,
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub watch: bool,
    pub user_agent: String,
    /// `None`: forwarded as it came.
    pub fault: Option<Fault>,
}

/// What the proxy saw and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Requests received (faulted or not).
    pub requests: u64,
    /// Requests forwarded to the API server and answered by it (stalled and cut ones too).
    pub forwarded: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<Fault, u64>,
    /// Connections refused while partitioned.
    pub refused_connections: u64,
    /// Open connections cut by [`FaultProxy::partition`].
    pub cut_connections: u64,
    /// Connections that could not reach the API server (closed without an answer).
    pub upstream_failures: u64,
    /// Client connections open now (TLS established, not yet closed or cut): a gauge, not a
    /// count; 0 once a partition has taken effect.
    pub open_connections: u64,
}

impl Report {
    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }

    /// Faults of one kind.
    pub fn count(&self, fault: Fault) -> u64 {
        self.faults.get(&fault).copied().unwrap_or(0)
    }

    /// The counts accumulated since `earlier` (a report of the same proxy).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            requests: self.requests - earlier.requests,
            forwarded: self.forwarded - earlier.forwarded,
            faults: self
                .faults
                .iter()
                .map(|(fault, count)| (*fault, count - earlier.count(*fault)))
                .filter(|(_, count)| *count > 0)
                .collect(),
            refused_connections: self.refused_connections - earlier.refused_connections,
            cut_connections: self.cut_connections - earlier.cut_connections,
            upstream_failures: self.upstream_failures - earlier.upstream_failures,
            open_connections: self.open_connections,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, {} forwarded, {} faults",
            self.requests,
            self.forwarded,
            self.total_faults()
        )?;
        if !self.faults.is_empty() {
            let kinds: Vec<String> = self
                .faults
                .iter()
                .map(|(fault, count)| format!("{fault}={count}"))
                .collect();
            write!(f, " ({})", kinds.join(", "))?;
        }
        if self.refused_connections > 0 || self.cut_connections > 0 {
            write!(
                f,
                "; partition: {} connections cut, {} refused",
                self.cut_connections, self.refused_connections
            )?;
        }
        if self.upstream_failures > 0 {
            write!(f, "; {} upstream failures", self.upstream_failures)?;
        }
        Ok(())
    }
}

/// The proxy's random choices, seeded so that a run's faults can be replayed.
#[derive(Debug)]
struct Rng(StdRng);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(StdRng::seed_from_u64(seed))
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        self.0.random()
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        low + (high.saturating_sub(low)).mul_f64(self.unit())
    }
}

/// The shape of a request, as far as faults care.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RequestShape {
    watch: bool,
    resource_version: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Shape {
    watch: bool,
    resumes: bool,
}

impl Shape {
    fn resumes_watch(self) -> bool {
        self.watch && self.resumes
    }
}

impl RequestShape {
    fn of(uri: &Uri) -> Self {
        let mut shape = Self::default();
        for pair in uri.query().unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "watch" => shape.watch = matches!(value, "true" | "1"),
                "resourceVersion" => shape.resource_version = Some(value.to_owned()),
                _ => {}
            }
        }
        shape
    }

    fn shape(&self) -> Shape {
        Shape {
            watch: self.watch,
            resumes: self
                .resource_version
                .as_deref()
                .is_some_and(|rv| !rv.is_empty() && rv != "0"),
        }
    }
}

/// The fault settings in force.
#[derive(Debug, Clone)]
struct Settings {
    probability: f64,
    kinds: Vec<Fault>,
    /// Watch streams forwarded while this is set are cut after a lifetime drawn from it.
    watch_lifetime: Option<(Duration, Duration)>,
}

struct Shared {
    upstream: Upstream,
    connector: TlsConnector,
    settings: Mutex<Settings>,
    rng: Mutex<Rng>,
    report: Mutex<Report>,
    /// Every request received since the last [`FaultProxy::take_received`], while
    /// `keeping` ([`FaultProxy::keep_received`]).
    received: Mutex<Vec<Received>>,
    keeping: AtomicBool,
    refusing: AtomicBool,
    /// Bumped to cut every open connection.
    cut: watch::Sender<u64>,
    /// Bumped to cut every open watch stream.
    cut_watches: watch::Sender<u64>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn record(&self, update: impl FnOnce(&mut Report)) {
        update(&mut lock(&self.report));
    }

    /// Draws the fault (if any) for a request of this shape.
    fn decide(&self, shape: Shape) -> Option<Fault> {
        let settings = lock(&self.settings).clone();
        if settings.probability <= 0.0 {
            return None;
        }
        let applicable: Vec<Fault> = settings
            .kinds
            .iter()
            .copied()
            .filter(|fault| fault.applies_to(shape))
            .flat_map(|fault| std::iter::repeat_n(fault, fault.weight()))
            .collect();
        let mut rng = lock(&self.rng);
        if applicable.is_empty() || rng.unit() >= settings.probability {
            return None;
        }
        Some(applicable[rng.below(applicable.len())])
    }

    fn between(&self, low: Duration, high: Duration) -> Duration {
        lock(&self.rng).between(low, high)
    }

    async fn connect_upstream(&self) -> Result<SendRequest<Incoming>> {
        let tcp = TcpStream::connect(&self.upstream.authority)
            .await
            .with_context(|| format!("connecting to {}", self.upstream.authority))?;
        tcp.set_nodelay(true)?;
        let tls = self
            .connector
            .connect(self.upstream.server_name.clone(), tcp)
            .await
            .context("TLS handshake with the API server")?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .context("HTTP/1.1 handshake with the API server")?;
        tokio::spawn(async move {
            // Ends when the downstream side drops its sender (or the server closes).
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// One downstream connection's upstream connection, made on its first request.
#[derive(Default)]
struct Connection {
    upstream: tokio::sync::Mutex<Option<SendRequest<Incoming>>>,
}

/// A running proxy; stopped (every connection cut) when dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    address: SocketAddr,
    ca: ProxyCa,
    ca_pem: String,
    runtime: Option<tokio::runtime::Runtime>,
}

/// The key of the proxy's CA. A proxy restarted with the same key (and port) is trusted by
/// the kubeconfigs made for the first one: a client trusts a CA by its name and key, and the
/// CA certificate is made from the same name and key every time.
#[derive(Clone)]
pub struct ProxyCa {
    key_pem: String,
}

impl ProxyCa {
    /// A new CA key.
    pub fn generate() -> Result<Self> {
        Ok(Self {
            key_pem: rcgen::KeyPair::generate()?.serialize_pem(),
        })
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("address", &self.address)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1, faults off.
    pub fn start(upstream: Upstream, seed: u64) -> Result<Self> {
        Self::start_on(upstream, seed, SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Starts a proxy on `listen`, faults off, with a new CA.
    pub fn start_on(upstream: Upstream, seed: u64, listen: SocketAddr) -> Result<Self> {
        Self::start_with(upstream, seed, listen, ProxyCa::generate()?)
    }

    /// Starts a proxy on `listen`, faults off, with the CA `ca` (e.g. [`Self::ca`] of a
    /// proxy stopped before, to restart it on its port).
    pub fn start_with(
        upstream: Upstream,
        seed: u64,
        listen: SocketAddr,
        ca: ProxyCa,
    ) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (server_config, ca_pem) = server_tls(&provider, listen, &ca)?;
        let mut client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_root_certificates(upstream.roots.clone())
            .with_no_client_auth();
        client_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .context("starting the proxy's runtime")?;
        let listener = bind(listen)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let (cut, _) = watch::channel(0);
        let (cut_watches, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            upstream,
            connector: TlsConnector::from(Arc::new(client_config)),
            settings: Mutex::new(Settings {
                probability: 0.0,
                kinds: Fault::ALL.to_vec(),
                watch_lifetime: None,
            }),
            rng: Mutex::new(Rng::new(seed)),
            report: Mutex::new(Report::default()),
            received: Mutex::default(),
            keeping: AtomicBool::new(false),
            refusing: AtomicBool::new(false),
            cut,
            cut_watches,
        });
        let acceptor = TlsAcceptor::from(Arc::new(server_config));
        let accept_shared = shared.clone();
        let listener = {
            let _guard = runtime.enter();
            TcpListener::from_std(listener)?
        };
        runtime.spawn(accept_loop(listener, acceptor, accept_shared));
        Ok(Self {
            shared,
            address,
            ca,
            ca_pem,
            runtime: Some(runtime),
        })
    }

    /// `https://127.0.0.1:<port>`, for a kubeconfig's `server`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The PEM certificate of the proxy's CA, for a kubeconfig's
    /// `certificate-authority-data` (base64 of this).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA's key, to start another proxy the same clients trust.
    pub fn ca(&self) -> ProxyCa {
        self.ca.clone()
    }

    /// The upstream this proxy forwards to.
    pub fn upstream(&self) -> Upstream {
        self.shared.upstream.clone()
    }

    /// Faults of every kind, each request hit with `probability` (0 turns them off), and
    /// watch streams that do not live long: while faults are on, a watch stream the proxy
    /// forwards is cut after 1–6 s (a flaky load balancer), and turning faults on cuts the
    /// watch streams already open (else a watch opened before the faults would outlive
    /// them). Such cuts are counted as [`Fault::CutWatch`].
    pub fn set_probability(&self, probability: f64) {
        let on = probability > 0.0;
        *lock(&self.shared.settings) = Settings {
            probability: probability.clamp(0.0, 1.0),
            kinds: Fault::ALL.to_vec(),
            watch_lifetime: on.then_some((Duration::from_secs(1), Duration::from_secs(6))),
        };
        if on {
            self.cut_watches();
        }
    }

    /// Faults of the given kinds only, drawn among those that apply to a request (for a
    /// watch, [`Fault::CutWatch`] weighs 3 and [`Fault::GoneOnResume`] 5, the others 1).
    pub fn set_faults(&self, probability: f64, kinds: &[Fault]) {
        *lock(&self.shared.settings) = Settings {
            probability: probability.clamp(0.0, 1.0),
            kinds: kinds.to_vec(),
            watch_lifetime: None,
        };
    }

    /// Cuts every watch stream open now, mid-stream (each counted as [`Fault::CutWatch`]).
    pub fn cut_watches(&self) {
        self.shared
            .cut_watches
            .send_modify(|generation| *generation += 1);
    }

    /// Cuts every open connection and refuses new ones until [`Self::heal`].
    pub fn partition(&self) {
        self.shared.refusing.store(true, Ordering::SeqCst);
        self.shared.cut.send_modify(|generation| *generation += 1);
    }

    /// Accepts connections again.
    pub fn heal(&self) {
        self.shared.refusing.store(false, Ordering::SeqCst);
    }

    /// Counts so far.
    pub fn report(&self) -> Report {
        lock(&self.shared.report).clone()
    }

    /// From now on, keep each request received ([`Received`]) until taken, or stop keeping
    /// them. Off by default: a proxy left running (the `fault-proxy` binary) would hold every
    /// request it ever received.
    pub fn keep_received(&self, keep: bool) {
        self.shared.keeping.store(keep, Ordering::SeqCst);
    }

    /// The requests kept since the last call ([`Self::keep_received`]), in the order they
    /// arrived, each with the fault it drew.
    pub fn take_received(&self) -> Vec<Received> {
        std::mem::take(&mut *lock(&self.shared.received))
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.refusing.store(true, Ordering::SeqCst);
        self.shared.cut.send_modify(|generation| *generation += 1);
        if let Some(runtime) = self.runtime.take() {
            // Never blocks: safe inside an async test.
            runtime.shutdown_background();
        }
    }
}

/// Binds `listen`; a port a stopped proxy just freed may take a moment to be released (its
/// runtime shuts down in the background), so that is retried for up to 2 s.
fn bind(listen: SocketAddr) -> Result<std::net::TcpListener> {
    let mut attempts = 0;
    loop {
        match std::net::TcpListener::bind(listen) {
            Ok(listener) => return Ok(listener),
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse && attempts < 40 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => return Err(error).with_context(|| format!("binding {listen}")),
        }
    }
}

/// The proxy's own CA and a serving certificate for the listening address, signed by it.
fn server_tls(
    provider: &Arc<CryptoProvider>,
    listen: SocketAddr,
    ca: &ProxyCa,
) -> Result<(rustls::ServerConfig, String)> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).context("the proxy CA's key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "namespace-baseline fault proxy CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let ip = listen.ip().to_string();
    if !ip.starts_with("0.") && !names.contains(&ip) && ip != "::" {
        names.push(ip);
    }
    let leaf_key = KeyPair::generate()?;
    let mut leaf_params = CertificateParams::new(names)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "namespace-baseline fault proxy");
    leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;

    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
        .context("the proxy's serving certificate")?;
    // HTTP/1.1 only: every request of a connection goes through one upstream connection.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, ca_cert.pem()))
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if shared.refusing.load(Ordering::SeqCst) {
            shared.record(|report| report.refused_connections += 1);
            drop(tcp);
            continue;
        }
        tokio::spawn(serve(tcp, acceptor.clone(), shared.clone()));
    }
}

/// Counts a client connection as open for as long as it lives.
struct OpenConnection(Arc<Shared>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.record(|report| report.open_connections -= 1);
    }
}

async fn serve(tcp: TcpStream, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    let mut cut = shared.cut.subscribe();
    let _ = tcp.set_nodelay(true);
    let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp));
    let tls = tokio::select! {
        accepted = handshake => match accepted {
            Ok(Ok(tls)) => tls,
            _ => return,
        },
        _ = cut.changed() => return,
    };
    shared.record(|report| report.open_connections += 1);
    let _open = OpenConnection(shared.clone());
    let connection = Arc::new(Connection::default());
    let service_shared = shared.clone();
    let service =
        service_fn(move |request| handle(service_shared.clone(), connection.clone(), request));
    let serving = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tls), service);
    tokio::select! {
        _ = serving => {}
        _ = cut.changed() => shared.record(|report| report.cut_connections += 1),
    }
}

async fn handle(
    shared: Arc<Shared>,
    connection: Arc<Connection>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, BoxError> {
    shared.record(|report| report.requests += 1);
    let shape = RequestShape::of(request.uri());
    let fault = shared.decide(shape.shape());
    if let Some(fault) = fault {
        shared.record(|report| *report.faults.entry(fault).or_insert(0) += 1);
    }
    if shared.keeping.load(Ordering::SeqCst) {
        keep(&shared, &request, shape.watch, fault);
    }
    match fault {
        None if shape.watch => {
            // A watch: cut when `cut_watches` says so, or at the end of its lifetime.
            let lifetime = lock(&shared.settings).watch_lifetime;
            let after = lifetime.map(|(low, high)| shared.between(low, high));
            let response = forward(&shared, &connection, request).await?;
            Ok(response.map(move |body| WatchBody::new(body, after, shared, false).boxed()))
        }
        None => forward(&shared, &connection, request).await,
        Some(Fault::TooManyRequests) => Ok(status_response(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "fault proxy: too many requests, please try again later",
            Some(RETRY_AFTER_SECONDS),
        )),
        Some(Fault::InternalError) => Ok(status_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "fault proxy: an error on the server (\"injected\") has prevented the request from succeeding",
            None,
        )),
        Some(Fault::ServiceUnavailable) => Ok(status_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "fault proxy: the server is currently unable to handle the request",
            None,
        )),
        Some(Fault::DropConnection) => Err("fault proxy: connection dropped".into()),
        Some(Fault::Stall) => {
            let delay = shared.between(STALL.0, STALL.1);
            tokio::time::sleep(delay).await;
            forward(&shared, &connection, request).await
        }
        Some(Fault::CutWatch) => {
            let after = shared.between(Duration::from_millis(200), Duration::from_secs(3));
            let response = forward(&shared, &connection, request).await?;
            Ok(response.map(move |body| WatchBody::new(body, Some(after), shared, true).boxed()))
        }
        Some(Fault::GoneOnResume) => Ok(gone_event(
            shape.resource_version.as_deref().unwrap_or_default(),
        )),
    }
}

/// Keeps `request` with the fault it drew, for [`FaultProxy::take_received`].
fn keep(shared: &Shared, request: &Request<Incoming>, watch: bool, fault: Option<Fault>) {
    let received = Received {
        at: SystemTime::now(),
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        watch,
        user_agent: request
            .headers()
            .get(USER_AGENT)
            .and_then(|agent| agent.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        fault,
    };
    lock(&shared.received).push(received);
}

/// Hop-by-hop headers, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("upgrade");
}

async fn forward(
    shared: &Shared,
    connection: &Connection,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, BoxError> {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    parts.uri = path.parse()?;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(HOST, HeaderValue::from_str(&shared.upstream.authority)?);
    let request = Request::from_parts(parts, body);

    let mut slot = connection.upstream.lock().await;
    if slot.as_ref().is_none_or(SendRequest::is_closed) {
        match shared.connect_upstream().await {
            Ok(sender) => *slot = Some(sender),
            Err(error) => {
                shared.record(|report| report.upstream_failures += 1);
                return Err(error.into());
            }
        }
    }
    let sender = slot
        .as_mut()
        .ok_or_else(|| anyhow!("no upstream connection"))?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    drop(slot);
    shared.record(|report| report.forwarded += 1);
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(
        parts,
        body.map_err(BoxError::from).boxed(),
    ))
}

fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A Kubernetes `Status` failure response, as the API server writes it.
fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry_after: Option<u32>,
) -> Response<ProxyBody> {
    let mut status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(seconds) = retry_after {
        status["details"] = serde_json::json!({"retryAfterSeconds": seconds});
    }
    let mut response = Response::new(full(status.to_string()));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// What kube-apiserver's watch cache answers a watch from a compacted resourceVersion:
/// `200 OK`, then a single `ERROR` event carrying `410 Expired`, then the end of the stream.
fn gone_event(resource_version: &str) -> Response<ProxyBody> {
    let event = serde_json::json!({
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!("too old resource version: {resource_version} (fault proxy)"),
            "reason": "Expired",
            "code": 410,
        },
    });
    let mut response = Response::new(full(format!("{event}\n")));
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// A watch's response body, cut mid-stream at the end of its lifetime or when `cut_watches`
/// says so: it then fails, and hyper aborts the connection (no final chunk), which is what a
/// client sees of a broken watch. Each cut is counted once as [`Fault::CutWatch`]; a stream
/// whose cut was decided as a fault up front (`counted`) is not counted again.
struct WatchBody {
    inner: ProxyBody,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    cuts: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    shared: Arc<Shared>,
    counted: bool,
    cut: bool,
}

impl WatchBody {
    fn new(
        inner: ProxyBody,
        lifetime: Option<Duration>,
        shared: Arc<Shared>,
        counted: bool,
    ) -> Self {
        let mut cuts = shared.cut_watches.subscribe();
        cuts.borrow_and_update();
        Self {
            inner,
            deadline: lifetime.map(|after| Box::pin(tokio::time::sleep(after))),
            cuts: Box::pin(async move {
                if cuts.changed().await.is_err() {
                    // The proxy is gone: never cut.
                    std::future::pending::<()>().await;
                }
            }),
            shared,
            counted,
            cut: false,
        }
    }
}

impl Body for WatchBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.cut {
            return Poll::Ready(None);
        }
        let expired = this
            .deadline
            .as_mut()
            .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
        if expired || this.cuts.as_mut().poll(cx).is_ready() {
            this.cut = true;
            if !this.counted {
                this.shared
                    .record(|report| *report.faults.entry(Fault::CutWatch).or_insert(0) += 1);
            }
            return Poll::Ready(Some(Err("fault proxy: watch stream cut".into())));
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }
}

#[cfg(test)]
mod tests;
