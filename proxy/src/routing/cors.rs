//! The `CORS` filter (Gateway API HTTPCORSFilter): answers a browser's preflight at the proxy,
//! and marks the response to an actual cross-origin request from an allowed origin.

use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};

use crate::model::{Cors, CorsToken};

/// What the filter decided for a request.
#[derive(Debug)]
pub enum Decision {
    /// Not a cross-origin request (no `Origin`): nothing to do.
    Pass,
    /// A preflight, answered here.
    Preflight(Response<()>),
    /// An actual request from an allowed origin: its response gets these headers (boxed: the
    /// marks travel with every request's outcome, which stays small when there are none).
    Mark(Box<HeaderMap>),
}

/// Decides for a request with `method` and `headers`.
pub fn decide(cors: &Cors, method: &Method, headers: &HeaderMap) -> Decision {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Decision::Pass;
    };
    let allowed = origin
        .to_str()
        .is_ok_and(|o| cors.allow_origins.iter().any(|a| a.allows(o)));
    let requested = headers.get(header::ACCESS_CONTROL_REQUEST_METHOD);
    if method == Method::OPTIONS && requested.is_some() {
        return Decision::Preflight(preflight(cors, allowed.then_some(origin), headers));
    }
    if !allowed {
        // The browser keeps the answer from the page; the request still goes on, as it would
        // without a proxy between.
        return Decision::Pass;
    }
    let mut out = HeaderMap::new();
    allow_origin(cors, origin, &mut out);
    if !cors.expose_headers.is_empty() {
        out.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            joined(&cors.expose_headers),
        );
    }
    Decision::Mark(Box::new(out))
}

