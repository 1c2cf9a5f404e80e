//! The registry turned into what the request path needs: lookups by virtual address, authority
//! and name, compiled route tables, endpoint sets and metric handles; rebuilt whole on each edit
//! and published through `ArcSwap`.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, OnceLock},
};

use crate::{
    addr::OrigDstAddr,
    balance::{route_observer, BalanceConfig, EndpointSet},
    metrics::{Direction, RouteMetrics, TcpMetrics},
    model::{Dur, Filter, Registry, Route, Service},
    resilience::policy::{RoutePolicy, ServicePolicy},
    routing::RouteTable,
};

/// Compiled routes, each route's backends resolved to service indexes, and one metrics handle
/// per route (and per backend for the gateway), all built when the registry loads.
#[derive(Debug)]
pub struct RouteSet {
    /// The compiled table.
    pub table: RouteTable,
    /// `metrics[route][backend]`.
    metrics: Vec<Vec<Arc<RouteMetrics>>>,
    /// `backends[route][backend]`: index into the snapshot's services.
    backends: Vec<Vec<Option<usize>>>,
    /// `policies[route]`: timeouts, retries, rate limit and breaker, compiled.
    policies: Vec<Arc<RoutePolicy>>,
    /// `mirrors[route]`: each `RequestMirror` filter's service, in filter order.
    mirrors: Vec<Vec<Option<usize>>>,
}

