//! Deadlines: the request timeout over all attempts, the per-try timeout and an incoming
//! `grpc-timeout`, folded into the one deadline each attempt runs against.

use std::time::Duration;

use tokio::time::Instant;

use crate::model;

/// Which limit a deadline comes from: it decides the error name, and whether a retry may follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// The route's `timeouts.request` (or the service's `timeout`): ends the whole request.
    Request,
    /// The client's `grpc-timeout`: ends the whole request (gRPC answers DEADLINE_EXCEEDED).
    Grpc,
    /// The route's `timeouts.backendRequest`: ends this attempt; the next may be retried.
    PerTry,
    /// The stream idle timeout (`timeouts.idle`): nothing moved while waiting for the head.
    Idle,
}

impl TimeoutKind {
    /// The `weir-proxy-error` value and metric label.
    pub fn name(self) -> &'static str {
        match self {
            TimeoutKind::Request => "request-timeout",
            TimeoutKind::Grpc => "grpc-deadline",
            TimeoutKind::PerTry => "per-try-timeout",
            TimeoutKind::Idle => "idle-timeout",
        }
    }

    /// Whether hitting it ends the request (no retry can follow).
    pub fn ends_request(self) -> bool {
        !matches!(self, TimeoutKind::PerTry)
    }
}

/// A point in time on tokio's clock, and what put it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// When it fires (`tokio::time::timeout_at` takes it as is).
    pub at: Instant,
    /// Why.
    pub kind: TimeoutKind,
}

impl Deadline {
    /// Time left at `now` (zero once passed): the `grpc-timeout` to send upstream.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    fn earliest(a: Option<Deadline>, b: Option<Deadline>) -> Option<Deadline> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// A route's timeouts, compiled once per registry snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    request: Option<Duration>,
    per_try: Option<Duration>,
}

impl Timeouts {
    /// From the route's `timeouts` (HTTPRoute: `request`, `backendRequest`) over the service's
    /// `timeout`, which stands in when the route sets no `request`. Zero means no limit, as in
    /// Gateway API.
    pub fn new(route: Option<&model::RouteTimeouts>, service: Option<model::Dur>) -> Self {
        let nonzero = |d: Option<model::Dur>| d.map(|d| d.0).filter(|d| !d.is_zero());
        let route_request = route.and_then(|t| t.request);
        Self {
            request: nonzero(route_request.or(service)),
            per_try: nonzero(route.and_then(|t| t.backend_request)),
        }
    }

    /// The request timeout, if any.
    pub fn request(&self) -> Option<Duration> {
        self.request
    }

    /// The per-try timeout, if any.
    pub fn per_try(&self) -> Option<Duration> {
        self.per_try
    }

    /// The deadline of the whole request that `arrived` at that instant, carrying `grpc_timeout`
    /// (parsed with [`super::grpc::parse_timeout`]): whichever comes first.
    pub fn request_deadline(
        &self,
        arrived: Instant,
        grpc_timeout: Option<Duration>,
    ) -> Option<Deadline> {
        let at = |d: Duration, kind| Deadline {
            at: arrived.checked_add(d).unwrap_or_else(far_future),
            kind,
        };
        Deadline::earliest(
            self.request.map(|d| at(d, TimeoutKind::Request)),
            grpc_timeout.map(|d| at(d, TimeoutKind::Grpc)),
        )
    }
}

/// The deadline of an attempt starting at `now`: the request's, or the per-try timeout if that
/// ends first (a tie goes to the request: nothing is left to retry with).
pub fn attempt_deadline(
    now: Instant,
    request: Option<Deadline>,
    per_try: Option<Duration>,
) -> Option<Deadline> {
    let per_try = per_try.map(|d| Deadline {
        at: now.checked_add(d).unwrap_or_else(far_future),
        kind: TimeoutKind::PerTry,
    });
    Deadline::earliest(request, per_try)
}

