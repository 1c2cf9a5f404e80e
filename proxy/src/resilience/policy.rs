//! The registry's policy compiled for the request path when a snapshot loads: one
//! [`ServicePolicy`] per service and one [`RoutePolicy`] per route. Stateful parts (budget,
//! limits, breakers) are reused from the previous snapshot when their policy did not change, so an
//! unrelated edit does not reset them.

use std::sync::Arc;

use crate::model;

use super::{
    breaker::{BreakerPolicy, CircuitBreaker, EjectionGate, Observer},
    budget::Budget,
    limit::ConcurrencyLimit,
    rate_limit::RateLimiter,
    retry::RetryRule,
    timeout::Timeouts,
};

/// A service's policy, compiled.
#[derive(Debug)]
pub struct ServicePolicy {
    /// The model it was built from (to tell whether a reload changed it).
    pub source: model::Policy,
    /// Retry budget shared by every route to the service.
    pub budget: Arc<Budget>,
    /// `maxConcurrentRequests` / `maxPendingRequests`; `None` when neither is set.
    pub limit: Option<Arc<ConcurrencyLimit>>,
    /// Service-wide rate limit.
    pub rate_limit: Option<Arc<RateLimiter>>,
    /// Per-endpoint breaker settings (the breakers live with the endpoints' balancer state).
    pub breaker: Option<BreakerPolicy>,
    /// How long a request waits for a ready endpoint before 503.
    pub failfast: std::time::Duration,
}

/// One route's policy, compiled.
#[derive(Debug)]
pub struct RoutePolicy {
    /// The route it was built from.
    pub source: model::Route,
    /// Request and per-try timeouts (the service's `timeout` is the request default).
    pub timeouts: Timeouts,
    /// When and how often to retry.
    pub retry: RetryRule,
    /// Route rate limit.
    pub rate_limit: Option<Arc<RateLimiter>>,
    /// Route breaker: open, every request on the route fails fast; other routes are unaffected.
    pub breaker: Option<Arc<CircuitBreaker>>,
    /// Fields the route's `RequestHeaderModifier`s set or remove: a request trailer may not
    /// bring them back (`http/trailers.rs`).
    pub trailer_drops: Arc<[http::HeaderName]>,
}

/// Default failfast wait when the policy sets none.
pub const DEFAULT_FAILFAST: std::time::Duration = std::time::Duration::from_secs(1);

impl ServicePolicy {
    /// Compiles `policy`, reusing `prev` whole when it was built from the same policy.
    pub fn build(policy: &model::Policy, prev: Option<&Arc<ServicePolicy>>) -> Arc<ServicePolicy> {
        if let Some(p) = prev.filter(|p| p.source == *policy) {
            return p.clone();
        }
        let limit = (policy.max_concurrent_requests.is_some()
            || policy.max_pending_requests.is_some())
        .then(|| Arc::new(ConcurrencyLimit::new(policy)));
        Arc::new(ServicePolicy {
            source: policy.clone(),
            budget: Arc::new(Budget::new(policy.retry_budget.as_ref())),
            limit,
            // Validated when the registry loads; a limiter that still fails to build is left off
            // rather than failing the whole snapshot.
            rate_limit: policy
                .rate_limit
                .as_ref()
                .and_then(|r| RateLimiter::new(r).ok())
                .map(Arc::new),
            breaker: policy.circuit_breaker.as_ref().map(BreakerPolicy::new),
            failfast: policy.failfast.map_or(DEFAULT_FAILFAST, |d| d.0),
        })
    }
}

impl RoutePolicy {
    /// Compiles `route` under `service_timeout`, reusing `prev` when nothing it depends on changed.
    /// `observer` is asked for only when a new route breaker is made (it counts its transitions).
    pub fn build(
        route: &model::Route,
        service_timeout: Option<model::Dur>,
        prev: Option<&Arc<RoutePolicy>>,
        observer: impl FnOnce() -> Option<Observer>,
    ) -> Arc<RoutePolicy> {
        let timeouts = Timeouts::new(route.timeouts.as_ref(), service_timeout);
        if let Some(p) = prev.filter(|p| p.source == *route && p.timeouts == timeouts) {
            return p.clone();
        }
        Arc::new(RoutePolicy {
            source: route.clone(),
            timeouts,
            retry: RetryRule::new(route.retry.as_ref()),
            rate_limit: route
                .rate_limit
                .as_ref()
                .and_then(|r| RateLimiter::new(r).ok())
                .map(Arc::new),
            breaker: route.circuit_breaker.as_ref().map(|b| {
                CircuitBreaker::new(BreakerPolicy::new(b), EjectionGate::unbounded(), observer())
            }),
            trailer_drops: trailer_drops(route),
        })
    }
}

/// The names `route`'s `RequestHeaderModifier` filters set or remove.
fn trailer_drops(route: &model::Route) -> Arc<[http::HeaderName]> {
    let mut names = Vec::new();
    for filter in &route.filters {
        if let model::Filter::RequestHeaderModifier {
            request_header_modifier: m,
        } = filter
        {
            let set = m.set.iter().map(|p| &p.name.0);
            names.extend(set.chain(m.remove.iter().map(|n| &n.0)).cloned());
        }
    }
    names.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> model::Policy {
        serde_yaml::from_str(yaml).expect("valid policy")
    }

    #[test]
    fn an_unchanged_policy_keeps_its_state_and_a_changed_one_starts_afresh() {
        let a = ServicePolicy::build(&policy("timeout: 1s\nmaxConcurrentRequests: 5"), None);
        assert!(a.limit.is_some());
        let same = ServicePolicy::build(&policy("timeout: 1s\nmaxConcurrentRequests: 5"), Some(&a));
        assert!(Arc::ptr_eq(&a, &same));
        let changed = ServicePolicy::build(&policy("timeout: 2s"), Some(&a));
        assert!(!Arc::ptr_eq(&a, &changed));
        assert!(changed.limit.is_none());
        assert_eq!(changed.failfast, DEFAULT_FAILFAST);
    }

    #[test]
    fn a_route_policy_is_rebuilt_when_the_service_timeout_changes() {
        let route: model::Route =
            serde_yaml::from_str("name: r\nretry: { attempts: 2 }").expect("valid route");
        let a = RoutePolicy::build(
            &route,
            Some(model::Dur(std::time::Duration::from_secs(1))),
            None,
            || None,
        );
        let same = RoutePolicy::build(
            &route,
            Some(model::Dur(std::time::Duration::from_secs(1))),
            Some(&a),
            || None,
        );
        assert!(Arc::ptr_eq(&a, &same));
        let other = RoutePolicy::build(
            &route,
            Some(model::Dur(std::time::Duration::from_secs(2))),
            Some(&a),
            || None,
        );
        assert!(!Arc::ptr_eq(&a, &other));
    }
}