impl RouteSet {
    /// `service` labels mesh routes with the service addressed; gateway routes (`None`) are
    /// labelled with each backend. `default_ns` resolves backendRefs without a namespace.
    /// `service_timeout` is the request timeout of routes that set none (`None` for gateway
    /// routes: there the backend service's applies); `prev` lends its compiled policies to routes
    /// that did not change, so their breakers keep their state.
    fn new(
        routes: &[Route],
        direction: Direction,
        service: Option<&str>,
        default_ns: &str,
        by_name: &HashMap<(String, String), usize>,
        service_timeout: Option<Dur>,
        prev: Option<&RouteSet>,
    ) -> Self {
        let mut metrics = Vec::with_capacity(routes.len());
        let mut backends = Vec::with_capacity(routes.len());
        let policies = routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let old = prev.and_then(|p| {
                    p.policies
                        .iter()
                        .find(|q| q.source.name == r.name && !r.name.is_empty())
                });
                let observer = || {
                    let name = route_label(r, i);
                    let owner = service.unwrap_or_default();
                    Some(route_observer(direction.as_str(), owner, &name))
                };
                RoutePolicy::build(r, service_timeout, old, observer)
            })
            .collect();
        for (i, r) in routes.iter().enumerate() {
            let route_name = route_label(r, i);
            let mut per_backend = Vec::with_capacity(r.backend_refs.len().max(1));
            let mut resolved = Vec::with_capacity(r.backend_refs.len());
            for b in &r.backend_refs {
                let ns = b.namespace.as_deref().unwrap_or(default_ns);
                resolved.push(by_name.get(&(b.name.clone(), ns.to_string())).copied());
                let label = match service {
                    Some(svc) => svc.to_string(),
                    None => format!("{}.{ns}", b.name),
                };
                per_backend.push(RouteMetrics::new(direction, &label, &route_name));
            }
            if per_backend.is_empty() {
                per_backend.push(RouteMetrics::new(
                    direction,
                    service.unwrap_or("none"),
                    &route_name,
                ));
            }
            metrics.push(per_backend);
            backends.push(resolved);
        }
        let mirrors = routes
            .iter()
            .map(|r| {
                r.filters
                    .iter()
                    .filter_map(|f| match f {
                        Filter::RequestMirror { request_mirror } => {
                            let b = &request_mirror.backend_ref;
                            let ns = b.namespace.as_deref().unwrap_or(default_ns);
                            Some(by_name.get(&(b.name.clone(), ns.to_string())).copied())
                        }
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        Self {
            table: RouteTable::new(routes),
            metrics,
            backends,
            policies,
            mirrors,
        }
    }

    /// The compiled policy of route `route`.
    pub fn policy(&self, route: usize) -> Option<&Arc<RoutePolicy>> {
        self.policies.get(route)
    }

    /// The metrics handle for a route and chosen backend.
    pub fn metrics(&self, route: usize, backend: usize) -> Option<&Arc<RouteMetrics>> {
        let per = self.metrics.get(route)?;
        per.get(backend).or_else(|| per.first())
    }

    /// Route `route`'s mirror services (indexes into `Snapshot::services`; `None`: unknown).
    pub fn mirror_services(&self, route: usize) -> &[Option<usize>] {
        self.mirrors.get(route).map_or(&[], Vec::as_slice)
    }

    /// The service a route's backend resolves to, as an index into `Snapshot::services`.
    pub fn backend_service(&self, route: usize, backend: usize) -> Option<usize> {
        *self.backends.get(route)?.get(backend)?
    }
}

/// One service as the request path sees it.
#[derive(Debug)]
pub struct ServiceTarget {
    /// `name.namespace`.
    pub name: String,
    /// The registry entry.
    pub service: Service,
    /// Mesh routes (may be empty: then everything goes to the service's endpoints).
    pub routes: RouteSet,
    /// Endpoints with their balancer state (kept across reloads by address).
    pub endpoints: EndpointSet,
    /// The service's policy, compiled (budget, limits, rate limit, breaker settings, failfast).
    pub policy: Arc<ServicePolicy>,
    /// The policy of requests no mesh route matches (the service's timeout, default retries).
    pub default_route: Arc<RoutePolicy>,
    /// Metrics when no route applies, per direction (outbound, inbound).
    pub default_metrics: [Arc<RouteMetrics>; 2],
    /// Opaque TCP metrics, outbound.
    pub tcp: TcpMetrics,
    /// Opaque TCP metrics, inbound: registered on first use, since a proxy takes inbound
    /// connections only for its own pod's services.
    tcp_inbound: OnceLock<TcpMetrics>,
}

impl ServiceTarget {
    /// Opaque TCP metrics for `direction` (the gateway relays no TCP; it counts as outbound).
    pub fn tcp(&self, direction: Direction) -> &TcpMetrics {
        match direction {
            Direction::Inbound => self
                .tcp_inbound
                .get_or_init(|| TcpMetrics::new(Direction::Inbound, &self.name)),
            _ => &self.tcp,
        }
    }
}

/// The whole state the request path reads, swapped in one piece.
#[derive(Debug)]
pub struct Snapshot {
    /// What was loaded.
    pub registry: Arc<Registry>,
    services: Vec<Arc<ServiceTarget>>,
    by_vip: HashMap<SocketAddr, usize>,
    by_host: HashMap<String, usize>,
    by_name: HashMap<(String, String), usize>,
    by_endpoint: HashMap<SocketAddr, usize>,
    /// Edge routes.
    pub gateway: RouteSet,
    /// Metrics for gateway requests no route matched.
    pub gateway_unmatched: Arc<RouteMetrics>,
    /// Metrics for outbound traffic to destinations the registry does not know.
    pub passthrough: Arc<RouteMetrics>,
    /// Opaque TCP to unknown destinations.
    pub passthrough_tcp: TcpMetrics,
    /// Opaque TCP inbound to an address no service names.
    pub inbound_unknown_tcp: TcpMetrics,
}

impl Snapshot {
    /// Builds a snapshot, reusing balancer state from `prev` for endpoints that stayed.
    pub fn build(registry: Arc<Registry>, prev: Option<&Snapshot>) -> Self {
        let (mut by_vip, mut by_host, mut by_name, mut by_endpoint) = (
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
        );
        for (i, svc) in registry.services.iter().enumerate() {
            for a in &svc.addresses {
                by_vip.insert(*a, i);
            }
            for h in &svc.hosts {
                by_host.insert(h.to_ascii_lowercase(), i);
            }
            for e in &svc.endpoints {
                by_endpoint.entry(e.address).or_insert(i);
            }
            by_name.insert((svc.name.clone(), svc.namespace.clone()), i);
        }
        let balance = BalanceConfig::default();
        let services = registry
            .services
            .iter()
            .map(|svc| {
                let name = svc.qualified_name();
                let prev_svc = prev.and_then(|p| p.service(&svc.name, &svc.namespace));
                let prev_set = prev_svc.map(|t| &t.endpoints);
                let timeout = svc.policy.timeout;
                let policy = ServicePolicy::build(&svc.policy, prev_svc.map(|t| &t.policy));
                let endpoints = EndpointSet::rebuild(prev_set, &svc.endpoints, &balance);
                endpoints.arm_breakers(policy.breaker.as_ref(), &name);
                Arc::new(ServiceTarget {
                    routes: RouteSet::new(
                        &svc.routes,
                        Direction::Outbound,
                        Some(&name),
                        &svc.namespace,
                        &by_name,
                        timeout,
                        prev_svc.map(|t| &t.routes),
                    ),
                    policy,
                    default_route: RoutePolicy::build(
                        &Route::default(),
                        timeout,
                        prev_svc.map(|t| &t.default_route),
                        || None,
                    ),
                    endpoints,
                    default_metrics: [
                        RouteMetrics::new(Direction::Outbound, &name, "default"),
                        RouteMetrics::new(Direction::Inbound, &name, "default"),
                    ],
                    tcp: TcpMetrics::new(Direction::Outbound, &name),
                    tcp_inbound: OnceLock::new(),
                    service: svc.clone(),
                    name,
                })
            })
            .collect();
        Self {
            gateway: RouteSet::new(
                &registry.gateway.routes,
                Direction::Gateway,
                None,
                "default",
                &by_name,
                None,
                prev.map(|p| &p.gateway),
            ),
            gateway_unmatched: RouteMetrics::new(Direction::Gateway, "none", "none"),
            passthrough: RouteMetrics::new(Direction::Outbound, "passthrough", "default"),
            passthrough_tcp: TcpMetrics::new(Direction::Outbound, "passthrough"),
            inbound_unknown_tcp: TcpMetrics::new(Direction::Inbound, "unknown"),
            registry,
            services,
            by_vip,
            by_host,
            by_name,
            by_endpoint,
        }
    }

    /// The service a transparent client dialled by virtual address.
    pub fn by_orig_dst(&self, dst: OrigDstAddr) -> Option<&Arc<ServiceTarget>> {
        self.by_vip.get(&dst.0).map(|&i| &self.services[i])
    }

    /// The service named by a request authority (host without port).
    pub fn by_authority(&self, host: &str) -> Option<&Arc<ServiceTarget>> {
        match self.by_host.get(host) {
            Some(&i) => Some(&self.services[i]),
            None if host.bytes().any(|b| b.is_ascii_uppercase()) => self
                .by_host
                .get(&host.to_ascii_lowercase())
                .map(|&i| &self.services[i]),
            None => None,
        }
    }

    /// The service at `index` (from `RouteSet::backend_service`).
    pub fn service_at(&self, index: usize) -> Option<&Arc<ServiceTarget>> {
        self.services.get(index)
    }

    /// The service with this name in this namespace (start-up and reload only: it allocates).
    pub fn service(&self, name: &str, namespace: &str) -> Option<&Arc<ServiceTarget>> {
        // Allocation-free lookup would need a borrowed tuple key; services are few per snapshot.
        self.by_name
            .get(&(name.to_string(), namespace.to_string()))
            .map(|&i| &self.services[i])
    }

    /// The service an inbound connection's local address belongs to, for metric labels.
    pub fn by_endpoint(&self, addr: SocketAddr) -> Option<&Arc<ServiceTarget>> {
        self.by_endpoint.get(&addr).map(|&i| &self.services[i])
    }

    /// All services, in registry order.
    pub fn services(&self) -> &[Arc<ServiceTarget>] {
        &self.services
    }
}

/// The `route` label of the `i`th route: its name, or `route-<i>` when it has none.
fn route_label(r: &Route, i: usize) -> String {
    if r.name.is_empty() {
        format!("route-{i}")
    } else {
        r.name.clone()
    }
}
