//! One HTTP/1.1 GET to a proxy's admin listener, bounded in time and size.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{client::conn::http1, header, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Connect, request and body together; an admin listener answers in milliseconds.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Far above any real `/metrics`; stops a confused peer from filling memory.
const MAX_BODY: usize = 32 << 20;

/// A GET that did not yield a 200 body.
#[derive(Debug, thiserror::Error)]
#[error("GET http://{addr}{path}: {kind}")]
pub(crate) struct ScrapeError {
    addr: String,
    path: &'static str,
    kind: ScrapeErrorKind,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScrapeErrorKind {
    /// The proxy did not say where its admin listener is.
    #[error("the proxy reported no admin address")]
    NoAddr,
    /// TCP connect failed.
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// No full answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The request could not be built (an address that is no valid `Host`).
    #[error("bad request: {0}")]
    Request(String),
    /// HTTP/1 protocol error.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// An answer other than 200.
    #[error("status {0}")]
    Status(StatusCode),
    /// The body failed or was too large.
    #[error("body: {0}")]
    Body(String),
    /// The body was not what the path serves.
    #[error("unexpected content: {0}")]
    Content(String),
}

impl ScrapeError {
    /// Wraps a problem with the body found after it was read.
    pub fn content(addr: &str, path: &'static str, reason: impl ToString) -> Self {
        Self {
            addr: addr.to_string(),
            path,
            kind: ScrapeErrorKind::Content(reason.to_string()),
        }
    }
}

/// `GET http://{addr}{path}`; the body of a 200 answer.
pub(crate) async fn get(addr: &str, path: &'static str) -> Result<Bytes, ScrapeError> {
    let err = |kind| ScrapeError {
        addr: addr.to_string(),
        path,
        kind,
    };
    if addr.is_empty() {
        return Err(err(ScrapeErrorKind::NoAddr));
    }
    match tokio::time::timeout(TIMEOUT, fetch(addr, path)).await {
        Ok(result) => result.map_err(err),
        Err(_) => Err(err(ScrapeErrorKind::Timeout(TIMEOUT))),
    }
}

async fn fetch(addr: &str, path: &'static str) -> Result<Bytes, ScrapeErrorKind> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(ScrapeErrorKind::Connect)?;
    let (mut send, conn) = http1::handshake(TokioIo::new(stream)).await?;
    // Ends once `send` and the body are dropped, on success, error or timeout alike.
    tokio::spawn(conn);
    let req = Request::get(path)
        .header(header::HOST, addr)
        .body(Empty::<Bytes>::new())
        .map_err(|e| ScrapeErrorKind::Request(e.to_string()))?;
    let resp = send.send_request(req).await?;
    if resp.status() != StatusCode::OK {
        return Err(ScrapeErrorKind::Status(resp.status()));
    }
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ScrapeErrorKind::Body(e.to_string()))?;
    Ok(body.to_bytes())
}

/// GETs `path` from every proxy's admin address at once and parses each answer as a JSON array
/// of `T`; a proxy that cannot be read or answers something else is logged and skipped.
pub(super) async fn json_from_each<'p, T: serde::de::DeserializeOwned>(
    proxies: &'p [crate::proxies::ProxySummary],
    path: &'static str,
) -> Vec<(&'p crate::proxies::ProxySummary, Vec<T>)> {
    let fetched = futures_util::future::join_all(proxies.iter().map(|p| async move {
        let addr = &p.identity.admin_addr;
        let read = get(addr, path).await.and_then(|body| {
            serde_json::from_slice::<Vec<T>>(&body).map_err(|e| ScrapeError::content(addr, path, e))
        });
        (p, read)
    }))
    .await;
    fetched
        .into_iter()
        .filter_map(|(p, read)| match read {
            Ok(items) => Some((p, items)),
            Err(error) => {
                tracing::debug!(proxy = %p.identity.id, %error, path, "proxy skipped");
                None
            }
        })
        .collect()
}
