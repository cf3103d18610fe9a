//! Process-wide state, shared by every leadership term's controller and the HTTP server:
//! the leader gate every write goes through ([`State::write`]), metrics, retries, health and
//! the holes each baseline is known to have.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::ResourceExt as _;
use kube::runtime::reflector::Store;
use namespace_baseline_core::holes::Hole;
use namespace_baseline_core::spec::NamespaceBaseline;

use tokio::time::Instant;

use crate::base::metrics::Metrics;
use crate::base::retry::Retries;
use crate::base::retry::WRITE_BOUNDS;
use crate::view::caches::Caches;
use crate::view::scope::Scope;
use namespace_baseline_leader::{HedgeBounds, LeaderGate, NotLeader, TermId};
use tokio::task::JoinHandle;

use crate::base::error::{Error, Result};

#[derive(Debug)]
pub struct State {
    pub metrics: Metrics,
    pub leader: Arc<LeaderGate>,
    pub retries: Retries,
    pub health: Health,
    pub holes: KnownHoles,
    /// The drift repairs no written status counts yet.
    pub repairs: UnwrittenRepairs,
    /// The enforcement probe's last verdicts (probe/).
    pub probes: crate::reconcile::probe::Results,
    /// The NamespaceBaselines as their watch holds them, once the watches have started: the
    /// metrics keep the shares of those that exist only ([`State::render_metrics`]).
    baselines: std::sync::OnceLock<Store<NamespaceBaseline>>,
}

/// What the process-wide memories of a baseline are keyed by: its uid, so that one created
/// again with the same name starts afresh even before the watch shows the first one gone.
pub fn uid_of(baseline: &NamespaceBaseline) -> String {
    baseline.uid().unwrap_or_else(|| baseline.name_any())
}

/// Holes with the namespace each is in.
pub type NamespacedHoles = Vec<(String, Hole)>;

/// The holes each baseline (by uid) has, by namespace: a scoped reconcile updates its
/// namespaces only, the status counts them all, and each new one gets one Event.
#[derive(Debug, Default)]
pub struct KnownHoles {
    by_baseline: Mutex<HashMap<String, BTreeMap<String, Vec<Hole>>>>,
}

impl KnownHoles {
    /// Records the holes found in `scope`; returns every hole `baseline` has now, and those
    /// it did not have before.
    pub fn update(
        &self,
        baseline: &str,
        scope: &Scope,
        found: &[(String, Hole)],
    ) -> (NamespacedHoles, NamespacedHoles) {
        let mut known = self
            .by_baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let holes = known.entry(baseline.to_owned()).or_default();
        let before = match scope {
            Scope::All => std::mem::take(holes),
            Scope::Namespaces(namespaces) => namespaces
                .iter()
                .filter_map(|namespace| Some((namespace.clone(), holes.remove(namespace)?)))
                .collect(),
        };
        let mut new = Vec::new();
        for (namespace, hole) in found {
            let seen = before.get(namespace).is_some_and(|old| {
                old.iter().any(|o| {
                    (&o.policy, o.direction, o.rule) == (&hole.policy, hole.direction, hole.rule)
                })
            });
            if !seen {
                new.push((namespace.clone(), hole.clone()));
            }
            holes
                .entry(namespace.clone())
                .or_default()
                .push(hole.clone());
        }
        let all = holes
            .iter()
            .flat_map(|(namespace, holes)| {
                holes.iter().map(|hole| (namespace.clone(), hole.clone()))
            })
            .collect();
        (all, new)
    }

    /// Forgets a baseline (deleted).
    pub fn forget(&self, baseline: &str) {
        self.by_baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(baseline);
    }
}

/// The drift repairs of each baseline (by uid) that no status written since counts: those of
/// a reconcile whose status write failed, or waited for the answer of one in flight. The
/// next status carries them all (`status.driftRepairs` is what users alert on), and a status
/// written counts off those it carried.
#[derive(Debug, Default)]
pub struct UnwrittenRepairs {
    by_baseline: Mutex<HashMap<String, u32>>,
}

impl UnwrittenRepairs {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.by_baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `repaired` more repairs of `baseline`; returns how many no written status counts.
    pub fn add(&self, baseline: &str, repaired: u32) -> u32 {
        let mut counts = self.counts();
        if repaired == 0 && !counts.contains_key(baseline) {
            return 0;
        }
        let count = counts.entry(baseline.to_owned()).or_default();
        *count = count.saturating_add(repaired);
        *count
    }

