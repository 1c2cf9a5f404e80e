//! Registry-file parsing: the DESIGN.md example, and every error pinned to its line and column.

use std::time::Duration;

use super::*;
use crate::model::{Filter, PathMatch, PathModifier};

/// DESIGN.md's registry-file and policy/routes examples, merged into one file, verbatim.
pub(crate) const DESIGN_EXAMPLE: &str = r#"services:
  - name: auth-service
    namespace: default
    hosts: [auth-service, auth-service.default.svc.cluster.local]
    addresses: ["10.96.0.10:80"]          # virtual IPs transparent clients dial
    endpoints:
      - address: "127.0.0.1:8174"
      - address: "127.0.0.1:8176"
        weight: 2
    policy:
      retryBudget: { ratio: 0.2, minPerSecond: 10, ttl: 10s }
      circuitBreaker: { consecutiveFailures: 7, minEjection: 1s, maxEjection: 60s }
      timeout: 10s
  - name: api
    policy:                                   # per service
      timeout: 10s
      retryBudget: { ratio: 0.2, minPerSecond: 10, ttl: 10s }
      circuitBreaker:
        consecutiveFailures: 7
        successRate: { threshold: 0.8, window: 10s, minRequests: 5 }
        minEjection: 1s
        maxEjection: 60s
        minReadyEndpoints: 1
      maxConcurrentRequests: 1000
      maxPendingRequests: 100
      rateLimit: { requestsPerSecond: 100, burst: 20, key: header:x-user }   # or none / client
    routes:
      - name: api
        matches: [{ path: { type: PathPrefix, value: /api } }]
        timeouts: { request: 2s, backendRequest: 500ms }          # HTTPRoute timeouts
        retry: { attempts: 3, codes: [502, 503], backoff: 25ms, nonIdempotent: false }
        circuitBreaker: { consecutiveFailures: 5 }                # per-route breaker
        rateLimit: { requestsPerSecond: 50, burst: 10 }
        filters:
          - type: RequestMirror
            requestMirror: { backendRef: { name: shadow-service } }
          - type: Fault
            fault: { abort: { percentage: 10, status: 503 }, delay: { percentage: 5, duration: 100ms } }
        backendRefs:
          - { name: api-v1, weight: 90 }
          - { name: api-v2, weight: 10 }
  - name: api-v1
  - name: api-v2
  - name: shadow-service
gateway:                                   # edge routes (gateway listener)
  routes:
    - name: auth
      matches: [{ path: { type: PathPrefix, value: /auth-service } }]
      filters:
        - type: URLRewrite
          urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }
        - type: RequestHeaderModifier
          requestHeaderModifier: { set: [{ name: X-Request-Source, value: gateway }] }
      backendRefs: [{ name: auth-service, namespace: default, weight: 100 }]
"#;

/// Every problem in `text`, as displayed (`registry.yaml:L:C: path: reason`).
fn problems(text: &str) -> Vec<String> {
    match parse("registry.yaml", text) {
        Ok(_) => vec![],
        Err(e) => e.problems().iter().map(ToString::to_string).collect(),
    }
}

/// A valid file with two services and a gateway route, to break one line at a time.
const BASE: &str = "services:
  - name: api
    addresses: [\"10.96.0.1:80\"]
    endpoints:
      - address: 127.0.0.1:8080
  - name: web
    hosts: [Web.Example.COM]
gateway:
  routes:
    - name: edge
      matches: [{ path: { type: PathPrefix, value: /web } }]
      backendRefs: [{ name: web }]
";

fn base_with(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} is not in BASE");
    BASE.replacen(from, to, 1)
}

