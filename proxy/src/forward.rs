//! The last stages shared by every path: pick an endpoint (retries and timeouts around it in
//! `attempts.rs`), send the request over the pool (or an upgraded connection), record the outcome
//! with the balancer, clean the response.

use std::sync::Arc;

use http::{header, request::Parts, uri, Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use crate::{
    addr::EndpointAddr,
    app::Shared,
    attempts,
    balance::EndpointState,
    discovery::index::ServiceTarget,
    error::ProxyError,
    http::{
        body::ProxyBody,
        ext_connect,
        headers::{join_cookies, marked_to_tunnel, strip_hop_by_hop, wants_upgrade},
        pool::{Conn, EndpointPool, UpstreamProto},
        trailers::Cleaned,
    },
    metrics::RouteMetrics,
    model::AppProtocol,
    resilience::policy::RoutePolicy,
    transport::reset::ResetHandle,
};

/// Balances over `svc`'s endpoints and forwards under `route`'s timeouts and retries
/// ([`attempts::run`]); an upgrade goes once, to one endpoint.
pub async fn to_service(
    shared: &Shared,
    svc: &ServiceTarget,
    route: &RoutePolicy,
    metrics: Option<&RouteMetrics>,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    let proto = match svc.service.app_protocol {
        Some(AppProtocol::H2c | AppProtocol::Grpc) => UpstreamProto::H2,
        Some(AppProtocol::Http) => UpstreamProto::Http1,
        _ => same_as(parts.version),
    };
    let upgrade = prepare(&mut parts, proto)?;
    if !upgrade {
        return attempts::run(shared, svc, route, metrics, proto, parts, body).await;
    }
    let ep = svc
        .endpoints
        .pick()
        .ok_or_else(|| ProxyError::NoEndpoints(svc.name.clone()))?;
    let pool = shared.pools.get(ep.addr());
    send(&pool, Some(ep), None, parts, body, true).await
}

/// The upstream protocol that keeps the downstream one.
pub fn same_as(v: Version) -> UpstreamProto {
    if v == Version::HTTP_2 {
        UpstreamProto::H2
    } else {
        UpstreamProto::Http1
    }
}

/// Sends one request to one address (passthrough and inbound: no balancing).
pub async fn to_endpoint(
    shared: &Shared,
    addr: EndpointAddr,
    proto: UpstreamProto,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    let upgrade = prepare(&mut parts, proto)?;
    let pool = shared.pools.get(addr);
    let conn = if upgrade {
        None
    } else {
        Some(pool.acquire(proto).await?)
    };
    let mut resp = send(&pool, None, conn, parts, body, upgrade).await?;
    shared.access_log.note_upstream(&mut resp, addr.0);
    Ok(resp)
}

/// Header hygiene and request target for the upstream; returns whether this is an upgrade (or
/// a CONNECT, from either HTTP version: both become a tunnel on a 2xx/101 answer).
pub(crate) fn prepare(parts: &mut Parts, proto: UpstreamProto) -> Result<bool, ProxyError> {
    let upgrade = marked_to_tunnel(parts)
        && (parts.method == Method::CONNECT
            || (parts.version != Version::HTTP_2 || ext_connect::is_extended(parts))
                && wants_upgrade(&parts.headers));
    // An upgrade goes out over HTTP/1.1 (`EndpointPool::send_upgrade`) whatever the service
    // speaks, so it needs HTTP/1.1's target: origin-form with Host, not h2's absolute form
    // (CONNECT keeps its authority-form target).
    let proto = if upgrade { UpstreamProto::Http1 } else { proto };
    strip_hop_by_hop(&mut parts.headers, upgrade, proto == UpstreamProto::H2);
    set_target(parts, proto)?;
    Ok(upgrade)
}

/// Sends a prepared request, feeding the balancer the time to the response head.
pub(crate) async fn send(
    pool: &Arc<EndpointPool>,
    state: Option<&Arc<EndpointState>>,
    conn: Option<Conn>,
    parts: Box<Parts>,
    body: ProxyBody,
    upgrade: bool,
) -> Result<Response<ProxyBody>, ProxyError> {
    let inflight = state.map(|s| s.start());
    let started = Instant::now();
    let result = exchange(pool, state, conn, parts, body, upgrade).await;
    if let Some(f) = inflight {
        f.complete_since(&result, started);
    }
    result
}

/// [`send`] for a caller that holds the request's [`InFlight`](crate::balance::InFlight)
/// itself (`attempts.rs`: a deadline that cuts the exchange short must still reach the
/// breaker); `state` only hears whether the connection worked.
pub(crate) async fn exchange(
    pool: &Arc<EndpointPool>,
    state: Option<&Arc<EndpointState>>,
    conn: Option<Conn>,
    parts: Box<Parts>,
    body: ProxyBody,
    upgrade: bool,
) -> Result<Response<ProxyBody>, ProxyError> {
    let result = match conn {
        Some(conn) if !upgrade => {
            // Trailers lose what they may not carry (a route's names too, when `attempts.rs`
            // wrapped the body first).
            let body = Cleaned::wrap(body, None);
            pool.send(conn, parts, body).await
        }
        _ => Box::pin(upgrade_and_forward(pool, parts, body)).await,
    };
    if let Some(s) = state {
        match &result {
            Err(ProxyError::Connect { .. }) => s.connect_failed(),
            Ok(_) => s.connect_succeeded(),
            Err(_) => {}
        }
    }
    let mut resp = result?;
    // The downstream connection has its own version; hyper frames the response for it.
    *resp.version_mut() = Version::HTTP_11;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        strip_hop_by_hop(resp.headers_mut(), false, false);
    }
    if resp.status() == StatusCode::NO_CONTENT {
        // RFC 9110 §8.6: never on a 204. An upstream's would reach the client, which may wait
        // for that many body bytes.
        resp.headers_mut().remove(header::CONTENT_LENGTH);
    }
    Ok(resp)
}

