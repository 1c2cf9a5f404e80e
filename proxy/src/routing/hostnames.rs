//! Which routes a request's host selects (Gateway API HTTPRoute `hostnames`): the routes of the
//! most specific hostname that matches it come first (an exact name, then wildcards from the
//! longest suffix down, then routes without hostnames), and within each group the usual match
//! precedence decides.

use std::{borrow::Cow, collections::HashMap};

use http::{HeaderMap, Uri};

use crate::http::headers::target_host;

use crate::model::Route;

/// The table's entries (positions in its precedence order) grouped by hostname. Built only when
/// some route names a hostname; a table without any keeps the plain scan.
#[derive(Debug)]
pub(super) struct HostIndex {
    exact: HashMap<Box<str>, Box<[usize]>>,
    /// Keyed by the suffix after `*.`.
    wildcard: HashMap<Box<str>, Box<[usize]>>,
    /// Entries of routes without hostnames: every host reaches them, last.
    any: Box<[usize]>,
}

impl HostIndex {
    /// `entry_routes[i]` is the route of the `i`-th entry in precedence order.
    pub(super) fn new(routes: &[Route], entry_routes: &[usize]) -> Option<Self> {
        if routes.iter().all(|r| r.hostnames.is_empty()) {
            return None;
        }
        let mut exact: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut wildcard: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut any = Vec::new();
        for (i, &r) in entry_routes.iter().enumerate() {
            let names = &routes[r].hostnames;
            if names.is_empty() {
                any.push(i);
            }
            for h in names {
                let group = match h.wildcard_suffix() {
                    Some(suffix) => wildcard.entry(suffix).or_default(),
                    None => exact.entry(h.0.as_str()).or_default(),
                };
                // A route listing one name twice still has each entry once in its group.
                if group.last() != Some(&i) {
                    group.push(i);
                }
            }
        }
        let boxed = |m: HashMap<&str, Vec<usize>>| {
            m.into_iter()
                .map(|(k, v)| (Box::from(k), v.into_boxed_slice()))
                .collect()
        };
        Some(Self {
            exact: boxed(exact),
            wildcard: boxed(wildcard),
            any: any.into(),
        })
    }

    /// The groups of entries `host` may select, most specific first.
    pub(super) fn groups<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a [usize]> + 'a {
        let exact = self.exact.get(host).map(|g| &g[..]);
        // `a.b.example.com` tries `*.b.example.com`, `*.example.com`, `*.com`: longest first.
        let wildcards = host
            .match_indices('.')
            .filter_map(|(at, _)| self.wildcard.get(&host[at + 1..]).map(|g| &g[..]));
        exact
            .into_iter()
            .chain(wildcards)
            .chain(std::iter::once(&self.any[..]))
    }
}

/// The host a request names, as hostnames match it: [`target_host`] without a trailing dot,
/// in lower case.
pub(super) fn request_host<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<Cow<'a, str>> {
    let host = target_host(uri, headers)?;
    let host = host.strip_suffix('.').unwrap_or(host);
    Some(if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    })
}

#[cfg(test)]
mod tests {
    use http::header;

    use super::*;

    fn host(uri: &str, host_field: Option<&str>) -> Option<String> {
        let uri: Uri = uri.parse().expect("test uri");
        let mut h = HeaderMap::new();
        if let Some(v) = host_field {
            h.insert(header::HOST, v.parse().expect("test host"));
        }
        request_host(&uri, &h).map(Cow::into_owned)
    }

    #[test]
    fn the_host_comes_from_the_authority_else_host_without_port_dot_or_case() {
        assert_eq!(
            host("/p", Some("Api.Example.COM:8080")).as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            host("/p", Some("api.example.com.")).as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            host("http://a.test:81/p", Some("b.test")).as_deref(),
            Some("a.test")
        );
        assert_eq!(host("/p", Some("[::1]:80")).as_deref(), Some("[::1]"));
        assert_eq!(host("/p", Some("[::1]")).as_deref(), Some("[::1]"));
        assert_eq!(host("/p", None), None);
    }
}
