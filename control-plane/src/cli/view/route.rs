//! `weir.discovery.v1` routes and their policies as plain data for `-o json|yaml`, shaped like
//! the registry file's routes.

use serde::Serialize;
use weir_proto::discovery as pb;

use super::service::{duration, opt_duration};

/// A route.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    pub(crate) name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) hostnames: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) matches: Vec<RouteMatch>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) filters: Vec<Filter>,
    pub(crate) backend_refs: Vec<BackendRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeouts: Option<Timeouts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<Retry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    circuit_breaker: Option<CircuitBreaker>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit: Option<RateLimit>,
}

/// One match: all its conditions hold.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<Typed>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) headers: Vec<Typed>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) query_params: Vec<Typed>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) method: String,
}

/// A `type` and a value (path match, path modifier), plus a name for header and query matches.
#[derive(Debug, Serialize)]
pub struct Typed {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    pub(crate) value: String,
}

/// A filter: its `type` and its payload under the registry file's field name.
#[derive(Debug, Serialize)]
pub struct Filter {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    #[serde(flatten)]
    payload: serde_json::Map<String, serde_json::Value>,
}

/// A weighted backend.
#[derive(Debug, Serialize)]
pub struct BackendRef {
    pub(crate) name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) namespace: String,
    #[serde(skip_serializing_if = "is_zero")]
    port: u32,
    pub(crate) weight: u32,
}

/// HTTPRoute timeouts.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    #[serde(skip_serializing_if = "Option::is_none")]
    request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend_request: Option<String>,
}

/// A route's retry policy.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    codes: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backoff: Option<String>,
    non_idempotent: bool,
}

/// A circuit breaker.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreaker {
    #[serde(skip_serializing_if = "Option::is_none")]
    consecutive_failures: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    success_rate: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_ejection: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_ejection: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_ready_endpoints: Option<u32>,
}

/// A rate limit.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    requests_per_second: f64,
    burst: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    key: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<&pb::Route> for Route {
    fn from(r: &pb::Route) -> Self {
        Route {
            name: r.name.clone(),
            hostnames: r.hostnames.clone(),
            matches: r.matches.iter().map(route_match).collect(),
            filters: r.filters.iter().filter_map(filter).collect(),
            backend_refs: r.backend_refs.iter().map(backend_ref).collect(),
            timeouts: r.timeouts.as_ref().map(|t| Timeouts {
                request: opt_duration(&t.request),
                backend_request: opt_duration(&t.backend_request),
            }),
            retry: r.retry.as_ref().map(|r| Retry {
                attempts: r.attempts,
                codes: r.codes.clone(),
                backoff: opt_duration(&r.backoff),
                non_idempotent: r.non_idempotent,
            }),
            circuit_breaker: r.circuit_breaker.as_ref().map(CircuitBreaker::from),
            rate_limit: r.rate_limit.as_ref().map(RateLimit::from),
        }
    }
}

fn route_match(m: &pb::RouteMatch) -> RouteMatch {
    use pb::path_match::Kind;
    let value = |v: &pb::ValueMatch| Typed {
        kind: if v.regex {
            "RegularExpression"
        } else {
            "Exact"
        },
        name: Some(v.name.clone()),
        value: v.value.clone(),
    };
    RouteMatch {
        path: m.path.as_ref().and_then(|p| p.kind.as_ref()).map(|k| {
            let (kind, value) = match k {
                Kind::Exact(v) => ("Exact", v),
                Kind::Prefix(v) => ("PathPrefix", v),
                Kind::Regex(v) => ("RegularExpression", v),
            };
            Typed {
                kind,
                name: None,
                value: value.clone(),
            }
        }),
        headers: m.headers.iter().map(value).collect(),
        query_params: m.query_params.iter().map(value).collect(),
        method: m.method.clone(),
    }
}

pub(crate) fn backend_ref(b: &pb::BackendRef) -> BackendRef {
    BackendRef {
        name: b.name.clone(),
        namespace: b.namespace.clone(),
        port: b.port,
        weight: b.weight,
    }
}

