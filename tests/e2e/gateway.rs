//! The gateway listener end to end: Gateway API HTTPRoute matches and filters, weighted backends,
//! forwarding headers, hop-by-hop hygiene, upstream keep-alive and endpoint failures, all through
//! the real `weir-proxy` binary to nginx and in-process backends.

use std::net::SocketAddr;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use weir_tests::http_client::{get, head_len, request, send, H1Conn, Reply};
use weir_tests::nginx::parse_echo;
use weir_tests::wait::within;
use weir_tests::{free_addr, metrics, poll_until, require, Nginx, TestBackend, WeirProxy};

/// One `services[]` entry named `name` (namespace `default`) with these endpoints.
pub(crate) fn service(name: &str, endpoints: &[SocketAddr]) -> String {
    if endpoints.is_empty() {
        return format!("  - name: {name}\n    endpoints: []\n");
    }
    let mut out = format!("  - name: {name}\n    endpoints:\n");
    for addr in endpoints {
        out.push_str(&format!("      - address: \"{addr}\"\n"));
    }
    out
}

/// A registry: the given `services:` entries and `gateway.routes` (already indented YAML).
pub(crate) fn registry(services: &[String], gateway_routes: &str) -> String {
    format!(
        "services:\n{}gateway:\n  routes:\n{gateway_routes}",
        services.concat()
    )
}

/// Starts a proxy with a gateway listener on `yaml`.
pub(crate) async fn gateway_proxy(yaml: &str) -> (WeirProxy, SocketAddr) {
    let proxy = WeirProxy::builder()
        .gateway(true)
        .registry_yaml(yaml)
        .start()
        .await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");
    (proxy, gw)
}

/// `GET path` on the gateway with `Host: gw.test`.
async fn gw_get(gw: SocketAddr, path: &str) -> Reply {
    get(gw, "gw.test", path).await
}

/// How long a test waits for something that should happen at once.
const DEADLINE: Duration = Duration::from_secs(10);

/// An upload whose first part is sent at once and the rest only on [`HeldUpload::finish`], so
/// the request stays in flight at the endpoint for as long as the test wants.
struct HeldUpload {
    release: oneshot::Sender<()>,
    reply: JoinHandle<Reply>,
}

impl HeldUpload {
    /// Body bytes in all; the first half goes out at once, more than nginx buffers in memory.
    const LEN: usize = 512 * 1024;

    async fn finish(self) -> Reply {
        let _ = self.release.send(());
        within(DEADLINE, "held upload reply", self.reply)
            .await
            .expect("upload task")
    }
}

async fn held_upload(gw: SocketAddr, path: &str) -> HeldUpload {
    let (release, released) = oneshot::channel::<()>();
    let half = Bytes::from(vec![b'x'; HeldUpload::LEN / 2]);
    let chunks = futures_util::stream::unfold(
        (0u8, Some(released), half),
        |(step, released, half)| async move {
            match step {
                0 => Some((Ok(Frame::data(half.clone())), (1, released, half))),
                1 => {
                    let _ = released?.await;
                    Some((Ok(Frame::data(half.clone())), (2, None, half)))
                }
                _ => None,
            }
        },
    );
    let body = StreamBody::new(chunks.map(|f: Result<_, Infallible>| f));
    let req = http::Request::post(path)
        .header(http::header::HOST, "edge.test")
        .header(http::header::CONTENT_LENGTH, HeldUpload::LEN)
        .body(body)
        .expect("a valid upload request");
    let io = TcpStream::connect(gw)
        .await
        .expect("connect to the gateway");
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(conn);
    let reply = tokio::spawn(async move {
        let resp = tx.send_request(req).await.expect("upload response");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("upload reply body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            version: parts.version,
        }
    });
    HeldUpload { release, reply }
}

/// The `x-backend` that answered, or a panic naming what came back instead.
fn backend_of(reply: &Reply) -> &str {
    reply
        .header("x-backend")
        .unwrap_or_else(|| panic!("no x-backend: {} {:?}", reply.status, reply.body))
}

