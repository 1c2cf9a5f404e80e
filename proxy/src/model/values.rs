//! Scalars validated as they are read: methods, header names and values, regular expressions,
//! route paths, hostnames and durations, each pinned to its own line and column when it is bad.

use std::{fmt, str::FromStr, sync::Arc, time::Duration};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

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

impl Pattern {
    /// Compiles `s` so that it matches whole values only; a refusal is regex's reason alone.
    pub fn anchored(s: &str) -> Result<Self, String> {
        regex::Regex::new(&format!("^(?:{s})$"))
            .map(|r| Pattern(Arc::new(r)))
            .map_err(|e| regex_reason(&e))
    }

    /// The expression as written, without the anchoring (what the file says and the control
    /// plane sends).
    pub fn as_written(&self) -> &str {
        let s = self.0.as_str();
        s.strip_prefix("^(?:")
            .and_then(|s| s.strip_suffix(")$"))
            .unwrap_or(s)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// The path of an `Exact` or `PathPrefix` match: Gateway API's rules, so that it can meet a
/// normalised request path (`/`-first, URI path characters, no `//`, dot segment or `%2F`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchPath(pub String);

/// A path a `URLRewrite` or `RequestRedirect` writes: `/`-first and made of URI path characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewritePath(pub String);

impl MatchPath {
    pub fn parse(s: &str) -> Result<Self, String> {
        uri_path(s)?;
        let lower = s.to_ascii_lowercase();
        if s.contains("//") {
            Err("must not contain `//`".into())
        } else if s.contains("/./") || s.contains("/../") || s.ends_with("/.") || s.ends_with("/..")
        {
            Err("must not contain a `.` or `..` segment".into())
        } else if lower.contains("%2f") {
            Err("must not contain an escaped slash `%2F`".into())
        } else {
            Ok(Self(s.to_owned()))
        }
    }
}

impl RewritePath {
    pub fn parse(s: &str) -> Result<Self, String> {
        uri_path(s).map(|()| Self(s.to_owned()))
    }
}

impl std::ops::Deref for MatchPath {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for RewritePath {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// Starts with `/` and holds only RFC 3986 path characters and well-formed `%XX` escapes.
fn uri_path(s: &str) -> Result<(), String> {
    if !s.starts_with('/') {
        return Err("must start with `/`".into());
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return Err(format!("`%` at byte {i} does not start a `%XX` escape"));
            }
            i += 3;
            continue;
        }
        if !(b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b)) {
            let c = s[i..].chars().next().unwrap_or('?');
            return Err(format!(
                "{c:?} is not a URI path character (escape it as %XX)"
            ));
        }
        i += 1;
    }
    Ok(())
}

/// A host a route answers for (Gateway API HTTPRoute `hostnames`): a DNS name, lower-cased, or
/// one whose first label is `*` (`*.example.com`: any host ending in `.example.com`, not
/// `example.com` itself). No port and no IP address, as Gateway API has it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteHostname(pub String);

impl RouteHostname {
    pub fn parse(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        let name = lower.strip_prefix("*.").unwrap_or(&lower);
        if lower.len() > 253 {
            return Err("longer than 253 characters".into());
        }
        if name.parse::<std::net::Ipv4Addr>().is_ok() || name.starts_with('[') {
            return Err("an IP address is no hostname".into());
        }
        if name.contains(':') {
            return Err("a hostname has no port (the Host's port is ignored)".into());
        }
        for label in name.split('.') {
            let b = label.as_bytes();
            let alnum = |c: &u8| c.is_ascii_alphanumeric();
            if b.is_empty() || b.len() > 63 {
                return Err("each dot-separated label holds 1 to 63 characters".into());
            }
            if b.contains(&b'*') {
                return Err("`*` may only be the whole first label (`*.example.com`)".into());
            }
            if !b.iter().all(|c| alnum(c) || *c == b'-') {
                return Err("only letters, digits, `-` and `.` are allowed".into());
            }
            if !b.first().is_some_and(alnum) || !b.last().is_some_and(alnum) {
                return Err("a label starts and ends with a letter or digit".into());
            }
        }
        Ok(Self(lower))
    }

    /// For `*.example.com`, `example.com`: what a matching host must end in, after a dot.
    pub fn wildcard_suffix(&self) -> Option<&str> {
        self.0.strip_prefix("*.")
    }
}

/// An origin a `CORS` filter allows: `*`, or `scheme://host[:port]` whose host may start with
/// a `*.` label (`https://*.example.com`: any subdomain, not `example.com` itself). Lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsOrigin(pub String);

impl CorsOrigin {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "*" {
            return Ok(Self(s.into()));
        }
        let lower = s.to_ascii_lowercase();
        let (scheme, authority) = split_origin(&lower)
            .ok_or("must be `*` or scheme://host[:port], with nothing after the host")?;
        if !scheme.starts_with(|c: char| c.is_ascii_lowercase())
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
        {
            return Err(format!("{scheme:?} is not a URI scheme"));
        }
        let host = authority.strip_prefix("*.").unwrap_or(authority);
        if host.is_empty() || host.contains('*') || !crate::http::host::is_valid(host.as_bytes()) {
            return Err(format!(
                "{authority:?} is not a host[:port] (`*.` may only start it)"
            ));
        }
        Ok(Self(lower))
    }

