//! The registry file source: loaded once at start-up (an invalid file is a start-up error), then
//! polled; each valid edit is published to the store, each invalid one is logged with its
//! `file:line:column` problems, counted, and recorded in the store while the last good registry
//! keeps being served.

use std::{path::Path, sync::Arc, time::Duration};

use metrics::counter;
use tokio::{task::JoinHandle, time::MissedTickBehavior};
use weir_proxy::{
    discovery::{
        registry_file::{self, RegistryError},
        watch_file::RegistryFile,
    },
    model::Registry,
};

use crate::{metrics::RELOADS, state::Store};

/// How often the file is checked by default: edits reach the proxies well within a second.
pub const DEFAULT_POLL: Duration = weir_proxy::discovery::watch_file::DEFAULT_POLL;

/// Reads and validates the registry file at start-up.
pub fn load(path: &Path) -> Result<Registry, RegistryError> {
    registry_file::load(path)
}

/// Polls the store's file every `poll` until the task is aborted. The watcher reuses the
/// proxy's [`RegistryFile`], which sees rename-over edits and symlink swaps and ignores rewrites
/// with identical bytes.
pub fn spawn(store: Arc<Store>, poll: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut file = RegistryFile::new(store.path().to_path_buf());
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Some(outcome) = file.poll() {
                apply(&store, outcome);
            }
        }
    })
}

/// Publishes a good registry or records why the file was rejected.
pub fn apply(store: &Store, outcome: Result<Registry, RegistryError>) {
    match outcome {
        Ok(registry) => {
            let (services, gateway_routes) =
                (registry.services.len(), registry.gateway.routes.len());
            let before = store.current().version;
            let version = store.publish(registry);
            counter!(RELOADS, "result" => "ok").increment(1);
            if version != before {
                tracing::info!(
                    path = %store.path().display(),
                    version,
                    services,
                    gateway_routes,
                    "registry file reloaded"
                );
            }
        }
        Err(e) => {
            counter!(RELOADS, "result" => "invalid").increment(1);
            tracing::warn!(
                path = %store.path().display(),
                "registry file rejected; the last good registry is still served:\n{e}"
            );
            store.reject(e.to_string());
        }
    }
}
