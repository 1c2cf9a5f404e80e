//! The admin listener: `/metrics`, `/ready`, `/live`, `/config`, and `POST /shutdown` for
//! loopback clients.

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use http::{header, Method, Request, Response, StatusCode};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, sync::watch};

use crate::{app::Shared, http::body::ProxyBody};

/// Serves the admin endpoints until the task is aborted.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    metrics: PrometheusHandle,
    shutdown: watch::Sender<bool>,
) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let (shared, metrics, shutdown) = (shared.clone(), metrics.clone(), shutdown.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let resp = answer(&req, peer, &shared, &metrics, &shutdown);
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<bytes::Bytes>,
) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

fn answer(
    req: &Request<Incoming>,
    peer: SocketAddr,
    shared: &Shared,
    metrics: &PrometheusHandle,
    shutdown: &watch::Sender<bool>,
) -> Response<ProxyBody> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        (&Method::GET, "/live") => text(StatusCode::OK, PLAIN, "live\n"),
        (&Method::GET, "/ready") if shared.is_ready() => text(StatusCode::OK, PLAIN, "ready\n"),
        (&Method::GET, "/ready") => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, "draining\n"),
        (&Method::GET, "/config") => {
            let snap = shared.snapshot();
            let body = serde_json::json!({ "registry": &*snap.registry });
            text(StatusCode::OK, "application/json", body.to_string())
        }
        (&Method::POST, "/shutdown") if peer.ip().is_loopback() => {
            let _ = shutdown.send(true);
            text(StatusCode::OK, PLAIN, "shutting down\n")
        }
        (&Method::POST, "/shutdown") => {
            text(StatusCode::FORBIDDEN, PLAIN, "loopback clients only\n")
        }
        (_, "/metrics" | "/live" | "/ready" | "/config" | "/shutdown") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed\n",
        ),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found\n"),
    }
}
