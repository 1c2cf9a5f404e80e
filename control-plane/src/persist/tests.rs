//! Writes through `persist` against a registry file in a temporary directory.

use std::{fs, path::PathBuf};

use weir_proxy::discovery::registry_file;

use super::*;

pub(super) const FILE: &str = "\
# The mesh registry. Hand-edited; weirctl keeps these comments.
services:
  # auth: the login service
  - name: auth
    namespace: default
    hosts: [auth, auth.default.svc.cluster.local]   # both spellings
    endpoints:
      - address: \"127.0.0.1:8174\"
  # web: the front end
  - name: web
    namespace: default
    endpoints:
      - address: \"127.0.0.1:8080\"
        weight: 2   # the big box

gateway:   # edge routes
  routes:
    - name: auth
      matches: [{ path: { type: PathPrefix, value: /auth } }]
      backendRefs: [{ name: auth }]
";

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) path: PathBuf,
    pub(super) store: Store,
}

pub(super) fn fixture(text: &str) -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("registry.yaml");
    fs::write(&path, text).expect("seed the registry");
    let registry = registry_file::load(&path).expect("the fixture is valid");
    let store = Store::new(path.clone(), registry);
    Fixture {
        _dir: dir,
        path,
        store,
    }
}

impl Fixture {
    pub(super) fn text(&self) -> String {
        fs::read_to_string(&self.path).expect("read the registry")
    }
}

const CHANGE_WEB_ADD_API: &str = "\
services:
  - name: web
    endpoints:
      - address: \"127.0.0.1:8080\"
        weight: 3
  - name: api
    namespace: prod
    hosts: [API.example]
    endpoints:
      - address: \"127.0.0.1:9090\"
        labels: { zone: b, version: v2 }
";

#[tokio::test]
async fn comments_and_untouched_items_keep_their_bytes_when_one_service_changes_and_one_is_added() {
    let f = fixture(FILE);
    let out = apply(&f.store, "change.yaml", CHANGE_WEB_ADD_API, false)
        .await
        .expect("the apply is valid");
    assert_eq!(
        out.changes,
        ["service/web.default configured", "service/api.prod created"]
    );
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let text = f.text();
    // Everything before web's item, the comment above it included, is untouched.
    let web_at = FILE.find("  - name: web").expect("web in fixture");
    assert!(text.starts_with(&FILE[..web_at]), "{text}");
    let gateway_at = FILE.find("\ngateway:").expect("gateway in fixture");
    assert!(text.ends_with(&FILE[gateway_at..]), "{text}");
    assert!(text.contains("weight: 3"));
    assert!(
        !text.contains("the big box"),
        "the changed endpoints are re-rendered"
    );
    let reg = registry_file::parse("r", &text).expect("the written file is valid");
    let names: Vec<String> = reg.services.iter().map(|s| s.qualified_name()).collect();
    assert_eq!(names, ["auth.default", "web.default", "api.prod"]);
    assert_eq!(reg.services[2].hosts, ["api.example"]);
    assert_eq!(f.store.current().version, 2);
    assert_eq!(*f.store.current().registry, reg);
}

#[tokio::test]
async fn applying_the_same_document_twice_changes_nothing_the_second_time() {
    let f = fixture(FILE);
    apply(&f.store, "-", CHANGE_WEB_ADD_API, false)
        .await
        .expect("first apply");
    let written = f.text();
    let again = apply(&f.store, "-", CHANGE_WEB_ADD_API, false)
        .await
        .expect("second apply");
    assert_eq!(
        again.changes,
        [
            "service/web.default unchanged",
            "service/api.prod unchanged"
        ]
    );
    assert!(again.diff.is_empty());
    assert_eq!(again.version, 2);
    assert_eq!(f.text(), written);
}

