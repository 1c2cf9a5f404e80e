//! The `RequestMirror` filter: name the backends that get a fire-and-forget copy of the request,
//! and build that copy's head; the proxy sends it and ignores the answer.

use http::{header, request, uri, HeaderValue, Request, Uri};

use crate::model::{BackendRef, RequestMirror};

/// Records the mirror's backend; the request itself goes on unchanged.
pub(super) fn collect<'a>(mirror: &'a RequestMirror, mirrors: &mut Vec<&'a BackendRef>) {
    mirrors.push(&mirror.backend_ref);
}

/// A copy of the request head for a mirror (extensions are per-request state and stay behind).
/// Call it after the filters ran, so the mirror sees the rewritten request as Gateway API expects.
pub fn mirror_head(parts: &request::Parts) -> request::Parts {
    let (mut head, ()) = Request::new(()).into_parts();
    head.method = parts.method.clone();
    head.uri = parts.uri.clone();
    head.version = parts.version;
    head.headers = parts.headers.clone();
    head
}

/// [`mirror_head`] with the host marked as Envoy marks it, so the shadow can tell mirrored traffic
/// from real: `-shadow` appended to the host name, before any port (`api:8080` → `api-shadow:8080`),
/// in the `Host` header and the request target's authority alike.
pub fn shadow_head(parts: &request::Parts) -> request::Parts {
    let mut head = mirror_head(parts);
    if let Some(host) = head.headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
        if let Ok(v) = HeaderValue::from_str(&shadow_host(host)) {
            head.headers.insert(header::HOST, v);
        }
    }
    if let Some(authority) = head.uri.authority() {
        let shadowed = shadow_host(authority.as_str());
        let mut p = std::mem::take(&mut head.uri).into_parts();
        p.authority = uri::Authority::try_from(shadowed.as_str()).ok();
        head.uri = Uri::from_parts(p).unwrap_or_else(|_| parts.uri.clone());
    }
    head
}

/// `host[:port]` with `-shadow` after the host.
fn shadow_host(authority: &str) -> String {
    match authority.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && !host.ends_with(':') =>
        {
            format!("{host}-shadow:{port}")
        }
        _ => format!("{authority}-shadow"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::request;

    #[test]
    fn mirror_head_copies_method_uri_version_and_headers_but_not_extensions() {
        let mut parts = request("POST", "http://h/p?q=1", &[("x-a", "1")]);
        parts.version = http::Version::HTTP_2;
        parts.extensions.insert(7u8);
        let head = mirror_head(&parts);
        assert_eq!(head.method, http::Method::POST);
        assert_eq!(head.uri, "http://h/p?q=1");
        assert_eq!(head.version, http::Version::HTTP_2);
        assert_eq!(head.headers["x-a"], "1");
        assert!(head.extensions.get::<u8>().is_none());
    }

    #[test]
    fn shadow_head_appends_shadow_to_the_host_before_the_port() {
        let parts = request(
            "GET",
            "http://api.test:8080/p",
            &[("host", "api.test:8080")],
        );
        let head = shadow_head(&parts);
        assert_eq!(head.headers["host"], "api.test-shadow:8080");
        assert_eq!(head.uri, "http://api.test-shadow:8080/p");
        let parts = request("GET", "/p", &[("host", "api")]);
        let head = shadow_head(&parts);
        assert_eq!(head.headers["host"], "api-shadow");
        assert_eq!(head.uri, "/p");
        assert_eq!(shadow_host("[::1]:80"), "[::1]-shadow:80");
    }

    #[test]
    fn collect_appends_in_filter_order() {
        let a: RequestMirror =
            serde_yaml::from_str("backendRef: { name: a }").expect("test mirror");
        let b: RequestMirror =
            serde_yaml::from_str("backendRef: { name: b }").expect("test mirror");
        let mut mirrors = Vec::new();
        collect(&a, &mut mirrors);
        collect(&b, &mut mirrors);
        assert_eq!(
            mirrors.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
