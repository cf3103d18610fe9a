//! The reconcile loop: reads a NamespaceBaseline and the cached cluster state, asks the core
//! what the wall should be and what differs, and writes only those differences.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use namespace_baseline_core::LabelSelector;
use namespace_baseline_core::identity::{
    BASELINE_LABEL, FIELD_MANAGER, baseline_label_value, claims_management, deny_all_policy_name,
    dns_policy_name, managed_selector,
};
use namespace_baseline_core::spec::{
    DeletionPolicy, Mode, NamespaceBaseline, NamespaceBaselineSpec, SpecError,
};
use namespace_baseline_core::wall::{Change, desired_wall, plan_namespace};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{Error, ErrorClass, Result};
use crate::metrics::ReconcileResult;
use crate::retry::{NoTriggerBackoff, WatchBackoff};
use crate::state::State;
use crate::status::{self, Failure, Report};
use crate::triggers::{NamespaceTriggers, baselines_for_policy};

/// Added to a baseline while `deletionPolicy: Delete` (in `Enforce` mode): deleting the
/// baseline then waits until its NetworkPolicies are gone. Never present under `Orphan`.
pub const FINALIZER: &str = "hedronite.io/cleanup";

/// The `reportingController` of the Events this reconciler publishes.
pub const CONTROLLER_NAME: &str = "hedronite.io/namespace-baseline-reconciler";

/// Upper bound for one write: a connection that stops answering is a transient failure,
/// not a reconcile stuck for the client's 295 s read timeout.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Event notes are limited to 1 kB by the API server.
const MAX_EVENT_NOTE: usize = 1024;

/// Tunables from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespaces written to in parallel.
    pub concurrency: usize,
    /// Requeue interval after a successful reconcile: the safety net behind the watches.
    pub resync: Duration,
}

/// The watch caches a reconcile reads the cluster from: no LIST or GET on the hot path.
#[derive(Clone)]
pub struct Caches {
    pub namespaces: Store<Namespace>,
    /// Only policies carrying the managed-by label.
    pub policies: Store<NetworkPolicy>,
    /// Turns `true` once every watch has completed its first list.
    synced: watch::Receiver<bool>,
}

impl Caches {
    pub fn new(
        namespaces: Store<Namespace>,
        policies: Store<NetworkPolicy>,
        synced: watch::Receiver<bool>,
    ) -> Self {
        Self {
            namespaces,
            policies,
            synced,
        }
    }

    /// Waits for the first list of every watch: acting on an empty cache would read as "no
    /// namespace matches" or "no wall installed". (Not `Store::wait_until_ready`: its
    /// one-shot signal wakes only one of several concurrent waiters.)
    async fn synced(&self) -> Result<()> {
        let mut synced = self.synced.clone();
        synced
            .wait_for(|synced| *synced)
            .await
            .map(|_| ())
            .map_err(|_| Error::CachesNotSynced)
    }
}

/// Which watches have completed their first list; says so on a channel (and in the health
/// state) once all have.
struct ListTracker {
    listed: [AtomicBool; 3],
    synced: watch::Sender<bool>,
    state: Arc<State>,
}

impl ListTracker {
    const BASELINES: usize = 0;
    const NAMESPACES: usize = 1;
    const POLICIES: usize = 2;

    fn new(state: Arc<State>) -> (Arc<Self>, watch::Receiver<bool>) {
        let (synced, receiver) = watch::channel(false);
        let tracker = Self {
            listed: Default::default(),
            synced,
            state,
        };
        (Arc::new(tracker), receiver)
    }

    /// Observes one event of watch `index`, after the reflector applied it.
    fn observe<K>(&self, index: usize, event: &watcher::Event<K>) {
        if !matches!(event, watcher::Event::InitDone)
            || self.listed[index].swap(true, Ordering::AcqRel)
        {
            return;
        }
        if self
            .listed
            .iter()
            .all(|listed| listed.load(Ordering::Acquire))
        {
            info!("caches synced");
            self.state.health.set_caches_synced(true);
            self.synced.send_replace(true);
        }
    }
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

    fn ensure_leader(&self) -> Result<()> {
        if self.state.leader.is_leading() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }
}

