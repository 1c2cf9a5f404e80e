//! Idle keep-alive connections cost the proxy little memory: a thousand client connections that
//! each made one request are held open, and the proxy's resident memory grows by at most the
//! 8 KiB a connection of `BENCHMARKS.md`'s S8 (the benchmark measures the release build; this
//! guards the same bound on every CI run, where the debug build measures ~4 KiB).

use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use weir_tests::raw_http1::read_response;
use weir_tests::registry::{gateway_prefixes, strip};
use weir_tests::wait::{poll_until, within};
use weir_tests::{metrics, require, TestBackend, WeirProxy};

/// S8's connection count.
const CONNS: usize = 1000;
/// S8's bound per idle keep-alive connection.
const MAX_KIB_PER_CONN: f64 = 8.0;
/// Open files the test process needs: a client and a backend socket per connection, and room
/// for the tests running beside it.
const OPEN_FILES: u64 = 2 * CONNS as u64 + 4096;
const DEADLINE: Duration = Duration::from_secs(30);
const REQUEST: &[u8] = b"GET /m/idle HTTP/1.1\r\nHost: memory.test\r\n\r\n";

async fn get(io: &mut BufReader<TcpStream>) -> u16 {
    io.get_mut()
        .write_all(REQUEST)
        .await
        .expect("write to the gateway");
    read_response(io, "GET", DEADLINE)
        .await
        .expect("a response on the keep-alive connection")
        .status
}

/// Parked HTTP/1 keep-alive connections, from the proxy's own gauge.
async fn parked(proxy: &WeirProxy) -> f64 {
    let text = proxy.metrics_text().await;
    metrics::sum(&text, "weir_http1_parked_connections", &[]).unwrap_or(0.0)
}

/// The proxy's resident memory once it stops moving, as `tests/perf/peers.sh` reads it: sampled
/// every 250 ms until four samples in a row are within 1% of the one before. The heap trim runs
/// on a tick after the connections' buffers are freed, and no event says when it has, so this
/// is a measurement over time (with a deadline), not a wait for something to happen.
async fn settled_rss_kib(proxy: &WeirProxy) -> u64 {
    within(DEADLINE, "the proxy's RSS to settle", async {
        let mut every = tokio::time::interval(Duration::from_millis(250));
        let (mut last, mut steady) = (0u64, 0);
        loop {
            every.tick().await;
            let now = proxy.rss_kib();
            steady = if now.abs_diff(last) * 100 <= last {
                steady + 1
            } else {
                0
            };
            last = now;
            if steady >= 4 {
                return now;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_thousand_idle_keep_alive_connections_cost_at_most_8_kib_each() {
    // This process holds both ends that are not the proxy's: the clients and the backend.
    require!(open_files OPEN_FILES);
    let backend = TestBackend::start("memory").await;
    let eps = [backend.addr];
    let proxy = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/m", "memory", &eps)]))
        .gateway(true)
        .start()
        .await;
    let gw = proxy.gateway.expect("gateway listener");

    // One request first, so the route, the upstream pool and the allocator's first pages are in
    // the baseline rather than charged to the connections.
    let mut warm = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
    assert_eq!(get(&mut warm).await, 200);
    drop(warm);
    parked(&proxy).await; // the metrics page's first render is in the baseline as well
    let before = settled_rss_kib(&proxy).await;

    // As S8 does it: every request sent before any response is read, so the upstream side holds
    // many connections too.
    let mut conns = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        let mut io = TcpStream::connect(gw)
            .await
            .expect("connect to the gateway");
        io.write_all(REQUEST).await.expect("write to the gateway");
        conns.push(BufReader::new(io));
    }
    within(DEADLINE, "a response on each connection", async {
        for io in &mut conns {
            let reply = read_response(io, "GET", DEADLINE)
                .await
                .expect("a response");
            assert_eq!(reply.status, 200);
        }
    })
    .await;
    poll_until(DEADLINE, "every idle connection to park", || async {
        (parked(&proxy).await >= CONNS as f64).then_some(())
    })
    .await;
    let with = settled_rss_kib(&proxy).await;

    let per_conn = with.saturating_sub(before) as f64 / CONNS as f64;
    eprintln!(
        "proxy RSS {before} KiB -> {with} KiB with {CONNS} idle keep-alive connections: \
         {per_conn:.2} KiB each"
    );
    assert!(
        per_conn <= MAX_KIB_PER_CONN,
        "{per_conn:.2} KiB per idle connection, above S8's {MAX_KIB_PER_CONN}"
    );

    // The connections were measured idle, not closed: every one still serves a request.
    within(DEADLINE, "a second request on each connection", async {
        for io in &mut conns {
            assert_eq!(get(io).await, 200);
        }
    })
    .await;
}
