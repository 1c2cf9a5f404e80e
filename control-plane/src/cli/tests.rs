//! weirctl's renderings of known answers, and its commands against an in-process control plane.

use std::process::ExitCode;

use clap::Parser;
use weir_proto::{admin as pb, discovery};

use super::{check, format, run, Cli};
use crate::{api::admin::test_server::TestServer, proxies::ProxyIdentity};

const REGISTRY: &str = "\
services:
  - name: web
    hosts: [web, web.default.svc]
    addresses: [\"10.96.0.20:80\"]
    endpoints:
      - address: \"127.0.0.1:8080\"
        labels: { zone: a, version: v1 }
      - { address: \"127.0.0.1:8081\", weight: 2, ready: false }
  - name: api
    namespace: prod
";

fn service(name: &str, ns: &str, hosts: &[&str], ready: &[bool]) -> discovery::Service {
    discovery::Service {
        name: name.into(),
        namespace: ns.into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        endpoints: ready
            .iter()
            .enumerate()
            .map(|(i, &ready)| discovery::Endpoint {
                address: format!("10.0.0.{i}:80"),
                weight: 1,
                ready,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn the_services_table_aligns_its_columns() {
    let r = pb::ListServicesResponse {
        version: 3,
        services: vec![
            service(
                "auth-service",
                "default",
                &["auth", "auth.default"],
                &[true, false],
            ),
            service("web", "prod", &[], &[]),
        ],
    };
    assert_eq!(
        format::services(&r),
        "\
NAME           NAMESPACE   HOSTS               ADDRESSES   ENDPOINTS
auth-service   default     auth,auth.default   -           1/2
web            prod        -                   -           0/0
"
    );
}

fn stat_row(service: &str, route: &str, direction: &str, requests: u64) -> pb::StatRow {
    pb::StatRow {
        service: service.into(),
        route: route.into(),
        direction: direction.into(),
        success_rate: if requests == 0 { 0.0 } else { 0.995 },
        rps: 12.34,
        p50_ms: 1.25,
        p95_ms: 12.6,
        p99_ms: 140.0,
        requests,
    }
}

#[test]
fn the_stat_table_shows_directions_percentages_rates_and_latencies() {
    let r = pb::StatResponse {
        rows: vec![
            stat_row("web.default", "", "outbound", 100),
            stat_row("web.default", "", "inbound", 100),
            stat_row("web.default", "api", "gateway", 0),
        ],
        proxies: 2,
    };
    assert_eq!(
        format::stat(&r, "10s"),
        "\
SERVICE       ROUTE       DIRECTION   SUCCESS   RPS    P50     P95    P99
web.default   [default]   outbound    99.50%    12.3   1.2ms   13ms   140ms
web.default   [default]   inbound     99.50%    12.3   1.2ms   13ms   140ms
web.default   api         gateway     -         12.3   1.2ms   13ms   140ms
"
    );
    let empty = pb::StatResponse {
        rows: vec![],
        proxies: 1,
    };
    assert_eq!(
        format::stat(&empty, "10s"),
        "No traffic in the last 10s (1 proxies read).\n"
    );
}

#[test]
fn idle_stat_rows_are_dropped_unless_a_service_is_named() {
    let r = pb::StatResponse {
        rows: vec![
            stat_row("web.default", "", "outbound", 100),
            stat_row("web.default", "api", "outbound", 0),
            stat_row("web.default", "", "inbound", 0),
        ],
        proxies: 1,
    };
    let kept = |service: Option<&str>| {
        let mut r = r.clone();
        format::drop_idle_rows(&mut r, service);
        r.rows
            .iter()
            .map(|row| format!("{}/{} {}", row.service, row.route, row.direction))
            .collect::<Vec<_>>()
    };
    assert_eq!(kept(None), ["web.default/ outbound"]);
    assert_eq!(
        kept(Some("web")),
        [
            "web.default/ outbound",
            "web.default/api outbound",
            "web.default/ inbound"
        ]
    );
}

#[test]
fn the_stat_json_and_yaml_views_carry_the_direction() {
    let r = pb::StatResponse {
        rows: vec![stat_row("web.default", "", "inbound", 100)],
        proxies: 1,
    };
    let view = super::view::Stat::from(&r);
    let json = serde_json::to_value(&view).expect("serialisable");
    assert_eq!(json["rows"][0]["direction"], "inbound");
    assert_eq!(json["rows"][0]["requests"], 100);
    let yaml = serde_yaml::to_string(&view).expect("serialisable");
    assert!(yaml.contains("direction: inbound\n"), "{yaml}");
}

#[test]
fn check_fails_on_a_rejected_edit_and_on_a_proxy_of_another_release() {
    let r = pb::CheckResponse {
        version: "0.2.0".into(),
        registry: "/etc/weir/registry.yaml".into(),
        registry_error: "registry.yaml:3:7: services[0].name: bad".into(),
        registry_version: 4,
        proxies: vec![pb::ProxyStatus {
            id: "p1".into(),
            version: "0.1.0".into(),
            ..Default::default()
        }],
    };
    let outcomes = check::outcomes("127.0.0.1:8086", &r);
    assert_eq!(
        check::render(&outcomes),
        "\
✓ control plane reachable (127.0.0.1:8086, weir-control 0.2.0)
✗ registry valid (/etc/weir/registry.yaml: the last edit was rejected; version 4 is still served)
    registry.yaml:3:7: services[0].name: bad
✓ proxies connected (1)
✗ versions match (control plane 0.2.0)
    p1 runs 0.1.0
"
    );
}

/// Runs `weirctl ARGS` against `server`: (exit code, stdout, stderr).
async fn weirctl(server: &TestServer, args: &[&str]) -> (ExitCode, String, String) {
    let addr = server.addr.to_string();
    let head = ["weirctl", "--control-plane", &addr];
    let argv = head.iter().chain(args);
    let cli = Cli::try_parse_from(argv).expect("valid arguments");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(cli, &mut out, &mut err).await;
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8 output");
    (code, text(out), text(err))
}

#[tokio::test]
async fn get_services_prints_the_registry_as_a_table_and_as_json() {
    let server = TestServer::start(REGISTRY).await;
    let (code, out, _) = weirctl(&server, &["get", "services"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(
        out,
        "\
NAME   NAMESPACE   HOSTS                 ADDRESSES       ENDPOINTS
web    default     web,web.default.svc   10.96.0.20:80   1/2
api    prod        -                     -               0/0
"
    );
    let (code, out, _) = weirctl(&server, &["get", "services", "-o", "json"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(json["version"], 1);
    assert_eq!(json["services"][0]["endpoints"][1]["weight"], 2);
    assert_eq!(json["services"][1]["namespace"], "prod");
}

#[tokio::test]
async fn get_endpoints_lists_addresses_weights_readiness_and_labels() {
    let server = TestServer::start(REGISTRY).await;
    let (code, out, _) = weirctl(&server, &["get", "endpoints", "web"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(
        out,
        "\
ADDRESS          WEIGHT   READY   LABELS
127.0.0.1:8080   1        true    version=v1,zone=a
127.0.0.1:8081   2        false   -
"
    );
}

#[tokio::test]
async fn describing_an_unknown_service_fails_with_its_name() {
    let server = TestServer::start(REGISTRY).await;
    let (code, out, err) = weirctl(&server, &["describe", "service", "ghost"]).await;
    assert_eq!(code, ExitCode::FAILURE);
    assert!(out.is_empty());
    assert_eq!(err, "weirctl: no service \"ghost\" in the registry\n");
}

#[tokio::test]
async fn describe_shows_the_service_its_policy_and_who_watches_it() {
    let server = TestServer::start(REGISTRY).await;
    let identity = ProxyIdentity {
        id: "edge-1".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        admin_addr: String::new(),
    };
    let watch = server.proxies.open(identity, "service:web".into());
    watch.resolved(vec!["web.default".into()]);
    weirctl(&server, &["policy", "set", "web", "--timeout", "2s"]).await;
    let (code, out, _) = weirctl(&server, &["describe", "service", "web"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.starts_with("Name:         web\nNamespace:    default\n"),
        "{out}"
    );
    assert!(out.contains("Policy:\n  timeout: 2s\n"), "{out}");
    assert!(out.contains("Routes: (none)\n"), "{out}");
    assert!(
        out.contains("  127.0.0.1:8081   2        false   -\n"),
        "{out}"
    );
    assert!(out.ends_with("Watched by:   edge-1\n"), "{out}");
}

#[tokio::test]
async fn apply_dry_run_shows_the_diff_then_apply_writes_it() {
    let server = TestServer::start(REGISTRY).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let doc = dir.path().join("shop.yaml");
    std::fs::write(&doc, "services:\n  - name: shop\n").expect("write doc");
    let doc = doc.to_str().expect("utf-8 path");
    let (code, out, _) = weirctl(&server, &["apply", "-f", doc, "--dry-run"]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.starts_with("service/shop.default created (dry run)\n--- "),
        "{out}"
    );
    assert!(out.contains("+  - name: shop\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&server.path).expect("read"),
        REGISTRY
    );
    let (code, out, _) = weirctl(&server, &["apply", "-f", doc]).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(out, "service/shop.default created\nregistry version 2\n");
    let (_, out, _) = weirctl(&server, &["get", "services", "-o", "yaml"]).await;
    assert!(out.contains("- name: shop\n"), "{out}");
}

#[tokio::test]
async fn a_rejected_apply_exits_1_and_prints_every_problem() {
    let server = TestServer::start(REGISTRY).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let doc = dir.path().join("bad.yaml");
    std::fs::write(
        &doc,
        "services:\n  - name: x\n    endpoints: [{ address: nope }]\n",
    )
    .expect("write doc");
    let doc = doc.to_str().expect("utf-8 path");
    let (code, out, err) = weirctl(&server, &["apply", "-f", doc]).await;
    assert_eq!(code, ExitCode::FAILURE);
    assert!(out.is_empty());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0],
        "weirctl: rejected: 1 problem(s); nothing was written"
    );
    assert!(lines[1].starts_with(&format!("  {doc}:3:")), "{err}");
}

#[tokio::test]
async fn policy_set_reports_what_it_configured() {
    let server = TestServer::start(REGISTRY).await;
    let args = [
        "policy",
        "set",
        "api.prod",
        "--retry-budget",
        "0.2",
        "--rate-limit",
        "50",
    ];
    let (code, out, _) = weirctl(&server, &args).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(out, "service/api.prod configured\nregistry version 2\n");
    let policy = &server.store.current().registry.services[1].policy;
    assert_eq!(policy.retry_budget.as_ref().map(|b| b.ratio), Some(0.2));
    assert!(policy.timeout.is_none());
}

#[tokio::test]
async fn check_passes_with_a_proxy_of_the_same_release_and_fails_without_proxies() {
    let server = TestServer::start(REGISTRY).await;
    let (code, out, _) = weirctl(&server, &["check"]).await;
    assert_eq!(code, ExitCode::FAILURE);
    assert!(out.contains("✗ proxies connected (0)\n"), "{out}");
    let identity = ProxyIdentity {
        id: "edge-1".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        admin_addr: String::new(),
    };
    let _watch = server.proxies.open(identity, "gateway".into());
    let (code, out, _) = weirctl(&server, &["check"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with('✓')).count(),
        4,
        "{out}"
    );
}

#[tokio::test]
async fn an_unreachable_control_plane_exits_1_with_the_reason() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let cli = Cli::try_parse_from(["weirctl", "--control-plane", &addr, "get", "services"])
        .expect("valid arguments");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run(cli, &mut out, &mut err).await, ExitCode::FAILURE);
    let err = String::from_utf8(err).expect("utf-8");
    assert!(
        err.starts_with(&format!(
            "weirctl: cannot reach the control plane at {addr}: "
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let no_field = Cli::try_parse_from(["weirctl", "policy", "set", "web"]);
    assert_eq!(no_field.expect_err("a field is required").exit_code(), 2);
    let bad_window = Cli::try_parse_from(["weirctl", "stat", "--window", "ten"]);
    assert_eq!(bad_window.expect_err("not a duration").exit_code(), 2);
    let bad_output = Cli::try_parse_from(["weirctl", "-o", "xml", "check"]);
    assert_eq!(bad_output.expect_err("not a format").exit_code(), 2);
}

#[test]
fn describe_shows_how_long_an_ejection_lasts_and_open_route_breakers() {
    let state = |address: &str, state: &str, left: Option<u64>, n: Option<u32>| pb::EndpointState {
        address: address.into(),
        proxy_id: "p1".into(),
        state: state.into(),
        in_flight: 0,
        latency_ewma_ms: 1.0,
        ejected_for_ms: left,
        ejections: n,
    };
    let r = pb::DescribeServiceResponse {
        service: Some(service("web", "default", &[], &[true, true])),
        endpoints: vec![
            state("10.0.0.0:80", "ready", None, None),
            state("10.0.0.1:80", "ejected", Some(41_200), Some(2)),
            state("10.0.0.2:80", "probing", Some(0), Some(1)),
        ],
        watching_proxies: vec!["p1".into()],
        route_breakers: vec![pb::RouteBreakerState {
            route: "refunds".into(),
            proxy_id: "p1".into(),
            state: "open".into(),
            ejected_for_ms: 9_000,
            ejections: 1,
            gateway: true,
        }],
    };
    let out = format::describe(&r);
    assert!(out.contains("  p1      10.0.0.0:80   ready   "), "{out}");
    assert!(
        out.contains("10.0.0.1:80   ejected (probe in 42s, ejection 2)"),
        "{out}"
    );
    assert!(out.contains("10.0.0.2:80   probing (ejection 1)"), "{out}");
    assert!(
        out.contains("Route breakers not closed:\n  PROXY   ROUTE               STATE\n  p1      refunds (gateway)   open (probe in 9s, ejection 1)\n"),
        "{out}"
    );
}

#[test]
fn rate_limit_takes_a_burst_after_a_slash() {
    let cli = Cli::try_parse_from(["weirctl", "policy", "set", "web", "--rate-limit", "0.5/3"])
        .expect("valid");
    let super::Command::Policy(super::PolicyCommand::Set(set)) = cli.command else {
        panic!("policy set");
    };
    assert_eq!(set.fields.rate_limit, Some((0.5, Some(3))));
    assert!(
        Cli::try_parse_from(["weirctl", "policy", "set", "web", "--rate-limit", "5/x"]).is_err()
    );
}
