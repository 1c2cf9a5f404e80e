//! Free loopback ports for processes that need an address before they start.
//!
//! In-process servers bind `127.0.0.1:0` themselves; only child processes (proxy, nginx, Python)
//! need a port chosen for them, which leaves a small window where another socket could take it.
//! Never handing out the same port twice within this test binary removes most of that window.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback TCP port that was free a moment ago and that no other caller in this process got.
pub fn free_port() -> u16 {
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("local_addr of a bound socket")
            .port();
        let mut guard = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if guard.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
    panic!("no fresh loopback port after 64 tries");
}

/// `127.0.0.1:<free_port()>`.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()))
}
