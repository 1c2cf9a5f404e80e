//! `App::build(config)`: binds the listeners, loads the registry, and runs the accept loops until
//! shutdown, then drains. Shared by `main.rs` and the tests.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    time::Instant,
};
use tracing::Instrument;

use crate::{
    addr::{ClientAddr, EndpointAddr, OrigDstAddr},
    config::Config,
    discovery::{index::Snapshot, registry_file},
    error::rescue,
    http::{
        headers::is_grpc,
        pool::{PoolConfig, Pools},
        server::{self, ServerConfig},
    },
    metrics::{self as m, Direction, RouteMetrics},
    model::Registry,
    transport::{
        detect::{detect, Detection},
        listen,
        orig_dst::OrigDst,
        prefixed::Prefixed,
    },
};

/// State every connection reads.
pub struct Shared {
    /// Static configuration.
    pub config: Config,
    discovery: ArcSwap<Snapshot>,
    /// Upstream connection pools.
    pub pools: Pools,
    /// Server-side limits.
    pub server: ServerConfig,
    /// Metrics for inbound traffic to ports no service claims.
    pub inbound_unknown: Arc<RouteMetrics>,
    own: Vec<SocketAddr>,
    draining: AtomicBool,
}

impl Shared {
    /// The current registry snapshot; take one per request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.discovery.load_full()
    }

    /// Whether the proxy serves traffic and is not draining.
    pub fn is_ready(&self) -> bool {
        !self.draining.load(Ordering::Relaxed)
    }
}

/// Whether forwarding to `dst` would land on one of the proxy's own listeners `own`, feeding the
/// proxy to itself. `local` is the address the connection was accepted on, i.e. an address of
/// this host: a listener on `0.0.0.0` owns `dst` only when `dst` is local, not when it is another
/// host with the same port (a peer sidecar's admin port, scraped from a meshed pod).
fn aims_at_own_listener(own: &[SocketAddr], dst: SocketAddr, local: SocketAddr) -> bool {
    own.iter().any(|l| {
        l.port() == dst.port()
            && (l.ip() == dst.ip()
                || dst.ip().is_loopback()
                || (l.ip().is_unspecified() && dst.ip() == local.ip()))
    })
}

/// What the request path knows about its connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// The downstream peer.
    pub client: ClientAddr,
    /// Where a transparent client was headed; `None` on the gateway.
    pub orig_dst: Option<OrigDstAddr>,
    /// Which path.
    pub direction: Direction,
}

/// A built proxy: listeners bound, registry loaded, not yet serving.
pub struct App {
    shared: Arc<Shared>,
    outbound: TcpListener,
    inbound: TcpListener,
    gateway: Option<TcpListener>,
    admin: TcpListener,
    orig_dst: Arc<dyn OrigDst>,
    registry_rx: watch::Receiver<Arc<Registry>>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown_tx: watch::Sender<bool>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The registry file is missing or invalid.
    #[error("{0}")]
    Registry(#[from] registry_file::RegistryError),
    /// Control-plane mode is not built yet.
    #[error("WEIR_PROXY_CONTROL_ADDR is not supported yet; use WEIR_PROXY_REGISTRY")]
    ControlPlaneUnsupported,
}

fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    listen::bind(addr).map_err(|source| StartError::Bind { addr, source })
}

impl App {
    /// Binds every listener and loads the registry; call inside a Tokio runtime.
    pub fn build(config: Config, orig_dst: Arc<dyn OrigDst>) -> Result<App, StartError> {
        let metrics = m::install();
        let Some(path) = config.registry.clone() else {
            return Err(StartError::ControlPlaneUnsupported);
        };
        let registry = Arc::new(registry_file::load(&path)?);
        let (registry_tx, registry_rx) = watch::channel(registry.clone());
        crate::discovery::watch_file::spawn_watcher(path, registry_tx, config.registry_poll);
        let outbound = bind(config.outbound_listen)?;
        let inbound = bind(config.inbound_listen)?;
        let admin = bind(config.admin_listen)?;
        let gateway = config.gateway_listen.map(bind).transpose()?;
        let mut own = vec![];
        for l in [
            Some(&outbound),
            Some(&inbound),
            Some(&admin),
            gateway.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            own.push(l.local_addr().map_err(|source| StartError::Bind {
                addr: config.admin_listen,
                source,
            })?);
        }
        let shared = Arc::new(Shared {
            discovery: ArcSwap::from_pointee(Snapshot::build(registry, None)),
            pools: Pools::new(PoolConfig {
                connect_timeout: config.connect_timeout,
                idle_timeout: config.pool_idle_timeout,
                max_idle: config.pool_max_idle_per_endpoint,
            }),
            server: ServerConfig::from(&config),
            inbound_unknown: RouteMetrics::new(Direction::Inbound, "unknown", "default"),
            own,
            draining: AtomicBool::new(false),
            config,
        });
        let (shutdown_tx, _) = watch::channel(false);
        Ok(App {
            shared,
            outbound,
            inbound,
            gateway,
            admin,
            orig_dst,
            registry_rx,
            metrics,
            shutdown_tx,
        })
    }

