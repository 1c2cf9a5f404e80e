//! `weir.admin.v1.Admin`: what `weirctl` reads (services, live endpoint state, health, golden
//! signals) and writes (apply, policy set) — writes go through `persist`.

#[cfg(test)]
pub(crate) mod test_server;
#[cfg(test)]
mod tests;

use std::{sync::Arc, time::Duration};

use tonic::{Request, Response, Status};
use weir_proto::admin::{
    self as pb,
    admin_server::{Admin, AdminServer},
};

use crate::{
    api::translate,
    observe,
    persist::{self, PersistError, PolicyEdit},
    proxies::Proxies,
    state::Store,
};

/// What the admin service reads and writes.
#[derive(Debug, Clone)]
pub struct AdminContext {
    /// The served registry (and its file).
    pub store: Arc<Store>,
    /// Connected proxies.
    pub proxies: Arc<Proxies>,
    /// Earlier metric scrapes, for `Stat`.
    pub history: Arc<observe::History>,
}

/// The tonic service, ready for a router's `add_service`.
pub fn service(ctx: AdminContext) -> AdminServer<AdminApi> {
    AdminServer::new(AdminApi { ctx })
}

/// Implements `weir.admin.v1.Admin` over an [`AdminContext`].
#[derive(Debug)]
pub struct AdminApi {
    ctx: AdminContext,
}

/// Window `Stat` uses when the request gives none.
const DEFAULT_STAT_WINDOW: Duration = Duration::from_secs(10);

#[tonic::async_trait]
impl Admin for AdminApi {
    async fn list_services(
        &self,
        _: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        let cur = self.ctx.store.current();
        Ok(Response::new(pb::ListServicesResponse {
            version: cur.version,
            services: cur
                .registry
                .services
                .iter()
                .map(translate::service)
                .collect(),
        }))
    }

    async fn describe_service(
        &self,
        request: Request<pb::DescribeServiceRequest>,
    ) -> Result<Response<pb::DescribeServiceResponse>, Status> {
        let name = request.into_inner().service;
        let cur = self.ctx.store.current();
        let service = persist::find_service(&cur.registry, &name)
            .map(|i| &cur.registry.services[i])
            .ok_or_else(|| Status::not_found(format!("no service {name:?} in the registry")))?;
        let qualified = service.qualified_name();
        let proxies = self.ctx.proxies.list();
        let (endpoints, route_breakers) = tokio::join!(
            observe::endpoint_states(&proxies, &qualified),
            observe::route_breakers(&proxies, &qualified),
        );
        Ok(Response::new(pb::DescribeServiceResponse {
            service: Some(translate::service(service)),
            endpoints,
            watching_proxies: self.ctx.proxies.watching(&qualified),
            route_breakers,
        }))
    }

    async fn apply(
        &self,
        request: Request<pb::ApplyRequest>,
    ) -> Result<Response<pb::ApplyResponse>, Status> {
        let req = request.into_inner();
        let source = if req.source_name.is_empty() {
            "document"
        } else {
            &req.source_name
        };
        let outcome = persist::apply(&self.ctx.store, source, &req.document, req.dry_run)
            .await
            .map_err(status)?;
        Ok(Response::new(response(outcome)))
    }

    async fn set_policy(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::ApplyResponse>, Status> {
        let req = request.into_inner();
        let edit = PolicyEdit {
            service: req.service,
            timeout: req.timeout,
            retry_budget_ratio: req.retry_budget_ratio,
            retry_budget_min_per_second: req.retry_budget_min_per_second,
            consecutive_failures: req.consecutive_failures,
            max_concurrent_requests: req.max_concurrent_requests,
            rate_limit_rps: req.rate_limit_rps,
            rate_limit_burst: req.rate_limit_burst,
            max_pending_requests: req.max_pending_requests,
            failfast: req.failfast,
            min_ejection: req.min_ejection,
            max_ejection: req.max_ejection,
        };
        let outcome = persist::set_policy(&self.ctx.store, &edit, req.dry_run)
            .await
            .map_err(status)?;
        Ok(Response::new(response(outcome)))
    }

    async fn check(
        &self,
        _: Request<pb::CheckRequest>,
    ) -> Result<Response<pb::CheckResponse>, Status> {
        let cur = self.ctx.store.current();
        let proxies = self
            .ctx
            .proxies
            .list()
            .into_iter()
            .map(|p| pb::ProxyStatus {
                id: p.identity.id,
                version: p.identity.version,
                admin_addr: p.identity.admin_addr,
                streams: p.streams,
                connected_seconds: p.since.elapsed().as_secs(),
            });
        Ok(Response::new(pb::CheckResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            registry: self.ctx.store.path().display().to_string(),
            registry_error: cur.error.clone().unwrap_or_default(),
            registry_version: cur.version,
            proxies: proxies.collect(),
        }))
    }

    async fn stat(
        &self,
        request: Request<pb::StatRequest>,
    ) -> Result<Response<pb::StatResponse>, Status> {
        let req = request.into_inner();
        let window = match req.window_seconds {
            0 => DEFAULT_STAT_WINDOW,
            s => Duration::from_secs(u64::from(s)),
        };
        // A bare name is resolved as `describe` does; an unknown one is passed on as written, since
        // the proxies may still report traffic to a service the registry just dropped.
        let cur = self.ctx.store.current();
        let service = match req.service.as_str() {
            "" => None,
            name => Some(persist::find_service(&cur.registry, name).map_or_else(
                || name.to_string(),
                |i| cur.registry.services[i].qualified_name(),
            )),
        };
        let proxies = self.ctx.proxies.list();
        let out = observe::stat(&self.ctx.history, &proxies, service.as_deref(), window).await;
        Ok(Response::new(out))
    }
}

fn response(o: persist::Outcome) -> pb::ApplyResponse {
    pb::ApplyResponse {
        version: o.version,
        changes: o.changes,
        diff: o.diff,
        warnings: o.warnings,
    }
}

/// The one map from a refused write to a gRPC status.
fn status(e: PersistError) -> Status {
    match e {
        PersistError::Invalid(_) => Status::invalid_argument(e.to_string()),
        PersistError::NotFound(_) => Status::not_found(e.to_string()),
        PersistError::FileInvalid(_) => Status::failed_precondition(e.to_string()),
        PersistError::Io { .. } | PersistError::Render(_) => {
            tracing::error!(error = %e, "registry write failed");
            Status::internal(e.to_string())
        }
    }
}
