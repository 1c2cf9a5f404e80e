//! Every registry the file loader accepts reaches a proxy through the control plane unchanged:
//! translated to `weir.discovery.v1`, encoded, decoded and converted back by the proxy's
//! `from_proto`, it equals itself. Checked on every registry the README and `deploy/local` show,
//! and on seeded variations of their values (the same cases every run). And whatever bytes come
//! instead (a corrupted message, another control plane's bug), the proxy's conversion refuses
//! them with a field path or gives a registry it can index and route with: it never panics.

use std::sync::Arc;

use http::{HeaderMap, Method, Uri};
use prost::Message;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use weir_proto::discovery as pb;
use weir_proxy::{
    discovery::{index::Snapshot, registry_file},
    model::Registry,
};

use super::{route, service, wire};

const README: &str = include_str!("../../../../README.md");
const LOCAL: &str = include_str!("../../../../deploy/local/registry.yaml");

/// What the README shows only in fragments: every filter, match kind and route policy, each
/// app protocol, endpoint fields, rate-limit overrides.
const EVERYTHING: &str = r#"
services:
  - name: web
    namespace: shop
    hosts: [web, web.shop.svc.cluster.local]
    addresses: ["10.96.0.7:80", "[fd00::7]:80"]
    appProtocol: h2c
    endpoints:
      - address: "127.0.0.1:9001"
      - address: "[::1]:9002"
        weight: 3
        ready: false
        labels: { zone: b, version: v2 }
        identity: spiffe://cluster.local/ns/shop/sa/web
    policy:
      timeout: 2s
      failfast: 100ms
      maxConcurrentRequests: 50
      maxPendingRequests: 5
      retryBudget: { ratio: 0.1, minPerSecond: 3, ttl: 5s }
      circuitBreaker: { consecutiveFailures: 4, minEjection: 2s, maxEjection: 1m, minReadyEndpoints: 2 }
      rateLimit: { requestsPerSecond: 10, burst: 2, key: client }
    routes:
      - name: all-matches
        matches:
          - path: { type: Exact, value: /exact }
            method: PUT
            headers: [{ name: x-a, value: b }, { type: RegularExpression, name: x-c, value: "d+" }]
            queryParams: [{ name: q, value: "1" }, { type: RegularExpression, name: r, value: "^s" }]
          - path: { type: RegularExpression, value: "/re/[a-z]+" }
        filters:
          - type: RequestHeaderModifier
            requestHeaderModifier: { set: [{ name: x-s, value: "1" }], add: [{ name: x-a, value: "2" }], remove: [x-r] }
          - type: ResponseHeaderModifier
            responseHeaderModifier: { set: [{ name: x-t, value: "3" }], add: [{ name: x-u, value: "4" }], remove: [server] }
          - type: URLRewrite
            urlRewrite: { hostname: other.test, path: { type: ReplaceFullPath, replaceFullPath: /full } }
          - type: AddQueryParameter
            addQueryParameter: { name: src, value: edge }
          - type: RequestMirror
            requestMirror: { backendRef: { name: web-next, namespace: shop } }
          - type: Fault
            fault: { abort: { percentage: 10, status: 503 }, delay: { percentage: 20, duration: 200ms } }
        backendRefs: [{ name: web, namespace: shop, weight: 90 }, { name: web-next, namespace: shop, weight: 10 }]
        timeouts: { request: 3s, backendRequest: 1s, idle: 30s }
        retry: { attempts: 2, codes: [502, 503], backoff: 50ms, nonIdempotent: true }
        circuitBreaker: { successRate: { threshold: 0.95, window: 20s, minRequests: 10 } }
        rateLimit:
          requestsPerSecond: 20
          burst: 5
          key: header:x-tenant
          overrides:
            - { value: gold, requestsPerSecond: 100, burst: 10 }
            - { value: internal-batch, requestsPerSecond: 0 }
      - name: away
        matches: [{ path: { type: PathPrefix, value: /old } }]
        filters:
          - type: RequestRedirect
            requestRedirect: { scheme: https, hostname: new.test, port: 8443, path: { type: ReplacePrefixMatch, replacePrefixMatch: /new }, statusCode: 308 }
      - name: down
        matches: [{ path: { type: PathPrefix, value: /down } }]
        filters: [{ type: Fault, fault: { abort: { percentage: 100, status: 418 } } }]
  - name: web-next
    namespace: shop
    appProtocol: grpc
    endpoints: [{ address: "127.0.0.1:9003" }]
  - name: db
    appProtocol: tcp
    addresses: ["10.96.0.9:5432"]
    endpoints: [{ address: "127.0.0.1:5432" }]
  - name: tls-app
    appProtocol: tls
    endpoints: []
  - name: plain
    appProtocol: http
    endpoints: [{ address: "127.0.0.1:9004" }]