    /// The bound outbound address.
    pub fn outbound_addr(&self) -> SocketAddr {
        self.outbound
            .local_addr()
            .expect("bound listener has an address")
    }
    /// The bound inbound address.
    pub fn inbound_addr(&self) -> SocketAddr {
        self.inbound
            .local_addr()
            .expect("bound listener has an address")
    }
    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .expect("bound listener has an address")
    }
    /// The bound gateway address, if enabled.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.gateway
            .as_ref()
            .map(|g| g.local_addr().expect("bound listener has an address"))
    }

    /// A handle that starts the drain (what `POST /shutdown` uses).
    pub fn shutdown_handle(&self) -> watch::Sender<bool> {
        self.shutdown_tx.clone()
    }

    /// Serves until `signal` resolves or `/shutdown` is called, then drains for the grace period.
    pub async fn run(self, signal: impl std::future::Future<Output = ()>) {
        let App {
            shared,
            outbound,
            inbound,
            gateway,
            admin,
            orig_dst,
            registry_rx,
            metrics,
            shutdown_tx,
        } = self;
        tokio::spawn(apply_registry_updates(shared.clone(), registry_rx));
        tokio::spawn(upkeep(shared.clone(), metrics.clone()));
        tokio::spawn(crate::memory::trim_after_parks(
            std::time::Duration::from_millis(250),
        ));
        let (drain_tx, drain) = crate::drain::channel();
        let mut stop = shutdown_tx.subscribe();
        let admin_task = tokio::spawn(crate::admin::serve(
            admin,
            shared.clone(),
            metrics,
            shutdown_tx.clone(),
        ));
        let mut loops = vec![];
        let accept = |l: TcpListener, d: Direction, od: Option<Arc<dyn OrigDst>>| {
            tokio::spawn(accept_loop(l, d, od, shared.clone(), drain.clone()))
        };
        loops.push(accept(
            outbound,
            Direction::Outbound,
            Some(orig_dst.clone()),
        ));
        loops.push(accept(inbound, Direction::Inbound, Some(orig_dst)));
        if let Some(g) = gateway {
            loops.push(accept(g, Direction::Gateway, None));
        }
        tokio::select! {
            () = signal => { let _ = shutdown_tx.send(true); }
            _ = stop.wait_for(|s| *s) => {}
        }
        tracing::info!(grace = ?shared.config.shutdown_grace, "draining");
        shared.draining.store(true, Ordering::Relaxed);
        drain_tx.signal();
        drop(drain);
        for l in loops {
            let _ = l.await;
        }
        if tokio::time::timeout(shared.config.shutdown_grace, drain_tx.drain())
            .await
            .is_err()
        {
            tracing::warn!("grace period over; closing what is still open");
        }
        admin_task.abort();
        tracing::info!("stopped");
    }
}

async fn apply_registry_updates(shared: Arc<Shared>, mut rx: watch::Receiver<Arc<Registry>>) {
    while rx.changed().await.is_ok() {
        let reg = rx.borrow_and_update().clone();
        let prev = shared.snapshot();
        shared
            .discovery
            .store(Arc::new(Snapshot::build(reg, Some(&prev))));
        tracing::info!("registry applied");
    }
}

async fn upkeep(shared: Arc<Shared>, metrics: metrics_exporter_prometheus::PrometheusHandle) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        tick.tick().await;
        // Drains histogram samples into buckets so memory stays flat between scrapes.
        metrics.run_upkeep();
        shared.pools.evict_idle(shared.config.pool_idle_timeout * 4);
    }
}

async fn accept_loop(
    listener: TcpListener,
    direction: Direction,
    orig_dst: Option<Arc<dyn OrigDst>>,
    shared: Arc<Shared>,
    drain: crate::drain::Drain,
) {
    let mut stop = drain.clone();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = stop.signaled() => return,
        };
        listen::tune_accepted(&stream);
        let od = match &orig_dst {
            Some(o) => match o.orig_dst(&stream) {
                Ok(d) => Some(d),
                Err(e) => {
                    tracing::debug!(error = %e, "no original destination; closing");
                    continue;
                }
            },
            None => None,
        };
        let conn = ConnInfo {
            client: ClientAddr(peer),
            orig_dst: od,
            direction,
        };
        // Only transparent connections can loop; the gateway skips the getsockname.
        if od.is_some_and(|d| {
            stream
                .local_addr()
                .map_or(true, |local| aims_at_own_listener(&shared.own, d.0, local))
        }) {
            tracing::warn!(client = %peer, "connection aimed at the proxy itself; refused");
            continue;
        }
        let span = tracing::debug_span!("conn", dir = direction.as_str(), client = %peer);
        let task = serve_conn(shared.clone(), conn, stream, drain.clone()).instrument(span);
        tracing::trace!(bytes = std::mem::size_of_val(&task), "connection task");
        tokio::spawn(task);
    }
}

