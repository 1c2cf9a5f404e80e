//! The stream idle timeout's clock: when a body frame last moved in either direction of one
//! proxied stream, shared by its request and response bodies. Touching it is one clock read and
//! one relaxed store; whoever holds the stream's one timer reads it when the timer fires and
//! sleeps again for what is left, so a busy stream never re-arms a timer per frame.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use super::{nanos, now_nanos};
use crate::model::Dur;

/// The idle timeout of a stream whose route and service set none (Envoy's default too).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(300);

/// The idle timeout in force: the route's `timeouts.idle`, else the service's
/// `policy.idleTimeout`, else [`DEFAULT_IDLE`]; `0s` means none.
pub fn resolve(route: Option<Dur>, service: Option<Dur>) -> Option<Duration> {
    let d = route.or(service).map_or(DEFAULT_IDLE, |d| d.0);
    (!d.is_zero()).then_some(d)
}

/// When one stream last moved, and how long it may stand still.
#[derive(Debug)]
pub struct IdleClock {
    /// [`now_nanos`] at the last frame (or at the start).
    last: AtomicU64,
    timeout: u64,
}

impl IdleClock {
    /// A clock for a stream starting now, allowed to stand still for `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            last: AtomicU64::new(now_nanos()),
            timeout: nanos(timeout),
        }
    }

    /// A frame moved.
    pub fn touch(&self) {
        // Relaxed: a reader that misses the latest store sees an older time and just sleeps
        // again for a shorter while.
        self.last.store(now_nanos(), Ordering::Relaxed);
    }

    /// How long until the stream counts as idle if nothing moves; zero once it does.
    pub fn left(&self) -> Duration {
        let due = self
            .last
            .load(Ordering::Relaxed)
            .saturating_add(self.timeout);
        Duration::from_nanos(due.saturating_sub(now_nanos()))
    }

    /// Resolves once the stream has stood still for the whole timeout.
    pub async fn expired(&self) {
        loop {
            let left = self.left();
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_route_wins_then_the_service_then_five_minutes_and_zero_means_none() {
        let d = |ms| Some(Dur(ms * MS));
        assert_eq!(resolve(d(100), d(200)), Some(100 * MS));
        assert_eq!(resolve(None, d(200)), Some(200 * MS));
        assert_eq!(resolve(None, None), Some(DEFAULT_IDLE));
        assert_eq!(resolve(d(0), d(200)), None, "a route's 0s switches it off");
        assert_eq!(resolve(None, d(0)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_left_alone_expires_after_the_timeout() {
        let clock = IdleClock::new(500 * MS);
        let start = tokio::time::Instant::now();
        clock.expired().await;
        assert_eq!(start.elapsed(), 500 * MS);
        assert_eq!(clock.left(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn each_touch_pushes_the_expiry_back_by_the_whole_timeout() {
        let clock = std::sync::Arc::new(IdleClock::new(500 * MS));
        let start = tokio::time::Instant::now();
        let toucher = clock.clone();
        tokio::spawn(async move {
            for _ in 0..4 {
                tokio::time::sleep(400 * MS).await;
                toucher.touch();
            }
        });
        clock.expired().await;
        // Touched at 400, 800, 1200, 1600 ms: idle from 1600 ms on.
        assert_eq!(start.elapsed(), 2100 * MS);
    }
}
