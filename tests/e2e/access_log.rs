//! `WEIR_PROXY_ACCESS_LOG`: one line per request on the proxy's stdout, written when the
//! response body ends, in JSON or Apache combined format with Weir's fields after it.

use std::time::Duration;

use http::{Method, Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_tests::h2_client::{self, empty, H2Client};
use weir_tests::http_client::{request, send};
use weir_tests::registry::{gateway_prefixes, strip};
use weir_tests::wait::poll_until;
use weir_tests::{TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);

/// A gateway whose `/shop` prefix goes to `backend`, logging in `format`, with `env` besides.
async fn logging_gateway(format: &str, backend: &TestBackend, env: &[(&str, &str)]) -> WeirProxy {
    let mut b = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/shop", "shop", &[backend.addr])]))
        .gateway(true)
        .env("WEIR_PROXY_ACCESS_LOG", format);
    for (k, v) in env {
        b = b.env(*k, *v);
    }
    b.start().await
}

/// The JSON access lines in the proxy's output once there are `n` of them.
async fn json_lines(proxy: &WeirProxy, n: usize) -> Vec<serde_json::Value> {
    poll_until(DEADLINE, &format!("{n} access-log lines"), || async {
        let lines: Vec<serde_json::Value> = proxy
            .log()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (lines.len() >= n).then_some(lines)
    })
    .await
}

#[tokio::test]
async fn json_lines_say_what_each_request_was_and_how_it_ended() {
    let backend = TestBackend::start("shop").await;
    let proxy = logging_gateway("json", &backend, &[]).await;
    let gw = proxy.gateway.expect("gateway listener");

    let mut get = request(Method::GET, "shop.test", "/shop/a?b=1", "");
    get.headers_mut()
        .insert("user-agent", "weir-test \"q\"".parse().expect("value"));
    get.headers_mut()
        .insert("x-request-id", "req-42".parse().expect("value"));
    let reply = send(gw, get).await;
    assert_eq!(reply.status, StatusCode::OK);
    let body_len = reply.body.len() as u64;
    assert_eq!(
        send(gw, request(Method::GET, "shop.test", "/elsewhere", ""))
            .await
            .status,
        404
    );
    let upload = send(
        gw,
        request(Method::POST, "shop.test", "/shop/up", vec![b'x'; 5000]),
    )
    .await;
    assert_eq!(upload.status, StatusCode::OK);
    let mut h2 = H2Client::connect(gw).await;
    let resp = h2
        .send(
            Request::get("http://shop.test/shop/h2")
                .body(empty())
                .expect("request"),
        )
        .await
        .expect("response head");
    assert_eq!(
        h2_client::collect(resp, DEADLINE)
            .await
            .expect("body")
            .status,
        200
    );

    let lines = json_lines(&proxy, 4).await;
    let by_target = |t: &str| {
        lines
            .iter()
            .find(|l| l["target"] == t)
            .unwrap_or_else(|| panic!("no line for {t}: {lines:?}"))
    };
    let get = by_target("/shop/a?b=1");
    assert_eq!(get["method"], "GET");
    assert_eq!(get["version"], "HTTP/1.1");
    assert_eq!(get["host"], "shop.test");
    assert_eq!(get["status"], 200);
    assert_eq!(get["bytes"], body_len);
    assert_eq!(get["direction"], "gateway");
    assert_eq!(get["route"], "shop");
    assert_eq!(get["upstream"], backend.addr.to_string());
    assert_eq!(get["outcome"], "complete");
    assert_eq!(get["user_agent"], "weir-test \"q\"");
    assert_eq!(get["request_id"], "req-42");
    assert!(
        get["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")),
        "{get}"
    );
    let (total, first) = (get["duration_ms"].as_f64(), get["first_byte_ms"].as_f64());
    assert!(
        matches!((total, first), (Some(t), Some(f)) if t >= f && f > 0.0),
        "{get}"
    );
    assert!(
        get["time"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 27),
        "{get}"
    );

    let unrouted = by_target("/elsewhere");
    assert_eq!(unrouted["status"], 404);
    assert_eq!(unrouted["error"], "no-route");
    assert_eq!(unrouted["upstream"], serde_json::Value::Null);
    let upload = by_target("/shop/up");
    assert_eq!(
        (upload["method"].as_str(), upload["status"].as_u64()),
        (Some("POST"), Some(200))
    );
    let over_h2 = by_target("/shop/h2");
    assert_eq!(
        (over_h2["version"].as_str(), over_h2["host"].as_str()),
        (Some("HTTP/2.0"), Some("shop.test"))
    );
    assert_eq!(backend.requests(), 3);
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_is_logged_incomplete_with_the_bytes_it_got() {
    let backend = TestBackend::start("shop").await;
    let proxy = logging_gateway("json", &backend, &[]).await;
    let mut io = TcpStream::connect(proxy.gateway.expect("gateway"))
        .await
        .expect("connect");
    io.write_all(b"GET /shop/_/bytes/100000000 HTTP/1.1\r\nHost: shop.test\r\n\r\n")
        .await
        .expect("write");
    let mut got = vec![0u8; 64 * 1024];
    let n = io.read(&mut got).await.expect("the head and some body");
    assert!(n > 0);
    drop(io);
    let line = json_lines(&proxy, 1).await.remove(0);
    assert_eq!(line["status"], 200);
    assert_eq!(line["outcome"], "incomplete", "{line}");
    let bytes = line["bytes"].as_u64().expect("bytes");
    assert!(bytes < 100_000_000, "{line}");
}

#[tokio::test]
async fn apache_lines_are_combined_format_then_weirs_fields() {
    let backend = TestBackend::start("shop").await;
    let proxy = logging_gateway("apache", &backend, &[]).await;
    let gw = proxy.gateway.expect("gateway listener");
    let mut get = request(Method::GET, "shop.test", "/shop/p", "");
    get.headers_mut()
        .insert("referer", "http://from.test/".parse().expect("value"));
    get.headers_mut()
        .insert("user-agent", "ua/1".parse().expect("value"));
    let reply = send(gw, get).await;
    assert_eq!(reply.status, StatusCode::OK);
    let line = poll_until(DEADLINE, "an access line", || async {
        proxy
            .log()
            .lines()
            .find(|l| l.contains("\"GET /shop/p HTTP/1.1\""))
            .map(str::to_owned)
    })
    .await;
    // 127.0.0.1 - - [07/Dec/2026:15:50:00 +0000] "GET /shop/p HTTP/1.1" 200 N "ref" "ua" secs ...
    let (combined, weir) = line
        .split_once("\"ua/1\" ")
        .expect("the user agent closes combined");
    assert!(combined.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(
        combined.contains(" +0000] \"GET /shop/p HTTP/1.1\" 200 "),
        "{line}"
    );
    assert!(
        combined.ends_with(&format!(" {} \"http://from.test/\" ", reply.body.len())),
        "{line}"
    );
    let fields: Vec<&str> = weir.split(' ').collect();
    assert!(
        fields[0].parse::<f64>().is_ok_and(|s| s > 0.0 && s < 10.0),
        "{line}"
    );
    assert_eq!(
        &fields[1..],
        [
            "gateway",
            "shop.default",
            "shop",
            &backend.addr.to_string(),
            "-",
            "complete",
            "-"
        ],
        "{line}"
    );
}

/// `WEIR_PROXY_REQUEST_ID=generate`: a request without `X-Request-Id` reaches the backend with a
/// fresh UUID, which its access line names; one the client sent is kept.
#[tokio::test]
async fn generated_request_ids_reach_the_backend_and_the_log() {
    let backend = TestBackend::start("shop").await;
    let proxy = logging_gateway("json", &backend, &[("WEIR_PROXY_REQUEST_ID", "generate")]).await;
    let gw = proxy.gateway.expect("gateway listener");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let reply = send(gw, request(Method::GET, "shop.test", "/shop/new", "")).await;
        let id = reply.json()["headers"]["x-request-id"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no x-request-id upstream: {}", reply.body));
        let b = id.as_bytes();
        assert!(
            b.len() == 36 && b[14] == b'4' && b"89ab".contains(&b[19]),
            "{id}"
        );
        seen.push(id);
    }
    assert_ne!(seen[0], seen[1]);
    let mut own = request(Method::GET, "shop.test", "/shop/own", "");
    own.headers_mut()
        .insert("x-request-id", "client-7".parse().expect("value"));
    let reply = send(gw, own).await;
    assert_eq!(reply.json()["headers"]["x-request-id"], "client-7");

    let lines = json_lines(&proxy, 3).await;
    let ids: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["request_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [seen[0].as_str(), seen[1].as_str(), "client-7"],
        "{lines:?}"
    );
}
