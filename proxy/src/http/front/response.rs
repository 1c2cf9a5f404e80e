//! Writes a response on the fast path the way hyper's server frames it: status line, the fields,
//! `date` when missing, `content-length` when the body's size is known, else chunked (to an
//! HTTP/1.0 client, which has no chunked coding: the close ends the body).

use std::{
    cell::RefCell,
    time::{SystemTime, UNIX_EPOCH},
};

use http::{header, response::Parts, Method, StatusCode};

use crate::http::h1::{case::HeaderCase, decode::has_token, encode};

/// How the body follows the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body is written (HEAD, 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked, with trailers if the client accepts them.
    Chunked,
    /// Raw until the connection closes (an HTTP/1.0 client, the body's size unknown).
    UntilClose,
}

/// Appends the head of a response to `method` to `out`; `exact` is the body's exact size if
/// known. `close`, or a response whose `Connection` says close, adds `connection: close`. To an
/// HTTP/1.0 client (`http10`) the status line says HTTP/1.0 and a connection kept open says
/// `connection: keep-alive`, as hyper writes them. Returns how the body follows and whether the
/// connection closes after it. The fields are looked at in the one pass that writes them: a map
/// lookup for `Date` and `Connection` cost ~100 instructions each.
pub fn head(
    parts: &Parts,
    method: &Method,
    exact: Option<u64>,
    mut close: bool,
    http10: bool,
    case: HeaderCase,
    out: &mut Vec<u8>,
) -> (Framing, bool) {
    let status = parts.status;
    out.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let (mut length, mut date) = (None, false);
    for (name, value) in &parts.headers {
        if name == header::CONNECTION {
            close |= has_token(value.as_bytes(), b"close");
            continue; // persistence is ours to choose
        }
        if name == header::TRANSFER_ENCODING {
            continue; // and so is framing
        }
        date |= name == header::DATE;
        if name == header::CONTENT_LENGTH {
            length = value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok());
            if length.is_none() {
                continue; // not a length: hyper would not have sent it either
            }
        }
        case.write(name.as_str(), out);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !date {
        out.extend_from_slice(case.pick(b"date: ", b"Date: "));
        http_date(out);
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if bodiless {
        Framing::None
    } else if let Some(n) = length {
        if method == Method::HEAD {
            Framing::None
        } else {
            Framing::Length(n)
        }
    } else if method == Method::HEAD {
        // The body of a HEAD response is empty by definition, not a length to announce.
        Framing::None
    } else if let Some(n) = exact {
        encode::content_length_line(n, case, out);
        Framing::Length(n)
    } else if http10 {
        close = true;
        Framing::UntilClose
    } else {
        out.extend_from_slice(case.pick(
            b"transfer-encoding: chunked\r\n",
            b"Transfer-Encoding: chunked\r\n",
        ));
        Framing::Chunked
    };
    if close {
        out.extend_from_slice(case.pick(b"connection: close\r\n", b"Connection: close\r\n"));
    } else if http10 {
        out.extend_from_slice(
            case.pick(b"connection: keep-alive\r\n", b"Connection: keep-alive\r\n"),
        );
    }
    out.extend_from_slice(b"\r\n");
    (framing, close)
}

thread_local! {
    /// The second last formatted and its IMF-fixdate (hyper caches it the same way).
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((0, [0; 29])) };
}

/// Appends the current time as an HTTP date.
fn http_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            let s = httpdate::fmt_http_date(now);
            if s.len() == 29 {
                d.1.copy_from_slice(s.as_bytes());
                d.0 = secs;
            }
        }
        out.extend_from_slice(&d.1);
    });
}

#[cfg(test)]
mod tests {
    use http::Response;

    use super::*;

    fn encode(
        resp: Response<()>,
        method: Method,
        exact: Option<u64>,
        close: bool,
    ) -> (String, Framing) {
        let (s, f, _) = encode_closing(resp, method, exact, close);
        (s, f)
    }

    fn encode_closing(
        resp: Response<()>,
        method: Method,
        exact: Option<u64>,
        close: bool,
    ) -> (String, Framing, bool) {
        encode_for(resp, method, exact, close, false)
    }