/// Whether waiting `backoff` from `now` still leaves time before the request deadline; a retry
/// that would start dead is not worth a budget token.
pub fn leaves_room(request: Option<Deadline>, now: Instant, backoff: Duration) -> bool {
    request.is_none_or(|d| d.remaining(now) > backoff)
}

fn far_future() -> Instant {
    // About 30 years: what tokio itself uses for "never".
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Dur, RouteTimeouts};

    const MS: Duration = Duration::from_millis(1);

    fn route(request: Option<u64>, per_try: Option<u64>) -> RouteTimeouts {
        RouteTimeouts {
            request: request.map(|ms| Dur(Duration::from_millis(ms))),
            backend_request: per_try.map(|ms| Dur(Duration::from_millis(ms))),
            idle: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_route_request_timeout_overrides_the_service_timeout() {
        let now = Instant::now();
        let t = Timeouts::new(Some(&route(Some(2000), None)), Some(Dur(10_000 * MS)));
        let d = t.request_deadline(now, None).expect("a deadline");
        assert_eq!((d.at - now, d.kind), (2000 * MS, TimeoutKind::Request));
        let t = Timeouts::new(Some(&route(None, Some(500))), Some(Dur(10_000 * MS)));
        let d = t.request_deadline(now, None).expect("a deadline");
        assert_eq!(d.at - now, 10_000 * MS, "the service's timeout stands in");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_and_absent_timeouts_mean_no_deadline() {
        let now = Instant::now();
        assert_eq!(Timeouts::default().request_deadline(now, None), None);
        let t = Timeouts::new(Some(&route(Some(0), Some(0))), None);
        assert_eq!(t.request_deadline(now, None), None);
        assert_eq!(t.per_try(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_grpc_timeout_wins_over_the_route_timeout() {
        let now = Instant::now();
        let t = Timeouts::new(Some(&route(Some(2000), None)), None);
        let d = t.request_deadline(now, Some(100 * MS)).expect("a deadline");
        assert_eq!((d.at - now, d.kind), (100 * MS, TimeoutKind::Grpc));
        let d = t
            .request_deadline(now, Some(5000 * MS))
            .expect("a deadline");
        assert_eq!(d.kind, TimeoutKind::Request);
        let d = Timeouts::default()
            .request_deadline(now, Some(MS))
            .expect("grpc alone sets a deadline");
        assert_eq!(d.kind, TimeoutKind::Grpc);
    }

    #[tokio::test(start_paused = true)]
    async fn each_attempt_gets_the_per_try_timeout_until_the_request_deadline_is_nearer() {
        let start = Instant::now();
        let t = Timeouts::new(Some(&route(Some(1000), Some(400))), None);
        let request = t.request_deadline(start, None);
        let first = attempt_deadline(start, request, t.per_try()).expect("a deadline");
        assert_eq!(
            (first.at - start, first.kind),
            (400 * MS, TimeoutKind::PerTry)
        );
        tokio::time::advance(400 * MS).await;
        let second = attempt_deadline(Instant::now(), request, t.per_try()).expect("a deadline");
        assert_eq!(
            (second.at - start, second.kind),
            (800 * MS, TimeoutKind::PerTry)
        );
        tokio::time::advance(400 * MS).await;
        let third = attempt_deadline(Instant::now(), request, t.per_try()).expect("a deadline");
        assert_eq!(
            (third.at - start, third.kind),
            (1000 * MS, TimeoutKind::Request)
        );
        assert!(third.kind.ends_request());
        assert_eq!(third.remaining(Instant::now()), 200 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backoff_past_the_deadline_leaves_no_room_for_a_retry() {
        let now = Instant::now();
        let request =
            Timeouts::new(Some(&route(Some(100), None)), None).request_deadline(now, None);
        assert!(leaves_room(request, now, 50 * MS));
        assert!(!leaves_room(request, now, 100 * MS));
        assert!(leaves_room(None, now, Duration::from_secs(3600)));
    }
}
