//! What a reconcile is given, for one leadership term (kube-rs's `Context`): the client, the
//! caches, the Event recorder, the settings, the process's state and the writes handed over
//! (`handoff.rs`); and the one way it writes, [`Context::write`], through the leader gate.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use namespace_baseline_leader::{HedgeBounds, TermId};

use crate::base::error::Result;
use crate::reconcile::handoff::Handoff;
use crate::reconcile::state::State;
use crate::view::caches::Caches;
use crate::view::reports::Reports;

/// The `reportingController` of the Events this reconciler publishes.
pub const CONTROLLER_NAME: &str = "hedronite.io/namespace-baseline-reconciler";

/// Tunables from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespaces written to in parallel.
    pub concurrency: usize,
    /// Requeue interval after a successful reconcile: the safety net behind the watches.
    pub resync: Duration,
    /// The namespace of the cluster's DNS Service, whose endpoints the DNS doors are checked
    /// against; `None`: no check.
    pub dns_namespace: Option<String>,
    /// The reconciler's own NetworkPolicy (namespace, name), whose egress door to the API
    /// server is checked against the API server's endpoints; `None`: not checked.
    pub api_door: Option<(String, String)>,
    /// Write OpenReports Reports while their CRDs are served (`--openreports`).
    pub reports: bool,
}

/// The second path of a hedged write (`writes.rs`): the client whose requests each open a
/// connection of its own (`runtime/api_client.rs`), and when a hedge may go out.
#[derive(Clone)]
pub struct Hedging {
    pub client: Client,
    pub bounds: HedgeBounds,
}

impl Hedging {
    /// No hedge while more writes than this are in flight: a pass over many namespaces
    /// writes `--concurrency` at a time, and a write slow among many is waiting in the API
    /// server's queue, which a copy would only lengthen. A repair writes one or two objects,
    /// its status and an Event; on a faulty link a few more writes of the last seconds are
    /// still waiting out a 429's `Retry-After` or a stall, and a repair must still be hedged
    /// then: the bound leaves room for them.
    pub const MAX_IN_FLIGHT: usize = 16;

    /// Hedges on `client` after `after`.
    pub fn new(client: Client, after: Duration) -> Self {
        Self {
            client,
            bounds: HedgeBounds {
                after,
                max_in_flight: Self::MAX_IN_FLIGHT,
            },
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
    /// The OpenReports side of this term.
    pub reports: Reports,
    /// The writes this term's reconciles handed over while still in flight.
    pub handoff: Handoff,
    /// How the wall's applies are hedged; `None`: never.
    pub hedging: Option<Hedging>,
    /// The leadership term this context was made for: its writes are refused once it ends.
    pub term: TermId,
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
            reports: Reports::new(settings.reports),
            handoff: Handoff::detached(caches.dirty.clone()),
            hedging: None,
            term: state.leader.current_term(),
            client,
            caches,
            settings,
            state,
        }
    }
}

impl Context {
    /// The handoff whose answers ask for the reconcile that reports them.
    #[must_use]
    pub fn with_handoff(self, handoff: Handoff) -> Self {
        Self { handoff, ..self }
    }

    /// Hedges the wall's applies ([`Hedging`]).
    #[must_use]
    pub fn with_hedging(self, hedging: Option<Hedging>) -> Self {
        Self { hedging, ..self }
    }

    /// Runs one write of this term to the API through the leader gate ([`State::write`]).
    pub(crate) async fn write<T>(
        &self,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<kube::Result<T>> {
        self.state.write(self.term, request).await
    }
}
