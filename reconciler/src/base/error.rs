//! One error type for the reconciler, and the one place that decides whether a failure is
//! worth retrying.

use std::fmt::Write as _;

use namespace_baseline_core::spec::SpecError;

/// Everything that can go wrong in the reconciler. Sources are kept, never flattened into
/// strings, so logs and status messages can show the whole chain (see [`Error::report`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be acted on (e.g. a malformed `namespaceLabel`).
    #[error("invalid spec")]
    InvalidSpec(#[source] SpecError),

    /// A server-side apply of one wall object failed.
    #[error("applying NetworkPolicy {namespace}/{name}")]
    Apply {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// Deleting a managed NetworkPolicy failed.
    #[error("deleting NetworkPolicy {namespace}/{name}")]
    Delete {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// Writing or deleting an OpenReports Report failed.
    #[error("writing Report {namespace}/{name}")]
    OpenReport {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// Writing the status subresource failed.
    #[error("patching the status of NamespaceBaseline {name}")]
    Status {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// Adding or removing the cleanup finalizer failed.
    #[error("updating the finalizers of NamespaceBaseline {name}")]
    Finalizer {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// The watch caches have not completed their first list yet.
    #[error("the watch caches are not synced yet")]
    CachesNotSynced,

    /// This replica does not hold the leader lease (any more): it must not write.
    #[error("not the leader: writes are held back")]
    NotLeader,

    /// An object came from the API server without a field it always has.
    #[error("{kind} without {field}")]
    MissingField {
        kind: &'static str,
        field: &'static str,
    },

    /// Building the Kubernetes client failed (kubeconfig, in-cluster config).
    #[error("connecting to the Kubernetes API")]
    Client(#[source] Box<kube::Error>),

    /// A reconcile panicked (a bug): contained, reported and retried like a transient
    /// failure; the process and the other reconciles go on.
    #[error("the reconcile panicked: {0}")]
    Panicked(String),

    /// The HTTP server (health and metrics) failed.
    #[error("serving HTTP on {address}")]
    Http {
        address: String,
        #[source]
        source: std::io::Error,
    },

    /// Rendering the CRD as YAML failed.
    #[error("rendering the CRD")]
    Yaml(#[source] yaml_serde::Error),

    /// Installing the logging subscriber failed.
    #[error("setting up logging: {0}")]
    Telemetry(String),

    /// `plan` could not read its input (a manifest, the cluster).
    #[error(transparent)]
    Plan(#[from] PlanInputError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why `plan` could not read its input. Every message names the file and document, or the
/// request, it is about.
#[derive(Debug, thiserror::Error)]
pub enum PlanInputError {
    #[error("{path}: cannot be read")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: not valid YAML")]
    Yaml {
        origin: String,
        #[source]
        source: yaml_serde::Error,
    },
    #[error("{origin}: not valid JSON")]
    Json {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{origin}: {what}")]
    Invalid { origin: String, what: String },
    #[error("{origin}: {kind} {name} cannot be read")]
    Object {
        origin: String,
        kind: &'static str,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{kind} {name} is given twice: in {first} and in {second}")]
    Duplicate {
        kind: &'static str,
        name: String,
        first: String,
        second: String,
    },
    #[error("no NamespaceBaseline to plan: {0}")]
    NoBaseline(String),
    #[error("listing {what} (read-only)")]
    List {
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("writing the plan to stdout")]
    Output(#[source] std::io::Error),
}

/// How a failure is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Worth retrying: requeue with capped exponential backoff and jitter.
    Transient,
    /// Retrying cannot help: report `Ready=False`, emit an Event, wait for a spec change.
    Permanent,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
        }
    }
}

impl Error {
    /// The one classification of failures.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::InvalidSpec(_) | Self::MissingField { .. } | Self::Yaml(_) | Self::Plan(_) => {
                ErrorClass::Permanent
            }
            Self::Apply { source, .. }
            | Self::Delete { source, .. }
            | Self::Status { source, .. }
            | Self::Finalizer { source, .. }
            | Self::OpenReport { source, .. }
            | Self::Client(source) => classify_kube(source),
            Self::CachesNotSynced
            | Self::NotLeader
            | Self::Panicked(_)
            | Self::Http { .. }
            | Self::Telemetry(_) => ErrorClass::Transient,
        }
    }

    /// A short CamelCase reason for conditions and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "InvalidSpec",
            Self::Apply { source, .. }
            | Self::Delete { source, .. }
            | Self::Status { source, .. }
            | Self::Finalizer { source, .. }
            | Self::OpenReport { source, .. }
            | Self::Client(source) => match api_status(source).map(|s| s.code) {
                Some(403) => "Forbidden",
                Some(422) => "Invalid",
                Some(409) => "Conflict",
                Some(429) => "TooManyRequests",
                Some(code) if code >= 500 => "ServerError",
                Some(_) => "ApiError",
                None => "ConnectionError",
            },
            Self::CachesNotSynced => "CachesNotSynced",
            Self::NotLeader => "NotLeader",
            Self::MissingField { .. } => "MalformedObject",
            Self::Panicked(_) => "Panicked",
            Self::Http { .. } => "HttpServer",
            Self::Yaml(_) => "CrdRendering",
            Self::Telemetry(_) => "Telemetry",
            Self::Plan(_) => "PlanInput",
        }
    }

    /// The error and its sources on one line, for logs, status messages and Events. An API
    /// status is shown by its message, reason and code rather than its debug form.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            let api = error
                .downcast_ref::<kube::Error>()
                .or_else(|| error.downcast_ref::<Box<kube::Error>>().map(AsRef::as_ref));
            if let Some(kube::Error::Api(status)) = api {
                let _ = write!(
                    text,
                    ": {} ({}, {})",
                    status.message, status.reason, status.code
                );
                break;
            }
            // Some errors already show their source in their own message.
            let message = error.to_string();
            if !text.ends_with(&message) {
                let _ = write!(text, ": {message}");
            }
            source = error.source();
        }
        text
    }
}

fn api_status(error: &kube::Error) -> Option<&kube::core::Status> {
    match error {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

/// Kubernetes API failures: overload, server errors, conflicts, timeouts and lost
/// connections pass; forbidden and invalid requests do not. A namespace being terminated
/// refuses new objects with 403, but that passes too: the cache will soon drop it.
fn classify_kube(error: &kube::Error) -> ErrorClass {
    match error {
        kube::Error::Api(status) => match status.code {
            400 | 403 | 405 | 406 | 413 | 415 | 422 if !namespace_terminating(status) => {
                ErrorClass::Permanent
            }
            _ => ErrorClass::Transient,
        },
        kube::Error::SerdeError(_)
        | kube::Error::BuildRequest(_)
        | kube::Error::HttpError(_)
        | kube::Error::FromUtf8(_) => ErrorClass::Permanent,
        // Connection errors, timeouts, auth refreshes, TLS handshakes, ...
        _ => ErrorClass::Transient,
    }
}

fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.details.as_ref().is_some_and(|details| {
        details
            .causes
            .iter()
            .any(|cause| cause.reason == "NamespaceTerminating")
    }) || status.message.contains("is being terminated")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{Status, response::StatusCause, response::StatusDetails};
    use namespace_baseline_core::NamespaceBaselineSpec;
    use rstest::rstest;

    pub(crate) fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            Status::failure(&format!("the server says {reason}"), reason)
                .with_code(code)
                .boxed(),
        )
    }

    fn apply_error(source: kube::Error) -> Error {
        Error::Apply {
            namespace: "team-a".into(),
            name: "nsb-guarded-default-deny".into(),
            source: Box::new(source),
        }
    }

    #[rstest]
    #[case::too_many_requests(429, "TooManyRequests", ErrorClass::Transient)]
    #[case::internal(500, "InternalError", ErrorClass::Transient)]
    #[case::unavailable(503, "ServiceUnavailable", ErrorClass::Transient)]
    #[case::gateway_timeout(504, "Timeout", ErrorClass::Transient)]
    #[case::conflict(409, "Conflict", ErrorClass::Transient)]
    #[case::not_found(404, "NotFound", ErrorClass::Transient)]
    #[case::gone(410, "Gone", ErrorClass::Transient)]
    #[case::unauthorized(401, "Unauthorized", ErrorClass::Transient)]
    #[case::forbidden(403, "Forbidden", ErrorClass::Permanent)]
    #[case::invalid(422, "Invalid", ErrorClass::Permanent)]
    #[case::bad_request(400, "BadRequest", ErrorClass::Permanent)]
    fn api_errors_route_by_code(
        #[case] code: u16,
        #[case] reason: &str,
        #[case] class: ErrorClass,
    ) {
        assert_eq!(apply_error(api_error(code, reason)).class(), class);
        let status = Error::Status {
            name: "guarded".into(),
            source: Box::new(api_error(code, reason)),
        };
        assert_eq!(status.class(), class);
    }

    #[test]
    fn a_terminating_namespace_is_transient_despite_403() {
        let mut status = Status::failure(
            "unable to create new content in namespace team-a because it is being terminated",
            "Forbidden",
        )
        .with_code(403);
        status.details = Some(StatusDetails {
            name: "team-a".into(),
            group: String::new(),
            kind: "namespaces".into(),
            uid: String::new(),
            causes: vec![StatusCause {
                reason: "NamespaceTerminating".into(),
                message: String::new(),
                field: String::new(),
            }],
            retry_after_seconds: 0,
        });
        let error = apply_error(kube::Error::Api(status.boxed()));
        assert_eq!(error.class(), ErrorClass::Transient);
    }

    #[test]
    fn connection_failures_are_transient() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = apply_error(kube::Error::Service(Box::new(io)));
        assert_eq!(error.class(), ErrorClass::Transient);
        assert_eq!(error.reason(), "ConnectionError");
    }

    #[test]
    fn an_invalid_spec_is_permanent_and_says_why() {
        let spec_error = NamespaceBaselineSpec::new("baseline!=guarded")
            .validate()
            .unwrap_err();
        let error = Error::InvalidSpec(spec_error);
        assert_eq!(error.class(), ErrorClass::Permanent);
        assert_eq!(error.reason(), "InvalidSpec");
        let report = error.report();
        assert!(
            report.starts_with("invalid spec: spec.namespaceLabel"),
            "{report}"
        );
        assert!(report.contains("'!=' is not supported"), "{report}");
        assert_eq!(report.matches("is not supported").count(), 1, "{report}");
    }

    #[rstest]
    #[case(Error::CachesNotSynced)]
    #[case(Error::NotLeader)]
    fn internal_waits_are_transient(#[case] error: Error) {
        assert_eq!(error.class(), ErrorClass::Transient);
    }

    #[test]
    fn sources_are_kept_and_reported_readably() {
        let error = apply_error(api_error(403, "Forbidden"));
        let source = std::error::Error::source(&error).expect("source kept");
        assert!(source.downcast_ref::<Box<kube::Error>>().is_some());
        assert_eq!(
            error.report(),
            "applying NetworkPolicy team-a/nsb-guarded-default-deny: the server says Forbidden (Forbidden, 403)"
        );
        assert_eq!(error.reason(), "Forbidden");
    }
}
