//! The control-plane client (`WEIR_PROXY_CONTROL_ADDR`): one `Discovery/Watch` per target the
//! proxy uses, all over one HTTP/2 channel; answers cached per target, dropped when idle, and
//! merged into the one registry the request path's snapshot is built from.

mod backoff;
mod publish;
mod resolve;
mod status;
mod stream;
mod target;
#[cfg(test)]
mod tests;
mod union;

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use tokio::sync::{watch, Notify};
use tonic::transport::{Channel, Endpoint};
use weir_proto::discovery as pb;

pub use backoff::{Backoff, BackoffConfig};
pub use status::Link;
pub use target::{Answer, TargetKey};

use self::{
    status::LinkState,
    target::{Entry, Targets, PENDING},
};
use crate::{metrics as m, model::Registry};

/// How the proxy talks to the control plane (from `WEIR_PROXY_CONTROL_*`).
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// `host:port` of `weir-control`'s gRPC listener.
    pub addr: String,
    /// How long a request to an unknown destination waits for the first answer.
    pub resolve_timeout: Duration,
    /// A target no request needed for this long is dropped.
    pub idle_timeout: Duration,
    /// Watch the gateway routes from the start and never drop them.
    pub gateway: bool,
    /// `ProxyInfo.id`.
    pub proxy_id: String,
    /// `ProxyInfo.admin_addr`: where the control plane can reach `/metrics` and `/endpoints`.
    pub admin_addr: String,
    /// Reconnect delays of each watch stream.
    pub reconnect: BackoffConfig,
}

/// Why the control-plane client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The address does not make a valid URI.
    #[error("WEIR_PROXY_CONTROL_ADDR={addr:?}: {reason}")]
    BadAddress {
        /// As configured.
        addr: String,
        /// What tonic said.
        reason: String,
    },
}

/// The per-target discovery cache and its connection to the control plane.
#[derive(Debug)]
pub struct Control {
    config: ControlConfig,
    channel: Channel,
    proxy: pb::ProxyInfo,
    /// Read lock-free by the request path; replaced whole under `write`.
    targets: ArcSwap<Targets>,
    /// Serialises every change to targets and answers with the union's reading of them.
    write: Mutex<()>,
    /// Change generation: bumped (under `write`) by every answer or target-set change.
    changes: AtomicU64,
    rebuild: Notify,
    /// The last union sent, to recognise it when applied.
    published: Mutex<publish::Published>,
    /// Highest generation the request path's snapshot includes (mirror of `applied`).
    applied_generation: AtomicU64,
    applied: watch::Sender<u64>,
    registry_tx: watch::Sender<Arc<Registry>>,
    link: LinkState,
}

