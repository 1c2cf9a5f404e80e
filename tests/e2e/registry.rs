//! The registry file is watched: valid edits (atomic rename or in-place rewrite) apply within a
//! second without disturbing kept-alive traffic; invalid ones are rejected with their location
//! and the last good registry keeps serving; a bad file or environment stops the start.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::time::Instant;
use weir_tests::http_client::{get, request, H1Conn};
use weir_tests::{metrics, poll_until, TestBackend, WeirProxy};

use crate::gateway::{gateway_proxy, registry, service};

/// What the brief promises: an edit shows in traffic within this long of the write.
pub(crate) const APPLY_WITHIN: Duration = Duration::from_secs(1);

/// A catch-all gateway route to service `to`.
pub(crate) fn route_to(to: &str) -> String {
    format!("    - name: main\n      backendRefs: [{{ name: {to} }}]\n")
}

/// Kept-alive clients sending requests back to back until stopped; every failure is recorded.
pub(crate) struct SteadyTraffic {
    stop: Arc<AtomicBool>,
    pub(crate) sent: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<H1Conn>>,
}

impl SteadyTraffic {
    pub(crate) fn start(gw: SocketAddr, clients: usize, path: &'static str) -> SteadyTraffic {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..clients)
            .map(|i| {
                let (stop, sent, failures) = (stop.clone(), sent.clone(), failures.clone());
                tokio::spawn(async move {
                    let mut conn = H1Conn::connect(gw).await;
                    while !stop.load(Ordering::SeqCst) {
                        let req = request(Method::GET, "gw.test", path, "");
                        let outcome = match conn.try_send(req).await {
                            Ok(r) if r.status == StatusCode::OK => None,
                            Ok(r) => Some(format!(
                                "client {i}: {} {:?} {}",
                                r.status, r.headers, r.body
                            )),
                            Err(e) => Some(format!("client {i}: connection failed: {e}")),
                        };
                        sent.fetch_add(1, Ordering::SeqCst);
                        if let Some(f) = outcome {
                            failures.lock().expect("failures lock").push(f);
                            break;
                        }
                    }
                    conn
                })
            })
            .collect();
        SteadyTraffic {
            stop,
            sent,
            failures,
            tasks,
        }
    }

    /// Stops the clients; panics unless every request succeeded and every connection is open.
    pub(crate) async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            let conn = task.await.expect("traffic task");
            assert!(conn.is_open(), "a kept-alive client connection was dropped");
        }
        let failures = self.failures.lock().expect("failures lock").clone();
        assert!(
            failures.is_empty(),
            "requests failed during edits: {failures:#?}"
        );
        self.sent.load(Ordering::SeqCst)
    }
}

/// Polls (with requests on a fresh connection each) until `seen` holds; returns how long after
/// `written` that was, and panics if it took longer than [`APPLY_WITHIN`].
async fn applied_within(
    gw: SocketAddr,
    written: Instant,
    what: &str,
    seen: impl Fn(&str) -> bool,
) -> Duration {
    poll_until(APPLY_WITHIN, what, || async {
        let reply = get(gw, "gw.test", "/_/delay/60").await;
        assert_eq!(reply.status, StatusCode::OK, "{what}: {}", reply.body);
        seen(reply.header("x-backend").unwrap_or("")).then(|| written.elapsed())
    })
    .await
}

