//! The Discovery service: one `Watch` stream per proxy target. The first update goes out at
//! once; after that a stream wakes on every new index generation but sends only when its
//! target's snapshot fingerprint changed, so an edit to one service costs the other streams a
//! memo lookup. Updates are encoded once per target and generation ([`Index::prepare`]) and
//! shared as bytes.

mod wire;

use std::{net::SocketAddr, pin::Pin, sync::Arc};

use bytes::Bytes;
use futures_util::Stream;
use metrics::{counter, histogram};
use tokio::sync::watch;
use tonic::Status;
use weir_proto::discovery as pb;

pub use wire::DiscoveryServer;

use crate::{
    index::{Index, TargetKey},
    metrics::{PUSHES, PUSH_LATENCY},
    proxies::{Proxies, ProxyIdentity, StreamGuard},
};

/// A watch stream: encoded `Update` messages.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send + 'static>>;

/// The Discovery gRPC service over `index`, registering each stream in `proxies`. Every stream
/// ends (cleanly, status OK) once `shutdown` turns true, so a graceful stop is not held up by
/// watches that would otherwise never finish.
pub fn service(
    index: watch::Receiver<Arc<Index>>,
    proxies: Arc<Proxies>,
    shutdown: watch::Receiver<bool>,
) -> DiscoveryServer {
    DiscoveryServer::new(Watcher {
        index,
        proxies,
        shutdown,
    })
}

/// What every stream needs.
#[derive(Debug)]
struct Watcher {
    index: watch::Receiver<Arc<Index>>,
    proxies: Arc<Proxies>,
    shutdown: watch::Receiver<bool>,
}

impl Watcher {
    fn open(&self, request: tonic::Request<pb::WatchRequest>) -> Result<WatchStream, Status> {
        let peer = request.remote_addr();
        let request = request.into_inner();
        let key = request
            .target
            .as_ref()
            .and_then(TargetKey::from_proto)
            .ok_or_else(|| Status::invalid_argument("WatchRequest.target names no target"))?;
        let identity = identity(request.proxy, peer);
        tracing::debug!(proxy = %identity.id, target = %key.label(), "watch opened");
        let stream = StreamState {
            guard: self.proxies.open(identity, key.label()),
            key,
            index: self.index.clone(),
            shutdown: self.shutdown.clone(),
            sent: None,
            resolved: None,
        };
        Ok(Box::pin(futures_util::stream::unfold(
            stream,
            StreamState::next,
        )))
    }
}

/// Who is watching; a proxy that sent no id is named after its address.
fn identity(info: Option<pb::ProxyInfo>, peer: Option<SocketAddr>) -> ProxyIdentity {
    let info = info.unwrap_or_default();
    let id = match (info.id.is_empty(), peer) {
        (false, _) => info.id,
        (true, Some(peer)) => format!("unknown@{peer}"),
        (true, None) => "unknown".into(),
    };
    ProxyIdentity {
        id,
        version: info.version,
        admin_addr: info.admin_addr,
    }
}

/// One open stream; dropping it (the client went away) unregisters it from `Proxies`.
struct StreamState {
    key: TargetKey,
    index: watch::Receiver<Arc<Index>>,
    shutdown: watch::Receiver<bool>,
    guard: StreamGuard,
    /// Fingerprint of the last update sent; `None` before the first.
    sent: Option<u64>,
    /// The services last recorded in `Proxies`.
    resolved: Option<Vec<String>>,
}

impl StreamState {
    /// The next update to send: at once for the first, then whenever the target's snapshot
    /// changes. Only the latest generation is ever sent; a slow reader skips the ones between.
    async fn next(mut self) -> Option<(Result<Bytes, Status>, Self)> {
        loop {
            if *self.shutdown.borrow() {
                return None;
            }
            if let Some(update) = self.update() {
                return Some((Ok(update), self));
            }
            tokio::select! {
                changed = self.index.changed() => if changed.is_err() { return None },
                changed = self.shutdown.changed() => if changed.is_err() { return None },
            }
        }
    }

    /// The current generation's update for this target, unless it is what was last sent.
    fn update(&mut self) -> Option<Bytes> {
        let index = self.index.borrow_and_update().clone();
        let prepared = index.prepare(&self.key);
        if self.sent == Some(prepared.fingerprint()) {
            return None;
        }
        let update = index.encoded(&prepared);
        if self.sent.is_some() {
            histogram!(PUSH_LATENCY).record(index.changed_at().elapsed());
        }
        counter!(PUSHES).increment(1);
        self.sent = Some(prepared.fingerprint());
        let services = prepared.resolution().services();
        if self.resolved.as_deref() != Some(services) {
            self.guard.resolved(services.to_vec());
            self.resolved = Some(services.to_vec());
        }
        Some(update)
    }
}
