//! Opaque TCP through the transparent paths (real iptables REDIRECT, see `weir_tests::sidecar`):
//! byte-exact relays with half-close, server-speaks-first protocols on unlisted and listed
//! ports, TLS passed through untouched, failover from a refusing endpoint, inbound relays to the
//! local app, and the TCP + detection metrics with how each relay ended.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use weir_tests::backend::pattern_byte;
use weir_tests::metrics;
use weir_tests::process::ChildProc;
use weir_tests::sidecar::{listen_in, Sidecar};
use weir_tests::tmp::TempDir;
use weir_tests::{poll_until, require, wait_for_port, NetNs, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
/// The system interpreter: uid 1234 cannot read a per-user one under /root.
const PYTHON: &str = "/usr/bin/python3";

/// The app's side of each case, run as uid 1234 inside the namespace.
/// `send HOST PORT N`: sends N pattern bytes, shuts its write side, prints all it reads to EOF.
/// `banner HOST PORT`: sends nothing, prints `{"ms": .., "banner": ..}` once a line arrives
/// (ms counted from the completed connect).
/// `end HOST PORT`: sends 5 bytes, reads to the end, prints `{"ms": .., "end": "eof" | "reset"}`
/// (ms counted from the send).
/// `repeat HOST PORT K`: K connections one after another, each `send`ing 3 bytes; prints how
/// many got the whole echo back.
const CLIENT: &str = r#"
import json, socket, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "repeat":
    good = 0
    for _ in range(int(sys.argv[4])):
        try:
            c = socket.create_connection((host, port), timeout=5)
            c.sendall(b"\x00ok")
            c.shutdown(socket.SHUT_WR)
            out = b""
            while True:
                b = c.recv(4096)
                if not b:
                    break
                out += b
            good += out == b"received 3 bytes\n\x00ok"
        except OSError:
            pass
    print(good)
    sys.exit(0)
s = socket.create_connection((host, port), timeout=5)
if mode == "send":
    s.sendall(bytes(i % 251 for i in range(int(sys.argv[4]))))
    s.shutdown(socket.SHUT_WR)
    out = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    sys.stdout.buffer.write(out)
elif mode == "end":
    s.sendall(b"\x00ping")
    t0 = time.monotonic()
    try:
        while s.recv(4096):
            pass
        end = "eof"
    except ConnectionResetError:
        end = "reset"
    print(json.dumps({"ms": (time.monotonic() - t0) * 1000, "end": end}))
else:
    t0 = time.monotonic()
    data = b""
    while not data.endswith(b"\n"):
        b = s.recv(4096)
        if not b:
            break
        data += b
    print(json.dumps({"ms": (time.monotonic() - t0) * 1000, "banner": data.decode()}))
"#;

async fn client(pod: &Sidecar, args: &[&str]) -> Vec<u8> {
    let mut argv = vec![PYTHON, "-c", CLIENT];
    argv.extend_from_slice(args);
    let out = pod.run_as_app(&argv, DEADLINE).await;
    assert!(
        out.status.success(),
        "client {args:?} failed ({}): {}\nproxy log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        pod.proxy.log()
    );
    out.stdout
}

/// Reads each connection to EOF, *then* answers `received N bytes\n` + the same bytes, so the
/// answer exists only if the client's half-close got through. Sends what it received to `tx`.
async fn echo_after_eof_server(listener: TcpListener, tx: mpsc::UnboundedSender<Vec<u8>>) {
    while let Ok((mut io, _)) = listener.accept().await {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            if io.read_to_end(&mut got).await.is_err() {
                return;
            }
            let mut reply = format!("received {} bytes\n", got.len()).into_bytes();
            reply.extend_from_slice(&got);
            let _ = io.write_all(&reply).await;
            let _ = io.shutdown().await;
            let _ = tx.send(got);
        });
    }
}

const BANNER: &str = "220 weir-test ESMTP ready\r\n";

