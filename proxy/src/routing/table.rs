//! The compiled route table: every (route, match) pair sorted once by Gateway API precedence, so
//! selection is a scan for the first hit; plus weighted backend choice.

use http::{HeaderMap, Method, Uri};

use super::{
    hostnames::{request_host, HostIndex},
    matches::CompiledMatch,
    url_rewrite::HostRewrite,
};
use crate::model::{self, BackendRef, Filter};

/// Routes compiled for selection. Build it once per routing snapshot and share it behind an `Arc`.
#[derive(Debug)]
pub struct RouteTable {
    routes: Box<[CompiledRoute]>,
    /// Sorted by precedence, ties kept in route then match order, so the first match wins.
    entries: Box<[Entry]>,
    /// The entries grouped by route hostname; `None` when no route names one.
    hosts: Option<HostIndex>,
}

#[derive(Debug)]
struct CompiledRoute {
    route: model::Route,
    /// Running totals of backend weights; the last is the total.
    cumulative: Box<[u64]>,
    /// Per filter position: the parsed hostname of a `URLRewrite`, if it has a valid one.
    hosts: Box<[Option<HostRewrite>]>,
}

#[derive(Debug)]
struct Entry {
    route: usize,
    /// `None` for a route without matches (its implicit `PathPrefix /`).
    route_match: Option<usize>,
    matcher: CompiledMatch,
}

/// The route a request selected and which of its matches did it.
#[derive(Debug, Clone, Copy)]
pub struct Selected<'a> {
    /// Position of the route in the slice the table was built from; pass it to `pick_backend`.
    pub index: usize,
    /// The route itself.
    pub route: &'a model::Route,
    /// The match that selected the route; `None` when the route has no matches.
    pub route_match: Option<&'a model::RouteMatch>,
    /// The path `ReplacePrefixMatch` strips (normalised prefix or exact path; `None` after a regex).
    pub(super) matched_prefix: Option<&'a str>,
    pub(super) hosts: &'a [Option<HostRewrite>],
}

impl RouteTable {
    /// Compiles `routes`; a regex that does not compile matches nothing and is logged.
    pub fn new(routes: &[model::Route]) -> Self {
        let mut entries = Vec::new();
        for (i, route) in routes.iter().enumerate() {
            if route.matches.is_empty() {
                entries.push(Entry {
                    route: i,
                    route_match: None,
                    matcher: CompiledMatch::catch_all(),
                });
            }
            for (j, m) in route.matches.iter().enumerate() {
                entries.push(Entry {
                    route: i,
                    route_match: Some(j),
                    matcher: CompiledMatch::new(m),
                });
            }
        }
        // A stable sort keeps list order among equals, the spec's final tie-break.
        entries.sort_by_key(|e| e.matcher.precedence());
        let entry_routes: Vec<usize> = entries.iter().map(|e| e.route).collect();
        let hosts = HostIndex::new(routes, &entry_routes);
        let routes = routes.iter().map(CompiledRoute::new).collect();
        Self {
            routes,
            entries: entries.into(),
            hosts,
        }
    }

    /// The highest-precedence route matching the request, if any: among the routes of the
    /// request host's most specific hostname first, when routes name hostnames.
    pub fn select(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Selected<'_>> {
        let (path, query) = (uri.path(), uri.query());
        let hit = |e: &&Entry| e.matcher.matches(method, path, query, headers);
        let entry = match &self.hosts {
            None => self.entries.iter().find(hit)?,
            Some(index) => {
                let host = request_host(uri, headers).unwrap_or_default();
                let found = index
                    .groups(&host)
                    .find_map(|group| group.iter().map(|&i| &self.entries[i]).find(hit));
                found?
            }
        };
        let compiled = self.routes.get(entry.route)?;
        Some(Selected {
            index: entry.route,
            route: &compiled.route,
            route_match: entry
                .route_match
                .and_then(|j| compiled.route.matches.get(j)),
            matched_prefix: entry.matcher.replaceable_prefix(),
            hosts: &compiled.hosts,
        })
    }

