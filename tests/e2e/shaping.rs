//! Traffic shaping end to end through the real `weir-proxy`: weighted splits hold their share,
//! mirrors get a fire-and-forget copy (and their failures never reach the client), injected
//! faults match their percentages on a mesh route, and gRPC responses are classified by
//! `grpc-status` in metrics and in `weirctl stat`.

use std::{
    convert::Infallible,
    net::SocketAddr,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, sync::mpsc};
use weir_tests::http_client::{request, H1Conn};
use weir_tests::{free_addr, metrics, poll_until, TestBackend};

use crate::gateway::{gateway_proxy, registry, service};

/// How long a test waits for something that should happen at once.
const DEADLINE: Duration = Duration::from_secs(10);

/// What a shadow backend saw of one request.
#[derive(Debug)]
struct Seen {
    host: String,
    method: Method,
    uri: String,
    body: Bytes,
}

/// A backend that reports every request it receives, whole, on a channel, and answers 200.
async fn recording_backend() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound address");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes());
                        let host = parts
                            .headers
                            .get(http::header::HOST)
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let _ = tx.send(Seen {
                            host,
                            method: parts.method,
                            uri: parts.uri.to_string(),
                            body: body.unwrap_or_default(),
                        });
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"shadow"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), svc)
                    .await;
            });
        }
    });
    (addr, rx)
}

/// A gateway route `/m` to `app`, mirrored to `shadow`.
const MIRROR_ROUTE: &str = "    - name: mirrored
      matches: [{ path: { type: PathPrefix, value: /m } }]
      filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: shadow } } }]
      backendRefs: [{ name: app }]
";

fn mirror_count(text: &str, result: &str) -> f64 {
    metrics::sum(
        text,
        "weir_mirror_requests_total",
        &[("route", "mirrored"), ("result", result)],
    )
    .unwrap_or(0.0)
}

fn post(path: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    request(Method::POST, "gw.test", path, body)
}

#[tokio::test]
async fn a_mirrored_request_reaches_the_shadow_with_its_body_and_a_shadow_host() {
    let app = TestBackend::start("app").await;
    let (shadow, mut seen) = recording_backend().await;
    let services = [service("app", &[app.addr]), service("shadow", &[shadow])];
    let (proxy, gw) = gateway_proxy(&registry(&services, MIRROR_ROUTE)).await;

    let mut conn = H1Conn::connect(gw).await;
    let body = Bytes::from(vec![b'z'; 64 * 1024]);
    let reply = conn.send(post("/m/upload?x=1", body.clone())).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(
        reply.header("x-backend"),
        Some("app"),
        "the primary answers"
    );
    let copy = tokio::time::timeout(DEADLINE, seen.recv())
        .await
        .expect("the mirror arrives")
        .expect("the shadow is running");
    assert_eq!(copy.method, Method::POST);
    assert_eq!(copy.uri, "/m/upload?x=1");
    assert_eq!(copy.host, "gw.test-shadow");
    assert_eq!(copy.body, body, "64 KiB, byte for byte");

    // One byte more: the primary still gets it all, the mirror is dropped and counted.
    let reply = conn.send(post("/m/big", vec![b'y'; 64 * 1024 + 1])).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.body.contains("\"body_bytes\":65537"),
        "{}",
        reply.body
    );
    poll_until(DEADLINE, "the dropped mirror counted", || async {
        let text = proxy.metrics_text().await;
        (mirror_count(&text, "dropped") == 1.0 && mirror_count(&text, "sent") == 1.0).then_some(())
    })
    .await;
    assert!(seen.try_recv().is_err(), "no copy of the large body");
    metrics::promtool_check(&proxy.metrics_text().await).expect("promtool accepts /metrics");
}

#[tokio::test]
async fn a_shadow_that_hangs_or_refuses_never_touches_the_primary() {
    let app = TestBackend::start("app").await;
    // Accepts connections and never answers.
    let hang = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hang_addr = hang.local_addr().expect("bound");
    let _held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = hang.accept().await {
            conns.push(c);
        }
    });
    let refused = free_addr();
    let routes = format!(
        "{MIRROR_ROUTE}    - name: refused
      matches: [{{ path: {{ type: PathPrefix, value: /r }} }}]
      filters: [{{ type: RequestMirror, requestMirror: {{ backendRef: {{ name: gone }} }} }}]
      backendRefs: [{{ name: app }}]
"
    );
    let services = [
        service("app", &[app.addr]),
        service("shadow", &[hang_addr]),
        service("gone", &[refused]),
    ];
    let (proxy, gw) = gateway_proxy(&registry(&services, &routes)).await;

    let mut conn = H1Conn::connect(gw).await;
    let started = Instant::now();
    for i in 0..20 {
        let path = if i % 2 == 0 { "/m" } else { "/r" };
        let reply = conn.send(post(path, "payload")).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
        assert_eq!(reply.header("x-backend"), Some("app"));
    }
    // Twenty requests to a local backend; a primary that waited for its hung mirror would take
    // the mirror timeout (10 s) per request.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(app.requests(), 20);
    poll_until(
        DEADLINE,
        "the refused mirrors counted as failed",
        || async {
            let text = proxy.metrics_text().await;
            let failed = metrics::sum(
                &text,
                "weir_mirror_requests_total",
                &[("route", "refused"), ("result", "failed")],
            );
            (failed == Some(10.0)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn weighted_backend_refs_split_ninety_ten_within_two_percent_over_ten_thousand_requests() {
    let (heavy, light) = tokio::join!(TestBackend::start("heavy"), TestBackend::start("light"));
    let services = [
        service("heavy", &[heavy.addr]),
        service("light", &[light.addr]),
    ];
    let routes = "    - name: canary
      backendRefs: [{ name: heavy, weight: 90 }, { name: light, weight: 10 }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&services, routes)).await;

    const TOTAL: u64 = 10_000;
    const CLIENTS: u64 = 16;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(async move {
                let mut conn = H1Conn::connect(gw).await;
                for _ in 0..TOTAL / CLIENTS {
                    let reply = conn.send(request(Method::GET, "gw.test", "/", "")).await;
                    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client task");
    }
    eprintln!("{TOTAL} requests in {:?}", started.elapsed());
    assert_eq!(heavy.requests() + light.requests(), TOTAL);
    // Binomial(10000, 0.1): a standard deviation of 30 requests (0.3%); ±2% is 6.7 sigma.
    let share = light.requests() as f64 / TOTAL as f64;
    assert!(
        (0.08..=0.12).contains(&share),
        "light got {} of {TOTAL} ({:.2}%), want 10% ± 2%",
        light.requests(),
        share * 100.0
    );
}
