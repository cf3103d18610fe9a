//! The election's rules against an in-memory API server that keeps one Lease with a
//! resourceVersion, as the real one does. Time is tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rstest::rstest;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::*;

type Hook = Box<dyn FnOnce(&mut Server) + Send>;

/// The API server's one Lease.
#[derive(Default)]
struct Server {
    lease: Option<Lease>,
    version: u64,
}

impl Server {
    fn holder(&self) -> Option<String> {
        self.lease
            .as_ref()
            .and_then(|lease| lease.spec.as_ref())
            .and_then(|spec| spec.holder_identity.clone())
    }

    fn store(&mut self, mut lease: Lease) -> Lease {
        self.version += 1;
        lease.metadata.resource_version = Some(self.version.to_string());
        self.lease = Some(lease.clone());
        lease
    }

    /// Someone else's write: a new record held by `holder`, renewed now.
    fn write_as(&mut self, holder: &str) {
        let lease = lease(Some(holder), Timestamp::now());
        self.store(lease);
    }
}

fn lease(holder: Option<&str>, renewed: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("lease".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed)),
            acquire_time: Some(MicroTime(renewed)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// One replica's connection to the shared [`Server`].
#[derive(Clone, Default)]
struct FakeLeases {
    server: Arc<Mutex<Server>>,
    /// Requests hang for `REQUEST_TIMEOUT`-like 4 s, then fail (a partition).
    partitioned: Arc<Mutex<bool>>,
    /// The next `n` requests fail at once (500).
    failures: Arc<Mutex<u32>>,
    /// Runs on the server just before the next request is served (another replica's write
    /// landing between this replica's read and its write).
    before_next: Arc<Mutex<Option<Hook>>>,
}

impl FakeLeases {
    fn connect(&self) -> Self {
        Self {
            server: self.server.clone(),
            ..Self::default()
        }
    }

    fn server(&self) -> std::sync::MutexGuard<'_, Server> {
        self.server.lock().unwrap()
    }

    fn partition(&self, on: bool) {
        *self.partitioned.lock().unwrap() = on;
    }

    fn fail_next(&self, n: u32) {
        *self.failures.lock().unwrap() = n;
    }

    fn before_next(&self, hook: impl FnOnce(&mut Server) + Send + 'static) {
        *self.before_next.lock().unwrap() = Some(Box::new(hook));
    }

    async fn serve<T>(
        &self,
        handle: impl FnOnce(&mut Server) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if *self.partitioned.lock().unwrap() {
            tokio::time::sleep(Duration::from_secs(4)).await;
            return Err(StoreError::TimedOut);
        }
        {
            let mut failures = self.failures.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                return Err(StoreError::Failed(Box::new(kube::Error::Api(Box::new(
                    kube::core::Status::failure("injected", "InternalError").with_code(500),
                )))));
            }
        }
        let hook = self.before_next.lock().unwrap().take();
        let mut server = self.server();
        if let Some(hook) = hook {
            hook(&mut server);
        }
        handle(&mut server)
    }
}

