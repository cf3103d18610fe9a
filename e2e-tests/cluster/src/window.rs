//! Waiting without sleeping-and-hoping, from the API server's audit log:
//!
//! - [`Cluster::settle`]: until a client has made no request for a stated time (its last
//!   writes have landed), instead of a fixed pause before the next step;
//! - [`Cluster::observe_window`]: a stated window in which a test proves that something does
//!   *not* happen (no write at rest, no retry of a permanent failure). The window is opened
//!   and closed by two marker requests of the test's own, so its length is measured by the
//!   API server, and every request made inside it is in the log once the closing marker is.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::{AuditEvent, AuditMark, Cluster, wait_until};

/// What the API server handled in a window, bounded by the markers.
#[derive(Debug, Clone)]
pub struct Window {
    /// The window's length as the API server saw it: from the opening marker's answer to the
    /// closing marker's arrival (the local clock when there is no audit log).
    pub length: Duration,
    /// Every request inside the window, whoever made it (markers excluded); `None` when the
    /// audit log is unavailable and `NSB_SKIP_AUDIT=1` says that is fine.
    pub events: Option<Vec<AuditEvent>>,
}

impl Window {
    /// The requests of `username` inside the window.
    pub fn requests_of(&self, username: &str) -> Option<Vec<AuditEvent>> {
        self.events.as_ref().map(|events| {
            events
                .iter()
                .filter(|e| e.user.username == username)
                .cloned()
                .collect()
        })
    }
}

/// A marker request in the audit log: where its line ends, and when it was received and
/// answered.
struct Marker {
    end: AuditMark,
    received: Timestamp,
    answered: Timestamp,
}

fn between(earlier: Timestamp, later: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or_default()
}

impl Cluster {
    /// An admin GET of a ConfigMap that does not exist, named `name`: a request the audit
    /// log records and nothing reacts to. Returns once the log has its answer.
    async fn marker(&self, name: &str) -> Result<Option<Marker>> {
        let from = self.audit.mark();
        let configmaps: Api<ConfigMap> = Api::default_namespaced(self.admin.clone());
        configmaps
            .get_opt(name)
            .await
            .with_context(|| format!("marker request {name}"))?;
        if self.audit.lines_since(from).is_none() {
            return Ok(None);
        }
        let (marker, _) = wait_until(
            &format!("the audit log to record the marker {name}"),
            Duration::from_secs(10),
            || async {
                let lines = self.audit.lines_since(from).unwrap_or_default();
                Ok(lines.into_iter().find_map(|(end, event)| {
                    (event.stage == "ResponseComplete" && event.request_uri.contains(name))
                        .then(|| {
                            Some(Marker {
                                end,
                                received: event.received_at()?,
                                answered: event.stage_at()?,
                            })
                        })
                        .flatten()
                }))
            },
        )
        .await?;
        Ok(Some(marker))
    }

    /// Observes the cluster for `length` (the window a test states), then returns what the
    /// API server handled in it. The window starts when the opening marker is answered and
    /// ends when the closing one arrives; it is checked to be at least `length` long.
    pub async fn observe_window(&self, label: &str, length: Duration) -> Result<Window> {
        let id = format!("nsb-window-{}-{}", label, Timestamp::now().as_microsecond());
        let started = std::time::Instant::now();
        let open = self.marker(&format!("{id}-open")).await?;
        tokio::time::sleep(length).await;
        let close = self.marker(&format!("{id}-close")).await?;
        let (Some(open), Some(close)) = (open, close) else {
            return Ok(Window {
                length: started.elapsed(),
                events: None,
            });
        };
        let measured = between(open.answered, close.received);
        ensure!(
            measured >= length,
            "the window {label} lasted {measured:?} by the API server's clock, less than the {length:?} stated"
        );
        let events = self
            .audit
            .requests_between(open.end, close.end)
            .unwrap_or_default()
            .into_iter()
            .filter(|event| !event.request_uri.contains(&id))
            .collect();
        Ok(Window {
            length: measured,
            events: Some(events),
        })
    }

    /// Waits until `username` has made no request (Lease renewals excepted) for `quiet`, by
    /// the audit log's timestamps: its last request has been answered and nothing followed.
    /// Returns how long that took. Without an audit log (`NSB_SKIP_AUDIT=1`) it waits
    /// `quiet`.
    pub async fn settle(
        &self,
        username: &str,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<Duration> {
        let from = self.audit.mark();
        let since = Timestamp::now();
        if self.audit.lines_since(from).is_none() {
            tokio::time::sleep(quiet).await;
            return Ok(quiet);
        }
        let (_, took) = wait_until(
            &format!("{username} to make no request for {quiet:?}"),
            timeout,
            || async {
                let events = self
                    .audit
                    .requests_since(from, username)
                    .unwrap_or_default();
                let last = events
                    .iter()
                    .filter(|event| event.resource() != "leases")
                    .filter_map(AuditEvent::stage_at)
                    .max()
                    .map_or(since, |last| last.max(since));
                Ok((between(last, Timestamp::now()) >= quiet).then_some(()))
            },
        )
        .await?;
        Ok(took)
    }
}
