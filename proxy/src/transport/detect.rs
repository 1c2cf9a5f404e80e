//! Protocol detection: one bounded read decides HTTP/1, HTTP/2 (prior knowledge), TLS or opaque.

use std::{io, time::Duration};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// What the client's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detection {
    Http1,
    H2,
    Tls,
    /// Bytes that are none of the above.
    Opaque,
    /// Nothing arrived before the deadline: maybe a server-speaks-first protocol.
    Timeout,
    /// The client closed before sending anything.
    Closed,
}

impl Detection {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Detection::Http1 => "http1",
            Detection::H2 => "h2",
            Detection::Tls => "tls",
            Detection::Opaque => "opaque",
            Detection::Timeout => "timeout",
            Detection::Closed => "closed",
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Long enough for any method token plus a space; HTTP/1 is decided on the request line's start.
const METHODS: &[&[u8]] = &[
    b"GET ",
    b"HEAD ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"CONNECT ",
    b"OPTIONS ",
    b"TRACE ",
    b"PATCH ",
];

/// Reads until the protocol is known or `timeout` passes; the bytes read stay in `buf`.
pub async fn detect(
    io: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    timeout: Duration,
) -> io::Result<Detection> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(d) = classify(buf) {
            return Ok(d);
        }
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(1024);
        }
        match tokio::time::timeout_at(deadline, io.read_buf(buf)).await {
            Err(_) if buf.is_empty() => return Ok(Detection::Timeout),
            // Some bytes that fit no protocol yet, and no more coming: not something we parse.
            Err(_) => return Ok(Detection::Opaque),
            Ok(Ok(0)) if buf.is_empty() => return Ok(Detection::Closed),
            Ok(Ok(0)) => return Ok(Detection::Opaque),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
}

/// Decides from a prefix, or `None` while the prefix could still be more than one thing.
pub fn classify(buf: &[u8]) -> Option<Detection> {
    if buf.is_empty() {
        return None;
    }
    if buf.len() >= H2_PREFACE.len() {
        if buf.starts_with(H2_PREFACE) {
            return Some(Detection::H2);
        }
    } else if H2_PREFACE.starts_with(buf) {
        return None;
    }
    // TLS record header: handshake (22), version major 3.
    if buf[0] == 0x16 {
        return match buf.get(1) {
            None => None,
            Some(3) => Some(Detection::Tls),
            Some(_) => Some(Detection::Opaque),
        };
    }
    let mut undecided = false;
    for m in METHODS {
        if buf.len() >= m.len() {
            if buf.starts_with(m) {
                return Some(Detection::Http1);
            }
        } else if m.starts_with(buf) {
            undecided = true;
        }
    }
    if undecided {
        None
    } else {
        Some(Detection::Opaque)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn detect_bytes(bytes: &[u8]) -> Detection {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(bytes).await.expect("write");
        let mut buf = BytesMut::new();
        let d = detect(&mut server, &mut buf, Duration::from_millis(100))
            .await
            .expect("detect");
        assert_eq!(&buf[..], bytes, "detection keeps every byte it read");
        d
    }

    #[tokio::test]
    async fn h2_preface_is_http2() {
        assert_eq!(
            detect_bytes(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await,
            Detection::H2
        );
    }

    #[tokio::test]
    async fn request_line_is_http1() {
        assert_eq!(detect_bytes(b"GET / HTTP/1.1\r\n").await, Detection::Http1);
        assert_eq!(
            detect_bytes(b"PATCH /x HTTP/1.1\r\n").await,
            Detection::Http1
        );
    }

    #[tokio::test]
    async fn client_hello_is_tls() {
        assert_eq!(
            detect_bytes(&[0x16, 0x03, 0x01, 0x02, 0x00]).await,
            Detection::Tls
        );
    }

    #[tokio::test]
    async fn other_bytes_are_opaque() {
        assert_eq!(
            detect_bytes(b"*1\r\n$4\r\nPING\r\n").await,
            Detection::Opaque
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_times_out_so_server_first_protocols_start() {
        let (_client, mut server) = tokio::io::duplex(1024);
        let mut buf = BytesMut::new();
        let d = detect(&mut server, &mut buf, Duration::from_millis(500))
            .await
            .expect("detect");
        assert_eq!(d, Detection::Timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_method_then_silence_is_opaque() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(b"GE").await.expect("write");
        let mut buf = BytesMut::new();
        let d = detect(&mut server, &mut buf, Duration::from_millis(500))
            .await
            .expect("detect");
        assert_eq!(d, Detection::Opaque);
        assert_eq!(&buf[..], b"GE");
    }

    #[tokio::test]
    async fn a_split_preface_still_detects_h2() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let task = tokio::spawn(async move {
            let mut buf = BytesMut::new();
            detect(&mut server, &mut buf, Duration::from_secs(5)).await
        });
        client
            .write_all(b"PRI * HTTP/2.0\r\n")
            .await
            .expect("write");
        tokio::task::yield_now().await;
        client.write_all(b"\r\nSM\r\n\r\n").await.expect("write");
        assert_eq!(task.await.expect("join").expect("detect"), Detection::H2);
    }
}
