//! The admin API's responses as plain serde data, for `-o json` and `-o yaml` (the generated
//! protobuf types carry no serde).

mod route;
mod service;

use serde::Serialize;
use weir_proto::admin as pb;

pub use route::Route;
pub(crate) use service::app_protocol;
pub use service::{Endpoint, Policy, Service};

/// `get services`.
#[derive(Debug, Serialize)]
pub struct Services {
    version: u64,
    services: Vec<Service>,
}

/// `get endpoints SVC`.
#[derive(Debug, Serialize)]
pub struct Endpoints {
    service: String,
    endpoints: Vec<Endpoint>,
}

/// `describe service SVC`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Describe {
    service: Option<Service>,
    endpoint_states: Vec<EndpointState>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    route_breakers: Vec<RouteBreakerState>,
    watching_proxies: Vec<String>,
}

/// An endpoint as one proxy sees it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointState {
    address: String,
    proxy_id: String,
    state: String,
    in_flight: u64,
    latency_ewma_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ejected_for_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ejections: Option<u32>,
}

/// A route breaker that is open or probing, as one proxy sees it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteBreakerState {
    route: String,
    proxy_id: String,
    state: String,
    gateway: bool,
    ejected_for_ms: u64,
    ejections: u32,
}

/// `apply` and `policy set`.
#[derive(Debug, Serialize)]
pub struct Apply {
    version: u64,
    changes: Vec<String>,
    diff: String,
    warnings: Vec<String>,
}

/// `check`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    version: String,
    registry: String,
    registry_error: String,
    registry_version: u64,
    proxies: Vec<Proxy>,
}

/// A connected proxy.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    id: String,
    version: String,
    admin_addr: String,
    streams: u32,
    connected_seconds: u64,
}

/// `stat`.
#[derive(Debug, Serialize)]
pub struct Stat {
    rows: Vec<StatRow>,
    proxies: u32,
}

/// One service (and route).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatRow {
    service: String,
    route: String,
    direction: String,
    success_rate: f64,
    rps: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    requests: u64,
}

impl From<&pb::ListServicesResponse> for Services {
    fn from(r: &pb::ListServicesResponse) -> Self {
        Services {
            version: r.version,
            services: r.services.iter().map(Service::from).collect(),
        }
    }
}

impl Endpoints {
    /// The endpoints of `service` as the registry declares them.
    pub fn new(service: &weir_proto::discovery::Service) -> Self {
        Endpoints {
            service: format!("{}.{}", service.name, service.namespace),
            endpoints: service.endpoints.iter().map(Endpoint::from).collect(),
        }
    }
}

impl From<&pb::EndpointState> for EndpointState {
    fn from(e: &pb::EndpointState) -> Self {
        EndpointState {
            address: e.address.clone(),
            proxy_id: e.proxy_id.clone(),
            state: e.state.clone(),
            in_flight: e.in_flight,
            latency_ewma_ms: e.latency_ewma_ms,
            ejected_for_ms: e.ejected_for_ms,
            ejections: e.ejections,
        }
    }
}

impl From<&pb::DescribeServiceResponse> for Describe {
    fn from(r: &pb::DescribeServiceResponse) -> Self {
        Describe {
            service: r.service.as_ref().map(Service::from),
            endpoint_states: r.endpoints.iter().map(EndpointState::from).collect(),
            route_breakers: r
                .route_breakers
                .iter()
                .map(|b| RouteBreakerState {
                    route: b.route.clone(),
                    proxy_id: b.proxy_id.clone(),
                    state: b.state.clone(),
                    gateway: b.gateway,
                    ejected_for_ms: b.ejected_for_ms,
                    ejections: b.ejections,
                })
                .collect(),
            watching_proxies: r.watching_proxies.clone(),
        }
    }
}

impl From<&pb::ApplyResponse> for Apply {
    fn from(r: &pb::ApplyResponse) -> Self {
        Apply {
            version: r.version,
            changes: r.changes.clone(),
            diff: r.diff.clone(),
            warnings: r.warnings.clone(),
        }
    }
}

impl From<&pb::CheckResponse> for Check {
    fn from(r: &pb::CheckResponse) -> Self {
        Check {
            version: r.version.clone(),
            registry: r.registry.clone(),
            registry_error: r.registry_error.clone(),
            registry_version: r.registry_version,
            proxies: r
                .proxies
                .iter()
                .map(|p| Proxy {
                    id: p.id.clone(),
                    version: p.version.clone(),
                    admin_addr: p.admin_addr.clone(),
                    streams: p.streams,
                    connected_seconds: p.connected_seconds,
                })
                .collect(),
        }
    }
}

impl From<&pb::StatResponse> for Stat {
    fn from(r: &pb::StatResponse) -> Self {
        Stat {
            rows: r
                .rows
                .iter()
                .map(|s| StatRow {
                    service: s.service.clone(),
                    route: s.route.clone(),
                    direction: s.direction.clone(),
                    success_rate: s.success_rate,
                    rps: s.rps,
                    p50_ms: s.p50_ms,
                    p95_ms: s.p95_ms,
                    p99_ms: s.p99_ms,
                    requests: s.requests,
                })
                .collect(),
            proxies: r.proxies,
        }
    }
}