/// Reconciles one baseline. Permanent failures are reported (status, Event) and end here
/// with `await_change`; transient ones go to [`error_policy`] for a backoff.
pub async fn reconcile(baseline: Arc<NamespaceBaseline>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let name = baseline.name_any();
    let result = reconcile_baseline(&baseline, &ctx).await;
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
    let planner = match decide(baseline, &namespaces, &policies) {
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

/// Writes made, by kind, with the drifted objects repaired.
#[derive(Debug, Default)]
struct Counts {
    created: u32,
    repaired: Vec<String>,
    deleted: u32,
    /// Changes planned but not made (after a failure).
    unapplied: u32,
}

impl Counts {
    fn writes(&self) -> u32 {
        self.created + count(self.repaired.len()) + self.deleted
    }
}

fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

async fn converge(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    planner: Result<Planner<'_>, SpecError>,
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

/// What one reconcile of a baseline does to NetworkPolicies, decided from the baseline and
/// the cluster state alone (no I/O): the reconcile acts on it, `plan` reports it.
pub enum Decision<'a> {
    /// The baseline is being deleted: these deletions (none under `Orphan`, or without the
    /// cleanup finalizer), then the finalizer, if present, is released.
    CleanUp(Vec<(String, Vec<Change>)>),
    /// The spec cannot be acted on: nothing is written (`Ready=False`, `InvalidSpec`).
    Invalid(SpecError),
    /// The wall in every matching namespace: written in `Enforce`, reported as drift in
    /// `Audit`.
    Converge(Planner<'a>),
}

/// Decides what reconciling `baseline` writes, given the namespaces and managed policies
/// (as the watch caches hold them).
pub fn decide<'a>(
    baseline: &'a NamespaceBaseline,
    namespaces: &'a [Arc<Namespace>],
    policies: &'a [Arc<NetworkPolicy>],
) -> Decision<'a> {
    let name = baseline.name_any();
    if baseline.meta().deletion_timestamp.is_some() {
        let writes = if has_finalizer(baseline) && wants_finalizer(&baseline.spec) {
            policies_by_namespace(&name, policies)
                .into_iter()
                .map(|(namespace, existing)| {
                    (
                        namespace.to_owned(),
                        plan_namespace(Vec::new(), &existing, true),
                    )
                })
                .filter(|(_, changes)| !changes.is_empty())
                .collect()
        } else {
            Vec::new()
        };
        return Decision::CleanUp(writes);
    }
    match baseline.spec.validate() {
        Ok(selector) => Decision::Converge(Planner::new(
            name,
            &baseline.spec,
            selector,
            namespaces,
            policies,
        )),
        Err(spec_error) => Decision::Invalid(spec_error),
    }
}

/// The changes that bring the cluster to one baseline's wall, per namespace.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Namespaces the selector matches (terminating ones excluded).
    pub namespaces: u32,
    /// Non-empty change lists, by namespace.
    pub writes: Vec<(String, Vec<Change>)>,
}

impl Plan {
    pub fn changes(&self) -> u32 {
        count(self.writes.iter().map(|(_, changes)| changes.len()).sum())
    }
}

/// The writes of [`Planner`], collected.
pub fn plan(
    baseline: &str,
    spec: &NamespaceBaselineSpec,
    selector: &LabelSelector,
    namespaces: &[Arc<Namespace>],
    policies: &[Arc<NetworkPolicy>],
) -> Plan {
    let planner = Planner::new(
        baseline.to_owned(),
        spec,
        selector.clone(),
        namespaces,
        policies,
    );
    Plan {
        namespaces: planner.matched(),
        writes: planner.writes().collect(),
    }
}

/// Decides, through the core, what to write: the wall in every matching namespace (pruning
/// what the spec no longer wants), and in namespaces that stopped matching, nothing under
/// `Orphan` and removal under `Delete`. Terminating namespaces are left to the namespace
/// controller. One namespace at a time: the reconcile pulls a namespace's changes only when
/// a write slot is free, so the desired objects of a large first install are never all in
/// memory together.
pub struct Planner<'a> {
    baseline: String,
    spec: &'a NamespaceBaselineSpec,
    selector: LabelSelector,
    namespaces: &'a [Arc<Namespace>],
    ours: HashMap<&'a str, Vec<&'a NetworkPolicy>>,
}

/// One namespace as a reconcile sees it.
#[derive(Debug)]
pub struct NamespacePlan<'p> {
    pub namespace: &'p str,
    /// Whether the baseline's selector matches it.
    pub selected: bool,
    /// This baseline's managed policies there.
    pub existing: &'p [&'p NetworkPolicy],
    /// The writes that bring it to the wall (empty when in place, or left as found).
    pub changes: Vec<Change>,
}

impl<'a> Planner<'a> {
    fn new(
        baseline: String,
        spec: &'a NamespaceBaselineSpec,
        selector: LabelSelector,
        namespaces: &'a [Arc<Namespace>],
        policies: &'a [Arc<NetworkPolicy>],
    ) -> Self {
        let ours = policies_by_namespace(&baseline, policies);
        Self {
            baseline,
            spec,
            selector,
            namespaces,
            ours,
        }
    }

    fn live(namespace: &Namespace) -> bool {
        namespace.metadata.deletion_timestamp.is_none()
    }

