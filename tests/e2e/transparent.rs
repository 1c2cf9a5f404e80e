//! The transparent paths with real iptables REDIRECT rules: an app in a network namespace (uid
//! 1234) dials addresses, the kernel redirects to weir-proxy (uid 0) in the same namespace, and
//! the proxy finds the original destination with SO_ORIGINAL_DST. See `weir_tests::sidecar`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use weir_tests::http_client;
use weir_tests::metrics;
use weir_tests::sidecar::{listen_in, who_am_i_lines, Sidecar, WhoAmI, ADMIN_PORT, OUTBOUND_PORT};
use weir_tests::{poll_until, require, NetNs, WeirProxy};

const DEADLINE: Duration = Duration::from_secs(10);
const CURL_DEADLINE: Duration = Duration::from_secs(10);

/// A host-side server the app in `ns` can dial over the veth.
async fn on_host(ns: &NetNs, name: &str) -> WhoAmI {
    WhoAmI::bind(name, SocketAddr::from((ns.host_ip(), 0))).await
}

/// `curl` as the app; returns the bodies of all `urls` (one connection, reused).
async fn curl_ok(pod: &Sidecar, extra: &[&str], urls: &[String]) -> Vec<serde_json::Value> {
    let mut argv = vec!["curl", "-sS", "--max-time", "5"];
    argv.extend_from_slice(extra);
    argv.extend(urls.iter().map(String::as_str));
    let out = pod.run_as_app(&argv, CURL_DEADLINE).await;
    assert!(
        out.status.success(),
        "curl {urls:?} failed ({}): {}\nproxy log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        pod.proxy.log()
    );
    who_am_i_lines(&out.stdout)
}

fn outbound_requests(text: &str, service: &str) -> Option<f64> {
    metrics::sum(
        text,
        "weir_requests_total",
        &[("direction", "outbound"), ("service", service)],
    )
}

fn ip_of(addr: &serde_json::Value) -> IpAddr {
    let s = addr.as_str().expect("an address string");
    s.parse::<SocketAddr>()
        .unwrap_or_else(|e| panic!("{s:?} is not an address: {e}"))
        .ip()
}

#[tokio::test]
async fn app_dialling_a_virtual_ip_reaches_that_services_endpoints_without_looping() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let (b1, b2, b3) = (
        on_host(&ns, "auth-1").await,
        on_host(&ns, "auth-2").await,
        on_host(&ns, "billing-1").await,
    );
    let registry = format!(
        "services:\n\
         - name: auth\n  addresses: [\"10.96.0.10:80\"]\n\
         \x20 endpoints: [{{address: \"{}\"}}, {{address: \"{}\"}}]\n\
         - name: billing\n  addresses: [\"10.96.0.11:80\"]\n\
         \x20 endpoints: [{{address: \"{}\"}}]\n",
        b1.addr, b2.addr, b3.addr
    );
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;

    // Neither virtual IP exists anywhere: only the redirect + registry can answer. The balancer
    // prefers the faster endpoint and assumes 30 ms for one it has not tried: answers slower
    // than that make it try both at once (faster ones would starve the other for ~30 s).
    let auth_urls: Vec<String> = (0..6)
        .map(|i| format!("http://10.96.0.10/delay/40/a/{i}"))
        .collect();
    let sent = Cell::new(0u64);
    let seen = RefCell::new(BTreeSet::new());
    poll_until(DEADLINE, "both auth endpoints to answer", || async {
        for reply in curl_ok(&pod, &[], &auth_urls).await {
            sent.set(sent.get() + 1);
            let backend = reply["backend"].as_str().expect("backend name").to_owned();
            assert!(
                backend.starts_with("auth-"),
                "10.96.0.10 answered by {backend}"
            );
            assert_eq!(reply["host"], "10.96.0.10", "Host header unchanged");
            seen.borrow_mut().insert(backend);
        }
        (seen.borrow().len() == 2).then_some(())
    })
    .await;
    let sent = sent.get();
    let billing = curl_ok(&pod, &[], &["http://10.96.0.11/b".into()]).await;
    assert_eq!(billing.len(), 1);
    assert_eq!(billing[0]["backend"], "billing-1");
    // The proxy (in the namespace) dialled the endpoint, not the app itself: same source IP,
    // so the metrics below are what tells a redirected request from a direct one.
    assert_eq!(ip_of(&billing[0]["peer"]), pod.ns.ns_ip());

    // Every request reached an endpoint exactly once: had the proxy's own upstream connections
    // been redirected back to it, they would be counted again (as passthrough) or loop.
    assert_eq!(b1.requests() + b2.requests(), sent);
    assert_eq!(b3.requests(), 1);
    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        outbound_requests(&text, "auth.default"),
        Some(sent as f64),
        "{text}"
    );
    assert_eq!(outbound_requests(&text, "billing.default"), Some(1.0));
    assert_eq!(
        outbound_requests(&text, "passthrough").unwrap_or(0.0),
        0.0,
        "{text}"
    );
}

