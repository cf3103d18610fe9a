//! Writes that outlive their reconcile: the baseline's handoff.
//!
//! kube's `Controller` runs one reconcile of a baseline at a time. A reconcile that waited for
//! its slowest write (a stalled request, a 429 whose `Retry-After` the client honours) would
//! hold every repair of that baseline behind it. So a reconcile waits for its writes at most
//! [`HANDOFF`] once every one of them has gone out; those still in flight are then handed to
//! the handoff here, which collects their answers, keeps them for the next reconcile of the
//! baseline to report (the counts, the Events, a failure in the status and its retry), and
//! triggers that reconcile once the last answer is in, scoped to the namespaces written.
//!
//! What keeps this safe: each write still goes through the leader gate, and is marked pending
//! before it goes out until it is answered (`view/unseen_writes.rs`), so the next plan leaves
//! it alone: at most one write per object is in flight. The status of a baseline is written
//! by one request at a time: a reconcile that finds one in flight leaves its status to the
//! reconcile that the answer triggers, so an older status never lands after a newer one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use futures::stream::FuturesUnordered;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use namespace_baseline_core::spec::NamespaceBaseline;
use namespace_baseline_core::wall::Change;
use tokio::task::{JoinError, JoinHandle};
use tracing::debug;

use crate::base::error::{Error, ErrorClass, Result};
use crate::view::scope::Dirty;

/// How long a reconcile waits for its writes once all have gone out (and for its status
/// write, and for each Event) before it hands them to the handoff: well above an answer's
/// usual time (milliseconds), well below a stall's.
pub const HANDOFF: Duration = Duration::from_millis(100);

/// One write, running as its own task: the change and its answer.
pub(crate) type WriteTask = JoinHandle<(Change, Result<()>)>;

/// Writes made, by kind, with the drifted objects repaired.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub created: u32,
    pub repaired: Vec<String>,
    pub deleted: u32,
    /// Changes planned but not made (after a failure).
    pub unapplied: u32,
    /// Writes still in flight when the reconcile handed them to the handoff: the reconcile
    /// after their answers counts them.
    pub handed_over: u32,
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

    fn absorb(&mut self, other: Counts) {
        self.created += other.created;
        self.repaired.extend(other.repaired);
        self.deleted += other.deleted;
        self.unapplied += other.unapplied;
    }
}

/// The (namespace, name) of the policy a change writes.
pub(crate) fn target(change: &Change) -> (&str, &str) {
    match change {
        Change::Create(policy) | Change::Repair(policy, _) => (
            policy.metadata.namespace.as_deref().unwrap_or_default(),
            policy.metadata.name.as_deref().unwrap_or_default(),
        ),
        Change::Delete { namespace, name } => (namespace, name),
    }
}

pub(crate) fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// What a set of writes did: the counts, and the errors of those that failed.
#[derive(Debug, Default)]
pub(crate) struct WriteResults {
    pub counts: Counts,
    errors: Vec<Error>,
}

impl WriteResults {
    /// One write's task ended.
    pub fn add(&mut self, joined: std::result::Result<(Change, Result<()>), JoinError>) {
        match joined {
            Ok((change, Ok(()))) => self.counts.count(change),
            Ok((_, Err(error))) => self.failed(error),
            Err(join) => self.failed(Error::Panicked(format!("a write's task ended: {join}"))),
        }
    }

    fn failed(&mut self, error: Error) {
        self.counts.unapplied += 1;
        self.errors.push(error);
    }

    /// Adds what the handoff collected for this baseline since its last reconcile.
    pub fn absorb(&mut self, late: WriteResults) {
        self.counts.absorb(late.counts);
        self.errors.extend(late.errors);
    }

    /// The counts, and the error to report: a transient one if any (a retry also retries the
    /// rest), else the first permanent one.
    pub fn into_parts(mut self) -> (Counts, Option<Error>) {
        let transient = self
            .errors
            .iter()
            .position(|error| error.class() == ErrorClass::Transient);
        let error = match transient {
            Some(index) => Some(self.errors.swap_remove(index)),
            None => self.errors.into_iter().next(),
        };
        (self.counts, error)
    }
}

