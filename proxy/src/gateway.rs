//! The gateway path: explicit clients at the edge → Host/path routes → backend services.

use std::sync::Arc;

use http::{request::Parts, HeaderValue, Response};

use crate::{
    app::{ConnInfo, Shared},
    dispatch,
    error::ProxyError,
    http::{body::ProxyBody, headers},
    metrics::RouteMetrics,
};

/// Handles one gateway request; returns the metrics handle it counted on. `forwarded_for` is
/// the client as X-Forwarded-For writes it, if the connection made it already.
pub async fn request(
    shared: &Shared,
    conn: &ConnInfo,
    forwarded_for: Option<&HeaderValue>,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> (Arc<RouteMetrics>, Result<Response<ProxyBody>, ProxyError>) {
    let snap = shared.snapshot();
    if let Err(e) = headers::validate_request(&parts) {
        snap.gateway_unmatched.request();
        return (snap.gateway_unmatched.clone(), Err(e));
    }
    match forwarded_for {
        Some(client) => headers::add_forwarded(&mut parts.headers, client, "http"),
        None => {
            let client = headers::forwarded_for(conn.client.0.ip());
            headers::add_forwarded(&mut parts.headers, &client, "http");
        }
    }
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
