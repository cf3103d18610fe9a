//! The reconcile: a trigger names a baseline; the reconcile reads the cached cluster state,
//! the core decides ([`namespace_baseline_core::plan::decide`]: the wall, the drift, the
//! changes), and the reconciler writes those changes, the status and the Events.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use namespace_baseline_core::doors::Reachability;
use namespace_baseline_core::facts::PolicyFacts;
use namespace_baseline_core::holes::{Hole, Width, namespace_reach};
use namespace_baseline_core::identity::CLEANUP_FINALIZER;
use namespace_baseline_core::plan::{
    self as core_plan, Baseline, Decision, Planner, decide, wants_finalizer,
};
use namespace_baseline_core::spec::{
    Mode, NamespaceBaseline, NamespaceBaselineSpec, NamespaceBaselineStatus, SpecError,
};
use namespace_baseline_core::wall::Change;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::base::error::{Error, ErrorClass, Result};
use crate::base::metrics::ReconcileResult;
use crate::reconcile::ahead::AheadOfThePass;
use crate::reconcile::context::Context;
use crate::reconcile::handoff::{Counts, HANDOFF, count};
use crate::reconcile::state::uid_of;
use crate::reconcile::status::{self, DnsCheck, Failure, Findings};
use crate::reconcile::writes::{apply, patch_finalizers, patch_status, publish, still_needed};
use crate::view::caches::{Caches, DnsCaches};
use crate::view::namespace_cache::CachedNamespace;
use crate::view::policy_cache::CachedPolicy;
use crate::view::scope::Scope;
use crate::view::unseen_writes::PendingWrites;

