//! Hand-built discovery messages convert to exactly what the registry file would have produced.

use std::collections::HashMap;

use weir_proto::discovery as pb;

use super::InvalidProto;
use crate::{discovery::registry_file, model::Registry};

fn dur(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn nv(name: &str, value: &str) -> pb::NameValue {
    pb::NameValue {
        name: name.into(),
        value: value.into(),
    }
}

const YAML: &str = r#"
services:
  - name: api
    hosts: [api, api.default.svc]
    addresses: ["10.96.0.1:80"]
    appProtocol: grpc
    endpoints:
      - address: "127.0.0.1:9001"
        weight: 3
        identity: spiffe://weir/ns/default/sa/api
        labels: { zone: a }
      - address: "127.0.0.1:9002"
        ready: false
    policy:
      timeout: 1500ms
      retryBudget: { ratio: 0.2, minPerSecond: 10, ttl: 10s }
      circuitBreaker:
        consecutiveFailures: 7
        successRate: { threshold: 0.8, window: 10s, minRequests: 5 }
        minEjection: 1s
      maxConcurrentRequests: 100
      rateLimit:
        requestsPerSecond: 50
        burst: 10
        key: "header:x-user"
        overrides: [{ value: gold, requestsPerSecond: 500, burst: 50 }]
      idleTimeout: 2m
    routes:
      - name: v1
        matches:
          - path: { type: RegularExpression, value: "/v[0-9]+/.*" }
            method: GET
            headers: [{ type: RegularExpression, name: x-a, value: "b.*" }]
            queryParams: [{ name: q, value: "1" }]
        filters:
          - type: RequestHeaderModifier
            requestHeaderModifier: { set: [{ name: x-s, value: s }], remove: [x-r] }
          - type: URLRewrite
            urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }
          - type: Fault
            fault: { delay: { percentage: 5, duration: 100ms } }
        backendRefs: [{ name: api, weight: 2 }, { name: other, namespace: ops, port: 8080 }]
        timeouts: { request: 2s, idle: 30s }
        retry: { attempts: 3, codes: [503] }
  - name: other
    namespace: ops
gateway:
  routes:
    - name: edge
      matches: [{ path: { type: PathPrefix, value: /api } }]
      filters:
        - type: RequestRedirect
          requestRedirect: { scheme: https, statusCode: 301 }
      backendRefs: [{ name: api, weight: 100 }]
"#;

fn api_service() -> pb::Service {
    pb::Service {
        name: "api".into(),
        namespace: "default".into(),
        hosts: vec!["api".into(), "API.default.svc".into()],
        addresses: vec!["10.96.0.1:80".into()],
        app_protocol: pb::AppProtocol::Grpc as i32,
        endpoints: vec![
            pb::Endpoint {
                address: "127.0.0.1:9001".into(),
                weight: 3,
                identity: "spiffe://weir/ns/default/sa/api".into(),
                labels: HashMap::from([("zone".to_string(), "a".to_string())]),
                ready: true,
            },
            pb::Endpoint {
                address: "127.0.0.1:9002".into(),
                weight: 0,
                ..Default::default()
            },
        ],
        routes: vec![api_route()],
        policy: Some(pb::Policy {
            timeout: dur(1, 500_000_000),
            retry_budget: Some(pb::RetryBudget {
                ratio: 0.2,
                min_per_second: 10,
                ttl: dur(10, 0),
            }),
            circuit_breaker: Some(pb::CircuitBreakerPolicy {
                consecutive_failures: Some(7),
                success_rate: Some(pb::SuccessRate {
                    threshold: 0.8,
                    window: dur(10, 0),
                    min_requests: 5,
                }),
                min_ejection: dur(1, 0),
                ..Default::default()
            }),
            max_concurrent_requests: Some(100),
            rate_limit: Some(pb::RateLimitPolicy {
                requests_per_second: 50.0,
                burst: 10,
                key: "header:x-user".into(),
                overrides: vec![pb::RateOverride {
                    value: "gold".into(),
                    requests_per_second: 500.0,
                    burst: 50,
                }],
            }),
            idle_timeout: dur(120, 0),
            ..Default::default()
        }),
    }
}

