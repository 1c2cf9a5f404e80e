//! weir-slow-backend: an HTTP/1.1 server that answers every request `200 ok` after a fixed delay
//! (benchmark S4: a 50 ms backend). Keep-alive, one task per connection, no per-request work
//! besides the timer, so it sustains connections ÷ delay (20,000 req/s at 1,000 connections and
//! 50 ms) on a small box.
//!
//! Usage: `weir-slow-backend ADDR [DELAY_MS]` (default 50); prints `listening ADDR` when bound.
//! The accept backlog is 4,096 (tokio's default is 1,024), so a proxy opening 1,000 upstream
//! connections at once is not refused.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage("ADDR must be a socket address"));
    let delay = match args.next() {
        None => Duration::from_millis(50),
        Some(ms) => Duration::from_millis(
            ms.parse()
                .unwrap_or_else(|_| usage("DELAY_MS must be a number")),
        ),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(addr, delay))
}

fn usage(why: &str) -> ! {
    eprintln!("{why}\nusage: weir-slow-backend ADDR [DELAY_MS]");
    std::process::exit(2)
}

async fn serve(addr: SocketAddr, delay: Duration) -> std::io::Result<()> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(4096)?;
    println!("listening {}", listener.local_addr()?);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE under a connection storm: wait for some to close.
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| async move {
                tokio::time::sleep(delay).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
