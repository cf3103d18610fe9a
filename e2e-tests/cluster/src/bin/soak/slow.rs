//! Where the time of each slow repair went: the requests the fault proxy received between the
//! drift and its repair (to the policy repaired, from any replica, hedges included; and the
//! leader's own requests), each with the fault it drew. A p99 read against the floor of the
//! fault model (floor.rs) is only as useful as the causes of its slowest repairs are known.

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use namespace_baseline_cluster_tests::faults::{Fault, Received};
use namespace_baseline_cluster_tests::leadership::identity_of;
use namespace_baseline_cluster_tests::repairs::{Repair, is_hedge_agent};

/// A steady repair slower than this is accounted for request by request: the retry of a
/// 429 alone takes a second.
pub const SLOW: Duration = Duration::from_secs(1);

/// The most requests listed for one repair (the rest are counted).
const LISTED: usize = 14;

/// A steady repair slower than [`SLOW`]: the repair, who led when its drift was made, and
/// whether that leader's NetworkPolicy watch was open then.
#[derive(Debug, Clone)]
pub struct SlowRepair {
    pub repair: Repair,
    pub holder: Option<String>,
    pub watch_open: bool,
}

impl SlowRepair {
    fn latency(&self) -> Duration {
        self.repair.latency()
    }

    /// The requests that tell where the time went, in the order the proxy received them:
    /// those to the policy repaired (any replica), and the leader's others but its writes to
    /// other policies and its Events (another repair's business).
    fn requests<'r>(&self, received: &'r [Received]) -> Vec<&'r Received> {
        let (namespace, name) = &self.repair.object;
        let policy = format!("/namespaces/{namespace}/networkpolicies/{name}");
        received
            .iter()
            .filter(|request| {
                let Ok(at) = Timestamp::try_from(request.at) else {
                    return false;
                };
                if at < self.repair.changed || at > self.repair.repaired {
                    return false;
                }
                if request.path.ends_with(&policy) {
                    return true;
                }
                let by_holder = identity_of(&request.user_agent)
                    .is_some_and(|identity| self.holder.as_deref() == Some(identity));
                by_holder
                    && !request.path.contains("/networkpolicies/")
                    && !request.path.contains("/events")
            })
            .collect()
    }

    /// One line: the repair, then its requests, `+ms WHAT fault`.
    pub fn describe(&self, received: &[Received]) -> String {
        let (namespace, name) = &self.repair.object;
        let mut line = format!(
            "{} ms, {namespace}/{name}, drift made while the leader's ({}) policy watch was {}:",
            self.latency().as_millis(),
            self.holder.as_deref().unwrap_or("nobody"),
            if self.watch_open { "open" } else { "down" }
        );
        let requests = self.requests(received);
        for request in requests.iter().take(LISTED) {
            let after = Timestamp::try_from(request.at)
                .ok()
                .and_then(|at| at.duration_since(self.repair.changed).try_into().ok())
                .unwrap_or(Duration::ZERO);
            let _ = write!(
                line,
                " +{} {}{}{}",
                after.as_millis(),
                what(request, name),
                who(request, self.holder.as_deref()),
                request
                    .fault
                    .map_or_else(String::new, |fault| format!(" **{fault}**"))
            );
            line.push(';');
        }
        if requests.len() > LISTED {
            let _ = write!(line, " … {} more", requests.len() - LISTED);
        }
        line
    }
}

/// How long after a stalled wall apply its hedge may go out and still count as its hedge:
/// the hedge bound (200 ms), timed from the request's start, with room to spare.
const HEDGE_WITHIN: Duration = Duration::from_secs(1);

/// Of the replicas' wall applies the proxy stalled (first requests, not hedges): how many,
/// and how many were hedged (a hedge of the same policy by the same replica reached the proxy
/// within [`HEDGE_WITHIN`]). Every stalled apply should be, but during a pass over many
/// namespaces (reconcile/context.rs, `Hedging::MAX_IN_FLIGHT`) and once its replica no
/// longer leads (stopped, or its Lease lost).
pub fn stalled_applies_hedged(received: &[Received]) -> (usize, usize) {
    let is_apply = |request: &Received| {
        request.method == "PATCH" && request.path.contains("/networkpolicies/")
    };
    let is_hedge = |request: &Received| is_hedge_agent(&request.user_agent);
    let stalled: Vec<&Received> = received
        .iter()
        .filter(|r| is_apply(r) && !is_hedge(r) && r.fault == Some(Fault::Stall))
        .collect();
    let hedged = stalled
        .iter()
        .filter(|first| {
            received.iter().any(|hedge| {
                is_apply(hedge)
                    && is_hedge(hedge)
                    && hedge.path == first.path
                    && identity_of(&hedge.user_agent) == identity_of(&first.user_agent)
                    && hedge
                        .at
                        .duration_since(first.at)
                        .is_ok_and(|after| after <= HEDGE_WITHIN)
            })
        })
        .count();
    (stalled.len(), hedged)
}

/// A request in a few words: its verb and what it reached.
fn what(request: &Received, policy: &str) -> String {
    let verb = match (request.method.as_str(), request.watch) {
        ("GET", true) => "WATCH",
        ("GET", false) if request.path.rsplit('/').next().is_some_and(is_kind) => "LIST",
        (method, _) => method,
    };
    let segments: Vec<&str> = request.path.split('/').collect();
    let target = match segments.as_slice() {
        [.., "networkpolicies", name] if *name == policy => "the policy".to_owned(),
        [.., kind, name, "status"] if is_kind(kind) => format!("{kind}/{name}/status"),
        [.., kind, name] if is_kind(kind) => format!("{kind}/{name}"),
        [.., kind] => (*kind).to_owned(),
        [] => String::new(),
    };
    format!("{verb} {target}")
}

