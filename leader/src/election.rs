//! The elector: client-go's `tryAcquireOrRenew` on a Lease, with conditional writes only,
//! stricter where client-go leaves a window for two writers (a missing Lease, the release).

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
/// After a failed request: retry soon (the holder's gate stays open only until the renew
/// deadline).
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);
/// How long releasing the Lease may take once the last write has settled, retries included:
/// past it the Lease is left to expire (the lease duration), which is safe, only slower.
pub const RELEASE_BUDGET: Duration = Duration::from_secs(5);

/// A Lease request that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// 409: the Lease changed since it was read (or already exists, on create).
    #[error("the Lease changed since it was read")]
    Conflict,
    /// 404 on a write: the Lease was deleted, and its holder lost it with it.
    #[error("the Lease does not exist")]
    NotFound,
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
    /// [`StoreError::Conflict`] otherwise, [`StoreError::NotFound`] if it was deleted.
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
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => Err(StoreError::NotFound),
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

/// The Lease as this replica last saw it (`None`: missing), and when it first saw it so
/// (its own clock).
#[derive(Debug, Clone)]
struct Observed {
    lease: Option<Lease>,
    since: Instant,
}

impl Observed {
    /// What a change restarts the clock on: the spec, or the Lease's absence.
    fn spec(&self) -> Option<LeaseSpec> {
        self.lease
            .as_ref()
            .map(|lease| lease.spec.clone().unwrap_or_default())
    }

    fn holder(&self) -> Option<&str> {
        self.lease
            .as_ref()
            .and_then(|lease| lease.spec.as_ref())
            .and_then(|spec| spec.holder_identity.as_deref())
            .filter(|holder| !holder.is_empty())
    }

    /// Whether this replica must wait for the observation to age before taking the Lease:
    /// it is held by someone, or missing (its last holder may still be writing).
    fn guarded(&self) -> bool {
        self.lease.is_none() || self.holder().is_some()
    }
}

/// How a release ended.
enum Release {
    Released,
    /// The Lease did not name this replica: nothing to do.
    NotHeld,
    /// Someone else wrote the Lease since this replica did: not touched.
    TakenMeanwhile,
    /// No attempt succeeded within [`RELEASE_BUDGET`]: the Lease expires on its own.
    OutOfBudget,
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