/// Speaks first: writes [`BANNER`] on accept, then waits for the client to close.
async fn banner_server(listener: TcpListener) {
    while let Ok((mut io, _)) = listener.accept().await {
        tokio::spawn(async move {
            let _ = io.write_all(BANNER.as_bytes()).await;
            let mut sink = Vec::new();
            let _ = io.read_to_end(&mut sink).await;
        });
    }
}

fn banner_reply(out: &[u8]) -> (f64, String) {
    let json: serde_json::Value = serde_json::from_slice(out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)));
    let ms = json["ms"].as_f64().expect("ms is a number");
    (ms, json["banner"].as_str().unwrap_or_default().to_owned())
}

fn detections(text: &str, protocol: &str) -> Option<f64> {
    metrics::sum(
        text,
        "weir_protocol_detections_total",
        &[("direction", "outbound"), ("protocol", protocol)],
    )
}

fn tcp(text: &str, name: &str, service: &str) -> Option<f64> {
    metrics::sum(
        text,
        name,
        &[("direction", "outbound"), ("service", service)],
    )
}

/// An address on the host end that was just free: connects to it are refused.
async fn refused_addr(ns: &NetNs) -> SocketAddr {
    TcpListener::bind((ns.host_ip(), 0))
        .await
        .expect("bind")
        .local_addr()
        .expect("bound")
}

/// The pod's metrics once `n` relays of `service` are counted closed as `reason`.
async fn once_closed(pod: &Sidecar, service: &str, reason: &str, n: f64) -> String {
    poll_until(DEADLINE, "the relays counted closed", || async {
        let text = pod.proxy.metrics_text().await;
        (closes(&text, service, reason) == Some(n)).then_some(text)
    })
    .await
}

/// Closed relays of `service` that ended as `reason`.
fn closes(text: &str, service: &str, reason: &str) -> Option<f64> {
    metrics::sum(
        text,
        "weir_tcp_connections_closed_total",
        &[
            ("direction", "outbound"),
            ("service", service),
            ("reason", reason),
        ],
    )
}

#[tokio::test]
async fn opaque_bytes_to_a_virtual_ip_are_relayed_exactly_through_a_half_close() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let ns = NetNs::create();
    let listener = TcpListener::bind((ns.host_ip(), 0))
        .await
        .expect("bind on the host end");
    let echo = listener.local_addr().expect("bound");
    let (tx, mut received) = mpsc::unbounded_channel();
    let _server = tokio::spawn(echo_after_eof_server(listener, tx));
    let registry = format!(
        "services:\n- name: echo\n  addresses: [\"10.96.0.20:7000\"]\n\
         \x20 endpoints: [{{address: \"{echo}\"}}]\n"
    );
    let proxy = WeirProxy::builder()
        .registry_yaml(registry)
        .env("WEIR_PROXY_ACCESS_LOG", "json");
    let pod = Sidecar::start(ns, proxy).await;

    // Larger than the socket buffers, so it streams; byte 0 is 0x00, which no protocol starts with.
    let n: u64 = 256 * 1024 + 7;
    let sent: Vec<u8> = (0..n).map(pattern_byte).collect();
    let out = client(&pod, &["send", "10.96.0.20", "7000", &n.to_string()]).await;

    let got = weir_tests::wait::within(DEADLINE, "the server's copy", received.recv())
        .await
        .expect("the server saw a connection");
    assert!(
        got == sent,
        "server got {} bytes, not the pattern",
        got.len()
    );
    let mut expected = format!("received {n} bytes\n").into_bytes();
    expected.extend_from_slice(&sent);
    assert_eq!(out.len(), expected.len());
    assert!(out == expected, "the reply after EOF differs");

    let text = poll_until(DEADLINE, "the relay to close", || async {
        let text = pod.proxy.metrics_text().await;
        (tcp(&text, "weir_tcp_connections_closed_total", "echo.default") == Some(1.0))
            .then_some(text)
    })
    .await;
    let series = |name| tcp(&text, name, "echo.default");
    assert_eq!(series("weir_tcp_connections_opened_total"), Some(1.0));
    assert_eq!(series("weir_tcp_received_bytes_total"), Some(n as f64));
    assert_eq!(
        series("weir_tcp_sent_bytes_total"),
        Some(expected.len() as f64)
    );
    assert_eq!(detections(&text, "opaque"), Some(1.0), "{text}");
    assert_eq!(closes(&text, "echo.default", "eof"), Some(1.0), "{text}");

    // The relay's access-log line, written when it closed.
    let line = access_line(&pod, "\"protocol\":\"tcp\"").await;
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    let client = v["client"].as_str().expect("client").to_owned();
    assert!(
        client.starts_with(&format!("{}:", pod.ns.ns_ip())),
        "{line}"
    );
    assert_eq!(
        (
            &v["direction"],
            &v["destination"],
            &v["service"],
            &v["upstream"]
        ),
        (
            &"outbound".into(),
            &"10.96.0.20:7000".into(),
            &"echo.default".into(),
            &echo.to_string().into()
        ),
        "{line}"
    );
    assert_eq!(
        (
            v["bytes_received"].as_u64(),
            v["bytes_sent"].as_u64(),
            v["status"].as_u64()
        ),
        (Some(n), Some(expected.len() as u64), Some(200)),
        "{line}"
    );
    assert_eq!(v["outcome"], "eof", "{line}");
}