#[tokio::test]
async fn unknown_ip_with_a_registry_host_is_routed_by_host_but_a_virtual_ip_wins() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let (auth, billing) = (
        on_host(&ns, "auth-1").await,
        on_host(&ns, "billing-1").await,
    );
    let registry = format!(
        "services:\n\
         - name: auth\n  hosts: [auth.example]\n  addresses: [\"10.96.0.10:80\"]\n\
         \x20 endpoints: [{{address: \"{}\"}}]\n\
         - name: billing\n  addresses: [\"10.96.0.11:80\"]\n\
         \x20 endpoints: [{{address: \"{}\"}}]\n",
        auth.addr, billing.addr
    );
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;

    // 10.99.0.1:8080 is in no registry and exists nowhere: the Host header names the service.
    let by_host = curl_ok(
        &pod,
        &["-H", "Host: auth.example"],
        &["http://10.99.0.1:8080/h".into()],
    )
    .await;
    assert_eq!(by_host[0]["backend"], "auth-1", "{by_host:?}");
    assert_eq!(by_host[0]["host"], "auth.example");

    // The address is resolved first: billing's VIP goes to billing whatever the Host says.
    let by_vip = curl_ok(
        &pod,
        &["-H", "Host: auth.example"],
        &["http://10.96.0.11/v".into()],
    )
    .await;
    assert_eq!(by_vip[0]["backend"], "billing-1", "{by_vip:?}");
    assert_eq!((auth.requests(), billing.requests()), (1, 1));

    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        outbound_requests(&text, "auth.default"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(outbound_requests(&text, "billing.default"), Some(1.0));
}

#[tokio::test]
async fn unknown_destination_passes_through_to_the_original_address() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let listed = on_host(&ns, "listed").await;
    let outside = on_host(&ns, "outside").await;
    let registry = format!(
        "services:\n- name: listed\n  hosts: [listed.example]\n  addresses: [\"10.96.0.10:80\"]\n\
         \x20 endpoints: [{{address: \"{}\"}}]\n",
        listed.addr
    );
    let builder = WeirProxy::builder()
        .registry_yaml(registry)
        .env("WEIR_PROXY_ACCESS_LOG", "json");
    let pod = Sidecar::start(ns, builder).await;

    let url = format!("http://{}/p", outside.addr);
    let replies = curl_ok(&pod, &[], &[url]).await;
    assert_eq!(replies[0]["backend"], "outside", "{replies:?}");
    assert_eq!(replies[0]["host"], outside.addr.to_string());
    assert_eq!(replies[0]["local"], outside.addr.to_string());
    assert_eq!(listed.requests(), 0);

    let text = pod.proxy.metrics_text().await;
    assert_eq!(outbound_requests(&text, "passthrough"), Some(1.0), "{text}");
    assert_eq!(
        metrics::sum(
            &text,
            "weir_protocol_detections_total",
            &[("direction", "outbound"), ("protocol", "http1")]
        ),
        Some(1.0),
        "{text}"
    );
    // The access log names the original destination the request went on to.
    let line: serde_json::Value = poll_until(DEADLINE, "an access line", || async {
        let log = pod.proxy.log();
        let line = log.lines().find(|l| l.starts_with('{'))?;
        serde_json::from_str(line).ok()
    })
    .await;
    assert_eq!(line["direction"], "outbound", "{line}");
    assert_eq!(line["service"], "passthrough", "{line}");
    assert_eq!(line["upstream"], outside.addr.to_string(), "{line}");
    assert_eq!(
        (line["target"].as_str(), line["status"].as_u64()),
        (Some("/p"), Some(200))
    );
}

