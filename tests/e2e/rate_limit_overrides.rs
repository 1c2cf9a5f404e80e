//! Rate-limit overrides through the gateway: a header-keyed limit where one tenant is
//! overridden to a higher rate; under the same offered load each tenant is admitted at its own
//! rate (plus burst) within 5%.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};
use tokio::time::{Instant, MissedTickBehavior};
use weir_tests::http_client::{request, H1Conn};
use weir_tests::TestBackend;

use crate::breaker::proxy;

const WINDOW: Duration = Duration::from_secs(3);

/// Sends `tenant`'s requests, one every 4 ms from each of two connections (500 rps offered),
/// until `start + WINDOW`; returns how many were admitted.
async fn offer(gw: std::net::SocketAddr, tenant: &'static str, start: Instant) -> u64 {
    let ok = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let ok = ok.clone();
            tokio::spawn(async move {
                let mut conn = H1Conn::connect(gw).await;
                let mut tick = tokio::time::interval(Duration::from_millis(4));
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                while start.elapsed() < WINDOW {
                    tick.tick().await;
                    let mut req = request(Method::GET, "gw.test", "/", "");
                    req.headers_mut()
                        .insert("x-tenant", HeaderValue::from_static(tenant));
                    let r = conn.send(req).await;
                    match r.status {
                        StatusCode::OK => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        StatusCode::TOO_MANY_REQUESTS => {}
                        s => panic!("unexpected {s}: {}", r.body),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
    ok.load(Ordering::Relaxed)
}

fn assert_near(tenant: &str, admitted: u64, rps: f64, burst: f64, secs: f64) {
    let expected = burst + rps * secs;
    let off = (admitted as f64 - expected).abs() / expected;
    assert!(
        off <= 0.05,
        "{tenant}: {admitted} admitted in {secs:.2} s, expected {expected:.0} ± 5%"
    );
}

#[tokio::test]
async fn an_overridden_tenant_holds_its_higher_limit_and_the_others_the_default() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: tenants
      rateLimit:
        requestsPerSecond: 20
        burst: 5
        key: header:x-tenant
        overrides: [{ value: gold, requestsPerSecond: 100, burst: 10 }]
      backendRefs: [{ name: app }]
";
    let proxy = proxy("{}", &[app.addr], routes).await;
    let gw = proxy.gateway.expect("a gateway");
    let start = Instant::now();
    let (gold, free) = tokio::join!(offer(gw, "gold", start), offer(gw, "free", start));
    let secs = start.elapsed().as_secs_f64();
    assert_near("gold", gold, 100.0, 10.0, secs);
    assert_near("free", free, 20.0, 5.0, secs);
    assert_eq!(app.requests(), gold + free);
}
