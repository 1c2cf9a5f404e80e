//! The Python gRPC echo server and client in `tests/grpc/` (real grpcio: an independent HTTP/2
//! and gRPC implementation to test the proxy against).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::netns::NetNs;
use crate::process::ChildProc;
use crate::tmp::TempDir;

/// How long the server may take to generate its stubs and bind.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The Python interpreter: `WEIR_TEST_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("WEIR_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// The interpreter for Python run as the app (uid 1234) inside a network namespace: the system
/// one, since a per-user interpreter (pyenv under /root) is unreadable to that uid.
pub const APP_PYTHON: &str = "/usr/bin/python3";

/// `tests/grpc/` (holds echo.proto, server.py, client.py).
pub fn grpc_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("grpc")
}

/// The port in the server's `READY <port>` line, once printed.
fn ready_port(log: &str) -> Option<u16> {
    log.lines()
        .find_map(|l| l.strip_prefix("READY ")?.trim().parse().ok())
}

/// A running `server.py`; killed on drop. Guard with `require!(python_grpc)`.
#[derive(Debug)]
pub struct GrpcServer {
    /// Where it listens.
    pub addr: SocketAddr,
    child: ChildProc,
    _dir: TempDir,
}

impl GrpcServer {
    /// Starts the echo server as `name` (returned in every response's `server` field) and waits
    /// until it prints `READY`; panics with its output on failure.
    /// It listens on a loopback port it picks itself.
    pub async fn start(name: &str) -> GrpcServer {
        GrpcServer::start_at(name, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts the echo server (with [`python()`]) listening at `addr`; port 0 picks a free one.
    pub async fn start_at(name: &str, addr: SocketAddr) -> GrpcServer {
        GrpcServer::launch(name, addr, &python(), None, |argv| {
            let mut cmd = std::process::Command::new(argv[0]);
            cmd.args(&argv[1..]);
            cmd
        })
        .await
    }

    /// Starts the echo server inside `ns` as `uid` with [`APP_PYTHON`], listening at `addr`
    /// (port 0 picks a free one): the local application of a pod. Guard with
    /// `require!(root, tool "ip", tool "setpriv", app_python_grpc)`.
    pub async fn start_in(ns: &NetNs, uid: u32, name: &str, addr: SocketAddr) -> GrpcServer {
        GrpcServer::launch(name, addr, APP_PYTHON, Some(uid), |argv| {
            ns.command_as(uid, argv)
        })
        .await
    }

    /// Spawns `server.py` through `command` (which gets the argv, interpreter first, and may wrap
    /// it) and waits for `READY <port>`. The stubs directory belongs to `owner` when given, so a
    /// server running as that uid can generate its stubs there.
    async fn launch(
        name: &str,
        addr: SocketAddr,
        python: &str,
        owner: Option<u32>,
        command: impl FnOnce(&[&str]) -> std::process::Command,
    ) -> GrpcServer {
        let dir = TempDir::new("grpc");
        let stubs = dir.join("stubs");
        if let Some(uid) = owner {
            std::fs::create_dir(&stubs).expect("create the stubs dir");
            std::os::unix::fs::chown(&stubs, Some(uid), Some(uid)).expect("chown the stubs dir");
        }
        let script = grpc_dir().join("server.py");
        let script = script.to_string_lossy();
        let (host, port) = (addr.ip().to_string(), addr.port().to_string());
        let argv = [
            python, &script, "--host", &host, "--port", &port, "--name", name,
        ];
        let mut cmd = Command::from(command(&argv));
        cmd.env("PYTHONUNBUFFERED", "1")
            .env("WEIR_GRPC_STUBS_DIR", &stubs);
        let mut child = ChildProc::spawn("grpc server.py", cmd, &dir.join("server.log"));
        let port =
            crate::wait::try_poll_until(START_DEADLINE, || async { ready_port(&child.log()) })
                .await;
        let Some(port) = port.filter(|_| child.try_exit().is_none()) else {
            panic!("grpc server.py did not start; output:\n{}", child.log());
        };
        GrpcServer {
            addr: SocketAddr::new(addr.ip(), port),
            child,
            _dir: dir,
        }
    }

    /// The server's output so far.
    pub fn log(&self) -> String {
        self.child.log()
    }
}

/// Options for one `client.py` run.
#[derive(Debug, Clone, Default)]
pub struct ClientOpts {
    /// `:authority` to send (e.g. a service's host name when going through the proxy).
    pub authority: Option<String>,
    /// Messages per streaming call (default 5).
    pub count: Option<u32>,
    /// Size of the unary payload, to push large messages through.
    pub payload_bytes: Option<usize>,
}

/// Runs `client.py` against `target` with default options; panics unless every check passed.
/// Returns its JSON: `{ok, unary, server_stream, client_stream, bidi, trailers, error_status,
/// server, authority, failures}`.
pub async fn run_client(target: SocketAddr) -> serde_json::Value {
    match try_run_client(target, &ClientOpts::default()).await {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// Runs `client.py`; `Ok(json)` when every check passed, `Err(stdout + stderr)` otherwise
/// (the JSON, when it printed one, lists the failed checks under `failures`).
pub async fn try_run_client(
    target: SocketAddr,
    opts: &ClientOpts,
) -> Result<serde_json::Value, String> {
    let argv = client_argv(&python(), target, opts);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd.kill_on_drop(true);
    let run = crate::wait::within(Duration::from_secs(60), "grpc client.py", cmd.output()).await;
    let out = run.map_err(|e| format!("spawn client.py: {e}"))?;
    client_result(target, &out)
}

/// The argv (interpreter first) of one `client.py` run with `python` against `target`: to run it
/// some other way, e.g. inside a network namespace as the app; read its output with
/// [`client_result`].
pub fn client_argv(python: &str, target: SocketAddr, opts: &ClientOpts) -> Vec<String> {
    let mut argv = vec![
        python.to_owned(),
        grpc_dir().join("client.py").to_string_lossy().into_owned(),
        "--target".to_owned(),
        target.to_string(),
    ];
    if let Some(a) = &opts.authority {
        argv.extend(["--authority".to_owned(), a.clone()]);
    }
    if let Some(n) = opts.count {
        argv.extend(["--count".to_owned(), n.to_string()]);
    }
    if let Some(n) = opts.payload_bytes {
        argv.extend(["--payload-bytes".to_owned(), n.to_string()]);
    }
    argv
}

/// A finished `client.py` run: `Ok(json)` when every check passed, `Err(stdout + stderr)`
/// otherwise; see [`try_run_client`].
pub fn client_result(
    target: SocketAddr,
    out: &std::process::Output,
) -> Result<serde_json::Value, String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    match json {
        Some(v) if out.status.success() => Ok(v),
        _ => Err(format!(
            "grpc client.py against {target} failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}
