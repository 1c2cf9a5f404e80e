//! One compiled `RouteMatch` (path, method, headers, query parameters), tested against a request
//! without allocating, and the static key that Gateway API precedence sorts matches by.

use std::{borrow::Cow, cmp::Reverse};

use http::{HeaderMap, Method};
use regex::Regex;

use crate::model::{self, PathMatch, ValueMatchKind};

/// A `RouteMatch` ready to test: regexes compiled, duplicate names dropped, prefix normalised.
#[derive(Debug)]
pub(super) struct CompiledMatch {
    path: PathMatcher,
    method: Option<Method>,
    headers: Box<[HeaderMatcher]>,
    query: Box<[QueryMatcher]>,
}

#[derive(Debug)]
enum PathMatcher {
    Exact(Box<str>),
    /// Without its trailing slash (Gateway API ignores it); "" is the root, which matches all.
    Prefix(Box<str>),
    Regex(model::Pattern),
}

#[derive(Debug)]
enum ValueMatcher {
    Exact(Box<str>),
    Regex(Regex),
    /// A regex that did not compile: matching nothing keeps a typo from widening a route.
    Never,
}

#[derive(Debug)]
struct HeaderMatcher {
    name: http::HeaderName,
    value: ValueMatcher,
}

#[derive(Debug)]
struct QueryMatcher {
    name: Box<str>,
    value: ValueMatcher,
}

/// Gateway API precedence; the smaller key wins. Method sits before header and query counts as
/// the spec (and its conformance suite) order them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Precedence {
    path_kind: u8,
    path_len: Reverse<usize>,
    method: Reverse<bool>,
    headers: Reverse<usize>,
    query: Reverse<usize>,
}

impl CompiledMatch {
    /// What a route without matches means: Gateway API's default `PathPrefix /`.
    pub(super) fn catch_all() -> Self {
        Self {
            path: PathMatcher::Prefix("".into()),
            method: None,
            headers: [].into(),
            query: [].into(),
        }
    }

    pub(super) fn new(m: &model::RouteMatch) -> Self {
        let path = match &m.path {
            None => PathMatcher::Prefix("".into()),
            Some(PathMatch::Exact(p)) => PathMatcher::Exact((**p).into()),
            Some(PathMatch::PathPrefix(p)) => PathMatcher::Prefix(p.trim_end_matches('/').into()),
            Some(PathMatch::RegularExpression(p)) => PathMatcher::Regex(p.clone()),
        };
        // Gateway API: of several entries naming the same header or parameter, only the first counts.
        let mut headers: Vec<HeaderMatcher> = Vec::with_capacity(m.headers.len());
        for h in &m.headers {
            if headers.iter().all(|seen| seen.name != h.name.0) {
                headers.push(HeaderMatcher {
                    name: h.name.0.clone(),
                    value: ValueMatcher::new(h.kind, &h.value),
                });
            }
        }
        let mut query: Vec<QueryMatcher> = Vec::with_capacity(m.query_params.len());
        for q in &m.query_params {
            if query.iter().all(|seen| *seen.name != *q.name) {
                query.push(QueryMatcher {
                    name: q.name.as_str().into(),
                    value: ValueMatcher::new(q.kind, &q.value),
                });
            }
        }
        let method = m.method.as_ref().map(|m| m.0.clone());
        Self {
            path,
            method,
            headers: headers.into(),
            query: query.into(),
        }
    }

    pub(super) fn precedence(&self) -> Precedence {
        let (path_kind, path_len) = match &self.path {
            PathMatcher::Exact(p) => (0, p.len()),
            PathMatcher::Prefix(p) => (1, p.len()),
            PathMatcher::Regex(_) => (2, 0),
        };
        Precedence {
            path_kind,
            path_len: Reverse(path_len),
            method: Reverse(self.method.is_some()),
            headers: Reverse(self.headers.len()),
            query: Reverse(self.query.len()),
        }
    }

    /// The prefix `ReplacePrefixMatch` strips: the normalised prefix, or the whole exact path.
    pub(super) fn replaceable_prefix(&self) -> Option<&str> {
        match &self.path {
            PathMatcher::Exact(p) | PathMatcher::Prefix(p) => Some(p),
            PathMatcher::Regex(_) => None,
        }
    }