#[tokio::test]
async fn design_registry_example_rewrites_the_prefix_tags_the_source_and_reaches_both_endpoints() {
    require!(tool "nginx");
    let (a, b) = tokio::join!(Nginx::start("auth-a"), Nginx::start("auth-b"));
    // DESIGN.md's example verbatim, with the endpoints pointed at the two nginx servers.
    let yaml = format!(
        r#"services:
  - name: auth-service
    namespace: default
    hosts: [auth-service, auth-service.default.svc.cluster.local]
    addresses: ["10.96.0.10:80"]          # virtual IPs transparent clients dial
    endpoints:
      - address: "{a}"
      - address: "{b}"
        weight: 2
    policy:
      retryBudget: {{ ratio: 0.2, minPerSecond: 10, ttl: 10s }}
      circuitBreaker: {{ consecutiveFailures: 7, minEjection: 1s, maxEjection: 60s }}
      timeout: 10s
gateway:                                   # edge routes (gateway listener)
  routes:
    - name: auth
      matches: [{{ path: {{ type: PathPrefix, value: /auth-service }} }}]
      filters:
        - type: URLRewrite
          urlRewrite: {{ path: {{ type: ReplacePrefixMatch, replacePrefixMatch: / }} }}
        - type: RequestHeaderModifier
          requestHeaderModifier: {{ set: [{{ name: X-Request-Source, value: gateway }}] }}
      backendRefs: [{{ name: auth-service, namespace: default, weight: 100 }}]
"#,
        a = a.addr,
        b = b.addr
    );
    let (_proxy, gw) = gateway_proxy(&yaml).await;

    // Both endpoints take traffic. Once measured, an idle fast endpoint wins every sequential
    // request (that is the balancer's job), so before any response: hold one upload open on the
    // endpoint chosen first; its request in flight makes the other the cheaper next choice.
    let first = held_upload(gw, "/auth-service/upload").await;
    // nginx logs (at warn) each request body it spools to disk: the upload has arrived there.
    let busy = |n: &Nginx| n.error_log().contains("buffered to a temporary file");
    poll_until(
        DEADLINE,
        "an endpoint to buffer the first upload",
        || async { (busy(&a) || busy(&b)).then_some(()) },
    )
    .await;
    let second = held_upload(gw, "/auth-service/upload").await;
    poll_until(DEADLINE, "both endpoints to buffer an upload", || async {
        (busy(&a) && busy(&b)).then_some(())
    })
    .await;
    let mut servers = Vec::new();
    for upload in [first, second] {
        let reply = upload.finish().await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert_eq!(
            reply.body,
            HeldUpload::LEN.to_string(),
            "nginx got the whole body"
        );
        servers.push(backend_of(&reply).to_owned());
    }
    servers.sort();
    assert_eq!(servers, ["auth-a", "auth-b"]);

    // Every reply shows the prefix replaced by `/` and the source header set (not appended).
    for _ in 0..20 {
        let mut req = request(
            Method::GET,
            "edge.test",
            "/auth-service/echo/login?user=1",
            "",
        );
        req.headers_mut()
            .insert("x-request-source", "client".parse().expect("header value"));
        let reply = send(gw, req).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let echo = parse_echo(&reply.body);
        assert_eq!(echo["uri"], "/echo/login?user=1");
        assert_eq!(echo["x-request-source"], "gateway");
        assert_eq!(echo["method"], "GET");
        assert!(["auth-a", "auth-b"].contains(&echo["server"].as_str()));
    }

    // The bare prefix becomes `/`, which nginx answers from its root location.
    let root = gw_get(gw, "/auth-service").await;
    assert_eq!((root.status, root.body.as_str()), (StatusCode::OK, "OK\n"));
    // Outside the prefix (and across a segment boundary) nothing matches.
    assert_eq!(gw_get(gw, "/auth-servicex/echo").await.status, 404);
}

