//! soak: leader election and the wall under chaos, checked from the API server's audit log.
//!
//! N labelled namespaces and one NamespaceBaseline; several reconciler replicas with leader
//! election, each reaching the API server through the fault-injecting proxy. For the
//! duration of the soak, with faults on every request at the given probability, seeded
//! random drift (managed policies deleted or widened, namespaces created labelled or labelled
//! late) goes on while the leader is stopped (and replaced by a new replica) at regular
//! intervals, SIGKILLed or sent SIGTERM (a graceful shutdown: it releases the Lease after its
//! last write), and the API server, etcd and the proxy are restarted. Then the faults stop
//! and the wall must converge.
//!
//! What is checked, from the objects and the audit log (never from the reconcilers' logs,
//! except for panics): every labelled namespace has exactly the wall and nothing managed is
//! elsewhere; the status is right; no replica panicked or exited unless killed; and no two
//! replicas wrote NetworkPolicies, baselines or Events in overlapping lease terms, after a
//! kill or a graceful handover alike ([`namespace_baseline_cluster_tests::leadership`]).
//! Reported as figures against their goals, never failing the soak: handover times, releases
//! that failed and shutdowns that held the Lease past the write budget, repair latency under
//! faults (outside leaderless windows) beside the floor the fault model itself imposes
//! (`soak/floor.rs`), the repairs of drift made while the leader's policy watch was down, the
//! hedged writes per 1,000 and the share of stalled wall applies hedged, convergence after the
//! chaos, max RSS; and, for each repair slower than a second, where its time went: the
//! requests the proxy received meanwhile, with the faults they drew (`soak/slow.rs`).
//!
//! Usage: `soak [--namespaces 300] [--duration 180] [--kills 8] [--graceful 0.5]
//! [--apiserver-restarts 1] [--etcd-restarts 1] [--proxy-restarts 1] [--replicas 3]
//! [--faults 0.3] [--seed 1] [--out FILE]`. Needs TEST_KUBECONFIG, NSB_RECONCILER_BIN,
//! NSB_AUDIT_LOG and NSB_STATE_DIR (the local control plane's, for the restarts):
//! `e2e-tests/soak.sh` provides them.

#[path = "soak/chaos.rs"]
mod chaos;
#[path = "soak/check.rs"]
mod check;
#[path = "soak/floor.rs"]
mod floor;
#[path = "soak/options.rs"]
mod options;
#[path = "soak/report.rs"]
mod report;
#[path = "soak/slow.rs"]
mod slow;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use namespace_baseline_cluster_tests::faults::restartable_state_dir;
use namespace_baseline_cluster_tests::{Cluster, reconciler_username};

use chaos::Chaos;
use options::Options;

#[tokio::main]
async fn main() -> Result<()> {
    let options = Options::parse()?;
    let cluster = Cluster::connect().await?;
    let state_dir = restartable_state_dir().context("the soak restarts the local control plane")?;
    println!("== soak: {options}");
    let started = Instant::now();
    let mark = cluster.audit.mark();

    let mut chaos = Chaos::set_up(&cluster, &options, state_dir).await?;
    println!(
        "[{:>6.1}s] {} namespaces walled by {} replicas, faults off: converged in {:.1?}",
        started.elapsed().as_secs_f64(),
        options.namespaces,
        options.replicas,
        chaos.converge(Duration::from_secs(120)).await?,
    );

    chaos.run(&options).await?;
    let converged = chaos.converge(Duration::from_secs(180)).await;
    let converged = match converged {
        Ok(took) => took,
        Err(error) => bail!("the wall did not converge after the chaos: {error:#}"),
    };
    println!(
        "[{:>6.1}s] faults off: the wall and the status converged {converged:.1?} later",
        started.elapsed().as_secs_f64()
    );
    let processes = chaos.finish().await?;
    let lease_released = chaos.final_holder().await.is_none();

    let events = cluster
        .audit
        .all_requests_since(mark)
        .context("the soak needs the audit log (NSB_AUDIT_LOG)")?;
    let mut verdict = check::analyse(&events, &reconciler_username(), &chaos, &processes)?;
    verdict.lease_released = lease_released;
    let table = report::table(&options, &chaos, &verdict, converged, &processes);
    println!("\n{table}");
    if let Some(path) = &options.out {
        std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
    }
    verdict.enforce(&options)
}
