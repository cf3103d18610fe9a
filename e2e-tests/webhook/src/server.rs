//! The HTTPS side: hyper over rustls, HTTP/1.1, one route per job as the policy-server has
//! them: `POST /validate/<unique name>` evaluates an AdmissionReview, `GET /readiness`
//! answers once serving. Anything else is a 404 or 405 with a JSON message; a body larger
//! than the API server ever sends is refused.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::policy::Policy;

/// The policy-server's readiness probe path.
pub const READINESS_PATH: &str = "/readiness";
/// The largest AdmissionReview accepted (the API server's own request limit is 3 MiB; a
/// review holds the object twice).
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// Serves `policy` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, policy: Arc<Policy>) {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                tokio::spawn(connection(tcp, acceptor.clone(), Arc::clone(&policy)));
            }
            Err(error) => {
                eprintln!("accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn connection(tcp: TcpStream, acceptor: TlsAcceptor, policy: Arc<Policy>) {
    let _ = tcp.set_nodelay(true);
    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            eprintln!("TLS handshake failed: {error}");
            return;
        }
        Err(_) => return,
    };
    let service = service_fn(move |request| route(Arc::clone(&policy), request));
    if let Err(error) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await
    {
        eprintln!("connection ended: {error}");
    }
}

async fn route(
    policy: Arc<Policy>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let reply = match (&method, path.as_str()) {
        (&Method::GET, READINESS_PATH) => (StatusCode::OK, json!({"status": "ready"})),
        (&Method::POST, path) if path == policy.path() => {
            match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(body) => {
                    let answer = policy.answer(&body.to_bytes()).await;
                    println!("{}", answer.log);
                    (
                        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_REQUEST),
                        answer.body,
                    )
                }
                Err(error) => (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    message(413, &format!("cannot read the body: {error}")),
                ),
            }
        }
        (_, path) if path == policy.path() || path == READINESS_PATH => (
            StatusCode::METHOD_NOT_ALLOWED,
            message(405, &format!("{method} is not served at {path}")),
        ),
        (_, path) => (
            StatusCode::NOT_FOUND,
            message(
                404,
                &format!(
                    "no policy at {path}: this stand-in serves {}",
                    policy.path()
                ),
            ),
        ),
    };
    Ok(json_response(reply.0, &reply.1))
}

fn message(status: u16, text: &str) -> Value {
    json!({"status": status, "message": text})
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
