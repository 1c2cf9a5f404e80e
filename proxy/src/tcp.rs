//! Opaque TCP: connect to a service's endpoint (failing over to another when a connect fails),
//! splice the client to the upstream byte for byte, honouring half-close, and count bytes as
//! they move (a long-lived connection shows in metrics before it ends) and how each relay
//! ended; a relay idle for its timeout is closed, and a reset on one side is passed on as a
//! reset, not a clean end.

use std::{io, net::SocketAddr, time::Duration};

use tokio::net::TcpStream;

use crate::{
    balance::{EndpointSet, InFlight},
    error::ProxyError,
    idle::{splice, Relayed, Spliced},
    metrics::{TcpMetrics, ENDPOINT_DOWN},
    transport::{listen, prefixed::Prefixed},
};

/// Connects a relay makes at most, each to an endpoint other than the last one's: nothing has
/// been sent when a connect fails, so trying another endpoint loses nothing.
pub const CONNECT_TRIES: usize = 3;

/// Where a relay goes: one of a service's endpoints, or the original destination itself (one
/// the registry does not know).
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Service(&'a EndpointSet),
    Address(SocketAddr),
}

/// An upstream connection for a relay; to a service it counts as in flight on its endpoint
/// until dropped, so the balancer spreads connections by how many each endpoint holds.
pub struct Upstream {
    pub stream: TcpStream,
    pub flight: Option<InFlight>,
}

/// Connects to `target`. To a service: a failed connect takes its endpoint out for its backoff
/// (as for HTTP, counted in `weir_endpoint_connect_failures_total`) and the next try goes to
/// another ready endpoint, up to [`CONNECT_TRIES`] and never more than there are endpoints.
/// The last failure when none connects (`NotConnected` when the service has no endpoint).
pub async fn connect(target: Target<'_>, timeout: Duration) -> io::Result<Upstream> {
    let set = match target {
        Target::Address(addr) => {
            let stream = listen::connect(addr, timeout).await?;
            return Ok(Upstream {
                stream,
                flight: None,
            });
        }
        Target::Service(set) => set,
    };
    let mut last = io::Error::new(io::ErrorKind::NotConnected, "no ready endpoint");
    let mut avoid = None;
    for _ in 0..CONNECT_TRIES.min(set.ready_len()) {
        let Some(ep) = set.pick_other(avoid) else {
            break;
        };
        let mut flight = ep.start();
        match listen::connect(ep.addr().0, timeout).await {
            Ok(stream) => {
                ep.connect_succeeded();
                flight.connected();
                return Ok(Upstream {
                    stream,
                    flight: Some(flight),
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, addr = %ep.addr(), "tcp connect failed");
                ep.connect_failed();
                metrics::counter!(ENDPOINT_DOWN).increment(1);
                // The endpoint's breaker counts it, as for an HTTP attempt.
                flight.fail(&ProxyError::Connect {
                    addr: ep.addr(),
                    source: io::Error::new(e.kind(), e.to_string()),
                });
                avoid = Some(ep.addr());
                last = e;
            }
        }
    }
    Err(last)
}

/// Relays until both directions are closed (the splice of [`crate::idle::splice`], counted on
/// `metrics`); with `idle`, a relay in which no byte moved either way for that long ends and
/// both sides are closed. When one side fails (a reset, mostly) the other is reset too: a FIN
/// would tell it the stream ended cleanly, which a protocol framed by the close would take as
/// complete. The caller counts the open (before connecting); the relay counts its close.
pub async fn relay(
    mut downstream: Prefixed<TcpStream>,
    mut upstream: TcpStream,
    metrics: &TcpMetrics,
    idle: Option<Duration>,
) -> Relayed {
    // Upstream sockets already probe; a relay may outlive a client that vanished silently.
    listen::keep_probing(downstream.get_ref());
    let relayed = splice(&mut downstream, &mut upstream, Some(metrics), idle).await;
    if let Spliced::Failed(_) = relayed.how {
        reset_on_close(downstream.get_ref());
        reset_on_close(&upstream);
    }
    relayed
}

/// Makes the socket's close send RST instead of FIN (SO_LINGER 0, which never blocks the drop).
fn reset_on_close(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::loopback_set;
    use std::sync::Arc;

    const TIMEOUT: Duration = Duration::from_secs(2);

    /// A loopback port nothing listens on: connects to it are refused.
    fn refused_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("bound").port()
    }

    /// A set of a refusing endpoint and a listening one (its listener, to keep), by port.
    async fn dead_and_live() -> (EndpointSet, u16, u16, tokio::net::TcpListener) {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let live_port = live.local_addr().expect("bound").port();
        let dead_port = refused_port();
        let set = loopback_set(None, &[dead_port, live_port]);
        (set, dead_port, live_port, live)
    }

    fn endpoint(set: &EndpointSet, port: u16) -> Arc<crate::balance::EndpointState> {
        set.endpoints()
            .iter()
            .find(|e| e.addr().0.port() == port)
            .expect("in the set")
            .clone()
    }

    /// Twenty relays' connects to `set`, held open. The refusing endpoint is drawn first half
    /// the time while it is up, so twenty connects all but surely meet it.
    async fn twenty_connects(set: &EndpointSet) -> Vec<Upstream> {
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(
                connect(Target::Service(set), TIMEOUT)
                    .await
                    .expect("the live endpoint connects"),
            );
        }
        held
    }

    #[tokio::test]
    async fn a_refused_endpoint_is_marked_down_and_the_live_one_takes_every_connection() {
        let (set, dead_port, live_port, _live) = dead_and_live().await;
        let held = twenty_connects(&set).await;
        for up in &held {
            assert_eq!(up.stream.peer_addr().expect("peer").port(), live_port);
        }
        assert!(
            endpoint(&set, dead_port).down_for().is_some(),
            "the dead one is down"
        );
        assert_eq!(
            endpoint(&set, live_port).pending(),
            20,
            "open relays count as in flight"
        );
        drop(held);
        assert_eq!(endpoint(&set, live_port).pending(), 0);
        assert_eq!(
            endpoint(&set, dead_port).pending(),
            0,
            "a failed connect holds nothing"
        );
    }

    #[tokio::test]
    async fn connects_count_for_the_endpoints_breakers() {
        use crate::{model::CircuitBreakerPolicy, resilience::breaker::BreakerPolicy};
        let (set, dead_port, live_port, _live) = dead_and_live().await;
        let policy = BreakerPolicy::new(&CircuitBreakerPolicy {
            consecutive_failures: Some(1),
            ..Default::default()
        });
        set.arm_breakers(Some(&policy), "svc");
        let breaker = |port| endpoint(&set, port).breaker().expect("armed");
        let _held = twenty_connects(&set).await;
        assert!(
            !breaker(dead_port).is_available(),
            "one refused connect ejects it"
        );
        assert!(
            breaker(live_port).is_available(),
            "connects that succeed keep it in"
        );
    }

    #[tokio::test]
    async fn no_endpoint_to_reach_is_an_error_after_one_try_each() {
        let set = loopback_set(None, &[refused_port()]);
        let e = connect(Target::Service(&set), TIMEOUT)
            .await
            .err()
            .expect("nothing listens");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        let empty = loopback_set(None, &[]);
        let e = connect(Target::Service(&empty), TIMEOUT)
            .await
            .err()
            .expect("no endpoint");
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
    }
}
