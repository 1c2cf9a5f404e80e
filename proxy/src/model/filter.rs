//! Route filters (header modifiers, rewrites, redirects, mirrors, faults, CORS), read from their wire
//! shape so a bad field is reported at its own line.

use std::fmt;

use serde::{de, Deserialize, Deserializer, Serialize};

use super::{BackendRef, CorsOrigin, CorsToken, Dur, HeaderName, HeaderValue, RewritePath};

/// Ordered filters, applied in the order written. Deserialized through `FilterRepr` (see there).
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
    /// Gateway API HTTPCORSFilter: preflights answered at the proxy.
    #[serde(rename = "CORS")]
    Cors {
        cors: Cors,
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
    cors: Option<Cors>,
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
    #[serde(rename = "CORS")]
    Cors,
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
            ("cors", r.cors.is_some()),
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
            FilterKind::Cors => ("cors", r.cors.map(|cors| Filter::Cors { cors })),
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

/// Deserialized through `PathModifierRepr`, for the same reason as `FilterRepr`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type")]
pub enum PathModifier {
    ReplaceFullPath {
        #[serde(rename = "replaceFullPath")]
        replace_full_path: RewritePath,
    },
    ReplacePrefixMatch {
        #[serde(rename = "replacePrefixMatch")]
        replace_prefix_match: RewritePath,
    },
}

/// The wire shape of a [`PathModifier`]; see [`FilterRepr`] for why it is not a tagged enum.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PathModifierRepr {
    #[serde(rename = "type")]
    kind: PathModifierKind,
    replace_full_path: Option<RewritePath>,
    replace_prefix_match: Option<RewritePath>,
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

/// What a `CORS` filter allows (Gateway API HTTPCORSFilter; the Fetch standard's fields).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cors {
    /// Origins whose pages may read the responses; `*` for any.
    #[serde(default)]
    pub allow_origins: Vec<CorsOrigin>,
    /// Methods a preflight may ask for; `*` for any.
    #[serde(default)]
    pub allow_methods: Vec<CorsToken>,
    /// Request headers a preflight may ask for; `*` for any.
    #[serde(default)]
    pub allow_headers: Vec<CorsToken>,
    /// Response headers the page may read beyond the safelisted ones.
    #[serde(default)]
    pub expose_headers: Vec<CorsToken>,
    /// Seconds a browser may cache a preflight's answer (Gateway API's default: 5).
    #[serde(default = "default_max_age")]
    pub max_age: u32,
    /// Whether requests with credentials (cookies, HTTP auth) may be read.
    #[serde(default)]
    pub allow_credentials: bool,
}

fn default_max_age() -> u32 {
    5
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
