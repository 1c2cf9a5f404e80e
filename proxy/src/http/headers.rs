//! Header hygiene: hop-by-hop stripping, framing checks, forwarding headers.

use std::net::{IpAddr, Ipv4Addr};

use bytes::Bytes;
use http::{
    header::{self, Entry, HeaderMap, HeaderName, HeaderValue},
    request::Parts,
    uri::PathAndQuery,
    Method, Version,
};

use crate::error::ProxyError;

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1). Not `Trailer`
/// (hop-by-hop only in RFC 2616): it declares the message's trailer fields, and hyper's server
/// sends an HTTP/1 client only the trailers a response declares there.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Fields a `Connection` may not take away: the message's own routing and framing. (What the
/// proxy writes itself, X-Forwarded-* or a route filter's fields, comes after a request's
/// named fields are gone: [`drop_connection_named`].)
fn never_named_away(name: &HeaderName) -> bool {
    name == header::HOST || name == header::CONTENT_LENGTH
}

/// Whether `name` is one of the fields that describe one connection ([`HOP_BY_HOP`]).
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// The tokens of every `Connection` field, trimmed (empty ones included).
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// Removes the fields a request's `Connection` names (RFC 9110 §7.6.1), as the request is read:
/// before the proxy writes fields of its own (X-Forwarded-*, a route filter's), which the
/// client's list must not reach. Host and Content-Length stay (the message's own routing and
/// framing). The hop-by-hop fields and the `close`/`keep-alive` tokens are left to
/// [`strip_hop_by_hop`], which also decides upgrades and `te: trailers`; every other token
/// leaves `Connection`, so nothing written later is named away.
pub fn drop_connection_named(headers: &mut HeaderMap) {
    if !headers.contains_key(header::CONNECTION) {
        return;
    }
    let (mut kept, mut named, mut changed) = (Vec::new(), Vec::new(), false);
    for t in connection_tokens(headers) {
        match HeaderName::from_bytes(t.as_bytes()) {
            Ok(n) if is_hop_by_hop(&n) || n == "close" => kept.push(t),
            Ok(n) => {
                changed = true;
                if !never_named_away(&n) {
                    named.push(n);
                }
            }
            Err(_) => changed = true,
        }
    }
    if !changed {
        return;
    }
    let kept = (!kept.is_empty()).then(|| kept.join(", "));
    for n in named {
        headers.remove(n);
    }
    headers.remove(header::CONNECTION);
    if let Some(v) = kept.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert(header::CONNECTION, v);
    }
}

/// Removes hop-by-hop headers and those the `Connection` header names. With `keep_upgrade`,
/// `Connection: upgrade` and `Upgrade` survive (a WebSocket handshake is forwarded as such).
/// `TE: trailers` survives for HTTP/2 (gRPC requires it).
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool, keep_te_trailers: bool) {
    // Every request and response comes here, and most carry no hop-by-hop header but
    // `Connection`: one pass over the names finds which of the seven are present, so only those
    // are looked up and removed (seven hashed removes per call showed in profiles).
    let mut present = 0u8;
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present |= 1 << i;
        }
    }
    if present == 0 {
        // No `Connection` either, so no header it names.
        return;
    }
    let names_others = |n: &str| !(keep_upgrade && n.eq_ignore_ascii_case("upgrade"));
    // `Connection: keep-alive` or `close` names no header the message has: nothing to collect.
    if connection_tokens(headers).any(|n| names_others(n) && headers.contains_key(n)) {
        let named: Vec<HeaderName> = connection_tokens(headers)
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .filter(|n| !((keep_upgrade && n == header::UPGRADE) || never_named_away(n)))
            .collect();
        for n in named {
            headers.remove(n);
        }
    }
    // HTTP/2 allows `te` only as `trailers` (RFC 9113 §8.2.2): kept when the client's list
    // names it, whatever else the list names.
    let te_trailers = keep_te_trailers
        && headers
            .get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| {
                let coding = t.split(';').next().unwrap_or_default();
                coding.trim().eq_ignore_ascii_case("trailers")
            });
    let upgrade = if keep_upgrade {
        headers.remove(header::UPGRADE)
    } else {
        None
    };
    for (i, h) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(h);
        }
    }
    if let Some(u) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Whether the request may turn its connection into a tunnel: it carries `Upgrade`, or it is a
