//! The `CORS` filter at the gateway, as a browser exercises it: preflights answered by the proxy
//! (never reaching the backend), actual requests from allowed origins marked on their response,
//! and other origins left unmarked.

use http::{header, Method, StatusCode};
use weir_tests::http_client::{request, send, Reply};
use weir_tests::TestBackend;

use crate::gateway::{gateway_proxy, registry, service};

const ROUTES: &str = "    - name: app
      matches: [{ path: { type: PathPrefix, value: /app } }]
      filters:
        - type: CORS
          cors:
            allowOrigins: ['https://app.test', 'https://*.app.test']
            allowMethods: [GET, PUT]
            allowHeaders: [x-token]
            exposeHeaders: [x-backend]
            maxAge: 600
            allowCredentials: true
      backendRefs: [{ name: app }]
    - name: down
      matches: [{ path: { type: PathPrefix, value: /down } }]
      filters:
        - type: CORS
          cors: { allowOrigins: ['*'] }
      backendRefs: [{ name: down }]
    - name: plain
      backendRefs: [{ name: app }]
";

async fn call(
    gw: std::net::SocketAddr,
    method: Method,
    path: &str,
    fields: &[(&str, &str)],
) -> Reply {
    let mut req = request(method, "gw.test", path, "");
    for (name, value) in fields {
        let name: header::HeaderName = name.parse().expect("name");
        req.headers_mut()
            .insert(name, value.parse().expect("value"));
    }
    send(gw, req).await
}

fn vary(r: &Reply) -> Vec<&str> {
    r.headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

#[tokio::test]
async fn preflights_are_answered_at_the_proxy_and_allowed_origins_marked() {
    let app = TestBackend::start("app").await;
    let services = [service("app", &[app.addr]), service("down", &[])];
    let (_proxy, gw) = gateway_proxy(&registry(&services, ROUTES)).await;
    let preflight = |origin: &'static str| async move {
        let fields = [
            ("origin", origin),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-token"),
        ];
        call(gw, Method::OPTIONS, "/app/items", &fields).await
    };

    for origin in ["https://app.test", "https://eu.app.test"] {
        let r = preflight(origin).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{origin}");
        assert_eq!(r.header("access-control-allow-origin"), Some(origin));
        assert_eq!(r.header("access-control-allow-methods"), Some("GET, PUT"));
        assert_eq!(r.header("access-control-allow-headers"), Some("x-token"));
        assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
        assert_eq!(r.header("access-control-max-age"), Some("600"));
        assert!(vary(&r).contains(&"Origin"), "{:?}", r.headers);
    }
    let refused = preflight("https://evil.test").await;
    assert_eq!(refused.status, StatusCode::NO_CONTENT);
    assert_eq!(refused.header("access-control-allow-origin"), None);
    assert_eq!(refused.header("access-control-allow-methods"), None);
    assert_eq!(app.requests(), 0, "a preflight never reaches the backend");

    let actual = call(
        gw,
        Method::GET,
        "/app/items",
        &[("origin", "https://app.test")],
    )
    .await;
    assert_eq!(actual.status, StatusCode::OK);
    assert_eq!(actual.header("x-backend"), Some("app"));
    assert_eq!(
        actual.header("access-control-allow-origin"),
        Some("https://app.test")
    );
    assert_eq!(
        actual.header("access-control-allow-credentials"),
        Some("true")
    );
    assert_eq!(
        actual.header("access-control-expose-headers"),
        Some("x-backend")
    );
    assert!(vary(&actual).contains(&"Origin"));

    for fields in [&[("origin", "https://evil.test")][..], &[]] {
        let r = call(gw, Method::GET, "/app/items", fields).await;
        assert_eq!(r.status, StatusCode::OK, "{fields:?}");
        assert_eq!(r.header("access-control-allow-origin"), None, "{fields:?}");
    }
    assert_eq!(app.requests(), 3);

    // A route without the filter sends a preflight on like any request.
    let r = call(
        gw,
        Method::OPTIONS,
        "/other",
        &[
            ("origin", "https://app.test"),
            ("access-control-request-method", "PUT"),
        ],
    )
    .await;
    assert_eq!(r.header("x-backend"), Some("app"));
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(app.requests(), 4);

    // An answer the proxy makes itself carries the marks too, so the page can read the 503
    // rather than see a CORS error.
    let r = call(
        gw,
        Method::GET,
        "/down/x",
        &[("origin", "https://any.test")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("weir-proxy-error"), Some("no-endpoints"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
}
