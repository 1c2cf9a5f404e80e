//! The picker: power of two choices, candidates drawn by weight, the cheaper one wins.

use std::{collections::HashMap, sync::Arc};

use rand::Rng;

use super::{now_nanos, with_rng, BalanceConfig, EndpointState};
use crate::{addr::EndpointAddr, model};

/// Rejection draws before falling back to a scan; enough when few endpoints are down.
const DRAW_ATTEMPTS: usize = 4;

/// A service's endpoints as of one registry snapshot. Immutable; cloning is one `Arc` bump.
#[derive(Debug, Clone, Default)]
pub struct EndpointSet {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every address, ready or not: the states a rebuild may carry over.
    all: Vec<Arc<EndpointState>>,
    /// Only these are picked.
    ready: Vec<Arc<EndpointState>>,
    /// `cumulative[i]` = weights of `ready[..=i]`, for weighted draws by binary search.
    cumulative: Vec<u64>,
}

impl EndpointSet {
    /// Builds the set for `endpoints`, reusing `prev`'s state for every address it already had,
    /// so latency estimates and backoffs survive a registry edit. Duplicate addresses merge:
    /// their weights add up and the endpoint is ready if any entry is.
    pub fn rebuild(
        prev: Option<&EndpointSet>,
        endpoints: &[model::Endpoint],
        config: &BalanceConfig,
    ) -> Self {
        let mut merged: Vec<(EndpointAddr, u32, bool)> = Vec::with_capacity(endpoints.len());
        let mut index: HashMap<EndpointAddr, usize> = HashMap::with_capacity(endpoints.len());
        for e in endpoints {
            let addr = EndpointAddr(e.address);
            let weight = e.weight.max(1);
            match index.get(&addr) {
                Some(&i) => {
                    merged[i].1 = merged[i].1.saturating_add(weight);
                    merged[i].2 |= e.ready;
                }
                None => {
                    index.insert(addr, merged.len());
                    merged.push((addr, weight, e.ready));
                }
            }
        }
        let old: HashMap<EndpointAddr, &Arc<EndpointState>> = prev
            .map(|p| p.inner.all.iter().map(|s| (s.addr(), s)).collect())
            .unwrap_or_default();
        let states = merged
            .into_iter()
            .map(|(addr, weight, ready)| match old.get(&addr) {
                Some(&state) => {
                    state.set_registry(weight, ready);
                    Arc::clone(state)
                }
                None => EndpointState::with_config(addr, weight, ready, config),
            })
            .collect();
        Self::from_states(states)
    }

