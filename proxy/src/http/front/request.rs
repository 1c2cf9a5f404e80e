//! Reads a plain HTTP/1.1 or HTTP/1.0 request head for the fast path, or says it is not one:
//! anything the head guard would refuse, or that needs hyper (an upgrade, CONNECT, `Expect`, a
//! chunked or large body, a request without exactly one `Host`), goes to hyper behind the guard,
//! which answers it exactly as before.

use std::mem::MaybeUninit;

use bytes::Bytes;
use http::{request::Parts, Method, Request, Uri, Version};

use crate::http::h1::{
    // Most header fields in a head: the head guard's and hyper's limit, and `Spans`' room.
    decode::{eq_name, has_token, header_map, span, SpanRoom, Spans, MAX_HEADERS},
    names::Names,
};
use crate::http::headers::drop_connection_named;

/// Largest body the fast path reads whole before handing the request on.
pub const MAX_WHOLE_BODY: u64 = 64 * 1024;

/// What a complete head (already through `HeadScan`) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Body bytes after the head.
    pub body: u64,
    /// The client sent `Connection: close`.
    pub close: bool,
    /// The client accepts trailers (`TE: trailers`).
    pub trailers: bool,
    /// The client spoke HTTP/1.0: no chunked coding, and the connection closes after the
    /// response unless the request asked for `keep-alive`.
    pub http10: bool,
    /// `Connection` names something besides `close` and `keep-alive`: fields to drop.
    pub names_fields: bool,
}

/// The request head in `head` (a whole head that passed the line checks, frozen off the
/// connection's buffer: the header values share it), if the fast path serves it; `None`
/// sends it to hyper, which also answers what hyper refuses and the line checks let through (a
/// target that is not a URI, a method that is not a token).
pub fn read(head: &Bytes, names: &mut Names) -> Option<(Plan, Box<Parts>)> {
    let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut slots) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        _ => return None,
    }
    let http10 = match req.version {
        Some(1) => false,
        Some(0) => true,
        _ => return None,
    };
    if req.method == Some("CONNECT") {
        return None;
    }
    let plan = plan(req.headers, http10)?;
    let method = Method::from_bytes(req.method?.as_bytes()).ok()?;
    let base = head.as_ptr() as usize;
    let target = req.path?;
    let at = target.as_ptr() as usize - base;
    let uri = Uri::from_maybe_shared(head.slice(at..at + target.len())).ok()?;
    let mut room: SpanRoom = [MaybeUninit::uninit(); MAX_HEADERS];
    let mut spans = Spans::new(&mut room);
    for h in req.headers.iter() {
        spans.push(span(base, h));
    }
    // Room for X-Forwarded-For and -Proto.
    let headers = header_map(head, spans.as_slice(), names, 2).ok()?;
    // Boxed once here, filled in place: the head then moves through every stage as a pointer.
    let mut parts = Box::new(Request::new(()).into_parts().0);
    parts.method = method;
    parts.uri = uri;
    // As hyper reads it; forward.rs sends every request upstream as HTTP/1.1 or HTTP/2.
    parts.version = if http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    parts.headers = headers;
    if plan.names_fields {
        drop_connection_named(&mut parts.headers);
    }
    Some((plan, parts))
}

/// What the fields ask for, if the fast path can serve it.
fn plan(fields: &[httparse::Header<'_>], http10: bool) -> Option<Plan> {
    let mut plan = Plan {
        body: 0,
        close: false,
        trailers: false,
        http10,
        names_fields: false,
    };
    let (mut length, mut hosts, mut keep_alive) = (None, 0u32, false);
    for h in fields {
        let (name, value) = (h.name.as_bytes(), h.value.trim_ascii());
        match name.len() {
            4 if eq_name(name, b"host") => {
                if !crate::http::host::is_valid(value) {
                    return None;
                }
                hosts += 1;
            }
            2 if eq_name(name, b"te") => {
                plan.trailers = has_token(value, b"trailers");
            }
            6 if eq_name(name, b"expect") => return None,
            7 if eq_name(name, b"upgrade") => return None,
            10 if eq_name(name, b"connection") => {
                for t in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if t.eq_ignore_ascii_case(b"close") {
                        plan.close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    } else if t.eq_ignore_ascii_case(b"upgrade") {
                        return None;
                    } else {
                        plan.names_fields = true;
                    }
                }
            }
            14 if eq_name(name, b"content-length") => {
                if length.is_some()
                    || value.is_empty()
                    || value.len() > 19
                    || !value.iter().all(u8::is_ascii_digit)
                {
                    return None;
                }
                length = Some(
                    value
                        .iter()
                        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')),
                );
            }
            17 if eq_name(name, b"transfer-encoding") => return None,
            _ => {}
        }
    }
    if hosts != 1 {
        return None;
    }
    if http10 {
        // Persistent only when asked (RFC 9112 §9.3); trailers need the chunked coding.
        plan.close |= !keep_alive;
        plan.trailers = false;
    }
    plan.body = length.unwrap_or(0);
    (plan.body <= MAX_WHOLE_BODY).then_some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(head: &'static [u8]) -> Option<Plan> {
        read(&Bytes::from_static(head), &mut Names::default()).map(|(p, _)| p)
    }

    #[test]
    fn plain_requests_are_planned() {
        let p = plan_of(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").expect("plain");
        assert_eq!((p.body, p.close, p.trailers), (0, false, false));
        let p = plan_of(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: keep-alive, close\r\nTE: trailers\r\n\r\n")
            .expect("plain");
        assert_eq!((p.body, p.close, p.trailers), (12, true, true));
    }

    #[test]
    fn http10_requests_close_unless_they_ask_for_keep_alive() {
        let head = Bytes::from_static(b"GET /a HTTP/1.0\r\nHost: x\r\nTE: trailers\r\n\r\n");
        let (p, parts) = read(&head, &mut Names::default()).expect("plain 1.0");
        assert_eq!((p.close, p.trailers, p.http10), (true, false, true));
        assert_eq!(parts.version, Version::HTTP_10);
        let p = plan_of(
            b"POST / HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\nConnection: Keep-Alive\r\n\r\n",
        )
        .expect("keep-alive 1.0");
        assert_eq!((p.body, p.close, p.http10), (2, false, true));
        let p = plan_of(b"GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n")
            .expect("1.0");
        assert!(p.close);
        let p = plan_of(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("1.1");
        assert!(!p.http10);
    }

    #[test]
    fn anything_else_goes_to_hyper() {
        for head in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/1.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n",
            b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: u@x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x:65536\r\n\r\n",
        ] {
            assert!(
                read(&Bytes::from_static(head), &mut Names::default()).is_none(),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn builds_the_request_sharing_the_head() {
        let head =
            Bytes::from_static(b"PUT /p?q=1 HTTP/1.1\r\nHost: svc\r\nX-A: 1\r\nx-a: 2\r\n\r\n");
        let (_, head) = read(&head, &mut Names::default()).expect("valid");
        assert_eq!(head.method, Method::PUT);
        assert_eq!(head.uri, "/p?q=1");
        assert_eq!(head.version, Version::HTTP_11);
        assert_eq!(head.headers["host"], "svc");
        assert_eq!(head.headers.get_all("x-a").iter().count(), 2);
    }
}
