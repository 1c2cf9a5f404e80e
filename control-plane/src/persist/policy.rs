//! `weirctl policy set`: one-line edits of a service's policy. Only the named fields change; a
//! zero clears the fields where zero has no meaning of its own.

use weir_proxy::model::{
    parse_duration, CircuitBreakerPolicy, Dur, Policy, RateLimitPolicy, Registry, RetryBudget,
};

/// The fields to change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyEdit {
    /// `name` or `name.namespace`.
    pub service: String,
    /// Go-style duration; `0s` clears the timeout.
    pub timeout: Option<String>,
    /// Retry budget ratio (creates the budget when absent).
    pub retry_budget_ratio: Option<f64>,
    /// Retries always allowed per second (needs a budget, existing or given).
    pub retry_budget_min_per_second: Option<u32>,
    /// Breaker threshold; 0 clears it.
    pub consecutive_failures: Option<u32>,
    /// Concurrency cap; 0 clears it.
    pub max_concurrent_requests: Option<u32>,
    /// Rate limit; 0 removes the rate limit.
    pub rate_limit_rps: Option<f64>,
    /// Rate limit burst (needs a rate limit, existing or given).
    pub rate_limit_burst: Option<u32>,
    /// Queue for a concurrency slot; 0 clears it.
    pub max_pending_requests: Option<u32>,
    /// Go-style duration; `0s` clears it (the default, 1 s).
    pub failfast: Option<String>,
    /// Breaker's first ejection; `0s` clears it (the default, 1 s).
    pub min_ejection: Option<String>,
    /// Breaker's longest ejection; `0s` clears it (the default, 60 s).
    pub max_ejection: Option<String>,
}

impl PolicyEdit {
    /// Whether any field is to change.
    pub fn is_empty(&self) -> bool {
        *self
            == PolicyEdit {
                service: self.service.clone(),
                ..Default::default()
            }
    }

    /// Applies the edit to `policy`; every problem is one `field: reason` line.
    pub fn apply(&self, policy: &mut Policy) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if let Some(t) = &self.timeout {
            set_duration(&mut policy.timeout, "timeout", t, &mut problems);
        }
        if let Some(ratio) = self.retry_budget_ratio {
            let budget = policy.retry_budget.get_or_insert(RetryBudget {
                ratio,
                min_per_second: 0,
                ttl: None,
            });
            budget.ratio = ratio;
        }
        if let Some(min) = self.retry_budget_min_per_second {
            match &mut policy.retry_budget {
                Some(budget) => budget.min_per_second = min,
                None => problems.push(
                    "retryBudget.minPerSecond: the service has no retry budget; give its ratio too"
                        .into(),
                ),
            }
        }
        self.breaker(policy, &mut problems);
        if let Some(n) = self.max_concurrent_requests {
            policy.max_concurrent_requests = (n > 0).then_some(n);
        }
        if let Some(n) = self.max_pending_requests {
            policy.max_pending_requests = (n > 0).then_some(n);
        }
        if let Some(t) = &self.failfast {
            set_duration(&mut policy.failfast, "failfast", t, &mut problems);
        }
        self.rate_limit(policy, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The endpoint breaker's fields; a breaker left with none set is removed.
    fn breaker(&self, policy: &mut Policy, problems: &mut Vec<String>) {
        let untouched = self.consecutive_failures.is_none()
            && self.min_ejection.is_none()
            && self.max_ejection.is_none();
        if untouched {
            return;
        }
        let cb = policy
            .circuit_breaker
            .get_or_insert_with(CircuitBreakerPolicy::default);
        if let Some(n) = self.consecutive_failures {
            cb.consecutive_failures = (n > 0).then_some(n);
        }
        if let Some(t) = &self.min_ejection {
            set_duration(
                &mut cb.min_ejection,
                "circuitBreaker.minEjection",
                t,
                problems,
            );
        }
        if let Some(t) = &self.max_ejection {
            set_duration(
                &mut cb.max_ejection,
                "circuitBreaker.maxEjection",
                t,
                problems,
            );
        }
        if *cb == CircuitBreakerPolicy::default() {
            policy.circuit_breaker = None;
        }
    }

    fn rate_limit(&self, policy: &mut Policy, problems: &mut Vec<String>) {
        match self.rate_limit_rps {
            Some(rps) if !(rps.is_finite() && rps >= 0.0) => {
                problems.push(format!(
                    "rateLimit.requestsPerSecond: must be a positive number, got {rps}"
                ));
                return;
            }
            Some(0.0) => {
                policy.rate_limit = None;
                return;
            }
            Some(rps) => {
                policy
                    .rate_limit
                    .get_or_insert(RateLimitPolicy {
                        requests_per_second: rps,
                        burst: 0,
                        key: None,
                        overrides: Vec::new(),
                    })
                    .requests_per_second = rps;
            }
            None => {}
        }
        if let Some(burst) = self.rate_limit_burst {
            match &mut policy.rate_limit {
                Some(rl) => rl.burst = burst,
                None => problems.push(
                    "rateLimit.burst: the service has no rate limit; give its rate too".into(),
                ),
            }
        }
    }
}

/// Sets `field` from a Go-style duration; `0s` clears it.
fn set_duration(field: &mut Option<Dur>, name: &str, text: &str, problems: &mut Vec<String>) {
    match parse_duration(text) {
        Ok(d) if d.is_zero() => *field = None,
        Ok(d) => *field = Some(Dur(d)),
        Err(e) => problems.push(format!("{name}: invalid duration {text:?}: {e}")),
    }
}

/// Index of the service `spec` names: `name.namespace`, or a bare `name` (in `default` first,
/// else the only service of that name).
pub fn find_service(registry: &Registry, spec: &str) -> Option<usize> {
    let services = &registry.services;
    if let Some(i) = services.iter().position(|s| s.qualified_name() == spec) {
        return Some(i);
    }
    let named: Vec<usize> = (0..services.len())
        .filter(|&i| services[i].name == spec)
        .collect();
    named
        .iter()
        .copied()
        .find(|&i| services[i].namespace == "default")
        .or(if named.len() == 1 {
            Some(named[0])
        } else {
            None
        })
}