    /// A status counting `carried` of them was written.
    pub fn written(&self, baseline: &str, carried: u32) {
        let mut counts = self.counts();
        if let Some(count) = counts.get_mut(baseline) {
            *count = count.saturating_sub(carried);
            if *count == 0 {
                counts.remove(baseline);
            }
        }
    }

    /// A baseline gone.
    pub fn forget(&self, baseline: &str) {
        self.counts().remove(baseline);
    }
}

impl State {
    /// Runs one write to the API, started in the leadership term `term`, through the leader
    /// gate (`LeaderGate::write_in`): held back unless this replica may write and `term` is
    /// still the current one, bounded by the lease, counted in flight until answered. Every
    /// write of the process goes through here.
    pub async fn write<T>(
        &self,
        term: TermId,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<kube::Result<T>> {
        self.leader
            .write_in(Some(term), WRITE_BOUNDS, request)
            .await
            .map_err(|NotLeader| Error::NotLeader)
    }

    /// Runs one write through the leader gate as [`State::write`] does, sending `second()`
    /// (the same write on the hedge client) when the first request is still unanswered past
    /// `hedge.after`, not before `held()` (a `Retry-After` running) has passed
    /// (`LeaderGate::write_hedged`); counts the hedges. With the answer comes the request
    /// that did not give it, when it is still running and may land later.
    pub async fn write_hedged<T, R>(
        &self,
        term: TermId,
        hedge: HedgeBounds,
        first: R,
        held: impl Fn() -> Option<Instant>,
        second: impl FnOnce() -> R,
    ) -> Result<(kube::Result<T>, Option<JoinHandle<()>>)>
    where
        R: Future<Output = kube::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let written = self
            .leader
            .write_hedged(Some(term), WRITE_BOUNDS, hedge, first, held, second)
            .await
            .map_err(|NotLeader| Error::NotLeader)?;
        if written.hedged {
            self.metrics
                .hedged(written.answered_by == namespace_baseline_leader::Attempt::Hedge);
        }
        Ok((written.answer, written.unsettled))
    }

    pub fn new(leader: Arc<LeaderGate>) -> Self {
        Self {
            metrics: Metrics::default(),
            leader,
            retries: Retries::default(),
            health: Health::default(),
            holes: KnownHoles::default(),
            repairs: UnwrittenRepairs::default(),
            probes: crate::reconcile::probe::Results::default(),
            baselines: std::sync::OnceLock::new(),
        }
    }

    /// A baseline gone: deleted (with or without a finalizer: under `Orphan` no reconcile sees
    /// it go, only the watch), or replaced by a new object of the same name. Nothing of it is
    /// remembered any more: its holes (a successor announces its own), its repairs, its
    /// shares of the metrics, its marks, its namespaces and its unseen status. (Not its
    /// retries: a clean-up that fails backs off; the watch forgets them when it is gone.)
    pub fn forget_baseline(&self, caches: &Caches, baseline: &NamespaceBaseline) {
        let (name, uid) = (baseline.name_any(), uid_of(baseline));
        self.holes.forget(&uid);
        self.repairs.forget(&uid);
        self.metrics.set_holes(&name, []);
        self.metrics.baselines.forget(&name);
        caches.unseen.forget(baseline);
        caches.matched.forget(&name);
        caches.dirty.forget(&name);
    }

    /// The watch's store of NamespaceBaselines (set once, by the watches' start).
    pub fn watch_baselines(&self, store: Store<NamespaceBaseline>) {
        let _ = self.baselines.set(store);
    }

    /// The metrics as `/metrics` serves them. The gauges summed over the baselines first
    /// lose the shares of baselines that no longer exist: one deleted under `Orphan` is gone
    /// at once, without a reconcile seeing it go.
    pub fn render_metrics(&self) -> std::result::Result<String, std::fmt::Error> {
        if let Some(store) = self.baselines.get() {
            let live: std::collections::HashSet<String> =
                store.state().iter().map(|b| b.name_any()).collect();
            self.metrics.retain_baselines(|name| live.contains(name));
        }
        self.metrics.render()
    }

