//! Opaque TCP: splice the client to the upstream, byte for byte, honouring half-close, and count
//! bytes as they move (a long-lived connection shows in metrics before it ends).

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use metrics::Counter;
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
};

use crate::metrics::TcpMetrics;

/// Relays until both directions are closed; each side's EOF is passed on as a write shutdown,
/// so a client that half-closes still gets the rest of the server's answer.
pub async fn relay(
    downstream: impl AsyncRead + AsyncWrite + Unpin,
    mut upstream: TcpStream,
    metrics: &TcpMetrics,
) -> io::Result<()> {
    metrics.opened.increment(1);
    let mut downstream = Counted {
        io: downstream,
        rx: metrics.rx.clone(),
        tx: metrics.tx.clone(),
    };
    let result = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await;
    metrics.closed.increment(1);
    if result.is_err() {
        let _ = downstream.shutdown().await;
    }
    result.map(|_| ())
}

/// The downstream side, counting bytes received from and sent to the client.
struct Counted<T> {
    io: T,
    rx: Counter,
    tx: Counter,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.rx.increment(n as u64);
        }
        res
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = res {
            self.tx.increment(n as u64);
        }
        res
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
