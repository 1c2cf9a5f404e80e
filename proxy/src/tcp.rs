//! Opaque TCP: splice the client to the upstream, byte for byte, honouring half-close, and count
//! bytes as they move (a long-lived connection shows in metrics before it ends).

use std::io;

use metrics::Counter;
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    metrics::TcpMetrics,
    transport::tap::{Tap, Tapped},
};

/// Relays until both directions are closed; each side's EOF is passed on as a write shutdown,
/// so a client that half-closes still gets the rest of the server's answer.
pub async fn relay(
    downstream: impl AsyncRead + AsyncWrite + Unpin,
    mut upstream: TcpStream,
    metrics: &TcpMetrics,
) -> io::Result<()> {
    metrics.opened.increment(1);
    let mut downstream = Tapped {
        io: downstream,
        tap: ByteCounts {
            rx: metrics.rx.clone(),
            tx: metrics.tx.clone(),
        },
    };
    let result = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await;
    metrics.closed.increment(1);
    if result.is_err() {
        let _ = downstream.shutdown().await;
    }
    result.map(|_| ())
}

/// Counts the downstream side's bytes: received from and sent to the client.
struct ByteCounts {
    rx: Counter,
    tx: Counter,
}

impl Tap for ByteCounts {
    fn read(&self, n: usize) {
        self.rx.increment(n as u64);
    }

    fn wrote(&self, n: usize) {
        self.tx.increment(n as u64);
    }
}
