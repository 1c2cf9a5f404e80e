//! HTTP/2 abuse on the gateway listener, with every limit set through `WEIR_PROXY_H2_*`: the
//! limits and flow-control windows are advertised, excess streams and oversized header lists
//! are refused, CONTINUATION floods, HPACK bombs and rapid resets end the connection quickly
//! with bounded memory, good clients keep being served, and the proxy stays alive.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use weir_tests::h2raw::{self, Closed, Frame, RawH2};
use weir_tests::http_client::{get_h2, H2Conn};
use weir_tests::wait::within;
use weir_tests::{TestBackend, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
const MAX_STREAMS: u32 = 4;
const MAX_HEADER_LIST: u32 = 8192;
const MAX_PENDING_RESETS: u32 = 20;
const STREAM_WINDOW: u32 = 128 * 1024;
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;
/// SETTINGS_INITIAL_WINDOW_SIZE.
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

struct Gateway {
    proxy: WeirProxy,
    addr: SocketAddr,
    backend: TestBackend,
}

/// A gateway with explicit, non-default HTTP/2 limits that sends every path to one backend.
async fn gateway() -> Gateway {
    let backend = TestBackend::start("echo").await;
    let registry = format!(
        "services:\n  - name: echo\n    hosts: [echo.test]\n    endpoints:\n      - address: \"{}\"\n\
         gateway:\n  routes:\n    - name: all\n      matches: [{{ path: {{ type: PathPrefix, value: / }} }}]\n      \
         backendRefs: [{{ name: echo }}]\n",
        backend.addr
    );
    let proxy = WeirProxy::builder()
        .registry_yaml(registry)
        .gateway(true)
        .env(
            "WEIR_PROXY_H2_MAX_CONCURRENT_STREAMS",
            MAX_STREAMS.to_string(),
        )
        .env(
            "WEIR_PROXY_H2_MAX_HEADER_LIST_SIZE",
            MAX_HEADER_LIST.to_string(),
        )
        .env(
            "WEIR_PROXY_H2_MAX_PENDING_RESETS",
            MAX_PENDING_RESETS.to_string(),
        )
        .env("WEIR_PROXY_H2_STREAM_WINDOW", STREAM_WINDOW.to_string())
        .env(
            "WEIR_PROXY_H2_CONNECTION_WINDOW",
            CONNECTION_WINDOW.to_string(),
        )
        .start()
        .await;
    let addr = proxy.gateway.expect("gateway listener requested");
    Gateway {
        proxy,
        addr,
        backend,
    }
}

impl Gateway {
    /// The process is alive, `/live` answers, no task panicked, and a fresh h2 client is served.
    async fn assert_alive(&mut self) {
        assert!(
            self.proxy.try_exit().is_none(),
            "the proxy died; log:\n{}",
            self.proxy.log()
        );
        assert_eq!(self.proxy.admin_get("/live").await.status, 200);
        let log = self.proxy.log();
        assert!(!log.contains("panicked"), "a task panicked:\n{log}");
        let reply = get_h2(self.addr, "echo.test", "/alive").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
}

fn good_request(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://echo.test{path}"))
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

fn goaway_of(frames: &[Frame]) -> Option<&Frame> {
    frames.iter().find(|f| f.kind == h2raw::GOAWAY)
}

#[tokio::test]
async fn the_configured_h2_limits_are_advertised_in_the_servers_settings() {
    let mut gw = gateway().await;
    let (mut conn, settings) = RawH2::handshake(gw.addr).await;
    let s = settings.settings();
    let get = |id| s.iter().rev().find(|(k, _)| *k == id).map(|(_, v)| *v);
    assert_eq!(
        get(h2raw::SETTINGS_MAX_CONCURRENT_STREAMS),
        Some(MAX_STREAMS),
        "{s:?}"
    );
    assert_eq!(
        get(h2raw::SETTINGS_MAX_HEADER_LIST_SIZE),
        Some(MAX_HEADER_LIST),
        "{s:?}"
    );
    assert_eq!(
        get(SETTINGS_INITIAL_WINDOW_SIZE),
        Some(STREAM_WINDOW),
        "{s:?}"
    );
    // The connection window starts at 65,535 and grows by a WINDOW_UPDATE on stream 0.
    let update = conn
        .read_until(DEADLINE, |f| {
            f.kind == h2raw::WINDOW_UPDATE && f.stream == 0
        })
        .await
        .expect("a connection WINDOW_UPDATE");
    let increment =
        u32::from_be_bytes(update.payload[..4].try_into().expect("4 bytes")) & 0x7fff_ffff;
    assert_eq!(increment, CONNECTION_WINDOW - 65_535);
    gw.assert_alive().await;
}

#[tokio::test]
async fn streams_beyond_max_concurrent_streams_are_refused_while_the_allowed_ones_complete() {
    let mut gw = gateway().await;
    let (mut conn, _) = RawH2::handshake(gw.addr).await;
    let allowed: Vec<u32> = (0..MAX_STREAMS).map(|i| 1 + 2 * i).collect();
    let excess: Vec<u32> = (MAX_STREAMS..MAX_STREAMS + 3).map(|i| 1 + 2 * i).collect();
    let mut burst = Vec::new();
    for id in allowed.iter().chain(&excess) {
        // The allowed streams stay open for a second, so the excess ones arrive over the limit.
        burst.extend(h2raw::get_request(*id, "echo.test", "/_/delay/1000"));
    }
    conn.send(&burst).await.expect("send the burst");

    let mut status = std::collections::BTreeMap::new();
    let mut reset = std::collections::BTreeMap::new();
    let end = Instant::now() + DEADLINE;
    while status.len() + reset.len() < allowed.len() + excess.len() {
        let f = conn
            .read_frame(end - Instant::now())
            .await
            .unwrap_or_else(|c| {
                panic!("connection {c:?} with statuses {status:?} and resets {reset:?}")
            });
        match f.kind {
            h2raw::HEADERS => {
                status.insert(f.stream, h2raw::response_status(&f.payload));
            }
            h2raw::RST_STREAM => {
                reset.insert(f.stream, f.error_code());
            }
            h2raw::GOAWAY => panic!("GOAWAY {:?} for too many streams", f.error_code()),
            _ => {}
        }
    }
    for id in &allowed {
        assert_eq!(status.get(id), Some(&Some(200)), "stream {id}: {status:?}");
    }
    for id in &excess {
        let code = reset.get(id).copied().flatten();
        assert!(
            matches!(
                code,
                Some(h2raw::REFUSED_STREAM) | Some(h2raw::PROTOCOL_ERROR)
            ),
            "stream {id} over the limit: reset {code:?}, status {:?}",
            status.get(id)
        );
    }
    assert_eq!(gw.backend.requests(), u64::from(MAX_STREAMS));

    // The connection itself is still usable.
    let next = 1 + 2 * (MAX_STREAMS + 3);
    conn.send(&h2raw::get_request(next, "echo.test", "/again"))
        .await
        .expect("send");
    let f = conn
        .read_until(DEADLINE, |f| f.kind == h2raw::HEADERS && f.stream == next)
        .await
        .expect("a response on the same connection");
    assert_eq!(h2raw::response_status(&f.payload), Some(200));
    gw.assert_alive().await;
}

#[tokio::test]
async fn a_header_list_over_the_limit_gets_431_and_the_connection_stays_usable() {
    let mut gw = gateway().await;
    let (mut conn, _) = RawH2::handshake(gw.addr).await;
    let big = vec![b'a'; MAX_HEADER_LIST as usize + 2000];
    let block = h2raw::get_block("echo.test", "/big", &[("x-big", &big)]);
    conn.send(&h2raw::frame(
        h2raw::HEADERS,
        h2raw::END_HEADERS | h2raw::END_STREAM,
        1,
        &block,
    ))
    .await
    .expect("send the oversized request");
    let f = conn
        .read_until(DEADLINE, |f| {
            f.stream == 1 && matches!(f.kind, h2raw::HEADERS | h2raw::RST_STREAM)
                || f.kind == h2raw::GOAWAY
        })
        .await
        .expect("an answer to the oversized request");
    assert_eq!(
        (f.kind, h2raw::response_status(&f.payload)),
        (h2raw::HEADERS, Some(431)),
        "the server answers 431 on the stream: {f:?}"
    );

    conn.send(&h2raw::get_request(3, "echo.test", "/small"))
        .await
        .expect("send");
    let f = conn
        .read_until(DEADLINE, |f| {
            f.kind == h2raw::GOAWAY || f.kind == h2raw::HEADERS && f.stream == 3
        })
        .await
        .expect("a response on the same connection");
    assert_eq!(
        (f.kind, h2raw::response_status(&f.payload)),
        (h2raw::HEADERS, Some(200))
    );
    assert_eq!(
        gw.backend.requests(),
        1,
        "the oversized request was forwarded"
    );
    gw.assert_alive().await;
}

#[tokio::test]
async fn a_header_list_far_over_the_limit_ends_the_connection() {
    let mut gw = gateway().await;
    let (mut conn, _) = RawH2::handshake(gw.addr).await;
    // Five times the limit, split over HEADERS + CONTINUATION at the default 16 KiB frame size.
    let big = vec![b'a'; 5 * MAX_HEADER_LIST as usize];
    let block = h2raw::get_block("echo.test", "/huge", &[("x-huge", &big)]);
    let mut frames = Vec::new();
    let chunks: Vec<&[u8]> = block.chunks(16 * 1024).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let (kind, flags) = if i == 0 {
            (h2raw::HEADERS, h2raw::END_STREAM)
        } else {
            (h2raw::CONTINUATION, 0)
        };
        let flags = if last {
            flags | h2raw::END_HEADERS
        } else {
            flags
        };
        frames.extend(h2raw::frame(kind, flags, 1, chunk));
    }
    let _ = conn.send(&frames).await;
    let (got, closed) = conn.read_all(DEADLINE).await;
    let goaway = goaway_of(&got).unwrap_or_else(|| panic!("no GOAWAY ({closed:?}): {got:?}"));
    assert!(
        matches!(
            goaway.error_code(),
            Some(h2raw::ENHANCE_YOUR_CALM) | Some(h2raw::COMPRESSION_ERROR)
        ),
        "{goaway:?}"
    );
    assert_ne!(closed, Closed::Deadline, "the connection stayed open");
    assert_eq!(gw.backend.requests(), 0);
    gw.assert_alive().await;
}

#[tokio::test]
async fn a_continuation_flood_gets_goaway_quickly_with_bounded_memory() {
    let mut gw = gateway().await;
    let rss_before = gw.proxy.rss_kib();
    let (conn, _) = RawH2::handshake(gw.addr).await;
    let (mut rd, mut wr) = conn.into_split();
    let started = Instant::now();
    let flood = tokio::spawn(async move {
        let head = h2raw::get_block("echo.test", "/flood", &[]);
        let mut bytes = h2raw::frame(h2raw::HEADERS, h2raw::END_STREAM, 1, &head);
        let mut field = Vec::new();
        h2raw::literal("x-c", b"v", &mut field);
        let cont = h2raw::frame(h2raw::CONTINUATION, 0, 1, &field);
        for _ in 0..10_000 {
            bytes.extend_from_slice(&cont);
        }
        // Never END_HEADERS. The proxy may close while this is still being written.
        let _ = wr.write_all(&bytes).await;
        wr
    });
    let (got, closed) = rd.read_all(DEADLINE).await;
    let elapsed = started.elapsed();
    let goaway = goaway_of(&got).unwrap_or_else(|| panic!("no GOAWAY ({closed:?}): {got:?}"));
    assert_eq!(
        goaway.error_code(),
        Some(h2raw::ENHANCE_YOUR_CALM),
        "{goaway:?}"
    );
    assert_ne!(closed, Closed::Deadline, "the connection stayed open");
    assert!(
        elapsed < Duration::from_secs(3),
        "closed only after {elapsed:?}"
    );
    drop(within(DEADLINE, "flood writer", flood).await);
    let rss_after = gw.proxy.rss_kib();
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(gw.backend.requests(), 0);
    gw.assert_alive().await;
}

#[tokio::test]
async fn a_dynamic_table_size_update_over_the_limit_is_a_connection_error() {
    let mut gw = gateway().await;
    let (mut conn, _) = RawH2::handshake(gw.addr).await;
    let mut block = Vec::new();
    // Table size update (001xxxxx) to 1 MiB; the proxy allows the default 4096.
    h2raw::hpack_int(0x20, 5, 1 << 20, &mut block);
    block.extend(h2raw::get_block("echo.test", "/resize", &[]));
    conn.send(&h2raw::frame(
        h2raw::HEADERS,
        h2raw::END_HEADERS | h2raw::END_STREAM,
        1,
        &block,
    ))
    .await
    .expect("send");
    let (got, closed) = conn.read_all(DEADLINE).await;
    let goaway = goaway_of(&got).unwrap_or_else(|| panic!("no GOAWAY ({closed:?}): {got:?}"));
    assert!(
        matches!(
            goaway.error_code(),
            Some(h2raw::COMPRESSION_ERROR) | Some(h2raw::PROTOCOL_ERROR)
        ),
        "{goaway:?}"
    );
    assert_ne!(closed, Closed::Deadline);
    assert_eq!(gw.backend.requests(), 0);
    gw.assert_alive().await;
}

#[tokio::test]
async fn an_hpack_bomb_is_a_connection_error_without_a_memory_blowup() {
    let mut gw = gateway().await;
    let rss_before = gw.proxy.rss_kib();
    let (mut conn, _) = RawH2::handshake(gw.addr).await;
    // One 4000-byte entry in the proxy's dynamic table, then 12000 one-byte references to it:
    // a 16 KiB frame that decodes to ~48 MB.
    let mut block = h2raw::get_block("echo.test", "/bomb", &[]);
    h2raw::literal_indexed("x-bomb", &[b'a'; 4000], &mut block);
    block.extend(std::iter::repeat_n(0x80 | 62, 12_000));
    assert!(block.len() <= 16 * 1024);
    let _ = conn
        .send(&h2raw::frame(
            h2raw::HEADERS,
            h2raw::END_HEADERS | h2raw::END_STREAM,
            1,
            &block,
        ))
        .await;
    let (got, closed) = conn.read_all(DEADLINE).await;
    let goaway = goaway_of(&got).unwrap_or_else(|| panic!("no GOAWAY ({closed:?}): {got:?}"));
    assert_eq!(
        goaway.error_code(),
        Some(h2raw::ENHANCE_YOUR_CALM),
        "{goaway:?}"
    );
    assert_ne!(closed, Closed::Deadline);
    let rss_after = gw.proxy.rss_kib();
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(gw.backend.requests(), 0);
    gw.assert_alive().await;
}

/// One rapid-reset attacker connection: `n` HEADERS each followed at once by RST_STREAM(CANCEL).
/// Returns the GOAWAY error code it got (if any) and how the connection ended.
async fn rapid_reset(addr: SocketAddr, n: u32) -> (Option<u32>, Closed) {
    let (conn, _) = RawH2::handshake(addr).await;
    let (mut rd, mut wr) = conn.into_split();
    let writer = tokio::spawn(async move {
        let mut bytes = Vec::new();
        for i in 0..n {
            let id = 1 + 2 * i;
            bytes.extend(h2raw::get_request(id, "echo.test", "/reset"));
            bytes.extend(h2raw::rst_stream(id, h2raw::CANCEL));
        }
        let _ = wr.write_all(&bytes).await;
        wr
    });
    let (got, closed) = rd.read_all(DEADLINE).await;
    drop(within(DEADLINE, "attacker writer", writer).await);
    (goaway_of(&got).and_then(Frame::error_code), closed)
}

#[tokio::test]
async fn rapid_reset_gets_goaway_forwards_little_and_good_clients_keep_being_served() {
    const CONNECTIONS: u32 = 8;
    const STREAMS: u32 = 2000;
    let mut gw = gateway().await;
    let rss_before = gw.proxy.rss_kib();

    let addr = gw.addr;
    // At least CONNECTIONS attacks, one after another, for at least 1.5 s of good traffic.
    let stop = Instant::now() + Duration::from_millis(1500);
    let attack = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        while outcomes.len() < CONNECTIONS as usize || Instant::now() < stop {
            outcomes.push(rapid_reset(addr, STREAMS).await);
        }
        outcomes
    });
    let mut good = H2Conn::connect(gw.addr).await;
    let mut served = 0u64;
    while !attack.is_finished() {
        let reply = within(
            Duration::from_secs(3),
            "a good request during the attack",
            good.send(good_request("/good")),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        served += 1;
    }
    let outcomes = attack.await.expect("attacker task");
    assert!(
        served >= 5,
        "only {served} good requests completed during the attack"
    );
    let connections = outcomes.len() as u64;
    for (i, (code, closed)) in outcomes.iter().enumerate() {
        assert_eq!(
            *code,
            Some(h2raw::ENHANCE_YOUR_CALM),
            "attacker connection {i}: GOAWAY {code:?}, ended {closed:?}"
        );
        assert_ne!(
            *closed,
            Closed::Deadline,
            "attacker connection {i} stayed open"
        );
    }

    let forwarded = gw.backend.requests() - served;
    let attempted = connections * u64::from(STREAMS);
    eprintln!(
        "rapid reset: {connections} connections, {attempted} streams sent and reset, \
         {forwarded} forwarded, {served} good requests"
    );
    // Each attacking connection is cut off once its resets exceed the pending-reset limit, so
    // only a small fraction of the streams it opened can ever reach the backend.
    assert!(
        forwarded <= connections * u64::from((MAX_PENDING_RESETS + MAX_STREAMS) * 2),
        "{forwarded} of {attempted} reset streams reached the backend"
    );
    let rss_after = gw.proxy.rss_kib();
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(good.send(good_request("/after")).await.status, 200);
    gw.assert_alive().await;
}

#[tokio::test]
async fn thousands_of_malformed_streams_get_goaway_at_the_local_reset_limit() {
    // "MadeYouReset" (CVE-2025-8671): make the server reset streams itself. Each stream is a
    // request carrying a connection-specific header, a stream error the server answers with
    // RST_STREAM. (DATA after END_STREAM or a zero WINDOW_UPDATE, the other usual triggers, are
    // already connection errors in h2: GOAWAY PROTOCOL_ERROR on the first one.)
    const STREAMS: u32 = 2000;
    let mut gw = gateway().await;
    let (conn, _) = RawH2::handshake(gw.addr).await;
    let (mut rd, mut wr) = conn.into_split();
    let writer = tokio::spawn(async move {
        let mut bytes = Vec::new();
        for i in 0..STREAMS {
            let id = 1 + 2 * i;
            let block =
                h2raw::get_block("echo.test", "/made-you-reset", &[("connection", b"close")]);
            bytes.extend(h2raw::frame(
                h2raw::HEADERS,
                h2raw::END_HEADERS | h2raw::END_STREAM,
                id,
                &block,
            ));
        }
        let _ = wr.write_all(&bytes).await;
        wr
    });
    let (got, closed) = rd.read_all(DEADLINE).await;
    drop(within(DEADLINE, "attacker writer", writer).await);
    let resets = got.iter().filter(|f| f.kind == h2raw::RST_STREAM).count();
    let goaway =
        goaway_of(&got).unwrap_or_else(|| panic!("no GOAWAY after {resets} resets ({closed:?})"));
    assert_eq!(
        goaway.error_code(),
        Some(h2raw::ENHANCE_YOUR_CALM),
        "{goaway:?}"
    );
    assert_ne!(closed, Closed::Deadline);
    // H2Limits::max_local_error_reset_streams (256) bounds the resets the proxy sends.
    assert!(resets <= 256, "{resets} resets before GOAWAY");
    let forwarded = gw.backend.requests();
    eprintln!(
        "made-you-reset: {STREAMS} streams, {resets} resets, {forwarded} forwarded, GOAWAY {:?}",
        String::from_utf8_lossy(&goaway.payload[8..])
    );
    assert_eq!(forwarded, 0, "a malformed stream reached the backend");
    gw.assert_alive().await;
}
