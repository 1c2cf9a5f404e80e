//! Malformed, ambiguous, oversized, slow and random HTTP/1 input on the gateway listener: each is
//! refused with the right status and a clean close, nothing reaches the backend, and the proxy
//! keeps serving good clients with bounded memory and file descriptors.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::io::BufReader;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;
use weir_tests::http_client::{self, head_len, raw_status};
use weir_tests::raw_http1;
use weir_tests::wait::{poll_until, within};
use weir_tests::{TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
/// How long a refused connection may take to be answered and closed.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// A gateway that sends every path to one counting backend.
struct Gateway {
    proxy: WeirProxy,
    addr: SocketAddr,
    backend: TestBackend,
}

async fn gateway(env: &[(&str, &str)]) -> Gateway {
    let backend = TestBackend::start("echo").await;
    let registry = format!(
        "services:\n  - name: echo\n    hosts: [echo.test]\n    endpoints:\n      - address: \"{}\"\n\
         gateway:\n  routes:\n    - name: all\n      matches: [{{ path: {{ type: PathPrefix, value: / }} }}]\n      \
         backendRefs: [{{ name: echo }}]\n",
        backend.addr
    );
    let mut b = WeirProxy::builder().registry_yaml(registry).gateway(true);
    for (k, v) in env {
        b = b.env(*k, *v);
    }
    let proxy = b.start().await;
    let addr = proxy.gateway.expect("gateway listener requested");
    Gateway {
        proxy,
        addr,
        backend,
    }
}

/// How a raw exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The proxy closed with a FIN.
    Eof,
    /// The connection was reset.
    Reset,
    /// Still open at the deadline.
    Deadline,
}

/// Writes `bytes` on a fresh connection (write side left open) and reads until the proxy closes.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, End) {
    let mut io = within(DEADLINE, "connect", TcpStream::connect(addr))
        .await
        .expect("connect to the gateway");
    let _ = io.write_all(bytes).await;
    read_to_close(&mut io, CLOSE_DEADLINE).await
}

async fn read_to_close(io: &mut TcpStream, deadline: Duration) -> (Vec<u8>, End) {
    let end = Instant::now() + deadline;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout_at(end, io.read(&mut buf)).await {
            Err(_) => return (out, End::Deadline),
            Ok(Ok(0)) => return (out, End::Eof),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(_)) => return (out, End::Reset),
        }
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends each request and asserts `status` followed by a clean close, and that the backend saw
/// nothing.
async fn assert_refused(gw: &Gateway, status: u16, cases: &[&[u8]]) {
    for case in cases {
        let (reply, end) = exchange(gw.addr, case).await;
        assert_eq!(
            raw_status(&reply),
            Some(status),
            "request {:?} got {:?}",
            show(case),
            show(&reply)
        );
        assert_eq!(
            end,
            End::Eof,
            "request {:?}: the proxy must answer and then close cleanly",
            show(case)
        );
    }
    assert_eq!(
        gw.backend.requests(),
        0,
        "a refused request reached the backend"
    );
}

/// Reads one response (head + Content-Length or chunked body) from a keep-alive connection.
async fn read_one_response(io: &mut TcpStream) -> (u16, String) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    within(DEADLINE, "one response", async {
        loop {
            if let Some(at) = head_len(&data) {
                let head = show(&data[..at]).to_ascii_lowercase();
                let body = &data[at..];
                let complete = if let Some(len) = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                {
                    body.len() >= len
                } else {
                    !head.contains("transfer-encoding: chunked") || body.ends_with(b"0\r\n\r\n")
                };
                if complete {
                    let status = raw_status(&data).expect("a status line");
                    return (status, show(&data));
                }
            }
            let n = io.read(&mut buf).await.expect("read a response");
            assert_ne!(n, 0, "closed mid-response: {:?}", show(&data));
            data.extend_from_slice(&buf[..n]);
        }
    })
    .await
}

