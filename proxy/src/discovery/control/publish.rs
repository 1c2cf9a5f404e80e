//! Which union the request path's snapshot is built from, so that a request waiting for an
//! answer wakes exactly when the snapshot includes it, and an unchanged union is not sent again.

use std::sync::{atomic::Ordering, Arc, PoisonError};

use super::Control;
use crate::model::Registry;

/// The last union sent on the registry channel.
#[derive(Debug, Default)]
pub(super) struct Published {
    /// The change generation it includes.
    generation: u64,
    registry: Option<Arc<Registry>>,
    /// Whether the snapshot has been built from it.
    applied: bool,
}

impl Control {
    /// Records the union of `generation` before it is sent (so [`Control::applied`] knows it
    /// whenever the app gets to it), or returns `None` when it equals the last one: then that
    /// one simply stands for `generation` too, and nothing is rebuilt.
    pub(super) fn publish(&self, generation: u64, registry: Registry) -> Option<Arc<Registry>> {
        let mut p = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if p.registry.as_deref() == Some(&registry) {
            p.generation = generation;
            if p.applied {
                self.mark_applied(generation);
            }
            return None;
        }
        let registry = Arc::new(registry);
        *p = Published {
            generation,
            registry: Some(registry.clone()),
            applied: false,
        };
        Some(registry)
    }

    /// The request path's snapshot is now built from `registry`: wakes the requests waiting for
    /// the answers it includes. A registry other than the last union sent is ignored (the newer
    /// one is on its way).
    pub fn applied(&self, registry: &Arc<Registry>) {
        // Held while marking, so `publish` of an unchanged union cannot slip in between.
        let mut p = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if p.registry
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, registry))
        {
            p.applied = true;
            self.mark_applied(p.generation);
        }
    }

    fn mark_applied(&self, generation: u64) {
        self.applied_generation
            .fetch_max(generation, Ordering::AcqRel);
        self.applied.send_if_modified(|a| {
            let newer = generation > *a;
            if newer {
                *a = generation;
            }
            newer
        });
    }
}
