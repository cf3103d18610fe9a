//! The reconcile's writes to the API (NetworkPolicies, finalizers, status, Events), each
//! through [`Context::write`], which holds it back unless this replica may write (the leader
//! gate) and bounds it by the lease.

use std::future::Future;
use std::sync::Arc;

use futures::stream::FuturesUnordered;
use futures::{StreamExt, stream};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use namespace_baseline_core::identity::FIELD_MANAGER;
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};
use namespace_baseline_core::wall::{Change, Drift};
use serde_json::json;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::base::error::{Error, Result};
use crate::base::retry::{Idempotent, Throttled};
use crate::reconcile::context::Context;
use crate::reconcile::handoff::{HANDOFF, WriteResults, WriteTask, count, target};
use crate::view::unseen_writes::PendingWrites;

/// Event notes are limited to 1 kB by the API server.
const MAX_EVENT_NOTE: usize = 1024;

/// How many namespaces a pass plans between two yields to the runtime.
const YIELD_EVERY: usize = 256;

/// The planned `changes` of `namespace` that are still to be written: a policy this term is
/// writing and the cache does not show yet (in `pending`, read before the cache) is left to
/// the reconcile its echo triggers, and so is one whose hedged apply's late request, still
/// able to land, carries another object; a policy someone else deleted is re-created as the
/// repair of that deletion (unseen_writes.rs).
pub(crate) fn still_needed(
    ctx: &Context,
    pending: &PendingWrites,
    namespace: &str,
    changes: Vec<Change>,
) -> Vec<Change> {
    fn name_of(policy: &NetworkPolicy) -> &str {
        policy.metadata.name.as_deref().unwrap_or_default()
    }
    let unseen = &ctx.caches.unseen;
    changes
        .into_iter()
        .filter(|change| match change {
            Change::Create(policy) | Change::Repair(policy, _) => {
                !pending.contains(namespace, name_of(policy)) && !unseen.late_apply_differs(policy)
            }
            Change::Delete { .. } => true,
        })
        .map(|change| match &change {
            Change::Create(policy) if unseen.deleted_by_others(namespace, name_of(policy)) => {
                change.recreating()
            }
            _ => change,
        })
        .collect()
}

/// Applies the writes, at most `concurrency` requests in flight (the changes of a namespace
/// are independent: different objects), pulling `writes` as slots free up so that a first
/// install over thousands of namespaces never holds every desired object at once. Every
/// change is attempted, each write as its own task, marked pending before it goes out. Once
/// all have gone out, the writes still in flight are waited for at most [`HANDOFF`] when
/// `handoff` names the baseline (then handed over, `handoff.rs`), else to the end.
/// What the writes answered is the outcome ([`Outcome::into_parts`]: the counts, and a
/// transient error if any, else the first permanent one).
pub(crate) async fn apply(
    ctx: &Arc<Context>,
    handoff: Option<&NamespaceBaseline>,
    writes: impl Iterator<Item = (String, Vec<Change>)> + Send,
) -> WriteResults {
    // Each change is counted and dropped as its write answers: collecting them until the
    // end would hold every desired object of a first install.
    // A pass over thousands of namespaces with little to write would plan them all in one
    // poll: it yields every few namespaces, so that the watches (and the triggers they mark)
    // are read meanwhile and a namespace marked meanwhile can go ahead (ahead.rs).
    let changes = stream::iter(writes.enumerate())
        .then(|(index, (_, changes))| async move {
            if index % YIELD_EVERY == YIELD_EVERY - 1 {
                tokio::task::yield_now().await;
            }
            stream::iter(changes)
        })
        .flatten();
    let mut changes = std::pin::pin!(changes);
    let limit = ctx.settings.concurrency.max(1);
    let baseline: Option<Arc<str>> = handoff.map(|baseline| baseline.name_any().into());
    let mut in_flight: FuturesUnordered<WriteTask> = FuturesUnordered::new();
    let mut outcome = WriteResults::default();
    while let Some(change) = changes.next().await {
        while in_flight.len() >= limit {
            if let Some(joined) = in_flight.next().await {
                outcome.add(joined);
            }
        }
        in_flight.push(spawn_write(ctx, change, baseline.clone()));
    }
    match handoff {
        None => {
            while let Some(joined) = in_flight.next().await {
                outcome.add(joined);
            }
        }
        Some(baseline) => {
            let deadline = Instant::now() + HANDOFF;
            while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, in_flight.next()).await {
                outcome.add(joined);
            }
            if !in_flight.is_empty() {
                outcome.counts.handed_over = count(in_flight.len());
                ctx.handoff.take_over(baseline, in_flight);
            }
        }
    }
    outcome
}

