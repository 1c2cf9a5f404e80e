//! An Admin service on `127.0.0.1:0` over a registry file in a temporary directory, for the
//! admin API's and weirctl's tests.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use tokio::{net::TcpListener, task::JoinHandle};
use tonic::transport::{server::TcpIncoming, Server};
use weir_proxy::discovery::registry_file;

use super::{service, AdminContext};
use crate::{observe::History, proxies::Proxies, state::Store};

/// A running admin server; stopped when dropped.
pub(crate) struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The store it serves.
    pub store: Arc<Store>,
    /// Its connected-proxies table.
    pub proxies: Arc<Proxies>,
    /// The registry file.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Serves a registry file holding `text` (which must be valid).
    pub(crate) async fn start(text: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("registry.yaml");
        std::fs::write(&path, text).expect("write the registry");
        let registry = registry_file::load(&path).expect("the test registry is valid");
        let store = Arc::new(Store::new(path.clone(), registry));
        let proxies = Arc::new(Proxies::default());
        let ctx = AdminContext {
            store: store.clone(),
            proxies: proxies.clone(),
            history: Arc::new(History::default()),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let served = Server::builder()
                .add_service(service(ctx))
                .serve_with_incoming(TcpIncoming::from(listener))
                .await;
            served.expect("the test admin server runs");
        });
        TestServer {
            addr,
            store,
            proxies,
            path,
            _dir: dir,
            task,
        }
    }

    /// `http://ADDR`, for a client.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
