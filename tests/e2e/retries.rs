//! Retries through the gateway listener to misbehaving in-process backends: 5xx and resets
//! retried, bodies up to 64 KiB replayed byte for byte (also when the retry starts while the
//! client is still sending), non-idempotent methods only when the route allows, storms capped
//! by the service's retry budget, and never a retry once a response is streaming.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use rand::RngCore;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use weir_tests::backend::{Fail, Fnv1a64};
use weir_tests::http_client::{request, send, H1Conn, H2Conn, Reply};
use weir_tests::wait::within;
use weir_tests::{metrics, poll_until, require, TestBackend, WeirProxy};

use crate::gateway::{gateway_proxy, registry, service};

const DEADLINE: Duration = Duration::from_secs(10);
const KIB_64: usize = 64 * 1024;

/// A gateway route `name` on prefix `/name` (stripped) to service `svc` with `extra` route fields
/// (indented YAML such as `retry: {..}`).
pub(crate) fn route(name: &str, svc: &str, extra: &str) -> String {
    format!(
        "    - name: {name}
      matches: [{{ path: {{ type: PathPrefix, value: /{name} }} }}]
      filters:
        - type: URLRewrite
          urlRewrite: {{ path: {{ type: ReplacePrefixMatch, replacePrefixMatch: / }} }}
{extra}      backendRefs: [{{ name: {svc} }}]
"
    )
}

/// `method path` on the gateway with `Host: gw.test` and `body`.
async fn call(gw: SocketAddr, method: Method, path: &str, body: impl Into<Bytes>) -> Reply {
    send(gw, request(method, "gw.test", path, body)).await
}

async fn retries_metric(proxy: &WeirProxy, name: &str, route: &str) -> f64 {
    let text = proxy.metrics_text().await;
    metrics::sum(&text, name, &[("direction", "gateway"), ("route", route)]).unwrap_or(0.0)
}

fn random_body(len: usize) -> (Vec<u8>, String) {
    let mut body = vec![0u8; len];
    rand::thread_rng().fill_bytes(&mut body);
    let mut sum = Fnv1a64::new();
    sum.update(&body);
    (body, sum.hex())
}

#[tokio::test]
async fn a_get_answered_503_is_retried_and_the_retry_succeeds() {
    let app = TestBackend::start("flaky").await;
    let routes = route("r", "flaky", "      retry: { attempts: 2, backoff: 1ms }\n");
    let (proxy, gw) = gateway_proxy(&registry(&[service("flaky", &[app.addr])], &routes)).await;
    app.fail_next(1, Fail::Status(StatusCode::SERVICE_UNAVAILABLE));
    let reply = call(gw, Method::GET, "/r/hello", "").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(app.requests(), 2, "one 503, one retry");
    assert_eq!(retries_metric(&proxy, "weir_retries_total", "r").await, 1.0);
}

#[tokio::test]
async fn a_get_whose_connection_is_reset_before_the_response_is_retried() {
    let app = TestBackend::start("resets").await;
    let routes = route(
        "r",
        "resets",
        "      retry: { attempts: 1, backoff: 1ms }\n",
    );
    let (_proxy, gw) = gateway_proxy(&registry(&[service("resets", &[app.addr])], &routes)).await;
    app.fail_next(1, Fail::ResetAfter(0));
    let reply = call(gw, Method::GET, "/r/hello", "").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(app.requests(), 2);
}

#[tokio::test]
async fn a_64_kib_post_body_is_retried_intact_after_a_503() {
    let app = TestBackend::start("upload").await;
    let extra = "      retry: { attempts: 1, backoff: 1ms, nonIdempotent: true }\n";
    let routes = route("up", "upload", extra);
    let (_proxy, gw) = gateway_proxy(&registry(&[service("upload", &[app.addr])], &routes)).await;
    let (body, sum) = random_body(KIB_64);
    app.fail_next(1, Fail::Status(StatusCode::SERVICE_UNAVAILABLE));
    let reply = call(gw, Method::POST, "/up/_/stream", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["bytes"], KIB_64);
    assert_eq!(reply.json()["fnv1a64"], sum.as_str());
    assert_eq!(app.requests(), 2);
}

#[tokio::test]
async fn an_early_retry_replays_a_body_still_arriving_without_a_lost_or_duplicated_chunk() {
    const CHUNK: usize = 4 * 1024;
    let app = TestBackend::start("early").await;
    let extra = "      retry: { attempts: 1, backoff: 1ms, nonIdempotent: true }\n";
    let routes = route("up", "early", extra);
    let (_proxy, gw) = gateway_proxy(&registry(&[service("early", &[app.addr])], &routes)).await;
    let (body, sum) = random_body(KIB_64);
    // The first attempt dies after 16 KiB; the client has sent 20 KiB by then and sends the
    // rest only once the retry has reached the backend.
    app.fail_next(1, Fail::ResetAfter(16 * 1024));
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    let req = http::Request::post("/up/_/stream")
        .header(http::header::HOST, "gw.test")
        .body(StreamBody::new(frames))
        .expect("a valid streamed request");
    let io = TcpStream::connect(gw)
        .await
        .expect("connect to the gateway");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(conn);
    let reply = tokio::spawn(async move {
        let resp = sender.send_request(req).await.expect("response head");
        let status = resp.status();
        let body = resp.into_body().collect().await.expect("response body");
        (status, body.to_bytes())
    });
    let mut chunks = body.chunks(CHUNK).map(Bytes::copy_from_slice);
    for chunk in chunks.by_ref().take(5) {
        tx.send(chunk).await.expect("client body channel");
    }
    poll_until(DEADLINE, "the retry to reach the backend", || async {
        (app.requests() >= 2).then_some(())
    })
    .await;
    for chunk in chunks {
        tx.send(chunk).await.expect("client body channel");
    }
    drop(tx);
    let (status, body) = within(DEADLINE, "the retried upload", reply)
        .await
        .expect("client task");
    let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON from /_/stream");
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json["bytes"], KIB_64, "{json}");
    assert_eq!(json["fnv1a64"], sum.as_str(), "{json}");
    assert_eq!(app.requests(), 2);
}