    /// Rounds of [`Elector::step`] until `stop` fires (shutdown), then: the gate closes to
    /// new writes, rounds go on (the holder keeps renewing) until the writes under way have
    /// settled, and the Lease is released ([`Elector::release`]). `stop` and the settling
    /// end a round under way too: a round can last several requests' timeouts, and neither
    /// the shutdown nor the release waits for it (every Lease write is conditional, so an
    /// abandoned one changes nothing the release does not read again).
    pub async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        tokio::select! {
            () = self.rounds() => {}
            _ = &mut stop => {}
        }
        self.gate.close();
        let gate = self.gate.clone();
        tokio::select! {
            () = self.rounds() => {}
            () = gate.writes_settled() => {}
        }
        self.release().await;
    }

    /// Rounds of [`Elector::step`], each followed by its delay; never ends.
    async fn rounds(&mut self) {
        loop {
            let delay = match self.step().await {
                Ok(()) if self.gate.holding() => self.timing.retry_period,
                Ok(()) => self.standby_delay(),
                Err(error) => {
                    debug!(%error, "leader election round failed");
                    RETRY_AFTER_FAILURE
                }
            };
            tokio::time::sleep(jittered(delay)).await;
        }
    }

    /// When a standby looks again: at its usual pace, or right when the Lease expires by its
    /// own observation.
    fn standby_delay(&self) -> Duration {
        let expiry = self
            .observed
            .as_ref()
            .filter(|observed| observed.guarded())
            .map(|observed| {
                self.expires_at(observed)
                    .saturating_duration_since(Instant::now())
            });
        expiry.map_or(STANDBY_POLL, |until| {
            STANDBY_POLL.min(until + Duration::from_millis(5))
        })
    }

    /// One round of client-go's `tryAcquireOrRenew`: renew the Lease if held, take it if it
    /// is free or expired by this replica's own observation, create it once it has been
    /// missing for the lease duration, else stand by. The gate follows.
    pub async fn step(&mut self) -> Result<(), StoreError> {
        if self.gate.renewal_overdue() {
            warn!(identity = %self.identity, "no renewal within the renew deadline: giving the lease up");
            self.gate.stand_by();
        }
        if self.gate.holding() && self.renew_fast().await? {
            return Ok(());
        }

        let read = self.guard(self.store.get().await)?;
        let observed = self.observe(read, Instant::now());
        let Some(lease) = observed.lease.clone() else {
            // Missing: deleted, or never created. Whoever held it may still be writing
            // until its own renewal fails; only a lease duration of absence proves it
            // stopped.
            self.lost("the lease was deleted");
            if Instant::now() < self.expires_at(&observed) {
                return Ok(());
            }
            return self.create().await;
        };
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
                    self.renewal(&lease)
                } else {
                    self.takeover(&lease)
                };
                self.write(next, ours).await
            }
        }
    }

    /// The Lease is gone: a holder has lost it (not a doubt that a renewal may lift), and
    /// stands by.
    fn lost(&self, why: &str) {
        if self.gate.holding() {
            warn!(identity = %self.identity, "{why}: lost it, stopped writing");
        }
        self.gate.stand_by();
    }

    /// The holder's renewal from the Lease it last wrote, without reading first. Whether it
    /// succeeded; a conflict closes the gate and asks the API server what happened.
    async fn renew_fast(&mut self) -> Result<bool, StoreError> {
        let Some(observed) = self.observed.as_ref() else {
            return Ok(false);
        };
        let Some(lease) = observed
            .lease
            .as_ref()
            .filter(|_| observed.holder() == Some(self.identity.as_str()))
        else {
            return Ok(false);
        };
        let renewal = self.renewal(lease);
        let started = Instant::now();
        match self.store.replace(&renewal).await {
            Ok(lease) => {
                self.observe(Some(lease), Instant::now());
                self.gate.renewed(started);
                Ok(true)
            }
            Err(StoreError::Conflict) => {
                warn!(identity = %self.identity, "renewal conflicted: stopped writing, reading the lease");
                self.gate.doubt();
                Ok(false)
            }
            Err(StoreError::NotFound) => {
                // Read on: the round then watches the absence from now.
                self.lost("the lease was deleted under its holder");
                Ok(false)
            }
            Err(error) => Err(self.fail(error)),
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
                self.observe(Some(written), Instant::now());
                self.gate.renewed(started);
                Ok(())
            }
            Err(StoreError::NotFound) => {
                // Deleted since it was read: the next round sees it missing.
                self.lost("the lease was deleted");
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
                self.observe(Some(created), Instant::now());
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

    /// Gives the Lease up, if it names this replica, once no write of this replica can
    /// land any more: the gate closes for good, the writes in flight end (answered, or
    /// abandoned at their budget), and the write grace passes after the last abandoned one;
    /// only then is the Lease emptied, which lets a standby take it at once. The release is
    /// conditional on this replica's last write and, when a request fails or conflicts,
    /// re-read and retried within [`RELEASE_BUDGET`]; a Lease someone else holds is never
    /// touched.
    pub async fn release(&mut self) {
        self.gate.close();
        self.gate.writes_settled().await;
        self.gate.stand_by();
        let deadline = Instant::now() + RELEASE_BUDGET;
        let mut attempts = 0_u32;
        let outcome = loop {
            let Some(base) = self.ours() else {
                let emptied = self.observed.as_ref().is_some_and(|observed| {
                    observed.lease.is_some() && observed.holder().is_none()
                });
                break match attempts {
                    0 => Release::NotHeld,
                    // After a failed attempt, an empty holder is that attempt, applied.
                    _ if emptied => Release::Released,
                    _ => Release::TakenMeanwhile,
                };
            };
            attempts += 1;
            match tokio::time::timeout_at(deadline, self.empty(base)).await {
                Err(_) => break Release::OutOfBudget,
                Ok(Ok(lease)) => {
                    self.observe(Some(lease), Instant::now());
                    break Release::Released;
                }
                Ok(Err(error)) => {
                    debug!(identity = %self.identity, %error, attempts, "releasing the lease: request failed, reading it again");
                }
            }
            let pause = RETRY_AFTER_FAILURE.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(pause).await;
            match tokio::time::timeout_at(deadline, self.store.get()).await {
                Err(_) => break Release::OutOfBudget,
                Ok(Ok(read)) => {
                    self.observe(read, Instant::now());
                }
                Ok(Err(error)) => {
                    // Nothing learned: the next attempt writes from the last read again.
                    debug!(identity = %self.identity, %error, attempts, "releasing the lease: reading it failed");
                }
            }
        };
        match outcome {
            Release::Released => info!(identity = %self.identity, attempts, "lease released"),
            Release::NotHeld => {}
            Release::TakenMeanwhile => {
                info!(identity = %self.identity, attempts, "lease not released: it changed since this replica last wrote it");
            }
            Release::OutOfBudget => {
                warn!(identity = %self.identity, attempts, budget = ?RELEASE_BUDGET, "releasing the lease failed within its budget: it expires on its own");
            }
        }
    }

    /// The Lease as last seen, if it names this replica.
    fn ours(&self) -> Option<Lease> {
        let observed = self.observed.as_ref()?;
        if observed.holder() != Some(self.identity.as_str()) {
            return None;
        }
        observed.lease.clone()
    }

    /// One conditional write emptying `base`.
    async fn empty(&self, base: Lease) -> Result<Lease, StoreError> {
        let mut released = base;
        let now = micro_now();
        let spec = released.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        self.store.replace(&released).await
    }

    /// A failed request of the holder (no answer, a server error) says nothing about who
    /// holds the Lease: the gate stays open until the renew deadline after the last
    /// successful renewal, as client-go's holder keeps leading, and the request is retried
    /// soon. (Closing the gate on every failure held each write that came meanwhile for the
    /// retry's answer: under the soak's faults, seconds when that retry stalled.) A conflict
    /// does close it: someone else wrote the Lease.
    fn fail(&self, error: StoreError) -> StoreError {
        if self.gate.holding() {
            debug!(identity = %self.identity, %error, "a Lease request failed: retrying, writes go on until the renew deadline");
        }
        error
    }

    fn guard<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        result.map_err(|error| self.fail(error))
    }

    /// Records what was read or written; the clock restarts only when the spec changed, or
    /// the Lease appeared or went missing.
    fn observe(&mut self, lease: Option<Lease>, at: Instant) -> Observed {
        let spec = lease
            .as_ref()
            .map(|lease| lease.spec.clone().unwrap_or_default());
        let since = match &self.observed {
            Some(observed) if observed.spec() == spec => observed.since,
            _ => at,
        };
        let observed = Observed { lease, since };
        self.observed = Some(observed.clone());
        observed
    }

    /// When the observed Lease expires for this replica: the lease duration (ours, or the
    /// Lease's if longer) after this replica first saw it as it is, or first saw it missing.
    fn expires_at(&self, observed: &Observed) -> Instant {
        let declared = observed
            .lease
            .as_ref()
            .and_then(|lease| lease.spec.as_ref())
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
