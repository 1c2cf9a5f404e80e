//! Small HTTP clients for tests: one fresh connection per call, every call bounded by a deadline.
//!
//! Fresh connections keep tests independent of pooling; tests that care about connection reuse
//! hold a [`H1Conn`]/[`H2Conn`] and send several requests on it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wait::within;

/// How long one helper call may take before the test fails instead of hanging.
pub const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// A complete response.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Response status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body, lossily decoded as UTF-8.
    pub body: String,
    /// HTTP version of the response.
    pub version: Version,
}

impl Reply {
    /// A header's value as a string; `None` when absent or not UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body parsed as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// A request with a `Host` header and an optional body, ready for [`send`].
pub fn request(
    method: Method,
    host: &str,
    path: &str,
    body: impl Into<Bytes>,
) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, host)
        .body(Full::new(body.into()))
        .expect("a valid method, path and host")
}

/// `GET path` with `Host: host` over HTTP/1.1 on a fresh connection.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> Reply {
    send(addr, request(Method::GET, host, path, Bytes::new())).await
}

/// Like [`get`], but a refused connection or a failed exchange is an `Err` instead of a panic
/// (for polling a server that may not be up yet).
pub async fn try_get(addr: SocketAddr, host: &str, path: &str) -> Result<Reply, String> {
    let io = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let (mut tx, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = request(Method::GET, host, path, Bytes::new());
    within(CALL_DEADLINE, "HTTP/1 response", async {
        let resp = tx.send_request(req).await?;
        read_reply(resp).await
    })
    .await
    .map_err(|e| e.to_string())
}

/// Sends `req` over HTTP/1.1 on a fresh connection.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Reply {
    let mut conn = H1Conn::connect(addr).await;
    conn.send(req).await
}

/// `GET path` with authority `host` over HTTP/2 with prior knowledge (h2c) on a fresh connection.
pub async fn get_h2(addr: SocketAddr, host: &str, path: &str) -> Reply {
    let uri = format!("http://{host}{path}");
    let req = Request::get(uri)
        .body(Full::new(Bytes::new()))
        .expect("a valid h2 request");
    H2Conn::connect(addr).await.send(req).await
}

/// `POST path` over HTTP/1.1 with a chunked body of `len` bytes of
/// [`crate::backend::pattern_byte`], generated lazily in 64 KiB chunks so the test process never
/// holds it (for memory tests with gigabyte uploads). Compare with
/// [`crate::backend::pattern_fnv1a64`].
pub async fn post_pattern(
    addr: SocketAddr,
    host: &str,
    path: &str,
    len: u64,
    deadline: Duration,
) -> Reply {
    const CHUNK: u64 = 64 * 1024;
    let chunks = (0..len.div_ceil(CHUNK)).map(move |i| {
        let (start, end) = (i * CHUNK, ((i + 1) * CHUNK).min(len));
        let data: Vec<u8> = (start..end).map(crate::backend::pattern_byte).collect();
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(data)))
    });
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
    let req = Request::post(path)
        .header(http::header::HOST, host)
        .body(body)
        .expect("a valid upload request");
    let io = within(CALL_DEADLINE, "HTTP/1 connect", TcpStream::connect(addr))
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (mut tx, conn) = http1::handshake(TokioIo::new(io))
        .await
        .unwrap_or_else(|e| panic!("HTTP/1 handshake with {addr}: {e}"));
    tokio::spawn(conn);
    let reply = within(deadline, "streamed upload", async {
        read_reply(tx.send_request(req).await?).await
    });
    reply
        .await
        .unwrap_or_else(|e| panic!("streamed upload to {addr}: {e}"))
}

/// One HTTP/1.1 connection; requests go one after another on it.
pub struct H1Conn {
    tx: http1::SendRequest<Full<Bytes>>,
}

impl H1Conn {
    /// Connects and handshakes; panics on failure.
    pub async fn connect(addr: SocketAddr) -> H1Conn {
        let io = within(CALL_DEADLINE, "HTTP/1 connect", TcpStream::connect(addr)).await;
        let io = io.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        let (tx, conn) = http1::handshake(TokioIo::new(io))
            .await
            .unwrap_or_else(|e| panic!("HTTP/1 handshake with {addr}: {e}"));
        tokio::spawn(conn.with_upgrades());
        H1Conn { tx }
    }

    /// Sends one request and reads the whole response; panics on error or after [`CALL_DEADLINE`].
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Reply {
        match self.try_send(req).await {
            Ok(reply) => reply,
            Err(e) => panic!("HTTP/1 request failed: {e}"),
        }
    }

    /// Like [`H1Conn::send`] but returns the error (a reset or close), for tests that expect one.
    pub async fn try_send(&mut self, req: Request<Full<Bytes>>) -> Result<Reply, hyper::Error> {
        within(CALL_DEADLINE, "HTTP/1 response", async {
            self.tx.ready().await?;
            let resp = self.tx.send_request(req).await?;
            read_reply(resp).await
        })
        .await
    }

    /// True while the server keeps the connection open.
    pub fn is_open(&self) -> bool {
        !self.tx.is_closed()
    }
}

/// One HTTP/2 (h2c prior knowledge) connection; clones share it, so requests can run concurrently.
#[derive(Clone)]
pub struct H2Conn {
    tx: http2::SendRequest<Full<Bytes>>,
}

impl H2Conn {
    /// Connects and sends the HTTP/2 preface; panics on failure.
    pub async fn connect(addr: SocketAddr) -> H2Conn {
        let io = within(CALL_DEADLINE, "HTTP/2 connect", TcpStream::connect(addr)).await;
        let io = io.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        let (tx, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap_or_else(|e| panic!("HTTP/2 handshake with {addr}: {e}"));
        tokio::spawn(conn);
        H2Conn { tx }
    }

    /// Sends one request (absolute URI: `http://host/path`); panics on error or timeout.
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Reply {
        match self.try_send(req).await {
            Ok(reply) => reply,
            Err(e) => panic!("HTTP/2 request failed: {e}"),
        }
    }

    /// Like [`H2Conn::send`] but returns the error (a stream reset), for tests that expect one.
    pub async fn try_send(&mut self, req: Request<Full<Bytes>>) -> Result<Reply, hyper::Error> {
        within(CALL_DEADLINE, "HTTP/2 response", async {
            self.tx.ready().await?;
            let resp = self.tx.send_request(req).await?;
            read_reply(resp).await
        })
        .await
    }
}

async fn read_reply(resp: http::Response<hyper::body::Incoming>) -> Result<Reply, hyper::Error> {
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        version: parts.version,
    })
}

/// Writes `bytes` on a fresh TCP connection and returns everything read until the peer closes,
/// the read fails (a reset), or `deadline` passes. The write side stays open, as a slow or
/// malformed client would leave it.
pub async fn raw_exchange(addr: SocketAddr, bytes: &[u8], deadline: Duration) -> Vec<u8> {
    let mut io = within(CALL_DEADLINE, "raw connect", TcpStream::connect(addr))
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    // The peer may answer and close before we finish writing a large malformed request.
    let _ = io.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(deadline, async {
        let mut buf = [0u8; 8192];
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    out
}

/// The status code of a raw HTTP/1 response (`HTTP/1.1 400 ...`); `None` when there is none.
pub fn raw_status(response: &[u8]) -> Option<u16> {
    let line = response.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    words.next().filter(|v| v.starts_with("HTTP/"))?;
    words.next()?.parse().ok()
}

/// The length of a raw HTTP/1 message's head, through its blank line; `None` until it is whole.
pub fn head_len(message: &[u8]) -> Option<usize> {
    message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}
