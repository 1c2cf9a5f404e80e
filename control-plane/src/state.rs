//! The registry the control plane serves, published whole through `watch`: every accepted change
//! (a file edit or a `weirctl` write) becomes a new [`RegistryState`] with a higher version; a
//! rejected edit only records why, and the last good registry keeps being served.

use std::{path::PathBuf, sync::Arc};

use tokio::sync::watch;
use weir_proxy::model::Registry;

/// One generation of the served registry.
#[derive(Debug)]
pub struct RegistryState {
    /// Generation: starts at 1, grows by one per accepted change.
    pub version: u64,
    /// The registry in force.
    pub registry: Arc<Registry>,
    /// Why the latest edit on disk was rejected, if it was (`file:line:column: field: reason`,
    /// one problem per line); `None` when the file on disk is what is served.
    pub error: Option<String>,
}

/// The single writer of [`RegistryState`]; cheap to share (`Arc<Store>`).
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    tx: watch::Sender<Arc<RegistryState>>,
    /// Serialises writers of the registry file (weirctl apply / policy set), so two writes never
    /// interleave their read-modify-write.
    pub write_lock: tokio::sync::Mutex<()>,
}

impl Store {
    /// A store serving `registry`, loaded from `path`, at version 1.
    pub fn new(path: PathBuf, registry: Registry) -> Self {
        let (tx, _) = watch::channel(Arc::new(RegistryState {
            version: 1,
            registry: Arc::new(registry),
            error: None,
        }));
        Self {
            path,
            tx,
            write_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The registry file this store serves and persists to.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The generation in force now.
    pub fn current(&self) -> Arc<RegistryState> {
        self.tx.borrow().clone()
    }

    /// A receiver that sees every new generation.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RegistryState>> {
        self.tx.subscribe()
    }

    /// Serves `registry` from now on and returns its version. An identical registry changes
    /// nothing (a `weirctl` write is seen again by the file watcher; it must not push twice),
    /// but clears a recorded error.
    pub fn publish(&self, registry: Registry) -> u64 {
        let mut version = 0;
        self.tx.send_modify(|cur| {
            if *cur.registry == registry {
                version = cur.version;
                if cur.error.is_some() {
                    *cur = Arc::new(RegistryState {
                        version: cur.version,
                        registry: cur.registry.clone(),
                        error: None,
                    });
                }
                return;
            }
            version = cur.version + 1;
            *cur = Arc::new(RegistryState {
                version,
                registry: Arc::new(registry),
                error: None,
            });
        });
        version
    }

    /// Records that the file on disk was rejected; the registry in force is unchanged.
    pub fn reject(&self, error: String) {
        self.tx.send_modify(|cur| {
            *cur = Arc::new(RegistryState {
                version: cur.version,
                registry: cur.registry.clone(),
                error: Some(error),
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_proxy::model::Service;

    fn registry_with(name: &str) -> Registry {
        Registry {
            services: vec![Service {
                name: name.into(),
                namespace: "default".into(),
                hosts: vec![],
                addresses: vec![],
                app_protocol: None,
                endpoints: vec![],
                routes: vec![],
                policy: Default::default(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn publishing_an_identical_registry_keeps_the_version() {
        let store = Store::new("r.yaml".into(), registry_with("a"));
        assert_eq!(store.publish(registry_with("a")), 1);
        assert_eq!(store.publish(registry_with("b")), 2);
        assert_eq!(store.publish(registry_with("b")), 2);
    }

    #[test]
    fn a_rejected_edit_keeps_the_registry_and_records_why() {
        let store = Store::new("r.yaml".into(), registry_with("a"));
        store.reject("r.yaml:3:7: services[0].name: bad".into());
        let cur = store.current();
        assert_eq!(cur.version, 1);
        assert_eq!(cur.registry.services[0].name, "a");
        assert!(cur.error.as_deref().is_some_and(|e| e.contains("3:7")));
        store.publish(registry_with("a"));
        assert!(store.current().error.is_none());
    }
}
