//! The whole proxy in control-plane mode: the outbound path resolves through the fake control
//! plane, and an endpoint removed by an update gets no new request while its in-flight one ends.

use std::{net::SocketAddr, sync::Arc};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{oneshot, Notify},
};

use super::fake::{service, FakeControl};
use crate::{config::Config, transport::orig_dst::Fixed, App};

/// An HTTP/1 backend answering its name; with `hold`, it waits for the notify before answering
/// and reports on `arrived` when the request is in.
async fn backend(
    name: &'static str,
    hold: Option<(Arc<Notify>, oneshot::Sender<()>)>,
) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a backend");
    let addr = l.local_addr().expect("bound");
    tokio::spawn(async move {
        let mut hold = hold;
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf[n..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(m) => n += m,
                }
            }
            if let Some((release, arrived)) = hold.take() {
                let _ = arrived.send(());
                release.notified().await;
            }
            let resp =
                format!("HTTP/1.1 200 OK\r\ncontent-length: 1\r\nconnection: close\r\n\r\n{name}");
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    addr
}

/// One `connection: close` GET; the whole response as text.
async fn get(addr: SocketAddr, host: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read the response");
    out
}

fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_endpoint_gets_no_new_request_and_its_in_flight_one_finishes() {
    let cp = FakeControl::start().await;
    let (release, (arrived_tx, arrived)) = (Arc::new(Notify::new()), oneshot::channel());
    let a = backend("A", Some((release.clone(), arrived_tx))).await;
    let b = backend("B", None).await;
    let target = "address 10.96.1.1:80";
    cp.answer(target, service("web", "10.96.1.1:80", &[&a.to_string()]));

    let local: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let config = Config {
        outbound_listen: local,
        inbound_listen: local,
        admin_listen: local,
        control_addr: Some(cp.addr.to_string()),
        ..Config::default()
    };
    let app = App::build(
        config,
        Arc::new(Fixed("10.96.1.1:80".parse().expect("vip"))),
    )
    .expect("the proxy starts in control-plane mode");
    let (outbound, admin) = (app.outbound_addr(), app.admin_addr());
    tokio::spawn(app.run(std::future::pending()));

    let first = tokio::spawn(get(outbound, "web", "/"));
    arrived.await.expect("the first request reaches A");
    let endpoints = || async { get(admin, "admin", "/endpoints").await };
    let listed: serde_json::Value = serde_json::from_str(body(&endpoints().await)).expect("JSON");
    assert_eq!(listed[0]["address"], a.to_string());
    assert_eq!(listed[0]["in_flight"], 1);

    cp.answer(target, service("web", "10.96.1.1:80", &[&b.to_string()]));
    let mut only_b = false;
    let b_text = b.to_string();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !only_b {
        assert!(tokio::time::Instant::now() < deadline, "B never replaced A");
        let listed: serde_json::Value =
            serde_json::from_str(body(&endpoints().await)).expect("JSON");
        only_b = listed
            .as_array()
            .is_some_and(|l| l.len() == 1 && l[0]["address"] == b_text);
        if only_b {
            let e = &listed[0];
            assert_eq!(e["service"], "web.default");
            assert_eq!(e["state"], "ready");
            assert_eq!(e["in_flight"], 0);
            assert!(e["latency_ewma_ms"].is_f64());
            assert_eq!(
                e.as_object().map(|o| o.len()),
                Some(5),
                "exactly the documented keys"
            );
        }
    }
    for _ in 0..5 {
        assert_eq!(body(&get(outbound, "web", "/").await), "B");
    }
    release.notify_one();
    let first = first.await.expect("the first request completes");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert_eq!(body(&first), "A");

    let ready = get(admin, "admin", "/ready").await;
    assert!(
        ready.starts_with("HTTP/1.1 200") && body(&ready) == "ready\n",
        "{ready}"
    );
    let config: serde_json::Value =
        serde_json::from_str(body(&get(admin, "admin", "/config").await)).expect("JSON");
    assert_eq!(config["control"]["link"], "connected");
}
