//! Upstream connections per endpoint: an HTTP/1 keep-alive pool (LIFO, so the warmest connection
//! is reused and the rest can idle out) and one multiplexed HTTP/2 connection.
//!
//! HTTP/1 goes through our own client (`h1`): a pooled connection is a socket and its buffers,
//! with no task of its own. A connection idle for `SLIM_AFTER` lets go of its buffers (~20 KiB),
//! so after a burst of concurrent requests the memory comes back within a second while the
//! connections stay open. Beyond `max_idle`, the least recently used idle connections are closed
//! once they sat unused for `SURPLUS_IDLE`; the rest are closed when they expire.
//!
//! `SURPLUS_IDLE` is long on purpose. Under steady load the number of requests in flight swings,
//! and with a LIFO pool the connections at the bottom go unused for a while; at 500 ms (as it
//! was) a steady 500-connection load closed dozens of them and opened them again moments later,
//! and a new connection waits in the endpoint's accept queue (nginx accepts one per pass of its
//! event loop): ~0.1% of requests took 100–600 ms instead of ~20.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use arc_swap::{ArcSwap, ArcSwapOption};
use http::{header, request::Parts, uri, HeaderValue, Request, Response, Uri, Version};
use hyper::{body::Incoming, client::conn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::time::Instant;

use super::{body::ProxyBody, h1};
use crate::{
    addr::EndpointAddr,
    error::{ProxyError, UpstreamError},
    transport::listen,
};

/// How the proxy talks to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProto {
    /// HTTP/1.1 over a pooled keep-alive connection.
    Http1,
    /// HTTP/2 with prior knowledge, one multiplexed connection.
    H2,
}

/// How long an idle connection beyond `max_idle` may wait for a request before it is closed.
pub const SURPLUS_IDLE: Duration = Duration::from_secs(10);

/// How long an idle connection keeps its buffers.
pub const SLIM_AFTER: Duration = Duration::from_millis(500);

/// Idle connections kept at most per endpoint, whatever `max_idle` says, until a sweep runs.
const HARD_IDLE_LIMIT: usize = 1024;

/// Flow-control windows of an upstream HTTP/2 connection (see `h2_sender`).
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 1 << 30;

/// Upstream connection settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// TCP connect deadline.
    pub connect_timeout: Duration,
    /// Idle connections older than this are not reused, and `Pools::tidy` closes them.
    pub idle_timeout: Duration,
    /// Idle HTTP/1 connections kept per endpoint for the whole `idle_timeout`; the least
    /// recently used beyond them are closed after `SURPLUS_IDLE`.
    pub max_idle: usize,
    /// Largest response header list an HTTP/2 upstream may send (SETTINGS_MAX_HEADER_LIST_SIZE):
    /// the limit clients get, so a head that reaches an HTTP/1 upstream's client reaches this too.
    pub h2_max_header_list_size: u32,
    /// How HTTP/1 request heads spell header names (upgrades too, through hyper).
    pub header_case: h1::case::HeaderCase,
}

struct Idle {
    conn: Box<h1::Conn>,
    since: Instant,
}

/// What one pass over an endpoint's idle connections did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tidied {
    closed: usize,
    slimmed: usize,
}

/// An upstream connection acquired for one request.
pub enum Conn {
    /// A keep-alive connection; `reused` if it came from the idle pool.
    H1 {
        /// The connection.
        conn: Box<h1::Conn>,
        /// Whether it carried requests before.
        reused: bool,
    },
    /// The endpoint's multiplexed connection, as the pool holds it.
    H2(Arc<H2Sender>),
}

type H2Sender = conn::http2::SendRequest<ProxyBody>;

/// Connections to one endpoint.
pub struct EndpointPool {
    addr: EndpointAddr,
    config: Arc<PoolConfig>,
    // Held for a push or a pop only, never across an await.
    idle: Mutex<Vec<Idle>>,
    h2: ArcSwapOption<H2Sender>,
    /// Held by the one h2 connect under way; it keeps the last attempt's failure for the
    /// requests that queued behind it.
    h2_connecting: tokio::sync::Mutex<Option<FailedConnect>>,
    last_used: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for EndpointPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointPool")
            .field("addr", &self.addr)
            .finish()
    }
}

impl h1::Home for EndpointPool {
    fn checkin(&self, conn: Box<h1::Conn>) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.config.max_idle.max(HARD_IDLE_LIMIT) {
                idle.push(Idle {
                    conn,
                    since: Instant::now(),
                });
            }
            // Else the connection is dropped, which closes it.
        }
    }
}

impl EndpointPool {
    fn new(addr: EndpointAddr, config: Arc<PoolConfig>) -> Self {
        Self {
            addr,
            config,
            idle: Mutex::new(Vec::new()),
            h2: ArcSwapOption::empty(),
            h2_connecting: tokio::sync::Mutex::new(None),
            last_used: Default::default(),
        }
    }

