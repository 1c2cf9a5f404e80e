//! Circuit breaker: takes a failing endpoint (or route) out for an exponentially growing time,
//! then lets one probe through to decide whether it comes back.

use std::{
    fmt,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use super::{nanos, now_nanos, window::SlidingCount};
use crate::model;

mod gate;

pub use gate::EjectionGate;

/// Consecutive failures that eject when the policy names no trigger (Linkerd's 7).
pub const DEFAULT_CONSECUTIVE_FAILURES: u32 = 7;
/// First ejection when the policy sets none (Linkerd's 1 s).
pub const DEFAULT_MIN_EJECTION: Duration = Duration::from_secs(1);
/// Longest ejection when the policy sets none (Linkerd's 60 s).
pub const DEFAULT_MAX_EJECTION: Duration = Duration::from_secs(60);
/// Ready endpoints an ejection may not go below when the policy sets no floor.
pub const DEFAULT_MIN_READY: u32 = 1;
/// Requests in the success-rate window before it may eject, when `minRequests` is left out.
pub const DEFAULT_MIN_REQUESTS: u32 = 5;

/// A `circuitBreaker` policy, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    consecutive: Option<u32>,
    success_rate: Option<(f64, Duration, u32)>,
    min_ejection: Duration,
    max_ejection: Duration,
    /// The `minReadyEndpoints` floor, for the caller's [`EjectionGate`].
    pub min_ready: u32,
}

impl BreakerPolicy {
    /// Defaults: with neither trigger set, 7 consecutive failures; ejection 1 s doubling to
    /// 60 s; floor 1 ready endpoint; `minRequests` 0 (left out) means 5.
    pub fn new(p: &model::CircuitBreakerPolicy) -> Self {
        let success_rate = p.success_rate.as_ref().map(|sr| {
            let min = if sr.min_requests == 0 {
                DEFAULT_MIN_REQUESTS
            } else {
                sr.min_requests
            };
            (sr.threshold, sr.window.0, min)
        });
        let consecutive = match (p.consecutive_failures, &success_rate) {
            (Some(n), _) => Some(n.max(1)),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_CONSECUTIVE_FAILURES),
        };
        let min_ejection = p.min_ejection.map_or(DEFAULT_MIN_EJECTION, |d| d.0);
        Self {
            consecutive,
            success_rate,
            min_ejection,
            max_ejection: p
                .max_ejection
                .map_or(DEFAULT_MAX_EJECTION, |d| d.0)
                .max(min_ejection),
            min_ready: p.min_ready_endpoints.unwrap_or(DEFAULT_MIN_READY),
        }
    }

    /// The ejection after `n` earlier ones in a row: `min × 2^n`, at most `max`.
    pub fn ejection(&self, n: u32) -> Duration {
        self.min_ejection
            .saturating_mul(1 << n.min(31))
            .min(self.max_ejection)
    }
}

/// A change of state, reported to the breaker's observer (metrics, `weirctl describe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Taken out for this long.
    Ejected(Duration),
    /// The ejection ended; one probe request is let through.
    Probing,
    /// The probe succeeded: back in service.
    Closed,
    /// The failures called for an ejection, but it would have left fewer ready endpoints than the
    /// floor; counting starts again.
    EjectionRefused,
}

/// Called on every [`Transition`]; runs on the request path, so it should only count.
pub type Observer = Arc<dyn Fn(Transition) + Send + Sync>;

/// What [`CircuitBreaker::state`] sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Taking requests.
    Closed,
    /// Ejected: skip it.
    Open,
    /// The ejection is over; the next request is the probe (or the probe is in flight).
    HalfOpen,
}

/// One endpoint's (or one route's) breaker, shared by every worker thread.
pub struct CircuitBreaker {
    policy: BreakerPolicy,
    gate: Arc<EjectionGate>,
    observer: Option<Observer>,
    consecutive: AtomicU32,
    successes: SlidingCount,
    failures: SlidingCount,
    /// `now_nanos()` until which requests are refused; `0` = closed.
    ejected_until: AtomicU64,
    /// Ejections in a row without a successful probe: the doubling exponent.
    ejections: AtomicU32,
    probing: AtomicBool,
}

impl CircuitBreaker {
    /// A closed breaker counting against `gate` (one gate per endpoint set; for a route, a gate
    /// of its own: [`EjectionGate::unbounded`]).
    pub fn new(
        policy: BreakerPolicy,
        gate: Arc<EjectionGate>,
        observer: Option<Observer>,
    ) -> Arc<Self> {
        let window = policy
            .success_rate
            .map_or(Duration::from_secs(10), |(_, w, _)| w);
        Arc::new(Self {
            policy,
            gate,
            observer,
            consecutive: AtomicU32::new(0),
            successes: SlidingCount::new(window),
            failures: SlidingCount::new(window),
            ejected_until: AtomicU64::new(0),
            ejections: AtomicU32::new(0),
            probing: AtomicBool::new(false),
        })
    }

    /// The state now; the balancer skips `Open` endpoints, and `HalfOpen` ones whose probe is
    /// already in flight.
    pub fn state(&self) -> State {
        match self.ejected_until.load(Ordering::Acquire) {
            0 => State::Closed,
            until if now_nanos() < until => State::Open,
            _ => State::HalfOpen,
        }
    }

    /// Whether a request would be admitted now (without admitting it).
    pub fn is_available(&self) -> bool {
        match self.state() {
            State::Closed => true,
            State::Open => false,
            State::HalfOpen => !self.probing.load(Ordering::Acquire),
        }
    }

