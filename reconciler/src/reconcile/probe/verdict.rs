//! What a probe round's three reports mean for the `Enforced` condition. Pure: the driver
//! gathers the reports (driver.rs), this decides.
//!
//! The round: a listener pod in the unwalled control namespace; a canary pod in the walled
//! canary namespace that listens too, connects to the control listener (egress across the
//! wall) and resolves a name through its own resolver; a client pod in the control
//! namespace that connects to the canary (ingress across the wall) and to the control
//! listener (the positive control), and resolves the same name (the DNS control).

use super::report::{ConnectResult, PodFindings};

/// A direction across the wall, as seen from the canary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Egress => "egress",
        }
    }
}

/// The outcome of a round, as the condition says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Both directions blocked, and (with `allowDNS`) the name resolved in the canary.
    Holds { message: String },
    /// A packet the wall forbids went through.
    NotEnforced {
        directions: Vec<Direction>,
        message: String,
    },
    /// The wall holds, but the canary could not resolve through its resolver while the
    /// control pod could.
    DnsBlocked { message: String },
    /// The round proves nothing: a positive control failed, a pod did not run, the timing
    /// did not hold. `reason` is the condition's reason.
    Unknown {
        reason: &'static str,
        message: String,
    },
}

impl Verdict {
    /// The condition's status, reason and message.
    pub fn condition(&self) -> (&'static str, &'static str, &str) {
        match self {
            Self::Holds { message } => ("True", "WallHoldsOnPackets", message),
            Self::NotEnforced { message, .. } => ("False", "NotEnforced", message),
            Self::DnsBlocked { message } => ("False", "DNSBlocked", message),
            Self::Unknown { reason, message } => ("Unknown", reason, message),
        }
    }
}

/// Everything a round observed.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    pub canary_namespace: &'a str,
    pub control_namespace: &'a str,
    /// `IP:port` of the control listener and of the canary's listener.
    pub control_target: &'a str,
    pub canary_target: &'a str,
    pub control_listener: &'a PodFindings,
    pub canary: &'a PodFindings,
    pub control_client: &'a PodFindings,
    /// Both listeners were still running when the control client had finished: its
    /// attempts met listening sockets.
    pub listeners_up_during_client: bool,
    /// Whether the baseline opens the DNS door (`allowDNS`).
    pub allow_dns: bool,
}