/// Whether a path segment names a kind of object the reconciler reads or writes (the plural
/// of a collection, before an object's name).
fn is_kind(segment: &str) -> bool {
    matches!(
        segment,
        "networkpolicies"
            | "namespacebaselines"
            | "leases"
            | "namespaces"
            | "reports"
            | "services"
            | "endpointslices"
            | "pods"
            | "customresourcedefinitions"
    )
}

/// Whose request it was, unless the leader's own first request.
fn who(request: &Received, holder: Option<&str>) -> String {
    let identity = identity_of(&request.user_agent);
    let hedge = is_hedge_agent(&request.user_agent);
    match (identity, hedge) {
        (Some(identity), true) => format!(" (hedge, {identity})"),
        (Some(identity), false) if Some(identity) != holder => format!(" ({identity})"),
        (None, _) => " (not a replica)".to_owned(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn received(
        offset_ms: u64,
        method: &str,
        path: &str,
        agent: &str,
        fault: Option<Fault>,
    ) -> Received {
        let start = SystemTime::from(at("2026-12-06T10:00:00Z"));
        Received {
            at: start + Duration::from_millis(offset_ms),
            method: method.to_owned(),
            path: path.to_owned(),
            watch: path.ends_with("/networkpolicies") && method == "GET",
            user_agent: agent.to_owned(),
            fault,
        }
    }

    /// A repair that met a 429, then a stall its hedge answered: its own requests and the
    /// leader's watch are listed with their faults; other policies, Events and requests
    /// outside the window are not.
    #[test]
    fn a_slow_repair_lists_the_requests_of_its_window_with_their_faults() {
        const LEADER: &str = "namespace-baseline-reconciler/0.1.0 (soak-2)";
        const HEDGE: &str = "namespace-baseline-reconciler/0.1.0 hedge (soak-2)";
        let policy = "/apis/networking.k8s.io/v1/namespaces/w1/networkpolicies/deny";
        let slow = SlowRepair {
            repair: Repair {
                object: ("w1".to_owned(), "deny".to_owned()),
                changed: at("2026-12-06T10:00:00.010Z"),
                repaired: at("2026-12-06T10:00:01.300Z"),
            },
            holder: Some("soak-2".to_owned()),
            watch_open: true,
        };
        let requests = [
            received(0, "PATCH", policy, LEADER, None),
            received(15, "PATCH", policy, LEADER, Some(Fault::TooManyRequests)),
            received(
                20,
                "GET",
                "/apis/networking.k8s.io/v1/networkpolicies",
                LEADER,
                None,
            ),
            received(
                30,
                "PATCH",
                "/apis/networking.k8s.io/v1/namespaces/w2/networkpolicies/deny",
                LEADER,
                None,
            ),
            received(40, "POST", "/api/v1/namespaces/w1/events", LEADER, None),
            received(1015, "PATCH", policy, LEADER, Some(Fault::Stall)),
            received(1215, "PATCH", policy, HEDGE, None),
            received(2000, "PATCH", policy, LEADER, None),
        ];
        assert_eq!(
            slow.describe(&requests),
            "1290 ms, w1/deny, drift made while the leader's (soak-2) policy watch was open: \
             +5 PATCH the policy **429**; +10 WATCH networkpolicies; \
             +1005 PATCH the policy **stall**; +1205 PATCH the policy (hedge, soak-2);"
        );
    }

    /// A stalled apply followed by its replica's hedge of the same policy counts as hedged;
    /// one with no hedge, or a hedge of another policy or replica, does not.
    #[test]
    fn stalled_applies_count_as_hedged_by_their_own_hedge_only() {
        const ONE: &str = "namespace-baseline-reconciler/0.1.0 (soak-1)";
        const ONE_HEDGE: &str = "namespace-baseline-reconciler/0.1.0 hedge (soak-1)";
        const TWO_HEDGE: &str = "namespace-baseline-reconciler/0.1.0 hedge (soak-2)";
        let a = "/apis/networking.k8s.io/v1/namespaces/w1/networkpolicies/deny";
        let b = "/apis/networking.k8s.io/v1/namespaces/w2/networkpolicies/deny";
        let requests = [
            received(0, "PATCH", a, ONE, Some(Fault::Stall)),
            received(200, "PATCH", a, ONE_HEDGE, None),
            received(5000, "PATCH", b, ONE, Some(Fault::Stall)),
            received(5200, "PATCH", a, ONE_HEDGE, None),
            received(5200, "PATCH", b, TWO_HEDGE, None),
            received(9000, "PATCH", b, ONE, Some(Fault::Stall)),
            received(10200, "PATCH", b, ONE_HEDGE, None),
            received(12000, "PATCH", b, ONE, Some(Fault::TooManyRequests)),
        ];
        assert_eq!(stalled_applies_hedged(&requests), (3, 1));
    }

    #[test]
    fn requests_are_named_by_verb_and_target() {
        let agent = "namespace-baseline-reconciler/0.1.0 (soak-1)";
        let name = |method: &str, path: &str, watch: bool| {
            let mut request = received(0, method, path, agent, None);
            request.watch = watch;
            what(&request, "deny")
        };
        assert_eq!(
            name("GET", "/apis/networking.k8s.io/v1/networkpolicies", false),
            "LIST networkpolicies"
        );
        assert_eq!(
            name(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/soak-lease",
                false
            ),
            "PUT leases/soak-lease"
        );
        assert_eq!(
            name(
                "PATCH",
                "/apis/hedronite.io/v1alpha1/namespacebaselines/soak/status",
                false
            ),
            "PATCH namespacebaselines/soak/status"
        );
        assert_eq!(
            name(
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/soak-lease",
                false
            ),
            "GET leases/soak-lease"
        );
    }
}