    /// Chooses a backend of route `route_index` by weight; `rnd` is a uniform random `u32`.
    /// Zero-weight backends are never chosen; `None` when every weight is zero or there are no
    /// backends (Gateway API answers 500 then).
    pub fn pick_backend(&self, route_index: usize, rnd: u32) -> Option<&BackendRef> {
        let compiled = self.routes.get(route_index)?;
        let total = *compiled.cumulative.last()?;
        if total == 0 {
            return None;
        }
        // Scales rnd into [0, total) without modulo bias worth measuring; u128 because a total of
        // many u32 weights can pass u32::MAX.
        let target = ((u128::from(rnd) * u128::from(total)) >> 32) as u64;
        let i = compiled.cumulative.partition_point(|&c| c <= target);
        compiled.route.backend_refs.get(i)
    }

    /// The route at `index`, as given to `new`.
    pub fn route(&self, index: usize) -> Option<&model::Route> {
        self.routes.get(index).map(|r| &r.route)
    }

    /// How many routes the table holds.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether the table holds no routes (then `select` always answers `None`).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

impl CompiledRoute {
    fn new(route: &model::Route) -> Self {
        let cumulative = route
            .backend_refs
            .iter()
            .scan(0u64, |sum, b| {
                *sum += u64::from(b.weight);
                Some(*sum)
            })
            .collect();
        let hosts = route
            .filters
            .iter()
            .map(|f| match f {
                Filter::URLRewrite { url_rewrite } => {
                    url_rewrite.hostname.as_deref().and_then(HostRewrite::new)
                }
                _ => None,
            })
            .collect();
        Self {
            route: route.clone(),
            cumulative,
            hosts,
        }
    }
}

impl Selected<'_> {
    pub(super) fn host_rewrite(&self, filter_index: usize) -> Option<&HostRewrite> {
        self.hosts.get(filter_index).and_then(Option::as_ref)
    }
}

// Workers share one table behind an Arc; this stops compiling if a field breaks that.
const _: fn() = || {
    fn shareable<T: std::fmt::Debug + Send + Sync>() {}
    shareable::<RouteTable>();
};

#[cfg(test)]
mod tests {
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    use super::*;
    use crate::routing::test_support::{headers, routes};

    fn table(yaml: &str) -> RouteTable {
        RouteTable::new(&routes(yaml))
    }

    fn pick(t: &RouteTable, method: &str, uri: &str, hdrs: &[(&str, &str)]) -> Option<String> {
        let uri: Uri = uri.parse().expect("test uri");
        let method: Method = method.parse().expect("test method");
        t.select(&method, &uri, &headers(hdrs))
            .map(|s| s.route.name.clone())
    }

    #[test]
    fn exact_path_beats_any_prefix_in_any_route_order() {
        let t = table(
            "- { name: prefix, matches: [{ path: { type: PathPrefix, value: /a/b } }] }\n\
             - { name: exact, matches: [{ path: { type: Exact, value: /a/b } }] }",
        );
        assert_eq!(pick(&t, "GET", "/a/b", &[]).as_deref(), Some("exact"));
        assert_eq!(pick(&t, "GET", "/a/b/c", &[]).as_deref(), Some("prefix"));
    }

    #[test]
    fn longer_prefix_beats_shorter_and_regex_comes_last() {
        let t = table(
            "- { name: regex, matches: [{ path: { type: RegularExpression, value: '/api/.*' } }] }\n\
             - { name: short, matches: [{ path: { type: PathPrefix, value: /api } }] }\n\
             - { name: long, matches: [{ path: { type: PathPrefix, value: /api/v2 } }] }",
        );
        assert_eq!(pick(&t, "GET", "/api/v2/x", &[]).as_deref(), Some("long"));
        assert_eq!(pick(&t, "GET", "/api/v1/x", &[]).as_deref(), Some("short"));
    }

    #[test]
    fn method_beats_headers_which_beat_query_params() {
        let t = table(
            "- { name: query, matches: [{ queryParams: [{ name: q, value: '1' }, { name: r, value: '1' }] }] }\n\
             - { name: header, matches: [{ headers: [{ name: h, value: '1' }] }] }\n\
             - { name: method, matches: [{ method: GET }] }",
        );
        assert_eq!(
            pick(&t, "GET", "/?q=1&r=1", &[("h", "1")]).as_deref(),
            Some("method")
        );
        assert_eq!(
            pick(&t, "POST", "/?q=1&r=1", &[("h", "1")]).as_deref(),
            Some("header")
        );
        assert_eq!(pick(&t, "POST", "/?q=1&r=1", &[]).as_deref(), Some("query"));
    }

