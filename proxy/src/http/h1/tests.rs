//! The HTTP/1 client over real sockets, against an upstream whose every byte the test writes.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use http::Request;

use super::*;
use crate::http::props::Slot;

/// [`super::send`] for a whole request, owning it (the tests spawn it).
async fn send(
    conn: Box<Conn>,
    req: Request<ProxyBody>,
    home: Arc<dyn Home>,
) -> Result<Response<ProxyBody>, Failed> {
    let (parts, body) = req.into_parts();
    super::send(conn, Box::new(parts), body, home).await
}

/// A connected pair: our client's connection and the upstream's end of it.
async fn pair() -> (Box<Conn>, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = TcpStream::connect(l.local_addr().expect("addr"));
    let (client, server) = tokio::join!(client, l.accept());
    (
        Conn::new(client.expect("connect"), Default::default()),
        server.expect("accept").0,
    )
}

/// Reads one request head (and nothing more) from the upstream's end.
async fn read_head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("a request in time")
            .expect("read");
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&got));
        got.push(b[0]);
    }
    String::from_utf8(got).expect("ascii head")
}

fn get(path: &str) -> Request<ProxyBody> {
    Request::get(path)
        .header("host", "up")
        .body(ProxyBody::Empty)
        .expect("request")
}

async fn collect(resp: Response<ProxyBody>) -> (Bytes, Option<HeaderMap>) {
    let c = resp.into_body().collect().await.expect("whole body");
    let trailers = c.trailers().cloned();
    (c.to_bytes(), trailers)
}

#[tokio::test]
async fn one_connection_carries_request_after_request() {
    let (conn, mut up) = pair().await;
    let home = Arc::new(Slot::default());
    let mut conn = Some(conn);
    for i in 1..=3 {
        let c = conn.take().expect("the connection came home");
        let sent = tokio::spawn(send(c, get(&format!("/{i}")), home.clone()));
        assert_eq!(
            read_head(&mut up).await,
            format!("GET /{i} HTTP/1.1\r\nhost: up\r\n\r\n")
        );
        up.write_all(
            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-N: {i}\r\n\r\nr{i}").as_bytes(),
        )
        .await
        .expect("write");
        let resp = sent.await.expect("task").expect("response");
        assert_eq!(resp.headers()["x-n"], i.to_string().as_str());
        // The body was whole in the buffer: the connection is home before the body is read.
        conn = home.take();
        assert!(conn.is_some(), "request {i}: connection not returned");
        assert_eq!(collect(resp).await.0, format!("r{i}"));
    }
}

#[tokio::test]
async fn a_chunked_response_arriving_byte_by_byte_streams_with_its_trailers() {
    let (conn, mut up) = pair().await;
    let home = Arc::new(Slot::default());
    let sent = tokio::spawn(send(conn, get("/"), home.clone()));
    read_head(&mut up).await;
    let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\ngrpc-status: 0\r\n\r\n";
    let writer = tokio::spawn(async move {
        for b in wire {
            up.write_all(&[*b]).await.expect("write");
            up.flush().await.expect("flush");
        }
        up
    });
    let resp = sent.await.expect("task").expect("response");
    let (body, trailers) = collect(resp).await;
    assert_eq!(body, "hello world");
    assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
    assert!(
        home.take().is_some(),
        "the connection came home after the last chunk"
    );
    drop(writer.await);
}

#[tokio::test]
async fn a_large_body_streams_in_pieces_and_the_connection_comes_home_after_it() {
    let (conn, mut up) = pair().await;
    let home = Arc::new(Slot::default());
    let sent = tokio::spawn(send(conn, get("/big"), home.clone()));
    read_head(&mut up).await;
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let expect = body.clone();
    let writer = tokio::spawn(async move {
        up.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            .await
            .expect("write");
        up.write_all(&body).await.expect("write");
        up
    });
    let resp = sent.await.expect("task").expect("response");
    assert_eq!(resp.body().size_hint().exact(), Some(1_000_000));
    let mut body = resp.into_body();
    let mut got = Vec::new();
    let mut frames = 0;
    while let Some(f) = body.frame().await {
        got.extend_from_slice(&f.expect("frame").into_data().expect("data"));
        frames += 1;
        if got.len() < expect.len() {
            assert!(home.take().is_none(), "home before the body ended");
        }
    }
    assert_eq!(got, expect);
    assert!(frames > 1, "a megabyte is not buffered whole");
    assert!(home.take().is_some());
    drop(writer.await);
}

