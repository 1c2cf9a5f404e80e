//! Finds where an HTTP/1 request head ends and refuses any head whose framing is ambiguous.

/// Why a request was refused: the `reason` label of `weir_http1_rejected_heads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// A line ended in LF without CR.
    BareLf,
    /// A CR not followed by LF.
    BareCr,
    /// NUL or another control character (HTAB excepted).
    ControlChar,
    /// A header line starting with SP or HTAB (obsolete line folding).
    ObsFold,
    /// Whitespace between a field name and its colon.
    SpaceBeforeColon,
    /// Anything else httparse refuses.
    Malformed,
    /// More header fields than hyper accepts.
    TooManyHeaders,
    /// No end of head within `max_header_bytes`.
    HeadTooLarge,
    /// The head did not complete within the header-read timeout (slowloris).
    HeadTimeout,
    /// Both Content-Length and Transfer-Encoding.
    ContentLengthWithTransferEncoding,
    /// More than one Content-Length field, even with equal values.
    DuplicateContentLength,
    /// A Content-Length that is not one decimal number (lists included).
    BadContentLength,
    /// A Transfer-Encoding other than exactly one `chunked`.
    BadTransferEncoding,
    /// Transfer-Encoding on an HTTP/1.0 request.
    TransferEncodingOnHttp10,
    /// HTTP/1.1 without Host.
    MissingHost,
    /// More than one Host field.
    DuplicateHost,
    /// A Host value that is not `host[:port]` (userinfo, whitespace, a bad port).
    BadHost,
    /// A chunked body that breaks the chunk grammar.
    MalformedChunk,
    /// A body the fast path reads whole sent nothing for the header-read timeout (408).
    BodyTimeout,
}

impl Reject {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::BareLf => "bare-lf",
            Reject::BareCr => "bare-cr",
            Reject::ControlChar => "control-char",
            Reject::ObsFold => "obs-fold",
            Reject::SpaceBeforeColon => "space-before-colon",
            Reject::Malformed => "malformed",
            Reject::TooManyHeaders => "too-many-headers",
            Reject::HeadTooLarge => "head-too-large",
            Reject::HeadTimeout => "head-timeout",
            Reject::ContentLengthWithTransferEncoding => "content-length-with-transfer-encoding",
            Reject::DuplicateContentLength => "duplicate-content-length",
            Reject::BadContentLength => "bad-content-length",
            Reject::BadTransferEncoding => "bad-transfer-encoding",
            Reject::TransferEncodingOnHttp10 => "transfer-encoding-on-http10",
            Reject::MissingHost => "missing-host",
            Reject::DuplicateHost => "duplicate-host",
            Reject::BadHost => "bad-host",
            Reject::MalformedChunk => "malformed-chunk",
            Reject::BodyTimeout => "body-timeout",
        }
    }

    /// Whether the answer is 431 rather than 400.
    pub fn too_large(self) -> bool {
        matches!(self, Reject::HeadTooLarge | Reject::TooManyHeaders)
    }
}

/// hyper's default header count; a longer list must fail here exactly as it would there.
pub(super) const MAX_HEADERS: usize = 100;

/// Where the message after a head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// What a valid head tells the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub framing: Framing,
    /// CONNECT or Upgrade: hyper may hand the connection over, depending on the response.
    pub may_switch: bool,
}

/// Line-level checks done as bytes arrive, so every byte is looked at once however the head is
/// split across reads.
#[derive(Debug, Default)]
pub(crate) struct HeadScan {
    pos: usize,
    line_start: usize,
    seen_request_line: bool,
}

