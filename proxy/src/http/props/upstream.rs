//! A property of the upstream HTTP/1 client (`http/h1`) over a real loopback socket: whatever
//! bytes an upstream answers a GET with before it closes, the client's response, body and
//! trailers are exactly what the response decoders read from those bytes at once, and the
//! connection goes back to the pool only after a complete, keep-alive response. (Whether bytes
//! after it keep it out is timing here, since they may come in a later read: the pool's
//! `is_open` check catches those, and `h1/tests.rs` sends them in the same read.)

use std::{
    cell::RefCell,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    runtime::Runtime,
};

use crate::http::{
    body::ProxyBody,
    h1::{self, chunked, decode, names::Names, Conn, Home},
};

/// How long the exchange may take once the upstream has written everything and closed.
const DEADLINE: Duration = Duration::from_secs(5);

/// A pool of one: keeps the connection checked in (the client's unit tests use it too).
#[derive(Default)]
pub(crate) struct Slot(Mutex<Option<Box<Conn>>>);

impl Home for Slot {
    fn checkin(&self, conn: Box<Conn>) {
        let old = self.0.lock().expect("lock").replace(conn);
        assert!(old.is_none(), "a connection came home twice");
    }
}

impl Slot {
    /// The connection, if it came home.
    pub(crate) fn take(&self) -> Option<Box<Conn>> {
        self.0.lock().expect("lock").take()
    }
}

struct Upstream {
    rt: Runtime,
    listener: TcpListener,
    addr: SocketAddr,
}

thread_local! {
    static UPSTREAM: RefCell<Option<Upstream>> = const { RefCell::new(None) };
}

fn start() -> Upstream {
    let rt = super::runtime();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    Upstream { rt, listener, addr }
}

/// What the client made of the upstream's bytes.
#[derive(Debug, PartialEq)]
enum Seen {
    /// No response (the head failed, or the upstream closed first).
    Failed,
    /// A response whose body failed or was cut short.
    BodyFailed(StatusCode),
    /// A whole response: status, body, trailers.
    Whole(StatusCode, Bytes, Option<HeaderMap>),
}

/// Sends `GET /` to an upstream that answers with `data` and closes, and checks the client's
/// view against [`expected`].
pub fn upstream_bytes(data: &[u8]) {
    UPSTREAM.with_borrow_mut(|u| {
        let u = u.get_or_insert_with(start);
        let (seen, home) = u.rt.block_on(async {
            tokio::time::timeout(DEADLINE, exchange(&u.listener, u.addr, data))
                .await
                .unwrap_or_else(|_| {
                    panic!("no answer within {DEADLINE:?} to {}", super::show(data))
                })
        });
        let (want, reusable) = expected(data);
        assert_eq!(
            seen,
            want,
            "the client against the decoders: {}",
            super::show(data)
        );
        if home {
            assert!(
                reusable,
                "a connection came home after {}",
                super::show(data)
            );
        }
    });
}

async fn exchange(l: &TcpListener, addr: SocketAddr, data: &[u8]) -> (Seen, bool) {
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), l.accept());
    let (conn, mut up) = (
        Conn::new(client.expect("connect"), Default::default()),
        accepted.expect("accept").0,
    );
    let answer = async {
        let mut head = Vec::new();
        let mut b = [0u8; 256];
        while !head.ends_with(b"\r\n\r\n") {
            match up.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&b[..n]),
            }
        }
        let _ = up.write_all(data).await;
        let _ = up.shutdown().await;
    };
    let home = Arc::new(Slot::default());
    let req = Request::get("/")
        .header("host", "up")
        .body(())
        .expect("request");
    let sent = h1::send(
        conn,
        Box::new(req.into_parts().0),
        ProxyBody::Empty,
        home.clone(),
    );
    let ((), sent) = tokio::join!(answer, sent);
    let seen = match sent {
        Err(_) => Seen::Failed,
        Ok(resp) => {
            let status = resp.status();
            match resp.into_body().collect().await {
                Ok(c) => {
                    let trailers = c.trailers().cloned();
                    Seen::Whole(status, c.to_bytes(), trailers)
                }
                Err(_) => Seen::BodyFailed(status),
            }
        }
    };
    let came_home = home.take().is_some();
    (seen, came_home)
}

/// What the decoders read from `data` whole: the response, and whether the connection could
/// carry another request after it (complete and keep-alive).
fn expected(data: &[u8]) -> (Seen, bool) {
    let mut buf = BytesMut::from(data);
    let head = match decode::response(&mut buf, false, &mut Names::default()) {
        Ok(Some(head)) => head,
        _ => return (Seen::Failed, false),
    };
    let status = head.status;
    let (body, trailers) = match head.framing {
        decode::BodyFraming::Empty => (Bytes::new(), None),
        decode::BodyFraming::Length(n) => {
            if (buf.len() as u64) < n {
                return (Seen::BodyFailed(status), false);
            }
            (buf.split_to(n as usize).freeze(), None)
        }
        decode::BodyFraming::UntilClose => (buf.split().freeze(), None),
        decode::BodyFraming::Chunked => {
            let mut d = chunked::Chunked::default();
            let mut body = BytesMut::new();
            loop {
                match d.step(&mut buf) {
                    Ok(chunked::Step::Data(b)) => body.extend_from_slice(&b),
                    Ok(chunked::Step::End) => break (body.freeze(), None),
                    Ok(chunked::Step::Trailers(t)) => break (body.freeze(), Some(t)),
                    Ok(chunked::Step::More) | Err(_) => return (Seen::BodyFailed(status), false),
                }
            }
        }
    };
    let reusable = head.keep_alive;
    (Seen::Whole(status, body, trailers), reusable)
}
