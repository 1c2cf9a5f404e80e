//! Per-endpoint circuit breakers of one endpoint set: armed when the snapshot loads (kept across
//! reloads while the policy is unchanged), counted in metrics, and asked how long until an
//! endpoint is back when every one is ejected.

use std::{sync::Arc, time::Duration};

use metrics::{Counter, Gauge};

use super::EndpointSet;
use crate::{
    metrics as m,
    resilience::breaker::{BreakerPolicy, CircuitBreaker, EjectionGate, Observer, Transition},
};

impl EndpointSet {
    /// Gives every endpoint a breaker under `policy` (or takes them away with `None`). One
    /// [`EjectionGate`] per set keeps `minReadyEndpoints` in service. An endpoint whose breaker
    /// was built from the same policy keeps it, ejection and counts included; the gate learns
    /// the set's new size.
    pub fn arm_breakers(&self, policy: Option<&BreakerPolicy>, service: &str) {
        let Some(policy) = policy else {
            for s in self.endpoints() {
                s.set_breaker(None);
            }
            return;
        };
        let kept = self
            .endpoints()
            .iter()
            .filter_map(|s| s.breaker())
            .find(|b| b.policy() == policy);
        let (gate, observer) = match kept {
            Some(b) => (Arc::clone(b.gate()), b.observer().cloned()),
            None => {
                let gate = EjectionGate::new(0, policy.min_ready);
                let observer = observer(service, &gate);
                (gate, Some(observer))
            }
        };
        gate.set_endpoints(u32::try_from(self.ready_len()).unwrap_or(u32::MAX));
        for s in self.endpoints() {
            let same = s
                .breaker()
                .is_some_and(|b| Arc::ptr_eq(b.gate(), &gate) && b.policy() == policy);
            if !same {
                let b = CircuitBreaker::new(policy.clone(), Arc::clone(&gate), observer.clone());
                s.set_breaker(Some(b));
            }
        }
    }

    /// `None` while some ready endpoint takes requests (or none is ready at all); otherwise how
    /// long until the first ejection ends (zero: it is half-open, its probe in flight).
    pub fn ejected_for(&self) -> Option<Duration> {
        let mut soonest: Option<Duration> = None;
        for s in self.endpoints().iter().filter(|s| s.is_ready()) {
            // An endpoint without a breaker is never ejected.
            let b = s.breaker()?;
            if b.is_available() {
                return None;
            }
            let left = b.ejected_for().unwrap_or_default();
            soonest = Some(soonest.map_or(left, |d| d.min(left)));
        }
        soonest
    }
}

/// Counts a set's transitions (`weir_breaker_transitions_total{service, to}`) and keeps
/// `weir_endpoints_ejected{service}` at the gate's count; handles built once, here.
fn observer(service: &str, gate: &Arc<EjectionGate>) -> Observer {
    let counter = |to: &'static str| -> Counter {
        metrics::counter!(m::BREAKER_TRANSITIONS, "service" => service.to_string(), "to" => to)
    };
    let [open, half_open, closed, refused] =
        ["open", "half_open", "closed", "refused"].map(counter);
    let ejected: Gauge = metrics::gauge!(m::ENDPOINTS_EJECTED, "service" => service.to_string());
    ejected.set(0.0);
    let gate = Arc::downgrade(gate);
    Arc::new(move |t: Transition| {
        match t {
            Transition::Ejected(_) => open.increment(1),
            Transition::Probing => half_open.increment(1),
            Transition::Closed => closed.increment(1),
            Transition::EjectionRefused => refused.increment(1),
        }
        if let Some(g) = gate.upgrade() {
            ejected.set(f64::from(g.ejected()));
        }
    })
}

