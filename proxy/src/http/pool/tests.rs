//! The HTTP/1 idle pool over real sockets: idle connections beyond the cap are closed once unused
//! for `SURPLUS_IDLE`, expired ones by the sweep, not only skipped when a request comes, and idle
//! ones let go of their buffers after `SLIM_AFTER` but stay open.

use std::sync::{
    atomic::{AtomicUsize, Ordering::SeqCst},
    Arc,
};

use http_body_util::BodyExt;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::*;
use crate::http::h1::Home;

/// An endpoint that runs `serve` on every connection it accepts, each in its own task.
async fn listen<F, Fut>(serve: F) -> EndpointAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = EndpointAddr(l.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s));
        }
    });
    addr
}

/// An endpoint that accepts and holds connections, counting the ones the client has not closed.
async fn endpoint() -> (EndpointAddr, Arc<AtomicUsize>) {
    let open = Arc::new(AtomicUsize::new(0));
    let count = open.clone();
    let addr = listen(move |mut s| {
        count.fetch_add(1, SeqCst);
        let count = count.clone();
        async move {
            let mut buf = [0u8; 64];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            count.fetch_sub(1, SeqCst);
        }
    })
    .await;
    (addr, open)
}

fn pool(addr: EndpointAddr, max_idle: usize) -> Arc<EndpointPool> {
    let config = PoolConfig {
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        max_idle,
        h2_max_header_list_size: 64 * 1024,
        header_case: Default::default(),
    };
    Arc::new(EndpointPool::new(addr, Arc::new(config)))
}

async fn fresh(p: &Arc<EndpointPool>) -> Box<h1::Conn> {
    match p.acquire(UpstreamProto::Http1).await.expect("connect") {
        Conn::H1 { conn, reused } => {
            assert!(!reused, "the pool was empty");
            conn
        }
        Conn::H2(_) => unreachable!("asked for HTTP/1"),
    }
}

async fn wait_open(open: &AtomicUsize, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while open.load(SeqCst) != want {
        assert!(
            Instant::now() < deadline,
            "endpoint sees {} open connections, want {want}",
            open.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn idle_connections_beyond_the_cap_close_once_unused_for_a_while() {
    let (addr, open) = endpoint().await;
    let p = pool(addr, 2);
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(fresh(&p).await);
    }
    for tx in held {
        p.checkin(tx);
    }
    wait_open(&open, 5).await;
    // A swing past the cap under load is kept: the surplus may be needed a moment later.
    assert_eq!(p.tidy(Instant::now()).closed, 0);
    assert_eq!(p.idle_count(), 5);
    assert_eq!(p.tidy(Instant::now() + SURPLUS_IDLE).closed, 3);
    assert_eq!(p.idle_count(), 2);
    wait_open(&open, 2).await;
    // The two kept are reused, not replaced.
    for _ in 0..2 {
        assert!(matches!(
            p.acquire(UpstreamProto::Http1).await,
            Ok(Conn::H1 { reused: true, .. })
        ));
    }
}

#[tokio::test]
async fn the_surplus_closed_is_the_least_recently_used() {
    let (addr, open) = endpoint().await;
    let p = pool(addr, 1);
    let (old, new) = (fresh(&p).await, fresh(&p).await);
    p.checkin(old);
    let t = Instant::now() + SURPLUS_IDLE;
    p.checkin(new);
    // Only the older one has been idle for SURPLUS_IDLE at `t` (give or take the clock).
    let closed = p.tidy(t).closed;
    assert!(closed <= 1);
    assert_eq!(p.tidy(t + SURPLUS_IDLE).closed, 1 - closed);
    assert_eq!(p.idle_count(), 1);
    wait_open(&open, 1).await;
}

#[tokio::test]
async fn a_cap_of_zero_keeps_no_idle_connection_past_the_grace() {
    let (addr, open) = endpoint().await;
    let p = pool(addr, 0);
    let tx = fresh(&p).await;
    p.checkin(tx);
    wait_open(&open, 1).await;
    assert_eq!(p.tidy(Instant::now() + SURPLUS_IDLE).closed, 1);
    assert_eq!(p.idle_count(), 0);
    wait_open(&open, 0).await;
}

#[tokio::test]
async fn expired_idle_connections_are_closed_by_the_sweep() {
    let (addr, open) = endpoint().await;
    let p = pool(addr, 8);
    let (a, b) = (fresh(&p).await, fresh(&p).await);
    p.checkin(a);
    p.checkin(b);
    wait_open(&open, 2).await;
    assert_eq!(p.tidy(Instant::now()).closed, 0, "nothing expired yet");
    let later = Instant::now() + Duration::from_secs(30);
    assert_eq!(p.tidy(later).closed, 2);
    assert_eq!(p.idle_count(), 0);
    wait_open(&open, 0).await;
}

#[tokio::test]
async fn the_sweep_drops_connections_the_endpoint_closed() {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let p = pool(EndpointAddr(l.local_addr().expect("addr")), 8);
    let accept = tokio::spawn(async move { l.accept().await.map(|(s, _)| s) });
    let tx = fresh(&p).await;
    p.checkin(tx);
    drop(accept.await.expect("accept task").expect("accept"));
    // The close makes the idle socket readable; the sweep's probe finds it closed.
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.tidy(Instant::now()).closed == 0 {
        assert!(
            Instant::now() < deadline,
            "the closed connection stayed idle"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(p.idle_count(), 0);
}

/// An endpoint that answers every request on a connection with a 2-byte body, counting the
/// connections it accepted.
async fn answering_endpoint() -> (EndpointAddr, Arc<AtomicUsize>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let addr = listen(move |mut s| {
        count.fetch_add(1, SeqCst);
        async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                got.extend_from_slice(&buf[..n]);
                while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    got.drain(..end + 4);
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nOK";
                    if s.write_all(ok).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    (addr, accepted)
}

/// One GET through the pool, its body read to the end (which checks the connection back in);
/// returns whether it went on a pooled connection.
async fn get(p: &Arc<EndpointPool>) -> bool {
    let conn = p.acquire(UpstreamProto::Http1).await.expect("connect");
    let reused = matches!(conn, Conn::H1 { reused: true, .. });
    let (parts, ()) = Request::get("/")
        .header("host", "endpoint.test")
        .body(())
        .expect("request")
        .into_parts();
    let resp = p
        .send(conn, Box::new(parts), ProxyBody::empty())
        .await
        .expect("response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"OK");
    reused
}

#[tokio::test]
async fn idle_connections_let_go_of_their_buffers_and_stay_open() {
    let (addr, accepted) = answering_endpoint().await;
    let p = pool(addr, 8);
    assert!(!get(&p).await, "the first request connects");
    assert_eq!(p.idle_count(), 1);
    let nothing = Tidied::default();
    assert_eq!(p.tidy(Instant::now()), nothing, "idle only a moment");
    let later = Instant::now() + SLIM_AFTER;
    let slimmed = Tidied {
        closed: 0,
        slimmed: 1,
    };
    assert_eq!(p.tidy(later), slimmed, "idle a while: slimmed");
    assert_eq!(p.tidy(later), nothing, "nothing left to let go");
    assert_eq!(p.idle_count(), 1, "a slimmed connection stays in the pool");
    // It carries the next request on buffers borrowed afresh.
    assert!(get(&p).await, "the slimmed connection is reused");
    assert!(get(&p).await);
    assert_eq!(accepted.load(SeqCst), 1, "no second connection was opened");
}
