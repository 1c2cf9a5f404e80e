//! The gateway path: explicit clients at the edge → Host/path routes → backend services.

use std::sync::OnceLock;

use http::{request::Parts, HeaderValue};

use crate::{
    app::{ConnInfo, Shared},
    dispatch::{self, Handled},
    error::ProxyError,
    http::{body::ProxyBody, headers},
};

/// Handles one gateway request; returns the metrics handle it counted on. `forwarded_for` keeps
/// the client as X-Forwarded-For writes it, made once for the connection.
pub async fn request(
    shared: &Shared,
    conn: &ConnInfo,
    forwarded_for: &OnceLock<HeaderValue>,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> Handled {
    let snap = shared.snapshot();
    // First, so that an HTTP/2 extended CONNECT (WebSocket) is a GET with `Upgrade` below.
    if let Err(e) = headers::validate_request(&mut parts) {
        snap.gateway_unmatched.request();
        return (snap.gateway_unmatched.clone(), Err(e)).into();
    }
    // The gateway routes to services; it is no forward proxy for whoever reaches the edge.
    if parts.method == http::Method::CONNECT {
        snap.gateway_unmatched.request();
        return (
            snap.gateway_unmatched.clone(),
            Err(ProxyError::ConnectRefused),
        )
            .into();
    }
    let client = forwarded_for.get_or_init(|| headers::forwarded_for(conn.client.0.ip()));
    headers::add_forwarded(&mut parts.headers, client, "http");
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
    Handled {
        metrics,
        result: routed.result,
        cors: routed.cors,
    }
}
