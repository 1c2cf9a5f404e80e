//! Route `hostnames` at the gateway (Gateway API HTTPRoute): the request's host (`Host`, or
//! HTTP/2's `:authority`) picks the routes of its most specific hostname first, then the path
//! decides; a registry edit moves a hostname at once.

use std::time::Duration;

use http::{Method, Request, StatusCode};
use weir_tests::h2_client::{self, empty, H2Client};
use weir_tests::http_client::{request, send};
use weir_tests::wait::poll_until;
use weir_tests::TestBackend;

use crate::gateway::{gateway_proxy, registry, service};

const DEADLINE: Duration = Duration::from_secs(10);

fn routes(shop_hosts: &str) -> String {
    format!(
        "    - name: fallback
      backendRefs: [{{ name: fallback }}]
    - name: wild
      hostnames: ['*.example.com']
      backendRefs: [{{ name: wild }}]
    - name: api
      hostnames: [api.example.com]
      matches: [{{ path: {{ type: PathPrefix, value: /v1 }} }}]
      backendRefs: [{{ name: api }}]
    - name: shop
      hostnames: {shop_hosts}
      backendRefs: [{{ name: shop }}]
"
    )
}

#[tokio::test]
async fn the_most_specific_hostname_picks_the_routes_over_http1_and_http2() {
    let (shop, api, wild, fallback) = tokio::join!(
        TestBackend::start("shop"),
        TestBackend::start("api"),
        TestBackend::start("wild"),
        TestBackend::start("fallback"),
    );
    let services = [
        service("shop", &[shop.addr]),
        service("api", &[api.addr]),
        service("wild", &[wild.addr]),
        service("fallback", &[fallback.addr]),
    ];
    let (proxy, gw) = gateway_proxy(&registry(&services, &routes("[shop.example.com]"))).await;

    let cases = [
        ("shop.example.com", "/anything", "shop"),
        ("SHOP.Example.com:8080", "/anything", "shop"),
        ("shop.example.com.", "/anything", "shop"),
        ("api.example.com", "/v1/users", "api"),
        // The exact host's only route does not match: the wildcard's does.
        ("api.example.com", "/v2/users", "wild"),
        ("a.b.example.com", "/", "wild"),
        // A wildcard is no match for its bare suffix.
        ("example.com", "/", "fallback"),
        ("other.test", "/v1/users", "fallback"),
    ];
    for (host, path, want) in cases {
        let reply = send(gw, request(Method::GET, host, path, "")).await;
        assert_eq!(reply.status, StatusCode::OK, "{host}{path}: {}", reply.body);
        assert_eq!(reply.header("x-backend"), Some(want), "{host}{path}");
    }

    // HTTP/2 names its host in :authority.
    let mut h2 = H2Client::connect(gw).await;
    for (uri, want) in [
        ("http://api.example.com/v1/x", "api"),
        ("http://shop.example.com:80/x", "shop"),
        ("http://x.example.com/x", "wild"),
    ] {
        let req = Request::get(uri).body(empty()).expect("request");
        let resp = h2.send(req).await.expect("response head");
        let reply = h2_client::collect(resp, DEADLINE).await.expect("response");
        assert_eq!(reply.status, StatusCode::OK, "{uri}");
        assert_eq!(reply.header("x-backend"), Some(want), "{uri}");
    }

    // An edit that gives the shop route another host applies without a restart.
    proxy.write_registry(&registry(&services, &routes("[store.test]")));
    poll_until(DEADLINE, "store.test reaches the shop route", || async {
        let reply = send(gw, request(Method::GET, "store.test", "/", "")).await;
        (reply.header("x-backend") == Some("shop")).then_some(())
    })
    .await;
    let reply = send(gw, request(Method::GET, "shop.example.com", "/", "")).await;
    assert_eq!(reply.header("x-backend"), Some("wild"));
}

#[tokio::test]
async fn a_host_no_route_names_gets_404_when_every_route_names_hosts() {
    let shop = TestBackend::start("shop").await;
    let routes = "    - name: shop
      hostnames: [shop.example.com]
      backendRefs: [{ name: shop }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("shop", &[shop.addr])], routes)).await;
    let reply = send(gw, request(Method::GET, "shop.example.com", "/", "")).await;
    assert_eq!(reply.header("x-backend"), Some("shop"));
    let reply = send(gw, request(Method::GET, "other.example.com", "/", "")).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.body);
    assert_eq!(reply.header("weir-proxy-error"), Some("no-route"));
    assert_eq!(shop.requests(), 1);
}