/// Sets the marks on an upstream response: they replace any the upstream wrote, which would
/// otherwise go out twice (a browser refuses two `Access-Control-Allow-Origin` values).
pub fn mark(marks: &HeaderMap, headers: &mut HeaderMap) {
    for (name, value) in marks {
        if name == header::VARY {
            headers.append(header::VARY, value.clone());
        } else {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// The preflight's answer: 204, and for an allowed origin what it may send; for another, no
/// CORS field at all, which the browser takes as a refusal.
fn preflight(cors: &Cors, origin: Option<&HeaderValue>, req: &HeaderMap) -> Response<()> {
    let mut resp = Response::new(());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    let Some(origin) = origin else {
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        return resp;
    };
    allow_origin(cors, origin, h);
    let credentials = cors.allow_credentials;
    let asked = req.get(header::ACCESS_CONTROL_REQUEST_METHOD);
    if let Some(m) = allowed(&cors.allow_methods, asked, credentials) {
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, m);
    }
    let asked = req.get(header::ACCESS_CONTROL_REQUEST_HEADERS);
    if let Some(v) = allowed(&cors.allow_headers, asked, credentials) {
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(cors.max_age),
    );
    h.append(
        header::VARY,
        HeaderValue::from_static("Access-Control-Request-Method, Access-Control-Request-Headers"),
    );
    resp
}

/// `Access-Control-Allow-Origin` (`*` when every origin is allowed and no credentials are, else
/// the request's origin and `Vary: Origin`), and `Access-Control-Allow-Credentials`.
fn allow_origin(cors: &Cors, origin: &HeaderValue, out: &mut HeaderMap) {
    let any = cors.allow_origins.iter().any(|o| o.0 == "*");
    if any && !cors.allow_credentials {
        out.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
    } else {
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        out.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    if cors.allow_credentials {
        out.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
}

/// What a preflight may send of `list` (methods or headers): the list, or, for `*` with
/// credentials, what it `asked` for, since the Fetch standard makes `*` literal then.
fn allowed(
    list: &[CorsToken],
    asked: Option<&HeaderValue>,
    credentials: bool,
) -> Option<HeaderValue> {
    if credentials && list.iter().any(|v| v.0 == "*") {
        asked.cloned()
    } else if list.is_empty() {
        None
    } else {
        Some(joined(list))
    }
}

/// `a, b, c`; every item was checked to be a token or `*` at load.
fn joined(items: &[CorsToken]) -> HeaderValue {
    let text: Vec<&str> = items.iter().map(|t| t.0.as_str()).collect();
    HeaderValue::from_str(&text.join(", ")).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cors(yaml: &str) -> Cors {
        serde_yaml::from_str(yaml).expect("test CORS policy")
    }

    fn req(pairs: &[(&str, &str)]) -> HeaderMap {
        crate::routing::test_support::headers(pairs)
    }

    fn preflight_of(c: &Cors, pairs: &[(&str, &str)]) -> Response<()> {
        match decide(c, &Method::OPTIONS, &req(pairs)) {
            Decision::Preflight(r) => r,
            other => panic!("not a preflight answer: {other:?}"),
        }
    }

    #[test]
    fn a_preflight_from_an_allowed_origin_learns_what_it_may_send() {
        let c = cors("{ allowOrigins: ['https://app.test', 'https://*.shop.test'], allowMethods: [GET, PUT], allowHeaders: [x-token], maxAge: 600 }");
        for origin in [
            "https://app.test",
            "https://a.shop.test",
            "HTTPS://b.c.Shop.test",
        ] {
            let r = preflight_of(
                &c,
                &[("origin", origin), ("access-control-request-method", "PUT")],
            );
            let h = r.headers();
            assert_eq!(r.status(), StatusCode::NO_CONTENT);
            assert_eq!(h[header::ACCESS_CONTROL_ALLOW_ORIGIN], origin);
            assert_eq!(h[header::ACCESS_CONTROL_ALLOW_METHODS], "GET, PUT");
            assert_eq!(h[header::ACCESS_CONTROL_ALLOW_HEADERS], "x-token");
            assert_eq!(h[header::ACCESS_CONTROL_MAX_AGE], "600");
            assert!(h.get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none());
            let vary: Vec<_> = h.get_all(header::VARY).iter().collect();
            assert_eq!(vary.len(), 2, "{vary:?}");
        }
    }

    #[test]
    fn an_origin_not_allowed_gets_no_cors_field() {
        let c = cors("{ allowOrigins: ['https://app.test', 'https://*.shop.test'] }");
        for origin in [
            "https://evil.test",
            "http://app.test",
            "https://app.test:8443",
            "https://shop.test",
            "https://xshop.test",
            "null",
        ] {
            let r = preflight_of(
                &c,
                &[("origin", origin), ("access-control-request-method", "GET")],
            );
            assert!(
                r.headers()
                    .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
                    .is_none(),
                "{origin}"
            );
            let actual = decide(&c, &Method::GET, &req(&[("origin", origin)]));
            assert!(matches!(actual, Decision::Pass), "{origin}: {actual:?}");
        }
    }

    #[test]
    fn wildcards_are_literal_with_credentials_so_the_request_is_echoed() {
        let c = cors("{ allowOrigins: ['*'], allowMethods: ['*'], allowHeaders: ['*'], allowCredentials: true }");
        let r = preflight_of(
            &c,
            &[
                ("origin", "https://any.test"),
                ("access-control-request-method", "DELETE"),
                ("access-control-request-headers", "x-a, x-b"),
            ],
        );
        let h = r.headers();
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://any.test");
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_METHODS], "DELETE");
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_HEADERS], "x-a, x-b");
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
        assert_eq!(h[header::ACCESS_CONTROL_MAX_AGE], "5");

        let open = cors("{ allowOrigins: ['*'], allowMethods: ['*'] }");
        let r = preflight_of(
            &open,
            &[
                ("origin", "https://any.test"),
                ("access-control-request-method", "DELETE"),
            ],
        );
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_METHODS], "*");
    }

    #[test]
    fn an_actual_request_is_marked_and_the_marks_replace_the_upstreams() {
        let c = cors("{ allowOrigins: ['https://app.test'], exposeHeaders: [x-total], allowCredentials: true }");
        assert!(matches!(
            decide(&c, &Method::GET, &req(&[])),
            Decision::Pass
        ));
        // An OPTIONS that is no preflight is an actual request.
        let Decision::Mark(marks) = decide(
            &c,
            &Method::OPTIONS,
            &req(&[("origin", "https://app.test")]),
        ) else {
            panic!("not marked");
        };
        let mut upstream = req(&[
            ("access-control-allow-origin", "*"),
            ("vary", "Accept-Encoding"),
        ]);
        mark(&marks, &mut upstream);
        let origins: Vec<_> = upstream
            .get_all(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .iter()
            .collect();
        assert_eq!(origins, ["https://app.test"]);
        assert_eq!(upstream[header::ACCESS_CONTROL_EXPOSE_HEADERS], "x-total");
        assert_eq!(upstream[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
        let vary: Vec<_> = upstream.get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["Accept-Encoding", "Origin"]);
    }
}
