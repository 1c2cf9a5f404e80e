//! Route circuit breakers that are not closed, as each connected proxy reports them on its admin
//! `/breakers` (a proxy without that path is skipped, like an unreachable one).

use serde::Deserialize;
use weir_proto::admin as pb;

use super::{scrape, service_matches};
use crate::proxies::ProxySummary;

/// One element of the proxy's `/breakers` JSON array.
#[derive(Debug, Deserialize)]
struct Reported {
    service: String,
    route: String,
    state: String,
    #[serde(default)]
    gateway: bool,
    #[serde(default)]
    ejected_for_ms: u64,
    #[serde(default)]
    ejections: u32,
}

/// Open or probing route breakers of `service` from every reachable proxy, sorted by route then
/// proxy id.
pub(super) async fn route_breakers(
    proxies: &[ProxySummary],
    service: &str,
) -> Vec<pb::RouteBreakerState> {
    let mut out = Vec::new();
    for (proxy, reported) in scrape::json_from_each::<Reported>(proxies, "/breakers").await {
        out.extend(
            reported
                .into_iter()
                .filter(|b| service_matches(&b.service, service))
                .map(|b| pb::RouteBreakerState {
                    route: b.route,
                    proxy_id: proxy.identity.id.clone(),
                    state: b.state,
                    ejected_for_ms: b.ejected_for_ms,
                    ejections: b.ejections,
                    gateway: b.gateway,
                }),
        );
    }
    out.sort_by(|a, b| (&a.route, &a.proxy_id).cmp(&(&b.route, &b.proxy_id)));
    out
}