    /// The head for an HTTP/1.1 client, or an HTTP/1.0 one (`http10`).
    fn encode_for(
        resp: Response<()>,
        method: Method,
        exact: Option<u64>,
        close: bool,
        http10: bool,
    ) -> (String, Framing, bool) {
        let (parts, ()) = resp.into_parts();
        let mut out = Vec::new();
        let (f, closes) = head(
            &parts,
            &method,
            exact,
            close,
            http10,
            HeaderCase::Lower,
            &mut out,
        );
        (String::from_utf8(out).expect("ascii"), f, closes)
    }

    #[test]
    fn a_response_saying_close_closes_and_its_own_connection_field_is_replaced() {
        let resp = Response::builder()
            .header("connection", "keep-alive, Close")
            .body(())
            .expect("response");
        let (s, _, closes) = encode_closing(resp, Method::GET, Some(0), false);
        assert!(closes);
        assert_eq!(
            without_date(&s),
            "HTTP/1.1 200 OK\ncontent-length: 0\nconnection: close\n"
        );
        let resp = Response::builder()
            .header("connection", "keep-alive")
            .body(())
            .expect("response");
        let (s, _, closes) = encode_closing(resp, Method::GET, Some(0), false);
        assert!(!closes);
        assert!(!s.contains("connection"), "{s}");
        let resp = Response::builder().body(()).expect("response");
        assert!(encode_closing(resp, Method::GET, Some(0), true).2);
    }

    fn without_date(s: &str) -> String {
        s.lines()
            .filter(|l| !l.starts_with("date: "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn a_known_size_gets_a_content_length_and_a_date() {
        let resp = Response::builder()
            .header("x-a", "1")
            .body(())
            .expect("response");
        let (s, f) = encode(resp, Method::GET, Some(2), false);
        assert_eq!(f, Framing::Length(2));
        assert!(s.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ndate: "), "{s}");
        assert!(s.ends_with(" GMT\r\ncontent-length: 2\r\n\r\n"), "{s}");
    }

    #[test]
    fn an_upstream_length_is_kept_and_an_unknown_size_is_chunked() {
        let resp = Response::builder()
            .header("content-length", "10")
            .header("transfer-encoding", "chunked")
            .body(())
            .expect("response");
        let (s, f) = encode(resp, Method::GET, None, true);
        assert_eq!(f, Framing::Length(10));
        assert_eq!(
            without_date(&s),
            "HTTP/1.1 200 OK\ncontent-length: 10\nconnection: close\n"
        );
        let resp = Response::builder().status(404).body(()).expect("response");
        let (s, f) = encode(resp, Method::POST, None, false);
        assert_eq!(f, Framing::Chunked);
        assert_eq!(
            without_date(&s),
            "HTTP/1.1 404 Not Found\ntransfer-encoding: chunked\n"
        );
    }

    #[test]
    fn an_http10_client_gets_a_10_head_and_no_chunked_body() {
        let head10 = |resp, exact, close| {
            let (s, f, closes) = encode_for(resp, Method::GET, exact, close, true);
            (without_date(&s), f, closes)
        };
        let ok = || Response::builder().body(()).expect("response");
        assert_eq!(
            head10(ok(), Some(2), false),
            (
                "HTTP/1.0 200 OK\ncontent-length: 2\nconnection: keep-alive\n".into(),
                Framing::Length(2),
                false
            )
        );
        assert_eq!(
            head10(ok(), Some(2), true),
            (
                "HTTP/1.0 200 OK\ncontent-length: 2\nconnection: close\n".into(),
                Framing::Length(2),
                true
            )
        );
        // Size unknown: no chunked coding in 1.0, so the close ends the body.
        assert_eq!(
            head10(ok(), None, false),
            (
                "HTTP/1.0 200 OK\nconnection: close\n".into(),
                Framing::UntilClose,
                true
            )
        );
    }

    #[test]
    fn head_and_bodiless_statuses_write_no_body() {
        let resp = Response::builder().body(()).expect("response");
        let (s, f) = encode(resp, Method::HEAD, Some(0), false);
        assert_eq!(f, Framing::None);
        assert!(!s.contains("content-length"), "{s}");
        let resp = Response::builder().status(204).body(()).expect("response");
        assert_eq!(encode(resp, Method::GET, Some(0), false).1, Framing::None);
        let resp = Response::builder()
            .status(304)
            .header("date", "x")
            .body(())
            .expect("response");
        let (s, f) = encode(resp, Method::GET, None, false);
        assert_eq!(f, Framing::None);
        assert_eq!(s, "HTTP/1.1 304 Not Modified\r\ndate: x\r\n\r\n");
    }
}