#[tokio::test]
async fn a_body_delimited_by_close_ends_the_connection() {
    let (conn, mut up) = pair().await;
    let home = Arc::new(Slot::default());
    let sent = tokio::spawn(send(conn, get("/"), home.clone()));
    read_head(&mut up).await;
    up.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil ")
        .await
        .expect("write");
    let resp = sent.await.expect("task").expect("response");
    up.write_all(b"the end").await.expect("write");
    drop(up);
    assert_eq!(collect(resp).await.0, "until the end");
    assert!(home.take().is_none());
}

#[tokio::test]
async fn head_and_no_content_answers_have_no_body() {
    let (conn, mut up) = pair().await;
    let home = Arc::new(Slot::default());
    let head = Request::head("/").body(ProxyBody::Empty).expect("request");
    let sent = tokio::spawn(send(conn, head, home.clone()));
    read_head(&mut up).await;
    up.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
        .await
        .expect("write");
    let resp = sent.await.expect("task").expect("response");
    assert!(resp.body().is_end_stream());
    let conn = home.take().expect("home at once");
    let sent = tokio::spawn(send(conn, get("/"), home.clone()));
    read_head(&mut up).await;
    up.write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
        .await
        .expect("write");
    let resp = sent.await.expect("task").expect("response");
    assert_eq!(resp.status(), 204);
    assert!(home.take().is_some());
}

#[tokio::test]
async fn a_whole_request_body_goes_out_with_its_head() {
    let (conn, mut up) = pair().await;
    let home = Arc::new(Slot::default());
    let post = Request::post("/p")
        .header("host", "up")
        .body(ProxyBody::full("{\"a\":1}"))
        .expect("request");
    let sent = tokio::spawn(send(conn, post, home.clone()));
    let head = read_head(&mut up).await;
    assert_eq!(
        head,
        "POST /p HTTP/1.1\r\nhost: up\r\ncontent-length: 7\r\n\r\n"
    );
    let mut body = [0u8; 7];
    up.read_exact(&mut body).await.expect("body");
    assert_eq!(&body, b"{\"a\":1}");
    up.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(sent.await.expect("task").expect("response").status(), 201);
}

#[tokio::test]
async fn bad_framing_fails_the_exchange_and_the_connection() {
    for bad in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    ] {
        let (conn, mut up) = pair().await;
        let home = Arc::new(Slot::default());
        let sent = tokio::spawn(send(conn, get("/"), home.clone()));
        read_head(&mut up).await;
        up.write_all(bad).await.expect("write");
        drop(up);
        let ok = match sent.await.expect("task") {
            Err(_) => false,
            Ok(resp) => resp.into_body().collect().await.is_ok(),
        };
        // Bytes after a whole response do not fail it, but the connection is out of step.
        assert_eq!(
            ok,
            bad.ends_with(b"EXTRA"),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
        assert!(
            home.take().is_none(),
            "{:?}: reused",
            String::from_utf8_lossy(bad)
        );
    }
}

#[tokio::test]
async fn a_connection_closed_unanswered_offers_a_replay_only_when_safe() {
    for (req, replayable) in [
        (get("/"), true),
        (
            Request::post("/")
                .body(ProxyBody::full("x"))
                .expect("request"),
            false,
        ),
    ] {
        let (conn, mut up) = pair().await;
        let sent = tokio::spawn(send(conn, req, Arc::new(Slot::default())));
        read_head(&mut up).await;
        drop(up);
        let failed = sent.await.expect("task").expect_err("no response");
        assert_eq!(failed.replay.is_some(), replayable, "{:?}", failed.error);
    }
}

#[tokio::test]
async fn a_closed_idle_connection_is_not_open() {
    let (conn, up) = pair().await;
    assert!(conn.is_open());
    drop(up);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conn.is_open() {
        assert!(tokio::time::Instant::now() < deadline, "close never seen");
        conn.io.readable().await.expect("readable");
    }
}