/// Reconciles one baseline. Permanent failures are reported (status, Event) and end here
/// with `await_change`; transient ones go to [`error_policy`] for a backoff.
pub async fn reconcile(baseline: Arc<NamespaceBaseline>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let name = baseline.name_any();
    let result = crate::base::panics::contain(reconcile_baseline(&baseline, &ctx))
        .await
        .unwrap_or_else(|panic| Err(Failed::from(panic)));
    if result.is_err() {
        // Whatever the error and wherever it came from (a contained panic included), the
        // marks this reconcile took are lost with it: its retry looks at everything.
        ctx.caches.dirty.failed(&name);
    }
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

async fn reconcile_baseline(
    baseline: &NamespaceBaseline,
    ctx: &Arc<Context>,
) -> Result<Action, Failed> {
    ctx.caches.synced().await?;
    let name = baseline.name_any();
    let scope = match ctx.caches.dirty.take(&name, ctx.settings.resync) {
        // A baseline going away, or only reporting, is always seen whole.
        _ if baseline.meta().deletion_timestamp.is_some() || baseline.spec.mode == Mode::Audit => {
            Scope::All
        }
        scope => scope,
    };
    // Before the cache is read: a write of this term not in it is in the cache
    // (unseen_writes.rs).
    let pending = ctx.caches.unseen.snapshot();
    let (namespaces, policies) = ctx.caches.scoped(&scope);
    debug!(
        baseline = %name,
        namespaces = namespaces.len(),
        policies = policies.len(),
        full = matches!(scope, Scope::All),
        "planning"
    );
    let planner = match decide(Baseline::from(baseline), &namespaces, &policies) {
        Decision::CleanUp(writes) => return Ok(clean_up(baseline, ctx, writes).await?),
        Decision::Invalid(spec_error) => Err(spec_error),
        Decision::Converge(planner) => Ok(planner),
    };
    sync_finalizer(baseline, ctx).await?;

    let Converged {
        mut report,
        counts,
        new_holes,
        error,
    } = converge(baseline, ctx, planner, &policies, &scope, &pending).await;
    // The status carries every repair no written status counts yet.
    report.drift_repairs = ctx
        .state
        .repairs
        .add(&uid_of(baseline), report.drift_repairs);
    let previous = ctx.caches.unseen.status(baseline);
    match error {
        None => {
            // The Events tell what was done, whatever becomes of the status write.
            let status = write_status(baseline, ctx, previous.as_ref(), &report).await;
            announce(baseline, ctx, &report, &counts, matches!(status, Ok(true))).await;
            announce_doors_and_holes(baseline, ctx, previous.as_ref(), &report, new_holes).await;
            status?;
            crate::reconcile::reports::write(ctx, baseline, &scope, &report).await;
            Ok(Action::requeue(ctx.settings.resync))
        }
        Some(error) => {
            // Best effort: the original error decides the routing.
            let news = write_status(baseline, ctx, previous.as_ref(), &report)
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
    report: Findings,
    counts: Counts,
    /// Holes not reported before.
    new_holes: Vec<(String, Hole)>,
    error: Option<Error>,
}

/// Adds to each hole that selects namespaces how many of the live namespaces it reaches
/// ("2 of 214 namespaces"), read from the caches: every namespace, not only a scoped
/// reconcile's, and the policy wherever it is. The namespaces are read only when such a hole
/// is reported.
fn measure_reach(holes: &mut [(String, Hole)], caches: &Caches) {
    let selecting = |hole: &Hole| matches!(hole.width, Width::Cluster | Width::Namespaces);
    if !holes.iter().any(|(_, hole)| selecting(hole)) {
        return;
    }
    let namespaces = caches.namespaces.state();
    for (namespace, hole) in holes.iter_mut().filter(|(_, hole)| selecting(hole)) {
        let policy = caches
            .policies
            .get(&ObjectRef::new(&hole.policy).within(namespace));
        hole.reach = policy
            .as_ref()
            .and_then(|policy| policy.spec())
            .and_then(|spec| namespace_reach(spec, hole, &namespaces));
    }
}

async fn converge(
    baseline: &NamespaceBaseline,
    ctx: &Arc<Context>,
    planner: Result<Planner<'_, Arc<CachedNamespace>>, SpecError>,
    policies: &[Arc<CachedPolicy>],
    scope: &Scope,
    pending: &PendingWrites,
) -> Converged {
    let mut report = Findings {
        generation: baseline.meta().generation,
        mode: baseline.spec.mode,
        namespaces: 0,
        left_out: None,
        objects_applied: 0,
        drifted: 0,
        failure: None,
        drift_repairs: 0,
        holes: None,
        dns: None,
    };
    let planner = match planner {
        Ok(planner) => planner,
        Err(spec_error) => {
            ctx.state
                .metrics
                .baselines
                .no_wall_promised(&baseline.name_any());
            let error = Error::InvalidSpec(spec_error);
            report.failure = Some(Failure::from(&error));
            return Converged {
                report,
                counts: Counts::default(),
                new_holes: Vec::new(),
                error: Some(error),
            };
        }
    };
    // The planner saw the scope's namespaces; the status counts them all.
    let name = baseline.name_any();
    let matched = &ctx.caches.matched;
    report.namespaces = match scope {
        Scope::All => matched.replace(&name, planner.matched_names()),
        Scope::Namespaces(names) => matched
            .update(&name, names, planner.matched_names())
            .unwrap_or_else(|| {
                let namespaces = ctx.caches.namespaces.state();
                let all = core_plan::matched_names(planner.selector(), &namespaces);
                matched.replace(&name, all)
            }),
    };
    // Every live namespace the baseline does not match, without a scan (scope.rs).
    report.left_out = Some(ctx.caches.live.count().saturating_sub(report.namespaces));
    let found = core_plan::holes(&planner, policies);
    let (mut holes, new_holes) = ctx.state.holes.update(&uid_of(baseline), scope, &found);
    measure_reach(&mut holes, &ctx.caches);
    report.holes = Some(holes);
    report.dns = if baseline.spec.allow_dns {
        ctx.caches
            .dns
            .as_ref()
            .map(|dns| dns_check(&baseline.spec, dns))
    } else {
        None
    };
    if baseline.spec.mode == Mode::Audit {
        ctx.state.metrics.baselines.no_wall_promised(&name);
        report.drifted = planner
            .writes()
            .map(|(_, changes)| count(changes.len()))
            .sum();
        return Converged {
            report,
            counts: Counts::default(),
            new_holes,
            error: None,
        };
    }
    // Changes are computed namespace by namespace as the writes go out: a first install over
    // thousands of namespaces never holds every desired object at once. A policy someone
    // deleted is re-created as the repair of that deletion; a policy this term is writing and
    // the cache does not show yet is left to the reconcile its echo triggers
    // (unseen_writes.rs). Every namespace is passed on, also one with nothing to write, so
    // that `apply` can yield between them. Whether each namespace's wall was already in place
    // is noted for the unwalled gauges (a write in flight still counts as not in place).
    let walls = std::sync::Mutex::new(Vec::new());
    let planned = planner.namespaces().map(|namespace| {
        let name = namespace.namespace.to_owned();
        walls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name.clone(), namespace.changes.is_empty()));
        let changes = still_needed(ctx, pending, &name, namespace.changes);
        (name, changes)
    });
    // A full pass puts a namespace that starts matching meanwhile ahead of its own writes.
    let writes: Box<dyn Iterator<Item = (String, Vec<Change>)> + Send + '_> = match scope {
        Scope::All => Box::new(AheadOfThePass::new(ctx, baseline, &planner, planned)),
        Scope::Namespaces(_) => Box::new(planned),
    };
    let mut outcome = apply(ctx, Some(baseline), writes).await;
    let scoped = match scope {
        Scope::All => None,
        Scope::Namespaces(names) => Some(names),
    };
    ctx.state.metrics.baselines.planned(
        &name,
        walls
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        scoped,
    );
    // What earlier reconciles handed over and the handoff has collected since: reported here.
    if let Some(landed) = ctx.handoff.take(&name) {
        outcome.absorb(landed);
    }
    let (counts, error) = outcome.into_parts();
    if counts.handed_over > 0 {
        debug!(baseline = %name, in_flight = counts.handed_over, "writes handed over: the reconcile after their answers reports them");
    }
    report.drift_repairs = count(counts.repaired.len());
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
        new_holes,
        error,
    }
}

