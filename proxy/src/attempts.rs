//! The timeout and retry stage around one upstream attempt: a deadline for the whole request
//! (the route's `timeouts.request`, else the service's `timeout`, and the client's
//! `grpc-timeout`), a deadline per try (`timeouts.backendRequest`), and retries as the route's
//! [`RetryRule`] classifies each outcome, bounded by its attempts, the service's [`Budget`] and a
//! jittered backoff.
//!
//! A response head goes back to the client only after it has been classified, so a retry is
//! always decided before a byte of the response left the proxy: nothing is retried once a
//! response streams. A request body is kept for a retry ([`ReplayBody`], up to 64 KiB) only on
//! routes that may resend a sent request, and for HTTP/2 upstreams, which may refuse a stream
//! unprocessed after it left; everywhere else the body streams as it always did, and only what
//! provably never reached an upstream (a refused connect) is tried again.
//!
//! [`Budget`]: crate::resilience::budget::Budget

use std::{sync::Arc, time::Duration};

use http::{request::Parts, HeaderMap, Method, Response};
use http_body::Body as _;
use tokio::time::Instant;

use crate::{
    app::Shared,
    balance::{EndpointState, InFlight},
    discovery::index::ServiceTarget,
    error::ProxyError,
    forward,
    http::{
        body::{ClientBody, ProxyBody},
        pool::{Conn, UpstreamProto},
        trailers::Cleaned,
    },
    metrics::RouteMetrics,
    resilience::{
        grpc,
        policy::RoutePolicy,
        replay::{ReplayBody, MAX_REPLAY},
        replay_head::HeadCopy,
        retry::{Attempt, Outcome, Retry, RetryRule},
        timeout::{self, Deadline, TimeoutKind, Timeouts},
    },
};

mod flight;

/// Sends a prepared (non-upgrade) request to `svc` under `route`'s timeouts and retry rule;
/// retries and budget refusals are counted on `metrics`.
pub async fn run(
    shared: &Shared,
    svc: &ServiceTarget,
    route: &RoutePolicy,
    metrics: Option<&RouteMetrics>,
    proto: UpstreamProto,
    parts: Box<Parts>,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    let grpc = grpc::is_grpc(&parts.headers);
    let start = Instant::now();
    let deadline = request_deadline(route, svc, &parts.headers, grpc, start);
    let rule = &route.retry;
    let budget = &svc.policy.budget;
    budget.deposit_at(start);
    let method = parts.method.clone();
    let (source, first) = Source::choose(rule, &method, grpc, proto, body);
    // Only a route that may resend a sent request pays for a copy of the head.
    let template = source.resendable().then(|| HeadCopy::of(&parts));
    let (mut parts, mut body) = (parts, first);
    let mut retries_done = 0;
    let mut ep = svc
        .endpoints
        .pick()
        .ok_or_else(|| ProxyError::NoEndpoints(svc.name.clone()))?;
    loop {
        // The first attempt begins when the request does (one clock read fewer per request),
        // except that a gRPC one tells the upstream what is left of its deadline as it leaves.
        let now = if retries_done == 0 && !grpc {
            start
        } else {
            Instant::now()
        };
        let attempt_deadline = timeout::attempt_deadline(now, deadline, route.timeouts.per_try());
        if let Some(d) = attempt_deadline.filter(|_| grpc) {
            // The upstream gives up when we would: its answer after that is wasted work.
            let left = grpc::format_timeout(d.remaining(now));
            parts.headers.insert(grpc::GRPC_TIMEOUT, left);
        }
        // Trailers may not bring back what the route's filters set or removed in the head.
        let sent = Cleaned::wrap(body, Some(&route.trailer_drops));
        // Held out here so that an attempt its deadline cuts short still reaches the breaker.
        let mut flight = Some(ep.start());
        let tried = match attempt_deadline {
            Some(d) => tokio::time::timeout_at(
                d.at,
                once(shared, ep, &mut flight, proto, now, parts, sent),
            )
            .await
            .unwrap_or(Tried::TimedOut(d.kind)),
            None => once(shared, ep, &mut flight, proto, now, parts, sent).await,
        };
        if let (Tried::TimedOut(kind), Some(f)) = (&tried, flight.take()) {
            flight::timed_out(f, *kind, now);
        }
        let attempt = Attempt {
            method: &method,
            grpc,
            retries_done,
            response_started: false,
        };
        let (wants, not_sent) = match &tried {
            Tried::TimedOut(kind) if kind.ends_request() => {
                return Err(ProxyError::Timeout(*kind));
            }
            Tried::Answered(r) => {
                let outcome = Outcome::Response {
                    status: r.status(),
                    headers: r.headers(),
                };
                (rule.classify(&attempt, &outcome), false)
            }
            Tried::NotSent(..) => (rule.classify(&attempt, &Outcome::NotSent), true),
            Tried::Failed(e) if e.is_retryable() => {
                (rule.classify(&attempt, &Outcome::NotSent), true)
            }
            Tried::Failed(_) | Tried::TimedOut(_) => {
                (rule.classify(&attempt, &Outcome::Lost), false)
            }
        };
        let (result, back) = tried.into_parts();
        if wants == Retry::No {
            return result;
        }
        let next = back.or_else(|| {
            let parts = Box::new(template.as_ref()?.parts()?);
            Some((parts, source.again()?))
        });
        let Some(next) = next else {
            return result;
        };
        // Chosen before the answer is let go: with every endpoint ejected now (this attempt may
        // have tripped the last breaker), the client gets that answer, not `no-endpoints`.
        let Some(next_ep) = svc.endpoints.pick_other(Some(ep.addr())) else {
            return result;
        };
        // Nothing reached the upstream, and the failed endpoint is now marked down: no reason
        // to wait before the next one.
        let delay = if not_sent {
            Duration::ZERO
        } else {
            rule.backoff().delay(retries_done + 1)
        };
        if !timeout::leaves_room(deadline, Instant::now(), delay) {
            return result;
        }
        if !budget.try_withdraw() {
            if let Some(m) = metrics {
                m.budget_exhausted();
            }
            return result;
        }
        if let Some(m) = metrics {
            m.retry();
        }
        drop(result);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        retries_done += 1;
        (parts, body) = next;
        ep = next_ep;
    }
}

