//! The registry indexed for discovery: lookups by name, authority and virtual address, each
//! target's transitive set of services, and each target's update encoded at most once per
//! generation. Rebuilt whole on every accepted change and published as
//! `watch::Receiver<Arc<Index>>`.

mod encode;
mod target;
#[cfg(test)]
mod tests;

use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    net::SocketAddr,
    sync::{Arc, Mutex, OnceLock},
    time::Instant,
};

use bytes::Bytes;
use tokio::{sync::watch, task::JoinHandle};
use weir_proxy::model::{self, Filter, Registry};

pub use target::{Resolution, Resolved, TargetKey};

use crate::{
    metrics::REGISTRY_VERSION,
    state::{RegistryState, Store},
};

/// One service as discovery serves it.
#[derive(Debug)]
struct Slot {
    /// `name.namespace`.
    qualified: String,
    /// Its `Snapshot.services` entry, carried over from the previous generation while unchanged.
    block: Bytes,
    /// The generation its content last changed in: equal stamps mean identical bytes.
    stamp: u64,
    /// Services its routes send or mirror to, in route order.
    refs: Vec<usize>,
}

/// One registry generation, indexed. Immutable apart from the per-target memo.
#[derive(Debug)]
pub struct Index {
    version: u64,
    changed_at: Instant,
    registry: Arc<Registry>,
    slots: Vec<Slot>,
    by_name: HashMap<String, usize>,
    by_host: HashMap<String, usize>,
    by_address: HashMap<SocketAddr, usize>,
    gateway: Slot,
    memo: Mutex<HashMap<TargetKey, Arc<Prepared>>>,
}

/// A target's answer in one generation, shared by every stream watching that target.
#[derive(Debug)]
pub struct Prepared {
    resolution: Resolution,
    fingerprint: u64,
    encoded: OnceLock<Bytes>,
}

impl Prepared {
    /// What the target resolved to.
    pub fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// Equal fingerprints mean byte-identical snapshots (the version aside), so a stream that
    /// already sent this fingerprint has nothing to push.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

impl Index {
    /// Indexes `state`, reusing `prev`'s encoded services where their content is unchanged.
    pub fn build(state: &RegistryState, prev: Option<&Index>) -> Index {
        let changed_at = Instant::now();
        let registry = state.registry.clone();
        let n = registry.services.len();
        let (mut by_name, mut by_host, mut by_address) = (
            HashMap::with_capacity(n),
            HashMap::with_capacity(n),
            HashMap::with_capacity(n),
        );
        for (i, s) in registry.services.iter().enumerate() {
            by_name.insert(s.qualified_name(), i);
            for h in &s.hosts {
                by_host.insert(h.to_ascii_lowercase(), i);
            }
            for a in &s.addresses {
                by_address.insert(*a, i);
            }
        }
        let slots = registry
            .services
            .iter()
            .map(|s| {
                let qualified = s.qualified_name();
                let (block, stamp) = prev
                    .and_then(|p| p.unchanged(&qualified, s))
                    .unwrap_or_else(|| (encode::service_block(s), state.version));
                Slot {
                    refs: refs(&s.routes, &s.namespace, &by_name),
                    qualified,
                    block,
                    stamp,
                }
            })
            .collect();
        let routes = &registry.gateway.routes;
        let (block, stamp) = match prev {
            Some(p) if p.registry.gateway.routes == *routes => {
                (p.gateway.block.clone(), p.gateway.stamp)
            }
            _ => (encode::gateway_block(routes), state.version),
        };
        let gateway = Slot {
            qualified: String::new(),
            refs: refs(routes, "default", &by_name),
            block,
            stamp,
        };
        Index {
            version: state.version,
            changed_at,
            registry,
            slots,
            by_name,
            by_host,
            by_address,
            gateway,
            memo: Mutex::default(),
        }
    }

    /// The previous generation's block and stamp for `s`, if its content did not change.
    fn unchanged(&self, qualified: &str, s: &model::Service) -> Option<(Bytes, u64)> {
        let &i = self.by_name.get(qualified)?;
        let slot = &self.slots[i];
        (self.registry.services[i] == *s).then(|| (slot.block.clone(), slot.stamp))
    }

    /// The registry generation indexed.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// When this generation was indexed: the start of its push latency.
    pub fn changed_at(&self) -> Instant {
        self.changed_at
    }

    /// The registry indexed.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// A service by `name` (namespace `default`) or `name.namespace`.
    pub fn service(&self, name: &str) -> Option<&model::Service> {
        self.slot_by_name(name).map(|i| &self.registry.services[i])
    }

    /// The service whose `hosts` has `authority`, matched exactly or without its `:port`.
    pub fn by_authority(&self, authority: &str) -> Option<&model::Service> {
        self.slot_by_authority(authority)
            .map(|i| &self.registry.services[i])
    }

    /// The service with virtual address `addr`.
    pub fn by_address(&self, addr: SocketAddr) -> Option<&model::Service> {
        self.by_address
            .get(&addr)
            .map(|&i| &self.registry.services[i])
    }