/// Counts a route breaker's transitions in `weir_route_breaker_transitions_total{direction,
/// service, route, to}` (`service` empty for gateway routes); handles built once, here.
pub fn route_observer(direction: &'static str, service: &str, route: &str) -> Observer {
    let counter = |to: &'static str| -> Counter {
        metrics::counter!(
            m::ROUTE_BREAKER_TRANSITIONS,
            "direction" => direction,
            "service" => service.to_string(),
            "route" => route.to_string(),
            "to" => to
        )
    };
    let [open, half_open, closed] = ["open", "half_open", "closed"].map(counter);
    Arc::new(move |t: Transition| match t {
        Transition::Ejected(_) => open.increment(1),
        Transition::Probing => half_open.increment(1),
        Transition::Closed => closed.increment(1),
        // A route breaker has no floor: its gate is unbounded.
        Transition::EjectionRefused => {}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(prev: Option<&EndpointSet>, ports: &[u16]) -> EndpointSet {
        crate::balance::loopback_set(prev, ports)
    }

    fn policy(yaml: &str) -> BreakerPolicy {
        BreakerPolicy::new(&serde_yaml::from_str(yaml).expect("valid breaker"))
    }

    fn fail(s: &EndpointSet, i: usize, n: usize) {
        for _ in 0..n {
            let f = s.endpoints()[i].start();
            let r: Result<http::Response<()>, _> =
                Ok(http::Response::builder().status(500).body(()).expect("ok"));
            f.complete(&r, Duration::from_millis(1));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_ejected_endpoint_is_skipped_and_stays_ejected_across_an_unchanged_reload() {
        let p = policy("consecutiveFailures: 2\nminReadyEndpoints: 1");
        let a = set(None, &[1, 2]);
        a.arm_breakers(Some(&p), "svc");
        fail(&a, 0, 2);
        for _ in 0..50 {
            assert_eq!(a.pick().map(|e| e.addr().0.port()), Some(2));
        }
        let b = set(Some(&a), &[1, 2, 3]);
        b.arm_breakers(Some(&p), "svc");
        assert!(!b.endpoints()[0].breaker_available(), "kept its ejection");
        let c = set(Some(&b), &[1, 2, 3]);
        c.arm_breakers(Some(&policy("consecutiveFailures: 3")), "svc");
        assert!(
            c.endpoints()[0].breaker_available(),
            "a new policy starts afresh"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_endpoint_ejected_nothing_is_picked_until_the_ejection_ends() {
        let p = policy("consecutiveFailures: 1\nminReadyEndpoints: 0\nminEjection: 2s");
        let s = set(None, &[1, 2]);
        s.arm_breakers(Some(&p), "svc");
        assert_eq!(s.ejected_for(), None);
        fail(&s, 0, 1);
        fail(&s, 1, 1);
        assert!(s.pick().is_none());
        assert_eq!(s.ejected_for(), Some(Duration::from_secs(2)));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(s.ejected_for(), None, "half-open: a probe may go");
        assert!(s.pick().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn an_upstream_429_costs_its_retry_after_in_latency_and_is_not_a_failure() {
        let p = policy("consecutiveFailures: 1");
        let s = set(None, &[1, 2]);
        s.arm_breakers(Some(&p), "svc");
        let e = &s.endpoints()[0];
        let r: Result<http::Response<()>, _> = Ok(http::Response::builder()
            .status(429)
            .header("retry-after", "2")
            .body(())
            .expect("ok"));
        e.start().complete(&r, Duration::from_millis(1));
        s.endpoints()[1].start().finish(Duration::from_millis(5));
        assert_eq!(e.rtt_estimate(), Duration::from_secs(2));
        assert!(e.breaker_available(), "throttling is no failure");
        for _ in 0..50 {
            assert_eq!(
                s.pick().map(|e| e.addr().0.port()),
                Some(2),
                "the cheaper one"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_keeps_the_last_endpoint_in_service() {
        let p = policy("consecutiveFailures: 1");
        let s = set(None, &[1, 2]);
        s.arm_breakers(Some(&p), "svc");
        fail(&s, 0, 1);
        fail(&s, 1, 3);
        assert!(s.endpoints()[1].breaker_available(), "floor of one");
        assert_eq!(s.pick().map(|e| e.addr().0.port()), Some(2));
    }
}