    /// Namespaces the selector matches (terminating ones excluded).
    pub fn matched(&self) -> u32 {
        count(
            self.namespaces
                .iter()
                .filter(|ns| Self::live(ns) && self.selector.matches(ns.labels()))
                .count(),
        )
    }

    /// Every live namespace the selector matches or this baseline has policies in, with its
    /// changes: the wall where the selector matches; where it no longer does, this
    /// baseline's policies (removed only under `Delete`).
    pub fn namespaces(&self) -> impl Iterator<Item = NamespacePlan<'_>> + Send + '_ {
        let prune = self.spec.deletion_policy == DeletionPolicy::Delete;
        self.namespaces
            .iter()
            .filter(|namespace| Self::live(namespace))
            .filter_map(move |namespace| {
                let name = namespace.metadata.name.as_deref().unwrap_or_default();
                let existing = self.ours.get(name).map_or(&[][..], Vec::as_slice);
                let selected = self.selector.matches(namespace.labels());
                let changes = if selected {
                    plan_namespace(
                        desired_wall(&self.baseline, name, self.spec),
                        existing,
                        true,
                    )
                } else if existing.is_empty() {
                    return None;
                } else {
                    plan_namespace(Vec::new(), existing, prune)
                };
                Some(NamespacePlan {
                    namespace: name,
                    selected,
                    existing,
                    changes,
                })
            })
    }

    /// Non-empty change lists, by namespace.
    pub fn writes(&self) -> impl Iterator<Item = (String, Vec<Change>)> + Send + '_ {
        self.namespaces()
            .filter(|namespace| !namespace.changes.is_empty())
            .map(|namespace| (namespace.namespace.to_owned(), namespace.changes))
    }
}

/// The managed policies of `baseline`, by namespace: those carrying its baseline label, and
/// those with its policy names (a tampered label is drift to repair, not a stranger).
/// Keyed by borrowed names: at thousands of policies, a reconcile builds this on every run.
fn policies_by_namespace<'a>(
    baseline: &str,
    policies: &'a [Arc<NetworkPolicy>],
) -> HashMap<&'a str, Vec<&'a NetworkPolicy>> {
    let label = baseline_label_value(baseline);
    let names = [deny_all_policy_name(baseline), dns_policy_name(baseline)];
    let mut ours: HashMap<&str, Vec<&NetworkPolicy>> = HashMap::new();
    for policy in policies {
        let labels = policy.labels();
        if !claims_management(labels) {
            continue;
        }
        let belongs = labels.get(BASELINE_LABEL) == Some(&label)
            || names
                .iter()
                .any(|name| Some(name) == policy.metadata.name.as_ref());
        if let (true, Some(namespace)) = (belongs, &policy.metadata.namespace) {
            ours.entry(namespace.as_str())
                .or_default()
                .push(policy.as_ref());
        }
    }
    ours
}

/// Applies the writes, namespaces in parallel (at most `concurrency` at once), each
/// namespace's changes in order; `writes` is pulled as slots free up. Every namespace is
/// attempted; the error returned is a transient one if any (a retry will also retry the
/// rest), else the first permanent one.
async fn apply(
    ctx: &Context,
    writes: impl Iterator<Item = (String, Vec<Change>)> + Send,
) -> (Counts, Option<Error>) {
    let results: Vec<(Counts, Option<Error>)> = stream::iter(writes)
        .map(|(_, changes)| apply_namespace(ctx, changes))
        .buffer_unordered(ctx.settings.concurrency.max(1))
        .collect()
        .await;
    let mut total = Counts::default();
    let mut errors = Vec::new();
    for (counts, error) in results {
        total.created += counts.created;
        total.repaired.extend(counts.repaired);
        total.deleted += counts.deleted;
        total.unapplied += counts.unapplied;
        errors.extend(error);
    }
    let transient = errors
        .iter()
        .position(|error| error.class() == ErrorClass::Transient);
    let error = match transient {
        Some(index) => Some(errors.swap_remove(index)),
        None => errors.into_iter().next(),
    };
    (total, error)
}

async fn apply_namespace(ctx: &Context, changes: Vec<Change>) -> (Counts, Option<Error>) {
    let mut counts = Counts::default();
    let total = count(changes.len());
    for change in changes {
        let result = match &change {
            Change::Create(policy) => server_side_apply(ctx, policy).await,
            Change::Repair(policy, _) => server_side_apply(ctx, policy).await,
            Change::Delete { namespace, name } => delete(ctx, namespace, name).await,
        };
        if let Err(error) = result {
            counts.unapplied = total - counts.writes();
            return (counts, Some(error));
        }
        match change {
            Change::Create(_) => counts.created += 1,
            Change::Repair(policy, drift) => counts.repaired.push(format!(
                "{}/{} ({drift:?})",
                policy.namespace().unwrap_or_default(),
                policy.name_any()
            )),
            Change::Delete { .. } => counts.deleted += 1,
        }
    }
    (counts, None)
}

