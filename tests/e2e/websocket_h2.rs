//! WebSocket over HTTP/2 (RFC 8441 extended CONNECT) through the gateway to HTTP/1.1 WebSocket
//! servers: the h2 client (Python `h2`, frames by hand) sees SETTINGS_ENABLE_CONNECT_PROTOCOL,
//! its CONNECT reaches the server as an HTTP/1.1 handshake the `websockets` library accepts, and
//! frames move both ways; answers that open no tunnel are passed back or refused.

use weir_tests::metrics::sum;
use weir_tests::require;
use weir_tests::ws::{h2_session, header, WsServer};

use crate::websocket::{canned_server, gateway_to};

#[tokio::test]
async fn a_websocket_over_http2_reaches_an_http1_websocket_server_and_frames_go_both_ways() {
    require!(python_ws);
    let server = WsServer::start().await;
    let proxy = gateway_to(server.addr).await;
    let gw = proxy.gateway.expect("gateway listener");
    let s = h2_session(
        gw,
        "ws.test",
        "/ws/chat?room=1",
        &["hello", "request?"],
        &["--subprotocol", "chat"],
    )
    .await;
    let log = || format!("{s}\n{}\n{}", proxy.log(), server.log());
    assert_eq!(s["enable_connect_protocol"], 1, "{}", log());
    assert_eq!(s["status"], "200", "{}", log());
    assert_eq!(s["error"], serde_json::Value::Null, "{}", log());
    // The HTTP/1.1 handshake's answer, less what belongs to HTTP/1.1 alone.
    assert_eq!(
        header(&s, "sec-websocket-protocol"),
        Some("chat"),
        "{}",
        log()
    );
    for gone in ["sec-websocket-accept", "upgrade", "connection"] {
        assert_eq!(header(&s, gone), None, "{gone}: {}", log());
    }
    assert_eq!(s["replies"][0], "echo:hello", "{}", log());
    // What the server's handshake read: the route's rewrite, Host from :authority, one cookie
    // field, and a key the proxy made (the h2 client sent none).
    let seen: serde_json::Value =
        serde_json::from_str(s["replies"][1].as_str().expect("a reply")).expect("json");
    assert_eq!(seen["path"], "/chat?room=1", "{seen}");
    let field = |name: &str| -> Vec<String> {
        seen["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .filter(|kv| kv[0] == name)
            .map(|kv| kv[1].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(field("host"), ["ws.test"], "{seen}");
    assert_eq!(field("upgrade"), ["websocket"], "{seen}");
    assert_eq!(field("cookie"), ["a=1; b=2"], "{seen}");
    assert_eq!(field("sec-websocket-key").len(), 1, "{seen}");
    // The close handshake, and the stream's clean end both ways.
    assert_eq!(s["close"], 1000, "{}", log());
    assert_eq!(s["ended"], true, "{}", log());
    // Counted on its route as the 200 the client got.
    let m = proxy.metrics_text().await;
    let ok = [
        ("direction", "gateway"),
        ("route", "ws"),
        ("status_code", "200"),
    ];
    assert_eq!(sum(&m, "weir_responses_total", &ok), Some(1.0), "{m}");
}

#[tokio::test]
async fn another_protocol_over_extended_connect_becomes_that_upgrade_and_is_spliced() {
    require!(python_ws);
    // TestBackend switches to whatever `Upgrade` names and echoes the stream's bytes.
    let backend = weir_tests::TestBackend::start("echo").await;
    let proxy = gateway_to(backend.addr).await;
    let s = h2_session(
        proxy.gateway.expect("gateway"),
        "ws.test",
        "/ws/tunnel",
        &["through"],
        &["--protocol", "x-echo"],
    )
    .await;
    assert_eq!(s["status"], "200", "{s}\n{}", proxy.log());
    assert_eq!(s["replies"][0], "through", "{s}");
    assert_eq!(header(&s, "x-upgrade-target"), Some("/tunnel"), "{s}");
    // The h2 stream's bytes are the tunnel's: a masked 7-byte text frame (13) and a masked
    // close (8), echoed back.
    let route = [("direction", "gateway"), ("route", "ws")];
    let counted = weir_tests::metrics::tunnels_closed(&proxy, &route, "eof", 1.0).await;
    assert_eq!(
        (counted.opened, counted.received, counted.sent),
        (1.0, 21.0, 21.0)
    );
}

#[tokio::test]
async fn an_extended_connect_that_opens_no_tunnel_is_answered_or_refused_never_spliced() {
    require!(python_ws);
    // The upstream's refusal goes back as it came, body and all.
    let forbidden = canned_server(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 4\r\n\r\nnope").await;
    // A 2xx without switching, a 101 without the accept of the key the proxy sent, and a 101
    // to a protocol not asked for: the h2 client would read each as an open tunnel.
    let not_switched = canned_server(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let no_accept = canned_server(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .await;
    let wrong_accept = canned_server(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    )
    .await;
    let cases = [
        (forbidden, "403", None),
        (not_switched, "502", Some("upstream-failed")),
        (no_accept, "502", Some("upstream-failed")),
        (wrong_accept, "502", Some("upstream-failed")),
    ];
    for (addr, status, error) in cases {
        let proxy = gateway_to(addr).await;
        let s = h2_session(
            proxy.gateway.expect("gateway"),
            "ws.test",
            "/ws/x",
            &[],
            &[],
        )
        .await;
        assert_eq!(s["status"], status, "{s}\n{}", proxy.log());
        assert_eq!(header(&s, "weir-proxy-error"), error, "{s}");
        if status == "403" {
            assert_eq!(s["body"], "nope", "{s}");
        }
    }
    // No route for the path: the gateway's own 404; a :protocol that is no token: 400.
    let proxy = gateway_to(forbidden).await;
    let gw = proxy.gateway.expect("gateway");
    let s = h2_session(gw, "ws.test", "/elsewhere", &[], &[]).await;
    assert_eq!(s["status"], "404", "{s}");
    let s = h2_session(gw, "ws.test", "/ws/x", &[], &["--protocol", "web socket"]).await;
    assert_eq!(s["status"], "400", "{s}\n{}", proxy.log());
}
