//! n12: the policy-server's rollouts under load (issue 51). Why: every change of a policy's
//! settings makes Kubewarden's controller roll the PolicyServer's Deployment, and nodes drain;
//! a fail-closed webhook must let no forbidden write through while its pods come and go, and
//! should refuse no legitimate one when it runs the replicas the docs recommend.
//!
//! A walled namespace (its wall in place) and our policies active on the `default` PolicyServer;
//! a steady load through the chain: about 5 Pod CREATEs a second in the walled namespace
//! (dry run: the whole admission chain runs, nothing is stored; the policy admits each) and
//! about 5 DELETEs a second of its managed deny-all by the test's admin (dry run; the policy
//! refuses each). Meanwhile, with 1 replica and then 2 (with a disruption budget of
//! `minAvailable: 1`):
//!   (a) the policy's settings changed (`holes` Warn to Deny, then back): the controller rolls
//!       the Deployment;
//!   (b) the policy-server's pods deleted one at a time, each replaced before the next (with 1
//!       replica only with `NSB_N12_PHASES=all`).
//! Counted per phase: Pod CREATEs refused, DELETEs that slipped through (asserted 0 always).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use namespace_baseline_cluster_tests::admission::{ChainOptions, dry_run_pod_create};
use namespace_baseline_cluster_tests::kubewarden_stack::{ControllerChain, policy_servers};
use namespace_baseline_cluster_tests::{deny_all_policy_name, wait_until};
use namespace_baseline_testkit::kubewarden::{CONTROLLER_NAMESPACE, DEFAULT_POLICY_SERVER};
use serde_json::json;

use crate::common::{self, figure};

/// One request of each kind every this long.
const EVERY: Duration = Duration::from_millis(200);
/// A rollout or a replacement: from the change to every replica ready again.
const SETTLED: Duration = Duration::from_secs(180);
/// Load before and after each disruption, so that its edges are inside the phase.
const MARGIN: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
struct Sent {
    at: Instant,
    /// A Pod CREATE (true) or a managed NetworkPolicy DELETE (false).
    create: bool,
    /// Admitted (the API server would have stored it).
    admitted: bool,
    message: String,
}

#[derive(Debug, Default)]
struct Tally {
    creates: usize,
    creates_refused: usize,
    deletes: usize,
    deletes_slipped: usize,
    refusals: Vec<String>,
}

#[tokio::test]
async fn n12_rollouts_under_load_let_no_forbidden_delete_through() {
    let (cluster, names, _) = common::start("n12").await;
    let walled = names.namespace("walled");
    names
        .create_namespaces(std::slice::from_ref(&walled), &names.walled_labels())
        .await
        .expect("creating the walled namespace");
    let _reconciler = cluster
        .start_reconciler("n12", common::SINGLE)
        .await
        .expect("starting the reconciler");
    common::create_baseline(&cluster, &names.name, common::spec(&names)).await;
    common::wait_wall(
        &cluster,
        &names.name,
        std::slice::from_ref(&walled),
        true,
        Duration::from_secs(30),
    )
    .await;
    cluster
        .default_service_account(&walled)
        .await
        .expect("the walled namespace's default ServiceAccount");
    let deny_all = deny_all_policy_name(&names.name);

    let outcome = cluster
        .with_controller_chain(ChainOptions::default(), async |chain| {
            let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
            let load = start_load(&cluster.admin, &walled, &deny_all, sent.clone());
            let mut phases = Vec::new();
            for replicas in [1, 2] {
                if replicas == 2 {
                    scale(chain, 2).await;
                }
                let start = Instant::now();
                tokio::time::sleep(MARGIN).await;
                let took = roll_settings(chain, if replicas == 1 { "Deny" } else { "Warn" }).await;
                tokio::time::sleep(MARGIN).await;
                phases.push((replicas, "settings changed (a rollout)", start, Instant::now(), took));
                if replicas == 1 && !all_phases() {
                    continue;
                }
                let start = Instant::now();
                tokio::time::sleep(MARGIN).await;
                let took = delete_pods_one_at_a_time(chain, replicas).await;
                tokio::time::sleep(MARGIN).await;
                phases.push((replicas, "pods deleted one at a time", start, Instant::now(), took));
            }
            load.abort();
            let sent = sent.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let mut slipped = 0;
            for (replicas, what, start, end, took) in &phases {
                let tally = tally(&sent, *start, *end);
                slipped += tally.deletes_slipped;
                figure(
                    "n12",
                    format!(
                        "{replicas} replica(s){}, {what} ({:.1} s to settle): {} of {} Pod CREATEs refused, {} of {} managed NetworkPolicy DELETEs slipped through",
                        if *replicas == 2 { " and minAvailable 1" } else { "" },
                        took.as_secs_f64(),
                        tally.creates_refused,
                        tally.creates,
                        tally.deletes_slipped,
                        tally.deletes
                    ),
                );
                for refusal in tally.refusals.iter().take(3) {
                    figure("n12", format!("  refused: {refusal}"));
                }
            }
            assert_eq!(slipped, 0, "a managed NetworkPolicy DELETE slipped through a rollout");
        })
        .await;
    // Back to the chart's one replica, for the tests after this one.
    let _ = policy_servers(&cluster.admin)
        .patch(
            DEFAULT_POLICY_SERVER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1, "minAvailable": null}})),
        )
        .await;
    names.delete_namespaces(std::slice::from_ref(&walled)).await;
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

