//! Domain model → `weir.discovery.v1` messages. Pure functions, no I/O: the only place the control
//! plane builds discovery protobuf (the proxy's `discovery::from_proto` is the inverse).

use std::time::Duration;

use weir_proto::discovery as pb;
use weir_proxy::model::{self, Filter, PathMatch, PathModifier, ValueMatchKind};

/// A service, whole.
pub fn service(s: &model::Service) -> pb::Service {
    pb::Service {
        name: s.name.clone(),
        namespace: s.namespace.clone(),
        hosts: s.hosts.clone(),
        addresses: s.addresses.iter().map(|a| a.to_string()).collect(),
        app_protocol: app_protocol(s.app_protocol) as i32,
        endpoints: s.endpoints.iter().map(endpoint).collect(),
        routes: s.routes.iter().map(route).collect(),
        policy: Some(policy(&s.policy)),
    }
}

fn app_protocol(p: Option<model::AppProtocol>) -> pb::AppProtocol {
    match p {
        None => pb::AppProtocol::Unspecified,
        Some(model::AppProtocol::Http) => pb::AppProtocol::Http,
        Some(model::AppProtocol::H2c) => pb::AppProtocol::H2c,
        Some(model::AppProtocol::Grpc) => pb::AppProtocol::Grpc,
        Some(model::AppProtocol::Tcp) => pb::AppProtocol::Tcp,
        Some(model::AppProtocol::Tls) => pb::AppProtocol::Tls,
    }
}

/// One endpoint.
pub fn endpoint(e: &model::Endpoint) -> pb::Endpoint {
    pb::Endpoint {
        address: e.address.to_string(),
        weight: e.weight,
        identity: e.identity.clone().unwrap_or_default(),
        labels: e.labels.clone().into_iter().collect(),
        ready: e.ready,
    }
}

/// One route (mesh or gateway).
pub fn route(r: &model::Route) -> pb::Route {
    pb::Route {
        name: r.name.clone(),
        hostnames: r.hostnames.iter().map(|h| h.0.clone()).collect(),
        matches: r.matches.iter().map(route_match).collect(),
        filters: r.filters.iter().map(filter).collect(),
        backend_refs: r.backend_refs.iter().map(backend_ref).collect(),
        timeouts: r.timeouts.as_ref().map(|t| pb::RouteTimeouts {
            request: t.request.map(|d| duration(d.0)),
            backend_request: t.backend_request.map(|d| duration(d.0)),
            idle: t.idle.map(|d| duration(d.0)),
        }),
        retry: r.retry.as_ref().map(|r| pb::RetryPolicy {
            attempts: r.attempts,
            codes: r.codes.iter().map(|&c| u32::from(c)).collect(),
            backoff: r.backoff.map(|d| duration(d.0)),
            non_idempotent: r.non_idempotent,
        }),
        circuit_breaker: r.circuit_breaker.as_ref().map(circuit_breaker),
        rate_limit: r.rate_limit.as_ref().map(rate_limit),
    }
}

fn route_match(m: &model::RouteMatch) -> pb::RouteMatch {
    use pb::path_match::Kind;
    pb::RouteMatch {
        path: m.path.as_ref().map(|p| pb::PathMatch {
            kind: Some(match p {
                PathMatch::Exact(v) => Kind::Exact(v.0.clone()),
                PathMatch::PathPrefix(v) => Kind::Prefix(v.0.clone()),
                PathMatch::RegularExpression(re) => Kind::Regex(re.as_written().to_string()),
            }),
        }),
        headers: m
            .headers
            .iter()
            .map(|h| value_match(h.name.0.as_str(), &h.value, h.kind))
            .collect(),
        query_params: m
            .query_params
            .iter()
            .map(|q| value_match(&q.name, &q.value, q.kind))
            .collect(),
        method: m
            .method
            .as_ref()
            .map(|x| x.0.as_str().to_string())
            .unwrap_or_default(),
    }
}

fn value_match(name: &str, value: &str, kind: ValueMatchKind) -> pb::ValueMatch {
    pb::ValueMatch {
        name: name.to_string(),
        value: value.to_string(),
        regex: kind == ValueMatchKind::RegularExpression,
    }
}

