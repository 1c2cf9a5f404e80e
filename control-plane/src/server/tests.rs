//! The control plane end to end in-process: a registry file in a temp dir, a real gRPC server on
//! 127.0.0.1:0, real Discovery clients.

use std::{
    future::Future,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::oneshot,
    task::JoinHandle,
};
use tonic::Streaming;
use weir_proto::discovery::{self as pb, discovery_client::DiscoveryClient, target::Kind};

use super::*;

const DEADLINE: Duration = Duration::from_secs(5);

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weir-control-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir is writable");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Harness {
    _dir: TempDir,
    path: PathBuf,
    grpc: SocketAddr,
    admin: SocketAddr,
    store: Arc<Store>,
    proxies: Arc<Proxies>,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Writes `text` next to `path` and renames it over, as editors and `weirctl` do.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("temp dir is writable");
    std::fs::rename(&tmp, path).expect("rename within a directory");
}

async fn start(doc: &str) -> Harness {
    let dir = TempDir::new();
    let path = dir.0.join("registry.yaml");
    write_atomically(&path, doc);
    let control = ControlPlane::build(ControlConfig {
        registry: path.clone(),
        grpc_listen: "127.0.0.1:0".parse().expect("literal address"),
        admin_listen: "127.0.0.1:0".parse().expect("literal address"),
        registry_poll: Duration::from_millis(10),
    })
    .await
    .expect("control plane starts");
    let (stop, stopped) = oneshot::channel::<()>();
    Harness {
        _dir: dir,
        path,
        grpc: control.grpc_addr(),
        admin: control.admin_addr(),
        store: control.store(),
        proxies: control.proxies(),
        stop: Some(stop),
        served: tokio::spawn(control.run(async {
            let _ = stopped.await;
        })),
    }
}

impl Harness {
    async fn watch(&self, proxy: &str, kind: Kind) -> Streaming<pb::Update> {
        let mut client = DiscoveryClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("gRPC listener accepts");
        let request = pb::WatchRequest {
            target: Some(pb::Target { kind: Some(kind) }),
            proxy: Some(pb::ProxyInfo {
                id: proxy.into(),
                version: "test".into(),
                admin_addr: String::new(),
            }),
        };
        client
            .watch(request)
            .await
            .expect("watch is accepted")
            .into_inner()
    }

    async fn get(&self, path: &str) -> String {
        let mut conn = tokio::net::TcpStream::connect(self.admin)
            .await
            .expect("admin listener accepts");
        let req = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
        conn.write_all(req.as_bytes()).await.expect("write");
        let mut out = String::new();
        conn.read_to_string(&mut out).await.expect("read");
        out
    }
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {DEADLINE:?}"))
}

async fn next(stream: &mut Streaming<pb::Update>) -> pb::Update {
    within("next update", stream.message())
        .await
        .expect("stream healthy")
        .expect("stream still open")
}

/// Polls `check` until it holds or the deadline passes.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    within(what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