    pub(super) fn matches(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> bool {
        (self.method.is_none() || self.method.as_ref() == Some(method))
            && self.path.matches(path)
            && self.headers.iter().all(|h| {
                headers
                    .get_all(&h.name)
                    .iter()
                    .any(|v| h.value.matches_bytes(v.as_bytes()))
            })
            && self.query.iter().all(|q| {
                first_query_value(query.unwrap_or(""), &q.name)
                    .is_some_and(|v| q.value.matches_encoded(v))
            })
    }
}

impl PathMatcher {
    fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => path == &**p,
            Self::Prefix(p) if p.is_empty() => true,
            // Segment boundary: "/foo" takes "/foo" and "/foo/bar" but not "/foobar".
            Self::Prefix(p) => path
                .strip_prefix(&**p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
            Self::Regex(re) => re.0.is_match(path),
        }
    }
}

impl ValueMatcher {
    fn new(kind: ValueMatchKind, value: &str) -> Self {
        match kind {
            ValueMatchKind::Exact => Self::Exact(value.into()),
            ValueMatchKind::RegularExpression => match Regex::new(&format!("^(?:{value})$")) {
                Ok(re) => Self::Regex(re),
                Err(error) => {
                    tracing::warn!(%error, pattern = value, "route match regex does not compile; it matches nothing");
                    Self::Never
                }
            },
        }
    }

    fn matches_bytes(&self, value: &[u8]) -> bool {
        match self {
            Self::Exact(want) => value == want.as_bytes(),
            Self::Regex(re) => std::str::from_utf8(value).is_ok_and(|v| re.is_match(v)),
            Self::Never => false,
        }
    }

    /// Compares against the percent-decoded form of a raw query value.
    fn matches_encoded(&self, raw: &str) -> bool {
        match self {
            Self::Exact(want) => decode_bytes(raw).eq(want.bytes()),
            Self::Regex(re) => re.is_match(&decode(raw)),
            Self::Never => false,
        }
    }
}

/// The raw value of the first `name` in the query (Gateway API recommends the first occurrence).
fn first_query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        decode_bytes(k).eq(name.bytes()).then_some(v)
    })
}

/// Percent-decodes lazily so exact comparisons allocate nothing; a malformed escape stays literal.
fn decode_bytes(raw: &str) -> impl Iterator<Item = u8> + '_ {
    let bytes = raw.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        let b = *bytes.get(i)?;
        if b == b'%' {
            if let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(hex),
                bytes.get(i + 2).and_then(hex),
            ) {
                i += 3;
                return Some(hi << 4 | lo);
            }
        }
        i += 1;
        Some(b)
    })
}