/// The pod's first access-log line containing `needle`, polled for.
async fn access_line(pod: &Sidecar, needle: &str) -> String {
    poll_until(DEADLINE, "the relay's access-log line", || async {
        let log = pod.proxy.log();
        log.lines().find(|l| l.contains(needle)).map(str::to_owned)
    })
    .await
}

#[tokio::test]
async fn server_speaks_first_on_an_unlisted_port_gets_its_banner_after_the_detect_timeout() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let ns = NetNs::create();
    let listener = TcpListener::bind((ns.host_ip(), 0))
        .await
        .expect("bind on the host end");
    let smtp = listener.local_addr().expect("bound");
    let _server = tokio::spawn(banner_server(listener));
    let pod = Sidecar::start(ns, WeirProxy::builder()).await;

    let port = smtp.port().to_string();
    let out = client(&pod, &["banner", &smtp.ip().to_string(), &port]).await;
    let (ms, banner) = banner_reply(&out);
    assert_eq!(banner, BANNER);
    // Detection waits 500 ms for a client byte that never comes, then relays as TCP.
    assert!(ms < 1000.0, "banner after {ms:.0} ms");

    let text = pod.proxy.metrics_text().await;
    assert_eq!(detections(&text, "timeout"), Some(1.0), "{text}");
    assert_eq!(
        tcp(&text, "weir_tcp_connections_opened_total", "passthrough"),
        Some(1.0)
    );
}

/// Binds the host end on the first of the proxy's default opaque ports that is free there.
async fn bind_listed_port(ns: &NetNs) -> TcpListener {
    for port in [5432, 6379, 3306, 11211] {
        if let Ok(l) = TcpListener::bind((ns.host_ip(), port)).await {
            return l;
        }
    }
    panic!(
        "none of 5432, 6379, 3306, 11211 is free on {}",
        ns.host_ip()
    );
}

#[tokio::test]
async fn server_speaks_first_on_a_listed_opaque_port_gets_its_banner_without_waiting() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let ns = NetNs::create();
    let listener = bind_listed_port(&ns).await;
    let db = listener.local_addr().expect("bound");
    let _server = tokio::spawn(banner_server(listener));
    let pod = Sidecar::start(ns, WeirProxy::builder()).await;

    let port = db.port().to_string();
    let out = client(&pod, &["banner", &db.ip().to_string(), &port]).await;
    let (ms, banner) = banner_reply(&out);
    assert_eq!(banner, BANNER);
    // Well under the 500 ms detect timeout: the port skips detection altogether.
    assert!(ms < 300.0, "banner after {ms:.0} ms on listed port {port}");

    let text = pod.proxy.metrics_text().await;
    assert_eq!(detections(&text, "opaque-port"), Some(1.0), "{text}");
    assert_eq!(detections(&text, "timeout"), None, "{text}");
}

