//! The access log: one line per request (Apache combined with Weir's fields after it, or JSON),
//! written to stdout by a thread of its own once the response body has ended, so a request never
//! waits on the log.

use std::{
    io::Write,
    net::SocketAddr,
    str::FromStr,
    sync::mpsc::{self, Receiver, SyncSender, TrySendError},
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use http::{header, request::Parts, HeaderMap, Response};
use http_body::{Body, Frame};
use serde::Serialize;
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
    format: Format,
    tx: Option<SyncSender<String>>,
}

/// The endpoint that answered a request, left on its response for the log.
#[derive(Debug, Clone, Copy)]
pub struct Upstream(pub SocketAddr);

impl AccessLog {
    /// Starts the writer thread unless `format` is `Off`.
    pub fn start(format: Format) -> std::io::Result<Self> {
        if format == Format::Off {
            return Ok(Self { format, tx: None });
        }
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || write_lines(&rx, std::io::stdout().lock()))?;
        Ok(Self {
            format,
            tx: Some(tx),
        })
    }

    /// Whether lines are written (then answering endpoints are noted on responses).
    pub fn is_on(&self) -> bool {
        self.tx.is_some()
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
            method: parts.method.to_string(),
            target: parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.to_string(), |pq| pq.as_str().to_owned()),
            version: parts.version,
            host: parts
                .uri
                .authority()
                .map(|a| a.as_str().to_owned())
                .or_else(|| text(h, header::HOST)),
            referer: text(h, header::REFERER),
            user_agent: text(h, header::USER_AGENT),
            request_id: text(h, "x-request-id"),
            status: 0,
            first_byte: Duration::ZERO,
            bytes: 0,
            service: String::new(),
            route: String::new(),
            upstream: None,
            error: None,
        }))
    }

    /// Completes `entry` with the response head and wraps the body so that the line is written
    /// when the body ends (or is dropped before its end).
    pub fn watch(
        &self,
        mut entry: Box<Entry>,
        metrics: &RouteMetrics,
        resp: Response<ProxyBody>,
    ) -> Response<ProxyBody> {
        let Some(tx) = self.tx.clone() else {
            return resp;
        };
        entry.status = resp.status().as_u16();
        entry.first_byte = entry.start.elapsed();
        entry.service = metrics.service().to_owned();
        entry.route = metrics.route().to_owned();
        entry.upstream = resp.extensions().get::<Upstream>().map(|u| u.0);
        entry.error = text(resp.headers(), crate::error::ERROR_HEADER);
        let format = self.format;
        resp.map(|inner| {
            ProxyBody::Logged(Box::new(Logged {
                inner,
                entry: Some(entry),
                tx,
                format,
            }))
        })
    }
}