    /// Whether the request's `Origin` value is one this allows (scheme and host in any case;
    /// the port must be the same, or absent from both).
    pub fn allows(&self, origin: &str) -> bool {
        if self.0 == "*" {
            return true;
        }
        let (Some((scheme, authority)), Some((want_scheme, want))) =
            (split_origin(origin), split_origin(&self.0))
        else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case(want_scheme) {
            return false;
        }
        match want.strip_prefix("*.") {
            None => authority.eq_ignore_ascii_case(want),
            Some(suffix) => {
                // `a.example.com[:port]` against `example.com[:port]`: a label, a dot, then it.
                let (host, port) = host_port(authority);
                let (want_host, want_port) = host_port(suffix);
                port == want_port
                    && host.len() > want_host.len() + 1
                    && host.as_bytes()[host.len() - want_host.len() - 1] == b'.'
                    && host[host.len() - want_host.len()..].eq_ignore_ascii_case(want_host)
            }
        }
    }
}

/// `scheme://authority` split at `://`; `None` if there is a path, query or nothing after it.
fn split_origin(s: &str) -> Option<(&str, &str)> {
    let (scheme, authority) = s.split_once("://")?;
    (!authority.is_empty() && !authority.contains(['/', '?', '#'])).then_some((scheme, authority))
}

/// `host:port` as (`host`, `Some(port)`); a bracketed IPv6 literal keeps its brackets.
fn host_port(a: &str) -> (&str, Option<&str>) {
    match a.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (a, None),
    }
}

/// A method or header name a `CORS` filter lists: a token as written, or `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsToken(pub String);

impl CorsToken {
    pub fn parse(s: &str) -> Result<Self, String> {
        // A method is any token (RFC 9110 §9.1), so `Method` checks the characters.
        if s == "*" || http::Method::from_str(s).is_ok() {
            Ok(Self(s.to_owned()))
        } else {
            Err("must be a token (letters, digits, and !#$%&'*+-.^_`|~) or `*`".into())
        }
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
    // Values come from YAML or protobuf strings, so they are UTF-8; `to_str` would refuse the
    // non-ASCII ones that `from_str` accepts (obs-text).
    |v| String::from_utf8_lossy(v.0.as_bytes())
);
string_newtype!(
    Pattern,
    "regular expression",
    |s| Pattern::anchored(s),
    |v| v.as_written()
);
string_newtype!(MatchPath, "path", |s| MatchPath::parse(s), |v| v.0.as_str());
string_newtype!(RewritePath, "path", |s| RewritePath::parse(s), |v| v
    .0
    .as_str());
string_newtype!(
    RouteHostname,
    "hostname",
    |s| RouteHostname::parse(s),
    |v| v.0.as_str()
);
string_newtype!(CorsOrigin, "origin", |s| CorsOrigin::parse(s), |v| v
    .0
    .as_str());
string_newtype!(
    CorsToken,
    "method or header name",
    |s| CorsToken::parse(s),
    |v| v.0.as_str()
);
string_newtype!(Dur, "duration", |s| parse_duration(s).map(Dur), |v| {
    format_duration(v.0)
});

/// regex's message is a multi-line caret picture of our anchored wrapper: its last line only.
fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or("");
    last.strip_prefix("error: ").unwrap_or(last).to_string()
}

/// The longest duration a file or variable may set: 100 years, ample for "never" while every
/// deadline, doubling backoff and jitter computed from it stays far from `Duration`'s and
/// `Instant`'s limits.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses `1h2m3s4ms` style durations (units h, m, s, ms, us, ns; fractions allowed: `1.5s`),
/// at most [`MAX_DURATION`].
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
        // A number too large for any duration (or written with 400 digits) is refused here,
        // never passed on to a conversion that panics.
        total = Duration::try_from_secs_f64(n * secs)
            .ok()
            .and_then(|part| total.checked_add(part))
            .filter(|t| *t <= MAX_DURATION)
            .ok_or("too long: at most 876000h (100 years)")?;
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

/// A string map whose keys must be unique: serde's `HashMap` keeps the last of two, which hides a
/// typo'd copy-paste (`{ zone: a, zone: b }`).
pub fn unique_keys<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::HashMap<String, String>, D::Error> {
    struct V;
    impl<'de> de::Visitor<'de> for V {
        type Value = std::collections::HashMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut out = std::collections::HashMap::new();
            while let Some((k, v)) = m.next_entry::<String, String>()? {
                if out.contains_key(&k) {
                    return Err(de::Error::custom(format!("duplicate key {k:?}")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_ascii_header_value_shows_as_written() {
        let v: HeaderValue = serde_yaml::from_str("café ✓").expect("obs-text is a valid value");
        assert_eq!(serde_json::to_string(&v).expect("serializes"), "\"café ✓\"");
    }

    #[test]
    fn durations_parse_like_kubernetes() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10x").is_err());
        assert_eq!(parse_duration("876000h"), Ok(MAX_DURATION));
        for too_long in [
            "876000h1ns",
            "99999999999999999999h",
            "18446744073709551616s",
            &"9".repeat(400),
            &format!("{}s", "9".repeat(400)),
            "500000h500000h",
        ] {
            assert!(parse_duration(too_long).is_err(), "{too_long}");
        }
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
