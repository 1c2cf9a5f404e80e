//! How an attempt that got no answer ends for its endpoint: a failed connect takes the endpoint
//! out for its backoff and counts against its breaker; an attempt cut off by the route's
//! deadlines counts against the breaker and raises its latency estimate. The client's own
//! `grpc-timeout` blames no endpoint: a client in a hurry must not eject a service.

use http::request::Parts;
use tokio::time::Instant;

use super::Tried;
use crate::{
    balance::{EndpointState, InFlight},
    error::ProxyError,
    http::body::ProxyBody,
    resilience::timeout::TimeoutKind,
};

/// The connection to `ep` could not be had: the request comes back unsent when that is safe.
pub(super) fn refused(
    ep: &EndpointState,
    flight: Option<InFlight>,
    e: ProxyError,
    parts: Box<Parts>,
    body: ProxyBody,
) -> Tried {
    if matches!(e, ProxyError::Connect { .. }) {
        ep.connect_failed();
        metrics::counter!(crate::metrics::ENDPOINT_DOWN).increment(1);
    }
    if let Some(f) = flight {
        f.fail(&e);
    }
    if e.is_retryable() {
        Tried::NotSent(e, parts, body)
    } else {
        Tried::Failed(e)
    }
}

/// The attempt begun at `begun` was cut off by a deadline of `kind`.
pub(super) fn timed_out(flight: InFlight, kind: TimeoutKind, begun: Instant) {
    match kind {
        TimeoutKind::Request | TimeoutKind::PerTry | TimeoutKind::Idle => {
            flight.timed_out(begun.elapsed())
        }
        // Dropped: counted as cancelled (a probe's slot goes back).
        TimeoutKind::Grpc => drop(flight),
    }
}