/// Starts one write of `baseline`'s as its own task, marked pending first (so that a plan made
/// while it is in flight leaves it alone, `unseen_writes.rs`).
fn spawn_write(ctx: &Arc<Context>, change: Change, baseline: Option<Arc<str>>) -> WriteTask {
    let (namespace, name) = target(&change);
    match &change {
        Change::Create(_) | Change::Repair(..) => ctx.caches.unseen.applying(namespace, name),
        Change::Delete { .. } => ctx.caches.unseen.deleting(namespace, name),
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let result = crate::base::panics::contain(apply_change(&ctx, &change, baseline))
            .await
            .and_then(|result| result);
        (change, result)
    })
}

async fn apply_change(ctx: &Context, change: &Change, baseline: Option<Arc<str>>) -> Result<()> {
    match change {
        Change::Create(policy) => server_side_apply(ctx, policy, baseline).await,
        Change::Repair(policy, drift) => {
            let applied = server_side_apply(ctx, policy, baseline).await;
            if applied.is_ok() && *drift == Drift::Deleted {
                ctx.caches.unseen.recreated(
                    policy.metadata.namespace.as_deref().unwrap_or_default(),
                    policy.metadata.name.as_deref().unwrap_or_default(),
                );
            }
            applied
        }
        Change::Delete { namespace, name } => delete(ctx, namespace, name).await,
    }
}

/// Server-side apply of the whole object under our field manager, forced: every spec field
/// is named, so the apply also resets what another manager changed or added. The same apply
/// sent twice has one outcome, so it is hedged ([`Context::hedging`]): still unanswered after
/// the bound, it goes out again on a fresh connection and the first success is the answer;
/// not while the API server has asked it to slow down (a 429's `Retry-After`: `Throttled`).
/// The request that did not answer first runs on and may land later: until nothing of it
/// can, no plan writes another object in its place (it would land over the newer object, to
/// be read as drift: `UnseenWrites::late_apply`), then `baseline`'s reconcile of its
/// namespace is asked for.
async fn server_side_apply(
    ctx: &Context,
    policy: &NetworkPolicy,
    baseline: Option<Arc<str>>,
) -> Result<()> {
    let (Some(namespace), Some(name)) = (&policy.metadata.namespace, &policy.metadata.name) else {
        return Err(Error::MissingField {
            kind: "NetworkPolicy",
            field: "metadata.namespace/name",
        });
    };
    let throttled = Throttled::default();
    let first = apply_request(&ctx.client, policy, Some(throttled.clone()));
    let (answer, unsettled) = match &ctx.hedging {
        Some(hedging) => ctx
            .state
            .write_hedged(
                ctx.term,
                hedging.bounds,
                first,
                move || throttled.retry_at(),
                || apply_request(&hedging.client, policy, None),
            )
            .await
            .map_or_else(
                |error| (Err(error), None),
                |(answer, unsettled)| (Ok(answer), unsettled),
            ),
        None => (ctx.write(first).await, None),
    };
    let applied = answer.and_then(|answer| {
        answer.map_err(|source| Error::Apply {
            namespace: namespace.clone(),
            name: name.clone(),
            source: Box::new(source),
        })
    });
    if applied.is_err() {
        // Nothing for the watch to show (or nothing known): the next plan may write it.
        ctx.caches.unseen.apply_failed(namespace, name);
    } else {
        ctx.caches.unseen.applied(namespace, name);
    }
    if let (Ok(_), Some(unsettled)) = (&applied, unsettled) {
        ctx.caches.unseen.late_apply(policy);
        let (unseen, dirty, handoff) = (
            ctx.caches.unseen.clone(),
            ctx.caches.dirty.clone(),
            ctx.handoff.clone(),
        );
        let (namespace, name) = (namespace.clone(), name.clone());
        tokio::spawn(async move {
            let _ = unsettled.await;
            unseen.late_apply_ended(&namespace, &name);
            if let Some(baseline) = baseline {
                dirty.namespace(&baseline, &namespace);
                handoff.ask_for(&baseline);
            }
        });
    }
    applied?;
    debug!(%namespace, %name, "applied");
    Ok(())
}

