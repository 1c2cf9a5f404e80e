//! Route circuit breakers that are not closed, as each connected proxy reports them on its admin
//! `/breakers` (a proxy without that path is skipped, like an unreachable one).

use futures_util::future::join_all;
use serde::Deserialize;
use tracing::debug;
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
    let fetched = join_all(proxies.iter().map(|p| async move {
        let addr = &p.identity.admin_addr;
        let read = scrape::get(addr, "/breakers").await.and_then(|body| {
            serde_json::from_slice::<Vec<Reported>>(&body)
                .map_err(|e| scrape::ScrapeError::content(addr, "/breakers", e))
        });
        (p, read)
    }))
    .await;
    let mut out = Vec::new();
    for (proxy, read) in fetched {
        let reported = match read {
            Ok(reported) => reported,
            Err(error) => {
                debug!(proxy = %proxy.identity.id, %error, "route breakers unavailable; proxy skipped");
                continue;
            }
        };
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