/// Whether the baseline's DNS door opens onto its DNS Service's ready endpoints, from the
/// DNS namespace's caches.
pub(crate) fn dns_check(spec: &NamespaceBaselineSpec, dns: &DnsCaches) -> DnsCheck {
    let door = spec.dns_target();
    let (namespace, name) = door.service_ref();
    if namespace != dns.namespace {
        return DnsCheck::Checked(Reachability {
            reachable: false,
            reason: "NotWatched",
            message: format!(
                "the DNS Service {namespace}/{name} is in a namespace the reconciler does not watch: run it with --dns-namespace={namespace} (the chart's reconciler.dnsNamespace) and the Role that goes with it"
            ),
        });
    }
    if !dns.is_listed() {
        return DnsCheck::NotYet(format!(
            "the Services, EndpointSlices and pods of {namespace} are not listed yet (if this lasts, check the reconciler's Role there)"
        ));
    }
    DnsCheck::Checked(dns.check(&door))
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
    ctx: &Arc<Context>,
    writes: Vec<(String, Vec<Change>)>,
) -> Result<Action> {
    let name = baseline.name_any();
    // Its holes are no longer reported, its status no longer written.
    ctx.state.forget_baseline(&ctx.caches, baseline);
    ctx.handoff.forget(&name);
    if !has_finalizer(baseline) {
        return Ok(Action::await_change());
    }
    if !writes.is_empty() {
        // Waited for to the end: the finalizer goes only once the wall is gone.
        let (counts, error) = apply(ctx, None, writes.into_iter()).await.into_parts();
        ctx.state.metrics.objects_applied(counts.writes());
        if let Some(error) = error {
            return Err(error);
        }
        if counts.deleted > 0 {
            info!(baseline = %name, deleted = counts.deleted, "wall removed with its baseline");
        }
    }
    crate::reconcile::reports::remove_all(ctx, &name).await?;
    let finalizers = baseline
        .finalizers()
        .iter()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(baseline, ctx, finalizers).await?;
    Ok(Action::await_change())
}

