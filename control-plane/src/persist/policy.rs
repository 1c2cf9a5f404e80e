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
            match parse_duration(t) {
                Ok(d) if d.is_zero() => policy.timeout = None,
                Ok(d) => policy.timeout = Some(Dur(d)),
                Err(e) => problems.push(format!("timeout: invalid duration {t:?}: {e}")),
            }
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
        if let Some(n) = self.consecutive_failures {
            let cb = policy
                .circuit_breaker
                .get_or_insert_with(CircuitBreakerPolicy::default);
            cb.consecutive_failures = (n > 0).then_some(n);
            if *cb == CircuitBreakerPolicy::default() {
                policy.circuit_breaker = None;
            }
        }
        if let Some(n) = self.max_concurrent_requests {
            policy.max_concurrent_requests = (n > 0).then_some(n);
        }
        self.rate_limit(policy, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
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
