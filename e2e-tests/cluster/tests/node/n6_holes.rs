//! Node test 6, holes and a NodeLocal-style door, on real packets.
//!
//! - A hole: a pod in an unlabelled namespace cannot reach the walled pod (while it reaches an
//!   unwalled one, the positive control); an unmanaged `ingress: [{}]` NetworkPolicy beside
//!   the wall lets its TCP and UDP in, and the baseline reports it (`Sealed=False`
//!   `OpenToWorld`, `status.holes.World`, a `HoleOpened` Event, the reconciler's
//!   `namespace_baseline_holes{width="World",direction="Ingress"}`, read from its /metrics: it
//!   runs as a process in the node's network namespace). The hole deleted: blocked again,
//!   `Sealed=True`, the count and the metric back to 0.
//! - A NodeLocal-style door: a DNS server on a host-network address of the node
//!   (169.254.20.10 on a link of its own in the node's network namespace, served by a
//!   hostNetwork CoreDNS pod forwarding to the kube-dns ClusterIP, as NodeLocal DNSCache
//!   does). Behind the default door the walled pod cannot reach it (an unwalled pod can);
//!   with the door `{pods: false, ipBlocks: [169.254.20.10/32]}` it resolves through it
//!   (UDP, TCP, busybox `nslookup NAME 169.254.20.10`) while the kube-dns ClusterIP and the
//!   CoreDNS pod are blocked (both still answer the unwalled pod), and `DNSReachable` says the
//!   kube-dns endpoints are outside the door.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use namespace_baseline_cluster_tests::{
    Cluster, dns_policy_name, get_policy, spec_json, wait_until,
};
use serde_json::{Value, json};

use crate::common::{figure, patch_spec};
use crate::pods::{Node, Probe, TestPod, coredns_ip, no_labels};
use crate::{Bed, assert_blocked, assert_passed, wait_wire};

const NAME: &str = "kubernetes.default.svc.cluster.local";
/// The `kubernetes` Service's ClusterIP: the answer for [`NAME`].
const KUBERNETES_IP: &str = "10.0.0.1";
/// NodeLocal DNSCache's customary address, on a link of its own on the node.
const NODE_LOCAL_IP: &str = "169.254.20.10";
const NODE_LOCAL_LINK: &str = "nsb-nodelocal";
const HOLE: &str = "let-everyone-in";
const HOLES_METRIC: &str = r#"namespace_baseline_holes{width="World",direction="Ingress"}"#;

