//! The gateway path: explicit clients at the edge → Host/path routes → backend services.

use std::sync::Arc;

use http::{request::Parts, Response};

use crate::{
    app::{ConnInfo, Shared},
    dispatch,
    error::ProxyError,
    http::{body::ProxyBody, headers},
    metrics::RouteMetrics,
};

/// Handles one gateway request; returns the metrics handle it counted on.
pub async fn request(
    shared: &Shared,
    conn: &ConnInfo,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> (Arc<RouteMetrics>, Result<Response<ProxyBody>, ProxyError>) {
    let snap = shared.snapshot();
    if let Err(e) = headers::validate_request(&parts) {
        snap.gateway_unmatched.request();
        return (snap.gateway_unmatched.clone(), Err(e));
    }
    headers::add_forwarded(&mut parts.headers, conn.client.0.ip(), "http");
    let routed = dispatch::route(
        shared,
        &snap,
        &snap.gateway,
        parts,
        body,
        "default",
        conn.client,
    )
    .await;
    // A routed request was counted on its route; an unrouted one still arrived.
    let metrics = routed.metrics.unwrap_or_else(|| {
        snap.gateway_unmatched.request();
        snap.gateway_unmatched.clone()
    });
    (metrics, routed.result)
}
