//! The byte splice behind every tunnel (opaque TCP relays, upgraded connections such as a
//! WebSocket): copies both ways, ends both sides once no byte moved either way for the idle
//! timeout, counts the client side's bytes as they move and the close by how it ended; and the
//! request extension that carries an upgrade's idle timeout and route series to its splice.

use std::{cell::Cell, future::Future, io, sync::Arc, time::Duration};

use http::request::Parts;
use metrics::Counter;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{
    metrics::{RouteMetrics, TcpEnd, TcpMetrics},
    resilience::idle::IdleClock,
    transport::tap::{Tap, Tapped},
};

/// What an upgrade request's splice keeps (request extension): the idle timeout, and the
/// route whose `weir_tunnel*` series count the tunnel.
#[derive(Debug, Clone)]
pub struct Tunnel {
    pub idle: Option<Duration>,
    pub route: Option<Arc<RouteMetrics>>,
}

/// Marks an upgrade or CONNECT request (as `conn::handle` marked it) with its idle timeout and
/// route series; other requests are left untouched, so they pay for no extensions map.
pub fn for_upgrade(parts: &mut Parts, idle: Option<Duration>, route: Option<&Arc<RouteMetrics>>) {
    if (idle.is_some() || route.is_some()) && crate::http::headers::marked_to_tunnel(parts) {
        parts.extensions.insert(Tunnel {
            idle,
            route: route.cloned(),
        });
    }
}

/// How a splice ended.
#[derive(Debug)]
pub enum Spliced {
    /// Both sides finished cleanly.
    Eof,
    /// No byte moved either way for the idle timeout.
    IdleTimeout,
    /// A read or write failed (mostly a reset); the caller resets the other side.
    Failed(io::Error),
}

impl Spliced {
    fn of(copied: io::Result<(u64, u64)>) -> Self {
        copied.map_or_else(Spliced::Failed, |_| Spliced::Eof)
    }

    /// The close's `reason`.
    pub fn end(&self) -> TcpEnd {
        match self {
            Spliced::Eof => TcpEnd::Eof,
            Spliced::IdleTimeout => TcpEnd::IdleTimeout,
            Spliced::Failed(_) => TcpEnd::Error,
        }
    }

    /// `copied` (a two-way copy) to its end or, with `clock`, until the clock expires first.
    /// The idle timeout is told by which ended, not by an error kind: a keep-alive probe that
    /// found the peer gone also fails with `TimedOut`, and that is a failure.
    async fn until_idle(
        copied: impl Future<Output = io::Result<(u64, u64)>>,
        clock: Option<&IdleClock>,
    ) -> Self {
        match clock {
            Some(clock) => tokio::select! {
                r = copied => Spliced::of(r),
                () = clock.expired() => Spliced::IdleTimeout,
            },
            None => Spliced::of(copied.await),
        }
    }
}

/// How a splice ended, and the bytes it moved on the client's side.
#[derive(Debug)]
pub struct Relayed {
    pub how: Spliced,
    /// Received from the client.
    pub received: u64,
    /// Sent to the client.
    pub sent: u64,
}

/// Copies both ways between `down` (the client's side) and `up` until both have ended (each
/// EOF passed on as a write shutdown) or one fails, or, with `idle`, until no byte moved
/// either way for that long. With `metrics`, counts `down`'s bytes as they move (a long-lived
/// tunnel shows before it ends) and the close by how it ended; the caller counts the open.
/// The caller closes (or resets) both sides. Unwatched (no metrics, no idle timeout), a splice
/// that failed reports no bytes.
pub async fn splice<A, B>(
    down: &mut A,
    up: &mut B,
    metrics: Option<&TcpMetrics>,
    idle: Option<Duration>,
) -> Relayed
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    if metrics.is_none() && idle.is_none() {
        let copied = tokio::io::copy_bidirectional(down, up).await;
        let (received, sent) = *copied.as_ref().unwrap_or(&(0, 0));
        return Relayed {
            how: Spliced::of(copied),
            received,
            sent,
        };
    }
    let clock = idle.map(|d| Arc::new(IdleClock::new(d)));
    let mut down = Tapped {
        io: down,
        tap: Moved {
            rx: metrics.map_or(Counter::noop(), |m| m.rx.clone()),
            tx: metrics.map_or(Counter::noop(), |m| m.tx.clone()),
            received: Cell::new(0),
            sent: Cell::new(0),
            clock: clock.clone(),
        },
    };
    let copied = tokio::io::copy_bidirectional(&mut down, up);
    let how = Spliced::until_idle(copied, clock.as_deref()).await;
    if let Some(m) = metrics {
        m.closed(how.end());
    }
    Relayed {
        how,
        received: down.tap.received.get(),
        sent: down.tap.sent.get(),
    }
}

/// Counts the client side's bytes (received from and sent to the client: in the series, and
/// for this splice's own account) and, with an idle timeout, touches its clock: every byte
/// either way passes the client's side.
struct Moved {
    rx: Counter,
    tx: Counter,
    received: Cell<u64>,
    sent: Cell<u64>,
    clock: Option<Arc<IdleClock>>,
}

impl Tap for Moved {
    fn read(&self, n: usize) {
        self.rx.increment(n as u64);
        self.received.set(self.received.get() + n as u64);
        if let Some(c) = &self.clock {
            c.touch();
        }
    }

    fn wrote(&self, n: usize) {
        self.tx.increment(n as u64);
        self.sent.set(self.sent.get() + n as u64);
        if let Some(c) = &self.clock {
            c.touch();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn a_splice_that_keeps_moving_lives_on_and_one_that_stands_still_is_cut() {
        let (mut client, a) = tokio::io::duplex(64);
        let (b, mut server) = tokio::io::duplex(64);
        let task = tokio::spawn(async move {
            let (mut a, mut b) = (a, b);
            splice(&mut a, &mut b, None, Some(100 * MS)).await
        });
        for _ in 0..5 {
            tokio::time::sleep(60 * MS).await;
            client.write_all(b"ping").await.expect("write");
            let mut got = [0; 4];
            server.read_exact(&mut got).await.expect("spliced");
            assert_eq!(&got, b"ping");
        }
        assert!(!task.is_finished(), "300 ms of traffic, never 100 ms still");
        let r = task.await.expect("splice task");
        assert!(matches!(r.how, Spliced::IdleTimeout), "{r:?}");
        assert_eq!((r.received, r.sent), (20, 0), "five pings up, nothing down");
        let mut rest = Vec::new();
        assert_eq!(client.read_to_end(&mut rest).await.expect("closed"), 0);
    }

    #[test]
    fn only_upgrade_and_connect_requests_carry_the_timeout() {
        let (mut plain, ()) = http::Request::new(()).into_parts();
        for_upgrade(&mut plain, Some(MS), None);
        assert!(plain.extensions.get::<Tunnel>().is_none());
        let (mut up, ()) = http::Request::builder()
            .header(http::header::UPGRADE, "websocket")
            .body(())
            .expect("request")
            .into_parts();
        let (_tx, drain) = crate::drain::channel();
        up.extensions.insert(drain.clone());
        for_upgrade(&mut up, Some(MS), None);
        assert!(up.extensions.get::<Tunnel>().is_some());
        let (mut connect, ()) = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("db.test:5432")
            .body(())
            .expect("request")
            .into_parts();
        connect.extensions.insert(drain);
        for_upgrade(&mut connect, Some(MS), None);
        assert!(connect.extensions.get::<Tunnel>().is_some());
    }
}
