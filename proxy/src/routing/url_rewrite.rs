//! The `URLRewrite` filter: replace the host and/or the path before forwarding, keeping the query.

use std::{borrow::Cow, str::FromStr};

use bytes::Bytes;
use http::{header::HOST, request, uri::Authority, HeaderValue, Uri};

use crate::model::{PathModifier, UrlRewrite};

/// A rewrite hostname parsed once at table build, so requests only clone two `Bytes`.
#[derive(Debug, Clone)]
pub(super) struct HostRewrite {
    authority: Authority,
    header: HeaderValue,
}

impl HostRewrite {
    pub(super) fn new(hostname: &str) -> Option<Self> {
        match (
            Authority::from_str(hostname),
            HeaderValue::from_str(hostname),
        ) {
            (Ok(authority), Ok(header)) => Some(Self { authority, header }),
            _ => {
                tracing::warn!(
                    hostname,
                    "URLRewrite hostname is not a valid authority; it is ignored"
                );
                None
            }
        }
    }
}

/// Rewrites `parts` in place. `host` is the prepared form of `rewrite.hostname`; `matched_prefix`
/// is what the selected match strips for `ReplacePrefixMatch`.
pub(super) fn apply(
    rewrite: &UrlRewrite,
    host: Option<&HostRewrite>,
    matched_prefix: Option<&str>,
    parts: &mut request::Parts,
) {
    let path = rewrite
        .path
        .as_ref()
        .and_then(|m| modified_path(m, matched_prefix, parts.uri.path()));
    if host.is_none() && path.is_none() {
        return;
    }
    let mut uri = parts.uri.clone().into_parts();
    if let Some(path) = path {
        let pq = match parts.uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path.into_owned(),
        };
        match http::uri::PathAndQuery::from_maybe_shared(Bytes::from(pq)) {
            Ok(pq) => uri.path_and_query = Some(pq),
            Err(error) => tracing::warn!(%error, "URLRewrite produced an invalid path; path kept"),
        }
    }
    if let Some(host) = host {
        // An origin-form request (HTTP/1) names its host only in the Host header; keep both in step.
        if uri.authority.is_some() {
            uri.authority = Some(host.authority.clone());
        }
        if uri.authority.is_none() || parts.headers.contains_key(HOST) {
            parts.headers.insert(HOST, host.header.clone());
        }
    }
    match Uri::from_parts(uri) {
        Ok(rewritten) => parts.uri = rewritten,
        Err(error) => tracing::warn!(%error, "URLRewrite produced an invalid URI; URI kept"),
    }
}

/// The path a `PathModifier` yields, or `None` to keep the request's path (`ReplacePrefixMatch`
/// after a regex match has no prefix to replace).
pub(super) fn modified_path<'a>(
    modifier: &'a PathModifier,
    matched_prefix: Option<&str>,
    path: &str,
) -> Option<Cow<'a, str>> {
    match modifier {
        // Validated at load: never empty, always `/`-first.
        PathModifier::ReplaceFullPath { replace_full_path } => {
            Some(Cow::Borrowed(replace_full_path))
        }
        PathModifier::ReplacePrefixMatch {
            replace_prefix_match,
        } => Some(Cow::Owned(replace_prefix(
            matched_prefix?,
            replace_prefix_match,
            path,
        ))),
    }
}

/// Gateway API's table: the prefix and replacement lose trailing slashes, the remainder (empty or
/// starting with `/`) is appended, and an empty result is `/`; so `/auth-service/x` with prefix
/// `/auth-service` → `/` gives `/x`, never `//x`.
fn replace_prefix(prefix: &str, replacement: &str, path: &str) -> String {
    let rest = path
        .strip_prefix(prefix.trim_end_matches('/'))
        .unwrap_or(path);
    let replacement = replacement.trim_end_matches('/');
    let mut out = String::with_capacity(replacement.len() + rest.len() + 1);
    out.push_str(replacement);
    out.push_str(rest);
    if out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::request;

    #[test]
    fn replace_prefix_follows_the_gateway_api_table() {
        let cases = [
            ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
            ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
            ("/foo/", "/foo/bar", "/xyz", "/xyz/bar"),
            ("/foo", "/foo", "/xyz", "/xyz"),
            ("/foo/", "/foo", "/xyz", "/xyz"),
            ("/foo", "/foo/", "/xyz", "/xyz/"),
            ("/foo/", "/foo/", "/xyz/", "/xyz/"),
            ("/foo", "/foo", "", "/"),
            ("/foo", "/foo/", "", "/"),
            ("/foo", "/foo", "/", "/"),
            ("/foo", "/foo/", "/", "/"),
            ("/foo", "/foo/bar", "/", "/bar"),
            ("", "/bar", "/v2", "/v2/bar"),
        ];
        for (prefix, path, replacement, want) in cases {
            assert_eq!(
                replace_prefix(prefix, replacement, path),
                want,
                "{prefix} {path} {replacement}"
            );
        }
    }

    #[test]
    fn prefix_rewrite_keeps_the_query() {
        let mut parts = request("GET", "/auth-service/login?next=%2Fhome", &[]);
        let rewrite = UrlRewrite {
            hostname: None,
            path: Some(PathModifier::ReplacePrefixMatch {
                replace_prefix_match: crate::model::RewritePath("/".into()),
            }),
        };
        apply(&rewrite, None, Some("/auth-service"), &mut parts);
        assert_eq!(parts.uri, "/login?next=%2Fhome");
    }

    #[test]
    fn full_path_rewrite_replaces_the_whole_path() {
        let mut parts = request("GET", "/a/b/c?x=1", &[]);
        let rewrite = UrlRewrite {
            hostname: None,
            path: Some(PathModifier::ReplaceFullPath {
                replace_full_path: crate::model::RewritePath("/z".into()),
            }),
        };
        apply(&rewrite, None, Some("/a"), &mut parts);
        assert_eq!(parts.uri, "/z?x=1");
    }

    #[test]
    fn prefix_rewrite_after_a_regex_match_keeps_the_path() {
        let mut parts = request("GET", "/a/b", &[]);
        let rewrite = UrlRewrite {
            hostname: None,
            path: Some(PathModifier::ReplacePrefixMatch {
                replace_prefix_match: crate::model::RewritePath("/z".into()),
            }),
        };
        apply(&rewrite, None, None, &mut parts);
        assert_eq!(parts.uri, "/a/b");
    }

    #[test]
    fn hostname_rewrite_sets_host_header_for_origin_form() {
        let mut parts = request("GET", "/p", &[("host", "old.example:8080")]);
        let rewrite = UrlRewrite {
            hostname: Some("new.example".into()),
            path: None,
        };
        apply(
            &rewrite,
            HostRewrite::new("new.example").as_ref(),
            None,
            &mut parts,
        );
        assert_eq!(parts.headers[HOST], "new.example");
        assert_eq!(parts.uri, "/p");
    }

    #[test]
    fn hostname_rewrite_changes_the_authority_of_an_absolute_uri() {
        let mut parts = request("GET", "http://old.example/p?q=1", &[]);
        let rewrite = UrlRewrite {
            hostname: Some("new.example".into()),
            path: None,
        };
        apply(
            &rewrite,
            HostRewrite::new("new.example").as_ref(),
            None,
            &mut parts,
        );
        assert_eq!(parts.uri, "http://new.example/p?q=1");
        assert!(
            !parts.headers.contains_key(HOST),
            "h2 requests carry no Host header to add"
        );
    }

    #[test]
    fn an_invalid_hostname_is_refused_at_build() {
        assert!(HostRewrite::new("bad host").is_none());
    }
}