    /// A connection ready to carry one request: connect failures surface here, before the
    /// request is built, so the caller may try another endpoint with nothing lost.
    pub async fn acquire(self: &Arc<Self>, proto: UpstreamProto) -> Result<Conn, ProxyError> {
        // One clock read serves the pool's last use and the idle connections' age.
        let now = Instant::now();
        self.last_used.store(
            crate::clock::secs_at(now),
            std::sync::atomic::Ordering::Relaxed,
        );
        match proto {
            UpstreamProto::Http1 => {
                if let Some(conn) = self.checkout(now) {
                    return Ok(Conn::H1 { conn, reused: true });
                }
                // Connecting is rare with pooling; boxed so every request's future does not carry
                // a TCP connect inline.
                Ok(Conn::H1 {
                    conn: Box::pin(self.connect_h1()).await?,
                    reused: false,
                })
            }
            UpstreamProto::H2 => Ok(Conn::H2(Box::pin(self.h2_sender()).await?)),
        }
    }

    /// Sends the request (`parts`, boxed: the head is moved through every stage of the request
    /// path, and 8 bytes move cheaper than 224) on `conn` and returns the response head with its
    /// streaming body.
    pub async fn send(
        self: &Arc<Self>,
        conn: Conn,
        mut parts: Box<Parts>,
        body: ProxyBody,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if parts.version == Version::HTTP_10 {
            self.name_endpoint(&mut parts, matches!(conn, Conn::H2(_)))?;
        }
        match conn {
            Conn::H1 { conn, reused } => {
                let home: Arc<dyn h1::Home> = self.clone();
                match h1::send(conn, parts, body, home.clone()).await {
                    Ok(resp) => Ok(resp),
                    // The pooled connection was closed under the request, which never reached
                    // the upstream (or may safely go twice): a fresh connection carries it.
                    Err(h1::Failed {
                        replay: Some(replay),
                        ..
                    }) if reused => {
                        let fresh = Box::pin(self.connect_h1()).await?;
                        h1::resend(fresh, replay, home)
                            .await
                            .map_err(|f| self.upstream_failed(f.error.into()))
                    }
                    Err(f) => Err(self.upstream_failed(f.error.into())),
                }
            }
            Conn::H2(tx) => {
                let req = Request::from_parts(*parts, body);
                let resp = match H2Sender::clone(&tx).try_send_request(req).await {
                    Ok(resp) => resp,
                    // The connection had ended for new streams (the upstream's GOAWAY reached
                    // it, or it closed) before this request went out: hyper hands it back, and
                    // a fresh connection carries it. `is_closed` could not have told: it turns
                    // true only when hyper's dispatch task next runs, which a request wakes.
                    Err(mut e) => match e.take_message() {
                        Some(req) => {
                            self.h2.compare_and_swap(&tx, None::<Arc<H2Sender>>);
                            let fresh = Box::pin(self.h2_sender()).await?;
                            H2Sender::clone(&fresh)
                                .send_request(req)
                                .await
                                .map_err(|e| self.upstream_failed(e.into()))?
                        }
                        None => return Err(self.upstream_failed(e.into_error().into())),
                    },
                };
                self.status_in_range(resp.status())?;
                Ok(resp.map(ProxyBody::Incoming))
            }
        }
    }

    /// RFC 9110 §15: a status outside 100–599 is invalid, and a client handed one cannot know
    /// its class. hyper's clients take any three digits (`h1::decode` refuses them itself).
    fn status_in_range(&self, status: http::StatusCode) -> Result<(), ProxyError> {
        if status.as_u16() <= 599 {
            return Ok(());
        }
        let invalid = h1::Error::Protocol("invalid response status");
        Err(self.upstream_failed(invalid.into()))
    }

    /// An HTTP/1.0 request that named no host (`forward::set_target` leaves only those at 1.0)
    /// goes out as HTTP/1.1 or HTTP/2, which require one: it names this endpoint, as a client
    /// that dialled it would (nginx sends its upstream's name the same way).
    fn name_endpoint(&self, parts: &mut Parts, h2: bool) -> Result<(), ProxyError> {
        let host = self.addr.to_string();
        if h2 {
            let mut p = uri::Parts::default();
            p.scheme = Some(uri::Scheme::HTTP);
            p.authority = uri::Authority::try_from(host.as_str()).ok();
            p.path_and_query = parts.uri.path_and_query().cloned();
            parts.uri =
                Uri::from_parts(p).map_err(|_| ProxyError::BadRequest("invalid request target"))?;
            parts.version = Version::HTTP_2;
        } else {
            let v = HeaderValue::from_str(&host)
                .map_err(|_| ProxyError::BadRequest("invalid endpoint address"))?;
            parts.headers.insert(header::HOST, v);
            parts.version = Version::HTTP_11;
        }
        Ok(())
    }

