//! Recent scrapes of each proxy, so `stat` can compute rates over a window from what earlier
//! calls (a `--watch` loop) already read, instead of waiting a whole window.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::Duration,
};

use tokio::time::Instant;

use super::signals::RouteSignals;

/// How long scrapes are kept; a longer window is computed over what is kept.
const RETAIN: Duration = Duration::from_secs(120);
/// The shortest interval a rate is computed over.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The window when none is asked for (`StatRequest.window_seconds` 0).
const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
/// Bounds memory if `stat` is called in a tight loop.
const MAX_SCRAPES: usize = 600;

/// One proxy's golden signals at one instant.
#[derive(Debug, Clone)]
pub(crate) struct Scrape {
    /// When the proxy answered.
    pub at: Instant,
    /// Its counters per route.
    pub routes: RouteSignals,
}

/// Remembers earlier metric scrapes so rates can be computed without waiting a whole window.
#[derive(Debug)]
pub struct History {
    retain: Duration,
    min_interval: Duration,
    /// Per proxy id, oldest first (not a request path, so a mutex is fine).
    scrapes: Mutex<HashMap<String, VecDeque<Scrape>>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new(RETAIN, MIN_INTERVAL)
    }
}

impl History {
    /// Keeps scrapes for `retain`; rates need scrapes at least `min_interval` apart.
    pub fn new(retain: Duration, min_interval: Duration) -> Self {
        Self {
            retain,
            min_interval,
            scrapes: Mutex::new(HashMap::new()),
        }
    }

    /// The shortest interval a rate is computed over (`stat` scrapes twice this far apart when
    /// it has nothing older).
    pub fn min_interval(&self) -> Duration {
        self.min_interval
    }

