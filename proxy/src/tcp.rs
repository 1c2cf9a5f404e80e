//! Opaque TCP: splice the client to the upstream, byte for byte, honouring half-close.

use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
};

use crate::{addr::EndpointAddr, metrics::TcpMetrics};

/// Relays until both directions are closed; each side's EOF is passed on as a write shutdown,
/// so a client that half-closes still gets the rest of the server's answer.
pub async fn relay(
    mut downstream: impl AsyncRead + AsyncWrite + Unpin,
    mut upstream: TcpStream,
    metrics: &TcpMetrics,
) -> std::io::Result<()> {
    metrics.opened.increment(1);
    let result = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await;
    metrics.closed.increment(1);
    match result {
        Ok((rx, tx)) => {
            metrics.rx.increment(rx);
            metrics.tx.increment(tx);
            Ok(())
        }
        Err(e) => {
            let _ = downstream.shutdown().await;
            Err(e)
        }
    }
}

/// Connects to `addr` for a relay.
pub async fn connect(
    addr: EndpointAddr,
    timeout: std::time::Duration,
) -> std::io::Result<TcpStream> {
    crate::transport::listen::connect(addr.0, timeout).await
}