fn filter(f: &Filter) -> pb::Filter {
    use pb::filter::Kind;
    let kind = match f {
        Filter::RequestHeaderModifier {
            request_header_modifier: m,
        } => Kind::RequestHeaderModifier(header_modifier(m)),
        Filter::ResponseHeaderModifier {
            response_header_modifier: m,
        } => Kind::ResponseHeaderModifier(header_modifier(m)),
        Filter::URLRewrite { url_rewrite: u } => Kind::UrlRewrite(pb::UrlRewrite {
            hostname: u.hostname.clone().unwrap_or_default(),
            path: u.path.as_ref().map(path_modifier),
        }),
        Filter::RequestRedirect {
            request_redirect: r,
        } => Kind::RequestRedirect(pb::RequestRedirect {
            scheme: r.scheme.clone().unwrap_or_default(),
            hostname: r.hostname.clone().unwrap_or_default(),
            port: r.port.map(u32::from).unwrap_or(0),
            path: r.path.as_ref().map(path_modifier),
            status_code: u32::from(r.status_code),
        }),
        Filter::AddQueryParameter {
            add_query_parameter: nv,
        } => Kind::AddQueryParameter(pb::NameValue {
            name: nv.name.clone(),
            value: nv.value.clone(),
        }),
        Filter::RequestMirror { request_mirror: m } => Kind::RequestMirror(pb::RequestMirror {
            backend_ref: Some(backend_ref(&m.backend_ref)),
        }),
        Filter::Fault { fault: f } => Kind::Fault(pb::Fault {
            abort: f.abort.as_ref().map(|a| pb::FaultAbort {
                percentage: a.percentage,
                status: u32::from(a.status),
            }),
            delay: f.delay.as_ref().map(|d| pb::FaultDelay {
                percentage: d.percentage,
                duration: Some(duration(d.duration.0)),
            }),
        }),
        Filter::Cors { cors: c } => {
            let tokens = |v: &[model::CorsToken]| v.iter().map(|t| t.0.clone()).collect();
            Kind::Cors(pb::Cors {
                allow_origins: c.allow_origins.iter().map(|o| o.0.clone()).collect(),
                allow_methods: tokens(&c.allow_methods),
                allow_headers: tokens(&c.allow_headers),
                expose_headers: tokens(&c.expose_headers),
                max_age: Some(c.max_age),
                allow_credentials: c.allow_credentials,
            })
        }
    };
    pb::Filter { kind: Some(kind) }
}

fn header_modifier(m: &model::HeaderModifier) -> pb::HeaderModifier {
    let pairs = |v: &[model::HeaderValuePair]| -> Vec<pb::NameValue> {
        v.iter()
            .map(|p| pb::NameValue {
                name: p.name.0.as_str().to_string(),
                value: String::from_utf8_lossy(p.value.0.as_bytes()).into_owned(),
            })
            .collect()
    };
    pb::HeaderModifier {
        set: pairs(&m.set),
        add: pairs(&m.add),
        remove: m.remove.iter().map(|n| n.0.as_str().to_string()).collect(),
    }
}

fn path_modifier(p: &PathModifier) -> pb::PathModifier {
    use pb::path_modifier::Kind;
    pb::PathModifier {
        kind: Some(match p {
            PathModifier::ReplaceFullPath { replace_full_path } => {
                Kind::ReplaceFullPath(replace_full_path.0.clone())
            }
            PathModifier::ReplacePrefixMatch {
                replace_prefix_match,
            } => Kind::ReplacePrefixMatch(replace_prefix_match.0.clone()),
        }),
    }
}

fn backend_ref(b: &model::BackendRef) -> pb::BackendRef {
    pb::BackendRef {
        name: b.name.clone(),
        namespace: b.namespace.clone().unwrap_or_default(),
        port: b.port.map(u32::from).unwrap_or(0),
        weight: b.weight,
    }
}