#[tokio::test]
async fn exact_beats_prefix_and_regular_expressions_are_anchored() {
    let (exact, prefix, regex) = tokio::join!(
        TestBackend::start("exact"),
        TestBackend::start("prefix"),
        TestBackend::start("regex")
    );
    let services = [
        service("exact", &[exact.addr]),
        service("prefix", &[prefix.addr]),
        service("regex", &[regex.addr]),
    ];
    // The prefix route comes first: precedence, not list order, must put Exact ahead of it.
    let routes = "    - name: prefix
      matches: [{ path: { type: PathPrefix, value: /shop } }]
      backendRefs: [{ name: prefix }]
    - name: exact
      matches: [{ path: { type: Exact, value: /shop/cart } }]
      backendRefs: [{ name: exact }]
    - name: regex
      matches: [{ path: { type: RegularExpression, value: '/v[0-9]+/items' } }]
      backendRefs: [{ name: regex }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&services, routes)).await;

    for (path, want) in [
        ("/shop/cart", Some("exact")),
        ("/shop/cart?x=1", Some("exact")),
        ("/shop/cart/", Some("prefix")),
        ("/shop/cart/item", Some("prefix")),
        ("/shop", Some("prefix")),
        ("/shop/", Some("prefix")),
        ("/shopping", None),
        ("/v2/items", Some("regex")),
        ("/v10/items?page=2", Some("regex")),
        ("/v2/items/7", None),
        ("/api/v2/items", None),
        ("/vx/items", None),
    ] {
        let reply = gw_get(gw, path).await;
        match want {
            Some(name) => {
                assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
                assert_eq!(backend_of(&reply), name, "{path}");
                assert_eq!(reply.json()["uri"], path, "{path} is forwarded unchanged");
            }
            None => {
                assert_eq!(
                    reply.status,
                    StatusCode::NOT_FOUND,
                    "{path}: {}",
                    reply.body
                );
                assert_eq!(reply.header("weir-proxy-error"), Some("no-route"), "{path}");
            }
        }
    }
}

#[tokio::test]
async fn header_query_and_method_matches_pick_their_routes() {
    let (canary, v2, post, fallback) = tokio::join!(
        TestBackend::start("canary"),
        TestBackend::start("v2"),
        TestBackend::start("post"),
        TestBackend::start("fallback"),
    );
    let services = [
        service("canary", &[canary.addr]),
        service("v2", &[v2.addr]),
        service("post", &[post.addr]),
        service("fallback", &[fallback.addr]),
    ];
    let routes = "    - name: canary
      matches: [{ headers: [{ name: X-Env, value: canary }] }]
      backendRefs: [{ name: canary }]
    - name: v2
      matches: [{ queryParams: [{ name: version, value: '2' }] }]
      backendRefs: [{ name: v2 }]
    - name: post
      matches: [{ method: POST }]
      backendRefs: [{ name: post }]
    - name: fallback
      backendRefs: [{ name: fallback }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&services, routes)).await;

    let with_header = |name: &'static str, value: &'static str| {
        let mut req = request(Method::GET, "gw.test", "/any", "");
        req.headers_mut()
            .insert(name, value.parse().expect("header value"));
        req
    };
    let cases = [
        (with_header("x-env", "canary"), "canary"),
        (with_header("x-env", "Canary"), "fallback"),
        (with_header("x-other", "canary"), "fallback"),
        (request(Method::GET, "gw.test", "/any?version=2", ""), "v2"),
        (
            request(Method::GET, "gw.test", "/any?a=b&version=2", ""),
            "v2",
        ),
        (
            request(Method::GET, "gw.test", "/any?version=20", ""),
            "fallback",
        ),
        (request(Method::POST, "gw.test", "/any", "body"), "post"),
        (request(Method::PUT, "gw.test", "/any", "body"), "fallback"),
        (request(Method::GET, "gw.test", "/any", ""), "fallback"),
    ];
    for (req, want) in cases {
        let what = format!("{} {} {:?}", req.method(), req.uri(), req.headers());
        let reply = send(gw, req).await;
        assert_eq!(reply.status, StatusCode::OK, "{what}: {}", reply.body);
        assert_eq!(backend_of(&reply), want, "{what}");
    }
    assert_eq!(post.requests(), 1);
    assert_eq!(canary.requests(), 1);
}

#[tokio::test]
async fn request_header_modifier_sets_adds_and_removes_before_forwarding() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: headers
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{ name: X-Set, value: from-gateway }]
            add: [{ name: X-Add, value: two }, { name: X-New, value: fresh }]
            remove: [X-Remove]
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    let mut req = request(Method::GET, "gw.test", "/h", "");
    let h = req.headers_mut();
    h.append("x-set", "from-client-1".parse().expect("value"));
    h.append("x-set", "from-client-2".parse().expect("value"));
    h.insert("x-add", "one".parse().expect("value"));
    h.insert("x-remove", "secret".parse().expect("value"));
    h.insert("x-untouched", "kept".parse().expect("value"));
    let reply = send(gw, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let headers = &reply.json()["headers"];
    assert_eq!(headers["x-set"], "from-gateway", "set replaces every value");
    assert_eq!(headers["x-add"], "one, two", "add appends");
    assert_eq!(headers["x-new"], "fresh");
    assert_eq!(headers["x-untouched"], "kept");
    assert!(headers.get("x-remove").is_none(), "{headers}");
}

