//! The test helpers themselves work, without the proxy: backends, gRPC, netns, promtool.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_tests::backend::{pattern_byte, Fnv1a64};
use weir_tests::http_client::{self, get, get_h2, raw_exchange, raw_status, request, send, H1Conn};
use weir_tests::nginx::parse_echo;
use weir_tests::{grpc, metrics, require, GrpcServer, NetNs, Nginx, TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn nginx_backend_answers_ok_echo_status_and_upload() {
    require!(tool "nginx");
    let nginx = Nginx::start("nginx-a").await;

    let ok = get(nginx.addr, "svc.test", "/").await;
    assert_eq!((ok.status, ok.body.as_str()), (StatusCode::OK, "OK\n"));
    assert_eq!(ok.header("x-backend"), Some("nginx-a"));

    let mut req = request(Method::PUT, "svc.test:81", "/echo/x?q=1", "");
    req.headers_mut()
        .insert("x-request-source", "gateway".parse().expect("header value"));
    let echo = parse_echo(&send(nginx.addr, req).await.body);
    assert_eq!(echo["method"], "PUT");
    assert_eq!(echo["uri"], "/echo/x?q=1");
    assert_eq!(echo["host"], "svc.test:81");
    assert_eq!(echo["server"], "nginx-a");
    assert_eq!(echo["port"], nginx.addr.port().to_string());
    assert_eq!(echo["x-request-source"], "gateway");

    assert_eq!(get(nginx.addr, "svc.test", "/status/503").await.status, 503);

    let body = Bytes::from(vec![7u8; 3 << 20]);
    let upload = send(
        nginx.addr,
        request(Method::POST, "svc.test", "/upload", body),
    )
    .await;
    assert_eq!(
        (upload.status, upload.body.as_str()),
        (StatusCode::OK, "3145728"),
        "{}",
        nginx.error_log()
    );
    assert_eq!(upload.headers.get_all("x-backend").iter().count(), 1);
}

#[tokio::test]
async fn raw_exchange_reads_nginx_rejecting_a_malformed_request() {
    require!(tool "nginx");
    let nginx = Nginx::start("nginx-raw").await;
    let reply = raw_exchange(
        nginx.addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nbad header\r\n\r\n",
        DEADLINE,
    )
    .await;
    assert_eq!(
        raw_status(&reply),
        Some(400),
        "{}",
        String::from_utf8_lossy(&reply)
    );
}

#[tokio::test]
async fn in_process_backend_echoes_over_http1_and_http2() {
    let backend = TestBackend::start("b1").await;
    let h1 = get(backend.addr, "svc.test", "/a/b?c=d").await;
    assert_eq!(h1.header("x-backend"), Some("b1"));
    let json = h1.json();
    assert_eq!(json["uri"], "/a/b?c=d");
    assert_eq!(json["version"], "HTTP/1.1");
    assert_eq!(json["headers"]["host"], "svc.test");

    let h2 = get_h2(backend.addr, "svc.test", "/x").await;
    assert_eq!(h2.json()["version"], "HTTP/2.0");
    assert_eq!(h2.json()["authority"], "svc.test");
    assert_eq!(backend.requests(), 2);
    assert_eq!(backend.connections(), 2);

    backend.force_status(Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(get(backend.addr, "svc.test", "/").await.status, 503);
    backend.force_status(None);
    assert_eq!(
        get(backend.addr, "svc.test", "/_/status/418").await.status,
        418
    );
}

#[tokio::test]
async fn in_process_backend_checksums_a_large_upload_and_streams_a_large_body() {
    let backend = TestBackend::start("b2").await;
    let data: Vec<u8> = (0..(5u64 << 20) + 3).map(pattern_byte).collect();
    let mut sum = Fnv1a64::new();
    sum.update(&data);
    let reply = send(
        backend.addr,
        request(Method::POST, "svc", "/_/stream", data),
    )
    .await
    .json();
    assert_eq!(reply["bytes"], (5u64 << 20) + 3);
    assert_eq!(reply["fnv1a64"], sum.hex());

    let big = 64 << 20;
    let streamed = http_client::post_pattern(backend.addr, "svc", "/_/stream", big, DEADLINE).await;
    assert_eq!(streamed.json()["bytes"], big);
    assert_eq!(
        streamed.json()["fnv1a64"],
        weir_tests::backend::pattern_fnv1a64(big)
    );

    let body = get(backend.addr, "svc", "/_/bytes/100000").await.body;
    let expected: Vec<u8> = (0..100_000).map(pattern_byte).collect();
    assert_eq!(
        body.as_bytes(),
        String::from_utf8_lossy(&expected).as_bytes()
    );
}

#[tokio::test]
async fn in_process_backend_echoes_bytes_on_an_upgraded_connection() {
    let backend = TestBackend::start("ws").await;
    let mut io = tokio::net::TcpStream::connect(backend.addr)
        .await
        .expect("connect");
    let handshake =
        b"GET /chat HTTP/1.1\r\nHost: svc\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
    io.write_all(handshake).await.expect("write handshake");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = weir_tests::wait::within(DEADLINE, "101 head", io.read(&mut byte)).await;
        assert_eq!(n.expect("read"), 1, "closed during handshake: {head:?}");
        head.push(byte[0]);
    }
    assert_eq!(
        raw_status(&head),
        Some(101),
        "{}",
        String::from_utf8_lossy(&head)
    );
    io.write_all(b"ping over the tunnel").await.expect("write");
    let mut echoed = [0u8; 20];
    weir_tests::wait::within(DEADLINE, "echo", io.read_exact(&mut echoed))
        .await
        .expect("read echo");
    assert_eq!(&echoed, b"ping over the tunnel");
}

#[tokio::test]
async fn stopped_backend_refuses_connections() {
    let backend = TestBackend::start("gone").await;
    let addr = backend.addr;
    let mut conn = H1Conn::connect(addr).await;
    backend.stop().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let req = request(Method::GET, "svc", "/", "");
    assert!(
        conn.try_send(req).await.is_err(),
        "open connections are closed too"
    );
}

#[tokio::test]
async fn python_grpc_client_passes_directly_against_python_server() {
    require!(python_grpc);
    let server = GrpcServer::start("grpc-a").await;
    let out = grpc::run_client(server.addr).await;
    assert_eq!(out["unary"], "ok", "{out}");
    assert_eq!(out["server_stream"], 5);
    assert_eq!(out["client_stream"], 5);
    assert_eq!(out["bidi"], 5);
    assert_eq!(out["trailers"]["x-trailer"], "yes");
    assert_eq!(out["error_status"], "NOT_FOUND");
    assert_eq!(out["server"], "grpc-a");
}

#[tokio::test]
async fn python_grpc_client_fails_when_nothing_listens() {
    require!(python_grpc);
    let opts = grpc::ClientOpts {
        count: Some(1),
        ..Default::default()
    };
    let err = grpc::try_run_client(weir_tests::free_addr(), &opts).await;
    assert!(err.is_err(), "{err:?}");
}

#[tokio::test]
async fn netns_runs_a_process_as_uid_1234_reachable_over_the_veth() {
    require!(root, tool "ip", tool "setpriv", tool "python3");
    let ns = NetNs::create();
    assert_eq!(ns.exec_as(1234, &["id", "-u"]).trim(), "1234");
    assert!(ns
        .exec(&["ip", "-4", "addr"])
        .contains(&ns.ns_ip().to_string()));

    // A listener inside the namespace, as uid 1234, answers the host with its uid.
    let script = "import os,socket,sys\n\
        s=socket.socket(); s.bind((sys.argv[1], 8080)); s.listen(); print('LISTENING', flush=True)\n\
        c,_=s.accept(); c.sendall(str(os.getuid()).encode()); c.close()";
    let ip = ns.ns_ip().to_string();
    // uid 1234 cannot read a per-user interpreter under /root (pyenv): prefer the system one.
    let system = std::path::Path::new("/usr/bin/python3");
    let python = if system.is_file() {
        system.display().to_string()
    } else {
        grpc::python()
    };
    let mut child =
        tokio::process::Command::from(ns.command_as(1234, &[&python, "-c", script, &ip]));
    let mut child = child
        .kill_on_drop(true)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut line = [0u8; 9];
    weir_tests::wait::within(DEADLINE, "listener", stdout.read_exact(&mut line))
        .await
        .expect("read");
    let mut io = tokio::net::TcpStream::connect((ns.ns_ip(), 8080))
        .await
        .expect("connect into the netns");
    let mut uid = String::new();
    weir_tests::wait::within(DEADLINE, "uid", io.read_to_string(&mut uid))
        .await
        .expect("read uid");
    assert_eq!(uid, "1234");
}

#[test]
fn promtool_accepts_valid_metrics_and_rejects_invalid() {
    require!(tool "promtool");
    let valid = "# HELP weir_requests_total Requests.\n# TYPE weir_requests_total counter\n\
                 weir_requests_total{direction=\"outbound\"} 3\n";
    assert_eq!(metrics::promtool_check(valid), Ok(()));
    assert!(metrics::promtool_check("weir_requests_total{direction=\"outbound\" 3\n").is_err());
    let unsuffixed =
        "# HELP weir_requests Requests.\n# TYPE weir_requests counter\nweir_requests 3\n";
    assert!(
        metrics::promtool_check(unsuffixed).is_err(),
        "counters need _total"
    );
}

#[test]
fn metrics_sum_adds_matching_series_and_tells_absent_from_zero() {
    let text =
        "# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"z\"} 2\nx_total{a=\"1\",b=\"w\"} 3\n\
                x_total{a=\"2\"} 5\ny 0\n";
    assert_eq!(metrics::sum(text, "x_total", &[("a", "1")]), Some(5.0));
    assert_eq!(metrics::sum(text, "x_total", &[("b", "q\"z")]), Some(2.0));
    assert_eq!(metrics::sum(text, "x_total", &[]), Some(10.0));
    assert_eq!(metrics::sum(text, "y", &[]), Some(0.0));
    assert_eq!(metrics::sum(text, "x_total", &[("a", "3")]), None);
}

/// Stands in for weir-proxy: serves the admin endpoints and exits 0 on SIGTERM.
const FAKE_PROXY: &str = r##"#!/usr/bin/env python3
import http.server, os, signal, sys
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
host, port = os.environ["WEIR_PROXY_ADMIN_LISTEN"].rsplit(":", 1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/ready": "ready\n", "/live": "live\n",
                "/metrics": "# TYPE up gauge\nup 1\n",
                "/config": open(os.environ["WEIR_PROXY_REGISTRY"]).read()}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())
