//! `HeadCopy`: a request head kept for a retry, as one flat copy of its bytes.
//!
//! hyper consumes the head it sends, so a route that may resend a sent request keeps a copy of
//! every request's head, retried or not. Cloning a `HeaderMap` for that costs two allocations,
//! and cloning a value hyper parsed promotes the buffer it points into to a shared allocation:
//! one more allocation per value, and as many frees later (profiled, this was most of the cost of
//! a route with retries). Copying the bytes instead costs one allocation and a short `memcpy`;
//! the head is rebuilt, its parts validated again, only when a retry happens.

use bytes::Bytes;
use http::{
    header::{HeaderName, HeaderValue},
    request::Parts,
    uri::{self, Authority, PathAndQuery},
    HeaderMap, Method, Request, Uri, Version,
};

/// What a retry needs of a request head: method, URI, version and headers, in their order.
pub struct HeadCopy {
    method: Method,
    version: Version,
    scheme: Option<uri::Scheme>,
    authority_len: usize,
    path_len: usize,
    headers: usize,
    /// The authority, the path and query, then per header: name length and value length
    /// (`u32` little-endian each), a sensitive flag, the name, the value.
    buf: Vec<u8>,
}

/// Bytes a header takes in [`HeadCopy::buf`] besides its name and value.
const PER_HEADER: usize = 4 + 4 + 1;

impl HeadCopy {
    /// Copies `parts`' head (its extensions are not kept).
    pub fn of(parts: &Parts) -> Self {
        let authority = parts.uri.authority().map_or("", Authority::as_str);
        let path = parts.uri.path_and_query().map_or("", PathAndQuery::as_str);
        let size = parts
            .headers
            .iter()
            .fold(authority.len() + path.len(), |n, (k, v)| {
                n + PER_HEADER + k.as_str().len() + v.len()
            });
        let mut buf = Vec::with_capacity(size);
        buf.extend_from_slice(authority.as_bytes());
        buf.extend_from_slice(path.as_bytes());
        for (name, value) in &parts.headers {
            // Names and values fit: a head is bounded far below 4 GiB before it gets here.
            buf.extend_from_slice(&len32(name.as_str().len()).to_le_bytes());
            buf.extend_from_slice(&len32(value.len()).to_le_bytes());
            buf.push(u8::from(value.is_sensitive()));
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(value.as_bytes());
        }
        HeadCopy {
            method: parts.method.clone(),
            version: parts.version,
            scheme: parts.uri.scheme().cloned(),
            authority_len: authority.len(),
            path_len: path.len(),
            headers: parts.headers.len(),
            buf,
        }
    }

    /// A new head equal to the one copied; `None` only if the copy no longer parses, which a
    /// head that parsed once cannot do.
    pub fn parts(&self) -> Option<Parts> {
        let buf = Bytes::copy_from_slice(&self.buf);
        let (a, p) = (self.authority_len, self.authority_len + self.path_len);
        let mut u = uri::Parts::default();
        u.scheme = self.scheme.clone();
        if a > 0 {
            u.authority = Some(Authority::from_maybe_shared(buf.slice(..a)).ok()?);
        }
        if p > a {
            u.path_and_query = Some(PathAndQuery::from_maybe_shared(buf.slice(a..p)).ok()?);
        }
        let mut headers = HeaderMap::with_capacity(self.headers);
        let mut at = p;
        while at < buf.len() {
            let name_len = read32(&buf, at)?;
            let value_len = read32(&buf, at + 4)?;
            let sensitive = *buf.get(at + 8)? == 1;
            let name_at = at + PER_HEADER;
            let value_at = name_at + name_len;
            at = value_at + value_len;
            let name = HeaderName::from_bytes(buf.get(name_at..value_at)?).ok()?;
            let mut value = HeaderValue::from_maybe_shared(buf.slice(value_at..at)).ok()?;
            value.set_sensitive(sensitive);
            headers.append(name, value);
        }
        let (mut head, ()) = Request::new(()).into_parts();
        head.method = self.method.clone();
        head.uri = Uri::from_parts(u).ok()?;
        head.version = self.version;
        head.headers = headers;
        Some(head)
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn read32(buf: &[u8], at: usize) -> Option<usize> {
    let b: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(b)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, uri: &str, version: Version, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().method(method).uri(uri).version(version);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("a valid request").into_parts().0
    }

    fn same(a: &Parts, b: &Parts) {
        assert_eq!(a.method, b.method);
        assert_eq!(a.uri, b.uri);
        assert_eq!(a.version, b.version);
        let pairs = |h: &HeaderMap| {
            h.iter()
                .map(|(k, v)| (k.clone(), v.clone(), v.is_sensitive()))
                .collect::<Vec<_>>()
        };
        assert_eq!(pairs(&a.headers), pairs(&b.headers));
    }

    #[test]
    fn a_copied_head_comes_back_equal_repeated_headers_in_order() {
        let mut orig = head(
            "GET",
            "/a/b?x=1&y=%20",
            Version::HTTP_11,
            &[
                ("host", "api.test:8080"),
                ("x-forwarded-for", "10.0.0.1"),
                ("accept", "text/html"),
                ("accept", "application/json"),
                ("x-custom-Name", "v"),
                ("empty", ""),
            ],
        );
        let mut secret = HeaderValue::from_static("Bearer t");
        secret.set_sensitive(true);
        orig.headers.insert(http::header::AUTHORIZATION, secret);
        let copy = HeadCopy::of(&orig);
        let again = copy.parts().expect("rebuilt");
        same(&orig, &again);
        // A second retry gets the same head again.
        same(&orig, &copy.parts().expect("rebuilt twice"));
    }

    #[test]
    fn an_absolute_uri_and_an_extension_method_survive_the_copy() {
        let orig = head(
            "PURGE",
            "https://user@example.com:8443/p?q",
            Version::HTTP_2,
            &[],
        );
        same(&orig, &HeadCopy::of(&orig).parts().expect("rebuilt"));
        let star = head("OPTIONS", "*", Version::HTTP_11, &[("host", "h")]);
        same(&star, &HeadCopy::of(&star).parts().expect("rebuilt"));
        let authority_only = head("CONNECT", "example.com:443", Version::HTTP_11, &[]);
        same(
            &authority_only,
            &HeadCopy::of(&authority_only).parts().expect("rebuilt"),
        );
    }
}
