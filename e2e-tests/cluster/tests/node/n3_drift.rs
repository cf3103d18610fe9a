//! Node test 3, drift on the wire: an admin deletes the deny-all of a walled namespace; the
//! reconciler restores it and the packets stop again. A prober in an unwalled pod opens a TCP
//! connection to the walled pod every 10 ms (deleting the deny-all opens ingress: the DNS door
//! still isolates egress); for each of N repeats (NSB_DRIFT_REPEATS, default 25, at least 20)
//! it measures from the delete to the first blocked probe after the hole, and separately the
//! enforcer's own delay: a deny-all applied directly (no reconciler) in a third namespace,
//! from the create to the first blocked probe, and from its delete to the first open one.

use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use namespace_baseline_cluster_tests::{deny_all_policy_name, wait_recreated};
use serde_json::json;

use crate::Bed;
use crate::common::figure;
use crate::pods::{Watch, now_us, percentile};

/// A probe's timeout: a dropped SYN counts as blocked after this.
const PROBE_TIMEOUT_MS: u64 = 200;
const PROBE_EVERY_MS: u64 = 10;
/// How long a path must stay in its new state to count as settled.
const SETTLE: Duration = Duration::from_millis(1000);
/// The goal for the wall to be back on the wire.
const GOAL: Duration = Duration::from_secs(2);

fn repeats() -> usize {
    let repeats = std::env::var("NSB_DRIFT_REPEATS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(25);
    assert!(repeats >= 20, "NSB_DRIFT_REPEATS must be at least 20");
    repeats
}

fn ms(us: u128) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let ms = us as f64 / 1000.0;
    ms
}

