//! The outbound path: a transparent client's request → its service (by virtual address, else
//! authority) → mesh routes → balanced endpoint; unknown destinations pass through unchanged.
//! With a control plane, a destination the snapshot does not know is first asked about.

use std::sync::Arc;

use http::request::Parts;

use crate::{
    addr::{EndpointAddr, OrigDstAddr},
    admission,
    app::{ConnInfo, Shared},
    discovery::index::{ServiceTarget, Snapshot},
    dispatch::{self, Handled},
    error::ProxyError,
    forward,
    http::{body::ProxyBody, headers},
};

/// Handles one outbound request; returns the metrics handle it counted on.
pub async fn request(
    shared: &Shared,
    conn: &ConnInfo,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> Handled {
    let mut snap = shared.snapshot();
    if let Err(e) = headers::validate_request(&mut parts) {
        return (snap.passthrough.clone(), Err(e)).into();
    }
    // A CONNECT's authority is where the tunnel goes beyond the server it addressed (a
    // forward proxy, say), so it is found by its original destination alone.
    let host = if parts.method == http::Method::CONNECT {
        None
    } else {
        headers::authority_host(&parts)
    };
    if let Some(control) = shared.control() {
        let dst = conn.orig_dst.map(|d| d.0);
        if find(&snap, conn.orig_dst, host).is_some() {
            control.touch(dst, host);
        } else if control.resolve(dst, host).await {
            snap = shared.snapshot();
        }
    }
    let target = find(&snap, conn.orig_dst, host);
    let Some(svc) = target else {
        let m = snap.passthrough.clone();
        m.request();
        let Some(dst) = conn.orig_dst else {
            return (m, Err(ProxyError::NoRoute)).into();
        };
        let proto = forward::same_as(parts.version);
        crate::idle::for_upgrade(&mut parts, None, Some(&m));
        return (
            m,
            forward::to_endpoint(shared, EndpointAddr(dst.0), proto, parts, body).await,
        )
            .into();
    };
    if svc.routes.table.is_empty() {
        let m = svc.default_metrics[0].clone();
        m.request();
        let admitted = admission::admit(
            svc,
            &svc.default_route,
            Some(&m),
            &parts.headers,
            conn.client,
        );
        let admitted = match admitted.await {
            Ok(a) => a,
            Err(e) => return (m, Err(e)).into(),
        };
        let idle = crate::idle::timeout_for(&svc.default_route, svc);
        crate::idle::for_upgrade(&mut parts, idle, Some(&m));
        let result = crate::idle::watch(idle, Some(&m), body, |body| {
            forward::to_service(shared, svc, &svc.default_route, Some(&m), parts, body)
        })
        .await;
        return (m, admitted.finish(result)).into();
    }
    let routed = dispatch::route(
        shared,
        &snap,
        &svc.routes,
        parts,
        body,
        &svc.service.namespace,
        conn.client,
    )
    .await;
    Handled {
        metrics: routed
            .metrics
            .unwrap_or_else(|| svc.default_metrics[0].clone()),
        result: routed.result,
        cors: routed.cors,
    }
}

/// The service a request is for: by virtual address, else by authority.
fn find<'a>(
    snap: &'a Snapshot,
    dst: Option<OrigDstAddr>,
    host: Option<&str>,
) -> Option<&'a Arc<ServiceTarget>> {
    dst.and_then(|d| snap.by_orig_dst(d))
        .or_else(|| host.and_then(|h| snap.by_authority(h)))
}
