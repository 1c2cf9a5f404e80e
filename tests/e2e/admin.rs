//! The admin listener: health, the loaded registry, Prometheus metrics that `promtool` accepts
//! after every kind of traffic, `POST /shutdown` (loopback clients only, on a dual-stack listener
//! too), and an accept loop that outlives running out of file descriptors.

use std::time::Duration;

use http::StatusCode;
use weir_tests::http_client::{get, get_h2, head_len, raw_exchange, raw_status};
use weir_tests::metrics::{promtool_check, samples, sum};
use weir_tests::{poll_until, require, NetNs, TestBackend};

use crate::gateway::{gateway_proxy, registry, service};

const ROUTES: &str = "    - name: main
      matches: [{ path: { type: PathPrefix, value: /app } }]
      backendRefs: [{ name: app }]
    - name: empty
      matches: [{ path: { type: PathPrefix, value: /empty } }]
      backendRefs: [{ name: empty }]
    - name: status
      matches: [{ path: { type: PathPrefix, value: /_/status } }]
      backendRefs: [{ name: app }]
    - name: delay
      matches: [{ path: { type: PathPrefix, value: /_/delay } }]
      backendRefs: [{ name: app }]
";

#[tokio::test]
async fn health_config_and_method_checks_answer_on_the_admin_listener() {
    let app = TestBackend::start("app").await;
    let yaml = registry(
        &[service("app", &[app.addr]), service("empty", &[])],
        ROUTES,
    );
    let (proxy, _gw) = gateway_proxy(&yaml).await;

    let ready = proxy.admin_get("/ready").await;
    assert_eq!(
        (ready.status, ready.body.as_str()),
        (StatusCode::OK, "ready\n")
    );
    let live = proxy.admin_get("/live").await;
    assert_eq!(
        (live.status, live.body.as_str()),
        (StatusCode::OK, "live\n")
    );

    let config = proxy.admin_get("/config").await;
    assert_eq!(config.status, StatusCode::OK);
    assert_eq!(config.header("content-type"), Some("application/json"));
    let reg = &config.json()["registry"];
    assert_eq!(reg["services"][0]["name"], "app");
    assert_eq!(reg["services"][0]["namespace"], "default");
    assert_eq!(
        reg["services"][0]["endpoints"][0]["address"],
        app.addr.to_string()
    );
    assert_eq!(reg["services"][1]["name"], "empty");
    assert_eq!(reg["gateway"]["routes"][0]["name"], "main");
    assert_eq!(
        reg["gateway"]["routes"][1]["backendRefs"][0]["name"],
        "empty"
    );

    // /config follows the watched file.
    proxy.write_registry(&registry(&[service("app", &[app.addr])], ""));
    poll_until(
        Duration::from_secs(5),
        "/config to show the edit",
        || async {
            let reg = proxy.admin_get("/config").await.json();
            (reg["registry"]["services"].as_array().map(Vec::len) == Some(1)).then_some(())
        },
    )
    .await;

    let wrong_method = proxy.admin_get("/shutdown").await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        proxy.admin_post("/ready").await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    // Every 405 says which methods the path takes.
    assert_eq!(wrong_method.header("allow"), Some("POST"));
    let post_ready = proxy.admin_post("/ready").await;
    assert_eq!(post_ready.header("allow"), Some("GET, HEAD"));
    assert_eq!(proxy.admin_get("/nope").await.status, StatusCode::NOT_FOUND);
    assert_eq!(proxy.admin_get("/").await.status, StatusCode::NOT_FOUND);

    // HEAD answers as GET does, without the body (a load balancer's health check may use it).
    let head = raw_exchange(
        proxy.admin,
        b"HEAD /live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        raw_status(&head),
        Some(200),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let at = head_len(&head).expect("a whole head");
    assert_eq!(&head[at..], b"", "HEAD got a body");
    let head_text = String::from_utf8_lossy(&head[..at]).to_ascii_lowercase();
    assert!(head_text.contains("content-length: 5\r\n"), "{head_text}");
    // GET /shutdown did not shut anything down.
    assert_eq!(proxy.admin_get("/ready").await.status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_pass_promtool_and_carry_the_expected_series_after_every_kind_of_traffic() {
    require!(tool "promtool");
    let app = TestBackend::start("app").await;
    let yaml = registry(
        &[service("app", &[app.addr]), service("empty", &[])],
        ROUTES,
    );
    let (proxy, gw) = gateway_proxy(&yaml).await;

    // Gateway traffic: 2xx over HTTP/1 and h2c, 4xx and 5xx from the backend ...
    for _ in 0..6 {
        assert_eq!(get(gw, "gw.test", "/app/ok").await.status, 200);
    }
    assert_eq!(get_h2(gw, "gw.test", "/app/h2").await.status, 200);
    assert_eq!(get(gw, "gw.test", "/_/status/404").await.status, 404);
    assert_eq!(get(gw, "gw.test", "/_/status/503").await.status, 503);
    // ... and responses the proxy makes itself: no route, no endpoints.
    let no_route = get(gw, "gw.test", "/elsewhere").await;
    assert_eq!(no_route.header("weir-proxy-error"), Some("no-route"));
    let no_endpoints = get(gw, "gw.test", "/empty").await;
    assert_eq!(
        no_endpoints.header("weir-proxy-error"),
        Some("no-endpoints")
    );

    // A registry reload that applies, one that is rejected, and the fix.
    let extra = ROUTES.to_owned()
        + "    - name: extra
      matches: [{ path: { type: Exact, value: /extra } }]
      backendRefs: [{ name: app }]
";
    let good = registry(
        &[service("app", &[app.addr]), service("empty", &[])],
        &extra,
    );
    proxy.write_registry(&good);
    poll_until(Duration::from_secs(5), "the added route", || async {
        (get(gw, "gw.test", "/extra").await.status == 200).then_some(())
    })
    .await;
    proxy.write_registry("services: [{ name: x, endpoints: [{ address: nowhere }] }]\n");
    poll_until(Duration::from_secs(5), "the rejected reload", || async {
        let text = proxy.metrics_text().await;
        sum(&text, "weir_registry_reloads_total", &[("result", "error")]).map(drop)
    })
    .await;
    proxy.write_registry(&(good + "# fixed\n"));
    poll_until(
        Duration::from_secs(5),
        "the reload after the fix",
        || async {
            let text = proxy.metrics_text().await;
            (sum(&text, "weir_registry_last_reload_success", &[]) == Some(1.0)).then_some(())
        },
    )
    .await;

    let text = proxy.metrics_text().await;
    if let Err(e) = promtool_check(&text) {
        panic!("{e}\n--- /metrics ---\n{text}");
    }

    let gw_series = |route: &'static str| {
        [
            ("direction", "gateway"),
            ("service", "app.default"),
            ("route", route),
        ]
    };
    let count = |name: &str, labels: &[(&str, &str)]| {
        sum(&text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{text}"))
    };
    assert_eq!(count("weir_requests_total", &gw_series("main")), 7.0);
    assert_eq!(count("weir_requests_total", &gw_series("status")), 2.0);
    assert!(count("weir_requests_total", &gw_series("extra")) >= 1.0);
    let empty = [
        ("direction", "gateway"),
        ("service", "empty.default"),
        ("route", "empty"),
    ];
    assert_eq!(count("weir_requests_total", &empty), 1.0);

    let code = |route: &'static str, class: &'static str, code: &'static str| {
        let mut l = gw_series(route).to_vec();
        l.extend([("status_class", class), ("status_code", code)]);
        count("weir_responses_total", &l)
    };
    assert_eq!(code("main", "2xx", "200"), 7.0);
    assert_eq!(code("status", "4xx", "404"), 1.0);
    assert_eq!(code("status", "5xx", "503"), 1.0);
    let mut no_eps = empty.to_vec();
    no_eps.extend([("status_class", "5xx"), ("status_code", "503")]);
    assert_eq!(count("weir_responses_total", &no_eps), 1.0);
    let unmatched = [
        ("direction", "gateway"),
        ("service", "none"),
        ("route", "none"),
        ("status_class", "4xx"),
        ("status_code", "404"),
    ];
    // /elsewhere, and /extra polled before its route applied.
    assert!(count("weir_responses_total", &unmatched) >= 1.0);
    assert!(count("weir_proxy_errors_total", &[("error", "no-route")]) >= 1.0);
    assert_eq!(
        count("weir_proxy_errors_total", &[("error", "no-endpoints")]),
        1.0
    );

    // Every gateway request is counted once on arrival and once on its response, routed or not.
    for (service, route) in [
        ("app.default", "main"),
        ("app.default", "status"),
        ("empty.default", "empty"),
        ("none", "none"),
    ] {
        let l = [
            ("direction", "gateway"),
            ("service", service),
            ("route", route),
        ];
        assert_eq!(
            count("weir_requests_total", &l),
            count("weir_responses_total", &l),
            "requests vs responses of {l:?}"
        );
        assert_eq!(
            count("weir_request_duration_seconds_count", &l),
            count("weir_responses_total", &l),
            "latency samples vs responses of {l:?}"
        );
    }

    // The latency histogram: cumulative buckets up to +Inf, which equals _count.
    let main = gw_series("main");
    let buckets: Vec<_> = samples(&text)
        .into_iter()
        .filter(|s| s.name == "weir_request_duration_seconds_bucket")
        .filter(|s| main.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .collect();
    assert!(buckets.len() >= 10, "too few buckets: {buckets:?}");
    assert!(
        buckets.windows(2).all(|w| w[0].value <= w[1].value),
        "{buckets:?}"
    );
    let inf = buckets
        .iter()
        .find(|s| s.label("le") == Some("+Inf"))
        .expect("a +Inf bucket");
    assert_eq!(inf.value, 7.0);
    assert_eq!(count("weir_request_duration_seconds_count", &main), 7.0);
    assert!(count("weir_request_duration_seconds_sum", &main) > 0.0);

    // Protocol detection per downstream connection: every HTTP/1 call above used a fresh
    // connection, the h2c one too.
    let detected = |p: &'static str| {
        count(
            "weir_protocol_detections_total",
            &[("direction", "gateway"), ("protocol", p)],
        )
    };
    assert_eq!(detected("h2"), 1.0);
    assert!(detected("http1") >= 11.0);

    // Reloads: the start-up read, the edit, the fix succeeded; the bad edit did not.
    assert!(count("weir_registry_reloads_total", &[("result", "success")]) >= 2.0);
    assert_eq!(
        count("weir_registry_reloads_total", &[("result", "error")]),
        1.0
    );
    assert!(count("weir_registry_last_reload_timestamp_seconds", &[]) > 1.6e9);
    // Every series says which path it belongs to.
    for s in samples(&text)
        .iter()
        .filter(|s| s.name.starts_with("weir_requests") || s.name.starts_with("weir_responses"))
    {
        assert!(s.label("direction").is_some(), "{s:?}");
    }
}

#[tokio::test]
async fn post_shutdown_from_loopback_drains_and_exits_zero() {
    let app = TestBackend::start("app").await;
    let yaml = registry(
        &[service("app", &[app.addr]), service("empty", &[])],
        ROUTES,
    );
    let (mut proxy, gw) = gateway_proxy(&yaml).await;

    let slow = tokio::spawn(async move { get(gw, "gw.test", "/_/delay/700").await });
    poll_until(
        Duration::from_secs(5),
        "the slow request at the backend",
        || async { (app.requests() == 1).then_some(()) },
    )
    .await;
    let reply = proxy.admin_post("/shutdown").await;
    assert!(
        !slow.is_finished(),
        "the request is still in flight at /shutdown"
    );
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "shutting down\n")
    );
    let slow = slow.await.expect("slow request task");
    assert_eq!(
        slow.status,
        StatusCode::OK,
        "the request in flight completes"
    );
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
}

