//! Live views gathered from the connected proxies' admin listeners: endpoint state for
//! `weirctl describe`, golden signals for `weirctl stat`. (Stub: filled in by the observe work.)

use std::time::Duration;

use weir_proto::admin as pb;

use crate::proxies::ProxySummary;

/// Endpoint state of `service` (`name.namespace`) as each proxy in `proxies` reports it on its
/// admin `/endpoints`.
pub async fn endpoint_states(proxies: &[ProxySummary], service: &str) -> Vec<pb::EndpointState> {
    let _ = (proxies, service);
    Vec::new()
}

/// Remembers earlier metric scrapes so rates can be computed without waiting a whole window.
#[derive(Debug, Default)]
pub struct History {}

/// Success rate, RPS and latency percentiles per service and route over `window`, from the
/// proxies' `/metrics`; `service` (`name.namespace`) narrows it to one service.
pub async fn stat(
    history: &History,
    proxies: &[ProxySummary],
    service: Option<&str>,
    window: Duration,
) -> pb::StatResponse {
    let _ = (history, proxies, service, window);
    pb::StatResponse::default()
}