/// Rewrites the request target for the upstream protocol: origin-form for HTTP/1.1 (Host kept),
/// absolute form for HTTP/2 (`:authority` from Host). An HTTP/2 request going on as HTTP/1.1 has
/// its `Cookie` fields joined into one.
fn set_target(parts: &mut Parts, proto: UpstreamProto) -> Result<(), ProxyError> {
    match proto {
        UpstreamProto::Http1 => {
            if parts.version == Version::HTTP_2 {
                join_cookies(&mut parts.headers);
            }
            if parts.uri.authority().is_some() {
                if !parts.headers.contains_key(header::HOST) {
                    if let Some(a) = parts.uri.authority() {
                        let v = header::HeaderValue::from_str(a.as_str())
                            .map_err(|_| ProxyError::BadRequest("invalid authority"))?;
                        parts.headers.insert(header::HOST, v);
                    }
                }
                // CONNECT's target is the authority alone (RFC 9112 §3.2.3).
                if parts.method != Method::CONNECT {
                    let pq = parts
                        .uri
                        .path_and_query()
                        .cloned()
                        .unwrap_or_else(|| uri::PathAndQuery::from_static("/"));
                    parts.uri = Uri::from(pq);
                }
            }
            // Always HTTP/1.1 upstream, whatever the client spoke: an HTTP/1.0 request sent on as
            // 1.0 makes the upstream close the connection after answering, so every request
            // from a 1.0 client (ab, health checkers) paid a fresh upstream connection.
            if !names_no_host(parts) {
                parts.version = Version::HTTP_11;
            }
        }
        UpstreamProto::H2 => {
            if names_no_host(parts) {
                return Ok(());
            }
            if parts.uri.authority().is_none() {
                let host = parts
                    .headers
                    .get(header::HOST)
                    .ok_or(ProxyError::BadRequest("missing Host"))?;
                let authority = uri::Authority::try_from(host.as_bytes())
                    .map_err(|_| ProxyError::BadRequest("invalid Host"))?;
                let mut p = uri::Parts::default();
                p.scheme = Some(uri::Scheme::HTTP);
                p.authority = Some(authority);
                p.path_and_query = parts
                    .uri
                    .path_and_query()
                    .cloned()
                    .or(Some(uri::PathAndQuery::from_static("/")));
                parts.uri = Uri::from_parts(p)
                    .map_err(|_| ProxyError::BadRequest("invalid request target"))?;
            } else if parts.uri.scheme().is_none() {
                let mut p = std::mem::take(&mut parts.uri).into_parts();
                p.scheme = Some(uri::Scheme::HTTP);
                parts.uri = Uri::from_parts(p)
                    .map_err(|_| ProxyError::BadRequest("invalid request target"))?;
            }
            parts.headers.remove(header::HOST);
            parts.version = Version::HTTP_2;
        }
    }
    Ok(())
}

