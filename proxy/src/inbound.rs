//! The inbound path: a peer's request → the local application at the original port.

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::{
    addr::EndpointAddr,
    app::{ConnInfo, Shared},
    error::ProxyError,
    forward,
    http::{body::ProxyBody, headers},
    metrics::RouteMetrics,
};

/// Handles one inbound request; returns the metrics handle it counted on.
pub async fn request(
    shared: &Shared,
    conn: &ConnInfo,
    req: Request<Incoming>,
) -> (Arc<RouteMetrics>, Result<Response<ProxyBody>, ProxyError>) {
    let snap = shared.snapshot();
    let Some(dst) = conn.orig_dst else {
        return (snap.passthrough.clone(), Err(ProxyError::NoRoute));
    };
    let m = snap.by_endpoint(dst.0).map_or_else(
        || shared.inbound_unknown.clone(),
        |s| s.default_metrics[1].clone(),
    );
    m.request();
    let (parts, body) = req.into_parts();
    if let Err(e) = headers::validate_request(&parts) {
        return (m, Err(e));
    }
    let proto = forward::same_as(parts.version);
    (
        m.clone(),
        forward::to_endpoint(shared, EndpointAddr(dst.0), proto, parts, body).await,
    )
}