/// Whether to run every phase (`NSB_N12_PHASES=all`): CI leaves out the deletion of a single
/// replica's pod (n9 takes the policy-server away altogether; BENCHMARKS.md has its figures).
fn all_phases() -> bool {
    std::env::var("NSB_N12_PHASES").is_ok_and(|phases| phases == "all")
}

/// Sends a dry-run Pod CREATE and a dry-run DELETE of the managed deny-all every [`EVERY`],
/// each without waiting for the answers before (the rate holds while a request hangs).
fn start_load(
    admin: &kube::Client,
    namespace: &str,
    deny_all: &str,
    sent: Arc<Mutex<Vec<Sent>>>,
) -> tokio::task::JoinHandle<()> {
    let admin = admin.clone();
    let namespace = namespace.to_owned();
    let deny_all = deny_all.to_owned();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        let mut n = 0u64;
        loop {
            tick.tick().await;
            n += 1;
            let at = Instant::now();
            let (admin, namespace, deny_all, sent) = (
                admin.clone(),
                namespace.clone(),
                deny_all.clone(),
                sent.clone(),
            );
            tokio::spawn(async move {
                let created = dry_run_pod_create(&admin, &namespace, &format!("load-{n}")).await;
                let (admitted, message) = match created {
                    Ok(Ok(())) => (true, String::new()),
                    Ok(Err((code, message))) => (false, format!("{code} {message}")),
                    Err(error) => (false, format!("{error:#}")),
                };
                push(
                    &sent,
                    Sent {
                        at,
                        create: true,
                        admitted,
                        message,
                    },
                );
                let policies: Api<NetworkPolicy> = Api::namespaced(admin, &namespace);
                let deleted = policies
                    .delete(
                        &deny_all,
                        &DeleteParams {
                            dry_run: true,
                            ..DeleteParams::default()
                        },
                    )
                    .await;
                let (admitted, message) = match deleted {
                    Ok(_) => (true, "deleted (dry run)".to_owned()),
                    Err(kube::Error::Api(status)) => {
                        (false, format!("{} {}", status.code, status.message))
                    }
                    Err(error) => (false, error.to_string()),
                };
                push(
                    &sent,
                    Sent {
                        at,
                        create: false,
                        admitted,
                        message,
                    },
                );
            });
        }
    })
}

fn push(sent: &Mutex<Vec<Sent>>, one: Sent) {
    sent.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(one);
}

fn tally(sent: &[Sent], start: Instant, end: Instant) -> Tally {
    let mut tally = Tally::default();
    for one in sent.iter().filter(|one| one.at >= start && one.at < end) {
        if one.create {
            tally.creates += 1;
            if !one.admitted {
                tally.creates_refused += 1;
                tally.refusals.push(one.message.clone());
            }
        } else {
            tally.deletes += 1;
            if one.admitted {
                tally.deletes_slipped += 1;
            }
        }
    }
    tally
}

/// Changes the namespace-baseline policy's `holes` setting to `holes`: the controller rolls
/// the policy-server's Deployment; waits until it has rolled; the time it took.
async fn roll_settings(chain: &ControllerChain, holes: &str) -> Duration {
    let started = Instant::now();
    let mut changed = chain
        .policy_for("networking.k8s.io", "networkpolicies")
        .clone();
    let replicas = chain
        .policy_server_pods()
        .await
        .map_or(1, |pods| pods.len().max(1));
    let before = chain
        .config_version()
        .await
        .expect("the Deployment's configuration version");
    changed.spec["settings"]["holes"] = json!(holes);
    chain
        .apply(&changed)
        .await
        .expect("changing the policy's settings");
    wait_until(
        "the controller to roll the policy-server's Deployment",
        SETTLED,
        || async { Ok((chain.config_version().await? != before).then_some(())) },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    wait_rolled(chain, i32::try_from(replicas).expect("a few replicas")).await;
    started.elapsed()
}

/// Waits until the Deployment's pods all run the newest configuration and the policies are
/// active again.
async fn wait_rolled(chain: &ControllerChain, replicas: i32) {
    wait_until("the policies active after the change", SETTLED, || async {
        let statuses = chain.statuses().await?;
        Ok(statuses.values().all(|s| s == "active").then_some(()))
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    chain
        .wait_policy_server(replicas, SETTLED)
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
}

/// Deletes each policy-server pod in turn, waiting until it is gone and `replicas` others are
/// ready before the next; the time it all took.
async fn delete_pods_one_at_a_time(chain: &ControllerChain, replicas: i32) -> Duration {
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(chain_client(chain), CONTROLLER_NAMESPACE);
    let names: Vec<String> = chain
        .policy_server_pods()
        .await
        .expect("the policy-server's pods")
        .into_iter()
        .filter_map(|pod| pod.metadata.name)
        .collect();
    for name in names {
        pods.delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|error| panic!("deleting pod {name}: {error}"));
        wait_until(&format!("pod {name} gone"), SETTLED, || async {
            Ok(pods.get_opt(&name).await?.is_none().then_some(()))
        })
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
        chain
            .wait_policy_server(replicas, SETTLED)
            .await
            .unwrap_or_else(|error| panic!("the replacement of {name}: {error:#}"));
    }
    started.elapsed()
}

/// Scales the default PolicyServer to `replicas` with a disruption budget of one available.
async fn scale(chain: &ControllerChain, replicas: i32) {
    policy_servers(&chain_client(chain))
        .patch(
            DEFAULT_POLICY_SERVER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas, "minAvailable": 1}})),
        )
        .await
        .expect("scaling the default PolicyServer");
    chain
        .wait_policy_server(replicas, SETTLED)
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
}

fn chain_client(chain: &ControllerChain) -> kube::Client {
    chain.client().clone()
}
