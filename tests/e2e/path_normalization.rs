//! Request paths are normalised before routing (`WEIR_PROXY_PATH_NORMALIZATION`): dot segments,
//! escaped unreserved characters and doubled slashes cannot slip past a deny route, and the
//! backend is sent the path the route was chosen on.

use std::net::SocketAddr;
use std::time::Duration;

use weir_tests::http_client::{get_h2, raw_exchange, raw_status};
use weir_tests::{TestBackend, WeirProxy};

use crate::gateway::{registry, service};

/// `/admin` is refused with 403 by a fault that always fires; everything else goes to `app`.
const ROUTES: &str = "    - name: deny-admin
      matches: [{ path: { type: PathPrefix, value: /admin } }]
      filters: [{ type: Fault, fault: { abort: { percentage: 100, status: 403 } } }]
      backendRefs: [{ name: app }]
    - name: app
      backendRefs: [{ name: app }]
";

async fn proxy(app: &TestBackend, mode: Option<&str>) -> (WeirProxy, SocketAddr) {
    let mut builder = WeirProxy::builder()
        .gateway(true)
        .registry_yaml(registry(&[service("app", &[app.addr])], ROUTES));
    if let Some(mode) = mode {
        builder = builder.env("WEIR_PROXY_PATH_NORMALIZATION", mode);
    }
    let proxy = builder.start().await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");
    (proxy, gw)
}

/// Sends `GET target` exactly as written (no client-side URI parsing) and returns the status and,
/// for a 200 from the echo backend, the request target the backend saw.
async fn raw_get(gw: SocketAddr, target: &str) -> (u16, Option<String>) {
    let req = format!("GET {target} HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n");
    let resp = raw_exchange(gw, req.as_bytes(), Duration::from_secs(10)).await;
    let status = raw_status(&resp).unwrap_or_else(|| {
        panic!(
            "{target}: no response: {:?}",
            String::from_utf8_lossy(&resp)
        )
    });
    let text = String::from_utf8_lossy(&resp);
    let seen = (status == 200).then(|| {
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{target}: echo body is not JSON ({e}): {body:?}"));
        json["uri"].as_str().unwrap_or_default().to_owned()
    });
    (status, seen)
}

#[tokio::test]
async fn disguised_paths_cannot_slip_past_a_deny_route_by_default() {
    let app = TestBackend::start("app").await;
    let (_proxy, gw) = proxy(&app, None).await;
    for target in [
        "/admin",
        "/public/../admin",
        "/public/%2e%2e/admin/users",
        "/./admin",
        "/%61dmin",
        "/%61%64%6D%69%6E/x",
        "//admin",
        "/public//..//admin",
        "/../../admin",
    ] {
        assert_eq!(raw_get(gw, target).await, (403, None), "{target}");
    }
    for (target, forwarded) in [
        ("/public/a/../b?q=%2e%2e//x", "/public/b?q=%2e%2e//x"),
        ("/%7Euser/%41%2fx", "/~user/A%2Fx"),
        ("/shop//cart/./items/", "/shop/cart/items/"),
        ("/.well-known/x", "/.well-known/x"),
        ("/plain/path", "/plain/path"),
        ("/admin%2Fx", "/admin%2Fx"),
        ("/administrator", "/administrator"),
    ] {
        assert_eq!(
            raw_get(gw, target).await,
            (200, Some(forwarded.to_owned())),
            "{target}"
        );
    }
    // HTTP/2 requests are normalised the same way.
    assert_eq!(get_h2(gw, "gw.test", "/%61dmin").await.status, 403);
}

#[tokio::test]
async fn decode_and_merge_slashes_also_decodes_escaped_slashes() {
    let app = TestBackend::start("app").await;
    let (_proxy, gw) = proxy(&app, Some("decode_and_merge_slashes")).await;
    assert_eq!(raw_get(gw, "/admin%2Fx").await, (403, None));
    assert_eq!(raw_get(gw, "/public%2F..%2Fadmin").await, (403, None));
    assert_eq!(
        raw_get(gw, "/a%2fb%5Cc").await,
        (200, Some("/a/b/c".to_owned()))
    );
}

#[tokio::test]
async fn base_keeps_doubled_slashes_and_none_forwards_the_path_as_sent() {
    let app = TestBackend::start("app").await;
    let (_base, gw) = proxy(&app, Some("base")).await;
    assert_eq!(raw_get(gw, "/public/../admin").await, (403, None));
    assert_eq!(
        raw_get(gw, "/a//b/./c").await,
        (200, Some("/a//b/c".to_owned()))
    );
    let (_none, gw) = proxy(&app, Some("none")).await;
    assert_eq!(
        raw_get(gw, "/public/../admin").await,
        (200, Some("/public/../admin".to_owned()))
    );
}
