//! Request mirroring: a fire-and-forget copy of a routed request to each `RequestMirror`
//! backend, sent from its own task. The primary never waits for a mirror and never sees its
//! outcome; a mirror gets the body only if it is at most 64 KiB (the primary's body is teed),
//! and at most [`MAX_IN_FLIGHT`] mirror copies are in flight per proxy (the rest are dropped).

pub mod tee;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use http::{header, request::Parts, Version};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::{sync::oneshot, time::Instant};

use crate::{
    app::Shared,
    balance::EndpointState,
    discovery::index::{RouteSet, ServiceTarget, Snapshot},
    error::ProxyError,
    forward,
    http::{
        body::ProxyBody,
        headers::wants_upgrade,
        pool::{EndpointPool, UpstreamProto},
    },
    metrics::{MirrorResult, RouteMetrics},
    model::AppProtocol,
    routing::shadow_head,
};
use tee::{Tee, MAX_MIRROR_BODY};

/// Mirror copies in flight per proxy; beyond it copies are dropped (and counted).
pub const MAX_IN_FLIGHT: usize = 1024;
/// How long a mirror copy may take once its body is complete: request, response and its body.
pub const TIMEOUT: Duration = Duration::from_secs(10);

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One of the [`MAX_IN_FLIGHT`] places, released on drop.
struct Slot;

impl Slot {
    fn acquire() -> Option<Slot> {
        if IN_FLIGHT.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
            IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts a mirror copy of the (filtered) request to each of route `route`'s mirror services
/// and returns the body the primary should send: `body` itself, or a tee of it when a mirror
/// waits for a copy. `mirrored` is whether the route's `RequestMirror` filters ran.
#[allow(clippy::too_many_arguments)]
pub fn start(
    mirrored: bool,
    shared: &Shared,
    snap: &Snapshot,
    set: &RouteSet,
    route: usize,
    metrics: Option<&Arc<RouteMetrics>>,
    parts: &Parts,
    body: ProxyBody,
) -> ProxyBody {
    if !mirrored {
        return body;
    }
    let count = |r: MirrorResult| {
        if let Some(m) = metrics {
            m.mirror(r);
        }
    };
    let empty = body.is_end_stream();
    let too_big = !empty
        && (wants_upgrade(&parts.headers)
            || content_length(parts).is_some_and(|n| n > MAX_MIRROR_BODY as u64));
    let mut txs = Vec::new();
    for target in set.mirror_services(route) {
        if too_big {
            count(MirrorResult::Dropped);
            continue;
        }
        let Some(svc) = target.and_then(|i| snap.service_at(i)) else {
            count(MirrorResult::Failed);
            continue;
        };
        let Some(slot) = Slot::acquire() else {
            count(MirrorResult::Dropped);
            continue;
        };
        let Some(ep) = svc.endpoints.pick() else {
            count(MirrorResult::Failed);
            continue;
        };
        let copy = (!empty).then(|| {
            let (tx, rx) = oneshot::channel();
            txs.push(tx);
            rx
        });
        let job = Job {
            pool: shared.pools.get(ep.addr()),
            endpoint: ep.clone(),
            proto: proto_for(svc, parts.version),
            head: shadow_head(parts),
        };
        let metrics = metrics.cloned();
        tokio::spawn(async move {
            let result = job.run(copy).await;
            drop(slot);
            if let Some(m) = metrics {
                m.mirror(result);
            }
        });
    }
    if txs.is_empty() {
        return body;
    }
    match body {
        ProxyBody::Incoming(b) => ProxyBody::Tee(Box::new(Tee::new(b, txs))),
        // Read whole with its head: each mirror gets its copy now.
        ProxyBody::Full(Some(b)) => {
            for tx in txs {
                let _ = tx.send(b.clone());
            }
            ProxyBody::Full(Some(b))
        }
        // Nothing else reaches here from a client; a mirror without its body is not sent.
        other => other,
    }
}

fn content_length(parts: &Parts) -> Option<u64> {
    parts
        .headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The upstream protocol for `svc`, as `forward::to_service` chooses it.
fn proto_for(svc: &ServiceTarget, version: Version) -> UpstreamProto {
    match svc.service.app_protocol {
        Some(AppProtocol::H2c | AppProtocol::Grpc) => UpstreamProto::H2,
        Some(AppProtocol::Http) => UpstreamProto::Http1,
        _ => forward::same_as(version),
    }
}

/// One mirror copy on its way to one endpoint.
struct Job {
    pool: Arc<EndpointPool>,
    endpoint: Arc<EndpointState>,
    proto: UpstreamProto,
    head: Parts,
}

impl Job {
    /// Waits for the body copy (if any), then sends and reads the answer within [`TIMEOUT`].
    async fn run(self, copy: Option<oneshot::Receiver<Bytes>>) -> MirrorResult {
        let body = match copy {
            None => ProxyBody::empty(),
            Some(rx) => match rx.await {
                Ok(b) => ProxyBody::full(b),
                Err(_) => return MirrorResult::Dropped,
            },
        };
        match tokio::time::timeout(TIMEOUT, self.send(body)).await {
            Ok(Ok(())) => MirrorResult::Sent,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "mirror failed");
                MirrorResult::Failed
            }
            Err(_) => MirrorResult::Failed,
        }
    }

    async fn send(mut self, body: ProxyBody) -> Result<(), ProxyError> {
        forward::prepare(&mut self.head, self.proto)?;
        let inflight = self.endpoint.start();
        let started = Instant::now();
        let conn = match self.pool.acquire(self.proto).await {
            Ok(c) => c,
            Err(e) => {
                if matches!(e, ProxyError::Connect { .. }) {
                    self.endpoint.connect_failed();
                }
                return Err(e);
            }
        };
        let resp = self.pool.send(conn, Box::new(self.head), body).await?;
        inflight.finish(started.elapsed());
        // Read to the end so the connection goes back to the pool; the bytes are not kept.
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
        Ok(())
    }
}
