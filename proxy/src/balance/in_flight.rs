//! One request in flight to one endpoint, and how it ended as the balancer and the endpoint's
//! breaker count it: an answer (a latency sample; a failure if the upstream's fault), an error
//! before any answer (a refused connect is a failure), or a deadline that cut it short (a failure,
//! and at least that long a latency).

use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use http::Response;
use tokio::time::Instant;

use super::{nanos_at, now_nanos, EndpointState};
use crate::{
    error::ProxyError,
    resilience::{breaker::Admission, outcome},
};

/// A request in flight to one endpoint; dropping it without ending it counts the request as
/// cancelled: no latency sample, nothing for the breaker (a probe's slot goes back, so the next
/// request probes instead).
#[derive(Debug)]
#[must_use = "dropping it at once ends the request"]
pub struct InFlight {
    endpoint: Arc<EndpointState>,
    admission: Option<Admission>,
}

impl InFlight {
    /// Counted by [`EndpointState::start`], which admitted it through the breaker (if any).
    pub(super) fn new(endpoint: Arc<EndpointState>, admission: Option<Admission>) -> Self {
        Self {
            endpoint,
            admission,
        }
    }

    /// The endpoint the request went to.
    pub fn endpoint(&self) -> &Arc<EndpointState> {
        &self.endpoint
    }

    /// Whether this request is its endpoint's half-open probe.
    pub fn is_probe(&self) -> bool {
        self.admission.as_ref().is_some_and(Admission::is_probe)
    }

    /// Ends the request, recording how long the endpoint took.
    pub fn finish(self, rtt: Duration) {
        self.endpoint.ewma.observe(rtt, now_nanos());
    }

    /// Ends the request with its result and a given latency (tests; the request path uses
    /// [`complete_since`](Self::complete_since)).
    #[cfg(test)]
    pub(crate) fn complete<B>(self, result: &Result<Response<B>, ProxyError>, rtt: Duration) {
        self.complete_at(result, rtt, now_nanos());
    }

    /// Ends the request sent at `sent` with its result: the breaker hears whether the upstream
    /// failed, and an answer is a latency sample, raised to the penalty an upstream 429 /
    /// `Retry-After` asks. One clock read serves both the latency and the sample's time.
    pub fn complete_since<B>(self, result: &Result<Response<B>, ProxyError>, sent: Instant) {
        let now = Instant::now();
        self.complete_at(result, now.saturating_duration_since(sent), nanos_at(now));
    }

    fn complete_at<B>(mut self, result: &Result<Response<B>, ProxyError>, rtt: Duration, at: u64) {
        if let Some(a) = self.admission.take() {
            if let Some(failed) = outcome::is_failure(result) {
                a.record(!failed);
            }
        }
        if let Ok(resp) = result {
            let penalty = outcome::throttle_penalty(resp).unwrap_or_default();
            self.endpoint.ewma.observe(rtt.max(penalty), at);
        }
    }

    /// The connection a long-lived stream needs (an opaque TCP relay) is up: a success for the
    /// breaker (a half-open probe closes it), no latency sample; the stream stays counted in
    /// flight until this is dropped.
    pub fn connected(&mut self) {
        if let Some(a) = self.admission.take() {
            a.record(true);
        }
    }

    /// Ends a request that failed before any answer (e.g. its connect was refused): a failure
    /// for the breaker when the upstream is to blame; no latency sample.
    pub fn fail(mut self, error: &ProxyError) {
        if let (Some(a), Some(failed)) = (self.admission.take(), outcome::error_is_failure(error)) {
            a.record(!failed);
        }
    }

    /// Ends a request a deadline cut off after `waited`: a failure for the breaker, and the
    /// endpoint's latency estimate rises to at least `waited`, so the balancer shies away from
    /// an endpoint too slow for its deadlines.
    pub fn timed_out(mut self, waited: Duration) {
        if let Some(a) = self.admission.take() {
            a.record(false);
        }
        self.endpoint.ewma.observe_at_least(waited, now_nanos());
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.endpoint.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        addr::EndpointAddr,
        balance::EndpointSet,
        model,
        resilience::breaker::{BreakerPolicy, State},
    };
    use tokio::time::advance;

    const SEC: Duration = Duration::from_secs(1);

    /// Two endpoints whose breakers eject after `n` failures in a row for 1 s (floor 1).
    fn set(n: u32) -> EndpointSet {
        let s = crate::balance::loopback_set(None, &[1, 2]);
        let p = model::CircuitBreakerPolicy {
            consecutive_failures: Some(n),
            min_ejection: Some(model::Dur(SEC)),
            ..Default::default()
        };
        s.arm_breakers(Some(&BreakerPolicy::new(&p)), "svc");
        s
    }

    fn refused() -> ProxyError {
        ProxyError::Connect {
            addr: EndpointAddr(([127, 0, 0, 1], 1).into()),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        }
    }

    fn state(e: &Arc<EndpointState>) -> Option<State> {
        e.breaker().map(|b| b.state())
    }

    #[tokio::test(start_paused = true)]
    async fn refused_connects_eject_the_endpoint() {
        let s = set(3);
        let e = &s.endpoints()[0];
        for _ in 0..2 {
            e.start().fail(&refused());
        }
        assert_eq!(state(e), Some(State::Closed));
        e.start()
            .fail(&ProxyError::BadRequest("the request's own fault"));
        e.start().fail(&refused());
        assert_eq!(state(e), Some(State::Open));
        assert_eq!(e.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_eject_and_raise_the_latency_estimate() {
        let s = set(2);
        let e = &s.endpoints()[0];
        e.start().finish(Duration::from_millis(5));
        e.start().timed_out(Duration::from_millis(800));
        assert_eq!(e.rtt_estimate(), Duration::from_millis(800));
        e.start().finish(Duration::from_millis(900));
        e.start().timed_out(Duration::from_millis(100));
        assert_eq!(
            e.rtt_estimate(),
            Duration::from_millis(900),
            "a cut-off shorter than the estimate lowers nothing"
        );
        assert_eq!(state(e), Some(State::Open), "two timeouts in a row");
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_cut_by_its_deadline_ejects_again_for_twice_as_long() {
        let s = set(1);
        let e = &s.endpoints()[0];
        e.start().timed_out(SEC);
        advance(SEC).await;
        let probe = e.start();
        assert!(probe.is_probe());
        probe.timed_out(SEC);
        let b = e.breaker().expect("armed");
        assert_eq!(b.state(), State::Open);
        assert_eq!(b.ejected_for(), Some(2 * SEC));
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_dropped_unfinished_lets_the_next_request_probe() {
        let s = set(1);
        let e = &s.endpoints()[0];
        e.start().fail(&refused());
        advance(SEC).await;
        let probe = e.start();
        assert!(probe.is_probe());
        assert!(!e.breaker_available(), "one probe at a time");
        drop(probe);
        assert!(e.breaker_available(), "not stuck probing");
        let next = e.start();
        assert!(next.is_probe());
        next.complete(&Ok::<_, ProxyError>(Response::new(())), SEC);
        assert_eq!(state(e), Some(State::Closed));
    }
}
