//! Routes: matches, filters and backends, with header names, methods and regular expressions
//! checked as the registry file checks them.

use std::str::FromStr;

use weir_proto::discovery as pb;

use super::{each, field, opt_dur, required_dur, small, InvalidProto};
use crate::model::{
    BackendRef, Cors, CorsOrigin, CorsToken, Dur, Fault, FaultAbort, FaultDelay, Filter,
    HeaderMatch, HeaderModifier, HeaderName, HeaderValue, HeaderValuePair, MatchPath, Method,
    NameValue, PathMatch, PathModifier, Pattern, QueryParamMatch, RequestMirror, RequestRedirect,
    RetryPolicy, RewritePath, Route, RouteHostname, RouteMatch, RouteTimeouts, UrlRewrite,
    ValueMatchKind,
};

const REDIRECT_CODES: [u16; 5] = [301, 302, 303, 307, 308];

impl TryFrom<pb::Route> for Route {
    type Error = InvalidProto;

    fn try_from(r: pb::Route) -> Result<Self, InvalidProto> {
        Ok(Route {
            hostnames: each("hostnames", r.hostnames, |h| {
                field("", h, |h| {
                    RouteHostname::parse(&h).map_err(|e| format!("invalid hostname {h:?}: {e}"))
                })
            })?,
            matches: each("matches", r.matches, route_match)?,
            filters: each("filters", r.filters, filter)?,
            backend_refs: each("backend_refs", r.backend_refs, backend_ref)?,
            timeouts: r
                .timeouts
                .map(|t| {
                    Ok(RouteTimeouts {
                        request: opt_dur("request", t.request)?,
                        backend_request: opt_dur("backend_request", t.backend_request)?,
                        idle: opt_dur("idle", t.idle)?,
                    })
                })
                .transpose()
                .map_err(|e: InvalidProto| e.within("timeouts"))?,
            retry: r
                .retry
                .map(|p| {
                    Ok(RetryPolicy {
                        attempts: p.attempts,
                        codes: each("codes", p.codes, |c| small("", c))?,
                        backoff: opt_dur("backoff", p.backoff)?,
                        non_idempotent: p.non_idempotent,
                    })
                })
                .transpose()
                .map_err(|e: InvalidProto| e.within("retry"))?,
            circuit_breaker: r
                .circuit_breaker
                .map(super::circuit_breaker)
                .transpose()
                .map_err(|e| e.within("circuit_breaker"))?,
            rate_limit: r.rate_limit.map(super::rate_limit),
            name: r.name,
        })
    }
}

fn route_match(m: pb::RouteMatch) -> Result<RouteMatch, InvalidProto> {
    use pb::path_match::Kind;
    let path = match m.path.map(|p| p.kind) {
        None => None,
        Some(None) => return Err(InvalidProto::new("path", "no kind of path match is set")),
        Some(Some(Kind::Exact(v))) => Some(PathMatch::Exact(field("path.exact", v, |v| {
            path(&v, MatchPath::parse)
        })?)),
        Some(Some(Kind::Prefix(v))) => Some(PathMatch::PathPrefix(field("path.prefix", v, |v| {
            path(&v, MatchPath::parse)
        })?)),
        Some(Some(Kind::Regex(v))) => {
            Some(PathMatch::RegularExpression(field("path.regex", v, |v| {
                pattern(&v)
            })?))
        }
    };
    Ok(RouteMatch {
        path,
        headers: each("headers", m.headers, |h| {
            Ok(HeaderMatch {
                kind: value_kind(&h)?,
                name: field("name", h.name, |n| header_name(&n))?,
                value: h.value,
            })
        })?,
        query_params: each("query_params", m.query_params, |q| {
            Ok(QueryParamMatch {
                kind: value_kind(&q)?,
                name: q.name,
                value: q.value,
            })
        })?,
        method: match m.method.as_str() {
            "" => None,
            s => Some(field("method", s, |s| {
                http::Method::from_str(s)
                    .map(Method)
                    .map_err(|_| format!("invalid method {s:?}"))
            })?),
        },
    })
}

