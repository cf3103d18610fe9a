//! The elector: client-go's `tryAcquireOrRenew` on a Lease, with conditional writes only.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{LeaderGate, Timing};

/// Upper bound of one Lease request: a request that hangs must not hold up the next round
/// (the gate closes on time whatever the request does).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);
/// A standby looks at the Lease at least this often, so that it sees the holder's renewals
/// (and the moment they stop) promptly.
const STANDBY_POLL: Duration = Duration::from_secs(1);
/// After a failed request: retry soon (the holder's gate is closed meanwhile).
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// A Lease request that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// 409: the Lease changed since it was read (or already exists, on create).
    #[error("the Lease changed since it was read")]
    Conflict,
    /// Anything else: the outcome is unknown.
    #[error("Lease request failed")]
    Failed(#[source] Box<kube::Error>),
    #[error("Lease request timed out after {REQUEST_TIMEOUT:?}")]
    TimedOut,
}

/// Reads and conditionally writes one Lease. [`KubeLeases`] in a cluster; an in-memory API
/// server in the tests.
pub trait LeaseStore: Send + Sync {
    fn get(&self) -> impl Future<Output = Result<Option<Lease>, StoreError>> + Send;
    /// Creates the Lease; [`StoreError::Conflict`] if it exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, StoreError>> + Send;
    /// Replaces the Lease if its `resourceVersion` is still `lease.metadata.resourceVersion`;
    /// [`StoreError::Conflict`] otherwise.
    fn replace(&self, lease: &Lease) -> impl Future<Output = Result<Lease, StoreError>> + Send;
}

/// One Lease on the Kubernetes API: GET, POST and PUT (an update with the resourceVersion it
/// read, which the API server refuses with 409 when the Lease changed since).
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    name: String,
    field_manager: String,
}

impl KubeLeases {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            field_manager: "namespace-baseline-leader-election".to_owned(),
        }
    }

    fn params(&self) -> PostParams {
        PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        }
    }
}

async fn bounded<T>(request: impl Future<Output = kube::Result<T>>) -> Result<T, StoreError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Err(_) => Err(StoreError::TimedOut),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => Err(StoreError::Conflict),
        Ok(Err(error)) => Err(StoreError::Failed(Box::new(error))),
    }
}

impl LeaseStore for KubeLeases {
    async fn get(&self) -> Result<Option<Lease>, StoreError> {
        bounded(self.api.get_opt(&self.name)).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError> {
        let mut lease = lease.clone();
        lease.metadata.name = Some(self.name.clone());
        bounded(self.api.create(&self.params(), &lease)).await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, StoreError> {
        bounded(self.api.replace(&self.name, &self.params(), lease)).await
    }
}

/// The Lease as this replica last saw it, and when it first saw it so (its own clock).
#[derive(Debug, Clone)]
struct Observed {
    lease: Lease,
    since: Instant,
}

impl Observed {
    fn spec(&self) -> LeaseSpec {
        self.lease.spec.clone().unwrap_or_default()
    }

    fn holder(&self) -> Option<&str> {
        self.lease
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.as_deref())
            .filter(|holder| !holder.is_empty())
    }
}

/// Runs the election for one identity and keeps the [`LeaderGate`] true to it.
pub struct Elector<S> {
    store: S,
    identity: String,
    timing: Timing,
    gate: Arc<LeaderGate>,
    observed: Option<Observed>,
}

impl<S: LeaseStore> Elector<S> {
    pub fn new(store: S, identity: String, timing: Timing, gate: Arc<LeaderGate>) -> Self {
        Self {
            store,
            identity,
            timing,
            gate,
            observed: None,
        }
    }

