//! The API server's audit log, as the cluster tests, the bench and the soak read it: events
//! after a mark, one per request, and the counts reports print. One reader, so that every
//! count of requests means the same thing.

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;

/// The API server's JSON audit log (Metadata level, one event per request).
pub const ENV_AUDIT_LOG: &str = "NSB_AUDIT_LOG";
/// `1`: run against a cluster whose audit log is out of reach, skipping (loudly) the
/// assertions that need it.
pub const ENV_SKIP_AUDIT: &str = "NSB_SKIP_AUDIT";

/// The API server's audit log, read from byte offsets.
pub struct Audit {
    path: Option<PathBuf>,
    skip: bool,
}

/// A position in the audit log: events after it are the ones counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditMark(u64);

/// One request, as the audit log tells it (Metadata level).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: String,
    pub verb: String,
    pub user: AuditUser,
    #[serde(default)]
    pub user_agent: String,
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    #[serde(rename = "requestURI", default)]
    pub request_uri: String,
    /// When the API server received the request (microseconds, RFC 3339).
    #[serde(default)]
    pub request_received_timestamp: Option<String>,
    /// When this stage (`ResponseComplete`: the answer was sent) was reached.
    #[serde(default)]
    pub stage_timestamp: Option<String>,
    /// The response body, at audit level `RequestResponse` (the control plane logs Leases
    /// so).
    #[serde(default)]
    pub response_object: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuditUser {
    #[serde(default)]
    pub username: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: Option<u16>,
}

impl AuditEvent {
    /// When the API server received the request.
    pub fn received_at(&self) -> Option<Timestamp> {
        self.request_received_timestamp.as_deref()?.parse().ok()
    }

    /// When this event's stage was reached (for `ResponseComplete`, the answer was sent).
    pub fn stage_at(&self) -> Option<Timestamp> {
        self.stage_timestamp.as_deref()?.parse().ok()
    }

    pub fn resource(&self) -> &str {
        self.object_ref.as_ref().map_or("", |r| r.resource.as_str())
    }

    pub fn subresource(&self) -> Option<&str> {
        self.object_ref
            .as_ref()
            .and_then(|r| r.subresource.as_deref())
    }

    pub fn code(&self) -> Option<u16> {
        self.response_status.as_ref().and_then(|s| s.code)
    }

    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// `verb resource[/subresource] namespace/name -> code`, for reports.
    pub fn describe(&self) -> String {
        let object = self.object_ref.clone().unwrap_or_default();
        let subresource = object
            .subresource
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        format!(
            "{} {}{subresource} {}/{} -> {}",
            self.verb,
            object.resource,
            object.namespace.unwrap_or_default(),
            object.name.unwrap_or_default(),
            self.code()
                .map_or_else(|| "?".to_owned(), |c| c.to_string())
        )
    }
}

impl Audit {
    /// The log named by `NSB_AUDIT_LOG`; `NSB_SKIP_AUDIT=1` lets an assertion that needs it
    /// be skipped (loudly) when it is out of reach.
    pub fn from_env() -> Self {
        Self {
            path: std::env::var_os(ENV_AUDIT_LOG).map(PathBuf::from),
            skip: std::env::var(ENV_SKIP_AUDIT).is_ok_and(|v| v == "1"),
        }
    }

    pub fn mark(&self) -> AuditMark {
        AuditMark(
            self.path
                .as_ref()
                .and_then(|path| std::fs::metadata(path).ok())
                .map_or(0, |meta| meta.len()),
        )
    }

    /// The requests made by `username` after `mark`, one per audit ID (a watch logs two
    /// stages). `None` only when the audit log is unavailable and `NSB_SKIP_AUDIT=1` says
    /// that is fine; otherwise a missing audit log fails the test.
    pub fn requests_since(&self, mark: AuditMark, username: &str) -> Option<Vec<AuditEvent>> {
        self.requests_where(mark, |event| event.user.username == username)
    }

    /// Every request after `mark`, whoever made it (see [`Self::requests_since`]).
    pub fn all_requests_since(&self, mark: AuditMark) -> Option<Vec<AuditEvent>> {
        self.requests_where(mark, |_| true)
    }

    /// The requests logged between two marks (`to` excluded), one per audit ID.
    pub fn requests_between(&self, from: AuditMark, to: AuditMark) -> Option<Vec<AuditEvent>> {
        let lines = self.lines_since(from)?;
        Some(one_per_request(
            lines
                .into_iter()
                .filter(|(end, _)| *end <= to)
                .map(|(_, event)| event),
        ))
    }

    /// Every complete line after `mark` that reads as an event, with the mark of its end.
    /// `None` only when the audit log is unavailable and `NSB_SKIP_AUDIT=1` says that is
    /// fine; otherwise a missing audit log fails the test.
    pub fn lines_since(&self, mark: AuditMark) -> Option<Vec<(AuditMark, AuditEvent)>> {
        let Some(path) = self.path.as_ref().filter(|path| path.exists()) else {
            assert!(
                self.skip,
                "no audit log: this assertion counts API requests in the API server's audit log; set {ENV_AUDIT_LOG} to it (e2e-tests/cluster-tests.sh does), or set {ENV_SKIP_AUDIT}=1 to skip audit-based assertions on a cluster without one"
            );
            eprintln!(
                "!! SKIPPED audit-based assertion ({ENV_SKIP_AUDIT}=1): request counts NOT verified"
            );
            return None;
        };
        let mut file = std::fs::File::open(path).expect("opening the audit log");
        file.seek(SeekFrom::Start(mark.0))
            .expect("seeking in the audit log");
        let mut text = String::new();
        file.read_to_string(&mut text)
            .expect("reading the audit log");
        let mut lines = Vec::new();
        let mut offset = mark.0;
        // Only complete lines: the API server may be writing the last one.
        for line in text
            .split_inclusive('\n')
            .filter(|line| line.ends_with('\n'))
        {
            offset += line.len() as u64;
            if let Ok(event) = serde_json::from_str::<AuditEvent>(line) {
                lines.push((AuditMark(offset), event));
            }
        }
        Some(lines)
    }

    fn requests_where(
        &self,
        mark: AuditMark,
        keep: impl Fn(&AuditEvent) -> bool,
    ) -> Option<Vec<AuditEvent>> {
        let lines = self.lines_since(mark)?;
        Some(one_per_request(
            lines.into_iter().map(|(_, event)| event).filter(keep),
        ))
    }
}

/// One event per audit ID (a request logs a stage each), in the order they were first seen;
/// the `ResponseComplete` stage when there is one.
fn one_per_request(events: impl Iterator<Item = AuditEvent>) -> Vec<AuditEvent> {
    let mut by_id: BTreeMap<String, AuditEvent> = BTreeMap::new();
    let mut order = Vec::new();
    for event in events {
        match by_id.get_mut(&event.audit_id) {
            Some(existing) => {
                if event.stage == "ResponseComplete" {
                    *existing = event;
                }
            }
            None => {
                order.push(event.audit_id.clone());
                by_id.insert(event.audit_id.clone(), event);
            }
        }
    }
    order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .collect()
}

/// Counts of requests by `verb resource[/subresource]`, for reports.
pub fn tally(events: &[AuditEvent]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for event in events {
        let key = match event.subresource() {
            Some(sub) => format!("{} {}/{sub}", event.verb, event.resource()),
            None => format!("{} {}", event.verb, event.resource()),
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// Requests that were refused for lack of permission (403): the RBAC was not enough.
pub fn forbidden(events: &[AuditEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|event| event.code() == Some(403))
        .map(AuditEvent::describe)
        .collect()
}
