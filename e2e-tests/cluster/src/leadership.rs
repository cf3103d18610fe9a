//! Who held the leader Lease when, and who wrote what, as the API server's audit log tells it:
//! the soak's proof that no two reconciler replicas ever wrote in overlapping windows.
//!
//! Every replica runs as the same ServiceAccount; each names its identity in its User-Agent
//! (`namespace-baseline-reconciler/<version> (<identity>)`). The control plane logs Lease
//! writes with their request and response bodies, so the holder each write names and the
//! order of the writes (the resourceVersions they produced) are known exactly.
//!
//! A replica's term starts when the API server *answered* the write that made it the holder
//! and ends when the API server *received* the next write naming another holder (or none): a
//! protected write (NetworkPolicies, baselines and their status, Events) lies inside one of
//! its writer's terms only if it was received after the first and answered before the second.
//! That holds for every handover alike: a killed leader's Lease taken over after it expired,
//! and a stopped (SIGTERM) leader's Lease it released itself ([`shutdown_end`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::AuditEvent;

/// One request, when the API server received it and when it answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub received: Timestamp,
    pub done: Timestamp,
    /// The identity of the replica that made it.
    pub writer: String,
    /// `verb resource namespace/name -> code`, for reports.
    pub what: String,
}

/// A successful write of the Lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseWrite {
    pub request: Request,
    /// The holder it names (`None`: released).
    pub holder: Option<String>,
    /// The resourceVersion it produced: the order of the writes.
    pub version: u64,
}

/// A stretch of time one replica held the Lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub holder: String,
    /// When the API server answered the write that made it the holder.
    pub from: Timestamp,
    /// When the API server received the next write naming someone else (or no one).
    pub until: Option<Timestamp>,
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.until {
            Some(until) => write!(f, "{} [{} .. {}]", self.holder, self.from, until),
            None => write!(f, "{} [{} ..]", self.holder, self.from),
        }
    }
}

/// The identity in a reconciler's User-Agent.
pub fn identity_of(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("namespace-baseline-reconciler/")?;
    let (_, tail) = rest.split_once(" (")?;
    tail.strip_suffix(')')
}

fn timestamp(text: Option<&String>, what: &str, event: &AuditEvent) -> Result<Timestamp> {
    text.with_context(|| format!("audit event {} has no {what}", event.audit_id))?
        .parse()
        .with_context(|| format!("audit event {}: {what}", event.audit_id))
}

fn request(event: &AuditEvent, writer: &str) -> Result<Request> {
    Ok(Request {
        received: timestamp(
            event.request_received_timestamp.as_ref(),
            "requestReceivedTimestamp",
            event,
        )?,
        done: timestamp(event.stage_timestamp.as_ref(), "stageTimestamp", event)?,
        writer: writer.to_owned(),
        what: event.describe(),
    })
}

fn succeeded(event: &AuditEvent) -> bool {
    event.code().is_some_and(|code| (200..300).contains(&code))
}

/// Whether a request is one the gate must hold back: a write to NetworkPolicies,
/// NamespaceBaselines (their status and finalizers too) or Events.
fn protected(event: &AuditEvent) -> bool {
    event.is_write()
        && matches!(
            event.resource(),
            "networkpolicies" | "namespacebaselines" | "events"
        )
}

