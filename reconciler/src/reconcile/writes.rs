//! The reconcile's writes to the API (NetworkPolicies, finalizers, status, Events), each
//! through [`Context::write`], which holds it back unless this replica may write (the leader
//! gate) and bounds it by the lease.

use futures::{StreamExt, stream};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use namespace_baseline_core::identity::FIELD_MANAGER;
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};
use namespace_baseline_core::wall::{Change, Drift};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::base::error::{Error, ErrorClass, Result};
use crate::reconcile::context::Context;
use crate::view::unseen_writes::PendingWrites;

/// Event notes are limited to 1 kB by the API server.
const MAX_EVENT_NOTE: usize = 1024;

/// Writes made, by kind, with the drifted objects repaired.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub created: u32,
    pub repaired: Vec<String>,
    pub deleted: u32,
    /// Changes planned but not made (after a failure).
    pub unapplied: u32,
}

impl Counts {
    pub fn writes(&self) -> u32 {
        self.created + count(self.repaired.len()) + self.deleted
    }

    /// A change written.
    fn count(&mut self, change: Change) {
        match change {
            Change::Create(_) => self.created += 1,
            Change::Repair(policy, drift) => self.repaired.push(format!(
                "{}/{} ({})",
                policy.namespace().unwrap_or_default(),
                policy.name_any(),
                drift.describe()
            )),
            Change::Delete { .. } => self.deleted += 1,
        }
    }
}

pub(crate) fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// How many namespaces a pass plans between two yields to the runtime.
const YIELD_EVERY: usize = 256;

/// The planned `changes` of `namespace` that are still to be written: a policy this term is
/// writing and the cache does not show yet (in `pending`, read before the cache) is left to
/// the reconcile its echo triggers; a policy someone else deleted is re-created as the repair
/// of that deletion (unseen_writes.rs).
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
                !pending.contains(namespace, name_of(policy))
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
/// change is attempted; the error returned is a transient one if any (a retry will also
/// retry the rest), else the first permanent one.
pub(crate) async fn apply(
    ctx: &Context,
    writes: impl Iterator<Item = (String, Vec<Change>)> + Send,
) -> (Counts, Option<Error>) {
    // Each change is counted and dropped as its write answers: collecting them until the
    // end would hold every desired object of a first install (10,000 at 5,000 namespaces).
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
    let (total, mut errors) = changes
        .map(|change| async move {
            let result = apply_change(ctx, &change).await;
            (change, result)
        })
        .buffer_unordered(ctx.settings.concurrency.max(1))
        .fold(
            (Counts::default(), Vec::new()),
            |(mut total, mut errors), (change, result)| async move {
                match result {
                    Err(error) => {
                        total.unapplied += 1;
                        errors.push(error);
                    }
                    Ok(()) => total.count(change),
                }
                (total, errors)
            },
        )
        .await;
    let transient = errors
        .iter()
        .position(|error| error.class() == ErrorClass::Transient);
    let error = match transient {
        Some(index) => Some(errors.swap_remove(index)),
        None => errors.into_iter().next(),
    };
    (total, error)
}

async fn apply_change(ctx: &Context, change: &Change) -> Result<()> {
    match change {
        Change::Create(policy) => server_side_apply(ctx, policy).await,
        Change::Repair(policy, drift) => {
            let applied = server_side_apply(ctx, policy).await;
            if applied.is_ok() && *drift == Drift::Deleted {
                ctx.caches.unseen.recreated(
                    policy.metadata.namespace.as_deref().unwrap_or_default(),
                    policy.metadata.name.as_deref().unwrap_or_default(),
                );
            }
            applied
        }
        Change::Delete { namespace, name } => {
            ctx.caches.unseen.deleting(namespace, name);
            delete(ctx, namespace, name).await
        }
    }
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
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    ctx.caches.unseen.applying(namespace, name);
    let applied = ctx
        .write(api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(policy),
        ))
        .await
        .and_then(|answer| {
            answer.map_err(|source| Error::Apply {
                namespace: namespace.clone(),
                name: name.clone(),
                source: Box::new(source),
            })
        });
    if applied.is_err() {
        // Nothing for the watch to show (or nothing known): the next plan may write it.
        ctx.caches.unseen.apply_failed(namespace, name);
    }
    applied?;
    debug!(%namespace, %name, "applied");
    Ok(())
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

/// Replaces the finalizer list, guarded by the resourceVersion it was computed from (a
/// concurrent change yields 409, retried).
pub(crate) async fn patch_finalizers(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<()> {
    let name = baseline.name_any();
    let api: Api<NamespaceBaseline> = Api::all(ctx.client.clone());
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": baseline.resource_version(),
        }
    });
    ctx.write(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
        .await?
        .map_err(|source| Error::Finalizer {
            name: name.clone(),
            source: Box::new(source),
        })?;
    info!(baseline = %name, ?finalizers, "finalizers updated");
    Ok(())
}

/// Patches the status subresource with `desired`; returns the baseline as the API server
/// answered.
pub(crate) async fn patch_status(
    baseline: &NamespaceBaseline,
    ctx: &Context,
    desired: &NamespaceBaselineStatus,
) -> Result<NamespaceBaseline> {
    let name = baseline.name_any();
    let api: Api<NamespaceBaseline> = Api::all(ctx.client.clone());
    let written = ctx
        .write(api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": desired })),
        ))
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
    match ctx
        .write(ctx.recorder.publish(&event, &baseline.object_ref(&())))
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            warn!(baseline = %baseline.name_any(), %reason, %error, "could not publish an Event");
        }
        Err(error) => {
            debug!(baseline = %baseline.name_any(), %reason, %error, "Event not published");
        }
    }
}
