//! An HTTP/2 (h2c prior knowledge) client for tests that need more than [`crate::http_client`]
//! gives: streamed request bodies, response trailers, and reading a response body at the
//! test's own pace (flow control).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Version};
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::http_client::CALL_DEADLINE;
use crate::wait::within;

/// The request body type: anything that yields `Bytes` frames.
pub type ReqBody = BoxBody<Bytes, Infallible>;

/// A body of one chunk.
pub fn full(b: impl Into<Bytes>) -> ReqBody {
    Full::new(b.into()).boxed()
}

/// An empty body.
pub fn empty() -> ReqBody {
    Empty::new().boxed()
}

/// One multiplexed HTTP/2 connection; clones share it.
#[derive(Clone)]
pub struct H2Client {
    tx: http2::SendRequest<ReqBody>,
}

impl H2Client {
    /// Connects and handshakes with hyper's default windows; panics on failure.
    pub async fn connect(addr: SocketAddr) -> H2Client {
        let io = within(CALL_DEADLINE, "HTTP/2 connect", TcpStream::connect(addr)).await;
        let io = io.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        let (tx, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap_or_else(|e| panic!("HTTP/2 handshake with {addr}: {e}"));
        tokio::spawn(conn);
        H2Client { tx }
    }

    /// Sends `req` (absolute URI) and returns the response head; the body streams on.
    pub async fn send(
        &mut self,
        req: Request<ReqBody>,
    ) -> Result<Response<Incoming>, hyper::Error> {
        within(CALL_DEADLINE, "HTTP/2 response head", async {
            self.tx.ready().await?;
            self.tx.send_request(req).await
        })
        .await
    }
}

/// A whole response, trailers included.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Status.
    pub status: StatusCode,
    /// Version (HTTP/2 when it came over this client).
    pub version: Version,
    /// Headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// Trailers, when the peer sent any.
    pub trailers: Option<HeaderMap>,
}

impl Collected {
    /// A header's value, if present and UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A trailer's value, if present and UTF-8.
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers.as_ref()?.get(name)?.to_str().ok()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// Reads the whole response (body and trailers) within `deadline`.
pub async fn collect(
    resp: Response<Incoming>,
    deadline: Duration,
) -> Result<Collected, hyper::Error> {
    let (parts, body) = resp.into_parts();
    let collected = within(deadline, "HTTP/2 response body", body.collect()).await?;
    let trailers = collected.trailers().cloned();
    Ok(Collected {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        body: collected.to_bytes(),
        trailers,
    })
}

/// Sends and collects in one step; panics on a transport error.
pub async fn exchange(client: &mut H2Client, req: Request<ReqBody>) -> Collected {
    let resp = client
        .send(req)
        .await
        .unwrap_or_else(|e| panic!("HTTP/2 request failed: {e}"));
    collect(resp, CALL_DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("HTTP/2 response body failed: {e}"))
}

/// `GET http://{authority}{path}` with an empty body.
pub fn get(authority: &str, path: &str) -> Request<ReqBody> {
    Request::get(format!("http://{authority}{path}"))
        .body(empty())
        .expect("a valid GET")
}