/// `p50 / p99 / max` of a list of ms, for figures.
fn summary(values: &[f64]) -> String {
    if values.is_empty() {
        return "none (n=0)".to_owned();
    }
    format!(
        "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (n={})",
        percentile(values, 50.0),
        percentile(values, 99.0),
        values.iter().copied().fold(0.0, f64::max),
        values.len()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn n3_drift_on_the_wire_and_enforcer_delay() {
    let bed = Bed::new("n3", true, true).await;
    let (node, walled, open) = (&bed.node, &bed.walled, &bed.open);
    let other = bed.other.as_ref().expect("a pod in a third namespace");
    let repeats = repeats();
    let budget_ms = u64::try_from(repeats).unwrap_or(100) * 12_000 + 60_000;

    // --- the reconciler's repair, on the wire -------------------------------------------
    let into_walled = open
        .watch(
            node,
            "tcp",
            &walled.server(),
            PROBE_TIMEOUT_MS,
            PROBE_EVERY_MS,
            budget_ms,
        )
        .unwrap();
    let policies: Api<NetworkPolicy> =
        Api::namespaced(bed.cluster.admin.clone(), &walled.namespace);
    let deny_all = deny_all_policy_name(&bed.baseline);
    into_walled
        .wait_state(
            now_us(),
            false,
            Duration::from_millis(300),
            Duration::from_secs(20),
        )
        .await
        .expect("the wall holds before the first delete");
    let (mut wire, mut api, mut holes) = (Vec::new(), Vec::new(), Vec::new());
    let mut hole_not_seen = 0;
    for round in 0..repeats {
        let uid = policies.get(&deny_all).await.unwrap().uid();
        let deleted_at = now_us();
        policies
            .delete(&deny_all, &DeleteParams::default())
            .await
            .unwrap();
        // The API: a new deny-all (another uid).
        let restored = wait_recreated(&policies, &deny_all, uid, Duration::from_secs(10))
            .await
            .unwrap_or_else(|error| panic!("round {round}: {error:#}"));
        api.push(restored.as_secs_f64() * 1000.0);
        // The wire: the last probe that got through after the delete, then the first blocked
        // one after it, blocked since for SETTLE (longer than any enforcer delay seen, so a
        // hole that opens late is not missed).
        let blocked_from = into_walled
            .wait_state(deleted_at, false, SETTLE, Duration::from_secs(15))
            .await
            .unwrap_or_else(|error| {
                panic!("round {round}: the wall did not come back on the wire: {error:#}")
            });
        let probes = into_walled.since(deleted_at);
        let first_open = probes.iter().find(|(_, passed)| *passed).map(|(at, _)| *at);
        match first_open {
            Some(opened) => holes.push(ms(blocked_from.saturating_sub(opened))),
            None => hole_not_seen += 1,
        }
        wire.push(ms(blocked_from.saturating_sub(deleted_at)));
        eprintln!(
            "round {round}: deny-all back in the API after {:.0} ms, packets blocked again {:.0} ms after the delete (hole on the wire: {})",
            api[round],
            wire[round],
            first_open.map_or_else(
                || "not seen".to_owned(),
                |opened| format!("{:.0} ms to {:.0} ms", ms(opened - deleted_at), wire[round])
            )
        );
        tokio::time::sleep(Duration::from_millis(200 + 37 * (round as u64 % 5))).await;
    }
    drop(into_walled);

    // --- the enforcer alone: a deny-all applied and removed directly ------------------------
    let into_other = open
        .watch(
            node,
            "tcp",
            &other.server(),
            PROBE_TIMEOUT_MS,
            PROBE_EVERY_MS,
            budget_ms,
        )
        .unwrap();
    let direct: Api<NetworkPolicy> = Api::namespaced(bed.cluster.admin.clone(), &other.namespace);
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "n3-direct-deny-ingress"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
    }))
    .unwrap();
    wait_open(&into_other, "before the first direct policy").await;
    let (mut apply_delay, mut remove_delay) = (Vec::new(), Vec::new());
    for round in 0..repeats {
        let created_at = now_us();
        direct
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let blocked_from = into_other
            .wait_state(created_at, false, SETTLE, Duration::from_secs(15))
            .await
            .unwrap_or_else(|error| panic!("direct round {round}: policy not enforced: {error:#}"));
        apply_delay.push(ms(blocked_from.saturating_sub(created_at)));
        let deleted_at = now_us();
        direct
            .delete("n3-direct-deny-ingress", &DeleteParams::default())
            .await
            .unwrap();
        let open_from = into_other
            .wait_state(deleted_at, true, SETTLE, Duration::from_secs(15))
            .await
            .unwrap_or_else(|error| panic!("direct round {round}: policy not lifted: {error:#}"));
        remove_delay.push(ms(open_from.saturating_sub(deleted_at)));
        eprintln!(
            "direct round {round}: blocked {:.0} ms after the create, open {:.0} ms after the delete",
            apply_delay[round], remove_delay[round]
        );
    }
    drop(into_other);

    figure(
        "n3",
        format!(
            "drift on the wire (delete of the deny-all -> first blocked probe after the hole): {}; deny-all back in the API: {}; hole seen on the wire in {} of {repeats} rounds, open for {}",
            summary(&wire),
            summary(&api),
            repeats - hole_not_seen,
            summary(&holes)
        ),
    );
    figure(
        "n3",
        format!(
            "enforcer's own delay (kube-router, a deny-all created/deleted directly): to blocked {}; to open again {}",
            summary(&apply_delay),
            summary(&remove_delay)
        ),
    );
    let p99 = percentile(&wire, 99.0);
    assert!(
        p99 <= GOAL.as_secs_f64() * 1000.0,
        "drift on the wire p99 {p99:.0} ms exceeds the goal of {GOAL:?}"
    );
    bed.reconciler.check_alive().unwrap();
    bed.cleanup().await;
}

async fn wait_open(watch: &Watch, what: &str) {
    watch
        .wait_state(
            now_us(),
            true,
            Duration::from_millis(300),
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|error| panic!("{what}: {error:#}"));
}
