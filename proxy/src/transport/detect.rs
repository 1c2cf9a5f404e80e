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
    let standard = starts_with_one(buf, METHODS);
    if standard == Some(true) {
        return Some(Detection::Http1);
    }
    // While a standard method is still possible, only a decided HTTP/1 may end the wait.
    extension_method(buf).filter(|d| standard.is_some() || *d == Detection::Http1)
}

/// Whether `buf` starts with one of `words`; `None` while it is still the start of one.
fn starts_with_one(buf: &[u8], words: &[&[u8]]) -> Option<bool> {
    let mut undecided = false;
    for w in words {
        if buf.len() >= w.len() {
            if buf.starts_with(w) {
                return Some(true);
            }
        } else if w.starts_with(buf) {
            undecided = true;
        }
    }
    (!undecided).then_some(false)
}

/// Longest method name read as HTTP/1 beyond the standard ones (`BASELINE-CONTROL` is 16).
const MAX_METHOD: usize = 20;
/// What may follow an extension method and its space: an origin-form or absolute-form target.
const TARGETS: &[&[u8]] = &[b"/", b"http://", b"https://"];

/// Any other method (WebDAV's `PROPFIND`, caches' `PURGE`, …): upper-case letters, `-` or `_`,
/// a space, then a request target that starts like one. Stricter than the standard methods (a
/// bare `SET ` or `PING` of some other protocol is not taken for HTTP), `None` while undecided.
fn extension_method(buf: &[u8]) -> Option<Detection> {
    let name = buf
        .iter()
        .take_while(|b| b.is_ascii_uppercase() || matches!(b, b'-' | b'_'))
        .count();
    if name > MAX_METHOD || (name == 0 && !buf.is_empty()) {
        return Some(Detection::Opaque);
    }
    let (&space, target) = buf[name..].split_first()?;
    if space != b' ' {
        return Some(Detection::Opaque);
    }
    match starts_with_one(target, TARGETS)? {
        true => Some(Detection::Http1),
        false => Some(Detection::Opaque),
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

    #[test]
    fn extension_methods_are_http1_and_other_words_are_not() {
        for http in [
            &b"PROPFIND /dav/ HTTP/1.1\r\n"[..],
            b"PURGE /cached HTTP/1.1\r\n",
            b"VERSION-CONTROL http://a/b HTTP/1.1\r\n",
            b"M_SEARCH https://x/ HTTP/1.1\r\n",
        ] {
            assert_eq!(classify(http), Some(Detection::Http1), "{http:?}");
        }
        for opaque in [
            &b"SET a b\r\n"[..],
            b"PING\r\n",
            b"get / HTTP/1.1\r\n",
            b"AVERYLONGMETHODNAMEOFMORETHANTWENTY /",
            b"SSH-2.0-OpenSSH\r\n",
            b"PURGE ftp://x/",
        ] {
            assert_eq!(classify(opaque), Some(Detection::Opaque), "{opaque:?}");
        }
        // Undecided until the target's start is known.
        assert_eq!(classify(b"PURGE"), None);
        assert_eq!(classify(b"PURGE http:"), None);
    }

    /// Inputs for the properties below: each protocol's opening, and seeded mutations of them.
    fn inputs() -> Vec<Vec<u8>> {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let mut seeds: Vec<Vec<u8>> = vec![
            H2_PREFACE.to_vec(),
            b"PRI * HTTP/1.1\r\n".to_vec(),
            vec![0x16, 0x03, 0x01, 0x00, 0xa5],
            vec![0x16, 0x02],
            b"*1\r\n$4\r\nPING\r\n".to_vec(),
            b"PROPFIND /a HTTP/1.1\r\n".to_vec(),
            b"PURGE https://a/ HTTP/1.1\r\n".to_vec(),
        ];
        seeds.extend(
            METHODS
                .iter()
                .map(|m| [m, &b"/x HTTP/1.1\r\n"[..]].concat()),
        );
        let mut rng = SmallRng::seed_from_u64(0xde7ec7);
        let mut out = seeds.clone();
        for _ in 0..3000 {
            let mut b = seeds[rng.gen_range(0..seeds.len())].clone();
            for _ in 0..rng.gen_range(1..=3) {
                let at = rng.gen_range(0..=b.len());
                match rng.gen_range(0..4) {
                    0 if at < b.len() => b[at] = rng.gen(),
                    1 => b.insert(at, *b"ETX_- /h".get(rng.gen_range(0..8)).unwrap_or(&b' ')),
                    2 => b.truncate(at),
                    _ if at < b.len() => {
                        b.remove(at);
                    }
                    _ => {}
                }
            }
            out.push(b);
        }
        out
    }

    /// The most bytes detection may need before it decides: an extension method of the longest
    /// name, its space and `https://`.
    const DECIDED_BY: usize = MAX_METHOD + 1 + 8;

    #[test]
    fn a_decision_never_changes_with_more_bytes_and_comes_within_a_bound() {
        for b in inputs() {
            let whole = classify(&b);
            if b.len() >= DECIDED_BY.max(H2_PREFACE.len()) {
                assert!(whole.is_some(), "{} bytes undecided: {b:?}", b.len());
            }
            for n in 1..=b.len() {
                if let Some(d) = classify(&b[..n]) {
                    assert_eq!(Some(d), whole, "decided {d:?} on {n} bytes of {b:?}");
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn reads_of_any_size_decide_as_the_whole_and_keep_every_byte_read() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(0x5b117);
        for b in inputs().into_iter().step_by(5) {
            let (mut client, mut server) = tokio::io::duplex(64);
            let cuts: Vec<usize> = (0..rng.gen_range(0..4))
                .map(|_| rng.gen_range(0..=b.len()))
                .collect();
            let sent = b.clone();
            let writer = tokio::spawn(async move {
                let mut cuts = cuts;
                cuts.push(sent.len());
                cuts.sort_unstable();
                let mut from = 0;
                for to in cuts {
                    client.write_all(&sent[from..to]).await.expect("write");
                    from = to;
                    tokio::task::yield_now().await;
                }
                // Dropped: the client has said all it will.
            });
            let mut buf = BytesMut::new();
            let got = detect(&mut server, &mut buf, Duration::from_secs(5))
                .await
                .expect("detect");
            writer.await.expect("writer");
            let want = match classify(&b) {
                Some(d) => d,
                None if b.is_empty() => Detection::Closed,
                None => Detection::Opaque,
            };
            assert_eq!(got, want, "{b:?}");
            assert!(b.starts_with(&buf), "kept {buf:?} of {b:?}");
            if classify(&b).is_none() {
                assert_eq!(&buf[..], &b[..], "undecided, it read to the end");
            }
        }
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
