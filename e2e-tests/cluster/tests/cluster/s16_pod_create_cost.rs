//! Scenario 16: what the admission chain adds to a Pod CREATE, through Kubewarden's
//! policy-server 1.35 at the log level a cluster runs it with (info), seen from the client:
//! dry-run Pod CREATEs one after another (the whole admission chain runs, nothing is stored),
//! interleaved over three classes of namespace, with the Pod CREATE rule in the chain (gate
//! on) and taken out of it (gate off, the rest of the chain as shipped):
//!
//! - **unguarded**: no baseline guards it (the policy lists the baselines and gets the
//!   namespace);
//! - **guarded, wall in place**: the policy also gets the wall's two NetworkPolicies, which
//!   policy-server caches for 5 s once found;
//! - **guarded, no wall**: labelled while the reconciler was stopped; refused (the deny-all's
//!   GET, never cached).
//!
//! The added latency of a class is its p50 (p99) with the gate on less its p50 (p99) with the
//! gate off, from one run. The checks: with the gate on every pod of the unwalled namespace is
//! refused and the others admitted; with it off all are admitted. No timing is asserted: the
//! figures go to BENCHMARKS.md.

use std::time::{Duration, Instant};

use namespace_baseline_cluster_tests::admission::{
    AdmissionChain, ChainOptions, dry_run_pod_create,
};
use namespace_baseline_cluster_tests::{Cluster, percentile, wait_until};
use namespace_baseline_testkit::kubewarden::{CONTROLLER_NAMESPACE, POLICY_SERVER_SERVICE_ACCOUNT};
use namespace_baseline_testkit::policy_server::LogLevel;

use crate::common::{SINGLE, create_baseline, figure, namespaces, spec, start, wait_wall};

/// Pod CREATEs per class and gate setting, measured; and before them, not measured.
const CREATES: usize = 300;
const WARM_UP: usize = 20;
const CHAIN_UPDATE: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unguarded,
    Walled,
    Unwalled,
}

impl Class {
    const ALL: [Self; 3] = [Self::Unguarded, Self::Walled, Self::Unwalled];

    fn label(self) -> &'static str {
        match self {
            Self::Unguarded => "unguarded namespace",
            Self::Walled => "guarded, wall in place",
            Self::Unwalled => "guarded, no wall (refused)",
        }
    }
}

/// The namespace of each class, in [`Class::ALL`]'s order.
struct Namespaces<'a>([&'a str; 3]);

impl Namespaces<'_> {
    fn of(&self, class: Class) -> &str {
        self.0[Class::ALL
            .iter()
            .position(|c| *c == class)
            .expect("a class")]
    }
}

