//! A property of the whole downstream HTTP/1 server (fast path, guard and hyper behind it) over a
//! real loopback socket: whatever bytes a client sends before it half-closes, the handler is
//! given exactly the requests the guard's rules find there, in their order and with their
//! bodies (none smuggled, none misframed, none dropped), and the server answers with
//! well-formed responses only, then closes, within a deadline.

use std::{cell::RefCell, net::SocketAddr, time::Duration};

use bytes::BytesMut;
use http::{request::Parts, Response};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    runtime::Runtime,
};

use super::requests::{requests_in, Served};
use crate::{
    config::H2Limits,
    drain::{self, DrainTx},
    http::{
        body::ProxyBody,
        front,
        h1::{decode, names::Names},
        server::ServerConfig,
    },
    transport::prefixed::Prefixed,
};

/// The server's head limit.
const MAX_HEAD: usize = 16 * 1024;

/// How long a connection may take to answer and close once the client has sent everything.
const DEADLINE: Duration = Duration::from_secs(5);

thread_local! {
    /// What the handler was given on this thread's current connection.
    static SERVED: RefCell<Vec<Served>> = const { RefCell::new(Vec::new()) };
}

/// Notes the request and its body's length (unless the body failed) and answers `204`: no
/// response has a body, so the responses can be told apart without knowing which request each
/// answers.
async fn handler(parts: Box<Parts>, body: ProxyBody) -> Response<ProxyBody> {
    let n = match body {
        ProxyBody::Full(Some(b)) => Some(b.len()),
        ProxyBody::Incoming(b) => http_body_util::BodyExt::collect(b)
            .await
            .ok()
            .map(|c| c.to_bytes().len()),
        _ => Some(0),
    };
    if let Some(n) = n {
        let seen = (parts.method.to_string(), parts.uri.path().to_owned(), n);
        SERVED.with_borrow_mut(|s| s.push(seen));
    }
    let mut r = Response::new(ProxyBody::Empty);
    *r.status_mut() = http::StatusCode::NO_CONTENT;
    r
}

/// This thread's runtime and server, made once: a fuzzer calls the property many times a second.
struct Server {
    rt: Runtime,
    addr: SocketAddr,
    _drain: DrainTx,
}

thread_local! {
    static SERVER: RefCell<Option<Server>> = const { RefCell::new(None) };
}

fn start() -> Server {
    let rt = super::runtime();
    let cfg = ServerConfig {
        header_read_timeout: Duration::from_secs(2),
        max_header_bytes: MAX_HEAD,
        idle_timeout: Duration::from_secs(30),
        park_after: Duration::from_millis(250),
        h2: H2Limits::default(),
        header_case: Default::default(),
    };
    let (tx, drain) = drain::channel();
    let l = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = l.local_addr().expect("addr");
    rt.spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (cfg, drain) = (cfg.clone(), drain.clone());
            tokio::spawn(async move {
                front::serve(Prefixed::new(BytesMut::new(), s), &cfg, drain, handler).await;
            });
        }
    });
    Server {
        rt,
        addr,
        _drain: tx,
    }
}

/// Sends `data` on a fresh connection, half-closes, and checks what comes back.
pub fn downstream_bytes(data: &[u8]) {
    SERVER.with_borrow_mut(|server| {
        let s = server.get_or_insert_with(start);
        SERVED.with_borrow_mut(Vec::clear);
        let back = s.rt.block_on(exchange(s.addr, data));
        check_responses(&back, data);
        let served = SERVED.with_borrow_mut(std::mem::take);
        let (found, all) = requests_in(data, MAX_HEAD);
        assert!(
            if all {
                served == found
            } else {
                served.starts_with(&found)
            },
            "served {served:?}, but the guard's rules find {found:?} in {}",
            super::show(data)
        );
    });
}

async fn exchange(addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let mut back = Vec::new();
    let talk = async {
        // The server may close early (a refused head): what it sent before is still read.
        let _ = c.write_all(data).await;
        let _ = c.shutdown().await;
        let _ = c.read_to_end(&mut back).await;
    };
    if tokio::time::timeout(DEADLINE, talk).await.is_err() {
        panic!(
            "no close within {DEADLINE:?} after {}; sent {}",
            super::show(&back),
            super::show(data)
        );
    }
    back
}

/// Every byte back belongs to a well-formed response head (interim ones included) followed by
/// the body its `Content-Length` declares.
fn check_responses(back: &[u8], sent: &[u8]) {
    let mut buf = BytesMut::from(back);
    let mut names = Names::default();
    while !buf.is_empty() {
        // As for a HEAD request: the length is taken from the field, not trusted as framing.
        let head = match decode::response(&mut buf, true, &mut names) {
            Ok(Some(h)) => h,
            other => panic!(
                "{other:?} in {}; sent {}",
                super::show(back),
                super::show(sent)
            ),
        };
        assert!(
            !head.headers.contains_key(http::header::TRANSFER_ENCODING),
            "a chunked answer to {}",
            super::show(sent)
        );
        let n = head
            .headers
            .get(http::header::CONTENT_LENGTH)
            .map_or(0, |v| {
                v.to_str()
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .expect("length")
            });
        assert!(buf.len() >= n, "a body cut short in {}", super::show(back));
        let _ = buf.split_to(n);
    }
}