/// The reconciler's successful Lease writes on `lease` and its attempted protected writes,
/// from the audit events of the reconciler's ServiceAccount.
pub fn from_audit(events: &[AuditEvent], lease: &str) -> Result<(Vec<LeaseWrite>, Vec<Request>)> {
    let mut lease_writes = Vec::new();
    let mut writes = Vec::new();
    for event in events {
        if event.stage != "ResponseComplete" {
            continue;
        }
        let is_lease = event.resource() == "leases"
            && event.object_ref.as_ref().and_then(|o| o.name.as_deref()) == Some(lease);
        let lease_write = is_lease && event.is_write();
        if !lease_write && !protected(event) {
            continue;
        }
        let Some(writer) = identity_of(&event.user_agent) else {
            bail!(
                "a write without a replica identity in its User-Agent ({:?}): {}",
                event.user_agent,
                event.describe()
            );
        };
        let request = request(event, writer)?;
        if !is_lease {
            // A refused write changed nothing, but it was still sent: count it.
            writes.push(request);
            continue;
        }
        if !succeeded(event) {
            continue;
        }
        let response = event.response_object.as_ref().with_context(|| {
            format!(
                "Lease write {} without a response body: the audit policy must log Leases at RequestResponse",
                event.audit_id
            )
        })?;
        let version = response["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("Lease write {} without a resourceVersion", event.audit_id))?;
        let holder = response["spec"]["holderIdentity"]
            .as_str()
            .filter(|holder| !holder.is_empty())
            .map(str::to_owned);
        lease_writes.push(LeaseWrite {
            request,
            holder,
            version,
        });
    }
    lease_writes.sort_by_key(|write| write.version);
    Ok((lease_writes, writes))
}

/// The terms of the Lease's holders, in order.
pub fn terms(lease_writes: &[LeaseWrite]) -> Vec<Term> {
    let mut terms: Vec<Term> = Vec::new();
    for write in lease_writes {
        let current = terms.last().filter(|term| term.until.is_none());
        if current.is_some_and(|term| Some(&term.holder) == write.holder.as_ref()) {
            continue;
        }
        if let Some(term) = terms.last_mut().filter(|term| term.until.is_none()) {
            term.until = Some(write.request.received);
        }
        if let Some(holder) = &write.holder {
            terms.push(Term {
                holder: holder.clone(),
                from: write.request.done,
                until: None,
            });
        }
    }
    terms
}

/// Protected writes that do not lie inside a term of their writer, described with the term
/// in force when they were received.
pub fn overlaps(terms: &[Term], writes: &[Request]) -> Vec<String> {
    let mut by_holder: BTreeMap<&str, Vec<&Term>> = BTreeMap::new();
    for term in terms {
        by_holder
            .entry(term.holder.as_str())
            .or_default()
            .push(term);
    }
    writes
        .iter()
        .filter(|write| {
            !by_holder.get(write.writer.as_str()).is_some_and(|own| {
                own.iter().any(|term| {
                    term.from <= write.received
                        && term.until.is_none_or(|until| write.done <= until)
                })
            })
        })
        .map(|write| {
            let holder = terms
                .iter()
                .rev()
                .find(|term| term.from <= write.received)
                .map_or_else(|| "nobody".to_owned(), ToString::to_string);
            format!(
                "{} by {} (received {}, answered {}) while the lease was held by {holder}",
                write.what, write.writer, write.received, write.done
            )
        })
        .collect()
}

/// How a leader's term ended after it was told to shut down (SIGTERM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownEnd {
    /// It did not hold the Lease when signalled.
    NotHolding,
    /// It emptied the Lease itself; the API server received the release `held` after the
    /// signal.
    Released { held: Duration },
    /// Its release failed: the Lease was taken over by `by` (after it expired), `held` after
    /// the signal.
    TakenOver { by: String, held: Duration },
    /// The audit log shows no end of its term.
    StillHeld,
}

impl ShutdownEnd {
    /// How long after the signal the Lease was still the stopped leader's, if it ended.
    pub fn held(&self) -> Option<Duration> {
        match self {
            Self::Released { held } | Self::TakenOver { held, .. } => Some(*held),
            Self::NotHolding | Self::StillHeld => None,
        }
    }

    /// Whether the leader held the Lease when signalled and did not release it.
    pub fn release_failed(&self) -> bool {
        matches!(self, Self::TakenOver { .. } | Self::StillHeld)
    }
}

/// How the term of `identity`, told to shut down at `at`, ended: from the Lease writes in
/// version order ([`from_audit`]). It held the Lease if the last write received before `at`
/// names it; its term ends at the next write naming someone else or no one.
pub fn shutdown_end(lease_writes: &[LeaseWrite], identity: &str, at: Timestamp) -> ShutdownEnd {
    let Some(last_before) = lease_writes
        .iter()
        .rposition(|write| write.request.received <= at)
    else {
        return ShutdownEnd::NotHolding;
    };
    if lease_writes[last_before].holder.as_deref() != Some(identity) {
        return ShutdownEnd::NotHolding;
    }
    let end = lease_writes[last_before + 1..]
        .iter()
        .find(|write| write.holder.as_deref() != Some(identity));
    let Some(end) = end else {
        return ShutdownEnd::StillHeld;
    };
    let held = end
        .request
        .received
        .duration_since(at)
        .try_into()
        .unwrap_or_default();
    match &end.holder {
        None if end.request.writer == identity => ShutdownEnd::Released { held },
        holder => ShutdownEnd::TakenOver {
            by: holder.clone().unwrap_or_else(|| end.request.writer.clone()),
            held,
        },
    }
}