/// A service's policy.
pub fn policy(p: &model::Policy) -> pb::Policy {
    pb::Policy {
        timeout: p.timeout.map(|d| duration(d.0)),
        retry_budget: p.retry_budget.as_ref().map(|b| pb::RetryBudget {
            ratio: b.ratio,
            min_per_second: b.min_per_second,
            ttl: b.ttl.map(|d| duration(d.0)),
        }),
        circuit_breaker: p.circuit_breaker.as_ref().map(circuit_breaker),
        max_concurrent_requests: p.max_concurrent_requests,
        max_pending_requests: p.max_pending_requests,
        rate_limit: p.rate_limit.as_ref().map(rate_limit),
        failfast: p.failfast.map(|d| duration(d.0)),
        idle_timeout: p.idle_timeout.map(|d| duration(d.0)),
    }
}

fn circuit_breaker(c: &model::CircuitBreakerPolicy) -> pb::CircuitBreakerPolicy {
    pb::CircuitBreakerPolicy {
        consecutive_failures: c.consecutive_failures,
        success_rate: c.success_rate.as_ref().map(|s| pb::SuccessRate {
            threshold: s.threshold,
            window: Some(duration(s.window.0)),
            min_requests: s.min_requests,
        }),
        min_ejection: c.min_ejection.map(|d| duration(d.0)),
        max_ejection: c.max_ejection.map(|d| duration(d.0)),
        min_ready_endpoints: c.min_ready_endpoints,
    }
}

fn rate_limit(r: &model::RateLimitPolicy) -> pb::RateLimitPolicy {
    pb::RateLimitPolicy {
        requests_per_second: r.requests_per_second,
        burst: r.burst,
        key: r.key.clone().unwrap_or_default(),
        overrides: r
            .overrides
            .iter()
            .map(|o| pb::RateOverride {
                value: o.value.clone(),
                requests_per_second: o.requests_per_second,
                burst: o.burst,
            })
            .collect(),
    }
}

/// A `google.protobuf.Duration`.
pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod roundtrip;
#[cfg(test)]
mod wire;

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"
services:
  - name: api
    hosts: [api]
    addresses: ["10.96.0.1:80"]
    appProtocol: grpc
    endpoints:
      - address: "127.0.0.1:9001"
        weight: 3
        labels: { zone: a }
    policy:
      timeout: 1500ms
      retryBudget: { ratio: 0.2, minPerSecond: 10, ttl: 10s }
    routes:
      - name: v1
        matches: [{ path: { type: PathPrefix, value: /v1 }, method: GET, headers: [{ type: RegularExpression, name: x-a, value: "b.*" }] }]
        filters:
          - type: URLRewrite
            urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }
          - type: Fault
            fault: { delay: { percentage: 5, duration: 100ms } }
        backendRefs: [{ name: api, weight: 2 }]
        retry: { attempts: 3, codes: [503] }
"#;

    #[test]
    fn a_service_translates_field_for_field() {
        let reg = weir_proxy::discovery::registry_file::parse("t.yaml", DOC).expect("valid doc");
        let s = service(&reg.services[0]);
        assert_eq!(s.namespace, "default");
        assert_eq!(s.addresses, vec!["10.96.0.1:80"]);
        assert_eq!(s.app_protocol, pb::AppProtocol::Grpc as i32);
        assert_eq!(s.endpoints[0].weight, 3);
        assert_eq!(
            s.endpoints[0].labels.get("zone").map(String::as_str),
            Some("a")
        );
        let p = s.policy.expect("policy is always sent");
        assert_eq!(
            p.timeout,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(p.retry_budget.map(|b| b.min_per_second), Some(10));
        let r = &s.routes[0];
        assert_eq!(r.matches[0].method, "GET");
        assert!(r.matches[0].headers[0].regex);
        assert_eq!(
            r.matches[0].path.as_ref().and_then(|p| p.kind.clone()),
            Some(pb::path_match::Kind::Prefix("/v1".into()))
        );
        assert_eq!(r.filters.len(), 2);
        assert_eq!(r.retry.as_ref().and_then(|r| r.attempts), Some(3));
        assert_eq!(r.backend_refs[0].weight, 2);
    }
}
