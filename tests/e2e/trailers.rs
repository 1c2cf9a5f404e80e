//! Request trailers reach the upstream cleaned as the head was: no field that frames, routes,
//! authenticates or is hop-by-hop, and none the route's `RequestHeaderModifier` sets or removes,
//! whether the upstream speaks HTTP/1.1 or HTTP/2.

use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use weir_tests::recorder::Recorder;
use weir_tests::{poll_until, raw_http1, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);

/// A gateway whose one route sets `x-user` and removes `x-secret`, in front of a recorder.
async fn behind_a_filtering_route(h2: bool) -> (Recorder, WeirProxy) {
    let up = Recorder::start(h2).await;
    let yaml = format!(
        "services:\n  - name: up\n    appProtocol: {}\n    endpoints:\n      - address: \"{}\"\n\
         gateway:\n  routes:\n    - name: all\n      backendRefs: [{{ name: up }}]\n      filters:\n\
         \x20       - type: RequestHeaderModifier\n\
         \x20         requestHeaderModifier: {{ set: [{{ name: x-user, value: gw }}], remove: [x-secret] }}\n",
        if h2 { "h2c" } else { "http" },
        up.addr
    );
    let proxy = WeirProxy::builder()
        .registry_yaml(yaml)
        .gateway(true)
        .start()
        .await;
    (up, proxy)
}

#[tokio::test]
async fn request_trailers_lose_framing_auth_hop_by_hop_and_the_routes_own_fields() {
    for h2 in [false, true] {
        let (up, proxy) = behind_a_filtering_route(h2).await;
        let gw = proxy.gateway.expect("gateway");
        let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
        let req = "POST /t HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\
                   Trailer: x-checksum\r\n\r\n\
                   3\r\nabc\r\n0\r\n\
                   x-checksum: 900150983cd24fb0\r\nhost: evil.test\r\ncontent-length: 3\r\n\
                   authorization: Bearer stolen\r\nx-forwarded-for: 10.9.9.9\r\nkeep-alive: 5\r\n\
                   te: gzip\r\nx-secret: s\r\nx-user: admin\r\nx-checksum: again\r\n\r\n";
        io.get_mut().write_all(req.as_bytes()).await.expect("write");
        let r = raw_http1::read_response(&mut io, "POST", DEADLINE)
            .await
            .expect("a response");
        assert_eq!(r.status, 200, "h2 upstream: {h2}: {:?}", r.headers);
        let seen = poll_until(DEADLINE, "the upstream to see the whole body", || async {
            up.all().into_iter().find_map(|s| s.end)
        })
        .await
        .expect("the body arrived whole");
        let (body, trailers) = seen;
        assert_eq!(body, b"abc");
        let trailers: Vec<(String, String)> = trailers
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v).expect("utf-8")))
            .collect();
        assert_eq!(
            trailers,
            [
                ("x-checksum".to_owned(), "900150983cd24fb0".to_owned()),
                ("x-checksum".to_owned(), "again".to_owned())
            ],
            "h2 upstream: {h2}"
        );
    }
}

/// An HTTP/1 upstream's chunked answer with a declared trailer, after reading a request to its
/// end (a chunked one to its last chunk).
async fn trailer_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut io = BufReader::new(io);
                while let Some(head) = raw_http1::read_raw_head(&mut io).await {
                    let chunked = head
                        .to_ascii_lowercase()
                        .contains("transfer-encoding: chunked");
                    if chunked && !raw_http1::skip_small_chunked(&mut io).await {
                        return;
                    }
                    let _ = io
                        .get_mut()
                        .write_all(b"HTTP/1.1 200 OK\r\nTrailer: x-checksum\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-checksum: 9\r\n\r\n")
                        .await;
                }
            });
        }
    });
    addr
}

/// Both HTTP/1 server paths pass an upstream's declared response trailers to a client that
/// accepts them: the fast path (a plain GET) and hyper's (after a chunked upload), which writes
/// only what the response's `Trailer` declares (the proxy once dropped that field as
/// hop-by-hop, and with it every trailer there).
#[tokio::test]
async fn declared_response_trailers_reach_an_http1_client_after_a_plain_or_a_chunked_request() {
    let upstream = trailer_upstream().await;
    let proxy = WeirProxy::builder()
        .registry_yaml(weir_tests::registry::gateway_prefixes(&[
            weir_tests::registry::strip("/t", "trailing", &[upstream]),
        ]))
        .gateway(true)
        .start()
        .await;
    for request in [
        &b"GET /t/plain HTTP/1.1\r\nHost: trailing.test\r\nTE: trailers\r\n\r\n"[..],
        b"POST /t/up HTTP/1.1\r\nHost: trailing.test\r\nTE: trailers\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ] {
        let mut io = TcpStream::connect(proxy.gateway.expect("gateway"))
            .await
            .expect("connect");
        io.write_all(request).await.expect("write");
        let mut rd = BufReader::new(io);
        let method = if request.starts_with(b"GET") { "GET" } else { "POST" };
        let resp = raw_http1::read_response(&mut rd, method, DEADLINE)
            .await
            .expect("a response");
        assert_eq!((resp.status, resp.body.as_slice()), (200, b"ok".as_slice()));
        assert_eq!(
            resp.trailers,
            [("x-checksum".to_string(), "9".to_string())],
            "{method}: {resp:?}"
        );
    }
}
