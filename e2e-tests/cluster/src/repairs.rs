//! Drift repairs as the API server's audit log tells them: each change someone else made to a
//! managed policy (a delete or a patch), matched with the reconciler's first successful write
//! to that policy answered after it; when each replica's watch was open (a drift made while
//! the leader's watch was down is seen only when it resumes or relists); and the hedges among
//! the reconciler's writes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::AuditEvent;
use crate::leadership::identity_of;

/// A change and its repair: the policy (namespace, name), and when the API server answered
/// each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub object: (String, String),
    pub changed: Timestamp,
    pub repaired: Timestamp,
}

impl Repair {
    pub fn latency(&self) -> Duration {
        self.repaired
            .duration_since(self.changed)
            .max(SignedDuration::ZERO)
            .try_into()
            .unwrap_or_default()
    }
}

fn object(event: &AuditEvent) -> (String, String) {
    let object = event.object_ref.clone().unwrap_or_default();
    (
        object.namespace.unwrap_or_default(),
        object.name.unwrap_or_default(),
    )
}

fn answered_ok(event: &AuditEvent) -> Option<Timestamp> {
    let ok = event.stage == "ResponseComplete"
        && event.resource() == "networkpolicies"
        && event.code().is_some_and(|code| (200..300).contains(&code));
    if !ok {
        return None;
    }
    event.stage_timestamp.as_ref()?.parse().ok()
}

/// The repairs of the policies named in `managed` (by name) that users other than
/// `reconciler` deleted or patched; and how many such changes got no repair of their own
/// (overwritten by a later change, or not repaired).
pub fn repairs(
    events: &[AuditEvent],
    reconciler: &str,
    managed: &[String],
) -> (Vec<Repair>, usize) {
    let mut fixes: BTreeMap<(String, String), Vec<Timestamp>> = BTreeMap::new();
    for event in events
        .iter()
        .filter(|e| e.user.username == reconciler && e.verb == "patch")
    {
        if let Some(at) = answered_ok(event) {
            fixes.entry(object(event)).or_default().push(at);
        }
    }
    let mut found = Vec::new();
    let mut unmatched = 0;
    for event in events
        .iter()
        .filter(|e| e.user.username != reconciler && matches!(e.verb.as_str(), "delete" | "patch"))
    {
        let Some(changed) = answered_ok(event) else {
            continue;
        };
        let key = object(event);
        if !managed.contains(&key.1) {
            continue;
        }
        let repaired = fixes
            .get(&key)
            .and_then(|times| times.iter().filter(|t| **t >= changed).min().copied());
        match repaired {
            Some(repaired) => found.push(Repair {
                object: key,
                changed,
                repaired,
            }),
            None => unmatched += 1,
        }
    }
    (found, unmatched)
}

/// When each replica's watches of `resource` were open: by identity (from the User-Agent),
/// from the API server's receipt of each watch request to the end of its response (a watch
/// still open when the log ends: until [`Timestamp::MAX`]).
pub fn watches_open(
    events: &[AuditEvent],
    resource: &str,
) -> BTreeMap<String, Vec<(Timestamp, Timestamp)>> {
    let mut open: BTreeMap<String, Vec<(Timestamp, Timestamp)>> = BTreeMap::new();
    for event in events
        .iter()
        .filter(|event| event.verb == "watch" && event.resource() == resource)
    {
        let (Some(identity), Some(from)) = (identity_of(&event.user_agent), event.received_at())
        else {
            continue;
        };
        let until = match event.stage.as_str() {
            "ResponseComplete" => event.stage_at().unwrap_or(Timestamp::MAX),
            _ => Timestamp::MAX,
        };
        open.entry(identity.to_owned())
            .or_default()
            .push((from, until));
    }
    open
}

/// Whether one of `windows` holds `at`.
pub fn open_at(windows: &[(Timestamp, Timestamp)], at: Timestamp) -> bool {
    windows
        .iter()
        .any(|(from, until)| *from <= at && at <= *until)
}

/// The User-Agent of a hedge says so before the identity
/// (`namespace-baseline-reconciler/<version> hedge (<identity>)`).
pub fn is_hedge(event: &AuditEvent) -> bool {
    is_hedge_agent(&event.user_agent)
}

/// Whether `user_agent` is a hedge's ([`is_hedge`]), wherever the request was seen (the audit
/// log, the fault proxy's record).
pub fn is_hedge_agent(user_agent: &str) -> bool {
    user_agent.contains(" hedge (")
}

/// The reconciler's NetworkPolicy writes among `events` (one per request): its first
/// requests, and its hedges.
pub fn policy_writes_and_hedges(events: &[AuditEvent], reconciler: &str) -> (usize, usize) {
    first_and_hedges(events, reconciler, |event| {
        event.is_write() && event.resource() == "networkpolicies"
    })
}

/// The reconciler's reads (get, list, watch) among `events`: first requests, and hedges.
pub fn reads_and_hedges(events: &[AuditEvent], reconciler: &str) -> (usize, usize) {
    first_and_hedges(events, reconciler, |event| {
        matches!(event.verb.as_str(), "get" | "list" | "watch")
    })
}

