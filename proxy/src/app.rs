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
use tokio::{net::TcpListener, sync::watch};

use crate::{
    access_log::AccessLog,
    addr::{ClientAddr, OrigDstAddr},
    config::Config,
    discovery::{
        control::{BackoffConfig, Control, ControlConfig, ControlError},
        index::Snapshot,
        registry_file,
    },
    http::{
        pool::{PoolConfig, Pools},
        server::ServerConfig,
    },
    metrics::{self as m, Direction, RouteMetrics},
    model::Registry,
    transport::{listen, orig_dst::OrigDst},
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
    /// Where the proxy itself listens (the loop guard refuses these as destinations).
    pub(crate) own: Vec<SocketAddr>,
    draining: AtomicBool,
    control: Option<Arc<Control>>,
    /// The access log (off unless `WEIR_PROXY_ACCESS_LOG` is set).
    pub access_log: AccessLog,
}

impl Shared {
    /// The current registry snapshot; take one per request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.discovery.load_full()
    }

    /// The control-plane client, in control-plane mode.
    pub fn control(&self) -> Option<&Arc<Control>> {
        self.control.as_ref()
    }

    /// Whether the proxy serves traffic and is not draining.
    pub fn is_ready(&self) -> bool {
        !self.draining.load(Ordering::Relaxed)
    }
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
    /// The accepted socket's descriptor, open while the connection's requests are handled
    /// (see [`ResetHandle::of_raw`](crate::transport::reset::ResetHandle::of_raw)).
    pub fd: std::os::fd::RawFd,
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
    /// The control-plane client could not be set up.
    #[error("{0}")]
    Control(#[from] ControlError),
    /// The access log's writer thread could not be started.
    #[error("cannot start the access log: {0}")]
    AccessLog(std::io::Error),
    /// Neither a registry file nor a control plane is configured.
    #[error("set WEIR_PROXY_REGISTRY (a registry file) or WEIR_PROXY_CONTROL_ADDR")]
    NoSource,
}

fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    listen::bind(addr).map_err(|source| StartError::Bind { addr, source })
}

impl App {
    /// Binds every listener and loads the registry; call inside a Tokio runtime.
    pub fn build(config: Config, orig_dst: Arc<dyn OrigDst>) -> Result<App, StartError> {
        let metrics = m::install();
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
        let (registry, registry_rx, control) = if let Some(path) = config.registry.clone() {
            let registry = Arc::new(registry_file::load(&path)?);
            let (registry_tx, registry_rx) = watch::channel(registry.clone());
            crate::discovery::watch_file::spawn_watcher(path, registry_tx, config.registry_poll);
            (registry, registry_rx, None)
        } else if let Some(addr) = config.control_addr.clone() {
            let registry = Arc::new(Registry::default());
            let (registry_tx, registry_rx) = watch::channel(registry.clone());
            let admin_addr = match &config.admin_advertise {
                Some(a) => a.clone(),
                None => advertised(admin.local_addr().unwrap_or(config.admin_listen)).to_string(),
            };
            let control = Control::start(
                ControlConfig {
                    addr,
                    resolve_timeout: config.control_resolve_timeout,
                    idle_timeout: config.control_idle_timeout,
                    gateway: gateway.is_some(),
                    proxy_id: config.proxy_id.clone(),
                    admin_addr,
                    reconnect: BackoffConfig::default(),
                },
                registry_tx,
            )?;
            (registry, registry_rx, Some(control))
        } else {
            return Err(StartError::NoSource);
        };
        let shared = Arc::new(Shared {
            discovery: ArcSwap::from_pointee(Snapshot::build(registry, None)),
            pools: Pools::new(PoolConfig {
                connect_timeout: config.connect_timeout,
                idle_timeout: config.pool_idle_timeout,
                max_idle: config.pool_max_idle_per_endpoint,
                h2_max_header_list_size: config.h2.max_header_list_size,
                header_case: config.http1_header_case,
            }),
            server: ServerConfig::from(&config),
            inbound_unknown: RouteMetrics::new(Direction::Inbound, "unknown", "default"),
            own,
            draining: AtomicBool::new(false),
            control,
            access_log: AccessLog::start(config.access_log).map_err(StartError::AccessLog)?,
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
        tokio::spawn(sweep_pools(shared.clone()));
        tokio::spawn(crate::memory::trim_after_releases(
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
            tokio::spawn(crate::conn::accept_loop(
                l,
                d,
                od,
                shared.clone(),
                drain.clone(),
            ))
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
            .store(Arc::new(Snapshot::build(reg.clone(), Some(&prev))));
        if let Some(control) = &shared.control {
            control.applied(&reg);
        }
        tracing::info!("registry applied");
    }
}

/// The admin address as another host can dial it: an unspecified IP becomes loopback (the
/// control plane then reaches it only on this host; set WEIR_PROXY_ADMIN_ADVERTISE otherwise).
fn advertised(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, bound.port()))
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, bound.port()))
        }
        _ => bound,
    }
}

/// Closes expired and surplus idle upstream connections and slims idle ones; often enough that
/// a burst's buffers are gone (and trimmed, see `memory.rs`) about a second after the burst.
async fn sweep_pools(shared: Arc<Shared>) {
    let mut tick = crate::clock::grid_interval(crate::http::pool::SLIM_AFTER / 2);
    loop {
        tick.tick().await;
        shared.pools.tidy();
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
