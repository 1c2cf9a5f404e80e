//! An upstream (hyper, not weir) that records every request it receives, field by field and with
//! how its body ended, and answers `200 ok` once the body is whole: the far side of the
//! protocol-translation differentials. HTTP/1.1, or HTTP/2 with prior knowledge.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::registry::{gateway_prefixes, PrefixRoute};
use crate::WeirProxy;

/// Fields as name and value bytes, in order.
pub type Fields = Vec<(String, Vec<u8>)>;
/// How a body ended: its bytes and trailers, or why it did not.
pub type End = Result<(Vec<u8>, Fields), String>;

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The upstream connection (numbered in accept order) and the request's place on it.
    pub conn: usize,
    pub nth: usize,
    pub method: String,
    /// As hyper gives it: origin-form for HTTP/1.1, absolute for HTTP/2.
    pub uri: String,
    pub fields: Fields,
    /// `None` while the body is still coming; then its bytes and trailers, or why it failed.
    pub end: Option<End>,
}

/// A recorder and a gateway whose one route sends every path to it, the service declared
/// `appProtocol: h2c` if `h2`, else `http`: what the gateway receives goes on translated.
pub async fn behind_a_gateway(h2: bool) -> (Recorder, WeirProxy) {
    let up = Recorder::start(h2).await;
    let eps = [up.addr];
    let route = PrefixRoute {
        prefix: "/",
        strip: false,
        service: "up",
        app_protocol: Some(if h2 { "h2c" } else { "http" }),
        endpoints: &eps,
    };
    let proxy = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[route]))
        .gateway(true)
        .start()
        .await;
    (up, proxy)
}

/// A running recorder; stops when dropped.
pub struct Recorder {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Listens on a free loopback port, speaking HTTP/2 if `h2`, else HTTP/1.1.
    pub async fn start(h2: bool) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let task = tokio::spawn(accept(listener, log.clone(), h2));
        Recorder { addr, log, task }
    }

    /// Everything received so far.
    pub fn all(&self) -> Vec<Seen> {
        self.log.lock().expect("log").clone()
    }

    /// The requests whose target `pick` accepts.
    pub fn matching(&self, pick: impl Fn(&str) -> bool) -> Vec<Seen> {
        let log = self.log.lock().expect("log");
        log.iter().filter(|s| pick(&s.uri)).cloned().collect()
    }
}

async fn accept(listener: TcpListener, log: Arc<Mutex<Vec<Seen>>>, h2: bool) {
    let mut conns = JoinSet::new();
    let mut accepted = 0;
    while let Ok((io, _)) = listener.accept().await {
        let log = log.clone();
        accepted += 1;
        let (conn, nth) = (accepted, Arc::new(AtomicUsize::new(0)));
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let nth = nth.fetch_add(1, Ordering::SeqCst);
                record(log.clone(), conn, nth, req)
            });
            let io = TokioIo::new(io);
            let _ = if h2 {
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(io, svc)
                    .await
            } else {
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await
            };
        });
    }
}

fn fields(h: &http::HeaderMap) -> Fields {
    h.iter()
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect()
}

async fn record(
    log: Arc<Mutex<Vec<Seen>>>,
    conn: usize,
    nth: usize,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let at = {
        let mut log = log.lock().expect("log");
        log.push(Seen {
            conn,
            nth,
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            fields: fields(&parts.headers),
            end: None,
        });
        log.len() - 1
    };
    // hyper drops this future when the connection closes mid-body: the guard records that.
    let mut entry = Entry { log, at, end: None };
    entry.end = Some(match body.collect().await {
        Ok(c) => {
            let trailers = c.trailers().map_or_else(Vec::new, fields);
            Ok((c.to_bytes().to_vec(), trailers))
        }
        Err(e) => Err(e.to_string()),
    });
    drop(entry);
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// Writes how a logged request's body ended when dropped: as read, or cut short.
struct Entry {
    log: Arc<Mutex<Vec<Seen>>>,
    at: usize,
    end: Option<End>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let end = self
            .end
            .take()
            .unwrap_or_else(|| Err("the connection closed before the body ended".into()));
        if let Ok(mut log) = self.log.lock() {
            log[self.at].end = Some(end);
        }
    }
}
