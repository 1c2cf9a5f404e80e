//! The upstream HTTP/1 pool over real sockets: a burst of concurrent requests opens as many
//! upstream connections as it needs, but once it is over the endpoint sees at most
//! `WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT` of them kept open (10 s after it), and none after the
//! idle timeout.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use weir_tests::backend::Fail;
use weir_tests::http_client::get;
use weir_tests::{poll_until, TestBackend};

use crate::lifecycle::proxy_to;

const CAP: u64 = 8;
const BURST: u64 = 200;

/// `BURST` requests on their own client connections, held at the backend so they overlap.
async fn burst(app: &TestBackend, gw: SocketAddr) {
    app.fail_next(BURST, Fail::Delay(Duration::from_millis(300)));
    let requests: Vec<_> = (0..BURST)
        .map(|i| tokio::spawn(async move { get(gw, "gw.test", &format!("/r{i}")).await.status }))
        .collect();
    for r in requests {
        assert_eq!(r.await.expect("request task"), StatusCode::OK);
    }
}

#[tokio::test]
async fn after_a_burst_the_endpoint_sees_at_most_the_idle_cap_kept_open() {
    let app = TestBackend::start("pool").await;
    let cap = CAP.to_string();
    let (_proxy, gw) = proxy_to(app.addr, &[("WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT", &cap)]).await;
    burst(&app, gw).await;
    assert!(
        app.connections() > 2 * CAP,
        "the burst should have needed more than the cap: {} upstream connections",
        app.connections()
    );
    // The surplus closes once unused for 10 s (pool.rs: `SURPLUS_IDLE`).
    let open = poll_until(
        Duration::from_secs(20),
        "idle upstream connections closed to the cap",
        || async {
            let open = app.open_connections();
            (open <= CAP).then_some(open)
        },
    )
    .await;
    // The kept ones are reused: the next requests open nothing new.
    let before = app.connections();
    for i in 0..open {
        assert_eq!(
            get(gw, "gw.test", &format!("/again{i}")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(app.connections(), before, "kept connections were reused");
}

#[tokio::test]
async fn idle_upstream_connections_close_after_the_pool_idle_timeout() {
    let app = TestBackend::start("pool-timeout").await;
    let (_proxy, gw) = proxy_to(app.addr, &[("WEIR_PROXY_POOL_IDLE_TIMEOUT", "1s")]).await;
    assert_eq!(get(gw, "gw.test", "/").await.status, StatusCode::OK);
    assert_eq!(app.connections(), 1);
    // Swept within a second of expiring, with no request to notice it.
    poll_until(
        Duration::from_secs(10),
        "the expired idle connection closed",
        || async { (app.open_connections() == 0).then_some(()) },
    )
    .await;
}
