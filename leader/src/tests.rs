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

/// A write's bounds as the reconciler's (it waits 2 s for a closed gate, 30 s at most for
/// an answer).
const BOUNDS: WriteBounds = WriteBounds {
    gate_wait: Duration::from_secs(2),
    timeout: Duration::from_secs(30),
};

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
    /// The next `n` requests never answer (a connection that hangs, with no timeout below).
    hangs: Arc<Mutex<u32>>,
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

    fn hang_next(&self, n: u32) {
        *self.hangs.lock().unwrap() = n;
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
        let hang = {
            let mut hangs = self.hangs.lock().unwrap();
            let hang = *hangs > 0;
            *hangs = hangs.saturating_sub(1);
            hang
        };
        if hang {
            std::future::pending::<()>().await;
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
                return Err(StoreError::NotFound);
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

/// Replicas `a` and `b` running their election loops, `a` holding the Lease.
struct Running {
    a_gate: Arc<LeaderGate>,
    b_gate: Arc<LeaderGate>,
    a_stop: oneshot::Sender<()>,
    b_stop: oneshot::Sender<()>,
    a_task: tokio::task::JoinHandle<()>,
    b_task: tokio::task::JoinHandle<()>,
}

/// Starts `a` (the Lease's holder on `server`) and `b`, and lets them settle for 5 s: `a`
/// leads, `b` stands by.
async fn a_leads_and_b_stands_by(server: &FakeLeases) -> Running {
    server.server().write_as("a");
    let a = replica("a", server);
    let b = replica("b", server);
    let (a_gate, b_gate) = (a.gate.clone(), b.gate.clone());
    let (a_stop, a_stopped) = oneshot::channel();
    let (b_stop, b_stopped) = oneshot::channel();
    let a_task = tokio::spawn(a.elector.run(a_stopped));
    let b_task = tokio::spawn(b.elector.run(b_stopped));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a_gate.is_leading() && !b_gate.holding());
    Running {
        a_gate,
        b_gate,
        a_stop,
        b_stop,
        a_task,
        b_task,
    }
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

/// A replica leading on a Lease that names it (as after a restart under the same name): its
/// first round renews it.
async fn leader(name: &str, server: &FakeLeases) -> Replica {
    server.server().write_as(name);
    let mut replica = replica(name, server);
    replica.elector.step().await.unwrap();
    assert!(replica.gate.is_leading());
    replica
}

#[tokio::test(start_paused = true)]
async fn a_missing_lease_is_created_after_a_lease_duration_of_absence_by_one_replica() {
    let server = FakeLeases::default();
    let mut a = replica("a", &server);
    let mut b = replica("b", &server);
    assert!(!a.gate.is_known() && !a.gate.is_leading());
    a.elector.step().await.unwrap();
    b.elector.step().await.unwrap();
    assert!(a.gate.is_known() && b.gate.is_known(), "standbys know it");
    advance(Timing::DEFAULT.lease_duration - Duration::from_millis(100)).await;
    a.elector.step().await.unwrap();
    b.elector.step().await.unwrap();
    assert!(
        !a.gate.holding() && !b.gate.holding(),
        "created before 15 s of absence"
    );
    assert!(server.server().lease.is_none());
    advance(Duration::from_millis(100)).await;
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
    let mut a = leader("a", &server).await;
    let mut b = replica("b", &server);
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
    let mut a = leader("a", &server).await;
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
async fn a_failed_renewal_keeps_the_gate_open_until_the_renew_deadline_only() {
    let server = FakeLeases::default();
    let mut a = leader("a", &server).await;
    let renewed = Instant::now();
    a.leases.fail_next(1);
    advance(Timing::DEFAULT.retry_period).await;
    assert!(a.elector.step().await.is_err());
    assert!(a.gate.holding(), "one failure does not end the term");
    assert!(
        a.gate.is_leading(),
        "nor stops the writes: it says nothing about who holds the Lease"
    );
    // Failing until the renew deadline, the gate closes then, on time.
    a.leases.fail_next(u32::MAX);
    let deadline = renewed + Timing::DEFAULT.renew_deadline;
    while Instant::now() < deadline - Duration::from_millis(1) {
        assert!(a.gate.is_leading());
        advance(Duration::from_millis(250)).await;
        let _ = a.elector.step().await;
    }
    advance(Duration::from_millis(1)).await;
    assert!(!a.gate.is_leading(), "closed at the renew deadline");
    a.leases.fail_next(0);
}

#[tokio::test(start_paused = true)]
async fn the_gate_bounds_writes_to_the_renew_deadline_plus_half_the_margin() {
    let server = FakeLeases::default();
    let a = leader("a", &server).await;
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
    server.server().write_as("a");
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
    let mut a = leader("a", &server).await;
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
    let mut a = leader("a", &server).await;
    let mut b = replica("b", &server);
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

/// Both replicas run their election loops; one of a's writes is under way (through the
/// gated write path, [`LeaderGate::write`], as a program using this crate writes) when a is
/// told to shut down. b must open its gate
/// only once that write can no longer land: after its answer, or the write grace after it
/// was abandoned at its budget; and promptly then, by a's release rather than by expiry.
#[rstest]
#[case::answered_3_s_later(Some(Duration::from_secs(3)))]
#[case::never_answered(None)]
#[tokio::test(start_paused = true)]
async fn a_write_in_flight_at_shutdown_ends_before_the_successor_writes(
    #[case] answered_after: Option<Duration>,
) {
    let server = FakeLeases::default();
    let Running {
        a_gate,
        b_gate,
        a_stop,
        b_stop,
        a_task,
        b_task,
    } = a_leads_and_b_stands_by(&server).await;

    let gate = a_gate.clone();
    let write = tokio::spawn(async move {
        let result = gate
            .write(BOUNDS, async move {
                match answered_after {
                    Some(after) => tokio::time::sleep(after).await,
                    None => std::future::pending().await,
                }
                Ok(())
            })
            .await;
        (Instant::now(), result)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(a_gate.writes_in_flight(), 1);
    let sigterm = Instant::now();
    a_stop.send(()).unwrap();
    let acquired = loop {
        if b_gate.is_leading() {
            break Instant::now();
        }
        assert!(
            sigterm.elapsed() < Duration::from_secs(30),
            "b never took over"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (ended, result) = write.await.unwrap();
    let answer = result.expect("the write was admitted before the shutdown");
    assert_eq!(answer.is_ok(), answered_after.is_some());
    let may_land_until = if answer.is_ok() {
        ended
    } else {
        ended + Timing::DEFAULT.write_grace()
    };
    assert!(
        may_land_until < acquired,
        "a's write may land until {:?} after SIGTERM, b acquired at {:?}",
        may_land_until - sigterm,
        acquired - sigterm
    );
    assert!(
        acquired - may_land_until < Duration::from_secs(2),
        "not handed over by the release: b acquired {:?} after a's last write settled",
        acquired - may_land_until
    );
    a_task.await.unwrap();
    assert_eq!(server.server().holder().as_deref(), Some("b"));
    let _ = b_stop.send(());
    b_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn once_shutdown_begins_no_write_is_admitted_and_none_waits_for_the_gate() {
    let server = FakeLeases::default();
    let mut a = leader("a", &server).await;
    // A renewal is being retried (a write would wait for it) when the shutdown begins.
    a.gate.doubt();
    a.gate.close();
    let asked = Instant::now();
    let result = a.gate.write(BOUNDS, async { Ok(()) }).await;
    assert!(matches!(result, Err(NotLeader)), "{result:?}");
    assert_eq!(
        asked.elapsed(),
        Duration::ZERO,
        "waited for a gate that will not reopen"
    );
    // The term goes on until the release; its renewals do not reopen the gate.
    a.elector.step().await.unwrap();
    assert!(a.gate.holding() && !a.gate.is_leading());
    assert!(a.gate.admit(Duration::from_secs(30)).is_none());
    assert_eq!(a.gate.writes_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn writes_settle_the_write_grace_after_the_last_abandoned_one() {
    let gate = Arc::new(LeaderGate::elected(Timing::DEFAULT));
    gate.renewed(Instant::now());
    let cap = Duration::from_secs(30);
    let answered = gate.admit(cap).unwrap();
    let abandoned = gate.admit(cap).unwrap();
    assert_eq!(gate.writes_in_flight(), 2);
    gate.close();
    assert!(gate.admit(cap).is_none());
    let started = Instant::now();
    let settled = tokio::spawn({
        let gate = gate.clone();
        async move {
            gate.writes_settled().await;
            Instant::now()
        }
    });
    advance(Duration::from_secs(1)).await;
    drop(abandoned);
    advance(Duration::from_secs(1)).await;
    answered.answered();
    assert_eq!(gate.writes_in_flight(), 0);
    let settled = settled.await.unwrap();
    assert_eq!(
        settled - started,
        Duration::from_secs(1) + Timing::DEFAULT.write_grace()
    );
}

/// A holder renews, and the Lease is gone: the API server's 404 is an answer, not a doubt
/// that the next renewal may lift.
#[tokio::test(start_paused = true)]
async fn a_holder_whose_lease_was_deleted_has_lost_it() {
    let server = FakeLeases::default();
    let mut a = leader("a", &server).await;
    server.server().lease = None;
    advance(Timing::DEFAULT.retry_period).await;
    a.elector
        .step()
        .await
        .expect("a deleted Lease is not a failed request");
    assert!(!a.gate.holding() && !a.gate.is_leading() && a.gate.is_known());
    assert!(server.server().lease.is_none(), "re-created at once");
}

/// Both replicas run their election loops when the Lease is deleted: a stops writing at its
/// next renewal, and nobody leads until a lease duration after the deletion.
#[tokio::test(start_paused = true)]
async fn a_deleted_lease_stops_its_holder_and_no_one_leads_for_a_lease_duration() {
    let server = FakeLeases::default();
    let Running {
        a_gate,
        b_gate,
        a_stop,
        b_stop,
        a_task,
        b_task,
    } = a_leads_and_b_stands_by(&server).await;

    server.server().lease = None;
    let deleted = Instant::now();
    let mut a_stopped_writing = None;
    let next_leader = loop {
        let leading = a_gate.is_leading() || b_gate.is_leading();
        match a_stopped_writing {
            None if !leading => a_stopped_writing = Some(Instant::now()),
            Some(_) if leading => break Instant::now(),
            _ => {}
        }
        assert!(deleted.elapsed() < Duration::from_secs(30), "nobody leads");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let a_stopped_writing = a_stopped_writing.unwrap() - deleted;
    assert!(
        a_stopped_writing <= Timing::DEFAULT.retry_period.mul_f64(1.1) + Duration::from_millis(10),
        "a wrote on for {a_stopped_writing:?} after its Lease was deleted"
    );
    assert!(
        next_leader - deleted >= Timing::DEFAULT.lease_duration,
        "led again {:?} after the deletion",
        next_leader - deleted
    );
    assert!(next_leader - deleted <= Timing::DEFAULT.lease_duration + Duration::from_secs(2));
    assert!(server.server().holder().is_some());
    let _ = (a_stop.send(()), b_stop.send(()));
    a_task.await.unwrap();
    b_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_whose_first_request_fails_is_read_again_and_retried() {
    let server = FakeLeases::default();
    let mut a = leader("a", &server).await;
    a.leases.fail_next(1);
    let started = Instant::now();
    a.elector.release().await;
    assert!(server.server().lease.is_some());
    assert_eq!(server.server().holder(), None, "not released");
    assert!(started.elapsed() < RELEASE_BUDGET);
}

#[tokio::test(start_paused = true)]
async fn a_release_that_cannot_get_through_gives_up_at_its_budget() {
    let server = FakeLeases::default();
    let mut a = leader("a", &server).await;
    a.leases.partition(true);
    let started = Instant::now();
    a.elector.release().await;
    assert_eq!(started.elapsed(), RELEASE_BUDGET);
    assert_eq!(server.server().holder().as_deref(), Some("a"));
}

/// a's renewal hangs (no answer, no timeout) when the shutdown comes: the release goes
/// ahead without waiting for that round.
#[tokio::test(start_paused = true)]
async fn a_round_that_hangs_does_not_delay_the_release_past_its_budget() {
    let server = FakeLeases::default();
    server.server().write_as("a");
    let a = replica("a", &server);
    let (gate, leases) = (a.gate.clone(), a.leases.clone());
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(a.elector.run(stopped));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(gate.is_leading());
    leases.hang_next(1);
    // The next renewal starts within the retry period (+10 %) and hangs.
    tokio::time::sleep(Timing::DEFAULT.retry_period.mul_f64(1.1)).await;
    assert_eq!(*leases.hangs.lock().unwrap(), 0, "no round has started");
    stop.send(()).unwrap();
    tokio::time::timeout(RELEASE_BUDGET, task)
        .await
        .expect("the release waited for the hanging round")
        .unwrap();
    assert!(server.server().lease.is_some());
    assert_eq!(server.server().holder(), None, "not released");
}

#[rstest]
#[case::renew_deadline_equal_to_the_lease(
    15_000,
    15_000,
    2_000,
    "the renew deadline (15s) must end at least twice the minimum write grace (1s) before the lease duration (15s): the write grace, half their difference, is 0ns"
)]
#[case::renew_deadline_past_the_lease(
    15_000,
    20_000,
    2_000,
    "the renew deadline (20s) must end at least twice the minimum write grace"
)]
#[case::a_write_grace_of_five_milliseconds(
    15_000,
    14_990,
    2_000,
    "the renew deadline (14.99s) must end at least twice the minimum write grace (1s) before the lease duration (15s)"
)]
#[case::a_write_grace_just_short_of_the_minimum(
    4_000,
    2_001,
    500,
    "the write grace, half their difference, is 999.5ms"
)]
#[case::retry_period_equal_to_the_renew_deadline(
    15_000,
    10_000,
    10_000,
    "the retry period (10s, up to 11s with its 10 % jitter) must be shorter than the renew deadline (10s)"
)]
#[case::retry_period_reaching_the_renew_deadline_with_jitter(
    15_000,
    10_000,
    9_500,
    "must be shorter than the renew deadline (10s)"
)]
#[case::no_retry_period(15_000, 10_000, 0, "the retry period (0ns")]
#[case::no_renew_deadline(15_000, 0, 2_000, "the renew deadline (0ns) must be longer than zero")]
#[case::lease_duration_below_a_second(
    500,
    200,
    100,
    "the lease duration must be a whole number of seconds, at least 1"
)]
#[case::lease_duration_in_fractions(15_500, 10_000, 2_000, "whole number of seconds")]
fn bad_clocks_are_refused_with_a_message(
    #[case] lease_ms: u64,
    #[case] renew_ms: u64,
    #[case] retry_ms: u64,
    #[case] message: &str,
) {
    let error = Timing::new(
        Duration::from_millis(lease_ms),
        Duration::from_millis(renew_ms),
        Duration::from_millis(retry_ms),
    )
    .expect_err("bad clocks accepted");
    assert!(error.to_string().contains(message), "{error}");
}