#[tokio::test]
async fn response_header_modifier_rewrites_the_backend_response_head() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: resp
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set: [{ name: Content-Type, value: application/x-weir }]
            add: [{ name: X-Served-By, value: weir }]
            remove: [X-Backend]
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    let reply = gw_get(gw, "/r").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/x-weir"));
    assert_eq!(reply.header("x-served-by"), Some("weir"));
    assert_eq!(reply.header("x-backend"), None, "removed on the way out");
    // The backend answered (its echo), and saw none of the response filter on the request.
    assert_eq!(reply.json()["backend"], "app");
    assert!(reply.json()["headers"].get("x-served-by").is_none());
    assert_eq!(app.requests(), 1);
}

#[tokio::test]
async fn url_rewrite_replaces_the_hostname_and_the_full_path_keeping_the_query() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: rewrite
      matches: [{ path: { type: PathPrefix, value: /old } }]
      filters:
        - type: URLRewrite
          urlRewrite:
            hostname: internal.example
            path: { type: ReplaceFullPath, replaceFullPath: /new/place }
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    let reply = get(gw, "public.example:8080", "/old/deep/path?q=1&r=2").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let json = reply.json();
    assert_eq!(json["uri"], "/new/place?q=1&r=2");
    assert_eq!(json["headers"]["host"], "internal.example");
}

#[tokio::test]
async fn request_redirect_answers_with_its_location_and_forwards_nothing() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: moved
      matches: [{ path: { type: PathPrefix, value: /old } }]
      filters:
        - type: RequestRedirect
          requestRedirect:
            scheme: https
            hostname: new.example
            path: { type: ReplacePrefixMatch, replacePrefixMatch: /new }
            statusCode: 301
    - name: found
      matches: [{ path: { type: Exact, value: /temp } }]
      filters:
        - type: RequestRedirect
          requestRedirect: { port: 8443 }
      backendRefs: [{ name: app }]
    - name: secure
      matches: [{ path: { type: Exact, value: /secure } }]
      filters:
        - type: RequestRedirect
          requestRedirect: { scheme: https }
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    let moved = get(gw, "shop.example", "/old/cart?id=7").await;
    assert_eq!(
        moved.status,
        StatusCode::MOVED_PERMANENTLY,
        "{}",
        moved.body
    );
    assert_eq!(
        moved.header("location"),
        Some("https://new.example/new/cart?id=7")
    );
    let found = get(gw, "shop.example:8080", "/temp").await;
    assert_eq!(found.status, StatusCode::FOUND, "302 is the default");
    assert_eq!(
        found.header("location"),
        Some("http://shop.example:8443/temp")
    );
    let secure = get(gw, "shop.example:8080", "/secure").await;
    assert_eq!(
        secure.header("location"),
        Some("https://shop.example/secure"),
        "a new scheme brings its default port"
    );
    // HTTP/1.0 without Host: a relative Location would send the client back here over http.
    let raw = weir_tests::http_client::raw_exchange(
        gw,
        b"GET /secure HTTP/1.0\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    assert_eq!(
        weir_tests::http_client::raw_status(&raw),
        Some(400),
        "{text}"
    );
    assert!(
        text.contains("weir-proxy-error: redirect-needs-host"),
        "{text}"
    );
    assert!(!text.contains("location:"), "{text}");
    assert_eq!(app.requests(), 0, "a redirect is answered by the gateway");
}

#[tokio::test]
async fn add_query_parameter_reaches_the_backend_encoded() {
    require!(tool "nginx");
    let app = Nginx::start("app").await;
    let routes = "    - name: tag
      filters:
        - type: AddQueryParameter
          addQueryParameter: { name: source, value: edge gw&x=1 }
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    let with_query = parse_echo(&gw_get(gw, "/echo?a=1").await.body);
    assert_eq!(with_query["uri"], "/echo?a=1&source=edge%20gw%26x%3D1");
    let without = parse_echo(&gw_get(gw, "/echo").await.body);
    assert_eq!(without["uri"], "/echo?source=edge%20gw%26x%3D1");
}

