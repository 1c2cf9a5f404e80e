//! The Python WebSocket tools in `tests/ws/`: an echo server on the `websockets` library (an
//! independent WebSocket implementation that checks the HTTP/1.1 handshake) and a client that
//! speaks WebSocket over HTTP/2 (RFC 8441) on the `h2` library.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::grpc::python;
use crate::process::ChildProc;
use crate::tmp::TempDir;

const START_DEADLINE: Duration = Duration::from_secs(30);

/// `tests/ws/`.
fn ws_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ws")
}

/// A running `server.py` on a loopback port; killed on drop. Guard with `require!(python_ws)`.
#[derive(Debug)]
pub struct WsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    child: ChildProc,
    _dir: TempDir,
}

impl WsServer {
    /// Starts the echo server and waits until it prints `READY <port>`.
    pub async fn start() -> WsServer {
        let dir = TempDir::new("ws");
        let mut cmd = Command::new(python());
        cmd.arg(ws_dir().join("server.py"))
            .env("PYTHONUNBUFFERED", "1");
        let mut child = ChildProc::spawn("ws server.py", cmd, &dir.join("server.log"));
        let port = crate::wait::try_poll_until(START_DEADLINE, || async {
            child
                .log()
                .lines()
                .find_map(|l| l.strip_prefix("READY ")?.trim().parse::<u16>().ok())
        })
        .await;
        let Some(port) = port.filter(|_| child.try_exit().is_none()) else {
            panic!("ws server.py did not start; output:\n{}", child.log());
        };
        WsServer {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            child,
            _dir: dir,
        }
    }

    /// The server's output so far.
    pub fn log(&self) -> String {
        self.child.log()
    }
}

/// One WebSocket-over-HTTP/2 session of `h2_client.py` against `target`: an extended CONNECT
/// to `authority` + `path`, then each of `send` as a text frame (a reply read to each), a close
/// and the stream's end. `extra` adds arguments (`--protocol x`, `--subprotocol chat`). Returns
/// its JSON: `{enable_connect_protocol, status, headers, replies, close, ended, error, body}`.
pub async fn h2_session(
    target: SocketAddr,
    authority: &str,
    path: &str,
    send: &[&str],
    extra: &[&str],
) -> serde_json::Value {
    let mut cmd = Command::new(python());
    cmd.arg(ws_dir().join("h2_client.py"))
        .args(["--target", &target.to_string()])
        .args(["--authority", authority, "--path", path])
        .args(extra)
        .kill_on_drop(true);
    for m in send {
        cmd.args(["--send", m]);
    }
    let out = crate::wait::within(Duration::from_secs(30), "h2_client.py", cmd.output())
        .await
        .expect("run h2_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "h2_client.py printed no JSON ({}):\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The value of response header `name` in a session's JSON.
pub fn header<'a>(session: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    session["headers"]
        .as_array()?
        .iter()
        .find(|kv| kv[0] == name)
        .and_then(|kv| kv[1].as_str())
}
