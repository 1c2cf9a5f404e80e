//! A coarse process clock for bookkeeping that must not cost a syscall per request.

use std::sync::OnceLock;

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
