//! HTTP/1.1 message bodies through the gateway listener: gigabyte streams in bounded memory,
//! `Expect: 100-continue`, pipelining, both body framings, and bodiless responses (HEAD, 204)
//! that must not desynchronise a keep-alive connection.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use weir_tests::backend::pattern_fnv1a64;
use weir_tests::pattern::{self, Pattern};
use weir_tests::raw_http1::{read_head, read_raw_head, read_response, RawResponse};
use weir_tests::registry::{gateway_prefixes, strip};
use weir_tests::wait::within;
use weir_tests::{http_client, TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
const GIB: u64 = 1 << 30;
/// A gigabyte through a debug proxy takes ~5 s here (the proxy spends ~1.5 s of CPU on it); the
/// margin is for a loaded 2-core CI machine.
const GIB_DEADLINE: Duration = Duration::from_secs(180);

/// Peak RSS allowed while a 1 GiB body passes through. The debug proxy idles at about 10 MiB and
/// peaks near 14 MiB while streaming (per connection it holds hyper's read buffer of at most
/// ~400 KiB, a write buffer, and HTTP/2 windows of 1 MiB); 64 MiB leaves room for allocator
/// slack, yet a proxy holding even a sixteenth of the body would exceed it.
const PROXY_RSS_BOUND_KIB: u64 = 64 * 1024;

async fn proxy_for(backend: &TestBackend) -> WeirProxy {
    let eps = [backend.addr];
    WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/b", "bodies", &eps)]))
        .gateway(true)
        .start()
        .await
}

/// A raw keep-alive connection to the gateway.
async fn raw(proxy: &WeirProxy) -> BufReader<TcpStream> {
    let io = TcpStream::connect(proxy.gateway.expect("gateway listener"))
        .await
        .expect("connect to the gateway");
    BufReader::new(io)
}

async fn write(io: &mut BufReader<TcpStream>, bytes: &[u8]) {
    io.get_mut()
        .write_all(bytes)
        .await
        .expect("write to the gateway");
}

async fn response(io: &mut BufReader<TcpStream>, method: &str) -> RawResponse {
    read_response(io, method, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("reading the response to {method}: {e}"))
}

#[tokio::test]
async fn a_1_gib_chunked_upload_streams_through_intact_in_bounded_proxy_memory() {
    let backend = TestBackend::start("gib-up").await;
    let proxy = proxy_for(&backend).await;
    let expected = tokio::task::spawn_blocking(|| pattern::fnv1a64(GIB));
    let started = Instant::now();
    let gw = proxy.gateway.expect("gateway listener");
    let reply =
        http_client::post_pattern(gw, "bodies.test", "/b/_/stream", GIB, GIB_DEADLINE).await;
    eprintln!(
        "1 GiB upload through the proxy took {:?}",
        started.elapsed()
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["bytes"], GIB);
    assert_eq!(
        reply.json()["fnv1a64"],
        expected.await.expect("checksum task")
    );
    let peak = proxy.peak_rss_kib();
    eprintln!("proxy peak RSS {peak} KiB");
    assert!(
        peak < PROXY_RSS_BOUND_KIB,
        "proxy peak RSS {peak} KiB for a 1 GiB upload"
    );
}

#[tokio::test]
async fn a_1_gib_download_streams_through_intact_in_bounded_proxy_memory() {
    let backend = TestBackend::start("gib-down").await;
    let proxy = proxy_for(&backend).await;
    let gw = proxy.gateway.expect("gateway listener");
    let started = Instant::now();
    let io = TcpStream::connect(gw)
        .await
        .expect("connect to the gateway");
    let (mut tx, conn) = http1::handshake(TokioIo::new(io))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(conn);
    let req = http_client::request(
        http::Method::GET,
        "bodies.test",
        &format!("/b/_/bytes/{GIB}"),
        "",
    );
    let resp = within(DEADLINE, "response head", tx.send_request(req))
        .await
        .expect("response head");
    assert_eq!(resp.status(), 200);
    let pattern = Pattern::new();
    let mut body = resp.into_body();
    let mut got = 0u64;
    let all = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("body frame");
            if let Some(data) = frame.data_ref() {
                assert!(
                    pattern.matches(got, data),
                    "bytes at {got} differ from the pattern"
                );
                got += data.len() as u64;
            }
        }
    };
    within(GIB_DEADLINE, "1 GiB download", all).await;
    eprintln!(
        "1 GiB download through the proxy took {:?}",
        started.elapsed()
    );
    assert_eq!(got, GIB);
    let peak = proxy.peak_rss_kib();
    eprintln!("proxy peak RSS {peak} KiB");
    assert!(
        peak < PROXY_RSS_BOUND_KIB,
        "proxy peak RSS {peak} KiB for a 1 GiB download"
    );
}