#[tokio::test]
async fn malformed_request_lines_get_400_and_a_clean_close() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"GET /a b HTTP/1.1\r\nHost: echo.test\r\n\r\n",
            b"GET / HTTP/1.1 extra\r\nHost: echo.test\r\n\r\n",
            b"GET / HTTP/1.7\r\nHost: echo.test\r\n\r\n",
            b"GET / FTP/1.1\r\nHost: echo.test\r\n\r\n",
            b"GET /\x7f HTTP/1.1\r\nHost: echo.test\r\n\r\n",
            b"GET http://[::1 HTTP/1.1\r\nHost: echo.test\r\n\r\n",
            b"GET  HTTP/1.1\r\nHost: echo.test\r\n\r\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn malformed_header_lines_get_400_and_a_clean_close() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nno colon here\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Space : a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Fold: a\r\n  folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX(y): a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\n: empty name\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Ctl: a\x01b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Del: a\x7fb\r\n\r\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn bare_cr_and_nul_in_a_header_value_get_400() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Nul: a\x00b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Cr: a\rb\r\n\r\n",
            b"GET / HTTP/1.1\rHost: echo.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\n\r\r",
        ],
    )
    .await;
}

#[tokio::test]
async fn bare_lf_line_endings_get_400() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"GET / HTTP/1.1\nHost: echo.test\n\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\nX-A: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\n\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn content_length_with_transfer_encoding_gets_400_in_either_order() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 5\r\n\
              Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n\
              Content-Length: 5\r\n\r\n0\r\n\r\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn duplicate_identical_content_lengths_get_400() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[b"POST / HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"],
    )
    .await;
}

#[tokio::test]
async fn conflicting_lengths_and_non_final_chunked_encodings_get_400() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 3, 4\r\n\r\nabcd",
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nContent-Length: -3\r\n\r\nabc",
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n\
              Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: gzip\r\n\r\nabc",
            b"POST / HTTP/1.0\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn duplicate_or_missing_host_on_http11_gets_400_but_http10_without_host_is_served_naming_the_endpoint(
) {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nHost: evil.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test\r\nHost: echo.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n",
        ],
    )
    .await;

    let (reply, end) = exchange(gw.addr, b"GET /old HTTP/1.0\r\n\r\n").await;
    assert_eq!(raw_status(&reply), Some(200), "{}", show(&reply));
    assert!(
        show(&reply).contains("\"uri\":\"/old\""),
        "forwarded as is: {}",
        show(&reply)
    );
    // HTTP/1.1 upstream needs a Host: the endpoint's address, as a client dialling it sends.
    let host = format!("\"host\":\"{}\"", gw.backend.addr);
    assert!(show(&reply).contains(&host), "{}", show(&reply));
    assert_eq!(
        end,
        End::Eof,
        "HTTP/1.0 without keep-alive closes after one"
    );
    assert_eq!(gw.backend.requests(), 1);
}

#[tokio::test]
async fn a_host_that_is_not_host_and_port_gets_400_in_the_host_field_or_the_target() {
    let gw = gateway(&[]).await;
    assert_refused(
        &gw,
        400,
        &[
            b"GET / HTTP/1.1\r\nHost: user@echo.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test evil.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test:99999\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: echo.test/x\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: [::1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a:1:2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET http://user@echo.test/ HTTP/1.1\r\nHost: echo.test\r\n\r\n",
            b"GET http://echo.test:70000/ HTTP/1.1\r\nHost: echo.test\r\n\r\n",
        ],
    )
    .await;
    let text = gw.proxy.metrics_text().await;
    let bad_host = weir_tests::metrics::sum(
        &text,
        "weir_http1_rejected_heads_total",
        &[("reason", "bad-host")],
    );
    assert_eq!(bad_host, Some(6.0), "{text}");
}

/// RFC 9112 §3.2.2: an absolute-form target names the host, and a proxy sends on a Host made
/// from it; the upstream never reads the other host the client's Host named.
#[tokio::test]
async fn an_absolute_form_target_is_the_host_the_upstream_sees_whatever_host_said() {
    let gw = gateway(&[]).await;
    let mut io = TcpStream::connect(gw.addr).await.expect("connect");
    io.write_all(b"GET http://echo.test/abs?q=1 HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        .await
        .expect("write");
    let (status, reply) = read_one_response(&mut io).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.contains("\"uri\":\"/abs?q=1\""), "{reply}");
    assert!(reply.contains("\"host\":\"echo.test\""), "{reply}");
    assert!(!reply.contains("evil.test"), "{reply}");
    // With an empty path the target still goes on as a request line can carry it: `/?q=2`,
    // where until 2026-12-07 `GET ?q=2 HTTP/1.1` went out.
    io.write_all(b"GET http://echo.test?q=2 HTTP/1.1\r\nHost: echo.test\r\n\r\n")
        .await
        .expect("write");
    let (status, reply) = read_one_response(&mut io).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.contains("\"uri\":\"/?q=2\""), "{reply}");
    // The connection carries on.
    io.write_all(b"GET /next HTTP/1.1\r\nHost: echo.test\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(read_one_response(&mut io).await.0, 200);
    assert_eq!(gw.backend.requests(), 3);
}

