//! Run the real `weir-proxy` binary on free loopback ports with a registry file the test owns.
//!
//! The binary is found next to the test executable (`target/<profile>/weir-proxy`, built by
//! `cargo build --workspace --bins`), or at `WEIR_PROXY_BIN`, or at [`WeirProxyBuilder::binary`].

use std::ffi::OsString;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Command;
use tokio::time::Instant;

use crate::http_client::{self, Reply};
use crate::ports::free_addr;
use crate::process::ChildProc;
use crate::tmp::TempDir;

/// How long [`WeirProxyBuilder::start`] waits for `/ready`.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);

/// The registry used when a test gives none: valid and empty.
pub const EMPTY_REGISTRY: &str = "services: []\n";

/// Collects the settings of one proxy process; see [`WeirProxy::builder`].
#[derive(Debug, Clone)]
pub struct WeirProxyBuilder {
    registry: String,
    env: Vec<(String, Option<OsString>)>,
    gateway: bool,
    binary: Option<PathBuf>,
    admin_dual_stack: bool,
}

/// A running `weir-proxy`; SIGKILLed on drop.
#[derive(Debug)]
pub struct WeirProxy {
    /// `WEIR_PROXY_OUTBOUND_LISTEN`.
    pub outbound: SocketAddr,
    /// `WEIR_PROXY_INBOUND_LISTEN`.
    pub inbound: SocketAddr,
    /// `WEIR_PROXY_ADMIN_LISTEN`.
    pub admin: SocketAddr,
    /// `WEIR_PROXY_GATEWAY_LISTEN`, when the builder asked for a gateway.
    pub gateway: Option<SocketAddr>,
    registry: PathBuf,
    child: ChildProc,
    // Last field: dropped after the child is killed, so the log outlives it.
    dir: TempDir,
}

impl WeirProxy {
    /// A builder with an empty registry, no gateway, `WEIR_PROXY_LOG=info,weir_proxy=debug` and
    /// one worker (`WEIR_PROXY_WORKERS=1`, a sidecar's usual budget: the current-thread
    /// scheduler). Tests that need the work-stealing scheduler set more workers.
    pub fn builder() -> WeirProxyBuilder {
        WeirProxyBuilder {
            registry: EMPTY_REGISTRY.to_owned(),
            env: vec![
                (
                    "WEIR_PROXY_LOG".into(),
                    Some("info,weir_proxy=debug".into()),
                ),
                ("WEIR_PROXY_WORKERS".into(), Some("1".into())),
            ],
            gateway: false,
            binary: None,
            admin_dual_stack: false,
        }
    }
}

impl WeirProxyBuilder {
    /// The registry file's initial content (YAML, see DESIGN.md).
    pub fn registry_yaml(mut self, yaml: impl Into<String>) -> Self {
        self.registry = yaml.into();
        self
    }

    /// Sets an environment variable for the proxy (overrides the listen addresses too).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), Some(value.into().into())));
        self
    }

    /// Two workers, for a test that asserts a wall-clock bound: the heavy tests running beside it
    /// (1 GiB bodies, floods) must not starve its proxy, and under CPU contention a one-thread
    /// process gets one thread's share.
    pub fn timed(self) -> Self {
        self.env("WEIR_PROXY_WORKERS", "2")
    }

    /// Sets an environment variable to a value that need not be UTF-8 (for tests of how the
    /// proxy refuses one).
    pub fn env_os(mut self, key: impl Into<String>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Leaves an environment variable unset (e.g. `WEIR_PROXY_REGISTRY`).
    pub fn env_remove(mut self, key: impl Into<String>) -> Self {
        self.env.push((key.into(), None));
        self
    }

    /// Also open the gateway listener on a free port.
    pub fn gateway(mut self, on: bool) -> Self {
        self.gateway = on;
        self
    }

    /// Open the admin listener on `[::]` (every address, IPv4 too, as in a pod) instead of
    /// loopback. [`WeirProxy::admin`] stays `127.0.0.1:<port>`, which the listener sees as
    /// `::ffff:127.0.0.1`.
    pub fn admin_dual_stack(mut self) -> Self {
        self.admin_dual_stack = true;
        self
    }

    /// Run this executable instead of the built `weir-proxy`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts the process without waiting for readiness (for tests of start-up failures).
    pub fn spawn(self) -> WeirProxy {
        let bin = self.binary.unwrap_or_else(proxy_bin);
        let dir = TempDir::new("proxy");
        let registry = dir.join("registry.yaml");
        std::fs::write(&registry, &self.registry).expect("write the registry file");
        let (outbound, inbound, admin) = (free_addr(), free_addr(), free_addr());
        let gateway = self.gateway.then(free_addr);
        let admin_listen = if self.admin_dual_stack {
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, admin.port()))
        } else {
            admin
        };

        let mut cmd = Command::new(&bin);
        // A developer's own WEIR_PROXY_* settings must not leak into the test.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("WEIR_PROXY_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("WEIR_PROXY_REGISTRY", &registry)
            .env("WEIR_PROXY_OUTBOUND_LISTEN", outbound.to_string())
            .env("WEIR_PROXY_INBOUND_LISTEN", inbound.to_string())
            .env("WEIR_PROXY_ADMIN_LISTEN", admin_listen.to_string())
            .env("RUST_BACKTRACE", "1")
            // Plain log lines, so tests can search them for `key=value`.
            .env("NO_COLOR", "1");
        if let Some(gw) = gateway {
            cmd.env("WEIR_PROXY_GATEWAY_LISTEN", gw.to_string());
        }
        for (key, value) in &self.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        let child = ChildProc::spawn("weir-proxy", cmd, &dir.join("proxy.log"));
        WeirProxy {
            outbound,
            inbound,
            admin,
            gateway,
            registry,
            child,
            dir,
        }
    }

    /// Starts the process and waits (up to [`READY_DEADLINE`]) for `GET /ready` = 200;
    /// panics with the proxy's log if it exits or never gets ready.
    pub async fn start(self) -> WeirProxy {
        let mut proxy = self.spawn();
        proxy.wait_ready(READY_DEADLINE).await;
        proxy
    }
}

