//! Reads an upstream HTTP/1.x response head out of the connection's buffer: status, headers
//! (values share the buffer, nothing copied), and how the body is framed (RFC 9112 §6.3).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{
    header::{self, HeaderValue},
    HeaderMap, StatusCode, Version,
};

use super::{names::Names, Error};
use crate::http::spare_maps;

/// Most headers a response head may carry (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// Largest response head.
pub const MAX_HEAD: usize = 64 * 1024;

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (HEAD, 204, 304, or `Content-Length: 0`).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the upstream closes; the connection cannot be reused.
    UntilClose,
}

/// A parsed final response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub framing: BodyFraming,
    /// Whether the connection may carry another request once the body has been read.
    pub keep_alive: bool,
}

/// Parses one response head from the front of `buf` and removes it. `Ok(None)`: incomplete.
/// Interim (1xx) responses are read and dropped; a `101` is an error here (upgrades are
/// forwarded on connections of their own). Hop-by-hop fields never reach the header map when
/// `Connection` names no other field (the usual case), so stripping them later costs a scan.
pub fn response(
    buf: &mut BytesMut,
    head_request: bool,
    names: &mut Names,
) -> Result<Option<Head>, Error> {
    loop {
        let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let parser = httparse::ParserConfig::default();
        let len = match parser.parse_response_with_uninit_headers(&mut parsed, buf, &mut slots) {
            // The limit holds for a head that arrived whole too, not only for one still arriving:
            // otherwise the read boundaries would decide.
            Ok(httparse::Status::Complete(n)) if n > MAX_HEAD => {
                return Err(Error::Protocol("response head too large"))
            }
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(Error::Protocol("response head too large"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Error::Protocol("too many response headers"))
            }
            Err(_) => return Err(Error::Protocol("malformed response head")),
        };
        let code = parsed.code.unwrap_or(0);
        // RFC 9110 §15: codes outside 100–599 are invalid (httparse takes any three digits,
        // the http crate up to 999); a client handed a 600 cannot know its class.
        let status = StatusCode::from_u16(code)
            .ok()
            .filter(|_| code <= 599)
            .ok_or(Error::Protocol("invalid response status"))?;
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(Error::Protocol("unexpected 101 Switching Protocols"));
            }
            let _ = buf.split_to(len);
            continue;
        }
        let version = if parsed.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let mut facts = Facts::default();
        for h in parsed.headers.iter() {
            facts.see(h.name.as_bytes(), h.value)?;
        }
        // Offsets into `buf`, so the values can share the frozen head once the borrow ends.
        let base = buf.as_ptr() as usize;
        let mut room: SpanRoom = [MaybeUninit::uninit(); MAX_HEADERS];
        let mut spans = Spans::new(&mut room);
        for h in parsed.headers.iter() {
            if !facts.names_others && is_hop_by_hop(h.name.as_bytes()) {
                continue;
            }
            spans.push(span(base, h));
        }
        let head = buf.split_to(len).freeze();
        let headers = header_map(&head, spans.as_slice(), names, 0)?;
        return facts
            .framed(status, version, headers, head_request)
            .map(Some);
    }
}

/// While a request body is still being sent: drops complete interim (1xx) heads from the front
/// of `buf` and tells whether a final response head has fully arrived (the upstream answered
/// early, so sending can stop). A partial head says no: the rest of it may be a `100 Continue`.
pub fn final_head_arrived(buf: &mut BytesMut) -> bool {
    loop {
        let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let parser = httparse::ParserConfig::default();
        match parser.parse_response_with_uninit_headers(&mut parsed, buf, &mut slots) {
            Ok(httparse::Status::Complete(n)) => match parsed.code {
                Some(c) if (100..200).contains(&c) && c != 101 => {
                    let _ = buf.split_to(n);
                }
                _ => return true,
            },
            Ok(httparse::Status::Partial) => return buf.len() >= MAX_HEAD,
            Err(_) => return true,
        }
    }
}

/// Where a field sits in a head: name offset and length, value offset and length.
pub(crate) type Span = (u32, u32, u32, u32);

/// Room for the spans of one head's fields: `MAX_HEADERS`, as many as httparse has slots.
pub(crate) type SpanRoom = [MaybeUninit<Span>; MAX_HEADERS];

/// The spans of one head's fields, written into room on the stack that is not zeroed first (a
/// `memset` of 1.6 KB per head, ~100 instructions, twice a request). The room is the caller's
/// own local: kept in this struct beside the length, LLVM merged the two into one `memset`.
pub(crate) struct Spans<'a> {
    spans: &'a mut SpanRoom,
    len: usize,
}

