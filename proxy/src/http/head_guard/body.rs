//! Tracks where a request body ends (Content-Length or chunked), so the next head is looked for
//! exactly where hyper will look for it.

use super::head::{Reject, MAX_HEADERS};
use crate::http::headers::is_tchar;

/// The rest of one request body.
#[derive(Debug)]
pub(crate) enum Body {
    Length(u64),
    Chunked(Chunked),
}

impl Body {
    /// Consumes body bytes from the front of `data`: how many, and whether the body ended.
    pub(crate) fn advance(&mut self, data: &[u8]) -> Result<(usize, bool), Reject> {
        match self {
            Body::Length(left) => {
                let n = usize::try_from(*left).map_or(data.len(), |l| l.min(data.len()));
                *left -= n as u64;
                Ok((n, *left == 0))
            }
            Body::Chunked(c) => c.advance(data),
        }
    }
}

/// Where in the chunk grammar the next byte falls (RFC 9112 §7.1), CRLF only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Size {
        digits: bool,
    },
    SizeWs,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    LineStart,
    /// In a trailer field's name.
    TrailerName,
    /// In a trailer field's value.
    Trailer,
    TrailerLf,
    EndLf,
}

/// A chunked body in progress.
#[derive(Debug)]
pub(crate) struct Chunked {
    state: St,
    size: u64,
    trailer_bytes: usize,
    trailer_fields: usize,
    max_trailer_bytes: usize,
}

impl Chunked {
    /// A body whose trailer section may be at most `max_trailer_bytes` long.
    pub(crate) fn new(max_trailer_bytes: usize) -> Self {
        Self {
            state: St::Size { digits: false },
            size: 0,
            trailer_bytes: 0,
            trailer_fields: 0,
            max_trailer_bytes,
        }
    }

    fn advance(&mut self, data: &[u8]) -> Result<(usize, bool), Reject> {
        let mut i = 0;
        while i < data.len() {
            if self.state == St::Data {
                // Chunk data is skipped, not scanned: the per-byte cost is on size lines only.
                let rest = (data.len() - i) as u64;
                let n = rest.min(self.size);
                i += n as usize;
                self.size -= n;
                if self.size == 0 {
                    self.state = St::DataCr;
                }
                continue;
            }
            let b = data[i];
            i += 1;
            if let (St::Size { .. }, Some(d)) = (self.state, hex(b)) {
                self.size = self
                    .size
                    .checked_mul(16)
                    .and_then(|s| s.checked_add(u64::from(d)))
                    .ok_or(Reject::MalformedChunk)?;
                self.state = St::Size { digits: true };
                continue;
            }
            self.state = match (self.state, b) {
                (St::Size { digits: true } | St::SizeWs, b' ' | b'\t') => St::SizeWs,
                (St::Size { digits: true } | St::SizeWs, b';') => St::Ext,
                (St::Size { digits: true } | St::SizeWs | St::Ext, b'\r') => St::SizeLf,
                (St::Ext, _) if !is_ctl(b) => St::Ext,
                (St::SizeLf, b'\n') if self.size == 0 => St::LineStart,
                (St::SizeLf, b'\n') => St::Data,
                (St::DataCr, b'\r') => St::DataLf,
                (St::DataLf, b'\n') => St::Size { digits: false },
                (St::LineStart, b'\r') => St::EndLf,
                (St::EndLf, b'\n') => return Ok((i, true)),
                // A trailer line is a field line, `name: value` (RFC 9112 §7.1.2), as hyper
                // reads it: a line without a colon, or with space before it, is refused here.
                (St::LineStart | St::TrailerName, _) if is_tchar(b) => {
                    self.trailer(St::TrailerName)?
                }
                (St::TrailerName, b':') => self.trailer(St::Trailer)?,
                (St::Trailer, _) if !is_ctl(b) => self.trailer(St::Trailer)?,
                (St::Trailer, b'\r') => St::TrailerLf,
                (St::TrailerLf, b'\n') => {
                    // hyper refuses more trailer fields than head fields (its `max_headers`).
                    self.trailer_fields += 1;
                    if self.trailer_fields > MAX_HEADERS {
                        return Err(Reject::MalformedChunk);
                    }
                    St::LineStart
                }
                _ => return Err(Reject::MalformedChunk),
            };
        }
        Ok((i, false))
    }

    /// One more byte of the trailer section, which may be at most `max_trailer_bytes` long.
    fn trailer(&mut self, next: St) -> Result<St, Reject> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.max_trailer_bytes {
            return Err(Reject::MalformedChunk);
        }
        Ok(next)
    }
}

/// Control characters, HTAB excepted (it is allowed in extensions and field values).
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"5;name=v\r\nhello\r\n1A \r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Sum: 1\r\nY: \t2\r\n\r\n";

    /// Feeds `chunks` in order; returns the offset (in the concatenation) where the body ended.
    fn end_of(chunks: &[&[u8]]) -> Result<Option<usize>, Reject> {
        let mut body = Body::Chunked(Chunked::new(1024));
        let mut offset = 0;
        for c in chunks {
            let (n, done) = body.advance(c)?;
            if done {
                return Ok(Some(offset + n));
            }
            assert_eq!(n, c.len(), "a body that has not ended consumes everything");
            offset += n;
        }
        Ok(None)
    }

    #[test]
    fn finds_the_end_of_a_chunked_body_at_every_split() {
        let mut wire = BODY.to_vec();
        wire.extend_from_slice(b"GET / HTTP/1.1\r\n");
        for split in 0..=wire.len() {
            let (a, b) = wire.split_at(split);
            assert_eq!(end_of(&[a, b]), Ok(Some(BODY.len())), "split {split}");
        }
    }

    #[test]
    fn finds_the_end_of_a_chunked_body_fed_one_byte_at_a_time() {
        let mut wire = BODY.to_vec();
        wire.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(end_of(&bytes), Ok(Some(BODY.len())));
    }

    #[test]
    fn refuses_chunk_lines_hyper_could_read_differently() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"\r\n",
            b"5;a\0b\r\nhello\r\n0\r\n\r\n",
            b"0\r\nX: 1\n\r\n",
            b"0\r\n folded\r\n\r\n",
            b"0\r\nlo\r\n0\r\n\r\n",
            b"0\r\n: x\r\n\r\n",
            b"0\r\nX : y\r\n\r\n",
            b"0\r\nX\r\n\r\n",
            b"0\r\n\r\r",
            b"11111111111111111\r\n",
        ] {
            assert_eq!(end_of(&[bad]), Err(Reject::MalformedChunk), "{bad:?}");
        }
    }

    #[test]
    fn bounds_the_trailer_section() {
        let mut body = Body::Chunked(Chunked::new(4));
        assert_eq!(body.advance(b"0\r\nX: 12\r\n"), Err(Reject::MalformedChunk));
        // As many fields as hyper reads, and no more.
        let fields = |n| [&b"0\r\n"[..], &b"T: 1\r\n".repeat(n), b"\r\n"].concat();
        assert_eq!(
            end_of(&[&fields(MAX_HEADERS)]),
            Ok(Some(fields(MAX_HEADERS).len()))
        );
        assert_eq!(
            end_of(&[&fields(MAX_HEADERS + 1)]),
            Err(Reject::MalformedChunk)
        );
    }

    #[test]
    fn counts_a_content_length_body_down() {
        let mut body = Body::Length(5);
        assert_eq!(body.advance(b"abc"), Ok((3, false)));
        assert_eq!(body.advance(b"deGET"), Ok((2, true)));
    }
}
