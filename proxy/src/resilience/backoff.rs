//! Jittered exponential backoff between retry attempts.

use std::time::Duration;

use rand::Rng;

/// First backoff when the route sets none (Envoy's and Linkerd's 25 ms).
pub const DEFAULT_BASE: Duration = Duration::from_millis(25);
/// The cap is this many times the base (Envoy's rule: 25 ms base, 250 ms cap).
pub const CAP_FACTOR: u32 = 10;

/// How randomness spreads the retries of many clients that failed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[0, d)`: the widest spread, so the fewest retries land together (AWS's
    /// "full jitter"); the default.
    Full,
    /// Uniform in `[d/2, d)`: never much shorter than the exponential step.
    Equal,
}

/// The delay before retry number `n` (1 = the first retry): `min(cap, base × 2^(n-1))`, jittered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    jitter: Jitter,
}

impl Backoff {
    /// From the route's `retry.backoff` (default 25 ms), capped at ten times that, full jitter.
    pub fn new(base: Option<Duration>) -> Self {
        let base = base.unwrap_or(DEFAULT_BASE);
        Self {
            base,
            cap: base.saturating_mul(CAP_FACTOR),
            jitter: Jitter::Full,
        }
    }

    /// The same backoff with another cap (never below the base).
    pub fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap.max(self.base);
        self
    }

    /// The same backoff with another jitter.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay before retry `n`, drawn from this thread's generator.
    pub fn delay(&self, n: u32) -> Duration {
        self.delay_with(n, &mut rand::thread_rng())
    }

    /// The delay before retry `n`, drawn from `rng` (tests pass a seeded one).
    pub fn delay_with(&self, n: u32, rng: &mut impl Rng) -> Duration {
        let step = self.step(n);
        match self.jitter {
            Jitter::Full => step.mul_f64(rng.gen::<f64>()),
            Jitter::Equal => step / 2 + (step / 2).mul_f64(rng.gen::<f64>()),
        }
    }

    /// The un-jittered step before retry `n`: the upper bound of [`Backoff::delay`].
    pub fn step(&self, n: u32) -> Duration {
        let doublings = n.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << doublings).min(self.cap)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(None)
    }
}

#[cfg(test)]
mod tests {
    use rand::{rngs::StdRng, SeedableRng};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn steps_double_from_the_base_up_to_ten_times_it() {
        let b = Backoff::default();
        let steps: Vec<_> = (1..=6).map(|n| b.step(n)).collect();
        assert_eq!(
            steps,
            [25 * MS, 50 * MS, 100 * MS, 200 * MS, 250 * MS, 250 * MS]
        );
        assert_eq!(
            b.step(u32::MAX),
            250 * MS,
            "no overflow on absurd attempt numbers"
        );
    }

    #[test]
    fn full_jitter_spreads_delays_over_the_whole_step() {
        let b = Backoff::new(Some(100 * MS));
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<_> = (0..1000).map(|_| b.delay_with(1, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d < 100 * MS));
        assert!(delays.iter().any(|d| *d < 10 * MS));
        assert!(delays.iter().any(|d| *d > 90 * MS));
    }

    #[test]
    fn equal_jitter_never_waits_less_than_half_the_step() {
        let b = Backoff::new(Some(100 * MS)).with_jitter(Jitter::Equal);
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<_> = (0..1000).map(|_| b.delay_with(2, &mut rng)).collect();
        assert!(delays.iter().all(|d| (100 * MS..200 * MS).contains(d)));
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let b = Backoff::default();
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (1..=5)
                .map(|n| b.delay_with(n, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn a_cap_below_the_base_is_raised_to_the_base() {
        let b = Backoff::new(Some(100 * MS)).with_cap(MS);
        assert_eq!(b.step(5), 100 * MS);
    }
}
