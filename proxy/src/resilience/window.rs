//! A sliding window of counts, bucketed and lock-free: how many events in the last `span`.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use super::nanos;

/// Buckets per window: the window slides in steps of a tenth of its span.
const BUCKETS: u64 = 10;

/// Counts events over the last `span` (between nine and ten tenths of it, as the oldest bucket
/// rolls off whole).
///
/// Each bucket is one `AtomicU64` packing the bucket's generation (high 32 bits, wrapping) and its
/// count (low 32 bits, saturating), so reusing a stale bucket and counting into it is one CAS:
/// no lock, and no count lost to a reset racing an increment.
#[derive(Debug)]
pub(crate) struct SlidingCount {
    slots: [AtomicU64; BUCKETS as usize],
    bucket_nanos: u64,
}

impl SlidingCount {
    /// A window of `span` (at least 10 ns).
    pub(crate) fn new(span: Duration) -> Self {
        Self {
            slots: Default::default(),
            bucket_nanos: (nanos(span) / BUCKETS).max(1),
        }
    }

    fn generation(&self, now: u64) -> (u32, usize) {
        let full = now / self.bucket_nanos;
        // Truncation is the wrap: generations are only ever compared a few buckets apart.
        (full as u32, (full % BUCKETS) as usize)
    }

    /// Counts `n` events at time `now` (nanoseconds on the resilience clock).
    pub(crate) fn add(&self, now: u64, n: u32) {
        let (gen, i) = self.generation(now);
        let slot = &self.slots[i];
        let mut cur = slot.load(Ordering::Acquire);
        loop {
            let (slot_gen, count) = unpack(cur);
            let next = if slot_gen == gen {
                pack(gen, count.saturating_add(n))
            } else if (gen.wrapping_sub(slot_gen) as i32) > 0 {
                pack(gen, n)
            } else {
                // The bucket already moved on: this event is older than the window's newest
                // bucket by a whole lap, and belongs to no bucket still counted.
                return;
            };
            match slot.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Events counted in the window ending at `now`.
    pub(crate) fn sum(&self, now: u64) -> u64 {
        let (gen, _) = self.generation(now);
        self.slots
            .iter()
            .map(|s| unpack(s.load(Ordering::Acquire)))
            .filter(|(g, _)| u64::from(gen.wrapping_sub(*g)) < BUCKETS)
            .map(|(_, c)| u64::from(c))
            .sum()
    }

    /// Forgets every count (a breaker closing starts its success rate afresh).
    pub(crate) fn clear(&self) {
        for s in &self.slots {
            s.store(0, Ordering::Release);
        }
    }
}

fn pack(gen: u32, count: u32) -> u64 {
    (u64::from(gen) << 32) | u64::from(count)
}

fn unpack(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn counts_stay_in_the_window_until_their_bucket_rolls_off() {
        let w = SlidingCount::new(Duration::from_secs(10));
        w.add(100 * SEC, 3);
        w.add(105 * SEC, 2);
        assert_eq!(w.sum(105 * SEC), 5);
        assert_eq!(w.sum(109 * SEC), 5);
        assert_eq!(
            w.sum(110 * SEC),
            2,
            "the bucket of t=100 s rolled off at t=110 s"
        );
        assert_eq!(w.sum(115 * SEC), 0);
    }

    #[test]
    fn a_reused_bucket_starts_from_zero() {
        let w = SlidingCount::new(Duration::from_secs(10));
        w.add(100 * SEC, 7);
        w.add(110 * SEC, 1);
        assert_eq!(w.sum(110 * SEC), 1);
    }

    #[test]
    fn an_event_a_lap_late_is_dropped_rather_than_counted_in_a_newer_bucket() {
        let w = SlidingCount::new(Duration::from_secs(10));
        w.add(110 * SEC, 1);
        w.add(100 * SEC, 5);
        assert_eq!(w.sum(110 * SEC), 1);
    }

    #[test]
    fn clear_forgets_everything() {
        let w = SlidingCount::new(Duration::from_secs(10));
        w.add(100 * SEC, 4);
        w.clear();
        assert_eq!(w.sum(100 * SEC), 0);
    }
}
