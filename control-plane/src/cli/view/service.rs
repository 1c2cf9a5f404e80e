//! `weir.discovery.v1` services as plain data for `-o json|yaml`: the registry file's field names
//! (camelCase), durations as `2s`, unset fields left out.

use std::collections::BTreeMap;

use serde::Serialize;
use weir_proto::discovery as pb;

use super::route::{CircuitBreaker, RateLimit, Route};

/// A service.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    name: String,
    namespace: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hosts: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    addresses: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    app_protocol: Option<&'static str>,
    endpoints: Vec<Endpoint>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) routes: Vec<Route>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) policy: Option<Policy>,
}

/// One endpoint.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    address: String,
    weight: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    identity: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    ready: bool,
}

/// A service's policy.
#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_budget: Option<RetryBudget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    circuit_breaker: Option<CircuitBreaker>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent_requests: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_pending_requests: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit: Option<RateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failfast: Option<String>,
}

/// A retry budget.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RetryBudget {
    ratio: f64,
    min_per_second: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<String>,
}

/// `2s`, `250ms`: the registry file's spelling.
pub(crate) fn duration(d: &prost_types::Duration) -> String {
    let d = std::time::Duration::new(
        u64::try_from(d.seconds).unwrap_or(0),
        u32::try_from(d.nanos).unwrap_or(0),
    );
    weir_proxy::model::format_duration(d)
}

pub(crate) fn opt_duration(d: &Option<prost_types::Duration>) -> Option<String> {
    d.as_ref().map(duration)
}

impl From<&pb::Service> for Service {
    fn from(s: &pb::Service) -> Self {
        let policy = s.policy.as_ref().map(Policy::from);
        Service {
            name: s.name.clone(),
            namespace: s.namespace.clone(),
            hosts: s.hosts.clone(),
            addresses: s.addresses.clone(),
            app_protocol: app_protocol(s.app_protocol),
            endpoints: s.endpoints.iter().map(Endpoint::from).collect(),
            routes: s.routes.iter().map(Route::from).collect(),
            policy: policy.filter(|p| *p != Policy::default()),
        }
    }
}

/// `http`, `h2c`, …; `None` when the client's protocol is kept.
pub(crate) fn app_protocol(p: i32) -> Option<&'static str> {
    match pb::AppProtocol::try_from(p).unwrap_or(pb::AppProtocol::Unspecified) {
        pb::AppProtocol::Unspecified => None,
        pb::AppProtocol::Http => Some("http"),
        pb::AppProtocol::H2c => Some("h2c"),
        pb::AppProtocol::Grpc => Some("grpc"),
        pb::AppProtocol::Tcp => Some("tcp"),
        pb::AppProtocol::Tls => Some("tls"),
    }
}

impl From<&pb::Endpoint> for Endpoint {
    fn from(e: &pb::Endpoint) -> Self {
        Endpoint {
            address: e.address.clone(),
            weight: e.weight,
            identity: e.identity.clone(),
            labels: e.labels.clone().into_iter().collect(),
            ready: e.ready,
        }
    }
}

impl From<&pb::Policy> for Policy {
    fn from(p: &pb::Policy) -> Self {
        Policy {
            timeout: opt_duration(&p.timeout),
            retry_budget: p.retry_budget.as_ref().map(|b| RetryBudget {
                ratio: b.ratio,
                min_per_second: b.min_per_second,
                ttl: opt_duration(&b.ttl),
            }),
            circuit_breaker: p.circuit_breaker.as_ref().map(CircuitBreaker::from),
            max_concurrent_requests: p.max_concurrent_requests,
            max_pending_requests: p.max_pending_requests,
            rate_limit: p.rate_limit.as_ref().map(RateLimit::from),
            failfast: opt_duration(&p.failfast),
        }
    }
}
