//! `weirctl stat`: scrape every proxy's `/metrics`, compare with earlier scrapes, and sum the
//! increase per (service, route, direction) into success rate, RPS and latency percentiles.

use std::{collections::BTreeMap, time::Duration};

use futures_util::future::join_all;
use tokio::time::Instant;
use tracing::debug;
use weir_proto::admin as pb;

use super::{
    history::{History, Scrape},
    prom_text, scrape, service_matches,
    signals::{self, RouteKey, Signals},
};
use crate::proxies::ProxySummary;

/// See [`super::stat`].
pub(super) async fn stat(
    history: &History,
    proxies: &[ProxySummary],
    service: Option<&str>,
    window: Duration,
) -> pb::StatResponse {
    let window = history.effective_window(window);
    history.keep_only(proxies.iter().map(|p| p.identity.id.as_str()));
    let first = scrape_all(proxies.iter()).await;
    let need_second = first
        .iter()
        .any(|(p, s)| !history.has_base(&p.identity.id, s.at, window));
    let mut read: Vec<&ProxySummary> = Vec::with_capacity(first.len());
    for (p, s) in first {
        history.record(&p.identity.id, s);
        read.push(p);
    }
    if need_second {
        // The measurement interval: nothing old enough to compare with yet.
        tokio::time::sleep(history.min_interval()).await;
        for (p, s) in scrape_all(read.iter().copied()).await {
            history.record(&p.identity.id, s);
        }
    }

    let mut rows: BTreeMap<RouteKey, (Signals, f64)> = BTreeMap::new();
    let mut contributing = 0;
    for p in read {
        let Some((increase, elapsed)) = history.increase(&p.identity.id, window) else {
            continue;
        };
        contributing += 1;
        let secs = elapsed.as_secs_f64();
        for (key, grown) in increase {
            if service.is_some_and(|s| !service_matches(&key.service, s)) {
                continue;
            }
            let (sum, rps) = rows.entry(key).or_default();
            *rps += grown.requests / secs;
            sum.add(&grown);
        }
    }
    pb::StatResponse {
        rows: rows
            .into_iter()
            .filter(|(key, (sum, _))| {
                key.service.contains('.') || sum.requests + sum.responses > 0.0
            })
            .map(|(key, (sum, rps))| row(key, &sum, rps))
            .collect(),
        proxies: contributing,
    }
}

/// Scrapes every proxy at once; those that cannot be read are logged and left out.
async fn scrape_all<'a>(
    proxies: impl Iterator<Item = &'a ProxySummary>,
) -> Vec<(&'a ProxySummary, Scrape)> {
    let scraped = join_all(proxies.map(|p| async move { (p, scrape_metrics(p).await) })).await;
    scraped
        .into_iter()
        .filter_map(|(p, r)| match r {
            Ok(s) => Some((p, s)),
            Err(error) => {
                debug!(proxy = %p.identity.id, %error, "metrics unavailable; proxy skipped");
                None
            }
        })
        .collect()
}

async fn scrape_metrics(p: &ProxySummary) -> Result<Scrape, scrape::ScrapeError> {
    let addr = &p.identity.admin_addr;
    let body = scrape::get(addr, "/metrics").await?;
    let at = Instant::now();
    let text = std::str::from_utf8(&body)
        .map_err(|e| scrape::ScrapeError::content(addr, "/metrics", e))?;
    let samples =
        prom_text::parse(text).map_err(|e| scrape::ScrapeError::content(addr, "/metrics", e))?;
    Ok(Scrape {
        at,
        routes: signals::from_samples(&samples),
    })
}

fn row(key: RouteKey, sum: &Signals, rps: f64) -> pb::StatRow {
    let ms = |q| sum.quantile(q).map_or(0.0, |s| s * 1000.0);
    pb::StatRow {
        success_rate: if sum.responses > 0.0 {
            (sum.responses - sum.failures) / sum.responses
        } else {
            0.0
        },
        rps,
        p50_ms: ms(0.5),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        requests: sum.requests.round() as u64,
        service: key.service,
        route: key.route,
        direction: key.direction,
    }
}
