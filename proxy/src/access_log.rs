//! The access log: one line per request (Apache combined with Weir's fields after it, or JSON),
//! written to stdout by a thread of its own once the response body has ended, so a request never
//! waits on the log (and one per opaque TCP connection, `tcp`). The request's side only takes cheap copies (shared bytes, an `Arc`); the
//! writer formats, and wakes on a clock of its own, so no request pays for waking it.

use std::{
    io::Write,
    net::SocketAddr,
    str::FromStr,
    sync::{
        mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError},
        Arc,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use http::{header, request::Parts, HeaderValue, Method, Response, Uri, Version};
use http_body::{Body, Frame};
use time::{format_description::FormatItem, macros::format_description, OffsetDateTime};
use tokio::time::Instant;

use crate::{
    http::body::{BodyError, ProxyBody},
    metrics::{Direction, RouteMetrics},
};

/// Counter of lines dropped because the writer fell behind (its queue was full).
pub const DROPPED: &str = "weir_access_log_dropped_total";

/// Lines queued for the writer at most; past that, lines are dropped and counted.
const QUEUE: usize = 16 * 1024;
/// How often the writer looks for lines: it sleeps rather than waits on the queue, since a
/// waiting receiver makes every send wake it (a futex call and a context switch a request).
const TICK: Duration = Duration::from_millis(50);

/// How lines are written (`WEIR_PROXY_ACCESS_LOG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// No access log (the default).
    #[default]
    Off,
    /// Apache's combined format, then duration, direction, service, route, upstream, error.
    Apache,
    /// One JSON object a line.
    Json,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "" => Ok(Self::Off),
            "apache" => Ok(Self::Apache),
            "json" => Ok(Self::Json),
            _ => Err("expected off, apache or json".into()),
        }
    }
}

/// The proxy's access log: a format and the queue to the writer thread.
#[derive(Debug)]
pub struct AccessLog {
    tx: Option<SyncSender<Queued>>,
}

mod tcp;
pub use tcp::TcpEntry;

/// What goes to the writer.
#[derive(Debug)]
enum Queued {
    Http(Line),
    Tcp(Box<TcpEntry>),
}

/// Queues `q` for the writer, or counts it dropped when the queue is full.
fn enqueue(tx: &SyncSender<Queued>, q: Queued) {
    if let Err(TrySendError::Full(_)) = tx.try_send(q) {
        metrics::counter!(DROPPED).increment(1);
    }
}

/// The endpoint that answered a request, left on its response for the log.
#[derive(Debug, Clone, Copy)]
pub struct Upstream(pub SocketAddr);

impl AccessLog {
    /// Starts the writer thread unless `format` is `Off`.
    pub fn start(format: Format) -> std::io::Result<Self> {
        if format == Format::Off {
            return Ok(Self { tx: None });
        }
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || write_lines(&rx, format, TICK, std::io::stdout().lock()))?;
        Ok(Self { tx: Some(tx) })
    }

    /// Whether lines are written (then answering endpoints are noted on responses).
    pub fn is_on(&self) -> bool {
        self.tx.is_some()
    }

    /// Notes on `resp` the endpoint that answered it, for its line; nothing when the log is off.
    pub fn note_upstream<B>(&self, resp: &mut Response<B>, addr: SocketAddr) {
        if self.is_on() {
            resp.extensions_mut().insert(Upstream(addr));
        }
    }

    /// What the line needs from the request, taken before the request moves on; `None` when
    /// the log is off (one branch a request).
    pub fn begin(
        &self,
        client: SocketAddr,
        direction: Direction,
        parts: &Parts,
        start: Instant,
    ) -> Option<Box<Entry>> {
        self.tx.as_ref()?;
        let h = &parts.headers;
        Some(Box::new(Entry {
            time: SystemTime::now(),
            start,
            client,
            direction,
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            host: h.get(header::HOST).cloned(),
            referer: h.get(header::REFERER).cloned(),
            user_agent: h.get(header::USER_AGENT).cloned(),
            request_id: h.get(crate::http::request_id::X_REQUEST_ID).cloned(),
            status: 0,
            first_byte: Duration::ZERO,
            total: Duration::ZERO,
            bytes: 0,
            metrics: None,
            upstream: None,
            error: None,
        }))
    }

    /// Completes `entry` with the response head and wraps the body so that the line is written
    /// when the body ends (or is dropped before its end).
    pub fn watch(
        &self,
        mut entry: Box<Entry>,
        metrics: &Arc<RouteMetrics>,
        resp: Response<ProxyBody>,
    ) -> Response<ProxyBody> {
        let Some(tx) = self.tx.clone() else {
            return resp;
        };
        entry.status = resp.status().as_u16();
        entry.first_byte = entry.start.elapsed();
        entry.metrics = Some(metrics.clone());
        entry.upstream = resp.extensions().get::<Upstream>().map(|u| u.0);
        entry.error = resp.headers().get(crate::error::ERROR_HEADER).cloned();
        resp.map(|inner| {
            ProxyBody::Logged(Box::new(Logged {
                inner,
                entry: Some(entry),
                tx,
            }))
        })
    }
}

