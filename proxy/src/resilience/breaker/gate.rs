//! `EjectionGate`: the floor of ready endpoints that breakers of one endpoint set may not eject
//! below.

use std::sync::atomic::{AtomicU32, Ordering};

/// Counts the ejected endpoints of one set against its size and floor, lock-free; every breaker
/// of the set asks it before ejecting.
#[derive(Debug)]
pub struct EjectionGate {
    endpoints: AtomicU32,
    ejected: AtomicU32,
    floor: u32,
}

impl EjectionGate {
    /// A gate over `endpoints` endpoints that keeps at least `floor` of them in service.
    pub fn new(endpoints: u32, floor: u32) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            endpoints: AtomicU32::new(endpoints),
            ejected: AtomicU32::new(0),
            floor,
        })
    }

    /// A gate with no floor, for a route's own breaker.
    pub fn unbounded() -> std::sync::Arc<Self> {
        Self::new(1, 0)
    }

    /// The set changed size (a registry reload); breakers of removed endpoints give their place
    /// back when dropped.
    pub fn set_endpoints(&self, n: u32) {
        self.endpoints.store(n, Ordering::Release);
    }

    /// Endpoints currently ejected.
    pub fn ejected(&self) -> u32 {
        self.ejected.load(Ordering::Acquire)
    }

    /// Takes a place for one more ejection, unless that would leave fewer than the floor ready.
    pub(super) fn try_eject(&self) -> bool {
        let endpoints = self.endpoints.load(Ordering::Acquire);
        self.ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| {
                (endpoints.saturating_sub(e + 1) >= self.floor).then_some(e + 1)
            })
            .is_ok()
    }

    /// Gives an ejection's place back.
    pub(super) fn restore(&self) {
        let _ = self
            .ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| e.checked_sub(1));
    }
}