/// Exact or regex; a regex that does not compile is refused here rather than matching nothing.
fn value_kind(v: &pb::ValueMatch) -> Result<ValueMatchKind, InvalidProto> {
    if !v.regex {
        return Ok(ValueMatchKind::Exact);
    }
    field("value", v.value.as_str(), pattern)?;
    Ok(ValueMatchKind::RegularExpression)
}

/// Compiled anchored, as the registry file's `Pattern` is.
fn pattern(s: &str) -> Result<Pattern, String> {
    Pattern::anchored(s).map_err(|reason| format!("invalid regular expression {s:?}: {reason}"))
}

fn path<T>(s: &str, parse: fn(&str) -> Result<T, String>) -> Result<T, String> {
    parse(s).map_err(|reason| format!("invalid path {s:?}: {reason}"))
}

fn header_name(s: &str) -> Result<HeaderName, String> {
    http::HeaderName::from_str(s)
        .map(HeaderName)
        .map_err(|_| format!("invalid header name {s:?}"))
}

fn filter(f: pb::Filter) -> Result<Filter, InvalidProto> {
    use pb::filter::Kind;
    Ok(match f.kind {
        None => return Err(InvalidProto::new("kind", "no filter is set")),
        Some(Kind::RequestHeaderModifier(m)) => Filter::RequestHeaderModifier {
            request_header_modifier: header_modifier(m)
                .map_err(|e| e.within("request_header_modifier"))?,
        },
        Some(Kind::ResponseHeaderModifier(m)) => Filter::ResponseHeaderModifier {
            response_header_modifier: header_modifier(m)
                .map_err(|e| e.within("response_header_modifier"))?,
        },
        Some(Kind::UrlRewrite(u)) => Filter::URLRewrite {
            url_rewrite: UrlRewrite {
                hostname: Some(u.hostname).filter(|h| !h.is_empty()),
                path: u
                    .path
                    .map(path_modifier)
                    .transpose()
                    .map_err(|e| e.within("url_rewrite.path"))?,
            },
        },
        Some(Kind::RequestRedirect(r)) => Filter::RequestRedirect {
            request_redirect: redirect(r).map_err(|e| e.within("request_redirect"))?,
        },
        Some(Kind::AddQueryParameter(nv)) => Filter::AddQueryParameter {
            add_query_parameter: NameValue {
                name: nv.name,
                value: nv.value,
            },
        },
        Some(Kind::RequestMirror(m)) => Filter::RequestMirror {
            request_mirror: RequestMirror {
                backend_ref: match m.backend_ref {
                    Some(b) => {
                        backend_ref(b).map_err(|e| e.within("request_mirror.backend_ref"))?
                    }
                    None => return Err(InvalidProto::new("request_mirror.backend_ref", "missing")),
                },
            },
        },
        Some(Kind::Fault(f)) => Filter::Fault {
            fault: fault(f).map_err(|e| e.within("fault"))?,
        },
        Some(Kind::Cors(c)) => Filter::Cors {
            cors: cors(c).map_err(|e| e.within("cors"))?,
        },
    })
}

fn cors(c: pb::Cors) -> Result<Cors, InvalidProto> {
    let tokens = |name: &str, v: Vec<String>| {
        each(name, v, |t| {
            field("", t, |t| {
                CorsToken::parse(&t)
                    .map_err(|e| format!("invalid method or header name {t:?}: {e}"))
            })
        })
    };
    let cors = Cors {
        allow_origins: each("allow_origins", c.allow_origins, |o| {
            field("", o, |o| {
                CorsOrigin::parse(&o).map_err(|e| format!("invalid origin {o:?}: {e}"))
            })
        })?,
        allow_methods: tokens("allow_methods", c.allow_methods)?,
        allow_headers: tokens("allow_headers", c.allow_headers)?,
        expose_headers: tokens("expose_headers", c.expose_headers)?,
        max_age: c.max_age.unwrap_or(5),
        allow_credentials: c.allow_credentials,
    };
    if cors.allow_origins.is_empty() {
        return Err(InvalidProto::new(
            "allow_origins",
            "a CORS filter needs an origin to allow (`*` for any)",
        ));
    }
    Ok(cors)
}