    /// An upgrade answer that does not fit its request (`why`): the upstream failed.
    pub(crate) fn refused_answer(&self, why: &'static str) -> ProxyError {
        self.upstream_failed(h1::Error::Protocol(why).into())
    }

    fn upstream_failed(&self, source: UpstreamError) -> ProxyError {
        ProxyError::Upstream {
            addr: self.addr,
            source,
        }
    }

    fn checkout(&self, now: Instant) -> Option<Box<h1::Conn>> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(c) = idle.pop() {
            if now.duration_since(c.since) < self.config.idle_timeout && c.conn.is_open() {
                return Some(c.conn);
            }
        }
        None
    }

    /// Closes idle connections that expired, that the endpoint closed, or that are surplus
    /// (beyond `max_idle` and unused for `SURPLUS_IDLE`), and lets the ones idle for
    /// `SLIM_AFTER` go of their buffers; returns how many were closed and how many slimmed.
    fn tidy(&self, now: Instant) -> Tidied {
        let Ok(mut idle) = self.idle.lock() else {
            return Tidied::default();
        };
        let before = idle.len();
        let timeout = self.config.idle_timeout;
        idle.retain(|c| now.duration_since(c.since) < timeout && c.conn.is_open());
        // Checked in at the top, so the bottom is the least recently used.
        let surplus = idle.len().saturating_sub(self.config.max_idle);
        let stale = idle[..surplus]
            .iter()
            .take_while(|c| now.duration_since(c.since) >= SURPLUS_IDLE)
            .count();
        idle.drain(..stale);
        let slimmed = idle
            .iter_mut()
            .take_while(|c| now.duration_since(c.since) >= SLIM_AFTER)
            .map(|c| c.conn.slim())
            .filter(|&slimmed| slimmed)
            .count();
        Tidied {
            closed: before - idle.len(),
            slimmed,
        }
    }

    /// Idle HTTP/1 connections held now.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    async fn connect_h1(&self) -> Result<Box<h1::Conn>, ProxyError> {
        let io = listen::connect(self.addr.0, self.config.connect_timeout)
            .await
            .map_err(|source| ProxyError::Connect {
                addr: self.addr,
                source,
            })?;
        Ok(h1::Conn::new(io, self.config.header_case))
    }

    async fn connect(&self) -> Result<TokioIo<tokio::net::TcpStream>, ProxyError> {
        listen::connect(self.addr.0, self.config.connect_timeout)
            .await
            .map(TokioIo::new)
            .map_err(|source| ProxyError::Connect {
                addr: self.addr,
                source,
            })
    }

    fn live_h2(&self) -> Option<Arc<H2Sender>> {
        self.h2.load_full().filter(|tx| !tx.is_closed())
    }

    async fn h2_sender(&self) -> Result<Arc<H2Sender>, ProxyError> {
        if let Some(tx) = self.live_h2() {
            return Ok(tx);
        }
        // One connect at a time; the others wait and reuse it, or share its failure: each
        // redoing it in turn made the k-th wait k connect timeouts.
        let queued = Instant::now();
        let mut last = self.h2_connecting.lock().await;
        if let Some(tx) = self.live_h2() {
            return Ok(tx);
        }
        if let Some(failed) = last.as_ref().filter(|f| f.at >= queued) {
            return Err(failed.error(self.addr));
        }
        let connected = self.connect_h2().await;
        *last = connected.as_ref().err().map(FailedConnect::of);
        connected
    }

    async fn connect_h2(&self) -> Result<Arc<H2Sender>, ProxyError> {
        let io = self.connect().await?;
        let (tx, conn) = conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            // Every client's requests to this endpoint share this connection. A stream whose
            // client stops reading keeps its window's worth unreleased, so a connection window
            // of a few stream windows let a few stalled downloads stall everyone else's. 1 GiB,
            // as Go's HTTP/2 transport has it: the stream window is what bounds each buffer.
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20))
            .max_header_list_size(self.config.h2_max_header_list_size)
            .handshake(io)
            .await
            .map_err(self.handshake_failed())?;
        drive(conn, "upstream h2 connection ended");
        let tx = Arc::new(tx);
        self.h2.store(Some(tx.clone()));
        Ok(tx)
    }

    /// Opens a fresh, unpooled HTTP/1 connection that supports protocol upgrades.
    pub async fn send_upgrade(
        &self,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let offered = req.headers().get(header::UPGRADE).cloned();
        let io = self.connect().await?;
        // For the splice after a 101: a reset on the client's side is passed on as one.
        let reset = crate::transport::reset::ResetHandle::of(io.inner());
        let (mut tx, conn) = conn::http1::Builder::new()
            .title_case_headers(self.config.header_case.is_title())
            .handshake(io)
            .await
            .map_err(self.handshake_failed())?;
        drive(conn.with_upgrades(), "upstream upgraded connection ended");
        let mut resp = tx
            .send_request(req)
            .await
            .map_err(|e| self.upstream_failed(e.into()))?;
        self.status_in_range(resp.status())?;
        if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS
            && !super::headers::switch_offered(
                offered.as_ref(),
                resp.headers().get(header::UPGRADE),
            )
        {
            return Err(self.refused_answer("101 to a protocol the request did not offer"));
        }
        if let Ok(reset) = reset {
            resp.extensions_mut().insert(reset);
        }
        Ok(resp)
    }

    fn handshake_failed(&self) -> impl FnOnce(hyper::Error) -> ProxyError {
        let addr = self.addr;
        move |source| ProxyError::Handshake { addr, source }
    }

    fn is_unused_since(&self, secs: u64) -> bool {
        self.last_used.load(std::sync::atomic::Ordering::Relaxed) < secs
    }
}

