//! `stat` and `endpoint_states` against tiny in-test admin listeners on 127.0.0.1:0.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, time::Instant};

use super::{endpoint_states, history::Scrape, prom_text, service_matches, signals, stat, History};
use crate::proxies::{ProxyIdentity, ProxySummary};

/// Serves `/metrics` bodies in turn (the last one repeats) and `/endpoints` if given.
struct FakeProxy {
    addr: SocketAddr,
    metrics_hits: Arc<AtomicUsize>,
}

async fn fake_proxy(metrics: Vec<String>, endpoints: Option<&str>) -> FakeProxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound address");
    let metrics_hits = Arc::new(AtomicUsize::new(0));
    let state = Arc::new((metrics, endpoints.map(str::to_string), metrics_hits.clone()));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let (metrics, endpoints, hits) = &*state;
                let body = match req.uri().path() {
                    "/metrics" => {
                        let n = hits.fetch_add(1, Ordering::SeqCst);
                        metrics.get(n.min(metrics.len() - 1)).cloned()
                    }
                    "/endpoints" => endpoints.clone(),
                    _ => None,
                };
                let mut resp =
                    Response::new(Full::new(Bytes::from(body.clone().unwrap_or_default())));
                if body.is_none() {
                    *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
                }
                async move { Ok::<_, Infallible>(resp) }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
        }
    });
    FakeProxy { addr, metrics_hits }
}

/// An address nothing listens on.
async fn unreachable() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("bound address")
}

fn summary(id: &str, addr: SocketAddr) -> ProxySummary {
    ProxySummary {
        identity: ProxyIdentity {
            id: id.into(),
            version: "0.1.0".into(),
            admin_addr: addr.to_string(),
        },
        streams: 1,
        since: std::time::Instant::now(),
        targets: vec!["gateway".into()],
        services: vec!["echo.default".into()],
    }
}

/// What a proxy renders after `ok` 200s and `failed` 503s on the gateway route to echo, `fast`
/// of them under 10 ms, and `ok` fast 200s outbound to api.prod.
fn exposition(ok: u64, failed: u64, fast: u64) -> String {
    let all = ok + failed;
    let gw = r#"direction="gateway",service="echo.default",route="echo""#;
    let api = r#"direction="outbound",service="api.prod",route="default""#;
    format!(
        "# TYPE weir_requests_total counter\n\
         weir_requests_total{{{gw}}} {all}\n\
         weir_requests_total{{{api}}} {ok}\n\
         weir_requests_total{{direction=\"outbound\",service=\"passthrough\",route=\"default\"}} 0\n\
         weir_responses_total{{{gw},status_class=\"2xx\",status_code=\"200\"}} {ok}\n\
         weir_responses_total{{{gw},status_class=\"5xx\",status_code=\"503\"}} {failed}\n\
         weir_responses_total{{{api},status_class=\"2xx\",status_code=\"200\"}} {ok}\n\
         weir_request_duration_seconds_bucket{{{gw},le=\"0.01\"}} {fast}\n\
         weir_request_duration_seconds_bucket{{{gw},le=\"0.1\"}} {all}\n\
         weir_request_duration_seconds_bucket{{{gw},le=\"+Inf\"}} {all}\n\
         weir_request_duration_seconds_sum{{{gw}}} 1.5\n\
         weir_request_duration_seconds_count{{{gw}}} {all}\n\
         weir_request_duration_seconds_bucket{{{api},le=\"0.01\"}} {ok}\n\
         weir_request_duration_seconds_bucket{{{api},le=\"+Inf\"}} {ok}\n\
         weir_registry_last_reload_success 1\n"
    )
}

fn seed(history: &History, id: &str, text: &str, age: Duration) {
    let samples = prom_text::parse(text).expect("test exposition parses");
    let at = Instant::now()
        .checked_sub(age)
        .expect("the clock is past `age`");
    history.record(
        id,
        Scrape {
            at,
            routes: signals::from_samples(&samples),
        },
    );
}

fn close(got: f64, want: f64, tolerance: f64) {
    assert!((got - want).abs() <= tolerance, "got {got}, want {want}");
}