gateway:
  routes:
    - name: edge
      hostnames: [shop.example.com, "*.shop.example.com"]
      matches: [{ path: { type: PathPrefix, value: /shop }, method: GET }]
      filters:
        - type: CORS
          cors:
            allowOrigins: ["https://app.example.com", "https://*.example.com:8443", "*"]
            allowMethods: [GET, "*"]
            allowHeaders: [x-token]
            exposeHeaders: [x-total]
            maxAge: 600
            allowCredentials: true
        - type: URLRewrite
          urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }
      backendRefs: [{ name: web, namespace: shop }]
"#;

/// Variations of each example (about one in four is still a valid registry).
const VARIANTS: usize = 150;

/// Values a variation writes in place of one: limits, other units, other kinds.
const VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "100",
    "65535",
    "4294967295",
    "0.5",
    "0.001",
    "1.0",
    "100.0",
    "1ns",
    "1us",
    "1ms",
    "1s",
    "90s",
    "1m30s",
    "1h",
    "876000h",
    "true",
    "false",
    "x",
    "/",
    "/a/b",
    "\"^/a.*$\"",
    "GET",
    "POST",
    "client",
    "header:x-user",
    "Exact",
    "PathPrefix",
    "RegularExpression",
    "http",
    "h2c",
    "grpc",
    "tcp",
    "tls",
    "\"127.0.0.1:1\"",
    "\"[::1]:8080\"",
];

