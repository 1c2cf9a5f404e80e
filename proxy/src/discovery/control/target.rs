//! One watched target: its key, the latest usable answer, and when a request last needed it.

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, AtomicU8, Ordering},
        Arc, OnceLock,
    },
};

use tokio::{sync::watch, task::AbortHandle};
use weir_proto::discovery as pb;

use crate::model::Registry;

/// What one watch asks the control plane about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetKey {
    /// A virtual address transparent clients dial.
    Address(SocketAddr),
    /// A request authority without port, lower-cased.
    Authority(Box<str>),
    /// The gateway listener's routes.
    Gateway,
}

impl TargetKey {
    /// The `weir.discovery.v1.Target` asking for it.
    pub fn to_proto(&self) -> pb::Target {
        use pb::target::Kind;
        let kind = match self {
            TargetKey::Address(a) => Kind::Address(a.to_string()),
            TargetKey::Authority(h) => Kind::Authority(h.to_string()),
            TargetKey::Gateway => Kind::Gateway(pb::GatewayTarget {}),
        };
        pb::Target { kind: Some(kind) }
    }
}

impl fmt::Display for TargetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetKey::Address(a) => write!(f, "address {a}"),
            TargetKey::Authority(h) => write!(f, "authority {h}"),
            TargetKey::Gateway => f.write_str("gateway"),
        }
    }
}

/// The latest usable word from the control plane on one target.
#[derive(Debug, Clone)]
pub enum Answer {
    /// The target resolved.
    Snapshot {
        /// Registry generation it was computed from.
        version: u64,
        /// Its services (and gateway routes for the gateway target).
        registry: Arc<Registry>,
    },
    /// The registry does not know it; its traffic passes through.
    NoSuchTarget {
        /// Registry generation.
        version: u64,
    },
    /// The first answer could not be used; treated as unknown until a valid one arrives.
    Invalid,
}

/// `Entry::kind` values: the answer's variant, readable without a lock.
pub(super) const PENDING: u8 = 0;
pub(super) const SNAPSHOT: u8 = 1;
pub(super) const NO_SUCH_TARGET: u8 = 2;
pub(super) const INVALID: u8 = 3;

impl Answer {
    pub(super) fn kind(&self) -> u8 {
        match self {
            Answer::Snapshot { .. } => SNAPSHOT,
            Answer::NoSuchTarget { .. } => NO_SUCH_TARGET,
            Answer::Invalid => INVALID,
        }
    }
}

/// One target in the cache; its watch task runs until the entry is evicted.
#[derive(Debug)]
pub(super) struct Entry {
    pub key: TargetKey,
    /// Never evicted (the gateway target).
    pub pinned: bool,
    /// `clock::now_secs()` of the last request that needed the target.
    last_used: AtomicU64,
    /// Mirrors `answer`'s variant for the request path's lock-free check.
    kind: AtomicU8,
    /// The control's change generation at which `answer` last changed.
    generation: AtomicU64,
    /// Written only under the control's write lock; waiters subscribe for the first answer.
    answer: watch::Sender<Option<Answer>>,
    task: OnceLock<AbortHandle>,
}

impl Entry {
    pub fn new(key: TargetKey, pinned: bool) -> Self {
        Self {
            key,
            pinned,
            last_used: AtomicU64::new(crate::clock::now_secs()),
            kind: AtomicU8::new(PENDING),
            generation: AtomicU64::new(0),
            answer: watch::channel(None).0,
            task: OnceLock::new(),
        }
    }

    /// A request needed this target now. One relaxed load, and a store at most once a second.
    pub fn touch(&self) {
        let now = crate::clock::now_secs();
        if self.last_used.load(Ordering::Relaxed) != now {
            self.last_used.store(now, Ordering::Relaxed);
        }
    }

    pub fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    pub fn kind(&self) -> u8 {
        self.kind.load(Ordering::Acquire)
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn answer(&self) -> Option<Answer> {
        self.answer.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<Answer>> {
        self.answer.subscribe()
    }

    /// Records a new answer made at change `generation`; waiters wake last, when all is set.
    pub fn set(&self, answer: Answer, generation: u64) {
        self.generation.store(generation, Ordering::Release);
        self.kind.store(answer.kind(), Ordering::Release);
        self.answer.send_replace(Some(answer));
    }

    pub fn set_task(&self, task: AbortHandle) {
        let _ = self.task.set(task);
    }

    /// Cancels the watch (the stream is dropped, which the server sees as a cancel).
    pub fn stop(&self) {
        if let Some(t) = self.task.get() {
            t.abort();
        }
    }
}

/// Every watched target, swapped whole on change so the request path reads it without a lock.
#[derive(Debug, Default, Clone)]
pub(super) struct Targets {
    pub by_addr: HashMap<SocketAddr, Arc<Entry>>,
    pub by_authority: HashMap<Box<str>, Arc<Entry>>,
    pub gateway: Option<Arc<Entry>>,
}

impl Targets {
    pub fn get(&self, key: &TargetKey) -> Option<&Arc<Entry>> {
        match key {
            TargetKey::Address(a) => self.by_addr.get(a),
            TargetKey::Authority(h) => self.by_authority.get(h),
            TargetKey::Gateway => self.gateway.as_ref(),
        }
    }

    pub fn insert(&mut self, entry: Arc<Entry>) {
        match &entry.key {
            TargetKey::Address(a) => {
                self.by_addr.insert(*a, entry);
            }
            TargetKey::Authority(h) => {
                self.by_authority.insert(h.clone(), entry);
            }
            TargetKey::Gateway => self.gateway = Some(entry),
        }
    }

    pub fn remove(&mut self, key: &TargetKey) {
        match key {
            TargetKey::Address(a) => {
                self.by_addr.remove(a);
            }
            TargetKey::Authority(h) => {
                self.by_authority.remove(h);
            }
            TargetKey::Gateway => self.gateway = None,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.by_addr
            .values()
            .chain(self.by_authority.values())
            .chain(self.gateway.as_ref())
    }

    pub fn len(&self) -> usize {
        self.by_addr.len() + self.by_authority.len() + usize::from(self.gateway.is_some())
    }
}