impl Control {
    /// Sets up the channel (connected lazily, re-dialled by tonic after a failure), starts the
    /// union rebuilder, the idle sweeper and, when configured, the gateway watch. Each union is
    /// sent on `registry_tx`; whoever builds the snapshot from it must then call [`Control::applied`].
    pub fn start(
        config: ControlConfig,
        registry_tx: watch::Sender<Arc<Registry>>,
    ) -> Result<Arc<Control>, ControlError> {
        let bad = |e: tonic::transport::Error| ControlError::BadAddress {
            addr: config.addr.clone(),
            reason: e.to_string(),
        };
        let channel = Endpoint::from_shared(format!("http://{}", config.addr))
            .map_err(bad)?
            .connect_timeout(Duration::from_secs(2))
            // Watch streams are idle between registry edits; pings find a vanished peer.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .connect_lazy();
        let control = Arc::new(Control {
            proxy: pb::ProxyInfo {
                id: config.proxy_id.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                admin_addr: config.admin_addr.clone(),
            },
            channel,
            targets: ArcSwap::default(),
            write: Mutex::new(()),
            changes: AtomicU64::new(0),
            rebuild: Notify::new(),
            published: Mutex::default(),
            applied_generation: AtomicU64::new(0),
            applied: watch::channel(0).0,
            registry_tx,
            link: LinkState::default(),
            config,
        });
        tokio::spawn(union::run(control.clone()));
        tokio::spawn(sweep(control.clone()));
        if control.config.gateway {
            control.subscribe(TargetKey::Gateway, true);
        }
        Ok(control)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ControlConfig {
        &self.config
    }

    /// Targets watched now.
    pub fn watches(&self) -> usize {
        self.targets.load().len()
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for `key`, opening its watch if there is none: concurrent first requests for
    /// one target find the entry the first of them created, so one watch serves them all.
    fn subscribe(self: &Arc<Self>, key: TargetKey, pinned: bool) -> Arc<Entry> {
        let _w = self.lock();
        let current = self.targets.load_full();
        if let Some(e) = current.get(&key) {
            return e.clone();
        }
        let entry = Arc::new(Entry::new(key, pinned));
        let mut next = (*current).clone();
        next.insert(entry.clone());
        metrics::gauge!(m::CONTROL_WATCHES).set(next.len() as f64);
        self.targets.store(Arc::new(next));
        let task = tokio::spawn(stream::run(self.clone(), entry.clone()));
        entry.set_task(task.abort_handle());
        tracing::debug!(key = %entry.key, "watching");
        entry
    }

    /// Takes one update off a target's stream. An invalid snapshot is logged and counted, and
    /// the target keeps its previous answer (a first answer that is invalid counts as unknown).
    fn apply(&self, entry: &Entry, update: pb::Update) {
        use pb::update::Result as R;
        let version = update.version;
        let answer = match update.result {
            Some(R::Snapshot(s)) => match Registry::try_from(s) {
                Ok(registry) => {
                    count_update("snapshot");
                    if let Some(Answer::Snapshot { registry: old, .. }) = entry.answer() {
                        if *old == registry {
                            return; // an edit elsewhere in the registry; nothing to rebuild
                        }
                    }
                    Answer::Snapshot {
                        version,
                        registry: Arc::new(registry),
                    }
                }
                Err(error) => return self.invalid(entry, version, &error.to_string()),
            },
            Some(R::NoSuchTarget(n)) => {
                count_update("no_such_target");
                tracing::debug!(key = %entry.key, reason = %n.reason, "no such target");
                Answer::NoSuchTarget { version }
            }
            None => return self.invalid(entry, version, "the update carries no result"),
        };
        self.record(entry, answer);
    }

    fn invalid(&self, entry: &Entry, version: u64, error: &str) {
        count_update("invalid");
        tracing::warn!(key = %entry.key, version, error, "invalid update from the control plane; keeping the previous state");
        if entry.kind() == PENDING {
            self.record(entry, Answer::Invalid);
        }
    }

    fn record(&self, entry: &Entry, answer: Answer) {
        {
            let _w = self.lock();
            let current = self.targets.load();
            if !current
                .get(&entry.key)
                .is_some_and(|e| std::ptr::eq(Arc::as_ptr(e), entry))
            {
                return; // evicted while the update was on its way
            }
            let generation = self.changes.fetch_add(1, Ordering::Relaxed) + 1;
            entry.set(answer, generation);
        }
        self.rebuild.notify_one();
    }

    /// Every target's answer (and whether it is the gateway's), with the generation they make.
    fn answers(&self) -> (u64, Vec<(Answer, bool)>) {
        let _w = self.lock();
        let generation = self.changes.load(Ordering::Relaxed);
        let answers = self
            .targets
            .load()
            .iter()
            .filter_map(|e| e.answer().map(|a| (a, e.key == TargetKey::Gateway)))
            .collect();
        (generation, answers)
    }

    /// Drops every unpinned target no request needed for the idle timeout, as of `now_secs`
    /// (`clock::now_secs()`): its watch is cancelled and its services leave the union.
    pub fn evict_idle(&self, now_secs: u64) -> usize {
        let idle = self.config.idle_timeout.as_secs().max(1);
        let evicted = {
            let _w = self.lock();
            let current = self.targets.load_full();
            let stale: Vec<Arc<Entry>> = current
                .iter()
                .filter(|e| !e.pinned && now_secs.saturating_sub(e.last_used()) >= idle)
                .cloned()
                .collect();
            if stale.is_empty() {
                return 0;
            }
            let mut next = (*current).clone();
            for e in &stale {
                next.remove(&e.key);
                e.stop();
                tracing::debug!(key = %e.key, "idle target dropped");
            }
            metrics::gauge!(m::CONTROL_WATCHES).set(next.len() as f64);
            self.targets.store(Arc::new(next));
            self.changes.fetch_add(1, Ordering::Relaxed);
            stale.len()
        };
        self.rebuild.notify_one();
        evicted
    }
}

fn count_update(result: &'static str) {
    metrics::counter!(m::CONTROL_UPDATES, "result" => result).increment(1);
}

/// Checks for idle targets a few times per idle timeout.
async fn sweep(control: Arc<Control>) {
    let period =
        (control.config.idle_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        control.evict_idle(crate::clock::now_secs());
    }
}