    /// A set over existing states, taking their weight and ready flag as they are now.
    pub fn from_states(all: Vec<Arc<EndpointState>>) -> Self {
        let ready: Vec<_> = all.iter().filter(|s| s.is_ready()).cloned().collect();
        let cumulative = ready
            .iter()
            .scan(0u64, |sum, s| {
                *sum += u64::from(s.weight());
                Some(*sum)
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                all,
                ready,
                cumulative,
            }),
        }
    }

    /// Every endpoint in the set, ready or not.
    pub fn endpoints(&self) -> &[Arc<EndpointState>] {
        &self.inner.all
    }

    /// How many endpoints may be picked (down or not).
    pub fn ready_len(&self) -> usize {
        self.inner.ready.len()
    }

    /// Picks an endpoint with this thread's random number generator.
    ///
    /// `None` when no endpoint is ready, or every ready one is ejected by its circuit breaker.
    /// Endpoints down after connect failures are skipped,
    /// but when every ready endpoint is down the one that comes back soonest is returned anyway:
    /// one connect attempt per request beats failing every request until a backoff ends, and a
    /// failure while down does not lengthen the backoff.
    pub fn pick(&self) -> Option<&Arc<EndpointState>> {
        with_rng(|rng| self.pick_with(rng))
    }

    /// [`EndpointSet::pick`] with a given random number generator (seeded in tests).
    ///
    /// Two distinct available endpoints are drawn with probability proportional to weight and
    /// the cheaper wins, cost = latency estimate * (in flight + weight) / weight: an endpoint of
    /// weight `w` is treated as `w` replicas sharing its queue. A tie goes to the first draw, so
    /// with equal latency and load traffic splits exactly by weight, and under load requests in
    /// flight settle in proportion to weight. Otherwise latency wins, which is the point.
    pub fn pick_with<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<&Arc<EndpointState>> {
        let ready = &self.inner.ready;
        if ready.len() <= 1 {
            return ready.first().filter(|s| s.breaker_available());
        }
        let now = now_nanos();
        let Some(a) = self.draw(rng, now, [None, None]) else {
            return ready
                .iter()
                .filter(|s| s.breaker_available())
                .min_by_key(|s| s.down_until_nanos());
        };
        Some(self.cheaper_of(rng, now, a, None))
    }

    /// A pick for a retry: as [`EndpointSet::pick`], but among the endpoints other than `avoid`
    /// (the one the failed attempt went to) whenever one of them is available, so a retry never
    /// lands on the endpoint that just failed while another could take it. With no other, the
    /// ordinary pick, which may be `avoid` itself.
    pub fn pick_other(&self, avoid: Option<EndpointAddr>) -> Option<&Arc<EndpointState>> {
        with_rng(|rng| self.pick_other_with(rng, avoid))
    }

    /// [`EndpointSet::pick_other`] with a given random number generator (seeded in tests).
    pub fn pick_other_with<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        avoid: Option<EndpointAddr>,
    ) -> Option<&Arc<EndpointState>> {
        let ready = &self.inner.ready;
        let skip = avoid.and_then(|addr| ready.iter().position(|s| s.addr() == addr));
        if skip.is_none() {
            return self.pick_with(rng);
        }
        let now = now_nanos();
        match self.draw(rng, now, [skip, None]) {
            Some(a) => Some(self.cheaper_of(rng, now, a, skip)),
            None => self.pick_with(rng),
        }
    }

    /// `ready[a]` against a second draw (other than `a` and `skip`): the cheaper of the two, or
    /// `ready[a]` when there is no second.
    fn cheaper_of<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        now: u64,
        a: usize,
        skip: Option<usize>,
    ) -> &Arc<EndpointState> {
        let ready = &self.inner.ready;
        match self.draw(rng, now, [Some(a), skip]) {
            Some(b) if cheaper(&ready[b], &ready[a], now) => &ready[b],
            _ => &ready[a],
        }
    }

    /// A weighted draw among ready endpoints that are up, other than those in `exclude`.
    fn draw<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        now: u64,
        exclude: [Option<usize>; 2],
    ) -> Option<usize> {
        let Inner {
            ready, cumulative, ..
        } = &*self.inner;
        let available = |i: usize| {
            !exclude.contains(&Some(i))
                && ready[i].down_until_nanos() <= now
                && ready[i].breaker_available()
        };
        let total = cumulative.last().copied().unwrap_or(0);
        if total == 0 {
            return None;
        }
        // Rejection keeps the draw exactly weight-proportional among the available ones, at
        // O(log n) when most are available.
        for _ in 0..DRAW_ATTEMPTS {
            let r = rng.gen_range(0..total);
            let i = cumulative.partition_point(|&c| c <= r);
            if available(i) {
                return Some(i);
            }
        }
        let weight = |i: usize| cumulative[i] - if i == 0 { 0 } else { cumulative[i - 1] };
        let remaining: u64 = (0..ready.len()).filter(|&i| available(i)).map(weight).sum();
        if remaining == 0 {
            return None;
        }
        let mut r = rng.gen_range(0..remaining);
        for i in (0..ready.len()).filter(|&i| available(i)) {
            match r.checked_sub(weight(i)) {
                Some(rest) => r = rest,
                None => return Some(i),
            }
        }
        None
    }
}