/// A header's value as text (non-UTF-8 bytes replaced), if present.
fn text(h: &HeaderMap, name: impl header::AsHeaderName) -> Option<String> {
    h.get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// One request's line, filled in as the request goes.
#[derive(Debug)]
pub struct Entry {
    time: SystemTime,
    start: Instant,
    client: SocketAddr,
    direction: Direction,
    method: String,
    target: String,
    version: http::Version,
    host: Option<String>,
    referer: Option<String>,
    user_agent: Option<String>,
    request_id: Option<String>,
    status: u16,
    first_byte: Duration,
    bytes: u64,
    service: String,
    route: String,
    upstream: Option<SocketAddr>,
    error: Option<String>,
}

/// A response body that counts its bytes and has its request's line written when it ends.
#[derive(Debug)]
pub struct Logged {
    inner: ProxyBody,
    /// Taken when the line is written.
    entry: Option<Box<Entry>>,
    tx: SyncSender<String>,
    format: Format,
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
                    self.write(Outcome::Complete);
                }
            }
            std::task::Poll::Ready(Some(Err(_))) => self.write(Outcome::Failed),
            std::task::Poll::Ready(None) => self.write(Outcome::Complete),
            std::task::Poll::Pending => {}
        }
        polled
    }

    fn write(&mut self, outcome: Outcome) {
        let Some(entry) = self.entry.take() else {
            return;
        };
        let line = match self.format {
            Format::Json => json_line(&entry, outcome),
            _ => apache_line(&entry, outcome),
        };
        if let Err(TrySendError::Full(_)) = self.tx.try_send(line) {
            metrics::counter!(DROPPED).increment(1);
        }
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
        self.write(outcome);
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
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

fn formatted(t: SystemTime, f: &[FormatItem<'static>]) -> String {
    OffsetDateTime::from(t).format(f).unwrap_or_default()
}

fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// `127.0.0.1 - - [07/Dec/2026:15:50:00 +0000] "GET /p HTTP/1.1" 200 12 "-" "curl/8" 0.001234
/// gateway default/echo echo 127.0.0.1:8080 - complete -`: Apache's combined format, then the
/// seconds to the body's end, the direction, the service, the route, the endpoint, the
/// `weir-proxy-error` reason, how the body ended and the `x-request-id`. Quoted fields escape
/// `"`, `\` and bytes outside printable ASCII as `\xHH`, as nginx does.
fn apache_line(e: &Entry, outcome: Outcome) -> String {
    let mut s = String::with_capacity(256);
    let or_dash = |v: Option<&str>| v.filter(|v| !v.is_empty()).map_or("-".into(), escape);
    s.push_str(&e.client.ip().to_string());
    s.push_str(" - - [");
    s.push_str(&formatted(e.time, APACHE_TIME));
    s.push_str("] \"");
    s.push_str(&escape(&e.method));
    s.push(' ');
    s.push_str(&escape(&e.target));
    s.push(' ');
    s.push_str(version(e.version));
    s.push_str(&format!(
        "\" {} {} \"{}\" \"{}\" {:.6} {} {} {} {} {} {} {}\n",
        e.status,
        e.bytes,
        or_dash(e.referer.as_deref()),
        or_dash(e.user_agent.as_deref()),
        e.start.elapsed().as_secs_f64(),
        e.direction.as_str(),
        or_dash(Some(&e.service)),
        or_dash(Some(&e.route)),
        e.upstream.map_or("-".into(), |u| u.to_string()),
        or_dash(e.error.as_deref()),
        outcome.as_str(),
        or_dash(e.request_id.as_deref()),
    ));
    s
}

/// `"` `\` and bytes outside printable ASCII (and space-free fields' spaces stay) as `\xHH`.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

#[derive(Serialize)]
struct JsonLine<'a> {
    time: String,
    client: String,
    direction: &'static str,
    method: &'a str,
    target: &'a str,
    version: &'static str,
    host: Option<&'a str>,
    status: u16,
    bytes: u64,
    duration_ms: f64,
    first_byte_ms: f64,
    service: Option<&'a str>,
    route: Option<&'a str>,
    upstream: Option<String>,
    error: Option<&'a str>,
    outcome: &'static str,
    referer: Option<&'a str>,
    user_agent: Option<&'a str>,
    request_id: Option<&'a str>,
}

/// Milliseconds to the microsecond (`0.693143`, not `0.6931430000000001`).
fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1e3
}

fn json_line(e: &Entry, outcome: Outcome) -> String {
    let some = |s: &'_ str| -> bool { !s.is_empty() };
    let line = JsonLine {
        time: formatted(e.time, JSON_TIME),
        client: e.client.to_string(),
        direction: e.direction.as_str(),
        method: &e.method,
        target: &e.target,
        version: version(e.version),
        host: e.host.as_deref(),
        status: e.status,
        bytes: e.bytes,
        duration_ms: millis(e.start.elapsed()),
        first_byte_ms: millis(e.first_byte),
        service: Some(e.service.as_str()).filter(|s| some(s)),
        route: Some(e.route.as_str()).filter(|s| some(s)),
        upstream: e.upstream.map(|u| u.to_string()),
        error: e.error.as_deref(),
        outcome: outcome.as_str(),
        referer: e.referer.as_deref(),
        user_agent: e.user_agent.as_deref(),
        request_id: e.request_id.as_deref(),
    };
    let mut s = serde_json::to_string(&line).unwrap_or_default();
    s.push('\n');
    s
}

