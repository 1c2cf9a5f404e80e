//! An in-process HTTP/1 + HTTP/2 (h2c) backend that tells a test exactly what it received.
//!
//! Every response carries `x-backend: <name>`. Paths:
//! - anything else: JSON echo `{backend, method, uri, version, headers, body_bytes, body}`
//!   (`body` only when under 64 KiB; header values of repeated names are joined with `, `)
//! - `/_/status/<code>`: the echo, with that status
//! - `/_/header/<n>`: an empty 200 with an `x-big` header of `n` bytes
//! - `/_/delay/<ms>`: the echo, after that delay (for timeout tests; the backend sleeps, not the test)
//! - `/_/stream`: consumes a body of any size without buffering it and answers
//!   `{"bytes": n, "fnv1a64": "<16 hex digits>"}` (compute the expectation with [`Fnv1a64`])
//! - `/_/bytes/<n>`: a streamed body of `n` bytes of [`pattern_byte`]
//! - `/_/truncate/<n>`: a `200` head announcing `2n` bytes, `n` bytes of [`pattern_byte`], then
//!   the connection dies (a response that fails while streaming)
//! - `/_/slow-body/<ms>`: the head at once, its one-chunk body (`slow body\n`) after that delay
//! - `/_/drip/<n>/<ms>`: the head at once, then `n` chunks of `drip\n`, one every `<ms>`
//! - any HTTP/1 request with `Connection: upgrade` + `Upgrade: x`: `101` with `Upgrade: x`, then
//!   every byte written on the upgraded stream is echoed back until the client closes; the 101
//!   names the handshake's `Host` (`x-upgrade-host`) and request target (`x-upgrade-target`).
//!
//! Misbehaviour on demand, for any path: [`TestBackend::force_status`] (every request), and
//! [`TestBackend::fail_next`] (the next `n` requests: a status, a delay, or a connection dropped
//! after part of the request body was read).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// How [`TestBackend::fail_next`] misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// Answer with this status (after reading the whole request body).
    Status(StatusCode),
    /// Answer normally, after this delay.
    Delay(Duration),
    /// Read at least this many bytes of the request body (or all of it), then drop the
    /// connection without answering.
    ResetAfter(usize),
}

/// Echoed bodies up to this size are included verbatim in the JSON.
const ECHO_BODY_LIMIT: usize = 64 * 1024;

/// A running backend; stops (closing every connection) on drop or [`TestBackend::stop`].
pub struct TestBackend {
    /// Where it listens (`127.0.0.1:<port>`).
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

struct State {
    name: HeaderValue,
    name_str: String,
    requests: AtomicU64,
    connections: AtomicU64,
    /// Accepted connections not closed yet.
    open: AtomicU64,
    /// 0 = behave normally; otherwise every request gets this status.
    forced_status: AtomicU16,
    /// Requests left to misbehave with `fail`.
    fail_left: AtomicU64,
    fail: Mutex<Option<Fail>>,
    /// Body bytes `/_/bytes/<n>` responses have handed to the server so far.
    streamed: Arc<AtomicU64>,
}

impl TestBackend {
    /// Binds `127.0.0.1:0` and starts serving; `name` comes back in `x-backend` and the echo.
    pub async fn start(name: &str) -> TestBackend {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr of a bound socket");
        let state = Arc::new(State {
            name: HeaderValue::from_str(name).expect("backend name is a valid header value"),
            name_str: name.to_owned(),
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            open: AtomicU64::new(0),
            forced_status: AtomicU16::new(0),
            fail_left: AtomicU64::new(0),
            fail: Mutex::new(None),
            streamed: Arc::default(),
        });
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        TestBackend { addr, state, task }
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.state.name_str
    }