    /// How much longer the ejection lasts: `None` when closed, zero once half-open.
    pub fn ejected_for(&self) -> Option<Duration> {
        match self.ejected_until.load(Ordering::Acquire) {
            0 => None,
            until => Some(Duration::from_nanos(until.saturating_sub(now_nanos()))),
        }
    }

    /// Ejections in a row since it last passed a probe (what doubles the next ejection).
    pub fn ejections(&self) -> u32 {
        self.ejections.load(Ordering::Acquire)
    }

    /// The policy it was built from (a reload keeps the breaker only when this is unchanged).
    pub fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    /// The gate it counts against (shared by its endpoint set).
    pub fn gate(&self) -> &Arc<EjectionGate> {
        &self.gate
    }

    /// Its observer, for breakers added to the same set later.
    pub fn observer(&self) -> Option<&Observer> {
        self.observer.as_ref()
    }

    /// Admits a request, or `None` while ejected (and while another request is the probe).
    /// Report the outcome through the returned [`Admission`].
    pub fn try_admit(self: &Arc<Self>) -> Option<Admission> {
        let probe = match self.state() {
            State::Closed => false,
            State::Open => return None,
            State::HalfOpen => {
                self.probing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .ok()?;
                self.notify(Transition::Probing);
                true
            }
        };
        Some(Admission {
            breaker: Arc::clone(self),
            probe,
            recorded: false,
        })
    }

    fn record(&self, probe: bool, success: bool) {
        // The clock is read only where it is needed: not on a success without a success rate,
        // which is nearly every request.
        if probe {
            return if success {
                self.close()
            } else {
                self.eject_again(now_nanos())
            };
        }
        if self.ejected_until.load(Ordering::Acquire) != 0 {
            // A request admitted before the ejection: the verdict is already in.
            return;
        }
        if success {
            // Read first: a write per request would bounce the cache line between threads.
            if self.consecutive.load(Ordering::Relaxed) != 0 {
                self.consecutive.store(0, Ordering::Relaxed);
            }
            if self.policy.success_rate.is_some() {
                self.successes.add(now_nanos(), 1);
            }
            return;
        }
        let now = now_nanos();
        let run = self.consecutive.fetch_add(1, Ordering::AcqRel) + 1;
        let mut trip = self.policy.consecutive.is_some_and(|n| run >= n);
        if let Some((threshold, _, min_requests)) = self.policy.success_rate {
            self.failures.add(now, 1);
            let failed = self.failures.sum(now);
            let total = failed + self.successes.sum(now);
            let rate = 1.0 - failed as f64 / total as f64;
            trip |= total >= u64::from(min_requests) && rate < threshold;
        }
        if trip {
            self.trip(now);
        }
    }

    fn trip(&self, now: u64) {
        self.reset_counts();
        if !self.gate.try_eject() {
            self.notify(Transition::EjectionRefused);
            return;
        }
        let n = self.ejections.load(Ordering::Acquire);
        let d = self.policy.ejection(n);
        let until = now.saturating_add(nanos(d)).max(1);
        if self
            .ejected_until
            .compare_exchange(0, until, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // A racing failure ejected it first; this one's place in the gate goes back.
            self.gate.restore();
            return;
        }
        self.ejections.store(n.saturating_add(1), Ordering::Release);
        self.notify(Transition::Ejected(d));
    }

    /// The probe failed: out again, for twice as long. Its place in the gate stays taken.
    fn eject_again(&self, now: u64) {
        let n = self.ejections.load(Ordering::Acquire);
        let d = self.policy.ejection(n);
        self.ejected_until
            .store(now.saturating_add(nanos(d)).max(1), Ordering::Release);
        self.ejections.store(n.saturating_add(1), Ordering::Release);
        self.probing.store(false, Ordering::Release);
        self.notify(Transition::Ejected(d));
    }

    fn close(&self) {
        self.reset_counts();
        self.ejections.store(0, Ordering::Release);
        self.ejected_until.store(0, Ordering::Release);
        self.probing.store(false, Ordering::Release);
        self.gate.restore();
        self.notify(Transition::Closed);
    }

    fn reset_counts(&self) {
        self.consecutive.store(0, Ordering::Release);
        self.successes.clear();
        self.failures.clear();
    }

    fn notify(&self, t: Transition) {
        if let Some(observer) = &self.observer {
            observer(t);
        }
    }
}

impl Drop for CircuitBreaker {
    /// An endpoint leaving the set while ejected gives its place in the gate back.
    fn drop(&mut self) {
        if *self.ejected_until.get_mut() != 0 {
            self.gate.restore();
        }
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("state", &self.state())
            .field("consecutive", &self.consecutive.load(Ordering::Relaxed))
            .finish()
    }
}

/// One admitted request; report how it went with [`Admission::record`]. Dropping it unrecorded
/// (a cancelled request) counts as nothing, and frees the probe slot if it was the probe.
#[derive(Debug)]
pub struct Admission {
    breaker: Arc<CircuitBreaker>,
    probe: bool,
    recorded: bool,
}

impl Admission {
    /// Whether this request is the half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Reports the outcome (as classified for the route: 5xx, gRPC status, connect failure…).
    pub fn record(mut self, success: bool) {
        self.recorded = true;
        self.breaker.record(self.probe, success);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            self.breaker.probing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests;
