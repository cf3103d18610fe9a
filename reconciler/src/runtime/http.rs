//! One HTTP port: `/healthz` (liveness), `/readyz` (readiness), `/metrics` (Prometheus).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State as Shared;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tracing::info;

use crate::base::error::{Error, Result};
use crate::reconcile::state::State;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Binds the HTTP port: done before anything else, so a taken port fails the start.
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| Error::Http {
            address: address.to_string(),
            source,
        })
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let address = listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |address| address.to_string());
    info!(%address, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error::Http { address, source })
}

async fn healthz(Shared(state): Shared<Arc<State>>) -> impl IntoResponse {
    if state.health.is_alive() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the main loop is stuck\n")
    }
}

/// Ready or not, and why; then each watch failing now with the API's last answer (a watch
/// of the DNS namespace or of the reports may fail while the reconciler is ready).
async fn readyz(Shared(state): Shared<Arc<State>>) -> impl IntoResponse {
    let role = if state.leader.is_leading() {
        "leader"
    } else {
        "standby"
    };
    let (status, mut body) = if state.is_ready() {
        (StatusCode::OK, format!("ready ({role})\n"))
    } else if !state.leader.is_known() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "leadership not known yet\n".to_owned(),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced yet\n".to_owned(),
        )
    };
    let failing = state.metrics.watches.failing_now();
    if !failing.is_empty() {
        body.push_str("watches failing:\n");
        for (watch, answer) in failing {
            body.push_str(&format!("  {watch}: {answer}\n"));
        }
    }
    (status, body)
}

async fn metrics(Shared(state): Shared<Arc<State>>) -> impl IntoResponse {
    match state.render_metrics() {
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use namespace_baseline_leader::{LeaderGate, Timing};
    use tower::ServiceExt;

    async fn get(state: &Arc<State>, path: &str) -> (StatusCode, String) {
        let response = router(state.clone())
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn health_readiness_and_metrics() {
        let state = Arc::new(State::new(Arc::new(LeaderGate::elected(Timing::DEFAULT))));
        state.health.beat();
        assert_eq!(get(&state, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&state, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        namespace_baseline_leader::testing::stand_by(&state.leader);
        assert_eq!(
            get(&state, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "caches not synced yet\n".into()
            )
        );
        state.health.set_caches_synced(true);
        assert_eq!(
            get(&state, "/readyz").await,
            (StatusCode::OK, "ready (standby)\n".into())
        );

        state.metrics.set_leader(true);
        let (status, text) = get(&state, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("namespace_baseline_leader 1"), "{text}");
        // Every series is there from the start, at 0.
        for series in [
            r#"namespace_baseline_reconciles_total{result="success"} 0"#,
            r#"namespace_baseline_reconcile_errors_total{class="transient"} 0"#,
            r#"namespace_baseline_holes{width="World",direction="Egress"} 0"#,
            "namespace_baseline_drift_repairs_total 0",
            "namespace_baseline_api_door_mismatch 0",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        assert_eq!(get(&state, "/nope").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_leader_is_ready_once_its_caches_are_synced() {
        let state = Arc::new(State::new(Arc::new(LeaderGate::always())));
        assert_eq!(
            get(&state, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.health.set_caches_synced(true);
        assert_eq!(
            get(&state, "/readyz").await,
            (StatusCode::OK, "ready (leader)\n".into())
        );
    }

    /// Issue 52, finding 7: a watch the API server refuses (an RBAC 403) is no silent
    /// readiness that never comes: the readiness body names the resource and the API's
    /// answer, and the errors are counted by resource.
    #[tokio::test(start_paused = true)]
    async fn a_refused_watch_is_named_in_the_readiness_body_and_counted() {
        use crate::fixtures::{failure, mock_client};
        use crate::reconcile::context::Settings;
        use crate::reconcile::watches::Watches;

        let (client, _server) = mock_client(Box::new(|_| failure(403, "Forbidden")));
        let state = Arc::new(State::new(Arc::new(LeaderGate::always())));
        let settings = Settings {
            concurrency: 4,
            resync: std::time::Duration::from_secs(300),
            dns_namespace: Some("kube-system".to_owned()),
            api_door: None,
            reports: false,
        };
        let _watches = Watches::start(client, settings, state.clone());
        // The watches' first attempts and a few retries (their backoff starts at 0.5 s).
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let (status, body) = get(&state, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        for resource in ["namespaces", "networkpolicies", "namespacebaselines"] {
            assert!(
                body.contains(&format!("{resource}: ")) && body.contains("mocked Forbidden"),
                "the readiness body does not say why the {resource} watch fails: {body:?}"
            );
        }
        let (_, text) = get(&state, "/metrics").await;
        for resource in ["namespaces", "pods"] {
            let counted = text.lines().any(|line| {
                line.starts_with(&format!(
                    r#"namespace_baseline_watch_errors_total{{resource="{resource}"}} "#
                )) && !line.ends_with(" 0")
            });
            assert!(
                counted,
                "the {resource} watch's errors are not counted:\n{text}"
            );
        }
    }
}
