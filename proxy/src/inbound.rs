//! The inbound path: a peer's request → the local application at the original port.

use http::request::Parts;

use crate::{
    addr::EndpointAddr,
    admission::{self, Admitted},
    app::{ConnInfo, Shared},
    dispatch::Handled,
    error::ProxyError,
    forward,
    http::{body::ProxyBody, headers},
    resilience::idle::resolve,
};

/// Handles one inbound request; returns the metrics handle it counted on.
pub async fn request(
    shared: &Shared,
    conn: &ConnInfo,
    mut parts: Box<Parts>,
    body: ProxyBody,
) -> Handled {
    let snap = shared.snapshot();
    let Some(dst) = conn.orig_dst else {
        return (snap.passthrough.clone(), Err(ProxyError::NoRoute)).into();
    };
    let svc = snap.by_endpoint(dst.0);
    let m = svc.map_or_else(
        || shared.inbound_unknown.clone(),
        |s| s.default_metrics[1].clone(),
    );
    m.request();
    if let Err(e) = headers::validate_request(&mut parts) {
        return (m, Err(e)).into();
    }
    let admitted = match svc {
        Some(s) => match admission::admit_inbound(s, &m, &parts.headers, conn.client).await {
            Ok(a) => a,
            Err(e) => return (m, Err(e)).into(),
        },
        None => Admitted::default(),
    };
    let proto = forward::same_as(parts.version);
    // The local service's `policy.idleTimeout` (an unknown port gets none).
    let idle = svc.and_then(|s| resolve(None, s.policy.source.idle_timeout));
    crate::idle::for_upgrade(&mut parts, idle, Some(&m));
    let result = crate::idle::watch(idle, Some(&m), body, |body| {
        forward::to_endpoint(shared, EndpointAddr(dst.0), proto, parts, body)
    })
    .await;
    (m, admitted.finish(result)).into()
}
