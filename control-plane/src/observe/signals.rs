//! The golden signals in one scrape, per (service, route, direction): requests, responses, 5xx
//! responses and the latency histogram; how they grew between two scrapes; their quantiles.

use std::collections::HashMap;

use weir_proxy::metrics::{DURATION, REQUESTS, RESPONSES};

use super::prom_text::Sample;

/// One row of `weirctl stat`; field order is the row order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RouteKey {
    /// The `service` label: `name.namespace`, or a pseudo-service (`none`, `passthrough`, `unknown`).
    pub service: String,
    /// The `route` label.
    pub route: String,
    /// The `direction` label.
    pub direction: String,
}

/// Counter values (or their increase) for one route.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Signals {
    /// `weir_requests_total`.
    pub requests: f64,
    /// `weir_responses_total`, every status.
    pub responses: f64,
    /// `weir_responses_total{classification="failure"}` (a 5xx, or a gRPC status other than 0);
    /// from a proxy without the label, `{status_class="5xx"}`.
    pub failures: f64,
    /// `weir_request_duration_seconds_bucket`: (upper bound in seconds, cumulative count), by bound.
    pub buckets: Vec<(f64, f64)>,
}

/// Every route's signals in one scrape.
pub(crate) type RouteSignals = HashMap<RouteKey, Signals>;

/// Picks the golden-signal series out of a proxy's samples; other series are ignored.
pub(crate) fn from_samples(samples: &[Sample]) -> RouteSignals {
    let bucket_name = format!("{DURATION}_bucket");
    let mut out = RouteSignals::new();
    for s in samples {
        let (Some(direction), Some(service), Some(route)) =
            (s.label("direction"), s.label("service"), s.label("route"))
        else {
            continue;
        };
        let key = || RouteKey {
            service: service.to_string(),
            route: route.to_string(),
            direction: direction.to_string(),
        };
        if s.name == REQUESTS {
            out.entry(key()).or_default().requests += s.value;
        } else if s.name == RESPONSES {
            let e = out.entry(key()).or_default();
            e.responses += s.value;
            if is_failure(s) {
                e.failures += s.value;
            }
        } else if s.name == bucket_name {
            let Some(le) = s.label("le").and_then(parse_le) else {
                continue;
            };
            out.entry(key()).or_default().add_bucket(le, s.value);
        }
    }
    out
}

/// The proxy's classification (a 200 carrying grpc-status 14 is a failure); 5xx without one.
fn is_failure(s: &Sample) -> bool {
    if let Some(c) = s.label("classification") {
        return c == "failure";
    }
    match s.label("status_class") {
        Some(class) => class == "5xx",
        None => s.label("status_code").is_some_and(|c| c.starts_with('5')),
    }
}

fn parse_le(le: &str) -> Option<f64> {
    match le {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        _ => le.parse().ok(),
    }
}

impl Signals {
    fn add_bucket(&mut self, le: f64, count: f64) {
        match self.buckets.binary_search_by(|(b, _)| b.total_cmp(&le)) {
            Ok(i) => self.buckets[i].1 += count,
            Err(i) => self.buckets.insert(i, (le, count)),
        }
    }

    /// Adds `other` in (summing proxies or successive increases); buckets are matched by bound.
    pub fn add(&mut self, other: &Signals) {
        self.requests += other.requests;
        self.responses += other.responses;
        self.failures += other.failures;
        for &(le, count) in &other.buckets {
            self.add_bucket(le, count);
        }
    }

