//! Limits through the gateway: a rate limit admits its rate plus burst and answers 429 with
//! `Retry-After`, a header-keyed limit budgets each key apart, and a concurrency limit sheds
//! excess load with 503 while holding its slot until the response body has gone out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, MissedTickBehavior};
use weir_tests::http_client::{get, request, send, H1Conn, Reply};
use weir_tests::metrics::sum;
use weir_tests::{poll_until, TestBackend, WeirProxy};

use crate::breaker::proxy;

const DEADLINE: Duration = Duration::from_secs(10);

/// Sends a GET and returns as soon as the response head is in, its body still to read.
async fn head_only(addr: std::net::SocketAddr, path: &str) -> http::Response<Incoming> {
    let io = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = request(Method::GET, "gw.test", path, "");
    tx.send_request(req).await.expect("response head")
}

async fn gw(proxy: &WeirProxy, path: &str) -> Reply {
    get(proxy.gateway.expect("a gateway"), "gw.test", path).await
}

fn counter(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sum(text, name, labels).unwrap_or(0.0)
}

/// The issue asks for 5% over 10 s; 4 s keeps the suite short and the bucket's arithmetic is the
/// same: burst + rate × window requests pass.
#[tokio::test]
async fn a_rate_limit_admits_its_rate_plus_burst_within_5_percent_and_answers_429_with_retry_after()
{
    const RPS: f64 = 50.0;
    const BURST: f64 = 10.0;
    const WINDOW: Duration = Duration::from_secs(4);
    let app = TestBackend::start("app").await;
    let policy = "{ rateLimit: { requestsPerSecond: 50, burst: 10 } }";
    let proxy = proxy(policy, &[app.addr], "").await;
    let gw_addr = proxy.gateway.expect("a gateway");

    // Four clients, each one request per 5 ms: 800 rps offered against 50 allowed.
    let (ok, limited) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (ok, limited) = (ok.clone(), limited.clone());
            tokio::spawn(async move {
                let mut conn = H1Conn::connect(gw_addr).await;
                let mut tick = tokio::time::interval(Duration::from_millis(5));
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                let mut sample_429 = None;
                while start.elapsed() < WINDOW {
                    tick.tick().await;
                    let r = conn.send(request(Method::GET, "gw.test", "/", "")).await;
                    match r.status {
                        StatusCode::OK => ok.fetch_add(1, Ordering::Relaxed),
                        StatusCode::TOO_MANY_REQUESTS => {
                            sample_429.get_or_insert(r);
                            limited.fetch_add(1, Ordering::Relaxed)
                        }
                        s => panic!("unexpected {s}: {}", r.body),
                    };
                }
                sample_429
            })
        })
        .collect();
    let mut sample = None;
    for w in workers {
        sample = sample.or(w.await.expect("worker"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (ok, limited) = (ok.load(Ordering::Relaxed), limited.load(Ordering::Relaxed));
    let expected = BURST + RPS * elapsed;
    let off = (ok as f64 - expected).abs() / expected;
    assert!(
        off <= 0.05,
        "{ok} admitted in {elapsed:.2} s, expected {expected:.0} ± 5%"
    );
    assert!(limited > ok, "the offered load was well over the limit");
    assert_eq!(
        app.requests(),
        ok,
        "a limited request never reaches the app"
    );

    let r = sample.expect("some request was limited");
    assert_eq!(r.header("weir-proxy-error"), Some("rate-limited"));
    assert_eq!(r.header("retry-after"), Some("1"));
    let text = proxy.metrics_text().await;
    let labels = [("direction", "gateway"), ("service", "app.default")];
    assert_eq!(
        counter(&text, "weir_rate_limited_total", &labels),
        limited as f64
    );
}

#[tokio::test]
async fn a_header_keyed_route_limit_gives_each_key_its_own_budget() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: keyed
      rateLimit: { requestsPerSecond: 0.2, burst: 3, key: header:x-user }
      backendRefs: [{ name: app }]
";
    let proxy = proxy("{}", &[app.addr], routes).await;
    let gw_addr = proxy.gateway.expect("a gateway");
    let as_user = |user: &'static str| {
        let mut req = request(Method::GET, "gw.test", "/", "");
        req.headers_mut()
            .insert("x-user", http::HeaderValue::from_static(user));
        send(gw_addr, req)
    };
    for user in ["alice", "bob"] {
        for i in 0..3 {
            let r = as_user(user).await;
            assert_eq!(r.status, StatusCode::OK, "{user} #{i}: {}", r.body);
        }
        let r = as_user(user).await;
        assert_eq!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{user}'s burst is spent"
        );
        let wait: u64 = r
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!((1..=5).contains(&wait), "Retry-After {wait} at 0.2 rps");
    }
    // Requests without the header share one more bucket.
    for _ in 0..3 {
        assert_eq!(gw(&proxy, "/").await.status, StatusCode::OK);
    }
    assert_eq!(gw(&proxy, "/").await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(app.requests(), 9);
}