#[tokio::test]
async fn expect_100_continue_gets_100_before_the_body_and_the_body_reaches_the_backend() {
    let backend = TestBackend::start("expect").await;
    let proxy = proxy_for(&backend).await;
    let mut io = raw(&proxy).await;
    write(
        &mut io,
        b"POST /b/upload HTTP/1.1\r\nHost: bodies.test\r\nContent-Length: 11\r\n\
          Expect: 100-continue\r\n\r\n",
    )
    .await;
    // The client holds the body back until it hears 100 Continue.
    let (status, _) = within(DEADLINE, "100 Continue before the body", read_head(&mut io))
        .await
        .expect("interim response");
    assert_eq!(status, 100);
    write(&mut io, b"hello world").await;
    let reply = response(&mut io, "POST").await;
    assert_eq!(reply.status, 200);
    let echo = reply.json();
    assert_eq!(echo["body"], "hello world");
    assert_eq!(echo["uri"], "/upload");
}

#[tokio::test]
async fn three_pipelined_requests_in_one_write_get_three_responses_in_order() {
    let backend = TestBackend::start("pipeline").await;
    let proxy = proxy_for(&backend).await;
    let mut io = raw(&proxy).await;
    // The first is the slowest: a proxy answering out of order would put it last.
    write(
        &mut io,
        b"GET /b/_/delay/200 HTTP/1.1\r\nHost: bodies.test\r\n\r\n\
          GET /b/second HTTP/1.1\r\nHost: bodies.test\r\n\r\n\
          POST /b/third HTTP/1.1\r\nHost: bodies.test\r\nContent-Length: 5\r\n\r\nthree",
    )
    .await;
    let first = response(&mut io, "GET").await;
    let second = response(&mut io, "GET").await;
    let third = response(&mut io, "POST").await;
    assert_eq!(first.json()["uri"], "/_/delay/200");
    assert_eq!(second.json()["uri"], "/second");
    assert_eq!(third.json()["uri"], "/third");
    assert_eq!(third.json()["body"], "three");
    for r in [&first, &second, &third] {
        assert_eq!(r.status, 200);
    }
}

