//! A coarse process clock: seconds since start for bookkeeping that must not cost a syscall per
//! request, and a grid that lines up housekeeping timers so they fire in one wake-up.

use std::{sync::OnceLock, time::Duration};

use tokio::time::Instant;

fn start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Seconds since the process started.
pub fn now_secs() -> u64 {
    secs_at(Instant::now())
}

/// [`now_secs`] for an instant already read.
pub fn secs_at(at: Instant) -> u64 {
    at.saturating_duration_since(start()).as_secs()
}

/// The first point at or after `at` on a grid of `step` counted from the process's start.
///
/// Timers that only check on something (is this connection quiet, are the pools tidy) fire on
/// the grid, so many of them cost one wake-up of the thread: with one timer per connection at
/// its own instant, 50 connections at 2,000 req/s woke an otherwise idle thread 200 times a
/// second, each wake-up a halt and resume of the CPU (in a VM, a trip through the host). `at`
/// is late by less than `step`; a zero step leaves it alone.
pub fn on_grid(at: Instant, step: Duration) -> Instant {
    let step_ns = step.as_nanos();
    if step_ns == 0 {
        return at;
    }
    let start = start();
    // Fits: each product is within one step of a difference of two instants, far inside u64
    // nanoseconds.
    let ns = |n: u128| Duration::from_nanos(n as u64);
    if at >= start {
        let since = (at - start).as_nanos();
        start + ns(since.div_ceil(step_ns) * step_ns)
    } else {
        // Earlier than the start the grid was counted from: a runtime whose clock was paused
        // and advanced (tests) can have set the start ahead of another runtime's clock.
        let before = (start - at).as_nanos();
        start
            .checked_sub(ns(before / step_ns * step_ns))
            .unwrap_or(at)
    }
}

/// An interval whose ticks fall on the grid of its own period (see [`on_grid`]).
pub fn grid_interval(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval_at(on_grid(Instant::now(), period), period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_on_the_grid_are_shared_and_never_early() {
        let step = Duration::from_millis(125);
        let base = start();
        for offset_ms in [0u64, 1, 124, 125, 126, 1_000, 1_001] {
            let at = base + Duration::from_millis(offset_ms);
            let g = on_grid(at, step);
            assert!(g >= at && g - at < step, "{offset_ms} ms -> {:?}", g - base);
            assert_eq!((g - base).as_nanos() % step.as_nanos(), 0);
        }
        let a = on_grid(base + Duration::from_millis(10), step);
        let b = on_grid(base + Duration::from_millis(120), step);
        assert_eq!(a, b, "two deadlines in one step fire together");
        let t = base + Duration::from_millis(7);
        assert_eq!(on_grid(t, Duration::ZERO), t);
        // Before the grid's start (another runtime's clock): still at most one step late.
        if let Some(early) = base.checked_sub(Duration::from_millis(130)) {
            let g = on_grid(early, step);
            assert_eq!(g, base - step);
            assert!(g >= early && g - early < step);
        }
    }
}
