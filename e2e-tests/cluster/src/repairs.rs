//! Drift repairs as the API server's audit log tells them: each change someone else made to a
//! managed policy (a delete or a patch), matched with the reconciler's first successful write
//! to that policy answered after it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::AuditEvent;

/// A change and its repair: when the API server answered each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
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
            Some(repaired) => found.push(Repair { changed, repaired }),
            None => unmatched += 1,
        }
    }
    (found, unmatched)
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
        assert_eq!(unmatched, 1);
    }
}
