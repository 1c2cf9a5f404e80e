//! `weir.discovery.v1` messages → the domain model (`crate::model`), the inverse of the control
//! plane's `api/translate.rs`. Every value the request path relies on is checked here, and a bad
//! one is refused with the path of the field that holds it (`services[0].endpoints[1].address`).

mod route;
#[cfg(test)]
mod tests;

use std::{fmt, net::SocketAddr, time::Duration};

use weir_proto::discovery as pb;

use crate::model::{
    self, AppProtocol, CircuitBreakerPolicy, Dur, Endpoint, Gateway, Policy, RateLimitPolicy,
    RateOverride, Registry, RetryBudget, Service, SuccessRate,
};

/// A discovery message the proxy cannot use: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidProto {
    /// Path of the offending field from the message converted (`services[0].addresses[1]`).
    pub field: String,
    /// What is wrong with its value.
    pub reason: String,
}

impl InvalidProto {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Puts `parent` in front of the field path, as the error travels up the message.
    fn within(mut self, parent: impl fmt::Display) -> Self {
        // A repeated scalar's items have no name of their own: `hosts[2]`, not `hosts[2].`.
        self.field = if self.field.is_empty() {
            parent.to_string()
        } else {
            format!("{parent}.{}", self.field)
        };
        self
    }
}

/// Converts every item of a repeated field, naming the failing one `name[i]`.
fn each<T, U>(
    name: &str,
    items: Vec<T>,
    f: impl Fn(T) -> Result<U, InvalidProto>,
) -> Result<Vec<U>, InvalidProto> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| f(item).map_err(|e| e.within(format_args!("{name}[{i}]"))))
        .collect()
}

/// Converts a scalar field, naming it on failure.
fn field<T, U>(
    name: &str,
    value: T,
    f: impl FnOnce(T) -> Result<U, String>,
) -> Result<U, InvalidProto> {
    f(value).map_err(|reason| InvalidProto::new(name, reason))
}

/// A whole snapshot: its services and the gateway routes (empty for a service target).
impl TryFrom<pb::Snapshot> for Registry {
    type Error = InvalidProto;

    fn try_from(s: pb::Snapshot) -> Result<Self, InvalidProto> {
        Ok(Registry {
            services: each("services", s.services, Service::try_from)?,
            gateway: Gateway {
                routes: each("gateway_routes", s.gateway_routes, model::Route::try_from)?,
            },
        })
    }
}

impl TryFrom<pb::Service> for Service {
    type Error = InvalidProto;

    fn try_from(s: pb::Service) -> Result<Self, InvalidProto> {
        if s.name.is_empty() {
            return Err(InvalidProto::new("name", "a service needs a name"));
        }
        let namespace = if s.namespace.is_empty() {
            model::default_namespace()
        } else {
            s.namespace
        };
        let hosts = each("hosts", s.hosts, |h| {
            if h.is_empty() {
                Err(InvalidProto::new("", "a host must not be empty"))
            } else {
                Ok(h.to_ascii_lowercase())
            }
        })?;
        let routes = each("routes", s.routes, model::Route::try_from)?;
        Ok(Service {
            addresses: each("addresses", s.addresses, |a| {
                field("", a, |a| socket_addr(&a))
            })?,
            app_protocol: field("app_protocol", s.app_protocol, app_protocol)?,
            endpoints: each("endpoints", s.endpoints, Endpoint::try_from)?,
            policy: match s.policy {
                Some(p) => Policy::try_from(p).map_err(|e| e.within("policy"))?,
                None => Policy::default(),
            },
            name: s.name,
            namespace,
            hosts,
            routes,
        })
    }
}

fn socket_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse()
        .map_err(|_| format!("invalid address {s:?}: expected ip:port"))
}

fn app_protocol(v: i32) -> Result<Option<AppProtocol>, String> {
    match pb::AppProtocol::try_from(v) {
        Ok(pb::AppProtocol::Unspecified) => Ok(None),
        Ok(pb::AppProtocol::Http) => Ok(Some(AppProtocol::Http)),
        Ok(pb::AppProtocol::H2c) => Ok(Some(AppProtocol::H2c)),
        Ok(pb::AppProtocol::Grpc) => Ok(Some(AppProtocol::Grpc)),
        Ok(pb::AppProtocol::Tcp) => Ok(Some(AppProtocol::Tcp)),
        Ok(pb::AppProtocol::Tls) => Ok(Some(AppProtocol::Tls)),
        Err(_) => Err(format!("unknown app protocol {v}")),
    }
}