/// RFC 9112 §3.2.4: `*` is a target for OPTIONS only. `GET *` is refused, never forwarded
/// (until 2026-12-07 it reached the backend) with a clean close, as other malformed requests
/// are; `OPTIONS *` goes on.
#[tokio::test]
async fn the_asterisk_target_goes_on_for_options_only() {
    let gw = gateway(&[]).await;
    for request in [
        &b"GET * HTTP/1.1\r\nHost: echo.test\r\n\r\n"[..],
        b"POST * HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 2\r\n\r\nab",
    ] {
        let (reply, end) = exchange(gw.addr, request).await;
        assert_eq!(raw_status(&reply), Some(400), "{}", show(&reply));
        assert_eq!(end, End::Eof, "{}", show(&reply));
    }
    let mut io = TcpStream::connect(gw.addr).await.expect("connect");
    io.write_all(b"OPTIONS * HTTP/1.1\r\nHost: echo.test\r\n\r\n")
        .await
        .expect("write");
    let (status, reply) = read_one_response(&mut io).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        gw.backend.requests(),
        1,
        "only OPTIONS * reached the backend"
    );
}

#[tokio::test]
async fn http10_clients_get_10_heads_keep_alive_only_when_asked_and_no_chunked_bodies() {
    let gw = gateway(&[]).await;
    // Two pipelined requests: the first asks to keep the connection, the second does not.
    let (reply, end) = exchange(
        gw.addr,
        b"GET /a HTTP/1.0\r\nHost: echo.test\r\nConnection: keep-alive\r\n\r\n\
          GET /b HTTP/1.0\r\nHost: echo.test\r\n\r\n",
    )
    .await;
    let text = show(&reply).to_ascii_lowercase();
    assert_eq!(text.matches("http/1.0 200 ok\r\n").count(), 2, "{text}");
    assert_eq!(text.matches("connection: keep-alive").count(), 1, "{text}");
    let (first, second) = text.split_at(text.rfind("http/1.0 200").expect("second head"));
    assert!(first.contains("\"uri\":\"/a\""), "{first}");
    assert!(second.contains("\"uri\":\"/b\""), "{second}");
    assert!(!second.contains("connection: keep-alive"), "{second}");
    assert_eq!(end, End::Eof, "closes after the request without keep-alive");
    assert_eq!(gw.backend.requests(), 2);

    // A body of unknown size (the backend streams it chunked): 1.0 has no chunked coding, so it
    // goes raw and the close ends it, even though the client asked to keep the connection.
    let (reply, end) = exchange(
        gw.addr,
        b"GET /_/bytes/100000 HTTP/1.0\r\nHost: echo.test\r\nConnection: keep-alive\r\n\r\n",
    )
    .await;
    let at = head_len(&reply).expect("a whole head");
    let head = show(&reply[..at]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.0 200 ok\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    let body = &reply[at..];
    let want: Vec<u8> = (0..100_000)
        .map(weir_tests::backend::pattern_byte)
        .collect();
    assert!(body == want.as_slice(), "{} body bytes", body.len());
    assert_eq!(end, End::Eof);
}

#[tokio::test]
async fn bytes_that_are_not_http_get_400_and_a_close_without_being_forwarded() {
    let gw = gateway(&[]).await;
    for case in [
        &b"HELLO WORLD\r\n\r\n"[..],
        b"get / HTTP/1.1\r\nHost: echo.test\r\n\r\n",
        b"\x00\x01\x02\x03\xff\xfe",
        b"SSH-2.0-OpenSSH_9.6\r\n",
    ] {
        let (reply, end) = exchange(gw.addr, case).await;
        assert_ne!(
            end,
            End::Deadline,
            "{:?}: the gateway must close a non-HTTP connection",
            show(case)
        );
        assert_eq!(
            raw_status(&reply),
            Some(400),
            "{:?} got {:?}",
            show(case),
            show(&reply)
        );
    }
    assert_eq!(gw.backend.requests(), 0);
}

#[tokio::test]
async fn extension_methods_and_a_late_first_packet_are_served_as_http() {
    // Detection's own deadline is short; on the gateway a client's first bytes get the
    // header-read timeout instead (a lost first segment is retransmitted after ~1 s).
    let gw = gateway(&[
        ("WEIR_PROXY_DETECT_TIMEOUT", "100ms"),
        ("WEIR_PROXY_HEADER_READ_TIMEOUT", "5s"),
    ])
    .await;
    for method in ["PURGE", "PROPFIND", "VERSION-CONTROL"] {
        let mut io = BufReader::new(TcpStream::connect(gw.addr).await.expect("connect"));
        let req = format!("{method} /m HTTP/1.1\r\nHost: echo.test\r\n\r\n");
        io.write_all(req.as_bytes()).await.expect("write");
        let r = raw_http1::read_response(&mut io, method, DEADLINE)
            .await
            .expect("a response");
        assert_eq!(r.status, 200, "{method}");
        assert_eq!(r.json()["method"], method);
    }
    let mut io = BufReader::new(TcpStream::connect(gw.addr).await.expect("connect"));
    // The client itself is slow here, past detection's deadline: not a wait for the proxy.
    tokio::time::sleep(Duration::from_millis(400)).await;
    io.write_all(b"GET /late HTTP/1.1\r\nHost: echo.test\r\n\r\n")
        .await
        .expect("write");
    let r = raw_http1::read_response(&mut io, "GET", DEADLINE)
        .await
        .expect("a response");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["uri"], "/late");
}

