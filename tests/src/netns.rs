//! A network namespace joined to the host by a veth pair, for iptables and orig-dst tests.
//!
//! Names are unique per process and call (`wt<pid>n<k>`), so parallel tests never collide, and
//! each pair gets its own /30 in 198.18.0.0/15 (RFC 2544 benchmarking space: never routed, and
//! unlikely to clash with a host's real 10/8 or 172.16/12 networks). Needs root.

use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::skip::tool;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A namespace `name` with `lo` up and a veth pair: `host_if` (address [`NetNs::host_ip`]) in
/// the host namespace, `ns_if` (address [`NetNs::ns_ip`]) inside. Deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    host_if: String,
    ns_if: String,
    host_ip: Ipv4Addr,
    ns_ip: Ipv4Addr,
}

impl NetNs {
    /// Creates the namespace and the veth pair; panics with `ip`'s error on failure
    /// (guard with `require!(root, tool "ip")`).
    pub fn create() -> NetNs {
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Interface names are limited to 15 bytes: "wt" + pid (<= 7 digits) + "h"/"n" + k.
        let name = format!("wt{pid}n{k}");
        let host_if = format!("wt{pid}h{k}");
        let ns_if = format!("wt{pid}p{k}");
        // 2^14 /30 subnets in 198.18.0.0/15; pid and counter spread concurrent runs across them.
        let slot = (pid.wrapping_mul(64).wrapping_add(k)) % (1 << 14);
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + slot * 4;
        let ns = NetNs {
            name,
            host_if,
            ns_if,
            host_ip: Ipv4Addr::from(base + 1),
            ns_ip: Ipv4Addr::from(base + 2),
        };
        // Constructed first so that Drop cleans up whatever the steps below managed to create.
        ns.ip(&["netns", "add", &ns.name]);
        ns.ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns.ns_if,
        ]);
        ns.ip(&["link", "set", &ns.ns_if, "netns", &ns.name]);
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host_ip),
            "dev",
            &ns.host_if,
        ]);
        ns.ip(&["link", "set", &ns.host_if, "up"]);
        ns.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{}/30", ns.ns_ip),
            "dev",
            &ns.ns_if,
        ]);
        ns.exec(&["ip", "link", "set", &ns.ns_if, "up"]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name (for `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host end's address.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The namespace end's address.
    pub fn ns_ip(&self) -> Ipv4Addr {
        self.ns_ip
    }

    /// The host end's interface name.
    pub fn host_if(&self) -> &str {
        &self.host_if
    }

    /// The namespace end's interface name.
    pub fn ns_if(&self) -> &str {
        &self.ns_if
    }

    /// `ip netns exec <ns> argv...` as a command to configure and spawn (std or, via
    /// `tokio::process::Command::from`, async).
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new(tool("ip"));
        cmd.args(["netns", "exec", &self.name]).args(argv);
        cmd
    }

    /// `argv` inside the namespace as `uid` (gid = uid, no supplementary groups), via `setpriv`:
    /// the way the sidecar's own UID is exempted from iptables redirection.
    pub fn command_as(&self, uid: u32, argv: &[&str]) -> Command {
        let id = uid.to_string();
        let setpriv = tool("setpriv");
        let setpriv = setpriv.to_string_lossy();
        let mut full = vec![
            &*setpriv,
            "--reuid",
            &id,
            "--regid",
            &id,
            "--clear-groups",
            "--",
        ];
        full.extend_from_slice(argv);
        self.command(&full)
    }

    /// Runs `argv` inside the namespace as root and returns its stdout; panics on failure.
    pub fn exec(&self, argv: &[&str]) -> String {
        run(self.command(argv), argv)
    }

    /// Runs `argv` inside the namespace as `uid` and returns its stdout; panics on failure.
    pub fn exec_as(&self, uid: u32, argv: &[&str]) -> String {
        run(self.command_as(uid, argv), argv)
    }

    fn ip(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(tool("ip"));
        cmd.args(args);
        run(cmd, args)
    }
}

fn run(mut cmd: Command, argv: &[&str]) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    if !status.success() {
        panic!(
            "{argv:?} failed ({status}): {}",
            String::from_utf8_lossy(&stderr)
        );
    }
    String::from_utf8_lossy(&stdout).into_owned()
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veth end, which takes the host end with it;
        // the explicit link delete covers a failure between `link add` and `set netns`.
        let Some(ip) = crate::skip::tool_path("ip") else {
            return;
        };
        let _ = Command::new(&ip)
            .args(["netns", "del", &self.name])
            .output();
        let _ = Command::new(&ip)
            .args(["link", "del", &self.host_if])
            .output();
    }
}
