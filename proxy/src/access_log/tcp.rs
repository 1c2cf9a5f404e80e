//! An opaque TCP connection's access-log line: written when the relay closed, with where it
//! went, the bytes each way, how long it lasted and how it ended.

use std::{net::SocketAddr, sync::Arc, time::SystemTime};

use tokio::time::Instant;

use super::{decimal, enqueue, json_opt, json_str, num, or_dash, socket, AccessLog, Clock, Queued};
use crate::metrics::{Direction, TcpEnd};

/// One relay's line, filled in as the relay goes.
#[derive(Debug)]
pub struct TcpEntry {
    time: SystemTime,
    start: Instant,
    client: SocketAddr,
    direction: Direction,
    /// The original destination.
    destination: SocketAddr,
    /// The `service` label the relay is counted on.
    service: Arc<str>,
    upstream: Option<SocketAddr>,
    received: u64,
    sent: u64,
    end: TcpEnd,
    micros: u128,
}

impl TcpEntry {
    /// The endpoint the relay connected to.
    pub fn set_upstream(&mut self, addr: Option<SocketAddr>) {
        self.upstream = addr;
    }
}

impl AccessLog {
    /// What a relay's line needs from its start; `None` when the log is off.
    pub fn tcp_begin(
        &self,
        client: SocketAddr,
        direction: Direction,
        destination: SocketAddr,
        service: &Arc<str>,
    ) -> Option<Box<TcpEntry>> {
        self.tx.as_ref()?;
        Some(Box::new(TcpEntry {
            time: SystemTime::now(),
            start: Instant::now(),
            client,
            direction,
            destination,
            service: service.clone(),
            upstream: None,
            received: 0,
            sent: 0,
            end: TcpEnd::Eof,
            micros: 0,
        }))
    }

    /// Queues the line of a relay that ended as `end`, having received and sent those bytes
    /// on the client's side.
    pub fn tcp_end(&self, entry: Option<Box<TcpEntry>>, end: TcpEnd, received: u64, sent: u64) {
        let (Some(tx), Some(mut e)) = (self.tx.as_ref(), entry) else {
            return;
        };
        e.micros = e.start.elapsed().as_micros();
        (e.end, e.received, e.sent) = (end, received, sent);
        enqueue(tx, Queued::Tcp(e));
    }
}

/// nginx's stream module answers 502 for a connection it could not take upstream, 200 else.
fn status(e: &TcpEntry) -> u16 {
    if e.end == TcpEnd::ConnectFailed {
        502
    } else {
        200
    }
}

/// `10.0.0.7 - - [07/Dec/2026:00:30:00 +0000] "TCP 10.96.0.5:5432" 200 4096 "-" "-" 12.000000
/// outbound db.default - 127.0.0.1:5432 - eof - 512`: the HTTP line's fields, the request being
/// `TCP <original destination>`, the status 200 (502 when no endpoint connected), the bytes
/// those sent to the client, route, error and request id empty, and one more field at the end:
/// the bytes received from the client.
pub(super) fn apache_line(e: &TcpEntry, clock: &mut Clock, out: &mut Vec<u8>) {
    let (clock, _) = clock.at(e.time);
    super::ip(e.client.ip(), out);
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(clock.apache.as_bytes());
    out.extend_from_slice(b"] \"TCP ");
    socket(e.destination, out);
    out.extend_from_slice(b"\" ");
    num(status(e), out);
    out.push(b' ');
    num(e.sent, out);
    out.extend_from_slice(b" \"-\" \"-\" ");
    decimal(e.micros, 6, out);
    out.push(b' ');
    out.extend_from_slice(e.direction.as_str().as_bytes());
    out.push(b' ');
    or_dash(Some(e.service.as_bytes()), out);
    out.extend_from_slice(b" - ");
    match e.upstream {
        Some(u) => socket(u, out),
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" - ");
    out.extend_from_slice(e.end.as_str().as_bytes());
    out.extend_from_slice(b" - ");
    num(e.received, out);
    out.push(b'\n');
}