/// Whether `x` costs less than `y`. An endpoint that has never answered is assumed as fast as a
/// peer that has, so a new endpoint is tried at once (weight and queue length decide) instead of
/// waiting, behind its 30 ms prior, for the fast peer's estimate to decay.
fn cheaper(x: &EndpointState, y: &EndpointState, now: u64) -> bool {
    match (x.measured_latency(now), y.measured_latency(now)) {
        (Some(lx), Some(ly)) => x.cost_at(lx) < y.cost_at(ly),
        (None, Some(ly)) => x.cost_at(ly) < y.cost_at(ly),
        (Some(lx), None) => x.cost_at(lx) < y.cost_at(lx),
        (None, None) => x.cost(now) < y.cost(now),
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap as Counts, time::Duration};

    use rand::{rngs::SmallRng, SeedableRng};
    use tokio::time::advance;

    use super::*;

    const PICKS: usize = 30_000;

    fn endpoint(port: u16, weight: u32, ready: bool) -> model::Endpoint {
        model::Endpoint {
            address: ([127, 0, 0, 1], port).into(),
            weight,
            identity: None,
            labels: Default::default(),
            ready,
        }
    }

    fn set(endpoints: &[model::Endpoint]) -> EndpointSet {
        EndpointSet::rebuild(None, endpoints, &BalanceConfig::default())
    }

    fn state(set: &EndpointSet, port: u16) -> &Arc<EndpointState> {
        set.endpoints()
            .iter()
            .find(|s| s.addr().0.port() == port)
            .expect("endpoint in set")
    }

    /// Picks per port over `PICKS` picks, without holding requests in flight.
    fn spread(set: &EndpointSet) -> Counts<u16, usize> {
        spread_of(|rng| set.pick_with(rng))
    }

    /// Picks per port over `PICKS` calls of `pick` on one seeded generator.
    fn spread_of<'a>(
        mut pick: impl FnMut(&mut SmallRng) -> Option<&'a Arc<EndpointState>>,
    ) -> Counts<u16, usize> {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = Counts::new();
        for _ in 0..PICKS {
            let picked = pick(&mut rng).expect("an endpoint");
            *counts.entry(picked.addr().0.port()).or_default() += 1;
        }
        counts
    }

    fn share(counts: &Counts<u16, usize>, port: u16) -> f64 {
        counts.get(&port).copied().unwrap_or(0) as f64 / PICKS as f64
    }

    fn assert_share(counts: &Counts<u16, usize>, port: u16, expected: f64) {
        let actual = share(counts, port);
        assert!(
            (actual - expected).abs() <= expected * 0.03,
            "port {port}: {actual} vs {expected}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn equal_latencies_split_traffic_by_weight() {
        let two = set(&[endpoint(1, 1, true), endpoint(2, 2, true)]);
        let counts = spread(&two);
        assert_share(&counts, 1, 1.0 / 3.0);
        assert_share(&counts, 2, 2.0 / 3.0);

        let three = set(&[
            endpoint(1, 1, true),
            endpoint(2, 2, true),
            endpoint(3, 3, true),
        ]);
        let counts = spread(&three);
        assert_share(&counts, 1, 1.0 / 6.0);
        assert_share(&counts, 2, 2.0 / 6.0);
        assert_share(&counts, 3, 3.0 / 6.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_endpoint_gets_far_less_traffic() {
        let set = set(&[
            endpoint(1, 1, true),
            endpoint(2, 1, true),
            endpoint(3, 1, true),
        ]);
        for (port, rtt) in [(1, 10), (2, 10), (3, 100)] {
            state(&set, port).start().finish(Duration::from_millis(rtt));
        }
        let counts = spread(&set);
        assert!(share(&counts, 3) < 0.01, "{counts:?}");
        assert_share(&counts, 1, 0.5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_endpoint_gets_its_share_beside_a_fast_one_at_once() {
        let set = set(&[endpoint(1, 1, true), endpoint(2, 2, true)]);
        // Only endpoint 1 has answered, fast; endpoint 2 (weight 2) is new.
        state(&set, 1).start().finish(Duration::from_millis(1));
        let counts = spread(&set);
        assert_share(&counts, 2, 2.0 / 3.0);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_shift_traffic_away() {
        let set = set(&[endpoint(1, 1, true), endpoint(2, 1, true)]);
        let _busy: Vec<_> = (0..3).map(|_| state(&set, 1).start()).collect();
        let counts = spread(&set);
        assert_eq!(share(&counts, 2), 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_requests_in_flight_settle_by_weight() {
        let set = set(&[endpoint(1, 1, true), endpoint(2, 2, true)]);
        let mut rng = SmallRng::seed_from_u64(7);
        let held: Vec<_> = (0..300)
            .map(|_| set.pick_with(&mut rng).expect("an endpoint").start())
            .collect();
        let light = state(&set, 1).pending();
        assert!((99..=101).contains(&light), "weight 1 holds {light} of 300");
        drop(held);
        assert_eq!(state(&set, 1).pending() + state(&set, 2).pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_endpoint_sits_out_its_backoff_then_returns() {
        let set = set(&[endpoint(1, 1, true), endpoint(2, 1, true)]);
        let failed = state(&set, 1);
        failed.connect_failed();
        assert_eq!(share(&spread(&set), 1), 0.0);
        advance(Duration::from_millis(100)).await;
        assert_share(&spread(&set), 1, 0.5);
    }

    #[tokio::test(start_paused = true)]
    async fn when_all_are_down_the_soonest_back_is_picked() {
        let set = set(&[
            endpoint(1, 1, true),
            endpoint(2, 1, true),
            endpoint(3, 1, true),
        ]);
        for (port, secs) in [(1, 5), (2, 1), (3, 3)] {
            state(&set, port).eject_for(Duration::from_secs(secs));
        }
        assert_eq!(share(&spread(&set), 2), 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_endpoint_is_picked_even_when_down() {
        let set = set(&[endpoint(1, 1, true), endpoint(2, 1, false)]);
        state(&set, 1).connect_failed();
        let picked = set.pick().expect("the only ready endpoint");
        assert_eq!(picked.addr().0.port(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn not_ready_endpoints_are_never_picked() {
        let set = set(&[
            endpoint(1, 1, true),
            endpoint(2, 5, false),
            endpoint(3, 1, true),
        ]);
        assert_eq!(share(&spread(&set), 2), 0.0);
        assert_eq!(set.ready_len(), 2);
        assert!(self::set(&[endpoint(1, 1, false)]).pick().is_none());
        assert!(self::set(&[]).pick().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_pick_never_returns_the_failed_endpoint_while_another_is_available() {
        let set = set(&[
            endpoint(1, 1, true),
            endpoint(2, 1, true),
            endpoint(3, 1, true),
        ]);
        // The endpoint that failed is by far the cheapest (a fast error), as in a 500 storm.
        for (port, rtt) in [(1, 1), (2, 50), (3, 50)] {
            state(&set, port).start().finish(Duration::from_millis(rtt));
        }
        let failed = Some(state(&set, 1).addr());
        let counts = spread_of(|rng| set.pick_other_with(rng, failed));
        assert_eq!(counts.get(&1), None, "{counts:?}");
        assert_share(&counts, 2, 0.5);

        // The others out of the running: the failed one is still better than nothing.
        state(&set, 2).eject_for(Duration::from_secs(5));
        state(&set, 3).connect_failed();
        let picked = set.pick_other(failed).expect("an endpoint");
        assert_eq!(picked.addr().0.port(), 1);
        let alone = self::set(&[endpoint(1, 1, true)]);
        let only = alone.pick_other(Some(state(&alone, 1).addr()));
        assert_eq!(only.map(|e| e.addr().0.port()), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn state_survives_a_rebuild_with_the_same_address() {
        let config = BalanceConfig::default();
        let first = set(&[endpoint(1, 1, true), endpoint(2, 1, true)]);
        let kept = Arc::clone(state(&first, 1));
        kept.start().finish(Duration::from_millis(50));
        kept.connect_failed();

        let second = EndpointSet::rebuild(
            Some(&first),
            &[endpoint(1, 3, true), endpoint(3, 1, true)],
            &config,
        );
        let after = state(&second, 1);
        assert!(Arc::ptr_eq(&kept, after));
        assert_eq!(after.weight(), 3);
        assert_eq!(after.rtt_estimate(), Duration::from_millis(50));
        assert!(after.down_for().is_some());
        assert!(second.endpoints().iter().all(|s| s.addr().0.port() != 2));

        // An address that left and came back starts afresh.
        let third = EndpointSet::rebuild(Some(&second), &[endpoint(2, 1, true)], &config);
        assert_eq!(state(&third, 2).rtt_estimate(), config.default_rtt);
    }

    #[tokio::test(start_paused = true)]
    async fn duplicate_addresses_merge_their_weights() {
        let set = set(&[
            endpoint(1, 1, true),
            endpoint(2, 1, true),
            endpoint(1, 1, false),
        ]);
        assert_eq!(set.endpoints().len(), 2);
        assert_eq!(state(&set, 1).weight(), 2);
    }
}