/// The request deadline: the route's own request timeout, else the backend service's `timeout`
/// (gateway routes, and mesh routes whose service sets none), and a gRPC call's incoming
/// `grpc-timeout` (`grpc` set), whichever ends first.
fn request_deadline(
    route: &RoutePolicy,
    svc: &ServiceTarget,
    headers: &HeaderMap,
    grpc: bool,
    now: Instant,
) -> Option<Deadline> {
    let grpc_timeout = grpc
        .then(|| headers.get(grpc::GRPC_TIMEOUT))
        .flatten()
        .and_then(grpc::parse_timeout);
    let timeouts = match route.timeouts.request() {
        Some(_) => route.timeouts,
        None => Timeouts::new(route.source.timeouts.as_ref(), svc.policy.source.timeout),
    };
    timeouts.request_deadline(now, grpc_timeout)
}

/// What became of one attempt.
enum Tried {
    /// A response head arrived.
    Answered(Response<ProxyBody>),
    /// The connection could not be had: the request comes back untouched.
    NotSent(ProxyError, Box<Parts>, ProxyBody),
    /// The exchange failed after the request was handed over.
    Failed(ProxyError),
    /// The attempt's deadline passed.
    TimedOut(TimeoutKind),
}

/// An attempt's answer, and its request when it came back unsent.
type Settled = (
    Result<Response<ProxyBody>, ProxyError>,
    Option<(Box<Parts>, ProxyBody)>,
);

impl Tried {
    /// The answer this attempt would give, and the request when it came back unsent.
    fn into_parts(self) -> Settled {
        match self {
            Tried::Answered(r) => (Ok(r), None),
            Tried::NotSent(e, p, b) => (Err(e), Some((p, b))),
            Tried::Failed(e) => (Err(e), None),
            Tried::TimedOut(kind) => (Err(ProxyError::Timeout(kind)), None),
        }
    }
}

