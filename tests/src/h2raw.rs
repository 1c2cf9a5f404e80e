//! A raw HTTP/2 client that writes frames byte by byte, for abuse tests no well-behaved client
//! library can express (too many streams, CONTINUATION floods, HPACK bombs, rapid resets).
//!
//! Requests are HPACK-encoded as literals without indexing; the client advertises a header table
//! size of 0 so the server's responses never refer to its dynamic table, and [`response_status`]
//! can read `:status` with no decoder state.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::wait::within;

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// Settings identifiers.
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Error codes.
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame as read from the wire.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (reserved bit cleared).
    pub stream: u32,
    /// Payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY frame.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        let b = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The `(id, value)` pairs of a SETTINGS frame.
    pub fn settings(&self) -> Vec<(u16, u32)> {
        self.payload
            .chunks_exact(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                )
            })
            .collect()
    }
}

/// How reading ended when no frame came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The server closed the connection (FIN).
    Eof,
    /// The connection was reset.
    Reset,
    /// Nothing arrived before the deadline.
    Deadline,
}

/// One frame: 9-byte header + payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("payload under 16 MiB");
    assert!(len < 1 << 24, "frame payload over 2^24 bytes");
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A SETTINGS frame with these `(id, value)` pairs.
pub fn settings_frame(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in pairs {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &p)
}

/// RST_STREAM with `code`.
pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// An HPACK integer with an `n`-bit prefix; `first` carries the bits above the prefix.
pub fn hpack_int(first: u8, n: u32, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// An HPACK string literal without Huffman coding.
pub fn hpack_str(s: &[u8], out: &mut Vec<u8>) {
    hpack_int(0, 7, s.len(), out);
    out.extend_from_slice(s);
}

/// A "literal header field without indexing — new name" (RFC 7541 §6.2.2).
pub fn literal(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    hpack_str(name.as_bytes(), out);
    hpack_str(value, out);
}

/// A "literal header field with incremental indexing — new name": it enters the dynamic table.
pub fn literal_indexed(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.push(0x40);
    hpack_str(name.as_bytes(), out);
    hpack_str(value, out);
}

/// The header block of `GET path` at `authority`, plus `extra` fields.
pub fn get_block(authority: &str, path: &str, extra: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    literal(":method", b"GET", &mut b);
    literal(":scheme", b"http", &mut b);
    literal(":path", path.as_bytes(), &mut b);
    literal(":authority", authority.as_bytes(), &mut b);
    for (n, v) in extra {
        literal(n, v, &mut b);
    }
    b
}

/// A complete GET on `stream` (HEADERS with END_HEADERS and END_STREAM).
pub fn get_request(stream: u32, authority: &str, path: &str) -> Vec<u8> {
    frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        stream,
        &get_block(authority, path, &[]),
    )
}

/// The `:status` of a response header block from a server that may not use its dynamic table
/// (the client advertised a table size of 0): skips size updates, reads a static index or a
/// literal whose name is `:status` (Huffman-coded digits included). `None` for anything else.
pub fn response_status(block: &[u8]) -> Option<u16> {
    let mut i = 0;
    // Dynamic table size updates (001xxxxx) may open the block.
    while block.get(i)? & 0xe0 == 0x20 {
        i = read_int(block, i, 5)?.1;
    }
    let b = *block.get(i)?;
    if b & 0x80 != 0 {
        return match b & 0x7f {
            8 => Some(200),
            9 => Some(204),
            10 => Some(206),
            11 => Some(304),
            12 => Some(400),
            13 => Some(404),
            14 => Some(500),
            _ => None,
        };
    }
    // Literal with name index 8..=14 (:status): 01xxxxxx, 0000xxxx or 0001xxxx.
    let name = if b & 0xc0 == 0x40 { b & 0x3f } else { b & 0x0f };
    if !(8..=14).contains(&name) {
        return None;
    }
    let huffman = block.get(i + 1)? & 0x80 != 0;
    let (len, at) = read_int(block, i + 1, 7)?;
    let raw = block.get(at..at + len)?;
    let digits = if huffman {
        huffman_digits(raw)?
    } else {
        String::from_utf8(raw.to_vec()).ok()?
    };
    digits.parse().ok()
}

