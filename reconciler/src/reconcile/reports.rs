//! Writing the reports of one reconcile: for each namespace of its scope the baseline covers,
//! the report its outcome calls for, applied (server-side, our field manager) only when it
//! differs from the stored one; the reports of namespaces it no longer covers deleted. Every
//! request goes through the leader's write gate.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use namespace_baseline_core::holes::Hole;
use namespace_baseline_core::identity::{FIELD_MANAGER, baseline_label_value};
use namespace_baseline_core::plan::{self as core_plan, Baseline, Decision, decide};
use namespace_baseline_core::report::{
    DoorState, EnforcedState, NamespaceState, WallState, namespace_report,
};
use namespace_baseline_core::spec::{Mode, NamespaceBaseline};
use tracing::{debug, info, warn};

use crate::base::error::{Error, Result};
use crate::reconcile::context::Context;
use crate::reconcile::probe::condition::ENFORCED;
use crate::reconcile::status::{self, DnsCheck};
use crate::view::namespace_cache::CachedNamespace;
use crate::view::reports::known::KnownReport;
use crate::view::reports::object::{OpenReport, apply_body, desired, report_name};
use crate::view::reports::stored;
use crate::view::scope::Scope;

/// One write to a report.
enum Write {
    Apply(Box<OpenReport>),
    Delete { namespace: String },
}

/// Writes the reports of a successful reconcile of `baseline` over `scope`, whose outcome is
/// `outcome` (the wall in place in every covered namespace in `Enforce`; in `Audit`, as the
/// caches show it). Nothing while the CRDs are not served. A failed write is logged and left
/// to the next reconcile of its namespace (at the latest the resync): the reports never fail
/// the wall's reconcile.
pub async fn write(
    ctx: &Context,
    baseline: &NamespaceBaseline,
    scope: &Scope,
    outcome: &status::Findings,
) {
    let Some(cache) = ctx.reports.cache() else {
        return;
    };
    let Ok(selector) = baseline.spec.validate() else {
        return;
    };
    let name = baseline.name_any();
    let namespaces: Vec<Arc<CachedNamespace>> = match scope {
        Scope::All => ctx.caches.namespaces.state(),
        Scope::Namespaces(names) => names
            .iter()
            .filter_map(|n| ctx.caches.namespace(n))
            .collect(),
    };
    let covered: HashSet<&str> = core_plan::matched_names(&selector, &namespaces).collect();
    let walls = audited_walls(ctx, baseline, &namespaces);
    let mut holes: HashMap<&str, Vec<&Hole>> = HashMap::new();
    for (namespace, hole) in outcome.holes.iter().flatten() {
        holes.entry(namespace.as_str()).or_default().push(hole);
    }
    let dns = outcome.dns.as_ref().map(|check| match check {
        DnsCheck::Checked(reach) => DoorState::Checked(reach),
        DnsCheck::NotYet(reason) => DoorState::Unknown(reason),
    });
    // The status this reconcile wrote (or found): its Enforced condition, the probe's last
    // verdict on the baseline's wall (probe/: a changed verdict reconciles every namespace).
    let status = ctx.caches.unseen.status(baseline);
    let enforced = status
        .as_ref()
        .and_then(|status| {
            status
                .conditions
                .iter()
                .find(|condition| condition.type_ == ENFORCED)
        })
        .map(|condition| EnforcedState {
            status: &condition.status,
            reason: &condition.reason,
            message: &condition.message,
        });
    let report = report_name(&name);
    // Each Report is built when its write is about to run, so that at most `concurrency` of
    // them are in memory at once, not one per covered namespace (the peak of a large install,
    // and the allocator's footprint after it).
    let applies = covered.iter().filter_map(|namespace| {
        let wall = walls.get(*namespace).unwrap_or(&WallState::InPlace);
        let content = namespace_report(&NamespaceState {
            baseline: &name,
            wall,
            holes: holes.get(namespace).map_or(&[][..], Vec::as_slice),
            dns,
            enforced,
        });
        let wanted = desired(&name, namespace, content);
        let known = stored(&cache, &ctx.caches.unseen, namespace, &report);
        (!known.is_some_and(|known| known.says(&wanted))).then(|| Write::Apply(Box::new(wanted)))
    });
    // Namespaces of the scope no longer covered: their reports go.
    let label = baseline_label_value(&name);
    let uncovered: Vec<String> = match scope {
        Scope::Namespaces(names) => names
            .iter()
            .filter(|namespace| !covered.contains(namespace.as_str()))
            .filter(|namespace| stored(&cache, &ctx.caches.unseen, namespace, &report).is_some())
            .cloned()
            .collect(),
        Scope::All => cache
            .namespaces_labelled(&label)
            .into_iter()
            .filter(|namespace| !covered.contains(namespace.as_str()))
            .filter(|namespace| stored(&cache, &ctx.caches.unseen, namespace, &report).is_some())
            .collect(),
    };
    let deletes = uncovered
        .into_iter()
        .map(|namespace| Write::Delete { namespace });
    // Boxed: the stream's type (closures over this frame's borrows) erased, which the
    // compiler needs to see that the reconcile's future is `Send`.
    let writes = stream::iter(applies.chain(deletes)).boxed();
    let (made, error) = run(ctx, &report, writes).await;
    match error {
        None if made == 0 => {}
        None => debug!(baseline = %name, made, "reports written"),
        Some(error) => {
            warn!(baseline = %name, made, error = %error.report(), "reports not all written: retried by the next reconcile of their namespaces");
        }
    }
}

