//! Reconnect delays: exponential with full jitter, so proxies that lost the control plane at the
//! same moment do not all come back in the same instant.

use std::time::Duration;

/// Bounds of the reconnect backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Upper bound of the first delay.
    pub base: Duration,
    /// The bound doubles per failure up to this.
    pub max: Duration,
}

impl Default for BackoffConfig {
    /// 100 ms doubling to 10 s: a restarted control plane is found within seconds, and a dead one
    /// costs each proxy at most one attempt per 5 s on average.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

/// The delay before each reconnect of one watch stream.
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    failures: u32,
}

impl Backoff {
    /// A backoff that has seen no failure yet.
    pub fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            failures: 0,
        }
    }

    /// The bound for the next delay: `base * 2^failures`, capped at `max`.
    pub fn ceiling(&self) -> Duration {
        self.config
            .base
            .saturating_mul(1u32 << self.failures.min(31))
            .min(self.config.max)
    }

    /// The next delay, uniform in `[0, ceiling]` ("full jitter"); the ceiling then doubles.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.ceiling().mul_f64(rand::random::<f64>());
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// A message arrived: the next failure starts again from `base`.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BackoffConfig {
        BackoffConfig {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_ceiling_doubles_per_failure_up_to_the_cap() {
        let mut b = Backoff::new(config());
        let mut ceilings = vec![];
        for _ in 0..10 {
            ceilings.push(b.ceiling().as_millis());
            let _ = b.next_delay();
        }
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
    }

    #[test]
    fn every_delay_is_within_its_ceiling_and_they_vary() {
        let mut b = Backoff::new(config());
        for _ in 0..20 {
            let _ = b.next_delay();
        }
        let delays: Vec<Duration> = (0..200).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(10)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 100, "full jitter spreads the delays");
    }

    #[test]
    fn a_reset_starts_again_from_the_base() {
        let mut b = Backoff::new(config());
        for _ in 0..5 {
            let _ = b.next_delay();
        }
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(100));
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