    /// Requests received so far (all paths, including upgrades).
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Body bytes of `/_/bytes/<n>` responses produced so far: they stop growing once every
    /// such download is held up by flow control.
    pub fn bytes_streamed(&self) -> u64 {
        self.state.streamed.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far (to check pooling and multiplexing).
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// TCP connections open now (accepted and not closed by either side), to check that idle
    /// pooled connections are closed.
    pub fn open_connections(&self) -> u64 {
        self.state.open.load(Ordering::SeqCst)
    }

    /// From now on answer every request with `status` (`None`: back to normal), to make an
    /// endpoint fail mid-test.
    pub fn force_status(&self, status: Option<StatusCode>) {
        let code = status.map_or(0, |s| s.as_u16());
        self.state.forced_status.store(code, Ordering::SeqCst);
    }

    /// The next `n` requests (any path) misbehave as `fail` says; the ones after are normal.
    pub fn fail_next(&self, n: u64, fail: Fail) {
        *self.state.fail.lock().expect("fail knob lock") = Some(fail);
        self.state.fail_left.store(n, Ordering::SeqCst);
    }

    /// Stops accepting and closes every open connection; returns once the port is released.
    pub async fn stop(mut self) {
        self.task.abort();
        // The aborted task resolves once its future, listener and connections are dropped.
        let _ = (&mut self.task).await;
    }
}

impl Drop for TestBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    // Owning the connection tasks here means aborting this task closes all of them.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((io, _)) = accepted else { continue };
                state.connections.fetch_add(1, Ordering::SeqCst);
                state.open.fetch_add(1, Ordering::SeqCst);
                let state = state.clone();
                conns.spawn(async move {
                    let open = OpenGuard(state.clone());
                    let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection_with_upgrades(TokioIo::new(io), svc).await;
                    drop(open);
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Counts a connection as open until its task ends (or is aborted).
struct OpenGuard(Arc<State>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// This request's misbehaviour, if it is one of the next `n` that [`TestBackend::fail_next`] set.
fn take_fail(state: &State) -> Option<Fail> {
    let dec = |n: u64| n.checked_sub(1);
    state
        .fail_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, dec)
        .ok()?;
    *state.fail.lock().expect("fail knob lock")
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, BoxError> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let forced = state.forced_status.load(Ordering::SeqCst);
    let path = req.uri().path().to_owned();
    let mut resp = match take_fail(&state) {
        Some(Fail::Status(status)) => echo(&state, req, status).await,
        Some(Fail::Delay(d)) => {
            tokio::time::sleep(d).await;
            echo(&state, req, StatusCode::OK).await
        }
        Some(Fail::ResetAfter(n)) => {
            let mut body = req.into_body();
            let mut read = 0;
            while read < n {
                match body.frame().await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, Bytes::len),
                    _ => break,
                }
            }
            // A service error makes hyper drop the connection without a response.
            return Err("reset as asked".into());
        }
        None => normal(&state, req, forced, &path).await,
    };
    resp.headers_mut().insert("x-backend", state.name.clone());
    Ok(resp)
}

async fn normal(
    state: &State,
    mut req: Request<Incoming>,
    forced: u16,
    path: &str,
) -> Response<Body> {
    if forced != 0 {
        let status = StatusCode::from_u16(forced).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        echo(state, req, status).await
    } else if req.headers().contains_key(http::header::UPGRADE) {
        upgrade(&mut req)
    } else if path == "/_/stream" {
        stream_count(req).await
    } else if let Some(n) = path.strip_prefix("/_/bytes/").and_then(|n| n.parse().ok()) {
        pattern_body(n, state.streamed.clone())
    } else if let Some(n) = path
        .strip_prefix("/_/truncate/")
        .and_then(|n| n.parse().ok())
    {
        truncated_body(n)
    } else if let Some(ms) = path
        .strip_prefix("/_/slow-body/")
        .and_then(|m| m.parse().ok())
    {
        slow_body(Duration::from_millis(ms))
    } else if let Some((n, ms)) = path.strip_prefix("/_/drip/").and_then(|d| {
        let (n, ms) = d.split_once('/')?;
        Some((n.parse().ok()?, ms.parse().ok()?))
    }) {
        drip_body(n, Duration::from_millis(ms))
    } else if let Some(n) = path.strip_prefix("/_/header/").and_then(|n| n.parse().ok()) {
        big_header(n)
    } else if let Some(code) = path.strip_prefix("/_/status/").and_then(|c| c.parse().ok()) {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
        echo(state, req, status).await
    } else if let Some(ms) = path.strip_prefix("/_/delay/").and_then(|m| m.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        echo(state, req, StatusCode::OK).await
    } else {
        echo(state, req, StatusCode::OK).await
    }
}

async fn echo(state: &State, req: Request<Incoming>, status: StatusCode) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut headers = BTreeMap::<String, String>::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        headers
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    let uri = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let json = serde_json::json!({
        "backend": state.name_str,
        "method": parts.method.as_str(),
        "uri": uri,
        "authority": parts.uri.authority().map(|a| a.as_str()),
        "version": format!("{:?}", parts.version),
        "headers": headers,
        "body_bytes": body.len(),
        "body": (body.len() <= ECHO_BODY_LIMIT).then(|| String::from_utf8_lossy(&body).into_owned()),
    });
    let mut resp = Response::new(full(json.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn upgrade(req: &mut Request<Incoming>) -> Response<Body> {
    let proto = req.headers().get(http::header::UPGRADE).cloned();
    let on_upgrade = hyper::upgrade::on(&mut *req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut io = TokioIo::new(upgraded);
        let mut buf = [0u8; 8192];
        while let Ok(n) = io.read(&mut buf).await {
            if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = io.shutdown().await;
    });
    let host = req.headers().get(http::header::HOST).cloned();
    let target = HeaderValue::from_str(&req.uri().to_string()).ok();
    let mut resp = Response::new(full(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    // What the handshake arrived as: a proxy must send it origin-form with its Host.
    if let Some(host) = host {
        resp.headers_mut().insert("x-upgrade-host", host);
    }
    if let Some(target) = target {
        resp.headers_mut().insert("x-upgrade-target", target);
    }
    if let Some(proto) = proto {
        resp.headers_mut().insert(http::header::UPGRADE, proto);
    }
    resp.headers_mut().insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    resp
}

async fn stream_count(req: Request<Incoming>) -> Response<Body> {
    let mut body = req.into_body();
    let mut sum = Fnv1a64::new();
    let mut bytes = 0u64;
    let mut failed = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    bytes += data.len() as u64;
                    sum.update(data);
                }
            }
            Err(e) => {
                failed = Some(e.to_string());
                break;
            }
        }
    }
    let json = serde_json::json!({ "bytes": bytes, "fnv1a64": sum.hex(), "error": failed });
    let mut resp = Response::new(full(json.to_string()));
    if failed.is_some() {
        *resp.status_mut() = StatusCode::BAD_REQUEST;
    }
    resp
}

fn pattern_body(len: u64, streamed: Arc<AtomicU64>) -> Response<Body> {
    const CHUNK: u64 = 16 * 1024;
    let chunks = (0..len.div_ceil(CHUNK)).map(move |i| {
        let start = i * CHUNK;
        let end = (start + CHUNK).min(len);
        streamed.fetch_add(end - start, Ordering::SeqCst);
        let data: Vec<u8> = (start..end).map(pattern_byte).collect();
        Ok::<_, BoxError>(Frame::data(Bytes::from(data)))
    });
    Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
        chunks,
    ))))
}

