//! Writes that change part of an item keep the text of the parts they do not change.

use super::{
    tests::{fixture, FILE},
    *,
};

const WEB: &str = "\
services:
  - name: web   # the front end
    hosts: [web, Web.Example]   # both spellings
    endpoints:
      # the big box first
      - address: \"127.0.0.1:8080\"
        weight: 2   # twice the cores
    policy:   # tuned after the outage
      timeout: 10s   # p99 is 4s
      # keep retries cheap
      retryBudget: { ratio: 0.1 }
      maxConcurrentRequests: 100   # per proxy
";

fn timeout(service: &str, t: &str) -> PolicyEdit {
    PolicyEdit {
        service: service.into(),
        timeout: Some(t.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_policy_set_changes_only_its_line_and_keeps_every_comment() {
    let f = fixture(WEB);
    let out = set_policy(&f.store, &timeout("web", "2s"), false)
        .await
        .expect("valid");
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_eq!(
        f.text(),
        WEB.replace("      timeout: 10s   # p99 is 4s\n", "      timeout: 2s\n")
    );
    // The `---` header and the one changed line.
    assert_eq!(out.diff.lines().filter(|l| l.starts_with('-')).count(), 2);
}

#[tokio::test]
async fn a_new_policy_field_is_appended_inside_the_block() {
    let f = fixture(WEB);
    let edit = PolicyEdit {
        service: "web".into(),
        consecutive_failures: Some(5),
        ..Default::default()
    };
    set_policy(&f.store, &edit, false).await.expect("valid");
    let expected = format!("{WEB}      circuitBreaker:\n        consecutiveFailures: 5\n");
    assert_eq!(f.text(), expected);
}

#[tokio::test]
async fn replacing_one_endpoint_keeps_the_comments_on_the_other_keys() {
    let f = fixture(WEB);
    let doc = "\
services:
  - name: web
    hosts: [web, web.example]
    endpoints: [{ address: \"127.0.0.1:9090\", labels: { zone: a } }]
    policy: { timeout: 10s, retryBudget: { ratio: 0.1 }, maxConcurrentRequests: 100 }
";
    let out = apply(&f.store, "-", doc, false).await.expect("valid");
    assert_eq!(out.changes, ["service/web.default configured"]);
    let endpoints_at = WEB.find("    endpoints:").expect("in the fixture");
    let policy_at = WEB.find("    policy:").expect("in the fixture");
    let expected = format!(
        "{}    endpoints:\n      - address: 127.0.0.1:9090\n        weight: 1\n        labels:\n          zone: a\n        ready: true\n{}",
        &WEB[..endpoints_at],
        &WEB[policy_at..]
    );
    assert_eq!(f.text(), expected);
}

#[tokio::test]
async fn a_policy_for_a_service_that_had_none_is_appended_to_its_item() {
    let f = fixture(FILE);
    set_policy(&f.store, &timeout("auth", "2s"), false)
        .await
        .expect("valid");
    let at = FILE.find("  # web: the front end").expect("in the fixture");
    let expected = format!(
        "{}    policy:\n      timeout: 2s\n{}",
        &FILE[..at],
        &FILE[at..]
    );
    assert_eq!(f.text(), expected);
}

#[tokio::test]
async fn a_key_the_document_leaves_out_loses_its_lines_and_nothing_else() {
    let f = fixture(WEB);
    let doc = "\
services:
  - name: web
    endpoints: [{ address: \"127.0.0.1:8080\", weight: 2 }]
    policy: { timeout: 10s, retryBudget: { ratio: 0.1 }, maxConcurrentRequests: 100 }
";
    apply(&f.store, "-", doc, false).await.expect("valid");
    assert_eq!(
        f.text(),
        WEB.replace("    hosts: [web, Web.Example]   # both spellings\n", "")
    );
}

#[tokio::test]
async fn a_cleared_policy_field_loses_its_line_and_an_emptied_policy_its_block() {
    let f = fixture(WEB);
    let edit = PolicyEdit {
        service: "web".into(),
        max_concurrent_requests: Some(0),
        ..Default::default()
    };
    set_policy(&f.store, &edit, false).await.expect("valid");
    assert_eq!(
        f.text(),
        WEB.replace("      maxConcurrentRequests: 100   # per proxy\n", "")
    );

    let g = fixture("services:\n  - name: web   # front\n    policy:\n      timeout: 1s\n");
    set_policy(&g.store, &timeout("web", "0s"), false)
        .await
        .expect("valid");
    assert_eq!(g.text(), "services:\n  - name: web   # front\n");
}

#[tokio::test]
async fn a_flow_style_policy_is_replaced_whole() {
    let text = "\
services:
  - name: web   # front
    endpoints: [{ address: \"127.0.0.1:1\" }]   # one box
    policy: { timeout: 10s, maxConcurrentRequests: 5 }   # flow
";
    let f = fixture(text);
    set_policy(&f.store, &timeout("web", "2s"), false)
        .await
        .expect("valid");
    let expected = text.replace(
        "    policy: { timeout: 10s, maxConcurrentRequests: 5 }   # flow\n",
        "    policy:\n      timeout: 2s\n      maxConcurrentRequests: 5\n",
    );
    assert_eq!(f.text(), expected);
}

#[tokio::test]
async fn a_changed_first_key_falls_back_to_rendering_the_item_whole() {
    let text = "services:\n  - hosts: [a]   # old\n    name: web\n";
    let f = fixture(text);
    let out = apply(
        &f.store,
        "-",
        "services:\n  - name: web\n    hosts: [b]\n",
        false,
    )
    .await
    .expect("valid");
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_eq!(
        f.text(),
        "services:\n  - name: web\n    namespace: default\n    hosts:\n      - b\n"
    );
}

#[tokio::test]
async fn an_edit_that_breaks_an_alias_rewrites_the_file_whole_with_a_warning() {
    let text = "\
services:
  - name: auth
    policy: &tuned { timeout: 1s }
  - name: web
    policy: *tuned
";
    let f = fixture(text);
    let out = set_policy(&f.store, &timeout("auth", "2s"), false)
        .await
        .expect("valid");
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    let reg = weir_proxy::discovery::registry_file::load(&f.path).expect("valid");
    let seconds: Vec<_> = reg
        .services
        .iter()
        .map(|s| s.policy.timeout.map(|d| d.0.as_secs()))
        .collect();
    assert_eq!(seconds, [Some(2), Some(1)]);
}

#[tokio::test]
async fn a_gateway_route_keeps_the_lines_of_its_unchanged_keys() {
    let text = FILE.replace(
        "      matches: [{ path: { type: PathPrefix, value: /auth } }]\n",
        "      matches: [{ path: { type: PathPrefix, value: /auth } }]   # login pages\n",
    );
    let f = fixture(&text);
    let doc = "\
gateway:
  routes:
    - name: auth
      matches: [{ path: { type: PathPrefix, value: /auth } }]
      backendRefs: [{ name: web }]
";
    apply(&f.store, "-", doc, false).await.expect("valid");
    let at = text.find("      backendRefs").expect("in the fixture");
    assert_eq!(
        f.text(),
        format!(
            "{}      backendRefs:\n        - name: web\n          weight: 1\n",
            &text[..at]
        )
    );
}