    /// Ready: the leadership state is known and the caches are synced. A standby keeps its
    /// caches warm (`watches.rs`), so a ready standby can take over without listing first.
    pub fn is_ready(&self) -> bool {
        self.leader.is_known() && self.health.caches_synced()
    }
}

/// Liveness and cache state.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds after `started` of the last heartbeat of the main loop.
    heartbeat: AtomicU64,
    caches_synced: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            heartbeat: AtomicU64::new(0),
            caches_synced: AtomicBool::new(false),
        }
    }
}

/// How often the main loop beats, and how long a silence means it is stuck.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(60);

impl Health {
    /// The main loop (leadership and controller) is making progress.
    pub fn beat(&self) {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.heartbeat.store(elapsed, Ordering::Release);
    }

    pub fn is_alive(&self) -> bool {
        let last = Duration::from_millis(self.heartbeat.load(Ordering::Acquire));
        self.started.elapsed().saturating_sub(last) < HEARTBEAT_TIMEOUT
    }

    pub fn set_caches_synced(&self, synced: bool) {
        self.caches_synced.store(synced, Ordering::Release);
    }

    pub fn caches_synced(&self) -> bool {
        self.caches_synced.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use namespace_baseline_leader::Timing;

    #[tokio::test(start_paused = true)]
    async fn liveness_follows_the_heartbeat() {
        let health = Health::default();
        health.beat();
        assert!(health.is_alive());
        tokio::time::advance(HEARTBEAT_TIMEOUT + Duration::from_secs(1)).await;
        assert!(!health.is_alive());
        health.beat();
        assert!(health.is_alive());
    }

    /// A baseline deleted under `Orphan` is never reconciled again: its shares of the gauges
    /// summed over the baselines go when the watch no longer holds it.
    #[test]
    fn the_metrics_keep_only_the_shares_of_baselines_the_watch_holds() {
        use crate::fixtures::baseline;
        use kube::runtime::{reflector, watcher};
        use namespace_baseline_core::NamespaceBaselineSpec;

        let state = State::new(Arc::new(LeaderGate::elected(Timing::DEFAULT)));
        let (store, mut writer) = reflector::store::<NamespaceBaseline>();
        let kept = baseline("kept", NamespaceBaselineSpec::new("a=b"));
        let gone = baseline("gone", NamespaceBaselineSpec::new("c=d"));
        writer.apply_watcher_event(&watcher::Event::Apply(kept));
        writer.apply_watcher_event(&watcher::Event::Apply(gone.clone()));
        state.watch_baselines(store);
        state
            .metrics
            .baselines
            .set_ready("kept", "True", "WallInPlace");
        state
            .metrics
            .baselines
            .set_ready("gone", "False", "Forbidden");
        state
            .metrics
            .baselines
            .planned("gone", [("team-a".to_owned(), false)], None);
        let has = |line: &str| state.render_metrics().unwrap().lines().any(|l| l == line);
        assert!(has(
            r#"namespace_baseline_ready{status="False",reason="Forbidden"} 1"#
        ));
        assert!(has("namespace_baseline_unwalled_namespaces 1"));
        writer.apply_watcher_event(&watcher::Event::Delete(gone));
        assert!(has(
            r#"namespace_baseline_ready{status="False",reason="Forbidden"} 0"#
        ));
        assert!(has(
            r#"namespace_baseline_ready{status="True",reason="WallInPlace"} 1"#
        ));
        assert!(has("namespace_baseline_unwalled_namespaces 0"));
    }

    #[test]
    fn readiness_needs_known_leadership_and_synced_caches() {
        let standby = State::new(Arc::new(LeaderGate::elected(Timing::DEFAULT)));
        standby.health.set_caches_synced(true);
        assert!(!standby.is_ready(), "leadership unknown");
        namespace_baseline_leader::testing::stand_by(&standby.leader);
        assert!(
            standby.is_ready(),
            "a known standby with warm caches is ready"
        );
        standby.health.set_caches_synced(false);
        assert!(
            !standby.is_ready(),
            "a standby without warm caches could not act at once"
        );

        let single = State::new(Arc::new(LeaderGate::always()));
        assert!(!single.is_ready(), "leading without caches");
        single.health.set_caches_synced(true);
        assert!(single.is_ready());
    }
}
