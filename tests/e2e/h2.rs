//! HTTP/2 through the gateway listener: real h2 clients (curl, h2load), flow control with large
//! bodies in both directions, translation between HTTP/2 and HTTP/1 upstreams, and trailers.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Version};
use http_body_util::BodyExt;
use tokio::process::Command;
use tokio::time::Instant;
use weir_tests::grpc_wire::{echo_request, messages, string_field, unary_request, ECHO_SERVICE};
use weir_tests::h2_client::{self, H2Client};
use weir_tests::pattern::{self, Pattern};
use weir_tests::registry::{gateway_prefixes, strip, PrefixRoute};
use weir_tests::wait::within;
use weir_tests::{http_client, require, skip::tool, GrpcServer, TestBackend, WeirProxy};

const MIB: u64 = 1 << 20;

/// Gateway routes: `/web` → a backend spoken to in the client's protocol, `/h1` → the same
/// backend declared `appProtocol: http`, `/h2c` → declared `appProtocol: h2c`.
async fn proxy_for(backend: SocketAddr) -> WeirProxy {
    let eps = [backend];
    let routes = [
        strip("/web", "web", &eps),
        PrefixRoute {
            app_protocol: Some("http"),
            ..strip("/h1", "web-h1", &eps)
        },
        PrefixRoute {
            app_protocol: Some("h2c"),
            ..strip("/h2c", "web-h2c", &eps)
        },
    ];
    WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&routes))
        .gateway(true)
        .start()
        .await
}

#[tokio::test]
async fn curl_with_http2_prior_knowledge_gets_200_over_http2_end_to_end() {
    require!(tool "curl");
    let backend = TestBackend::start("curl-h2").await;
    let proxy = proxy_for(backend.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    let mut cmd = Command::new(tool("curl"));
    cmd.args(["-sS", "--http2-prior-knowledge", "--max-time", "10"])
        .args(["-w", "\n%{http_code} %{http_version}"])
        .arg(format!("http://{gw}/web/hello?x=1"))
        .kill_on_drop(true);
    let out = within(Duration::from_secs(15), "curl", cmd.output())
        .await
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, summary) = stdout.rsplit_once('\n').expect("curl's -w line");
    assert_eq!(summary, "200 2", "status and HTTP version curl saw");
    let echo: serde_json::Value = serde_json::from_str(body).expect("echo JSON");
    assert_eq!(echo["version"], "HTTP/2.0", "h2 in, h2 out");
    assert_eq!(echo["uri"], "/hello?x=1");
}