#[tokio::test]
async fn a_head_over_the_configured_max_header_bytes_gets_431_and_one_under_is_served() {
    let gw = gateway(&[("WEIR_PROXY_MAX_HEADER_BYTES", "16384")]).await;

    let under = format!(
        "GET /under HTTP/1.1\r\nHost: echo.test\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "a".repeat(12_000)
    );
    let (reply, _) = exchange(gw.addr, under.as_bytes()).await;
    assert_eq!(raw_status(&reply), Some(200), "{}", show(&reply));
    assert_eq!(gw.backend.requests(), 1);

    // Over the configured 16 KiB, though well under the 64 KiB default.
    let over = format!(
        "GET /over HTTP/1.1\r\nHost: echo.test\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let (reply, end) = exchange(gw.addr, over.as_bytes()).await;
    assert_eq!(raw_status(&reply), Some(431), "{}", show(&reply));
    // The proxy stops reading at the limit, so the rest of the head may turn its close into a
    // reset; either way it closed.
    assert_ne!(end, End::Deadline);

    let many = format!(
        "GET /many HTTP/1.1\r\nHost: echo.test\r\n{}\r\n",
        (0..200)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    let (reply, end) = exchange(gw.addr, many.as_bytes()).await;
    assert_eq!(raw_status(&reply), Some(431), "{}", show(&reply));
    assert_ne!(end, End::Deadline);
    assert_eq!(gw.backend.requests(), 1, "no oversized head was forwarded");
}

#[tokio::test]
async fn a_slowloris_client_is_cut_off_after_the_header_read_timeout() {
    let gw = gateway(&[("WEIR_PROXY_HEADER_READ_TIMEOUT", "1s")]).await;
    let started = Instant::now();
    let io = TcpStream::connect(gw.addr).await.expect("connect");
    io.set_nodelay(true).expect("nodelay");
    let (mut rd, mut wr) = io.into_split();
    let dribbler = tokio::spawn(async move {
        let head = b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Slow: ";
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for byte in head.iter().copied().chain(std::iter::repeat(b'a')) {
            tick.tick().await;
            if wr.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    });
    let mut got = Vec::new();
    let closed = tokio::time::timeout(CLOSE_DEADLINE, async {
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let elapsed = started.elapsed();
    dribbler.abort();
    assert!(
        closed.is_ok(),
        "a client dribbling a byte every 100 ms was still connected after {CLOSE_DEADLINE:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(950),
        "closed after {elapsed:?}, before the 1s header read timeout"
    );
    assert_ne!(raw_status(&got), Some(200), "{}", show(&got));
    assert_eq!(gw.backend.requests(), 0);
}

#[tokio::test]
async fn a_slow_small_upload_is_served_and_a_stalled_one_gets_408() {
    let gw = gateway(&[("WEIR_PROXY_HEADER_READ_TIMEOUT", "1s")]).await;
    let head = b"POST /upload HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 60000\r\n\r\n";

    // 60 000 bytes (the fast path's size) in six writes 400 ms apart: 2.4 s in all, never a
    // second without a byte.
    let io = TcpStream::connect(gw.addr).await.expect("connect");
    io.set_nodelay(true).expect("nodelay");
    let mut io = BufReader::new(io);
    io.get_mut().write_all(head).await.expect("head");
    let mut tick = tokio::time::interval(Duration::from_millis(400));
    tick.tick().await;
    for _ in 0..6 {
        tick.tick().await;
        io.get_mut()
            .write_all(&[b'x'; 10_000])
            .await
            .expect("a part of the body");
    }
    let r = raw_http1::read_response(&mut io, "POST", DEADLINE)
        .await
        .expect("the slow upload is answered");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body_bytes"], 60_000);

    // The head and 100 bytes of the body, then nothing: the proxy says why it gives up.
    let started = Instant::now();
    let mut io = BufReader::new(TcpStream::connect(gw.addr).await.expect("connect"));
    io.get_mut().write_all(head).await.expect("head");
    io.get_mut().write_all(&[b'x'; 100]).await.expect("a start");
    let r = raw_http1::read_response(&mut io, "POST", DEADLINE)
        .await
        .expect("a stalled upload gets an answer, not a silent close");
    let elapsed = started.elapsed();
    assert_eq!(r.status, 408, "{:?}", r.headers);
    assert_eq!(r.header("weir-proxy-error"), Some("request-body-timeout"));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        elapsed >= Duration::from_millis(950),
        "408 after {elapsed:?}"
    );
    let mut rest = Vec::new();
    let read = within(
        CLOSE_DEADLINE,
        "the close after the 408",
        io.read_to_end(&mut rest),
    )
    .await;
    assert!(read.is_ok() && rest.is_empty(), "{read:?} {rest:?}");
    assert_eq!(gw.backend.requests(), 1, "only the whole upload went on");
}

#[tokio::test]
async fn a_malformed_request_after_a_good_one_on_a_keep_alive_connection_gets_400_and_a_close() {
    let gw = gateway(&[]).await;
    let mut io = TcpStream::connect(gw.addr).await.expect("connect");
    io.write_all(b"GET /first HTTP/1.1\r\nHost: echo.test\r\n\r\n")
        .await
        .expect("write the first request");
    let (status, first) = read_one_response(&mut io).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(gw.backend.requests(), 1);

    io.write_all(b"GET /second HTTP/1.1\r\nHost: echo.test\r\nX-Bad: a\x00b\r\n\r\n")
        .await
        .expect("write the second request");
    let (reply, end) = read_to_close(&mut io, CLOSE_DEADLINE).await;
    assert_eq!(raw_status(&reply), Some(400), "{}", show(&reply));
    assert_eq!(end, End::Eof);
    assert_eq!(
        gw.backend.requests(),
        1,
        "the malformed request was forwarded"
    );
}

#[tokio::test]
async fn smuggling_heads_after_a_good_request_on_a_keep_alive_connection_get_400() {
    let gw = gateway(&[]).await;
    let second: [&[u8]; 3] = [
        b"POST /s HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /s HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        b"GET /s HTTP/1.1\nHost: echo.test\n\n",
    ];
    for (i, bad) in second.iter().enumerate() {
        let mut io = TcpStream::connect(gw.addr).await.expect("connect");
        io.write_all(b"GET /first HTTP/1.1\r\nHost: echo.test\r\n\r\n")
            .await
            .expect("write the first request");
        let (status, first) = read_one_response(&mut io).await;
        assert_eq!(status, 200, "{first}");
        io.write_all(bad).await.expect("write the second request");
        let (reply, end) = read_to_close(&mut io, CLOSE_DEADLINE).await;
        assert_eq!(
            raw_status(&reply),
            Some(400),
            "{:?} got {}",
            show(bad),
            show(&reply)
        );
        assert_eq!(end, End::Eof);
        assert_eq!(
            gw.backend.requests(),
            i as u64 + 1,
            "{:?} was forwarded",
            show(bad)
        );
    }
}

/// A chunked body that breaks the chunk grammar once its request is on its way upstream is the
/// client's fault: 400 `request-body-failed` and a clean close, not a 502 that blames the
/// backend (which may or may not have seen the head by then).
#[tokio::test]
async fn a_chunked_body_that_breaks_off_its_grammar_midway_gets_400() {
    let gw = gateway(&[]).await;
    let (reply, end) = exchange(
        gw.addr,
        b"POST /_/stream HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\nzz\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let text = show(&reply);
    assert_eq!(raw_status(&reply), Some(400), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("weir-proxy-error: request-body-failed"),
        "{text}"
    );
    assert_eq!(end, End::Eof, "{text}");
}

/// One bad client for the flood: connects, misbehaves in one of four ways, and waits for the
/// proxy to close it; repeats until `stop` is set. Returns connections made and those the proxy
/// left open.
async fn bad_client(addr: SocketAddr, kind: usize, stop: Arc<AtomicBool>) -> (u32, u32) {
    let (mut made, mut left_open) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut io) = TcpStream::connect(addr).await else {
            continue;
        };
        made += 1;
        let end = match kind {
            // Silent: detection times out and the gateway, being HTTP only, closes.
            0 => read_to_close(&mut io, CLOSE_DEADLINE).await.1,
            // Garbage.
            1 => {
                let _ = io.write_all(b"\x16\x01garbage\x00\xff\r\n\r\n").await;
                read_to_close(&mut io, CLOSE_DEADLINE).await.1
            }
            // A head that never ends.
            2 => {
                let _ = io.write_all(b"GET / HTTP/1.1\r\nHost: echo.test\r\n").await;
                read_to_close(&mut io, CLOSE_DEADLINE).await.1
            }
            // Slowloris.
            _ => {
                let (mut rd, mut wr) = io.into_split();
                let dribble = tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(100));
                    for b in b"GET / HTTP/1.1\r\nX: "
                        .iter()
                        .chain(std::iter::repeat(&b'a'))
                    {
                        tick.tick().await;
                        if wr.write_all(&[*b]).await.is_err() {
                            return;
                        }
                    }
                });
                let mut buf = [0u8; 512];
                let r = tokio::time::timeout(CLOSE_DEADLINE, async {
                    while let Ok(n) = rd.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                })
                .await;
                dribble.abort();
                if r.is_ok() {
                    End::Eof
                } else {
                    End::Deadline
                }
            }
        };
        if end == End::Deadline {
            left_open += 1;
        }
    }
    (made, left_open)
}

