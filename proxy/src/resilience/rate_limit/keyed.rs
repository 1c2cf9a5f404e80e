//! `KeyedBuckets`: a token bucket per key in a fixed table, so a flood of keys cannot grow
//! memory.

use std::{
    hash::{Hash, RandomState},
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
};

use super::{hash_key, now_nanos, Rate, RetryAfter};

const TIME_BITS: u32 = 48;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;

/// A bucket per key in a fixed table of slots, each one `AtomicU64` packing a 16-bit key
/// fingerprint and 48 bits of the bucket's theoretical arrival time (nanoseconds, wrapping every
/// 78 hours; only distances under 2^46 ns are ever compared).
///
/// A key may live in either of two slots picked by its hash. A new key takes the one whose
/// bucket is closer to full: a full bucket is the same as a fresh one, so evicting an idle key
/// loses nothing; only a flood that fills both slots with busy keys resets a busy bucket, which
/// errs towards admitting (and is counted in [`KeyedBuckets::evictions`]).
#[derive(Debug)]
pub struct KeyedBuckets {
    slots: Box<[AtomicU64]>,
    rate: Rate,
    seed: RandomState,
    evictions: AtomicUsize,
}

impl KeyedBuckets {
    /// `rps` and `burst` per key, in a table of `slots` keys (at least 1).
    pub fn new(rps: f64, burst: u32, slots: usize) -> Self {
        Self {
            slots: (0..slots.max(1)).map(|_| AtomicU64::new(0)).collect(),
            rate: Rate::new(rps, burst),
            seed: RandomState::new(),
            evictions: AtomicUsize::new(0),
        }
    }

    /// Takes a token from `key`'s bucket, or says how long until one is due.
    pub fn check(&self, key: &(impl Hash + ?Sized)) -> Result<(), RetryAfter> {
        let h = hash_key(&self.seed, &key);
        let fingerprint = ((h >> TIME_BITS) as u16).max(1);
        let candidates = self.candidates(h);
        let now = now_nanos() & TIME_MASK;
        loop {
            let [a, b] = candidates.map(|i| (i, self.slots[i].load(Ordering::Acquire)));
            let (i, cur, ahead) = match (fp(a.1) == fingerprint, fp(b.1) == fingerprint) {
                (true, _) => (a.0, a.1, self.ahead(a.1, now)),
                (_, true) => (b.0, b.1, self.ahead(b.1, now)),
                _ => {
                    let (i, cur) = if self.ahead(a.1, now) <= self.ahead(b.1, now) {
                        a
                    } else {
                        b
                    };
                    if self.ahead(cur, now) > 0 {
                        self.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                    (i, cur, 0)
                }
            };
            let ahead = self.rate.admit(ahead)?;
            let next = (u64::from(fingerprint) << TIME_BITS) | ((now + ahead) & TIME_MASK);
            if self.slots[i]
                .compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(());
            }
        }
    }

    /// The two slots a key with hash `h` may live in, distinct whenever the table has two: a key
    /// whose two picks coincided would evict whatever sat there, however busy (1 key in
    /// `slots²`).
    pub(super) fn candidates(&self, h: u64) -> [usize; 2] {
        let n = self.slots.len();
        let first = (h as usize) % n;
        let second = ((h >> 24) as usize) % n;
        if second == first {
            [first, (first + 1) % n]
        } else {
            [first, second]
        }
    }

    /// Busy buckets reset to make room for another key (a sign the table is too small).
    pub fn evictions(&self) -> usize {
        self.evictions.load(Ordering::Relaxed)
    }

    /// How far the slot's arrival time is past `now`; `0` when in the past (a full bucket).
    fn ahead(&self, slot: u64, now: u64) -> u64 {
        let ahead = (slot & TIME_MASK).wrapping_sub(now) & TIME_MASK;
        // Stored times are never more than the tolerance ahead, so a larger distance is a time
        // in the past seen through the wrap.
        if ahead <= self.rate.tolerance {
            ahead
        } else {
            0
        }
    }
}

fn fp(slot: u64) -> u16 {
    (slot >> TIME_BITS) as u16
}