#[tokio::test]
async fn edits_apply_within_a_second_while_kept_alive_traffic_sees_no_failure() {
    let (a, b, c) = tokio::join!(
        TestBackend::start("a"),
        TestBackend::start("b"),
        TestBackend::start("c")
    );
    let reg = |app: &[SocketAddr], to: &str| {
        registry(
            &[service("app", app), service("other", &[c.addr])],
            &route_to(to),
        )
    };
    let proxy = WeirProxy::builder()
        .timed()
        .gateway(true)
        .registry_yaml(reg(&[a.addr], "app"))
        .start()
        .await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");

    // Every request takes 60 ms at the backend, so endpoints stay comparable for the balancer
    // and requests are in flight whenever an edit lands.
    let traffic = SteadyTraffic::start(gw, 4, "/_/delay/60");
    poll_until(Duration::from_secs(5), "traffic to flow", || async {
        (a.requests() >= 8).then_some(())
    })
    .await;

    // 1. Endpoint added, by atomic rename.
    let written = Instant::now();
    proxy.write_registry(&reg(&[a.addr, b.addr], "app"));
    let took = applied_within(gw, written, "endpoint b to take requests", |_| {
        b.requests() > 0
    })
    .await;
    eprintln!("endpoint added: applied after {took:?}");

    // 2. Endpoint removed, by rewriting the file in place. Removal shows as absence, so remove
    // the endpoint busier right now: after the edit applies it gets nothing, the other serves.
    let (a0, b0) = (a.requests(), b.requests());
    poll_until(
        Duration::from_secs(5),
        "a dozen requests on a and b",
        || async { (a.requests() + b.requests() >= a0 + b0 + 12).then_some(()) },
    )
    .await;
    let (gone, kept) = if a.requests() - a0 >= b.requests() - b0 {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let written = Instant::now();
    proxy.write_registry_in_place(&reg(&[kept.addr], "app"));
    let mut last_gone = (gone.requests(), Duration::ZERO);
    let quiet = APPLY_WITHIN / 2;
    while written.elapsed() < last_gone.1 + quiet {
        let now = gone.requests();
        if now != last_gone.0 {
            last_gone = (now, written.elapsed());
        }
        assert!(
            last_gone.1 <= APPLY_WITHIN,
            "{} still receives requests {:?} after its removal",
            gone.name(),
            last_gone.1
        );
        let reply = get(gw, "gw.test", "/_/delay/10").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    eprintln!(
        "endpoint removed: {}'s last request {:?} after the write",
        gone.name(),
        last_gone.1
    );
    let kept_now = kept.requests();
    poll_until(
        Duration::from_secs(5),
        "the other endpoint to keep serving",
        || async { (kept.requests() > kept_now + 4).then_some(()) },
    )
    .await;

    // 3. Route changed to another service, by atomic rename.
    let written = Instant::now();
    proxy.write_registry(&reg(&[kept.addr], "other"));
    let took = applied_within(gw, written, "the route to reach service other", |backend| {
        backend == "c"
    })
    .await;
    eprintln!("route changed: applied after {took:?}");
    let c_now = c.requests();
    poll_until(
        Duration::from_secs(5),
        "kept-alive traffic to follow the route",
        || async { (c.requests() > c_now + 4).then_some(()) },
    )
    .await;

    let sent = traffic.finish().await;
    assert!(sent >= 20, "only {sent} requests flowed during the edits");
    let text = proxy.metrics_text().await;
    assert_eq!(
        metrics::sum(&text, "weir_registry_last_reload_success", &[]),
        Some(1.0)
    );
}

/// A registry whose line 7 holds an impossible port; returns it with that value's 1-based
/// line and column, found in the text (not trusted from the proxy).
fn invalid_registry(app: SocketAddr, b: SocketAddr) -> (String, usize, usize) {
    let text = format!(
        "services:
  - name: app
    endpoints:
      - address: \"{b}\"
  - name: broken
    endpoints:
      - address: 127.0.0.1:80800
gateway:
  routes:
    - name: main
      backendRefs: [{{ name: app }}]
# app was {app}
"
    );
    let (line, column) = text
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("127.0.0.1:80800").map(|c| (i + 1, c + 1)))
        .expect("the bad address is in the text");
    (text, line, column)
}

#[tokio::test]
async fn an_invalid_edit_is_rejected_with_its_location_and_the_last_good_state_keeps_serving() {
    let (a, b) = tokio::join!(TestBackend::start("a"), TestBackend::start("b"));
    let good = registry(&[service("app", &[a.addr])], &route_to("app"));
    let (proxy, gw) = gateway_proxy(&good).await;
    let errors = |text: &str| {
        metrics::sum(text, "weir_registry_reloads_total", &[("result", "error")]).unwrap_or(0.0)
    };
    let errors_before = errors(&proxy.metrics_text().await);

    // Rewritten in place; besides the bad address it points app at b, which must not apply.
    let (bad, line, column) = invalid_registry(a.addr, b.addr);
    proxy.write_registry_in_place(&bad);
    let expected = format!(
        "registry.yaml:{line}:{column}: services[1].endpoints[0].address: invalid socket address syntax"
    );
    proxy.wait_for_log(&expected, Duration::from_secs(5)).await;
    let text = poll_until(
        Duration::from_secs(5),
        "the rejection in metrics",
        || async {
            let text = proxy.metrics_text().await;
            (errors(&text) > errors_before).then_some(text)
        },
    )
    .await;
    // An in-place rewrite may also be caught half-written (empty) once: that is rejected too.
    let rejected = errors(&text);
    assert!(
        rejected <= errors_before + 2.0,
        "{rejected} rejections for one edit"
    );
    assert_eq!(
        metrics::sum(&text, "weir_registry_last_reload_success", &[]),
        Some(0.0)
    );
    for _ in 0..10 {
        let reply = get(gw, "gw.test", "/still").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert_eq!(
            reply.header("x-backend"),
            Some("a"),
            "the last good registry serves"
        );
    }
    assert_eq!(b.requests(), 0);

    // A later valid edit applies.
    let written = Instant::now();
    proxy.write_registry(&registry(&[service("app", &[b.addr])], &route_to("app")));
    applied_within(gw, written, "the fixed registry to route to b", |backend| {
        backend == "b"
    })
    .await;
    let text = proxy.metrics_text().await;
    assert_eq!(
        metrics::sum(&text, "weir_registry_last_reload_success", &[]),
        Some(1.0)
    );
    assert_eq!(
        errors(&text),
        rejected,
        "the bad file is rejected once, not on every poll"
    );
}

/// A one-worker sidecar is one thread, even while it watches its registry: with a second
/// thread in the process the kernel takes a reference on the socket's file in every system call.
#[tokio::test]
async fn a_one_worker_proxy_watching_its_registry_stays_a_single_thread() {
    let (a, b) = tokio::join!(TestBackend::start("a"), TestBackend::start("b"));
    let reg = |to: SocketAddr| registry(&[service("app", &[to])], &route_to("app"));
    let proxy = WeirProxy::builder()
        .gateway(true)
        .registry_yaml(reg(a.addr))
        .start()
        .await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");
    assert_eq!(get(gw, "gw.test", "/").await.header("x-backend"), Some("a"));

    // The watcher has stat-ed the file, read the edit and published it by the time b answers.
    let written = Instant::now();
    proxy.write_registry(&reg(b.addr));
    applied_within(gw, written, "the edit to send requests to b", |backend| {
        backend == "b"
    })
    .await;
    // The edit's read ran (on the worker thread), and the admin port served. (The watcher's
    // first poll may or may not re-read the file loaded at start: it waits for a file written
    // within 100 ms to settle, and the edit can replace it first.)
    let text = proxy.metrics_text().await;
    let reloads = metrics::sum(
        &text,
        "weir_registry_reloads_total",
        &[("result", "success")],
    );
    assert!(reloads >= Some(1.0), "reloads: {reloads:?}");
    assert_eq!(
        proxy.threads(),
        1,
        "threads of a WEIR_PROXY_WORKERS=1 proxy"
    );
}

#[tokio::test]
async fn the_proxy_refuses_to_start_with_an_invalid_registry() {
    let (bad, line, column) = invalid_registry(
        "127.0.0.1:9".parse().expect("literal"),
        "127.0.0.1:9".parse().expect("literal"),
    );
    let mut proxy = WeirProxy::builder()
        .gateway(true)
        .registry_yaml(bad)
        .spawn();
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    assert!(
        !status.success(),
        "started with an invalid registry: {status}"
    );
    let log = proxy.log();
    assert!(
        log.contains(&format!(
            "registry.yaml:{line}:{column}: services[1].endpoints[0].address"
        )),
        "{log}"
    );
}

#[tokio::test]
async fn a_bad_environment_variable_exits_with_code_2_naming_it() {
    let mut proxy = WeirProxy::builder()
        .env("WEIR_PROXY_SHUTDOWN_GRACE", "soon")
        .env("WEIR_PROXY_WORKERS", "0")
        .spawn();
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(2), "{}", proxy.log());
    let log = proxy.log();
    assert!(log.contains("WEIR_PROXY_SHUTDOWN_GRACE=\"soon\""), "{log}");
    assert!(log.contains("WEIR_PROXY_WORKERS=\"0\""), "{log}");
}

#[tokio::test]
async fn an_invalid_log_filter_or_a_non_utf8_value_stops_start_up_naming_the_variable() {
    use std::os::unix::ffi::OsStrExt;
    let mut proxy = WeirProxy::builder()
        .env("WEIR_PROXY_LOG", "weir=verbose")
        .env_os(
            "WEIR_PROXY_SHUTDOWN_GRACE",
            std::ffi::OsStr::from_bytes(b"5s\xff"),
        )
        .spawn();
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    let log = proxy.log();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("WEIR_PROXY_LOG=\"weir=verbose\": "), "{log}");
    assert!(
        log.contains("WEIR_PROXY_SHUTDOWN_GRACE: not valid UTF-8"),
        "{log}"
    );
}
