//! Read HTTP/1.1 responses off a raw socket, framing and all, for tests that must control the
//! bytes a client writes: pipelining, `Expect: 100-continue`, upgrades, HEAD and 204.
//!
//! The parser is deliberately strict: a response body where none may be (HEAD, 204) shows up
//! as garbage in front of the next status line and fails the next read.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// One response as it came off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// Header fields in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// Trailer fields of a chunked body, names lowercased.
    pub trailers: Vec<(String, String)>,
}

impl RawResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        find(&self.headers, name)
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

fn find<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

async fn line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<String> {
    let mut buf = Vec::new();
    let n = r.read_until(b'\n', &mut buf).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let s = String::from_utf8(buf).map_err(|e| bad(format!("non-UTF-8 line: {e}")))?;
    s.strip_suffix("\r\n")
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("line not ended by CRLF: {s:?}")))
}

async fn fields<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    loop {
        let l = line(r).await?;
        if l.is_empty() {
            return Ok(out);
        }
        let (n, v) = l
            .split_once(':')
            .ok_or_else(|| bad(format!("malformed header line {l:?}")))?;
        out.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
}

/// Reads a status line and headers only (for `100 Continue` and `101 Switching Protocols`).
pub async fn read_head<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> io::Result<(u16, Vec<(String, String)>)> {
    let status_line = line(r).await?;
    let mut words = status_line.split(' ');
    let (Some(version), Some(code)) = (words.next(), words.next()) else {
        return Err(bad(format!("malformed status line {status_line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad(format!("not an HTTP/1 status line: {status_line:?}")));
    }
    let status = code
        .parse()
        .map_err(|_| bad(format!("bad status in {status_line:?}")))?;
    Ok((status, fields(r).await?))
}

/// Reads one complete response to a request of method `method`, skipping interim `1xx`
/// responses other than `101`; bounded by `deadline`.
pub async fn read_response<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    method: &str,
    deadline: Duration,
) -> io::Result<RawResponse> {
    let read = async {
        let (status, headers) = loop {
            let (status, headers) = read_head(r).await?;
            if !(100..200).contains(&status) || status == 101 {
                break (status, headers);
            }
        };
        let mut resp = RawResponse {
            status,
            headers,
            body: Vec::new(),
            trailers: Vec::new(),
        };
        let no_body = method.eq_ignore_ascii_case("HEAD")
            || status == 204
            || status == 304
            || (100..200).contains(&status);
        if no_body {
            return Ok(resp);
        }
        let chunked = resp
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().ends_with("chunked"));
        if chunked {
            loop {
                let size_line = line(r).await?;
                let hex = size_line.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(hex, 16)
                    .map_err(|_| bad(format!("bad chunk size line {size_line:?}")))?;
                if size == 0 {
                    resp.trailers = fields(r).await?;
                    break;
                }
                let start = resp.body.len();
                resp.body.resize(start + size, 0);
                r.read_exact(&mut resp.body[start..]).await?;
                if !line(r).await?.is_empty() {
                    return Err(bad("chunk not followed by CRLF".into()));
                }
            }
        } else if let Some(len) = resp.header("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| bad(format!("bad content-length {len:?}")))?;
            resp.body.resize(len, 0);
            r.read_exact(&mut resp.body).await?;
        } else {
            r.read_to_end(&mut resp.body).await?;
        }
        Ok(resp)
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no complete response within {deadline:?}"),
        )),
    }
}

/// Reads one head as it came, through its blank line (a request's, for test upstreams that look
/// at the exact bytes); `None` if the peer closed first.
pub async fn read_raw_head<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).await.ok()? == 0 {
            return None;
        }
        head.push_str(&l);
        if l == "\r\n" {
            return Some(head);
        }
    }
}

/// Reads a small chunked body line by line through its last chunk and the empty trailer
/// section; `false` if the peer closed first. For test bodies whose data holds no line `0`.
pub async fn skip_small_chunked<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> bool {
    let mut l = String::new();
    while l != "0\r\n" {
        l.clear();
        if r.read_line(&mut l).await.unwrap_or(0) == 0 {
            return false;
        }
    }
    l.clear();
    r.read_line(&mut l).await.unwrap_or(0) > 0
}
