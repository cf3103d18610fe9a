//! Node test 2, the DNS door: from a walled pod a name resolves through the `kube-dns`
//! Service (UDP and TCP, and `nslookup` in the pod through its own resolv.conf), while another
//! port of the same CoreDNS pod stays blocked; with `allowDNS: false` resolution fails, and
//! comes back when the door does.

use std::time::Duration;

use serde_json::json;

use crate::common::{figure, patch_spec, wait_wall};
use crate::pods::coredns_ip;
use crate::{Bed, assert_blocked, assert_passed, wait_wire};

const NAME: &str = "kubernetes.default.svc.cluster.local";
/// The `kubernetes` Service's ClusterIP (first address of the control plane's range).
const KUBERNETES_IP: &str = "10.0.0.1";

#[tokio::test(flavor = "multi_thread")]
async fn n2_dns_door_resolves_and_nothing_else() {
    let bed = Bed::new("n2", false, true).await;
    let (node, walled, open) = (&bed.node, &bed.walled, &bed.open);
    let kube_dns = node.kube_dns();

    // The door: UDP and TCP through the ClusterIP, with the right answer.
    for transport in ["udp", "tcp"] {
        let answer = walled.dns(node, transport, &kube_dns, NAME).unwrap();
        assert!(
            answer.addresses() == [KUBERNETES_IP],
            "{transport} query from walled pod {} via kube-dns {kube_dns}: {answer}",
            walled.label()
        );
        eprintln!(
            "DNS over {transport} from {} through {kube_dns}: {answer}",
            walled.label()
        );
    }
    // As the pod's own resolver does it (the nameserver of kubelet's resolv.conf; busybox's
    // nslookup does not use the search path, hence the full name).
    let (code, output) = walled.exec(node, &["nslookup", NAME]).unwrap();
    assert!(
        code == 0 && output.contains(KUBERNETES_IP),
        "nslookup {NAME} in {}: exit {code}: {output}",
        walled.label()
    );

    // Another port of the same CoreDNS pod (health, 8080), and the metrics port of the same
    // Service (9153): blocked from the walled pod, open from the unwalled one.
    let coredns = coredns_ip(&bed.cluster.admin).await.unwrap();
    let mut kinds = Vec::new();
    for target in [
        format!("{coredns}:8080"),
        format!("{}:9153", node.cluster_dns),
    ] {
        let control = open.tcp(node, &target).unwrap();
        let probe = walled.tcp(node, &target).unwrap();
        assert_passed(&format!("TCP {} -> {target}", open.label()), &control);
        assert_blocked(&format!("TCP {} -> {target}", walled.label()), &probe);
        eprintln!(
            "TCP {} -> {target}: {probe} (control from {}: {control})",
            walled.label(),
            open.label()
        );
        kinds.push(format!("{target} {}", probe.result));
    }

    // allowDNS: false closes the door; the unwalled pod still resolves (positive control).
    patch_spec(&bed.cluster, &bed.baseline, json!({"allowDNS": false})).await;
    wait_wall(
        &bed.cluster,
        &bed.baseline,
        std::slice::from_ref(&walled.namespace),
        false,
        Duration::from_secs(10),
    )
    .await;
    let closed_after = wait_wire(
        "the DNS door closed on the wire",
        Duration::from_secs(20),
        true,
        || walled.dns(node, "udp", &kube_dns, NAME),
    )
    .await;
    let mut closed = Vec::new();
    for transport in ["udp", "tcp"] {
        let control = open.dns(node, transport, &kube_dns, NAME).unwrap();
        let probe = walled.dns(node, transport, &kube_dns, NAME).unwrap();
        assert!(
            control.addresses() == [KUBERNETES_IP],
            "positive control failed: {transport} query from {}: {control}",
            open.label()
        );
        assert_blocked(
            &format!(
                "{transport} query from {} with allowDNS: false",
                walled.label()
            ),
            &probe,
        );
        closed.push(format!("{transport} {}", probe.result));
    }
    let (code, output) = walled.exec(node, &["nslookup", NAME]).unwrap();
    assert!(
        code != 0,
        "nslookup in {} resolved with allowDNS: false: {output}",
        walled.label()
    );

    // The door again: resolution comes back (the failure was the policy, not CoreDNS).
    patch_spec(&bed.cluster, &bed.baseline, json!({"allowDNS": true})).await;
    let reopened_after = wait_wire(
        "the DNS door open again on the wire",
        Duration::from_secs(20),
        false,
        || walled.dns(node, "udp", &kube_dns, NAME),
    )
    .await;
    figure(
        "n2",
        format!(
            "walled pod resolves {NAME} over UDP and TCP via kube-dns; other ports blocked ({}); allowDNS false: {} ({:.0} ms after the door's removal was in place), reopened on the wire {:.0} ms after allowDNS: true",
            kinds.join(", "),
            closed.join(", "),
            closed_after.as_secs_f64() * 1000.0,
            reopened_after.as_secs_f64() * 1000.0
        ),
    );
    bed.reconciler.check_alive().unwrap();
    bed.cleanup().await;
}
