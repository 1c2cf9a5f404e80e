//! Fast views of the `/_/bytes/<n>` pattern ([`crate::backend::pattern_byte`]) for gigabyte tests.
//!
//! The pattern repeats every 251 bytes, so one buffer of a period plus a chunk serves any
//! offset by slicing: uploads send zero-copy `Bytes` slices and downloads compare with `memcmp`,
//! instead of computing every byte (slow in a debug build).

use bytes::Bytes;

use crate::backend::pattern_byte;

/// The pattern's period.
const PERIOD: usize = 251;

/// Largest slice [`Pattern::chunk`] hands out and [`Pattern::matches`] compares at once.
pub const MAX_CHUNK: usize = 1 << 20;

/// One period plus [`MAX_CHUNK`] bytes of the pattern.
#[derive(Debug, Clone)]
pub struct Pattern(Bytes);

impl Pattern {
    /// Builds the buffer (about 1 MiB).
    pub fn new() -> Pattern {
        let buf: Vec<u8> = (0..(PERIOD + MAX_CHUNK) as u64).map(pattern_byte).collect();
        Pattern(Bytes::from(buf))
    }

    /// The `len` bytes at `offset` (`len <= MAX_CHUNK`), without copying.
    pub fn chunk(&self, offset: u64, len: usize) -> Bytes {
        assert!(
            len <= MAX_CHUNK,
            "pattern chunks are at most {MAX_CHUNK} bytes"
        );
        let start = (offset % PERIOD as u64) as usize;
        self.0.slice(start..start + len)
    }

    /// Whether `data` equals the pattern at `offset` (any length).
    pub fn matches(&self, offset: u64, data: &[u8]) -> bool {
        data.chunks(MAX_CHUNK)
            .enumerate()
            .all(|(i, part)| *part == self.chunk(offset + (i * MAX_CHUNK) as u64, part.len()))
    }
}

impl Default for Pattern {
    fn default() -> Self {
        Pattern::new()
    }
}

/// The `fnv1a64` `/_/stream` reports for `len` pattern bytes, like
/// [`crate::backend::pattern_fnv1a64`] but without generating every byte; CPU-bound, so run it
/// on a blocking thread while a transfer is under way.
pub fn fnv1a64(len: u64) -> String {
    let p = Pattern::new();
    let mut sum = crate::backend::Fnv1a64::new();
    let mut off = 0;
    while off < len {
        let n = (MAX_CHUNK as u64).min(len - off) as usize;
        sum.update(&p.chunk(off, n));
        off += n as u64;
    }
    sum.hex()
}

/// A lazily generated request body of `len` pattern bytes in `chunk`-sized frames (chunked
/// transfer encoding over HTTP/1, DATA frames over HTTP/2).
pub fn body(
    len: u64,
    chunk: usize,
) -> http_body_util::StreamBody<
    impl futures_util::Stream<Item = Result<hyper::body::Frame<Bytes>, std::convert::Infallible>>,
> {
    let pattern = Pattern::new();
    let chunk = chunk.min(MAX_CHUNK) as u64;
    let frames = (0..len.div_ceil(chunk)).map(move |i| {
        let start = i * chunk;
        let n = (chunk.min(len - start)) as usize;
        Ok(hyper::body::Frame::data(pattern.chunk(start, n)))
    });
    http_body_util::StreamBody::new(futures_util::stream::iter(frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_and_matches_agree_with_pattern_byte() {
        let p = Pattern::new();
        let expect: Vec<u8> = (1000..1000 + 3000).map(pattern_byte).collect();
        assert_eq!(p.chunk(1000, 3000), expect);
        assert!(p.matches(1000, &expect));
        assert!(!p.matches(1001, &expect));
        let n = (3 << 20) + 7;
        assert_eq!(fnv1a64(n), crate::backend::pattern_fnv1a64(n));
    }
}
