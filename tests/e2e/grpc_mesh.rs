//! gRPC through the transparent listeners (real iptables REDIRECT, see `weir_tests::sidecar`),
//! against Python grpcio on both ends: every call shape with trailers and an error status, from
//! the app to a virtual IP (outbound) and from outside to the pod's local app (inbound).
//! The gateway listener is covered by `grpc.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use weir_tests::grpc::{self, ClientOpts, APP_PYTHON};
use weir_tests::metrics;
use weir_tests::sidecar::{Sidecar, APP_UID};
use weir_tests::{require, GrpcServer, NetNs, WeirProxy};

/// A virtual service address that exists nowhere: only the redirect and the registry answer it.
const VIP: &str = "10.96.0.40:50051";
/// The local app's port inside the pod (a fresh namespace: nothing else can hold it).
const APP_PORT: u16 = 50051;
/// One `client.py` run: five calls of up to 10 s each, plus stub generation.
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

/// Service `echo` at [`VIP`] with the given endpoints.
fn registry(endpoints: &[SocketAddr]) -> String {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|a| format!("{{address: \"{a}\"}}"))
        .collect();
    format!(
        "services:\n- name: echo\n  addresses: [\"{VIP}\"]\n  endpoints: [{}]\n",
        eps.join(", ")
    )
}

/// `client.py` as the app (uid 1234, system Python) inside the pod.
async fn app_client(pod: &Sidecar, target: &str, opts: &ClientOpts) -> Result<Value, String> {
    let target: SocketAddr = target.parse().expect("a socket address");
    let argv = grpc::client_argv(APP_PYTHON, target, opts);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = pod.run_as_app(&argv, CLIENT_DEADLINE).await;
    grpc::client_result(target, &out)
}

/// The checks every successful `client.py` run must show, `n` messages per stream.
fn assert_every_shape(out: &Value, n: u32, server: &str) {
    assert_eq!(out["unary"], "ok", "{out}");
    assert_eq!(out["server_stream"], n, "{out}");
    assert_eq!(out["client_stream"], n, "{out}");
    assert_eq!(out["bidi"], n, "{out}");
    assert_eq!(out["trailers"]["x-trailer"], "yes", "{out}");
    assert_eq!(out["error_status"], "NOT_FOUND", "{out}");
    assert_eq!(out["error_message"], "nope", "{out}");
    assert_eq!(out["server"], server, "{out}");
}

fn requests(text: &str, direction: &str, service: &str) -> Option<f64> {
    metrics::sum(
        text,
        "weir_requests_total",
        &[("direction", direction), ("service", service)],
    )
}

/// Every call `client.py` makes: unary, server stream, client stream, bidi, the failing unary.
const CALLS: f64 = 5.0;

#[tokio::test]
async fn grpc_calls_of_every_shape_from_the_app_to_a_virtual_ip_reach_its_endpoint_with_trailers() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", python_grpc, app_python_grpc);
    let ns = NetNs::create();
    // The endpoint listens on the host end of the veth, outside the pod.
    let server = GrpcServer::start_at("grpc-outbound", (ns.host_ip(), 0).into()).await;
    let pod = Sidecar::start(
        ns,
        WeirProxy::builder().registry_yaml(registry(&[server.addr])),
    )
    .await;

    // 1 MiB payloads and 10-message streams cross the HTTP/2 flow-control windows on both hops.
    let opts = ClientOpts {
        count: Some(10),
        payload_bytes: Some(1 << 20),
        ..Default::default()
    };
    let out = app_client(&pod, VIP, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}\nproxy log:\n{}", pod.proxy.log()));
    assert_every_shape(&out, 10, "grpc-outbound");

    // Every call went through the outbound listener and was attributed to the VIP's service:
    // one h2 connection, none passed through to the (unroutable) original destination.
    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        requests(&text, "outbound", "echo.default"),
        Some(CALLS),
        "{text}"
    );
    assert_eq!(
        requests(&text, "outbound", "passthrough").unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        metrics::sum(
            &text,
            "weir_protocol_detections_total",
            &[("direction", "outbound"), ("protocol", "h2")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metrics::sum(
            &text,
            "weir_responses_total",
            &[("direction", "outbound"), ("status_code", "200")]
        ),
        Some(CALLS),
        "gRPC errors ride on HTTP 200: {text}"
    );
}

#[tokio::test]
async fn grpc_call_from_the_app_to_a_virtual_ip_without_endpoints_gets_unavailable() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", app_python_grpc);
    let ns = NetNs::create();
    let pod = Sidecar::start(ns, WeirProxy::builder().registry_yaml(registry(&[]))).await;

    let opts = ClientOpts {
        count: Some(1),
        ..Default::default()
    };
    let err = app_client(&pod, VIP, &opts)
        .await
        .expect_err("no endpoint: the call must fail");
    // A gRPC status from the proxy, not a transport failure (which grpcio reports as
    // UNAVAILABLE too, but with a connection error as the details).
    assert!(
        err.contains("rpc error: UNAVAILABLE: no ready endpoint for service echo"),
        "{err}\nproxy log:\n{}",
        pod.proxy.log()
    );

    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        metrics::sum(
            &text,
            "weir_proxy_errors_total",
            &[
                ("direction", "outbound"),
                ("service", "echo.default"),
                ("error", "no-endpoints")
            ]
        ),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn grpc_calls_of_every_shape_from_outside_reach_the_local_app_through_the_inbound_listener() {
    require!(root, tool "ip", tool "iptables", tool "setpriv", python_grpc, app_python_grpc);
    let ns = NetNs::create();
    let ns_ip = ns.ns_ip();
    // The pod's local app, run as the app's uid inside the namespace.
    let app = GrpcServer::start_in(&ns, APP_UID, "grpc-inbound", (ns_ip, APP_PORT).into()).await;
    let pod = Sidecar::start(
        ns,
        WeirProxy::builder().registry_yaml(registry(&[app.addr])),
    )
    .await;

    // The client runs on the host and dials the pod's address at the app's port; PREROUTING
    // hands the connection to the inbound listener, which forwards to the original port.
    let opts = ClientOpts {
        count: Some(10),
        payload_bytes: Some(1 << 20),
        ..Default::default()
    };
    let out = grpc::try_run_client(app.addr, &opts)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\nproxy log:\n{}\napp log:\n{}",
                pod.proxy.log(),
                app.log()
            )
        });
    assert_every_shape(&out, 10, "grpc-inbound");

    // Without the proxy the calls would reach the app all the same: the metrics are what shows
    // they were redirected and forwarded, attributed to the service the endpoint belongs to.
    let text = pod.proxy.metrics_text().await;
    assert_eq!(
        requests(&text, "inbound", "echo.default"),
        Some(CALLS),
        "{text}"
    );
    assert_eq!(
        metrics::sum(
            &text,
            "weir_protocol_detections_total",
            &[("direction", "inbound"), ("protocol", "h2")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        requests(&text, "outbound", "echo.default").unwrap_or(0.0),
        0.0
    );
}