fn api_route() -> pb::Route {
    use pb::{filter::Kind, path_match, path_modifier};
    let filter = |kind| pb::Filter { kind: Some(kind) };
    pb::Route {
        name: "v1".into(),
        matches: vec![pb::RouteMatch {
            path: Some(pb::PathMatch {
                kind: Some(path_match::Kind::Regex("/v[0-9]+/.*".into())),
            }),
            headers: vec![pb::ValueMatch {
                name: "x-a".into(),
                value: "b.*".into(),
                regex: true,
            }],
            query_params: vec![pb::ValueMatch {
                name: "q".into(),
                value: "1".into(),
                regex: false,
            }],
            method: "GET".into(),
        }],
        filters: vec![
            filter(Kind::RequestHeaderModifier(pb::HeaderModifier {
                set: vec![nv("x-s", "s")],
                add: vec![],
                remove: vec!["x-r".into()],
            })),
            filter(Kind::UrlRewrite(pb::UrlRewrite {
                hostname: String::new(),
                path: Some(pb::PathModifier {
                    kind: Some(path_modifier::Kind::ReplacePrefixMatch("/".into())),
                }),
            })),
            filter(Kind::Fault(pb::Fault {
                abort: None,
                delay: Some(pb::FaultDelay {
                    percentage: 5.0,
                    duration: dur(0, 100_000_000),
                }),
            })),
        ],
        backend_refs: vec![
            pb::BackendRef {
                name: "api".into(),
                weight: 2,
                ..Default::default()
            },
            pb::BackendRef {
                name: "other".into(),
                namespace: "ops".into(),
                port: 8080,
                weight: 1,
            },
        ],
        timeouts: Some(pb::RouteTimeouts {
            request: dur(2, 0),
            backend_request: None,
            idle: dur(30, 0),
        }),
        retry: Some(pb::RetryPolicy {
            attempts: Some(3),
            codes: vec![503],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn edge_route() -> pb::Route {
    pb::Route {
        name: "edge".into(),
        matches: vec![pb::RouteMatch {
            path: Some(pb::PathMatch {
                kind: Some(pb::path_match::Kind::Prefix("/api".into())),
            }),
            ..Default::default()
        }],
        filters: vec![pb::Filter {
            kind: Some(pb::filter::Kind::RequestRedirect(pb::RequestRedirect {
                scheme: "https".into(),
                status_code: 301,
                ..Default::default()
            })),
        }],
        backend_refs: vec![pb::BackendRef {
            name: "api".into(),
            weight: 100,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn snapshot() -> pb::Snapshot {
    pb::Snapshot {
        services: vec![
            api_service(),
            pb::Service {
                name: "other".into(),
                namespace: "ops".into(),
                ..Default::default()
            },
        ],
        gateway_routes: vec![edge_route()],
    }
}

#[test]
fn a_snapshot_converts_to_what_the_registry_file_says() {
    let expected = registry_file::parse("t.yaml", YAML).expect("the YAML is a valid registry");
    let got = Registry::try_from(snapshot()).expect("the snapshot is valid");
    assert_eq!(got, expected);
}

#[test]
fn an_empty_namespace_means_default_and_weight_zero_means_one() {
    let got = Registry::try_from(snapshot()).expect("valid");
    let svc = &got.services[0];
    assert_eq!(svc.namespace, "default");
    assert_eq!(svc.endpoints[1].weight, 1);
    assert!(!svc.endpoints[1].ready);
}

#[test]
fn a_bad_endpoint_address_is_refused_naming_the_field() {
    let mut s = snapshot();
    s.services[0].endpoints[1].address = "127.0.0.1".into();
    let err = Registry::try_from(s).expect_err("no port");
    assert_eq!(err.field, "services[0].endpoints[1].address");
    assert!(err.reason.contains("\"127.0.0.1\""), "{err}");
}

#[test]
fn a_bad_virtual_address_is_refused_naming_the_item() {
    let mut s = snapshot();
    s.services[0].addresses.push("nope:80".into());
    let err = Registry::try_from(s).expect_err("not an ip");
    assert_eq!(err.field, "services[0].addresses[1]");
}

#[test]
fn a_bad_regex_is_refused_naming_the_field() {
    let mut s = snapshot();
    s.services[0].routes[0].matches[0].path = Some(pb::PathMatch {
        kind: Some(pb::path_match::Kind::Regex("/v(".into())),
    });
    let err = Registry::try_from(s).expect_err("unclosed group");
    assert_eq!(err.field, "services[0].routes[0].matches[0].path.regex");
    assert!(
        err.reason.starts_with("invalid regular expression"),
        "{err}"
    );

    let mut s = snapshot();
    s.services[0].routes[0].matches[0].headers[0].value = "[".into();
    let err = Registry::try_from(s).expect_err("unclosed class");
    assert_eq!(
        err.field,
        "services[0].routes[0].matches[0].headers[0].value"
    );
}

#[test]
fn a_path_without_a_leading_slash_is_refused_naming_the_field() {
    let mut s = snapshot();
    s.services[0].routes[0].matches[0].path = Some(pb::PathMatch {
        kind: Some(pb::path_match::Kind::Prefix("api".into())),
    });
    let err = Registry::try_from(s).expect_err("no leading slash");
    assert_eq!(err.field, "services[0].routes[0].matches[0].path.prefix");
    assert_eq!(err.reason, "invalid path \"api\": must start with `/`");

    let mut s = snapshot();
    s.gateway_routes.push(pb::Route {
        filters: vec![pb::Filter {
            kind: Some(pb::filter::Kind::UrlRewrite(pb::UrlRewrite {
                path: Some(pb::PathModifier {
                    kind: Some(pb::path_modifier::Kind::ReplacePrefixMatch("v2".into())),
                }),
                ..Default::default()
            })),
        }],
        ..Default::default()
    });
    let err = Registry::try_from(s).expect_err("no leading slash");
    assert!(err.field.ends_with("path.replace_prefix_match"), "{err}");
}

#[test]
fn a_bad_hostname_is_refused_naming_the_item_and_good_ones_lower_cased() {
    let mut s = snapshot();
    s.gateway_routes.push(pb::Route {
        hostnames: vec!["Shop.Test".into(), "*.api.test".into(), "a.test:80".into()],
        ..Default::default()
    });
    let err = Registry::try_from(s.clone()).expect_err("a port in a hostname");
    assert_eq!(
        err.to_string(),
        "gateway_routes[1].hostnames[2]: invalid hostname \"a.test:80\": \
         a hostname has no port (the Host's port is ignored)"
    );
    s.gateway_routes[1].hostnames.pop();
    let reg = Registry::try_from(s).expect("valid hostnames");
    let names: Vec<&str> = reg.gateway.routes[1]
        .hostnames
        .iter()
        .map(|h| h.0.as_str())
        .collect();
    assert_eq!(names, ["shop.test", "*.api.test"]);
}

#[test]
fn a_bad_header_name_is_refused_naming_the_field() {
    let mut s = snapshot();
    s.gateway_routes.push(pb::Route {
        filters: vec![pb::Filter {
            kind: Some(pb::filter::Kind::ResponseHeaderModifier(
                pb::HeaderModifier {
                    set: vec![],
                    add: vec![nv("bad header", "v")],
                    remove: vec![],
                },
            )),
        }],
        ..Default::default()
    });
    let err = Registry::try_from(s).expect_err("space in a header name");
    assert_eq!(
        err.to_string(),
        "gateway_routes[1].filters[0].response_header_modifier.add[0].name: \
         invalid header name \"bad header\""
    );
}

#[test]
fn a_negative_or_endless_duration_and_an_unknown_protocol_are_refused() {
    let mut s = snapshot();
    if let Some(p) = s.services[0].policy.as_mut() {
        p.timeout = dur(-1, 0);
    }
    let err = Registry::try_from(s).expect_err("negative");
    assert_eq!(err.field, "services[0].policy.timeout");

    let mut s = snapshot();
    if let Some(p) = s.services[0].policy.as_mut() {
        p.timeout = dur(i64::MAX, 0);
    }
    let err = Registry::try_from(s).expect_err("longer than any clock");
    assert_eq!(err.field, "services[0].policy.timeout");

    let mut s = snapshot();
    s.services[0].app_protocol = 42;
    let err: InvalidProto = Registry::try_from(s).expect_err("unknown enum value");
    assert_eq!(err.field, "services[0].app_protocol");
}