#[tokio::test]
async fn a_concurrency_limit_sheds_excess_and_holds_the_slot_until_the_body_is_sent() {
    let app = TestBackend::start("app").await;
    let proxy = proxy("{ maxConcurrentRequests: 2 }", &[app.addr], "").await;
    let gw_addr = proxy.gateway.expect("a gateway");

    // Two slow requests fill both slots.
    let slow: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(gw_addr, "gw.test", "/_/delay/2000").await }))
        .collect();
    poll_until(DEADLINE, "both slow requests at the app", || async {
        (app.requests() == 2).then_some(())
    })
    .await;
    for _ in 0..3 {
        let start = Instant::now();
        let r = gw(&proxy, "/").await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
        assert_eq!(r.header("weir-proxy-error"), Some("overloaded"));
        assert!(start.elapsed() < Duration::from_millis(500), "shed at once");
    }
    for s in slow {
        assert_eq!(s.await.expect("slow request").status, StatusCode::OK);
    }
    assert_eq!(gw(&proxy, "/").await.status, StatusCode::OK, "slots freed");
    let text = proxy.metrics_text().await;
    let labels = [("service", "app.default"), ("reason", "overloaded")];
    assert_eq!(counter(&text, "weir_load_shed_total", &labels), 3.0);

    // A response whose head is out but whose body is still coming keeps its slot.
    let (a, b) = tokio::join!(
        head_only(gw_addr, "/_/slow-body/2000"),
        head_only(gw_addr, "/_/slow-body/2000")
    );
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    let r = gw(&proxy, "/").await;
    assert_eq!(
        r.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "slots held by the bodies"
    );
    for body in [a.into_body(), b.into_body()] {
        let bytes = body.collect().await.expect("slow body").to_bytes();
        assert_eq!(bytes, Bytes::from_static(b"slow body\n"));
    }
    poll_until(
        DEADLINE,
        "the slots to be freed by the finished bodies",
        || async { (gw(&proxy, "/").await.status == StatusCode::OK).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_queued_request_waits_the_failfast_time_for_a_slot_then_is_shed() {
    let app = TestBackend::start("app").await;
    let policy = "{ maxConcurrentRequests: 1, maxPendingRequests: 1, failfast: 400ms }";
    let proxy = proxy(policy, &[app.addr], "").await;
    let gw_addr = proxy.gateway.expect("a gateway");
    let slow = tokio::spawn(async move { get(gw_addr, "gw.test", "/_/delay/3000").await });
    poll_until(DEADLINE, "the slow request at the app", || async {
        (app.requests() == 1).then_some(())
    })
    .await;
    let start = Instant::now();
    let r = gw(&proxy, "/").await;
    let took = start.elapsed();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.header("weir-proxy-error"), Some("queue-timeout"));
    assert!(
        took >= Duration::from_millis(360) && took <= Duration::from_millis(650),
        "failfast 400 ms, shed after {took:?}"
    );
    assert_eq!(slow.await.expect("slow").status, StatusCode::OK);
}

#[tokio::test]
async fn the_limit_and_breaker_metrics_pass_promtool_once_each_has_fired() {
    weir_tests::require!(tool "promtool");
    let app = TestBackend::start("app").await;
    let policy = "{ maxConcurrentRequests: 1, circuitBreaker: { consecutiveFailures: 1, minEjection: 30s, minReadyEndpoints: 0 } }";
    let routes = "    - name: limited
      matches: [{ path: { type: PathPrefix, value: /limited } }]
      rateLimit: { requestsPerSecond: 0.1, burst: 1 }
      backendRefs: [{ name: app }]
    - { name: all, backendRefs: [{ name: app }] }
";
    let proxy = proxy(policy, &[app.addr], routes).await;
    let gw_addr = proxy.gateway.expect("a gateway");
    let slow = tokio::spawn(async move { get(gw_addr, "gw.test", "/_/delay/1000").await });
    poll_until(DEADLINE, "the slow request at the app", || async {
        (app.requests() == 1).then_some(())
    })
    .await;
    assert_eq!(
        gw(&proxy, "/").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(slow.await.expect("slow").status, StatusCode::OK);
    assert_eq!(gw(&proxy, "/limited").await.status, StatusCode::OK);
    assert_eq!(
        gw(&proxy, "/limited").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        gw(&proxy, "/_/status/500").await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let text = proxy.metrics_text().await;
    for name in [
        "weir_load_shed_total",
        "weir_rate_limited_total",
        "weir_breaker_transitions_total",
        "weir_endpoints_ejected",
    ] {
        assert_eq!(sum(&text, name, &[]), Some(1.0), "{name}");
    }
    if let Err(e) = weir_tests::metrics::promtool_check(&text) {
        panic!("{e}");
    }
}
