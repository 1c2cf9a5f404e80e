//! Binds listeners with socket2 (reuseaddr, nodelay on accepted sockets, keepalive), and backs
//! off an accept that fails.

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

/// How long a listener waits after a failed accept before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// At most one warning per listener this often while accepts keep failing.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(5);

/// A listener's answer to failed accepts (EMFILE and friends, which leave the connection in the
/// backlog): wait [`ACCEPT_RETRY`] rather than spin, count each failure in
/// `weir_accept_failures_total{listener}`, and warn at most once per [`ACCEPT_WARN_EVERY`] with
/// the number left unsaid since, so running out of descriptors does not also flood the log.
pub struct AcceptBackoff {
    listener: &'static str,
    warned: Option<tokio::time::Instant>,
    unsaid: u64,
}

impl AcceptBackoff {
    /// For the listener named `listener` (the metric's label).
    pub fn new(listener: &'static str) -> Self {
        Self {
            listener,
            warned: None,
            unsaid: 0,
        }
    }

    /// Records the failed accept `e`, then waits before the next try.
    pub async fn failed(&mut self, e: &io::Error) {
        metrics::counter!(crate::metrics::ACCEPT_FAILURES, "listener" => self.listener)
            .increment(1);
        let now = tokio::time::Instant::now();
        if self.warned.is_none_or(|at| now - at >= ACCEPT_WARN_EVERY) {
            tracing::warn!(
                listener = self.listener,
                error = %e,
                failures_since_last_warning = self.unsaid,
                "accept failed; retrying every 10 ms"
            );
            self.warned = Some(now);
            self.unsaid = 0;
        } else {
            self.unsaid += 1;
        }
        tokio::time::sleep(ACCEPT_RETRY).await;
    }
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