impl HeadScan {
    /// Examines `buf` past what earlier calls saw; `Ok(Some(end))` once `buf[..end]` is a head.
    pub(crate) fn feed(&mut self, buf: &[u8]) -> Result<Option<usize>, Reject> {
        let mut i = self.pos;
        while i < buf.len() {
            // Inside a line, after anything but CR, a printable byte needs no look: skip those a
            // word at a time (a byte-by-byte walk of every head showed in profiles).
            if i > self.line_start && buf[i - 1] != b'\r' {
                i = skip_plain(buf, i);
                if i == buf.len() {
                    break;
                }
            }
            let b = buf[i];
            let after_cr = i > self.line_start && buf[i - 1] == b'\r';
            if after_cr && b != b'\n' {
                return Err(Reject::BareCr);
            }
            match b {
                b'\n' if !after_cr => return Err(Reject::BareLf),
                b'\n' => {
                    let line = &buf[self.line_start..i - 1];
                    self.line_start = i + 1;
                    if line.is_empty() {
                        if self.seen_request_line {
                            self.pos = i + 1;
                            return Ok(Some(i + 1));
                        }
                        // RFC 9112 §2.2: tolerate empty lines before the request line.
                    } else if self.seen_request_line {
                        check_field_line(line)?;
                    } else {
                        self.seen_request_line = true;
                    }
                }
                b' ' | b'\t' if i == self.line_start && self.seen_request_line => {
                    return Err(Reject::ObsFold)
                }
                b'\r' | b'\t' => {}
                0..=0x1f | 0x7f => return Err(Reject::ControlChar),
                _ => {}
            }
            i += 1;
        }
        self.pos = buf.len();
        Ok(None)
    }
}

/// Neither a control character nor DEL: nothing `HeadScan` checks inside a line.
fn is_plain(b: u8) -> bool {
    b >= 0x20 && b != 0x7f
}

/// The index of the first byte at or after `i` that is not [`is_plain`] (`buf.len()` if none).
pub(crate) fn skip_plain(buf: &[u8], mut i: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    while let Some(word) = buf.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let w = u64::from_ne_bytes(word);
        // Exact as a yes/no: some byte is below 0x20, or some byte is 0x7f.
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let del = w ^ (ONES * 0x7f);
        let del = del.wrapping_sub(ONES) & !del & HIGH;
        if control | del != 0 {
            break;
        }
        i += 8;
    }
    while i < buf.len() && is_plain(buf[i]) {
        i += 1;
    }
    i
}

fn check_field_line(line: &[u8]) -> Result<(), Reject> {
    match line.iter().position(|&b| b == b':') {
        Some(c) if c > 0 && matches!(line[c - 1], b' ' | b'\t') => Err(Reject::SpaceBeforeColon),
        Some(c) if c > 0 => Ok(()),
        _ => Err(Reject::Malformed),
    }
}

