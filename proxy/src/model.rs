//! The domain model shared by every stage: services, endpoints, routes, policy. Deserialized
//! straight from the registry file (YAML, camelCase, unknown fields refused); protobuf converts
//! into these types at the boundary.

use std::{collections::HashMap, fmt, net::SocketAddr, str::FromStr, sync::Arc, time::Duration};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A whole registry: what the file holds, validated, published as one `Arc<Registry>`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    #[serde(default)]
    pub services: Vec<Service>,
    #[serde(default)]
    pub gateway: Gateway,
}

/// Edge routes served on the gateway listener.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gateway {
    #[serde(default)]
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Service {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Authorities (Host / :authority, without port) that name this service.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Virtual addresses transparent clients dial.
    #[serde(default)]
    pub addresses: Vec<SocketAddr>,
    #[serde(default)]
    pub app_protocol: Option<AppProtocol>,
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub policy: Policy,
}

pub fn default_namespace() -> String {
    "default".to_string()
}

/// What protocol a service's endpoints speak, when it differs from what the client spoke.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AppProtocol {
    Http,
    H2c,
    Grpc,
    Tcp,
    Tls,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    pub address: SocketAddr,
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Expected peer identity (SPIFFE id), checked once mTLS lands.
    #[serde(default)]
    pub identity: Option<String>,
    #[serde(default)]
    pub labels: HashMap<String, String>,
    #[serde(default = "default_true")]
    pub ready: bool,
}

pub fn default_weight() -> u32 {
    1
}
fn default_true() -> bool {
    true
}

/// A Gateway API HTTPRoute rule: matches → ordered filters → weighted backends.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    #[serde(default)]
    pub name: String,
    /// Any one match selects the route; no matches = matches everything.
    #[serde(default)]
    pub matches: Vec<RouteMatch>,
    #[serde(default)]
    pub filters: Vec<Filter>,
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
    #[serde(default)]
    pub timeouts: Option<RouteTimeouts>,
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreakerPolicy>,
    #[serde(default)]
    pub rate_limit: Option<RateLimitPolicy>,
}

/// All present conditions must hold.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteMatch {
    #[serde(default)]
    pub path: Option<PathMatch>,
    #[serde(default)]
    pub headers: Vec<HeaderMatch>,
    #[serde(default)]
    pub query_params: Vec<QueryParamMatch>,
    #[serde(default)]
    pub method: Option<Method>,
}

/// With `type` written before `value`, a bad regex is reported at the value; the other way round
/// serde buffers the value and the error points at the `path` mapping.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "type", content = "value", deny_unknown_fields)]
pub enum PathMatch {
    Exact(String),
    PathPrefix(String),
    RegularExpression(Pattern),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderMatch {
    #[serde(rename = "type", default)]
    pub kind: ValueMatchKind,
    pub name: HeaderName,
    pub value: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueryParamMatch {
    #[serde(rename = "type", default)]
    pub kind: ValueMatchKind,
    pub name: String,
    pub value: String,
}

/// Gateway API: `Exact` (default) or `RegularExpression` for header and query matches.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum ValueMatchKind {
    #[default]
    Exact,
    RegularExpression,
}

/// Ordered filters, applied in the order written. Deserialized through [`FilterRepr`] (see there).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type")]
pub enum Filter {
    RequestHeaderModifier {
        #[serde(rename = "requestHeaderModifier")]
        request_header_modifier: HeaderModifier,
    },
    ResponseHeaderModifier {
        #[serde(rename = "responseHeaderModifier")]
        response_header_modifier: HeaderModifier,
    },
    URLRewrite {
        #[serde(rename = "urlRewrite")]
        url_rewrite: UrlRewrite,
    },
    RequestRedirect {
        #[serde(rename = "requestRedirect")]
        request_redirect: RequestRedirect,
    },
    /// Spring Cloud Gateway's AddRequestParameter.
    AddQueryParameter {
        #[serde(rename = "addQueryParameter")]
        add_query_parameter: NameValue,
    },
    RequestMirror {
        #[serde(rename = "requestMirror")]
        request_mirror: RequestMirror,
    },
    Fault {
        fault: Fault,
    },
}

/// The wire shape of a [`Filter`]: `type` plus one payload field. Serde's internally tagged enums
/// buffer the whole mapping before choosing the variant, which loses serde_yaml's positions (a bad
/// duration deep inside a filter was reported at the start of the `filters` list); a plain struct
/// streams, so every error keeps its own line and column.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FilterRepr {
    #[serde(rename = "type")]
    kind: FilterKind,
    request_header_modifier: Option<HeaderModifier>,
    response_header_modifier: Option<HeaderModifier>,
    url_rewrite: Option<UrlRewrite>,
    request_redirect: Option<RequestRedirect>,
    add_query_parameter: Option<NameValue>,
    request_mirror: Option<RequestMirror>,
    fault: Option<Fault>,
}

