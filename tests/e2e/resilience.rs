//! Issue 4's headline: with one of three endpoints failing (answering 500, refusing connections,
//! or too slow for the per-try timeout), clients behind a route with `retry` and a service with a
//! `circuitBreaker` see at least 99.9% success, and the bad endpoint is ejected and then left
//! alone.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::time::Instant;
use weir_tests::backend::Fail;
use weir_tests::http_client::{request, H1Conn};
use weir_tests::metrics::sum;
use weir_tests::{poll_until, TestBackend, WeirProxy};

use crate::breaker::proxy;

/// Generous: a loaded 2-core CI machine runs a debug proxy.
const DEADLINE: Duration = Duration::from_secs(30);
const SVC: &str = "app.default";
const RETRYING_ROUTE: &str =
    "    - { name: all, retry: { attempts: 2 }, backendRefs: [{ name: app }] }\n";
/// Ejected for longer than any test runs, so that the state can be asserted at the end.
const BREAKER: &str = "{ circuitBreaker: { consecutiveFailures: 5, minEjection: 60s } }";
const CONCURRENCY: usize = 12;

/// Sends `n` GETs through the gateway from `CONCURRENCY` keep-alive connections; returns how
/// many were answered 2xx.
async fn blast(gateway: SocketAddr, n: usize) -> usize {
    let workers = (0..CONCURRENCY).map(|w| {
        tokio::spawn(async move {
            let mut conn = H1Conn::connect(gateway).await;
            let mut ok = 0;
            for _ in (w..n).step_by(CONCURRENCY) {
                let req = request(Method::GET, "gw.test", "/", "");
                match conn.try_send(req).await {
                    Ok(r) if r.status.is_success() => ok += 1,
                    Ok(_) => {}
                    Err(_) => conn = H1Conn::connect(gateway).await,
                }
            }
            ok
        })
    });
    let mut ok = 0;
    for w in workers {
        ok += w.await.expect("a load worker");
    }
    ok
}

/// The `/endpoints` entry of `addr`.
async fn endpoint(proxy: &WeirProxy, addr: SocketAddr) -> serde_json::Value {
    let list = proxy.admin_get("/endpoints").await.json();
    let addr = addr.to_string();
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["address"] == addr.as_str()).cloned())
        .unwrap_or_default()
}

async fn opened(proxy: &WeirProxy) -> f64 {
    let text = proxy.metrics_text().await;
    sum(
        &text,
        "weir_breaker_transitions_total",
        &[("service", SVC), ("to", "open")],
    )
    .unwrap_or(0.0)
}

/// Sends at least 3,000 requests to `good` + `bad` and checks the headline: ≥ 99.9% success,
/// `bad` ejected (polled between batches of 100) and sent nothing from then on. `bad_requests`
/// counts what reached it (always 0 for an address that refuses). How many requests go by
/// before the ejection depends on timing (a refusing endpoint is also skipped by the connect
/// backoff, so its failures come slowly), so the success rate is taken over everything sent.
async fn headline(good: &[SocketAddr], bad: SocketAddr, bad_requests: impl Fn() -> u64) {
    let proxy = proxy(BREAKER, &[good[0], good[1], bad], RETRYING_ROUTE).await;
    let gateway = proxy.gateway.expect("a gateway");

    let (mut ok, mut sent) = (0, 0);
    let start = Instant::now();
    let e = loop {
        ok += blast(gateway, 100).await;
        sent += 100;
        let e = endpoint(&proxy, bad).await;
        if e["state"] == "ejected" {
            break e;
        }
        assert!(start.elapsed() < DEADLINE, "not ejected after {sent}: {e}");
    };
    assert_eq!(e["ejections"], 1, "{e}");
    let left = e["ejected_for_ms"].as_u64().unwrap_or(0);
    assert!(left > 30_000 && left <= 60_000, "ejected for 60 s: {e}");
    assert!(opened(&proxy).await >= 1.0);
    let before = bad_requests();
    assert!(
        before <= 5 + CONCURRENCY as u64,
        "5 failures in a row eject; at most one more per client in flight: {before}"
    );

    let rest = 3_000usize.saturating_sub(sent).max(1_000);
    ok += blast(gateway, rest).await;
    sent += rest;
    assert!(
        ok * 1_000 >= sent * 999,
        "{ok} of {sent} succeeded, below 99.9%"
    );
    assert_eq!(
        bad_requests(),
        before,
        "nothing reaches an ejected endpoint"
    );
    assert_eq!(endpoint(&proxy, bad).await["state"], "ejected");
}

#[tokio::test]
async fn with_one_of_three_endpoints_answering_500_clients_see_999_per_mille_and_it_is_ejected() {
    let (a, b, bad) = (
        TestBackend::start("a").await,
        TestBackend::start("b").await,
        TestBackend::start("bad").await,
    );
    bad.force_status(Some(StatusCode::INTERNAL_SERVER_ERROR));
    headline(&[a.addr, b.addr], bad.addr, || bad.requests()).await;
}

#[tokio::test]
async fn with_one_of_three_endpoints_refusing_connections_clients_see_999_per_mille_and_it_is_ejected(
) {
    let (a, b, gone) = (
        TestBackend::start("a").await,
        TestBackend::start("b").await,
        TestBackend::start("gone").await,
    );
    let refusing = gone.addr;
    gone.stop().await;
    headline(&[a.addr, b.addr], refusing, || 0).await;
}

#[tokio::test]
async fn an_endpoint_too_slow_for_the_per_try_timeout_is_ejected_and_clients_never_wait_for_it() {
    let (a, b, slow) = (
        TestBackend::start("a").await,
        TestBackend::start("b").await,
        TestBackend::start("slow").await,
    );
    slow.fail_next(1_000, Fail::Delay(Duration::from_secs(5)));
    let route = "    - name: all
      timeouts: { backendRequest: 200ms }
      retry: { attempts: 2 }
      backendRefs: [{ name: app }]
";
    let policy = "{ circuitBreaker: { consecutiveFailures: 1, minEjection: 60s } }";
    let proxy = proxy(policy, &[a.addr, b.addr, slow.addr], route).await;
    let gateway = proxy.gateway.expect("a gateway");

    // Once one attempt timed out, the balancer shies away from it: poll until one reached it.
    poll_until(DEADLINE, "the slow endpoint to be ejected", || async {
        let ok = blast(gateway, 24).await;
        assert_eq!(ok, 24, "a per-try timeout is retried on another endpoint");
        (endpoint(&proxy, slow.addr).await["state"] == "ejected").then_some(())
    })
    .await;
    let seen = slow.requests();
    assert!(seen <= CONCURRENCY as u64, "{seen} requests reached it");
    let latency = endpoint(&proxy, slow.addr).await["latency_ewma_ms"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        latency >= 150.0,
        "a cut-off attempt raised the estimate: {latency} ms"
    );
    assert_eq!(blast(gateway, 120).await, 120);
    assert_eq!(slow.requests(), seen);
}