/// Parses a complete head (already through `HeadScan`) and decides its body framing.
pub(crate) fn validate(head: &[u8]) -> Result<Verdict, Reject> {
    // Left uninitialised: httparse writes only the fields it finds (filling 100 empty headers
    // per request showed in profiles).
    let mut headers =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut headers) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Err(httparse::Error::TooManyHeaders) => return Err(Reject::TooManyHeaders),
        _ => return Err(Reject::Malformed),
    }
    let http11 = req.version == Some(1);
    let mut may_switch = req.method == Some("CONNECT");
    let (mut length, mut chunked, mut hosts) = (None, false, 0u32);
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = trim(h.value);
        if name.eq_ignore_ascii_case(b"content-length") {
            if length.is_some() {
                return Err(Reject::DuplicateContentLength);
            }
            length = Some(parse_length(value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only one `chunked`: anything else is either unframeable (`chunked, gzip`), a coding
            // the proxy would pass on undecoded (`gzip, chunked`), or chunked applied twice.
            if chunked || !value.eq_ignore_ascii_case(b"chunked") {
                return Err(Reject::BadTransferEncoding);
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"host") {
            if !crate::http::host::is_valid(value) {
                return Err(Reject::BadHost);
            }
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            may_switch = true;
        }
    }
    if chunked && length.is_some() {
        return Err(Reject::ContentLengthWithTransferEncoding);
    }
    if chunked && !http11 {
        return Err(Reject::TransferEncodingOnHttp10);
    }
    match hosts {
        0 if http11 => return Err(Reject::MissingHost),
        0 | 1 => {}
        _ => return Err(Reject::DuplicateHost),
    }
    let framing = match length {
        _ if chunked => Framing::Chunked,
        Some(0) | None => Framing::None,
        Some(n) => Framing::Length(n),
    };
    Ok(Verdict {
        framing,
        may_switch,
    })
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

fn parse_length(v: &[u8]) -> Result<u64, Reject> {
    if v.is_empty() {
        return Err(Reject::BadContentLength);
    }
    v.iter().try_fold(0u64, |n, &b| {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(Reject::BadContentLength);
        }
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(Reject::BadContentLength)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(head: &[u8]) -> Result<Verdict, Reject> {
        let mut scan = HeadScan::default();
        match scan.feed(head)? {
            Some(end) if end == head.len() => validate(head),
            other => panic!("head end {other:?} for {}", head.len()),
        }
    }

    #[test]
    fn finds_the_head_end_however_the_bytes_are_split() {
        let head = b"\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc";
        for split in 0..head.len() {
            let mut scan = HeadScan::default();
            let first = scan.feed(&head[..split]);
            let end = match first {
                Ok(Some(end)) => end,
                Ok(None) => scan.feed(head).ok().flatten().unwrap_or(0),
                Err(e) => panic!("split {split}: {e:?}"),
            };
            assert_eq!(end, head.len() - 3, "split {split}");
        }
    }

    #[test]
    fn reads_the_framing_of_valid_heads() {
        let v = check(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  12 \r\n\r\n");
        assert_eq!(v.map(|v| v.framing), Ok(Framing::Length(12)));
        let v = check(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert_eq!(v.map(|v| v.framing), Ok(Framing::Chunked));
        let v = check(b"GET / HTTP/1.0\r\nX: a\tb\r\n\r\n");
        assert_eq!(v.map(|v| v.framing), Ok(Framing::None));
        let v = check(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n");
        assert_eq!(v.map(|v| v.may_switch), Ok(true));
        let v = check(b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n");
        assert_eq!(v.map(|v| v.may_switch), Ok(true));
    }

    /// The byte-by-byte scan `HeadScan::feed` replaced; the word-at-a-time one must agree.
    fn feed_byte_by_byte(scan: &mut HeadScan, buf: &[u8]) -> Result<Option<usize>, Reject> {
        for (i, &b) in buf.iter().enumerate().skip(scan.pos) {
            let after_cr = i > scan.line_start && buf[i - 1] == b'\r';
            if after_cr && b != b'\n' {
                return Err(Reject::BareCr);
            }
            match b {
                b'\n' if !after_cr => return Err(Reject::BareLf),
                b'\n' => {
                    let line = &buf[scan.line_start..i - 1];
                    scan.line_start = i + 1;
                    if line.is_empty() {
                        if scan.seen_request_line {
                            scan.pos = i + 1;
                            return Ok(Some(i + 1));
                        }
                    } else if scan.seen_request_line {
                        check_field_line(line)?;
                    } else {
                        scan.seen_request_line = true;
                    }
                }
                b' ' | b'\t' if i == scan.line_start && scan.seen_request_line => {
                    return Err(Reject::ObsFold)
                }
                b'\r' | b'\t' => {}
                0..=0x1f | 0x7f => return Err(Reject::ControlChar),
                _ => {}
            }
        }
        scan.pos = buf.len();
        Ok(None)
    }

    #[test]
    fn the_word_at_a_time_scan_agrees_with_the_byte_by_byte_one() {
        const ALPHABET: &[u8] =
            b"GET / HTTP/1.1 Host:a\r\n\r\n\t\x00\x01\x1f\x7f\x80\xff :xyz-0123456789";
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut head = b"GET /x HTTP/1.1\r\nHost: example.test\r\n".to_vec();
            for _ in 0..len {
                let r = next() as usize;
                head.push(ALPHABET[r % ALPHABET.len()]);
            }
            if next() % 2 == 0 {
                head.extend_from_slice(b"\r\n\r\n");
            }
            let split = (next() as usize) % (head.len() + 1);
            let (mut a, mut b) = (HeadScan::default(), HeadScan::default());
            let first = (
                a.feed(&head[..split]),
                feed_byte_by_byte(&mut b, &head[..split]),
            );
            assert_eq!(first.0, first.1, "{head:?} split at {split}");
            if let (Ok(None), Ok(None)) = first {
                assert_eq!(a.feed(&head), feed_byte_by_byte(&mut b, &head), "{head:?}");
            }
        }
    }

    #[test]
    fn refuses_a_bare_cr_split_from_its_next_byte() {
        let mut scan = HeadScan::default();
        let head = b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n";
        assert_eq!(scan.feed(&head[..24]), Ok(None));
        assert_eq!(scan.feed(head), Err(Reject::BareCr));
    }

    #[test]
    fn refuses_lengths_that_are_not_one_number() {
        for v in [
            &b""[..],
            b"3, 3",
            b"+3",
            b"-1",
            b"0x10",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_length(v), Err(Reject::BadContentLength));
        }
        assert_eq!(parse_length(b"007"), Ok(7));
    }
}
