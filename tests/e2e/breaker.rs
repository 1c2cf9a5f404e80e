//! Circuit breaking through the gateway: a failing endpoint is ejected and probed back, the
//! `minReadyEndpoints` floor holds, a service whose endpoints are all ejected fails fast after
//! its failfast wait, and a route's own breaker leaves the other routes alone.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_tests::http_client::{get, Reply};
use weir_tests::metrics::sum;
use weir_tests::{poll_until, TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
const SVC: &str = "app.default";

/// A proxy with one service `app` (policy `policy`, one line of flow YAML) and gateway routes
/// (`/` to `app` unless `routes` is given).
pub(crate) async fn proxy(policy: &str, endpoints: &[SocketAddr], routes: &str) -> WeirProxy {
    let mut y = format!("services:\n  - name: app\n    policy: {policy}\n    endpoints:\n");
    for a in endpoints {
        y += &format!("      - address: \"{a}\"\n");
    }
    y += "gateway:\n  routes:\n";
    y += if routes.is_empty() {
        "    - { name: all, backendRefs: [{ name: app }] }\n"
    } else {
        routes
    };
    WeirProxy::builder()
        .gateway(true)
        .registry_yaml(y)
        .start()
        .await
}

async fn gw(proxy: &WeirProxy, path: &str) -> Reply {
    get(proxy.gateway.expect("a gateway"), "gw.test", path).await
}

/// `/endpoints` states by address.
async fn states(proxy: &WeirProxy) -> Vec<(String, String)> {
    let list = proxy.admin_get("/endpoints").await.json();
    let list = list.as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("address"), s("state"))
        })
        .collect()
}

async fn state_of(proxy: &WeirProxy, addr: SocketAddr) -> String {
    let addr = addr.to_string();
    let all = states(proxy).await;
    all.into_iter()
        .find(|(a, _)| *a == addr)
        .map(|(_, s)| s)
        .unwrap_or_default()
}

async fn transitions(proxy: &WeirProxy, to: &str) -> f64 {
    let text = proxy.metrics_text().await;
    let labels = [("service", SVC), ("to", to)];
    sum(&text, "weir_breaker_transitions_total", &labels).unwrap_or(0.0)
}

