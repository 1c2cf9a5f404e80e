//! The Python gRPC echo server and client in `tests/grpc/` (real grpcio: an independent HTTP/2
//! and gRPC implementation to test the proxy against).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::ports::free_addr;
use crate::process::ChildProc;
use crate::tmp::TempDir;

/// How long the server may take to generate its stubs and bind.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The Python interpreter: `WEIR_TEST_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("WEIR_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// `tests/grpc/` (holds echo.proto, server.py, client.py).
pub fn grpc_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("grpc")
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
    pub async fn start(name: &str) -> GrpcServer {
        let dir = TempDir::new("grpc");
        let addr = free_addr();
        let mut cmd = Command::new(python());
        cmd.arg(grpc_dir().join("server.py"))
            .args(["--port", &addr.port().to_string(), "--name", name])
            .env("PYTHONUNBUFFERED", "1")
            .env("WEIR_GRPC_STUBS_DIR", dir.join("stubs"));
        let mut child = ChildProc::spawn("grpc server.py", cmd, &dir.join("server.log"));
        let ready = crate::wait::try_poll_until(START_DEADLINE, || async {
            child.log().contains("READY").then_some(())
        })
        .await;
        if ready.is_none() || child.try_exit().is_some() {
            panic!("grpc server.py did not start; output:\n{}", child.log());
        }
        GrpcServer {
            addr,
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
    let mut cmd = Command::new(python());
    cmd.arg(grpc_dir().join("client.py"))
        .args(["--target", &target.to_string()]);
    if let Some(a) = &opts.authority {
        cmd.args(["--authority", a]);
    }
    if let Some(n) = opts.count {
        cmd.args(["--count", &n.to_string()]);
    }
    if let Some(n) = opts.payload_bytes {
        cmd.args(["--payload-bytes", &n.to_string()]);
    }
    cmd.kill_on_drop(true);
    let run = crate::wait::within(Duration::from_secs(60), "grpc client.py", cmd.output()).await;
    let out = run.map_err(|e| format!("spawn client.py: {e}"))?;
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