/// Waits (15 s) for the baseline's condition `type_` to be `status` with `reason`: its
/// message and how long it took.
async fn wait_condition(
    cluster: &Cluster,
    baseline: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> (String, Duration) {
    let (_, message, took) = cluster
        .wait_condition(
            baseline,
            type_,
            status,
            Some(reason),
            Duration::from_secs(15),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    (message, took)
}

/// `status.holes[width]` of the baseline (0 when absent).
async fn holes(cluster: &Cluster, baseline: &str, width: &str) -> u32 {
    let baseline = cluster.baselines().get(baseline).await.unwrap();
    baseline
        .status
        .and_then(|status| status.holes)
        .and_then(|holes| holes.get(width).copied())
        .unwrap_or(0)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread")]
async fn n6_a_hole_beside_the_wall_lets_packets_in_and_is_reported() {
    let bed = Bed::new("n6-hole", true, true).await;
    let (node, walled, open) = (&bed.node, &bed.walled, &bed.open);
    let client = bed.other.as_ref().expect("a pod in a third namespace");
    let (cluster, baseline) = (&bed.cluster, bed.baseline.as_str());
    let into_walled = format!("{} -> {}", client.label(), walled.label());
    let into_open = format!("{} -> {}", client.label(), open.label());

    // The wall: the client's TCP and UDP do not get in; the same client reaches an unwalled
    // server pod on the same bridge (the positive control, probed in the same breath).
    let sealed = |when: &str| {
        let tcp_control = client.tcp(node, &open.server()).unwrap();
        let udp_control = client.udp(node, &open.server()).unwrap();
        let tcp = client.tcp(node, &walled.server()).unwrap();
        let udp = client.udp(node, &walled.server()).unwrap();
        assert_passed(&format!("TCP {into_open} {when}"), &tcp_control);
        assert_passed(&format!("UDP {into_open} {when}"), &udp_control);
        assert_blocked(&format!("TCP {into_walled} {when}"), &tcp);
        assert_blocked(&format!("UDP {into_walled} {when}"), &udp);
        eprintln!("{when}: TCP {into_walled}: {tcp} (control {into_open}: {tcp_control})");
        eprintln!("{when}: UDP {into_walled}: {udp} (control {into_open}: {udp_control})");
        format!("TCP {}, UDP {}", tcp.result, udp.result)
    };
    let before = sealed("before the hole");
    wait_condition(cluster, baseline, "Sealed", "True", "NoBreach").await;
    assert_eq!(holes(cluster, baseline, "World").await, 0);
    assert_eq!(bed.reconciler.metric(HOLES_METRIC).unwrap(), 0.0);

    // An unmanaged policy beside the wall, as a team might write it: every source, every port.
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled.namespace);
    let hole: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": HOLE},
        "spec": {"podSelector": {}, "ingress": [{}]},
    }))
    .unwrap();
    let created = Instant::now();
    policies
        .create(&PostParams::default(), &hole)
        .await
        .unwrap();
    let opened_after = wait_wire(
        &format!("the hole on the wire (TCP {into_walled})"),
        Duration::from_secs(20),
        false,
        || client.tcp(node, &walled.server()),
    )
    .await;
    let tcp = client.tcp(node, &walled.server()).unwrap();
    let udp = client.udp(node, &walled.server()).unwrap();
    assert_passed(&format!("TCP {into_walled} through the hole"), &tcp);
    assert_passed(&format!("UDP {into_walled} through the hole"), &udp);
    eprintln!("through the hole: TCP {into_walled}: {tcp}; UDP: {udp}");
    // The hole is ingress only: the walled pod's own egress is still walled (the same target
    // reached from the client is the control).
    let egress = walled.tcp(node, &open.server()).unwrap();
    let egress_control = client.tcp(node, &open.server()).unwrap();
    assert_passed(&format!("TCP {into_open} (hole open)"), &egress_control);
    assert_blocked(
        &format!("TCP {} -> {} (hole open)", walled.label(), open.label()),
        &egress,
    );

    // The report: condition, count, Event, metric.
    let (message, _) = wait_condition(cluster, baseline, "Sealed", "False", "OpenToWorld").await;
    let sealed_false_after = created.elapsed();
    assert!(
        message.contains(&walled.namespace) && message.contains(HOLE),
        "Sealed=False names the namespace and the policy: {message}"
    );
    let world = holes(cluster, baseline, "World").await;
    assert!(world >= 1, "status.holes.World is {world}");
    let (notes, _) = wait_until("a HoleOpened Event", Duration::from_secs(10), || async {
        let notes = cluster.events(baseline, "HoleOpened").await?;
        Ok(Some(notes).filter(|notes| notes.iter().any(|note| note.contains(HOLE))))
    })
    .await
    .unwrap();
    let (metric, _) = wait_until(
        "the holes metric counting the hole",
        Duration::from_secs(10),
        || {
            let value = bed.reconciler.metric(HOLES_METRIC);
            async move { Ok(Some(value?).filter(|value| *value >= 1.0)) }
        },
    )
    .await
    .unwrap();
    figure(
        "n6",
        format!(
            "an `ingress: [{{}}]` policy beside the wall: {into_walled} TCP and UDP got in {:.0} ms after its create (before it: {before}; the walled pod's egress still blocked as {}); Sealed=False OpenToWorld after {:.0} ms ({message}), status.holes.World {world}, HoleOpened Event {notes:?}, metric holes{{World,Ingress}} {metric}",
            ms(opened_after),
            egress.result,
            ms(sealed_false_after),
        ),
    );

    // The hole deleted: blocked again, and the report follows.
    let deleted = Instant::now();
    policies
        .delete(HOLE, &DeleteParams::default())
        .await
        .unwrap();
    let closed_after = wait_wire(
        &format!("the hole closed on the wire (TCP {into_walled})"),
        Duration::from_secs(20),
        true,
        || client.tcp(node, &walled.server()),
    )
    .await;
    let after = sealed("after the hole's deletion");
    wait_condition(cluster, baseline, "Sealed", "True", "NoBreach").await;
    let sealed_true_after = deleted.elapsed();
    assert_eq!(holes(cluster, baseline, "World").await, 0);
    let (metric, _) = wait_until(
        "the holes metric back to 0",
        Duration::from_secs(10),
        || {
            let value = bed.reconciler.metric(HOLES_METRIC);
            async move { Ok(Some(value?).filter(|value| *value == 0.0)) }
        },
    )
    .await
    .unwrap();
    figure(
        "n6",
        format!(
            "the hole deleted: blocked again on the wire {:.0} ms after the delete ({after}); Sealed=True NoBreach after {:.0} ms, status.holes.World 0, metric {metric}",
            ms(closed_after),
            ms(sealed_true_after),
        ),
    );
    bed.reconciler.check_alive().unwrap();
    bed.cleanup().await;
}

