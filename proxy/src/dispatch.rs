//! Applies a route set to a request: select the route, run its filters in order, choose a
//! weighted backend service, forward, then run the response filters.

use std::sync::Arc;

use http::{request::Parts, HeaderMap, Response};

use crate::{
    addr::ClientAddr,
    admission,
    app::Shared,
    discovery::index::{RouteSet, Snapshot},
    error::ProxyError,
    forward,
    http::body::ProxyBody,
    metrics::RouteMetrics,
    routing::{self, RequestOutcome},
};

/// Where a routed request went, for metrics.
pub struct Routed {
    /// The handle to count the request on.
    pub metrics: Option<Arc<RouteMetrics>>,
    /// The outcome.
    pub result: Result<Response<ProxyBody>, ProxyError>,
    /// What a `CORS` filter decided an answer the proxy makes itself must carry too (an
    /// upstream's answer has it already).
    pub cors: Option<Box<HeaderMap>>,
}

/// What a direction's path did with a request: the metrics handle it counted on, the outcome,
/// and the CORS fields that go on the answer should the proxy make it (`conn::handle` turns
/// errors into answers).
pub struct Handled {
    /// The handle the request was counted on.
    pub metrics: Arc<RouteMetrics>,
    /// The outcome.
    pub result: Result<Response<ProxyBody>, ProxyError>,
    /// For a proxy-made answer to a request a `CORS` filter marked.
    pub cors: Option<Box<HeaderMap>>,
}

impl From<(Arc<RouteMetrics>, Result<Response<ProxyBody>, ProxyError>)> for Handled {
    fn from(
        (metrics, result): (Arc<RouteMetrics>, Result<Response<ProxyBody>, ProxyError>),
    ) -> Self {
        Handled {
            metrics,
            result,
            cors: None,
        }
    }
}

/// Routes through `set`; `default_ns` resolves backendRefs without a namespace; `client` keys
/// rate limits by client address.
pub async fn route(
    shared: &Shared,
    snap: &Snapshot,
    set: &RouteSet,
    mut parts: Box<Parts>,
    body: ProxyBody,
    default_ns: &str,
    client: ClientAddr,
) -> Routed {
    if let Err(why) = routing::normalize_path(&mut parts.uri, shared.config.path_normalization) {
        return Routed {
            metrics: None,
            result: Err(ProxyError::BadRequest(why)),
            cors: None,
        };
    }
    let Some(sel) = set.table.select(&parts.method, &parts.uri, &parts.headers) else {
        return Routed {
            metrics: None,
            result: Err(ProxyError::NoRoute),
            cors: None,
        };
    };
    let route_idx = sel.index;
    let route = sel.route;
    // Filters run before a backend is needed: a redirect-only route has no backendRefs at all.
    let picked = set.table.pick_backend(route_idx, rand::random::<u32>());
    let backend_idx = picked
        .and_then(|b| route.backend_refs.iter().position(|r| std::ptr::eq(r, b)))
        .unwrap_or(0);
    let metrics = set.metrics(route_idx, backend_idx).cloned();
    if let Some(m) = &metrics {
        m.request();
    }
    let (delay, mirrored, cors) =
        match routing::apply_request_filters(&sel, &mut parts, || rand::random::<f64>() * 100.0) {
            RequestOutcome::Respond(resp) => {
                return Routed {
                    metrics,
                    result: Ok(resp.map(|()| ProxyBody::empty())),
                    cors: None,
                };
            }
            RequestOutcome::Continue {
                delay,
                mirrors,
                cors,
            } => (delay, !mirrors.is_empty(), cors),
        };
    let Some(backend) = picked else {
        return Routed {
            metrics,
            result: Err(ProxyError::NoBackend),
            cors,
        };
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let Some(svc) = set
        .backend_service(route_idx, backend_idx)
        .and_then(|i| snap.service_at(i))
    else {
        let ns = backend.namespace.as_deref().unwrap_or(default_ns);
        return Routed {
            metrics,
            result: Err(ProxyError::UnknownService(format!("{}.{ns}", backend.name))),
            cors,
        };
    };
    let policy = set.policy(route_idx).unwrap_or(&svc.default_route);
    let admitted =
        match admission::admit(svc, policy, metrics.as_deref(), &parts.headers, client).await {
            Ok(a) => a,
            Err(e) => {
                return Routed {
                    metrics,
                    result: Err(e),
                    cors,
                }
            }
        };
    // Only an admitted request is mirrored: a shadow sees the traffic its primary serves.
    let body = crate::mirror::start(
        mirrored,
        shared,
        snap,
        set,
        route_idx,
        metrics.as_ref(),
        &parts,
        body,
    );
    let idle = crate::idle::timeout_for(policy, svc);
    crate::idle::for_upgrade(&mut parts, idle, metrics.as_ref());
    let result = crate::idle::watch(idle, metrics.as_ref(), body, |body| {
        forward::to_service(shared, svc, policy, metrics.as_deref(), parts, body)
    })
    .await;
    let (result, cors) = match admitted.finish(result) {
        Ok(resp) => {
            let (mut rp, b) = resp.into_parts();
            routing::apply_response_filters(route, cors, &mut rp);
            (Ok(Response::from_parts(rp, b)), None)
        }
        Err(e) => (Err(e), cors),
    };
    Routed {
        metrics,
        result,
        cors,
    }
}
