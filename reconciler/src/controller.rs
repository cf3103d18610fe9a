//! The reconcile: a trigger names a baseline; the reconcile reads the cached cluster state,
//! the core decides ([`namespace_baseline_core::plan::decide`]: the wall, the drift, the
//! changes), and the reconciler writes those changes, the status and the Events.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use namespace_baseline_core::identity::{CLEANUP_FINALIZER, managed_selector};
use namespace_baseline_core::plan::{Baseline, Decision, Planner, decide, wants_finalizer};
use namespace_baseline_core::spec::{Mode, NamespaceBaseline, SpecError};
use namespace_baseline_core::wall::Change;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::caches::ListTracker;
pub use crate::caches::{Caches, slim_namespace, slim_policy};
use crate::error::{Error, ErrorClass, Result};
use crate::metrics::ReconcileResult;
use crate::retry::{NoTriggerBackoff, WatchBackoff};
use crate::state::State;
use crate::status::{self, Failure, Report};
use crate::triggers::{NamespaceTriggers, baselines_for_policy};
use crate::writes::{Counts, apply, count, patch_finalizers, patch_status, publish};

/// The `reportingController` of the Events this reconciler publishes.
pub const CONTROLLER_NAME: &str = "hedronite.io/namespace-baseline-reconciler";

/// Tunables from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespaces written to in parallel.
    pub concurrency: usize,
    /// Requeue interval after a successful reconcile: the safety net behind the watches.
    pub resync: Duration,
}

/// Everything a reconcile needs, for one leadership term.
pub struct Context {
    pub client: Client,
    pub caches: Caches,
    pub recorder: Recorder,
    pub settings: Settings,
    /// Shared with the HTTP server and the next term.
    pub state: Arc<State>,
}

impl Context {
    pub fn new(
        client: Client,
        caches: Caches,
        settings: Settings,
        state: Arc<State>,
        instance: String,
    ) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.to_owned(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            caches,
            settings,
            state,
        }
    }
}

/// Reconciles one baseline. Permanent failures are reported (status, Event) and end here
/// with `await_change`; transient ones go to [`error_policy`] for a backoff.
pub async fn reconcile(baseline: Arc<NamespaceBaseline>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let name = baseline.name_any();
    let result = crate::panics::contain(reconcile_baseline(&baseline, &ctx))
        .await
        .unwrap_or_else(|panic| Err(Failed::from(panic)));
    let (label, outcome) = match result {
        Ok(action) => {
            ctx.state.retries.succeeded(&name);
            (ReconcileResult::Success, Ok(action))
        }
        Err(Failed { error, news }) if error.class() == ErrorClass::Permanent => {
            warn!(baseline = %name, error = %error.report(), "permanent failure: waiting for a spec change");
            ctx.state.metrics.error(ErrorClass::Permanent);
            if news {
                publish(
                    &ctx,
                    &baseline,
                    EventType::Warning,
                    error.reason(),
                    "Reconcile",
                    format!("{}; not retried until the spec changes", error.report()),
                )
                .await;
            }
            (ReconcileResult::PermanentError, Ok(Action::await_change()))
        }
        Err(Failed { error, .. }) => (ReconcileResult::TransientError, Err(error)),
    };
    ctx.state.metrics.reconciled(label, started.elapsed());
    outcome
}

/// A failed reconcile, and whether it is news: `false` when the status already reported
/// this very failure (a repeated trigger then publishes no second Event).
struct Failed {
    error: Error,
    news: bool,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Self { error, news: true }
    }
}

/// Transient failures: requeue after a capped exponential backoff with jitter, counted per
/// baseline. (Permanent failures never get here: [`reconcile`] turns them into
/// `await_change`; should one arrive anyway, it waits for a change too.)
pub fn error_policy(baseline: Arc<NamespaceBaseline>, error: &Error, ctx: Arc<Context>) -> Action {
    let class = error.class();
    ctx.state.metrics.error(class);
    match class {
        ErrorClass::Permanent => Action::await_change(),
        ErrorClass::Transient => {
            let name = baseline.name_any();
            let delay = ctx.state.retries.failed(&name);
            warn!(
                baseline = %name,
                error = %error.report(),
                attempt = ctx.state.retries.attempts(&name),
                retry_in = ?delay,
                "transient failure"
            );
            Action::requeue(delay)
        }
    }
}

