//! Resilience building blocks: retry budget, backoff, retry decision, body replay, circuit
//! breaker, concurrency and rate limits, timeouts, gRPC status and deadline parsing.
//!
//! Each type is built once from the registry's policy when a snapshot loads, shared as `Arc`, and
//! used lock-free from every worker thread. Time is read from tokio's clock, so the tests pause it.

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod grpc;
pub mod idle;
pub mod limit;
pub mod outcome;
pub mod policy;
pub mod rate_limit;
pub mod replay;
pub mod replay_head;
pub mod retry;
pub mod timeout;
mod window;

use std::{sync::OnceLock, time::Duration};

/// Nanoseconds since a process-wide origin, on tokio's clock so that tests can pause time.
///
/// The origin sits a day before the first call (less if the monotonic clock is younger than
/// that) because a paused test runtime's clock can lag the real one; `0` stays free to mean
/// "never". The balancer's clock too.
pub(crate) fn now_nanos() -> u64 {
    nanos_at(tokio::time::Instant::now())
}

/// [`now_nanos`] for an instant already read.
pub(crate) fn nanos_at(at: tokio::time::Instant) -> u64 {
    static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
    let origin = ORIGIN.get_or_init(|| {
        let now = std::time::Instant::now();
        let past = [86_400, 3_600, 60, 1]
            .iter()
            .find_map(|&secs| now.checked_sub(Duration::from_secs(secs)))
            .unwrap_or(now);
        tokio::time::Instant::from_std(past)
    });
    nanos(at.saturating_duration_since(*origin))
}

/// A duration in whole nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
