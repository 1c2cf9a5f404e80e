//! The `Fault` filter on a mesh route, through the transparent outbound listener (iptables
//! REDIRECT in a network namespace): over 10,000 requests the injected aborts and delays match
//! their percentages within ±2%.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use weir_tests::sidecar::{Sidecar, WhoAmI};
use weir_tests::{metrics, require, NetNs, WeirProxy};

/// A virtual service address that exists nowhere: only the redirect and the registry answer it.
const VIP: &str = "10.96.0.44:80";
/// The injected delay: far above what an undelayed request takes, so the two are told apart by
/// time alone.
const DELAY_MS: u64 = 200;
const TOTAL: usize = 10_000;

#[tokio::test]
async fn injected_aborts_and_delays_on_a_mesh_route_match_their_percentages_over_ten_thousand_requests(
) {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let app = WhoAmI::bind("app", SocketAddr::from((ns.host_ip(), 0))).await;
    let registry = format!(
        "services:
- name: flaky
  addresses: [\"{VIP}\"]
  endpoints: [{{ address: \"{}\" }}]
  routes:
  - name: faulty
    filters:
    - type: Fault
      fault:
        abort: {{ percentage: 10, status: 503 }}
        delay: {{ percentage: 10, duration: {DELAY_MS}ms }}
    backendRefs: [{{ name: flaky }}]
",
        app.addr
    );
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;

    // One curl, 32 keep-alive connections in parallel; after each body, a line with the status
    // and the time it took.
    let url = format!("http://{VIP}/f/[1-{TOTAL}]");
    let started = Instant::now();
    let out = pod
        .run_as_app(
            &[
                "curl",
                "-sS",
                "--parallel",
                "--parallel-max",
                "32",
                "-w",
                "\n@@ %{http_code} %{time_total}\n",
                &url,
            ],
            Duration::from_secs(120),
        )
        .await;
    eprintln!("{TOTAL} requests in {:?}", started.elapsed());
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (mut aborted, mut delayed, mut passed) = (0usize, 0usize, 0usize);
    for line in stdout.lines().filter_map(|l| l.strip_prefix("@@ ")) {
        let (code, secs) = line.split_once(' ').expect("code and time");
        let secs: f64 = secs.parse().expect("a time in seconds");
        match code {
            "503" => aborted += 1,
            "200" if secs >= DELAY_MS as f64 / 1000.0 => delayed += 1,
            "200" => passed += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(aborted + delayed + passed, TOTAL, "every request answered");
    assert_eq!(
        app.requests() as usize,
        delayed + passed,
        "aborts never reach the app"
    );
    // The abort is drawn first; the delay applies to 10% of the rest. Binomial standard
    // deviations: 30 (0.3%) of 10,000 and 28 (0.3%) of ~9,000; ±2% is over six of them.
    let abort_share = aborted as f64 / TOTAL as f64;
    let delay_share = delayed as f64 / (TOTAL - aborted) as f64;
    eprintln!(
        "aborted {aborted} ({:.2}%), delayed {delayed} ({:.2}% of the rest)",
        abort_share * 100.0,
        delay_share * 100.0
    );
    assert!((0.08..=0.12).contains(&abort_share), "aborts {abort_share}");
    assert!((0.08..=0.12).contains(&delay_share), "delays {delay_share}");

    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        metrics::sum(
            &text,
            "weir_proxy_errors_total",
            &[("route", "faulty"), ("error", "fault-injected")]
        )
        .unwrap_or(0.0),
        0.0,
        "an injected abort is the route's answer, not a proxy error"
    );
    assert_eq!(
        metrics::sum(
            &text,
            "weir_responses_total",
            &[("route", "faulty"), ("status_code", "503")]
        ),
        Some(aborted as f64)
    );
}