#[tokio::test]
async fn weighted_backend_refs_split_traffic_eighty_twenty() {
    let (heavy, light) = tokio::join!(TestBackend::start("heavy"), TestBackend::start("light"));
    let services = [
        service("heavy", &[heavy.addr]),
        service("light", &[light.addr]),
    ];
    let routes = "    - name: split
      backendRefs: [{ name: heavy, weight: 80 }, { name: light, weight: 20 }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&services, routes)).await;

    const TOTAL: u64 = 2000;
    const CLIENTS: u64 = 4;
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let mut conn = H1Conn::connect(gw).await;
            for _ in 0..TOTAL / CLIENTS {
                let reply = conn
                    .send(request(Method::GET, "gw.test", "/split", ""))
                    .await;
                assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    assert_eq!(heavy.requests() + light.requests(), TOTAL);
    // Binomial(2000, 0.2) has a standard deviation of ~18 requests (0.9%): ±5% is 5.6 sigma,
    // yet a 75/25 or 85/15 split (let alone 50/50) falls outside it.
    let share = light.requests() as f64 / TOTAL as f64;
    assert!(
        (0.15..=0.25).contains(&share),
        "light got {} of {TOTAL} ({:.1}%), want 20% ± 5%",
        light.requests(),
        share * 100.0
    );
}

#[tokio::test]
async fn unmatched_request_gets_404_no_route() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: only-api
      matches: [{ path: { type: PathPrefix, value: /api } }]
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;
    let reply = gw_get(gw, "/elsewhere").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.header("weir-proxy-error"), Some("no-route"));
    assert_eq!(app.requests(), 0);
    assert_eq!(
        gw_get(gw, "/api").await.status,
        StatusCode::OK,
        "the route works"
    );
}

/// Clients at the edge learn the cause (the header, the status) but never an endpoint's
/// address, a service's name or an OS error.
#[tokio::test]
async fn gateway_error_answers_name_the_cause_and_nothing_inside_the_mesh() {
    // A port nothing listens on: bound, then closed.
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("bound");
    let routes = "    - name: dead
      matches: [{ path: { type: PathPrefix, value: /dead } }]
      backendRefs: [{ name: billing-internal }]
    - name: empty
      matches: [{ path: { type: PathPrefix, value: /empty } }]
      backendRefs: [{ name: ledger-internal }]
";
    let yaml = registry(
        &[
            service("billing-internal", &[dead]),
            service("ledger-internal", &[]),
        ],
        routes,
    );
    let (_proxy, gw) = gateway_proxy(&yaml).await;
    for (path, status, cause, account) in [
        (
            "/dead",
            StatusCode::BAD_GATEWAY,
            "connect-failed",
            "connect to the upstream failed\n",
        ),
        (
            "/empty",
            StatusCode::SERVICE_UNAVAILABLE,
            "no-endpoints",
            "no ready endpoint for the route's backend\n",
        ),
    ] {
        let reply = gw_get(gw, path).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.body);
        assert_eq!(reply.header("weir-proxy-error"), Some(cause), "{path}");
        assert_eq!(reply.body, account, "{path}");
        for inside in [dead.to_string(), "internal".into(), "os error".into()] {
            assert!(!reply.body.contains(&inside), "{path}: {}", reply.body);
        }
    }
}