fn hex(b: &u8) -> Option<u8> {
    (*b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

fn decode(raw: &str) -> Cow<'_, str> {
    if raw.contains('%') {
        Cow::Owned(String::from_utf8_lossy(&decode_bytes(raw).collect::<Vec<u8>>()).into_owned())
    } else {
        Cow::Borrowed(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::{headers, route_match};

    fn hit(m: &str, method: &str, uri: &str, hdrs: &[(&str, &str)]) -> bool {
        let uri: http::Uri = uri.parse().expect("test uri");
        let method: Method = method.parse().expect("test method");
        CompiledMatch::new(&route_match(m)).matches(
            &method,
            uri.path(),
            uri.query(),
            &headers(hdrs),
        )
    }

    #[test]
    fn path_prefix_matches_on_segment_boundaries_only() {
        let m = "path: { type: PathPrefix, value: /foo }";
        for path in ["/foo", "/foo/", "/foo/bar"] {
            assert!(hit(m, "GET", path, &[]), "{path}");
        }
        assert!(!hit(m, "GET", "/foobar", &[]));
        assert!(!hit(m, "GET", "/fo", &[]));
    }

    #[test]
    fn path_prefix_ignores_its_trailing_slash() {
        let m = "path: { type: PathPrefix, value: /foo/ }";
        assert!(hit(m, "GET", "/foo", &[]));
        assert!(hit(m, "GET", "/foo/bar", &[]));
        assert!(!hit(m, "GET", "/foobar", &[]));
    }

    #[test]
    fn root_prefix_and_missing_path_match_every_path() {
        for m in ["path: { type: PathPrefix, value: / }", "method: GET"] {
            assert!(hit(m, "GET", "/", &[]));
            assert!(hit(m, "GET", "/anything/at/all?x=1", &[]));
        }
    }

    #[test]
    fn exact_path_matches_only_that_path_ignoring_the_query() {
        let m = "path: { type: Exact, value: /foo }";
        assert!(hit(m, "GET", "/foo?a=b", &[]));
        assert!(!hit(m, "GET", "/foo/", &[]));
        assert!(!hit(m, "GET", "/Foo", &[]));
    }

    #[test]
    fn regex_path_is_anchored() {
        let m = r"path: { type: RegularExpression, value: '/v[0-9]+/items' }";
        assert!(hit(m, "GET", "/v2/items", &[]));
        assert!(!hit(m, "GET", "/v2/items/7", &[]));
        assert!(!hit(m, "GET", "/api/v2/items", &[]));
    }

    #[test]
    fn header_names_match_case_insensitively_and_values_exactly() {
        let m = "headers: [{ name: X-Env, value: canary }]";
        assert!(hit(m, "GET", "/", &[("x-env", "canary")]));
        assert!(!hit(m, "GET", "/", &[("x-env", "Canary")]));
        assert!(!hit(m, "GET", "/", &[]));
        assert!(hit(
            m,
            "GET",
            "/",
            &[("x-env", "stable"), ("x-env", "canary")]
        ));
    }

    #[test]
    fn header_regex_is_anchored_and_a_broken_regex_matches_nothing() {
        let m = "headers: [{ type: RegularExpression, name: x-v, value: 'v[12]' }]";
        assert!(hit(m, "GET", "/", &[("x-v", "v2")]));
        assert!(!hit(m, "GET", "/", &[("x-v", "v22")]));
        let broken = "headers: [{ type: RegularExpression, name: x-v, value: '(' }]";
        assert!(!hit(broken, "GET", "/", &[("x-v", "(")]));
    }

    #[test]
    fn only_the_first_entry_for_a_header_name_counts() {
        let m = "headers: [{ name: x-a, value: '1' }, { name: X-A, value: '2' }]";
        assert!(hit(m, "GET", "/", &[("x-a", "1")]));
        assert_eq!(CompiledMatch::new(&route_match(m)).headers.len(), 1);
    }

    #[test]
    fn query_params_match_decoded_values_of_the_first_occurrence() {
        let m = "queryParams: [{ name: q, value: a b }]";
        assert!(hit(m, "GET", "/?q=a%20b", &[]));
        assert!(hit(m, "GET", "/?x=1&q=a%20b&q=zzz", &[]));
        assert!(!hit(m, "GET", "/?q=zzz&q=a%20b", &[]));
        assert!(!hit(m, "GET", "/?Q=a%20b", &[]));
        assert!(!hit(m, "GET", "/", &[]));
        let encoded_name = "queryParams: [{ name: 'a&b', value: '1' }]";
        assert!(hit(encoded_name, "GET", "/?a%26b=1", &[]));
    }

    #[test]
    fn query_param_regex_sees_the_decoded_value() {
        let m = "queryParams: [{ type: RegularExpression, name: id, value: '[0-9]+ x' }]";
        assert!(hit(m, "GET", "/?id=42%20x", &[]));
        assert!(!hit(m, "GET", "/?id=42", &[]));
    }

    #[test]
    fn method_must_equal_when_given() {
        let m = "method: POST";
        assert!(hit(m, "POST", "/", &[]));
        assert!(!hit(m, "GET", "/", &[]));
    }

    #[test]
    fn malformed_percent_escapes_compare_literally() {
        assert!(decode_bytes("%zz%4").eq(*b"%zz%4"));
        assert!(decode_bytes("%41%2f").eq(*b"A/"));
    }

    #[test]
    fn precedence_orders_exact_then_longer_prefix_then_method_headers_query() {
        let key = |m: &str| CompiledMatch::new(&route_match(m)).precedence();
        assert!(
            key("path: { type: Exact, value: /a }")
                < key("path: { type: PathPrefix, value: /a/b/c }")
        );
        assert!(
            key("path: { type: PathPrefix, value: /a/b }")
                < key("path: { type: PathPrefix, value: /a }")
        );
        assert!(
            key("path: { type: PathPrefix, value: / }")
                < key("path: { type: RegularExpression, value: /a }")
        );
        assert!(key("method: GET") < key("headers: [{ name: a, value: b }]"));
        assert!(
            key("headers: [{ name: a, value: b }]") < key("queryParams: [{ name: a, value: b }]")
        );
        assert_eq!(
            key("path: { type: PathPrefix, value: /a/ }"),
            key("path: { type: PathPrefix, value: /a }")
        );
    }
}
