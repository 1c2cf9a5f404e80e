//! How header names are spelled in the HTTP/1 heads the proxy writes: lower case by default;
//! Title-Case with `WEIR_PROXY_HTTP1_HEADER_CASE=title` on every path (fast-path requests and
//! responses, a chunked upload and its answer through hyper's server, an upgrade through hyper's
//! client), trailers included.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use weir_tests::raw_http1::{read_raw_head, skip_small_chunked};
use weir_tests::registry::{gateway_prefixes, strip};
use weir_tests::wait::within;
use weir_tests::WeirProxy;

const DEADLINE: Duration = Duration::from_secs(10);

/// An upstream that sends each request head it reads to `heads` and answers in lower case: an
/// upgrade with a 101 and an echo, a chunked upload (read to its last chunk) with a chunked
/// answer and a trailer, anything else with two bytes.
async fn upstream(heads: mpsc::UnboundedSender<String>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut io = BufReader::new(io);
                while let Some(h) = read_raw_head(&mut io).await {
                    let lower = h.to_ascii_lowercase();
                    let _ = heads.send(h);
                    if lower.contains("upgrade: echo") {
                        let _ = io
                            .get_mut()
                            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n")
                            .await;
                        let (mut r, mut w) = tokio::io::split(io);
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                        return;
                    }
                    if lower.contains("transfer-encoding: chunked") {
                        if !skip_small_chunked(&mut io).await {
                            return;
                        }
                        let _ = io
                            .get_mut()
                            .write_all(b"HTTP/1.1 200 OK\r\nx-app-version: 1\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n2\r\nok\r\n0\r\nx-checksum: 9\r\n\r\n")
                            .await;
                        continue;
                    }
                    let _ = io
                        .get_mut()
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nx-app-version: 1\r\ncontent-length: 2\r\n\r\nok",
                        )
                        .await;
                }
            });
        }
    });
    addr
}

async fn proxy(upstream: SocketAddr, title: bool) -> WeirProxy {
    let mut b = WeirProxy::builder()
        .registry_yaml(gateway_prefixes(&[strip("/c", "case", &[upstream])]))
        .gateway(true);
    if title {
        b = b.env("WEIR_PROXY_HTTP1_HEADER_CASE", "title");
    }
    b.start().await
}

/// Sends `request` on a fresh connection; returns the response head and what followed it.
async fn exchange(proxy: &WeirProxy, request: &[u8]) -> (String, BufReader<TcpStream>) {
    let mut io = TcpStream::connect(proxy.gateway.expect("gateway"))
        .await
        .expect("connect");
    io.write_all(request).await.expect("write");
    let mut io = BufReader::new(io);
    let h = within(DEADLINE, "the response head", read_raw_head(&mut io))
        .await
        .expect("a response head");
    (h, io)
}

#[tokio::test]
async fn title_case_spells_every_http1_head_the_proxy_writes_and_lower_is_the_default() {
    let (tx, mut heads) = mpsc::unbounded_channel();
    let up = upstream(tx).await;
    let titled = proxy(up, true).await;

    // The fast path, both ways.
    let (resp, _io) = exchange(
        &titled,
        b"GET /c/plain HTTP/1.1\r\nhost: case.test\r\nx-request-id: 7\r\n\r\n",
    )
    .await;
    let req = heads.recv().await.expect("the plain request");
    for line in [
        "Host: case.test\r\n",
        "X-Request-Id: 7\r\n",
        "X-Forwarded-For: 127.0.0.1\r\n",
    ] {
        assert!(req.contains(line), "{line:?} in {req}");
    }
    for line in ["X-App-Version: 1\r\n", "Content-Length: 2\r\n", "Date: "] {
        assert!(resp.contains(line), "{line:?} in {resp}");
    }

    // A chunked upload: hyper's server reads it and writes the answer; its trailer too.
    let (resp, mut io) = exchange(
        &titled,
        b"POST /c/up HTTP/1.1\r\nhost: case.test\r\nte: trailers\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    let req = heads.recv().await.expect("the upload");
    assert!(req.contains("Transfer-Encoding: chunked\r\n"), "{req}");
    assert!(req.contains("Host: case.test\r\n"), "{req}");
    assert!(resp.contains("X-App-Version: 1\r\n"), "{resp}");
    assert!(resp.contains("Transfer-Encoding: chunked\r\n"), "{resp}");
    let mut body = String::new();
    while !body.ends_with("\r\n\r\n") {
        let mut line = String::new();
        let n = within(DEADLINE, "the chunked body", io.read_line(&mut line))
            .await
            .expect("read the body");
        assert_ne!(n, 0, "closed mid-body: {body}");
        body.push_str(&line);
    }
    assert!(body.contains("X-Checksum: 9\r\n"), "{body}");

    // An upgrade: hyper's client writes the request, hyper's server the 101.
    let (resp, mut io) = exchange(
        &titled,
        b"GET /c/ws HTTP/1.1\r\nhost: case.test\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n",
    )
    .await;
    let req = heads.recv().await.expect("the upgrade");
    assert!(req.contains("Upgrade: echo\r\n"), "{req}");
    assert!(req.contains("Host: case.test\r\n"), "{req}");
    assert!(resp.starts_with("HTTP/1.1 101"), "{resp}");
    assert!(resp.contains("Upgrade: echo\r\n"), "{resp}");
    io.get_mut().write_all(b"ping").await.expect("write");
    let mut echo = [0u8; 4];
    within(DEADLINE, "the echo", io.read_exact(&mut echo))
        .await
        .expect("echo");
    assert_eq!(&echo, b"ping");

    // The default writes what the `http` crate keeps: lower case.
    let lower = proxy(up, false).await;
    let (resp, _io) = exchange(
        &lower,
        b"GET /c/plain HTTP/1.1\r\nHost: case.test\r\nX-Request-Id: 7\r\n\r\n",
    )
    .await;
    let req = heads.recv().await.expect("the default's request");
    assert!(req.contains("host: case.test\r\n"), "{req}");
    assert!(req.contains("x-request-id: 7\r\n"), "{req}");
    assert!(resp.contains("x-app-version: 1\r\n"), "{resp}");
}