#[tokio::test]
async fn an_endpoint_answering_500_is_ejected_until_a_probe_finds_it_fixed() {
    let (a, b, bad) = (
        TestBackend::start("a").await,
        TestBackend::start("b").await,
        TestBackend::start("bad").await,
    );
    bad.force_status(Some(StatusCode::INTERNAL_SERVER_ERROR));
    let policy = "{ circuitBreaker: { consecutiveFailures: 3, minEjection: 3s, maxEjection: 3s } }";
    let proxy = proxy(policy, &[a.addr, b.addr, bad.addr], "").await;

    poll_until(DEADLINE, "the failing endpoint to be ejected", || async {
        for _ in 0..10 {
            gw(&proxy, "/").await;
        }
        (state_of(&proxy, bad.addr).await == "ejected").then_some(())
    })
    .await;
    assert_eq!(
        bad.requests(),
        3,
        "ejected after exactly 3 failures in a row"
    );

    // While ejected (3 s), no request reaches it; stop early enough to stay inside the ejection.
    let (start, seen) = (Instant::now(), bad.requests());
    let mut sent = 0;
    while start.elapsed() < Duration::from_secs(2) && sent < 60 {
        let r = gw(&proxy, "/").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        sent += 1;
    }
    assert!(sent >= 20, "only {sent} requests in 2 s");
    assert_eq!(bad.requests(), seen, "an ejected endpoint gets no traffic");
    let text = proxy.metrics_text().await;
    assert_eq!(
        sum(&text, "weir_endpoints_ejected", &[("service", SVC)]),
        Some(1.0)
    );
    assert!(transitions(&proxy, "open").await >= 1.0);

    // Fixed: the probe after the ejection succeeds and the endpoint is back.
    bad.force_status(None);
    poll_until(DEADLINE, "the fixed endpoint to be ready again", || async {
        gw(&proxy, "/").await;
        (state_of(&proxy, bad.addr).await == "ready").then_some(())
    })
    .await;
    assert!(transitions(&proxy, "half_open").await >= 1.0);
    assert!(transitions(&proxy, "closed").await >= 1.0);
    let back = bad.requests();
    poll_until(DEADLINE, "traffic to reach it again", || async {
        gw(&proxy, "/").await;
        (bad.requests() > back + 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn ejection_never_takes_the_ready_endpoints_below_the_floor() {
    let backends = [
        TestBackend::start("x").await,
        TestBackend::start("y").await,
        TestBackend::start("z").await,
    ];
    for b in &backends {
        b.force_status(Some(StatusCode::BAD_GATEWAY));
    }
    let addrs: Vec<_> = backends.iter().map(|b| b.addr).collect();
    let policy =
        "{ circuitBreaker: { consecutiveFailures: 2, minEjection: 30s, minReadyEndpoints: 2 } }";
    let proxy = proxy(policy, &addrs, "").await;

    for _ in 0..60 {
        assert_eq!(gw(&proxy, "/").await.status, StatusCode::BAD_GATEWAY);
    }
    let all = states(&proxy).await;
    let ejected: Vec<_> = all.iter().filter(|(_, s)| s == "ejected").collect();
    assert_eq!(ejected.len(), 1, "three endpoints, floor two: one ejection");
    assert!(transitions(&proxy, "refused").await >= 1.0);
    let before: Vec<u64> = backends.iter().map(TestBackend::requests).collect();
    for _ in 0..20 {
        gw(&proxy, "/").await;
    }
    for (b, n) in backends.iter().zip(&before) {
        let got = b.requests() - n;
        if b.addr.to_string() == ejected[0].0 {
            assert_eq!(got, 0, "the ejected endpoint gets nothing");
        }
    }
    let total: u64 = backends.iter().map(TestBackend::requests).sum();
    assert_eq!(
        total,
        before.iter().sum::<u64>() + 20,
        "the other two serve"
    );
}

#[tokio::test]
async fn with_every_endpoint_ejected_requests_fail_fast_after_the_failfast_wait() {
    let (a, b) = (TestBackend::start("a").await, TestBackend::start("b").await);
    a.force_status(Some(StatusCode::INTERNAL_SERVER_ERROR));
    b.force_status(Some(StatusCode::INTERNAL_SERVER_ERROR));
    let policy = "{ failfast: 500ms, circuitBreaker: { consecutiveFailures: 1, minEjection: 30s, minReadyEndpoints: 0 } }";
    let proxy = proxy(policy, &[a.addr, b.addr], "").await;

    poll_until(DEADLINE, "both endpoints to be ejected", || async {
        gw(&proxy, "/").await;
        let all = states(&proxy).await;
        all.iter().all(|(_, s)| s == "ejected").then_some(())
    })
    .await;
    let seen = a.requests() + b.requests();
    let start = Instant::now();
    let r = gw(&proxy, "/").await;
    let took = start.elapsed();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.header("weir-proxy-error"), Some("no-ready-endpoints"));
    assert!(
        took >= Duration::from_millis(450) && took <= Duration::from_millis(800),
        "failfast 500 ms, answered after {took:?}"
    );
    assert_eq!(a.requests() + b.requests(), seen, "nothing was sent");
}

#[tokio::test]
async fn an_open_route_breaker_fails_its_route_fast_and_leaves_other_routes_alone() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: fragile
      matches: [{ path: { type: PathPrefix, value: /_/status } }]
      circuitBreaker: { consecutiveFailures: 2, minEjection: 30s }
      backendRefs: [{ name: app }]
    - name: sturdy
      backendRefs: [{ name: app }]
";
    let proxy = proxy("{}", &[app.addr], routes).await;

    for _ in 0..2 {
        let r = gw(&proxy, "/_/status/500").await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let seen = app.requests();
    for path in ["/_/status/500", "/_/status/200"] {
        let r = gw(&proxy, path).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
        assert_eq!(r.header("weir-proxy-error"), Some("route-circuit-open"));
    }
    assert_eq!(app.requests(), seen, "the open route sent nothing");
    let open = proxy.admin_get("/breakers").await.json();
    assert_eq!(open.as_array().map(Vec::len), Some(1), "{open}");
    assert_eq!(
        (&open[0]["service"], &open[0]["route"], &open[0]["state"]),
        (&SVC.into(), &"fragile".into(), &"open".into()),
        "{open}"
    );
    let text = proxy.metrics_text().await;
    let opened = [
        ("direction", "gateway"),
        ("route", "fragile"),
        ("to", "open"),
    ];
    assert_eq!(
        sum(&text, "weir_route_breaker_transitions_total", &opened),
        Some(1.0),
        "the route breaker's opening is counted"
    );
    let other = gw(&proxy, "/elsewhere").await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.body);
    assert_eq!(app.requests(), seen + 1);
}

#[tokio::test]
async fn a_retry_with_every_endpoint_ejected_answers_with_the_upstreams_own_response() {
    let app = TestBackend::start("app").await;
    app.force_status(Some(StatusCode::SERVICE_UNAVAILABLE));
    let policy =
        "{ circuitBreaker: { consecutiveFailures: 1, minEjection: 30s, minReadyEndpoints: 0 } }";
    let routes = "    - name: all
      retry: { attempts: 1, backoff: 1ms }
      backendRefs: [{ name: app }]
";
    let proxy = proxy(policy, &[app.addr], routes).await;
    // The 503 ejects the only endpoint, so the retry has nowhere to go.
    let r = gw(&proxy, "/").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(
        r.header("weir-proxy-error"),
        None,
        "the backend's answer: {}",
        r.body
    );
    assert_eq!(r.header("x-backend"), Some("app"), "{}", r.body);
    assert_eq!(app.requests(), 1);
    assert_eq!(state_of(&proxy, app.addr).await, "ejected");
}

/// A client that breaks off its upload mid-body is not the upstream's failure: neither the
/// endpoint's breaker nor the route's counts it, whether the service speaks HTTP/1.1 or h2c
/// (where the proxy resets the upstream stream itself).
#[tokio::test]
async fn clients_that_abort_their_uploads_trip_no_breaker() {
    for app_protocol in ["http", "h2c"] {
        let app = TestBackend::start("app").await;
        let y = format!(
            "services:
  - name: app
    appProtocol: {app_protocol}
    policy: {{ circuitBreaker: {{ consecutiveFailures: 2, minEjection: 30s, minReadyEndpoints: 0 }} }}
    endpoints:
      - address: \"{}\"
gateway:
  routes:
    - name: all
      circuitBreaker: {{ consecutiveFailures: 2, minEjection: 30s }}
      backendRefs: [{{ name: app }}]
",
            app.addr
        );
        let proxy = WeirProxy::builder()
            .gateway(true)
            .registry_yaml(y)
            .start()
            .await;
        let addr = proxy.gateway.expect("a gateway");
        for n in 1..=3u64 {
            let mut client = TcpStream::connect(addr).await.expect("connect");
            client
                .write_all(
                    b"POST / HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 100000\r\n\r\n0123456789",
                )
                .await
                .expect("write");
            // (or to be refused: a breaker that counted the earlier aborts is open)
            poll_until(DEADLINE, "the upload to reach the backend", || async {
                (app.requests() >= n || answered(&proxy).await >= n).then_some(())
            })
            .await;
            drop(client);
            poll_until(DEADLINE, "the proxy to give the upload up", || async {
                (answered(&proxy).await >= n).then_some(())
            })
            .await;
        }
        assert_eq!(state_of(&proxy, app.addr).await, "ready", "{app_protocol}");
        let r = gw(&proxy, "/").await;
        assert_eq!(r.status, StatusCode::OK, "{app_protocol}: {}", r.body);
        assert_eq!(transitions(&proxy, "open").await, 0.0, "{app_protocol}");
    }
}

/// Responses the proxy has finished, whatever their status.
async fn answered(proxy: &WeirProxy) -> u64 {
    let text = proxy.metrics_text().await;
    sum(&text, "weir_responses_total", &[]).unwrap_or(0.0) as u64
}