    #[test]
    fn more_header_matches_win() {
        let t = table(
            "- { name: one, matches: [{ headers: [{ name: a, value: '1' }] }] }\n\
             - { name: two, matches: [{ headers: [{ name: a, value: '1' }, { name: b, value: '1' }] }] }",
        );
        assert_eq!(
            pick(&t, "GET", "/", &[("a", "1"), ("b", "1")]).as_deref(),
            Some("two")
        );
        assert_eq!(pick(&t, "GET", "/", &[("a", "1")]).as_deref(), Some("one"));
    }

    #[test]
    fn a_full_tie_goes_to_the_earlier_route() {
        let t = table(
            "- { name: first, matches: [{ path: { type: PathPrefix, value: /x } }] }\n\
             - { name: second, matches: [{ path: { type: PathPrefix, value: /x/ } }] }",
        );
        assert_eq!(pick(&t, "GET", "/x/y", &[]).as_deref(), Some("first"));
    }

    #[test]
    fn a_route_without_matches_catches_everything_else() {
        let t = table(
            "- { name: default }\n\
             - { name: api, matches: [{ path: { type: PathPrefix, value: /api } }] }",
        );
        assert_eq!(pick(&t, "GET", "/api/x", &[]).as_deref(), Some("api"));
        assert_eq!(
            pick(&t, "DELETE", "/other?z", &[]).as_deref(),
            Some("default")
        );
        let t = table("- { name: api, matches: [{ path: { type: PathPrefix, value: /api } }] }");
        assert_eq!(pick(&t, "GET", "/other", &[]), None);
    }

    #[test]
    fn selected_names_the_match_that_won_and_its_prefix() {
        let t = table(
            "- { name: r, matches: [{ path: { type: PathPrefix, value: /a }, method: POST }, \
                                    { path: { type: PathPrefix, value: /b/ } }] }",
        );
        let uri: Uri = "/b/c".parse().expect("test uri");
        let s = t
            .select(&Method::GET, &uri, &HeaderMap::new())
            .expect("a route");
        assert_eq!(s.index, 0);
        assert_eq!(s.route_match, s.route.matches.get(1));
        assert_eq!(s.matched_prefix, Some("/b"));
    }

    #[test]
    fn weighted_choice_follows_weights_within_two_percent() {
        let t = table("- { backendRefs: [{ name: a, weight: 50 }, { name: b, weight: 0 }, { name: c, weight: 30 }, { name: d, weight: 20 }] }");
        let mut rng = SmallRng::seed_from_u64(0x5eed);
        let mut counts = [0u32; 4];
        for _ in 0..10_000 {
            let name = t.pick_backend(0, rng.gen()).map(|b| b.name.as_str());
            let slot = ["a", "b", "c", "d"]
                .iter()
                .position(|n| Some(*n) == name)
                .expect("a known backend");
            counts[slot] += 1;
        }
        assert_eq!(counts[1], 0, "weight 0 is never chosen");
        for (count, want) in [(counts[0], 5000), (counts[2], 3000), (counts[3], 2000)] {
            assert!(count.abs_diff(want) <= 200, "{counts:?}");
        }
    }

    #[test]
    fn extreme_draws_stay_in_range_and_skip_zero_weights() {
        let t = table("- { backendRefs: [{ name: z, weight: 0 }, { name: a, weight: 1 }, { name: y, weight: 0 }] }");
        for rnd in [0, 1, u32::MAX / 2, u32::MAX] {
            assert_eq!(t.pick_backend(0, rnd).map(|b| b.name.as_str()), Some("a"));
        }
        let huge = table(
            "- { backendRefs: [{ name: a, weight: 4294967295 }, { name: b, weight: 4294967295 }] }",
        );
        assert_eq!(
            huge.pick_backend(0, u32::MAX).map(|b| b.name.as_str()),
            Some("b")
        );
        assert_eq!(huge.pick_backend(0, 0).map(|b| b.name.as_str()), Some("a"));
    }