    /// Rounds of [`Elector::step`] until `stop` fires, then releases the Lease if held.
    pub async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            let delay = match self.step().await {
                Ok(()) if self.gate.holding() => self.timing.retry_period,
                Ok(()) => self.standby_delay(),
                Err(error) => {
                    debug!(%error, "leader election round failed");
                    RETRY_AFTER_FAILURE
                }
            };
            tokio::select! {
                () = tokio::time::sleep(jittered(delay)) => {}
                _ = &mut stop => break,
            }
        }
        self.release().await;
    }

    /// When a standby looks again: at its usual pace, or right when the Lease expires by its
    /// own observation.
    fn standby_delay(&self) -> Duration {
        let expiry = self
            .observed
            .as_ref()
            .filter(|observed| observed.holder().is_some())
            .map(|observed| {
                self.expires_at(observed)
                    .saturating_duration_since(Instant::now())
            });
        expiry.map_or(STANDBY_POLL, |until| {
            STANDBY_POLL.min(until + Duration::from_millis(5))
        })
    }

    /// One round of client-go's `tryAcquireOrRenew`: renew the Lease if held, take it if it
    /// is free or expired by this replica's own observation, else stand by. The gate follows.
    pub async fn step(&mut self) -> Result<(), StoreError> {
        if self.gate.renewal_overdue() {
            warn!(identity = %self.identity, "no renewal within the renew deadline: giving the lease up");
            self.gate.stand_by();
        }
        if self.gate.holding() && self.renew_fast().await? {
            return Ok(());
        }

        let read = self.guard(self.store.get().await)?;
        let Some(lease) = read else {
            return self.create().await;
        };
        let observed = self.observe(lease, Instant::now());
        match observed.holder() {
            Some(holder)
                if holder != self.identity && Instant::now() < self.expires_at(&observed) =>
            {
                if self.gate.holding() {
                    warn!(identity = %self.identity, %holder, "another replica holds the lease: stopped writing");
                }
                self.gate.stand_by();
                Ok(())
            }
            holder => {
                let ours = holder == Some(self.identity.as_str());
                let next = if ours {
                    self.renewal(&observed.lease)
                } else {
                    self.takeover(&observed.lease)
                };
                self.write(next, ours).await
            }
        }
    }

    /// The holder's renewal from the Lease it last wrote, without reading first. Whether it
    /// succeeded; a conflict closes the gate and asks the API server what happened.
    async fn renew_fast(&mut self) -> Result<bool, StoreError> {
        let Some(observed) = self.observed.as_ref() else {
            return Ok(false);
        };
        if observed.holder() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let renewal = self.renewal(&observed.lease);
        let started = Instant::now();
        match self.store.replace(&renewal).await {
            Ok(lease) => {
                self.observe(lease, Instant::now());
                self.gate.renewed(started);
                Ok(true)
            }
            Err(StoreError::Conflict) => {
                warn!(identity = %self.identity, "renewal conflicted: stopped writing, reading the lease");
                self.gate.doubt();
                Ok(false)
            }
            Err(error) => {
                self.gate.doubt();
                Err(error)
            }
        }
    }

    /// A conditional write of `lease` naming this replica.
    async fn write(&mut self, lease: Lease, renewal: bool) -> Result<(), StoreError> {
        let started = Instant::now();
        match self.store.replace(&lease).await {
            Ok(written) => {
                if !renewal || !self.gate.holding() {
                    info!(identity = %self.identity, "acquired the lease");
                }
                self.observe(written, Instant::now());
                self.gate.renewed(started);
                Ok(())
            }
            Err(StoreError::Conflict) => {
                // Read stale: someone wrote the Lease in between. Stop, then read again.
                debug!(identity = %self.identity, "lease changed since it was read");
                if self.gate.holding() {
                    self.gate.doubt();
                    Err(StoreError::Conflict)
                } else {
                    self.gate.stand_by();
                    Ok(())
                }
            }
            Err(error) => Err(self.fail(error)),
        }
    }

    async fn create(&mut self) -> Result<(), StoreError> {
        let now = micro_now();
        let lease = Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.timing.lease_duration_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let started = Instant::now();
        match self.store.create(&lease).await {
            Ok(created) => {
                info!(identity = %self.identity, "created and acquired the lease");
                self.observe(created, Instant::now());
                self.gate.renewed(started);
                Ok(())
            }
            Err(StoreError::Conflict) => {
                self.gate.stand_by();
                Ok(())
            }
            Err(error) => Err(self.fail(error)),
        }
    }

    /// Gives the Lease up, if this replica holds it: writes stop first, then the Lease is
    /// emptied with a write conditional on this replica's last write (so a Lease someone
    /// else has taken is never touched).
    pub async fn release(&mut self) {
        let held = self.gate.holding();
        self.gate.stand_by();
        let Some(observed) = self.observed.as_ref() else {
            return;
        };
        if !held || observed.holder() != Some(self.identity.as_str()) {
            return;
        }
        let mut released = observed.lease.clone();
        let now = micro_now();
        let spec = released.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        match self.store.replace(&released).await {
            Ok(lease) => {
                info!(identity = %self.identity, "lease released");
                self.observe(lease, Instant::now());
            }
            Err(StoreError::Conflict) => {
                info!(identity = %self.identity, "lease not released: it changed since this replica last wrote it");
            }
            Err(error) => warn!(identity = %self.identity, %error, "releasing the lease failed"),
        }
    }

    /// A failed request of the holder closes the gate.
    fn fail(&self, error: StoreError) -> StoreError {
        if self.gate.holding() {
            self.gate.doubt();
        }
        error
    }

    fn guard<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        result.map_err(|error| self.fail(error))
    }

    /// Records what was read or written; the clock restarts only when the spec changed.
    fn observe(&mut self, lease: Lease, at: Instant) -> Observed {
        let unchanged = self
            .observed
            .as_ref()
            .is_some_and(|observed| observed.spec() == lease.spec.clone().unwrap_or_default());
        let since = match &self.observed {
            Some(observed) if unchanged => observed.since,
            _ => at,
        };
        let observed = Observed { lease, since };
        self.observed = Some(observed.clone());
        observed
    }

    /// When the observed Lease expires for this replica: the lease duration (ours, or the
    /// Lease's if longer) after this replica first saw it as it is.
    fn expires_at(&self, observed: &Observed) -> Instant {
        let declared = observed
            .lease
            .spec
            .as_ref()
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .map_or(Duration::ZERO, Duration::from_secs);
        observed.since + self.timing.lease_duration.max(declared)
    }

    fn renewal(&self, current: &Lease) -> Lease {
        let mut lease = current.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(micro_now());
        spec.lease_duration_seconds = Some(self.timing.lease_duration_seconds());
        lease
    }

    fn takeover(&self, current: &Lease) -> Lease {
        let mut lease = current.clone();
        let now = micro_now();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.identity.clone());
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.timing.lease_duration_seconds());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        lease
    }
}

fn micro_now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// ±10 %, so that replicas started together do not ask in lockstep.
fn jittered(delay: Duration) -> Duration {
    let factor = 0.9 + rand::random::<f64>() * 0.2;
    delay.mul_f64(factor)
}