#[tokio::test]
async fn a_flow_style_file_is_rewritten_whole_with_a_warning() {
    let flow = "services: [{ name: auth, endpoints: [{ address: \"127.0.0.1:1\" }] }]\n";
    let f = fixture(flow);
    let out = apply(&f.store, "-", CHANGE_WEB_ADD_API, false)
        .await
        .expect("the apply is valid");
    assert_eq!(out.warnings.len(), 1);
    assert!(
        out.warnings[0].contains("rewritten whole"),
        "{:?}",
        out.warnings
    );
    let reg = registry_file::load(&f.path).expect("the rewritten file is valid");
    assert_eq!(reg.services.len(), 3);
    assert_eq!(reg.services[0].name, "auth");
}

#[tokio::test]
async fn an_invalid_document_is_rejected_at_its_line_and_column_and_the_file_is_untouched() {
    let f = fixture(FILE);
    let doc = "services:\n  - name: web\n    endpoints:\n      - address: nonsense\n";
    let err = apply(&f.store, "bad.yaml", doc, false)
        .await
        .expect_err("an unparsable address is refused");
    let PersistError::Invalid(problems) = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert!(problems[0].starts_with("bad.yaml:4:18: "), "{problems:?}");
    assert_eq!(f.text(), FILE);
    assert_eq!(f.store.current().version, 1);
}

#[tokio::test]
async fn a_backend_ref_to_a_service_nobody_declares_is_rejected() {
    let f = fixture(FILE);
    let doc = "gateway:\n  routes:\n    - name: shop\n      backendRefs: [{ name: shop }]\n";
    let err = apply(&f.store, "-", doc, false)
        .await
        .expect_err("shop is declared nowhere");
    assert!(
        err.to_string().contains("-:4:")
            && err
                .to_string()
                .contains("no service \"shop\" in namespace \"default\""),
        "{err}"
    );
    assert_eq!(f.text(), FILE);
}

#[tokio::test]
async fn a_document_may_route_to_services_only_the_registry_declares() {
    let f = fixture(FILE);
    let doc = "gateway:\n  routes:\n    - name: web\n      backendRefs: [{ name: web }]\n";
    let out = apply(&f.store, "-", doc, false)
        .await
        .expect("web is in the registry");
    assert_eq!(out.changes, ["gateway-route/web created"]);
    let reg = registry_file::load(&f.path).expect("valid");
    assert_eq!(reg.gateway.routes[1].name, "web");
    assert!(f.text().contains("gateway:   # edge routes\n"));
}

