//! Serves one detected downstream connection as HTTP/1 or HTTP/2 with every limit set explicitly,
//! and drains it gracefully on shutdown (GOAWAY for HTTP/2, close-when-idle for HTTP/1).

use std::{convert::Infallible, future::Future, sync::Arc, time::Duration};

use http::{Method, Request, Response};
use hyper::{body::Incoming, server::conn, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{body::ProxyBody, head_guard::HeadGuard};
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
    /// HTTP/2 limits.
    pub h2: H2Limits,
}

impl From<&Config> for ServerConfig {
    fn from(c: &Config) -> Self {
        Self {
            header_read_timeout: c.header_read_timeout,
            max_header_bytes: c.max_header_bytes.max(8192),
            h2: c.h2,
        }
    }
}

/// Serves HTTP/1.1 (with upgrades) until the client leaves or shutdown drains it; every request
/// head passes `HeadGuard` first, so ambiguous framing is answered 400 and never forwarded.
pub async fn serve_http1<I, F, Fut>(io: I, cfg: &ServerConfig, mut drain: Drain, handler: F)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let (io, tap) = HeadGuard::new(io, cfg.max_header_bytes);
    let handler = Arc::new(handler);
    let svc = service_fn(move |req: Request<Incoming>| {
        let (h, tap) = (handler.clone(), tap.clone());
        let connect = req.method() == Method::CONNECT;
        async move {
            let resp = h(req).await;
            // The guard holds back everything after a CONNECT/Upgrade until it learns this.
            tap.record(connect, resp.status());
            Ok::<_, Infallible>(resp)
        }
    });
    let mut b = conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .max_buf_size(cfg.max_header_bytes)
        .keep_alive(true)
        .half_close(false);
    let mut c = std::pin::pin!(b.serve_connection(TokioIo::new(io), svc).with_upgrades());
    let result = tokio::select! {
        r = c.as_mut() => r,
        () = drain.signaled() => {
            // Finishes the request in flight, then closes; idle keep-alives close at once.
            c.as_mut().graceful_shutdown();
            c.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "http/1 connection ended with an error");
    }
}

/// Serves HTTP/2 (prior knowledge) until the client leaves or shutdown sends GOAWAY.
pub async fn serve_h2<I, F, Fut>(io: I, cfg: &ServerConfig, mut drain: Drain, handler: F)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let handler = Arc::new(handler);
    let svc = service_fn(move |req| {
        let h = handler.clone();
        async move { Ok::<_, Infallible>(h(req).await) }
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
        .keep_alive_timeout(l.keepalive_timeout);
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
