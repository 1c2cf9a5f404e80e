//! HTTP/1.1 protocol upgrades (WebSocket) through the gateway listener.
//!
//! The client speaks raw bytes on a socket: a real WebSocket handshake and real (masked) client
//! frames. TestBackend is not a WebSocket server; it answers the handshake with 101 and echoes
//! every byte of the upgraded stream, so a frame comes back exactly as it was sent. That is what
//! the proxy must guarantee: after 101 it relays bytes both ways untouched until a side closes.

use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use weir_tests::metrics::{self, Tunnels};
use weir_tests::raw_http1::{read_head, read_response};
use weir_tests::registry::{gateway_prefixes, strip, PrefixRoute};
use weir_tests::wait::within;
use weir_tests::{TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);

const HANDSHAKE: &str = "GET /ws/chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\n\
    Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// A masked client frame (RFC 6455 §5.2): FIN, `opcode`, the payload XORed with a mask key.
fn client_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n <= 0xffff => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// A gateway with `/ws` (stripped) to `backend`, declared with `app_protocol`.
async fn proxy_for(backend: &TestBackend, app_protocol: Option<&str>) -> WeirProxy {
    let eps = [backend.addr];
    let route = PrefixRoute {
        app_protocol,
        ..strip("/ws", "ws", &eps)
    };
    WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[route]))
        .gateway(true)
        .start()
        .await
}

/// A client connection to the gateway that has sent [`HANDSHAKE`].
async fn send_handshake(proxy: &WeirProxy) -> BufReader<TcpStream> {
    let io = TcpStream::connect(proxy.gateway.expect("gateway listener"))
        .await
        .expect("connect to the gateway");
    let mut io = BufReader::new(io);
    io.get_mut()
        .write_all(HANDSHAKE.as_bytes())
        .await
        .expect("write the handshake");
    io
}

/// The value of header `name` (lower case) in a head read by `read_head`.
fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_websocket_upgrade_switches_protocols_and_relays_frames_both_ways_until_close() {
    let backend = TestBackend::start("ws-echo").await;
    let proxy = proxy_for(&backend, None).await;
    let mut io = send_handshake(&proxy).await;
    let (status, headers) = within(DEADLINE, "101 head", read_head(&mut io))
        .await
        .expect("response head");
    assert_eq!(status, 101, "{headers:?}\n{}", proxy.log());
    assert_eq!(header(&headers, "upgrade"), Some("websocket"));
    assert_eq!(
        header(&headers, "connection")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("upgrade")
    );
    assert!(
        io.buffer().is_empty(),
        "nothing may follow the 101 before we speak"
    );
    let (mut rd, mut wr) = io.into_inner().into_split();
    // Bytes written after the 101; each comes back, so as many are read.
    let mut moved = 0;

    // Several messages, one at a time: each comes back whole before the next goes out.
    for (i, text) in [
        "hello",
        "over the tunnel",
        &"x".repeat(300),
        &"y".repeat(70_000),
    ]
    .iter()
    .enumerate()
    {
        let frame = client_frame(0x1, text.as_bytes(), [i as u8, 1, 2, 3]);
        wr.write_all(&frame).await.expect("write a frame");
        moved += frame.len();
        let mut echoed = vec![0u8; frame.len()];
        within(DEADLINE, "echoed frame", rd.read_exact(&mut echoed))
            .await
            .expect("read the echo");
        assert!(echoed == frame, "message {i} came back altered");
    }

    // A 4 MiB message written while its echo is read: more than the socket buffers on the way
    // hold, so this only completes if the proxy relays both directions at once.
    let big: Vec<u8> = (0..4u32 << 20).map(|i| (i % 253) as u8).collect();
    let frame = client_frame(0x2, &big, [9, 8, 7, 6]);
    moved += frame.len();
    let write = async {
        wr.write_all(&frame).await.expect("write the big frame");
    };
    let mut echoed = vec![0u8; frame.len()];
    let read = async {
        rd.read_exact(&mut echoed).await.expect("read the big echo");
    };
    within(DEADLINE, "4 MiB both ways", async {
        tokio::join!(write, read)
    })
    .await;
    assert!(echoed == frame, "the 4 MiB message came back altered");

    // Close: the close frame is relayed, then our FIN travels to the backend, which closes,
    // and that close travels back.
    let close = client_frame(0x8, &1000u16.to_be_bytes(), [4, 3, 2, 1]);
    wr.write_all(&close).await.expect("write close");
    moved += close.len();
    let mut echoed = vec![0u8; close.len()];
    within(DEADLINE, "echoed close", rd.read_exact(&mut echoed))
        .await
        .expect("read the close echo");
    assert_eq!(echoed, close);
    wr.shutdown().await.expect("half-close");
    let mut rest = Vec::new();
    let n = within(DEADLINE, "the tunnel to close", rd.read_to_end(&mut rest))
        .await
        .expect("clean close");
    assert_eq!(n, 0, "no bytes after close: {rest:?}");
    assert_eq!(backend.requests(), 1);
    let route = [("direction", "gateway"), ("route", "ws")];
    let counted = metrics::tunnels_closed(&proxy, &route, "eof", 1.0).await;
    let moved = moved as f64;
    assert_eq!(
        counted,
        Tunnels {
            opened: 1.0,
            received: moved,
            sent: moved
        }
    );
}