/// The writes handed over by the reconciles of one leadership term, per baseline.
#[derive(Clone)]
pub struct Handoff {
    inner: Arc<Mutex<Handed>>,
    /// What the reconcile that reports an answer looks at: what the answers wrote.
    dirty: Dirty,
    /// Where the reconcile that reports an answer is asked for (none in unit tests, which run
    /// the next reconcile themselves).
    triggers: Option<UnboundedSender<ObjectRef<NamespaceBaseline>>>,
}

#[derive(Default)]
struct Handed {
    /// Answers collected and not reported yet, by baseline.
    landed: HashMap<String, WriteResults>,
    /// Baselines whose status write is in flight.
    statuses: HashSet<String>,
}

impl Handoff {
    pub fn new(dirty: Dirty, triggers: UnboundedSender<ObjectRef<NamespaceBaseline>>) -> Self {
        Self {
            triggers: Some(triggers),
            ..Self::detached(dirty)
        }
    }

    /// A handoff that asks for no reconcile (unit tests run it themselves).
    pub fn detached(dirty: Dirty) -> Self {
        Self {
            inner: Arc::default(),
            dirty,
            triggers: None,
        }
    }

    fn handed(&self) -> MutexGuard<'_, Handed> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes over the writes of `baseline` still in flight; once all are answered, the
    /// reconcile that reports them is asked for, looking at the namespaces they wrote.
    pub(crate) fn take_over(
        &self,
        baseline: &NamespaceBaseline,
        mut tasks: FuturesUnordered<WriteTask>,
    ) {
        let handoff = self.clone();
        let reference = ObjectRef::from_obj(baseline);
        debug!(baseline = %reference.name, writes = tasks.len(), "writes handed over");
        tokio::spawn(async move {
            let mut outcome = WriteResults::default();
            let mut namespaces = HashSet::new();
            while let Some(joined) = tasks.next().await {
                if let Ok((change, _)) = &joined {
                    namespaces.insert(target(change).0.to_owned());
                }
                outcome.add(joined);
            }
            for namespace in &namespaces {
                handoff.dirty.namespace(&reference.name, namespace);
            }
            handoff.landed(&reference, outcome);
        });
    }

    /// Takes over the status write of `baseline` in flight: no other status of it is written
    /// until it is answered; a failure is reported by the reconcile its answer triggers.
    pub(crate) fn take_over_status(
        &self,
        baseline: &NamespaceBaseline,
        task: JoinHandle<Result<()>>,
    ) {
        let handoff = self.clone();
        let reference = ObjectRef::from_obj(baseline);
        self.handed().statuses.insert(reference.name.clone());
        tokio::spawn(async move {
            let mut outcome = WriteResults::default();
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => outcome.errors.push(error),
                Err(join) => outcome.errors.push(Error::Panicked(format!(
                    "a status write's task ended: {join}"
                ))),
            }
            handoff.handed().statuses.remove(&reference.name);
            // The reconcile that reports it (or writes the status held back meanwhile)
            // plans no namespace: nothing in the wall changed.
            handoff.dirty.report(&reference.name);
            handoff.landed(&reference, outcome);
        });
    }

    /// Whether a status write of `baseline` is in flight.
    pub fn status_in_flight(&self, baseline: &str) -> bool {
        self.handed().statuses.contains(baseline)
    }

    fn landed(&self, reference: &ObjectRef<NamespaceBaseline>, outcome: WriteResults) {
        self.handed()
            .landed
            .entry(reference.name.clone())
            .or_default()
            .absorb(outcome);
        self.ask_for(&reference.name);
    }

    /// Asks for a reconcile of `baseline` (in unit tests, which run it themselves, nothing).
    pub(crate) fn ask_for(&self, baseline: &str) {
        if let Some(triggers) = &self.triggers {
            // A closed channel is a term that ended: the next one starts with a full pass.
            let _ = triggers.unbounded_send(ObjectRef::new(baseline));
        }
    }

    /// What the handoff collected for `baseline` since its last reconcile, for this one to
    /// report.
    pub(crate) fn take(&self, baseline: &str) -> Option<WriteResults> {
        self.handed().landed.remove(baseline)
    }

    /// A baseline going away: nothing of it is reported any more.
    pub fn forget(&self, baseline: &str) {
        self.handed().landed.remove(baseline);
    }
}
