//! A pod in a network namespace with weir-proxy as its sidecar, wired the way `weir-proxy init`
//! would: the proxy runs inside as root (uid [`PROXY_UID`]) on the default ports, and iptables
//! (nat OUTPUT + PREROUTING) redirects the app's TCP to it. The app runs as [`APP_UID`].
//!
//! ```text
//!  host (test process)                 namespace "pod"
//!  host_ip ───────────── veth ──────── ns_ip, default route via host_ip
//!                                      OUTPUT:     uid 0 → RETURN, -o lo → RETURN, else → :4140
//!                                      PREROUTING: dport 4191 → RETURN, else → :4143
//! ```
//! Servers the app dials (endpoints, unknown destinations) listen on the host at `host_ip`;
//! the local app the inbound path forwards to listens inside via [`listen_in`]. Needs root.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::netns::NetNs;
use crate::proxy::{proxy_bin, WeirProxy, WeirProxyBuilder, READY_DEADLINE};
use crate::skip::tool;
use crate::tmp::TempDir;
use crate::wait::within;

/// The proxy's uid: its own connections are exempt from redirection.
pub const PROXY_UID: u32 = 0;
/// The application's uid: its connections are redirected.
pub const APP_UID: u32 = 1234;
/// The outbound listener inside the namespace (`127.0.0.1`).
pub const OUTBOUND_PORT: u16 = 4140;
/// The inbound listener inside the namespace (`0.0.0.0`).
pub const INBOUND_PORT: u16 = 4143;
/// The admin listener inside the namespace (`0.0.0.0`), reachable from the host at `ns_ip`.
pub const ADMIN_PORT: u16 = 4191;

/// The `iptables -t nat` commands [`Sidecar::start`] runs inside the namespace, in order.
pub fn redirect_rules() -> Vec<Vec<String>> {
    let (uid, out, inb, admin) = (
        PROXY_UID.to_string(),
        OUTBOUND_PORT.to_string(),
        INBOUND_PORT.to_string(),
        ADMIN_PORT.to_string(),
    );
    [
        &["-N", "WEIR_OUTPUT"][..],
        &["-A", "OUTPUT", "-p", "tcp", "-j", "WEIR_OUTPUT"],
        // The proxy's own upstream connections: redirecting them would loop.
        &[
            "-A",
            "WEIR_OUTPUT",
            "-m",
            "owner",
            "--uid-owner",
            &uid,
            "-j",
            "RETURN",
        ],
        // The app talking to itself (loopback, its own pod IP, the admin port).
        &["-A", "WEIR_OUTPUT", "-o", "lo", "-j", "RETURN"],
        &[
            "-A",
            "WEIR_OUTPUT",
            "-p",
            "tcp",
            "-j",
            "REDIRECT",
            "--to-ports",
            &out,
        ],
        &["-N", "WEIR_INBOUND"],
        &["-A", "PREROUTING", "-p", "tcp", "-j", "WEIR_INBOUND"],
        // Metrics scrapes reach the admin listener directly.
        &[
            "-A",
            "WEIR_INBOUND",
            "-p",
            "tcp",
            "--dport",
            &admin,
            "-j",
            "RETURN",
        ],
        &[
            "-A",
            "WEIR_INBOUND",
            "-p",
            "tcp",
            "-j",
            "REDIRECT",
            "--to-ports",
            &inb,
        ],
    ]
    .iter()
    .map(|r| r.iter().map(|s| s.to_string()).collect())
    .collect()
}

/// A namespace with redirection rules and a ready proxy inside; everything removed on drop.
#[derive(Debug)]
pub struct Sidecar {
    /// The proxy. `outbound` is `127.0.0.1:4140` (inside the namespace only); `inbound` and
    /// `admin` are at the namespace's veth address, so the host reaches them.
    pub proxy: WeirProxy,
    /// The namespace (declared after the proxy: the process dies before its namespace).
    pub ns: NetNs,
    _wrapper: TempDir,
}

impl Sidecar {
    /// Adds a default route via the host (so virtual IPs are routable and can be redirected),
    /// installs [`redirect_rules`], and starts `proxy` inside `ns` on the default ports; waits for
    /// `/ready`. Guard with `require!(root, tool "ip", tool "iptables", tool "setpriv")`.
    pub async fn start(ns: NetNs, proxy: WeirProxyBuilder) -> Sidecar {
        Self::start_with(ns, proxy, true).await
    }

