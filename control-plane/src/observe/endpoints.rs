//! Endpoint state of one service as each connected proxy reports it on its admin `/endpoints`.

use serde::Deserialize;
use weir_proto::admin as pb;

use super::{scrape, service_matches};
use crate::proxies::ProxySummary;

/// One element of the proxy's `/endpoints` JSON array.
#[derive(Debug, Deserialize)]
struct Reported {
    service: String,
    address: String,
    state: String,
    #[serde(default)]
    in_flight: u64,
    #[serde(default)]
    latency_ewma_ms: f64,
    /// Only while ejected or probing.
    ejected_for_ms: Option<u64>,
    ejections: Option<u32>,
}

/// Endpoints of `service` (`name` or `name.namespace`) from every reachable proxy, sorted by
/// address then proxy id; a proxy that cannot be read is skipped.
pub(super) async fn endpoint_states(
    proxies: &[ProxySummary],
    service: &str,
) -> Vec<pb::EndpointState> {
    let mut out = Vec::new();
    for (proxy, reported) in scrape::json_from_each::<Reported>(proxies, "/endpoints").await {
        out.extend(
            reported
                .into_iter()
                .filter(|e| service_matches(&e.service, service))
                .map(|e| pb::EndpointState {
                    address: e.address,
                    proxy_id: proxy.identity.id.clone(),
                    state: e.state,
                    in_flight: e.in_flight,
                    latency_ewma_ms: e.latency_ewma_ms,
                    ejected_for_ms: e.ejected_for_ms,
                    ejections: e.ejections,
                }),
        );
    }
    out.sort_by(|a, b| (&a.address, &a.proxy_id).cmp(&(&b.address, &b.proxy_id)));
    out
}
