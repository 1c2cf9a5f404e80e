//! Live views gathered from the connected proxies' admin listeners: endpoint state for
//! `weirctl describe`, golden signals for `weirctl stat`.
//!
//! Each proxy is read over plain HTTP/1.1 (`/metrics`, `/endpoints`, `/breakers`), all at once, each bounded
//! by a short timeout; a proxy that cannot be read is skipped, never fatal.

mod breakers;
mod endpoints;
mod history;
pub mod prom_text;
mod scrape;
mod signals;
mod stat;

#[cfg(test)]
mod tests;

use std::time::Duration;

use weir_proto::admin as pb;

use crate::proxies::ProxySummary;

pub use history::History;

/// Endpoint state of `service` (`name.namespace`) as each proxy in `proxies` reports it on its
/// admin `/endpoints`.
pub async fn endpoint_states(proxies: &[ProxySummary], service: &str) -> Vec<pb::EndpointState> {
    endpoints::endpoint_states(proxies, service).await
}

/// Route circuit breakers of `service` that are open or probing, as each proxy reports them on
/// its admin `/breakers`.
pub async fn route_breakers(proxies: &[ProxySummary], service: &str) -> Vec<pb::RouteBreakerState> {
    breakers::route_breakers(proxies, service).await
}

/// Success rate, RPS and latency percentiles per service and route over `window`, from the
/// proxies' `/metrics`; `service` (`name.namespace`) narrows it to one service.
///
/// `window` 0 means 10 s; it is clamped to [1 s, 2 min] (what [`History`] keeps by default).
/// Per proxy, the fresh scrape is compared with the oldest kept scrape inside `window`; when
/// no kept scrape is at least [`History::min_interval`] old, a second scrape follows after
/// that interval. Increases are summed over proxies; RPS is each proxy's increase over its own
/// interval, summed. Success is any response but 5xx; percentiles interpolate in the summed
/// histogram as `histogram_quantile` does. Without responses, success rate and percentiles
/// are 0 (show them as `-`). Rows are sorted by service, route, direction; the proxy's
/// pseudo-services (`none`, `passthrough`, `unknown`) appear only when they saw traffic.
pub async fn stat(
    history: &History,
    proxies: &[ProxySummary],
    service: Option<&str>,
    window: Duration,
) -> pb::StatResponse {
    stat::stat(history, proxies, service, window).await
}

/// Whether the proxy's `service` label (`name.namespace`) is what `filter` asks for: the same
/// qualified name, or the same name in any namespace when `filter` has no dot; an empty
/// filter matches everything.
fn service_matches(label: &str, filter: &str) -> bool {
    if filter.is_empty() || label == filter {
        return true;
    }
    !filter.contains('.')
        && label
            .split_once('.')
            .is_some_and(|(name, _)| name == filter)
}