#[derive(Deserialize)]
enum FilterKind {
    RequestHeaderModifier,
    ResponseHeaderModifier,
    URLRewrite,
    RequestRedirect,
    AddQueryParameter,
    RequestMirror,
    Fault,
}

impl TryFrom<FilterRepr> for Filter {
    type Error = String;

    fn try_from(r: FilterRepr) -> Result<Self, String> {
        let present = [
            ("requestHeaderModifier", r.request_header_modifier.is_some()),
            (
                "responseHeaderModifier",
                r.response_header_modifier.is_some(),
            ),
            ("urlRewrite", r.url_rewrite.is_some()),
            ("requestRedirect", r.request_redirect.is_some()),
            ("addQueryParameter", r.add_query_parameter.is_some()),
            ("requestMirror", r.request_mirror.is_some()),
            ("fault", r.fault.is_some()),
        ];
        let (name, filter) = match r.kind {
            FilterKind::RequestHeaderModifier => (
                "requestHeaderModifier",
                r.request_header_modifier
                    .map(|m| Filter::RequestHeaderModifier {
                        request_header_modifier: m,
                    }),
            ),
            FilterKind::ResponseHeaderModifier => (
                "responseHeaderModifier",
                r.response_header_modifier
                    .map(|m| Filter::ResponseHeaderModifier {
                        response_header_modifier: m,
                    }),
            ),
            FilterKind::URLRewrite => (
                "urlRewrite",
                r.url_rewrite.map(|u| Filter::URLRewrite { url_rewrite: u }),
            ),
            FilterKind::RequestRedirect => (
                "requestRedirect",
                r.request_redirect.map(|x| Filter::RequestRedirect {
                    request_redirect: x,
                }),
            ),
            FilterKind::AddQueryParameter => (
                "addQueryParameter",
                r.add_query_parameter.map(|x| Filter::AddQueryParameter {
                    add_query_parameter: x,
                }),
            ),
            FilterKind::RequestMirror => (
                "requestMirror",
                r.request_mirror
                    .map(|x| Filter::RequestMirror { request_mirror: x }),
            ),
            FilterKind::Fault => ("fault", r.fault.map(|fault| Filter::Fault { fault })),
        };
        if let Some((stray, _)) = present.iter().find(|(field, set)| *set && *field != name) {
            return Err(format!(
                "field `{stray}` does not belong in this filter, expected `{name}`"
            ));
        }
        filter.ok_or_else(|| format!("missing field `{name}`"))
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderModifier {
    #[serde(default)]
    pub set: Vec<HeaderValuePair>,
    #[serde(default)]
    pub add: Vec<HeaderValuePair>,
    #[serde(default)]
    pub remove: Vec<HeaderName>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderValuePair {
    pub name: HeaderName,
    pub value: HeaderValue,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlRewrite {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub path: Option<PathModifier>,
}

/// Deserialized through [`PathModifierRepr`], for the same reason as [`FilterRepr`].
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type")]
pub enum PathModifier {
    ReplaceFullPath {
        #[serde(rename = "replaceFullPath")]
        replace_full_path: String,
    },
    ReplacePrefixMatch {
        #[serde(rename = "replacePrefixMatch")]
        replace_prefix_match: String,
    },
}

/// The wire shape of a [`PathModifier`]; see [`FilterRepr`] for why it is not a tagged enum.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PathModifierRepr {
    #[serde(rename = "type")]
    kind: PathModifierKind,
    replace_full_path: Option<String>,
    replace_prefix_match: Option<String>,
}

#[derive(Deserialize)]
enum PathModifierKind {
    ReplaceFullPath,
    ReplacePrefixMatch,
}

impl TryFrom<PathModifierRepr> for PathModifier {
    type Error = String;

    fn try_from(r: PathModifierRepr) -> Result<Self, String> {
        match (r.kind, r.replace_full_path, r.replace_prefix_match) {
            (PathModifierKind::ReplaceFullPath, Some(p), None) => {
                Ok(PathModifier::ReplaceFullPath {
                    replace_full_path: p,
                })
            }
            (PathModifierKind::ReplacePrefixMatch, None, Some(p)) => {
                Ok(PathModifier::ReplacePrefixMatch {
                    replace_prefix_match: p,
                })
            }
            (PathModifierKind::ReplaceFullPath, _, Some(_)) => Err(
                "field `replacePrefixMatch` does not belong in a ReplaceFullPath modifier".into(),
            ),
            (PathModifierKind::ReplacePrefixMatch, Some(_), _) => Err(
                "field `replaceFullPath` does not belong in a ReplacePrefixMatch modifier".into(),
            ),
            (PathModifierKind::ReplaceFullPath, None, None) => {
                Err("missing field `replaceFullPath`".into())
            }
            (PathModifierKind::ReplacePrefixMatch, _, None) => {
                Err("missing field `replacePrefixMatch`".into())
            }
        }
    }
}

/// Deserializes `$ty` from the mapping shape `$repr`, converting inside `visit_map` so a conversion
/// error is pinned to the mapping (serde's `try_from` would report it at the enclosing list).
macro_rules! deserialize_via_repr {
    ($ty:ident, $repr:ident, $what:literal) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<$ty, A::Error> {
                        let repr = $repr::deserialize(de::value::MapAccessDeserializer::new(map))?;
                        $ty::try_from(repr).map_err(de::Error::custom)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

deserialize_via_repr!(
    Filter,
    FilterRepr,
    "a filter: a mapping with `type` and its field"
);
deserialize_via_repr!(
    PathModifier,
    PathModifierRepr,
    "a path modifier: a mapping with `type` and its field"
);

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestRedirect {
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub path: Option<PathModifier>,
    /// 301 or 302 (Gateway API); 303, 307 and 308 are accepted too.
    #[serde(default = "default_redirect_status")]
    pub status_code: u16,
}

fn default_redirect_status() -> u16 {
    302
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestMirror {
    pub backend_ref: BackendRef,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fault {
    #[serde(default)]
    pub abort: Option<FaultAbort>,
    #[serde(default)]
    pub delay: Option<FaultDelay>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultAbort {
    pub percentage: f64,
    pub status: u16,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultDelay {
    pub percentage: f64,
    pub duration: Dur,
}

/// A reference to a service by name (namespace defaults to the referring object's, else `default`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendRef {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default = "default_backend_weight")]
    pub weight: u32,
}

fn default_backend_weight() -> u32 {
    1
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteTimeouts {
    #[serde(default)]
    pub request: Option<Dur>,
    #[serde(default)]
    pub backend_request: Option<Dur>,
    /// How long a stream may go without a body frame in either direction (`0s`: no limit).
    #[serde(default)]
    pub idle: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub codes: Vec<u16>,
    #[serde(default)]
    pub backoff: Option<Dur>,
    #[serde(default)]
    pub non_idempotent: bool,
}

/// Per-service policy: timeouts, retry budget, endpoint breakers, limits (compiled into
/// `resilience::policy::ServicePolicy` when a snapshot loads).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub retry_budget: Option<RetryBudget>,
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreakerPolicy>,
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    #[serde(default)]
    pub max_pending_requests: Option<u32>,
    #[serde(default)]
    pub rate_limit: Option<RateLimitPolicy>,
    #[serde(default)]
    pub failfast: Option<Dur>,
    /// The stream idle timeout of routes that set no `timeouts.idle` (`0s`: no limit).
    #[serde(default)]
    pub idle_timeout: Option<Dur>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryBudget {
    pub ratio: f64,
    #[serde(default)]
    pub min_per_second: u32,
    #[serde(default)]
    pub ttl: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CircuitBreakerPolicy {
    #[serde(default)]
    pub consecutive_failures: Option<u32>,
    #[serde(default)]
    pub success_rate: Option<SuccessRate>,
    #[serde(default)]
    pub min_ejection: Option<Dur>,
    #[serde(default)]
    pub max_ejection: Option<Dur>,
    #[serde(default)]
    pub min_ready_endpoints: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SuccessRate {
    pub threshold: f64,
    pub window: Dur,
    #[serde(default)]
    pub min_requests: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitPolicy {
    pub requests_per_second: f64,
    #[serde(default)]
    pub burst: u32,
    /// `none` (default), `client`, `identity`, or `header:<name>`.
    #[serde(default)]
    pub key: Option<String>,
    /// Keys with their own limit instead of the default.
    #[serde(default)]
    pub overrides: Vec<RateOverride>,
}

/// A key value (header value, client IP or CIDR, identity) with its own rate limit.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateOverride {
    pub value: String,
    /// `0`: no limit for this key.
    pub requests_per_second: f64,
    #[serde(default)]
    pub burst: u32,
}

/// HTTP method, validated at load time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method(pub http::Method);

/// Header name, validated (and lower-cased) at load time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderName(pub http::HeaderName);

/// Header value, validated at load time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderValue(pub http::HeaderValue);

/// A regular expression compiled at load time; matching is anchored (whole value), as Gateway API
/// implementations do.
#[derive(Debug, Clone)]
pub struct Pattern(pub Arc<regex::Regex>);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// A duration written as Go/Kubernetes do: `250ms`, `10s`, `1m`, `1h`, `1m30s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

macro_rules! string_newtype {
    ($ty:ident, $what:literal, |$s:ident| $parse:expr, |$v:ident| $show:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // Parsing inside `visit_str` (not after `String::deserialize`) lets serde_yaml pin a
                // bad value to its own line and column instead of the enclosing mapping's.
                struct V;
                impl<'de> de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a ", $what))
                    }
                    fn visit_str<E: de::Error>(self, $s: &str) -> Result<$ty, E> {
                        let parsed: Result<$ty, String> = $parse;
                        parsed.map_err(|e| {
                            E::custom(format!(concat!("invalid ", $what, " {:?}: {}"), $s, e))
                        })
                    }
                }
                d.deserialize_str(V)
            }
        }
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let $v = self;
                s.serialize_str(&$show)
            }
        }
    };
}

string_newtype!(
    Method,
    "method",
    |s| http::Method::from_str(s)
        .map(Method)
        .map_err(|e| e.to_string()),
    |v| v.0.as_str()
);
string_newtype!(
    HeaderName,
    "header name",
    |s| http::HeaderName::from_str(s)
        .map(HeaderName)
        .map_err(|e| e.to_string()),
    |v| v.0.as_str()
);
string_newtype!(
    HeaderValue,
    "header value",
    |s| http::HeaderValue::from_str(s)
        .map(HeaderValue)
        .map_err(|e| e.to_string()),
    |v| v.0.to_str().unwrap_or("")
);
// regex's message is a multi-line caret picture of our anchored wrapper; keep its last line only.
string_newtype!(
    Pattern,
    "regular expression",
    |s| regex::Regex::new(&format!("^(?:{s})$"))
        .map(|r| Pattern(Arc::new(r)))
        .map_err(|e| regex_reason(&e)),
    |v| {
        let s = v.0.as_str();
        s.strip_prefix("^(?:")
            .and_then(|s| s.strip_suffix(")$"))
            .unwrap_or(s)
    }
);
string_newtype!(Dur, "duration", |s| parse_duration(s).map(Dur), |v| {
    format_duration(v.0)
});

fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or("");
    last.strip_prefix("error: ").unwrap_or(last).to_string()
}

/// Parses `1h2m3s4ms` style durations (units h, m, s, ms, us, ns; fractions allowed: `1.5s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err("expected a number, like 10s or 500ms".into());
        }
        let n: f64 = rest[..num_len]
            .parse()
            .map_err(|_| "bad number".to_string())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            "" => return Err("missing unit (h, m, s, ms, us, ns)".into()),
            u => return Err(format!("unknown unit {u:?} (h, m, s, ms, us, ns)")),
        };
        rest = &rest[unit_len..];
        total += Duration::from_secs_f64(n * secs);
    }
    Ok(total)
}

/// The shortest exact spelling `parse_duration` reads back: `10s`, `250ms`, `1500us`, `1ns`.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    // Coarsest unit that loses nothing: a written-back registry must mean what was read.
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl Service {
    /// `name.namespace`, the key metrics and logs use.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.name, self.namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_kubernetes() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10x").is_err());
    }

    #[test]
    fn durations_format_to_text_that_parses_back_exactly() {
        for text in ["10s", "250ms", "1500us", "7ns", "0s"] {
            let d = parse_duration(text).expect("valid");
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