/// One JSON object: see the README's access-log section for the fields.
pub(super) fn json_line(e: &TcpEntry, clock: &mut Clock, out: &mut Vec<u8>) {
    let (clock, micros) = clock.at(e.time);
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(clock.json.as_bytes());
    out.push(b'.');
    super::padded(micros, 6, out);
    out.extend_from_slice(b"Z\",\"client\":\"");
    socket(e.client, out);
    out.extend_from_slice(b"\",\"direction\":\"");
    out.extend_from_slice(e.direction.as_str().as_bytes());
    out.extend_from_slice(b"\",\"protocol\":\"tcp\",\"destination\":\"");
    socket(e.destination, out);
    out.extend_from_slice(b"\",\"service\":");
    json_opt(Some(e.service.as_bytes()).filter(|s| !s.is_empty()), out);
    out.extend_from_slice(b",\"upstream\":");
    super::json_socket(e.upstream, out);
    out.extend_from_slice(b",\"status\":");
    num(status(e), out);
    out.extend_from_slice(b",\"bytes_received\":");
    num(e.received, out);
    out.extend_from_slice(b",\"bytes_sent\":");
    num(e.sent, out);
    out.extend_from_slice(b",\"duration_ms\":");
    decimal(e.micros, 3, out);
    out.extend_from_slice(b",\"outcome\":");
    json_str(e.end.as_str().as_bytes(), out);
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn entry(end: TcpEnd, upstream: Option<&str>) -> TcpEntry {
        TcpEntry {
            time: UNIX_EPOCH + Duration::from_micros(1_796_603_400_123_456),
            start: Instant::now(),
            client: "10.0.0.7:5123".parse().expect("address"),
            direction: Direction::Outbound,
            destination: "10.96.0.5:5432".parse().expect("address"),
            service: "db.default".into(),
            upstream: upstream.map(|u| u.parse().expect("address")),
            received: 512,
            sent: 4096,
            end,
            micros: 12_000_000,
        }
    }

    fn text(f: fn(&TcpEntry, &mut Clock, &mut Vec<u8>), e: &TcpEntry) -> String {
        let mut out = Vec::new();
        f(e, &mut Clock::default(), &mut out);
        String::from_utf8(out).expect("lines are UTF-8")
    }

    #[test]
    fn apache_tcp_lines_keep_the_http_lines_fields_then_the_bytes_received() {
        let got = text(apache_line, &entry(TcpEnd::Eof, Some("127.0.0.1:5432")));
        assert_eq!(
            got,
            "10.0.0.7 - - [07/Dec/2026:00:30:00 +0000] \"TCP 10.96.0.5:5432\" 200 4096 \"-\" \"-\" \
             12.000000 outbound db.default - 127.0.0.1:5432 - eof - 512\n"
        );
        let failed = text(apache_line, &entry(TcpEnd::ConnectFailed, None));
        assert!(
            failed.contains("\" 502 4096 ") && failed.contains(" - - connect-failed - 512\n"),
            "{failed}"
        );
    }

    #[test]
    fn json_tcp_lines_parse_and_carry_every_field() {
        let got = text(
            json_line,
            &entry(TcpEnd::IdleTimeout, Some("[fd00::1]:5432")),
        );
        let v: serde_json::Value = serde_json::from_str(&got).expect("one JSON object");
        assert_eq!(
            v,
            serde_json::json!({
                "time": "2026-12-07T00:30:00.123456Z",
                "client": "10.0.0.7:5123",
                "direction": "outbound",
                "protocol": "tcp",
                "destination": "10.96.0.5:5432",
                "service": "db.default",
                "upstream": "[fd00::1]:5432",
                "status": 200,
                "bytes_received": 512,
                "bytes_sent": 4096,
                "duration_ms": 12000.0,
                "outcome": "idle-timeout",
            })
        );
        let failed = text(json_line, &entry(TcpEnd::ConnectFailed, None));
        let v: serde_json::Value = serde_json::from_str(&failed).expect("one JSON object");
        assert_eq!(
            (v["status"].as_u64(), v["upstream"].is_null()),
            (Some(502), true)
        );
    }
}