/// In `Audit` the wall is left as found: each covered namespace's wall as the caches show
/// it. (In `Enforce` a successful reconcile put it in place everywhere: no entry.)
fn audited_walls(
    ctx: &Context,
    baseline: &NamespaceBaseline,
    namespaces: &[Arc<CachedNamespace>],
) -> HashMap<String, WallState> {
    if baseline.spec.mode != Mode::Audit {
        return HashMap::new();
    }
    let policies = ctx.caches.policies.state();
    match decide(Baseline::from(baseline), namespaces, &policies) {
        Decision::Converge(planner) => planner
            .namespaces()
            .filter(|namespace| namespace.selected)
            .map(|namespace| {
                (
                    namespace.namespace.to_owned(),
                    WallState::from_changes(&namespace.changes),
                )
            })
            .collect(),
        Decision::CleanUp(_) | Decision::Invalid(_) => HashMap::new(),
    }
}

/// Removes every report of the baseline `name` (its deletion under `deletionPolicy:
/// Delete`). Fails when one could not be deleted: the finalizer waits for the retry.
pub async fn remove_all(ctx: &Context, name: &str) -> Result<()> {
    let Some(cache) = ctx.reports.cache() else {
        return Ok(());
    };
    let label = baseline_label_value(name);
    let report = report_name(name);
    let writes: Vec<Write> = cache
        .namespaces_labelled(&label)
        .into_iter()
        .filter(|namespace| stored(&cache, &ctx.caches.unseen, namespace, &report).is_some())
        .map(|namespace| Write::Delete { namespace })
        .collect();
    if writes.is_empty() {
        return Ok(());
    }
    let (removed, error) = run(ctx, &report, stream::iter(writes).boxed()).await;
    info!(baseline = %name, removed, "reports removed with their baseline");
    error.map_or(Ok(()), Err)
}

/// Runs `writes` to the reports named `report`, `concurrency` at a time (each taken from the
/// stream only when a slot is free): how many were made, and the first error.
async fn run(ctx: &Context, report: &str, writes: BoxStream<'_, Write>) -> (u32, Option<Error>) {
    writes
        .map(|write| one(ctx, report, write))
        .buffer_unordered(ctx.settings.concurrency.max(1))
        .fold((0, None), |(made, first), result| async move {
            match result {
                Ok(()) => (made + 1, first),
                Err(error) => (made, first.or(Some(error))),
            }
        })
        .await
}

async fn one(ctx: &Context, report: &str, write: Write) -> Result<()> {
    let failed = |namespace: &str, source: kube::Error| Error::OpenReport {
        namespace: namespace.to_owned(),
        name: report.to_owned(),
        source: Box::new(source),
    };
    match write {
        Write::Apply(wanted) => {
            let namespace = wanted.metadata.namespace.clone().unwrap_or_default();
            let api: Api<OpenReport> = Api::namespaced(ctx.client.clone(), &namespace);
            ctx.write(api.patch(
                report,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(apply_body(&wanted)),
            ))
            .await?
            .map_err(|source| failed(&namespace, source))?;
            ctx.caches.unseen.report_written(
                &namespace,
                report,
                Some(KnownReport::from(wanted.as_ref())),
            );
            debug!(%namespace, %report, "report applied");
        }
        Write::Delete { namespace } => {
            let api: Api<OpenReport> = Api::namespaced(ctx.client.clone(), &namespace);
            match ctx
                .write(api.delete(report, &DeleteParams::default()))
                .await?
            {
                Ok(_) => debug!(%namespace, %report, "report deleted"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => return Err(failed(&namespace, source)),
            }
            ctx.caches.unseen.report_written(&namespace, report, None);
        }
    }
    Ok(())
}
