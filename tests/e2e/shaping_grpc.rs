//! gRPC classification end to end: a 200 carrying `grpc-status` 14 — trailers-only, or in the
//! trailers after streamed messages — is counted a failure in `weir_responses_total` and in
//! `weirctl stat`'s SUCCESS column, against the Python grpcio server.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use weir_tests::control::WeirControl;
use weir_tests::grpc_wire::{echo_request, unary_request, ECHO_SERVICE};
use weir_tests::h2_client::{self, H2Client};
use weir_tests::{metrics, poll_until, require, GrpcServer};

use crate::control::control_proxy;

/// An `EchoRequest` for ServerStream: `count` messages, then fail with `fail_code`.
fn stream_request(count: u8, fail_code: u32) -> Bytes {
    let mut b = BytesMut::from(&echo_request("s", fail_code, "down")[..]);
    b.put_u8(2 << 3);
    b.put_u8(count);
    b.freeze()
}

fn registry(server: std::net::SocketAddr) -> String {
    format!(
        "services:\n  - name: echo\n    hosts: [echo.test]\n    endpoints: [{{ address: \"{server}\" }}]\n\
         gateway:\n  routes:\n    - name: grpc\n      matches: [{{ path: {{ type: PathPrefix, value: {ECHO_SERVICE} }} }}]\n      backendRefs: [{{ name: echo }}]\n"
    )
}

#[tokio::test]
async fn a_200_with_grpc_status_unavailable_counts_as_a_failure_in_metrics_and_weirctl_stat() {
    require!(python_grpc);
    let server = GrpcServer::start("grpc-classify").await;
    let cp = WeirControl::start(&registry(server.addr)).await;
    let (proxy, gw) = control_proxy(&cp).await;

    // stat compares with an earlier scrape of its window: take one before the traffic.
    let out = cp.weirctl(&["stat", "echo", "--window", "60s"]).await;
    assert_eq!(out.code, 0, "{out:?}");

    let mut client = H2Client::connect(gw).await;
    // 6 OK unary calls, 2 trailers-only UNAVAILABLE, 2 streams failing after 3 messages.
    for (method, msg, status) in [
        ("Unary", echo_request("ok", 0, ""), "0"),
        ("Unary", echo_request("down", 14, "down"), "14"),
        ("ServerStream", stream_request(3, 14), "14"),
    ]
    .iter()
    .flat_map(|c| std::iter::repeat_n(c.clone(), if c.2 == "0" { 6 } else { 2 }))
    {
        let resp = h2_client::exchange(&mut client, unary_request("echo.test", method, &msg)).await;
        assert_eq!(resp.status, 200, "{method}: {resp:?}");
        let got = resp.header("grpc-status").or(resp.trailer("grpc-status"));
        assert_eq!(got, Some(status), "{method}: {resp:?}");
    }

    let text = poll_until(Duration::from_secs(5), "ten responses counted", || async {
        let text = proxy.metrics_text().await;
        let all = metrics::sum(&text, "weir_responses_total", &[("route", "grpc")]);
        (all == Some(10.0)).then_some(text)
    })
    .await;
    let count = |labels: &[(&str, &str)]| {
        let mut l = vec![("route", "grpc")];
        l.extend_from_slice(labels);
        metrics::sum(&text, "weir_responses_total", &l)
    };
    assert_eq!(count(&[("classification", "success")]), Some(6.0), "{text}");
    assert_eq!(
        count(&[("classification", "failure"), ("grpc_status", "14")]),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        count(&[("status_code", "200")]),
        Some(10.0),
        "all were HTTP 200"
    );
    metrics::promtool_check(&text).expect("promtool accepts /metrics");

    // weirctl stat: 6 of 10 succeeded.
    let out = poll_until(Duration::from_secs(10), "stat to show 60%", || async {
        let out = cp.weirctl(&["stat", "echo", "--window", "60s"]).await;
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout
            .lines()
            .any(|l| l.starts_with("echo.default") && l.contains("60.00%"))
            .then_some(out)
    })
    .await;
    eprintln!("{}", out.stdout);
}
