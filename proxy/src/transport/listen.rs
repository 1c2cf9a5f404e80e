//! Binds listeners with socket2 (reuseaddr, nodelay on accepted sockets, keepalive).

use std::{io, net::SocketAddr, time::Duration};

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpStream};

/// Binds a non-blocking listener with a deep backlog; must be called inside a runtime.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// Options for an accepted client socket: no Nagle delay. (No TCP keep-alive probes: idle
/// clients are bounded by the idle timeout, and three setsockopt calls per connection showed in
/// the per-connection cost.)
pub fn tune_accepted(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
}

/// Options for an upstream socket, which the pool keeps for a long time: no Nagle delay, and
/// keep-alive probes so a silently dead peer is noticed.
pub fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    keep_probing(stream);
}

/// TCP keep-alive probes after 60 s of silence, every 10 s, so a peer that vanished without a
/// FIN or RST is noticed (the kernel gives up after its probe count, 9 by default).
pub fn keep_probing(stream: &TcpStream) {
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10));
    let _ = SockRef::from(stream).set_tcp_keepalive(&keepalive);
}

/// Connects to an upstream with a deadline and tunes the socket.
pub async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    tune(&stream);
    Ok(stream)
}