impl LeaseStore for FakeLeases {
    async fn get(&self) -> Result<Option<Lease>, StoreError> {
        self.serve(|server| Ok(server.lease.clone())).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError> {
        let lease = lease.clone();
        self.serve(move |server| {
            if server.lease.is_some() {
                return Err(StoreError::Conflict);
            }
            Ok(server.store(lease))
        })
        .await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, StoreError> {
        let lease = lease.clone();
        self.serve(move |server| {
            // As the API server: a PUT with a resourceVersion is conditional on it; one
            // without overwrites whatever is there.
            let current = server
                .lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            let Some(current) = current else {
                return Err(StoreError::Failed(Box::new(kube::Error::Api(Box::new(
                    kube::core::Status::failure("not found", "NotFound").with_code(404),
                )))));
            };
            if lease
                .metadata
                .resource_version
                .as_ref()
                .is_some_and(|version| *version != current)
            {
                return Err(StoreError::Conflict);
            }
            Ok(server.store(lease))
        })
        .await
    }
}

struct Replica {
    elector: Elector<FakeLeases>,
    gate: Arc<LeaderGate>,
    leases: FakeLeases,
}

fn replica(name: &str, server: &FakeLeases) -> Replica {
    let gate = Arc::new(LeaderGate::elected(Timing::DEFAULT));
    let leases = server.connect();
    Replica {
        elector: Elector::new(
            leases.clone(),
            name.to_owned(),
            Timing::DEFAULT,
            gate.clone(),
        ),
        gate,
        leases,
    }
}

async fn advance(duration: Duration) {
    tokio::time::advance(duration).await;
}

#[tokio::test(start_paused = true)]
async fn the_first_replica_creates_the_lease_and_the_second_stands_by() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    let mut b = replica("b", &server);
    assert!(!a.gate.is_known() && !a.gate.is_leading());
    a.elector.step().await.unwrap();
    b.elector.step().await.unwrap();
    assert!(a.gate.is_leading() && a.gate.is_known());
    assert!(!b.gate.is_leading() && !b.gate.holding() && b.gate.is_known());
    assert_eq!(server.server().holder().as_deref(), Some("a"));
}

/// a renews the Lease it holds (someone else's write, from b's side).
fn renew(server: &mut Server) {
    let mut renewed = server.lease.clone().unwrap();
    renewed.spec.as_mut().unwrap().renew_time = Some(MicroTime(Timestamp::now()));
    server.store(renewed);
}

#[tokio::test(start_paused = true)]
async fn a_takeover_based_on_a_stale_read_conflicts_and_leads_nowhere() {
    let server = FakeLeases::default();
    server.server().write_as("a");
    let mut b = replica("b", &server);
    b.elector.step().await.unwrap();
    advance(Timing::DEFAULT.lease_duration).await;
    // b reads the Lease it has seen unchanged for the lease duration; a's renewal lands
    // between that read and b's takeover.
    let put = b.leases.clone();
    b.leases.before_next(move |_| put.before_next(renew));
    let before = server.server().version;
    b.elector.step().await.unwrap();
    assert!(
        !b.gate.holding() && !b.gate.is_leading(),
        "b acted on a stale read"
    );
    assert_eq!(server.server().holder().as_deref(), Some("a"));
    assert_eq!(
        server.server().version,
        before + 1,
        "only a's renewal was written"
    );
}

#[rstest]
#[case::renewed_an_hour_ago(-3600)]
#[case::renewed_now(0)]
#[case::renewed_an_hour_ahead_by_a_skewed_clock(3600)]
#[tokio::test(start_paused = true)]
async fn a_lease_expires_only_by_the_standbys_own_observation(
    #[case] renewed_seconds_from_now: i64,
) {
    let server = FakeLeases::default();
    let renewed = Timestamp::now() + SignedDuration::from_secs(renewed_seconds_from_now);
    server.server().store(lease(Some("a"), renewed));
    let mut b = replica("b", &server);
    b.elector.step().await.unwrap();
    advance(Duration::from_millis(14_900)).await;
    b.elector.step().await.unwrap();
    assert!(
        !b.gate.holding(),
        "taken over before b saw it unchanged for 15 s"
    );
    advance(Duration::from_millis(100)).await;
    b.elector.step().await.unwrap();
    assert!(b.gate.is_leading(), "not taken over after 15 s unchanged");
    let spec = server.server().lease.clone().unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_lease_seen_changing_is_never_taken_over() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    let mut b = replica("b", &server);
    a.elector.step().await.unwrap();
    for _ in 0..60 {
        advance(Timing::DEFAULT.retry_period).await;
        a.elector.step().await.unwrap();
        b.elector.step().await.unwrap();
        assert!(a.gate.is_leading());
        assert!(!b.gate.holding());
    }
}

#[tokio::test(start_paused = true)]
async fn a_conflicting_renewal_stops_writes_before_the_lease_is_read_again() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    a.elector.step().await.unwrap();
    assert!(a.gate.is_leading());
    // b writes the Lease behind a's back (e.g. a took too long and b's view expired).
    server.server().write_as("b");
    let gate = a.gate.clone();
    let closed_when_asked = Arc::new(Mutex::new(None));
    let seen = closed_when_asked.clone();
    // a's renewal conflicts; the hook runs before the GET that follows it.
    let get = a.leases.clone();
    a.leases.before_next(move |_| {
        get.before_next(move |_| *seen.lock().unwrap() = Some(!gate.is_leading()));
    });
    a.elector.step().await.unwrap();
    assert_eq!(
        *closed_when_asked.lock().unwrap(),
        Some(true),
        "the gate was open while a asked"
    );
    assert!(!a.gate.holding() && !a.gate.is_leading());
    assert_eq!(server.server().holder().as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_closes_the_gate_until_a_renewal_succeeds() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    a.elector.step().await.unwrap();
    a.leases.fail_next(1);
    advance(Timing::DEFAULT.retry_period).await;
    assert!(a.elector.step().await.is_err());
    assert!(a.gate.holding(), "one failure does not end the term");
    assert!(!a.gate.is_leading(), "but it stops the writes");
    assert!(!a.gate.wait_leading(Duration::from_millis(100)).await);
    a.elector.step().await.unwrap();
    assert!(a.gate.is_leading());
}

#[tokio::test(start_paused = true)]
async fn the_gate_bounds_writes_to_the_renew_deadline_plus_half_the_margin() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    a.elector.step().await.unwrap();
    let cap = Duration::from_secs(30);
    assert_eq!(
        a.gate.write_budget(cap),
        Some(Duration::from_millis(12_500))
    );
    advance(Duration::from_secs(9)).await;
    assert_eq!(a.gate.write_budget(cap), Some(Duration::from_millis(3_500)));
    assert_eq!(
        a.gate.write_budget(Duration::from_secs(1)),
        Some(Duration::from_secs(1))
    );
    advance(Duration::from_secs(1)).await;
    assert_eq!(a.gate.write_budget(cap), None);
    assert!(!a.gate.is_leading());
    // Without election the gate is always open, bounded by the cap only.
    let single = LeaderGate::always();
    assert!(single.is_leading() && single.holding() && single.is_known());
    assert_eq!(single.write_budget(cap), Some(cap));
}