print("fake proxy on", port, "log level", os.environ.get("WEIR_PROXY_LOG"), flush=True)
http.server.HTTPServer((host, int(port)), H).serve_forever()
"##;

#[tokio::test]
async fn proxy_helper_starts_reconfigures_and_drains_a_stand_in_binary() {
    require!(tool "python3");
    let dir = weir_tests::tmp::TempDir::new("fake");
    let bin = dir.join("fake-proxy");
    std::fs::write(&bin, FAKE_PROXY).expect("write fake proxy");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");

    let mut proxy = WeirProxy::builder()
        .binary(&bin)
        .gateway(true)
        .start()
        .await;
    assert!(proxy.gateway.is_some());
    assert!(proxy.log().contains("log level info,weir_proxy=debug"));
    assert_eq!(
        metrics::sum(&proxy.metrics_text().await, "up", &[]),
        Some(1.0)
    );
    assert!(proxy.peak_rss_kib() >= proxy.rss_kib() && proxy.rss_kib() > 0);

    proxy.write_registry("services: [{name: a}]\n");
    let config = proxy.admin_get("/config").await;
    assert_eq!(config.body, "services: [{name: a}]\n");

    proxy.sigterm();
    assert!(proxy.wait_exit(DEADLINE).await.success());
}

#[tokio::test]
#[should_panic(expected = "exited before ready")]
async fn proxy_helper_reports_a_binary_that_exits_at_start() {
    WeirProxy::builder().binary("/bin/false").start().await;
}

#[test]
fn a_missing_tool_skips_or_fails_under_require_all() {
    let outcome = std::panic::catch_unwind(|| weir_tests::skip::require_tool("weir-no-such-tool"));
    if weir_tests::skip::require_all() {
        assert!(
            outcome.is_err(),
            "WEIR_TEST_REQUIRE_ALL=1 must turn a skip into a failure"
        );
    } else {
        assert_eq!(outcome.ok(), Some(false));
    }
}

#[test]
fn proxy_binary_is_found_next_to_the_test_binary() {
    let bin = weir_tests::proxy::proxy_bin();
    assert_eq!(bin.file_name().and_then(|n| n.to_str()), Some("weir-proxy"));
}
