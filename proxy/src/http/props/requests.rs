//! The requests a client's bytes hold by the head guard's rules, in order, as a reference for
//! what the server hands its handler: where each head ends (`HeadScan`), whether it stands
//! (`validate`), and where its body ends (its length, or the guard's chunk tracker).

use http::Uri;

use crate::http::head_guard::{body, head};

/// What the handler sees of one request: method, path, body length.
pub(super) type Served = (String, String, usize);

/// The requests in `data` the server must serve, in this order, and whether the list is all of
/// them (`false`: the server may go on to serve more after the last). The list stops where the
/// rules refuse, where the bytes run out, and after a request that ends the exchange
/// (`Connection: close`, HTTP/1.0 without keep-alive, a CONNECT, which a 2xx turns into a
/// tunnel). It stops open-ended after a `Connection` field with bytes beyond ASCII: hyper
/// ignores such a field and the fast path reads its tokens, so whether the exchange goes on
/// depends on the path that served it.
pub(super) fn requests_in(data: &[u8], max_head: usize) -> (Vec<Served>, bool) {
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
        let unreadable = req
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("connection") && !h.value.is_ascii());
        if unreadable {
            return (out, false);
        }
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
    (out, true)
}

/// A chunked body at the front of `body`, if the guard's tracker finds it whole: its data's
/// length and the bytes it takes. The tracker has checked the grammar, so the sizes are read
/// off the chunk lines directly (trailers, which hyper reads more leniently than the upstream
/// decoder, play no part).
fn chunked_len(body: &[u8], max_trailers: usize) -> Option<(usize, usize)> {
    let mut tracker = body::Body::Chunked(body::Chunked::new(max_trailers));
    let used = match tracker.advance(body) {
        Ok((n, true)) => n,
        _ => return None,
    };
    let (mut at, mut len) = (0, 0);
    loop {
        let line = body[at..used].split(|&b| b == b'\r').next()?;
        let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        let size = usize::from_str_radix(std::str::from_utf8(&line[..digits]).ok()?, 16).ok()?;
        if size == 0 {
            return Some((len, used));
        }
        len += size;
        at += line.len() + 2 + size + 2;
    }
}