#[tokio::test]
async fn another_hosts_port_equal_to_an_own_listener_port_is_not_mistaken_for_the_proxy() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    // A peer pod's sidecar admin port (a meshed Prometheus scraping it) and inbound port: the
    // same numbers as this proxy's own 0.0.0.0 listeners, but on another address.
    let peer_admin = WhoAmI::bind("peer-admin", (ns.host_ip(), ADMIN_PORT).into()).await;
    let peer_inbound = WhoAmI::bind(
        "peer-inbound",
        (ns.host_ip(), weir_tests::sidecar::INBOUND_PORT).into(),
    )
    .await;
    let pod = Sidecar::start(ns, WeirProxy::builder()).await;

    let urls = [
        format!("http://{}/metrics", peer_admin.addr),
        format!("http://{}/x", peer_inbound.addr),
    ];
    let replies = curl_ok(&pod, &[], &urls).await;
    let names: Vec<_> = replies.iter().map(|r| r["backend"].clone()).collect();
    assert_eq!(names, ["peer-admin", "peer-inbound"]);
    let text = pod.proxy.metrics_text().await;
    assert_eq!(outbound_requests(&text, "passthrough"), Some(2.0), "{text}");
}

#[tokio::test]
async fn connections_aimed_at_the_proxys_own_listeners_are_refused_not_looped() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let pod = Sidecar::start(ns, WeirProxy::builder()).await;

    // The app dials the outbound listener itself (loopback is not redirected): its original
    // destination is the listener, and forwarding there would feed the proxy to itself.
    let url = format!("http://127.0.0.1:{OUTBOUND_PORT}/self");
    let out = pod
        .run_as_app(&["curl", "-sS", "--max-time", "5", &url], CURL_DEADLINE)
        .await;
    assert!(
        !out.status.success() && out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    pod.proxy
        .wait_for_log("connection aimed at the proxy itself", DEADLINE)
        .await;

    // From outside, straight to the inbound port: PREROUTING redirects it onto itself.
    let direct = http_client::try_get(pod.proxy.inbound, "x", "/self").await;
    assert!(direct.is_err(), "{direct:?}");

    let ready = pod.proxy.admin_get("/ready").await;
    assert_eq!(ready.status, 200, "still serving");
    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        metrics::sum(&text, "weir_requests_total", &[]).unwrap_or(0.0),
        0.0,
        "{text}"
    );
    assert_eq!(
        metrics::sum(&text, "weir_protocol_detections_total", &[]).unwrap_or(0.0),
        0.0,
        "refused before detection: {text}"
    );
    for listener in ["outbound", "inbound"] {
        let labels = [("listener", listener), ("reason", "loop")];
        let refused = metrics::sum(&text, "weir_connections_refused_total", &labels);
        assert_eq!(refused, Some(1.0), "{listener}: {text}");
    }
}

#[tokio::test]
async fn without_the_redirect_rules_connections_are_refused_warned_and_counted() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let pod = Sidecar::start_with(ns, WeirProxy::builder(), false).await;
    // Reaching the inbound port unredirected: no original destination to forward to.
    for _ in 0..3 {
        let direct = http_client::try_get(pod.proxy.inbound, "x", "/unredirected").await;
        assert!(direct.is_err(), "{direct:?}");
    }
    pod.proxy
        .wait_for_log("connection without an original destination", DEADLINE)
        .await;
    let text = pod.proxy.metrics_text().await;
    let labels = [
        ("listener", "inbound"),
        ("reason", "no-original-destination"),
    ];
    let refused = metrics::sum(&text, "weir_connections_refused_total", &labels);
    assert_eq!(refused, Some(3.0), "{text}");
    // One warning for the three, not one each.
    let warned = pod
        .proxy
        .log()
        .matches("without an original destination")
        .count();
    assert_eq!(warned, 1, "{}", pod.proxy.log());
}

