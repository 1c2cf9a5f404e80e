//! The proxies connected to this control plane: who they are, how many watches each holds and on
//! what. Read by `weirctl check`, `describe` and `stat`; written when a watch opens or closes (not
//! a request path, so a mutex is fine).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

/// What a proxy says about itself when it opens a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyIdentity {
    /// Unique per proxy process.
    pub id: String,
    /// The proxy's release.
    pub version: String,
    /// `host:port` of its admin listener; empty if unknown.
    pub admin_addr: String,
}

/// A connected proxy as `weirctl` sees it.
#[derive(Debug, Clone)]
pub struct ProxySummary {
    /// Who it is.
    pub identity: ProxyIdentity,
    /// Open watch streams.
    pub streams: u32,
    /// When its oldest open stream started.
    pub since: Instant,
    /// The targets it watches (`service:NAME`, `authority:HOST`, `address:IP:PORT`, `gateway`),
    /// with the service each resolved to when known.
    pub targets: Vec<String>,
    /// Qualified names (`name.namespace`) of the services its watches resolve to.
    pub services: Vec<String>,
}

#[derive(Debug)]
struct Entry {
    identity: ProxyIdentity,
    since: Instant,
    /// Open streams, by stream id: (target label, services it resolves to).
    streams: HashMap<u64, (String, Vec<String>)>,
}

/// The set of connected proxies; share as `Arc<Proxies>`.
#[derive(Debug, Default)]
pub struct Proxies {
    inner: Mutex<(u64, HashMap<String, Entry>)>,
}

/// Held by a watch stream while it is open; dropping it unregisters the stream.
#[derive(Debug)]
pub struct StreamGuard {
    proxies: Arc<Proxies>,
    proxy_id: String,
    stream: u64,
}

impl Proxies {
    /// Registers one open watch of `target` by `identity`.
    pub fn open(self: &Arc<Self>, identity: ProxyIdentity, target: String) -> StreamGuard {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (next, map) = &mut *guard;
        *next += 1;
        let stream = *next;
        let id = identity.id.clone();
        let entry = map.entry(id.clone()).or_insert_with(|| Entry {
            identity: identity.clone(),
            since: Instant::now(),
            streams: HashMap::new(),
        });
        entry.identity = identity;
        entry.streams.insert(stream, (target, Vec::new()));
        StreamGuard {
            proxies: self.clone(),
            proxy_id: id,
            stream,
        }
    }

    /// Every connected proxy, sorted by id.
    pub fn list(&self) -> Vec<ProxySummary> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<ProxySummary> = guard
            .1
            .values()
            .map(|e| {
                let mut targets: Vec<String> = e.streams.values().map(|(t, _)| t.clone()).collect();
                targets.sort();
                let mut services: Vec<String> =
                    e.streams.values().flat_map(|(_, s)| s.clone()).collect();
                services.sort();
                services.dedup();
                ProxySummary {
                    identity: e.identity.clone(),
                    streams: e.streams.len() as u32,
                    since: e.since,
                    targets,
                    services,
                }
            })
            .collect();
        out.sort_by(|a, b| a.identity.id.cmp(&b.identity.id));
        out
    }

    /// Ids of the proxies with a watch that resolves to `service` (`name.namespace`).
    pub fn watching(&self, service: &str) -> Vec<String> {
        self.list()
            .into_iter()
            .filter(|p| p.services.iter().any(|s| s == service))
            .map(|p| p.identity.id)
            .collect()
    }

    /// Total open watch streams.
    pub fn stream_count(&self) -> usize {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.values().map(|e| e.streams.len()).sum()
    }
}

impl StreamGuard {
    /// Records which services this stream's target currently resolves to.
    pub fn resolved(&self, services: Vec<String>) {
        let mut guard = self.proxies.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = guard
            .1
            .get_mut(&self.proxy_id)
            .and_then(|e| e.streams.get_mut(&self.stream))
        {
            s.1 = services;
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut guard = self.proxies.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = guard.1.get_mut(&self.proxy_id) {
            e.streams.remove(&self.stream);
            if e.streams.is_empty() {
                guard.1.remove(&self.proxy_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ProxyIdentity {
        ProxyIdentity {
            id: name.into(),
            version: "0.1.0".into(),
            admin_addr: String::new(),
        }
    }

    #[test]
    fn a_proxy_is_listed_while_any_of_its_streams_is_open() {
        let proxies = Arc::new(Proxies::default());
        let a = proxies.open(id("p1"), "service:web".into());
        let b = proxies.open(id("p1"), "gateway".into());
        a.resolved(vec!["web.default".into()]);
        assert_eq!(proxies.list()[0].streams, 2);
        assert_eq!(proxies.watching("web.default"), vec!["p1".to_string()]);
        drop(a);
        assert_eq!(proxies.list().len(), 1);
        assert!(proxies.watching("web.default").is_empty());
        drop(b);
        assert!(proxies.list().is_empty());
        assert_eq!(proxies.stream_count(), 0);
    }
}
