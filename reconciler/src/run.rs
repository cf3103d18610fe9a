//! The process: HTTP server, leader election, and the controller run only while leading.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::client::ClientBuilder;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::cli::RunOptions;
use crate::controller::{self, Settings};
use crate::error::{Error, Result};
use crate::http;
use crate::leader::{
    LEASE_DURATION_SECONDS, LEASE_GRACE_SECONDS, LeaderGate, RenewalObserver, identity,
};
use crate::state::State;

/// How often leadership (the renewal fence) is checked, and the heartbeat given.
const LEADERSHIP_CHECK: Duration = Duration::from_millis(500);
/// How long in-flight reconciles may take to finish on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// How long releasing the lease may take on shutdown.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The client configuration: `KUBECONFIG` (or `~/.kube/config`), else the in-cluster
/// ServiceAccount.
pub async fn config() -> Result<kube::Config> {
    kube::Config::infer()
        .await
        .map_err(|error| Error::Client(Box::new(kube::Error::InferConfig(error))))
}

pub async fn run(options: RunOptions) -> Result<()> {
    let config = config().await?;
    let client =
        Client::try_from(config.clone()).map_err(|error| Error::Client(Box::new(error)))?;
    let identity = identity(options.identity.clone());
    let lease_duration = Duration::from_secs(LEASE_DURATION_SECONDS);
    let gate = Arc::new(if options.leader_election {
        LeaderGate::elected(LeaderGate::validity_for(
            lease_duration,
            Duration::from_secs(LEASE_GRACE_SECONDS),
        ))
    } else {
        LeaderGate::always()
    });
    let state = Arc::new(State::new(gate.clone()));
    state.health.beat();

    let shutdown = shutdown_signal();
    let listener = http::bind(options.listen).await?;
    let server = tokio::spawn(http::serve(listener, state.clone(), wait(shutdown.clone())));

    let mut lease = if options.leader_election {
        let lease_client = ClientBuilder::try_from(config)
            .map_err(|error| Error::Client(Box::new(error)))?
            .with_layer(&RenewalObserver::new(
                &options.lease_namespace,
                &options.lease_name,
                gate.clone(),
            ))
            .build();
        match Lease::start(lease_client, &options, &identity, &state, shutdown.clone()).await {
            Some(lease) => Some(lease),
            None => return finish(server, None).await,
        }
    } else {
        info!("leader election off: this replica reconciles alone");
        None
    };

    let settings = Settings {
        concurrency: usize::from(options.concurrency),
        resync: options.resync_interval,
    };
    let result = lead_while_elected(
        client,
        settings,
        &state,
        &identity,
        lease.as_mut(),
        shutdown,
    )
    .await;
    let finished = finish(server, lease).await;
    result.and(finished)
}

/// Runs the controller during each leadership term until shutdown.
async fn lead_while_elected(
    client: Client,
    settings: Settings,
    state: &Arc<State>,
    identity: &str,
    mut lease: Option<&mut Lease>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let mut ticker = tokio::time::interval(LEADERSHIP_CHECK);
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        if !state.leader.is_leading() {
            tokio::select! {
                changed = lease_changed(lease.as_deref_mut()) => changed?,
                _ = ticker.tick() => state.health.beat(),
                _ = shutdown.changed() => return Ok(()),
            }
            continue;
        }

        info!(%identity, "leading: starting the controller");
        state.metrics.set_leader(true);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let term = controller::run(
            client.clone(),
            settings.clone(),
            state.clone(),
            identity.to_owned(),
            async move {
                let _ = stopped.await;
            },
        );
        tokio::pin!(term);
        let end = loop {
            tokio::select! {
                () = &mut term => break Term::Ended,
                _ = ticker.tick() => {
                    state.health.beat();
                    if !state.leader.is_leading() {
                        break Term::Lost;
                    }
                }
                changed = lease_changed(lease.as_deref_mut()) => {
                    changed?;
                    if !state.leader.is_leading() {
                        break Term::Lost;
                    }
                }
                _ = shutdown.changed() => break Term::Shutdown,
            }
        };
        match end {
            Term::Lost => {
                // Dropping the controller aborts its reconciles; the gate already refuses
                // their writes.
                warn!("lost the lease: stopped writing");
            }
            Term::Shutdown => {
                info!("shutting down: letting running reconciles finish");
                let _ = stop.send(());
                if tokio::time::timeout(SHUTDOWN_GRACE, &mut term)
                    .await
                    .is_err()
                {
                    warn!("reconciles still running after {SHUTDOWN_GRACE:?}: abandoning them");
                }
            }
            Term::Ended => {
                error!("the controller stopped unexpectedly: restarting it");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        state.metrics.set_leader(false);
        state.health.set_caches_synced(false);
    }
}

enum Term {
    Ended,
    Lost,
    Shutdown,
}

/// Waits for the lease manager's next word and passes it to the gate; pends forever
/// without leader election.
async fn lease_changed(lease: Option<&mut Lease>) -> Result<()> {
    let Some(lease) = lease else {
        return futures::future::pending().await;
    };
    lease
        .leading
        .changed()
        .await
        .map_err(|_| Error::LeaseManagerStopped)?;
    let leading = *lease.leading.borrow_and_update();
    lease.gate.set_elected(leading);
    info!(leading, "leadership changed");
    Ok(())
}

/// The lease manager's task and its channel.
struct Lease {
    leading: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
    gate: Arc<LeaderGate>,
}

impl Lease {
    /// Sets up the lease manager, retrying until the API answers. `None` on shutdown.
    async fn start(
        client: Client,
        options: &RunOptions,
        identity: &str,
        state: &Arc<State>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Option<Self> {
        let mut delay = Duration::from_secs(1);
        loop {
            let built = LeaseManagerBuilder::new(client.clone(), &options.lease_name)
                .with_namespace(&options.lease_namespace)
                .with_identity(identity)
                .with_field_manager(format!("namespace-baseline-lease-{identity}"))
                .with_duration(LEASE_DURATION_SECONDS)
                .with_grace(LEASE_GRACE_SECONDS)
                .build()
                .await;
            match built {
                Ok(manager) => {
                    let (leading, task) = manager.watch().await;
                    state.leader.set_known();
                    info!(
                        lease = %options.lease_name,
                        namespace = %options.lease_namespace,
                        %identity,
                        "leader election started: standing by until elected"
                    );
                    return Some(Self {
                        leading,
                        task,
                        gate: state.leader.clone(),
                    });
                }
                Err(error) => {
                    warn!(%error, retry_in = ?delay, "cannot set up the leader election lease");
                    state.health.beat();
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => return None,
                    }
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Closes the channel: the lease manager releases the lease and ends.
    async fn release(self) {
        let Self {
            leading,
            task,
            gate,
        } = self;
        gate.set_elected(false);
        drop(leading);
        match tokio::time::timeout(RELEASE_TIMEOUT, task).await {
            Ok(Ok(Ok(_))) => info!("lease released"),
            Ok(Ok(Err(error))) => warn!(%error, "releasing the lease failed"),
            Ok(Err(error)) => warn!(%error, "the lease manager task failed"),
            Err(_) => warn!("releasing the lease timed out"),
        }
    }
}

async fn finish(server: JoinHandle<Result<()>>, lease: Option<Lease>) -> Result<()> {
    if let Some(lease) = lease {
        lease.release().await;
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