impl<'a> Spans<'a> {
    #[inline(always)]
    pub(crate) fn new(room: &'a mut SpanRoom) -> Self {
        Spans {
            spans: room,
            len: 0,
        }
    }

    /// Adds one; more than `MAX_HEADERS` panics (the index is checked).
    #[inline(always)]
    pub(crate) fn push(&mut self, span: Span) {
        self.spans[self.len].write(span);
        self.len += 1;
    }

    #[allow(unsafe_code)]
    pub(crate) fn as_slice(&self) -> &[Span] {
        // SAFETY: the first `len` entries were written by `push`, and `MaybeUninit<T>` has
        // `T`'s layout.
        unsafe { std::slice::from_raw_parts(self.spans.as_ptr().cast::<Span>(), self.len) }
    }
}

/// Whether a field name (a token: httparse checked it) is `lower`, a name in lower-case
/// letters and `-`, ignoring ASCII case. Setting bit 0x20 lower-cases a letter, and turns no
/// other token byte into a letter or `-`, so it compares 8 bytes a step where
/// `eq_ignore_ascii_case` folds both sides a byte at a time (~300 instructions a response).
pub(crate) fn eq_name(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    if name.len() != lower.len() {
        return false;
    }
    let (mut a, mut b) = (name, lower);
    while let (Some((wa, ra)), Some((wb, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if u64::from_le_bytes(*wa) | CASE != u64::from_le_bytes(*wb) {
            return false;
        }
        (a, b) = (ra, rb);
    }
    a.iter().zip(b).all(|(x, y)| x | 0x20 == *y)
}

/// Whether a comma-separated field value (`Connection`, `TE`) lists `token`, in any case.
pub(crate) fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// Where a parsed field sits in the head starting at `base`: name offset and length, value
/// offset and length. Heads are capped at 64 KiB, well within u32.
pub(crate) fn span(base: usize, h: &httparse::Header<'_>) -> Span {
    (
        (h.name.as_ptr() as usize - base) as u32,
        h.name.len() as u32,
        (h.value.as_ptr() as usize - base) as u32,
        h.value.len() as u32,
    )
}

/// The header map of the fields at `spans` (name offset and length, value offset and length)
/// in `head`; the values share `head`.
/// `spans` come from httparse, whose checks on a field value are exactly `HeaderValue`'s.
pub(crate) fn header_map(
    head: &Bytes,
    spans: &[Span],
    names: &mut Names,
    room: usize,
) -> Result<HeaderMap, Error> {
    // `room` for the fields the proxy adds (a request's X-Forwarded-*), so adding them does not
    // regrow the map. No more for a new map: one of 9 fields holds 12 entries, 1.2 KB, past the
    // allocator's per-thread cache (a 5-field response with 4 spare slots cost ~300 instructions
    // more). A map lent by the thread keeps whatever room it grew to before.
    let mut headers = spare_maps::take(spans.len() + room);
    for (i, &(n, nl, v, vl)) in spans.iter().enumerate() {
        let (n, nl, v, vl) = (n as usize, nl as usize, v as usize, vl as usize);
        let name = names
            .get(i, &head[n..n + nl])
            .map_err(|_| Error::Protocol("invalid header name"))?;
        headers.append(name, parsed_value(head.slice(v..v + vl)));
    }
    Ok(headers)
}

/// A field value httparse accepted: it allows exactly the bytes `HeaderValue` does (HTAB,
/// visible ASCII, space, obs-text), so checking them again (~60 instructions a field) is
/// skipped.
#[allow(unsafe_code)]
fn parsed_value(b: Bytes) -> HeaderValue {
    debug_assert!(HeaderValue::from_maybe_shared(b.clone()).is_ok());
    // SAFETY: only the bytes' validity is at stake (no memory safety), and httparse checked it
    // with the same rule `HeaderValue::from_maybe_shared` applies.
    unsafe { HeaderValue::from_maybe_shared_unchecked(b) }
}

/// What the framing and connection fields of a head say, gathered from the raw fields.
#[derive(Debug, Default)]
struct Facts {
    length: Option<u64>,
    /// More than one `Content-Length` value (fields or a list), all equal: the header map gets
    /// one field in their place, as RFC 9110 §8.6 allows, since clients such as Node's llhttp
    /// and nghttp2 refuse a message carrying several.
    length_repeated: bool,
    /// `Transfer-Encoding: chunked` (the only coding taken).
    transfer_encoding: bool,
    close: bool,
    keep_alive: bool,
    /// `Connection` names a field other than itself: the header map gets every field, and the
    /// hop-by-hop stripping removes the named ones.
    names_others: bool,
}

impl Facts {
    fn see(&mut self, name: &[u8], value: &[u8]) -> Result<(), Error> {
        if eq_name(name, b"content-length") {
            self.content_length(value)?;
        } else if eq_name(name, b"transfer-encoding") {
            // Only `chunked`, once: the proxy re-frames every body it forwards and drops this
            // field (hop-by-hop), so any other coding (`gzip, chunked`) would reach the client
            // still applied but no longer named. nginx refuses such a response the same way.
            for coding in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if !coding.eq_ignore_ascii_case(b"chunked") || self.transfer_encoding {
                    return Err(Error::Protocol(
                        "response Transfer-Encoding other than one chunked",
                    ));
                }
                self.transfer_encoding = true;
            }
        } else if eq_name(name, b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                } else if !token.is_empty() {
                    self.names_others = true;
                }
            }
        }
        Ok(())
    }

    /// One length all `Content-Length` values agree on (a list of equal values is allowed).
    fn content_length(&mut self, value: &[u8]) -> Result<(), Error> {
        for part in value.split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(Error::Protocol("invalid response Content-Length"));
            }
            let n = part
                .iter()
                .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
            match self.length {
                Some(f) if f != n => {
                    return Err(Error::Protocol("conflicting response Content-Length"))
                }
                Some(_) => self.length_repeated = true,
                None => self.length = Some(n),
            }
        }
        Ok(())
    }

    fn framed(
        self,
        status: StatusCode,
        version: Version,
        mut headers: HeaderMap,
        head_request: bool,
    ) -> Result<Head, Error> {
        if let (true, Some(n)) = (self.length_repeated, self.length) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        let keep_alive = if version == Version::HTTP_10 {
            self.keep_alive
        } else {
            !self.close
        };
        let framing = if head_request
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            BodyFraming::Empty
        } else if self.transfer_encoding {
            if self.length.is_some() {
                // RFC 9112 §6.3: a message with both "ought to be handled as an error".
                return Err(Error::Protocol(
                    "response has both Transfer-Encoding and Content-Length",
                ));
            }
            BodyFraming::Chunked
        } else {
            match self.length {
                Some(0) => BodyFraming::Empty,
                Some(n) => BodyFraming::Length(n),
                None => BodyFraming::UntilClose,
            }
        };
        Ok(Head {
            status,
            version,
            headers,
            framing,
            keep_alive: keep_alive && framing != BodyFraming::UntilClose,
        })
    }
}