#[test]
fn the_default_clocks_and_tight_valid_ones_are_accepted() {
    let default = Timing::new(
        Duration::from_secs(15),
        Duration::from_secs(10),
        Duration::from_secs(2),
    );
    assert_eq!(default, Ok(Timing::DEFAULT));
    let tight = Timing::new(
        Duration::from_secs(3),
        Duration::from_secs(1),
        Duration::from_millis(900),
    )
    .unwrap();
    assert_eq!(tight.write_grace(), MIN_WRITE_GRACE);
}

/// A write belongs to the term it was started in (issue 52): a renewal keeps the term, the
/// Lease taken again after it was lost starts another, and a write of the ended term is
/// refused in it, at once even when it was waiting for the gate.
#[tokio::test(start_paused = true)]
async fn a_write_of_an_ended_term_is_refused_even_when_the_replica_leads_again() {
    let gate = Arc::new(LeaderGate::elected(Timing::DEFAULT));
    gate.renewed(Instant::now());
    let first = gate.current_term();
    gate.renewed(Instant::now());
    assert_eq!(gate.current_term(), first, "a renewal is the same term");
    assert!(gate.admit_in(Some(first), BOUNDS.timeout).is_some());

    gate.doubt();
    let waiting = tokio::spawn({
        let gate = gate.clone();
        async move { gate.write_in(Some(first), BOUNDS, async { Ok(()) }).await }
    });
    tokio::task::yield_now().await;
    gate.stand_by();
    gate.renewed(Instant::now());
    let second = gate.current_term();
    assert_ne!(second, first, "the Lease taken again is another term");
    let started = Instant::now();
    assert_eq!(waiting.await.unwrap().err(), Some(NotLeader));
    assert_eq!(started.elapsed(), Duration::ZERO, "refused at once");
    assert!(gate.admit_in(Some(first), BOUNDS.timeout).is_none());
    let written = gate.write_in(Some(second), BOUNDS, async { Ok(()) }).await;
    assert!(matches!(written, Ok(Ok(()))));
    assert!(
        gate.write(BOUNDS, async { Ok(()) }).await.is_ok(),
        "any term"
    );
}
