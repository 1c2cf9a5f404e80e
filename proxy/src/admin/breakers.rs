//! `/breakers`: the route circuit breakers that are not closed (read by `weirctl describe`).
//! A mesh route is listed under its service; a gateway route under each service it sends to.

use std::time::Duration;

use serde_json::{json, Value};

use crate::{
    app::Shared,
    discovery::index::RouteSet,
    resilience::{
        breaker::{CircuitBreaker, State},
        policy::RoutePolicy,
    },
};

/// One object per open or probing route breaker.
pub(super) fn route_breakers(shared: &Shared) -> Value {
    let snap = shared.snapshot();
    let mut out = Vec::new();
    for svc in snap.services() {
        for (_, p, b) in open(&svc.routes) {
            out.push(entry(&svc.name, &p.source.name, false, b));
        }
    }
    for (i, p, b) in open(&snap.gateway) {
        let backends = 0..p.source.backend_refs.len();
        let services = backends.filter_map(|k| snap.gateway.backend_service(i, k));
        for svc in services.filter_map(|s| snap.services().get(s)) {
            out.push(entry(&svc.name, &p.source.name, true, b));
        }
    }
    Value::Array(out)
}

/// The routes of `set` whose breaker is open or half-open: (index, policy, breaker).
fn open(set: &RouteSet) -> impl Iterator<Item = (usize, &RoutePolicy, &CircuitBreaker)> {
    (0..)
        .map_while(|i| set.policy(i).map(|p| (i, p)))
        .filter_map(|(i, p)| {
            let b = p.breaker.as_deref()?;
            (b.state() != State::Closed).then_some((i, &**p, b))
        })
}

fn entry(service: &str, route: &str, gateway: bool, b: &CircuitBreaker) -> Value {
    let left = b.ejected_for().unwrap_or(Duration::ZERO);
    json!({
        "service": service,
        "route": route,
        "gateway": gateway,
        "state": if b.state() == State::Open { "open" } else { "probing" },
        "ejected_for_ms": u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
        "ejections": b.ejections(),
    })
}
