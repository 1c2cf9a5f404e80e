//! Timeouts through the gateway listener to slow in-process backends: the request timeout and
//! the per-try timeout fire within 10% of their setting and answer 504 naming themselves; a
//! per-try timeout is retried; an incoming `grpc-timeout` ends the call with DEADLINE_EXCEEDED
//! and what is left of it travels upstream.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use tokio::time::Instant;
use weir_tests::backend::Fail;
use weir_tests::http_client::{request, send, H2Conn, Reply};
use weir_tests::{metrics, TestBackend};

use crate::gateway::{gateway_proxy, registry, service};
use crate::retries::route;

/// Loopback, a debug proxy and a loaded 2-core machine: added to the 10% on the late side.
const SLACK: Duration = Duration::from_millis(40);

/// Asserts `elapsed` lies within [0.95, 1.10] × `setting` (+ [`SLACK`] late).
fn assert_fired_near(elapsed: Duration, setting: Duration) {
    let (early, late) = (setting.mul_f64(0.95), setting.mul_f64(1.10) + SLACK);
    eprintln!("fired after {elapsed:?} for a setting of {setting:?}");
    assert!(
        (early..=late).contains(&elapsed),
        "fired after {elapsed:?}, want {early:?}..={late:?}"
    );
}

async fn timed_get(gw: SocketAddr, path: &str) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = send(gw, request(Method::GET, "gw.test", path, "")).await;
    (reply, started.elapsed())
}

#[tokio::test]
async fn the_request_timeout_answers_504_within_ten_percent_of_its_setting() {
    let app = TestBackend::start("slow").await;
    let routes = route("r", "slow", "      timeouts: { request: 1s }\n");
    let (proxy, gw) = gateway_proxy(&registry(&[service("slow", &[app.addr])], &routes)).await;
    let (reply, elapsed) = timed_get(gw, "/r/_/delay/5000").await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{}", reply.body);
    assert_eq!(reply.header("weir-proxy-error"), Some("request-timeout"));
    assert_fired_near(elapsed, Duration::from_secs(1));
    let text = proxy.metrics_text().await;
    let counted = metrics::sum(
        &text,
        "weir_proxy_errors_total",
        &[("route", "r"), ("error", "request-timeout")],
    );
    assert_eq!(counted, Some(1.0));
}

#[tokio::test]
async fn the_last_per_try_timeout_answers_504_per_try_timeout_within_ten_percent() {
    let app = TestBackend::start("slow").await;
    let extra = "      timeouts: { backendRequest: 600ms }\n      retry: { attempts: 0 }\n";
    let routes = route("r", "slow", extra);
    let (_proxy, gw) = gateway_proxy(&registry(&[service("slow", &[app.addr])], &routes)).await;
    let (reply, elapsed) = timed_get(gw, "/r/_/delay/5000").await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{}", reply.body);
    assert_eq!(reply.header("weir-proxy-error"), Some("per-try-timeout"));
    assert_fired_near(elapsed, Duration::from_millis(600));
    assert_eq!(app.requests(), 1);
}

#[tokio::test]
async fn a_try_cut_off_by_the_per_try_timeout_is_retried_and_the_retry_answers() {
    let app = TestBackend::start("stalls").await;
    let extra =
        "      timeouts: { request: 3s, backendRequest: 600ms }\n      retry: { attempts: 1, backoff: 1ms }\n";
    let routes = route("r", "stalls", extra);
    let (_proxy, gw) = gateway_proxy(&registry(&[service("stalls", &[app.addr])], &routes)).await;
    app.fail_next(1, Fail::Delay(Duration::from_secs(5)));
    let (reply, elapsed) = timed_get(gw, "/r/hello").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(app.requests(), 2);
    // The first try ends at its per-try timeout; the retry answers at once.
    assert_fired_near(elapsed, Duration::from_millis(600));
}

#[tokio::test]
async fn a_gateway_route_without_a_timeout_takes_its_backend_services_timeout() {
    let app = TestBackend::start("svc-timeout").await;
    let svc = service("svc-timeout", &[app.addr]) + "    policy:\n      timeout: 800ms\n";
    let routes = route("r", "svc-timeout", "");
    let (_proxy, gw) = gateway_proxy(&registry(&[svc], &routes)).await;
    let (reply, elapsed) = timed_get(gw, "/r/_/delay/5000").await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{}", reply.body);
    assert_eq!(reply.header("weir-proxy-error"), Some("request-timeout"));
    assert_fired_near(elapsed, Duration::from_millis(800));
}

fn grpc_call(path: &str, grpc_timeout: &str) -> Request<Full<Bytes>> {
    Request::post(format!("http://gw.test{path}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", grpc_timeout)
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .expect("a valid gRPC request")
}

#[tokio::test]
async fn an_incoming_grpc_timeout_ends_the_call_with_deadline_exceeded() {
    let app = TestBackend::start("grpc-slow").await;
    let routes = route("g", "grpc-slow", "      timeouts: { request: 10s }\n");
    let (_proxy, gw) =
        gateway_proxy(&registry(&[service("grpc-slow", &[app.addr])], &routes)).await;
    let mut conn = H2Conn::connect(gw).await;
    let started = Instant::now();
    let reply = conn.send(grpc_call("/g/_/delay/5000", "800m")).await;
    let elapsed = started.elapsed();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header("grpc-status"),
        Some("4"),
        "{:?}",
        reply.headers
    );
    assert_eq!(reply.header("weir-proxy-error"), Some("grpc-deadline"));
    assert_fired_near(elapsed, Duration::from_millis(800));
}

#[tokio::test]
async fn what_is_left_of_the_grpc_deadline_travels_upstream() {
    let app = TestBackend::start("grpc-echo").await;
    let routes = route("g", "grpc-echo", "");
    let (_proxy, gw) =
        gateway_proxy(&registry(&[service("grpc-echo", &[app.addr])], &routes)).await;
    let mut conn = H2Conn::connect(gw).await;
    let reply = conn.send(grpc_call("/g/echo", "5S")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let sent = reply.json()["headers"]["grpc-timeout"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no grpc-timeout upstream: {}", reply.body));
    let (digits, unit) = sent.split_at(sent.len() - 1);
    let n: u64 = digits.parse().expect("grpc-timeout digits");
    let left = match unit {
        "u" => Duration::from_micros(n),
        "m" => Duration::from_millis(n),
        "n" => Duration::from_nanos(n),
        other => panic!("unexpected grpc-timeout unit {other}: {sent}"),
    };
    assert!(
        left < Duration::from_secs(5) && left > Duration::from_secs(4),
        "upstream grpc-timeout {sent} ({left:?}), want a little under 5 s"
    );
}