#[tokio::test]
async fn tls_to_a_virtual_ip_is_passed_through_to_the_endpoint_as_tcp() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl", tool "openssl");
    let ns = NetNs::create();
    let dir = TempDir::new("tls");
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let made = std::process::Command::new(weir_tests::skip::tool("openssl"))
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=weir-tls-test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl req");
    assert!(made.status.success(), "{made:?}");
    // A port that was free on the host end a moment ago (unique per namespace).
    let probe = std::net::TcpListener::bind((ns.host_ip(), 0)).expect("bind a probe");
    let addr: SocketAddr = probe.local_addr().expect("bound");
    drop(probe);
    let mut cmd = tokio::process::Command::new(weir_tests::skip::tool("openssl"));
    cmd.args(["s_server", "-www", "-accept", &addr.to_string(), "-cert"])
        .arg(&cert)
        .arg("-key")
        .arg(&key);
    let _s_server = ChildProc::spawn("openssl s_server", cmd, &dir.join("s_server.log"));
    wait_for_port(addr, DEADLINE).await;
    let registry = format!(
        "services:\n- name: tls\n  addresses: [\"10.96.0.30:443\"]\n\
         \x20 endpoints: [{{address: \"{addr}\"}}]\n"
    );
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;

    // The handshake completes only if every byte both ways arrived unchanged; -www then
    // answers the GET inside the tunnel with its status page.
    let out = pod
        .run_as_app(
            &["curl", "-sSk", "--max-time", "5", "https://10.96.0.30/"],
            DEADLINE,
        )
        .await;
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && body.contains("s_server"),
        "curl: {} {}\n{body}\nproxy log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        pod.proxy.log()
    );
    assert!(body.contains("TLSv1.3"), "{body}");

    let text = poll_until(DEADLINE, "the relay to close", || async {
        let text = pod.proxy.metrics_text().await;
        (tcp(&text, "weir_tcp_connections_closed_total", "tls.default") == Some(1.0))
            .then_some(text)
    })
    .await;
    assert_eq!(detections(&text, "tls"), Some(1.0), "{text}");
    assert_eq!(
        tcp(&text, "weir_tcp_connections_opened_total", "tls.default"),
        Some(1.0)
    );
    let rx = tcp(&text, "weir_tcp_received_bytes_total", "tls.default").unwrap_or(0.0);
    let tx = tcp(&text, "weir_tcp_sent_bytes_total", "tls.default").unwrap_or(0.0);
    assert!(rx > 200.0 && tx > body.len() as f64, "rx {rx} tx {tx}");
    assert_eq!(
        metrics::sum(&text, "weir_requests_total", &[]).unwrap_or(0.0),
        0.0,
        "TLS is not parsed as HTTP: {text}"
    );
}

/// Reads a byte of each connection, then resets it (SO_LINGER 0) or, with `hold`, waits for the
/// peer to close.
async fn ending_server(listener: TcpListener, hold: bool) {
    while let Ok((mut io, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut byte = [0u8; 1];
            if io.read_exact(&mut byte).await.is_err() {
                return;
            }
            if hold {
                let mut sink = Vec::new();
                let _ = io.read_to_end(&mut sink).await;
            } else {
                let _ = io.set_zero_linger();
            }
        });
    }
}

