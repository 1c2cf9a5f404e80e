//! The stream idle timeout around a forwarded request: while no body frame moves in either
//! direction (the client's request body, the upstream's response body) for the timeout, the
//! stream is cut. Before the response head that is a `504 idle-timeout` (gRPC:
//! DEADLINE_EXCEEDED); after it the response body ends with an error, which hyper turns into
//! RST_STREAM (HTTP/2) or a closed connection (HTTP/1), counted as
//! `weir_proxy_errors_total{error="idle-timeout"}`.
//!
//! One [`IdleClock`] per stream, touched by both bodies; one timer at a time: the wait for the
//! head, then the response body's. A stream without an idle timeout is not wrapped at all.

use std::{future::Future, sync::Arc, time::Duration};

use http::{Response, StatusCode};
use http_body::Body as _;

use crate::{
    discovery::index::ServiceTarget,
    error::ProxyError,
    http::body::{ClientBody, ProxyBody},
    metrics::RouteMetrics,
    resilience::{
        idle::{resolve, IdleClock},
        policy::RoutePolicy,
        timeout::TimeoutKind,
    },
};

mod body;
mod splice;
mod watchdog;

pub use body::{IdleBody, Touched};
pub use splice::{for_upgrade, splice, Relayed, Spliced, Tunnel};

/// The idle timeout of a request on `route` to `svc` (the backend it goes to): the route's
/// `timeouts.idle`, else the service's `policy.idleTimeout`, else five minutes.
pub fn timeout_for(route: &RoutePolicy, svc: &ServiceTarget) -> Option<Duration> {
    let own = route.source.timeouts.as_ref().and_then(|t| t.idle);
    resolve(own, svc.policy.source.idle_timeout)
}

/// Forwards with `send` under the idle timeout `idle` (none: `send` as is); `metrics` counts a
/// stream cut after its head.
pub async fn watch<F, Fut>(
    idle: Option<Duration>,
    metrics: Option<&Arc<RouteMetrics>>,
    body: ProxyBody,
    send: F,
) -> Result<Response<ProxyBody>, ProxyError>
where
    F: FnOnce(ProxyBody) -> Fut,
    Fut: Future<Output = Result<Response<ProxyBody>, ProxyError>>,
{
    let Some(timeout) = idle else {
        return send(body).await;
    };
    let client = match streaming(body) {
        Ok(client) => client,
        Err(body) => {
            // Nothing moves before the head but the head itself: the wait is a plain timeout,
            // and the response body's clock starts when the head arrives. The common small
            // exchange pays a slot in the thread's deadline table and no allocation.
            let resp = watchdog::timeout(timeout, send(body))
                .await
                .map_err(|_| ProxyError::Timeout(TimeoutKind::Idle))??;
            return Ok(watched(resp, || Arc::new(IdleClock::new(timeout)), metrics));
        }
    };
    let clock = Arc::new(IdleClock::new(timeout));
    // The client's body touches the clock on every frame.
    let body = ProxyBody::Touched(Box::new(Touched::new(client, clock.clone())));
    tokio::select! {
        biased;
        result = send(body) => result.map(|resp| watched(resp, || clock, metrics)),
        () = clock.expired() => Err(ProxyError::Timeout(TimeoutKind::Idle)),
    }
}

/// The client's body if it still streams (its frames count as the stream moving); any other
/// body back as it is: an empty one, or one the proxy made itself, cannot stall.
fn streaming(body: ProxyBody) -> Result<ClientBody, ProxyBody> {
    if body.is_end_stream() {
        return Err(body);
    }
    match body {
        ProxyBody::Incoming(b) => Ok(ClientBody::Plain(b)),
        ProxyBody::Tee(t) => Ok(ClientBody::Teed(t)),
        other => Err(other),
    }
}

/// The response with its body under the idle clock, unless nothing is left to wait for: an
/// upgrade's body is never read (the spliced connection is on its own), and a body already
/// here whole cannot stall.
fn watched(
    resp: Response<ProxyBody>,
    clock: impl FnOnce() -> Arc<IdleClock>,
    metrics: Option<&Arc<RouteMetrics>>,
) -> Response<ProxyBody> {
    let whole = matches!(resp.body(), ProxyBody::Empty | ProxyBody::Full(_));
    if whole || resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return resp;
    }
    let clock = clock();
    resp.map(|b| ProxyBody::Idle(Box::pin(IdleBody::new(b, clock, metrics.cloned()))))
}

#[cfg(test)]
mod tests;
