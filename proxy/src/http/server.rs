//! Serves one detected downstream connection as HTTP/1 or HTTP/2 with every limit set explicitly,
//! and drains it gracefully on shutdown (GOAWAY for HTTP/2, close-when-idle for HTTP/1).

use std::{convert::Infallible, future::Future, pin::Pin, sync::Arc, time::Duration};

use http::{request::Parts, Method, Request, Response};
use hyper::{body::Incoming, server::conn, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    body::ProxyBody,
    h1::case::HeaderCase,
    head_guard::HeadGuard,
    headers::drop_connection_named,
    park::{Activity, ReadReady, TrackedBody, Watched},
};
use crate::{
    config::{Config, H2Limits},
    drain::Drain,
};

/// Server-side limits, from `Config`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Deadline for a complete HTTP/1 request head (slowloris).
    pub header_read_timeout: Duration,
    /// Largest HTTP/1 head; beyond it hyper answers 431.
    pub max_header_bytes: usize,
    /// HTTP/1 keep-alive connections idle this long are closed.
    pub idle_timeout: Duration,
    /// HTTP/1 keep-alive connections quiet for between half this and this are parked (their
    /// buffers freed).
    pub park_after: Duration,
    /// HTTP/2 limits.
    pub h2: H2Limits,
    /// How HTTP/1 response heads spell header names.
    pub header_case: HeaderCase,
}

impl From<&Config> for ServerConfig {
    fn from(c: &Config) -> Self {
        Self {
            header_read_timeout: c.header_read_timeout,
            max_header_bytes: c.max_header_bytes,
            idle_timeout: c.downstream_idle_timeout,
            park_after: Duration::from_millis(250),
            h2: c.h2,
            header_case: c.http1_header_case,
        }
    }
}

/// Serves HTTP/1.1 (with upgrades) until the client leaves, stays idle past `idle_timeout`, or
/// shutdown drains it. Every request head passes `HeadGuard` first, so ambiguous framing is
/// answered 400 and never forwarded; idle keep-alive connections are parked (see `park.rs`).
pub async fn serve_http1<I, F, Fut>(io: I, cfg: &ServerConfig, mut drain: Drain, handler: F)
where
    I: AsyncRead + AsyncWrite + ReadReady + Unpin + Send + 'static,
    F: Fn(Box<Parts>, ProxyBody) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let (io, tap) = HeadGuard::new(io, cfg.max_header_bytes);
    let io = io.with_head_timeout(cfg.header_read_timeout);
    let act = Arc::new(Activity::default());
    let handler = Arc::new(handler);
    let svc = {
        let act = act.clone();
        service_fn(move |req: Request<Incoming>| {
            let guard = act.begin();
            let (h, tap) = (handler.clone(), tap.clone());
            let (mut parts, body) = req.into_parts();
            drop_connection_named(&mut parts.headers);
            let connect = parts.method == Method::CONNECT;
            async move {
                let resp = h(Box::new(parts), ProxyBody::Incoming(body)).await;
                // The guard holds back everything after a CONNECT/Upgrade until it learns this.
                tap.record(connect, resp.status());
                Ok::<_, Infallible>(resp.map(|b| TrackedBody::new(b, guard)))
            }
        })
    };
    let mut b = conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .title_case_headers(cfg.header_case.is_title())
        // The head guard enforces the header-read timeout (hyper never sees a partial head), so
        // hyper's own per-request timer would only cost a timer registration per request.
        .header_read_timeout(None)
        .max_header_size(cfg.max_header_bytes)
        // Bodies stream through this buffer; 64 KiB keeps reads large without bloating memory.
        .max_buf_size(cfg.max_header_bytes.max(64 * 1024))
        .keep_alive(true)
        .half_close(false);
    let mut io = Watched::new(io, act.clone());
    loop {
        let mut c = Box::pin(
            b.serve_connection(TokioIo::new(io), svc.clone())
                .with_upgrades(),
        );
        tokio::select! {
            r = c.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "http/1 connection ended with an error");
                }
                return;
            }
            () = drain.signaled() => {
                // Finishes the request in flight, then closes; idle keep-alives close at once.
                c.as_mut().graceful_shutdown();
                let _ = c.await;
                return;
            }
            () = act.quiet_for(cfg.park_after) => {}
        }
        // Only the socket and the bytes already read are kept: the rest of hyper's parts would
        // otherwise sit in the task (its size is its largest state) while the connection is parked.
        let Some(conn::http1::Parts {
            io: tokio_io,
            read_buf,
            ..
        }) = Pin::into_inner(c).into_parts()
        else {
            return;
        };
        io = tokio_io.into_inner();
        io.set_leftover(read_buf);
        io.get_mut().release_buffer();
        let _parked = Parked::new();
        tokio::select! {
            r = io.readable() => if r.is_err() { return },
            () = drain.signaled() => return,
            () = tokio::time::sleep(cfg.idle_timeout) => return,
        }
    }
}