fn header_modifier(m: pb::HeaderModifier) -> Result<HeaderModifier, InvalidProto> {
    let pair = |nv: pb::NameValue| {
        Ok(HeaderValuePair {
            name: field("name", nv.name, |n| header_name(&n))?,
            value: field("value", nv.value, |v| {
                http::HeaderValue::from_str(&v)
                    .map(HeaderValue)
                    .map_err(|_| format!("invalid header value {v:?}"))
            })?,
        })
    };
    Ok(HeaderModifier {
        set: each("set", m.set, pair)?,
        add: each("add", m.add, pair)?,
        remove: each("remove", m.remove, |n| field("", n, |n| header_name(&n)))?,
    })
}

fn path_modifier(p: pb::PathModifier) -> Result<PathModifier, InvalidProto> {
    use pb::path_modifier::Kind;
    match p.kind {
        Some(Kind::ReplaceFullPath(p)) => Ok(PathModifier::ReplaceFullPath {
            replace_full_path: field("replace_full_path", p, |p| path(&p, RewritePath::parse))?,
        }),
        Some(Kind::ReplacePrefixMatch(p)) => Ok(PathModifier::ReplacePrefixMatch {
            replace_prefix_match: field("replace_prefix_match", p, |p| {
                path(&p, RewritePath::parse)
            })?,
        }),
        None => Err(InvalidProto::new("kind", "no path modifier is set")),
    }
}

fn redirect(r: pb::RequestRedirect) -> Result<RequestRedirect, InvalidProto> {
    let status_code = match small("status_code", r.status_code)? {
        // Unset on the wire: Gateway API's default.
        0 => 302,
        c if REDIRECT_CODES.contains(&c) => c,
        c => {
            let reason = format!("{c} is not a redirect status (301, 302, 303, 307, 308)");
            return Err(InvalidProto::new("status_code", reason));
        }
    };
    Ok(RequestRedirect {
        scheme: Some(r.scheme).filter(|s| !s.is_empty()),
        hostname: Some(r.hostname).filter(|h| !h.is_empty()),
        port: Some(small("port", r.port)?).filter(|&p| p != 0),
        path: r
            .path
            .map(path_modifier)
            .transpose()
            .map_err(|e| e.within("path"))?,
        status_code,
    })
}

fn fault(f: pb::Fault) -> Result<Fault, InvalidProto> {
    let percentage = |name: &str, p: f64| {
        if (0.0..=100.0).contains(&p) {
            Ok(p)
        } else {
            let reason = format!("must be between 0 and 100, got {p}");
            Err(InvalidProto::new(name, reason))
        }
    };
    Ok(Fault {
        abort: f
            .abort
            .map(|a| {
                Ok(FaultAbort {
                    percentage: percentage("percentage", a.percentage)?,
                    status: small("status", a.status)?,
                })
            })
            .transpose()
            .map_err(|e: InvalidProto| e.within("abort"))?,
        delay: f
            .delay
            .map(|d| {
                Ok(FaultDelay {
                    percentage: percentage("percentage", d.percentage)?,
                    duration: Dur(required_dur("duration", d.duration)?),
                })
            })
            .transpose()
            .map_err(|e: InvalidProto| e.within("delay"))?,
    })
}

fn backend_ref(b: pb::BackendRef) -> Result<BackendRef, InvalidProto> {
    if b.name.is_empty() {
        return Err(InvalidProto::new("name", "a backend needs a service name"));
    }
    Ok(BackendRef {
        port: Some(small("port", b.port)?).filter(|&p| p != 0),
        name: b.name,
        namespace: Some(b.namespace).filter(|n| !n.is_empty()),
        weight: b.weight,
    })
}
