//! The `RequestMirror` filter: name the backends that get a fire-and-forget copy of the request,
//! and build that copy's head; the proxy sends it and ignores the answer.

use http::{request, Request};

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
