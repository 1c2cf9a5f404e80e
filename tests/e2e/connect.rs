//! HTTP CONNECT: through the transparent outbound path an app reaches its own forward proxy (the
//! original destination) and, on a 2xx, gets a byte-exact tunnel with half-close; a refusal is
//! passed back with the connection kept; through the inbound path an HTTP/2 or HTTP/1 CONNECT
//! reaches a local forward proxy; the gateway answers 405 and tunnels for no one.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use weir_tests::raw_http1::{read_raw_head, read_response};
use weir_tests::sidecar::{listen_in, Sidecar};
use weir_tests::{require, NetNs, TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
const PYTHON: &str = "/usr/bin/python3";

/// The app: a CONNECT the proxy refuses, then one it accepts on the same connection; through
/// the tunnel, bytes no HTTP message starts with, a half-close, and everything read to EOF.
/// Prints the two status lines and the tunnel's bytes, one per line (Python `repr`s).
const APP: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
f = s.makefile("rb")
def head():
    lines = []
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            return lines
        lines.append(line)
s.sendall(b"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")
refused = head()
length = [int(l.split(b":")[1]) for l in refused if l.lower().startswith(b"content-length:")]
body = f.read(length[0]) if length else b""
s.sendall(b"CONNECT db.test:5432 HTTP/1.1\r\nHost: db.test:5432\r\nProxy-Authorization: Basic dTpw\r\n\r\n")
accepted = head()
s.sendall(b"\x00\x01tunnel bytes")
s.shutdown(socket.SHUT_WR)
rest = f.read()
print(repr(refused[0]), repr(body))
print(repr(accepted[0]), repr([l for l in accepted[1:] if l.lower().startswith((b"content-length", b"transfer-encoding"))]))
print(repr(rest))
"#;

/// A forward proxy: refuses `denied.test`, accepts anything else with a 200 that claims a
/// length (which a 2xx to CONNECT cannot have), then echoes the tunnel after its EOF. Sends
/// each request head it read to `heads`.
async fn forward_proxy(listener: TcpListener, heads: mpsc::UnboundedSender<String>) {
    while let Ok((io, _)) = listener.accept().await {
        let heads = heads.clone();
        tokio::spawn(async move {
            let mut io = BufReader::new(io);
            let Some(head) = read_raw_head(&mut io).await else {
                return;
            };
            let denied = head.starts_with("CONNECT denied.test:443 ");
            let _ = heads.send(head);
            if denied {
                let _ = io
                    .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied")
                    .await;
                return;
            }
            let _ = io
                .write_all(b"HTTP/1.1 200 Connection established\r\nContent-Length: 0\r\n\r\n")
                .await;
            let mut tunnel = Vec::new();
            let _ = io.read_to_end(&mut tunnel).await;
            let mut reply = b"echo:".to_vec();
            reply.extend_from_slice(&tunnel);
            let _ = io.write_all(&reply).await;
        });
    }
}

#[tokio::test]
async fn connect_from_an_app_tunnels_to_its_forward_proxy_and_a_refusal_keeps_the_connection() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool PYTHON);
    let ns = NetNs::create();
    let listener = TcpListener::bind((ns.host_ip(), 0)).await.expect("bind");
    let proxy_addr = listener.local_addr().expect("bound");
    let (tx, mut heads) = mpsc::unbounded_channel();
    let _server = tokio::spawn(forward_proxy(listener, tx));
    // The registry names a service `db.test`: the tunnel still goes to the original
    // destination, never to a service the CONNECT's authority happens to name.
    let registry =
        "services:\n- name: db\n  hosts: [db.test]\n  endpoints: [{address: \"127.0.0.1:9\"}]\n";
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;

    let (host, port) = (proxy_addr.ip().to_string(), proxy_addr.port().to_string());
    let out = pod
        .run_as_app(&[PYTHON, "-c", APP, &host, &port], DEADLINE)
        .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "app: {}\n{stdout}\nproxy log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        pod.proxy.log()
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            r"b'HTTP/1.1 403 Forbidden\r\n' b'denied'",
            r"b'HTTP/1.1 200 Connection established\r\n' []",
            r"b'echo:\x00\x01tunnel bytes'",
        ],
        "proxy log:\n{}",
        pod.proxy.log()
    );

    let denied = heads.recv().await.expect("the refused CONNECT");
    assert!(
        denied.starts_with("CONNECT denied.test:443 HTTP/1.1\r\n"),
        "{denied}"
    );
    let accepted = heads.recv().await.expect("the accepted CONNECT");
    let accepted = accepted.to_ascii_lowercase();
    assert!(
        accepted.starts_with("connect db.test:5432 http/1.1\r\n"),
        "{accepted}"
    );
    assert!(accepted.contains("host: db.test:5432\r\n"), "{accepted}");
    assert!(
        accepted.contains("proxy-authorization: basic dtpw\r\n"),
        "meant for the app's proxy, so passed on: {accepted}"
    );
    // The tunnel's bytes (the refused CONNECT opened none): 14 up, `echo:` and those 14 down.
    let counted =
        weir_tests::metrics::tunnels_closed(&pod.proxy, &[("direction", "outbound")], "eof", 1.0)
            .await;
    assert_eq!(
        (counted.opened, counted.received, counted.sent),
        (1.0, 14.0, 19.0)
    );
}

