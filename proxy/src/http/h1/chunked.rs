//! Decodes a chunked response body out of the connection's buffer, strictly: CRLF line ends only,
//! hex sizes without signs or overflow, bounded lines and trailers.

use bytes::{Buf, Bytes, BytesMut};
use http::{
    header::{HeaderName, HeaderValue},
    HeaderMap,
};

use super::Error;

/// Longest chunk-size line (size and extensions).
const MAX_LINE: usize = 4096;
/// Largest trailer section.
const MAX_TRAILERS: usize = 16 * 1024;
/// Most trailer fields.
const MAX_TRAILER_FIELDS: usize = 32;

/// Where the decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// What one step produced.
#[derive(Debug)]
pub enum Step {
    /// Body bytes.
    Data(Bytes),
    /// The trailer section, non-empty; the body has ended.
    Trailers(HeaderMap),
    /// The body has ended.
    End,
    /// More bytes are needed.
    More,
}

/// A chunked body decoder.
#[derive(Debug)]
pub struct Chunked(State);

impl Default for Chunked {
    fn default() -> Self {
        Chunked(State::Size)
    }
}

impl Chunked {
    /// Whether the last chunk and trailers have been read.
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.0 == State::Done
    }

    /// Decodes from the front of `buf`, consuming what it used.
    pub fn step(&mut self, buf: &mut BytesMut) -> Result<Step, Error> {
        loop {
            match self.0 {
                State::Size => {
                    let Some(eol) = line_end(buf, MAX_LINE)? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&buf[..eol])?;
                    buf.advance(eol + 2);
                    self.0 = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(rest) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = rest.min(buf.len() as u64);
                    self.0 = if n == rest {
                        State::DataEnd
                    } else {
                        State::Data(rest - n)
                    };
                    // n <= buf.len(), a usize.
                    return Ok(Step::Data(buf.split_to(n as usize).freeze()));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(Error::Protocol("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.0 = State::Size;
                }
                State::Trailers => return self.trailers(buf),
                State::Done => return Ok(Step::End),
            }
        }
    }

    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Step, Error> {
        if buf.len() < 2 {
            return Ok(Step::More);
        }
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            self.0 = State::Done;
            return Ok(Step::End);
        }
        let mut slots = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
        let (len, fields) = match httparse::parse_headers(buf, &mut slots) {
            // The limit holds however the section arrived, whole or in reads.
            Ok(httparse::Status::Complete((len, _))) if len > MAX_TRAILERS => {
                return Err(Error::Protocol("chunked trailers too large"))
            }
            Ok(httparse::Status::Complete(done)) => done,
            Ok(httparse::Status::Partial) if buf.len() > MAX_TRAILERS => {
                return Err(Error::Protocol("chunked trailers too large"))
            }
            Ok(httparse::Status::Partial) => return Ok(Step::More),
            Err(_) => return Err(Error::Protocol("malformed chunked trailers")),
        };
        // httparse ends a line at a bare LF too; here, as on every chunk line, only CRLF does.
        if buf[..len]
            .iter()
            .enumerate()
            .any(|(i, &b)| b == b'\n' && (i == 0 || buf[i - 1] != b'\r'))
        {
            return Err(Error::Protocol("bare LF in chunked trailers"));
        }
        let mut map = HeaderMap::with_capacity(fields.len());
        for f in fields {
            let name = HeaderName::from_bytes(f.name.as_bytes())
                .map_err(|_| Error::Protocol("invalid trailer name"))?;
            // Framing, routing, authentication and hop-by-hop fields have no business in
            // trailers (RFC 9110 §6.5.1); request trailers are cleaned by the same list.
            if crate::http::trailers::forbidden(&name) {
                continue;
            }
            let value = HeaderValue::from_bytes(f.value)
                .map_err(|_| Error::Protocol("invalid trailer value"))?;
            map.append(name, value);
        }
        buf.advance(len);
        self.0 = State::Done;
        Ok(if map.is_empty() {
            Step::End
        } else {
            Step::Trailers(map)
        })
    }
}

