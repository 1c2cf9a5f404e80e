//! Routes: Gateway API HTTPRoute rules, their matches and the backends they send to.

use serde::{Deserialize, Serialize};

use super::{
    CircuitBreakerPolicy, Filter, HeaderName, MatchPath, Method, Pattern, RateLimitPolicy,
    RetryPolicy, RouteHostname, RouteTimeouts,
};

/// A Gateway API HTTPRoute rule: matches → ordered filters → weighted backends.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    #[serde(default)]
    pub name: String,
    /// The hosts the route answers for; none = every host. A request's host picks the routes
    /// of its most specific hostname first (exact, then the longest wildcard, then routes
    /// without hostnames), and matches decide among them.
    #[serde(default)]
    pub hostnames: Vec<RouteHostname>,
    /// Any one match selects the route; no matches = matches everything.
    #[serde(default)]
    pub matches: Vec<RouteMatch>,
    #[serde(default)]
    pub filters: Vec<Filter>,
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
    #[serde(default)]
    pub timeouts: Option<RouteTimeouts>,
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreakerPolicy>,
    #[serde(default)]
    pub rate_limit: Option<RateLimitPolicy>,
}

/// All present conditions must hold.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteMatch {
    #[serde(default)]
    pub path: Option<PathMatch>,
    #[serde(default)]
    pub headers: Vec<HeaderMatch>,
    #[serde(default)]
    pub query_params: Vec<QueryParamMatch>,
    #[serde(default)]
    pub method: Option<Method>,
}

/// With `type` written before `value`, a bad regex is reported at the value; the other way round
/// serde buffers the value and the error points at the `path` mapping.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "type", content = "value", deny_unknown_fields)]
pub enum PathMatch {
    Exact(MatchPath),
    PathPrefix(MatchPath),
    RegularExpression(Pattern),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderMatch {
    #[serde(rename = "type", default)]
    pub kind: ValueMatchKind,
    pub name: HeaderName,
    pub value: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueryParamMatch {
    #[serde(rename = "type", default)]
    pub kind: ValueMatchKind,
    pub name: String,
    pub value: String,
}

/// Gateway API: `Exact` (default) or `RegularExpression` for header and query matches.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum ValueMatchKind {
    #[default]
    Exact,
    RegularExpression,
}

/// A reference to a service by name (namespace defaults to the referring object's, else `default`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendRef {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default = "default_backend_weight")]
    pub weight: u32,
}

fn default_backend_weight() -> u32 {
    1
}
