//! The wall on real packets: scenarios on the one-node Kubernetes of `e2e-tests/node/`
//! (kubelet, containerd + runc, CNI bridge, kube-proxy in nftables mode, kube-router's
//! NetworkPolicy firewall, CoreDNS behind `kube-dns`).
//!
//! Run through `e2e-tests/node-tests.sh` (`make node-tests`), which starts the node and runs
//! this target inside the node's network namespace: the API server is the node's, probes run
//! in the test pods' network namespaces (`netprobe`, `nsenter`), commands in their `tools`
//! container (`ctr task exec`). Without the node's environment every test fails loudly.
//!
//! Every "blocked" is asserted next to a positive control that passed on the same path in
//! the same run (the same pods before the wall, or the same target from an unwalled pod), so
//! a broken network never looks like a wall; each says whether it was refused or timed out.

mod chart;
#[allow(dead_code)]
#[path = "../cluster/common.rs"]
mod common;
mod n10_kubewarden;
mod n11_signed;
mod n12_rollouts;
mod n1_wall;
mod n2_dns;
mod n3_drift;
mod n4_chart;
mod n5_delete;
mod n6_holes;
mod n7_enforced;
mod n8_pod_gate;
mod n9_outage;
mod pods;
mod prometheus;

use std::time::Duration;

use namespace_baseline_cluster_tests::{
    Cluster, Reconciler, Scenario, wait_until, wait_until_every,
};
use serde_json::json;

use crate::pods::{Node, Probe, TestPod, no_labels, start_pod};

/// A walled namespace and an open one, a test pod in each (and in a third, unlabelled
/// namespace when asked), the reconciler running, and the wall standing on the wire.
pub struct Bed {
    pub cluster: Cluster,
    pub names: Scenario,
    pub node: Node,
    pub baseline: String,
    pub reconciler: Reconciler,
    pub walled: TestPod,
    pub open: TestPod,
    pub other: Option<TestPod>,
    /// From the wall's objects being in place to the first blocked probe.
    pub enforced_after: Duration,
}

/// Asserts that a probe passed (a positive control), with context.
pub fn assert_passed(what: &str, probe: &Probe) {
    assert!(
        probe.passed(),
        "positive control failed: {what}: {probe} (the network, not the wall, is broken)"
    );
}

/// Asserts that a probe was blocked, with context.
pub fn assert_blocked(what: &str, probe: &Probe) {
    assert!(probe.blocked(), "expected blocked: {what}: {probe}");
}

/// Polls `probe` (every 100 ms) until it is blocked (`blocked`) or passes; returns the time.
pub async fn wait_wire(
    what: &str,
    timeout: Duration,
    blocked: bool,
    mut probe: impl FnMut() -> anyhow::Result<Probe>,
) -> Duration {
    let (_, took) = wait_until_every(what, timeout, Duration::from_millis(100), || {
        let seen = probe().unwrap_or_else(|error| panic!("{what}: {error:#}"));
        let result = if seen.blocked() == blocked && (blocked || seen.passed()) {
            Ok(Some(()))
        } else {
            Err(anyhow::anyhow!("still {seen}"))
        };
        async move { result }
    })
    .await
    .unwrap_or_else(|error| panic!("{what}: {error:#}"));
    took
}

impl Bed {
    pub async fn new(scenario: &str, with_other: bool, allow_dns: bool) -> Self {
        let (cluster, names, _) = common::start(scenario).await;
        let node = Node::from_env();
        let walled_ns = names.namespace("walled");
        let open_ns = names.namespace("open");
        let other_ns = names.namespace("other");
        let mut all = vec![walled_ns.clone(), open_ns.clone()];
        if with_other {
            all.push(other_ns.clone());
        }
        names
            .create_namespaces(&all, &no_labels())
            .await
            .expect("creating the namespaces");
        let walled = start_pod(&cluster.admin, &node, &walled_ns, "server").await;
        let open = start_pod(&cluster.admin, &node, &open_ns, "server").await;
        let other = if with_other {
            Some(start_pod(&cluster.admin, &node, &other_ns, "server").await)
        } else {
            None
        };
        // Positive controls before the wall, on the very paths the wall will close.
        for (from, to) in [(&walled, &open), (&open, &walled)] {
            let what = format!("{} -> {} before the wall", from.label(), to.label());
            assert_passed(
                &format!("TCP {what}"),
                &from.tcp(&node, &to.server()).unwrap(),
            );
            assert_passed(
                &format!("UDP {what}"),
                &from.udp(&node, &to.server()).unwrap(),
            );
        }
        let reconciler = cluster
            .start_reconciler(scenario, common::SINGLE)
            .await
            .expect("starting the reconciler");
        let baseline = names.name.clone();
        let mut spec = common::spec(&names);
        spec["allowDNS"] = json!(allow_dns);
        common::create_baseline(&cluster, &baseline, spec).await;
        names
            .set_namespace_label(&walled_ns, Some(&names.label_value))
            .await
            .expect("labelling the walled namespace");
        common::wait_wall(
            &cluster,
            &baseline,
            std::slice::from_ref(&walled_ns),
            allow_dns,
            Duration::from_secs(10),
        )
        .await;
        let enforced_after = wait_wire(
            "the wall on the wire (walled -> open TCP)",
            Duration::from_secs(20),
            true,
            || walled.probe(&node, &["tcp", &open.server(), "300"]),
        )
        .await;
        if allow_dns {
            // The deny-all and the DNS door are two policies, enforced one after the other:
            // the bed is ready when the door is open on the wire too.
            let kube_dns = node.kube_dns();
            wait_wire(
                "the DNS door on the wire",
                Duration::from_secs(20),
                false,
                || {
                    walled.dns(
                        &node,
                        "udp",
                        &kube_dns,
                        "kubernetes.default.svc.cluster.local",
                    )
                },
            )
            .await;
        }
        Self {
            cluster,
            names,
            node,
            baseline,
            reconciler,
            walled,
            open,
            other,
            enforced_after,
        }
    }

    /// Deletes the scenario's namespaces (the namespace controller removes pods and walls).
    pub async fn cleanup(self) {
        let mut all = vec![self.walled.namespace.clone(), self.open.namespace.clone()];
        if let Some(other) = &self.other {
            all.push(other.namespace.clone());
        }
        self.names.delete_namespaces(&all).await;
    }
}

/// Waits until a namespace is gone (404); returns how long it took.
pub async fn wait_namespace_gone(cluster: &Cluster, name: &str, timeout: Duration) -> Duration {
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(cluster.admin.clone());
    wait_until(&format!("namespace {name} to be deleted"), timeout, || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"))
    .1
}