/// CONNECT (whose 2xx answer makes the connection the tunnel, RFC 9110 §9.3.6).
///
/// `h2c` leaves the request's `Upgrade` first (as Envoy drops it): a cleartext HTTP/2 upgrade
/// through the proxy would make the rest of the connection one opaque tunnel to that upstream,
/// every later request on it unseen by routes, filters and policy (the "h2c smuggling" of
/// access-control bypasses). Without it the upstream answers the request as plain HTTP/1.1;
/// `HTTP2-Settings` is gone already, named by the client's `Connection`
/// ([`drop_connection_named`]), and dropped here when it was not. An HTTP/1.0 request's
/// `Upgrade` goes too: it is answered as it would be without one.
pub fn may_tunnel(parts: &mut Parts) -> bool {
    if parts.method == http::Method::CONNECT {
        return true;
    }
    let Some(first) = parts.headers.get(header::UPGRADE) else {
        return false;
    };
    if parts.version < Version::HTTP_11 {
        // RFC 9110 §7.8: an HTTP/1.0 request's Upgrade is ignored (it cannot switch).
        parts.headers.remove(header::UPGRADE);
        return false;
    }
    // One field whose every token is a protocol but h2c: the usual WebSocket handshake.
    let plain = list_tokens(first).all(|t| !t.is_empty() && !is_h2c(t));
    if plain && parts.headers.get_all(header::UPGRADE).iter().count() == 1 {
        return true;
    }
    drop_h2c(&mut parts.headers)
}

/// A byte of a token (RFC 9110 §5.6.2), as field names and `Upgrade` protocols are.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The comma-separated items of a list field's value, trimmed (empty ones included).
fn list_tokens(v: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    v.as_bytes().split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// An `Upgrade` token's protocol name, without its version (`websocket/13` → `websocket`).
fn protocol_name(token: &[u8]) -> &[u8] {
    token.split(|&b| b == b'/').next().unwrap_or_default()
}

/// Whether an `Upgrade` token names cleartext HTTP/2 (`h2c`, any case, any version suffix).
fn is_h2c(token: &[u8]) -> bool {
    protocol_name(token).eq_ignore_ascii_case(b"h2c")
}

/// [`may_tunnel`]'s rare branch (an `h2c` or empty token, or `Upgrade` repeated): one `Upgrade`
/// of the other tokens, or none when none is left (an empty `Upgrade` asks for nothing), and
/// no `HTTP2-Settings` (which only `h2c` reads); returns whether an upgrade is still asked for.
fn drop_h2c(headers: &mut HeaderMap) -> bool {
    let others: Vec<&[u8]> = headers
        .get_all(header::UPGRADE)
        .iter()
        .flat_map(list_tokens)
        .filter(|t| !t.is_empty() && !is_h2c(t))
        .collect();
    let kept = (!others.is_empty())
        .then(|| HeaderValue::from_bytes(&others.join(&b", "[..])).ok())
        .flatten();
    headers.remove(header::UPGRADE);
    headers.remove("http2-settings");
    match kept {
        Some(v) => {
            headers.insert(header::UPGRADE, v);
            true
        }
        None => false,
    }
}

/// Whether a `101`'s `Upgrade` (`answer`) switches only to protocols the request offered: RFC
/// 9110 §7.8 has the server name what it switches to, and never one the client did not ask for.
/// A client handed such a stream would read bytes of a protocol it never chose. Protocol names
/// compare without case and without their version.
pub fn switch_offered(offered: Option<&HeaderValue>, answer: Option<&HeaderValue>) -> bool {
    let (offered, answer) = (protocols(offered), protocols(answer));
    !answer.is_empty()
        && answer
            .iter()
            .all(|a| offered.iter().any(|o| o.eq_ignore_ascii_case(a)))
}

/// The protocol names of an `Upgrade` value, without versions.
fn protocols(v: Option<&HeaderValue>) -> Vec<&[u8]> {
    v.into_iter()
        .flat_map(list_tokens)
        .filter(|t| !t.is_empty())
        .map(protocol_name)
        .collect()
}

/// Whether `conn::handle` found that the request may tunnel ([`may_tunnel`]) and gave it the
/// connection's `Drain` for the splice. The later stages (idle timeout, upstream protocol) ask
/// this rather than looking `Upgrade` up again: each lookup in the header map cost ~110
/// instructions under callgrind, and every plain request paid three.
pub fn marked_to_tunnel(parts: &Parts) -> bool {
    parts.extensions.get::<crate::drain::Drain>().is_some()
}

/// Whether the request asks to switch protocols (`Connection: upgrade` + `Upgrade`).
pub fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"))
}