    /// How much the counters grew since `earlier`. If any went down the proxy's counters were
    /// reset (it restarted), and as Prometheus does we take the new values as the increase.
    pub fn increase_since(&self, earlier: &Signals) -> Signals {
        let bucket = |le: f64| {
            earlier
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c)
        };
        let reset = self.requests < earlier.requests
            || self.responses < earlier.responses
            || self.failures < earlier.failures
            || self.buckets.iter().any(|&(le, c)| c < bucket(le));
        if reset {
            return self.clone();
        }
        Signals {
            requests: self.requests - earlier.requests,
            responses: self.responses - earlier.responses,
            failures: self.failures - earlier.failures,
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| (le, c - bucket(le)))
                .collect(),
        }
    }

    /// The `q` quantile of latency in seconds, as Prometheus' `histogram_quantile` computes it:
    /// find the bucket holding rank `q × count`, interpolate linearly inside it (the first bucket
    /// starts at 0); a rank in the `+Inf` bucket yields the highest finite bound. `None` without
    /// observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let (&(last_le, total), finite) = self.buckets.split_last()?;
        if last_le != f64::INFINITY || total <= 0.0 || finite.is_empty() {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        // Cumulative counts should never decrease; tolerate it as Prometheus does.
        let mut below: Option<(f64, f64)> = None;
        for &(le, count) in finite {
            let count = count.max(below.map_or(0.0, |b| b.1));
            if count >= rank {
                let (start, before) = match below {
                    Some(b) => b,
                    None if le <= 0.0 => return Some(le),
                    None => (0.0, 0.0),
                };
                let in_bucket = count - before;
                if in_bucket <= 0.0 {
                    return Some(le);
                }
                return Some(start + (le - start) * (rank - before) / in_bucket);
            }
            below = Some((le, count));
        }
        below.map(|b| b.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: &[(f64, f64)]) -> Signals {
        Signals {
            buckets: buckets.to_vec(),
            ..Signals::default()
        }
    }

    fn approx(got: Option<f64>, want: f64) {
        let got = got.expect("a quantile");
        assert!((got - want).abs() < 1e-12, "got {got}, want {want}");
    }

    #[test]
    fn quantiles_interpolate_linearly_inside_the_bucket_holding_the_rank() {
        let h = hist(&[(0.1, 10.0), (0.2, 30.0), (0.4, 40.0), (f64::INFINITY, 40.0)]);
        // rank 20 is the 10th of the 20 observations in (0.1, 0.2]
        approx(h.quantile(0.5), 0.15);
        // rank 38 is the 8th of the 10 in (0.2, 0.4]
        approx(h.quantile(0.95), 0.36);
        approx(h.quantile(0.99), 0.392);
        // the first bucket starts at zero: rank 5 of the 10 in (0, 0.1]
        approx(h.quantile(0.125), 0.05);
    }

    #[test]
    fn a_rank_in_the_inf_bucket_yields_the_highest_finite_bound() {
        let h = hist(&[(0.1, 10.0), (0.5, 10.0), (f64::INFINITY, 20.0)]);
        approx(h.quantile(0.99), 0.5);
        approx(h.quantile(0.5), 0.1);
    }

    #[test]
    fn there_is_no_quantile_without_observations() {
        assert_eq!(
            hist(&[(0.1, 0.0), (f64::INFINITY, 0.0)]).quantile(0.5),
            None
        );
        assert_eq!(hist(&[]).quantile(0.5), None);
    }

    #[test]
    fn a_counter_that_went_down_counts_its_new_value_as_the_increase() {
        let before = Signals {
            requests: 100.0,
            responses: 100.0,
            failures: 4.0,
            buckets: vec![(0.1, 90.0), (f64::INFINITY, 100.0)],
        };
        let grown = Signals {
            requests: 130.0,
            responses: 129.0,
            failures: 5.0,
            buckets: vec![(0.1, 110.0), (f64::INFINITY, 129.0)],
        };
        let inc = grown.increase_since(&before);
        assert_eq!(
            (inc.requests, inc.responses, inc.failures),
            (30.0, 29.0, 1.0)
        );
        assert_eq!(inc.buckets, vec![(0.1, 20.0), (f64::INFINITY, 29.0)]);
        let restarted = Signals {
            requests: 7.0,
            responses: 7.0,
            failures: 0.0,
            buckets: vec![(0.1, 7.0), (f64::INFINITY, 7.0)],
        };
        assert_eq!(restarted.increase_since(&grown), restarted);
    }

    #[test]
    fn a_200_classified_a_failure_counts_as_a_failure_and_unlabelled_5xx_still_do() {
        let text = "\
weir_responses_total{direction=\"gateway\",service=\"g.default\",route=\"r\",status_class=\"2xx\",status_code=\"200\",grpc_status=\"0\",classification=\"success\"} 90
weir_responses_total{direction=\"gateway\",service=\"g.default\",route=\"r\",status_class=\"2xx\",status_code=\"200\",grpc_status=\"14\",classification=\"failure\"} 7
weir_responses_total{direction=\"gateway\",service=\"g.default\",route=\"r\",status_class=\"5xx\",status_code=\"503\",classification=\"failure\"} 3
weir_responses_total{direction=\"gateway\",service=\"old.default\",route=\"r\",status_class=\"5xx\",status_code=\"502\"} 2
weir_responses_total{direction=\"gateway\",service=\"old.default\",route=\"r\",status_class=\"2xx\",status_code=\"200\"} 8
";
        let samples = super::super::prom_text::parse(text).expect("text parses");
        let routes = from_samples(&samples);
        let key = |service: &str| RouteKey {
            service: service.into(),
            route: "r".into(),
            direction: "gateway".into(),
        };
        let g = &routes[&key("g.default")];
        assert_eq!((g.responses, g.failures), (100.0, 10.0));
        let old = &routes[&key("old.default")];
        assert_eq!((old.responses, old.failures), (10.0, 2.0));
    }

    #[test]
    fn picks_requests_responses_and_buckets_per_route() {
        let text = include_str!("testdata/proxy-metrics.txt");
        let samples = super::super::prom_text::parse(text).expect("fixture parses");
        let routes = from_samples(&samples);
        let echo = &routes[&RouteKey {
            service: "echo.default".into(),
            route: "echo".into(),
            direction: "gateway".into(),
        }];
        assert_eq!(
            (echo.requests, echo.responses, echo.failures),
            (26.0, 26.0, 1.0)
        );
        assert_eq!(echo.buckets.len(), 16);
        assert_eq!(echo.buckets[1], (0.001, 17.0));
        assert_eq!(echo.buckets[15], (f64::INFINITY, 26.0));
        // 13 of the 17 in (0.0005, 0.001]
        approx(echo.quantile(0.5), 0.0005 + 0.0005 * 13.0 / 17.0);
    }
}
