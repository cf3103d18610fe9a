//! What a probe pod found, as it writes it to its termination message and the reconciler
//! reads it back from the pod's status: the one channel out of a walled pod that needs no
//! packet (the kubelet copies the file into `status.containerStatuses[].state.terminated`).

use serde::{Deserialize, Serialize};

/// The most the kubelet keeps of a termination message (bytes).
pub const MAX_REPORT: usize = 4096;

/// One probe pod's findings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFindings {
    /// The TCP port it listened on, `None` when it was not asked to (or could not bind:
    /// then `error` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listening: Option<u16>,
    /// Connections its listener accepted, with the addresses they came from.
    #[serde(default)]
    pub accepted: Vec<String>,
    /// Its TCP connection attempts, in the order asked.
    #[serde(default)]
    pub connects: Vec<Connect>,
    /// Its name resolution through the pod's own resolver (`/etc/resolv.conf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<Resolve>,
    /// What kept it from doing what it was asked (a bind failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its own CPU time (ms) and peak memory (KiB), for the probe's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_kib: Option<u64>,
}

/// How a TCP connection attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectResult {
    /// The handshake completed: the packets went through.
    Connected,
    /// A reset or an ICMP port unreachable: something answered no.
    Refused,
    /// An ICMP host or network unreachable.
    Unreachable,
    /// No answer within the timeout: dropped.
    Timeout,
    /// Any other error (in `detail`).
    Error,
}

impl ConnectResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connected => "connected",
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connect {
    /// `IP:port`.
    pub target: String,
    pub outcome: ConnectResult,
    pub ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolve {
    pub name: String,
    /// The addresses it resolved to; empty when it failed.
    #[serde(default)]
    pub addresses: Vec<String>,
    pub ms: u64,
    /// Why it failed (the resolver's error, or a timeout).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Resolve {
    pub fn resolved(&self) -> bool {
        !self.addresses.is_empty()
    }
}

impl PodFindings {
    /// The attempt to `target`, if made.
    pub fn connect_to(&self, target: &str) -> Option<&Connect> {
        self.connects.iter().find(|c| c.target == target)
    }

    /// The JSON written to the termination message, cut to what the kubelet keeps (the
    /// accepted addresses go first: they are the least needed).
    pub fn to_message(&self) -> String {
        let mut report = self.clone();
        loop {
            let text = serde_json::to_string(&report).unwrap_or_else(|error| {
                format!(r#"{{"error":"cannot encode the report: {error}"}}"#)
            });
            if text.len() <= MAX_REPORT || report.accepted.is_empty() {
                return text;
            }
            report.accepted.truncate(report.accepted.len() / 2);
        }
    }

    /// Reads a termination message; a clear error for anything else (a crash's message).
    pub fn parse(message: &str) -> Result<Self, String> {
        serde_json::from_str(message.trim()).map_err(|error| {
            let shown: String = message.chars().take(200).collect();
            format!("not a probe report ({error}): {shown:?}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_through_its_message() {
        let report = PodFindings {
            listening: Some(9797),
            accepted: vec!["10.0.0.5:41000".into()],
            connects: vec![Connect {
                target: "10.0.0.6:9797".into(),
                outcome: ConnectResult::Refused,
                ms: 3,
                detail: String::new(),
            }],
            resolve: Some(Resolve {
                name: "kubernetes.default.svc".into(),
                addresses: vec!["10.0.0.1".into()],
                ms: 4,
                detail: String::new(),
            }),
            error: None,
            cpu_ms: Some(2),
            max_rss_kib: Some(3000),
        };
        assert_eq!(PodFindings::parse(&report.to_message()), Ok(report));
    }

    #[test]
    fn a_long_report_is_cut_to_what_the_kubelet_keeps() {
        let report = PodFindings {
            accepted: (0..1000).map(|i| format!("10.0.{i}.1:40000")).collect(),
            ..PodFindings::default()
        };
        let message = report.to_message();
        assert!(message.len() <= MAX_REPORT, "{}", message.len());
        assert!(!PodFindings::parse(&message).unwrap().accepted.is_empty());
    }

    #[test]
    fn anything_else_is_an_error_naming_it() {
        let error = PodFindings::parse("thread 'main' panicked").unwrap_err();
        assert!(error.contains("not a probe report"), "{error}");
        assert!(error.contains("panicked"), "{error}");
    }
}
