//! How a forwarded request went, as the breakers and the balancer count it: a failure is the
//! upstream's fault (5xx, a gRPC server-side status, a connect failure or reset), and an upstream
//! that asks for less traffic (429, `Retry-After`) costs it a latency penalty.

use std::time::Duration;

use http::{header, Response, StatusCode};

use super::grpc::{self, code, Outcome};
use crate::error::ProxyError;

/// gRPC statuses that blame the server (Envoy's outlier detection maps these to 5xx too).
const GRPC_SERVER_FAULTS: [u32; 5] = [
    code::UNKNOWN,
    code::DEADLINE_EXCEEDED,
    code::INTERNAL,
    code::UNAVAILABLE,
    15, // DATA_LOSS
];

/// The penalty for a 429 without a usable `Retry-After`.
pub const DEFAULT_THROTTLE_PENALTY: Duration = Duration::from_secs(1);
/// The largest penalty a `Retry-After` can cost (the balancer's decay time).
pub const MAX_THROTTLE_PENALTY: Duration = Duration::from_secs(10);

/// `Some(true)` when the upstream failed, `Some(false)` when it answered, `None` when the
/// request never reached it for a reason of its own (a malformed request, a loop…).
///
/// A gRPC response is judged by its head: a trailers-only response (the usual shape of an
/// error) carries `grpc-status` there, so 200 + `grpc-status: 14` is a failure; a streaming
/// response whose status only arrives in trailers counts as a success once its head is in.
pub fn is_failure<B>(result: &Result<Response<B>, ProxyError>) -> Option<bool> {
    match result {
        Ok(resp) => Some(response_failed(resp)),
        Err(e) => error_is_failure(e),
    }
}

/// `Some(true)` for an error of the upstream's making (a refused or failed connect, a reset, a
/// failed handshake), `None` for one of the request's own (a client that broke off its upload
/// included).
pub fn error_is_failure(e: &ProxyError) -> Option<bool> {
    (matches!(
        e,
        ProxyError::Connect { .. } | ProxyError::Upstream { .. } | ProxyError::Handshake { .. }
    ) && !e.is_client_side())
    .then_some(true)
}

fn response_failed<B>(resp: &Response<B>) -> bool {
    if resp.status().is_server_error() {
        return true;
    }
    if !grpc::is_grpc(resp.headers()) {
        return false;
    }
    match grpc::classify(resp.status(), resp.headers(), None) {
        Outcome::Failure(c) => GRPC_SERVER_FAULTS.contains(&c),
        Outcome::Success | Outcome::Pending => false,
    }
}

/// The latency penalty an upstream asked for: a 429, or a 503 with `Retry-After`. The penalty
/// is the `Retry-After` in seconds (1 s when absent or an HTTP date), at most 10 s.
pub fn throttle_penalty<B>(resp: &Response<B>) -> Option<Duration> {
    // Every answer comes here: look at the status before any header.
    let retry_after = match resp.status() {
        StatusCode::TOO_MANY_REQUESTS => resp.headers().get(header::RETRY_AFTER),
        StatusCode::SERVICE_UNAVAILABLE => Some(resp.headers().get(header::RETRY_AFTER)?),
        _ => return None,
    };
    let secs = retry_after
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    Some(secs.map_or(DEFAULT_THROTTLE_PENALTY, |s| {
        Duration::from_secs(s.max(1)).min(MAX_THROTTLE_PENALTY)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, headers: &[(&'static str, &'static str)]) -> Response<()> {
        let mut b = Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("valid response")
    }

    #[test]
    fn server_errors_and_resets_fail_while_client_errors_do_not() {
        assert_eq!(is_failure(&Ok(resp(500, &[]))), Some(true));
        assert_eq!(is_failure(&Ok(resp(503, &[]))), Some(true));
        assert_eq!(is_failure(&Ok(resp(404, &[]))), Some(false));
        assert_eq!(is_failure(&Ok(resp(429, &[]))), Some(false));
        let bad: Result<Response<()>, _> = Err(ProxyError::BadRequest("x"));
        assert_eq!(is_failure(&bad), None, "never reached the upstream");
    }

    #[test]
    fn a_grpc_200_carrying_unavailable_is_a_failure_and_not_found_is_not() {
        let ct = ("content-type", "application/grpc");
        assert_eq!(
            is_failure(&Ok(resp(200, &[ct, ("grpc-status", "14")]))),
            Some(true)
        );
        assert_eq!(
            is_failure(&Ok(resp(200, &[ct, ("grpc-status", "5")]))),
            Some(false)
        );
        assert_eq!(is_failure(&Ok(resp(200, &[ct]))), Some(false), "streaming");
    }

    #[test]
    fn a_429_costs_its_retry_after_capped_and_a_plain_503_costs_nothing() {
        assert_eq!(
            throttle_penalty(&resp(429, &[])),
            Some(DEFAULT_THROTTLE_PENALTY)
        );
        assert_eq!(
            throttle_penalty(&resp(429, &[("retry-after", "3")])),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            throttle_penalty(&resp(503, &[("retry-after", "3600")])),
            Some(MAX_THROTTLE_PENALTY)
        );
        assert_eq!(throttle_penalty(&resp(503, &[])), None);
        assert_eq!(throttle_penalty(&resp(200, &[("retry-after", "3")])), None);
    }
}
