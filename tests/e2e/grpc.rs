//! gRPC through the gateway listener, against an independent implementation (Python grpcio):
//! every call shape, trailers, error statuses, multiplexing, and the proxy's own gRPC errors.
//!
//! gRPC through the transparent outbound and inbound listeners needs an original destination
//! (iptables REDIRECT in a network namespace): see `grpc_mesh.rs`.

use std::time::Duration;

use futures_util::future::join_all;
use weir_tests::grpc::{self, ClientOpts};
use weir_tests::grpc_wire::{echo_request, messages, string_field, unary_request, ECHO_SERVICE};
use weir_tests::h2_client::{self, H2Client};
use weir_tests::{require, GrpcServer, WeirProxy};

/// A gateway routing the echo service's path prefix to service `echo` (`app_protocol` line
/// optional) with the given endpoints.
fn registry(endpoints: &[std::net::SocketAddr], app_protocol: Option<&str>) -> String {
    let eps: String = endpoints
        .iter()
        .map(|a| format!("      - address: \"{a}\"\n"))
        .collect();
    let eps = if eps.is_empty() {
        "    endpoints: []\n".to_owned()
    } else {
        format!("    endpoints:\n{eps}")
    };
    let proto = app_protocol.map_or(String::new(), |p| format!("    appProtocol: {p}\n"));
    format!(
        "services:\n  - name: echo\n    hosts: [echo.test]\n{proto}{eps}\
         gateway:\n  routes:\n    - name: grpc\n      matches: [{{ path: {{ type: PathPrefix, value: {ECHO_SERVICE} }} }}]\n      backendRefs: [{{ name: echo }}]\n"
    )
}

async fn gateway_proxy(registry: String) -> WeirProxy {
    WeirProxy::builder()
        .registry_yaml(registry)
        .gateway(true)
        .start()
        .await
}

#[tokio::test]
async fn grpc_calls_of_every_shape_with_trailers_and_error_status_pass_through_the_gateway() {
    require!(python_grpc);
    let server = GrpcServer::start("grpc-gw").await;
    let proxy = gateway_proxy(registry(&[server.addr], None)).await;
    let gw = proxy.gateway.expect("gateway listener");

    // 3 MiB payloads and 20-message streams cross every HTTP/2 flow-control window on the way.
    let opts = ClientOpts {
        authority: Some("echo.test".into()),
        count: Some(20),
        payload_bytes: Some(3 << 20),
    };
    let out = grpc::try_run_client(gw, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}\nproxy log:\n{}", proxy.log()));
    assert_eq!(out["unary"], "ok", "{out}");
    assert_eq!(out["server_stream"], 20, "{out}");
    assert_eq!(out["client_stream"], 20, "{out}");
    assert_eq!(out["bidi"], 20, "{out}");
    assert_eq!(out["trailers"]["x-trailer"], "yes", "{out}");
    assert_eq!(out["error_status"], "NOT_FOUND", "{out}");
    assert_eq!(out["error_message"], "nope", "{out}");
    assert_eq!(out["server"], "grpc-gw", "{out}");
}

#[tokio::test]
async fn many_concurrent_grpc_calls_multiplex_over_one_client_connection() {
    require!(python_grpc);
    let server = GrpcServer::start("grpc-mux").await;
    let proxy = gateway_proxy(registry(&[server.addr], None)).await;
    let client = H2Client::connect(proxy.gateway.expect("gateway listener")).await;

    // All calls start before any finishes: one HTTP/2 connection, 200 streams open at once.
    let calls = (0..200).map(|i| {
        let mut client = client.clone();
        async move {
            let msg = format!("call-{i}");
            let req = unary_request("echo.test", "Unary", &echo_request(&msg, 0, ""));
            let resp = h2_client::exchange(&mut client, req).await;
            let got = messages(&resp.body)
                .ok()
                .and_then(|m| m.first().and_then(|m| string_field(m, 1)));
            (
                msg,
                resp.status.as_u16(),
                got,
                resp.trailer("grpc-status").map(str::to_owned),
                resp.trailer("x-trailer").map(str::to_owned),
            )
        }
    });
    let results = weir_tests::wait::within(
        Duration::from_secs(30),
        "200 concurrent calls",
        join_all(calls),
    )
    .await;
    for (msg, status, got, grpc_status, x_trailer) in results {
        assert_eq!(status, 200, "{msg}");
        assert_eq!(
            got.as_deref(),
            Some(msg.as_str()),
            "each stream gets its own answer"
        );
        assert_eq!(grpc_status.as_deref(), Some("0"), "{msg}");
        assert_eq!(x_trailer.as_deref(), Some("yes"), "{msg}");
    }
}

#[tokio::test]
async fn grpc_call_to_a_service_without_endpoints_gets_unavailable_with_weir_proxy_error() {
    require!(python_grpc);
    let proxy = gateway_proxy(registry(&[], None)).await;
    let gw = proxy.gateway.expect("gateway listener");

    let mut client = H2Client::connect(gw).await;
    let req = unary_request("echo.test", "Unary", &echo_request("x", 0, ""));
    let resp = h2_client::exchange(&mut client, req).await;
    assert_eq!(resp.status, 200, "gRPC errors ride on HTTP 200");
    assert_eq!(resp.header("content-type"), Some("application/grpc"));
    // Trailers-only response: grpc-status sits in the one HEADERS frame.
    assert_eq!(resp.header("grpc-status"), Some("14"), "{resp:?}");
    assert_eq!(resp.header("weir-proxy-error"), Some("no-endpoints"));
    // At the edge the message names the cause, not the service behind the route.
    assert_eq!(
        resp.header("grpc-message"),
        Some("no ready endpoint for the route's backend"),
        "{resp:?}"
    );
    assert!(resp.body.is_empty());

    // grpcio reads it as a status too, not as a transport failure.
    let opts = ClientOpts {
        count: Some(1),
        ..Default::default()
    };
    let err = grpc::try_run_client(gw, &opts)
        .await
        .expect_err("no endpoint: the call must fail");
    assert!(err.contains("rpc error: UNAVAILABLE"), "{err}");
}

#[tokio::test]
async fn a_service_declared_app_protocol_grpc_serves_an_h2c_client() {
    require!(python_grpc);
    let server = GrpcServer::start("grpc-declared").await;
    let proxy = gateway_proxy(registry(&[server.addr], Some("grpc"))).await;
    let opts = ClientOpts {
        authority: Some("echo.test".into()),
        count: Some(3),
        ..Default::default()
    };
    let out = grpc::try_run_client(proxy.gateway.expect("gateway listener"), &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}\nproxy log:\n{}", proxy.log()));
    assert_eq!(out["unary"], "ok", "{out}");
    assert_eq!(out["bidi"], 3, "{out}");
    assert_eq!(out["trailers"]["x-trailer"], "yes", "{out}");
    assert_eq!(out["server"], "grpc-declared", "{out}");
}
