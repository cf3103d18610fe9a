//! Node test 1, the wall: a NamespaceBaseline walls namespace `walled`; a pod there can
//! neither open TCP nor send UDP to a server pod in another namespace, nor be reached from
//! one; pods in unlabelled namespaces still can, both ways.

use crate::common::figure;
use crate::{Bed, assert_blocked, assert_passed};

#[tokio::test(flavor = "multi_thread")]
async fn n1_wall_blocks_tcp_and_udp_both_ways() {
    let bed = Bed::new("n1", true, true).await;
    let (node, walled, open) = (&bed.node, &bed.walled, &bed.open);
    let other = bed.other.as_ref().expect("a pod in a third namespace");
    let mut kinds = Vec::new();
    // Each blocked path next to its positive control, probed at the same time: egress is
    // checked against the same target reached from an unwalled pod, ingress against the
    // same source reaching an unwalled pod.
    let checks = [
        ("egress", walled, open, other, open),
        ("ingress", open, walled, open, other),
    ];
    for (direction, from, to, control_from, control_to) in checks {
        let what = format!("{} -> {}", from.label(), to.label());
        let control_what = format!("{} -> {}", control_from.label(), control_to.label());
        let tcp = from.tcp(node, &to.server()).unwrap();
        let tcp_control = control_from.tcp(node, &control_to.server()).unwrap();
        let udp = from.udp(node, &to.server()).unwrap();
        let udp_control = control_from.udp(node, &control_to.server()).unwrap();
        if !tcp.blocked() || !udp.blocked() {
            // Said before the assertion fails: a second look, and the firewall's state then.
            let again = (from.tcp(node, &to.server()), from.udp(node, &to.server()));
            eprintln!(
                "!! {what} got through (TCP {tcp}, UDP {udp}); probed again: TCP {:?}, UDP {:?}\n{}",
                again.0.map(|p| p.to_string()),
                again.1.map(|p| p.to_string()),
                node.firewall_state(&from.ip, &to.ip)
            );
        }
        assert_passed(&format!("TCP {control_what}"), &tcp_control);
        assert_passed(&format!("UDP {control_what}"), &udp_control);
        assert_blocked(&format!("TCP {what}"), &tcp);
        assert_blocked(&format!("UDP {what}"), &udp);
        eprintln!("TCP {direction} {what}: {tcp} (control {control_what}: {tcp_control})");
        eprintln!("UDP {direction} {what}: {udp} (control {control_what}: {udp_control})");
        kinds.push(format!("TCP {direction} {}", tcp.result));
        kinds.push(format!("UDP {direction} {}", udp.result));
    }
    // Unwalled pods, both ways, TCP and UDP.
    for (from, to) in [(open, other), (other, open)] {
        let what = format!("{} -> {}", from.label(), to.label());
        assert_passed(
            &format!("TCP {what}"),
            &from.tcp(node, &to.server()).unwrap(),
        );
        assert_passed(
            &format!("UDP {what}"),
            &from.udp(node, &to.server()).unwrap(),
        );
    }
    figure(
        "n1",
        format!(
            "wall on the wire {:.0} ms after its objects were in place; blocked as: {}",
            bed.enforced_after.as_secs_f64() * 1000.0,
            kinds.join(", ")
        ),
    );
    bed.reconciler.check_alive().unwrap();
    bed.cleanup().await;
}
