//! The `RequestRedirect` filter: answer with a 3xx whose `Location` is the request's URL with the
//! filter's scheme, hostname, port and path swapped in.

use std::fmt::Write;

use bytes::Bytes;
use http::{header, request, HeaderValue, Response, StatusCode};

use super::url_rewrite::modified_path;
use crate::model::RequestRedirect;

/// Builds the redirect response. The request's scheme is its URI's (origin-form means `http`); its
/// host and port come from the URI authority, else the `Host` header. A request with neither
/// (HTTP/1.0, or HTTP/2 without `:authority`) gets 400 when the redirect changes the scheme or
/// the port, which only an absolute Location can say.
pub(super) fn respond(
    redirect: &RequestRedirect,
    matched_prefix: Option<&str>,
    parts: &request::Parts,
) -> Response<()> {
    let mut response = Response::new(());
    let Some(location) = location(redirect, matched_prefix, parts) else {
        // A relative Location keeps the request's scheme and port, so the client would come
        // back to this same route for ever.
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response.headers_mut().insert(
            super::PROXY_ERROR,
            HeaderValue::from_static("redirect-needs-host"),
        );
        return response;
    };
    match HeaderValue::from_maybe_shared(Bytes::from(location)) {
        Ok(location) => {
            *response.status_mut() = StatusCode::from_u16(redirect.status_code)
                .ok()
                .filter(StatusCode::is_redirection)
                .unwrap_or(StatusCode::FOUND);
            response.headers_mut().insert(header::LOCATION, location);
        }
        Err(_) => {
            // Only a configured hostname or path with control characters gets here.
            tracing::warn!("RequestRedirect built a Location that is not a valid header value");
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response.headers_mut().insert(
                super::PROXY_ERROR,
                HeaderValue::from_static("invalid-redirect"),
            );
        }
    }
    response
}