/// An empty `200` whose `x-big` header holds `len` bytes of `h`.
fn big_header(len: usize) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::new()));
    let value = http::HeaderValue::from_str(&"h".repeat(len)).expect("letters are a valid value");
    resp.headers_mut().insert("x-big", value);
    resp
}

fn truncated_body(len: u64) -> Response<Body> {
    let data: Vec<u8> = (0..len).map(pattern_byte).collect();
    let frames = futures_util::stream::unfold(Some(Bytes::from(data)), |first| async move {
        match first {
            Some(data) => Some((Ok(Frame::data(data)), None)),
            None => {
                // Pending for a moment makes hyper flush the head and the first bytes: the
                // client must see a response that started, then died.
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((
                    Err::<Frame<Bytes>, BoxError>("dying mid-body as asked".into()),
                    None,
                ))
            }
        }
    });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    resp.headers_mut()
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(len * 2));
    resp
}

fn slow_body(delay: Duration) -> Response<Body> {
    let chunk = futures_util::stream::once(async move {
        tokio::time::sleep(delay).await;
        Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"slow body\n")))
    });
    Response::new(BodyExt::boxed(StreamBody::new(chunk)))
}

fn drip_body(n: usize, every: Duration) -> Response<Body> {
    let chunks = futures_util::stream::unfold(0, move |i| async move {
        if i == n {
            return None;
        }
        tokio::time::sleep(every).await;
        let chunk = Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"drip\n")));
        Some((chunk, i + 1))
    });
    Response::new(BodyExt::boxed(StreamBody::new(chunks)))
}

/// Byte `i` of the deterministic pattern `/_/bytes/<n>` sends.
pub fn pattern_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// The `fnv1a64` that `/_/stream` reports for `len` bytes of [`pattern_byte`]
/// (what [`crate::http_client::post_pattern`] sends).
pub fn pattern_fnv1a64(len: u64) -> String {
    let mut sum = Fnv1a64::new();
    let mut buf = Vec::with_capacity(64 * 1024);
    for start in (0..len).step_by(64 * 1024) {
        buf.clear();
        buf.extend((start..(start + 64 * 1024).min(len)).map(pattern_byte));
        sum.update(&buf);
    }
    sum.hex()
}

fn full(body: impl Into<Bytes>) -> Body {
    BodyExt::boxed(Full::new(body.into()).map_err(|never: Infallible| match never {}))
}

/// Incremental FNV-1a (64 bit): the checksum `/_/stream` reports.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    /// A fresh hasher.
    pub fn new() -> Fnv1a64 {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The digest as 16 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64::new()
    }
}