/// One request's line, filled in as the request goes.
#[derive(Debug)]
pub struct Entry {
    time: SystemTime,
    start: Instant,
    client: SocketAddr,
    direction: Direction,
    method: Method,
    uri: Uri,
    version: Version,
    host: Option<HeaderValue>,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    request_id: Option<HeaderValue>,
    status: u16,
    first_byte: Duration,
    total: Duration,
    bytes: u64,
    /// The route's metrics handle, whose labels name the service and route.
    metrics: Option<Arc<RouteMetrics>>,
    upstream: Option<SocketAddr>,
    error: Option<HeaderValue>,
}

impl Entry {
    fn target(&self) -> &str {
        self.uri.path_and_query().map_or("/", |pq| pq.as_str())
    }

    /// `:authority` or the absolute target's, else `Host`.
    fn host(&self) -> Option<&[u8]> {
        match self.uri.authority() {
            Some(a) => Some(a.as_str().as_bytes()),
            None => self.host.as_ref().map(HeaderValue::as_bytes),
        }
    }

    fn labels(&self) -> (&str, &str) {
        self.metrics
            .as_deref()
            .map_or(("", ""), |m| (m.service(), m.route()))
    }
}

/// What goes to the writer: a finished entry and how its body ended.
#[derive(Debug)]
struct Line {
    entry: Box<Entry>,
    outcome: Outcome,
}

/// A response body that counts its bytes and has its request's line written when it ends.
#[derive(Debug)]
pub struct Logged {
    inner: ProxyBody,
    /// Taken when the line is sent.
    entry: Option<Box<Entry>>,
    tx: SyncSender<Queued>,
}

impl Logged {
    pub(crate) fn inner(&self) -> &ProxyBody {
        &self.inner
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(e)) = (frame.data_ref(), self.entry.as_mut()) {
                    e.bytes += data.len() as u64;
                }
                if self.inner.is_end_stream() {
                    self.send(Outcome::Complete);
                }
            }
            std::task::Poll::Ready(Some(Err(_))) => self.send(Outcome::Failed),
            std::task::Poll::Ready(None) => self.send(Outcome::Complete),
            std::task::Poll::Pending => {}
        }
        polled
    }

    fn send(&mut self, outcome: Outcome) {
        let Some(mut entry) = self.entry.take() else {
            return;
        };
        entry.total = entry.start.elapsed();
        enqueue(&self.tx, Queued::Http(Line { entry, outcome }));
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        // A body never polled can still be whole (a HEAD's, a 204's, one the server had no
        // need to read to its end); any other was cut short: the client left, or the
        // connection closed, before its end.
        let outcome = if self.inner.is_end_stream() {
            Outcome::Complete
        } else {
            Outcome::Incomplete
        };
        self.send(outcome);
    }
}

