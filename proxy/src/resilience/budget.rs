//! Retry budget (Linkerd/Finagle semantics): retries as a ratio of recent requests, plus a floor.

use std::time::Duration;

use super::{nanos_at, now_nanos, window::SlidingCount};
use crate::model;

/// Retries per original request allowed when the service sets no budget (Linkerd's 20%).
pub const DEFAULT_RATIO: f64 = 0.2;
/// Retries per second always allowed when the service sets no budget (Linkerd's 10).
pub const DEFAULT_MIN_PER_SECOND: u32 = 10;
/// How long a request's deposit counts when the service sets no budget (Linkerd's 10 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A service's retry budget, shared by every request to it (build once per registry snapshot,
/// hold as `Arc`).
///
/// Every original request deposits `ratio` of a retry; every retry withdraws one. On top of the
/// deposits sits a reserve of `minPerSecond × ttl` retries, so a quiet service can still retry.
/// Deposits and withdrawals count for `ttl` (a sliding window in tenths), so a burst of failures
/// spends what the last `ttl` of traffic earned and no more: retry storms stay capped at
/// `ratio` of the load plus the floor.
#[derive(Debug)]
pub struct Budget {
    deposits: SlidingCount,
    withdrawals: SlidingCount,
    ratio: f64,
    reserve: f64,
}

impl Budget {
    /// From the service's `retryBudget`; `None` takes the defaults (ratio 0.2, 10/s, 10 s).
    ///
    /// Fields the policy leaves out: `ttl` defaults to 10 s; `minPerSecond` is taken as written
    /// (serde's default 0). `ttl` is clamped to 1–60 s, as Linkerd and tower do: a shorter window
    /// forgets the load it is meant to be a ratio of, a longer one lets an old burst pay for a
    /// new storm.
    pub fn new(policy: Option<&model::RetryBudget>) -> Self {
        let (ratio, min_per_second, ttl) = match policy {
            Some(p) => (
                p.ratio,
                p.min_per_second,
                p.ttl.map_or(DEFAULT_TTL, |d| d.0),
            ),
            None => (DEFAULT_RATIO, DEFAULT_MIN_PER_SECOND, DEFAULT_TTL),
        };
        let ttl = ttl.clamp(Duration::from_secs(1), Duration::from_secs(60));
        Self {
            deposits: SlidingCount::new(ttl),
            withdrawals: SlidingCount::new(ttl),
            ratio: if ratio.is_finite() {
                ratio.max(0.0)
            } else {
                0.0
            },
            reserve: f64::from(min_per_second) * ttl.as_secs_f64(),
        }
    }

    /// Records an original request (never a retry: retries must not earn retries).
    pub fn deposit(&self) {
        self.deposit_at(tokio::time::Instant::now());
    }

    /// [`deposit`](Self::deposit) for a request that began `at` (a clock read it already paid).
    pub fn deposit_at(&self, at: tokio::time::Instant) {
        self.deposits.add(nanos_at(at), 1);
    }

    /// Takes one retry from the budget; `false` means the budget is spent and the caller must
    /// answer with the failure it has (and count the exhaustion in metrics).
    ///
    /// Check and withdrawal are two atomic steps, not one: racing retries may overdraw by at most
    /// one each, which a budget of tens of retries absorbs; a lock would cost every request.
    pub fn try_withdraw(&self) -> bool {
        let now = now_nanos();
        if self.balance(now) < 1.0 {
            return false;
        }
        self.withdrawals.add(now, 1);
        true
    }

    /// Retries the budget would allow right now (for `weirctl describe` and tests).
    pub fn available(&self) -> u64 {
        self.balance(now_nanos()).max(0.0) as u64
    }

    fn balance(&self, now: u64) -> f64 {
        self.reserve + self.ratio * self.deposits.sum(now) as f64 - self.withdrawals.sum(now) as f64
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dur;

    fn budget(ratio: f64, min_per_second: u32, ttl_secs: u64) -> Budget {
        Budget::new(Some(&model::RetryBudget {
            ratio,
            min_per_second,
            ttl: Some(Dur(Duration::from_secs(ttl_secs))),
        }))
    }

    fn withdrawals_granted(b: &Budget, tries: u32) -> u32 {
        (0..tries).map(|_| u32::from(b.try_withdraw())).sum()
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_service_may_spend_its_reserve_and_no_more() {
        let b = budget(0.2, 10, 10);
        assert_eq!(withdrawals_granted(&b, 1000), 100, "10/s over 10 s");
        assert!(!b.try_withdraw());
    }

    #[tokio::test(start_paused = true)]
    async fn each_request_earns_a_ratio_of_a_retry() {
        let b = budget(0.2, 0, 10);
        assert!(!b.try_withdraw(), "no requests, no reserve, no retries");
        for _ in 0..50 {
            b.deposit();
        }
        assert_eq!(withdrawals_granted(&b, 100), 10, "20% of 50 requests");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_capped_under_a_storm_of_failures() {
        let b = budget(0.2, 10, 10);
        let mut retries = 0;
        // 1,000 requests per second for 30 s, every one of which wants three retries.
        for _ in 0..30 {
            for _ in 0..1000 {
                b.deposit();
                retries += withdrawals_granted(&b, 3);
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let per_request = f64::from(retries) / 30_000.0;
        assert!(
            (0.2..=0.25).contains(&per_request),
            "retries per request {per_request}, want about ratio 0.2 plus the 10/s floor"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn spent_budget_refills_once_the_withdrawals_age_out() {
        let b = budget(0.0, 1, 1);
        assert!(b.try_withdraw());
        assert!(!b.try_withdraw());
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(!b.try_withdraw(), "still inside the 1 s window");
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(b.try_withdraw());
    }

    #[tokio::test(start_paused = true)]
    async fn default_budget_is_twenty_percent_plus_ten_per_second_over_ten_seconds() {
        let b = Budget::default();
        assert_eq!(b.available(), 100);
        for _ in 0..100 {
            b.deposit();
        }
        assert_eq!(b.available(), 120);
    }

    #[tokio::test(start_paused = true)]
    async fn ttl_outside_one_to_sixty_seconds_is_clamped() {
        let b = budget(0.0, 1, 0);
        assert_eq!(b.available(), 1, "ttl 0 s is taken as 1 s");
        let b = budget(0.0, 1, 3600);
        assert_eq!(b.available(), 60, "ttl 1 h is taken as 60 s");
    }
}