/// Connections parked since start (tests wait on it).
static PARKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times a connection was parked in this process.
pub fn parks_total() -> u64 {
    PARKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts parked connections while alive.
pub(crate) struct Parked;

impl Parked {
    /// A connection was parked (its buffers freed).
    pub(crate) fn new() -> Self {
        PARKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::memory::released(1);
        metrics::gauge!(crate::metrics::PARKED).increment(1.0);
        Parked
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        metrics::gauge!(crate::metrics::PARKED).decrement(1.0);
    }
}

/// Serves HTTP/2 (prior knowledge) until the client leaves or shutdown sends GOAWAY.
pub async fn serve_h2<I, F, Fut>(io: I, cfg: &ServerConfig, mut drain: Drain, handler: F)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Box<Parts>, ProxyBody) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let handler = Arc::new(handler);
    let svc = service_fn(move |req: Request<Incoming>| {
        let h = handler.clone();
        let (parts, body) = req.into_parts();
        async move { Ok::<_, Infallible>(h(Box::new(parts), ProxyBody::Incoming(body)).await) }
    });
    let l = &cfg.h2;
    let mut b = conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .max_concurrent_streams(l.max_concurrent_streams)
        .max_header_list_size(l.max_header_list_size)
        .max_pending_accept_reset_streams(l.max_pending_accept_reset_streams)
        .max_local_error_reset_streams(l.max_local_error_reset_streams)
        .max_send_buf_size(l.max_send_buf_size)
        .initial_stream_window_size(l.initial_stream_window)
        .initial_connection_window_size(l.initial_connection_window)
        .keep_alive_interval(l.keepalive_interval)
        .keep_alive_timeout(l.keepalive_timeout)
        // RFC 8441: WebSocket over HTTP/2 (`ext_connect.rs`).
        .enable_connect_protocol();
    let mut c = std::pin::pin!(b.serve_connection(TokioIo::new(io), svc));
    let result = tokio::select! {
        r = c.as_mut() => r,
        () = drain.signaled() => {
            // GOAWAY: no new streams; the open ones run to completion.
            c.as_mut().graceful_shutdown();
            c.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "h2 connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::{TcpListener, TcpStream},
    };

    use super::*;
    use crate::{drain, transport::prefixed::Prefixed};

    async fn server(park_after: Duration, idle_timeout: Duration) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let cfg = ServerConfig {
            header_read_timeout: Duration::from_secs(5),
            max_header_bytes: 16 * 1024,
            idle_timeout,
            park_after,
            h2: H2Limits::default(),
            header_case: Default::default(),
        };
        tokio::spawn(async move {
            let (_tx, drain) = drain::channel();
            loop {
                let (s, _) = l.accept().await.expect("accept");
                let (cfg, drain) = (cfg.clone(), drain.clone());
                tokio::spawn(async move {
                    let io = Prefixed::new(bytes::BytesMut::new(), s);
                    serve_http1(io, &cfg, drain, |parts: Box<Parts>, _| async move {
                        Response::new(ProxyBody::full(parts.uri.path().to_string()))
                    })
                    .await
                });
            }
        });
        addr
    }

    async fn read_responses(s: &mut TcpStream, n: usize) -> String {
        let mut out = String::new();
        let mut buf = [0u8; 4096];
        while out.matches("HTTP/1.1 200").count() < n || !out.ends_with(|c: char| c != '\n') {
            let k = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("response in time")
                .expect("read");
            assert!(k > 0, "connection closed early: {out:?}");
            out.push_str(&String::from_utf8_lossy(&buf[..k]));
            if out.matches("HTTP/1.1 200").count() == n && out.ends_with(&format!("/r{n}")) {
                break;
            }
        }
        out
    }

    async fn wait_for_a_park(before: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while parks_total() == before {
            assert!(tokio::time::Instant::now() < deadline, "never parked");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_parked_keep_alive_connection_serves_the_next_request() {
        let addr = server(Duration::from_millis(20), Duration::from_secs(30)).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        for i in 1..=3 {
            s.write_all(format!("GET /r{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
                .await
                .expect("write");
            let mut out = String::new();
            let mut buf = [0u8; 1024];
            while !out.ends_with(&format!("/r{i}")) {
                let k = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                    .await
                    .expect("response in time")
                    .expect("read");
                assert!(k > 0, "connection closed: {out:?}");
                out.push_str(&String::from_utf8_lossy(&buf[..k]));
            }
            assert!(out.starts_with("HTTP/1.1 200"), "{out}");
            // The connection goes quiet, is parked, and is rebuilt on the next write.
            wait_for_a_park(parks_total()).await;
        }
    }

    #[tokio::test]
    async fn pipelined_requests_survive_parking() {
        let addr = server(Duration::from_millis(10), Duration::from_secs(30)).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut burst = String::new();
        for i in 1..=3 {
            burst.push_str(&format!("GET /r{i} HTTP/1.1\r\nHost: a\r\n\r\n"));
        }
        s.write_all(burst.as_bytes()).await.expect("write");
        let out = read_responses(&mut s, 3).await;
        let order: Vec<_> = ["/r1", "/r2", "/r3"].iter().map(|p| out.find(p)).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{out}");
    }

    #[tokio::test]
    async fn a_half_sent_head_is_not_lost_when_parked() {
        let addr = server(Duration::from_millis(10), Duration::from_secs(30)).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /r1 HTTP/1.1\r\nHo").await.expect("write");
        // Many park periods pass; a half-read head must keep the connection unparked.
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(b"st: a\r\n\r\n").await.expect("write");
        let out = read_responses(&mut s, 1).await;
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }

    #[tokio::test]
    async fn an_idle_connection_closes_after_the_idle_timeout() {
        let addr = server(Duration::from_millis(10), Duration::from_millis(200)).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /r1 HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .expect("write");
        let _ = read_responses(&mut s, 1).await;
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("closed by the idle timeout, not left open")
            .expect("read");
        assert_eq!(n, 0);
    }
}