/// Decides what the round proves. Any through-packet is `NotEnforced` (a paper wall needs
/// no control to be seen); a blocked packet counts only when the positive controls passed.
pub fn decide(seen: &Observed<'_>) -> Verdict {
    let control = seen.control_client.connect_to(seen.control_target);
    let canary_in = seen.control_client.connect_to(seen.canary_target);
    let canary_out = seen.canary.connect_to(seen.control_target);
    let (Some(control), Some(canary_in), Some(canary_out)) = (control, canary_in, canary_out)
    else {
        return unknown(
            "ProbeFailed",
            "a probe pod's report lacks a connection it was asked to make".to_owned(),
        );
    };
    let mut directions = Vec::new();
    if canary_in.outcome == ConnectResult::Connected || !seen.canary.accepted.is_empty() {
        directions.push(Direction::Ingress);
    }
    if canary_out.outcome == ConnectResult::Connected {
        directions.push(Direction::Egress);
    }
    if !directions.is_empty() {
        let mut said = Vec::new();
        if directions.contains(&Direction::Ingress) {
            said.push(format!(
                "ingress: a pod of the unwalled namespace {} connected to the canary pod in {} (TCP {})",
                seen.control_namespace, seen.canary_namespace, seen.canary_target
            ));
        }
        if directions.contains(&Direction::Egress) {
            said.push(format!(
                "egress: the canary pod in {} connected to a pod of the unwalled namespace {} (TCP {})",
                seen.canary_namespace, seen.control_namespace, seen.control_target
            ));
        }
        return Verdict::NotEnforced {
            directions,
            message: format!(
                "{}: the network plugin does not enforce NetworkPolicy here (docs/reference.md: \"Enforced\")",
                said.join("; ")
            ),
        };
    }
    if let Some(error) = [seen.control_listener, seen.canary]
        .iter()
        .find_map(|report| report.error.as_ref())
    {
        return unknown("ProbeFailed", format!("a probe pod failed: {error}"));
    }
    if control.outcome != ConnectResult::Connected || seen.control_listener.accepted.is_empty() {
        return unknown(
            "ControlFailed",
            format!(
                "positive control failed: the probe's client in the unwalled namespace {} could not reach its listener there ({}: {}), so a blocked packet proves nothing",
                seen.control_namespace,
                control.outcome.as_str(),
                control.detail
            ),
        );
    }
    if !seen.listeners_up_during_client {
        return unknown(
            "ProbeTooSlow",
            "a listener had stopped before the control client finished (pods slow to start): raise --probe-listen-window".to_owned(),
        );
    }
    let blocked = format!(
        "ingress from {} refused ({}), egress to {} refused ({})",
        seen.control_namespace,
        canary_in.outcome.as_str(),
        seen.control_namespace,
        canary_out.outcome.as_str()
    );
    if !seen.allow_dns {
        return Verdict::Holds {
            message: format!("{blocked}; allowDNS is false: DNS not probed"),
        };
    }
    let (Some(control_dns), Some(canary_dns)) =
        (&seen.control_client.resolve, &seen.canary.resolve)
    else {
        return unknown(
            "ProbeFailed",
            "a probe pod's report lacks the name resolution it was asked for".to_owned(),
        );
    };
    if !control_dns.resolved() {
        return unknown(
            "ControlFailed",
            format!(
                "positive control failed: {} did not resolve from the unwalled namespace {} either ({}): the cluster's DNS, not the door, is in question",
                control_dns.name, seen.control_namespace, control_dns.detail
            ),
        );
    }
    if !canary_dns.resolved() {
        return Verdict::DnsBlocked {
            message: format!(
                "{blocked}, but {} did not resolve through the canary pod's own resolver ({}) while it resolved from {}: the DNS door does not let the pods' DNS traffic through (check spec.dns against where pods send DNS: NodeLocal DNSCache, DNS pods' ports)",
                canary_dns.name, canary_dns.detail, seen.control_namespace
            ),
        };
    }
    Verdict::Holds {
        message: format!(
            "{blocked}; {} resolved through the pod's own resolver ({})",
            canary_dns.name,
            canary_dns.addresses.join(", ")
        ),
    }
}

