//! An in-process `Discovery` server on 127.0.0.1 whose answers the test sets, and a client
//! harness standing in for the app (it applies each union and reports it back).

use std::{
    collections::HashMap,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tonic::{Request, Response, Status};
use weir_proto::discovery::{
    self as pb,
    discovery_server::{Discovery, DiscoveryServer},
};

use crate::{
    discovery::control::{BackoffConfig, Control, ControlConfig},
    model::Registry,
};

/// Answers by target, as `TargetKey`'s display form of the proto target ("address 1.2.3.4:80").
#[derive(Debug, Default)]
struct Answers {
    version: u64,
    by_target: HashMap<String, pb::update::Result>,
}

#[derive(Debug, Default)]
pub struct Counters {
    /// Watch calls received.
    pub opened: AtomicUsize,
    /// Streams still open (their sending task ends when the client cancels).
    pub open: AtomicUsize,
    pub last_proxy: Mutex<Option<pb::ProxyInfo>>,
}

#[derive(Clone)]
struct Service {
    answers: Arc<watch::Sender<Answers>>,
    counters: Arc<Counters>,
    kill: watch::Receiver<bool>,
}

fn describe(t: Option<pb::Target>) -> String {
    use pb::target::Kind;
    match t.and_then(|t| t.kind) {
        Some(Kind::Address(a)) => format!("address {a}"),
        Some(Kind::Authority(h)) => format!("authority {h}"),
        Some(Kind::Service(s)) => format!("service {s}"),
        Some(Kind::Gateway(_)) => "gateway".into(),
        None => "none".into(),
    }
}

type UpdateStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::Update, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Discovery for Service {
    type WatchStream = UpdateStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<UpdateStream>, Status> {
        let req = req.into_inner();
        *self.counters.last_proxy.lock().expect("not poisoned") = req.proxy;
        self.counters.opened.fetch_add(1, Ordering::SeqCst);
        self.counters.open.fetch_add(1, Ordering::SeqCst);
        let target = describe(req.target);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (mut answers, mut kill, counters) = (
            self.answers.subscribe(),
            self.kill.clone(),
            self.counters.clone(),
        );
        tokio::spawn(async move {
            loop {
                // Nothing is sent for a target without an answer: the client waits.
                let update = {
                    let a = answers.borrow_and_update();
                    a.by_target.get(&target).map(|r| pb::Update {
                        version: a.version,
                        result: Some(r.clone()),
                    })
                };
                if let Some(u) = update {
                    if tx.send(Ok(u)).await.is_err() {
                        break;
                    }
                }
                tokio::select! {
                    r = answers.changed() => if r.is_err() { break },
                    () = async { drop(kill.wait_for(|k| *k).await) } => {
                        let _ = tx.send(Err(Status::unavailable("stopping"))).await;
                        break;
                    }
                    () = tx.closed() => break,
                }
            }
            counters.open.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// A running fake control plane.
pub struct FakeControl {
    pub addr: SocketAddr,
    answers: Arc<watch::Sender<Answers>>,
    pub counters: Arc<Counters>,
    kill: watch::Sender<bool>,
    server: JoinHandle<()>,
}

impl FakeControl {
    pub async fn start() -> FakeControl {
        FakeControl::start_at("127.0.0.1:0".parse().expect("an address")).await
    }

    pub async fn start_at(addr: SocketAddr) -> FakeControl {
        let listener = TcpListener::bind(addr)
            .await
            .expect("bind the fake control plane");
        let addr = listener.local_addr().expect("bound");
        let answers = Arc::new(watch::channel(Answers::default()).0);
        let counters = Arc::new(Counters::default());
        let (kill, kill_rx) = watch::channel(false);
        let svc = Service {
            answers: answers.clone(),
            counters: counters.clone(),
            kill: kill_rx.clone(),
        };
        let mut stop = kill_rx;
        let server = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(DiscoveryServer::new(svc))
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stop.wait_for(|k| *k).await;
                })
                .await;
        });
        FakeControl {
            addr,
            answers,
            counters,
            kill,
            server,
        }
    }

    /// Sets what `target` resolves to and pushes it to its watchers with a new version.
    pub fn answer(&self, target: &str, result: pb::update::Result) {
        self.answers.send_modify(|a| {
            a.version += 1;
            a.by_target.insert(target.to_string(), result);
        });
    }

    pub fn opened(&self) -> usize {
        self.counters.opened.load(Ordering::SeqCst)
    }

    pub fn open(&self) -> usize {
        self.counters.open.load(Ordering::SeqCst)
    }

    /// Fails every stream and shuts the server down; the port is free when this returns.
    pub async fn stop(self) {
        let _ = self.kill.send(true);
        let _ = self.server.await;
    }
}

/// A snapshot answer with one service `name` at virtual address `vip` and these endpoints.
pub fn service(name: &str, vip: &str, endpoints: &[&str]) -> pb::update::Result {
    pb::update::Result::Snapshot(pb::Snapshot {
        services: vec![pb::Service {
            name: name.into(),
            namespace: "default".into(),
            hosts: vec![name.into()],
            addresses: vec![vip.into()],
            endpoints: endpoints
                .iter()
                .map(|e| pb::Endpoint {
                    address: (*e).into(),
                    weight: 1,
                    ready: true,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        gateway_routes: vec![],
    })
}

pub fn no_such_target() -> pb::update::Result {
    pb::update::Result::NoSuchTarget(pb::NoSuchTarget {
        reason: "unknown".into(),
    })
}

/// A control client plus the stand-in for the app's apply loop.
pub struct Client {
    pub control: Arc<Control>,
    /// The registry the stand-in last applied (what the request path would see).
    pub applied: watch::Receiver<Arc<Registry>>,
}

pub fn config(addr: SocketAddr) -> ControlConfig {
    ControlConfig {
        addr: addr.to_string(),
        resolve_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(300),
        gateway: false,
        proxy_id: "test-proxy".into(),
        admin_addr: "127.0.0.1:4191".into(),
        reconnect: BackoffConfig {
            base: Duration::from_millis(10),
            max: Duration::from_millis(100),
        },
    }
}

pub fn client(config: ControlConfig) -> Client {
    let (registry_tx, mut registry_rx) = watch::channel(Arc::new(Registry::default()));
    let control = Control::start(config, registry_tx).expect("a valid address");
    let (applied_tx, applied) = watch::channel(Arc::new(Registry::default()));
    let c = control.clone();
    tokio::spawn(async move {
        while registry_rx.changed().await.is_ok() {
            let reg = registry_rx.borrow_and_update().clone();
            applied_tx.send_replace(reg.clone());
            c.applied(&reg);
        }
    });
    Client { control, applied }
}

impl Client {
    /// The endpoints of `name` in the applied registry, if it is there.
    pub fn endpoints(&self, name: &str) -> Option<Vec<String>> {
        let reg = self.applied.borrow();
        let svc = reg.services.iter().find(|s| s.name == name)?;
        Some(
            svc.endpoints
                .iter()
                .map(|e| e.address.to_string())
                .collect(),
        )
    }
}

/// Polls `f` until it holds, failing the test after five seconds.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