fn location(
    redirect: &RequestRedirect,
    matched_prefix: Option<&str>,
    parts: &request::Parts,
) -> Option<String> {
    let uri = &parts.uri;
    let (req_host, req_port) = match uri.authority() {
        Some(a) => (Some(a.host()), a.port_u16()),
        None => match parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
        {
            Some(h) => split_host_port(h),
            None => (None, None),
        },
    };
    let scheme = redirect
        .scheme
        .as_deref()
        .unwrap_or_else(|| uri.scheme_str().unwrap_or("http"));
    let host = redirect.hostname.as_deref().or(req_host);
    if host.is_none() && (redirect.scheme.is_some() || redirect.port.is_some()) {
        return None;
    }
    // Gateway API: a new scheme brings its well-known port; otherwise the request's port stays.
    let port = redirect.port.or(if redirect.scheme.is_some() {
        None
    } else {
        req_port
    });
    let port = port.filter(|&p| !is_default_port(scheme, p));
    let path = redirect
        .path
        .as_ref()
        .and_then(|m| modified_path(m, matched_prefix, uri.path()));
    let path = path.as_deref().unwrap_or(uri.path());

    let mut out = String::with_capacity(scheme.len() + host.map_or(0, str::len) + path.len() + 16);
    // Without any host, a relative Location (same scheme and port) is all we can honestly give.
    if let Some(host) = host {
        out.push_str(scheme);
        out.push_str("://");
        out.push_str(host);
        if let Some(port) = port {
            let _ = write!(out, ":{port}");
        }
    }
    out.push_str(path);
    if let Some(q) = uri.query() {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

fn is_default_port(scheme: &str, port: u16) -> bool {
    (port == 80 && scheme.eq_ignore_ascii_case("http"))
        || (port == 443 && scheme.eq_ignore_ascii_case("https"))
}

/// Splits a `Host` header value, keeping IPv6 brackets as `Authority::host` does.
fn split_host_port(h: &str) -> (Option<&str>, Option<u16>) {
    let split = match h.rfind(':') {
        Some(i) if !h[i..].contains(']') => Some((&h[..i], h[i + 1..].parse().ok())),
        _ => None,
    };
    let (host, port) = split.unwrap_or((h, None));
    (Some(host).filter(|h| !h.is_empty()), port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PathModifier;
    use crate::routing::test_support::request;

    fn redirect(
        scheme: Option<&str>,
        hostname: Option<&str>,
        port: Option<u16>,
        status_code: u16,
    ) -> RequestRedirect {
        RequestRedirect {
            scheme: scheme.map(Into::into),
            hostname: hostname.map(Into::into),
            port,
            path: None,
            status_code,
        }
    }

    fn location_of(r: &RequestRedirect, prefix: Option<&str>, parts: &request::Parts) -> String {
        let response = respond(r, prefix, parts);
        response.headers()[header::LOCATION]
            .to_str()
            .expect("ascii location")
            .to_owned()
    }

    #[test]
    fn https_redirect_drops_the_default_port_and_keeps_path_and_query() {
        let parts = request("GET", "/a?b=c", &[("host", "example.com:80")]);
        let r = redirect(Some("https"), None, None, 301);
        assert_eq!(location_of(&r, None, &parts), "https://example.com/a?b=c");
        assert_eq!(
            respond(&r, None, &parts).status(),
            StatusCode::MOVED_PERMANENTLY
        );
    }

    #[test]
    fn without_a_scheme_the_request_port_is_kept_unless_default() {
        let parts = request("GET", "/a", &[("host", "example.com:8080")]);
        assert_eq!(
            location_of(
                &redirect(None, Some("other.example"), None, 302),
                None,
                &parts
            ),
            "http://other.example:8080/a"
        );
        let parts = request("GET", "/a", &[("host", "example.com:80")]);
        assert_eq!(
            location_of(&redirect(None, None, None, 302), None, &parts),
            "http://example.com/a"
        );
    }

    #[test]
    fn an_explicit_port_is_written_unless_it_is_the_schemes_default() {
        let parts = request("GET", "http://example.com/a", &[]);
        assert_eq!(
            location_of(
                &redirect(Some("https"), None, Some(8443), 302),
                None,
                &parts
            ),
            "https://example.com:8443/a"
        );
        assert_eq!(
            location_of(&redirect(Some("https"), None, Some(443), 302), None, &parts),
            "https://example.com/a"
        );
    }

    #[test]
    fn ipv6_hosts_keep_their_brackets() {
        let parts = request("GET", "/a", &[("host", "[::1]:8080")]);
        assert_eq!(
            location_of(&redirect(None, None, None, 302), None, &parts),
            "http://[::1]:8080/a"
        );
    }

    #[test]
    fn redirect_path_uses_the_matched_prefix() {
        let parts = request("GET", "/old/x?y=1", &[("host", "h")]);
        let mut r = redirect(None, None, None, 302);
        r.path = Some(PathModifier::ReplacePrefixMatch {
            replace_prefix_match: crate::model::RewritePath("/new".into()),
        });
        assert_eq!(location_of(&r, Some("/old"), &parts), "http://h/new/x?y=1");
        r.path = Some(PathModifier::ReplaceFullPath {
            replace_full_path: crate::model::RewritePath("/full".into()),
        });
        assert_eq!(location_of(&r, Some("/old"), &parts), "http://h/full?y=1");
    }

    #[test]
    fn a_request_without_any_host_gets_a_relative_location() {
        let parts = request("GET", "/a", &[]);
        assert_eq!(
            location_of(&redirect(None, None, None, 302), None, &parts),
            "/a"
        );
    }

    #[test]
    fn a_scheme_or_port_change_without_any_host_is_refused_rather_than_looping() {
        let parts = request("GET", "/a", &[]);
        for r in [
            redirect(Some("https"), None, None, 301),
            redirect(None, None, Some(8443), 302),
        ] {
            let response = respond(&r, None, &parts);
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{r:?}");
            assert_eq!(
                response.headers()[crate::routing::PROXY_ERROR],
                "redirect-needs-host"
            );
            assert!(response.headers().get(header::LOCATION).is_none());
        }
        let with_host = redirect(Some("https"), Some("new.example"), None, 301);
        assert_eq!(
            location_of(&with_host, None, &parts),
            "https://new.example/a"
        );
    }

    #[test]
    fn a_non_redirect_status_falls_back_to_302() {
        let parts = request("GET", "/a", &[("host", "h")]);
        assert_eq!(
            respond(&redirect(None, None, None, 200), None, &parts).status(),
            StatusCode::FOUND
        );
    }
}