/// Who holds the Lease `name` now; `None` when it is absent, released or unreadable.
pub async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
        .filter(|holder| !holder.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn at(ms: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_millis(ms)
    }

    fn lease(
        version: u64,
        received: i64,
        done: i64,
        writer: &str,
        holder: Option<&str>,
    ) -> LeaseWrite {
        LeaseWrite {
            request: write(received, done, writer),
            holder: holder.map(str::to_owned),
            version,
        }
    }

    fn write(received: i64, done: i64, writer: &str) -> Request {
        Request {
            received: at(received),
            done: at(done),
            writer: writer.to_owned(),
            what: format!("patch networkpolicies at {received}"),
        }
    }

    /// a acquires at 0, renews, b takes over at 20 000, b releases at 40 000.
    fn history() -> Vec<Term> {
        terms(&[
            lease(1, 0, 5, "a", Some("a")),
            lease(2, 2_000, 2_004, "a", Some("a")),
            lease(3, 20_000, 20_010, "b", Some("b")),
            lease(4, 40_000, 40_003, "b", None),
        ])
    }

    #[test]
    fn terms_start_at_the_answer_and_end_at_the_next_holders_request() {
        let terms = history();
        assert_eq!(
            terms,
            vec![
                Term {
                    holder: "a".into(),
                    from: at(5),
                    until: Some(at(20_000)),
                },
                Term {
                    holder: "b".into(),
                    from: at(20_010),
                    until: Some(at(40_000)),
                },
            ]
        );
    }

    #[test]
    fn writes_inside_their_writers_terms_are_no_overlap() {
        let writes = [
            write(10, 20, "a"),
            write(19_000, 19_990, "a"),
            write(20_010, 20_020, "b"),
        ];
        assert!(overlaps(&history(), &writes).is_empty());
    }

    #[rstest::rstest]
    #[case::answered_after_the_takeover_was_received(write(19_990, 20_001, "a"))]
    #[case::received_after_the_takeover(write(25_000, 25_010, "a"))]
    #[case::before_the_acquisition_was_answered(write(20_005, 20_020, "b"))]
    #[case::after_the_release(write(40_001, 40_002, "b"))]
    #[case::answered_after_the_release_was_received(write(39_990, 40_001, "b"))]
    #[case::by_a_replica_that_never_held_it(write(30_000, 30_001, "c"))]
    fn writes_outside_their_writers_terms_are_overlaps(#[case] stray: Request) {
        let found = overlaps(&history(), &[stray]);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    /// a holds from 0 and renews; told to stop at 10 000, it renews once more while its
    /// writes end and releases at 12 000; b takes the released Lease at 13 000.
    fn graceful() -> Vec<LeaseWrite> {
        vec![
            lease(1, 0, 5, "a", Some("a")),
            lease(2, 8_000, 8_004, "a", Some("a")),
            lease(3, 11_000, 11_004, "a", Some("a")),
            lease(4, 12_000, 12_003, "a", None),
            lease(5, 13_000, 13_004, "b", Some("b")),
        ]
    }

    #[test]
    fn a_stopped_leader_that_released_the_lease_held_it_until_the_release() {
        assert_eq!(
            shutdown_end(&graceful(), "a", at(10_000)),
            ShutdownEnd::Released {
                held: Duration::from_secs(2)
            }
        );
        assert!(!shutdown_end(&graceful(), "a", at(10_000)).release_failed());
        // The graceful handover is a handover like any other for the overlap check.
        let terms = terms(&graceful());
        assert!(overlaps(&terms, &[write(11_500, 11_990, "a")]).is_empty());
        assert_eq!(overlaps(&terms, &[write(11_990, 12_001, "a")]).len(), 1);
    }

    #[test]
    fn a_stopped_leader_whose_release_failed_held_the_lease_until_it_was_taken_over() {
        let mut writes = graceful();
        writes.truncate(3);
        assert_eq!(
            shutdown_end(&writes, "a", at(10_000)),
            ShutdownEnd::StillHeld
        );
        writes.push(lease(4, 26_000, 26_004, "b", Some("b")));
        let end = shutdown_end(&writes, "a", at(10_000));
        assert_eq!(
            end,
            ShutdownEnd::TakenOver {
                by: "b".into(),
                held: Duration::from_secs(16)
            }
        );
        assert!(end.release_failed());
        assert_eq!(end.held(), Some(Duration::from_secs(16)));
    }

    #[rstest::rstest]
    #[case::before_any_lease_write("a", -1)]
    #[case::after_it_released("a", 12_500)]
    #[case::another_replica("b", 10_000)]
    fn a_replica_stopped_while_not_holding_the_lease_had_nothing_to_release(
        #[case] identity: &str,
        #[case] stopped: i64,
    ) {
        assert_eq!(
            shutdown_end(&graceful(), identity, at(stopped)),
            ShutdownEnd::NotHolding
        );
    }

    fn event(
        verb: &str,
        resource: &str,
        agent: &str,
        code: u16,
        times: (&str, &str),
        response: serde_json::Value,
    ) -> AuditEvent {
        serde_json::from_value(serde_json::json!({
            "auditID": format!("{verb}-{resource}-{}", times.0),
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler"},
            "userAgent": agent,
            "objectRef": {"resource": resource, "namespace": "namespace-baseline", "name": if resource == "leases" { "the-lease" } else { "x" }},
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": times.0,
            "stageTimestamp": times.1,
            "responseObject": response,
        }))
        .unwrap()
    }

    #[test]
    fn the_audit_log_gives_lease_writes_in_version_order_and_every_protected_write() {
        let agent = |id: &str| format!("namespace-baseline-reconciler/0.1.0 ({id})");
        let lease_body = |version: &str, holder: &str| serde_json::json!({"metadata": {"resourceVersion": version}, "spec": {"holderIdentity": holder}});
        let events = [
            // Logged out of order: b's takeover (version 12) before a's renewal (11).
            event(
                "update",
                "leases",
                &agent("b"),
                200,
                ("2026-12-03T10:00:20.000000Z", "2026-12-03T10:00:20.010000Z"),
                lease_body("12", "b"),
            ),
            event(
                "update",
                "leases",
                &agent("a"),
                200,
                ("2026-12-03T10:00:02.000000Z", "2026-12-03T10:00:02.004000Z"),
                lease_body("11", "a"),
            ),
            // A conflicting Lease write changed nothing.
            event(
                "update",
                "leases",
                &agent("a"),
                409,
                ("2026-12-03T10:00:21.000000Z", "2026-12-03T10:00:21.001000Z"),
                serde_json::Value::Null,
            ),
            event(
                "patch",
                "networkpolicies",
                &agent("a"),
                403,
                ("2026-12-03T10:00:03.000000Z", "2026-12-03T10:00:03.001000Z"),
                serde_json::Value::Null,
            ),
            event(
                "get",
                "networkpolicies",
                &agent("a"),
                200,
                ("2026-12-03T10:00:04.000000Z", "2026-12-03T10:00:04.001000Z"),
                serde_json::Value::Null,
            ),
        ];
        let (leases, writes) = from_audit(&events, "the-lease").unwrap();
        let order: Vec<_> = leases
            .iter()
            .map(|w| (w.version, w.holder.clone()))
            .collect();
        assert_eq!(
            order,
            [(11, Some("a".to_owned())), (12, Some("b".to_owned()))]
        );
        assert_eq!(
            writes.len(),
            1,
            "the refused patch counts, the get does not"
        );
        assert_eq!(writes[0].writer, "a");
        assert_eq!(
            writes[0].received,
            "2026-12-03T10:00:03Z".parse::<Timestamp>().unwrap()
        );
    }

    #[test]
    fn a_write_without_an_identity_is_an_error() {
        let events = [event(
            "patch",
            "networkpolicies",
            "kube-rs",
            200,
            ("2026-12-03T10:00:03Z", "2026-12-03T10:00:03Z"),
            serde_json::Value::Null,
        )];
        assert!(from_audit(&events, "the-lease").is_err());
    }

    #[rstest::rstest]
    #[case("namespace-baseline-reconciler/0.1.0 (soak-r1)", Some("soak-r1"))]
    #[case(
        "namespace-baseline-reconciler/0.1.0 (pod-abc (x))",
        Some("pod-abc (x)")
    )]
    #[case("kubectl/v1.36.5 (linux/amd64)", None)]
    #[case("namespace-baseline-reconciler/0.1.0", None)]
    fn identities_come_from_the_user_agent(#[case] agent: &str, #[case] identity: Option<&str>) {
        assert_eq!(identity_of(agent), identity);
    }
}
