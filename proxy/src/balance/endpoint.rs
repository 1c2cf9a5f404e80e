//! What one endpoint address has shown us: latency, requests in flight, connect failures.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use arc_swap::ArcSwapOption;

use super::{ewma::PeakEwma, now_nanos, unit_random, BalanceConfig, InFlight};
use crate::{addr::EndpointAddr, resilience::breaker::CircuitBreaker};

/// Per-address balancer state, shared by every worker thread and kept across registry reloads.
#[derive(Debug)]
pub struct EndpointState {
    addr: EndpointAddr,
    weight: AtomicU32,
    ready: AtomicBool,
    pub(super) ewma: PeakEwma,
    pub(super) pending: AtomicU32,
    /// `now_nanos()` until which the endpoint is skipped; `0` = up.
    down_until: AtomicU64,
    failures: AtomicU32,
    backoff_base: Duration,
    backoff_max: Duration,
    /// The service policy's breaker for this endpoint, if it has one (swapped on reload).
    breaker: ArcSwapOption<CircuitBreaker>,
    /// Whether `breaker` is set: a relaxed load instead of an `ArcSwap` one when it is not.
    armed: AtomicBool,
}

impl EndpointState {
    /// New state with the default [`BalanceConfig`].
    pub fn new(addr: EndpointAddr, weight: u32, ready: bool) -> Arc<Self> {
        Self::with_config(addr, weight, ready, &BalanceConfig::default())
    }

    /// New state; `weight` 0 counts as 1 (an endpoint in the set always gets a share).
    pub fn with_config(
        addr: EndpointAddr,
        weight: u32,
        ready: bool,
        config: &BalanceConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            addr,
            weight: AtomicU32::new(weight.max(1)),
            ready: AtomicBool::new(ready),
            ewma: PeakEwma::new(config.default_rtt, config.decay, now_nanos()),
            pending: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            backoff_base: config.backoff_base,
            backoff_max: config.backoff_max,
            breaker: ArcSwapOption::empty(),
            armed: AtomicBool::new(false),
        })
    }

    /// The endpoint's circuit breaker, when the service's policy has one.
    pub fn breaker(&self) -> Option<Arc<CircuitBreaker>> {
        if !self.armed.load(Ordering::Relaxed) {
            return None;
        }
        self.breaker.load_full()
    }

    pub(super) fn set_breaker(&self, breaker: Option<Arc<CircuitBreaker>>) {
        self.armed.store(breaker.is_some(), Ordering::Relaxed);
        self.breaker.store(breaker);
    }

    /// Whether the breaker lets a request through now (no breaker: always).
    pub fn breaker_available(&self) -> bool {
        !self.armed.load(Ordering::Relaxed)
            || self
                .breaker
                .load()
                .as_ref()
                .is_none_or(|b| b.is_available())
    }

    /// The address this state describes.
    pub fn addr(&self) -> EndpointAddr {
        self.addr
    }

    /// Effective weight, at least 1.
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// Whether the registry says this endpoint may receive traffic.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Applies the registry's latest word on this address (on reload).
    pub(super) fn set_registry(&self, weight: u32, ready: bool) {
        self.weight.store(weight.max(1), Ordering::Relaxed);
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Counts a request as in flight until the returned guard is finished or dropped.
    /// With a breaker, the request is admitted by it: on a half-open endpoint the first request
    /// to start is the probe (a request racing it goes on uncounted).
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let admission = if self.armed.load(Ordering::Relaxed) {
            self.breaker.load().as_ref().and_then(|b| b.try_admit())
        } else {
            None
        };
        InFlight::new(Arc::clone(self), admission)
    }

    /// Requests currently in flight.
    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::Acquire)
    }

    /// The current (decayed) latency estimate.
    pub fn rtt_estimate(&self) -> Duration {
        Duration::from_secs_f64(self.ewma.get(now_nanos()).max(0.0) / 1e9)
    }

    /// Adds a latency penalty (e.g. for a 429 or `Retry-After`), which decays like a sample.
    pub fn penalize(&self, d: Duration) {
        self.ewma.penalize(d);
    }

    /// Takes the endpoint out for an exponential, jittered backoff.
    ///
    /// A failure while already down is ignored: it belongs to a connect launched before the
    /// endpoint was marked (one outage fails every racing connect at once and must count once).
    pub fn connect_failed(&self) {
        let now = now_nanos();
        let current = self.down_until.load(Ordering::Acquire);
        if current > now {
            return;
        }
        let failures = self.failures.load(Ordering::Acquire).saturating_add(1);
        let until = now.saturating_add(nanos_u64(self.backoff(failures)));
        // Of several racing failures only the one that moves `down_until` counts.
        if self
            .down_until
            .compare_exchange(current, until, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.failures.store(failures, Ordering::Release);
        }
    }

    /// Clears the failure count: the endpoint is reachable again.
    pub fn connect_succeeded(&self) {
        // Connects succeed far more often than they fail; skip the writes when nothing changes.
        if self.failures.load(Ordering::Acquire) != 0 {
            self.failures.store(0, Ordering::Release);
            self.down_until.store(0, Ordering::Release);
        }
    }

    /// Skips the endpoint for at least `d` (for outlier ejection) without touching the
    /// connect-failure backoff.
    pub fn eject_for(&self, d: Duration) {
        let until = now_nanos().saturating_add(nanos_u64(d));
        self.down_until.fetch_max(until, Ordering::AcqRel);
    }

    /// Connect failures since the last success (counting once per backoff period).
    pub fn consecutive_failures(&self) -> u32 {
        self.failures.load(Ordering::Acquire)
    }

    /// How much longer the endpoint is skipped, or `None` when it is up.
    pub fn down_for(&self) -> Option<Duration> {
        let left = self.down_until_nanos().checked_sub(now_nanos())?;
        (left > 0).then(|| Duration::from_nanos(left))
    }

    pub(super) fn down_until_nanos(&self) -> u64 {
        self.down_until.load(Ordering::Acquire)
    }

    /// Expected wait for one more request: latency times queue length, where an endpoint of
    /// weight `w` counts as `w` replicas sharing its requests. Equal latency and load thus tie,
    /// whatever the weights, and under load requests settle in proportion to weight.
    pub(super) fn cost(&self, now: u64) -> f64 {
        self.cost_at(self.ewma.get(now))
    }

    /// The cost with a given latency estimate (nanoseconds).
    pub(super) fn cost_at(&self, latency: f64) -> f64 {
        let w = f64::from(self.weight());
        latency * (f64::from(self.pending()) + w) / w
    }

    /// The measured latency estimate, or `None` while only the prior stands.
    pub(super) fn measured_latency(&self, now: u64) -> Option<f64> {
        self.ewma.is_sampled().then(|| self.ewma.get(now))
    }

    /// Base doubling per failure, capped, then "equal jitter": uniform in `[b/2, b]`, so that
    /// proxies which saw the same outage do not all come back in the same instant.
    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        let b = self
            .backoff_base
            .saturating_mul(1u32 << doublings)
            .min(self.backoff_max);
        b.mul_f64(0.5 + 0.5 * unit_random())
    }
}