impl WeirProxy {
    /// Polls `/ready` until 200; panics with the log if the process exits or time runs out.
    pub async fn wait_ready(&mut self, deadline: Duration) {
        let end = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_exit() {
                panic!(
                    "weir-proxy exited before ready ({status}); log:\n{}",
                    self.log()
                );
            }
            let last = match http_client::try_get(self.admin, "localhost", "/ready").await {
                Ok(r) if r.status == 200 => return,
                Ok(r) => format!("{} {}", r.status, r.body),
                Err(e) => e,
            };
            if Instant::now() >= end {
                panic!(
                    "weir-proxy not ready after {deadline:?} (last: {last}); log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The proxy's pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The registry file the proxy was started with (inside a temp dir this struct owns).
    pub fn registry_path(&self) -> &Path {
        &self.registry
    }

    /// Replaces the registry atomically (write a sibling, then rename), as editors and
    /// ConfigMap updates do.
    pub fn write_registry(&self, yaml: &str) {
        let tmp = self.dir.join("registry.yaml.tmp");
        std::fs::write(&tmp, yaml).expect("write the new registry");
        std::fs::rename(&tmp, &self.registry).expect("rename the new registry into place");
    }

    /// Rewrites the registry in place (truncate + write): a watcher may see a partial file.
    pub fn write_registry_in_place(&self, yaml: &str) {
        std::fs::write(&self.registry, yaml).expect("rewrite the registry");
    }

    /// The file the proxy's stdout and stderr go to.
    pub fn log_path(&self) -> &Path {
        self.child.log_path()
    }

    /// The proxy's log so far.
    pub fn log(&self) -> String {
        self.child.log()
    }

    /// Polls until the log contains `needle`; panics with the log on timeout.
    pub async fn wait_for_log(&self, needle: &str, deadline: Duration) {
        self.child.wait_for_log(needle, deadline).await
    }

    /// `GET` on the admin listener; panics if the connection fails.
    pub async fn admin_get(&self, path: &str) -> Reply {
        http_client::get(self.admin, "localhost", path).await
    }

    /// `POST` (empty body) on the admin listener; panics if the connection fails.
    pub async fn admin_post(&self, path: &str) -> Reply {
        let req = http_client::request(http::Method::POST, "localhost", path, "");
        http_client::send(self.admin, req).await
    }

    /// `GET /metrics`, asserting 200.
    pub async fn metrics_text(&self) -> String {
        let reply = self.admin_get("/metrics").await;
        assert_eq!(reply.status, 200, "GET /metrics: {}", reply.body);
        reply.body
    }

    /// Sends SIGTERM (graceful drain).
    pub fn sigterm(&self) {
        self.child.signal(libc::SIGTERM);
    }

    /// Sends any signal.
    pub fn signal(&self, signal: libc::c_int) {
        self.child.signal(signal);
    }

    /// `Some(status)` once the proxy has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_exit()
    }

    /// Waits for exit; panics with the log after `deadline`.
    pub async fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        self.child.wait_exit(deadline).await
    }

    /// Peak resident memory (`VmHWM`) in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.child.status_kib("VmHWM")
    }

    /// Current resident memory (`VmRSS`) in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.child.status_kib("VmRSS")
    }

    /// Open file descriptors.
    pub fn open_fds(&self) -> usize {
        self.child.open_fds()
    }

    /// OS threads.
    pub fn threads(&self) -> u64 {
        self.child.threads()
    }

    /// CPU time the proxy used so far (utime + stime).
    pub fn cpu_time(&self) -> Duration {
        self.child.cpu_time()
    }

    /// Sets the proxy's soft open-files limit; returns the one it had.
    pub fn set_open_files_limit(&self, soft: u64) -> u64 {
        self.child.set_open_files_limit(soft)
    }
}

/// The `weir-proxy` executable: `WEIR_PROXY_BIN`, else next to this test binary
/// (`target/<profile>/deps/e2e-*` → `target/<profile>/weir-proxy`); panics if it is not built.
pub fn proxy_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("WEIR_PROXY_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "WEIR_PROXY_BIN={} does not exist",
            bin.display()
        );
        return bin;
    }
    let exe = std::env::current_exe().expect("path of the running test binary");
    let profile_dir = exe
        .parent()
        .filter(|d| d.ends_with("deps"))
        .and_then(Path::parent)
        .or_else(|| exe.parent());
    let bin = profile_dir
        .map(|d| d.join("weir-proxy"))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "weir-proxy binary not found at {}: run `cargo build --workspace --bins` \
         (tests/run does) or set WEIR_PROXY_BIN",
        bin.display()
    );
    bin
}
