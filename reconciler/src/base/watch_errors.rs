//! Every watch's errors, in one place: each is said at warn with the watch and the API's
//! answer, counted by resource (`namespace_baseline_watch_errors_total`), and kept until the
//! watch answers again, so that `/readyz` says why it is not ready (an RBAC 403 on a list
//! used to show only as readiness that never came); and the one backoff between a watch's
//! failed attempts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff as _;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::{debug, info, warn};

use crate::base::retry::WatchBackoff;

/// The resources the reconciler watches, so that each series exists from the start.
const RESOURCES: [&str; 7] = [
    "namespacebaselines",
    "namespaces",
    "networkpolicies",
    "services",
    "endpointslices",
    "pods",
    "reports",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

/// One watch: a resource, in every namespace or in one.
#[derive(Debug, Clone, Copy)]
pub struct Watch<'a> {
    pub resource: &'static str,
    pub namespace: Option<&'a str>,
}

impl Watch<'static> {
    /// A watch of `resource` in every namespace (or of a cluster-scoped one).
    pub const fn all(resource: &'static str) -> Self {
        Self {
            resource,
            namespace: None,
        }
    }
}

impl<'a> Watch<'a> {
    /// A watch of `resource` in `namespace`.
    pub fn within(resource: &'static str, namespace: &'a str) -> Self {
        Self {
            resource,
            namespace: Some(namespace),
        }
    }
}

impl std::fmt::Display for Watch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace {
            None => f.write_str(self.resource),
            Some(namespace) => write!(f, "{} in {namespace}", self.resource),
        }
    }
}

/// The watches' errors: counted by resource, and the last answer of each watch that has not
/// answered since.
#[derive(Clone, Debug, Default)]
pub struct WatchErrors {
    counts: Family<ResourceLabels, Counter>,
    failing: Arc<Mutex<BTreeMap<String, String>>>,
}

impl WatchErrors {
    /// Registers the counter (the registry's prefix is `namespace_baseline`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "watch_errors",
            "Failed attempts of the watches (a list or watch request refused or unanswered, an error the API server sent on a watch), by resource",
            self.counts.clone(),
        );
        for resource in RESOURCES {
            drop(self.counts.get_or_create(&ResourceLabels { resource }));
        }
    }

    fn failing(&self) -> MutexGuard<'_, BTreeMap<String, String>> {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An attempt of `watch` failed: said at warn when it starts failing or its answer
    /// changes (at debug while it repeats), counted, and kept for `/readyz`.
    pub fn failed(&self, watch: Watch<'_>, error: &watcher::Error) {
        let answer = api_answer(error);
        self.counts
            .get_or_create(&ResourceLabels {
                resource: watch.resource,
            })
            .inc();
        let previous = self.failing().insert(watch.to_string(), answer.clone());
        if previous.as_ref() == Some(&answer) {
            debug!(%watch, %answer, "watch failed again");
        } else {
            warn!(%watch, %answer, "watch failed: retrying with backoff");
        }
    }

    /// `watch` answered: it no longer fails.
    pub fn answered(&self, watch: Watch<'_>) {
        if self.failing().remove(&watch.to_string()).is_some() {
            info!(%watch, "watch answers again");
        }
    }

    /// The watches failing now, each with the API's last answer.
    pub fn failing_now(&self) -> Vec<(String, String)> {
        self.failing()
            .iter()
            .map(|(watch, answer)| (watch.clone(), answer.clone()))
            .collect()
    }
}

/// What the API server answered, as a status shows it (message, reason, code), else the
/// error and its sources.
fn api_answer(error: &watcher::Error) -> String {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(error) = source {
                text.push_str(": ");
                text.push_str(&error.to_string());
                source = error.source();
            }
            return text;
        }
    };
    format!("{} ({}, {})", status.message, status.reason, status.code)
}

/// `watch`'s events with its errors taken out and told to `errors`: after an error the watch
/// is attempted again after [`WatchBackoff`]'s delay, which its next answer resets. Not the
/// `Init` that kube's watcher yields before each list: it comes before any answer, and
/// resetting on it retried a list refused again and again at once, in a tight loop.
pub fn watch_events<K: Send + 'static>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    watch: Watch<'_>,
    errors: WatchErrors,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static {
    let (resource, namespace) = (watch.resource, watch.namespace.map(str::to_owned));
    futures::stream::unfold(
        (events.boxed(), WatchBackoff::default(), false),
        move |(mut events, mut backoff, mut failing)| {
            let (errors, namespace) = (errors.clone(), namespace.clone());
            async move {
                let watch = Watch {
                    resource,
                    namespace: namespace.as_deref(),
                };
                loop {
                    match events.next().await? {
                        Ok(watcher::Event::Init) => {
                            return Some((watcher::Event::Init, (events, backoff, failing)));
                        }
                        Ok(event) => {
                            backoff.reset();
                            if std::mem::take(&mut failing) {
                                errors.answered(watch);
                            }
                            return Some((event, (events, backoff, failing)));
                        }
                        Err(error) => {
                            errors.failed(watch, &error);
                            failing = true;
                            let delay = backoff.next().unwrap_or(WatchBackoff::CAP);
                            tokio::time::sleep(delay).await;
                        }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn refused() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure("namespaces is forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        ))
    }

    /// What kube's watcher yields while every list is refused: `Init`, then the error, again
    /// and again. The attempts back off (at once, then 0.5 s doubling up to 5 s, with
    /// jitter), each counted, the failure kept until the watch answers.
    #[tokio::test(start_paused = true)]
    async fn a_watch_whose_lists_are_refused_backs_off_and_is_reported_until_it_answers() {
        let errors = WatchErrors::default();
        let mut registry = Registry::default();
        errors.register(&mut registry);
        let attempts = (0..8).flat_map(|_| [Ok(watcher::Event::Init), Err(refused())]);
        let answered = [Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)];
        let mut events = Box::pin(watch_events(
            futures::stream::iter(attempts.chain(answered)),
            Watch::all("namespaces"),
            errors.clone(),
        ));
        let started = tokio::time::Instant::now();
        for _ in 0..8 {
            let event: watcher::Event<()> = events.next().await.unwrap();
            assert!(matches!(event, watcher::Event::Init));
        }
        // 7 refused so far: at once, then at least half of 0.5 s, 1 s, 2 s, 4 s, 5 s, 5 s.
        assert!(
            started.elapsed() >= Duration::from_millis(8_750),
            "7 refused lists retried within {:?}",
            started.elapsed()
        );
        assert_eq!(
            errors.failing_now(),
            [(
                "namespaces".to_owned(),
                "namespaces is forbidden (Forbidden, 403)".to_owned()
            )]
        );
        assert!(matches!(events.next().await, Some(watcher::Event::Init)));
        assert!(matches!(
            events.next().await,
            Some(watcher::Event::InitDone)
        ));
        assert!(errors.failing_now().is_empty(), "it answered");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"watch_errors_total{resource="namespaces"} 8"#),
            "{text}"
        );
    }
}
