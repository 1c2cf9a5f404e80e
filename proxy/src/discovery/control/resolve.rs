//! The request path's two calls into the cache: `touch` when the snapshot knew the destination,
//! `resolve` when it did not. A target already answered costs a map lookup and two atomic loads.

use std::{borrow::Cow, net::SocketAddr, sync::atomic::Ordering, sync::Arc};

use tokio::time::Instant;

use super::{
    target::{Entry, TargetKey, NO_SUCH_TARGET, PENDING, SNAPSHOT},
    Control,
};

/// A lookup key that borrows, so a cached target costs no allocation.
#[derive(Clone, Copy)]
enum Key<'a> {
    Address(SocketAddr),
    Authority(&'a str),
}

impl Control {
    /// A request found its destination in the snapshot: keep the target that brought it there
    /// from going idle. The address target, else (when the address is unknown to the registry)
    /// the authority target.
    pub fn touch(&self, dst: Option<SocketAddr>, authority: Option<&str>) {
        let targets = self.targets.load();
        if let Some(e) = dst.and_then(|d| targets.by_addr.get(&d)) {
            e.touch();
            if e.kind() == SNAPSHOT {
                return;
            }
        }
        if let Some(e) = authority.and_then(|h| targets.by_authority.get(&*lower(h))) {
            e.touch();
        }
    }

    /// Makes sure the control plane has been asked about a destination the snapshot did not
    /// know: the original destination address, then (HTTP) the authority. Waits up to the
    /// resolve timeout for a first answer and for the snapshot to include it. Returns whether
    /// the snapshot may now know the destination (look it up again); `false` means pass through.
    pub async fn resolve(
        self: &Arc<Self>,
        dst: Option<SocketAddr>,
        authority: Option<&str>,
    ) -> bool {
        let mut deadline = None;
        if let Some(d) = dst {
            if self.ask(Key::Address(d), &mut deadline).await {
                return true;
            }
        }
        match authority {
            Some(h) => self.ask(Key::Authority(&lower(h)), &mut deadline).await,
            None => false,
        }
    }

    /// Whether `key` resolved to a snapshot that the request path's snapshot now includes.
    async fn ask(self: &Arc<Self>, key: Key<'_>, deadline: &mut Option<Instant>) -> bool {
        let entry = {
            let targets = self.targets.load();
            let found = match key {
                Key::Address(a) => targets.by_addr.get(&a),
                Key::Authority(h) => targets.by_authority.get(h),
            };
            match found {
                Some(e) => {
                    e.touch();
                    match e.kind() {
                        SNAPSHOT if self.is_applied(e) => return true,
                        NO_SUCH_TARGET | super::target::INVALID => return false,
                        _ => e.clone(),
                    }
                }
                None => {
                    drop(targets);
                    let key = match key {
                        Key::Address(a) => TargetKey::Address(a),
                        Key::Authority(h) => TargetKey::Authority(h.into()),
                    };
                    self.subscribe(key, false)
                }
            }
        };
        // Only the first request to a target (or one racing it) gets here.
        let deadline =
            *deadline.get_or_insert_with(|| Instant::now() + self.config.resolve_timeout);
        if entry.kind() == PENDING {
            let mut answer = entry.subscribe();
            let waited = tokio::time::timeout_at(deadline, answer.wait_for(Option::is_some)).await;
            if !waited.is_ok_and(|r| r.is_ok()) {
                tracing::debug!(key = %entry.key, "no answer from the control plane in time; passing through");
                return false;
            }
        }
        if entry.kind() != SNAPSHOT {
            return false;
        }
        let generation = entry.generation();
        let mut applied = self.applied.subscribe();
        let waited =
            tokio::time::timeout_at(deadline, applied.wait_for(|a| *a >= generation)).await;
        waited.is_ok_and(|r| r.is_ok())
    }

    fn is_applied(&self, e: &Entry) -> bool {
        self.applied_generation.load(Ordering::Acquire) >= e.generation()
    }
}

/// Authorities are keyed lower-case; most already are, and those cost no allocation.
fn lower(h: &str) -> Cow<'_, str> {
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(h.to_ascii_lowercase())
    } else {
        Cow::Borrowed(h)
    }
}
