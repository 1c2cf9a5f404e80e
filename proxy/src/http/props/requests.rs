//! The requests a client's bytes hold by the head guard's rules, in order, as a reference for
//! what the server hands its handler: where each head ends (`HeadScan`), whether it stands
//! (`validate`), and where its body ends (its length, or the guard's chunk tracker).

use http::Uri;

use crate::http::{
    h1::chunked,
    head_guard::{body, head},
};

/// What the handler sees of one request: method, path, body length.
pub(super) type Served = (String, String, usize);

/// The requests in `data` the server must serve, in this order; the list
/// stops where the rules refuse, where the bytes run out, and after a request that ends the
/// exchange (`Connection: close`, HTTP/1.0 without keep-alive, a CONNECT, which a 2xx turns into
/// a tunnel).
pub(super) fn requests_in(data: &[u8], max_head: usize) -> Vec<Served> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let rest = &data[at..];
        let window = &rest[..rest.len().min(max_head)];
        let Ok(Some(end)) = head::HeadScan::default().feed(window) else {
            break;
        };
        let Ok(verdict) = head::validate(&rest[..end]) else {
            break;
        };
        let mut fields = [httparse::EMPTY_HEADER; 100];
        let mut req = httparse::Request::new(&mut fields);
        if !matches!(req.parse(&rest[..end]), Ok(httparse::Status::Complete(_))) {
            break;
        }
        let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version)
        else {
            break;
        };
        let Ok(uri) = target.parse::<Uri>() else {
            break;
        };
        let body = &rest[end..];
        let (len, used) = match verdict.framing {
            head::Framing::None => (0, 0),
            head::Framing::Length(n) => match usize::try_from(n) {
                Ok(n) if n <= body.len() => (n, n),
                _ => break,
            },
            head::Framing::Chunked => match chunked_len(body, max_head) {
                Some(got) => got,
                None => break,
            },
        };
        out.push((method.to_owned(), uri.path().to_owned(), len));
        let tokens = |name: &str| {
            req.headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
                .flat_map(|h| h.value.split(|&b| b == b','))
                .map(|t| t.trim_ascii().to_ascii_lowercase())
                .collect::<Vec<_>>()
        };
        let conn = tokens("connection");
        let keep = if version == 0 {
            conn.iter().any(|t| t == b"keep-alive") && !conn.iter().any(|t| t == b"close")
        } else {
            !conn.iter().any(|t| t == b"close")
        };
        if !keep || method == "CONNECT" {
            break;
        }
        at += end + used;
    }
    out
}

/// A chunked body at the front of `body`: its decoded length and the bytes it takes, if the
/// guard's tracker and the decoder both find it whole.
fn chunked_len(body: &[u8], max_trailers: usize) -> Option<(usize, usize)> {
    let mut tracker = body::Body::Chunked(body::Chunked::new(max_trailers));
    let used = match tracker.advance(body) {
        Ok((n, true)) => n,
        _ => return None,
    };
    let mut buf = bytes::BytesMut::from(&body[..used]);
    let mut d = chunked::Chunked::default();
    let mut len = 0;
    loop {
        match d.step(&mut buf).ok()? {
            chunked::Step::Data(b) => len += b.len(),
            chunked::Step::End | chunked::Step::Trailers(_) => return Some((len, used)),
            chunked::Step::More => return None,
        }
    }
}