fn nanos_u64(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    fn endpoint() -> Arc<EndpointState> {
        EndpointState::new(EndpointAddr(([127, 0, 0, 1], 8080).into()), 1, true)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_counts_until_finished_or_dropped() {
        let e = endpoint();
        let a = e.start();
        let b = e.start();
        assert_eq!(e.pending(), 2);
        a.finish(ms(7));
        assert_eq!(e.pending(), 1);
        assert_eq!(e.rtt_estimate(), ms(7));
        drop(b);
        assert_eq!(e.pending(), 0);
        assert_eq!(e.rtt_estimate(), ms(7), "a cancelled request is no sample");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_failure_takes_the_endpoint_out_for_the_backoff() {
        let e = endpoint();
        e.connect_failed();
        let down = e.down_for().expect("down after a failure");
        assert!(down >= ms(50) && down <= ms(100), "{down:?}");
        advance(down - Duration::from_nanos(1)).await;
        assert!(e.down_for().is_some());
        advance(Duration::from_nanos(1)).await;
        assert_eq!(e.down_for(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_per_failure_and_is_capped() {
        let e = endpoint();
        for n in 1..=12u32 {
            e.connect_failed();
            let full = ms(100)
                .saturating_mul(1 << (n - 1))
                .min(Duration::from_secs(30));
            let down = e.down_for().expect("down after a failure");
            assert!(down >= full / 2 && down <= full, "failure {n}: {down:?}");
            assert_eq!(e.consecutive_failures(), n);
            advance(down).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failures_while_down_count_once() {
        let e = endpoint();
        for _ in 0..10 {
            e.connect_failed();
        }
        assert_eq!(e.consecutive_failures(), 1);
        assert!(e.down_for().is_some_and(|d| d <= ms(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_success_clears_the_backoff() {
        let e = endpoint();
        e.connect_failed();
        advance(ms(100)).await;
        e.connect_failed();
        e.connect_succeeded();
        assert_eq!(e.down_for(), None);
        assert_eq!(e.consecutive_failures(), 0);
        e.connect_failed();
        assert!(
            e.down_for().is_some_and(|d| d <= ms(100)),
            "backoff restarts"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ejection_keeps_the_longer_deadline() {
        let e = endpoint();
        e.eject_for(Duration::from_secs(5));
        e.eject_for(Duration::from_secs(1));
        assert_eq!(e.down_for(), Some(Duration::from_secs(5)));
        assert_eq!(e.consecutive_failures(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn cost_grows_with_pending_and_treats_weight_as_replicas() {
        let light = endpoint();
        let heavy = EndpointState::new(light.addr(), 2, true);
        let now = now_nanos();
        assert_eq!(light.cost(now), heavy.cost(now), "idle endpoints tie");
        let _a = light.start();
        let _b = heavy.start();
        let _c = heavy.start();
        // One request on a weight-1 endpoint weighs like two on a weight-2 one.
        assert_eq!(light.cost(now), heavy.cost(now));
        assert!(light.cost(now) > EndpointState::new(light.addr(), 1, true).cost(now));
    }

    #[test]
    fn weight_zero_counts_as_one() {
        let e = EndpointState::new(EndpointAddr(([127, 0, 0, 1], 1).into()), 0, true);
        assert_eq!(e.weight(), 1);
    }

    #[test]
    fn worker_threads_share_one_count() {
        let e = endpoint();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for i in 0..1_000u64 {
                        let guard = e.start();
                        if i % 2 == 0 {
                            guard.finish(Duration::from_micros(i));
                        }
                    }
                });
            }
        });
        assert_eq!(e.pending(), 0);
        // Real time passes here, so allow the peak a little decay.
        assert!(e.rtt_estimate() >= Duration::from_micros(990));
    }
}
