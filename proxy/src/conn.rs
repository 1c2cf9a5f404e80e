//! One accepted connection, top to bottom: original destination, loop guard, protocol detection,
//! then the HTTP server (requests go to the path for their direction) or the TCP relay (the
//! gateway, HTTP only, answers 400 instead).

use std::{
    net::SocketAddr,
    os::fd::AsRawFd,
    sync::{Arc, OnceLock},
    time::Duration,
};

use bytes::BytesMut;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::Instant,
};
use tracing::Instrument;

use crate::{
    addr::ClientAddr,
    app::{ConnInfo, Shared},
    drain::Drain,
    error::{rescue, Audience},
    http::{front, headers::is_grpc, server},
    metrics::{self as m, Direction},
    tcp,
    transport::{
        detect::{detect, Detection},
        listen::{self, Refusal},
        orig_dst::OrigDst,
        prefixed::Prefixed,
        reset::ResetHandle,
    },
};

/// Whether forwarding to `dst` would land on one of the proxy's own listeners `own`, feeding the
/// proxy to itself. `local` is the address the connection was accepted on, i.e. an address of
/// this host: a listener on `0.0.0.0` owns `dst` only when `dst` is local, not when it is another
/// host with the same port (a peer sidecar's admin port, scraped from a meshed pod).
fn aims_at_own_listener(own: &[SocketAddr], dst: SocketAddr, local: SocketAddr) -> bool {
    own.iter().any(|l| {
        l.port() == dst.port()
            && (l.ip() == dst.ip()
                || dst.ip().is_loopback()
                || (l.ip().is_unspecified() && dst.ip() == local.ip()))
    })
}

pub async fn accept_loop(
    listener: TcpListener,
    direction: Direction,
    orig_dst: Option<Arc<dyn OrigDst>>,
    shared: Arc<Shared>,
    drain: Drain,
) {
    let mut stop = drain.clone();
    let mut backoff = listen::AcceptBackoff::new(direction.as_str());
    let mut refusals = listen::Refusals::new(direction.as_str());
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    backoff.failed(&e).await;
                    continue;
                }
            },
            () = stop.signaled() => return,
        };
        listen::tune_accepted(&stream);
        let od = match &orig_dst {
            Some(o) => match o.orig_dst(&stream) {
                Ok(d) => Some(d),
                Err(e) => {
                    refusals.refused(Refusal::NoOriginalDst, peer, Some(&e));
                    continue;
                }
            },
            None => None,
        };
        let conn = ConnInfo {
            client: ClientAddr(peer),
            orig_dst: od,
            direction,
            fd: stream.as_raw_fd(),
        };
        // Only transparent connections can loop; the gateway skips the getsockname.
        if od.is_some_and(|d| {
            stream
                .local_addr()
                .map_or(true, |local| aims_at_own_listener(&shared.own, d.0, local))
        }) {
            refusals.refused(Refusal::Loop, peer, None);
            continue;
        }
        let span = tracing::debug_span!("conn", dir = direction.as_str(), client = %peer);
        let task = serve_conn(shared.clone(), conn, stream, drain.clone()).instrument(span);
        tracing::trace!(bytes = std::mem::size_of_val(&task), "connection task");
        tokio::spawn(task);
    }
}

