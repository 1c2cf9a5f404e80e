//! Timeouts, retries, circuit breakers and rate limits, per route and per service.

use serde::{Deserialize, Serialize};

use super::Dur;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteTimeouts {
    #[serde(default)]
    pub request: Option<Dur>,
    #[serde(default)]
    pub backend_request: Option<Dur>,
    /// How long a stream may go without a body frame in either direction (`0s`: no limit).
    #[serde(default)]
    pub idle: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub codes: Vec<u16>,
    #[serde(default)]
    pub backoff: Option<Dur>,
    #[serde(default)]
    pub non_idempotent: bool,
}

/// Per-service policy: timeouts, retry budget, endpoint breakers, limits (compiled into
/// `resilience::policy::ServicePolicy` when a snapshot loads).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub retry_budget: Option<RetryBudget>,
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreakerPolicy>,
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    #[serde(default)]
    pub max_pending_requests: Option<u32>,
    #[serde(default)]
    pub rate_limit: Option<RateLimitPolicy>,
    #[serde(default)]
    pub failfast: Option<Dur>,
    /// The stream idle timeout of routes that set no `timeouts.idle` (`0s`: no limit).
    #[serde(default)]
    pub idle_timeout: Option<Dur>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryBudget {
    pub ratio: f64,
    #[serde(default)]
    pub min_per_second: u32,
    #[serde(default)]
    pub ttl: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CircuitBreakerPolicy {
    #[serde(default)]
    pub consecutive_failures: Option<u32>,
    #[serde(default)]
    pub success_rate: Option<SuccessRate>,
    #[serde(default)]
    pub min_ejection: Option<Dur>,
    #[serde(default)]
    pub max_ejection: Option<Dur>,
    #[serde(default)]
    pub min_ready_endpoints: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SuccessRate {
    pub threshold: f64,
    pub window: Dur,
    #[serde(default)]
    pub min_requests: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitPolicy {
    pub requests_per_second: f64,
    #[serde(default)]
    pub burst: u32,
    /// `none` (default), `client`, `identity`, or `header:<name>`.
    #[serde(default)]
    pub key: Option<String>,
    /// Keys with their own limit instead of the default.
    #[serde(default)]
    pub overrides: Vec<RateOverride>,
}

/// A key value (header value, client IP or CIDR, identity) with its own rate limit.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateOverride {
    pub value: String,
    /// `0`: no limit for this key.
    pub requests_per_second: f64,
    #[serde(default)]
    pub burst: u32,
}