/// Patches the status subresource when, and only when, it would change `previous` (what it
/// says now). Returns whether it wrote.
async fn write_status(
    baseline: &NamespaceBaseline,
    ctx: &Arc<Context>,
    previous: Option<&NamespaceBaselineStatus>,
    report: &Findings,
) -> Result<bool> {
    let mut desired = status::desired(previous, report, &now());
    if let Some(ready) = desired.conditions.iter().find(|c| c.type_ == status::READY) {
        ctx.state
            .metrics
            .baselines
            .set_ready(&baseline.name_any(), &ready.status, &ready.reason);
    }
    let enforced = crate::reconcile::probe::condition::set(
        &mut desired,
        previous,
        baseline,
        report,
        &ctx.state,
        &now(),
    );
    if !status::changed(previous, &desired) {
        return Ok(false);
    }
    let name = baseline.name_any();
    if ctx.handoff.status_in_flight(&name) {
        // One status write at a time: the answer of the one in flight asks for the reconcile
        // that writes this one, so an older status never lands after a newer.
        debug!(baseline = %name, "a status write is in flight: this status waits for its answer");
        return Ok(false);
    }
    // Its own task, waited for at most HANDOFF, then handed over (handoff.rs).
    let mut task = tokio::spawn({
        let (ctx, baseline) = (ctx.clone(), baseline.clone());
        let carried = report.drift_repairs;
        async move {
            let written = patch_status(&baseline, &ctx, &desired).await?;
            ctx.caches.unseen.status_written(&baseline, written);
            ctx.state.repairs.written(&uid_of(&baseline), carried);
            crate::reconcile::probe::condition::announce(&ctx, &baseline, enforced).await;
            Ok(())
        }
    });
    match tokio::time::timeout(HANDOFF, &mut task).await {
        Ok(Ok(written)) => written.map(|()| true),
        Ok(Err(join)) => Err(Error::Panicked(format!(
            "the status write's task ended: {join}"
        ))),
        Err(_) => {
            ctx.handoff.take_over_status(baseline, task);
            Ok(true)
        }
    }
}

/// Events for what a successful reconcile did.
async fn announce(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    report: &Findings,
    counts: &Counts,
    status_changed: bool,
) {
    let name = baseline.name_any();
    if counts.created > 0 {
        info!(baseline = %name, created = counts.created, "wall installed");
    }
    if !counts.repaired.is_empty() {
        info!(baseline = %name, repaired = ?counts.repaired, "drift repaired");
    }
    let (created, deleted, drifted) = (counts.created, counts.deleted, report.drifted);
    let events = [
        (created > 0).then(|| {
            let note = format!(
                "installed {created} NetworkPolicies; the wall covers {} namespaces",
                report.namespaces
            );
            (EventType::Normal, "WallInstalled", "Apply", note)
        }),
        (!counts.repaired.is_empty()).then(|| {
            let note = format!(
                "repaired drifted NetworkPolicies: {}",
                counts.repaired.join(", ")
            );
            (EventType::Normal, "DriftRepaired", "Apply", note)
        }),
        (deleted > 0).then(|| {
            let note = format!("removed {deleted} NetworkPolicies no longer wanted");
            (EventType::Normal, "PoliciesRemoved", "Delete", note)
        }),
        (report.mode == Mode::Audit && drifted > 0 && status_changed).then(|| {
            let note = format!(
                "audit mode: {drifted} wall objects missing or differing in {} namespaces, left as found",
                report.namespaces
            );
            (EventType::Warning, "DriftDetected", "Audit", note)
        }),
    ];
    for (type_, reason, action, note) in events.into_iter().flatten() {
        publish(ctx, baseline, type_, reason, action, note).await;
    }
}

/// Events for the DNS door turning (un)reachable, and for each hole not reported before; the
/// holes metric.
async fn announce_doors_and_holes(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    previous: Option<&NamespaceBaselineStatus>,
    report: &Findings,
    new_holes: Vec<(String, Hole)>,
) {
    let name = baseline.name_any();
    if let Some(DnsCheck::Checked(dns)) = &report.dns {
        let before = previous
            .and_then(|status| {
                status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == status::DNS_REACHABLE)
            })
            .map(|condition| condition.status == "True");
        if before != Some(dns.reachable) && (before.is_some() || !dns.reachable) {
            let (type_, reason) = if dns.reachable {
                (EventType::Normal, "DNSReachable")
            } else {
                warn!(baseline = %name, reason = dns.reason, message = %dns.message, "the DNS door does not reach the DNS endpoints");
                (EventType::Warning, "DNSUnreachable")
            };
            publish(
                ctx,
                baseline,
                type_,
                reason,
                "CheckDNS",
                format!("{}: {}", dns.reason, dns.message),
            )
            .await;
        }
    }
    let Some(holes) = &report.holes else {
        return;
    };
    ctx.state
        .metrics
        .set_holes(&name, holes.iter().map(|(_, hole)| hole));
    for (namespace, hole) in new_holes {
        let type_ = if hole.width.is_breach() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        info!(baseline = %name, %namespace, %hole, "hole in the wall");
        publish(
            ctx,
            baseline,
            type_,
            "HoleOpened",
            "CheckHoles",
            format!("in namespace {namespace}: {hole}"),
        )
        .await;
    }
}

/// Now, to the second: the precision the API server keeps.
fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