#[tokio::test]
async fn an_upgrade_answered_without_101_is_passed_through_as_a_normal_response() {
    let backend = TestBackend::start("ws-refuse").await;
    backend.force_status(Some(StatusCode::FORBIDDEN));
    let proxy = proxy_for(&backend, None).await;
    let mut io = send_handshake(&proxy).await;
    let refused = read_response(&mut io, "GET", DEADLINE)
        .await
        .expect("a complete response");
    assert_eq!(refused.status, 403);
    assert_eq!(refused.header("x-backend"), Some("ws-refuse"));
    let echo = refused.json();
    assert_eq!(
        echo["headers"]["upgrade"], "websocket",
        "the upgrade was offered upstream"
    );
    assert_eq!(echo["uri"], "/chat");

    // No switch happened, so the connection still speaks HTTP/1.1.
    backend.force_status(None);
    io.get_mut()
        .write_all(b"GET /ws/after HTTP/1.1\r\nHost: ws.test\r\n\r\n")
        .await
        .expect("write a second request");
    let after = read_response(&mut io, "GET", DEADLINE)
        .await
        .expect("a second response on the same connection");
    assert_eq!(after.status, 200);
    assert_eq!(after.json()["uri"], "/after");
}

#[tokio::test]
async fn a_status_beyond_599_is_refused_from_http2_upstreams_and_upgrade_answers() {
    // RFC 9110 §15 (HTTP/1 upstreams on the pooled path: bodies.rs). hyper takes any three
    // digits, so the h2c service and the upgrade's own HTTP/1 connection are checked here.
    let odd = StatusCode::from_u16(600).expect("the http crate takes 600");
    for (app_protocol, handshake) in [(Some("h2c"), false), (Some("h2c"), true), (None, true)] {
        let backend = TestBackend::start("status-600").await;
        backend.force_status(Some(odd));
        let proxy = proxy_for(&backend, app_protocol).await;
        let mut io = if handshake {
            send_handshake(&proxy).await
        } else {
            let gw = proxy.gateway.expect("gateway listener");
            let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
            io.get_mut()
                .write_all(b"GET /ws/plain HTTP/1.1\r\nHost: ws.test\r\n\r\n")
                .await
                .expect("write the request");
            io
        };
        let got = read_response(&mut io, "GET", DEADLINE)
            .await
            .expect("a complete response");
        let case = format!("{app_protocol:?}, handshake {handshake}");
        assert_eq!(got.status, 502, "{case}: {got:?}");
        assert_eq!(
            got.header("weir-proxy-error"),
            Some("upstream-failed"),
            "{case}"
        );
    }
}

