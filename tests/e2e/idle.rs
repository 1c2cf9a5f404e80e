//! The stream idle timeout through the gateway: a response body that stalls after its head is
//! cut within 10% of the setting (HTTP/1: the connection closes; HTTP/2: only the stream is
//! reset), an upstream that sends no head answers 504 `idle-timeout`, and streams that keep
//! moving slowly, downloads and uploads alike, outlive the timeout untouched.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{net::TcpStream, time::Instant};
use weir_tests::http_client::{request, send};
use weir_tests::{metrics, poll_until, TestBackend, WeirProxy};

use crate::gateway::{gateway_proxy, registry, service};
use crate::retries::route;

/// Loopback, a debug proxy and a loaded 2-core machine: added to the 10% on the late side.
const SLACK: Duration = Duration::from_millis(40);

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ReqBody = BoxBody<Bytes, BoxError>;

/// Asserts `elapsed` lies within [0.95, 1.10] × `setting` (+ [`SLACK`] late).
fn assert_fired_near(elapsed: Duration, setting: Duration) {
    let (early, late) = (setting.mul_f64(0.95), setting.mul_f64(1.10) + SLACK);
    eprintln!("cut after {elapsed:?} for a setting of {setting:?}");
    assert!(
        (early..=late).contains(&elapsed),
        "cut after {elapsed:?}, want {early:?}..={late:?}"
    );
}

/// A gateway whose route `/r` goes to a fresh backend with `timeouts: { idle: <idle> }`.
async fn idle_gateway(idle: &str) -> (TestBackend, WeirProxy, SocketAddr) {
    let app = TestBackend::start("idle").await;
    let extra = format!("      timeouts: {{ idle: {idle} }}\n");
    let routes = route("r", "idle", &extra);
    let (proxy, gw) = gateway_proxy(&registry(&[service("idle", &[app.addr])], &routes)).await;
    (app, proxy, gw)
}

/// One HTTP/1 exchange up to the response head, on a fresh connection.
async fn h1_head(gw: SocketAddr, req: Request<ReqBody>) -> Response<Incoming> {
    let io = TcpStream::connect(gw).await.expect("connect");
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    tx.send_request(req).await.expect("a response head")
}

fn get(path: &str) -> Request<ReqBody> {
    request(Method::GET, "gw.test", path, "").map(|b| b.map_err(|e| match e {}).boxed())
}

/// A body of `n` chunks of 5 bytes, one every `every`.
fn dripping(n: usize, every: Duration) -> ReqBody {
    let chunks = futures_util::stream::unfold(0, move |i| async move {
        if i == n {
            return None;
        }
        tokio::time::sleep(every).await;
        Some((Ok(Frame::data(Bytes::from_static(b"drip\n"))), i + 1))
    });
    BodyExt::boxed(StreamBody::new(chunks))
}

