//! weir-control streaming the registry to several proxies: edits reach every proxy within a
//! second under load with no failed request, a control-plane crash fails nothing and a restart
//! catches up, and bad edits are refused with their location while traffic goes on.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;
use weir_tests::control::WeirControl;
use weir_tests::http_client::get;
use weir_tests::{metrics, poll_until, require, TestBackend, WeirProxy};

use crate::gateway::{registry, service};
use crate::registry::{route_to, SteadyTraffic, APPLY_WITHIN};

/// A gateway proxy fed by `cp` (no registry file of its own); `timed` (edits are timed).
pub(crate) async fn control_proxy(cp: &WeirControl) -> (WeirProxy, SocketAddr) {
    let proxy = WeirProxy::builder()
        .timed()
        .gateway(true)
        .env_remove("WEIR_PROXY_REGISTRY")
        .env("WEIR_PROXY_CONTROL_ADDR", cp.grpc.to_string())
        .start()
        .await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");
    (proxy, gw)
}

/// Polls `gw` (fresh connection per request) until a reply comes from backend `name`; panics if
/// that takes longer than `within` after `written`.
async fn answers_from(gw: SocketAddr, name: &str, written: Instant, within: Duration) -> Duration {
    let left = within.saturating_sub(written.elapsed());
    poll_until(left, &format!("{gw} to route to {name}"), || async {
        // A few requests per look: a new endpoint shares the traffic with the old one (the
        // balancer's two draws tie until it has a latency sample), so one request alone found
        // it as little as half the time, and a late look could miss an edit that had arrived.
        for _ in 0..LOOK {
            let reply = get(gw, "gw.test", "/_/delay/5").await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            if reply.header("x-backend") == Some(name) {
                return Some(written.elapsed());
            }
        }
        None
    })
    .await
}

/// Requests per look in [`answers_from`].
const LOOK: usize = 6;

/// Sends requests until `gone` has received none for half a second; panics if it still received
/// one later than `APPLY_WITHIN` after `written`.
async fn stops_receiving(gws: &[SocketAddr], gone: &TestBackend, written: Instant) {
    let mut last = (gone.requests(), Duration::ZERO);
    while written.elapsed() < last.1 + APPLY_WITHIN / 2 {
        let now = gone.requests();
        if now != last.0 {
            last = (now, written.elapsed());
        }
        assert!(
            last.1 <= APPLY_WITHIN,
            "{} still receives requests {:?} after its removal",
            gone.name(),
            last.1
        );
        for gw in gws {
            let reply = get(*gw, "gw.test", "/_/delay/5").await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        }
    }
}

#[tokio::test]
async fn registry_edits_reach_every_proxy_within_a_second_with_no_failed_request() {
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
    let cp = WeirControl::start(&reg(&[a.addr], "app")).await;
    let ((p1, gw1), (p2, gw2)) = tokio::join!(control_proxy(&cp), control_proxy(&cp));
    let gws = [gw1, gw2];
    let traffic = [
        SteadyTraffic::start(gw1, 2, "/_/delay/30"),
        SteadyTraffic::start(gw2, 2, "/_/delay/30"),
    ];
    poll_until(Duration::from_secs(5), "traffic to flow", || async {
        (a.requests() >= 8).then_some(())
    })
    .await;

    // 1. Endpoint added.
    let written = Instant::now();
    cp.write_registry(&reg(&[a.addr, b.addr], "app"));
    // Both proxies at once: each is timed from the write, not after the other's check.
    let checks = gws.map(|gw| answers_from(gw, "b", written, APPLY_WITHIN));
    for (gw, took) in gws.iter().zip(futures_util::future::join_all(checks).await) {
        eprintln!("endpoint added: {gw} after {took:?}");
    }

    // 2. Endpoint removed: a gets no new request once the edit is in.
    let written = Instant::now();
    cp.write_registry(&reg(&[b.addr], "app"));
    stops_receiving(&gws, &a, written).await;

    // 3. Route changed to another service.
    let written = Instant::now();
    cp.write_registry(&reg(&[b.addr], "other"));
    // Both proxies at once: each is timed from the write, not after the other's check.
    let checks = gws.map(|gw| answers_from(gw, "c", written, APPLY_WITHIN));
    for (gw, took) in gws.iter().zip(futures_util::future::join_all(checks).await) {
        eprintln!("route changed: {gw} after {took:?}");
    }

    for t in traffic {
        let sent = t.finish().await;
        assert!(sent >= 10, "only {sent} requests flowed during the edits");
    }
    for p in [&p1, &p2] {
        let text = p.metrics_text().await;
        assert_eq!(
            metrics::sum(&text, "weir_control_connected", &[]),
            Some(1.0)
        );
    }
}