/// The NodeLocal-style address on a link of its own in the node's network namespace, removed
/// when dropped (the node's namespace would take it along anyway). NodeLocal DNSCache puts it
/// on a `dummy` link; this kernel has no dummy driver (`CONFIG_DUMMY`: "Unknown device
/// type"), so a bridge without ports stands in: an address of the node, on no pod's path.
struct NodeLocalAddress<'a> {
    node: &'a Node,
}

impl<'a> NodeLocalAddress<'a> {
    fn add(node: &'a Node) -> Result<Self> {
        ip(node, &["link", "add", NODE_LOCAL_LINK, "type", "bridge"])?;
        let address = Self { node };
        ip(
            node,
            &[
                "addr",
                "add",
                &format!("{NODE_LOCAL_IP}/32"),
                "dev",
                NODE_LOCAL_LINK,
            ],
        )?;
        ip(node, &["link", "set", NODE_LOCAL_LINK, "up"])?;
        Ok(address)
    }
}

impl Drop for NodeLocalAddress<'_> {
    fn drop(&mut self) {
        if let Err(error) = ip(self.node, &["link", "del", NODE_LOCAL_LINK]) {
            eprintln!("removing {NODE_LOCAL_LINK}: {error:#}");
        }
    }
}

/// `ip ARGS` in the node's network namespace (the holder's).
fn ip(node: &Node, args: &[&str]) -> Result<()> {
    let output = node
        .in_network("ip")
        .args(args)
        .output()
        .context("running ip in the node's network namespace")?;
    ensure!(
        output.status.success(),
        "ip {args:?} in the node's network namespace: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// The NodeLocal-style DNS server: a hostNetwork CoreDNS pod bound to [`NODE_LOCAL_IP`]
/// only, forwarding everything to the kube-dns ClusterIP (as NodeLocal DNSCache forwards
/// `cluster.local` to kube-dns), in its own unlabelled namespace.
async fn start_node_local_dns(cluster: &Cluster, node: &Node, namespace: &str) -> Result<()> {
    let corefile = format!(
        ".:53 {{\n    bind {NODE_LOCAL_IP}\n    errors\n    cache 5\n    forward . {}\n}}\n",
        node.kube_dns()
    );
    let objects: [Value; 2] = [
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "node-local-dns", "namespace": namespace},
               "data": {"Corefile": corefile}}),
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "node-local-dns", "namespace": namespace,
                     "labels": {"app": "nsb-node-local-dns"}},
        "spec": {
            "hostNetwork": true,
            "dnsPolicy": "Default",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "coredns",
                "image": node.coredns_image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["-conf", "/etc/coredns/Corefile"],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": true}]
            }],
            "volumes": [{"name": "config", "configMap": {"name": "node-local-dns"}}]
        }}),
    ];
    for object in &objects {
        // Retried while the namespace's default ServiceAccount does not exist yet.
        wait_until(
            &format!("creating {}", object["kind"]),
            Duration::from_secs(30),
            || async { cluster.apply(object).await.map(Some) },
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), namespace);
    wait_until(
        "the NodeLocal-style DNS pod running",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("node-local-dns").await?;
                let status = pod.status.unwrap_or_default();
                let ready = status
                    .container_statuses
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.ready);
                Ok((status.phase.as_deref() == Some("Running") && ready).then_some(()))
            }
        },
    )
    .await?;
    Ok(())
}