async fn serve_conn(shared: Arc<Shared>, conn: ConnInfo, mut stream: TcpStream, drain: Drain) {
    let opaque = conn
        .orig_dst
        .is_some_and(|d| shared.config.is_opaque_port(d.0.port()));
    let mut buf = BytesMut::new();
    let detection = if opaque {
        Detection::Opaque
    } else {
        // The gateway waits for no server-first protocol: a client's first bytes get as long
        // as the rest of its head would (a slow first packet, a retransmit).
        let deadline = match conn.direction {
            Direction::Gateway => shared.config.header_read_timeout,
            _ => shared.config.detect_timeout,
        };
        match detect(&mut stream, &mut buf, deadline).await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "detection read failed");
                return;
            }
        }
    };
    m::detection(
        conn.direction,
        if opaque {
            "opaque-port"
        } else {
            detection.as_str()
        },
    );
    let io = Prefixed::new(buf, stream);
    // The gateway speaks HTTP only: bytes that are not HTTP get a 400 rather than a silent close.
    // Boxed, as the relay is: its read buffer would otherwise sit in every connection's task,
    // idle keep-alives included (a task is as large as its largest state).
    if conn.direction == Direction::Gateway
        && matches!(detection, Detection::Tls | Detection::Opaque)
    {
        return Box::pin(refuse_not_http(io)).await;
    }
    match detection {
        Detection::Http1 | Detection::H2 => {
            // The task lives as long as the connection, idle keep-alives included, and its size
            // is its largest state: borrow the config rather than copy it into the task.
            // One pointer for each request's future to hold beside the request, so that what a
            // new future starts with is one short run of bytes (see `front::start`).
            // The third field: the gateway's X-Forwarded-For value, made by the connection's
            // first request and shared by the rest.
            // The fourth: the connection's drain, for a protocol switch's splice to hold.
            let per_request = Arc::new((shared.clone(), conn, OnceLock::new(), drain.clone()));
            let handler = move |parts, body| {
                let ctx = per_request.clone();
                async move { handle(&ctx.0, &ctx.1, &ctx.2, &ctx.3, parts, body).await }
            };
            if detection == Detection::H2 {
                // Boxed: an HTTP/2 connection is big; idle HTTP/1 keep-alives should not pay for it.
                Box::pin(server::serve_h2(io, &shared.server, drain, handler)).await
            } else {
                front::serve(io, &shared.server, drain, handler).await
            }
        }
        Detection::Closed => {}
        Detection::Tls | Detection::Opaque | Detection::Timeout => {
            Box::pin(relay_tcp(&shared, conn, io)).await;
            drop(drain);
        }
    }
}

