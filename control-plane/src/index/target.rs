//! What a watch asks about ([`TargetKey`]) and what it resolves to ([`Resolution`]).

use std::net::SocketAddr;

use weir_proto::discovery as pb;

use super::Index;

/// A watch target, normalised for use as a memo key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetKey {
    /// `name` or `name.namespace`.
    Service(String),
    /// A request authority, with or without a port.
    Authority(String),
    /// A virtual address `ip:port`, as sent.
    Address(String),
    /// The gateway routes.
    Gateway,
}

impl TargetKey {
    /// The key for a proto target; `None` when the target names nothing.
    pub fn from_proto(target: &pb::Target) -> Option<TargetKey> {
        use pb::target::Kind;
        Some(match target.kind.as_ref()? {
            Kind::Service(s) => TargetKey::Service(s.clone()),
            Kind::Authority(a) => TargetKey::Authority(a.to_ascii_lowercase()),
            Kind::Address(a) => TargetKey::Address(a.clone()),
            Kind::Gateway(_) => TargetKey::Gateway,
        })
    }

    /// How the connected-proxies table shows it: `service:web`, `authority:web:80`,
    /// `address:10.0.0.1:80`, `gateway`.
    pub fn label(&self) -> String {
        match self {
            TargetKey::Service(s) => format!("service:{s}"),
            TargetKey::Authority(a) => format!("authority:{a}"),
            TargetKey::Address(a) => format!("address:{a}"),
            TargetKey::Gateway => "gateway".into(),
        }
    }
}

/// What a target resolves to in one generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The target is known.
    Found(Resolved),
    /// The registry does not know the target; `reason` is for the proxy's log.
    NotFound {
        /// Human-readable.
        reason: String,
    },
}

/// The services (and, for the gateway, routes) in a target's snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub(super) slots: Vec<usize>,
    pub(super) names: Vec<String>,
    pub(super) gateway: bool,
}

impl Resolved {
    /// `name.namespace` of each service in the snapshot: the target's own service first, then
    /// every service its routes reference, transitively.
    pub fn services(&self) -> &[String] {
        &self.names
    }

    /// Whether the snapshot carries the gateway routes.
    pub fn has_gateway_routes(&self) -> bool {
        self.gateway
    }
}

impl Resolution {
    /// `name.namespace` of the services in the snapshot; empty when not found.
    pub fn services(&self) -> &[String] {
        match self {
            Resolution::Found(r) => r.services(),
            Resolution::NotFound { .. } => &[],
        }
    }
}

impl Index {
    /// What `target` resolves to in this generation.
    pub fn resolve(&self, target: &pb::Target) -> Resolution {
        match TargetKey::from_proto(target) {
            Some(key) => self.resolve_key(&key),
            None => Resolution::NotFound {
                reason: "the watch names no target".into(),
            },
        }
    }

    /// What `key` resolves to in this generation.
    pub fn resolve_key(&self, key: &TargetKey) -> Resolution {
        let root = match key {
            TargetKey::Gateway => return self.found(self.closure(&self.gateway.refs), true),
            TargetKey::Service(name) => self
                .slot_by_name(name)
                .ok_or_else(|| format!("no service named {name}")),
            TargetKey::Authority(a) => self
                .slot_by_authority(a)
                .ok_or_else(|| format!("no service has host {a}")),
            TargetKey::Address(a) => match a.parse::<SocketAddr>() {
                Ok(addr) => self
                    .by_address
                    .get(&addr)
                    .copied()
                    .ok_or_else(|| format!("no service has address {a}")),
                Err(_) => Err(format!("{a:?} is not an ip:port address")),
            },
        };
        match root {
            Ok(i) => self.found(self.closure(&[i]), false),
            Err(reason) => Resolution::NotFound { reason },
        }
    }

    fn found(&self, slots: Vec<usize>, gateway: bool) -> Resolution {
        Resolution::Found(Resolved {
            names: slots
                .iter()
                .map(|&i| self.slots[i].qualified.clone())
                .collect(),
            slots,
            gateway,
        })
    }
}
