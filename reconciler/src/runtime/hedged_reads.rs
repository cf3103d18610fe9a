//! Reads that do not wait for a stalled request: a GET (a list page, a watch request, a
//! Lease read) whose answer has not begun after a bound is sent again on a fresh connection,
//! and the first answer to begin is taken; the other is dropped (a read changes nothing, so
//! there is nothing of it to wait for).
//!
//! Why: a watch that resumes after a cut, or relists after a `410`, sees nothing until its
//! request is answered, and a drift made meanwhile waits for it: a stalled watch request
//! holds every repair behind it. Writes are hedged too, but inside the
//! leader gate (`leader/src/hedge.rs`, `reconcile/writes.rs`); a read needs no gate. What
//! "answered" means here is the response's head: a watch's answer then streams for minutes.
//! The hedge is one request (no second hedge), on a connection of its own; it carries the
//! User-Agent of its replica with `hedge` before the identity, so the audit log tells it apart.

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::header::USER_AGENT;
use http::{HeaderValue, Method, Request, Response};
use kube::client::Body;
use tower::{BoxError, Service, ServiceExt as _};
use tracing::debug;

/// `primary` for every request; for a GET unanswered after `after`, `hedge` as well
/// (`after` `None`: never).
#[derive(Clone)]
pub struct HedgedReads<S> {
    primary: S,
    hedge: S,
    after: Option<Duration>,
}

impl<S> HedgedReads<S> {
    pub fn new(primary: S, hedge: S, after: Option<Duration>) -> Self {
        Self {
            primary,
            hedge,
            after,
        }
    }
}

/// The same GET again, for the hedge: its User-Agent says so.
fn hedge_of(request: &Request<Body>) -> Option<Request<Body>> {
    if request.method() != Method::GET {
        return None;
    }
    let mut copy = Request::builder()
        .method(Method::GET)
        .uri(request.uri().clone())
        .version(request.version())
        .body(request.body().try_clone()?)
        .ok()?;
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    if let Some(agent) = request
        .headers()
        .get(USER_AGENT)
        .and_then(|agent| agent.to_str().ok())
    {
        let hedged = match agent.split_once(" (") {
            Some((product, rest)) => format!("{product} hedge ({rest}"),
            None => format!("{agent} hedge"),
        };
        if let Ok(hedged) = HeaderValue::from_str(&hedged) {
            copy.headers_mut().insert(USER_AGENT, hedged);
        }
    }
    Some(copy)
}

impl<S, B> Service<Request<Body>> for HedgedReads<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.primary.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let copy = self
            .after
            .and_then(|after| Some((hedge_of(&request)?, after)));
        let first = self.primary.call(request);
        let Some((copy, after)) = copy else {
            return Box::pin(async move { first.await.map_err(Into::into) });
        };
        let hedge = self.hedge.clone();
        Box::pin(async move {
            let mut first = std::pin::pin!(first);
            tokio::select! {
                answer = &mut first => return answer.map_err(Into::into),
                () = tokio::time::sleep(after) => {}
            }
            debug!(uri = %copy.uri(), "a read unanswered past the hedge bound: hedged");
            let mut second = std::pin::pin!(async move { hedge.oneshot(copy).await });
            tokio::select! {
                answer = &mut first => match answer {
                    Ok(response) => Ok(response),
                    Err(error) => second.await.map_err(Into::into).or(Err(error.into())),
                },
                answer = &mut second => match answer {
                    Ok(response) => Ok(response),
                    Err(_) => first.await.map_err(Into::into),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A service answering after the delay `delays` gives each call in turn (`None`:
    /// never), recording the User-Agent of each request.
    #[derive(Clone)]
    struct Delayed {
        delays: Arc<Mutex<Vec<Option<Duration>>>>,
        agents: Arc<Mutex<Vec<String>>>,
        name: &'static str,
    }

    impl Service<Request<Body>> for Delayed {
        type Response = Response<&'static str>;
        type Error = BoxError;
        type Future = BoxFuture<'static, Result<Response<&'static str>, BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let delay = self.delays.lock().unwrap().remove(0);
            let agent = request.headers()[USER_AGENT].to_str().unwrap().to_owned();
            self.agents.lock().unwrap().push(agent);
            let name = self.name;
            Box::pin(async move {
                match delay {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => std::future::pending().await,
                }
                Ok(Response::new(name))
            })
        }
    }

    fn service(name: &'static str, delays: &[Option<Duration>]) -> Delayed {
        Delayed {
            delays: Arc::new(Mutex::new(delays.to_vec())),
            agents: Arc::default(),
            name,
        }
    }

    fn request(method: Method) -> Request<Body> {
        Request::builder()
            .method(method)
            .uri("https://api/apis/networking.k8s.io/v1/networkpolicies?watch=true")
            .header(USER_AGENT, "namespace-baseline-reconciler/0.1.0 (soak-1)")
            .body(Body::empty())
            .unwrap()
    }

    const AFTER: Duration = Duration::from_millis(200);
    const MS: fn(u64) -> Option<Duration> = |ms| Some(Duration::from_millis(ms));

    #[tokio::test(start_paused = true)]
    async fn a_stalled_read_takes_the_hedges_answer() {
        let (primary, hedge) = (service("first", &[None]), service("hedge", &[MS(5)]));
        let mut reads = HedgedReads::new(primary.clone(), hedge.clone(), Some(AFTER));
        let started = tokio::time::Instant::now();
        let answer = reads
            .ready()
            .await
            .unwrap()
            .call(request(Method::GET))
            .await;
        assert_eq!(*answer.unwrap().body(), "hedge");
        assert_eq!(started.elapsed(), Duration::from_millis(205));
        assert_eq!(
            *hedge.agents.lock().unwrap(),
            ["namespace-baseline-reconciler/0.1.0 hedge (soak-1)"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_answered_within_the_bound_and_a_write_are_never_hedged() {
        for method in [Method::GET, Method::PATCH] {
            let delay = if method == Method::GET { 199 } else { 3_000 };
            let (primary, hedge) = (service("first", &[MS(delay)]), service("hedge", &[]));
            let mut reads = HedgedReads::new(primary, hedge.clone(), Some(AFTER));
            let answer = reads.ready().await.unwrap().call(request(method)).await;
            assert_eq!(*answer.unwrap().body(), "first");
            assert!(hedge.agents.lock().unwrap().is_empty());
        }
    }
}
