//! What the index resolves each kind of target to, and the updates it prepares.

use std::sync::Arc;

use prost::Message;
use weir_proto::discovery as pb;
use weir_proxy::discovery::registry_file::parse;

use super::*;

const DOC: &str = r#"
services:
  - name: web
    hosts: [web, web.example.com]
    addresses: ["10.0.0.1:80"]
    routes:
      - name: split
        backendRefs: [{ name: web-v1, weight: 9 }, { name: web-v2, weight: 1 }]
        filters:
          - type: RequestMirror
            requestMirror: { backendRef: { name: shadow } }
  - name: web-v1
    routes:
      - name: down
        backendRefs: [{ name: db, namespace: data }, { name: web-v2 }]
  - name: web-v2
  - name: shadow
  - name: db
    namespace: data
  - name: lonely
    namespace: ops
gateway:
  routes:
    - name: edge
      backendRefs: [{ name: web }]
"#;

fn state(version: u64, doc: &str) -> RegistryState {
    RegistryState {
        version,
        registry: Arc::new(parse("t.yaml", doc).expect("valid registry")),
        error: None,
    }
}

fn index() -> Index {
    Index::build(&state(1, DOC), None)
}

fn target(kind: pb::target::Kind) -> pb::Target {
    pb::Target { kind: Some(kind) }
}

fn services(index: &Index, kind: pb::target::Kind) -> Option<Vec<String>> {
    match index.resolve(&target(kind)) {
        Resolution::Found(r) => Some(r.services().to_vec()),
        Resolution::NotFound { .. } => None,
    }
}

fn names(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|s| s.to_string()).collect())
}

use pb::target::Kind;

#[test]
fn a_service_resolves_to_itself_then_everything_its_routes_reach_transitively() {
    let want = names(&[
        "web.default",
        "web-v1.default",
        "web-v2.default",
        "shadow.default",
        "db.data",
    ]);
    assert_eq!(services(&index(), Kind::Service("web".into())), want);
    assert_eq!(
        services(&index(), Kind::Service("web.default".into())),
        want
    );
}

#[test]
fn a_service_in_another_namespace_needs_its_qualified_name() {
    let ix = index();
    assert_eq!(services(&ix, Kind::Service("db".into())), None);
    assert_eq!(
        services(&ix, Kind::Service("lonely.ops".into())),
        names(&["lonely.ops"])
    );
}

#[test]
fn an_authority_resolves_with_or_without_its_port_and_in_any_case() {
    let ix = index();
    for a in ["web", "web:80", "WEB.example.com:8080", "web.example.com"] {
        let got = services(&ix, Kind::Authority(a.into()));
        assert_eq!(
            got.as_ref().map(|s| s[0].as_str()),
            Some("web.default"),
            "{a}"
        );
    }
    assert_eq!(services(&ix, Kind::Authority("web:x".into())), None);
}

#[test]
fn a_virtual_address_resolves_only_with_its_exact_port() {
    let ix = index();
    let got = services(&ix, Kind::Address("10.0.0.1:80".into()));
    assert_eq!(got.as_ref().map(|s| s[0].as_str()), Some("web.default"));
    assert_eq!(services(&ix, Kind::Address("10.0.0.1:81".into())), None);
    assert_eq!(services(&ix, Kind::Address("10.0.0.1".into())), None);
}

#[test]
fn the_gateway_resolves_to_the_services_its_routes_reach_and_carries_the_routes() {
    let ix = index();
    match ix.resolve(&target(Kind::Gateway(pb::GatewayTarget {}))) {
        Resolution::Found(r) => {
            assert!(r.has_gateway_routes());
            assert_eq!(r.services()[0], "web.default");
            assert_eq!(r.services().len(), 5);
        }
        other => panic!("gateway must resolve, got {other:?}"),
    }
}

#[test]
fn an_unknown_target_resolves_to_nothing_with_a_reason() {
    let ix = index();
    match ix.resolve(&target(Kind::Service("nope".into()))) {
        Resolution::NotFound { reason } => assert!(reason.contains("nope"), "{reason}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        ix.resolve(&pb::Target { kind: None }),
        Resolution::NotFound { .. }
    ));
}

#[test]
fn a_prepared_update_decodes_to_the_resolved_services_in_order() {
    let ix = index();
    let p = ix.prepare(&TargetKey::Service("web-v1".into()));
    let update = pb::Update::decode(ix.encoded(&p)).expect("decodes");
    assert_eq!(update.version, 1);
    let Some(pb::update::Result::Snapshot(s)) = update.result else {
        panic!("expected a snapshot");
    };
    let got: Vec<String> = s
        .services
        .iter()
        .map(|s| format!("{}.{}", s.name, s.namespace))
        .collect();
    assert_eq!(
        Some(got),
        names(&["web-v1.default", "db.data", "web-v2.default"])
    );
    assert!(s.gateway_routes.is_empty());
}

#[test]
fn the_same_target_is_prepared_once_per_generation() {
    let ix = index();
    let a = ix.prepare(&TargetKey::Authority("web:80".into()));
    let b = ix.prepare(&TargetKey::Authority("web:80".into()));
    assert!(Arc::ptr_eq(&a, &b));
}

#[test]
fn an_edit_changes_the_fingerprint_only_of_targets_that_reach_the_edited_service() {
    let v1 = index();
    let edited = DOC.replace(
        "  - name: shadow\n",
        "  - name: shadow\n    hosts: [shadow]\n",
    );
    let v2 = Index::build(&state(2, &edited), Some(&v1));
    let fp = |ix: &Index, name: &str| ix.prepare(&TargetKey::Service(name.into())).fingerprint();
    assert_ne!(fp(&v1, "web"), fp(&v2, "web"), "web mirrors to shadow");
    assert_ne!(fp(&v1, "shadow"), fp(&v2, "shadow"));
    assert_eq!(fp(&v1, "web-v1"), fp(&v2, "web-v1"));
    assert_eq!(fp(&v1, "lonely.ops"), fp(&v2, "lonely.ops"));
    let gw = |ix: &Index| ix.prepare(&TargetKey::Gateway).fingerprint();
    assert_ne!(gw(&v1), gw(&v2));
}

#[test]
fn a_service_appearing_turns_not_found_into_a_snapshot() {
    let v1 = Index::build(&state(1, "services: []\n"), None);
    let key = TargetKey::Service("web".into());
    assert!(matches!(
        v1.prepare(&key).resolution(),
        Resolution::NotFound { .. }
    ));
    let v2 = Index::build(&state(2, "services: [{ name: web }]\n"), Some(&v1));
    assert_eq!(v2.prepare(&key).resolution().services(), ["web.default"]);
    assert_ne!(
        v1.prepare(&key).fingerprint(),
        v2.prepare(&key).fingerprint()
    );
}
