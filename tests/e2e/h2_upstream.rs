//! The one multiplexed HTTP/2 connection the proxy keeps to an `appProtocol: h2c` endpoint is
//! shared by every client: one client's stalled download must not stall the others, and a
//! connection the upstream is closing (GOAWAY) or a stream it refuses must not fail requests
//! that it never processed.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use weir_tests::h2script::{Misstep, ScriptedH2};
use weir_tests::registry::{gateway_prefixes, strip, PrefixRoute};
use weir_tests::wait::within;
use weir_tests::{http_client, poll_until, TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);

async fn h2c_gateway(upstream: SocketAddr) -> WeirProxy {
    let eps = [upstream];
    let routes = [PrefixRoute {
        app_protocol: Some("h2c"),
        ..strip("/h2c", "web-h2c", &eps)
    }];
    WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&routes))
        .gateway(true)
        .start()
        .await
}

/// A client that asks for a large download and never reads it, with a tiny receive buffer so
/// that the proxy soon has to stop reading the upstream stream.
async fn stalled_download(gw: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut io = socket.connect(gw).await.expect("connect to the gateway");
    io.write_all(b"GET /h2c/_/bytes/268435456 HTTP/1.1\r\nHost: web-h2c.test\r\n\r\n")
        .await
        .expect("write the request");
    io
}

#[tokio::test]
async fn clients_that_stop_reading_do_not_stall_the_shared_h2_upstream_connection() {
    let backend = TestBackend::start("h2c-shared").await;
    let proxy = h2c_gateway(backend.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    // More stalled streams than a 1 MiB connection window has room for at 256 KiB each.
    const STALLED: u64 = 8;
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(stalled_download(gw).await);
    }
    poll_until(
        DEADLINE,
        "every stalled download at the backend",
        || async { (backend.requests() >= STALLED).then_some(()) },
    )
    .await;
    // Stalled: the backend has stopped producing their bytes (two polls alike). Before the fix
    // they stopped with the connection window full, after it with each stream's window full.
    let mut last = u64::MAX;
    poll_until(Duration::from_secs(30), "the downloads to stall", || {
        let (now, before) = (backend.bytes_streamed(), last);
        last = now;
        async move { (now == before && now >= STALLED * 256 * 1024).then_some(()) }
    })
    .await;
    // Each download is 256 MiB: they are all still open, their streams full, while these run.
    for i in 0..3 {
        let reply = within(
            DEADLINE,
            "a request beside the stalled downloads",
            http_client::get(gw, "web-h2c.test", "/h2c/echo"),
        )
        .await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
        assert_eq!(reply.json()["version"], "HTTP/2.0", "request {i}");
    }
    drop(stalled);
}

async fn get(gw: SocketAddr, path: &str) -> weir_tests::Reply {
    within(
        DEADLINE,
        "a request through the gateway",
        http_client::get(gw, "web-h2c.test", path),
    )
    .await
}

#[tokio::test]
async fn a_request_after_the_upstream_sent_goaway_goes_out_on_a_fresh_connection() {
    let upstream = ScriptedH2::start(Misstep::GoawayWhileStreamOpen).await;
    let proxy = h2c_gateway(upstream.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    // Its stream stays open, so the connection stays up after the GOAWAY.
    let mut open = TcpStream::connect(gw)
        .await
        .expect("connect to the gateway");
    open.write_all(b"GET /h2c/hold HTTP/1.1\r\nHost: web-h2c.test\r\n\r\n")
        .await
        .expect("write the request");
    poll_until(
        DEADLINE,
        "the proxy to read the upstream's GOAWAY",
        || async { upstream.goaway_read().then_some(()) },
    )
    .await;
    for i in 0..3 {
        let reply = get(gw, "/h2c/next").await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
        assert_eq!(reply.body, "conn 2", "request {i}");
    }
    assert_eq!(upstream.connections(), 2);
    drop(open);
}

#[tokio::test]
async fn a_stream_above_the_last_one_a_goaway_names_is_retried_on_a_fresh_connection() {
    let upstream = ScriptedH2::start(Misstep::GoawayBelowStream).await;
    let proxy = h2c_gateway(upstream.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    assert_eq!(get(gw, "/h2c/first").await.body, "conn 1");
    let reply = get(gw, "/h2c/second").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, "conn 2");
    assert_eq!(
        upstream.requests(),
        3,
        "the refused stream went out once more"
    );
}

#[tokio::test]
async fn a_refused_stream_is_retried_with_its_body_on_a_route_without_a_retry_policy() {
    for method in ["GET", "POST"] {
        let upstream = ScriptedH2::start(Misstep::RefuseFirstStream).await;
        let proxy = h2c_gateway(upstream.addr).await;
        let gw = proxy.gateway.expect("gateway listener");
        let body = if method == "POST" {
            "{\"hello\":1}"
        } else {
            ""
        };
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://{gw}/h2c/refused"))
            .header("host", "web-h2c.test")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .expect("a request");
        let reply = within(DEADLINE, "the refused request", http_client::send(gw, req)).await;
        assert_eq!(reply.status, 200, "{method}: {}", reply.body);
        assert_eq!(
            reply.body, "conn 1",
            "{method}: retried on the same connection"
        );
        assert_eq!(upstream.requests(), 2, "{method}");
    }
}

/// Requests queued behind one h2 connect to an endpoint that does not answer it share that
/// attempt's failure: each answers within about one connect timeout, not one after another at
/// k connect timeouts.
#[tokio::test]
async fn requests_queued_behind_a_failing_h2_connect_share_its_failure() {
    const CONNECT_TIMEOUT: Duration = Duration::from_millis(400);
    const REQUESTS: usize = 10;
    // A listener that never accepts, with room for one connection in its queue: once that is
    // taken, the kernel drops further SYNs and a connect hangs until its timeout.
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("bound");
    let _filler = TcpStream::connect(addr)
        .await
        .expect("the queue's one connection");
    let hangs = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await;
    assert!(hangs.is_err(), "a connect to the full queue must hang");

    let eps = [addr];
    let routes = [PrefixRoute {
        app_protocol: Some("h2c"),
        ..strip("/h2c", "web-h2c", &eps)
    }];
    let proxy = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&routes))
        .gateway(true)
        .env("WEIR_PROXY_CONNECT_TIMEOUT", "400ms")
        .start()
        .await;
    let gw = proxy.gateway.expect("gateway listener");
    let start = tokio::time::Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        requests.spawn(async move {
            let r = get(gw, "/h2c/").await;
            (r.status, start.elapsed())
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(done) = requests.join_next().await {
        let (status, took) = done.expect("request task");
        assert_eq!(status, http::StatusCode::BAD_GATEWAY);
        slowest = slowest.max(took);
    }
    // Serial connects took REQUESTS × 400 ms = 4 s at least; shared, one attempt and its
    // retries' (at most three) bound every request.
    assert!(
        slowest < CONNECT_TIMEOUT * 6,
        "the slowest of {REQUESTS} answered after {slowest:?}"
    );
    drop(listener);
}