#[tokio::test]
async fn a_post_is_retried_only_when_the_route_allows_non_idempotent_retries() {
    let app = TestBackend::start("posts").await;
    let routes = route(
        "strict",
        "posts",
        "      retry: { attempts: 2, backoff: 1ms }\n",
    ) + &route(
        "lenient",
        "posts",
        "      retry: { attempts: 2, backoff: 1ms, nonIdempotent: true }\n",
    );
    let (_proxy, gw) = gateway_proxy(&registry(&[service("posts", &[app.addr])], &routes)).await;
    app.fail_next(1, Fail::Status(StatusCode::SERVICE_UNAVAILABLE));
    let reply = call(gw, Method::POST, "/strict/order", "one").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        app.requests(),
        1,
        "a POST was retried without nonIdempotent"
    );
    app.fail_next(1, Fail::Status(StatusCode::SERVICE_UNAVAILABLE));
    let reply = call(gw, Method::POST, "/lenient/order", "two").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["body"], "two");
    assert_eq!(app.requests(), 3);
}

#[tokio::test]
async fn a_retry_storm_against_a_failing_backend_is_capped_by_the_budget() {
    const CLIENTS: usize = 4;
    const PER_CLIENT: usize = 50;
    const REQUESTS: f64 = (CLIENTS * PER_CLIENT) as f64;
    let app = TestBackend::start("down").await;
    app.force_status(Some(StatusCode::SERVICE_UNAVAILABLE));
    let svc = service("down", &[app.addr])
        + "    policy:\n      retryBudget: { ratio: 0.2, minPerSecond: 1, ttl: 10s }\n";
    let routes = route(
        "storm",
        "down",
        "      retry: { attempts: 3, backoff: 1ms }\n",
    );
    let (proxy, gw) = gateway_proxy(&registry(&[svc], &routes)).await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(tokio::spawn(async move {
            let mut conn = H1Conn::connect(gw).await;
            for _ in 0..PER_CLIENT {
                let reply = conn
                    .send(request(Method::GET, "gw.test", "/storm/x", ""))
                    .await;
                assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
            }
        }));
    }
    for c in clients {
        within(DEADLINE * 3, "storm client", c)
            .await
            .expect("client task");
    }
    // Without a budget: 4 tries each, 800 hits. With it: the 10 s window holds every request,
    // so retries ≤ ratio × requests + minPerSecond × ttl, plus one overdraw per racing client.
    let hits = app.requests() as f64;
    let cap = REQUESTS * 1.2 + 10.0 + CLIENTS as f64;
    eprintln!("{REQUESTS} requests, {hits} backend hits, cap {cap}");
    assert!(hits <= cap, "{hits} backend hits, cap {cap}");
    assert!(
        hits >= REQUESTS * 1.15,
        "{hits} hits: the budget was not spent"
    );
    let retries = retries_metric(&proxy, "weir_retries_total", "storm").await;
    assert_eq!(retries, hits - REQUESTS);
    let exhausted = retries_metric(&proxy, "weir_retry_budget_exhausted_total", "storm").await;
    assert!(
        exhausted >= REQUESTS * 0.5,
        "budget exhausted {exhausted} times"
    );
    require!(tool "promtool");
    if let Err(e) = metrics::promtool_check(&proxy.metrics_text().await) {
        panic!("{e}");
    }
}

#[tokio::test]
async fn a_grpc_call_answered_unavailable_is_retried_when_the_route_allows() {
    let app = TestBackend::start("grpc-flaky").await;
    let extra = "      retry: { attempts: 1, backoff: 1ms, nonIdempotent: true }\n";
    let routes = route("g", "grpc-flaky", extra);
    let (_proxy, gw) =
        gateway_proxy(&registry(&[service("grpc-flaky", &[app.addr])], &routes)).await;
    // A bare 503 is UNAVAILABLE to gRPC: the default retryable status.
    app.fail_next(1, Fail::Status(StatusCode::SERVICE_UNAVAILABLE));
    let call = http::Request::post("http://gw.test/g/pkg.Svc/Call")
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .body(http_body_util::Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .expect("a valid gRPC request");
    let reply = H2Conn::connect(gw).await.send(call).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(app.requests(), 2);
}

#[tokio::test]
async fn a_response_that_dies_while_streaming_is_not_retried() {
    let app = TestBackend::start("dies").await;
    let routes = route("r", "dies", "      retry: { attempts: 3, backoff: 1ms }\n");
    let (_proxy, gw) = gateway_proxy(&registry(&[service("dies", &[app.addr])], &routes)).await;
    let mut conn = H1Conn::connect(gw).await;
    let res = conn
        .try_send(request(Method::GET, "gw.test", "/r/_/truncate/1000", ""))
        .await;
    assert!(res.is_err(), "a truncated body arrived whole: {res:?}");
    assert_eq!(app.requests(), 1, "the streaming response was retried");
}