async fn idle_cuts(proxy: &WeirProxy, want: f64) {
    poll_until(Duration::from_secs(5), "the cut to be counted", || async {
        let text = proxy.metrics_text().await;
        let labels = [("route", "r"), ("error", "idle-timeout")];
        (metrics::sum(&text, "weir_proxy_errors_total", &labels) == Some(want)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_response_body_that_stalls_after_its_head_is_cut_within_ten_percent() {
    let (_app, proxy, gw) = idle_gateway("1s").await;
    let started = Instant::now();
    let resp = h1_head(gw, get("/r/_/slow-body/10000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let cut = resp.into_body().collect().await;
    assert!(cut.is_err(), "the body should fail, got {cut:?}");
    assert_fired_near(started.elapsed(), Duration::from_secs(1));
    idle_cuts(&proxy, 1.0).await;
}

#[tokio::test]
async fn over_http2_only_the_stalled_stream_is_reset() {
    let (_app, proxy, gw) = idle_gateway("800ms").await;
    let io = TcpStream::connect(gw).await.expect("connect");
    let (mut tx, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = |path: &str| {
        Request::get(format!("http://gw.test{path}"))
            .body(Full::new(Bytes::new()))
            .expect("a valid request")
    };
    let started = Instant::now();
    let resp = tx
        .send_request(req("/r/_/slow-body/10000"))
        .await
        .expect("head");
    assert_eq!(resp.status(), StatusCode::OK);
    let cut = resp.into_body().collect().await;
    let err = cut.expect_err("the stream should be reset");
    assert_fired_near(started.elapsed(), Duration::from_millis(800));
    eprintln!("stream ended with {err}");
    let next = tx
        .send_request(req("/r/hello"))
        .await
        .expect("same connection");
    assert_eq!(next.status(), StatusCode::OK, "the connection lives on");
    idle_cuts(&proxy, 1.0).await;
}

#[tokio::test]
async fn an_upstream_that_sends_no_head_answers_504_idle_timeout_from_the_service_setting() {
    let app = TestBackend::start("mute").await;
    let svc = service("mute", &[app.addr]) + "    policy: { idleTimeout: 800ms }\n";
    let routes = route("r", "mute", "");
    let (proxy, gw) = gateway_proxy(&registry(&[svc], &routes)).await;
    let started = Instant::now();
    let reply = send(gw, request(Method::GET, "gw.test", "/r/_/delay/5000", "")).await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{}", reply.body);
    assert_eq!(reply.header("weir-proxy-error"), Some("idle-timeout"));
    assert_fired_near(started.elapsed(), Duration::from_millis(800));
    idle_cuts(&proxy, 1.0).await;
}

#[tokio::test]
async fn a_response_that_keeps_dripping_outlives_its_idle_timeout() {
    let (_app, proxy, gw) = idle_gateway("600ms").await;
    let started = Instant::now();
    let resp = h1_head(gw, get("/r/_/drip/8/300")).await;
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("not cut")
        .to_bytes();
    assert_eq!(body.len(), 8 * 5);
    assert!(
        started.elapsed() > Duration::from_millis(2000),
        "4× the idle timeout"
    );
    let text = proxy.metrics_text().await;
    let labels = [("route", "r"), ("error", "idle-timeout")];
    assert_eq!(
        metrics::sum(&text, "weir_proxy_errors_total", &labels),
        None
    );
}

#[tokio::test]
async fn a_slow_upload_keeps_its_stream_alive_past_the_idle_timeout() {
    let (app, _proxy, gw) = idle_gateway("600ms").await;
    let started = Instant::now();
    let req = Request::post("/r/upload")
        .header(http::header::HOST, "gw.test")
        .body(dripping(8, Duration::from_millis(300)))
        .expect("a valid request");
    let resp = h1_head(gw, req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("not cut")
        .to_bytes();
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("the echo");
    assert_eq!(echo["body_bytes"], 40, "{echo}");
    assert!(started.elapsed() > Duration::from_millis(2000));
    assert_eq!(app.requests(), 1);
}

#[tokio::test]
async fn an_upgraded_connection_lives_while_bytes_move_and_is_closed_once_idle() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
    let setting = Duration::from_millis(600);
    let (_app, proxy, gw) = idle_gateway("600ms").await;
    let io = TcpStream::connect(gw).await.expect("connect");
    let mut io = BufReader::new(io);
    io.get_mut()
        .write_all(b"GET /r HTTP/1.1\r\nHost: gw.test\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n")
        .await
        .expect("send the upgrade");
    let (status, _) = weir_tests::raw_http1::read_head(&mut io)
        .await
        .expect("a response head");
    assert_eq!(status, 101);
    // Five echoes 250 ms apart: 1.25 s in all, never 600 ms without a byte.
    for i in 0..5u8 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        io.get_mut().write_all(&[i; 8]).await.expect("write");
        let mut echo = [0; 8];
        io.read_exact(&mut echo).await.expect("echoed while alive");
        assert_eq!(echo, [i; 8]);
    }
    let still = Instant::now();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), io.read_to_end(&mut rest))
        .await
        .expect("closed before 5 s")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing more was sent");
    assert_fired_near(still.elapsed(), setting);
    let counted = metrics::tunnels_closed(&proxy, &[("route", "r")], "idle-timeout", 1.0).await;
    assert_eq!(
        (counted.opened, counted.received, counted.sent),
        (1.0, 40.0, 40.0)
    );
}
