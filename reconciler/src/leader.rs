//! Leader election on a `coordination.k8s.io/v1` Lease, through `kube-lease-manager`, and the
//! gate every write goes through.
//!
//! The lease manager says when this replica becomes or stops being the holder. On its own it
//! keeps saying "leader" while renewals fail (an API server unreachable from this replica
//! only): the gate therefore also requires a successful renewal within the lease's
//! validity. [`RenewalObserver`] sees the renewals on the lease manager's own client, so the
//! gate closes before another replica may take the lease over, even if the lease manager
//! never notices.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use kube::client::Body;
use tokio::time::Instant;
use tower::{Layer, Service};

/// Seconds the lease is valid after a renewal; a standby takes over after this.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Seconds before expiry the holder renews (and the clock skew tolerated between nodes).
pub const LEASE_GRACE_SECONDS: u64 = 5;

/// Whether this replica may write.
#[derive(Debug)]
pub struct LeaderGate {
    /// `false` when leader election is off: the single replica always writes.
    election: bool,
    /// What the lease manager last said.
    elected: AtomicBool,
    /// Whether the lease manager has been set up (a standby then knows it is one).
    known: AtomicBool,
    /// The start of the last successful lease write.
    renewed_at: Mutex<Option<Instant>>,
    /// How long a renewal keeps the gate open.
    validity: Duration,
}

impl LeaderGate {
    /// A gate for a single replica: always open.
    pub fn always() -> Self {
        Self {
            election: false,
            elected: AtomicBool::new(true),
            known: AtomicBool::new(true),
            renewed_at: Mutex::new(None),
            validity: Duration::ZERO,
        }
    }

    /// A gate that opens while the lease is held and was renewed within `validity`.
    pub fn elected(validity: Duration) -> Self {
        Self {
            election: true,
            elected: AtomicBool::new(false),
            known: AtomicBool::new(false),
            renewed_at: Mutex::new(None),
            validity,
        }
    }

    /// The validity for a lease of `duration` renewed `grace` before expiry: the gate shuts
    /// half a grace period before any other replica may consider the lease expired.
    pub fn validity_for(duration: Duration, grace: Duration) -> Duration {
        duration.saturating_sub(grace / 2)
    }

    pub fn is_leading(&self) -> bool {
        if !self.election {
            return true;
        }
        self.elected.load(Ordering::Acquire)
            && self
                .renewed_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some_and(|at| at.elapsed() < self.validity)
    }

    /// Whether this replica knows if it leads (for readiness).
    pub fn is_known(&self) -> bool {
        self.known.load(Ordering::Acquire)
    }

    pub fn set_known(&self) {
        self.known.store(true, Ordering::Release);
    }

    pub fn set_elected(&self, elected: bool) {
        self.elected.store(elected, Ordering::Release);
        self.set_known();
    }

    /// A lease write that started at `started` succeeded.
    pub fn renewed(&self, started: Instant) {
        let mut renewed_at = self
            .renewed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if renewed_at.is_none_or(|at| at < started) {
            *renewed_at = Some(started);
        }
    }
}

/// A client layer that reports successful writes to one Lease to a [`LeaderGate`].
#[derive(Clone, Debug)]
pub struct RenewalObserver {
    path: String,
    gate: std::sync::Arc<LeaderGate>,
}

impl RenewalObserver {
    pub fn new(namespace: &str, name: &str, gate: std::sync::Arc<LeaderGate>) -> Self {
        Self {
            path: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"),
            gate,
        }
    }
}

impl<S> Layer<S> for RenewalObserver {
    type Service = ObservedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ObservedService {
            inner,
            observer: self.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ObservedService<S> {
    inner: S,
    observer: RenewalObserver,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<Request<Body>> for ObservedService<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let watched =
            request.method() == Method::PATCH && request.uri().path() == self.observer.path;
        let started = Instant::now();
        let gate = self.observer.gate.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            if watched && matches!(&response, Ok(r) if r.status().is_success()) {
                gate.renewed(started);
            }
            response
        })
    }
}

/// This replica's holder identity: `POD_NAME`, or the hostname with a random suffix.
pub fn identity(pod_name: Option<String>) -> String {
    pod_name.filter(|name| !name.is_empty()).unwrap_or_else(|| {
        let host = hostname::get()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "reconciler".to_owned());
        format!("{host}-{:08x}", rand::random::<u32>())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tower::ServiceExt;

    fn gate() -> LeaderGate {
        LeaderGate::elected(LeaderGate::validity_for(
            Duration::from_secs(LEASE_DURATION_SECONDS),
            Duration::from_secs(LEASE_GRACE_SECONDS),
        ))
    }

    #[test]
    fn without_election_the_gate_is_always_open() {
        let gate = LeaderGate::always();
        assert!(gate.is_leading());
        assert!(gate.is_known());
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_needs_both_the_lease_and_a_recent_renewal() {
        let gate = gate();
        assert!(!gate.is_known());
        assert!(!gate.is_leading());
        gate.renewed(Instant::now());
        assert!(!gate.is_leading(), "renewed but not elected");
        gate.set_elected(true);
        assert!(gate.is_known());
        assert!(gate.is_leading());
        // Renewals stop (API unreachable): the gate shuts before the lease expires for
        // the others, though the lease manager still says "leader".
        tokio::time::advance(Duration::from_millis(12_400)).await;
        assert!(gate.is_leading());
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(!gate.is_leading());
        assert!(Duration::from_millis(12_600) < Duration::from_secs(LEASE_DURATION_SECONDS));
        gate.renewed(Instant::now());
        assert!(gate.is_leading());
        // Losing the lease shuts it at once.
        gate.set_elected(false);
        assert!(!gate.is_leading());
    }

    #[tokio::test(start_paused = true)]
    async fn the_observer_records_only_successful_writes_to_its_lease() {
        let gate = Arc::new(gate());
        gate.set_elected(true);
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let service = RenewalObserver::new(
            "namespace-baseline",
            "namespace-baseline-reconciler",
            gate.clone(),
        )
        .layer(mock);
        let lease = "/apis/coordination.k8s.io/v1/namespaces/namespace-baseline/leases/namespace-baseline-reconciler";

        let cases = [
            (Method::GET, lease, 200, false),
            (Method::PATCH, "/api/v1/namespaces/x", 200, false),
            (Method::PATCH, lease, 409, false),
            (Method::PATCH, lease, 200, true),
        ];
        for (method, path, code, renews) in cases {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .unwrap();
            let call = tokio::spawn(service.clone().oneshot(request));
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::empty())
                    .unwrap(),
            );
            call.await.unwrap().unwrap();
            assert_eq!(gate.is_leading(), renews, "{path} {code}");
        }
    }
}
