//! The admin listener: `/metrics` (Prometheus), `/ready` (registry loaded and gRPC serving) and
//! `/live`.

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::proxies::Proxies;

/// What the admin endpoints read.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// True while the control plane serves gRPC with a loaded registry.
    pub ready: Arc<AtomicBool>,
    /// For the connection gauges, refreshed on each scrape.
    pub proxies: Arc<Proxies>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}

/// Serves the admin endpoints on `listener` until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, state: AdminState) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: keep serving once it passes.
                tracing::warn!("admin accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let resp = answer(&req, &state);
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
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

fn answer<B>(req: &Request<B>, state: &AdminState) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            crate::metrics::refresh(&state.proxies);
            text(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                state.metrics.render(),
            )
        }
        (&Method::GET, "/live") => text(StatusCode::OK, PLAIN, "live\n"),
        (&Method::GET, "/ready") if state.ready.load(Ordering::Acquire) => {
            text(StatusCode::OK, PLAIN, "ready\n")
        }
        (&Method::GET, "/ready") => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, "not ready\n"),
        (_, "/metrics" | "/live" | "/ready") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed\n",
        ),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found\n"),
    }
}