/// The index of the CRLF ending the first line of `buf`, if it has arrived; a bare LF or CR, or
/// a line longer than `max`, is an error.
fn line_end(buf: &[u8], max: usize) -> Result<Option<usize>, Error> {
    let window = &buf[..buf.len().min(max + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(0) => Err(Error::Protocol("bare LF in chunk line")),
        Some(lf) if window[lf - 1] == b'\r' => Ok(Some(lf - 1)),
        Some(_) => Err(Error::Protocol("bare LF in chunk line")),
        // A line of `max` bytes may still be waiting for the LF after its CR.
        None if buf.len() >= max + 2 => Err(Error::Protocol("chunk line too long")),
        None => Ok(None),
    }
}

/// `chunk-size [ BWS ; chunk-ext ]`: hex digits (at most 15: no overflow), then nothing or
/// extensions without control characters, which are ignored.
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return Err(Error::Protocol("invalid chunk size"));
    }
    let rest = &line[digits..];
    // BWS is spaces and tabs only (RFC 9110 §5.6.3), not every ASCII whitespace byte.
    let ext = &rest[rest
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(rest.len())..];
    if !(rest.is_empty() || ext.first() == Some(&b';')) {
        return Err(Error::Protocol("invalid chunk size"));
    }
    if ext.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(Error::Protocol("control character in chunk extension"));
    }
    Ok(line[..digits].iter().fold(0u64, |acc, &b| {
        let d = (b as char).to_digit(16).unwrap_or(0);
        acc * 16 + u64::from(d)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` split at `at`, collecting the body and trailers; `Err` on a refusal.
    fn decode(wire: &[u8], at: &[usize]) -> Result<(Vec<u8>, Option<HeaderMap>), Error> {
        let mut d = Chunked::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut cuts = at.to_vec();
        cuts.push(wire.len());
        let mut from = 0;
        for to in cuts {
            buf.extend_from_slice(&wire[from..to]);
            from = to;
            loop {
                match d.step(&mut buf)? {
                    Step::Data(b) => body.extend_from_slice(&b),
                    Step::Trailers(t) => return Ok((body, Some(t))),
                    Step::End => return Ok((body, None)),
                    Step::More => break,
                }
            }
        }
        Err(Error::Protocol("unfinished"))
    }

    const WIRE: &[u8] = b"5\r\nhello\r\n1;name=v\r\n \r\nA\r\n0123456789\r\n0\r\n\r\n";

    #[test]
    fn decodes_at_every_split() {
        for i in 0..WIRE.len() {
            for j in i..WIRE.len() {
                let (body, trailers) = decode(WIRE, &[i, j]).expect("valid");
                assert_eq!(body, b"hello 0123456789", "split at {i},{j}");
                assert!(trailers.is_none());
            }
        }
    }

    #[test]
    fn reads_trailers_and_drops_framing_fields() {
        let wire = b"2\r\nok\r\n0\r\ngrpc-status: 0\r\ncontent-length: 9\r\n\r\n";
        for i in 0..wire.len() {
            let (body, t) = decode(wire, &[i]).expect("valid");
            assert_eq!(body, b"ok");
            let t = t.expect("trailers");
            assert_eq!(t["grpc-status"], "0");
            assert!(!t.contains_key("content-length"));
        }
    }

    #[test]
    fn leaves_what_follows_the_body_in_the_buffer() {
        let mut buf = BytesMut::from(&b"1\r\na\r\n0\r\n\r\nHTTP/1.1 200"[..]);
        let mut d = Chunked::default();
        assert!(matches!(d.step(&mut buf), Ok(Step::Data(_))));
        assert!(matches!(d.step(&mut buf), Ok(Step::End)));
        assert!(d.is_done());
        assert_eq!(&buf[..], b"HTTP/1.1 200");
    }

    #[test]
    fn refuses_what_a_lenient_parser_could_read_differently() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"-1\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"5 5\r\nhello\r\n0\r\n\r\n",
            b"ffffffffffffffff\r\n",
            b"\r\n",
            b"5;a=\x01\r\nhello\r\n0\r\n\r\n",
            b"0\r\nbad trailer\r\n\r\n",
            b"0\r\nx: 1\n\r\n",
            b"0\r\nx: 1\r\n\n",
            b"0\r\n\nx",
            b"0\x0c;ext=\r\n\r\n",
        ] {
            assert!(
                decode(bad, &[]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn bounds_lines_and_trailers() {
        let long = format!("1;{}", "a".repeat(MAX_LINE));
        assert!(decode(long.as_bytes(), &[]).is_err());
        let trailers = format!("0\r\nx: {}", "a".repeat(MAX_TRAILERS));
        assert!(decode(trailers.as_bytes(), &[]).is_err());
    }
}
