//! Whether the control plane is reachable, and what the proxy holds from it, for `/ready`,
//! `/config` and the `weir_control_*` metrics.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use serde_json::{json, Value};

use super::{target::Answer, Control, TargetKey};
use crate::metrics as m;

/// The state of the link to the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// No watch has been answered or failed yet.
    Connecting,
    /// The last stream event was a success.
    Connected,
    /// The last stream event was a failure: the last known state is being served.
    Disconnected,
}

impl Link {
    /// Label for `/config`.
    pub fn as_str(self) -> &'static str {
        match self {
            Link::Connecting => "connecting",
            Link::Connected => "connected",
            Link::Disconnected => "disconnected",
        }
    }
}

/// `Link` shared by every watch task, with when it last went down.
#[derive(Debug, Default)]
pub(super) struct LinkState {
    state: AtomicU8,
    down_since_secs: AtomicU64,
}

const CONNECTING: u8 = 0;
const CONNECTED: u8 = 1;
const DISCONNECTED: u8 = 2;

impl Control {
    /// The link to the control plane now.
    pub fn link(&self) -> Link {
        match self.link.state.load(Ordering::Acquire) {
            CONNECTING => Link::Connecting,
            CONNECTED => Link::Connected,
            _ => Link::Disconnected,
        }
    }

    /// `None` without a gateway listener; else whether the gateway routes have been answered
    /// (what `/ready` waits for).
    pub fn gateway_answered(&self) -> Option<bool> {
        let targets = self.targets.load();
        let gateway = targets.gateway.as_ref()?;
        Some(matches!(
            gateway.answer(),
            Some(Answer::Snapshot { .. } | Answer::NoSuchTarget { .. })
        ))
    }

    pub(super) fn stream_up(&self) {
        if self.link.state.swap(CONNECTED, Ordering::AcqRel) != CONNECTED {
            metrics::gauge!(m::CONTROL_CONNECTED).set(1.0);
            tracing::info!(addr = %self.config.addr, "connected to the control plane");
        }
    }

    pub(super) fn stream_down(&self) {
        metrics::counter!(m::CONTROL_RECONNECTS).increment(1);
        let was = self.link.state.swap(DISCONNECTED, Ordering::AcqRel);
        if was != DISCONNECTED {
            self.link
                .down_since_secs
                .store(crate::clock::now_secs(), Ordering::Release);
            metrics::gauge!(m::CONTROL_CONNECTED).set(0.0);
            tracing::warn!(addr = %self.config.addr, "control plane unreachable; serving the last known state");
        }
    }

    /// The `control` object of `/config`.
    pub fn status_json(&self) -> Value {
        let now = crate::clock::now_secs();
        let link = self.link();
        let targets: Vec<Value> = self
            .targets
            .load()
            .iter()
            .map(|e| {
                let (answer, version, services) = match e.answer() {
                    None => ("pending", None, vec![]),
                    Some(Answer::Invalid) => ("invalid", None, vec![]),
                    Some(Answer::NoSuchTarget { version }) => {
                        ("no_such_target", Some(version), vec![])
                    }
                    Some(Answer::Snapshot { version, registry }) => (
                        "snapshot",
                        Some(version),
                        registry
                            .services
                            .iter()
                            .map(|s| s.qualified_name())
                            .collect(),
                    ),
                };
                json!({
                    "target": e.key.to_string(),
                    "answer": answer,
                    "version": version,
                    "services": services,
                    "idle_secs": now.saturating_sub(e.last_used()),
                    "pinned": e.key == TargetKey::Gateway,
                })
            })
            .collect();
        let down_for = (link == Link::Disconnected)
            .then(|| now.saturating_sub(self.link.down_since_secs.load(Ordering::Acquire)));
        json!({
            "addr": self.config.addr,
            "link": link.as_str(),
            "disconnected_for_secs": down_for,
            "watches": targets.len(),
            "targets": targets,
        })
    }
}