/// Refuses requests whose framing or target is ambiguous, before anything is forwarded; an
/// HTTP/1 request in absolute form (`GET http://a/p`) gets its Host from the target, and an
/// HTTP/2 extended CONNECT becomes the upgrade it stands for ([`ext_connect`](super::ext_connect)).
pub fn validate_request(parts: &mut Parts) -> Result<(), ProxyError> {
    if parts.version <= Version::HTTP_11 && parts.uri.authority().is_some() {
        host_from_target(parts)?;
        origin_of_absolute(parts)?;
    }
    // RFC 9112 §3.2.4: the asterisk form is OPTIONS's alone (in HTTP/2 too, RFC 9113 §8.3.1).
    if parts.method != Method::OPTIONS
        && parts
            .uri
            .path_and_query()
            .is_some_and(|pq| pq.as_str() == "*")
    {
        return Err(ProxyError::BadRequest(
            "asterisk-form target other than OPTIONS",
        ));
    }
    let h = &parts.headers;
    // One pass over the fields rather than three map lookups (~100 instructions each): a
    // request has a handful of fields, and names of the standard ones compare as one byte.
    let (mut te, mut cl, mut hosts) = (false, false, 0u32);
    for (name, _) in h {
        if name == header::HOST {
            hosts += 1;
        } else if name == header::TRANSFER_ENCODING {
            te = true;
        } else if name == header::CONTENT_LENGTH {
            cl = true;
        }
    }
    if te && cl {
        return Err(ProxyError::BadRequest(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    match parts.version {
        Version::HTTP_11 => match hosts {
            0 => return Err(ProxyError::BadRequest("missing Host")),
            1 => {}
            _ => return Err(ProxyError::BadRequest("duplicate Host")),
        },
        Version::HTTP_2 => {
            if parts.method == Method::CONNECT {
                // Before the checks below, which then hold it to a GET's rules (a `:path`).
                super::ext_connect::to_upgrade(parts)?;
            }
            let h = &parts.headers;
            let mut hosts = h.get_all(header::HOST).iter();
            if let Some(host) = hosts.next() {
                if hosts.next().is_some() {
                    return Err(ProxyError::BadRequest("duplicate Host"));
                }
                match parts.uri.authority() {
                    Some(a) if a.as_str().as_bytes().eq_ignore_ascii_case(host.as_bytes()) => {}
                    Some(_) => return Err(ProxyError::BadRequest("Host differs from :authority")),
                    None => {}
                }
            } else if parts.uri.authority().is_none() {
                return Err(ProxyError::BadRequest("missing :authority"));
            }
            // RFC 9113 §8.3.1: every request but CONNECT has a :path. The h2 crate lets one
            // without :path or :authority through with an empty path.
            if parts.uri.path().is_empty() && parts.method != http::Method::CONNECT {
                return Err(ProxyError::BadRequest("missing :path"));
            }
            // RFC 9113 §8.2.1: such a request is malformed (an HTTP/1 server that reads it on
            // would trim the value and see another one).
            if h.values().any(|v| edge_whitespace(v.as_bytes())) {
                return Err(ProxyError::BadRequest(
                    "field value starts or ends with whitespace",
                ));
            }
            // RFC 9113 §8.3.1: no userinfo in an http(s) :authority; sent on as `Host` it would
            // name another host to whatever reads it. Nor a port no TCP port can be.
            if let Some(a) = parts.uri.authority().map(|a| a.as_str()) {
                if a.contains('@') {
                    return Err(ProxyError::BadRequest("userinfo in :authority"));
                }
                if !crate::http::host::is_valid(a.as_bytes()) {
                    return Err(ProxyError::BadRequest("invalid :authority"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// RFC 9112 §3.2.2: the authority of an absolute-form target (or CONNECT's authority-form) is
/// the request's host, whatever `Host` says, and a proxy sends on a Host made from it. Routing
/// already goes by the target ([`authority_host`]); without this the upstream would read
/// another host from the Host the client sent beside it.
fn host_from_target(parts: &mut Parts) -> Result<(), ProxyError> {
    let Some(a) = parts.uri.authority() else {
        return Ok(());
    };
    if a.as_str().contains('@') {
        return Err(ProxyError::BadRequest("userinfo in the request target"));
    }
    if !crate::http::host::is_valid(a.as_str().as_bytes()) {
        return Err(ProxyError::BadRequest(
            "invalid authority in the request target",
        ));
    }
    let host = HeaderValue::from_str(a.as_str())
        .map_err(|_| ProxyError::BadRequest("invalid authority in the request target"))?;
    parts.headers.insert(header::HOST, host);
    Ok(())
}

/// The path an absolute-form target goes on with (RFC 9112 §3.2.1): an empty path becomes `/`.
/// The http crate reads `http://a?q` with `?q` as its path-and-query text, which is no request
/// target at all (`GET ?q HTTP/1.1` went out). `http://a` it already reads as `/`, so an OPTIONS
/// in that form goes on as `OPTIONS /` rather than RFC 9112 §3.2.4's `*`: the crate cannot tell
/// it from `http://a/`.
fn origin_of_absolute(parts: &mut Parts) -> Result<(), ProxyError> {
    let Some(target) = parts.uri.path_and_query() else {
        return Ok(());
    };
    if !target.as_str().starts_with('?') {
        return Ok(());
    }
    let path = PathAndQuery::try_from(format!("/{}", target.as_str()))
        .map_err(|_| ProxyError::BadRequest("invalid request target"))?;
    let mut p = std::mem::take(&mut parts.uri).into_parts();
    p.path_and_query = Some(path);
    parts.uri =
        http::Uri::from_parts(p).map_err(|_| ProxyError::BadRequest("invalid request target"))?;
    Ok(())
}

fn edge_whitespace(v: &[u8]) -> bool {
    let ws = |b: &u8| matches!(b, b' ' | b'\t');
    v.first().is_some_and(ws) || v.last().is_some_and(ws)
}

/// Joins the `Cookie` fields of an HTTP/2 request into one, `; ` between them, before it goes on
/// over HTTP/1.1 (RFC 9113 §8.2.3: HTTP/2 clients split cookies into a field each, where an
/// HTTP/1.1 server expects one field and may read only the first).
pub fn join_cookies(headers: &mut HeaderMap) {
    let Entry::Occupied(mut e) = headers.entry(header::COOKIE) else {
        return;
    };
    let mut values = e.iter();
    let (Some(first), Some(_)) = (values.next(), values.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for v in e.iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(v.as_bytes());
    }
    // Each part was a valid value, and `; ` is too.
    if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(joined)) {
        e.insert(v);
    }
}

/// The request's authority (`Host` or `:authority`) without the port.
pub fn authority_host(parts: &Parts) -> Option<&str> {
    target_host(&parts.uri, &parts.headers)
}

/// The host a request names: the target's authority (HTTP/2 `:authority`, an absolute-form
/// target), else `Host`, without the port.
pub fn target_host<'a>(uri: &'a http::Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    let raw = match uri.authority() {
        Some(a) => a.host(),
        None => headers.get(header::HOST)?.to_str().ok()?,
    };
    Some(strip_port(raw))
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(h, _)| h)
}

/// The gateway's fields about its client ([`add_forwarded`]).
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The client's address as `X-Forwarded-For` writes it, made once per connection: every request
/// on the connection shares these bytes (a reference count, where a value per request was an
/// allocation and a free). An IPv4 address is written without `fmt`, which cost more than the
/// rest of [`add_forwarded`].
pub fn forwarded_for(client: IpAddr) -> HeaderValue {
    let bytes = match client {
        IpAddr::V4(a) => {
            let mut v4 = [0u8; 15];
            let n = write_v4(&mut v4, a);
            Bytes::from_owner(Dotted(v4, n as u8))
        }
        IpAddr::V6(_) => Bytes::from(client.to_string()),
    };
    // An IP address in text is digits, dots, colons and hex letters.
    HeaderValue::from_maybe_shared(bytes).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// A dotted-decimal IPv4 address and its length, owned by the `Bytes` that share it.
struct Dotted([u8; 15], u8);

impl AsRef<[u8]> for Dotted {
    fn as_ref(&self) -> &[u8] {
        &self.0[..usize::from(self.1)]
    }
}

/// Appends the client (its [`forwarded_for`] value) to `X-Forwarded-For` and sets
/// `X-Forwarded-Proto` (gateway only).
pub fn add_forwarded(headers: &mut HeaderMap, client: &HeaderValue, proto: &'static str) {
    // One lookup for both the read and the write.
    match headers.entry(X_FORWARDED_FOR) {
        // The client appended to a text value that is there, else alone.
        Entry::Occupied(mut e) if e.get().to_str().is_ok() => {
            let prev = e.get().as_bytes();
            let mut v = Vec::with_capacity(prev.len() + 2 + client.len());
            v.extend_from_slice(prev);
            v.extend_from_slice(b", ");
            v.extend_from_slice(client.as_bytes());
            if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(v)) {
                e.insert(v);
            }
        }
        Entry::Occupied(mut e) => {
            e.insert(client.clone());
        }
        Entry::Vacant(e) => {
            e.insert(client.clone());
        }
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
}

/// Writes `a` in dotted decimal into `out`; returns the length.
fn write_v4(out: &mut [u8; 15], a: Ipv4Addr) -> usize {
    let mut n = 0;
    for (i, o) in a.octets().into_iter().enumerate() {
        if i > 0 {
            out[n] = b'.';
            n += 1;
        }
        if o >= 100 {
            out[n] = b'0' + o / 100;
            n += 1;
        }
        if o >= 10 {
            out[n] = b'0' + o / 10 % 10;
            n += 1;
        }
        out[n] = b'0' + o % 10;
        n += 1;
    }
    n
}

/// Whether this is a gRPC request (errors are then answered in gRPC terms).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(version: Version, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().version(version).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("valid request").into_parts().0
    }

    #[test]
    fn connection_named_fields_go_at_once_and_only_hop_by_hop_tokens_stay() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "close, x-a, Host"),
            ("connection", "te, x-forwarded-for, , upgrade"),
            ("x-a", "1"),
            ("x-forwarded-for", "6.6.6.6"),
            ("host", "h"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("x-b", "2"),
        ] {
            h.append(HeaderName::from_static(k), v.parse().expect("value"));
        }
        drop_connection_named(&mut h);
        assert_eq!(h[header::CONNECTION], "close, te, upgrade");
        assert_eq!(h.get_all(header::CONNECTION).iter().count(), 1);
        for gone in ["x-a", "x-forwarded-for"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        for kept in ["host", "te", "upgrade", "x-b"] {
            assert!(h.contains_key(kept), "{kept}");
        }
        // A field written after this is never named away by the later strip.
        h.insert("x-a", "route".parse().expect("value"));
        strip_hop_by_hop(&mut h, false, false);
        assert_eq!(h["x-a"], "route");

        let mut plain = HeaderMap::new();
        plain.insert(header::CONNECTION, "keep-alive".parse().expect("value"));
        drop_connection_named(&mut plain);
        assert_eq!(plain[header::CONNECTION], "keep-alive");
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h, false, false);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn connection_names_match_whatever_their_case_and_plain_messages_are_left_alone() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(header::HOST, HeaderValue::from_static("a"));
        strip_hop_by_hop(&mut h, false, false);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::HOST));
        strip_hop_by_hop(&mut h, false, false);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn a_switch_must_name_an_offered_protocol() {
        let v = |s: &'static str| Some(HeaderValue::from_static(s));
        let offered = v("websocket, foo/2");
        assert!(switch_offered(offered.as_ref(), v("WebSocket").as_ref()));
        assert!(switch_offered(offered.as_ref(), v("foo/3").as_ref()));
        assert!(
            !switch_offered(offered.as_ref(), None),
            "a 101 must name it"
        );
        assert!(!switch_offered(offered.as_ref(), v(" , ").as_ref()));
        assert!(!switch_offered(offered.as_ref(), v("h2c").as_ref()));
        assert!(!switch_offered(
            offered.as_ref(),
            v("websocket, h2c").as_ref()
        ));
        assert!(!switch_offered(None, v("websocket").as_ref()));
    }

    #[test]
    fn upgrades_and_grpc_te_survive_when_asked() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut h, true, true);
        assert_eq!(h[header::UPGRADE], "websocket");
        assert_eq!(h[header::CONNECTION], "upgrade");
        assert_eq!(h[header::TE], "trailers");
        for (te, kept) in [
            ("gzip, trailers", true),
            ("Trailers;q=1", true),
            ("gzip", false),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::TE, HeaderValue::from_static(te));
            strip_hop_by_hop(&mut h, false, true);
            assert_eq!(h.get(header::TE).is_some(), kept, "{te}");
            assert!(h.get(header::TE).is_none_or(|v| v == "trailers"), "{te}");
        }
    }

    #[test]
    fn absolute_targets_get_a_path_and_the_asterisk_is_for_options_only() {
        let target = |version, method: &str, uri: &str| {
            let (mut p, _) = http::Request::builder()
                .version(version)
                .method(method)
                .uri(uri)
                .header("host", "a")
                .body(())
                .expect("valid request")
                .into_parts();
            validate_request(&mut p)
                .map(|()| p.uri.path_and_query().map(|pq| pq.as_str().to_owned()))
        };
        let v11 = Version::HTTP_11;
        assert_eq!(
            target(v11, "GET", "http://a?q=1").ok(),
            Some(Some("/?q=1".into()))
        );
        assert_eq!(target(v11, "GET", "http://a").ok(), Some(Some("/".into())));
        assert_eq!(
            target(v11, "GET", "http://a/p?q").ok(),
            Some(Some("/p?q".into()))
        );
        assert_eq!(
            target(v11, "OPTIONS", "http://a").ok(),
            Some(Some("/".into()))
        );
        assert_eq!(
            target(v11, "OPTIONS", "http://a?q").ok(),
            Some(Some("/?q".into()))
        );
        assert_eq!(target(v11, "OPTIONS", "*").ok(), Some(Some("*".into())));
        assert!(target(v11, "GET", "*").is_err());
        assert!(target(v11, "POST", "*").is_err());
        assert!(target(Version::HTTP_2, "GET", "*").is_err());
    }

    #[test]
    fn ambiguous_requests_are_refused() {
        let mut p = parts(Version::HTTP_11, "/", &[("host", "a"), ("host", "b")]);
        assert!(validate_request(&mut p).is_err());
        let mut p = parts(Version::HTTP_11, "/", &[]);
        assert!(validate_request(&mut p).is_err());
        let mut p = parts(
            Version::HTTP_11,
            "/",
            &[
                ("host", "a"),
                ("content-length", "1"),
                ("transfer-encoding", "chunked"),
            ],
        );
        assert!(validate_request(&mut p).is_err());
        let mut p = parts(Version::HTTP_2, "http://a/", &[("host", "b")]);
        assert!(validate_request(&mut p).is_err());
        let mut p = parts(Version::HTTP_2, "http://a/", &[("host", "a")]);
        assert!(validate_request(&mut p).is_ok());
        let mut p = parts(Version::HTTP_10, "/", &[]);
        assert!(validate_request(&mut p).is_ok());
        for bad in [" v", "v\t", " "] {
            let mut p = parts(Version::HTTP_2, "http://a/", &[("x", bad)]);
            assert!(validate_request(&mut p).is_err(), "{bad:?}");
        }
        let mut p = parts(Version::HTTP_2, "http://a/", &[("x", "in side"), ("y", "")]);
        assert!(validate_request(&mut p).is_ok());
        let mut p = parts(Version::HTTP_2, "http://u@a/", &[]);
        assert!(validate_request(&mut p).is_err());
        let mut p = parts(Version::HTTP_2, "http://a:70000/", &[]);
        assert!(validate_request(&mut p).is_err());
        // What the h2 crate makes of a request with neither :path nor :authority.
        let mut p = parts(Version::HTTP_2, "/", &[("host", "a")]);
        p.uri = http::Uri::from_parts(http::uri::Parts::default()).expect("an empty uri");
        assert!(validate_request(&mut p).is_err());
    }

    #[test]
    fn an_http1_absolute_target_names_the_host_whatever_host_said() {
        let mut p = parts(
            Version::HTTP_11,
            "http://b.test:81/p",
            &[("host", "evil.test")],
        );
        assert!(validate_request(&mut p).is_ok());
        assert_eq!(p.headers.get_all(header::HOST).iter().count(), 1);
        assert_eq!(p.headers[header::HOST], "b.test:81");
        let mut p = parts(Version::HTTP_10, "http://b.test/p", &[]);
        assert!(validate_request(&mut p).is_ok());
        assert_eq!(p.headers[header::HOST], "b.test");
        for bad in ["http://u@b.test/p", "http://b.test:65536/p"] {
            let mut p = parts(Version::HTTP_11, bad, &[("host", "b.test")]);
            assert!(validate_request(&mut p).is_err(), "{bad}");
        }
        // Origin form: Host stays as sent.
        let mut p = parts(Version::HTTP_11, "/p", &[("host", "a.test")]);
        assert!(validate_request(&mut p).is_ok());
        assert_eq!(p.headers[header::HOST], "a.test");
    }

    #[test]
    fn http2_cookie_fields_become_one_in_their_order() {
        let mut h = HeaderMap::new();
        for v in ["a=1", "b=2", "c=3"] {
            h.append(header::COOKIE, HeaderValue::from_static(v));
        }
        h.append("x-other", HeaderValue::from_static("kept"));
        join_cookies(&mut h);
        let cookies: Vec<_> = h.get_all(header::COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1; b=2; c=3"]);
        assert_eq!(h["x-other"], "kept");
        let mut one = HeaderMap::new();
        one.insert(header::COOKIE, HeaderValue::from_static("a=1"));
        join_cookies(&mut one);
        assert_eq!(one[header::COOKIE], "a=1");
        join_cookies(&mut HeaderMap::new());
    }

    #[test]
    fn authority_drops_the_port() {
        let p = parts(Version::HTTP_11, "/", &[("host", "svc.default:8080")]);
        assert_eq!(authority_host(&p), Some("svc.default"));
        let p = parts(Version::HTTP_2, "http://[::1]:80/", &[]);
        assert_eq!(authority_host(&p), Some("[::1]"));
    }

    #[test]
    fn the_client_is_appended_to_x_forwarded_for_in_its_usual_text() {
        for ip in [
            "0.0.0.0",
            "9.10.99.100",
            "127.0.0.1",
            "255.255.255.255",
            "2001:db8::1",
        ] {
            let mut h = HeaderMap::new();
            add_forwarded(
                &mut h,
                &forwarded_for(ip.parse().expect("an address")),
                "http",
            );
            assert_eq!(h["x-forwarded-for"], ip);
            assert_eq!(h["x-forwarded-proto"], "http");
        }
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        add_forwarded(
            &mut h,
            &forwarded_for("10.0.0.7".parse().expect("an address")),
            "http",
        );
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 10.0.0.7");
        // A previous value that is not text is replaced, not extended.
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff").expect("obs-text is a valid value"),
        );
        add_forwarded(
            &mut h,
            &forwarded_for("10.0.0.7".parse().expect("an address")),
            "http",
        );
        assert_eq!(h["x-forwarded-for"], "10.0.0.7");
    }

    #[test]
    fn the_requests_of_a_connection_share_its_client_value() {
        let client = forwarded_for("10.0.0.7".parse().expect("an address"));
        let (mut a, mut b) = (HeaderMap::new(), HeaderMap::new());
        add_forwarded(&mut a, &client, "http");
        add_forwarded(&mut b, &client, "http");
        let at = |h: &HeaderMap| h["x-forwarded-for"].as_bytes().as_ptr();
        assert_eq!(at(&a), at(&b));
        assert_eq!(at(&a), client.as_bytes().as_ptr());
    }
}