/// A DNS query for [`NAME`] that must answer [`KUBERNETES_IP`].
fn assert_resolves(what: &str, probe: &Probe) {
    assert!(
        probe.addresses() == [KUBERNETES_IP],
        "{what}: expected {NAME} -> {KUBERNETES_IP}: {probe}"
    );
}

/// UDP and TCP queries for [`NAME`] from `from` to `target`.
fn query_both(node: &Node, from: &TestPod, target: &str) -> [(&'static str, Probe); 2] {
    ["udp", "tcp"].map(|transport| (transport, from.dns(node, transport, target, NAME).unwrap()))
}

#[tokio::test(flavor = "multi_thread")]
async fn n6_node_local_door_resolves_without_the_kube_dns_door() {
    let bed = Bed::new("n6-nodelocal", false, true).await;
    let (node, walled, open) = (&bed.node, &bed.walled, &bed.open);
    let (cluster, baseline) = (&bed.cluster, bed.baseline.as_str());
    let node_local = format!("{NODE_LOCAL_IP}:53");
    let kube_dns = node.kube_dns();
    let coredns = format!("{}:53", coredns_ip(&cluster.admin).await.unwrap());

    let address = NodeLocalAddress::add(node).unwrap();
    let dns_namespace = bed.names.namespace("nodelocal");
    bed.names
        .create_namespaces(std::slice::from_ref(&dns_namespace), &no_labels())
        .await
        .expect("creating the NodeLocal-style DNS namespace");
    start_node_local_dns(cluster, node, &dns_namespace)
        .await
        .unwrap_or_else(|error| panic!("the NodeLocal-style DNS server: {error:#}"));
    // Positive control: the unwalled pod resolves through it (CoreDNS may still be starting).
    wait_wire(
        &format!("{} resolving through {node_local}", open.label()),
        Duration::from_secs(20),
        false,
        || open.dns(node, "udp", &node_local, NAME),
    )
    .await;

    // Behind the default door (kube-dns pods only) the walled pod cannot reach it, while it
    // still resolves through kube-dns.
    let mut default_door = Vec::new();
    for (transport, probe) in query_both(node, walled, &node_local) {
        let control = open.dns(node, transport, &node_local, NAME).unwrap();
        assert_resolves(
            &format!("{transport} {} -> {node_local}", open.label()),
            &control,
        );
        assert_blocked(
            &format!(
                "{transport} {} -> {node_local} (default door)",
                walled.label()
            ),
            &probe,
        );
        default_door.push(format!("{transport} {}", probe.result));
    }
    for (transport, probe) in query_both(node, walled, &kube_dns) {
        assert_resolves(
            &format!(
                "{transport} {} -> {kube_dns} (default door)",
                walled.label()
            ),
            &probe,
        );
    }

    // The NodeLocal door: the ipBlock only, no door to the kube-dns pods.
    let patched = Instant::now();
    patch_spec(
        cluster,
        baseline,
        json!({"dns": {"pods": false, "ipBlocks": [format!("{NODE_LOCAL_IP}/32")]}}),
    )
    .await;
    let door_spec = json!({
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{
            "to": [{"ipBlock": {"cidr": format!("{NODE_LOCAL_IP}/32")}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
        }]
    });
    let door_name = dns_policy_name(baseline);
    wait_until(
        "the NodeLocal door installed",
        Duration::from_secs(10),
        || async {
            let door = get_policy(&cluster.admin, &walled.namespace, &door_name).await?;
            Ok(door.filter(|door| spec_json(door) == door_spec).map(|_| ()))
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    let in_place = Instant::now();
    let opened_after = wait_wire(
        &format!("{} resolving through {node_local}", walled.label()),
        Duration::from_secs(20),
        false,
        || walled.dns(node, "udp", &node_local, NAME),
    )
    .await;
    wait_wire(
        &format!("{} -> {kube_dns} closed", walled.label()),
        Duration::from_secs(20),
        true,
        || walled.dns(node, "udp", &kube_dns, NAME),
    )
    .await;
    let (kube_dns_closed_after, since_patch) = (in_place.elapsed(), patched.elapsed());
    let mut through = Vec::new();
    for (transport, probe) in query_both(node, walled, &node_local) {
        assert_resolves(
            &format!("{transport} {} -> {node_local}", walled.label()),
            &probe,
        );
        through.push(format!("{transport} {:.1} ms", probe.ms));
    }
    let (code, output) = walled
        .exec(node, &["nslookup", NAME, NODE_LOCAL_IP])
        .unwrap();
    assert!(
        code == 0 && output.contains(KUBERNETES_IP),
        "nslookup {NAME} {NODE_LOCAL_IP} in {}: exit {code}: {output}",
        walled.label()
    );
    eprintln!(
        "nslookup {NAME} {NODE_LOCAL_IP} in {}: {output}",
        walled.label()
    );

    // The kube-dns door is absent: the ClusterIP and the CoreDNS pod itself, each next to
    // the unwalled pod resolving through the same target. kube-router rejects (ICMP port
    // unreachable), but the kernel sends at most 6 ICMP errors in a row to one address, then
    // one a second (`net.ipv4.icmp_ratelimit`, burst 6): after the polling above, a rejected
    // probe would read as a timeout. A pause lets the limit refill, so that "refused" or
    // "timeout" below is the enforcer's doing.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut absent = Vec::new();
    for target in [&kube_dns, &coredns] {
        for (transport, probe) in query_both(node, walled, target) {
            let control = open.dns(node, transport, target, NAME).unwrap();
            assert_resolves(
                &format!("{transport} {} -> {target}", open.label()),
                &control,
            );
            assert_blocked(
                &format!(
                    "{transport} {} -> {target} (NodeLocal door)",
                    walled.label()
                ),
                &probe,
            );
            eprintln!(
                "{transport} {} -> {target}: {probe} (control from {}: {control})",
                walled.label(),
                open.label()
            );
            absent.push(format!("{transport} {target} {}", probe.result));
        }
    }
    // The pod's own resolver (kubelet's resolv.conf names the kube-dns ClusterIP) fails.
    let (code, output) = walled.exec(node, &["nslookup", NAME]).unwrap();
    assert!(
        code != 0,
        "nslookup {NAME} through the pod's resolv.conf in {} resolved without the kube-dns door: {output}",
        walled.label()
    );

    // The report agrees with the wire: kube-dns's endpoints are outside this door.
    let (reachable, _) = wait_condition(
        cluster,
        baseline,
        "DNSReachable",
        "False",
        "EndpointOutsideDoor",
    )
    .await;
    figure(
        "n6",
        format!(
            "NodeLocal-style door {{pods: false, ipBlocks: [{NODE_LOCAL_IP}/32]}} (hostNetwork CoreDNS on a link of its own on the node, forwarding to kube-dns): behind the default door the walled pod reaches it not ({}); with the ipBlock door it resolves {NAME} through it ({}, and busybox nslookup) {:.0} ms after the door was in place; the kube-dns door absent: {} (closed on the wire {:.0} ms after the door; {:.0} ms from the patch), each beside the unwalled pod resolving through the same target; DNSReachable=False EndpointOutsideDoor ({reachable})",
            default_door.join(", "),
            through.join(", "),
            ms(opened_after),
            absent.join(", "),
            ms(kube_dns_closed_after),
            ms(since_patch),
        ),
    );

    // Stop the DNS server before its address goes.
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), &dns_namespace);
    pods.delete("node-local-dns", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the NodeLocal-style DNS pod gone",
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .get_opt("node-local-dns")
                    .await?
                    .is_none()
                    .then_some(()))
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    drop(address);
    bed.names.delete_namespaces(&[dns_namespace]).await;
    bed.reconciler.check_alive().unwrap();
    bed.cleanup().await;
}
