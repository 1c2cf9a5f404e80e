//! The admin listener: `/metrics`, `/ready`, `/live`, `/config`, `/endpoints` (live balancer
//! state) and `/breakers` (route breakers not closed), both read by `weirctl describe`, and
//! `POST /shutdown` for loopback clients.

mod breakers;

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use http::{header, Method, Request, Response, StatusCode};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, sync::watch};

use crate::{app::Shared, discovery::control::Link, http::body::ProxyBody};

/// Serves the admin endpoints until the task is aborted.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    metrics: PrometheusHandle,
    shutdown: watch::Sender<bool>,
) {
    let mut backoff = crate::transport::listen::AcceptBackoff::new("admin");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                backoff.failed(&e).await;
                continue;
            }
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

/// The admin pages; each takes either reads (`GET`, and `HEAD`, which hyper answers without
/// the body) or `POST`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Page {
    Metrics,
    Live,
    Ready,
    Config,
    Endpoints,
    Breakers,
    Shutdown,
}

impl Page {
    fn of(path: &str) -> Option<Page> {
        Some(match path {
            "/metrics" => Page::Metrics,
            "/live" => Page::Live,
            "/ready" => Page::Ready,
            "/config" => Page::Config,
            "/endpoints" => Page::Endpoints,
            "/breakers" => Page::Breakers,
            "/shutdown" => Page::Shutdown,
            _ => return None,
        })
    }

    /// The `Allow` header of a 405 on this page.
    fn allow(self) -> &'static str {
        match self {
            Page::Shutdown => "POST",
            _ => "GET, HEAD",
        }
    }

    fn takes(self, method: &Method) -> bool {
        match self {
            Page::Shutdown => method == Method::POST,
            _ => method == Method::GET || method == Method::HEAD,
        }
    }
}

fn answer(
    req: &Request<Incoming>,
    peer: SocketAddr,
    shared: &Shared,
    metrics: &PrometheusHandle,
    shutdown: &watch::Sender<bool>,
) -> Response<ProxyBody> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    let Some(page) = Page::of(req.uri().path()) else {
        return text(StatusCode::NOT_FOUND, PLAIN, "not found\n");
    };
    if !page.takes(req.method()) {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed\n",
        );
        r.headers_mut().insert(
            header::ALLOW,
            header::HeaderValue::from_static(page.allow()),
        );
        return r;
    }
    match page {
        Page::Metrics => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        Page::Live => text(StatusCode::OK, PLAIN, "live\n"),
        Page::Ready => {
            let (status, body) = readiness(shared);
            text(status, PLAIN, body)
        }
        Page::Config => {
            let snap = shared.snapshot();
            let control = shared.control().map(|c| c.status_json());
            let body = serde_json::json!({ "registry": &*snap.registry, "control": control });
            text(StatusCode::OK, "application/json", body.to_string())
        }
        Page::Endpoints => text(
            StatusCode::OK,
            "application/json",
            endpoints(shared).to_string(),
        ),
        Page::Breakers => text(
            StatusCode::OK,
            "application/json",
            breakers::route_breakers(shared).to_string(),
        ),
        Page::Shutdown if may_shut_down(peer) => {
            let _ = shutdown.send(true);
            text(StatusCode::OK, PLAIN, "shutting down\n")
        }
        Page::Shutdown => text(StatusCode::FORBIDDEN, PLAIN, "loopback clients only\n"),
    }
}

/// Ready unless draining or, with a gateway in control-plane mode, before the gateway routes'
/// first answer. A control plane that went away keeps it ready: the last known state serves.
fn readiness(shared: &Shared) -> (StatusCode, &'static str) {
    if !shared.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n");
    }
    let Some(control) = shared.control() else {
        return (StatusCode::OK, "ready\n");
    };
    if control.gateway_answered() == Some(false) {
        let body = "waiting for the control plane's first answer for the gateway routes\n";
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    match control.link() {
        Link::Disconnected => (
            StatusCode::OK,
            "ready; control plane unreachable, serving the last known state\n",
        ),
        Link::Connecting | Link::Connected => (StatusCode::OK, "ready\n"),
    }
}

/// One object per endpoint of every service in the current snapshot.
fn endpoints(shared: &Shared) -> serde_json::Value {
    let snap = shared.snapshot();
    let list: Vec<_> = snap
        .services()
        .iter()
        .flat_map(|svc| {
            svc.endpoints.endpoints().iter().map(move |e| {
                let mut o = serde_json::json!({
                    "service": svc.name,
                    "address": e.addr().0.to_string(),
                    "state": endpoint_state(e),
                    "in_flight": e.pending(),
                    "latency_ewma_ms": e.rtt_estimate().as_secs_f64() * 1000.0,
                });
                if let Some(b) = e.breaker().filter(|b| b.ejections() > 0) {
                    // Until the probe (0 once half-open), and how many times in a row.
                    let left = b.ejected_for().unwrap_or_default();
                    o["ejected_for_ms"] =
                        u64::try_from(left.as_millis()).unwrap_or(u64::MAX).into();
                    o["ejections"] = b.ejections().into();
                }
                o
            })
        })
        .collect();
    serde_json::Value::Array(list)
}

/// `down` (not ready, or backing off after connect failures), `ejected` (its circuit breaker is
/// open), `probing` (the ejection ended; waiting for a probe to succeed), else `ready`.
fn endpoint_state(e: &crate::balance::EndpointState) -> &'static str {
    use crate::resilience::breaker::State;
    if !e.is_ready() {
        return "down";
    }
    match e.breaker().map(|b| b.state()) {
        Some(State::Open) => "ejected",
        Some(State::HalfOpen) => "probing",
        _ if e.down_for().is_some() => "down",
        _ => "ready",
    }
}

/// Only a loopback client may start the drain; on a dual-stack listener (`[::]:4191`) an IPv4
/// client arrives as `::ffff:127.0.0.1`, which is loopback too.
fn may_shut_down(peer: SocketAddr) -> bool {
    peer.ip().to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::may_shut_down;

    #[test]
    fn loopback_in_any_spelling_may_shut_down_and_nothing_else() {
        for ok in [
            "127.0.0.1:1",
            "127.9.9.9:1",
            "[::1]:1",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(may_shut_down(ok.parse().expect("addr")), "{ok}");
        }
        for no in [
            "10.0.0.1:1",
            "[::ffff:10.0.0.1]:1",
            "[fe80::1]:1",
            "0.0.0.0:1",
            "[::]:1",
        ] {
            assert!(!may_shut_down(no.parse().expect("addr")), "{no}");
        }
    }
}