#[test]
fn design_example_parses_with_every_field() {
    let reg = parse("registry.yaml", DESIGN_EXAMPLE).expect("the DESIGN.md example is valid");
    let names: Vec<_> = reg.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["auth-service", "api", "api-v1", "api-v2", "shadow-service"]
    );
    let auth = &reg.services[0];
    assert_eq!(
        auth.hosts,
        ["auth-service", "auth-service.default.svc.cluster.local"]
    );
    assert_eq!(auth.addresses, ["10.96.0.10:80".parse().expect("literal")]);
    assert_eq!(auth.endpoints[1].address.port(), 8176);
    assert_eq!((auth.endpoints[0].weight, auth.endpoints[1].weight), (1, 2));
    let budget = auth.policy.retry_budget.as_ref().expect("retryBudget");
    assert_eq!((budget.ratio, budget.min_per_second), (0.2, 10));
    assert_eq!(budget.ttl.map(|d| d.0), Some(Duration::from_secs(10)));

    let api = &reg.services[1];
    let cb = api.policy.circuit_breaker.as_ref().expect("circuitBreaker");
    assert_eq!(
        cb.success_rate
            .as_ref()
            .map(|s| (s.threshold, s.min_requests)),
        Some((0.8, 5))
    );
    assert_eq!(cb.max_ejection.map(|d| d.0), Some(Duration::from_secs(60)));
    let rl = api.policy.rate_limit.as_ref().expect("rateLimit");
    assert_eq!(rl.key.as_deref(), Some("header:x-user"));
    let route = &api.routes[0];
    assert_eq!(
        route.matches[0].path,
        Some(PathMatch::PathPrefix(crate::model::MatchPath(
            "/api".into()
        )))
    );
    let timeouts = route.timeouts.as_ref().expect("timeouts");
    assert_eq!(
        timeouts.backend_request.map(|d| d.0),
        Some(Duration::from_millis(500))
    );
    let retry = route.retry.as_ref().expect("retry");
    assert_eq!(
        (retry.attempts, retry.codes.as_slice()),
        (Some(3), &[502, 503][..])
    );
    assert!(
        matches!(&route.filters[0], Filter::RequestMirror { request_mirror } if request_mirror.backend_ref.name == "shadow-service")
    );
    let Filter::Fault { fault } = &route.filters[1] else {
        panic!("second filter is a Fault")
    };
    assert_eq!(
        fault.abort.as_ref().map(|a| (a.percentage, a.status)),
        Some((10.0, 503))
    );
    assert_eq!(
        fault.delay.as_ref().map(|d| d.duration.0),
        Some(Duration::from_millis(100))
    );
    let weights: Vec<_> = route
        .backend_refs
        .iter()
        .map(|b| (b.name.as_str(), b.weight))
        .collect();
    assert_eq!(weights, [("api-v1", 90), ("api-v2", 10)]);

    let edge = &reg.gateway.routes[0];
    let Filter::URLRewrite { url_rewrite } = &edge.filters[0] else {
        panic!("first filter is a URLRewrite")
    };
    let prefix = PathModifier::ReplacePrefixMatch {
        replace_prefix_match: crate::model::RewritePath("/".into()),
    };
    assert_eq!(url_rewrite.path.as_ref(), Some(&prefix));
    let Filter::RequestHeaderModifier {
        request_header_modifier: m,
    } = &edge.filters[1]
    else {
        panic!("header modifier")
    };
    assert_eq!(
        (m.set[0].name.0.as_str(), m.set[0].value.0.as_bytes()),
        ("x-request-source", &b"gateway"[..])
    );
    assert_eq!(edge.backend_refs[0].namespace.as_deref(), Some("default"));
}

#[test]
fn design_example_round_trips_through_yaml() {
    let reg = parse("registry.yaml", DESIGN_EXAMPLE).expect("valid");
    let text = serde_yaml::to_string(&reg).expect("serializes");
    assert_eq!(parse("again.yaml", &text).expect("re-parses"), reg);
}

#[test]
fn bad_address_is_reported_at_the_value() {
    let text = base_with("address: 127.0.0.1:8080", "address: 127.0.0.1:80800");
    assert_eq!(
        problems(&text),
        ["registry.yaml:5:18: services[0].endpoints[0].address: invalid socket address syntax"]
    );
}