async fn serve_conn(
    shared: Arc<Shared>,
    conn: ConnInfo,
    mut stream: TcpStream,
    drain: crate::drain::Drain,
) {
    let opaque = conn
        .orig_dst
        .is_some_and(|d| shared.config.is_opaque_port(d.0.port()));
    let mut buf = BytesMut::new();
    let detection = if opaque {
        Detection::Opaque
    } else {
        match detect(&mut stream, &mut buf, shared.config.detect_timeout).await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "detection read failed");
                return;
            }
        }
    };
    m::detection(
        conn.direction,
        if opaque {
            "opaque-port"
        } else {
            detection.as_str()
        },
    );
    let io = Prefixed::new(buf, stream);
    match detection {
        Detection::Http1 | Detection::H2 => {
            let cfg = shared.server.clone();
            let handler = move |req| {
                let (shared, conn) = (shared.clone(), conn);
                let fut = async move { handle(&shared, &conn, req).await };
                tracing::trace!(bytes = std::mem::size_of_val(&fut), "request future");
                fut
            };
            if detection == Detection::H2 {
                // Boxed: the task's size is its largest state, and an HTTP/2 connection is big;
                // idle HTTP/1 keep-alives should not pay for it.
                Box::pin(server::serve_h2(io, &cfg, drain, handler)).await
            } else {
                server::serve_http1(io, &cfg, drain, handler).await
            }
        }
        Detection::Closed => {}
        Detection::Tls | Detection::Opaque | Detection::Timeout => {
            Box::pin(relay_tcp(&shared, conn, io)).await;
            drop(drain);
        }
    }
}

async fn relay_tcp(shared: &Shared, conn: ConnInfo, io: Prefixed<TcpStream>) {
    if conn.direction == Direction::Gateway {
        return; // the gateway is HTTP only
    }
    let Some(dst) = conn.orig_dst else { return };
    let snap = shared.snapshot();
    let (addr, metrics) = match (conn.direction, snap.by_orig_dst(dst)) {
        (Direction::Outbound, Some(svc)) => match svc.endpoints.pick() {
            Some(ep) => (ep.addr(), svc.tcp.clone()),
            None => return,
        },
        _ => (EndpointAddr(dst.0), snap.passthrough_tcp.clone()),
    };
    match crate::tcp::connect(addr, shared.config.connect_timeout).await {
        Ok(up) => {
            if let Err(e) = crate::tcp::relay(io, up, &metrics).await {
                tracing::debug!(error = %e, "tcp relay ended");
            }
        }
        Err(e) => tracing::debug!(error = %e, %addr, "tcp connect failed"),
    }
}

/// One request, any direction: the path's stages, then errors become responses here.
async fn handle(
    shared: &Shared,
    conn: &ConnInfo,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<crate::http::body::ProxyBody> {
    let start = Instant::now();
    let grpc = is_grpc(req.headers());
    let (metrics, result) = match conn.direction {
        Direction::Outbound => crate::outbound::request(shared, conn, req).await,
        Direction::Inbound => crate::inbound::request(shared, conn, req).await,
        Direction::Gateway => crate::gateway::request(shared, conn, req).await,
    };
    let resp = result.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "request failed");
        metrics.proxy_error(e.name());
        rescue(&e, grpc)
    });
    metrics.response(resp.status().as_u16(), start.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn own_listener_is_the_exact_address_a_loopback_one_or_a_local_one_on_the_same_port() {
        let own = [a("127.0.0.1:4140"), a("0.0.0.0:4143"), a("0.0.0.0:4191")];
        let redirected = a("127.0.0.1:4140");
        assert!(aims_at_own_listener(&own, a("127.0.0.1:4140"), redirected));
        assert!(aims_at_own_listener(&own, a("127.0.0.1:4191"), redirected));
        // Dialled at the pod's own IP: accepted on that IP.
        let pod = a("10.0.0.5:4143");
        assert!(aims_at_own_listener(&own, pod, pod));
        assert!(aims_at_own_listener(&own, a("10.0.0.5:4191"), pod));
    }

    #[test]
    fn another_hosts_address_with_an_own_port_is_not_the_proxy() {
        let own = [a("127.0.0.1:4140"), a("0.0.0.0:4143"), a("0.0.0.0:4191")];
        let redirected = a("127.0.0.1:4140");
        assert!(!aims_at_own_listener(&own, a("10.0.0.9:4191"), redirected));
        assert!(!aims_at_own_listener(&own, a("10.0.0.9:4143"), redirected));
        assert!(!aims_at_own_listener(&own, a("10.0.0.9:4140"), redirected));
        assert!(!aims_at_own_listener(&own, a("10.96.0.10:80"), redirected));
    }
}
