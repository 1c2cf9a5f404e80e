//! Writes an upstream HTTP/1.1 request head into the connection's reused buffer, choosing the
//! body's framing: the client's length, else the exact size if known, else chunked.

use http::{header, request::Parts, HeaderMap, Method};

use super::case::HeaderCase;

/// How the request body follows the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Nothing follows (or the body's bytes are already in the buffer after the head).
    Done,
    /// Exactly this many bytes follow, unframed.
    Length(u64),
    /// The body follows in chunked encoding.
    Chunked,
}

/// Appends the request head to `out`, its names spelled in `case`. `exact` is the body's exact
/// length if known, `empty` whether it has already ended. Hop-by-hop headers
/// (`Transfer-Encoding` among them) were removed by the caller, so the framing header written
/// here is the only one.
pub fn head(
    parts: &Parts,
    empty: bool,
    exact: Option<u64>,
    case: HeaderCase,
    out: &mut Vec<u8>,
) -> Framing {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    headers(&parts.headers, case, out);
    let framing = if empty {
        // A client's own `Content-Length: 0` goes on as it came; nothing is added.
        Framing::Done
    } else if let Some(n) = declared_length(&parts.headers).or(exact) {
        if !parts.headers.contains_key(header::CONTENT_LENGTH) {
            content_length_line(n, case, out);
        }
        Framing::Length(n)
    } else if parts.method == Method::CONNECT {
        // Its bytes after the head are the tunnel, not a body.
        Framing::Length(0)
    } else {
        // Whatever the method: a GET whose client framed a body (chunked, or an HTTP/2 stream
        // left open after its HEADERS) sends it on. hyper's client drops such a body, so the
        // upstream would see the request without it.
        out.extend_from_slice(case.pick(
            b"transfer-encoding: chunked\r\n",
            b"Transfer-Encoding: chunked\r\n",
        ));
        Framing::Chunked
    };
    out.extend_from_slice(b"\r\n");
    framing
}

fn headers(h: &HeaderMap, case: HeaderCase, out: &mut Vec<u8>) {
    for (name, value) in h {
        case.write(name.as_str(), out);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// The `Content-Length` the request carries (hyper's server checked it is one valid number).
fn declared_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// `content-length: n` and its line end.
pub fn content_length_line(n: u64, case: HeaderCase, out: &mut Vec<u8>) {
    out.extend_from_slice(case.pick(b"content-length: ", b"Content-Length: "));
    out.extend_from_slice(itoa(n, &mut [0u8; 20]));
    out.extend_from_slice(b"\r\n");
}

/// The chunk-size line of a chunk of `n` bytes.
pub fn chunk_size_line(n: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(format_args_hex(n, &mut [0u8; 16]));
    out.extend_from_slice(b"\r\n");
}

/// The last chunk and the trailer section (possibly empty).
pub fn last_chunk(trailers: Option<&HeaderMap>, case: HeaderCase, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(b"0\r\n");
    if let Some(t) = trailers {
        headers(t, case, out);
    }
    out.extend_from_slice(b"\r\n");
}

fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

fn format_args_hex(mut n: usize, buf: &mut [u8; 16]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Request;

    use super::*;

    fn encode(req: Request<()>, empty: bool, exact: Option<u64>) -> (String, Framing) {
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        let f = head(&parts, empty, exact, HeaderCase::Lower, &mut out);
        (String::from_utf8(out).expect("ascii"), f)
    }

    #[test]
    fn a_bodiless_get_is_the_line_and_its_headers() {
        let req = Request::get("/a?b=c")
            .header("host", "svc")
            .header("x-two", "1")
            .header("x-two", "2")
            .body(())
            .expect("request");
        let (s, f) = encode(req, true, Some(0));
        assert_eq!(
            s,
            "GET /a?b=c HTTP/1.1\r\nhost: svc\r\nx-two: 1\r\nx-two: 2\r\n\r\n"
        );
        assert_eq!(f, Framing::Done);
    }

    #[test]
    fn a_known_length_gets_content_length_once() {
        let req = Request::post("/").body(()).expect("request");
        let (s, f) = encode(req, false, Some(12345));
        assert_eq!(s, "POST / HTTP/1.1\r\ncontent-length: 12345\r\n\r\n");
        assert_eq!(f, Framing::Length(12345));
        let req = Request::post("/")
            .header("content-length", "7")
            .body(())
            .expect("request");
        let (s, f) = encode(req, false, None);
        assert_eq!(s, "POST / HTTP/1.1\r\ncontent-length: 7\r\n\r\n");
        assert_eq!(f, Framing::Length(7));
    }

    #[test]
    fn an_unknown_length_is_chunked_whatever_the_method() {
        let req = Request::put("/x").body(()).expect("request");
        let (s, f) = encode(req, false, None);
        assert_eq!(s, "PUT /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(f, Framing::Chunked);
        let (s, f) = encode(Request::get("/").body(()).expect("request"), false, None);
        assert_eq!(s, "GET / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(f, Framing::Chunked);
        let req = Request::connect("a:443").body(()).expect("request");
        assert_eq!(encode(req, false, None).1, Framing::Length(0));
    }

    #[test]
    fn chunk_lines_are_hex() {
        let mut out = Vec::new();
        chunk_size_line(0x1f3a, &mut out);
        assert_eq!(out, b"1f3a\r\n");
        chunk_size_line(1, &mut out);
        assert_eq!(out, b"1\r\n");
        let mut t = HeaderMap::new();
        t.insert("grpc-status", "0".parse().expect("value"));
        last_chunk(Some(&t), HeaderCase::Lower, &mut out);
        assert_eq!(out, b"0\r\ngrpc-status: 0\r\n\r\n");
    }
}
