//! Gateway API HTTPRoute semantics as pure functions over `http` types: select a route, run its
//! filters in order (one exhaustive `match`), pick a weighted backend.

mod cors;
mod fault;
mod header_modifier;
mod hostnames;
mod matches;
mod mirror;
mod normalize;
mod query_param;
mod redirect;
mod table;
mod url_rewrite;

use std::time::Duration;

use http::{request, response, HeaderName};

pub use cors::mark as mark_cors;
pub use mirror::{mirror_head, shadow_head};
pub use normalize::{normalize_path, PathNormalization};
pub use table::{RouteTable, Selected};

use crate::model::{self, BackendRef, Filter};

/// The header every proxy-made response carries to name its cause.
pub const PROXY_ERROR: HeaderName = HeaderName::from_static("weir-proxy-error");

/// What the request filters decided.
#[derive(Debug)]
pub enum RequestOutcome<'a> {
    /// Forward the (possibly rewritten) request, after `delay` if a fault asked for one, and send
    /// a copy to each mirror backend.
    Continue {
        /// Injected delay, summed over the fault filters that fired.
        delay: Option<Duration>,
        /// Mirror backends in filter order; empty (and unallocated) without `RequestMirror`.
        mirrors: Vec<&'a BackendRef>,
        /// What a `CORS` filter puts on the response (an allowed origin's actual request).
        cors: Option<Box<http::HeaderMap>>,
    },
    /// Answer the client with this response (a redirect or an injected abort) and stop.
    Respond(http::Response<()>),
}

/// Runs the selected route's filters over the request head in the order written. `rng_percent`
/// returns a uniform value in `[0, 100)`; faults draw from it.
pub fn apply_request_filters<'a>(
    selected: &Selected<'a>,
    parts: &mut request::Parts,
    mut rng_percent: impl FnMut() -> f64,
) -> RequestOutcome<'a> {
    let mut delay: Option<Duration> = None;
    let mut mirrors = Vec::new();
    let mut marks = None;
    let route: &'a model::Route = selected.route;
    for (i, filter) in route.filters.iter().enumerate() {
        match filter {
            Filter::RequestHeaderModifier {
                request_header_modifier,
            } => header_modifier::apply(request_header_modifier, &mut parts.headers),
            // Runs on the response: `apply_response_filters`.
            Filter::ResponseHeaderModifier { .. } => {}
            Filter::URLRewrite { url_rewrite } => url_rewrite::apply(
                url_rewrite,
                selected.host_rewrite(i),
                selected.matched_prefix,
                parts,
            ),
            Filter::RequestRedirect { request_redirect } => {
                return RequestOutcome::Respond(redirect::respond(
                    request_redirect,
                    selected.matched_prefix,
                    parts,
                ))
            }
            Filter::AddQueryParameter {
                add_query_parameter,
            } => query_param::apply(add_query_parameter, parts),
            Filter::RequestMirror { request_mirror } => {
                mirror::collect(request_mirror, &mut mirrors)
            }
            Filter::Fault { fault } => match fault::decide(fault, &mut rng_percent) {
                fault::Decision::Abort(response) => return RequestOutcome::Respond(response),
                fault::Decision::Delay(d) => delay = Some(delay.unwrap_or_default() + d),
                fault::Decision::Pass => {}
            },
            Filter::Cors { cors } => match cors::decide(cors, &parts.method, &parts.headers) {
                cors::Decision::Preflight(response) => return RequestOutcome::Respond(response),
                cors::Decision::Mark(m) => marks = Some(m),
                cors::Decision::Pass => {}
            },
        }
    }
    RequestOutcome::Continue {
        delay,
        mirrors,
        cors: marks,
    }
}

/// Runs the route's `ResponseHeaderModifier` filters, in order, over the upstream response head,
/// then sets what a `CORS` filter decided for the request (`cors`), which they cannot undo.
pub fn apply_response_filters(
    route: &model::Route,
    cors: Option<Box<http::HeaderMap>>,
    parts: &mut response::Parts,
) {
    for filter in &route.filters {
        if let Filter::ResponseHeaderModifier {
            response_header_modifier,
        } = filter
        {
            header_modifier::apply(response_header_modifier, &mut parts.headers);
        }
    }
    if let Some(marks) = cors {
        cors::mark(&marks, &mut parts.headers);
    }
}

/// Builders the tests of every routing file share; routes are written as registry YAML.
#[cfg(test)]
mod test_support {
    use http::{HeaderMap, HeaderName, HeaderValue, Request};

    use crate::model;

    pub fn routes(yaml: &str) -> Vec<model::Route> {
        serde_yaml::from_str(yaml).expect("test routes parse")
    }

    pub fn route_match(yaml: &str) -> model::RouteMatch {
        serde_yaml::from_str(yaml).expect("test match parses")
    }

    pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            let name: HeaderName = name.parse().expect("test header name");
            h.append(
                name,
                HeaderValue::from_str(value).expect("test header value"),
            );
        }
        h
    }

    pub fn request(method: &str, uri: &str, pairs: &[(&str, &str)]) -> http::request::Parts {
        let (mut parts, ()) = Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .expect("test request")
            .into_parts();
        parts.headers = headers(pairs);
        parts
    }
}

#[cfg(test)]
mod tests {
    use http::{header, StatusCode};

    use super::test_support::{request, routes};
    use super::*;

