//! Opaque TCP: splice the client to the upstream, byte for byte, honouring half-close, and count
//! bytes as they move (a long-lived connection shows in metrics before it ends); a relay idle
//! for its timeout is closed, and a reset on one side is passed on as a reset, not a clean end.

use std::{io, sync::Arc, time::Duration};

use metrics::Counter;
use tokio::net::TcpStream;

use crate::{
    metrics::TcpMetrics,
    resilience::idle::IdleClock,
    transport::{
        listen,
        prefixed::Prefixed,
        tap::{Tap, Tapped},
    },
};

/// Relays until both directions are closed; each side's EOF is passed on as a write shutdown,
/// so a client that half-closes still gets the rest of the server's answer. With `idle`, a
/// relay in which no byte moved either way for that long ends (`Err(TimedOut)`) and both sides
/// are closed. When one side fails (a reset, mostly) the other is reset too: a FIN would tell
/// it the stream ended cleanly, which a protocol framed by the close would take as complete.
pub async fn relay(
    downstream: Prefixed<TcpStream>,
    mut upstream: TcpStream,
    metrics: &TcpMetrics,
    idle: Option<Duration>,
) -> io::Result<()> {
    metrics.opened.increment(1);
    // Upstream sockets already probe; a relay may outlive a client that vanished silently.
    listen::keep_probing(downstream.get_ref());
    let clock = idle.map(|d| Arc::new(IdleClock::new(d)));
    let mut downstream = Tapped {
        io: downstream,
        tap: Moved {
            rx: metrics.rx.clone(),
            tx: metrics.tx.clone(),
            clock: clock.clone(),
        },
    };
    let copied = tokio::io::copy_bidirectional(&mut downstream, &mut upstream);
    let result = match &clock {
        Some(clock) => tokio::select! {
            r = copied => r.map(drop),
            () = clock.expired() => Err(io::Error::new(io::ErrorKind::TimedOut, "idle-timeout")),
        },
        None => copied.await.map(drop),
    };
    metrics.closed.increment(1);
    if let Err(e) = &result {
        if e.kind() != io::ErrorKind::TimedOut {
            reset_on_close(downstream.io.get_ref());
            reset_on_close(&upstream);
        }
    }
    result
}

/// Makes the socket's close send RST instead of FIN (SO_LINGER 0, which never blocks the drop).
fn reset_on_close(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Counts the downstream side's bytes (received from and sent to the client) and, with an idle
/// timeout, touches its clock: every byte either way passes the downstream side.
struct Moved {
    rx: Counter,
    tx: Counter,
    clock: Option<Arc<IdleClock>>,
}

impl Tap for Moved {
    fn read(&self, n: usize) {
        self.rx.increment(n as u64);
        if let Some(c) = &self.clock {
            c.touch();
        }
    }

    fn wrote(&self, n: usize) {
        self.tx.increment(n as u64);
        if let Some(c) = &self.clock {
            c.touch();
        }
    }
}