/// The fields that describe one hop only (RFC 9110 §7.6.1, plus the legacy ones).
fn is_hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
    ];
    NAMES.iter().any(|n| eq_name(name, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str, head_request: bool) -> Result<Option<Head>, Error> {
        let mut buf = BytesMut::from(s);
        response(&mut buf, head_request, &mut Names::default())
    }

    fn framing(s: &str) -> BodyFraming {
        parse(s, false).expect("valid").expect("complete").framing
    }

    #[test]
    fn field_names_match_in_any_case_and_only_exactly() {
        for name in [
            "content-length",
            "Content-Length",
            "CONTENT-LENGTH",
            "cOnTeNt-lEnGtH",
        ] {
            assert!(eq_name(name.as_bytes(), b"content-length"), "{name}");
        }
        for name in [
            "content_length",
            "content-lengtx",
            "content-lengthx",
            "content-lengt",
            "contentlength",
            "",
        ] {
            assert!(!eq_name(name.as_bytes(), b"content-length"), "{name}");
        }
        assert!(eq_name(b"TE", b"te"));
        assert!(!eq_name(b"T~", b"t^"), "'~' | 0x20 stays '~'");
    }

    #[test]
    fn a_head_with_as_many_fields_as_allowed_is_read_and_one_more_is_refused() {
        let fields = |n: usize| {
            (0..n)
                .map(|i| format!("x-{i}: {i}\r\n"))
                .collect::<String>()
        };
        let full = format!("HTTP/1.1 200 OK\r\n{}content-length: 0\r\n\r\n", fields(99));
        let head = parse(&full, false).expect("valid").expect("complete");
        assert_eq!(head.headers.len(), 100);
        let over = format!(
            "HTTP/1.1 200 OK\r\n{}content-length: 0\r\n\r\n",
            fields(100)
        );
        assert!(parse(&over, false).is_err());
    }

    #[test]
    fn reads_status_headers_and_leaves_the_body() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 200 OK\r\nServer: x\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 2\r\n\r\nok",
        );
        let h = response(&mut buf, false, &mut Names::default())
            .expect("valid")
            .expect("complete");
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.headers["server"], "x");
        assert_eq!(h.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(h.framing, BodyFraming::Length(2));
        assert!(h.keep_alive);
        assert_eq!(&buf[..], b"ok");
    }

    #[test]
    fn hop_by_hop_fields_stay_out_unless_connection_names_another() {
        let h = parse(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nTrailer: x\r\nX-Kept: 1\r\n\r\n",
            false,
        )
        .expect("valid")
        .expect("complete");
        let names: Vec<_> = h.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            ["trailer", "x-kept"],
            "Trailer declares, it is not hop-by-hop"
        );
        assert_eq!(h.framing, BodyFraming::Chunked);
        let h = parse(
            "HTTP/1.1 200 OK\r\nConnection: x-private\r\nX-Private: 1\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .expect("valid")
        .expect("complete");
        assert_eq!(h.headers.len(), 3, "all kept for the stripping to see");
    }

    #[test]
    fn an_incomplete_head_asks_for_more_at_every_split() {
        let full = "HTTP/1.1 204 No Content\r\nA: b\r\n\r\n";
        for i in 0..full.len() {
            assert!(
                parse(&full[..i], false).expect("valid prefix").is_none(),
                "{i}"
            );
        }
        assert_eq!(framing(full), BodyFraming::Empty);
    }

    #[test]
    fn interim_responses_are_skipped_and_101_refused() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
        );
        let h = response(&mut buf, false, &mut Names::default())
            .expect("valid")
            .expect("complete");
        assert_eq!(h.status, StatusCode::CREATED);
        assert!(buf.is_empty());
        assert!(parse("HTTP/1.1 101 Switching Protocols\r\n\r\n", false).is_err());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            BodyFraming::Chunked
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n"), BodyFraming::UntilClose);
        assert_eq!(
            framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"),
            BodyFraming::Empty
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n"),
            BodyFraming::Length(5)
        );
        let head = parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true);
        assert_eq!(
            head.expect("valid").expect("complete").framing,
            BodyFraming::Empty
        );
    }

    #[test]
    fn equal_repeated_lengths_become_one_field() {
        for s in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\ncontent-length: 5\r\n\r\n",
        ] {
            let head = parse(s, false).expect("valid").expect("complete");
            let lengths: Vec<_> = head
                .headers
                .get_all(header::CONTENT_LENGTH)
                .iter()
                .collect();
            assert_eq!(lengths, ["5"], "{s:?}");
        }
        let head = parse("HTTP/1.1 200 OK\r\nContent-Length: 05\r\n\r\n", false);
        assert_eq!(
            head.expect("valid").expect("complete").headers[header::CONTENT_LENGTH],
            "05"
        );
    }

    #[test]
    fn ambiguous_framing_is_an_error() {
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 999x OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            // Codings the proxy would drop the name of while leaving them applied.
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert!(parse(bad, false).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_early_answer_is_told_from_a_continue() {
        let mut buf = BytesMut::from("HTTP/1.1 100 Continue\r\n\r\n");
        assert!(!final_head_arrived(&mut buf));
        assert!(buf.is_empty(), "the 100 is dropped");
        let mut buf = BytesMut::from("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 41");
        assert!(!final_head_arrived(&mut buf));
        buf.extend_from_slice(b"3 Too Large\r\nContent-Length: 0\r\n\r\n");
        assert!(final_head_arrived(&mut buf));
        assert!(buf.starts_with(b"HTTP/1.1 413"));
    }

    #[test]
    fn keep_alive_depends_on_version_and_connection() {
        let ka = |s: &str| {
            parse(s, false)
                .expect("valid")
                .expect("complete")
                .keep_alive
        };
        assert!(!ka(
            "HTTP/1.1 200 OK\r\nConnection: x, close\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!ka("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(ka(
            "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(
            !ka("HTTP/1.1 200 OK\r\n\r\n"),
            "a close-delimited body ends the connection"
        );
    }

    #[test]
    fn a_head_too_large_is_refused_not_buffered_forever() {
        // One header still arriving, already past the limit.
        let s = format!("HTTP/1.1 200 OK\r\nx-filler: {}", "a".repeat(MAX_HEAD));
        assert!(parse(&s, false).is_err());
        assert!(parse(&s[..MAX_HEAD / 2], false).expect("valid").is_none());
    }
}
