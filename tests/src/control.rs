//! Run the real `weir-control` binary on free loopback ports with a registry file the test owns,
//! and run `weirctl` against it.
//!
//! The binaries are found next to the test executable (`target/<profile>/`, built by `cargo build
//! --workspace --bins`), or at `WEIR_CONTROL_BIN` / `WEIRCTL_BIN`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;
use tokio::time::Instant;

use crate::http_client::{self, Reply};
use crate::ports::free_addr;
use crate::process::ChildProc;
use crate::tmp::TempDir;

/// How long [`WeirControl::start`] waits for `/ready`.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);

/// A running `weir-control`; SIGKILLed on drop.
#[derive(Debug)]
pub struct WeirControl {
    /// gRPC listener (proxies and weirctl).
    pub grpc: SocketAddr,
    /// Admin listener (`/metrics`, `/ready`, `/live`).
    pub admin: SocketAddr,
    registry: PathBuf,
    child: Option<ChildProc>,
    // Last field: dropped after the child is killed, so the log outlives it.
    dir: TempDir,
}

fn bin(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return p.into();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/e2e-HASH → target/<profile>/<name>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    profile_dir.join(name)
}

impl WeirControl {
    /// Starts weir-control on `registry_yaml` (loopback listeners) and waits for `/ready`.
    pub async fn start(registry_yaml: &str) -> WeirControl {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), registry_yaml).await
    }

    /// As [`WeirControl::start`], with the gRPC listener on `ip` (e.g. a namespace's host-side
    /// veth address, so a proxy inside the namespace can reach it).
    pub async fn start_on(ip: std::net::IpAddr, registry_yaml: &str) -> WeirControl {
        let dir = TempDir::new("control");
        let registry = dir.join("registry.yaml");
        std::fs::write(&registry, registry_yaml).expect("write the registry file");
        let mut cp = WeirControl {
            grpc: SocketAddr::new(ip, crate::ports::free_port()),
            admin: free_addr(),
            registry,
            child: None,
            dir,
        };
        cp.restart().await;
        cp
    }

    /// (Re)starts the process on the same ports and registry file; waits for `/ready`.
    pub async fn restart(&mut self) {
        self.kill();
        let mut cmd = Command::new(bin("WEIR_CONTROL_BIN", "weir-control"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("WEIR_") {
                cmd.env_remove(key);
            }
        }
        cmd.arg("--registry")
            .arg(&self.registry)
            .arg("--grpc-listen")
            .arg(self.grpc.to_string())
            .arg("--admin-listen")
            .arg(self.admin.to_string())
            .env("WEIR_CONTROL_LOG", "info,weir_control=debug")
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1");
        let child = ChildProc::spawn("weir-control", cmd, &self.dir.join("control.log"));
        self.child = Some(child);
        self.wait_ready(READY_DEADLINE).await;
    }

    /// SIGKILLs the process (a crash: no goodbye to the proxies).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.signal(libc::SIGKILL);
            let _ = c.try_exit();
        }
    }

    async fn wait_ready(&mut self, deadline: Duration) {
        let end = Instant::now() + deadline;
        loop {
            let child = self.child.as_mut().expect("started");
            if let Some(status) = child.try_exit() {
                panic!("weir-control exited ({status}); log:\n{}", child.log());
            }
            if let Ok(r) = http_client::try_get(self.admin, "localhost", "/ready").await {
                if r.status == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < end,
                "weir-control not ready after {deadline:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The registry file it serves.
    pub fn registry_path(&self) -> &Path {
        &self.registry
    }

    /// Replaces the registry atomically (write a sibling, then rename).
    pub fn write_registry(&self, yaml: &str) {
        let tmp = self.dir.join("registry.yaml.tmp");
        std::fs::write(&tmp, yaml).expect("write the new registry");
        std::fs::rename(&tmp, &self.registry).expect("rename the new registry into place");
    }

    /// The registry file's current text.
    pub fn read_registry(&self) -> String {
        std::fs::read_to_string(&self.registry).expect("read the registry")
    }

    /// The process log so far.
    pub fn log(&self) -> String {
        self.child.as_ref().map(ChildProc::log).unwrap_or_default()
    }

    /// Polls until the log contains `needle`; panics with the log on timeout.
    pub async fn wait_for_log(&self, needle: &str, deadline: Duration) {
        self.child
            .as_ref()
            .expect("running")
            .wait_for_log(needle, deadline)
            .await
    }

    /// `GET` on the admin listener.
    pub async fn admin_get(&self, path: &str) -> Reply {
        http_client::get(self.admin, "localhost", path).await
    }

    /// Runs `weirctl ARGS` against this control plane.
    pub async fn weirctl(&self, args: &[&str]) -> Weirctl {
        weirctl(self.grpc, args, None).await
    }

    /// Runs `weirctl ARGS` with `stdin` piped in.
    pub async fn weirctl_stdin(&self, args: &[&str], stdin: &str) -> Weirctl {
        weirctl(self.grpc, args, Some(stdin)).await
    }
}

impl Drop for WeirControl {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What one `weirctl` run printed and how it exited.
#[derive(Debug)]
pub struct Weirctl {
    /// Exit code (-1 if killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// The `weirctl` binary the tests run.
pub fn weirctl_bin() -> PathBuf {
    bin("WEIRCTL_BIN", "weirctl")
}

/// Runs the `weirctl` binary with `WEIR_CONTROL_ADDR=addr`.
pub async fn weirctl(addr: SocketAddr, args: &[&str], stdin: Option<&str>) -> Weirctl {
    use tokio::io::AsyncWriteExt;
    let mut cmd = Command::new(weirctl_bin());
    cmd.args(args)
        .env("WEIR_CONTROL_ADDR", addr.to_string())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn weirctl");
    let mut input = child.stdin.take().expect("piped stdin");
    if let Some(text) = stdin {
        input
            .write_all(text.as_bytes())
            .await
            .expect("write weirctl's stdin");
    }
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("weirctl finished within 30 s")
        .expect("weirctl ran");
    Weirctl {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
