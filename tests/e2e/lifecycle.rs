//! SIGTERM drains: requests in flight finish, new connections are refused, idle keep-alives close,
//! HTTP/2 clients get GOAWAY, `/ready` turns 503, and the process exits 0, at the latest when the
//! grace period ends.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Method, Request, StatusCode};
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_tests::http_client::{get, request, H1Conn, H2Conn};
use weir_tests::{poll_until, TestBackend, WeirProxy};

use crate::gateway::{registry, service};

const DEADLINE: Duration = Duration::from_secs(5);

/// A gateway proxy routing everything to `app`, with extra environment.
pub(crate) async fn proxy_to(app: SocketAddr, env: &[(&str, &str)]) -> (WeirProxy, SocketAddr) {
    let yaml = registry(
        &[service("app", &[app])],
        "    - name: all\n      backendRefs: [{ name: app }]\n",
    );
    let mut builder = WeirProxy::builder().gateway(true).registry_yaml(yaml);
    for (k, v) in env {
        builder = builder.env(*k, *v);
    }
    let proxy = builder.start().await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");
    (proxy, gw)
}

fn h2_get(path: &str) -> Request<Full<bytes::Bytes>> {
    Request::get(format!("http://gw.test{path}"))
        .body(Full::default())
        .expect("a valid h2 request")
}

/// True when a new connection to `addr` gets no HTTP answer: the connect is refused, or the
/// connection is closed or reset before a response arrives.
async fn new_connection_refused(addr: SocketAddr) -> bool {
    let Ok(mut io) = TcpStream::connect(addr).await else {
        return true;
    };
    if io
        .write_all(b"GET / HTTP/1.1\r\nHost: gw.test\r\n\r\n")
        .await
        .is_err()
    {
        return true;
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(2), io.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(_)) => false,
        // Accepted but never answered would be a hang, not a refusal.
        Err(_) => false,
    }
}

#[tokio::test]
async fn sigterm_finishes_in_flight_requests_and_refuses_everything_new() {
    sigterm_drains(&[]).await;
}

/// The same drain with two workers: the work-stealing scheduler instead of the current-thread one.
#[tokio::test]
async fn sigterm_drains_the_same_on_the_multi_thread_scheduler() {
    sigterm_drains(&[("WEIR_PROXY_WORKERS", "2")]).await;
}