/// How the response body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// All of it was read.
    Complete,
    /// The upstream failed mid-body.
    Failed,
    /// Dropped before its end: the client left, or the connection was cut.
    Incomplete,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Failed => "failed",
            Outcome::Incomplete => "incomplete",
        }
    }
}

const APACHE_TIME: &[FormatItem<'static>] =
    format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000");
const JSON_TIME: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");

/// The writer's clock: a second's text is made once, however many lines share it.
#[derive(Default)]
struct Clock {
    second: Option<u64>,
    apache: String,
    json: String,
}

impl Clock {
    /// The time as the format writes it, and its microseconds within the second.
    fn at(&mut self, t: SystemTime) -> (&Clock, u32) {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        if self.second != Some(since.as_secs()) {
            let at = OffsetDateTime::from(UNIX_EPOCH + Duration::from_secs(since.as_secs()));
            self.apache = at.format(APACHE_TIME).unwrap_or_default();
            self.json = at.format(JSON_TIME).unwrap_or_default();
            self.second = Some(since.as_secs());
        }
        (self, since.subsec_micros())
    }
}

fn version(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// `127.0.0.1 - - [07/Dec/2026:15:50:00 +0000] "GET /p HTTP/1.1" 200 12 "-" "curl/8" 0.001234
/// gateway echo.default echo 127.0.0.1:8080 - complete -`: Apache's combined format, then the
/// seconds to the body's end, the direction, the service, the route, the endpoint, the
/// `weir-proxy-error` reason, how the body ended and the `x-request-id`. Quoted fields escape
/// `"`, `\` and bytes outside printable ASCII as `\xHH`, as nginx does.
fn apache_line(line: &Line, clock: &mut Clock, out: &mut Vec<u8>) {
    let e = &line.entry;
    let (clock, _) = clock.at(e.time);
    let (service, route) = e.labels();
    ip(e.client.ip(), out);
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(clock.apache.as_bytes());
    out.extend_from_slice(b"] \"");
    escape(e.method.as_str().as_bytes(), out);
    out.push(b' ');
    escape(e.target().as_bytes(), out);
    out.push(b' ');
    out.extend_from_slice(version(e.version).as_bytes());
    out.extend_from_slice(b"\" ");
    num(e.status, out);
    out.push(b' ');
    num(e.bytes, out);
    out.extend_from_slice(b" \"");
    or_dash(e.referer.as_ref().map(HeaderValue::as_bytes), out);
    out.extend_from_slice(b"\" \"");
    or_dash(e.user_agent.as_ref().map(HeaderValue::as_bytes), out);
    out.extend_from_slice(b"\" ");
    decimal(e.total.as_micros(), 6, out);
    out.push(b' ');
    out.extend_from_slice(e.direction.as_str().as_bytes());
    out.push(b' ');
    or_dash(Some(service.as_bytes()), out);
    out.push(b' ');
    or_dash(Some(route.as_bytes()), out);
    out.push(b' ');
    match e.upstream {
        Some(u) => socket(u, out),
        None => out.push(b'-'),
    }
    out.push(b' ');
    or_dash(e.error.as_ref().map(HeaderValue::as_bytes), out);
    out.push(b' ');
    out.extend_from_slice(line.outcome.as_str().as_bytes());
    out.push(b' ');
    or_dash(e.request_id.as_ref().map(HeaderValue::as_bytes), out);
    out.push(b'\n');
}

/// An integer in decimal (`itoa`: the `fmt` machinery cost ~3,000 instructions a line).
fn num(n: impl itoa::Integer, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `units` as a decimal with `places` digits after the point (microseconds as seconds with 6,
/// as milliseconds with 3): exact, where a float would print `0.6931430000000001`.
fn decimal(units: u128, places: u32, out: &mut Vec<u8>) {
    let scale = 10u128.pow(places);
    num(units / scale, out);
    out.push(b'.');
    padded(units % scale, places as usize, out);
}

/// `n` in decimal, zeros in front to `width` digits.
fn padded(n: impl itoa::Integer, width: usize, out: &mut Vec<u8>) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n);
    out.extend(std::iter::repeat_n(
        b'0',
        width.saturating_sub(digits.len()),
    ));
    out.extend_from_slice(digits.as_bytes());
}

fn ip(a: std::net::IpAddr, out: &mut Vec<u8>) {
    match a {
        std::net::IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                num(octet, out);
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// `1.2.3.4:80`, `[::1]:80`.
fn socket(a: SocketAddr, out: &mut Vec<u8>) {
    if a.is_ipv6() {
        out.push(b'[');
        ip(a.ip(), out);
        out.push(b']');
    } else {
        ip(a.ip(), out);
    }
    out.push(b':');
    num(a.port(), out);
}

fn or_dash(v: Option<&[u8]>, out: &mut Vec<u8>) {
    match v.filter(|v| !v.is_empty()) {
        Some(v) => escape(v, out),
        None => out.push(b'-'),
    }
}

/// `"`, `\` and bytes outside printable ASCII as `\xHH`; the rest as is.
fn escape(v: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in v {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        } else {
            out.push(b);
        }
    }
}

/// One JSON object: see the README's access-log section for the fields.
fn json_line(line: &Line, clock: &mut Clock, out: &mut Vec<u8>) {
    let e = &line.entry;
    let (clock, micros) = clock.at(e.time);
    let (service, route) = e.labels();
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(clock.json.as_bytes());
    out.push(b'.');
    padded(micros, 6, out);
    out.extend_from_slice(b"Z\",\"client\":\"");
    socket(e.client, out);
    out.extend_from_slice(b"\",\"direction\":\"");
    out.extend_from_slice(e.direction.as_str().as_bytes());
    out.extend_from_slice(b"\",\"method\":");
    json_str(e.method.as_str().as_bytes(), out);
    out.extend_from_slice(b",\"target\":");
    json_str(e.target().as_bytes(), out);
    out.extend_from_slice(b",\"version\":\"");
    out.extend_from_slice(version(e.version).as_bytes());
    out.extend_from_slice(b"\",\"host\":");
    json_opt(e.host(), out);
    out.extend_from_slice(b",\"status\":");
    num(e.status, out);
    out.extend_from_slice(b",\"bytes\":");
    num(e.bytes, out);
    out.extend_from_slice(b",\"duration_ms\":");
    decimal(e.total.as_micros(), 3, out);
    out.extend_from_slice(b",\"first_byte_ms\":");
    decimal(e.first_byte.as_micros(), 3, out);
    out.extend_from_slice(b",\"service\":");
    json_opt(Some(service.as_bytes()).filter(|s| !s.is_empty()), out);
    out.extend_from_slice(b",\"route\":");
    json_opt(Some(route.as_bytes()).filter(|s| !s.is_empty()), out);
    out.extend_from_slice(b",\"upstream\":");
    json_socket(e.upstream, out);
    out.extend_from_slice(b",\"error\":");
    json_opt(e.error.as_ref().map(HeaderValue::as_bytes), out);
    out.extend_from_slice(b",\"outcome\":\"");
    out.extend_from_slice(line.outcome.as_str().as_bytes());
    out.extend_from_slice(b"\",\"referer\":");
    json_opt(e.referer.as_ref().map(HeaderValue::as_bytes), out);
    out.extend_from_slice(b",\"user_agent\":");
    json_opt(e.user_agent.as_ref().map(HeaderValue::as_bytes), out);
    out.extend_from_slice(b",\"request_id\":");
    json_opt(e.request_id.as_ref().map(HeaderValue::as_bytes), out);
    out.extend_from_slice(b"}\n");
}

/// `"1.2.3.4:80"`, or `null`.
fn json_socket(a: Option<SocketAddr>, out: &mut Vec<u8>) {
    match a {
        Some(a) => {
            out.push(b'"');
            socket(a, out);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn json_opt(v: Option<&[u8]>, out: &mut Vec<u8>) {
    match v {
        Some(v) => json_str(v, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string of `v`: `"` `\\` and control characters escaped, bytes that are not UTF-8
/// (a header's obs-text) replaced by U+FFFD, so every line is valid JSON.
fn json_str(v: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    // The usual value is printable ASCII with nothing to escape: copied whole.
    if v.iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        out.extend_from_slice(v);
        out.push(b'"');
        return;
    }
    for chunk in v.utf8_chunks() {
        let s = chunk.valid().as_bytes();
        let mut start = 0;
        for (i, &b) in s.iter().enumerate() {
            let esc: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..=0x1f | 0x7f => {
                    out.extend_from_slice(&s[start..i]);
                    let _ = write!(out, "\\u{b:04x}");
                    start = i + 1;
                    continue;
                }
                _ => continue,
            };
            out.extend_from_slice(&s[start..i]);
            out.extend_from_slice(esc);
            start = i + 1;
        }
        out.extend_from_slice(&s[start..]);
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
    out.push(b'"');
}

/// The writer thread: every `tick`, the lines queued since, formatted and written at once. It
/// ends when the log's sender is gone, or stdout is (a closed pipe: the log stops, the proxy
/// does not).
fn write_lines(rx: &Receiver<Queued>, format: Format, tick: Duration, mut out: impl Write) {
    let mut clock = Clock::default();
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let gone = loop {
            match rx.try_recv() {
                Ok(Queued::Http(line)) => match format {
                    Format::Json => json_line(&line, &mut clock, &mut buf),
                    _ => apache_line(&line, &mut clock, &mut buf),
                },
                Ok(Queued::Tcp(entry)) => match format {
                    Format::Json => tcp::json_line(&entry, &mut clock, &mut buf),
                    _ => tcp::apache_line(&entry, &mut clock, &mut buf),
                },
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
            if buf.len() >= 60 * 1024 {
                if out.write_all(&buf).is_err() {
                    return;
                }
                buf.clear();
            }
        };
        if !buf.is_empty() {
            if out.write_all(&buf).and_then(|()| out.flush()).is_err() {
                return;
            }
            buf.clear();
        }
        if gone {
            return;
        }
        std::thread::sleep(tick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(outcome: Outcome) -> Line {
        let value = |v: &'static [u8]| HeaderValue::from_bytes(v).expect("value");
        Line {
            entry: Box::new(Entry {
                time: UNIX_EPOCH + Duration::from_micros(1_796_603_400_123_456),
                start: Instant::now(),
                client: "10.0.0.7:5123".parse().expect("address"),
                direction: Direction::Gateway,
                method: Method::GET,
                uri: Uri::from_static("/a?b=%22c%22"),
                version: Version::HTTP_11,
                host: Some(value(b"shop.test")),
                referer: None,
                user_agent: Some(value(b"curl/8 \xe9\"")),
                request_id: Some(value(b"r-1")),
                status: 200,
                first_byte: Duration::from_millis(2),
                total: Duration::from_micros(3_500),
                bytes: 12,
                metrics: Some(RouteMetrics::new(
                    Direction::Gateway,
                    "shop.default",
                    "shop",
                )),
                upstream: Some("127.0.0.1:8080".parse().expect("address")),
                error: None,
            }),
            outcome,
        }
    }

    fn text(f: fn(&Line, &mut Clock, &mut Vec<u8>), l: &Line) -> String {
        let mut out = Vec::new();
        f(l, &mut Clock::default(), &mut out);
        String::from_utf8(out).expect("lines are UTF-8")
    }

    #[test]
    fn apache_lines_are_combined_format_then_weirs_fields() {
        let got = text(apache_line, &line(Outcome::Complete));
        assert_eq!(
            got,
            "10.0.0.7 - - [07/Dec/2026:00:30:00 +0000] \"GET /a?b=%22c%22 HTTP/1.1\" 200 12 \
             \"-\" \"curl/8 \\xE9\\x22\" 0.003500 gateway shop.default shop 127.0.0.1:8080 - \
             complete r-1\n"
        );
    }

    #[test]
    fn json_lines_parse_and_carry_every_field() {
        let got = text(json_line, &line(Outcome::Incomplete));
        let v: serde_json::Value = serde_json::from_str(&got).expect("one JSON object");
        assert!(got.ends_with("}\n"));
        assert_eq!(v["time"], "2026-12-07T00:30:00.123456Z");
        assert_eq!(v["client"], "10.0.0.7:5123");
        assert_eq!(v["target"], "/a?b=%22c%22");
        assert_eq!(v["host"], "shop.test");
        // Not UTF-8 (obs-text): replaced, so the line stays JSON.
        assert_eq!(v["user_agent"], "curl/8 \u{fffd}\"");
        assert_eq!(
            (v["status"].as_u64(), v["bytes"].as_u64()),
            (Some(200), Some(12))
        );
        assert_eq!(
            (v["duration_ms"].as_f64(), v["first_byte_ms"].as_f64()),
            (Some(3.5), Some(2.0))
        );
        assert_eq!(
            (v["service"].as_str(), v["route"].as_str()),
            (Some("shop.default"), Some("shop"))
        );
        assert_eq!(v["outcome"], "incomplete");
        assert_eq!(v["upstream"], "127.0.0.1:8080");
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["error"], serde_json::Value::Null);
    }

    #[test]
    fn numbers_and_addresses_are_written_exactly() {
        let show = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut out = Vec::new();
            f(&mut out);
            String::from_utf8(out).expect("utf-8")
        };
        assert_eq!(show(&|o| decimal(3_500, 6, o)), "0.003500");
        assert_eq!(show(&|o| decimal(693_143, 3, o)), "693.143");
        assert_eq!(show(&|o| decimal(5, 3, o)), "0.005");
        assert_eq!(show(&|o| decimal(12_000_000, 6, o)), "12.000000");
        let v6: SocketAddr = "[fd00::7]:8080".parse().expect("address");
        assert_eq!(show(&|o| socket(v6, o)), "[fd00::7]:8080");
        let v4: SocketAddr = "10.0.0.255:1".parse().expect("address");
        assert_eq!(show(&|o| socket(v4, o)), "10.0.0.255:1");
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        let mut out = Vec::new();
        json_str(b"a\"b\\c\nd\x01e\x7f", &mut out);
        let s = String::from_utf8(out).expect("utf-8");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001e\\u007f\"");
        let back: String = serde_json::from_str(&s).expect("a JSON string");
        assert_eq!(back, "a\"b\\c\nd\u{1}e\u{7f}");
    }

    #[test]
    fn the_writer_writes_every_queued_line_then_ends_with_its_sender() {
        let (tx, rx) = mpsc::sync_channel(8);
        for outcome in [Outcome::Complete, Outcome::Failed, Outcome::Incomplete] {
            tx.send(Queued::Http(line(outcome))).expect("queued");
        }
        drop(tx);
        let mut out = Vec::new();
        write_lines(&rx, Format::Json, Duration::ZERO, &mut out);
        let text = String::from_utf8(out).expect("utf-8");
        let outcomes: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("JSON")["outcome"].to_string()
            })
            .collect();
        assert_eq!(outcomes, ["\"complete\"", "\"failed\"", "\"incomplete\""]);
        assert_eq!("JSON".parse(), Ok(Format::Json));
        assert_eq!("apache".parse(), Ok(Format::Apache));
        assert_eq!("off".parse(), Ok(Format::Off));
        assert!("clf".parse::<Format>().is_err());
    }
}