#[tokio::test]
async fn gateway_adds_forwarded_headers_and_keeps_the_client_host() {
    require!(tool "nginx");
    let app = Nginx::start("app").await;
    let routes = "    - name: all
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    let fresh = parse_echo(&get(gw, "Shop.Example:8080", "/echo").await.body);
    assert_eq!(
        fresh["host"], "Shop.Example:8080",
        "Host reaches the backend untouched"
    );
    assert_eq!(fresh["x-forwarded-for"], "127.0.0.1");
    assert_eq!(fresh["x-forwarded-proto"], "http");

    let mut req = request(Method::GET, "shop.example", "/echo", "");
    req.headers_mut()
        .insert("x-forwarded-for", "203.0.113.9".parse().expect("value"));
    req.headers_mut()
        .insert("x-forwarded-proto", "https".parse().expect("value"));
    let chained = parse_echo(&send(gw, req).await.body);
    assert_eq!(chained["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(
        chained["x-forwarded-proto"], "http",
        "the gateway states the protocol it was reached over"
    );
}

/// A tiny HTTP/1.1 server that answers every request with hop-by-hop headers in its response.
async fn hop_by_hop_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    tokio::spawn(async move {
        while let Ok((mut io, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request head at a time (the proxy sends GETs without bodies).
                    let end = loop {
                        if let Some(end) = head_len(&buf) {
                            break end;
                        }
                        match io.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    buf.drain(..end);
                    let resp = b"HTTP/1.1 200 OK\r\nConnection: x-hop-resp\r\nX-Hop-Resp: 1\r\n\
                        Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n\
                        X-End-To-End: 1\r\nContent-Length: 2\r\n\r\nok";
                    if io.write_all(resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A gateway routing `/hop` to [`hop_by_hop_backend`] and everything else to an echo backend.
async fn hop_and_echo_gateway() -> (TestBackend, WeirProxy, SocketAddr) {
    let (app, hop) = tokio::join!(TestBackend::start("app"), hop_by_hop_backend());
    let services = [service("app", &[app.addr]), service("hop", &[hop])];
    let routes = "    - name: hop
      matches: [{ path: { type: PathPrefix, value: /hop } }]
      backendRefs: [{ name: hop }]
    - name: app
      backendRefs: [{ name: app }]
";
    let (proxy, gw) = gateway_proxy(&registry(&services, routes)).await;
    (app, proxy, gw)
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_in_both_directions() {
    let (_app, _proxy, gw) = hop_and_echo_gateway().await;

    let mut req = request(Method::GET, "gw.test", "/echo", "");
    let h = req.headers_mut();
    h.insert(
        "connection",
        "keep-alive, x-hop-req".parse().expect("value"),
    );
    h.insert("x-hop-req", "1".parse().expect("value"));
    h.insert("keep-alive", "timeout=5".parse().expect("value"));
    h.insert("proxy-connection", "keep-alive".parse().expect("value"));
    h.insert("x-end-to-end", "1".parse().expect("value"));
    let reply = send(gw, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let headers = &reply.json()["headers"];
    for gone in ["x-hop-req", "keep-alive", "proxy-connection", "connection"] {
        assert!(headers.get(gone).is_none(), "{gone} forwarded: {headers}");
    }
    assert_eq!(headers["x-end-to-end"], "1");

    let reply = gw_get(gw, "/hop").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    for gone in ["x-hop-resp", "keep-alive", "proxy-connection", "connection"] {
        assert_eq!(
            reply.header(gone),
            None,
            "{gone} returned: {:?}",
            reply.headers
        );
    }
    assert_eq!(reply.header("x-end-to-end"), Some("1"));
}

#[tokio::test]
async fn a_client_cannot_name_away_host_or_the_forwarded_headers() {
    // RFC 9110 §7.6.1 has a proxy drop what `Connection` names; the proxy's own X-Forwarded-*
    // (written before that step) and the message's Host are not the client's to drop.
    let (_app, _proxy, gw) = hop_and_echo_gateway().await;
    let mut req = request(Method::GET, "gw.test", "/echo", "");
    req.headers_mut().insert(
        "connection",
        "x-forwarded-for, x-forwarded-proto, host, x-hop-req"
            .parse()
            .expect("value"),
    );
    req.headers_mut()
        .insert("x-hop-req", "1".parse().expect("value"));
    let reply = send(gw, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let headers = &reply.json()["headers"];
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1", "{headers}");
    assert_eq!(headers["x-forwarded-proto"], "http", "{headers}");
    assert_eq!(headers["host"], "gw.test", "{headers}");
    assert!(headers.get("x-hop-req").is_none(), "{headers}");
}

#[tokio::test]
async fn connection_names_only_the_clients_fields_not_those_the_proxy_writes_later() {
    // What `Connection` names goes as the request is read: the client's own X-Forwarded-For
    // (then the gateway writes its own) and a field a route filter sets later both behave as
    // if the client had never named them. Fast path (GET) and hyper's (chunked POST) alike.
    let app = TestBackend::start("app").await;
    let routes = "    - name: app
      backendRefs: [{ name: app }]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: { set: [{ name: x-route, value: r }] }
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;
    for (method, body) in [(Method::GET, ""), (Method::POST, "abc")] {
        let mut req = request(method.clone(), "gw.test", "/echo", body);
        let h = req.headers_mut();
        h.insert(
            "connection",
            "x-route, x-hop-req, x-forwarded-for"
                .parse()
                .expect("value"),
        );
        h.insert("x-hop-req", "1".parse().expect("value"));
        h.insert("x-forwarded-for", "6.6.6.6".parse().expect("value"));
        if !body.is_empty() {
            h.insert("transfer-encoding", "chunked".parse().expect("value"));
        }
        let reply = send(gw, req).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}: {}", reply.body);
        let headers = &reply.json()["headers"];
        assert_eq!(headers["x-route"], "r", "{method}: {headers}");
        assert_eq!(
            headers["x-forwarded-for"], "127.0.0.1",
            "{method}: {headers}"
        );
        assert!(headers.get("x-hop-req").is_none(), "{method}: {headers}");
        assert!(headers.get("connection").is_none(), "{method}: {headers}");
        assert_eq!(reply.json()["body"], body, "{method}");
    }
}

#[tokio::test]
async fn requests_and_responses_on_one_connection_carry_only_their_own_fields() {
    // The proxy lends header maps from one request to the next (and X-Forwarded-For's value is
    // made once per connection): nothing of one message may show in the next.
    let (_app, _proxy, gw) = hop_and_echo_gateway().await;
    let mut conn = H1Conn::connect(gw).await;
    for i in 0..20 {
        let mut req = request(Method::GET, "gw.test", "/echo", "");
        if i % 2 == 0 {
            req.headers_mut()
                .insert("x-only-even", i.to_string().parse().expect("value"));
        }
        let reply = conn.send(req).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let headers = &reply.json()["headers"];
        if i % 2 == 0 {
            assert_eq!(headers["x-only-even"], i.to_string());
        } else {
            assert!(headers.get("x-only-even").is_none(), "leaked: {headers}");
        }
        assert_eq!(headers["x-forwarded-for"], "127.0.0.1", "request {i}");
        assert_eq!(reply.header("x-end-to-end"), None, "request {i}");

        let reply = conn.send(request(Method::GET, "gw.test", "/hop", "")).await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(reply.header("x-end-to-end"), Some("1"), "request {i}");
    }
}

#[tokio::test]
async fn many_requests_reuse_a_few_kept_alive_upstream_connections() {
    let app = TestBackend::start("app").await;
    let routes = "    - name: all
      backendRefs: [{ name: app }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("app", &[app.addr])], routes)).await;

    // A fresh client connection per request: only the proxy's pool can keep the count low.
    for _ in 0..100 {
        assert_eq!(gw_get(gw, "/ka").await.status, StatusCode::OK);
    }
    let mut conn = H1Conn::connect(gw).await;
    for _ in 0..100 {
        let reply = conn.send(request(Method::GET, "gw.test", "/ka", "")).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    assert_eq!(app.requests(), 200);
    assert!(
        app.connections() <= 4,
        "200 sequential requests opened {} upstream connections",
        app.connections()
    );
}

#[tokio::test]
async fn a_refusing_endpoint_is_marked_down_and_every_request_still_succeeds() {
    let live = TestBackend::start("live").await;
    // Nothing listens there: connects are refused.
    let dead = free_addr();
    let routes = "    - name: all
      backendRefs: [{ name: mixed }]
";
    let (proxy, gw) =
        gateway_proxy(&registry(&[service("mixed", &[dead, live.addr])], routes)).await;

    // Concurrent slow requests keep the live endpoint busy, so the balancer also tries the idle
    // dead one (fewer requests in flight) instead of sticking to the fast live one.
    let mut slow = Vec::new();
    for _ in 0..8 {
        slow.push(tokio::spawn(
            async move { gw_get(gw, "/_/delay/150").await },
        ));
    }
    for t in slow {
        let reply = t.await.expect("client task");
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{:?}: {}",
            reply.headers,
            reply.body
        );
        assert_eq!(backend_of(&reply), "live");
    }
    for _ in 0..40 {
        let reply = gw_get(gw, "/fast").await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{:?}: {}",
            reply.headers,
            reply.body
        );
    }
    assert_eq!(live.requests(), 48);
    let failures = metrics::sum(
        &proxy.metrics_text().await,
        "weir_endpoint_connect_failures_total",
        &[],
    );
    assert!(
        failures.is_some_and(|n| n > 0.0),
        "the dead endpoint was never tried: weir_endpoint_connect_failures_total = {failures:?}"
    );
}

#[tokio::test]
async fn a_service_without_endpoints_answers_503_no_endpoints() {
    let routes = "    - name: empty
      backendRefs: [{ name: empty }]
";
    let (_proxy, gw) = gateway_proxy(&registry(&[service("empty", &[])], routes)).await;
    let reply = gw_get(gw, "/anything").await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.body
    );
    assert_eq!(reply.header("weir-proxy-error"), Some("no-endpoints"));
}