/// An HTTP/1.0 request with no Host and no authority (HTTP/1.1 and HTTP/2 ones were refused):
/// left at version 1.0, so that the pool, which knows the endpoint, names it as the host
/// HTTP/1.1 and HTTP/2 require (`EndpointPool::send`).
fn names_no_host(parts: &Parts) -> bool {
    parts.version == Version::HTTP_10
        && parts.uri.authority().is_none()
        && !parts.headers.contains_key(header::HOST)
}

/// Forwards a protocol-switch request or a CONNECT; on 101 (a CONNECT's 2xx) the two upgraded
/// connections are spliced.
async fn upgrade_and_forward(
    pool: &EndpointPool,
    parts: Box<Parts>,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    let mut parts = *parts;
    let downstream = parts
        .extensions
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or(ProxyError::BadRequest(
            "upgrade on a connection that cannot switch protocols",
        ))?;
    let carried = parts.extensions.remove::<crate::idle::Tunnel>();
    let drain = parts.extensions.remove::<crate::drain::Drain>();
    let reset_down = parts.extensions.remove::<ResetHandle>();
    let connect = parts.method == Method::CONNECT;
    let extended = parts.extensions.remove::<ext_connect::ExtendedConnect>();
    let req = Request::from_parts(parts, body);
    let mut resp = pool.send_upgrade(req).await?;
    let reset_up = resp.extensions_mut().remove::<ResetHandle>();
    let tunnel = if connect {
        resp.status().is_success()
    } else {
        resp.status() == StatusCode::SWITCHING_PROTOCOLS
    };
    if let Some(x) = &extended {
        ext_connect::answer(x, &mut resp).map_err(|e| pool.refused_answer(e))?;
    }
    if tunnel {
        if connect {
            // A 2xx to CONNECT has no body whatever it says (RFC 9110 §9.3.6), and hyper's
            // server refuses to write one that claims a length.
            resp.headers_mut().remove(header::CONTENT_LENGTH);
            resp.headers_mut().remove(header::TRANSFER_ENCODING);
        }
        let upstream = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            // Shutdown waits for the tunnel to end, as for a request in flight.
            let _drain = drain;
            let (idle, route) = carried.map_or((None, None), |t| (t.idle, t.route));
            let metrics = route.as_deref().map(crate::metrics::RouteMetrics::tunnels);
            match tokio::try_join!(downstream, upstream) {
                Ok((d, u)) => {
                    if let Some(m) = metrics {
                        m.opened.increment(1);
                    }
                    let (mut d, mut u) = (TokioIo::new(d), TokioIo::new(u));
                    let spliced = crate::idle::splice(&mut d, &mut u, metrics, idle).await;
                    drop((d, u));
                    ended_splice(spliced.how, [reset_down, reset_up]);
                }
                Err(e) => tracing::debug!(error = %e, "upgrade failed"),
            }
        });
    }
    Ok(resp.map(ProxyBody::Incoming))
}

/// After a splice, whose sides are closed by now: when one side failed (a reset, mostly) the
/// other is reset too, as the TCP relay does, since a FIN would tell it the stream ended
/// cleanly. The handles' drop is the sockets' last close.
fn ended_splice(spliced: crate::idle::Spliced, handles: [Option<ResetHandle>; 2]) {
    if let crate::idle::Spliced::Failed(e) = spliced {
        tracing::debug!(error = %e, "upgraded connection failed; resetting both sides");
        handles
            .iter()
            .flatten()
            .for_each(ResetHandle::reset_on_close);
    }
}