#[tokio::test]
async fn a_control_plane_crash_fails_no_request_and_a_restart_brings_the_edits_made_meanwhile() {
    let (a, b) = tokio::join!(TestBackend::start("a"), TestBackend::start("b"));
    let reg = |app: &[SocketAddr]| registry(&[service("app", app)], &route_to("app"));
    let mut cp = WeirControl::start(&reg(&[a.addr])).await;
    let ((p1, gw1), (p2, gw2)) = tokio::join!(control_proxy(&cp), control_proxy(&cp));
    let traffic = [
        SteadyTraffic::start(gw1, 2, "/_/delay/20"),
        SteadyTraffic::start(gw2, 2, "/_/delay/20"),
    ];

    cp.kill();
    for p in [&p1, &p2] {
        poll_until(
            Duration::from_secs(10),
            "the proxy to see the loss",
            || async {
                let text = p.metrics_text().await;
                (metrics::sum(&text, "weir_control_connected", &[]) == Some(0.0)).then_some(())
            },
        )
        .await;
        let ready = p.admin_get("/ready").await;
        assert_eq!(ready.status, 200, "a proxy keeps serving: {}", ready.body);
        assert!(
            ready.body.contains("unreachable"),
            "/ready says the control plane is unreachable: {}",
            ready.body
        );
    }
    let before: Vec<u64> = traffic
        .iter()
        .map(|t| t.sent.load(Ordering::SeqCst))
        .collect();
    poll_until(Duration::from_secs(10), "traffic to go on", || async {
        traffic
            .iter()
            .zip(&before)
            .all(|(t, &n)| t.sent.load(Ordering::SeqCst) >= n + 20)
            .then_some(())
    })
    .await;

    // An edit while the control plane is down is picked up when it comes back.
    cp.write_registry(&reg(&[b.addr]));
    cp.restart().await;
    let back = Instant::now();
    for gw in [gw1, gw2] {
        // The proxies retry with a jittered backoff capped at 10 s.
        let took = answers_from(gw, "b", back, Duration::from_secs(15)).await;
        eprintln!("reconnected and updated: {gw} after {took:?}");
    }
    for t in traffic {
        t.finish().await;
    }
}

#[tokio::test]
async fn a_bad_registry_edit_is_refused_with_its_location_and_traffic_is_unaffected() {
    let (a, b) = tokio::join!(TestBackend::start("a"), TestBackend::start("b"));
    let good = registry(&[service("app", &[a.addr])], &route_to("app"));
    let cp = WeirControl::start(&good).await;
    let (_p, gw) = control_proxy(&cp).await;
    let traffic = SteadyTraffic::start(gw, 2, "/_/delay/10");

    let bad = format!(
        "services:\n  - name: app\n    endpoints:\n      - address: \"{}\"\n      - address: 127.0.0.1:80800\ngateway:\n  routes:\n    - name: main\n      backendRefs: [{{ name: app }}]\n",
        b.addr
    );
    let (line, column) = bad
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("127.0.0.1:80800").map(|c| (i + 1, c + 1)))
        .expect("the bad address is in the text");
    cp.write_registry(&bad);
    let located = format!("registry.yaml:{line}:{column}");
    cp.wait_for_log(&located, Duration::from_secs(5)).await;

    let check = cp.weirctl(&["check"]).await;
    assert_eq!(
        check.code, 1,
        "check fails on an invalid registry: {check:?}"
    );
    assert!(
        format!("{}{}", check.stdout, check.stderr).contains(&located),
        "check names the location: {check:?}"
    );
    let text = cp.admin_get("/metrics").await.body;
    assert!(
        metrics::sum(
            &text,
            "weir_control_registry_reloads_total",
            &[("result", "invalid")]
        )
        .is_some_and(|n| n >= 1.0),
        "the rejection is counted:\n{text}"
    );
    // The control plane's metrics, after a push and a rejection, are valid Prometheus text; so are
    // the proxy's with its control-plane series.
    require!(tool "promtool");
    assert_eq!(metrics::promtool_check(&text), Ok(()), "{text}");
    let proxy_text = _p.metrics_text().await;
    assert_eq!(metrics::promtool_check(&proxy_text), Ok(()), "{proxy_text}");
    for name in ["weir_control_pushes_total", "weir_control_registry_version"] {
        assert!(text.contains(name), "{name} exported:\n{text}");
    }

    // The last good state keeps serving: still a, never b.
    for _ in 0..10 {
        let reply = get(gw, "gw.test", "/").await;
        assert_eq!(reply.header("x-backend"), Some("a"));
    }
    assert_eq!(b.requests(), 0);
    traffic.finish().await;
}