/// Server-side apply of the whole object under our field manager, forced: every spec field
/// is named, so the apply also resets what another manager changed or added.
async fn server_side_apply(ctx: &Context, policy: &NetworkPolicy) -> Result<()> {
    let (Some(namespace), Some(name)) = (&policy.metadata.namespace, &policy.metadata.name) else {
        return Err(Error::MissingField {
            kind: "NetworkPolicy",
            field: "metadata.namespace/name",
        });
    };
    ctx.ensure_leader()?;
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    bounded(api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(policy),
    ))
    .await
    .map_err(|source| Error::Apply {
        namespace: namespace.clone(),
        name: name.clone(),
        source: Box::new(source),
    })?;
    debug!(%namespace, %name, "applied");
    Ok(())
}

async fn delete(ctx: &Context, namespace: &str, name: &str) -> Result<()> {
    ctx.ensure_leader()?;
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    match bounded(api.delete(name, &DeleteParams::default())).await {
        Ok(_) => {
            debug!(%namespace, %name, "deleted");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        }),
    }
}

/// The finalizer is present exactly while the baseline's deletion must remove its wall.
fn wants_finalizer(spec: &NamespaceBaselineSpec) -> bool {
    spec.deletion_policy == DeletionPolicy::Delete && spec.mode == Mode::Enforce
}

fn has_finalizer(baseline: &NamespaceBaseline) -> bool {
    baseline.finalizers().iter().any(|f| f == FINALIZER)
}

async fn sync_finalizer(baseline: &NamespaceBaseline, ctx: &Context) -> Result<()> {
    let wants = wants_finalizer(&baseline.spec);
    if has_finalizer(baseline) == wants {
        return Ok(());
    }
    let mut finalizers: Vec<String> = baseline
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if wants {
        finalizers.push(FINALIZER.to_owned());
    }
    patch_finalizers(baseline, ctx, finalizers).await
}

/// Replaces the finalizer list, guarded by the resourceVersion it was computed from (a
/// concurrent change yields 409, retried).
async fn patch_finalizers(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<()> {
    ctx.ensure_leader()?;
    let name = baseline.name_any();
    let api: Api<NamespaceBaseline> = Api::all(ctx.client.clone());
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": baseline.resource_version(),
        }
    });
    bounded(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
        .await
        .map_err(|source| Error::Finalizer {
            name: name.clone(),
            source: Box::new(source),
        })?;
    info!(baseline = %name, ?finalizers, "finalizers updated");
    Ok(())
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
        .filter(|f| *f != FINALIZER)
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
    ctx.ensure_leader()?;
    let name = baseline.name_any();
    let api: Api<NamespaceBaseline> = Api::all(ctx.client.clone());
    bounded(api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": desired })),
    ))
    .await
    .map_err(|source| Error::Status {
        name: name.clone(),
        source: Box::new(source),
    })?;
    debug!(baseline = %name, "status updated");
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

/// Publishes an Event about `baseline`. Best effort: a lost Event never fails a reconcile.
async fn publish(
    ctx: &Context,
    baseline: &NamespaceBaseline,
    type_: EventType,
    reason: &str,
    action: &str,
    mut note: String,
) {
    if !ctx.state.leader.is_leading() {
        return;
    }
    if note.len() > MAX_EVENT_NOTE {
        let mut end = MAX_EVENT_NOTE - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx
        .recorder
        .publish(&event, &baseline.object_ref(&()))
        .await
    {
        warn!(baseline = %baseline.name_any(), %reason, %error, "could not publish an Event");
    }
}

/// A write that gives up after [`WRITE_TIMEOUT`], as a (transient) connection error.
async fn bounded<T>(request: impl Future<Output = kube::Result<T>>) -> kube::Result<T> {
    tokio::time::timeout(WRITE_TIMEOUT, request)
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {WRITE_TIMEOUT:?}"),
            ))))
        })
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

/// What the namespace cache keeps: name, labels and deletion timestamp, all a plan or a
/// trigger reads. At thousands of namespaces the rest (managed fields, annotations, spec,
/// status, uid, resourceVersion) is most of the cache's memory. (The store's keys ignore
/// uid and resourceVersion.)
pub fn slim_namespace(namespace: &mut Namespace) {
    let metadata = std::mem::take(&mut namespace.metadata);
    namespace.metadata = ObjectMeta {
        name: metadata.name,
        labels: metadata.labels,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
    namespace.spec = None;
    namespace.status = None;
}

/// What the policy cache keeps: identity, labels and spec, all the drift check compares.
pub fn slim_policy(policy: &mut NetworkPolicy) {
    let metadata = std::mem::take(&mut policy.metadata);
    policy.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        labels: metadata.labels,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
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