#[tokio::test]
async fn a_flood_of_bad_connections_neither_starves_good_clients_nor_leaks() {
    let gw = gateway(&[("WEIR_PROXY_HEADER_READ_TIMEOUT", "1s")]).await;
    // Warm up so the baseline includes the pools and buffers a served request allocates.
    assert_eq!(
        http_client::get(gw.addr, "echo.test", "/warm").await.status,
        200
    );
    let (rss_before, fds_before) = (gw.proxy.rss_kib(), gw.proxy.open_fds());

    let stop = Arc::new(AtomicBool::new(false));
    let mut bad = JoinSet::new();
    for i in 0..300 {
        bad.spawn(bad_client(gw.addr, i % 4, stop.clone()));
    }
    // Let the flood build before measuring good clients against it.
    poll_until(DEADLINE, "the flood to be open", || async {
        (gw.proxy.open_fds() >= fds_before + 150).then_some(())
    })
    .await;
    let mut served = 0;
    // Good clients for two seconds while the flood stays on.
    let good_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < good_until {
        let reply = within(
            Duration::from_secs(3),
            "a good request during the flood",
            http_client::get(gw.addr, "echo.test", "/good"),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        served += 1;
    }
    stop.store(true, Ordering::Relaxed);
    assert!(served >= 3, "only {served} good requests during the flood");

    let (mut made, mut left_open) = (0, 0);
    while let Some(r) = bad.join_next().await {
        let (m, l) = r.expect("bad client task");
        made += m;
        left_open += l;
    }
    assert!(made >= 300, "only {made} bad connections");
    assert_eq!(
        left_open, 0,
        "{left_open} of {made} bad connections were not closed by the proxy within {CLOSE_DEADLINE:?}"
    );
    assert_eq!(
        gw.backend.requests(),
        1 + served,
        "only the good requests reach the backend"
    );

    let fds = poll_until(DEADLINE, "the proxy's fds to go back down", || async {
        let fds = gw.proxy.open_fds();
        (fds <= fds_before + 4).then_some(fds)
    })
    .await;
    let rss_after = gw.proxy.rss_kib();
    eprintln!(
        "flood: {made} bad connections, {served} good requests; fds {fds_before} -> {fds}, \
         rss {rss_before} KiB -> {rss_after} KiB"
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(gw.proxy.admin_get("/live").await.status, 200);
}

/// One seeded random input: raw bytes, a mutated valid request, a method then noise, or the
/// HTTP/2 preface then random frames.
fn fuzz_case(rng: &mut rand::rngs::SmallRng) -> Vec<u8> {
    const VALID: &[u8] =
        b"POST /p?q=1 HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 3\r\nX-A: b\r\n\r\nabc";
    let noise = |rng: &mut rand::rngs::SmallRng, max: usize| -> Vec<u8> {
        let mut v = vec![0u8; rng.gen_range(0..max)];
        rng.fill(&mut v[..]);
        v
    };
    match rng.gen_range(0..4) {
        0 => noise(rng, 300),
        1 => {
            let mut v = VALID.to_vec();
            for _ in 0..rng.gen_range(1..6) {
                let at = rng.gen_range(0..v.len());
                match rng.gen_range(0..3) {
                    0 => v[at] = rng.gen(),
                    1 => v.insert(at, rng.gen()),
                    _ => {
                        v.remove(at);
                    }
                }
            }
            v
        }
        2 => {
            let mut v = b"GET ".to_vec();
            v.extend(noise(rng, 300));
            v
        }
        _ => {
            let mut v = weir_tests::h2raw::PREFACE.to_vec();
            for _ in 0..rng.gen_range(0..4) {
                let payload = noise(rng, 64);
                let stream = rng.gen_range(0..6);
                v.extend(weir_tests::h2raw::frame(
                    rng.gen_range(0..11),
                    rng.gen(),
                    stream,
                    &payload,
                ));
            }
            v.extend(noise(rng, 32));
            v
        }
    }
}

#[tokio::test]
async fn thousands_of_random_inputs_never_crash_the_proxy() {
    let mut gw = gateway(&[("WEIR_PROXY_HEADER_READ_TIMEOUT", "1s")]).await;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed_ba11);
    let cases: Vec<Vec<u8>> = (0..3000).map(|_| fuzz_case(&mut rng)).collect();
    let addr = gw.addr;
    let mut running = JoinSet::new();
    let mut hung = Vec::new();
    for (i, case) in cases.into_iter().enumerate() {
        if running.len() >= 32 {
            if let Some(r) = running.join_next().await {
                hung.extend(r.expect("fuzz task"));
            }
        }
        running.spawn(async move {
            let Ok(mut io) = TcpStream::connect(addr).await else {
                return None;
            };
            let _ = io.write_all(&case).await;
            let _ = io.shutdown().await;
            let (_, end) = read_to_close(&mut io, CLOSE_DEADLINE).await;
            (end == End::Deadline).then_some((i, case))
        });
    }
    while let Some(r) = running.join_next().await {
        hung.extend(r.expect("fuzz task"));
    }

    assert!(
        gw.proxy.try_exit().is_none(),
        "the proxy died; log:\n{}",
        gw.proxy.log()
    );
    assert_eq!(gw.proxy.admin_get("/live").await.status, 200);
    assert_eq!(
        http_client::get(gw.addr, "echo.test", "/after")
            .await
            .status,
        200
    );
    let log = gw.proxy.log();
    assert!(!log.contains("panicked"), "a task panicked:\n{log}");
    assert!(
        hung.is_empty(),
        "{} inputs left a half-closed connection open for {CLOSE_DEADLINE:?}, e.g. #{} {:?}",
        hung.len(),
        hung[0].0,
        show(&hung[0].1)
    );
}
