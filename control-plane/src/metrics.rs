//! Every weir-control metric name with its description, and the process-wide Prometheus
//! recorder `/metrics` renders.

use std::sync::OnceLock;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::proxies::Proxies;

/// Distinct proxies with at least one open watch.
pub const CONNECTED_PROXIES: &str = "weir_control_connected_proxies";
/// Open watch streams.
pub const STREAMS: &str = "weir_control_streams";
/// Updates handed to watch streams.
pub const PUSHES: &str = "weir_control_pushes_total";
/// Registry change accepted → update handed to a stream.
pub const PUSH_LATENCY: &str = "weir_control_push_latency_seconds";
/// Generation of the registry being served.
pub const REGISTRY_VERSION: &str = "weir_control_registry_version";
/// Registry file reloads by result (`ok`, `invalid`).
pub const RELOADS: &str = "weir_control_registry_reloads_total";

/// Push latency buckets in seconds: 1 ms to 10 s (the target is well under 1 s).
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The recorder's render handle. Installs the Prometheus recorder on first use; if another
/// recorder already owns the process (an in-process test harness that also runs a proxy), the
/// handle renders an empty, detached recorder instead of failing.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets(BUCKETS)
                    .expect("static, non-empty buckets")
            };
            match builder().install_recorder() {
                Ok(handle) => {
                    describe();
                    handle
                }
                Err(e) => {
                    tracing::warn!("metrics recorder not installed ({e}); /metrics will be empty");
                    builder().build_recorder().handle()
                }
            }
        })
        .clone()
}

/// Sets the gauges that are cheapest to read at scrape time rather than keep up to date.
pub fn refresh(proxies: &Proxies) {
    gauge!(CONNECTED_PROXIES).set(proxies.list().len() as f64);
    gauge!(STREAMS).set(proxies.stream_count() as f64);
}

fn describe() {
    describe_gauge!(
        CONNECTED_PROXIES,
        "Distinct proxies with at least one open discovery watch."
    );
    describe_gauge!(STREAMS, "Open discovery watch streams.");
    describe_counter!(
        PUSHES,
        "Discovery updates handed to watch streams, the first answer of each stream included."
    );
    describe_histogram!(
        PUSH_LATENCY,
        Unit::Seconds,
        "Time from a registry change being accepted to the update being handed to a watch stream."
    );
    describe_gauge!(
        REGISTRY_VERSION,
        "Generation of the registry being served; grows by one per accepted change."
    );
    describe_counter!(
        RELOADS,
        "Registry file reloads by result: ok (served) or invalid (rejected, last good kept)."
    );
    // Counters show from the first scrape, so a rate() over a fresh process starts at zero.
    counter!(PUSHES).increment(0);
    counter!(RELOADS, "result" => "ok").increment(0);
    counter!(RELOADS, "result" => "invalid").increment(0);
}