    /// The window rates are actually computed over: `window` (10 s if zero), no shorter than
    /// the minimum interval and no longer than what is kept.
    pub(crate) fn effective_window(&self, window: Duration) -> Duration {
        let window = if window.is_zero() {
            DEFAULT_WINDOW
        } else {
            window
        };
        window.clamp(self.min_interval, self.retain.max(self.min_interval))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Scrape>>> {
        self.scrapes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets proxies that are no longer connected.
    pub(crate) fn keep_only<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let ids: std::collections::HashSet<&str> = ids.into_iter().collect();
        self.lock().retain(|id, _| ids.contains(id.as_str()));
    }

    /// Whether a scrape of `proxy_id` taken at `now` can be compared with a kept one that is
    /// inside `window` and at least the minimum interval older.
    pub(crate) fn has_base(&self, proxy_id: &str, now: Instant, window: Duration) -> bool {
        self.lock().get(proxy_id).is_some_and(|ring| {
            ring.iter()
                .any(|s| s.at + window >= now && s.at + self.min_interval <= now)
        })
    }

    /// Keeps `scrape` as the newest of `proxy_id`, dropping those past retention.
    pub(crate) fn record(&self, proxy_id: &str, scrape: Scrape) {
        let mut map = self.lock();
        let ring = map.entry(proxy_id.to_string()).or_default();
        while ring
            .front()
            .is_some_and(|s| s.at + self.retain < scrape.at || ring.len() >= MAX_SCRAPES)
        {
            ring.pop_front();
        }
        ring.push_back(scrape);
    }

    /// How much each route of `proxy_id` grew from its oldest scrape inside `window` (counted
    /// back from the newest) to the newest, and over how long. Increases are summed pair by
    /// pair so a counter reset between two kept scrapes loses only what the restarted proxy
    /// never reported. `None` without two such scrapes.
    pub(crate) fn increase(
        &self,
        proxy_id: &str,
        window: Duration,
    ) -> Option<(RouteSignals, Duration)> {
        let map = self.lock();
        let ring = map.get(proxy_id)?;
        let newest = ring.back()?;
        let first = ring.iter().position(|s| s.at + window >= newest.at)?;
        let elapsed = newest.at.duration_since(ring[first].at);
        if elapsed.is_zero() {
            return None;
        }
        let mut total = RouteSignals::new();
        let pairs = ring.iter().skip(first).zip(ring.iter().skip(first + 1));
        for (earlier, later) in pairs {
            for (key, now) in &later.routes {
                // A route absent before was registered since (a registry change), from zero.
                let grown = match earlier.routes.get(key) {
                    Some(before) => now.increase_since(before),
                    None => now.clone(),
                };
                total.entry(key.clone()).or_default().add(&grown);
            }
        }
        Some((total, elapsed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::signals::{RouteKey, Signals};

    fn key() -> RouteKey {
        RouteKey {
            service: "web.default".into(),
            route: "default".into(),
            direction: "outbound".into(),
        }
    }

    fn scrape(at: Instant, requests: f64) -> Scrape {
        let signals = Signals {
            requests,
            responses: requests,
            failures: 0.0,
            buckets: vec![(0.1, requests), (f64::INFINITY, requests)],
        };
        Scrape {
            at,
            routes: [(key(), signals)].into_iter().collect(),
        }
    }

    #[test]
    fn the_rate_spans_the_oldest_scrape_inside_the_window_and_survives_a_reset() {
        let t0 = Instant::now();
        let history = History::default();
        history.record("p1", scrape(t0, 100.0));
        history.record("p1", scrape(t0 + Duration::from_secs(5), 150.0));
        // the proxy restarted and has served 20 since
        history.record("p1", scrape(t0 + Duration::from_secs(10), 20.0));

        let (inc, elapsed) = history
            .increase("p1", Duration::from_secs(10))
            .expect("three scrapes");
        assert_eq!(elapsed, Duration::from_secs(10));
        assert_eq!(inc[&key()].requests, 50.0 + 20.0);
        assert_eq!(inc[&key()].buckets[1], (f64::INFINITY, 70.0));

        let (inc, elapsed) = history
            .increase("p1", Duration::from_secs(6))
            .expect("two scrapes inside 6 s");
        assert_eq!(elapsed, Duration::from_secs(5));
        assert_eq!(inc[&key()].requests, 20.0);
    }

    #[test]
    fn the_window_defaults_to_ten_seconds_and_stays_within_what_is_kept() {
        let history = History::default();
        assert_eq!(
            history.effective_window(Duration::ZERO),
            Duration::from_secs(10)
        );
        assert_eq!(
            history.effective_window(Duration::from_millis(10)),
            MIN_INTERVAL
        );
        assert_eq!(
            history.effective_window(Duration::from_secs(u32::MAX.into())),
            RETAIN
        );
    }

    #[test]
    fn a_single_scrape_is_no_rate_and_no_base() {
        let t0 = Instant::now();
        let history = History::default();
        assert!(!history.has_base("p1", t0, Duration::from_secs(10)));
        history.record("p1", scrape(t0, 1.0));
        assert!(history.increase("p1", Duration::from_secs(10)).is_none());
        let soon = t0 + Duration::from_millis(400);
        assert!(!history.has_base("p1", soon, Duration::from_secs(10)));
        let later = t0 + Duration::from_secs(3);
        assert!(history.has_base("p1", later, Duration::from_secs(10)));
        assert!(!history.has_base("p1", later, Duration::from_secs(2)));
    }

    #[test]
    fn scrapes_past_retention_and_disconnected_proxies_are_forgotten() {
        let t0 = Instant::now();
        let history = History::new(Duration::from_secs(30), MIN_INTERVAL);
        history.record("p1", scrape(t0, 1.0));
        history.record("p1", scrape(t0 + Duration::from_secs(20), 2.0));
        history.record("p1", scrape(t0 + Duration::from_secs(40), 3.0));
        let (inc, elapsed) = history
            .increase("p1", Duration::from_secs(60))
            .expect("two kept scrapes");
        assert_eq!(
            (inc[&key()].requests, elapsed),
            (1.0, Duration::from_secs(20))
        );

        history.record("p2", scrape(t0, 1.0));
        history.keep_only(["p2"]);
        assert!(history.increase("p1", Duration::from_secs(60)).is_none());
        assert!(history.lock().contains_key("p2"));
    }
}
