//! The idle timeout of an upgraded (spliced) connection, e.g. a WebSocket: the route's stream
//! idle timeout carried to the splice in the request's extensions, and a splice that ends both
//! sides once no byte moved either way for that long, and says how it ended.

use std::{future::Future, io, sync::Arc, time::Duration};

use http::request::Parts;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{
    resilience::idle::IdleClock,
    transport::tap::{Tap, Tapped},
};

/// The idle timeout an upgrade request's splice keeps (request extension).
#[derive(Debug, Clone, Copy)]
pub struct SpliceIdle(pub Duration);

/// Marks an upgrade or CONNECT request (as `conn::handle` marked it) with its idle timeout; other requests are left
/// untouched, so they pay for no extensions map.
pub fn for_upgrade(parts: &mut Parts, idle: Option<Duration>) {
    if let Some(d) = idle.filter(|_| crate::http::headers::marked_to_tunnel(parts)) {
        parts.extensions.insert(SpliceIdle(d));
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

    /// `copied` (a two-way copy) to its end or, with `clock`, until the clock expires first.
    /// The idle timeout is told by which ended, not by an error kind: a keep-alive probe that
    /// found the peer gone also fails with `TimedOut`, and that is a failure.
    pub(crate) async fn until_idle(
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

/// Copies both ways between `a` and `b` until either side ends or, with `idle`, until no byte
/// moved either way for that long; both are dropped (closed) on return.
pub async fn splice<A, B>(a: A, b: B, idle: Option<SpliceIdle>) -> Spliced
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let Some(SpliceIdle(timeout)) = idle else {
        let (mut a, mut b) = (a, b);
        return Spliced::of(tokio::io::copy_bidirectional(&mut a, &mut b).await);
    };
    let clock = Arc::new(IdleClock::new(timeout));
    let mut a = Tapped {
        io: a,
        tap: Touch(clock.clone()),
    };
    let mut b = Tapped {
        io: b,
        tap: Touch(clock.clone()),
    };
    Spliced::until_idle(tokio::io::copy_bidirectional(&mut a, &mut b), Some(&clock)).await
}

/// Touches the idle clock whenever bytes arrive on either side.
struct Touch(Arc<IdleClock>);

impl Tap for Touch {
    fn read(&self, _: usize) {
        self.0.touch();
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
        let task = tokio::spawn(splice(a, b, Some(SpliceIdle(100 * MS))));
        for _ in 0..5 {
            tokio::time::sleep(60 * MS).await;
            client.write_all(b"ping").await.expect("write");
            let mut got = [0; 4];
            server.read_exact(&mut got).await.expect("spliced");
            assert_eq!(&got, b"ping");
        }
        assert!(!task.is_finished(), "300 ms of traffic, never 100 ms still");
        let r = task.await.expect("splice task");
        assert!(matches!(r, Spliced::IdleTimeout), "{r:?}");
        let mut rest = Vec::new();
        assert_eq!(client.read_to_end(&mut rest).await.expect("closed"), 0);
    }

    #[test]
    fn only_upgrade_and_connect_requests_carry_the_timeout() {
        let (mut plain, ()) = http::Request::new(()).into_parts();
        for_upgrade(&mut plain, Some(MS));
        assert!(plain.extensions.get::<SpliceIdle>().is_none());
        let (mut up, ()) = http::Request::builder()
            .header(http::header::UPGRADE, "websocket")
            .body(())
            .expect("request")
            .into_parts();
        let (_tx, drain) = crate::drain::channel();
        up.extensions.insert(drain.clone());
        for_upgrade(&mut up, Some(MS));
        assert!(up.extensions.get::<SpliceIdle>().is_some());
        let (mut connect, ()) = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("db.test:5432")
            .body(())
            .expect("request")
            .into_parts();
        connect.extensions.insert(drain);
        for_upgrade(&mut connect, Some(MS));
        assert!(connect.extensions.get::<SpliceIdle>().is_some());
    }
}