/// A pod whose app connects (passthrough, opaque) to a server on the host end; returns what the
/// `end` client printed (how the connection ended and when) and the proxy's metrics once it
/// counted the relay closed.
async fn how_it_ends(
    hold: bool,
    proxy: weir_tests::proxy::WeirProxyBuilder,
) -> (f64, String, String) {
    let ns = NetNs::create();
    let listener = TcpListener::bind((ns.host_ip(), 0))
        .await
        .expect("bind on the host end");
    let server = listener.local_addr().expect("bound");
    let _server = tokio::spawn(ending_server(listener, hold));
    let pod = Sidecar::start(ns, proxy).await;
    let port = server.port().to_string();
    let out = client(&pod, &["end", &server.ip().to_string(), &port]).await;
    let json: serde_json::Value = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    let ms = json["ms"].as_f64().expect("ms is a number");
    let text = poll_until(DEADLINE, "the relay to be counted closed", || async {
        let text = pod.proxy.metrics_text().await;
        (tcp(&text, "weir_tcp_connections_closed_total", "passthrough") == Some(1.0))
            .then_some(text)
    })
    .await;
    (
        ms,
        json["end"].as_str().unwrap_or_default().to_owned(),
        text,
    )
}

#[tokio::test]
async fn an_upstream_reset_reaches_the_client_as_a_reset_not_a_clean_end() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let (_, end, text) = how_it_ends(false, WeirProxy::builder()).await;
    assert_eq!(end, "reset");
    assert_eq!(closes(&text, "passthrough", "error"), Some(1.0), "{text}");
}

#[tokio::test]
async fn a_tcp_relay_idle_for_its_timeout_is_closed() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let proxy = WeirProxy::builder().env("WEIR_PROXY_TCP_IDLE_TIMEOUT", "700ms");
    let (ms, end, text) = how_it_ends(true, proxy).await;
    assert_eq!(end, "eof", "an idle relay ends cleanly");
    assert_eq!(
        closes(&text, "passthrough", "idle-timeout"),
        Some(1.0),
        "{text}"
    );
    // Detection decides on the first byte; the clock starts with the relay.
    assert!((600.0..3000.0).contains(&ms), "closed after {ms:.0} ms");
}

#[tokio::test]
async fn a_relay_whose_endpoint_refuses_fails_over_to_another() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let ns = NetNs::create();
    let listener = TcpListener::bind((ns.host_ip(), 0))
        .await
        .expect("bind on the host end");
    let live = listener.local_addr().expect("bound");
    let (tx, _received) = mpsc::unbounded_channel();
    let _server = tokio::spawn(echo_after_eof_server(listener, tx));
    let dead = refused_addr(&ns).await;
    // The dead endpoint weighs 100 to the live one's 1, so it is nearly always drawn first
    // whenever it is up (its backoff starts at 100 ms and the connections are sequential).
    let registry = format!(
        "services:\n- name: pair\n  addresses: [\"10.96.0.21:7000\"]\n\
         \x20 endpoints: [{{address: \"{dead}\", weight: 100}}, {{address: \"{live}\"}}]\n"
    );
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;
    let k: u32 = 6;
    let out = client(&pod, &["repeat", "10.96.0.21", "7000", &k.to_string()]).await;
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        k.to_string(),
        "every connection reached the live endpoint\nproxy log:\n{}",
        pod.proxy.log()
    );
    let text = once_closed(&pod, "pair.default", "eof", f64::from(k)).await;
    let failed = metrics::sum(&text, "weir_endpoint_connect_failures_total", &[]).unwrap_or(0.0);
    assert!(failed >= 1.0, "the dead endpoint was tried: {text}");
    assert_eq!(
        closes(&text, "pair.default", "connect-failed").unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        tcp(&text, "weir_tcp_connections_opened_total", "pair.default"),
        Some(f64::from(k))
    );
}