    #[test]
    fn no_backend_is_picked_when_all_weights_are_zero_or_none_exist() {
        let t = table(
            "- { backendRefs: [{ name: a, weight: 0 }] }\n\
             - { name: empty }",
        );
        assert!(t.pick_backend(0, 123).is_none());
        assert!(t.pick_backend(1, 123).is_none());
        assert!(t.pick_backend(2, 123).is_none());
    }

    fn on_host(t: &RouteTable, host: Option<&str>, uri: &str) -> Option<String> {
        let h: Vec<(&str, &str)> = host.map(|h| ("host", h)).into_iter().collect();
        pick(t, "GET", uri, &h)
    }

    #[test]
    fn the_most_specific_hostname_decides_before_the_path_does() {
        // File order and path precedence both favour the routes without or with wider hosts.
        let t = table(
            "- { name: any, matches: [{ path: { type: Exact, value: /a } }] }\n\
             - { name: wild, hostnames: ['*.example.com'], matches: [{ path: { type: Exact, value: /a } }] }\n\
             - { name: deeper, hostnames: ['*.api.example.com'] }\n\
             - { name: exact, hostnames: [x.api.example.com, other.test] }",
        );
        assert_eq!(
            on_host(&t, Some("x.api.example.com"), "/a").as_deref(),
            Some("exact")
        );
        assert_eq!(
            on_host(&t, Some("other.test"), "/a").as_deref(),
            Some("exact")
        );
        assert_eq!(
            on_host(&t, Some("y.api.example.com"), "/a").as_deref(),
            Some("deeper")
        );
        assert_eq!(
            on_host(&t, Some("y.example.com"), "/a").as_deref(),
            Some("wild")
        );
        assert_eq!(
            on_host(&t, Some("a.b.example.com"), "/a").as_deref(),
            Some("wild")
        );
        // A wildcard never matches the bare suffix.
        assert_eq!(
            on_host(&t, Some("example.com"), "/a").as_deref(),
            Some("any")
        );
        assert_eq!(
            on_host(&t, Some("elsewhere.test"), "/a").as_deref(),
            Some("any")
        );
        assert_eq!(on_host(&t, None, "/a").as_deref(), Some("any"));
        // The Host's port, case and trailing dot do not matter; an absolute target's does.
        assert_eq!(
            on_host(&t, Some("X.API.Example.com:8080"), "/a").as_deref(),
            Some("exact")
        );
        assert_eq!(
            on_host(&t, Some("other.test."), "/a").as_deref(),
            Some("exact")
        );
        assert_eq!(
            on_host(&t, Some("elsewhere.test"), "http://other.test/a").as_deref(),
            Some("exact")
        );
    }

    #[test]
    fn a_host_whose_routes_do_not_match_falls_to_less_specific_ones() {
        let t = table(
            "- { name: exact, hostnames: [a.test], matches: [{ path: { type: PathPrefix, value: /api } }] }\n\
             - { name: wild, hostnames: ['*.test'], matches: [{ path: { type: PathPrefix, value: /web } }] }\n\
             - { name: any, matches: [{ path: { type: PathPrefix, value: /static } }] }",
        );
        assert_eq!(
            on_host(&t, Some("a.test"), "/api/x").as_deref(),
            Some("exact")
        );
        assert_eq!(
            on_host(&t, Some("a.test"), "/web/x").as_deref(),
            Some("wild")
        );
        assert_eq!(
            on_host(&t, Some("a.test"), "/static/x").as_deref(),
            Some("any")
        );
        assert_eq!(on_host(&t, Some("a.test"), "/other"), None);
        assert_eq!(on_host(&t, Some("b.test"), "/api/x"), None);
        let only_named = table("- { name: named, hostnames: [a.test] }");
        assert_eq!(
            on_host(&only_named, Some("a.test"), "/").as_deref(),
            Some("named")
        );
        assert_eq!(on_host(&only_named, Some("b.test"), "/"), None);
        assert_eq!(on_host(&only_named, None, "/"), None);
    }
}