#[tokio::test]
async fn stat_sums_proxies_over_the_window_and_skips_an_unreachable_one() {
    let a = fake_proxy(vec![exposition(50, 2, 30)], None).await;
    let b = fake_proxy(vec![exposition(18, 0, 0)], None).await;
    let proxies = [
        summary("a", a.addr),
        summary("b", b.addr),
        summary("c", unreachable().await),
    ];
    let history = History::default();
    seed(
        &history,
        "a",
        &exposition(10, 0, 10),
        Duration::from_secs(10),
    );
    seed(&history, "b", &exposition(0, 0, 0), Duration::from_secs(10));

    let resp = stat(&history, &proxies, None, Duration::from_secs(30)).await;

    assert_eq!(resp.proxies, 2);
    let rows: Vec<_> = resp
        .rows
        .iter()
        .map(|r| (&*r.service, &*r.route, &*r.direction))
        .collect();
    assert_eq!(
        rows,
        [
            ("api.prod", "default", "outbound"),
            ("echo.default", "echo", "gateway")
        ]
    );
    let echo = &resp.rows[1];
    // a grew by 42 (40 ok, 2 failed, 20 fast), b by 18 (all ok, none fast), both over ~10 s
    assert_eq!(echo.requests, 60);
    close(echo.success_rate, 58.0 / 60.0, 1e-12);
    close(echo.rps, 6.0, 0.1);
    // summed buckets: 20 ≤ 10 ms, 60 ≤ 100 ms; ranks 30, 57, 59.4 fall in (10, 100] ms
    close(echo.p50_ms, 10.0 + 90.0 * 10.0 / 40.0, 1e-9);
    close(echo.p95_ms, 10.0 + 90.0 * 37.0 / 40.0, 1e-9);
    close(echo.p99_ms, 10.0 + 90.0 * 39.4 / 40.0, 1e-9);
    let api = &resp.rows[0];
    assert_eq!((api.requests, api.success_rate), (58, 1.0));
    // every api request was under 10 ms: interpolated inside (0, 10] ms
    close(api.p50_ms, 5.0, 1e-9);
    // one scrape per reachable proxy: the seeded ones were old enough
    assert_eq!(a.metrics_hits.load(Ordering::SeqCst), 1);
    assert_eq!(b.metrics_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn stat_narrows_to_a_service_by_name_or_qualified_name() {
    let a = fake_proxy(vec![exposition(50, 2, 30)], None).await;
    let proxies = [summary("a", a.addr)];
    let history = History::default();
    seed(
        &history,
        "a",
        &exposition(10, 0, 10),
        Duration::from_secs(5),
    );
    for filter in ["echo", "echo.default"] {
        let resp = stat(&history, &proxies, Some(filter), Duration::from_secs(10)).await;
        let services: Vec<_> = resp.rows.iter().map(|r| r.service.as_str()).collect();
        assert_eq!(services, ["echo.default"], "filter {filter}");
        assert_eq!(resp.rows[0].requests, 42);
    }
    let resp = stat(
        &history,
        &proxies,
        Some("echo.other"),
        Duration::from_secs(10),
    )
    .await;
    assert!(resp.rows.is_empty());
    assert_eq!(resp.proxies, 1);
}

#[tokio::test]
async fn stat_scrapes_twice_when_nothing_older_is_kept_and_reuses_it_next_time() {
    let a = fake_proxy(vec![exposition(10, 0, 10), exposition(50, 2, 30)], None).await;
    let proxies = [summary("a", a.addr)];
    let history = History::new(Duration::from_secs(120), Duration::from_millis(50));

    let first = stat(
        &history,
        &proxies,
        Some("echo.default"),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(a.metrics_hits.load(Ordering::SeqCst), 2);
    assert_eq!((first.proxies, first.rows[0].requests), (1, 42));
    // 42 requests over at least 50 ms
    assert!(first.rows[0].rps > 0.0 && first.rows[0].rps <= 42.0 / 0.05);

    let again = stat(
        &history,
        &proxies,
        Some("echo.default"),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(a.metrics_hits.load(Ordering::SeqCst), 3);
    assert_eq!(again.rows[0].requests, 42);
}

#[tokio::test]
async fn endpoint_states_keeps_the_asked_service_from_each_reachable_proxy() {
    let a = fake_proxy(
        vec![String::new()],
        Some(
            r#"[{"service":"echo.default","address":"10.0.0.2:80","state":"ready","in_flight":3,"latency_ewma_ms":1.25},
                {"service":"api.prod","address":"10.0.0.9:80","state":"ready","in_flight":0,"latency_ewma_ms":0.5},
                {"service":"echo.default","address":"10.0.0.1:80","state":"down","in_flight":0,"latency_ewma_ms":0.0}]"#,
        ),
    )
    .await;
    let b = fake_proxy(
        vec![String::new()],
        Some(r#"[{"service":"echo.default","address":"10.0.0.1:80","state":"ready","in_flight":1,"latency_ewma_ms":2.5}]"#),
    )
    .await;
    let no_endpoints_page = fake_proxy(vec![String::new()], None).await;
    let proxies = [
        summary("a", a.addr),
        summary("b", b.addr),
        summary("c", unreachable().await),
        summary("d", no_endpoints_page.addr),
    ];

    for filter in ["echo.default", "echo"] {
        let got = endpoint_states(&proxies, filter).await;
        let seen: Vec<_> = got
            .iter()
            .map(|e| {
                (
                    &*e.address,
                    &*e.proxy_id,
                    &*e.state,
                    e.in_flight,
                    e.latency_ewma_ms,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("10.0.0.1:80", "a", "down", 0, 0.0),
                ("10.0.0.1:80", "b", "ready", 1, 2.5),
                ("10.0.0.2:80", "a", "ready", 3, 1.25),
            ],
            "filter {filter}"
        );
    }
}

#[test]
fn a_bare_name_matches_that_name_in_any_namespace() {
    assert!(service_matches("web.default", "web"));
    assert!(service_matches("web.default", "web.default"));
    assert!(service_matches("web.default", ""));
    assert!(!service_matches("web.default", "web.prod"));
    assert!(!service_matches("webapp.default", "web"));
    assert!(!service_matches("none", "web"));
}