/// The gateway's answer to bytes that are not HTTP: the 400 hyper gives a head it cannot read,
/// then the close. What the client still sends is read and dropped for a moment first, so that
/// it reads the answer before a FIN, not a reset that may destroy the answer in flight.
async fn refuse_not_http(mut io: Prefixed<TcpStream>) {
    const REFUSAL: &[u8] =
        b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
    if io.write_all(REFUSAL).await.is_err() || io.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let drain = async {
        let mut left = 64 * 1024;
        while let Ok(n @ 1..) = io.read(&mut sink).await {
            left -= n.min(left);
            if left == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

async fn relay_tcp(shared: &Shared, conn: ConnInfo, io: Prefixed<TcpStream>) {
    if conn.direction == Direction::Gateway {
        return; // silent past the header-read timeout
    }
    let Some(dst) = conn.orig_dst else { return };
    let mut snap = shared.snapshot();
    if let (Direction::Outbound, Some(control)) = (conn.direction, shared.control()) {
        if snap.by_orig_dst(dst).is_some() {
            control.touch(Some(dst.0), None);
        } else if control.resolve(Some(dst.0), None).await {
            snap = shared.snapshot();
        }
    }
    let (target, metrics) = match conn.direction {
        Direction::Outbound => match snap.by_orig_dst(dst) {
            Some(svc) => (tcp::Target::Service(&svc.endpoints), &svc.tcp),
            None => (tcp::Target::Address(dst.0), &snap.passthrough_tcp),
        },
        // Inbound: the local app at the original port, counted on the service it serves.
        _ => (
            tcp::Target::Address(dst.0),
            snap.by_endpoint(dst.0)
                .map_or(&snap.inbound_unknown_tcp, |s| s.tcp(conn.direction)),
        ),
    };
    metrics.opened.increment(1);
    let log = &shared.access_log;
    let mut line = log.tcp_begin(conn.client.0, conn.direction, dst.0, &metrics.service);
    let up = tcp::connect(target, shared.config.connect_timeout).await;
    // The relay may last hours: it keeps its counters, not the registry state it began with.
    let metrics = metrics.clone();
    drop(snap);
    match up {
        Ok(up) => {
            if let Some(l) = line.as_mut() {
                l.set_upstream(up.stream.peer_addr().ok());
            }
            let idle = Some(shared.config.tcp_idle_timeout).filter(|d| !d.is_zero());
            let _in_flight = up.flight;
            let relayed = tcp::relay(io, up.stream, &metrics, idle).await;
            if let crate::idle::Spliced::Failed(e) = &relayed.how {
                tracing::debug!(error = %e, "tcp relay failed");
            }
            log.tcp_end(line, relayed.how.end(), relayed.received, relayed.sent);
        }
        Err(e) => {
            tracing::debug!(error = %e, dst = %dst.0, "tcp connect failed");
            metrics.closed(m::TcpEnd::ConnectFailed);
            log.tcp_end(line, m::TcpEnd::ConnectFailed, 0, 0);
        }
    }
}

/// One request, any direction: the path's stages, then errors become responses here.
/// `forwarded_for` holds the connection's
/// [`forwarded_for`](crate::http::headers::forwarded_for) value once the gateway made it.
/// A request that asks to switch protocols (or a CONNECT) carries a clone of `drain`, which is
/// also how the later stages know it may tunnel (`headers::marked_to_tunnel`): the splice that
/// outlives its connection task holds it, so shutdown waits for an open tunnel (up to the grace
/// period).
async fn handle(
    shared: &Shared,
    conn: &ConnInfo,
    forwarded_for: &OnceLock<http::HeaderValue>,
    drain: &Drain,
    mut parts: Box<http::request::Parts>,
    body: crate::http::body::ProxyBody,
) -> http::Response<crate::http::body::ProxyBody> {
    let start = Instant::now();
    if crate::http::headers::may_tunnel(&mut parts) {
        parts.extensions.insert(drain.clone());
        if parts.version <= http::Version::HTTP_11 {
            // SAFETY: an HTTP/1 request's handler runs inside its connection's task, which owns
            // the socket of `conn.fd` until the handler returns.
            #[allow(unsafe_code)]
            match unsafe { ResetHandle::of_raw(conn.fd) } {
                Ok(h) => {
                    parts.extensions.insert(h);
                }
                Err(e) => tracing::debug!(error = %e, "no reset handle for the upgrade"),
            }
        }
    }
    let grpc = is_grpc(&parts.headers);
    shared.config.request_id.ensure(&mut parts.headers);
    let logged = shared
        .access_log
        .begin(conn.client.0, conn.direction, &parts, start);
    let crate::dispatch::Handled {
        metrics,
        result,
        cors,
    } = match conn.direction {
        Direction::Outbound => crate::outbound::request(shared, conn, parts, body).await,
        Direction::Inbound => crate::inbound::request(shared, conn, parts, body).await,
        Direction::Gateway => {
            crate::gateway::request(shared, conn, forwarded_for, parts, body).await
        }
    };
    let resp = result.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "request failed");
        metrics.proxy_error(e.name());
        let audience = match conn.direction {
            Direction::Gateway => Audience::Edge,
            Direction::Outbound | Direction::Inbound => Audience::Mesh,
        };
        let mut answer = rescue(&e, grpc, audience);
        if let Some(marks) = cors {
            // A browser reads a 502 or a 429 only if it carries what the route's CORS allows.
            crate::routing::mark_cors(&marks, answer.headers_mut());
        }
        answer
    });
    let resp = crate::classify::count(&metrics, resp, start.elapsed().as_secs_f64());
    match logged {
        None => resp,
        Some(entry) => shared.access_log.watch(entry, &metrics, resp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn own_listener_is_the_exact_address_a_loopback_one_or_a_local_one_on_the_same_port() {
        let own = [a("127.0.0.1:4140"), a("0.0.0.0:4143"), a("0.0.0.0:4191")];
        let redirected = a("127.0.0.1:4140");
        assert!(aims_at_own_listener(&own, a("127.0.0.1:4140"), redirected));
        assert!(aims_at_own_listener(&own, a("127.0.0.1:4191"), redirected));
        // Dialled at the pod's own IP: accepted on that IP.
        let pod = a("10.0.0.5:4143");
        assert!(aims_at_own_listener(&own, pod, pod));
        assert!(aims_at_own_listener(&own, a("10.0.0.5:4191"), pod));
    }

    #[test]
    fn another_hosts_address_with_an_own_port_is_not_the_proxy() {
        let own = [a("127.0.0.1:4140"), a("0.0.0.0:4143"), a("0.0.0.0:4191")];
        let redirected = a("127.0.0.1:4140");
        assert!(!aims_at_own_listener(&own, a("10.0.0.9:4191"), redirected));
        assert!(!aims_at_own_listener(&own, a("10.0.0.9:4143"), redirected));
        assert!(!aims_at_own_listener(&own, a("10.0.0.9:4140"), redirected));
        assert!(!aims_at_own_listener(&own, a("10.96.0.10:80"), redirected));
    }
}