#[tokio::test]
async fn a_host_already_owned_by_another_registry_service_is_rejected_after_merging() {
    let f = fixture(FILE);
    let doc = "services:\n  - name: login\n    hosts: [auth]\n";
    let err = apply(&f.store, "-", doc, false)
        .await
        .expect_err("the merged registry has the host twice");
    assert!(
        err.to_string()
            .contains("host \"auth\" already belongs to service auth.default"),
        "{err}"
    );
    assert_eq!(f.text(), FILE);
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_returns_the_diff() {
    let f = fixture(FILE);
    let out = apply(&f.store, "-", CHANGE_WEB_ADD_API, true)
        .await
        .expect("valid");
    assert_eq!(f.text(), FILE);
    assert_eq!(f.store.current().version, 1);
    assert_eq!(out.version, 1);
    assert!(
        out.diff.contains("-        weight: 2   # the big box"),
        "{}",
        out.diff
    );
    assert!(out.diff.contains("+  - name: api"), "{}", out.diff);
    assert!(out.diff.starts_with("--- "), "{}", out.diff);
}

#[tokio::test]
async fn setting_a_policy_changes_only_the_named_fields() {
    let f = fixture(FILE);
    let mut edit = PolicyEdit {
        service: "auth".into(),
        timeout: Some("2s".into()),
        retry_budget_ratio: Some(0.2),
        ..Default::default()
    };
    set_policy(&f.store, &edit, false).await.expect("valid");
    edit = PolicyEdit {
        service: "auth.default".into(),
        rate_limit_rps: Some(50.0),
        ..Default::default()
    };
    let out = set_policy(&f.store, &edit, false).await.expect("valid");
    assert_eq!(out.changes, ["service/auth.default configured"]);
    let reg = registry_file::load(&f.path).expect("valid");
    let before = registry_file::parse("r", FILE).expect("valid");
    let policy = &reg.services[0].policy;
    assert_eq!(policy.timeout.map(|d| d.0.as_secs()), Some(2));
    assert_eq!(policy.retry_budget.as_ref().map(|b| b.ratio), Some(0.2));
    assert_eq!(
        policy.rate_limit.as_ref().map(|r| r.requests_per_second),
        Some(50.0)
    );
    assert_eq!(policy.circuit_breaker, None);
    let mut expected = before.services[0].clone();
    expected.policy = policy.clone();
    assert_eq!(reg.services[0], expected, "only the policy changed");
    assert_eq!(reg.services[1..], before.services[1..]);
    assert!(f.text().contains("# web: the front end\n"));
}

#[tokio::test]
async fn breaker_queue_and_failfast_edits_splice_in_and_zero_clears_them() {
    let f = fixture(FILE);
    let edit = PolicyEdit {
        service: "auth".into(),
        consecutive_failures: Some(3),
        min_ejection: Some("5s".into()),
        max_ejection: Some("2m".into()),
        max_pending_requests: Some(20),
        failfast: Some("250ms".into()),
        ..Default::default()
    };
    set_policy(&f.store, &edit, false).await.expect("valid");
    let policy = registry_file::load(&f.path).expect("valid").services[0]
        .policy
        .clone();
    let cb = policy.circuit_breaker.expect("a breaker");
    assert_eq!(cb.consecutive_failures, Some(3));
    assert_eq!(cb.min_ejection.map(|d| d.0.as_secs()), Some(5));
    assert_eq!(cb.max_ejection.map(|d| d.0.as_secs()), Some(120));
    assert_eq!(policy.max_pending_requests, Some(20));
    assert_eq!(policy.failfast.map(|d| d.0.as_millis()), Some(250));
    assert!(
        f.text().contains("# web: the front end\n"),
        "spliced, comments kept"
    );

    let clear = PolicyEdit {
        service: "auth".into(),
        consecutive_failures: Some(0),
        min_ejection: Some("0s".into()),
        max_ejection: Some("0s".into()),
        max_pending_requests: Some(0),
        failfast: Some("0s".into()),
        ..Default::default()
    };
    set_policy(&f.store, &clear, false).await.expect("valid");
    let policy = registry_file::load(&f.path).expect("valid").services[0]
        .policy
        .clone();
    assert_eq!(policy, Default::default(), "every field cleared");
    let bad = PolicyEdit {
        service: "auth".into(),
        failfast: Some("soon".into()),
        ..Default::default()
    };
    let err = set_policy(&f.store, &bad, true).await.expect_err("invalid");
    assert!(
        format!("{err:?}").contains("policy.failfast: invalid duration"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_policy_edit_of_an_unknown_service_is_not_found() {
    let f = fixture(FILE);
    let edit = PolicyEdit {
        service: "nope".into(),
        timeout: Some("1s".into()),
        ..Default::default()
    };
    let err = set_policy(&f.store, &edit, false)
        .await
        .expect_err("unknown");
    assert!(
        matches!(err, PersistError::NotFound(ref s) if s == "nope"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_file_without_a_gateway_gets_one_appended() {
    let f = fixture("services:\n- name: web\n  endpoints: [{ address: \"127.0.0.1:1\" }]\n");
    let doc = "gateway:\n  routes:\n    - name: web\n      backendRefs: [{ name: web }]\n";
    let out = apply(&f.store, "-", doc, false).await.expect("valid");
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let text = f.text();
    assert!(text.starts_with("services:\n- name: web\n"), "{text}");
    assert!(
        text.contains("\ngateway:\n  routes:\n    - name: web\n"),
        "{text}"
    );
}

#[tokio::test]
async fn an_empty_flow_list_becomes_a_block_list() {
    let f = fixture("# nothing yet\nservices: []\n");
    apply(&f.store, "-", "services:\n  - name: web\n", false)
        .await
        .expect("valid");
    assert_eq!(
        f.text(),
        "# nothing yet\nservices:\n  - name: web\n    namespace: default\n"
    );
}

const EVERY_FIELD: &str = r#"
services:
  - name: auth-service
    namespace: default
    hosts: [auth-service, Auth.Example]
    addresses: ["10.96.0.10:80", "[fd00::1]:80"]
    appProtocol: h2c
    endpoints:
      - address: "127.0.0.1:8174"
        identity: spiffe://weir/ns/default/sa/auth
        labels: { zone: a, version: v1, az: "1" }
      - { address: "127.0.0.1:8176", weight: 2, ready: false }
    policy:
      timeout: 10s
      retryBudget: { ratio: 0.2, minPerSecond: 10, ttl: 10s }
      circuitBreaker:
        consecutiveFailures: 7
        successRate: { threshold: 0.8, window: 10s, minRequests: 5 }
        minEjection: 1s
        maxEjection: 60s
        minReadyEndpoints: 1
      maxConcurrentRequests: 1000
      maxPendingRequests: 100
      rateLimit: { requestsPerSecond: 100.5, burst: 20, key: "header:x-user" }
      failfast: 1500ms
    routes:
      - name: api
        matches:
          - path: { type: RegularExpression, value: "/api/v[0-9]+" }
            headers: [{ type: RegularExpression, name: X-Canary, value: "yes|true" }]
            queryParams: [{ name: debug, value: "1" }]
            method: POST
          - path: { type: Exact, value: /health }
        timeouts: { request: 2s, backendRequest: 500ms }
        retry: { attempts: 3, codes: [502, 503], backoff: 25ms, nonIdempotent: true }
        circuitBreaker: {}
        rateLimit: { requestsPerSecond: 50, burst: 10 }
        filters:
          - type: RequestMirror
            requestMirror: { backendRef: { name: shadow, port: 8080 } }
          - type: Fault
            fault: { abort: { percentage: 10, status: 503 }, delay: { percentage: 5, duration: 100ms } }
          - type: RequestHeaderModifier
            requestHeaderModifier: { set: [{ name: X-A, value: "b c" }], add: [{ name: x-b, value: "2" }], remove: [x-c] }
          - type: ResponseHeaderModifier
            responseHeaderModifier: { remove: [server] }
          - type: URLRewrite
            urlRewrite: { hostname: internal, path: { type: ReplaceFullPath, replaceFullPath: /x } }
          - type: AddQueryParameter
            addQueryParameter: { name: via, value: weir }
        backendRefs:
          - { name: shadow, weight: 90 }
          - { name: shadow, namespace: default, weight: 10 }
  - name: shadow
    routes:
      - name: retry-on
        retry: {}
        backendRefs: [{ name: shadow }]
gateway:
  routes:
    - name: old
      matches: [{ path: { type: PathPrefix, value: /old } }]
      filters:
        - type: RequestRedirect
          requestRedirect: { scheme: https, hostname: new.example, port: 443, path: { type: ReplacePrefixMatch, replacePrefixMatch: /new }, statusCode: 301 }
    - name: gone
      filters:
        - type: Fault
          fault: { abort: { percentage: 100, status: 410 } }
"#;

#[test]
fn every_field_reads_back_the_same_after_rendering() {
    let reg = registry_file::parse("every", EVERY_FIELD).expect("the fixture is valid");
    let whole = render::whole(&reg).expect("renders");
    let back = registry_file::parse("rendered", &whole).expect("the rendering is valid");
    assert_eq!(back, reg, "{whole}");
    assert!(!whole.contains("null"), "{whole}");
    assert!(
        whole.contains("circuitBreaker: {}"),
        "an empty breaker is not dropped: {whole}"
    );
}