#[tokio::test]
async fn connect_on_the_gateway_gets_405_and_a_close_and_reaches_no_backend() {
    let backend = TestBackend::start("app").await;
    let registry = format!(
        "services:\n- name: app\n  endpoints: [{{address: \"{}\"}}]\n\
         gateway:\n  routes:\n  - name: all\n    matches: [{{path: {{type: PathPrefix, value: /}}}}]\n    \
         backendRefs: [{{name: app}}]\n",
        backend.addr
    );
    let proxy = WeirProxy::builder()
        .registry_yaml(registry)
        .gateway(true)
        .start()
        .await;
    let mut io = TcpStream::connect(proxy.gateway.expect("gateway"))
        .await
        .expect("connect");
    // Tunnel bytes right behind the CONNECT, as an optimistic client sends them: never read as
    // a request of their own.
    io.write_all(b"CONNECT app.test:443 HTTP/1.1\r\nHost: app.test:443\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: app.test\r\n\r\n")
        .await
        .expect("write");
    let mut rd = BufReader::new(io);
    let head = read_response(&mut rd, "CONNECT", DEADLINE)
        .await
        .expect("a response");
    assert_eq!(head.status, 405, "{head:?}");
    assert_eq!(
        head.header("allow"),
        Some("GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PATCH")
    );
    assert_eq!(head.header("weir-proxy-error"), Some("connect-refused"));
    let mut rest = Vec::new();
    weir_tests::wait::within(DEADLINE, "the close", rd.read_to_end(&mut rest))
        .await
        .expect("closed cleanly");
    let rest = String::from_utf8_lossy(&rest);
    assert!(!rest.contains("HTTP/1.1"), "one answer only: {rest}");
    assert_eq!(backend.requests(), 0);
}

/// Writes `\0\x01h2` (or whatever `tag` is) into an open tunnel, half-closes, reads to EOF.
async fn through<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut tunnel: T,
    tag: &[u8],
) -> Vec<u8> {
    tunnel.write_all(tag).await.expect("write into the tunnel");
    tunnel.shutdown().await.expect("half-close the tunnel");
    let mut got = Vec::new();
    weir_tests::wait::within(DEADLINE, "the tunnel's echo", tunnel.read_to_end(&mut got))
        .await
        .expect("read the tunnel to its end");
    got
}

#[tokio::test]
async fn connect_over_h2_and_http1_through_the_inbound_path_reaches_the_local_forward_proxy() {
    use http_body_util::Empty;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    require!(root, tool "ip", tool "iptables", tool "setpriv");
    let ns = NetNs::create();
    let app: std::net::SocketAddr = (ns.ns_ip(), 7200).into();
    let (tx, mut heads) = mpsc::unbounded_channel();
    tokio::spawn(forward_proxy(listen_in(&ns, app), tx));
    let pod = Sidecar::start(ns, WeirProxy::builder()).await;

    // HTTP/2 (prior knowledge): a CONNECT stream becomes the tunnel (RFC 9113 §8.5).
    let io = TcpStream::connect(app)
        .await
        .expect("connect from the host");
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(http::Method::CONNECT)
        .uri("db.test:5432")
        .body(Empty::<bytes::Bytes>::new())
        .expect("a CONNECT request");
    let mut resp =
        weir_tests::wait::within(DEADLINE, "the h2 CONNECT answer", h2.send_request(req))
            .await
            .unwrap_or_else(|e| panic!("h2 CONNECT: {e}\n{}", pod.proxy.log()));
    assert_eq!(resp.status(), 200, "{}", pod.proxy.log());
    let tunnel = hyper::upgrade::on(&mut resp).await.expect("the h2 tunnel");
    assert_eq!(
        through(TokioIo::new(tunnel), b"\0\x01h2").await,
        b"echo:\0\x01h2"
    );
    let head = heads.recv().await.expect("the h2 CONNECT upstream");
    assert!(
        head.starts_with("CONNECT db.test:5432 HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase().contains("host: db.test:5432\r\n"),
        "{head}"
    );

    // HTTP/1.1.
    let mut io = TcpStream::connect(app)
        .await
        .expect("connect from the host");
    io.write_all(b"CONNECT db.test:5432 HTTP/1.1\r\nHost: db.test:5432\r\n\r\n")
        .await
        .expect("write");
    let mut rd = BufReader::new(io);
    let mut status = String::new();
    rd.read_line(&mut status).await.expect("status line");
    assert_eq!(status, "HTTP/1.1 200 Connection established\r\n");
    loop {
        let mut line = String::new();
        rd.read_line(&mut line).await.expect("a header line");
        assert!(
            !line.to_ascii_lowercase().starts_with("content-length"),
            "{line}"
        );
        if line == "\r\n" {
            break;
        }
    }
    assert!(rd.buffer().is_empty(), "nothing after the head");
    assert_eq!(
        through(rd.into_inner(), b"\0\x01h1").await,
        b"echo:\0\x01h1"
    );
    // Both tunnels counted on the inbound path: 4 bytes up and 9 down each.
    let counted =
        weir_tests::metrics::tunnels_closed(&pod.proxy, &[("direction", "inbound")], "eof", 2.0)
            .await;
    assert_eq!(
        (counted.opened, counted.received, counted.sent),
        (2.0, 8.0, 18.0)
    );
}