    /// Selects a route for `parts` and runs its filters with fixed fault draws (then 99.9: no fault).
    fn run<'t>(
        table: &'t RouteTable,
        parts: &mut request::Parts,
        draws: &[f64],
    ) -> RequestOutcome<'t> {
        let selected = table
            .select(&parts.method, &parts.uri, &parts.headers)
            .expect("a route matches");
        let mut draws = draws.iter().copied();
        apply_request_filters(&selected, parts, move || draws.next().unwrap_or(99.9))
    }

    const DESIGN_EXAMPLE: &str = "
- name: auth
  matches: [{ path: { type: PathPrefix, value: /auth-service } }]
  filters:
    - type: URLRewrite
      urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }
    - type: RequestHeaderModifier
      requestHeaderModifier: { set: [{ name: X-Request-Source, value: gateway }] }
  backendRefs: [{ name: auth-service, namespace: default, weight: 100 }]";

    #[test]
    fn design_example_strips_the_prefix_and_tags_the_request() {
        let table = RouteTable::new(&routes(DESIGN_EXAMPLE));
        for (uri, want) in [
            ("/auth-service/x?y=1", "/x?y=1"),
            ("/auth-service", "/"),
            ("/auth-service/", "/"),
        ] {
            let mut parts = request("GET", uri, &[("x-request-source", "client")]);
            let outcome = run(&table, &mut parts, &[]);
            assert!(
                matches!(outcome, RequestOutcome::Continue { delay: None, ref mirrors, cors: None } if mirrors.is_empty())
            );
            assert_eq!(parts.uri, want, "{uri}");
            assert_eq!(parts.headers["x-request-source"], "gateway");
        }
        assert_eq!(
            table.pick_backend(0, 42).map(|b| b.name.as_str()),
            Some("auth-service")
        );
    }

    #[test]
    fn filters_run_in_the_order_written() {
        let table = RouteTable::new(&routes(
            "- filters:
                 - { type: AddQueryParameter, addQueryParameter: { name: a, value: '1' } }
                 - { type: URLRewrite, urlRewrite: { path: { type: ReplaceFullPath, replaceFullPath: /new } } }
                 - { type: AddQueryParameter, addQueryParameter: { name: b, value: '2' } }",
        ));
        let mut parts = request("GET", "/old?z=0", &[]);
        run(&table, &mut parts, &[]);
        assert_eq!(parts.uri, "/new?z=0&a=1&b=2");
    }

    #[test]
    fn redirect_answers_and_stops_later_filters() {
        let table = RouteTable::new(&routes(
            "- filters:
                 - { type: RequestRedirect, requestRedirect: { scheme: https, statusCode: 301 } }
                 - { type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: x-late, value: '1' }] } }",
        ));
        let mut parts = request("GET", "/p", &[("host", "example.com")]);
        let RequestOutcome::Respond(response) = run(&table, &mut parts, &[]) else {
            panic!("expected a redirect")
        };
        assert_eq!(response.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(
            response.headers()[header::LOCATION],
            "https://example.com/p"
        );
        assert!(!parts.headers.contains_key("x-late"));
    }

    #[test]
    fn faults_abort_or_add_up_their_delays() {
        let table = RouteTable::new(&routes(
            "- filters:
                 - { type: Fault, fault: { delay: { percentage: 50, duration: 100ms } } }
                 - { type: Fault, fault: { abort: { percentage: 10, status: 503 }, delay: { percentage: 50, duration: 1s } } }",
        ));
        let mut parts = request("GET", "/", &[]);
        let outcome = run(&table, &mut parts, &[10.0, 50.0, 20.0]);
        assert!(
            matches!(outcome, RequestOutcome::Continue { delay: Some(d), .. } if d == Duration::from_millis(1100))
        );
        let RequestOutcome::Respond(response) = run(&table, &mut parts, &[99.0, 5.0]) else {
            panic!("expected an abort")
        };
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[PROXY_ERROR], "fault-injected");
    }

    #[test]
    fn mirrors_are_collected_and_hostname_rewrite_uses_the_prepared_host() {
        let table = RouteTable::new(&routes(
            "- filters:
                 - { type: RequestMirror, requestMirror: { backendRef: { name: shadow } } }
                 - { type: URLRewrite, urlRewrite: { hostname: internal.example } }",
        ));
        let mut parts = request("GET", "/", &[("host", "public.example")]);
        let RequestOutcome::Continue { mirrors, .. } = run(&table, &mut parts, &[]) else {
            panic!("expected continue")
        };
        assert_eq!(
            mirrors.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
            ["shadow"]
        );
        assert_eq!(parts.headers[header::HOST], "internal.example");
    }

    #[test]
    fn response_header_modifier_runs_only_on_the_response() {
        let route = &routes("- filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { add: [{ name: x-r, value: '1' }], remove: [server] } }]")[0];
        let table = RouteTable::new(std::slice::from_ref(route));
        let mut parts = request("GET", "/", &[]);
        run(&table, &mut parts, &[]);
        assert!(!parts.headers.contains_key("x-r"));
        let (mut head, ()) = http::Response::builder()
            .header("server", "app")
            .body(())
            .expect("test response")
            .into_parts();
        apply_response_filters(route, None, &mut head);
        assert_eq!(head.headers["x-r"], "1");
        assert!(!head.headers.contains_key("server"));
    }
}