    fn slot_by_name(&self, name: &str) -> Option<usize> {
        match name.split_once('.') {
            Some(_) => self.by_name.get(name).copied(),
            None => self.by_name.get(&format!("{name}.default")).copied(),
        }
    }

    fn slot_by_authority(&self, authority: &str) -> Option<usize> {
        let authority = authority.to_ascii_lowercase();
        if let Some(&i) = self.by_host.get(&authority) {
            return Some(i);
        }
        let (host, port) = authority.rsplit_once(':')?;
        let is_port = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
        is_port.then(|| self.by_host.get(host).copied()).flatten()
    }

    /// `roots` and every service their routes reference, transitively, deduplicated, in
    /// breadth-first order.
    fn closure(&self, roots: &[usize]) -> Vec<usize> {
        let mut seen = HashSet::with_capacity(roots.len() * 2);
        let mut out: Vec<usize> = roots.iter().copied().filter(|&i| seen.insert(i)).collect();
        let mut next = 0;
        while let Some(&i) = out.get(next) {
            for &r in &self.slots[i].refs {
                if seen.insert(r) {
                    out.push(r);
                }
            }
            next += 1;
        }
        out
    }

    /// The target's answer in this generation, computed once and shared by every stream that
    /// asks for the same target.
    pub fn prepare(&self, key: &TargetKey) -> Arc<Prepared> {
        if let Some(p) = self.memo().get(key) {
            return p.clone();
        }
        // Resolved outside the lock so streams on other targets are not held up; two streams
        // racing on a new target both resolve it and one result wins, which is harmless.
        let resolution = self.resolve_key(key);
        let prepared = Arc::new(Prepared {
            fingerprint: self.fingerprint(&resolution),
            resolution,
            encoded: OnceLock::new(),
        });
        self.memo().entry(key.clone()).or_insert(prepared).clone()
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, HashMap<TargetKey, Arc<Prepared>>> {
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The encoded `Update` for `prepared` (from [`Index::prepare`] on this index), encoded on
    /// first use and then shared.
    pub fn encoded(&self, prepared: &Prepared) -> Bytes {
        prepared
            .encoded
            .get_or_init(|| match &prepared.resolution {
                Resolution::NotFound { reason } => encode::not_found_update(self.version, reason),
                Resolution::Found(r) => {
                    let services = r.slots.iter().map(|&i| &self.slots[i].block);
                    let gateway = r.gateway.then_some(&self.gateway.block);
                    encode::snapshot_update(self.version, services.chain(gateway))
                }
            })
            .clone()
    }

    fn fingerprint(&self, resolution: &Resolution) -> u64 {
        let mut h = DefaultHasher::new();
        match resolution {
            Resolution::NotFound { .. } => 0u8.hash(&mut h),
            Resolution::Found(r) => {
                1u8.hash(&mut h);
                for &i in &r.slots {
                    (&self.slots[i].qualified, self.slots[i].stamp).hash(&mut h);
                }
                r.gateway.then_some(self.gateway.stamp).hash(&mut h);
            }
        }
        h.finish()
    }
}

/// Slots of the services `routes` send or mirror to; `namespace` fills in backendRefs without
/// one. References to unknown services are left out (the proxy answers them with 503).
fn refs(routes: &[model::Route], namespace: &str, by_name: &HashMap<String, usize>) -> Vec<usize> {
    let mirrors = routes.iter().flat_map(|r| {
        r.filters.iter().filter_map(|f| match f {
            Filter::RequestMirror { request_mirror } => Some(&request_mirror.backend_ref),
            _ => None,
        })
    });
    routes
        .iter()
        .flat_map(|r| &r.backend_refs)
        .chain(mirrors)
        .filter_map(|b| {
            let ns = b.namespace.as_deref().unwrap_or(namespace);
            by_name.get(&format!("{}.{ns}", b.name)).copied()
        })
        .collect()
}

/// Keeps an index of `store` up to date: rebuilt whole on every new generation (a rejected edit
/// changes nothing here). Ends when the store is dropped.
pub fn spawn(store: &Store) -> (watch::Receiver<Arc<Index>>, JoinHandle<()>) {
    let mut states = store.subscribe();
    let first = Index::build(&states.borrow_and_update(), None);
    metrics::gauge!(REGISTRY_VERSION).set(first.version as f64);
    let (tx, rx) = watch::channel(Arc::new(first));
    let task = tokio::spawn(async move {
        while states.changed().await.is_ok() {
            let state = states.borrow_and_update().clone();
            let prev = tx.borrow().clone();
            if state.version == prev.version {
                continue;
            }
            let next = Index::build(&state, Some(&prev));
            metrics::gauge!(REGISTRY_VERSION).set(next.version as f64);
            tracing::debug!(version = next.version, "index rebuilt");
            tx.send_replace(Arc::new(next));
        }
    });
    (rx, task)
}