async fn sigterm_drains(env: &[(&str, &str)]) {
    let app = TestBackend::start("app").await;
    let (mut proxy, gw) = proxy_to(app.addr, env).await;

    // An idle HTTP/1 keep-alive client, an h2c client with a slow stream, a slow HTTP/1 request.
    let mut idle = H1Conn::connect(gw).await;
    let warm = idle
        .send(request(Method::GET, "gw.test", "/warm", ""))
        .await;
    assert_eq!(warm.status, StatusCode::OK);
    let mut h2 = H2Conn::connect(gw).await;
    assert_eq!(h2.send(h2_get("/warm-h2")).await.status, StatusCode::OK);
    let mut h2_slow_conn = h2.clone();
    let h2_slow = tokio::spawn(async move { h2_slow_conn.try_send(h2_get("/_/delay/2000")).await });
    let h1_slow = tokio::spawn(async move { get(gw, "gw.test", "/_/delay/2000").await });
    poll_until(DEADLINE, "both slow requests at the backend", || async {
        (app.requests() == 4).then_some(())
    })
    .await;

    let signalled = Instant::now();
    proxy.sigterm();

    // (e) /ready turns 503 while draining; /live stays 200.
    poll_until(DEADLINE, "/ready to report draining", || async {
        (proxy.admin_get("/ready").await.status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    assert_eq!(proxy.admin_get("/live").await.status, StatusCode::OK);
    // (b) New connections are refused.
    poll_until(DEADLINE, "new connections to be refused", || async {
        new_connection_refused(gw).await.then_some(())
    })
    .await;
    // (c) The idle keep-alive connection is closed by the proxy.
    poll_until(
        DEADLINE,
        "the idle keep-alive connection to close",
        || async { (!idle.is_open()).then_some(()) },
    )
    .await;
    // (d) The h2c connection got GOAWAY: a new stream is refused and never reaches the backend.
    let refused = h2.try_send(h2_get("/after-goaway")).await;
    assert!(
        refused.is_err(),
        "a new h2 stream after SIGTERM got {refused:?}"
    );
    assert!(
        !h1_slow.is_finished() && !h2_slow.is_finished(),
        "all of the above happened while both slow requests were still in flight"
    );
    assert!(proxy.try_exit().is_none(), "the proxy waits for them");

    // (a) Both requests in flight complete.
    let h1 = h1_slow.await.expect("slow HTTP/1 task");
    assert_eq!(h1.status, StatusCode::OK, "{}", h1.body);
    let h2_reply = h2_slow
        .await
        .expect("slow h2 task")
        .expect("the h2 stream in flight completes");
    assert_eq!(h2_reply.status, StatusCode::OK, "{}", h2_reply.body);
    assert_eq!(
        app.requests(),
        4,
        "nothing new reached the backend after SIGTERM"
    );

    // (f) Exit 0 as soon as they are done, long before the 30 s default grace period.
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "drained in {:?}",
        signalled.elapsed()
    );
}

#[tokio::test]
async fn an_idle_proxy_exits_zero_at_once_on_sigterm_despite_open_keep_alives() {
    let app = TestBackend::start("app").await;
    let (mut proxy, gw) = proxy_to(app.addr, &[("WEIR_PROXY_SHUTDOWN_GRACE", "60s")]).await;
    let mut h1 = H1Conn::connect(gw).await;
    assert_eq!(
        h1.send(request(Method::GET, "gw.test", "/", ""))
            .await
            .status,
        StatusCode::OK
    );
    let mut h2 = H2Conn::connect(gw).await;
    assert_eq!(h2.send(h2_get("/")).await.status, StatusCode::OK);

    let signalled = Instant::now();
    proxy.sigterm();
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    // Generous for a loaded machine, yet far below the 60 s grace period it could have used.
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "an idle proxy took {:?} to exit",
        signalled.elapsed()
    );
    // The client's connection task notices the close on its own schedule, after the exit.
    poll_until(
        DEADLINE,
        "the kept-alive client to see its connection closed",
        || {
            let open = h1.is_open();
            async move { (!open).then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn a_request_outliving_the_grace_period_does_not_keep_the_proxy_alive() {
    let app = TestBackend::start("app").await;
    let (mut proxy, gw) = proxy_to(app.addr, &[("WEIR_PROXY_SHUTDOWN_GRACE", "1s")]).await;
    let mut conn = H1Conn::connect(gw).await;
    let stuck = tokio::spawn(async move {
        conn.try_send(request(Method::GET, "gw.test", "/_/delay/20000", ""))
            .await
    });
    poll_until(DEADLINE, "the stuck request at the backend", || async {
        (app.requests() == 1).then_some(())
    })
    .await;

    let signalled = Instant::now();
    proxy.sigterm();
    let status = proxy.wait_exit(Duration::from_secs(6)).await;
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    assert!(
        took >= Duration::from_millis(900),
        "exited after {took:?}: the grace period was not given"
    );
    assert!(proxy.log().contains("grace period over"), "{}", proxy.log());
    let cut = stuck.await.expect("stuck request task");
    assert!(
        cut.is_err(),
        "the request outliving the grace period was cut: {cut:?}"
    );
}

#[tokio::test]
async fn an_open_websocket_tunnel_holds_the_drain_until_it_closes() {
    use tokio::io::BufReader;
    use weir_tests::raw_http1::read_head;

    let app = TestBackend::start("ws-echo").await;
    let (mut proxy, gw) = proxy_to(app.addr, &[]).await;
    let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
    io.get_mut()
        .write_all(
            b"GET /ws HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        .await
        .expect("write the handshake");
    let (status, _) = weir_tests::wait::within(DEADLINE, "101 head", read_head(&mut io))
        .await
        .expect("response head");
    assert_eq!(status, 101, "{}", proxy.log());
    // The backend echoes the upgraded stream byte for byte.
    async fn echo(io: &mut BufReader<TcpStream>, what: &[u8]) -> std::io::Result<Vec<u8>> {
        io.get_mut().write_all(what).await?;
        let mut back = vec![0u8; what.len()];
        io.read_exact(&mut back).await?;
        Ok(back)
    }
    assert_eq!(echo(&mut io, b"before").await.expect("echo"), b"before");

    proxy.sigterm();
    poll_until(DEADLINE, "new connections refused", || async {
        new_connection_refused(gw).await.then_some(())
    })
    .await;
    // Draining, yet the tunnel still carries bytes: it holds the proxy up.
    let after = tokio::time::timeout(DEADLINE, echo(&mut io, b"after")).await;
    assert!(
        matches!(&after, Ok(Ok(b)) if b == b"after"),
        "the tunnel was cut by the drain: {after:?}\n{}",
        proxy.log()
    );
    assert!(proxy.try_exit().is_none(), "exited with a tunnel open");

    drop(io);
    let status = proxy.wait_exit(DEADLINE).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    assert!(
        !proxy.log().contains("grace period over"),
        "the closed tunnel should end the drain, not the 30 s grace: {}",
        proxy.log()
    );
}