fn snapshot(update: &pb::Update) -> &pb::Snapshot {
    match &update.result {
        Some(pb::update::Result::Snapshot(s)) => s,
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

fn endpoints(update: &pb::Update) -> Vec<String> {
    snapshot(update).services[0]
        .endpoints
        .iter()
        .map(|e| e.address.clone())
        .collect()
}

const TWO: &str = r#"
services:
  - name: web
    endpoints: [{ address: "127.0.0.1:8080" }]
    hosts: [web]
  - name: api
    endpoints: [{ address: "127.0.0.1:9090" }]
"#;

fn service(name: &str) -> Kind {
    Kind::Service(name.into())
}

#[tokio::test]
async fn a_watch_gets_its_snapshot_at_once_and_a_new_one_after_an_edit() {
    let h = start(TWO).await;
    let mut web = h.watch("p1", service("web")).await;
    let first = next(&mut web).await;
    assert_eq!(first.version, 1);
    assert_eq!(endpoints(&first), ["127.0.0.1:8080"]);

    write_atomically(
        &h.path,
        &TWO.replace(
            "\"127.0.0.1:8080\" }",
            "\"127.0.0.1:8080\" }, { address: \"127.0.0.1:8081\" }",
        ),
    );
    let second = next(&mut web).await;
    assert_eq!(second.version, 2);
    assert_eq!(endpoints(&second), ["127.0.0.1:8080", "127.0.0.1:8081"]);
}

#[tokio::test]
async fn an_edit_to_another_service_pushes_nothing_to_the_watch() {
    let h = start(TWO).await;
    let mut web = h.watch("p1", service("web")).await;
    let mut api = h.watch("p2", service("api")).await;
    assert_eq!(next(&mut web).await.version, 1);
    assert_eq!(next(&mut api).await.version, 1);

    let api_edited = TWO.replace("9090", "9091");
    write_atomically(&h.path, &api_edited);
    // api's own update proves generation 2 was indexed and streamed before the next edit.
    assert_eq!(next(&mut api).await.version, 2);
    write_atomically(&h.path, &api_edited.replace("8080", "8081"));
    let update = next(&mut web).await;
    assert_eq!(update.version, 3, "web must skip generation 2");
    assert_eq!(endpoints(&update), ["127.0.0.1:8081"]);
}

#[tokio::test]
async fn an_unknown_service_gets_no_such_target_then_a_snapshot_once_it_is_added() {
    let h = start(TWO).await;
    let mut db = h.watch("p1", service("db")).await;
    let first = next(&mut db).await;
    match &first.result {
        Some(pb::update::Result::NoSuchTarget(n)) => assert!(n.reason.contains("db"), "{n:?}"),
        other => panic!("expected NoSuchTarget, got {other:?}"),
    }
    write_atomically(&h.path, &format!("{TWO}  - name: db\n"));
    let update = next(&mut db).await;
    assert_eq!(update.version, 2);
    assert_eq!(snapshot(&update).services[0].name, "db");
}

#[tokio::test]
async fn an_invalid_edit_is_recorded_with_its_location_and_pushes_nothing() {
    let h = start(TWO).await;
    let mut web = h.watch("p1", service("web")).await;
    assert_eq!(next(&mut web).await.version, 1);

    write_atomically(&h.path, &TWO.replace("127.0.0.1:8080", "not-an-address"));
    let store = h.store.clone();
    eventually("the bad edit is rejected", || {
        store.current().error.is_some()
    })
    .await;
    let state = h.store.current();
    let error = state.error.as_deref().unwrap_or_default();
    let location = format!("{}:4:", h.path.display());
    assert!(error.starts_with(&location), "{error}");
    assert_eq!(state.version, 1);

    write_atomically(&h.path, &TWO.replace("8080", "8082"));
    let update = next(&mut web).await;
    assert_eq!(
        update.version, 2,
        "nothing was pushed for the rejected edit"
    );
    assert_eq!(endpoints(&update), ["127.0.0.1:8082"]);
    assert!(h.store.current().error.is_none());
}

#[tokio::test]
async fn a_watching_proxy_is_listed_until_it_hangs_up() {
    let h = start(TWO).await;
    let mut web = h.watch("proxy-a", Kind::Authority("web:80".into())).await;
    next(&mut web).await;
    let listed = h.proxies.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].identity.id, "proxy-a");
    assert_eq!(listed[0].targets, ["authority:web:80"]);
    assert_eq!(listed[0].services, ["web.default"]);

    drop(web);
    let proxies = h.proxies.clone();
    eventually("the stream is unregistered", || proxies.list().is_empty()).await;
}

#[tokio::test]
async fn the_admin_listener_answers_ready_live_and_metrics() {
    let h = start(TWO).await;
    // run() marks readiness as it starts serving; the harness spawned it just now.
    let mut ready = String::new();
    within("ready", async {
        loop {
            ready = h.get("/ready").await;
            if ready.starts_with("HTTP/1.1 200") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(h.get("/live").await.starts_with("HTTP/1.1 200"));
    let _watch = h.watch("p1", service("web")).await;
    let metrics = h.get("/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("weir_control_streams"), "{metrics}");
    assert!(h.get("/nope").await.starts_with("HTTP/1.1 404"));
}

#[tokio::test]
async fn stopping_ends_every_watch_and_the_server() {
    let mut h = start(TWO).await;
    let mut web = h.watch("p1", service("web")).await;
    next(&mut web).await;
    if let Some(stop) = h.stop.take() {
        let _ = stop.send(());
    }
    let end = within("the stream ends", web.message()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
    within("the server stops", &mut h.served)
        .await
        .expect("server task did not panic")
        .expect("server stopped cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watches_share_one_connection_and_all_see_an_edit() {
    let h = start(TWO).await;
    let client = DiscoveryClient::connect(format!("http://{}", h.grpc))
        .await
        .expect("gRPC listener accepts");
    let mut streams = Vec::new();
    for i in 0..1000 {
        let mut client = client.clone();
        let request = pb::WatchRequest {
            target: Some(pb::Target {
                kind: Some(service(if i % 2 == 0 { "web" } else { "api" })),
            }),
            proxy: Some(pb::ProxyInfo {
                id: format!("sim-{i}"),
                ..Default::default()
            }),
        };
        let mut s = within("watch opens", client.watch(request))
            .await
            .expect("watch is accepted")
            .into_inner();
        assert_eq!(next(&mut s).await.version, 1);
        streams.push(s);
    }
    assert_eq!(h.proxies.stream_count(), 1000);
    write_atomically(&h.path, &TWO.replace("8080", "8083"));
    for s in streams.iter_mut().step_by(2) {
        let update = next(s).await;
        assert_eq!(endpoints(&update), ["127.0.0.1:8083"]);
    }
}