fn first_and_hedges(
    events: &[AuditEvent],
    reconciler: &str,
    keep: impl Fn(&AuditEvent) -> bool,
) -> (usize, usize) {
    let requests: Vec<&AuditEvent> = events
        .iter()
        .filter(|event| event.user.username == reconciler && keep(event))
        .collect();
    let hedges = requests.iter().filter(|event| is_hedge(event)).count();
    (requests.len() - hedges, hedges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(user: &str, verb: &str, name: &str, code: u16, at: &str) -> AuditEvent {
        serde_json::from_value(json!({
            "auditID": format!("{user}-{verb}-{at}"),
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": user},
            "objectRef": {"resource": "networkpolicies", "namespace": "team-a", "name": name},
            "responseStatus": {"code": code},
            "stageTimestamp": at,
        }))
        .unwrap()
    }

    #[test]
    fn each_change_is_matched_with_the_first_repair_after_it() {
        let managed = vec!["nsb-g-default-deny".to_owned()];
        let events = [
            event(
                "admin",
                "delete",
                "nsb-g-default-deny",
                200,
                "2026-12-03T10:00:00.000Z",
            ),
            event(
                "sa",
                "patch",
                "nsb-g-default-deny",
                500,
                "2026-12-03T10:00:00.010Z",
            ),
            event(
                "sa",
                "patch",
                "nsb-g-default-deny",
                201,
                "2026-12-03T10:00:00.040Z",
            ),
            event(
                "admin",
                "patch",
                "nsb-g-default-deny",
                200,
                "2026-12-03T10:00:01.000Z",
            ),
            event(
                "sa",
                "patch",
                "nsb-g-default-deny",
                200,
                "2026-12-03T10:00:01.025Z",
            ),
            // Not a managed policy; a refused change changed nothing.
            event(
                "admin",
                "delete",
                "team-policy",
                200,
                "2026-12-03T10:00:02.000Z",
            ),
            event(
                "admin",
                "delete",
                "nsb-g-default-deny",
                404,
                "2026-12-03T10:00:03.000Z",
            ),
            // Never repaired.
            event(
                "admin",
                "delete",
                "nsb-g-default-deny",
                200,
                "2026-12-03T10:00:04.000Z",
            ),
        ];
        let (found, unmatched) = repairs(&events, "sa", &managed);
        let latencies: Vec<u128> = found.iter().map(|r| r.latency().as_millis()).collect();
        assert_eq!(latencies, [40, 25]);
        assert!(
            found
                .iter()
                .all(|r| r.object == ("team-a".to_owned(), "nsb-g-default-deny".to_owned()))
        );
        assert_eq!(unmatched, 1);
    }

    fn watch(agent: &str, resource: &str, stage: &str, from: &str, until: &str) -> AuditEvent {
        serde_json::from_value(json!({
            "auditID": format!("{agent}-{from}"),
            "stage": stage,
            "verb": "watch",
            "user": {"username": "sa"},
            "userAgent": agent,
            "objectRef": {"resource": resource},
            "requestReceivedTimestamp": from,
            "stageTimestamp": until,
        }))
        .unwrap()
    }

    #[test]
    fn watches_are_open_from_their_receipt_to_their_end_per_replica() {
        let a = "namespace-baseline-reconciler/0.1.0 (a)";
        let events = [
            watch(
                a,
                "networkpolicies",
                "ResponseComplete",
                "2026-12-05T10:00:00Z",
                "2026-12-05T10:00:03Z",
            ),
            watch(
                a,
                "networkpolicies",
                "ResponseStarted",
                "2026-12-05T10:00:04Z",
                "2026-12-05T10:00:04Z",
            ),
            watch(
                a,
                "namespaces",
                "ResponseComplete",
                "2026-12-05T10:00:03Z",
                "2026-12-05T10:00:04Z",
            ),
            watch(
                "kubectl",
                "networkpolicies",
                "ResponseComplete",
                "2026-12-05T10:00:03Z",
                "2026-12-05T10:00:04Z",
            ),
        ];
        let open = watches_open(&events, "networkpolicies");
        assert_eq!(open.keys().collect::<Vec<_>>(), ["a"]);
        let at = |text: &str| text.parse::<Timestamp>().unwrap();
        assert!(open_at(&open["a"], at("2026-12-05T10:00:02Z")));
        assert!(
            !open_at(&open["a"], at("2026-12-05T10:00:03.5Z")),
            "the gap"
        );
        assert!(
            open_at(&open["a"], at("2026-12-05T11:00:00Z")),
            "still open at the end"
        );
    }

    #[test]
    fn hedges_are_told_by_their_user_agent() {
        let write = |agent: &str| -> AuditEvent {
            serde_json::from_value(json!({
                "auditID": agent, "stage": "ResponseComplete", "verb": "patch",
                "user": {"username": "sa"}, "userAgent": agent,
                "objectRef": {"resource": "networkpolicies", "namespace": "a", "name": "p"},
            }))
            .unwrap()
        };
        let events = [
            write("namespace-baseline-reconciler/0.1.0 (r1)"),
            write("namespace-baseline-reconciler/0.1.0 hedge (r1)"),
            write("namespace-baseline-reconciler/0.1.0 (r2)"),
        ];
        assert_eq!(policy_writes_and_hedges(&events, "sa"), (2, 1));
        assert_eq!(
            identity_of("namespace-baseline-reconciler/0.1.0 hedge (r1)"),
            Some("r1"),
            "a hedge is its replica's write"
        );
    }
}
