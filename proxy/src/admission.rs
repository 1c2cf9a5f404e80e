//! Admission: whether a request may be forwarded to a service at all, checked in a fixed order
//! before it is: route rate limit → service rate limit → route circuit breaker → the service's
//! concurrency slot → (balanced paths) a ready endpoint within the failfast wait.
//!
//! Each refusal is a `ProxyError` that `error::rescue` turns into the answer (429 with
//! `Retry-After`, 503 naming the cause). A route and service with no policy cost a few `None`
//! checks.

use std::time::Duration;

use http::{HeaderMap, Response};
use tokio::time::Instant;

use crate::{
    addr::ClientAddr,
    discovery::index::ServiceTarget,
    error::ProxyError,
    http::body::ProxyBody,
    metrics::RouteMetrics,
    resilience::{breaker, limit::Permit, outcome, policy::RoutePolicy, rate_limit::RateLimiter},
};

/// How often a request waiting for an ejected endpoint looks again while a probe is in flight.
const RECHECK: Duration = Duration::from_millis(10);

/// What an admitted request holds until its response: the route breaker's ticket and the
/// service's concurrency slot.
#[derive(Debug, Default)]
#[must_use = "pass the response through `finish`"]
pub struct Admitted {
    route: Option<breaker::Admission>,
    permit: Option<Permit>,
}

impl Admitted {
    /// Tells the route breaker how it went and ties the concurrency slot to the response body,
    /// so it is held until the body is read to the end (or dropped).
    pub fn finish(
        self,
        result: Result<Response<ProxyBody>, ProxyError>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if let Some(a) = self.route {
            if let Some(failed) = outcome::is_failure(&result) {
                a.record(!failed);
            }
        }
        match (self.permit, result) {
            (Some(p), Ok(resp)) => Ok(resp.map(|b| ProxyBody::Held(Box::new(b), p))),
            (_, result) => result,
        }
    }
}

/// Admits a request for `svc` on `route` (a mesh or gateway route, or the service's default),
/// counting refusals on `metrics`; on the balanced paths, also waits up to the service's
/// failfast time while every endpoint is ejected.
pub async fn admit(
    svc: &ServiceTarget,
    route: &RoutePolicy,
    metrics: Option<&RouteMetrics>,
    headers: &HeaderMap,
    client: ClientAddr,
) -> Result<Admitted, ProxyError> {
    check_rate(route.rate_limit.as_deref(), metrics, headers, client)?;
    check_rate(svc.policy.rate_limit.as_deref(), metrics, headers, client)?;
    let route_ticket = match &route.breaker {
        Some(b) => Some(b.try_admit().ok_or(ProxyError::RouteCircuitOpen)?),
        None => None,
    };
    let permit = acquire(svc, metrics).await?;
    if svc.policy.breaker.is_some() {
        wait_for_endpoint(svc).await?;
    }
    Ok(Admitted {
        route: route_ticket,
        permit,
    })
}

/// Admits a request arriving for the local `svc` (inbound): its rate limit and concurrency limit.
pub async fn admit_inbound(
    svc: &ServiceTarget,
    metrics: &RouteMetrics,
    headers: &HeaderMap,
    client: ClientAddr,
) -> Result<Admitted, ProxyError> {
    check_rate(
        svc.policy.rate_limit.as_deref(),
        Some(metrics),
        headers,
        client,
    )?;
    let permit = acquire(svc, Some(metrics)).await?;
    Ok(Admitted {
        route: None,
        permit,
    })
}

fn check_rate(
    limiter: Option<&RateLimiter>,
    metrics: Option<&RouteMetrics>,
    headers: &HeaderMap,
    client: ClientAddr,
) -> Result<(), ProxyError> {
    let Some(limiter) = limiter else {
        return Ok(());
    };
    // No connection carries a verified identity before mTLS: `key: identity` falls back to the
    // address (see `Peer`'s `From<ClientAddr>`, the hook for it).
    limiter.check(headers, client).map_err(|wait| {
        if let Some(m) = metrics {
            m.rate_limited();
        }
        ProxyError::RateLimited(wait)
    })
}

async fn acquire(
    svc: &ServiceTarget,
    metrics: Option<&RouteMetrics>,
) -> Result<Option<Permit>, ProxyError> {
    let Some(limit) = &svc.policy.limit else {
        return Ok(None);
    };
    match limit.acquire().await {
        Ok(p) => Ok(Some(p)),
        Err(shed) => {
            if let Some(m) = metrics {
                m.shed(shed);
            }
            Err(ProxyError::Shed(shed))
        }
    }
}

/// While every ready endpoint is ejected, waits for the first ejection to end, for at most the
/// service's failfast time; then answers 503 `no-ready-endpoints`.
async fn wait_for_endpoint(svc: &ServiceTarget) -> Result<(), ProxyError> {
    let Some(mut left) = svc.endpoints.ejected_for() else {
        return Ok(());
    };
    let deadline = Instant::now() + svc.policy.failfast;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(ProxyError::NoReadyEndpoints(svc.name.clone()));
        }
        // A half-open endpoint's probe has no known end: look again shortly.
        let nap = if left.is_zero() { RECHECK } else { left };
        tokio::time::sleep(nap.min(deadline - now)).await;
        match svc.endpoints.ejected_for() {
            None => return Ok(()),
            Some(d) => left = d,
        }
    }
}
