//! Load balancing: power-of-two-choices over peak-EWMA latency among a service's endpoints.
//!
//! `EndpointSet` is the registry's view of a service (who, how heavy, ready or not), immutable and
//! rebuilt per registry snapshot. `EndpointState` is what we have learned about one address
//! (latency, in-flight requests, connect failures); it is shared by every worker thread through
//! atomics and carried across rebuilds, so an edit to the registry does not forget it.

mod breakers;
mod endpoint;
mod ewma;
mod in_flight;
mod p2c;

use std::{cell::RefCell, time::Duration};

use rand::{rngs::SmallRng, Rng, SeedableRng};

use crate::resilience::{nanos_at, now_nanos};

pub use breakers::route_observer;
pub use endpoint::EndpointState;
pub use in_flight::InFlight;
pub use p2c::EndpointSet;

/// Static balancer tuning (from the proxy's configuration, not the registry).
#[derive(Debug, Clone, PartialEq)]
pub struct BalanceConfig {
    /// Time constant of the latency average: a sample's influence falls to 1/e after this long.
    pub decay: Duration,
    /// Latency assumed for an endpoint before its first response.
    pub default_rtt: Duration,
    /// How long the first connect failure takes an endpoint out; doubles per further failure.
    pub backoff_base: Duration,
    /// Upper bound of the connect-failure backoff.
    pub backoff_max: Duration,
}

impl Default for BalanceConfig {
    /// `decay` 10 s is Finagle's and linkerd's. `default_rtt` 30 ms (linkerd's value) is a
    /// pessimistic prior: cost grows with `rtt * (pending + 1)`, so a new endpoint is preferred
    /// over a 10 ms peer with 3+ requests in flight, but not over an idle fast one, and it stops
    /// being preferred once it holds a request or two itself. A 1 ms prior would instead draw
    /// ~10 concurrent requests before an idle 10 ms peer got one, all before its first response
    /// came back: that is how a cold process gets flooded. An idle estimate decays towards zero,
    /// so a new endpoint behind fast idle peers is still tried within seconds.
    fn default() -> Self {
        Self {
            decay: Duration::from_secs(10),
            default_rtt: Duration::from_millis(30),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(30),
        }
    }
}

thread_local! {
    static RNG: RefCell<SmallRng> = RefCell::new(SmallRng::from_entropy());
}

/// Runs `f` with this thread's random number generator: no lock, no shared cache line.
fn with_rng<T>(f: impl FnOnce(&mut SmallRng) -> T) -> T {
    RNG.with(|rng| f(&mut rng.borrow_mut()))
}

/// A uniform draw in `[0, 1)`, for jitter.
fn unit_random() -> f64 {
    with_rng(|rng| rng.gen::<f64>())
}

/// A set of ready loopback endpoints of weight 1 on `ports`, rebuilt from `prev` (tests).
#[cfg(test)]
pub(crate) fn loopback_set(prev: Option<&EndpointSet>, ports: &[u16]) -> EndpointSet {
    let eps: Vec<crate::model::Endpoint> = ports
        .iter()
        .map(|&p| crate::model::Endpoint {
            address: ([127, 0, 0, 1], p).into(),
            weight: 1,
            identity: None,
            labels: Default::default(),
            ready: true,
        })
        .collect();
    EndpointSet::rebuild(prev, &eps, &BalanceConfig::default())
}
