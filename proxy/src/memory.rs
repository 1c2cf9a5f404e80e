//! Gives freed heap back to the OS after many connections released their buffers (keep-alives
//! parked, idle upstream connections closed): the allocator keeps freed pages for reuse, so
//! without a collection the memory they released would stay resident.

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

/// Ticks a burst of releases may keep going before the heap is trimmed anyway.
const MAX_WAIT_TICKS: u32 = 4;

/// Decides when to trim, one tick at a time.
#[derive(Debug, Default)]
struct TrimClock {
    /// The release count at the last trim.
    trimmed_at: u64,
    /// The release count at the previous tick.
    previous: u64,
    /// Ticks since enough releases piled up.
    waited: u32,
}

impl TrimClock {
    /// Whether to trim now, given the release count: once enough connections were released
    /// since the last trim and the releases have stopped for a tick (the burst is over and
    /// its memory freed), or after [`MAX_WAIT_TICKS`] of a burst that goes on.
    fn tick(&mut self, now: u64) -> bool {
        let settled = now == self.previous;
        self.previous = now;
        if now.saturating_sub(self.trimmed_at) < RELEASES_PER_TRIM {
            self.waited = 0;
            return false;
        }
        self.waited += 1;
        if settled || self.waited >= MAX_WAIT_TICKS {
            self.trimmed_at = now;
            self.waited = 0;
            return true;
        }
        false
    }
}

/// Runs forever: every `every`, trims the heap if enough connections released buffers and the
/// releases have settled (see `TrimClock::tick`).
pub async fn trim_after_releases(every: Duration) {
    let start = RELEASES.load(Relaxed);
    let mut clock = TrimClock {
        trimmed_at: start,
        previous: start,
        waited: 0,
    };
    let mut tick = crate::clock::grid_interval(every);
    loop {
        tick.tick().await;
        if clock.tick(RELEASES.load(Relaxed)) {
            trim();
        }
    }
}

#[allow(unsafe_code)]
fn trim() {
    // SAFETY: frees the pages of mimalloc's own heaps that hold no live block; takes no
    // pointers and is thread-safe.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_waits_for_enough_releases_and_for_them_to_settle() {
        let mut c = TrimClock::default();
        assert!(!c.tick(RELEASES_PER_TRIM - 1), "not enough released");
        assert!(!c.tick(RELEASES_PER_TRIM + 10), "still releasing");
        assert!(c.tick(RELEASES_PER_TRIM + 10), "settled: trim");
        assert!(
            !c.tick(RELEASES_PER_TRIM + 10),
            "nothing new since the trim"
        );
        assert!(!c.tick(RELEASES_PER_TRIM + 20), "too few since the trim");
    }

    #[test]
    fn a_burst_that_goes_on_is_trimmed_after_a_few_ticks() {
        let mut c = TrimClock::default();
        let trims: Vec<bool> = (1..=MAX_WAIT_TICKS as u64 + 1)
            .map(|i| c.tick(i * RELEASES_PER_TRIM))
            .collect();
        let mut want = vec![false; MAX_WAIT_TICKS as usize];
        want.push(false);
        want[MAX_WAIT_TICKS as usize - 1] = true;
        assert_eq!(
            trims, want,
            "the fourth tick of a steady stream of releases trims"
        );
    }
}