#[test]
fn misspelt_field_is_reported_at_the_key() {
    let text = base_with("    endpoints:", "    endpionts:");
    let expected = "registry.yaml:4:5: services[0]: unknown field `endpionts`, expected one of `name`, `namespace`, `hosts`, `addresses`, `appProtocol`, `endpoints`, `routes`, `policy`";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn bad_duration_is_reported_at_the_value() {
    let text = base_with(
        "      backendRefs",
        "      timeouts: { request: 2sec }\n      backendRefs",
    );
    let expected = "registry.yaml:12:28: gateway.routes[0].timeouts.request: invalid duration \"2sec\": unknown unit \"sec\" (h, m, s, ms, us, ns)";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn bad_regex_is_reported_at_the_value() {
    let text = base_with(
        "type: PathPrefix, value: /web",
        "type: RegularExpression, value: \"/web(\"",
    );
    let expected = "registry.yaml:11:59: gateway.routes[0].matches[0].path.value: invalid regular expression \"/web(\": unclosed group";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn route_paths_that_no_request_path_could_be_are_reported_at_the_value() {
    for (value, reason) in [
        ("web", "must start with `/`"),
        ("/a//b", "must not contain `//`"),
        ("/a/../b", "must not contain a `.` or `..` segment"),
        ("/a/.", "must not contain a `.` or `..` segment"),
        ("/a%2Fb", "must not contain an escaped slash `%2F`"),
        ("/a%zz", "`%` at byte 2 does not start a `%XX` escape"),
        ("/a b", "' ' is not a URI path character (escape it as %XX)"),
        ("/a?q", "'?' is not a URI path character (escape it as %XX)"),
    ] {
        let text = base_with("value: /web", &format!("value: \"{value}\""));
        let expected = format!(
            "registry.yaml:11:52: gateway.routes[0].matches[0].path.value: invalid path {value:?}: {reason}"
        );
        assert_eq!(problems(&text), [expected], "{value}");
    }
    let rewrite = base_with(
        "      backendRefs",
        "      filters:\n        - type: URLRewrite\n          urlRewrite: { path: { type: ReplaceFullPath, replaceFullPath: v2 } }\n      backendRefs",
    );
    assert_eq!(
        problems(&rewrite),
        ["registry.yaml:14:73: gateway.routes[0].filters[0].urlRewrite.path.replaceFullPath: invalid path \"v2\": must start with `/`"]
    );
    // A rewrite may write what a match may not.
    let doubled = rewrite.replace("replaceFullPath: v2", "replaceFullPath: /a//b");
    assert_eq!(problems(&doubled), Vec::<String>::new());
}

#[test]
fn bad_filter_type_is_reported_at_the_type() {
    let text = base_with(
        "      backendRefs",
        "      filters:\n        - type: Rewrite\n      backendRefs",
    );
    let expected = "registry.yaml:13:17: gateway.routes[0].filters[0].type: unknown variant `Rewrite`, expected one of `RequestHeaderModifier`, `ResponseHeaderModifier`, `URLRewrite`, `RequestRedirect`, `AddQueryParameter`, `RequestMirror`, `Fault`, `CORS`";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn filter_field_of_another_type_is_reported_at_the_filter() {
    let text = base_with(
        "      backendRefs",
        "      filters:\n        - type: Fault\n          urlRewrite: {}\n      backendRefs",
    );
    let expected = "registry.yaml:13:11: gateway.routes[0].filters[0]: field `urlRewrite` does not belong in this filter, expected `fault`";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn unknown_backend_ref_is_reported_at_its_name() {
    let text = base_with(
        "backendRefs: [{ name: web }]",
        "backendRefs: [{ name: web }, { name: webb }]",
    );
    let expected = "registry.yaml:12:44: gateway.routes[0].backendRefs[1].name: no service \"webb\" in namespace \"default\"";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn duplicate_virtual_address_is_reported_at_the_second_one() {
    let text = base_with(
        "    hosts:",
        "    addresses: [\"10.96.0.2:80\", \"10.96.0.1:80\"]\n    hosts:",
    );
    let expected = "registry.yaml:7:33: services[1].addresses[1]: address 10.96.0.1:80 already belongs to service api.default";
    assert_eq!(problems(&text), [expected]);
}

#[test]
fn every_semantic_problem_is_reported_together_in_document_order() {
    let text = "services:
  - name: api
    hosts: [API.example, \"\"]
    endpoints:
      - { address: 127.0.0.1:8080, weight: 0 }
    policy:
      retryBudget: { ratio: 1.5 }
      circuitBreaker: { successRate: { threshold: 2, window: 10s } }
    routes:
      - filters:
          - type: Fault
            fault: { abort: { percentage: 120, status: 600 }, delay: { percentage: -1, duration: 1s } }
          - type: RequestRedirect
            requestRedirect: { statusCode: 300 }
          - type: RequestMirror
            requestMirror: { backendRef: { name: api, namespace: prod } }
      - name: nowhere
  - name: api
    hosts: [api.EXAMPLE]
";
    assert_eq!(
        problems(text),
        [
            "registry.yaml:3:26: services[0].hosts[1]: a host must not be empty",
            "registry.yaml:5:44: services[0].endpoints[0].weight: must be at least 1 (to drain an endpoint, set `ready: false`)",
            "registry.yaml:7:29: services[0].policy.retryBudget.ratio: must be between 0 and 1, got 1.5",
            "registry.yaml:8:51: services[0].policy.circuitBreaker.successRate.threshold: must be between 0 and 1, got 2",
            "registry.yaml:12:43: services[0].routes[0].filters[0].fault.abort.percentage: must be between 0 and 100, got 120",
            "registry.yaml:12:56: services[0].routes[0].filters[0].fault.abort.status: must be an HTTP status from 200 to 599, got 600",
            "registry.yaml:12:84: services[0].routes[0].filters[0].fault.delay.percentage: must be between 0 and 100, got -1",
            "registry.yaml:14:44: services[0].routes[0].filters[1].requestRedirect.statusCode: must be one of 301, 302, 303, 307, 308, got 300",
            "registry.yaml:16:50: services[0].routes[0].filters[2].requestMirror.backendRef.name: no service \"api\" in namespace \"prod\"",
            "registry.yaml:17:9: services[0].routes[1].backendRefs: a route without backendRefs must redirect (RequestRedirect) or always abort (Fault abort at 100%)",
            "registry.yaml:18:11: services[1].name: service \"api\" in namespace \"default\" is already declared at services[0]",
            "registry.yaml:19:13: services[1].hosts[0]: host \"api.example\" already belongs to service api.default",
        ]
    );
}

#[test]
fn one_type_error_per_service_and_route_is_reported_together() {
    let text = base_with("address: 127.0.0.1:8080", "address: nowhere")
        .replacen("    hosts:", "    hostz:", 1)
        .replacen("value: /web", "value: /web, extra: 1", 1);
    assert_eq!(
        problems(&text),
        [
            "registry.yaml:5:18: services[0].endpoints[0].address: invalid socket address syntax",
            "registry.yaml:7:5: services[1]: unknown field `hostz`, expected one of `name`, `namespace`, `hosts`, `addresses`, `appProtocol`, `endpoints`, `routes`, `policy`",
            "registry.yaml:11:58: gateway.routes[0].matches[0].path: invalid value: string \"extra\", expected \"type\" or \"value\"",
        ]
    );
}

#[test]
fn hosts_are_lowercased() {
    let reg = parse("registry.yaml", BASE).expect("valid");
    assert_eq!(reg.services[1].hosts, ["web.example.com"]);
}

#[test]
fn backend_refs_default_to_the_services_namespace() {
    let text = "services:
  - { name: api, namespace: prod, routes: [{ backendRefs: [{ name: api-v2 }] }] }
  - { name: api-v2, namespace: prod }
";
    assert_eq!(problems(text), Vec::<String>::new());
    let moved = text.replace("name: api-v2, namespace: prod", "name: api-v2");
    assert_eq!(problems(&moved), ["registry.yaml:2:68: services[0].routes[0].backendRefs[0].name: no service \"api-v2\" in namespace \"prod\""]);
}

#[test]
fn route_without_backends_is_allowed_only_when_it_redirects_or_always_aborts() {
    let redirect = base_with(
        "      backendRefs: [{ name: web }]",
        "      filters: [{ type: RequestRedirect, requestRedirect: { hostname: x } }]",
    );
    assert_eq!(problems(&redirect), Vec::<String>::new());
    let abort = base_with(
        "      backendRefs: [{ name: web }]",
        "      filters: [{ type: Fault, fault: { abort: { percentage: 100, status: 503 } } }]",
    );
    assert_eq!(problems(&abort), Vec::<String>::new());
    let sometimes = abort.replace("percentage: 100", "percentage: 99");
    assert_eq!(problems(&sometimes).len(), 1, "{:?}", problems(&sometimes));
}

#[test]
fn empty_file_is_rejected_rather_than_withdrawing_every_service() {
    assert_eq!(
        problems("# nothing yet\n\n"),
        ["registry.yaml:1:1: the registry is empty; write `services: []` to serve no services"]
    );
    assert_eq!(problems("services: []\n"), Vec::<String>::new());
}

#[test]
fn load_names_the_path_of_a_missing_file() {
    let err = load(Path::new("/nonexistent/registry.yaml")).expect_err("no such file");
    assert!(
        err.to_string().starts_with("/nonexistent/registry.yaml: "),
        "{err}"
    );
}

#[test]
fn several_problems_display_one_per_line() {
    let err = parse("r.yaml", "services:\n  - name: a\n  - name: a\n").expect_err("duplicate");
    assert_eq!(err.to_string(), "r.yaml:3:11: services[1].name: service \"a\" in namespace \"default\" is already declared at services[0]");
    let two = parse(
        "r.yaml",
        "services:\n  - name: a\n  - name: a\n  - name: a\n",
    )
    .expect_err("duplicates");
    assert_eq!(two.to_string().lines().count(), 2);
}

#[test]
fn bad_rate_limits_and_an_empty_success_rate_window_are_reported_where_they_stand() {
    let text = "services:
  - name: api
    policy:
      rateLimit: { requestsPerSecond: 0, key: header:bad header }
      circuitBreaker: { successRate: { threshold: 0.5, window: 0s } }
    routes:
      - backendRefs: [{ name: api }]
        rateLimit: { requestsPerSecond: 5, key: ip }
";
    assert_eq!(
        problems(text),
        [
            "registry.yaml:4:39: services[0].policy.rateLimit.requestsPerSecond: must be a positive number, got 0",
            "registry.yaml:4:47: services[0].policy.rateLimit.key: invalid header name \"bad header\"",
            "registry.yaml:5:64: services[0].policy.circuitBreaker.successRate.window: must be longer than 0",
            "registry.yaml:8:49: services[0].routes[0].rateLimit.key: expected none, client, identity or header:<name>, got \"ip\"",
        ]
    );
}

#[test]
fn bad_rate_limit_overrides_are_reported_at_their_entry() {
    let text = "services:
  - name: api
    policy:
      rateLimit:
        requestsPerSecond: 5
        key: header:x-tenant
        overrides:
          - { value: gold, requestsPerSecond: 50 }
          - { value: gold, requestsPerSecond: 80 }
    routes:
      - backendRefs: [{ name: api }]
        rateLimit:
          requestsPerSecond: 5
          key: client
          overrides: [{ value: 10.0.0.0/8, requestsPerSecond: -1 }, { value: bob, requestsPerSecond: 1 }]
";
    assert_eq!(
        problems(text),
        [
            "registry.yaml:9:22: services[0].policy.rateLimit.overrides[1].value: \"gold\" is overridden twice",
            "registry.yaml:15:63: services[0].routes[0].rateLimit.overrides[0].requestsPerSecond: must be 0 (no limit) or a positive number, got -1",
        ]
    );
}

#[test]
fn an_error_at_the_end_of_a_file_without_a_final_line_break_points_at_its_last_line() {
    let err = parse("r.yaml", "services:\n  - name: a\n    hosts: [a, b").expect_err("unclosed");
    let p = &err.problems()[0];
    assert_eq!((p.line, p.column), (3, 17), "{p}");
    // libyaml breaks lines at a lone CR too, and so do the positions.
    let err = parse("r.yaml", "services:\r  - name: a\r    hosts: [a").expect_err("unclosed");
    let p = &err.problems()[0];
    assert_eq!((p.line, p.column), (3, 14), "{p}");
}

#[test]
fn a_duration_too_long_for_any_clock_is_refused_at_its_place() {
    let text = "services:\n  - name: a\n    policy:\n      timeout: 99999999999999999999h\n";
    let err = parse("r.yaml", text).expect_err("too long");
    let p = &err.problems()[0];
    assert_eq!(p.line, 4, "{p}");
    assert!(p.message.contains("at most 876000h"), "{p}");
}

#[test]
fn an_endpoint_nothing_can_connect_to_is_reported_at_its_address() {
    for (bad, why) in [
        ("127.0.0.1:0", "port 0"),
        ("0.0.0.0:8080", "the unspecified address 0.0.0.0"),
        ("\"[::]:8080\"", "the unspecified address ::"),
    ] {
        let text = base_with("address: 127.0.0.1:8080", &format!("address: {bad}"));
        let expected = format!(
            "registry.yaml:5:18: services[0].endpoints[0].address: an endpoint cannot be reached at {why}"
        );
        assert_eq!(problems(&text), [expected], "{bad}");
    }
}

#[test]
fn a_host_written_with_a_port_is_reported() {
    let text = base_with(
        "[Web.Example.COM]",
        "[web.example.com, \"web.example.com:8080\"]",
    );
    let expected = "registry.yaml:7:30: services[1].hosts[1]: hosts match the Host header without its port; write \"web.example.com\"";
    assert_eq!(problems(&text), [expected]);
    // A bracketed IPv6 literal is a host, not a host and port.
    assert_eq!(
        problems(&base_with("[Web.Example.COM]", "[\"[fd00::1]\"]")),
        Vec::<String>::new()
    );
}

#[test]
fn a_label_written_twice_is_reported() {
    let text = base_with(
        "address: 127.0.0.1:8080",
        "address: 127.0.0.1:8080\n        labels: { zone: a, zone: b }",
    );
    let got = problems(&text);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("registry.yaml:6:") && got[0].contains("duplicate key \"zone\""),
        "{got:?}"
    );
}

#[test]
fn a_host_no_request_could_carry_is_reported() {
    for bad in ["\"a b\"", "\"u@web\"", "\"web:\"", "\"we/b\""] {
        let text = base_with("[Web.Example.COM]", &format!("[{bad}]"));
        let host = bad.trim_matches('"');
        let expected = format!(
            "registry.yaml:7:13: services[1].hosts[0]: {host:?} is not a host name or IP address"
        );
        assert_eq!(problems(&text), [expected], "{bad}");
    }
}

#[test]
fn service_and_namespace_names_must_be_dns_labels() {
    for (bad, why) in [
        ("Web", "only lower-case letters, digits and `-` are allowed"),
        (
            "we_b",
            "only lower-case letters, digits and `-` are allowed",
        ),
        (
            "web.v1",
            "only lower-case letters, digits and `-` are allowed",
        ),
        ("-web", "must start and end with a letter or digit"),
        ("web-", "must start and end with a letter or digit"),
    ] {
        let text = base_with("  - name: web\n", &format!("  - name: \"{bad}\"\n")).replace(
            "backendRefs: [{ name: web }]",
            &format!("backendRefs: [{{ name: \"{bad}\" }}]"),
        );
        let expected = format!(
            "registry.yaml:6:11: services[1].name: service name {bad:?} is not a DNS label: {why}"
        );
        assert_eq!(problems(&text), [expected], "{bad}");
    }
    let long = "a".repeat(64);
    let text = base_with(
        "  - name: web\n",
        &format!("  - name: web\n    namespace: {long}\n"),
    );
    let text = text.replace(
        "backendRefs: [{ name: web }]",
        &format!("backendRefs: [{{ name: web, namespace: {long} }}]"),
    );
    let expected = format!(
        "registry.yaml:7:16: services[1].namespace: namespace {long:?} is not a DNS label: longer than 63 characters"
    );
    assert_eq!(problems(&text), [expected]);
    let ok = base_with(
        "  - name: web\n",
        "  - name: 9web-v2\n    namespace: team-1\n",
    )
    .replace(
        "backendRefs: [{ name: web }]",
        "backendRefs: [{ name: 9web-v2, namespace: team-1 }]",
    );
    assert_eq!(problems(&ok), Vec::<String>::new());
}

#[test]
fn route_hostnames_are_dns_names_or_one_leading_wildcard() {
    let with = |hosts: &str| {
        base_with(
            "    - name: edge\n",
            &format!("    - name: edge\n      hostnames: {hosts}\n"),
        )
    };
    let reg = parse("registry.yaml", &with("[Shop.Example.COM, \"*.api.test\"]")).expect("valid");
    let names: Vec<&str> = reg.gateway.routes[0]
        .hostnames
        .iter()
        .map(|h| h.0.as_str())
        .collect();
    assert_eq!(names, ["shop.example.com", "*.api.test"]);
    for (bad, why) in [
        (
            "\"*.*.test\"",
            "`*` may only be the whole first label (`*.example.com`)",
        ),
        (
            "\"a*.test\"",
            "`*` may only be the whole first label (`*.example.com`)",
        ),
        (
            "\"*\"",
            "`*` may only be the whole first label (`*.example.com`)",
        ),
        (
            "\"a.test:80\"",
            "a hostname has no port (the Host's port is ignored)",
        ),
        ("\"10.0.0.1\"", "an IP address is no hostname"),
        (
            "\"a..test\"",
            "each dot-separated label holds 1 to 63 characters",
        ),
        (
            "\"a_b.test\"",
            "only letters, digits, `-` and `.` are allowed",
        ),
        (
            "\"-a.test\"",
            "a label starts and ends with a letter or digit",
        ),
    ] {
        let expected = format!(
            "registry.yaml:11:19: gateway.routes[0].hostnames[0]: invalid hostname {:?}: {why}",
            bad.trim_matches('"')
        );
        assert_eq!(problems(&with(&format!("[{bad}]"))), [expected], "{bad}");
    }
}

#[test]
fn a_cors_filter_is_read_and_a_bad_origin_or_token_reported_at_its_line() {
    let with = |cors: &str| {
        base_with(
            "      backendRefs: [{ name: web }]\n",
            &format!("      filters: [{{ type: CORS, cors: {cors} }}]\n      backendRefs: [{{ name: web }}]\n"),
        )
    };
    let reg = parse(
        "registry.yaml",
        &with("{ allowOrigins: ['HTTPS://App.test', 'https://*.shop.test:8443'], allowMethods: [GET] }"),
    )
    .expect("valid");
    let Filter::Cors { cors } = &reg.gateway.routes[0].filters[0] else {
        panic!("not a CORS filter");
    };
    let origins: Vec<&str> = cors.allow_origins.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(origins, ["https://app.test", "https://*.shop.test:8443"]);
    assert_eq!((cors.max_age, cors.allow_credentials), (5, false));
    for (cors, at, why) in [
        (
            "{ allowOrigins: ['https://app.test/path'] }",
            "gateway.routes[0].filters[0].cors.allowOrigins[0]: invalid origin \"https://app.test/path\": must be `*` or scheme://host[:port], with nothing after the host",
            "path",
        ),
        (
            "{ allowOrigins: ['https://a.*.test'] }",
            "gateway.routes[0].filters[0].cors.allowOrigins[0]: invalid origin \"https://a.*.test\": \"a.*.test\" is not a host[:port] (`*.` may only start it)",
            "inner wildcard",
        ),
        (
            "{ allowOrigins: ['*'], allowHeaders: ['x token'] }",
            "gateway.routes[0].filters[0].cors.allowHeaders[0]: invalid method or header name \"x token\": must be a token (letters, digits, and !#$%&'*+-.^_`|~) or `*`",
            "space in a header name",
        ),
        (
            "{ allowMethods: [GET] }",
            "gateway.routes[0].filters[0].cors.allowOrigins: a CORS filter needs an origin to allow (`*` for any)",
            "no origin",
        ),
    ] {
        let got = problems(&with(cors));
        assert_eq!(got.len(), 1, "{why}: {got:?}");
        let (pos, rest) = got[0].split_once(": ").expect("file:line:col: ...");
        assert!(pos.starts_with("registry.yaml:12:"), "{why}: {pos}");
        assert_eq!(rest, at, "{why}");
    }
}
