//! The Admin service over a real socket: reads, writes, and health as a client sees them.

use tonic::Code;
use weir_proto::admin::{self as pb, admin_client::AdminClient};

use super::test_server::TestServer;
use crate::proxies::ProxyIdentity;

const REGISTRY: &str = "\
services:
  - name: web
    hosts: [web]
    endpoints:
      - address: \"127.0.0.1:8080\"
";

async fn client(server: &TestServer) -> AdminClient<tonic::transport::Channel> {
    AdminClient::connect(server.url()).await.expect("connect")
}

#[tokio::test]
async fn list_services_returns_the_registry_and_its_version() {
    let server = TestServer::start(REGISTRY).await;
    let resp = client(&server)
        .await
        .list_services(pb::ListServicesRequest {})
        .await
        .expect("list")
        .into_inner();
    assert_eq!(resp.version, 1);
    assert_eq!(resp.services.len(), 1);
    assert_eq!(resp.services[0].name, "web");
    assert_eq!(resp.services[0].endpoints[0].address, "127.0.0.1:8080");
}

#[tokio::test]
async fn describing_an_unknown_service_is_not_found_and_names_it() {
    let server = TestServer::start(REGISTRY).await;
    let err = client(&server)
        .await
        .describe_service(pb::DescribeServiceRequest {
            service: "ghost".into(),
        })
        .await
        .expect_err("ghost is unknown");
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("\"ghost\""), "{}", err.message());
}

#[tokio::test]
async fn describing_a_service_lists_the_proxies_watching_it() {
    let server = TestServer::start(REGISTRY).await;
    let identity = ProxyIdentity {
        id: "proxy-1".into(),
        version: "0.1.0".into(),
        admin_addr: String::new(),
    };
    let watch = server.proxies.open(identity, "service:web".into());
    watch.resolved(vec!["web.default".into()]);
    let resp = client(&server)
        .await
        .describe_service(pb::DescribeServiceRequest {
            service: "web.default".into(),
        })
        .await
        .expect("describe")
        .into_inner();
    assert_eq!(resp.service.map(|s| s.name).as_deref(), Some("web"));
    assert_eq!(resp.watching_proxies, ["proxy-1"]);
}

#[tokio::test]
async fn an_applied_service_is_listed_at_once() {
    let server = TestServer::start(REGISTRY).await;
    let mut c = client(&server).await;
    let applied = c
        .apply(pb::ApplyRequest {
            document: "services:\n  - name: api\n".into(),
            dry_run: false,
            source_name: "-".into(),
        })
        .await
        .expect("apply")
        .into_inner();
    assert_eq!(applied.changes, ["service/api.default created"]);
    assert_eq!(applied.version, 2);
    let listed = c
        .list_services(pb::ListServicesRequest {})
        .await
        .expect("list")
        .into_inner();
    let names: Vec<_> = listed.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["web", "api"]);
    assert_eq!(listed.version, 2);
    let on_disk = std::fs::read_to_string(&server.path).expect("read");
    assert!(on_disk.starts_with(REGISTRY), "{on_disk}");
}

#[tokio::test]
async fn an_invalid_apply_is_invalid_argument_with_every_problem_located() {
    let server = TestServer::start(REGISTRY).await;
    let doc = "services:\n  - name: a\n    endpoints: [{ address: x }]\n  - name: b\n    endpoints: [{ address: y }]\n";
    let err = client(&server)
        .await
        .apply(pb::ApplyRequest {
            document: doc.into(),
            dry_run: false,
            source_name: "bad.yaml".into(),
        })
        .await
        .expect_err("bad addresses");
    assert_eq!(err.code(), Code::InvalidArgument);
    let lines: Vec<&str> = err.message().lines().collect();
    assert_eq!(lines.len(), 2, "{}", err.message());
    assert!(lines[0].starts_with("bad.yaml:3:"), "{}", err.message());
    assert!(lines[1].starts_with("bad.yaml:5:"), "{}", err.message());
}

#[tokio::test]
async fn check_reports_the_recorded_registry_error() {
    let server = TestServer::start(REGISTRY).await;
    server
        .store
        .reject("registry.yaml:2:5: services[0].name: a service needs a name".into());
    let resp = client(&server)
        .await
        .check(pb::CheckRequest {})
        .await
        .expect("check")
        .into_inner();
    assert_eq!(resp.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(resp.registry, server.path.display().to_string());
    assert!(
        resp.registry_error.contains("2:5"),
        "{}",
        resp.registry_error
    );
    assert_eq!(resp.registry_version, 1);
    assert!(resp.proxies.is_empty());
}
