//! Percentiles, request counts from the audit log, and the result table.

use std::fmt::Write as _;
use std::time::Duration;

use namespace_baseline_cluster_tests::{AuditEvent, percentile, tally};

/// Samples in milliseconds, sorted.
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn new(durations: &[Duration]) -> Self {
        let mut ms: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Self(ms)
    }

    pub fn p(&self, p: f64) -> f64 {
        percentile(&self.0, p)
    }

    pub fn median(&self) -> String {
        ms(self.p(50.0))
    }

    /// Min–max for a few runs; p10–p90 and the max for many samples.
    pub fn spread(&self) -> String {
        let (Some(min), Some(max)) = (self.0.first(), self.0.last()) else {
            return "-".to_owned();
        };
        if self.0.len() < 10 {
            format!("{}–{} (n={})", ms(*min), ms(*max), self.0.len())
        } else {
            format!(
                "p10 {} / p90 {} / p99 {} / max {} (n={})",
                ms(self.p(10.0)),
                ms(self.p(90.0)),
                ms(self.p(99.0)),
                ms(*max),
                self.0.len()
            )
        }
    }
}

/// Milliseconds, or seconds above 10 s.
pub fn ms(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.1} s", value / 1e3)
    } else if value >= 100.0 {
        format!("{value:.0} ms")
    } else {
        format!("{value:.1} ms")
    }
}

/// A paginated LIST counts once: its `continue` pages are the same list.
fn is_list(event: &AuditEvent) -> bool {
    event.verb == "list" && !event.request_uri.contains("continue=")
}

/// The reconciler's requests in a window, by what they cost and mean.
#[derive(Debug, Default, Clone)]
pub struct Requests {
    pub policy_writes: usize,
    pub status_writes: usize,
    pub baseline_writes: usize,
    pub events: usize,
    pub report_writes: usize,
    pub lists: usize,
    pub list_pages: usize,
    pub gets: usize,
    pub watches: usize,
    pub lease: usize,
    pub throttled: usize,
    pub total: usize,
    pub by_verb: String,
}

impl Requests {
    pub fn of(events: &[AuditEvent]) -> Self {
        let mut requests = Self {
            total: events.len(),
            ..Self::default()
        };
        for event in events {
            let resource = event.resource();
            let sub = event.subresource();
            if event.code() == Some(429) {
                requests.throttled += 1;
            }
            if resource == "leases" {
                requests.lease += 1;
                continue;
            }
            match event.verb.as_str() {
                "list" => {
                    requests.list_pages += 1;
                    requests.lists += usize::from(is_list(event));
                }
                "get" => requests.gets += 1,
                "watch" => requests.watches += 1,
                _ if !event.is_write() => {}
                _ if resource == "networkpolicies" => requests.policy_writes += 1,
                _ if resource == "namespacebaselines" && sub == Some("status") => {
                    requests.status_writes += 1;
                }
                _ if resource == "namespacebaselines" => requests.baseline_writes += 1,
                _ if resource == "events" => requests.events += 1,
                _ if resource == "reports" => requests.report_writes += 1,
                _ => {}
            }
        }
        requests.by_verb = tally(events)
            .into_iter()
            .map(|(key, count)| format!("{key}={count}"))
            .collect::<Vec<_>>()
            .join(", ");
        requests
    }

    /// Writes other than the lease's: policies, status, finalizers, Events, OpenReports.
    pub fn writes(&self) -> usize {
        self.policy_writes
            + self.status_writes
            + self.baseline_writes
            + self.events
            + self.report_writes
    }

    pub fn describe(&self) -> String {
        format!(
            "policy writes {}, status patches {}, finalizer patches {}, Events {}, report writes {}, LIST {} ({} pages), GET {}, WATCH {}, lease {}, 429s {}",
            self.policy_writes,
            self.status_writes,
            self.baseline_writes,
            self.events,
            self.report_writes,
            self.lists,
            self.list_pages,
            self.gets,
            self.watches,
            self.lease,
            self.throttled
        )
    }
}

/// One line of the result table.
pub struct Row {
    pub what: String,
    pub size: usize,
    pub median: String,
    pub spread: String,
    pub target: String,
    pub verdict: Verdict,
    pub detail: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    Info,
}

impl Verdict {
    pub fn of(met: bool) -> Self {
        if met { Self::Met } else { Self::Missed }
    }

    fn text(self) -> &'static str {
        match self {
            Self::Met => "met",
            Self::Missed => "MISSED",
            Self::Info => "-",
        }
    }
}

impl Row {
    pub fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            self.what,
            self.size,
            self.median,
            self.spread,
            self.target,
            self.verdict.text(),
            self.detail.replace('|', "/")
        )
    }
}

pub const HEADER: &str = "| benchmark | namespaces | median | spread | target | verdict | detail |\n|---|---:|---:|---|---|---|---|";

pub fn table(rows: &[Row]) -> String {
    let mut text = String::from(HEADER);
    for row in rows {
        let _ = write!(text, "\n{}", row.markdown());
    }
    text
}