async fn reconcile_baseline(baseline: &NamespaceBaseline, ctx: &Context) -> Result<Action, Failed> {
    ctx.caches.synced().await?;
    let namespaces = ctx.caches.namespaces.state();
    let policies = ctx.caches.policies.state();
    let planner = match decide(Baseline::from(baseline), &namespaces, &policies) {
        Decision::CleanUp(writes) => return Ok(clean_up(baseline, ctx, writes).await?),
        Decision::Invalid(spec_error) => Err(spec_error),
        Decision::Converge(planner) => Ok(planner),
    };
    sync_finalizer(baseline, ctx).await?;

    let Converged {
        report,
        counts,
        error,
    } = converge(baseline, ctx, planner).await;
    match error {
        None => {
            let status_changed = write_status(baseline, ctx, &report).await?;
            announce(baseline, ctx, &report, &counts, status_changed).await;
            Ok(Action::requeue(ctx.settings.resync))
        }
        Some(error) => {
            // Best effort: the original error decides the routing.
            let news = write_status(baseline, ctx, &report)
                .await
                .unwrap_or_else(|status_error| {
                    debug!(baseline = %baseline.name_any(), error = %status_error.report(), "status not written");
                    true
                });
            Err(Failed { error, news })
        }
    }
}

/// What converging a baseline did.
struct Converged {
    report: Report,
    counts: Counts,
    error: Option<Error>,
}

async fn converge(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    planner: Result<Planner<'_, Arc<Namespace>>, SpecError>,
) -> Converged {
    let mut report = Report {
        generation: baseline.meta().generation,
        mode: baseline.spec.mode,
        namespaces: 0,
        objects_applied: 0,
        drifted: 0,
        failure: None,
    };
    let planner = match planner {
        Ok(planner) => planner,
        Err(spec_error) => {
            let error = Error::InvalidSpec(spec_error);
            report.failure = Some(Failure::from(&error));
            return Converged {
                report,
                counts: Counts::default(),
                error: Some(error),
            };
        }
    };
    report.namespaces = planner.matched();
    if baseline.spec.mode == Mode::Audit {
        report.drifted = planner
            .writes()
            .map(|(_, changes)| count(changes.len()))
            .sum();
        return Converged {
            report,
            counts: Counts::default(),
            error: None,
        };
    }
    // Changes are computed namespace by namespace as the writes go out: a first install over
    // thousands of namespaces never holds every desired object at once.
    let (counts, error) = apply(ctx, planner.writes()).await;
    report.objects_applied = counts.writes();
    report.drifted = counts.unapplied;
    report.failure = error.as_ref().map(Failure::from);
    ctx.state.metrics.objects_applied(counts.writes());
    ctx.state
        .metrics
        .drift_repaired(count(counts.repaired.len()));
    Converged {
        report,
        counts,
        error,
    }
}

fn has_finalizer(baseline: &NamespaceBaseline) -> bool {
    Baseline::from(baseline).has_cleanup_finalizer
}

async fn sync_finalizer(baseline: &NamespaceBaseline, ctx: &Context) -> Result<()> {
    let wants = wants_finalizer(&baseline.spec);
    if has_finalizer(baseline) == wants {
        return Ok(());
    }
    let mut finalizers: Vec<String> = baseline
        .finalizers()
        .iter()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .cloned()
        .collect();
    if wants {
        finalizers.push(CLEANUP_FINALIZER.to_owned());
    }
    patch_finalizers(baseline, ctx, finalizers).await
}

/// A baseline being deleted: under `Delete` its policies go (`writes`, from [`decide`]), then
/// the finalizer; under `Orphan` (no finalizer) nothing is touched.
async fn clean_up(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    writes: Vec<(String, Vec<Change>)>,
) -> Result<Action> {
    if !has_finalizer(baseline) {
        return Ok(Action::await_change());
    }
    let name = baseline.name_any();
    if !writes.is_empty() {
        let (counts, error) = apply(ctx, writes.into_iter()).await;
        ctx.state.metrics.objects_applied(counts.writes());
        if let Some(error) = error {
            return Err(error);
        }
        if counts.deleted > 0 {
            info!(baseline = %name, deleted = counts.deleted, "wall removed with its baseline");
        }
    }
    let finalizers = baseline
        .finalizers()
        .iter()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(baseline, ctx, finalizers).await?;
    Ok(Action::await_change())
}