/// Both replicas run their election loops; a is cut off from the API server at `cut`. At
/// every 10 ms, the latest moment a write a could start then may still reach the API server
/// is recorded; b must take the Lease over only after all of them.
#[tokio::test(start_paused = true)]
async fn a_deposed_leader_stops_writing_before_the_other_acquires() {
    let server = FakeLeases::default();
    let a = replica("a", &server);
    let b = replica("b", &server);
    let (a_gate, b_gate) = (a.gate.clone(), b.gate.clone());
    let a_leases = a.leases.clone();
    let (a_stop, a_stopped) = oneshot::channel();
    let (b_stop, b_stopped) = oneshot::channel();
    let a_task = tokio::spawn(a.elector.run(a_stopped));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b_task = tokio::spawn(b.elector.run(b_stopped));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(a_gate.is_leading() && !b_gate.holding());

    a_leases.partition(true);
    let cut = Instant::now();
    let mut last_write_end = cut;
    let mut gate_closed = None;
    let acquired = loop {
        if let Some(budget) = a_gate.write_budget(Duration::from_secs(30)) {
            last_write_end = last_write_end.max(Instant::now() + budget);
        } else if gate_closed.is_none() {
            gate_closed = Some(Instant::now());
        }
        if b_gate.is_leading() {
            break Instant::now();
        }
        assert!(cut.elapsed() < Duration::from_secs(30), "b never took over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let gate_closed = gate_closed.expect("a's gate never closed");
    assert!(gate_closed - cut <= Timing::DEFAULT.renew_deadline);
    assert!(
        last_write_end < acquired,
        "a could write until {:?} after the cut, b acquired at {:?}",
        last_write_end - cut,
        acquired - cut
    );
    assert!(
        acquired - cut <= Timing::DEFAULT.lease_duration + Duration::from_secs(2),
        "handover took {:?}",
        acquired - cut
    );
    assert_eq!(server.server().holder().as_deref(), Some("b"));
    // a, healed, sees b's lease and stays a standby.
    a_leases.partition(false);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(!a_gate.holding() && b_gate.is_leading());
    let _ = (a_stop.send(()), b_stop.send(()));
    a_task.await.unwrap();
    b_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_ends_its_term_at_the_renew_deadline() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    a.elector.step().await.unwrap();
    a.leases.partition(true);
    let mut rounds = 0;
    while a.gate.holding() {
        let _ = a.elector.step().await;
        rounds += 1;
        assert!(rounds < 10, "still holding after {rounds} failed rounds");
    }
    assert!(!a.gate.is_leading());
    // Healed, and nobody else took the Lease: a may renew its own record at once.
    a.leases.partition(false);
    a.elector.step().await.unwrap();
    assert!(a.gate.is_leading());
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_once_and_a_lost_one_is_never_released() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    let mut b = replica("b", &server);
    a.elector.step().await.unwrap();
    b.elector.step().await.unwrap();
    a.elector.release().await;
    assert!(!a.gate.holding());
    assert_eq!(server.server().holder(), None);
    b.elector.step().await.unwrap();
    assert!(b.gate.is_leading(), "a released lease is free at once");

    // b still believes it holds the Lease, but c has written it since: b's release must
    // not touch it.
    server.server().write_as("c");
    let version = server.server().version;
    b.elector.release().await;
    assert!(!b.gate.holding());
    assert_eq!(server.server().version, version);
    assert_eq!(server.server().holder().as_deref(), Some("c"));
}

#[tokio::test(start_paused = true)]
async fn a_standby_waits_for_a_closed_gate_no_longer_than_it_must() {
    let gate = Arc::new(LeaderGate::elected(Timing::DEFAULT));
    let started = Instant::now();
    assert!(!gate.wait_leading(Duration::from_secs(2)).await);
    assert!(
        started.elapsed() < Duration::from_millis(1),
        "a standby waited"
    );
    // A holder in doubt waits until a renewal reopens the gate.
    gate.renewed(Instant::now());
    gate.doubt();
    let reopen = gate.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        reopen.renewed(Instant::now());
    });
    assert!(gate.wait_leading(Duration::from_secs(2)).await);
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}