/// An h2 connect that failed, kept for the requests that waited on it.
#[derive(Debug)]
struct FailedConnect {
    at: Instant,
    kind: std::io::ErrorKind,
    why: String,
}

impl FailedConnect {
    fn of(e: &ProxyError) -> Self {
        let (kind, why) = match e {
            ProxyError::Connect { source, .. } => (source.kind(), source.to_string()),
            _ => (std::io::ErrorKind::Other, e.to_string()),
        };
        Self {
            at: Instant::now(),
            kind,
            why,
        }
    }

    /// The failure again, as a connect failure (retryable elsewhere, counted against the
    /// endpoint like the original).
    fn error(&self, addr: EndpointAddr) -> ProxyError {
        ProxyError::Connect {
            addr,
            source: std::io::Error::new(
                self.kind,
                format!("{} (the attempt this request waited on)", self.why),
            ),
        }
    }
}

/// Runs a client connection's I/O in its own task until the connection ends.
fn drive<F>(conn: F, what: &'static str)
where
    F: std::future::Future<Output = hyper::Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "{what}");
        }
        // Counted here, once the connection's buffers are gone, not where it was told to close:
        // a trim that runs in between would find nothing to give back.
        crate::memory::released(1);
    });
}

type PoolMap = HashMap<EndpointAddr, Arc<EndpointPool>, foldhash::fast::RandomState>;

/// Every endpoint's pool, found without a lock; a new address is added copy-on-write.
pub struct Pools {
    config: Arc<PoolConfig>,
    // foldhash: SipHash of a socket address was ~300 instructions of every request.
    map: ArcSwap<PoolMap>,
    insert: Mutex<()>,
}

impl Pools {
    /// An empty set of pools.
    pub fn new(config: PoolConfig) -> Self {
        Self {
            config: Arc::new(config),
            map: ArcSwap::from_pointee(PoolMap::default()),
            insert: Mutex::new(()),
        }
    }

    /// The pool for `addr`, created on first use.
    pub fn get(&self, addr: EndpointAddr) -> Arc<EndpointPool> {
        if let Some(p) = self.map.load().get(&addr) {
            return p.clone();
        }
        let _g = self.insert.lock();
        let cur = self.map.load();
        if let Some(p) = cur.get(&addr) {
            return p.clone();
        }
        let pool = Arc::new(EndpointPool::new(addr, self.config.clone()));
        let mut next = HashMap::clone(&cur);
        next.insert(addr, pool.clone());
        self.map.store(Arc::new(next));
        pool
    }

    /// Closes every pool's expired and surplus idle connections (without it they would stay
    /// open until a request came for that endpoint) and slims the ones idle for a while; returns
    /// how many were closed.
    pub fn tidy(&self) -> usize {
        let now = Instant::now();
        let mut closed = 0;
        for p in self.map.load().values() {
            let t = p.tidy(now);
            closed += t.closed;
            // Closed connections count themselves when dropped (`h1::Conn`).
            crate::memory::released(t.slimmed as u64);
        }
        closed
    }

    /// Drops pools unused for `idle` (their connections close once in-flight requests end).
    pub fn evict_idle(&self, idle: Duration) {
        let _g = self.insert.lock();
        let cutoff = crate::clock::now_secs().saturating_sub(idle.as_secs());
        let cur = self.map.load();
        if cur.values().any(|p| p.is_unused_since(cutoff)) {
            let next = cur
                .iter()
                .filter(|(_, p)| !p.is_unused_since(cutoff))
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            self.map.store(Arc::new(next));
        }
    }
}

#[cfg(test)]
mod tests;
