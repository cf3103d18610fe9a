//! The process: HTTP server, leader election, the watches (from start to end, so a standby's
//! caches are warm), and the controller run only while leading.

use std::sync::Arc;
use std::time::Duration;

use ::http::HeaderValue;
use ::http::header::USER_AGENT;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::base::error::{Error, Result};
use crate::reconcile::context::{Hedging, Settings};
use crate::reconcile::state::State;
use crate::reconcile::watches::Watches;
use crate::runtime::api_client;
use crate::runtime::cli::RunOptions;
use crate::runtime::http;
use namespace_baseline_leader::{
    Elector, KubeLeases, LeaderGate, RELEASE_BUDGET, Timing, identity,
};

/// How often the main loop gives its heartbeat and looks at the gate.
const LEADERSHIP_CHECK: Duration = Duration::from_millis(500);

/// The client configuration: `KUBECONFIG` (or `~/.kube/config`), else the in-cluster
/// ServiceAccount.
pub async fn config() -> Result<kube::Config> {
    kube::Config::infer()
        .await
        .map_err(|error| Error::Client(Box::new(kube::Error::InferConfig(error))))
}

/// `namespace-baseline-reconciler/<version> (<identity>)`: every replica runs as the same
/// ServiceAccount, so the User-Agent is what tells them apart in the API server's audit log.
/// A hedge (`reconcile/writes.rs`) says so before the identity:
/// `namespace-baseline-reconciler/<version> hedge (<identity>)`.
fn user_agent(identity: &str, hedge: bool) -> Option<HeaderValue> {
    let printable: String = identity
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    HeaderValue::from_str(&format!(
        "namespace-baseline-reconciler/{}{} ({printable})",
        env!("CARGO_PKG_VERSION"),
        if hedge { " hedge" } else { "" }
    ))
    .ok()
}

/// `config` with the User-Agent of `identity` (a hedge's, with `hedge`).
fn with_user_agent(mut config: kube::Config, identity: &str, hedge: bool) -> kube::Config {
    if let Some(agent) = user_agent(identity, hedge) {
        config.headers.push((USER_AGENT, agent));
    }
    config
}

pub async fn run(options: RunOptions) -> Result<()> {
    let config = config().await?;
    let identity = identity(options.identity.clone());
    let hedge_after = Some(options.hedge_after).filter(|after| !after.is_zero());
    let client = api_client::reconciler_client(
        with_user_agent(config.clone(), &identity, false),
        hedge_after,
    )?;
    let hedging = match options.hedge_after {
        Duration::ZERO => None,
        after => Some(Hedging::new(
            api_client::hedge_client(with_user_agent(config, &identity, true))?,
            after,
        )),
    };
    let timing = options.timing.0;
    let gate = Arc::new(if options.leader_election {
        LeaderGate::elected(timing)
    } else {
        LeaderGate::always()
    });
    let state = Arc::new(State::new(gate.clone()));
    state.probes.configure(options.probe.clone());
    state.health.beat();

    let shutdown = shutdown_signal();
    let listener = http::bind(options.listen).await?;
    let server = tokio::spawn(http::serve(listener, state.clone(), wait(shutdown.clone())));

    let election = if options.leader_election {
        let leases = KubeLeases::new(
            client.clone(),
            &options.lease_namespace,
            &options.lease_name,
        );
        let elector = Elector::new(leases, identity.clone(), timing, gate.clone());
        let (stop, stopped) = oneshot::channel();
        info!(
            lease = %options.lease_name,
            namespace = %options.lease_namespace,
            %identity,
            lease_duration = ?timing.lease_duration,
            renew_deadline = ?timing.renew_deadline,
            retry_period = ?timing.retry_period,
            "leader election started"
        );
        Some(Election {
            stop,
            task: tokio::spawn(elector.run(stopped)),
            timing,
        })
    } else {
        info!("leader election off: this replica reconciles alone");
        None
    };

    let settings = Settings {
        concurrency: usize::from(options.concurrency),
        resync: options.resync_interval,
        dns_namespace: Some(options.dns_namespace.clone())
            .filter(|namespace| !namespace.is_empty()),
        api_door: options
            .api_door_policy
            .clone()
            .filter(|name| !name.is_empty())
            .map(|name| (options.lease_namespace.clone(), name)),
        reports: options.openreports,
    };
    // Started before the first term: a standby keeps its caches warm for a take-over.
    let watches = Watches::start(client, settings, state.clone()).with_hedging(hedging);
    let result = lead_while_elected(&watches, &state, &identity, timing, shutdown).await;
    drop(watches);
    let finished = finish(server, election).await;
    result.and(finished)
}

