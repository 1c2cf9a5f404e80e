//! Peak-EWMA latency estimate: jumps up to a slow sample at once, decays slowly back down.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};

/// One endpoint's latency estimate in nanoseconds, updated lock-free from any thread.
///
/// Reads decay the estimate towards zero by the time since the last sample (without storing
/// it), as Finagle's and tower's do: an endpoint that was slow once, or that has never answered,
/// becomes attractive again when left alone, so it gets probed rather than starved forever.
#[derive(Debug)]
pub(super) struct PeakEwma {
    /// `f64` bits.
    estimate: AtomicU64,
    /// `now_nanos()` of the last sample (or of creation).
    stamp: AtomicU64,
    /// The default estimate is a prior, not a measurement: the first sample replaces it.
    sampled: AtomicBool,
    tau_nanos: f64,
}

impl PeakEwma {
    pub(super) fn new(default_rtt: Duration, decay: Duration, now: u64) -> Self {
        Self {
            estimate: AtomicU64::new(nanos(default_rtt).to_bits()),
            stamp: AtomicU64::new(now),
            sampled: AtomicBool::new(false),
            // A zero time constant would divide by zero; 1 ns means "no memory".
            tau_nanos: nanos(decay).max(1.0),
        }
    }

    /// Folds in one response latency.
    pub(super) fn observe(&self, rtt: Duration, now: u64) {
        let rtt = nanos(rtt);
        // `swap` hands each concurrent sample its own disjoint slice of elapsed time.
        let elapsed = now.saturating_sub(self.stamp.swap(now, Ordering::AcqRel));
        let first = !self.sampled.swap(true, Ordering::AcqRel);
        let w = self.weight_of_past(elapsed);
        self.update(|est| {
            if first || rtt > est {
                rtt
            } else {
                est * w + rtt * (1.0 - w)
            }
        });
    }

    /// Folds in a latency known only as a lower bound (the request was cut off after `at_least`):
    /// it raises the estimate, and is no sample when the estimate is already higher.
    pub(super) fn observe_at_least(&self, at_least: Duration, now: u64) {
        if nanos(at_least) > self.get(now) {
            self.observe(at_least, now);
        }
    }

    /// Adds `d` to the estimate; it decays away like any other latency.
    pub(super) fn penalize(&self, d: Duration) {
        let d = nanos(d);
        self.update(|est| est + d);
    }

    /// Whether a real response time has been observed (the estimate is more than the prior).
    pub(super) fn is_sampled(&self) -> bool {
        self.sampled.load(Ordering::Acquire)
    }

    /// The estimate at `now`, in nanoseconds.
    pub(super) fn get(&self, now: u64) -> f64 {
        // Two loads, not one snapshot: a racing sample can pair a new estimate with an old
        // stamp, which only misjudges one decay by the time between them.
        let est = f64::from_bits(self.estimate.load(Ordering::Acquire));
        let elapsed = now.saturating_sub(self.stamp.load(Ordering::Acquire));
        est * self.weight_of_past(elapsed)
    }

    fn weight_of_past(&self, elapsed_nanos: u64) -> f64 {
        (-(elapsed_nanos as f64) / self.tau_nanos).exp()
    }

    fn update(&self, f: impl Fn(f64) -> f64) {
        let mut cur = self.estimate.load(Ordering::Acquire);
        loop {
            let next = f(f64::from_bits(cur)).to_bits();
            match self.estimate.compare_exchange_weak(
                cur,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
}

fn nanos(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000_000_000;

    fn ewma() -> PeakEwma {
        PeakEwma::new(Duration::from_millis(30), Duration::from_secs(10), SEC)
    }

    fn assert_near(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() < expected * 1e-6,
            "{actual} != {expected}"
        );
    }

    #[test]
    fn starts_at_the_default_and_the_first_sample_replaces_it() {
        let e = ewma();
        assert_near(e.get(SEC), 30.0 * MS as f64);
        e.observe(Duration::from_millis(2), SEC);
        assert_near(e.get(SEC), 2.0 * MS as f64);
    }

    #[test]
    fn a_slower_sample_replaces_the_estimate_at_once() {
        let e = ewma();
        e.observe(Duration::from_millis(5), SEC);
        e.observe(Duration::from_millis(50), SEC + MS);
        assert_near(e.get(SEC + MS), 50.0 * MS as f64);
    }

    #[test]
    fn a_faster_sample_pulls_the_estimate_down_by_elapsed_time() {
        let e = ewma();
        e.observe(Duration::from_millis(100), SEC);
        // After one time constant the old estimate keeps 1/e of its weight.
        e.observe(Duration::from_millis(10), 11 * SEC);
        let w = (-1.0f64).exp();
        let expected = (100.0 * w + 10.0 * (1.0 - w)) * MS as f64;
        assert_near(e.get(11 * SEC), expected);
    }

    #[test]
    fn a_faster_sample_right_after_a_slow_one_barely_moves_it() {
        let e = ewma();
        e.observe(Duration::from_millis(100), SEC);
        e.observe(Duration::from_millis(1), SEC + MS);
        assert!(e.get(SEC + MS) > 99.0 * MS as f64);
    }

    #[test]
    fn an_idle_estimate_decays_towards_zero() {
        let e = ewma();
        e.observe(Duration::from_millis(100), SEC);
        assert_near(e.get(21 * SEC), 100.0 * MS as f64 * (-2.0f64).exp());
    }

    #[test]
    fn a_penalty_adds_to_the_estimate() {
        let e = ewma();
        e.observe(Duration::from_millis(10), SEC);
        e.penalize(Duration::from_secs(1));
        assert_near(e.get(SEC), 1010.0 * MS as f64);
    }
}