/// One attempt on one endpoint, begun at `begun`: a connection, then the exchange up to the
/// response head; `flight` (the endpoint's in-flight count and breaker ticket) is ended with
/// what happened.
async fn once(
    shared: &Shared,
    ep: &Arc<EndpointState>,
    flight: &mut Option<InFlight>,
    proto: UpstreamProto,
    begun: Instant,
    parts: Box<Parts>,
    body: ProxyBody,
) -> Tried {
    let pool = shared.pools.get(ep.addr());
    let acquired = pool.acquire(proto).await;
    let conn = match acquired {
        Ok(conn) => conn,
        Err(e) => return flight::refused(ep, flight.take(), e, parts, body),
    };
    // A pooled connection was there at once: the attempt's start is when it was sent.
    let sent = match conn {
        Conn::H1 { reused: true, .. } => begun,
        _ => Instant::now(),
    };
    let result = forward::exchange(&pool, Some(ep), Some(conn), parts, body, false).await;
    if let Some(f) = flight.take() {
        f.complete_since(&result, sent);
    }
    match result {
        Ok(mut resp) => {
            shared.access_log.note_upstream(&mut resp, ep.addr().0);
            Tried::Answered(resp)
        }
        Err(e) => Tried::Failed(e),
    }
}

/// Where a retry's body comes from.
enum Source {
    /// The request has no body: every attempt sends none.
    Empty,
    /// A copy kept for retries (the first attempt reads the client's body through it).
    Replay(ReplayBody<ClientBody>),
    /// The client's body streams once; only an attempt that never took it can be retried.
    Once,
    /// The client's body, read whole with its head: every attempt sends it again.
    Whole(bytes::Bytes),
}

impl Source {
    /// The source for this request and the first attempt's body. A body is wrapped only when
    /// a request that went out could be sent again and the body may fit the replay buffer: the
    /// rule retries a lost request, or the upstream speaks HTTP/2, whose streams can be refused
    /// unprocessed (REFUSED_STREAM, GOAWAY) after they left, which every rule but `attempts: 0`
    /// retries.
    fn choose(
        rule: &RetryRule,
        method: &Method,
        grpc: bool,
        proto: UpstreamProto,
        body: ProxyBody,
    ) -> (Source, ProxyBody) {
        let first = Attempt {
            method,
            grpc,
            retries_done: 0,
            response_started: false,
        };
        let resends_lost = rule.classify(&first, &Outcome::Lost) == Retry::Yes;
        let resends_refused =
            proto == UpstreamProto::H2 && rule.classify(&first, &Outcome::NotSent) == Retry::Yes;
        if !resends_lost && !resends_refused {
            return (Source::Once, body);
        }
        if body.is_end_stream() {
            return (Source::Empty, ProxyBody::Empty);
        }
        if body.size_hint().lower() > MAX_REPLAY as u64 {
            return (Source::Once, body);
        }
        let client = match body {
            ProxyBody::Full(Some(b)) => {
                return (Source::Whole(b.clone()), ProxyBody::Full(Some(b)))
            }
            ProxyBody::Incoming(b) => ClientBody::Plain(b),
            ProxyBody::Tee(t) => ClientBody::Teed(t),
            ProxyBody::Touched(t) => ClientBody::Touched(t),
            // Bodies the proxy made itself are not forwarded to services.
            other => return (Source::Once, other),
        };
        let replay = ReplayBody::new(client);
        (Source::Replay(replay.clone()), ProxyBody::Replay(replay))
    }

    /// Whether a request already handed to an upstream could be sent again.
    fn resendable(&self) -> bool {
        !matches!(self, Source::Once)
    }

    /// The body for a retry; `None` once the body outgrew the replay buffer.
    fn again(&self) -> Option<ProxyBody> {
        match self {
            Source::Empty => Some(ProxyBody::Empty),
            Source::Replay(seed) => seed
                .is_replayable()
                .then(|| ProxyBody::Replay(seed.clone())),
            Source::Once => None,
            Source::Whole(b) => Some(ProxyBody::Full(Some(b.clone()))),
        }
    }
}
