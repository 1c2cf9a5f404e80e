//! The control plane assembled: load the registry, bind the gRPC and admin listeners, then serve
//! watch → index → translate → stream until told to stop. Shared by the binary and the tests.

#[cfg(test)]
mod tests;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tonic::transport::server::TcpIncoming;
use weir_proxy::discovery::registry_file::RegistryError;

use crate::{
    admin_http::{self, AdminState},
    api,
    index::{self, Index},
    proxies::Proxies,
    sources,
    state::Store,
};

/// HTTP/2 streams one connection may hold: a proxy, or a load generator simulating many, opens
/// one watch per target on a single connection, far past h2's usual default of 100-200.
const MAX_CONCURRENT_STREAMS: u32 = 16_384;
/// How often an idle connection is pinged, and how long a ping may go unanswered before the
/// connection (and every watch on it) is dropped: a dead proxy leaves the table within ~20 s.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stop waits for connections to close after every watch was ended.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Static configuration, from flags and `WEIR_CONTROL_*` variables.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The registry file served and watched.
    pub registry: PathBuf,
    /// gRPC listener (Discovery, Admin).
    pub grpc_listen: SocketAddr,
    /// HTTP admin listener (`/metrics`, `/ready`, `/live`).
    pub admin_listen: SocketAddr,
    /// How often the registry file is checked for edits.
    pub registry_poll: Duration,
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The registry file is missing, unreadable or invalid (every problem, located).
    #[error("cannot serve the registry file:\n{0}")]
    Registry(#[from] RegistryError),
    /// A listener could not be bound.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        /// `gRPC` or `admin`.
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// A control plane with its registry loaded and both listeners bound, not yet serving.
#[derive(Debug)]
pub struct ControlPlane {
    cfg: ControlConfig,
    store: Arc<Store>,
    proxies: Arc<Proxies>,
    index: watch::Receiver<Arc<Index>>,
    index_task: JoinHandle<()>,
    grpc: TcpListener,
    admin: TcpListener,
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    metrics: PrometheusHandle,
}

async fn bind(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Bind { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    Ok((listener, local))
}

impl ControlPlane {
    /// Loads the registry file (an invalid one is an error naming every problem) and binds both
    /// listeners (port 0 picks a free port; see [`ControlPlane::grpc_addr`]).
    pub async fn build(cfg: ControlConfig) -> Result<ControlPlane, StartError> {
        let registry = sources::file::load(&cfg.registry)?;
        let (grpc, grpc_addr) = bind("gRPC", cfg.grpc_listen).await?;
        let (admin, admin_addr) = bind("admin", cfg.admin_listen).await?;
        let metrics = crate::metrics::handle();
        let store = Arc::new(Store::new(cfg.registry.clone(), registry));
        let (index, index_task) = index::spawn(&store);
        Ok(ControlPlane {
            cfg,
            store,
            proxies: Arc::new(Proxies::default()),
            index,
            index_task,
            grpc,
            admin,
            grpc_addr,
            admin_addr,
            metrics,
        })
    }

    /// Where the gRPC listener is bound.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Where the admin listener is bound.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The registry store (for the admin API and tests).
    pub fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// The connected-proxies table.
    pub fn proxies(&self) -> Arc<Proxies> {
        self.proxies.clone()
    }

    /// The current index and every one after it.
    pub fn index(&self) -> watch::Receiver<Arc<Index>> {
        self.index.clone()
    }

    /// Serves until `shutdown` completes, then ends every watch (proxies keep their last
    /// snapshot and reconnect elsewhere) and waits up to a few seconds for connections to close.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        let ready = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = watch::channel(false);
        let tasks = Tasks(vec![
            self.index_task,
            sources::file::spawn(self.store.clone(), self.cfg.registry_poll),
            tokio::spawn(admin_http::serve(
                self.admin,
                AdminState {
                    ready: ready.clone(),
                    proxies: self.proxies.clone(),
                    metrics: self.metrics,
                },
            )),
        ]);
        let router = tonic::transport::Server::builder()
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(api::discovery::service(
                self.index,
                self.proxies.clone(),
                stop_rx.clone(),
            ))
            .add_service(api::admin::service(api::admin::AdminContext {
                store: self.store.clone(),
                proxies: self.proxies.clone(),
                history: Arc::new(crate::observe::History::default()),
            }));
        let incoming = TcpIncoming::from(self.grpc)
            .with_nodelay(Some(true))
            .with_keepalive(Some(Duration::from_secs(60)));
        ready.store(true, Ordering::Release);
        tracing::info!(grpc = %self.grpc_addr, admin = %self.admin_addr, "weir-control serving");
        let stopping = async {
            shutdown.await;
            ready.store(false, Ordering::Release);
            tracing::info!("stopping: ending every watch");
            let _ = stop_tx.send(true);
        };
        let mut grace = stop_rx;
        let serve = router.serve_with_incoming_shutdown(incoming, stopping);
        let result = tokio::select! {
            r = serve => r,
            _ = async {
                let _ = grace.wait_for(|stopped| *stopped).await;
                tokio::time::sleep(DRAIN_GRACE).await;
            } => {
                tracing::warn!("connections still open after {DRAIN_GRACE:?}; stopping anyway");
                Ok(())
            }
        };
        drop(tasks);
        result
    }
}

/// Background tasks that end with the server.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