    /// [`start`](Self::start) without the redirect rules (`redirect: false`): a pod whose
    /// iptables setup is missing, where nothing is tracked and so no connection has an original
    /// destination.
    pub async fn start_with(ns: NetNs, proxy: WeirProxyBuilder, redirect: bool) -> Sidecar {
        let host_ip = ns.host_ip().to_string();
        ns.exec(&["ip", "route", "add", "default", "via", &host_ip]);
        let iptables = tool("iptables");
        let iptables = iptables.to_string_lossy();
        for rule in redirect_rules().into_iter().filter(|_| redirect) {
            let mut argv: Vec<&str> = vec![&iptables, "-w", "-t", "nat"];
            argv.extend(rule.iter().map(String::as_str));
            ns.exec(&argv);
        }

        // `ip netns exec` execs the proxy in place, so the helper's pid is the proxy's.
        let dir = TempDir::new("sidecar");
        let wrapper = dir.join("weir-proxy-in-netns");
        let script = format!(
            "#!/bin/sh\nexec '{}' netns exec '{}' '{}'\n",
            tool("ip").display(),
            ns.name(),
            proxy_bin().display()
        );
        std::fs::write(&wrapper, script).expect("write the netns wrapper");
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod the netns wrapper");
        let mut proxy = proxy
            .binary(&wrapper)
            .env(
                "WEIR_PROXY_OUTBOUND_LISTEN",
                format!("127.0.0.1:{OUTBOUND_PORT}"),
            )
            .env(
                "WEIR_PROXY_INBOUND_LISTEN",
                format!("0.0.0.0:{INBOUND_PORT}"),
            )
            .env("WEIR_PROXY_ADMIN_LISTEN", format!("0.0.0.0:{ADMIN_PORT}"))
            .spawn();
        proxy.outbound = SocketAddr::from((Ipv4Addr::LOCALHOST, OUTBOUND_PORT));
        proxy.inbound = SocketAddr::from((ns.ns_ip(), INBOUND_PORT));
        proxy.admin = SocketAddr::from((ns.ns_ip(), ADMIN_PORT));
        proxy.wait_ready(READY_DEADLINE).await;
        Sidecar {
            proxy,
            ns,
            _wrapper: dir,
        }
    }

    /// Runs `argv` inside the namespace as the app ([`APP_UID`]) and returns its output; panics
    /// if it cannot be spawned or runs longer than `deadline`.
    pub async fn run_as_app(&self, argv: &[&str], deadline: Duration) -> Output {
        self.run_as(APP_UID, argv, deadline).await
    }

    /// Runs `argv` inside the namespace as `uid`; see [`Sidecar::run_as_app`].
    pub async fn run_as(&self, uid: u32, argv: &[&str], deadline: Duration) -> Output {
        let mut cmd = tokio::process::Command::from(self.ns.command_as(uid, argv));
        cmd.kill_on_drop(true).stdin(std::process::Stdio::null());
        let out = within(deadline, &format!("{argv:?} as uid {uid}"), cmd.output()).await;
        out.unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"))
    }
}

/// Binds a TCP listener inside `ns` from this process: a socket belongs to the namespace of the
/// thread that created it, so a short-lived thread joins the namespace and binds.
pub fn listen_in(ns: &NetNs, addr: SocketAddr) -> TcpListener {
    let path = format!("/run/netns/{}", ns.name());
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    let listener = std::thread::spawn(move || {
        // SAFETY: setns(2) only switches this thread's network namespace; the fd is open for the
        // duration of the call, and the thread ends right after binding.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .expect("the netns bind thread does not panic")
    .unwrap_or_else(|e: std::io::Error| panic!("bind {addr} in {}: {e}", ns.name()));
    TcpListener::from_std(listener).expect("register the listener with tokio")
}

/// An HTTP/1 server that says who it is and what it saw: every response is `200`, header
/// `x-backend: <name>`, body one JSON line `{backend, host, path, peer, local}`; a path
/// starting `/delay/<ms>/` is answered after that many milliseconds.
pub struct WhoAmI {
    /// Where it listens.
    pub addr: SocketAddr,
    requests: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl WhoAmI {
    /// Binds `addr` (in this process's namespace) and serves.
    pub async fn bind(name: &str, addr: SocketAddr) -> WhoAmI {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        WhoAmI::serve(name, listener)
    }

    /// Serves on an already bound listener (e.g. from [`listen_in`]).
    pub fn serve(name: &str, listener: TcpListener) -> WhoAmI {
        let addr = listener.local_addr().expect("local_addr of a bound socket");
        let requests = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(who_am_i_loop(listener, name.to_owned(), requests.clone()));
        WhoAmI {
            addr,
            requests,
            task,
        }
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for WhoAmI {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn who_am_i_loop(listener: TcpListener, name: String, requests: Arc<AtomicU64>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((io, peer)) = accepted else { continue };
                let Ok(local) = io.local_addr() else { continue };
                let (name, requests) = (name.clone(), requests.clone());
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        requests.fetch_add(1, Ordering::SeqCst);
                        let host = req
                            .headers()
                            .get(http::header::HOST)
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or_default();
                        let body = serde_json::json!({
                            "backend": name,
                            "host": host,
                            "path": req.uri().path(),
                            "peer": peer.to_string(),
                            "local": local.to_string(),
                        });
                        let resp = Response::builder()
                            .header("x-backend", name.as_str())
                            .header(http::header::CONTENT_TYPE, "application/json")
                            .body(Full::new(Bytes::from(format!("{body}\n"))));
                        let delay = delay_of(req.uri().path());
                        async move {
                            tokio::time::sleep(delay).await;
                            resp
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(io), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// `/delay/<ms>/...` → that long; anything else → zero.
fn delay_of(path: &str) -> Duration {
    path.strip_prefix("/delay/")
        .and_then(|rest| rest.split('/').next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis)
}

/// Parses the JSON lines of one or more [`WhoAmI`] bodies (as `curl URL URL ...` prints them).
pub fn who_am_i_lines(body: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}