#[tokio::test]
async fn an_upgrade_to_an_h2c_service_goes_out_as_http1_with_its_host() {
    let backend = TestBackend::start("ws-h2c").await;
    let proxy = proxy_for(&backend, Some("h2c")).await;
    let mut io = send_handshake(&proxy).await;
    let (status, headers) = within(DEADLINE, "101 head", read_head(&mut io))
        .await
        .expect("response head");
    assert_eq!(status, 101, "{headers:?}");
    let seen = |n| header(&headers, n);
    assert_eq!(seen("x-upgrade-host"), Some("ws.test"), "{headers:?}");
    assert_eq!(seen("x-upgrade-target"), Some("/chat"), "{headers:?}");
}

/// Writes `head` to a fresh gateway connection and reads the response.
async fn exchange(io: &mut BufReader<TcpStream>, head: &str) -> weir_tests::raw_http1::RawResponse {
    io.get_mut()
        .write_all(head.as_bytes())
        .await
        .expect("write the request");
    read_response(io, "GET", DEADLINE)
        .await
        .expect("a complete response")
}

#[tokio::test]
async fn an_h2c_upgrade_is_dropped_and_the_request_answered_as_http1() {
    // Passed on, a 101 to h2c would make the rest of the connection one tunnel to this
    // upstream that no route, filter or policy sees ("h2c smuggling").
    let backend = TestBackend::start("ws-no-h2c").await;
    let proxy = proxy_for(&backend, None).await;
    let gw = proxy.gateway.expect("gateway listener");
    let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
    let plain = exchange(
        &mut io,
        // HTTP2-Settings not named in Connection (RFC 7540 says it must be): h2c takes it along.
        "GET /ws/one HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    )
    .await;
    assert_eq!(plain.status, 200, "{}", proxy.log());
    let seen = &plain.json()["headers"];
    for name in ["upgrade", "http2-settings", "connection"] {
        assert!(
            seen.get(name).is_none(),
            "{name} reached the upstream: {seen}"
        );
    }
    // Not switched: the same connection carries the next request, and it is routed.
    let next = exchange(&mut io, "GET /ws/two HTTP/1.1\r\nHost: ws.test\r\n\r\n").await;
    assert_eq!(
        (next.status, next.json()["uri"].as_str()),
        (200, Some("/two"))
    );

    // An empty Upgrade offers nothing: not passed on as an upgrade either.
    let empty = exchange(
        &mut io,
        "GET /ws/four HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: ,\r\n\r\n",
    )
    .await;
    assert_eq!(empty.status, 200, "{}", proxy.log());
    let seen = &empty.json()["headers"];
    assert!(seen.get("upgrade").is_none(), "{seen}");

    // Another protocol offered beside h2c (any case) still switches, to that protocol.
    let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
    io.get_mut()
        .write_all(
            b"GET /ws/three HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\n\
              Upgrade: H2C, websocket\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
        )
        .await
        .expect("write the handshake");
    let (status, headers) = within(DEADLINE, "101 head", read_head(&mut io))
        .await
        .expect("response head");
    assert_eq!(status, 101, "{headers:?}");
    assert_eq!(
        header(&headers, "upgrade"),
        Some("websocket"),
        "{headers:?}"
    );
}

#[tokio::test]
async fn an_http10_request_s_upgrade_is_ignored_not_refused() {
    // RFC 9110 §7.8: a server ignores Upgrade in an HTTP/1.0 request; it was answered 400.
    let backend = TestBackend::start("ws-http10").await;
    let proxy = proxy_for(&backend, None).await;
    let gw = proxy.gateway.expect("gateway listener");
    let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
    let plain = exchange(
        &mut io,
        "GET /ws/old HTTP/1.0\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .await;
    assert_eq!(plain.status, 200, "{}", proxy.log());
    assert_eq!(plain.json()["uri"], "/old");
    assert!(
        plain.json()["headers"].get("upgrade").is_none(),
        "{:?}",
        plain.json()
    );
}

/// A server on its own socket that answers each request head with `answer` and holds the
/// connection open.
pub(crate) async fn canned_server(answer: &'static [u8]) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("bound");
    tokio::spawn(async move {
        while let Ok((mut io, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if io.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let _ = io.write_all(answer).await;
                let _ = io.read_to_end(&mut Vec::new()).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_101_that_names_no_offered_protocol_is_refused_with_502() {
    // RFC 9110 §7.8: the server names the protocol it switches to, one the client offered.
    for answer in [
        &b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n"[..],
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
    ] {
        let proxy = gateway_to(canned_server(answer).await).await;
        let mut io = send_handshake(&proxy).await;
        let refused = read_response(&mut io, "GET", DEADLINE)
            .await
            .expect("a complete response");
        assert_eq!(refused.status, 502, "{}", proxy.log());
        assert_eq!(refused.header("weir-proxy-error"), Some("upstream-failed"));
    }
}

/// An upgrade server on its own socket: answers the first request head with 101, reads one
/// byte of the upgraded stream, then resets the connection (SO_LINGER 0), or with `hold` reads
/// on and reports how the stream ended ("eof" or "reset") on the channel.
async fn resetting_server(
    hold: bool,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Receiver<&'static str>,
) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("bound");
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut io, _) = l.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            io.read_exact(&mut byte).await.expect("the request head");
            head.push(byte[0]);
        }
        io.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .await
            .expect("write 101");
        io.read_exact(&mut byte).await.expect("a byte after 101");
        if !hold {
            io.set_zero_linger().expect("SO_LINGER 0");
            return;
        }
        let mut rest = Vec::new();
        let end = match io.read_to_end(&mut rest).await {
            Ok(_) => "eof",
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => "reset",
            Err(_) => "other",
        };
        let _ = tx.send(end);
    });
    (addr, rx)
}

/// A gateway with `/ws` (stripped) to the server at `addr`.
pub(crate) async fn gateway_to(addr: std::net::SocketAddr) -> WeirProxy {
    let eps = [addr];
    WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/ws", "ws", &eps)]))
        .gateway(true)
        .start()
        .await
}

/// A gateway in front of `addr` and a client that completed the upgrade through it.
async fn upgraded_through(addr: std::net::SocketAddr) -> (WeirProxy, TcpStream) {
    let proxy = gateway_to(addr).await;
    let mut io = send_handshake(&proxy).await;
    let (status, headers) = within(DEADLINE, "101 head", read_head(&mut io))
        .await
        .expect("response head");
    assert_eq!(status, 101, "{headers:?}\n{}", proxy.log());
    let mut io = io.into_inner();
    io.write_all(b"x").await.expect("a byte upstream");
    (proxy, io)
}

#[tokio::test]
async fn an_upstream_reset_after_101_reaches_the_client_as_a_reset_not_a_clean_end() {
    let (addr, _) = resetting_server(false).await;
    let (proxy, mut io) = upgraded_through(addr).await;
    let mut rest = Vec::new();
    let end = within(DEADLINE, "the end of the stream", io.read_to_end(&mut rest)).await;
    assert_eq!(
        end.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "{}",
        proxy.log()
    );
    // One byte went up before the upstream reset; none came back.
    let route = [("direction", "gateway"), ("route", "ws")];
    let counted = metrics::tunnels_closed(&proxy, &route, "error", 1.0).await;
    assert_eq!(
        counted,
        Tunnels {
            opened: 1.0,
            received: 1.0,
            sent: 0.0
        }
    );
}

#[tokio::test]
async fn a_client_reset_after_101_reaches_the_upstream_as_a_reset() {
    let (addr, ended) = resetting_server(true).await;
    let (proxy, io) = upgraded_through(addr).await;
    io.set_zero_linger().expect("SO_LINGER 0");
    drop(io);
    let end = within(DEADLINE, "the upstream to see the end", ended)
        .await
        .expect("the server reports");
    assert_eq!(end, "reset", "{}", proxy.log());
}
