//! Gives freed heap back to the OS after many connections released their buffers (keep-alives
//! parked, idle upstream connections closed): glibc keeps freed buffers in a fragmented heap at
//! its peak size, so without a trim the memory they released would stay resident.

use std::{
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::Duration,
};

/// Releases since the last trim that make another trim worth its cost (a heap walk).
const RELEASES_PER_TRIM: u64 = 128;

/// Connections that gave their buffers back since start.
static RELEASES: AtomicU64 = AtomicU64::new(0);

/// Records that `n` connections freed their buffers (parked, or closed while idle).
pub fn released(n: u64) {
    if n > 0 {
        RELEASES.fetch_add(n, Relaxed);
    }
}

/// Whether enough was released between `last` and `now` to trim.
fn worth_a_trim(last: u64, now: u64) -> bool {
    now.saturating_sub(last) >= RELEASES_PER_TRIM
}

/// Runs forever: every `every`, trims the heap if enough connections released buffers meanwhile.
pub async fn trim_after_releases(every: Duration) {
    let mut last = RELEASES.load(Relaxed);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = RELEASES.load(Relaxed);
        if worth_a_trim(last, now) {
            last = now;
            trim();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim only releases free pages of glibc's own heap; it takes no pointers
    // and is thread-safe (it locks each arena).
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_waits_for_enough_releases() {
        assert!(!worth_a_trim(10, 10 + RELEASES_PER_TRIM - 1));
        assert!(worth_a_trim(10, 10 + RELEASES_PER_TRIM));
        assert!(
            !worth_a_trim(10, 3),
            "a counter never goes back, but never underflow"
        );
    }
}
