//! gRPC's view of a request: the `grpc-timeout` deadline and the `grpc-status` outcome.

use std::time::Duration;

use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};

/// The request header carrying the client's deadline.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// The response header (trailers-only responses) or trailer carrying the outcome.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The gRPC status codes the proxy looks at or produces.
pub mod code {
    /// The call succeeded; the only success.
    pub const OK: u32 = 0;
    /// Outcome unknown (also: a response that ended without a status).
    pub const UNKNOWN: u32 = 2;
    /// The deadline passed: what a timeout answers for gRPC.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// Permission denied (HTTP 403).
    pub const PERMISSION_DENIED: u32 = 7;
    /// Unimplemented (HTTP 404).
    pub const UNIMPLEMENTED: u32 = 12;
    /// Internal error (HTTP 400).
    pub const INTERNAL: u32 = 13;
    /// Transient: the default retryable status.
    pub const UNAVAILABLE: u32 = 14;
    /// Unauthenticated (HTTP 401).
    pub const UNAUTHENTICATED: u32 = 16;
}

/// A gRPC response's outcome so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `grpc-status: 0`.
    Success,
    /// Any other status; the code.
    Failure(u32),
    /// The head carries no status and the trailers have not arrived: the body is streaming.
    Pending,
}

/// Whether the message is gRPC: `content-type: application/grpc`, bare or with a `+codec` or
/// parameters.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let ct = ct.as_bytes();
    ct.strip_prefix(b"application/grpc")
        .is_some_and(|rest| matches!(rest.first(), None | Some(b'+' | b';')))
}

/// Parses a `grpc-timeout` value: 1 to 8 ASCII digits and a unit, `H M S m u n` (hours down to
/// nanoseconds). Anything else is `None`; the spec says to treat it as no deadline.
pub fn parse_timeout(v: &HeaderValue) -> Option<Duration> {
    let (unit, digits) = v.as_bytes().split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Formats `d` as a `grpc-timeout` value in the finest unit that fits eight digits, rounded
/// down, so the upstream gives up no later than the proxy would.
pub fn format_timeout(d: Duration) -> HeaderValue {
    const UNITS: [(u128, u8); 6] = [
        (1, b'n'),
        (1_000, b'u'),
        (1_000_000, b'm'),
        (1_000_000_000, b'S'),
        (60_000_000_000, b'M'),
        (3_600_000_000_000, b'H'),
    ];
    let ns = d.as_nanos();
    let (value, unit) = UNITS
        .iter()
        .map(|&(per, unit)| (ns / per, unit))
        .find(|&(value, _)| value < 100_000_000)
        .unwrap_or((99_999_999, b'H'));
    // Digits written backwards into a stack buffer: no `format!` on the request path.
    let mut buf = [0u8; 9];
    buf[8] = unit;
    let mut start = 8;
    let mut rest = value;
    loop {
        start -= 1;
        buf[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    HeaderValue::from_bytes(&buf[start..]).unwrap_or(HeaderValue::from_static("99999999H"))
}

/// The `grpc-status` in `headers`, if present and a number.
pub fn status(headers: &HeaderMap) -> Option<u32> {
    std::str::from_utf8(headers.get(GRPC_STATUS)?.as_bytes())
        .ok()?
        .parse()
        .ok()
}

/// Classifies a gRPC response from its head and, once read, its trailers.
///
/// A status in the head (a trailers-only response) or the trailers decides; without one, a
/// non-200 HTTP status maps as the gRPC spec's HTTP mapping says (so a proxy's 503 is
/// UNAVAILABLE), and a stream that ended without a status is UNKNOWN.
pub fn classify(http: StatusCode, headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Outcome {
    let code = status(headers).or_else(|| trailers.and_then(status));
    match code {
        Some(code::OK) => Outcome::Success,
        Some(c) => Outcome::Failure(c),
        None if http != StatusCode::OK => Outcome::Failure(from_http(http)),
        None if trailers.is_some() => Outcome::Failure(code::UNKNOWN),
        None => Outcome::Pending,
    }
}

fn from_http(http: StatusCode) -> u32 {
    match http.as_u16() {
        400 => code::INTERNAL,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        404 => code::UNIMPLEMENTED,
        429 | 502 | 503 | 504 => code::UNAVAILABLE,
        _ => code::UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(s: &'static str) -> Option<Duration> {
        parse_timeout(&HeaderValue::from_static(s))
    }

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn grpc_timeout_parses_every_unit_of_the_spec() {
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(timeout("250u"), Some(Duration::from_micros(250)));
        assert_eq!(timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
    }

    #[test]
    fn malformed_grpc_timeouts_are_no_deadline() {
        for bad in [
            "",
            "S",
            "100",
            "123456789m",
            "10s",
            "1.5S",
            "-1S",
            " 1S",
            "1 S",
            "10ms",
        ] {
            assert_eq!(timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatted_timeouts_round_trip_in_the_finest_unit_that_fits() {
        let cases = [
            (Duration::from_millis(100), "100000u"),
            (Duration::ZERO, "0n"),
            (Duration::from_millis(99), "99000000n"),
            (Duration::from_secs(5), "5000000u"),
            (Duration::from_secs(3600), "3600000m"),
            (Duration::from_secs(200_000), "200000S"),
            (Duration::from_secs(400_000_000), "6666666M"),
        ];
        for (d, want) in cases {
            let got = format_timeout(d);
            assert_eq!(got, want, "{d:?}");
            assert!(parse_timeout(&got).is_some_and(|back| back <= d));
        }
        assert_eq!(format_timeout(Duration::MAX), "99999999H");
    }

    #[test]
    fn grpc_is_recognised_by_content_type_with_or_without_a_codec() {
        let ct = |v| map(&[("content-type", v)]);
        assert!(is_grpc(&ct("application/grpc")));
        assert!(is_grpc(&ct("application/grpc+proto")));
        assert!(is_grpc(&ct("application/grpc;charset=utf-8")));
        assert!(!is_grpc(&ct("application/grpc-web")));
        assert!(!is_grpc(&ct("application/json")));
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn only_status_zero_is_success() {
        let ok = StatusCode::OK;
        let none = HeaderMap::new();
        assert_eq!(
            classify(ok, &map(&[("grpc-status", "0")]), None),
            Outcome::Success
        );
        assert_eq!(
            classify(ok, &none, Some(&map(&[("grpc-status", "0")]))),
            Outcome::Success
        );
        assert_eq!(
            classify(ok, &map(&[("grpc-status", "14")]), None),
            Outcome::Failure(code::UNAVAILABLE),
            "a 200 carrying grpc-status 14 is a failure"
        );
        assert_eq!(
            classify(ok, &none, Some(&map(&[("grpc-status", "5")]))),
            Outcome::Failure(5)
        );
    }

    #[test]
    fn a_stream_without_status_is_pending_until_its_trailers_arrive() {
        let ok = StatusCode::OK;
        let none = HeaderMap::new();
        assert_eq!(classify(ok, &none, None), Outcome::Pending);
        assert_eq!(
            classify(ok, &none, Some(&none)),
            Outcome::Failure(code::UNKNOWN)
        );
    }

    #[test]
    fn a_non_200_without_status_maps_like_the_grpc_spec() {
        let none = HeaderMap::new();
        let class = |s| classify(StatusCode::from_u16(s).expect("valid status"), &none, None);
        assert_eq!(class(503), Outcome::Failure(code::UNAVAILABLE));
        assert_eq!(class(404), Outcome::Failure(code::UNIMPLEMENTED));
        assert_eq!(class(500), Outcome::Failure(code::UNKNOWN));
    }
}
