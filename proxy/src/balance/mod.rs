//! TEMPORARY stub until the balance branch lands.
use crate::{addr::EndpointAddr, model};
use std::{sync::Arc, time::Duration};
#[derive(Debug)]
pub struct EndpointState {
    pub addr: EndpointAddr,
}
pub struct InFlight;
impl InFlight {
    pub fn finish(self, _d: Duration) {}
}
impl EndpointState {
    pub fn start(self: &Arc<Self>) -> InFlight {
        InFlight
    }
    pub fn connect_failed(&self) {}
    pub fn connect_succeeded(&self) {}
}
#[derive(Debug, Clone)]
pub struct EndpointSet(Vec<Arc<EndpointState>>);
impl EndpointSet {
    pub fn rebuild(_prev: Option<&EndpointSet>, eps: &[model::Endpoint]) -> Self {
        Self(
            eps.iter()
                .map(|e| {
                    Arc::new(EndpointState {
                        addr: EndpointAddr(e.address),
                    })
                })
                .collect(),
        )
    }
    pub fn pick(&self) -> Option<Arc<EndpointState>> {
        self.0.first().cloned()
    }
}