/// The request of one forced server-side apply of `object` (of any kind) on `client` (as
/// `Api::patch` builds it): idempotent (retried by the client after a 500 or a dropped
/// connection), and carrying `throttled` for the client's retry to mark.
fn apply_request<K>(
    client: &Client,
    object: &K,
    throttled: Option<Throttled>,
) -> impl Future<Output = kube::Result<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    let meta = object.meta();
    let request = kube::core::Request::new(K::url_path(&(), meta.namespace.as_deref())).patch(
        meta.name.as_deref().unwrap_or_default(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    );
    let client = client.clone();
    async move {
        let mut request = request.map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert("patch");
        request.extensions_mut().insert(Idempotent);
        if let Some(throttled) = throttled {
            request.extensions_mut().insert(throttled);
        }
        client.request::<K>(request).await
    }
}

async fn delete(ctx: &Context, namespace: &str, name: &str) -> Result<()> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    match ctx
        .write(api.delete(name, &DeleteParams::default()))
        .await?
    {
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

/// Replaces the finalizer list with a JSON patch that first tests the list it was computed
/// from (as kube's `finalizer()` does): a concurrent change of the finalizers fails the test
/// and is retried as a conflict, while a change of anything else (this reconciler's own
/// status writes bump the resourceVersion the cache holds) does not get in the way.
pub(crate) async fn patch_finalizers(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<()> {
    let name = baseline.name_any();
    let failed = |source| Error::Finalizer {
        name: name.clone(),
        source: Box::new(source),
    };
    let read = match baseline.finalizers() {
        [] => serde_json::Value::Null,
        read => json!(read),
    };
    let patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": read},
        {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
    ]))
    .map_err(|error| failed(kube::Error::SerdeError(error)))?;
    let api: Api<NamespaceBaseline> = Api::all(ctx.client.clone());
    ctx.write(api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch)))
        .await?
        .map_err(|source| match source {
            // kube-apiserver answers a failed test 422: the finalizers changed since read.
            kube::Error::Api(status) if status.code == 422 => failed(kube::Error::Api(
                kube::core::Status::failure(&status.message, "Conflict")
                    .with_code(409)
                    .boxed(),
            )),
            source => failed(source),
        })?;
    info!(baseline = %name, ?finalizers, "finalizers updated");
    Ok(())
}

/// Patches the status subresource with `desired`; returns the baseline as the API server
/// answered. The patch names the whole status: sent twice, it has one outcome, so the client
/// retries it after a 500 or a dropped connection (`Idempotent`); only one status write of a
/// baseline is in flight at a time (handoff.rs).
pub(crate) async fn patch_status(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    desired: &NamespaceBaselineStatus,
) -> Result<NamespaceBaseline> {
    let name = baseline.name_any();
    let request = kube::core::Request::new(NamespaceBaseline::url_path(&(), None))
        .patch_subresource(
            "status",
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": desired })),
        )
        .map_err(kube::Error::BuildRequest);
    let client = ctx.client.clone();
    let written = ctx
        .write(async move {
            let mut request = request?;
            request.extensions_mut().insert("patch_status");
            request.extensions_mut().insert(Idempotent);
            client.request::<NamespaceBaseline>(request).await
        })
        .await?
        .map_err(|source| Error::Status {
            name: name.clone(),
            source: Box::new(source),
        })?;
    debug!(baseline = %name, "status updated");
    Ok(written)
}

/// Publishes an Event about `baseline`. Best effort: a lost Event never fails a reconcile.
pub(crate) async fn publish(
    ctx: &Context,
    baseline: &NamespaceBaseline,
    type_: EventType,
    reason: &str,
    action: &str,
    mut note: String,
) {
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
    // Its own task, waited for at most HANDOFF: a stalled Event never holds the reconcile.
    let (state, recorder, term) = (ctx.state.clone(), ctx.recorder.clone(), ctx.term);
    let (reference, name) = (baseline.object_ref(&()), baseline.name_any());
    let reason = reason.to_owned();
    let task = tokio::spawn(async move {
        match state
            .write(term, recorder.publish(&event, &reference))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                warn!(baseline = %name, %reason, %error, "could not publish an Event");
            }
            Err(error) => {
                debug!(baseline = %name, %reason, %error, "Event not published");
            }
        }
    });
    let _ = tokio::time::timeout(HANDOFF, task).await;
}