/// Runs the controller during each term of this replica as the Lease holder, until shutdown.
/// The gate decides every write within a term; the term ends when the Lease is lost.
async fn lead_while_elected(
    watches: &Watches,
    state: &Arc<State>,
    identity: &str,
    timing: Timing,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let mut ticker = tokio::time::interval(LEADERSHIP_CHECK);
    let mut changes = state.leader.subscribe();
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        if !state.leader.holding() {
            tokio::select! {
                _ = changes.changed() => {}
                _ = ticker.tick() => state.health.beat(),
                _ = shutdown.changed() => return Ok(()),
            }
            continue;
        }

        // A term starts once the writes of the last one have settled (answered, or the write
        // grace after they were abandoned): one still under way, refused nothing since it was
        // admitted, could land after this term's newer write of the same object.
        if state.leader.writes_in_flight() > 0 {
            info!("leading: waiting for the last term's writes to settle");
        }
        tokio::select! {
            () = state.leader.writes_settled() => {}
            _ = shutdown.changed() => return Ok(()),
        }
        info!(%identity, "leading: starting the controller");
        state.metrics.set_leader(true);
        let (stop, stopped) = oneshot::channel::<()>();
        let term = watches.lead(identity.to_owned(), async move {
            let _ = stopped.await;
        });
        tokio::pin!(term);
        let end = loop {
            tokio::select! {
                () = &mut term => break TermEnd::Ended,
                _ = ticker.tick() => state.health.beat(),
                _ = changes.changed() => {}
                _ = shutdown.changed() => break TermEnd::Shutdown,
            }
            if !state.leader.holding() {
                break TermEnd::Lost;
            }
        };
        match end {
            TermEnd::Lost => {
                // Dropping the controller aborts its reconciles; the gate already refuses
                // their writes.
                warn!("lost the lease: stopped the controller");
            }
            TermEnd::Shutdown => {
                // No new work, and no new write: only the writes already under way go on
                // (within their budgets), polled here, and the Lease is released after them.
                state.leader.close();
                let _ = stop.send(());
                let in_flight = state.leader.writes_in_flight();
                info!(
                    in_flight,
                    "shutting down: no new writes; waiting for those in flight"
                );
                let waited = tokio::time::timeout(
                    longest_write(timing),
                    drain(&mut term, state, &mut ticker),
                )
                .await;
                if waited.is_err() {
                    // Not expected (each write ends by its budget): dropping the controller
                    // abandons what is left, and the release waits the write grace after it.
                    warn!(
                        in_flight = state.leader.writes_in_flight(),
                        "writes still in flight after {:?}: abandoning them",
                        longest_write(timing)
                    );
                }
            }
            TermEnd::Ended => {
                error!("the controller stopped unexpectedly: restarting it");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        state.metrics.set_leader(false);
    }
}

/// Why a term of leadership ended.
enum TermEnd {
    Ended,
    Lost,
    Shutdown,
}

/// The longest a write admitted before shutdown may still take: its budget ends at most the
/// renew deadline plus the write grace after it started.
fn longest_write(timing: Timing) -> Duration {
    timing.renew_deadline + timing.write_grace()
}

/// Polls the stopping controller (its writes in flight progress only while it is polled)
/// until none of its writes is in flight, or it has ended.
async fn drain(
    term: &mut (impl Future<Output = ()> + Unpin),
    state: &State,
    ticker: &mut tokio::time::Interval,
) {
    let no_writes = state.leader.no_writes_in_flight();
    tokio::pin!(no_writes);
    loop {
        tokio::select! {
            () = &mut *term => return,
            () = &mut no_writes => return,
            _ = ticker.tick() => state.health.beat(),
        }
    }
}

/// The elector's task, and how to tell it to release the Lease and end.
struct Election {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    timing: Timing,
}

impl Election {
    /// Stops the elector, which releases the Lease once the last write has settled: at most
    /// the write grace after an abandoned write, then [`RELEASE_BUDGET`].
    async fn release(self) {
        let Self { stop, task, timing } = self;
        let _ = stop.send(());
        let bound = timing.write_grace() + RELEASE_BUDGET + Duration::from_secs(1);
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(%error, "the leader election task failed"),
            Err(_) => warn!("releasing the lease took longer than {bound:?}: left to expire"),
        }
    }
}

async fn finish(server: JoinHandle<Result<()>>, election: Option<Election>) -> Result<()> {
    if let Some(election) = election {
        election.release().await;
    }
    match server.await {
        Ok(result) => result,
        Err(error) => {
            warn!(%error, "the HTTP server task failed");
            Ok(())
        }
    }
}

/// A channel that turns `true` on SIGTERM or SIGINT.
fn shutdown_signal() -> watch::Receiver<bool> {
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        signal().await;
        info!("shutdown signal received");
        let _ = sender.send(true);
    });
    receiver
}

async fn signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            warn!(%error, "cannot listen for SIGINT");
            futures::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM");
                futures::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = futures::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// Resolves once `receiver` turns `true` (or its sender is gone).
async fn wait(mut receiver: watch::Receiver<bool>) {
    let _ = receiver.wait_for(|stop| *stop).await;
}