#[tokio::test]
async fn inbound_request_from_outside_reaches_the_local_app_at_its_original_port() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let ns_ip = ns.ns_ip();
    // Two app ports inside the pod, one the registry knows (as an endpoint of `app`).
    let app = WhoAmI::serve("app-8080", listen_in(&ns, (ns_ip, 8080).into()));
    let admin_port = WhoAmI::serve("app-9090", listen_in(&ns, (ns_ip, 9090).into()));
    let remote = on_host(&ns, "remote").await;
    let registry = format!(
        "services:\n\
         - name: app\n  endpoints: [{{address: \"{ns_ip}:8080\"}}]\n\
         - name: remote\n  addresses: [\"10.96.0.10:80\"]\n\
         \x20 endpoints: [{{address: \"{}\"}}]\n",
        remote.addr
    );
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry)).await;

    for (server, port) in [(&app, 8080), (&admin_port, 9090)] {
        let reply = http_client::get((ns_ip, port).into(), "app.example", "/in").await;
        assert_eq!(reply.status, 200, "{}\n{}", reply.body, pod.proxy.log());
        let json = reply.json();
        assert_eq!(json["local"], format!("{ns_ip}:{port}"), "original port");
        // Sent from the host (host_ip); the app sees the proxy inside the pod instead.
        assert_eq!(ip_of(&json["peer"]), ns_ip, "{json}");
        assert_eq!(json["host"], "app.example");
        assert_eq!(server.requests(), 1);
    }

    // And one outbound request, so one scrape shows both directions.
    let out = curl_ok(&pod, &[], &["http://10.96.0.10/out".into()]).await;
    assert_eq!(out[0]["backend"], "remote");

    let text = pod.proxy.metrics_text().await;
    let inbound = |service| {
        metrics::sum(
            &text,
            "weir_requests_total",
            &[("direction", "inbound"), ("service", service)],
        )
    };
    assert_eq!(inbound("app.default"), Some(1.0), "{text}");
    assert_eq!(inbound("unknown"), Some(1.0), "{text}");
    assert_eq!(outbound_requests(&text, "remote.default"), Some(1.0));
    for direction in ["inbound", "outbound"] {
        assert_eq!(
            metrics::sum(
                &text,
                "weir_responses_total",
                &[("direction", direction), ("status_code", "200")]
            ),
            Some(if direction == "inbound" { 2.0 } else { 1.0 }),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_sidecar_fed_by_the_control_plane_resolves_each_destination_on_first_use() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", tool "curl");
    let ns = NetNs::create();
    let auth = on_host(&ns, "auth-1").await;
    let billing = on_host(&ns, "billing-1").await;
    let outside = on_host(&ns, "outside").await;
    let reg = |with_billing: bool| {
        let mut yaml = format!(
            "services:\n- name: auth\n  hosts: [auth.example]\n  addresses: [\"10.96.0.10:80\"]\n\
             \x20 endpoints: [{{address: \"{}\"}}]\n",
            auth.addr
        );
        if with_billing {
            yaml.push_str(&format!(
                "- name: billing\n  addresses: [\"10.96.0.11:80\"]\n\
                 \x20 endpoints: [{{address: \"{}\"}}]\n",
                billing.addr
            ));
        }
        yaml
    };
    // The control plane listens on the host side of the veth; the proxy's own connections
    // (uid 0) are not redirected, so it reaches it directly.
    let cp = weir_tests::control::WeirControl::start_on(ns.host_ip().into(), &reg(false)).await;
    let pod = Sidecar::start(
        ns,
        WeirProxy::builder()
            .env_remove("WEIR_PROXY_REGISTRY")
            .env("WEIR_PROXY_CONTROL_ADDR", cp.grpc.to_string()),
    )
    .await;

    // A virtual IP the proxy has never seen: resolved on the first request.
    let replies = curl_ok(&pod, &[], &["http://10.96.0.10/a".into()]).await;
    assert_eq!(replies[0]["backend"], "auth-1", "{replies:?}");
    // An address the registry does not know passes through; with a known Host it is routed.
    let url = format!("http://{}/p", outside.addr);
    let replies = curl_ok(&pod, &[], std::slice::from_ref(&url)).await;
    assert_eq!(replies[0]["backend"], "outside", "{replies:?}");
    let replies = curl_ok(&pod, &["-H", "Host: auth.example"], &[url]).await;
    assert_eq!(replies[0]["backend"], "auth-1", "{replies:?}");
    // A virtual IP that is unknown now and appears later: "no such service" first (the
    // connection passes through to the original address, which nothing serves), then the
    // control plane's update makes it known without a restart.
    let out = pod
        .run_as_app(
            &["curl", "-fsS", "--max-time", "3", "http://10.96.0.11/b"],
            CURL_DEADLINE,
        )
        .await;
    assert!(!out.status.success(), "10.96.0.11 is not served yet");
    cp.write_registry(&reg(true));
    poll_until(DEADLINE, "billing's virtual IP to resolve", || async {
        let out = pod
            .run_as_app(
                &["curl", "-fsS", "--max-time", "3", "http://10.96.0.11/b"],
                CURL_DEADLINE,
            )
            .await;
        out.status.success().then(|| {
            let replies = who_am_i_lines(&out.stdout);
            assert_eq!(replies[0]["backend"], "billing-1", "{replies:?}");
        })
    })
    .await;

    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        metrics::sum(&text, "weir_control_connected", &[]),
        Some(1.0)
    );
    assert!(
        metrics::sum(&text, "weir_control_watches", &[]).is_some_and(|n| n >= 3.0),
        "{text}"
    );
    assert_eq!(
        outbound_requests(&text, "auth.default"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        outbound_requests(&text, "billing.default"),
        Some(1.0),
        "{text}"
    );
}