/// `requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored, 0 timeout`
fn h2load_counts(output: &str) -> Option<Vec<(String, u64)>> {
    let line = output.lines().find(|l| l.starts_with("requests:"))?;
    line.trim_start_matches("requests:")
        .split(',')
        .map(|part| {
            let (n, what) = part.trim().split_once(' ')?;
            Some((what.to_owned(), n.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn h2load_with_10_clients_of_20_streams_completes_every_request() {
    require!(tool "h2load");
    let backend = TestBackend::start("h2load").await;
    let proxy = proxy_for(backend.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    const TOTAL: u64 = 10 * 20 * 10;
    let mut cmd = Command::new(tool("h2load"));
    cmd.args(["-c", "10", "-m", "20", "-n", &TOTAL.to_string(), "-T", "20"])
        .arg(format!("http://{gw}/web/load"))
        .kill_on_drop(true);
    let out = within(Duration::from_secs(60), "h2load", cmd.output())
        .await
        .expect("run h2load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let counts = h2load_counts(&stdout).unwrap_or_else(|| panic!("no requests: line in\n{stdout}"));
    let count = |what: &str| counts.iter().find(|(w, _)| w == what).map(|(_, n)| *n);
    assert_eq!(count("total"), Some(TOTAL), "{stdout}");
    assert_eq!(count("succeeded"), Some(TOTAL), "{stdout}");
    for bad in ["failed", "errored", "timeout"] {
        assert_eq!(count(bad), Some(0), "{bad}: {stdout}");
    }
    assert!(
        stdout.contains(&format!("status codes: {TOTAL} 2xx")),
        "{stdout}"
    );
    assert_eq!(
        backend.requests(),
        TOTAL,
        "every request reached the backend"
    );
    assert_eq!(
        backend.connections(),
        1,
        "the proxy multiplexes h2 to an endpoint over one connection"
    );
}

/// The bound for a proxy carrying a 64 MiB body: its own size (≈10-20 MiB in a debug build)
/// plus HTTP/2 windows and send buffers of a few MiB; half the body would mean it buffers.
const PROXY_RSS_BOUND_KIB: u64 = 32 * 1024;

#[tokio::test]
async fn a_64_mib_h2_upload_streams_through_intact_without_the_proxy_buffering_it() {
    let backend = TestBackend::start("h2-up").await;
    let proxy = proxy_for(backend.addr).await;
    let len = 64 * MIB;
    let expected = tokio::task::spawn_blocking(move || pattern::fnv1a64(len));
    let mut client = H2Client::connect(proxy.gateway.expect("gateway listener")).await;
    let req = Request::post("http://web.test/web/_/stream")
        .body(pattern::body(len, 16 * 1024).boxed())
        .expect("upload request");
    let resp = client.send(req).await.expect("response head");
    let reply = h2_client::collect(resp, Duration::from_secs(60))
        .await
        .expect("upload response");
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.json()["bytes"], len);
    assert_eq!(
        reply.json()["fnv1a64"],
        expected.await.expect("checksum task")
    );
    let peak = proxy.peak_rss_kib();
    assert!(
        peak < PROXY_RSS_BOUND_KIB,
        "proxy peak RSS {peak} KiB for a {len}-byte upload"
    );
}

#[tokio::test]
async fn a_64_mib_h2_download_to_a_stalled_reader_is_not_buffered_by_the_proxy() {
    let backend = TestBackend::start("h2-down").await;
    let proxy = proxy_for(backend.addr).await;
    let len = 64 * MIB;
    let mut client = H2Client::connect(proxy.gateway.expect("gateway listener")).await;
    let resp = client
        .send(h2_client::get("web.test", &format!("/web/_/bytes/{len}")))
        .await
        .expect("response head");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let pattern = Pattern::new();
    let mut got = 0u64;
    let mut stalled = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(frame) = within(Duration::from_secs(10), "next DATA frame", body.frame()).await {
        let frame = frame.expect("body frame");
        let Some(data) = frame.data_ref() else {
            continue;
        };
        assert!(
            pattern.matches(got, data),
            "bytes at {got} differ from the pattern"
        );
        got += data.len() as u64;
        if !stalled && got >= 4 * MIB {
            // The slow reader: it stops reading for a second. A proxy that does not respect
            // flow control would pull the remaining 60 MiB from the local backend meanwhile.
            stalled = true;
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until {
                let rss = proxy.rss_kib();
                assert!(
                    rss < PROXY_RSS_BOUND_KIB,
                    "proxy RSS {rss} KiB while the client stalls"
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        assert!(Instant::now() < deadline, "download too slow: {got} bytes");
    }
    assert_eq!(got, len);
    let peak = proxy.peak_rss_kib();
    assert!(
        peak < PROXY_RSS_BOUND_KIB,
        "proxy peak RSS {peak} KiB for a {len}-byte download"
    );
}

#[tokio::test]
async fn an_h2_client_reaches_an_app_protocol_http_service_over_http1() {
    let backend = TestBackend::start("h2-to-h1").await;
    let proxy = proxy_for(backend.addr).await;
    let mut client = H2Client::connect(proxy.gateway.expect("gateway listener")).await;
    let body = b"h2 body for an http/1 server".to_vec();
    let req = Request::put("http://web-h1.test/h1/echo?q=1")
        .header("x-custom", "kept")
        .body(h2_client::full(body.clone()))
        .expect("request");
    let reply = h2_client::exchange(&mut client, req).await;
    assert_eq!(
        (reply.status.as_u16(), reply.version),
        (200, Version::HTTP_2)
    );
    let echo = reply.json();
    assert_eq!(
        echo["version"], "HTTP/1.1",
        "translated to HTTP/1.1 upstream"
    );
    assert_eq!(echo["method"], "PUT");
    assert_eq!(echo["uri"], "/echo?q=1");
    assert_eq!(
        echo["headers"]["host"], "web-h1.test",
        ":authority becomes Host"
    );
    assert_eq!(echo["headers"]["x-custom"], "kept");
    assert_eq!(echo["body"], String::from_utf8_lossy(&body).as_ref());
}

#[tokio::test]
async fn an_http1_client_reaches_an_app_protocol_h2c_service_over_h2() {
    let backend = TestBackend::start("h1-to-h2").await;
    let proxy = proxy_for(backend.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    let req = http_client::request(http::Method::POST, "web-h2c.test", "/h2c/echo", "h1 body");
    let reply = http_client::send(gw, req).await;
    assert_eq!(
        (reply.status.as_u16(), reply.version),
        (200, Version::HTTP_11)
    );
    let echo = reply.json();
    assert_eq!(echo["version"], "HTTP/2.0", "translated to h2 upstream");
    assert_eq!(echo["authority"], "web-h2c.test", "Host becomes :authority");
    assert_eq!(echo["uri"], "/echo");
    assert_eq!(echo["body"], "h1 body");
    assert!(
        echo["headers"].get("connection").is_none(),
        "no connection-specific header on h2: {echo}"
    );
}

#[tokio::test]
async fn a_large_response_head_from_an_h2c_upstream_is_accepted_as_from_an_http1_one() {
    let backend = TestBackend::start("big-head").await;
    let proxy = proxy_for(backend.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    // 40 KiB: past hyper's 16 KiB default, within the 64 KiB every other path allows.
    for (host, path) in [("web-h1.test", "/h1"), ("web-h2c.test", "/h2c")] {
        let reply = http_client::get(gw, host, &format!("{path}/_/header/40960")).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_eq!(reply.header("x-big").map(str::len), Some(40960), "{path}");
    }
}

#[tokio::test]
async fn h2_response_trailers_pass_through_the_proxy_as_trailers() {
    require!(python_grpc);
    let server = GrpcServer::start("h2-trailers").await;
    let eps = [server.addr];
    let routes = [PrefixRoute {
        strip: false,
        ..strip(ECHO_SERVICE, "echo", &eps)
    }];
    let proxy = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&routes))
        .gateway(true)
        .start()
        .await;
    let mut client = H2Client::connect(proxy.gateway.expect("gateway listener")).await;
    let req = unary_request("echo.test", "Unary", &echo_request("t", 0, ""));
    let reply = h2_client::exchange(&mut client, req).await;
    assert_eq!(reply.status, 200);
    let msgs = messages(&reply.body).expect("gRPC framing");
    assert_eq!(string_field(&msgs[0], 1).as_deref(), Some("t"));
    assert_eq!(
        reply.header("grpc-status"),
        None,
        "a status in the head would end the call early"
    );
    assert_eq!(reply.trailer("grpc-status"), Some("0"), "{reply:?}");
    assert_eq!(reply.trailer("x-trailer"), Some("yes"), "{reply:?}");
}