#[tokio::test]
async fn a_relay_with_no_endpoint_to_reach_closes_the_client_and_counts_it() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "/usr/bin/python3");
    let ns = NetNs::create();
    let dead = refused_addr(&ns).await;
    let registry = format!(
        "services:\n- name: gone\n  addresses: [\"10.96.0.22:7000\"]\n\
         \x20 endpoints: [{{address: \"{dead}\"}}]\n"
    );
    let proxy = WeirProxy::builder()
        .registry_yaml(registry)
        .env("WEIR_PROXY_ACCESS_LOG", "apache");
    let pod = Sidecar::start(ns, proxy).await;
    let out = client(&pod, &["repeat", "10.96.0.22", "7000", "1"]).await;
    assert_eq!(String::from_utf8_lossy(&out).trim(), "0");
    let text = once_closed(&pod, "gone.default", "connect-failed", 1.0).await;
    assert_eq!(
        tcp(&text, "weir_tcp_connections_opened_total", "gone.default"),
        Some(1.0)
    );
    // Logged as nginx's stream module would: 502, no upstream, nothing moved.
    let line = access_line(&pod, "\"TCP 10.96.0.22:7000\"").await;
    assert!(
        line.starts_with(&format!("{} - - [", pod.ns.ns_ip())),
        "{line}"
    );
    let after = line
        .split("\"TCP 10.96.0.22:7000\" ")
        .nth(1)
        .expect("the request");
    let fields: Vec<&str> = after.split(' ').collect();
    assert_eq!(fields[..4], ["502", "0", "\"-\"", "\"-\""], "{line}");
    // Seconds, then direction, service, route, upstream, error, outcome, request id, received.
    assert_eq!(
        fields[5..],
        [
            "outbound",
            "gone.default",
            "-",
            "-",
            "-",
            "connect-failed",
            "-",
            "0"
        ],
        "{line}"
    );
}

/// Sends `\0ok` to `addr` from the host, half-closes, and returns the whole answer.
async fn echo_from_host(addr: SocketAddr) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect from the host");
    s.write_all(b"\0ok").await.expect("send");
    s.shutdown().await.expect("half-close");
    let mut got = Vec::new();
    weir_tests::wait::within(DEADLINE, "the echo", s.read_to_end(&mut got))
        .await
        .expect("read to the end");
    got
}

#[tokio::test]
async fn inbound_opaque_tcp_reaches_the_local_app_and_is_counted_on_its_service() {
    require!(root, tool "ip", tool "iptables", tool "setpriv");
    let ns = NetNs::create();
    let ns_ip = ns.ns_ip();
    let (tx, _received) = mpsc::unbounded_channel();
    // One app port the registry knows (an endpoint of `app`), one it does not.
    for port in [7100, 7101] {
        let l = listen_in(&ns, (ns_ip, port).into());
        tokio::spawn(echo_after_eof_server(l, tx.clone()));
    }
    let registry =
        format!("services:\n- name: app\n  endpoints: [{{address: \"{ns_ip}:7100\"}}]\n");
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;
    for port in [7100, 7101] {
        let got = echo_from_host((ns_ip, port).into()).await;
        assert_eq!(
            got,
            b"received 3 bytes\n\0ok",
            "port {port}\n{}",
            pod.proxy.log()
        );
    }
    let inbound = |text: &str, name: &str, service: &str| {
        metrics::sum(
            text,
            name,
            &[("direction", "inbound"), ("service", service)],
        )
    };
    let text = poll_until(DEADLINE, "both relays counted closed", || async {
        let text = pod.proxy.metrics_text().await;
        let closed = |s| inbound(&text, "weir_tcp_connections_closed_total", s);
        (closed("app.default") == Some(1.0) && closed("unknown") == Some(1.0)).then_some(text)
    })
    .await;
    for service in ["app.default", "unknown"] {
        assert_eq!(
            inbound(&text, "weir_tcp_connections_opened_total", service),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            metrics::sum(
                &text,
                "weir_tcp_connections_closed_total",
                &[
                    ("direction", "inbound"),
                    ("service", service),
                    ("reason", "eof")
                ],
            ),
            Some(1.0)
        );
        assert_eq!(
            inbound(&text, "weir_tcp_received_bytes_total", service),
            Some(3.0)
        );
    }
    assert_eq!(
        tcp(&text, "weir_tcp_connections_opened_total", "passthrough").unwrap_or(0.0),
        0.0,
        "inbound is not counted as outbound: {text}"
    );
}