/// An HPACK integer with an `n`-bit prefix at `at`: `(value, index after it)`.
fn read_int(block: &[u8], at: usize, n: u32) -> Option<(usize, usize)> {
    let max = (1usize << n) - 1;
    let mut v = usize::from(*block.get(at)?) & max;
    let mut i = at + 1;
    if v < max {
        return Some((v, i));
    }
    let mut shift = 0;
    loop {
        let b = *block.get(i)?;
        i += 1;
        v += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((v, i));
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// Decodes a Huffman string made only of digits (RFC 7541 Appendix B: '0'-'2' are 5-bit codes
/// 0-2, '3'-'9' are 6-bit codes 0x19-0x1f); `None` if anything else appears.
fn huffman_digits(raw: &[u8]) -> Option<String> {
    let bits: Vec<u8> = raw
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let take = |at: usize, n: usize| -> Option<u8> {
        bits.get(at..at + n)
            .map(|s| s.iter().fold(0u8, |a, b| (a << 1) | b))
    };
    let mut out = String::new();
    let mut at = 0;
    loop {
        let rest = bits.len() - at;
        if rest < 8 && bits[at..].iter().all(|&b| b == 1) {
            return Some(out); // EOS padding
        }
        let five = take(at, 5)?;
        if five <= 2 {
            out.push(char::from(b'0' + five));
            at += 5;
            continue;
        }
        let six = take(at, 6)?;
        if (0x19..=0x1f).contains(&six) {
            out.push(char::from(b'3' + (six - 0x19)));
            at += 6;
            continue;
        }
        return None;
    }
}

/// A raw HTTP/2 connection.
pub struct RawH2 {
    io: TcpStream,
    buf: BytesMut,
}

impl RawH2 {
    /// Connects, sends the preface and SETTINGS (header table size 0, plus `settings`).
    pub async fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> RawH2 {
        let io = within(
            Duration::from_secs(10),
            "h2 connect",
            TcpStream::connect(addr),
        )
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        io.set_nodelay(true).expect("set TCP_NODELAY");
        let mut conn = RawH2 {
            io,
            buf: BytesMut::with_capacity(64 * 1024),
        };
        let mut pairs = vec![(SETTINGS_HEADER_TABLE_SIZE, 0)];
        pairs.extend_from_slice(settings);
        let mut hello = PREFACE.to_vec();
        hello.extend(settings_frame(&pairs));
        conn.send(&hello).await.expect("send the preface");
        conn
    }

    /// Connects and reads until the server's first SETTINGS, which is ACKed and returned.
    pub async fn handshake(addr: SocketAddr) -> (RawH2, Frame) {
        let mut conn = RawH2::connect(addr, &[]).await;
        let settings = conn
            .read_until(Duration::from_secs(10), |f| {
                f.kind == SETTINGS && f.flags & ACK == 0
            })
            .await
            .unwrap_or_else(|e| panic!("no server SETTINGS: {e:?}"));
        conn.send(&frame(SETTINGS, ACK, 0, &[]))
            .await
            .expect("ACK the server's SETTINGS");
        (conn, settings)
    }

    /// Writes bytes (one or many frames).
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.io.write_all(bytes).await
    }

    /// Splits into read and write halves for tests that flood while reading.
    pub fn into_split(self) -> (RawH2Reader, tokio::net::tcp::OwnedWriteHalf) {
        let (r, w) = self.io.into_split();
        (
            RawH2Reader {
                io: r,
                buf: self.buf,
            },
            w,
        )
    }

    /// The next frame, or how the connection ended.
    pub async fn read_frame(&mut self, deadline: Duration) -> Result<Frame, Closed> {
        read_frame(&mut self.io, &mut self.buf, Instant::now() + deadline).await
    }

    /// Reads frames until `want` matches one (returned); the others are dropped.
    pub async fn read_until(
        &mut self,
        deadline: Duration,
        want: impl FnMut(&Frame) -> bool,
    ) -> Result<Frame, Closed> {
        read_until(&mut self.io, &mut self.buf, deadline, want).await
    }

    /// Reads every frame until the connection ends or `deadline`; returns them and how it ended.
    pub async fn read_all(&mut self, deadline: Duration) -> (Vec<Frame>, Closed) {
        read_all(&mut self.io, &mut self.buf, deadline).await
    }
}

/// The read half of a split [`RawH2`].
pub struct RawH2Reader {
    io: tokio::net::tcp::OwnedReadHalf,
    buf: BytesMut,
}

impl RawH2Reader {
    /// See [`RawH2::read_until`].
    pub async fn read_until(
        &mut self,
        deadline: Duration,
        want: impl FnMut(&Frame) -> bool,
    ) -> Result<Frame, Closed> {
        read_until(&mut self.io, &mut self.buf, deadline, want).await
    }

    /// See [`RawH2::read_all`].
    pub async fn read_all(&mut self, deadline: Duration) -> (Vec<Frame>, Closed) {
        read_all(&mut self.io, &mut self.buf, deadline).await
    }
}

async fn read_until(
    io: &mut (impl AsyncReadExt + Unpin),
    buf: &mut BytesMut,
    deadline: Duration,
    mut want: impl FnMut(&Frame) -> bool,
) -> Result<Frame, Closed> {
    let end = Instant::now() + deadline;
    loop {
        let f = read_frame(io, buf, end).await?;
        if want(&f) {
            return Ok(f);
        }
    }
}

async fn read_all(
    io: &mut (impl AsyncReadExt + Unpin),
    buf: &mut BytesMut,
    deadline: Duration,
) -> (Vec<Frame>, Closed) {
    let end = Instant::now() + deadline;
    let mut frames = Vec::new();
    loop {
        match read_frame(io, buf, end).await {
            Ok(f) => frames.push(f),
            Err(closed) => return (frames, closed),
        }
    }
}

pub(crate) async fn read_frame(
    io: &mut (impl AsyncReadExt + Unpin),
    buf: &mut BytesMut,
    end: Instant,
) -> Result<Frame, Closed> {
    loop {
        if buf.len() >= 9 {
            let len =
                (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() >= 9 + len {
                let kind = buf[3];
                let flags = buf[4];
                let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                buf.advance(9);
                let payload = buf.split_to(len).to_vec();
                return Ok(Frame {
                    kind,
                    flags,
                    stream,
                    payload,
                });
            }
        }
        buf.reserve(16 * 1024);
        match tokio::time::timeout_at(end, io.read_buf(buf)).await {
            Err(_) => return Err(Closed::Deadline),
            Ok(Ok(0)) => return Err(Closed::Eof),
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err(Closed::Reset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_integers_follow_rfc_7541_c1() {
        let mut out = Vec::new();
        hpack_int(0, 5, 10, &mut out);
        assert_eq!(out, [0x0a]);
        out.clear();
        hpack_int(0, 5, 1337, &mut out);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    }

    #[test]
    fn status_is_read_from_static_index_and_huffman_literal() {
        assert_eq!(response_status(&[0x88]), Some(200));
        assert_eq!(response_status(&[0x20, 0x8c]), Some(400));
        // "431": '4' 011010, '3' 011001, '1' 00001, pad 1 → 0110 1001 1001 0000 1(111 1111)
        assert_eq!(response_status(&[0x48, 0x83, 0x69, 0x90, 0xff]), Some(431));
        // "302" as a plain literal.
        assert_eq!(response_status(&[0x08, 0x03, b'3', b'0', b'2']), Some(302));
        assert_eq!(response_status(&[0x40, 0x01, b'x']), None);
    }
}