impl TryFrom<pb::Endpoint> for Endpoint {
    type Error = InvalidProto;

    fn try_from(e: pb::Endpoint) -> Result<Self, InvalidProto> {
        Ok(Endpoint {
            address: field("address", e.address, |a| socket_addr(&a))?,
            // The proto reads 0 as 1; the registry file refuses 0 outright.
            weight: e.weight.max(1),
            identity: Some(e.identity).filter(|i| !i.is_empty()),
            labels: e.labels.into_iter().collect(),
            ready: e.ready,
        })
    }
}

impl TryFrom<pb::Policy> for Policy {
    type Error = InvalidProto;

    fn try_from(p: pb::Policy) -> Result<Self, InvalidProto> {
        Ok(Policy {
            timeout: opt_dur("timeout", p.timeout)?,
            retry_budget: p
                .retry_budget
                .map(|b| {
                    if !(0.0..=1.0).contains(&b.ratio) {
                        let reason = format!("must be between 0 and 1, got {}", b.ratio);
                        return Err(InvalidProto::new("ratio", reason));
                    }
                    Ok(RetryBudget {
                        ratio: b.ratio,
                        min_per_second: b.min_per_second,
                        ttl: opt_dur("ttl", b.ttl)?,
                    })
                })
                .transpose()
                .map_err(|e| e.within("retry_budget"))?,
            circuit_breaker: p
                .circuit_breaker
                .map(circuit_breaker)
                .transpose()
                .map_err(|e| e.within("circuit_breaker"))?,
            max_concurrent_requests: p.max_concurrent_requests,
            max_pending_requests: p.max_pending_requests,
            rate_limit: p.rate_limit.map(rate_limit),
            failfast: opt_dur("failfast", p.failfast)?,
            idle_timeout: opt_dur("idle_timeout", p.idle_timeout)?,
        })
    }
}

fn circuit_breaker(c: pb::CircuitBreakerPolicy) -> Result<CircuitBreakerPolicy, InvalidProto> {
    Ok(CircuitBreakerPolicy {
        consecutive_failures: c.consecutive_failures,
        success_rate: c
            .success_rate
            .map(|s| {
                Ok(SuccessRate {
                    threshold: s.threshold,
                    window: Dur(required_dur("window", s.window)?),
                    min_requests: s.min_requests,
                })
            })
            .transpose()
            .map_err(|e: InvalidProto| e.within("success_rate"))?,
        min_ejection: opt_dur("min_ejection", c.min_ejection)?,
        max_ejection: opt_dur("max_ejection", c.max_ejection)?,
        min_ready_endpoints: c.min_ready_endpoints,
    })
}

fn rate_limit(r: pb::RateLimitPolicy) -> RateLimitPolicy {
    RateLimitPolicy {
        requests_per_second: r.requests_per_second,
        burst: r.burst,
        key: Some(r.key).filter(|k| !k.is_empty()),
        overrides: r
            .overrides
            .into_iter()
            .map(|o| RateOverride {
                value: o.value,
                requests_per_second: o.requests_per_second,
                burst: o.burst,
            })
            .collect(),
    }
}

/// A `google.protobuf.Duration`, refused when negative, malformed, or longer than a registry
/// file may set (`model::MAX_DURATION`).
fn duration(d: prost_types::Duration) -> Result<Duration, String> {
    let secs = u64::try_from(d.seconds).map_err(|_| format!("negative duration {d}"))?;
    let nanos = u32::try_from(d.nanos)
        .ok()
        .filter(|&n| n < 1_000_000_000)
        .ok_or_else(|| format!("invalid nanos {} in duration", d.nanos))?;
    Some(Duration::new(secs, nanos))
        .filter(|d| *d <= model::MAX_DURATION)
        .ok_or_else(|| format!("duration {d} longer than 100 years"))
}

fn opt_dur(name: &str, d: Option<prost_types::Duration>) -> Result<Option<Dur>, InvalidProto> {
    d.map(|d| field(name, d, duration).map(Dur)).transpose()
}

fn required_dur(name: &str, d: Option<prost_types::Duration>) -> Result<Duration, InvalidProto> {
    match d {
        Some(d) => field(name, d, duration),
        None => Err(InvalidProto::new(name, "missing")),
    }
}

/// A `u32` that must fit a `u16` (ports, status codes).
fn small(name: &str, v: u32) -> Result<u16, InvalidProto> {
    u16::try_from(v).map_err(|_| InvalidProto::new(name, format!("{v} is out of range")))
}