fn filter(f: &pb::Filter) -> Option<Filter> {
    use pb::filter::Kind;
    use serde_json::json;
    let headers = |m: &pb::HeaderModifier| {
        let pairs = |v: &[pb::NameValue]| -> Vec<_> {
            v.iter()
                .map(|p| json!({"name": p.name, "value": p.value}))
                .collect()
        };
        json!({"set": pairs(&m.set), "add": pairs(&m.add), "remove": m.remove})
    };
    let path = |p: &Option<pb::PathModifier>| {
        use pb::path_modifier::Kind as P;
        match p.as_ref().and_then(|p| p.kind.as_ref()) {
            Some(P::ReplaceFullPath(v)) => json!({"type": "ReplaceFullPath", "replaceFullPath": v}),
            Some(P::ReplacePrefixMatch(v)) => {
                json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": v})
            }
            None => serde_json::Value::Null,
        }
    };
    let (kind, field, value) = match f.kind.as_ref()? {
        Kind::RequestHeaderModifier(m) => {
            ("RequestHeaderModifier", "requestHeaderModifier", headers(m))
        }
        Kind::ResponseHeaderModifier(m) => (
            "ResponseHeaderModifier",
            "responseHeaderModifier",
            headers(m),
        ),
        Kind::UrlRewrite(u) => (
            "URLRewrite",
            "urlRewrite",
            json!({"hostname": u.hostname, "path": path(&u.path)}),
        ),
        Kind::RequestRedirect(r) => (
            "RequestRedirect",
            "requestRedirect",
            json!({"scheme": r.scheme, "hostname": r.hostname, "port": r.port,
                   "path": path(&r.path), "statusCode": r.status_code}),
        ),
        Kind::AddQueryParameter(p) => (
            "AddQueryParameter",
            "addQueryParameter",
            json!({"name": p.name, "value": p.value}),
        ),
        Kind::RequestMirror(m) => (
            "RequestMirror",
            "requestMirror",
            json!({"backendRef": m.backend_ref.as_ref().map(backend_ref)}),
        ),
        Kind::Fault(f) => (
            "Fault",
            "fault",
            json!({
                "abort": f.abort.as_ref().map(|a| json!({"percentage": a.percentage, "status": a.status})),
                "delay": f.delay.as_ref().map(|d| json!({"percentage": d.percentage,
                    "duration": opt_duration(&d.duration)})),
            }),
        ),
        Kind::Cors(c) => (
            "CORS",
            "cors",
            json!({
                "allowOrigins": c.allow_origins, "allowMethods": c.allow_methods,
                "allowHeaders": c.allow_headers, "exposeHeaders": c.expose_headers,
                "maxAge": c.max_age.unwrap_or(5), "allowCredentials": c.allow_credentials,
            }),
        ),
    };
    let mut payload = serde_json::Map::new();
    payload.insert(field.to_string(), value);

    Some(Filter { kind, payload })
}

impl From<&pb::CircuitBreakerPolicy> for CircuitBreaker {
    fn from(c: &pb::CircuitBreakerPolicy) -> Self {
        CircuitBreaker {
            consecutive_failures: c.consecutive_failures,
            success_rate: c.success_rate.as_ref().map(|s| {
                serde_json::json!({"threshold": s.threshold,
                    "window": s.window.as_ref().map(duration), "minRequests": s.min_requests})
            }),
            min_ejection: opt_duration(&c.min_ejection),
            max_ejection: opt_duration(&c.max_ejection),
            min_ready_endpoints: c.min_ready_endpoints,
        }
    }
}

impl From<&pb::RateLimitPolicy> for RateLimit {
    fn from(r: &pb::RateLimitPolicy) -> Self {
        RateLimit {
            requests_per_second: r.requests_per_second,
            burst: r.burst,
            key: r.key.clone(),
        }
    }
}
