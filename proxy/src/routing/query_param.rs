//! The `AddQueryParameter` filter: append `name=value`, both percent-encoded, to the query.

use bytes::Bytes;
use http::{request, uri::PathAndQuery, Uri};

use crate::model::NameValue;

/// Appends the parameter, keeping any existing ones (a repeated name is appended, not replaced).
pub(super) fn apply(param: &NameValue, parts: &mut request::Parts) {
    let path = parts.uri.path();
    let query = parts.uri.query().filter(|q| !q.is_empty());
    // Sized exactly: `Bytes::from` a `String` with spare room reallocates to shed it.
    let len = path.len()
        + query.map_or(0, |q| q.len() + 1)
        + 2
        + encoded_len(&param.name)
        + encoded_len(&param.value);
    let mut pq = String::with_capacity(len);
    pq.push_str(path);
    pq.push('?');
    if let Some(q) = query {
        pq.push_str(q);
        pq.push('&');
    }
    encode_into(&param.name, &mut pq);
    pq.push('=');
    encode_into(&param.value, &mut pq);
    debug_assert_eq!(pq.len(), len);

    // Encoding leaves only unreserved characters and escapes, which always form a valid URI.
    match with_path_and_query(&parts.uri, Bytes::from(pq)) {
        Some(rewritten) => parts.uri = rewritten,
        None => tracing::warn!(
            name = param.name,
            "AddQueryParameter produced an invalid URI; URI kept"
        ),
    }
}

/// `uri` with its path and query replaced by `pq`, or `None` if that is not a valid URI.
fn with_path_and_query(uri: &Uri, pq: Bytes) -> Option<Uri> {
    let pq = PathAndQuery::from_maybe_shared(pq).ok()?;
    if uri.scheme().is_none() && uri.authority().is_none() {
        // The origin form every HTTP/1.1 request line carries: the path and query are the URI.
        return Some(Uri::from(pq));
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).ok()
}

/// The length of `s` once [`encode_into`] has escaped it.
fn encoded_len(s: &str) -> usize {
    s.bytes().map(|b| if unreserved(b) { 1 } else { 3 }).sum()
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 percent-encoding: everything but the unreserved set is escaped, so `&`, `=`, `+` and
/// spaces in the configured strings cannot change the query's structure.
fn encode_into(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s.as_bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::request;

    fn add(uri: &str, name: &str, value: &str) -> String {
        let mut parts = request("GET", uri, &[]);
        apply(
            &NameValue {
                name: name.into(),
                value: value.into(),
            },
            &mut parts,
        );
        parts.uri.to_string()
    }

    #[test]
    fn appends_to_an_existing_query() {
        assert_eq!(add("/p?a=1", "b", "2"), "/p?a=1&b=2");
        assert_eq!(add("/p?a=1", "a", "2"), "/p?a=1&a=2");
    }

    #[test]
    fn starts_a_query_when_there_is_none() {
        assert_eq!(add("/p", "b", "2"), "/p?b=2");
        assert_eq!(add("/p?", "b", "2"), "/p?b=2");
    }

    #[test]
    fn percent_encodes_name_and_value() {
        assert_eq!(
            add("/p", "a b&c", "x=y+z/é"),
            "/p?a%20b%26c=x%3Dy%2Bz%2F%C3%A9"
        );
        assert_eq!(add("/p", "safe-._~", ""), "/p?safe-._~=");
    }

    #[test]
    fn keeps_scheme_and_authority_of_an_absolute_uri() {
        assert_eq!(add("http://h:81/p?a=1", "b", "2"), "http://h:81/p?a=1&b=2");
        assert_eq!(add("http://h:81", "b", "2"), "http://h:81/?b=2");
    }

    #[test]
    fn the_rewritten_origin_form_is_whole() {
        let mut parts = request("GET", "/p/q?a=1", &[]);
        let param = NameValue {
            name: "b c".into(),
            value: "2".into(),
        };
        apply(&param, &mut parts);
        assert_eq!(parts.uri.path(), "/p/q");
        assert_eq!(parts.uri.query(), Some("a=1&b%20c=2"));
        assert_eq!(parts.uri.scheme(), None);
        assert_eq!(parts.uri.authority(), None);
    }
}