#[tokio::test]
async fn s16_what_the_chain_adds_to_a_pod_create() {
    let (cluster, names, _) = start("s16").await;
    let baseline = names.name.clone();
    let (walled, outside) = namespaces(&names, 1, 1).await;
    create_baseline(&cluster, &baseline, spec(&names)).await;
    let mut reconciler = cluster
        .start_reconciler("s16", SINGLE)
        .await
        .expect("the reconciler");
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(30)).await;
    reconciler.stop().await.expect("stopping the reconciler");
    // Guarded once nothing installs walls any more: it stays without one.
    let unwalled = names.namespace("unwalled");
    names
        .create_namespaces(std::slice::from_ref(&unwalled), &names.walled_labels())
        .await
        .expect("the unwalled namespace");
    let all = [outside[0].clone(), walled[0].clone(), unwalled.clone()];
    for namespace in &all {
        cluster.default_service_account(namespace).await.unwrap();
    }
    let namespaces = Namespaces([&all[0], &all[1], &all[2]]);
    let options = ChainOptions {
        log_level: LogLevel::Info,
        ..ChainOptions::default()
    };
    cluster
        .with_admission_chain_options(options, async |chain| {
            measure(&cluster, &namespaces, chain).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    names.delete_namespaces(&all).await;
}

/// Per class, the latencies (ms) with the gate on and off.
async fn measure(cluster: &Cluster, namespaces: &Namespaces<'_>, chain: &AdmissionChain) {
    figure("s16", format!("Pod CREATEs through {}", chain.version));
    let denied_by = chain.denied_by("", "pods");
    let unwalled = namespaces.of(Class::Unwalled);
    let gate_on = wait_gate(cluster, unwalled, Some(&denied_by)).await;
    let mark = cluster.audit.mark();
    let on = run(cluster, namespaces, "on", Some(&denied_by)).await;
    let gets = policy_server_gets(cluster, mark);
    chain
        .register_without("", "pods")
        .await
        .expect("the chain without the Pod rule");
    let gate_off = wait_gate(cluster, unwalled, None).await;
    let off = run(cluster, namespaces, "off", None).await;
    figure(
        "s16",
        format!(
            "{CREATES} dry-run Pod CREATEs per class and gate setting, interleaved, after {WARM_UP} not measured; gate on in the chain after {gate_on:.2?}, off after {gate_off:.2?}"
        ),
    );
    for (i, class) in Class::ALL.into_iter().enumerate() {
        let (on_p50, on_p99) = (percentile(&on[i], 50.0), percentile(&on[i], 99.0));
        let (off_p50, off_p99) = (percentile(&off[i], 50.0), percentile(&off[i], 99.0));
        figure(
            "s16",
            format!(
                "{:<27} gate on p50 {on_p50:.2} ms p99 {on_p99:.2} ms; off p50 {off_p50:.2} ms p99 {off_p99:.2} ms; added p50 {:.2} ms p99 {:.2} ms",
                class.label(),
                on_p50 - off_p50,
                on_p99 - off_p99,
            ),
        );
    }
    figure(
        "s16",
        format!(
            "policy-server's GETs during the {} gate-on creates: {gets}",
            CREATES + WARM_UP
        ),
    );
}

/// Waits until a Pod CREATE in the unwalled namespace is refused by the gate (`Some(its
/// refusal's start)`) or admitted three times in a row (`None`).
async fn wait_gate(cluster: &Cluster, unwalled: &str, denied_by: Option<&str>) -> Duration {
    let admitted_in_a_row = std::cell::Cell::new(0);
    let attempt = std::cell::Cell::new(0);
    let (_, took) = wait_until("the gate setting in the chain", CHAIN_UPDATE, || {
        attempt.set(attempt.get() + 1);
        let name = format!("gate-check-{}", attempt.get());
        let admitted_in_a_row = &admitted_in_a_row;
        async move {
            let outcome = dry_run_pod_create(&cluster.admin, unwalled, &name).await?;
            Ok(match (outcome, denied_by) {
                (Err((_, message)), Some(denied_by)) => {
                    message.starts_with(denied_by).then_some(())
                }
                (Ok(()), None) => {
                    admitted_in_a_row.set(admitted_in_a_row.get() + 1);
                    (admitted_in_a_row.get() >= 3).then_some(())
                }
                _ => {
                    admitted_in_a_row.set(0);
                    None
                }
            })
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    took
}

/// [`WARM_UP`] then [`CREATES`] rounds of one Pod CREATE per class; the measured latencies
/// (ms, sorted) per class. With the gate on (`denied_by`), the unwalled namespace's must be
/// refused by it and the others admitted; off, all admitted.
async fn run(
    cluster: &Cluster,
    namespaces: &Namespaces<'_>,
    gate: &str,
    denied_by: Option<&str>,
) -> [Vec<f64>; 3] {
    let mut latencies: [Vec<f64>; 3] = Default::default();
    for round in 0..WARM_UP + CREATES {
        for (i, class) in Class::ALL.into_iter().enumerate() {
            let name = format!("cost-{gate}-{round}");
            let started = Instant::now();
            let outcome = dry_run_pod_create(&cluster.admin, namespaces.of(class), &name)
                .await
                .unwrap();
            let took = started.elapsed();
            match (class, denied_by, outcome) {
                (Class::Unwalled, Some(denied_by), Err((_, message))) => {
                    assert!(message.starts_with(denied_by), "{message}");
                }
                (Class::Unwalled, Some(_), Ok(())) => {
                    panic!("a pod admitted into the unwalled namespace with the gate on");
                }
                (_, _, Err((code, message))) => {
                    panic!("{} ({gate}): refused: {code} {message}", class.label());
                }
                (_, _, Ok(())) => {}
            }
            if round >= WARM_UP {
                latencies[i].push(took.as_secs_f64() * 1000.0);
            }
        }
    }
    for samples in &mut latencies {
        samples.sort_by(f64::total_cmp);
    }
    latencies
}

/// policy-server's GETs since `mark`, by resource and answer, from the audit log.
fn policy_server_gets(
    cluster: &Cluster,
    mark: namespace_baseline_cluster_tests::AuditMark,
) -> String {
    let username =
        format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{POLICY_SERVER_SERVICE_ACCOUNT}");
    let Some(events) = cluster.audit.requests_since(mark, &username) else {
        return "(no audit log)".to_owned();
    };
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for event in events.iter().filter(|event| event.verb == "get") {
        let key = format!(
            "{} {}",
            event.resource(),
            event
                .code()
                .map_or_else(|| "?".to_owned(), |code| code.to_string())
        );
        *counts.entry(key).or_default() += 1;
    }
    format!("{counts:?}")
}
