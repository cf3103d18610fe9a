//! `node-demo`: the node step of `make demo NODE=1` (demo/node-demo.sh starts the node of
//! e2e-tests/node/ and runs this inside its network namespace). On real pods: a connection
//! from a walled pod is refused while an unwalled one gets through, a name resolves through
//! the DNS door, and a deleted wall is back on the wire a few milliseconds later.

#[allow(dead_code)]
#[path = "../../tests/node/pods.rs"]
mod pods;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use namespace_baseline_cluster_tests::{
    Cluster, deny_all_policy_name, wait_recreated, wait_until, wall_of,
};
use serde_json::json;

use crate::pods::{Node, now_us, start_pod};

fn say(started: Instant, text: &str) {
    println!("[{:6.1}s] {text}", started.elapsed().as_secs_f64());
}

#[tokio::main]
async fn main() -> Result<()> {
    let started = Instant::now();
    let cluster = Cluster::connect().await?;
    let node = Node::from_env();
    let names = cluster.scenario("demo");
    let walled_ns = names.namespace("walled");
    let open_ns = names.namespace("open");
    names
        .create_namespaces(std::slice::from_ref(&walled_ns), &names.walled_labels())
        .await?;
    names
        .create_namespaces(std::slice::from_ref(&open_ns), &Default::default())
        .await?;
    println!("== The node: real pods on a bridge, kube-router enforcing NetworkPolicies");
    let walled = start_pod(&cluster.admin, &node, &walled_ns, "app").await;
    let open = start_pod(&cluster.admin, &node, &open_ns, "app").await;
    say(
        started,
        &format!(
            "pods running: {} ({}, labelled {}) and {} ({}, unlabelled)",
            walled.label(),
            walled.ip,
            names.selector(),
            open.label(),
            open.ip
        ),
    );
    let before = walled.tcp(&node, &open.server())?;
    let mut reconciler = cluster
        .start_reconciler("node-demo", &["--leader-election=false"])
        .await?;
    cluster
        .apply(&json!({
            "apiVersion": "hedronite.io/v1alpha1",
            "kind": "NamespaceBaseline",
            "metadata": {"name": names.name},
            "spec": {"namespaceLabel": names.selector(), "allowDNS": true}
        }))
        .await?;
    wait_until("the wall", Duration::from_secs(10), || async {
        Ok((wall_of(&cluster.admin, &names.name).await?.len() == 2).then_some(()))
    })
    .await?;
    let (_, enforced) = wait_until("the wall on the wire", Duration::from_secs(10), || {
        let probe = walled.probe(&node, &["tcp", &open.server(), "300"]);
        async move { Ok(probe?.blocked().then_some(())) }
    })
    .await?;
    say(
        started,
        &format!(
            "NamespaceBaseline {} applied: the wall stands in {walled_ns} (its 2 NetworkPolicies written by the reconciler, enforced by kube-router {:.0} ms later)",
            names.name,
            enforced.as_secs_f64() * 1000.0
        ),
    );

    println!("\n== 1. The wall, on the wire (a TCP connection to port 5353 of the other pod)");
    let out = walled.tcp(&node, &open.server())?;
    let into = open.tcp(&node, &walled.server())?;
    println!("  walled -> open, before the baseline: {before}");
    println!("  walled -> open, behind the wall:     {out}");
    println!("  open -> walled, behind the wall:     {into}");

    println!("\n== 2. The DNS door: the walled pod resolves through the kube-dns Service");
    for transport in ["udp", "tcp"] {
        let answer = walled.dns(
            &node,
            transport,
            &node.kube_dns(),
            "kubernetes.default.svc.cluster.local",
        )?;
        println!("  {transport} query to {}: {answer}", node.kube_dns());
    }
    let (code, output) =
        walled.exec(&node, &["nslookup", "kubernetes.default.svc.cluster.local"])?;
    println!(
        "  $ nslookup kubernetes.default.svc.cluster.local   (in the pod, exit {code})\n{}",
        output
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| format!("    {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    println!("\n== 3. Drift: an admin deletes the deny-all; the packets stop again");
    let watch = open.watch(&node, "tcp", &walled.server(), 200, 10, 30_000)?;
    watch
        .wait_state(
            now_us(),
            false,
            Duration::from_millis(300),
            Duration::from_secs(10),
        )
        .await?;
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled_ns);
    let deny_all = deny_all_policy_name(&names.name);
    let uid = policies.get(&deny_all).await?.uid();
    let deleted_at = now_us();
    policies.delete(&deny_all, &DeleteParams::default()).await?;
    let restored = wait_recreated(&policies, &deny_all, uid, Duration::from_secs(10)).await?;
    let blocked = watch
        .wait_state(
            deleted_at,
            false,
            Duration::from_secs(1),
            Duration::from_secs(15),
        )
        .await?;
    let through = watch
        .since(deleted_at)
        .iter()
        .filter(|(_, passed)| *passed)
        .count();
    println!(
        "  deleted {deny_all}; the reconciler restored it {:.0} ms later",
        restored.as_secs_f64() * 1000.0
    );
    #[allow(clippy::cast_precision_loss)]
    let blocked_ms = blocked.saturating_sub(deleted_at) as f64 / 1000.0;
    println!(
        "  packets from {} blocked again {blocked_ms:.0} ms after the delete ({through} of the probes, one every 10 ms, got through meanwhile)",
        open.label()
    );
    drop(watch);

    println!("\n== cleaning up");
    reconciler.stop().await?;
    cluster.remove_all_baselines().await?;
    names
        .delete_namespaces(&[walled_ns.clone(), open_ns.clone()])
        .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.admin.clone());
    wait_until(
        "the demo's namespaces deleted",
        Duration::from_secs(60),
        || {
            let namespaces = namespaces.clone();
            let (walled_ns, open_ns) = (walled_ns.clone(), open_ns.clone());
            async move {
                Ok((namespaces.get_opt(&walled_ns).await?.is_none()
                    && namespaces.get_opt(&open_ns).await?.is_none())
                .then_some(()))
            }
        },
    )
    .await
    .context("deleting the demo's namespaces")?;
    say(started, "done");
    Ok(())
}