fn unknown(reason: &'static str, message: String) -> Verdict {
    Verdict::Unknown { reason, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::probe::report::{Connect, Resolve};

    const CONTROL: &str = "10.1.0.2:9797";
    const CANARY: &str = "10.1.0.3:9797";

    fn connect(target: &str, outcome: ConnectResult) -> Connect {
        Connect {
            target: target.to_owned(),
            outcome,
            ms: 1,
            detail: String::new(),
        }
    }

    fn resolve(ok: bool) -> Option<Resolve> {
        Some(Resolve {
            name: "kubernetes.default.svc".to_owned(),
            addresses: if ok {
                vec!["10.0.0.1".to_owned()]
            } else {
                Vec::new()
            },
            ms: 1,
            detail: if ok {
                String::new()
            } else {
                "no answer in 3s".to_owned()
            },
        })
    }

    struct Round {
        listener: PodFindings,
        canary: PodFindings,
        client: PodFindings,
        up: bool,
        allow_dns: bool,
    }

    /// An enforcing cluster: both directions refused, DNS through the door, controls pass.
    fn enforcing() -> Round {
        Round {
            listener: PodFindings {
                listening: Some(9797),
                accepted: vec!["10.1.0.4:40000".to_owned()],
                ..PodFindings::default()
            },
            canary: PodFindings {
                listening: Some(9797),
                connects: vec![connect(CONTROL, ConnectResult::Refused)],
                resolve: resolve(true),
                ..PodFindings::default()
            },
            client: PodFindings {
                connects: vec![
                    connect(CANARY, ConnectResult::Timeout),
                    connect(CONTROL, ConnectResult::Connected),
                ],
                resolve: resolve(true),
                ..PodFindings::default()
            },
            up: true,
            allow_dns: true,
        }
    }

    fn decide_round(round: &Round) -> Verdict {
        decide(&Observed {
            canary_namespace: "canary",
            control_namespace: "control",
            control_target: CONTROL,
            canary_target: CANARY,
            control_listener: &round.listener,
            canary: &round.canary,
            control_client: &round.client,
            listeners_up_during_client: round.up,
            allow_dns: round.allow_dns,
        })
    }

    #[test]
    fn blocked_both_ways_with_dns_and_controls_is_a_wall_that_holds() {
        let verdict = decide_round(&enforcing());
        let (status, reason, message) = verdict.condition();
        assert_eq!((status, reason), ("True", "WallHoldsOnPackets"));
        assert!(
            message.contains(
                "ingress from control refused (timeout), egress to control refused (refused)"
            ),
            "{message}"
        );
    }

    #[test]
    fn a_packet_through_either_way_is_not_enforced_naming_the_direction() {
        let mut round = enforcing();
        round.client.connects[0].outcome = ConnectResult::Connected;
        assert!(matches!(
            decide_round(&round),
            Verdict::NotEnforced { directions, .. } if directions == [Direction::Ingress]
        ));
        round.canary.connects[0].outcome = ConnectResult::Connected;
        let verdict = decide_round(&round);
        let Verdict::NotEnforced {
            directions,
            message,
        } = &verdict
        else {
            panic!("{verdict:?}")
        };
        assert_eq!(directions, &[Direction::Ingress, Direction::Egress]);
        assert!(message.contains("ingress: a pod of the unwalled namespace control connected"));
        assert!(message.contains("egress: the canary pod in canary connected"));
        // Seen by the canary's listener alone (the client's report lost) is enough too.
        let mut round = enforcing();
        round.canary.accepted = vec!["10.1.0.4:40001".to_owned()];
        assert!(matches!(decide_round(&round), Verdict::NotEnforced { .. }));
    }

    #[test]
    fn a_failed_positive_control_is_unknown_never_a_wall() {
        let mut round = enforcing();
        round.client.connects[1].outcome = ConnectResult::Timeout;
        assert_eq!(decide_round(&round).condition().1, "ControlFailed");
        let mut round = enforcing();
        round.listener.accepted.clear();
        assert_eq!(decide_round(&round).condition().1, "ControlFailed");
        let mut round = enforcing();
        round.client.resolve = resolve(false);
        round.canary.resolve = resolve(false);
        assert_eq!(decide_round(&round).condition().1, "ControlFailed");
        let mut round = enforcing();
        round.up = false;
        assert_eq!(decide_round(&round).condition().1, "ProbeTooSlow");
        let mut round = enforcing();
        round.canary.error = Some("cannot listen on TCP port 9797".to_owned());
        round.canary.listening = None;
        assert_eq!(decide_round(&round).condition().1, "ProbeFailed");
        let mut round = enforcing();
        round.client.connects.pop();
        assert_eq!(decide_round(&round).condition().1, "ProbeFailed");
    }

    #[test]
    fn the_canary_alone_failing_to_resolve_is_dns_blocked() {
        let mut round = enforcing();
        round.canary.resolve = resolve(false);
        let verdict = decide_round(&round);
        assert_eq!(verdict.condition().0, "False");
        assert_eq!(verdict.condition().1, "DNSBlocked");
        assert!(verdict.condition().2.contains("no answer in 3s"));
        // Without a door, DNS is not asked of the wall.
        round.allow_dns = false;
        assert_eq!(decide_round(&round).condition().1, "WallHoldsOnPackets");
    }
}