#[tokio::test]
async fn a_dual_stack_admin_listener_takes_shutdown_from_ipv4_loopback_and_refuses_another_host() {
    require!(root, tool "ip", tool "curl");
    let ns = NetNs::create();
    let mut proxy = weir_tests::WeirProxy::builder()
        .admin_dual_stack()
        .start()
        .await;

    // From the namespace: another host, arriving on `[::]` as `::ffff:198.18.x.y`.
    let url = format!("http://{}:{}/shutdown", ns.host_ip(), proxy.admin.port());
    let curl = [
        "curl",
        "-sS",
        "--max-time",
        "5",
        "-X",
        "POST",
        "-w",
        " %{http_code}",
        &url,
    ];
    let out = tokio::process::Command::from(ns.command(&curl))
        .output()
        .await
        .expect("run curl in the namespace");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "loopback clients only\n 403",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(proxy.admin_get("/ready").await.status, StatusCode::OK);
    assert!(proxy.try_exit().is_none(), "{}", proxy.log());

    // From IPv4 loopback, which the listener sees as `::ffff:127.0.0.1`.
    let reply = proxy.admin_post("/shutdown").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "shutting down\n")
    );
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
}

#[tokio::test]
async fn admin_accept_out_of_file_descriptors_backs_off_and_serves_again() {
    let proxy = weir_tests::WeirProxy::builder().start().await;
    let deadline = Duration::from_secs(10);
    // Room for three more descriptors; ten connections wait in the admin listener's backlog.
    let had = proxy.set_open_files_limit(proxy.open_fds() as u64 + 3);
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(
            tokio::net::TcpStream::connect(proxy.admin)
                .await
                .expect("the backlog takes it"),
        );
    }
    proxy.wait_for_log("accept failed", deadline).await;
    // Out of descriptors for this window: the loop retries every 10 ms, where one that spun
    // on the failing accept would burn a core for all of it, and it warns once.
    let window = Duration::from_millis(500);
    let before = proxy.cpu_time();
    tokio::time::sleep(window).await;
    let used = proxy.cpu_time() - before;
    assert!(
        used < window / 4,
        "{used:?} of CPU in {window:?} out of fds"
    );
    // Some fifty failed tries so far, one warning: the next comes five seconds after it.
    let warnings = proxy.log().matches("accept failed").count();
    assert_eq!(warnings, 1, "{}", proxy.log());
    drop(held);
    proxy.set_open_files_limit(had);
    let ready = poll_until(deadline, "/ready to answer again", || async {
        let r = weir_tests::http_client::try_get(proxy.admin, "admin", "/ready").await;
        r.ok().filter(|r| r.status == StatusCode::OK)
    })
    .await;
    assert_eq!(ready.status, StatusCode::OK, "{}", proxy.log());
    let text = proxy.metrics_text().await;
    let failed = sum(
        &text,
        "weir_accept_failures_total",
        &[("listener", "admin")],
    );
    assert!(failed.unwrap_or(0.0) >= 5.0, "{text}");
}