/// The bodies of the ```yaml blocks in `markdown`.
fn yaml_blocks(markdown: &str) -> Vec<&str> {
    markdown
        .split("```yaml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .collect()
}

/// `text` with one to three scalar values after a `key: ` replaced.
fn vary(rng: &mut SmallRng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for _ in 0..rng.gen_range(1..=3) {
        let at = rng.gen_range(0..lines.len());
        let line = &lines[at];
        let Some(i) = line
            .find(": ")
            .filter(|&i| !line[i + 2..].starts_with(['[', '{']))
        else {
            continue;
        };
        let value = VALUES[rng.gen_range(0..VALUES.len())];
        lines[at] = format!("{}{value}", &line[..i + 2]);
    }
    lines.join("\n")
}

fn snapshot(reg: &Registry) -> pb::Snapshot {
    pb::Snapshot {
        services: reg.services.iter().map(service).collect(),
        gateway_routes: reg.gateway.routes.iter().map(route).collect(),
    }
}

/// What a proxy fed by the control plane ends up with.
fn through_the_control_plane(reg: &Registry) -> Registry {
    let sent = snapshot(reg);
    let received = pb::Snapshot::decode(sent.encode_to_vec().as_slice()).expect("decodes");
    Registry::try_from(received)
        .unwrap_or_else(|e| panic!("the proxy refuses what the control plane sent: {e}"))
}

/// Panics, naming the first fields that differ, unless `reg` reaches a proxy unchanged.
fn assert_unchanged(reg: &Registry, what: &str, text: &str) {
    let back = through_the_control_plane(reg);
    if back == *reg {
        return;
    }
    let (want, got) = (format!("{reg:#?}"), format!("{back:#?}"));
    let (want, got): (Vec<_>, Vec<_>) = (want.lines().collect(), got.lines().collect());
    let at = want
        .iter()
        .zip(&got)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let from = at.saturating_sub(6);
    panic!(
        "{what} changed on its way to the proxy; sent:\n{}\nreceived:\n{}\nfile:\n{text}",
        want[from..(at + 3).min(want.len())].join("\n"),
        got[from..(at + 3).min(got.len())].join("\n"),
    );
}

#[test]
fn every_registry_shown_reaches_a_proxy_unchanged() {
    let mut examples: Vec<&str> = yaml_blocks(README);
    examples.extend([LOCAL, EVERYTHING]);
    registry_file::parse("everything.yaml", EVERYTHING)
        .unwrap_or_else(|e| panic!("the test's own registry is refused: {e}"));
    let mut rng = SmallRng::seed_from_u64(0x7a11_0b0a);
    let (mut shown, mut varied) = (0, 0);
    for (i, example) in examples.iter().enumerate() {
        let Ok(reg) = registry_file::parse("example.yaml", example) else {
            continue;
        };
        shown += 1;
        assert_unchanged(&reg, &format!("example {i}"), example);
        for _ in 0..VARIANTS {
            let text = vary(&mut rng, example);
            if let Ok(reg) = registry_file::parse("variant.yaml", &text) {
                varied += 1;
                assert_unchanged(&reg, &format!("a variant of example {i}"), &text);
            }
        }
    }
    // The README's examples cover the policy: a change that made them unparsable would empty
    // this test.
    assert!(shown >= 7, "only {shown} registries found in the README");
    assert!(
        varied >= 200,
        "only {varied} variations were valid registries"
    );
}

/// The examples the loader accepts.
fn registries() -> Vec<Registry> {
    let mut examples: Vec<&str> = yaml_blocks(README);
    examples.extend([LOCAL, EVERYTHING]);
    examples
        .iter()
        .filter_map(|e| registry_file::parse("example.yaml", e).ok())
        .collect()
}

/// `bytes` (a message) with one to four of its values changed, or fields dropped, repeated or
/// added: numbers become huge, negative or NaN, strings empty or not what the field holds.
fn corrupt(rng: &mut SmallRng, bytes: &[u8]) -> Vec<u8> {
    let mut fields = wire::parse(bytes).expect("an encoded message parses");
    for _ in 0..rng.gen_range(1..=4) {
        wire::mutate(rng, &mut fields);
    }
    let mut out = Vec::new();
    wire::encode(&fields, &mut out);
    out
}

#[test]
fn corrupted_snapshots_are_refused_by_field_or_routed_never_a_panic() {
    let mut rng = SmallRng::seed_from_u64(0xc0_44a9);
    let (mut decoded, mut accepted) = (0, 0);
    let probes = [
        (Method::GET, "/"),
        (Method::PUT, "/exact?q=1&r=s"),
        (Method::GET, "/re/abc"),
    ];
    for reg in registries() {
        let bytes = snapshot(&reg).encode_to_vec();
        for _ in 0..1000 {
            let Ok(snap) = pb::Snapshot::decode(corrupt(&mut rng, &bytes).as_slice()) else {
                continue;
            };
            decoded += 1;
            let reg = match Registry::try_from(snap) {
                Ok(reg) => reg,
                Err(e) => {
                    assert!(!e.field.is_empty() && !e.reason.is_empty(), "{e:?}");
                    continue;
                }
            };
            accepted += 1;
            let first = Snapshot::build(Arc::new(reg.clone()), None);
            let index = Snapshot::build(Arc::new(reg), Some(&first));
            let tables = std::iter::once(&index.gateway.table)
                .chain(index.services().iter().map(|s| &s.routes.table));
            for table in tables {
                for (method, target) in &probes {
                    let uri = Uri::from_static(target);
                    if let Some(selected) = table.select(method, &uri, &HeaderMap::new()) {
                        let _ = table.pick_backend(selected.index, rng.gen());
                    }
                }
            }
        }
    }
    // Most corruptions still decode (protobuf skips what it does not know), and both paths of
    // the conversion are taken.
    // (7,000 cases: 4,342 decode, 3,828 of them convert.)
    let refused = decoded - accepted;
    assert!(
        decoded >= 2000,
        "only {decoded} corrupted snapshots decoded"
    );
    assert!(
        accepted >= 500 && refused >= 200,
        "{accepted} accepted, {refused} refused"
    );
}