/// The writer thread: lines as they come, flushed whenever the queue runs dry.
fn write_lines(rx: &Receiver<String>, mut out: impl Write) {
    let mut buf = std::io::BufWriter::with_capacity(64 * 1024, &mut out);
    while let Ok(line) = rx.recv() {
        let mut ok = buf.write_all(line.as_bytes()).is_ok();
        while let (true, Ok(line)) = (ok, rx.try_recv()) {
            ok = buf.write_all(line.as_bytes()).is_ok();
        }
        if !ok || buf.flush().is_err() {
            // stdout is gone (a closed pipe): the log stops, the proxy does not.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            time: SystemTime::UNIX_EPOCH + Duration::from_micros(1_796_603_400_123_456),
            start: Instant::now(),
            client: "10.0.0.7:5123".parse().expect("address"),
            direction: Direction::Gateway,
            method: "GET".into(),
            target: "/a?b=\"c\"".into(),
            version: http::Version::HTTP_11,
            host: Some("shop.test".into()),
            referer: None,
            user_agent: Some("curl/8 \u{e9}".into()),
            request_id: Some("r-1".into()),
            status: 200,
            first_byte: Duration::from_millis(2),
            bytes: 12,
            service: "default/shop".into(),
            route: "shop".into(),
            upstream: Some("127.0.0.1:8080".parse().expect("address")),
            error: None,
        }
    }

    #[test]
    fn apache_lines_are_combined_format_then_weirs_fields() {
        let line = apache_line(&entry(), Outcome::Complete);
        let (head, tail) = line.split_at(line.find(" 0.").expect("a duration"));
        assert_eq!(
            head,
            "10.0.0.7 - - [07/Dec/2026:00:30:00 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 12 \
             \"-\" \"curl/8 \\xC3\\xA9\""
        );
        let fields: Vec<&str> = tail.split_whitespace().collect();
        assert_eq!(
            &fields[1..],
            [
                "gateway",
                "default/shop",
                "shop",
                "127.0.0.1:8080",
                "-",
                "complete",
                "r-1"
            ]
        );
        assert!(line.ends_with('\n'));
    }

    #[test]
    fn json_lines_parse_and_leave_out_nothing_known() {
        let line = json_line(&entry(), Outcome::Incomplete);
        let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(v["time"], "2026-12-07T00:30:00.123456Z");
        assert_eq!(v["client"], "10.0.0.7:5123");
        assert_eq!(v["target"], "/a?b=\"c\"");
        assert_eq!(v["user_agent"], "curl/8 \u{e9}");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes"], 12);
        assert_eq!(v["first_byte_ms"], 2.0);
        assert_eq!(v["outcome"], "incomplete");
        assert_eq!(v["upstream"], "127.0.0.1:8080");
        assert_eq!(v["referer"], serde_json::Value::Null);
    }

    #[test]
    fn the_writer_writes_every_queued_line_and_formats_parse() {
        let (tx, rx) = mpsc::sync_channel(4);
        for i in 0..3 {
            tx.send(format!("line {i}\n")).expect("queued");
        }
        drop(tx);
        let mut out = Vec::new();
        write_lines(&rx, &mut out);
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "line 0\nline 1\nline 2\n"
        );
        assert_eq!("JSON".parse(), Ok(Format::Json));
        assert_eq!("apache".parse(), Ok(Format::Apache));
        assert_eq!("off".parse(), Ok(Format::Off));
        assert!("clf".parse::<Format>().is_err());
    }
}
