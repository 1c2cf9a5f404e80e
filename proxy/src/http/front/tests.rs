//! The fast path over real sockets: what it serves itself, and what it hands to hyper.

use std::time::Duration;

use bytes::BytesMut;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::*;
use crate::{config::H2Limits, drain, drain::DrainTx};

/// Answers `<method> <path> <body length> <x-seen header>` with a Content-Length.
async fn echo(parts: Box<Parts>, body: ProxyBody) -> Response<ProxyBody> {
    let n = match body {
        ProxyBody::Full(Some(b)) => b.len(),
        ProxyBody::Empty => 0,
        // Bodies the fast path does not read whole are hyper's.
        ProxyBody::Incoming(b) => http_body_util::BodyExt::collect(b)
            .await
            .map_or(0, |c| c.to_bytes().len()),
        _ => usize::MAX,
    };
    let seen = parts
        .headers
        .get("x-seen")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    Response::new(ProxyBody::full(format!(
        "{} {} {n} {seen}",
        parts.method,
        parts.uri.path()
    )))
}

fn config(park_after: Duration, idle_timeout: Duration, head_timeout: Duration) -> ServerConfig {
    ServerConfig {
        header_read_timeout: head_timeout,
        max_header_bytes: 16 * 1024,
        idle_timeout,
        park_after,
        h2: H2Limits::default(),
        header_case: Default::default(),
    }
}

/// A listener serving every connection on the fast path.
async fn server(cfg: ServerConfig) -> (std::net::SocketAddr, DrainTx) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, drain) = drain::channel();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.expect("accept");
            let (cfg, drain) = (cfg.clone(), drain.clone());
            tokio::spawn(async move {
                serve(Prefixed::new(BytesMut::new(), s), &cfg, drain, echo).await;
            });
        }
    });
    (addr, tx)
}

async fn default_server() -> (std::net::SocketAddr, DrainTx) {
    server(config(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_secs(5),
    ))
    .await
}

/// Reads `n` whole responses (each with a Content-Length) and returns them as text.
async fn responses(s: &mut TcpStream, n: usize) -> Vec<String> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().expect("length"));
            if buf.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                out.push(format!("{head}\r\n\r\n{body}"));
                buf.drain(..end + 4 + len);
                continue;
            }
        }
        let mut chunk = [0u8; 4096];
        let k = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(
            k > 0,
            "closed after {out:?} and {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..k]);
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    let (addr, _tx) = default_server().await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /one HTTP/1.1\r\nHost: a\r\nX-Seen: 1\r\n\r\n")
        .await
        .expect("write");
    let r = responses(&mut s, 1).await;
    assert!(r[0].starts_with("HTTP/1.1 200 OK\r\n"), "{}", r[0]);
    assert!(r[0].contains("\r\ndate: "), "{}", r[0]);
    assert!(r[0].ends_with("GET /one 0 1"), "{}", r[0]);
    let burst = "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\nHost: a\r\n\r\n";
    s.write_all(burst.as_bytes()).await.expect("write");
    let r = responses(&mut s, 3).await;
    assert!(r[0].ends_with("GET /a 0 -"), "{r:?}");
    assert!(r[1].ends_with("POST /b 5 -"), "{r:?}");
    assert!(r[2].ends_with("GET /c 0 -"), "{r:?}");
}

#[tokio::test]
async fn a_short_body_arriving_in_pieces_is_read_whole() {
    let (addr, _tx) = default_server().await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"PUT /p HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n01")
        .await
        .expect("write");
    for piece in [&b"234"[..], b"56789"] {
        tokio::task::yield_now().await;
        s.write_all(piece).await.expect("write");
    }
    let r = responses(&mut s, 1).await;
    assert!(r[0].ends_with("PUT /p 10 -"), "{r:?}");
}

#[tokio::test]
async fn connection_close_is_honoured() {
    let (addr, _tx) = default_server().await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let r = responses(&mut s, 1).await;
    assert!(r[0].contains("\r\nconnection: close\r\n"), "{r:?}");
    assert!(closed(&mut s).await);
}

#[tokio::test]
async fn requests_the_fast_path_does_not_serve_go_to_hyper_on_the_same_connection() {
    let (addr, _tx) = default_server().await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    // Served here, then a chunked upload (hyper's), then a plain request (still hyper's).
    s.write_all(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    responses(&mut s, 1).await;
    s.write_all(b"POST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let r = responses(&mut s, 2).await;
    assert!(r[0].ends_with("POST /2 3 -"), "{r:?}");
    assert!(r[1].ends_with("GET /3 0 -"), "{r:?}");
}

#[tokio::test]
async fn a_refused_head_gets_the_guards_answer() {
    let (addr, _tx) = default_server().await;
    for bad in [
        &b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(bad).await.expect("write");
        let r = responses(&mut s, 1).await;
        assert!(r[0].starts_with("HTTP/1.1 400 "), "{r:?}");
        assert!(closed(&mut s).await, "{:?}", String::from_utf8_lossy(bad));
    }
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    s.write_all(huge.as_bytes()).await.expect("write");
    let r = responses(&mut s, 1).await;
    assert!(r[0].starts_with("HTTP/1.1 431 "), "{r:?}");
}

#[tokio::test]
async fn a_head_not_finished_in_time_closes_the_connection() {
    let (addr, _tx) = server(config(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_millis(200),
    ))
    .await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHo").await.expect("write");
    assert!(
        closed(&mut s).await,
        "a slow head is not waited on for ever"
    );
}

#[tokio::test]
async fn an_idle_connection_parks_serves_again_and_then_times_out() {
    let (addr, _tx) = server(config(
        Duration::from_millis(20),
        Duration::from_millis(600),
        Duration::from_secs(5),
    ))
    .await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    for i in 0..2 {
        let before = server::parks_total();
        s.write_all(format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let r = responses(&mut s, 1).await;
        assert!(r[0].ends_with(&format!("GET /{i} 0 -")), "{r:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while server::parks_total() == before {
            assert!(Instant::now() < deadline, "never parked");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(closed(&mut s).await, "closed by the idle timeout");
}

#[tokio::test]
async fn draining_closes_idle_connections() {
    let (addr, tx) = default_server().await;
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    responses(&mut idle, 1).await;
    tx.signal();
    assert!(closed(&mut idle).await);
}

#[tokio::test]
async fn a_head_response_has_no_body() {
    let (addr, _tx) = default_server().await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\nGET /g HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while find(&got, b"GET /g").is_none() {
        let k = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("in time")
            .expect("read");
        assert!(k > 0);
        got.extend_from_slice(&b[..k]);
    }
    let text = String::from_utf8_lossy(&got);
    // The HEAD answer's head is followed straight by the next response.
    let second = text
        .find("HTTP/1.1 200 OK")
        .and_then(|first| text[first + 1..].find("HTTP/1.1 200 OK"));
    assert!(second.is_some(), "{text}");
    assert!(
        !text.contains("HEAD /h"),
        "no body after a HEAD answer: {text}"
    );
}