/// Patches the status subresource when, and only when, it would change. Returns whether it
/// wrote.
async fn write_status(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    report: &Report,
) -> Result<bool> {
    let previous = baseline.status.as_ref();
    let desired = status::desired(previous, report, &now());
    if !status::changed(previous, &desired) {
        return Ok(false);
    }
    patch_status(baseline, ctx, &desired).await?;
    Ok(true)
}
/// Events for what a successful reconcile did.
async fn announce(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    report: &Report,
    counts: &Counts,
    status_changed: bool,
) {
    if counts.created > 0 {
        let note = format!(
            "installed {} NetworkPolicies; the wall covers {} namespaces",
            counts.created, report.namespaces
        );
        info!(baseline = %baseline.name_any(), created = counts.created, "wall installed");
        publish(
            ctx,
            baseline,
            EventType::Normal,
            "WallInstalled",
            "Apply",
            note,
        )
        .await;
    }
    if !counts.repaired.is_empty() {
        let note = format!(
            "repaired drifted NetworkPolicies: {}",
            counts.repaired.join(", ")
        );
        info!(baseline = %baseline.name_any(), repaired = ?counts.repaired, "drift repaired");
        publish(
            ctx,
            baseline,
            EventType::Normal,
            "DriftRepaired",
            "Apply",
            note,
        )
        .await;
    }
    if counts.deleted > 0 {
        let note = format!(
            "removed {} NetworkPolicies no longer wanted",
            counts.deleted
        );
        publish(
            ctx,
            baseline,
            EventType::Normal,
            "PoliciesRemoved",
            "Delete",
            note,
        )
        .await;
    }
    if report.mode == Mode::Audit && report.drifted > 0 && status_changed {
        let note = format!(
            "audit mode: {} wall objects missing or differing in {} namespaces, left as found",
            report.drifted, report.namespaces
        );
        publish(
            ctx,
            baseline,
            EventType::Warning,
            "DriftDetected",
            "Audit",
            note,
        )
        .await;
    }
}

/// Now, to the second: the precision the API server keeps.
fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// What, in a baseline, calls for a reconcile: a new object (uid), a spec change
/// (generation), its finalizers, its deletion. A status write (each reconcile that changes
/// something makes one) does not: it would only run a second reconcile that finds nothing
/// to do, at thousands of namespaces a full plan for nothing. Namespace and policy events
/// and the resync still trigger as before.
pub fn baseline_changes(baseline: &NamespaceBaseline) -> Option<u64> {
    let metadata = baseline.meta();
    let mut hasher = DefaultHasher::new();
    metadata.uid.hash(&mut hasher);
    metadata.generation.hash(&mut hasher);
    metadata.finalizers.hash(&mut hasher);
    metadata
        .deletion_timestamp
        .as_ref()
        .map(|time| time.0.as_nanosecond())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Runs the controller until `stop` resolves (shutdown or lost leadership), with watches
/// on NamespaceBaselines, Namespaces and managed NetworkPolicies. The two caches feed both
/// the reconcile and the triggers, so each resource is watched once.
pub async fn run(
    client: Client,
    settings: Settings,
    state: Arc<State>,
    instance: String,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (tracker, synced) = ListTracker::new(state.clone());
    let (namespaces, namespace_writer) = reflector::store::<Namespace>();
    let (policies, policy_writer) = reflector::store::<NetworkPolicy>();
    let (baselines, baseline_writer) = reflector::store::<NamespaceBaseline>();
    let namespace_events = {
        let tracker = tracker.clone();
        watcher(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .backoff(WatchBackoff::default())
        .modify(slim_namespace)
        .reflect(namespace_writer)
        .inspect_ok(move |event| tracker.observe(ListTracker::NAMESPACES, event))
        .touched_objects()
    };
    let policy_events = {
        let tracker = tracker.clone();
        watcher(
            Api::<NetworkPolicy>::all(client.clone()),
            watcher::Config::default()
                .labels(&managed_selector())
                .any_semantic(),
        )
        .backoff(WatchBackoff::default())
        .modify(slim_policy)
        .reflect(policy_writer)
        .inspect_ok(move |event| tracker.observe(ListTracker::POLICIES, event))
        .touched_objects()
    };
    let baseline_events = watcher(
        Api::<NamespaceBaseline>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .backoff(WatchBackoff::default())
    .reflect(baseline_writer)
    .inspect_ok(move |event| tracker.observe(ListTracker::BASELINES, event))
    .applied_objects()
    .predicate_filter(baseline_changes, PredicateConfig::default());

    let namespace_triggers = NamespaceTriggers::default();
    let for_namespace = {
        let baselines = baselines.clone();
        move |namespace: Namespace| namespace_triggers.baselines_for(&namespace, &baselines.state())
    };
    let for_policy = {
        let baselines = baselines.clone();
        move |policy: NetworkPolicy| baselines_for_policy(&policy, &baselines.state())
    };

    let caches = Caches::new(namespaces, policies, synced);
    let ctx = Arc::new(Context::new(
        client,
        caches,
        settings,
        state.clone(),
        instance,
    ));
    Controller::for_stream(baseline_events, baselines)
        .watches_stream(namespace_events, for_namespace)
        .watches_stream(policy_events, for_policy)
        // Each watch backs off on its own; a shared pause would blind them all (retry.rs).
        .trigger_backoff(NoTriggerBackoff)
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(baseline = %object.name, "reconciled"),
                Err(error) => debug!(%error, "controller event"),
            }
        })
        .await;
    state.health.set_caches_synced(false);
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
