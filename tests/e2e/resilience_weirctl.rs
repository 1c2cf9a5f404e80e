//! Breaker state and policy edits through `weirctl`: an endpoint ejected by real traffic shows up
//! in `weirctl describe service` with the time left until its probe, and `weirctl policy set
//! --rate-limit` reaches a proxy fed by the control plane.

use std::time::Duration;

use http::StatusCode;
use weir_tests::control::WeirControl;
use weir_tests::http_client::get;
use weir_tests::{poll_until, TestBackend};

use crate::control::control_proxy;

const DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn weirctl_describe_shows_an_ejected_endpoint_and_a_rate_limit_set_by_weirctl_answers_429() {
    let (a, b, bad) = tokio::join!(
        TestBackend::start("a"),
        TestBackend::start("b"),
        TestBackend::start("bad")
    );
    bad.force_status(Some(StatusCode::INTERNAL_SERVER_ERROR));
    let registry = format!(
        "services:
  - name: web   # the storefront
    policy: {{ circuitBreaker: {{ consecutiveFailures: 3, minEjection: 60s }} }}
    endpoints:
      - address: \"{}\"
      - address: \"{}\"
      - address: \"{}\"
gateway:
  routes:
    - name: main
      retry: {{ attempts: 2 }}
      backendRefs: [{{ name: web }}]
",
        a.addr, b.addr, bad.addr
    );
    let cp = WeirControl::start(&registry).await;
    let (_proxy, gw) = control_proxy(&cp).await;

    let bad_addr = bad.addr.to_string();
    let row = poll_until(
        DEADLINE,
        "describe to show the bad endpoint ejected",
        || async {
            for _ in 0..10 {
                let r = get(gw, "gw.test", "/").await;
                assert_eq!(r.status, StatusCode::OK, "retried past the bad endpoint");
            }
            let out = cp.weirctl(&["describe", "service", "web"]).await;
            assert_eq!(out.code, 0, "{out:?}");
            let row = out
                .stdout
                .lines()
                .find(|l| l.contains(&bad_addr) && l.contains("ejected"));
            row.map(str::to_owned)
        },
    )
    .await;
    assert!(row.contains("(probe in "), "{row}");
    assert!(row.contains("ejection 1)"), "{row}");

    let out = cp
        .weirctl(&["policy", "set", "web", "--rate-limit", "1/2"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = cp.read_registry();
    assert!(
        text.contains("# the storefront"),
        "spliced in place: {text}"
    );
    assert!(text.contains("burst: 2"), "{text}");
    poll_until(DEADLINE, "the proxy to answer 429", || async {
        for _ in 0..3 {
            let r = get(gw, "gw.test", "/").await;
            if r.status == StatusCode::TOO_MANY_REQUESTS {
                assert_eq!(r.header("weir-proxy-error"), Some("rate-limited"));
                return Some(());
            }
        }
        None
    })
    .await;
    let out = cp
        .weirctl(&["describe", "service", "web", "-o", "json"])
        .await;
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("valid JSON");
    let rl = &json["service"]["policy"]["rateLimit"];
    assert_eq!(rl["requestsPerSecond"], 1.0, "{json}");
    assert!(
        json["endpointStates"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["ejections"] == 1)),
        "{json}"
    );
}