#[tokio::test]
async fn content_length_and_chunked_request_bodies_arrive_intact() {
    let backend = TestBackend::start("framing").await;
    let proxy = proxy_for(&backend).await;
    let mut io = raw(&proxy).await;
    let p = Pattern::new();

    // Content-Length, small (echoed) and large (checksummed), on one keep-alive connection.
    write(
        &mut io,
        b"POST /b/cl HTTP/1.1\r\nHost: bodies.test\r\nContent-Length: 12\r\n\r\nfixed length",
    )
    .await;
    let echo = response(&mut io, "POST").await.json();
    assert_eq!(echo["body"], "fixed length");
    assert_eq!(echo["headers"]["content-length"], "12");
    assert!(echo["headers"].get("transfer-encoding").is_none(), "{echo}");

    let len = 300_000u64;
    let mut req =
        format!("POST /b/_/stream HTTP/1.1\r\nHost: bodies.test\r\nContent-Length: {len}\r\n\r\n")
            .into_bytes();
    req.extend_from_slice(&p.chunk(0, len as usize));
    write(&mut io, &req).await;
    let sum = response(&mut io, "POST").await.json();
    assert_eq!(
        (sum["bytes"].as_u64(), sum["fnv1a64"].as_str()),
        (Some(len), Some(&*pattern_fnv1a64(len)))
    );

    // Chunked, small (echoed, with a chunk extension and a trailer section) and large.
    write(
        &mut io,
        b"POST /b/chunked HTTP/1.1\r\nHost: bodies.test\r\nTransfer-Encoding: chunked\r\n\r\n\
          5;ext=1\r\nchunk\r\n1\r\ny\r\n4\r\n bod\r\n1\r\ny\r\n0\r\nx-trailing: t\r\n\r\n",
    )
    .await;
    let echo = response(&mut io, "POST").await.json();
    assert_eq!(echo["body"], "chunky body");
    assert_eq!(echo["headers"]["transfer-encoding"], "chunked");
    assert!(echo["headers"].get("content-length").is_none(), "{echo}");

    // A GET may carry a body too (search APIs do): it goes on, chunked as it came, and a
    // bodiless GET after it on the same connection is still one.
    write(
        &mut io,
        b"GET /b/get-body HTTP/1.1\r\nHost: bodies.test\r\nTransfer-Encoding: chunked\r\n\r\n\
          6\r\n{\"q\":1\r\n1\r\n}\r\n0\r\n\r\n",
    )
    .await;
    let echo = response(&mut io, "GET").await.json();
    assert_eq!(echo["body"], "{\"q\":1}");
    assert_eq!(echo["headers"]["transfer-encoding"], "chunked");
    write(
        &mut io,
        b"GET /b/plain HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let echo = response(&mut io, "GET").await.json();
    assert_eq!(echo["body_bytes"], 0);
    assert!(echo["headers"].get("transfer-encoding").is_none(), "{echo}");

    let sizes = [1usize, 4095, 65536, 3, 100_000, 17];
    let mut req =
        b"POST /b/_/stream HTTP/1.1\r\nHost: bodies.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    let mut off = 0u64;
    for n in sizes {
        req.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        req.extend_from_slice(&p.chunk(off, n));
        req.extend_from_slice(b"\r\n");
        off += n as u64;
    }
    req.extend_from_slice(b"0\r\n\r\n");
    write(&mut io, &req).await;
    let sum = response(&mut io, "POST").await.json();
    assert_eq!(
        (sum["bytes"].as_u64(), sum["fnv1a64"].as_str()),
        (Some(off), Some(&*pattern_fnv1a64(off)))
    );
}

#[tokio::test]
async fn head_and_204_responses_leave_the_connection_usable() {
    let backend = TestBackend::start("bodiless").await;
    let proxy = proxy_for(&backend).await;
    let mut io = raw(&proxy).await;

    write(
        &mut io,
        b"HEAD /b/head HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let head = response(&mut io, "HEAD").await;
    assert_eq!(head.status, 200);
    assert!(
        head.header("content-length").is_some_and(|n| n != "0"),
        "HEAD keeps the length of the body it does not send: {head:?}"
    );

    write(
        &mut io,
        b"GET /b/_/status/204 HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let none = response(&mut io, "GET").await;
    assert_eq!(none.status, 204);

    // Had either response carried body bytes, they would sit in front of this status line.
    write(
        &mut io,
        b"GET /b/after HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let after = response(&mut io, "GET").await;
    assert_eq!(after.status, 200);
    assert_eq!(after.json()["uri"], "/after");
    assert_eq!(backend.requests(), 3);
}

/// An upstream that answers each bodiless request with the canned response its path names,
/// keeping the connection open.
async fn canned_upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut io = BufReader::new(io);
                while let Some(head) = read_raw_head(&mut io).await {
                    let reply: &[u8] = match head.split(' ').nth(1) {
                        Some("/gzip-chunked") => {
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
                        }
                        Some("/no-content-with-length") => {
                            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"
                        }
                        Some("/length-twice") => {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"
                        }
                        Some("/length-listed") => {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok"
                        }
                        Some("/status-600") => {
                            b"HTTP/1.1 600 Beyond\r\nContent-Length: 2\r\n\r\nok"
                        }
                        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                    };
                    if io.get_mut().write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A gateway whose `/b` prefix goes to [`canned_upstream`].
async fn canned_gateway() -> WeirProxy {
    let upstream = canned_upstream().await;
    WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/b", "bodies", &[upstream])]))
        .gateway(true)
        .start()
        .await
}

/// A response framed by a coding besides `chunked` is refused (the proxy re-frames bodies and
/// drops `Transfer-Encoding`, so the client would get the coding applied but unnamed), as is a
/// status beyond 599; a 204
/// loses the `Content-Length` it may not carry, and the connection carries on.
#[tokio::test]
async fn a_response_coded_beyond_chunked_gets_502_and_a_204_loses_its_content_length() {
    let proxy = canned_gateway().await;
    let mut io = raw(&proxy).await;
    write(
        &mut io,
        b"GET /b/gzip-chunked HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let coded = response(&mut io, "GET").await;
    assert_eq!(coded.status, 502);
    assert_eq!(coded.header("weir-proxy-error"), Some("upstream-failed"));

    // A status beyond 599 has no class a client could act on (RFC 9110 §15): refused too.
    let mut io = raw(&proxy).await;
    write(
        &mut io,
        b"GET /b/status-600 HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let beyond = response(&mut io, "GET").await;
    assert_eq!(beyond.status, 502, "{beyond:?}");
    assert_eq!(beyond.header("weir-proxy-error"), Some("upstream-failed"));

    let mut io = raw(&proxy).await;
    for _ in 0..2 {
        write(
            &mut io,
            b"GET /b/no-content-with-length HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
        )
        .await;
        let none = response(&mut io, "GET").await;
        assert_eq!(none.status, 204);
        assert_eq!(none.header("content-length"), None, "{none:?}");
    }
    write(
        &mut io,
        b"GET /b/after HTTP/1.1\r\nHost: bodies.test\r\n\r\n",
    )
    .await;
    let after = response(&mut io, "GET").await;
    assert_eq!(
        (after.status, after.body.as_slice()),
        (200, b"ok".as_slice())
    );
}

/// An upstream's repeated but equal `Content-Length` (two fields, or a list) reaches the client
/// as one field: Node's HTTP parser and nghttp2 refuse a response with several, and until
/// 2026-12-07 the proxy passed both fields on.
#[tokio::test]
async fn an_upstream_length_given_twice_reaches_the_client_once() {
    let proxy = canned_gateway().await;
    let mut io = raw(&proxy).await;
    for path in ["/b/length-twice", "/b/length-listed"] {
        write(
            &mut io,
            format!("GET {path} HTTP/1.1\r\nHost: bodies.test\r\n\r\n").as_bytes(),
        )
        .await;
        let got = response(&mut io, "GET").await;
        let lengths: Vec<&str> = got
            .headers
            .iter()
            .filter(|(n, _)| n == "content-length")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            (got.status, lengths, got.body.as_slice()),
            (200, vec!["2"], b"ok".as_slice()),
            "{path}"
        );
    }
}

/// An upstream that answers while the upload is still coming (a 413 after its first MiB) and
/// then reads no more: its answer reaches the client at once, though the proxy's writes of the
/// rest of the body could never finish. Three rounds, each on a new connection: the old code
/// delivered the answer late five runs in six (not when the body was momentarily pending as
/// the upstream answered), so three rounds miss such a regression once in ~200 runs.
#[tokio::test]
async fn an_early_answer_to_an_upload_the_upstream_stopped_reading_reaches_the_client() {
    const UPLOAD: usize = 64 << 20;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream_addr = listener.local_addr().expect("address");
    let upstream = tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            tokio::spawn(answer_early_then_stop_reading(io));
        }
    });
    let proxy = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/b", "bodies", &[upstream_addr])]))
        .gateway(true)
        .start()
        .await;
    for round in 1..=3 {
        let io = TcpStream::connect(proxy.gateway.expect("gateway listener"))
            .await
            .expect("connect to the gateway");
        let (rd, mut wr) = io.into_split();
        let uploader = tokio::spawn(async move {
            let head = format!(
                "POST /b/up HTTP/1.1\r\nHost: bodies.test\r\nContent-Length: {UPLOAD}\r\n\r\n"
            );
            let _ = wr.write_all(head.as_bytes()).await;
            // One write: the client's socket stays full, so the proxy always has body to send.
            let _ = wr.write_all(&vec![b'x'; UPLOAD]).await;
            wr
        });
        let mut rd = BufReader::new(rd);
        let reply = read_response(&mut rd, "POST", DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("round {round}: reading the early answer: {e}"));
        assert_eq!(reply.status, 413, "round {round}");
        assert_eq!(reply.body, b"too large", "round {round}");
        uploader.abort();
    }
    upstream.abort();
}

/// Reads the head and the first MiB of an upload (the proxy is streaming by then), answers 413,
/// then reads nothing more and keeps the connection open until the test ends.
async fn answer_early_then_stop_reading(mut io: TcpStream) {
    let mut got = 0;
    let mut buf = [0u8; 64 << 10];
    while got < 1 << 20 {
        let n = io.read(&mut buf).await.expect("read the upload");
        assert!(n > 0, "closed mid-upload");
        got += n;
    }
    io.write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\n\r\ntoo large")
        .await
        .expect("answer");
    std::future::pending::<()>().await;
    drop(io);
}
