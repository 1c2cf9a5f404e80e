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

/// A warning that is due at most once per [`ACCEPT_WARN_EVERY`], carrying how many times it
/// was left unsaid since the last, so a stream of the same failure does not flood the log.
#[derive(Default)]
pub struct Throttled {
    warned: Option<tokio::time::Instant>,
    unsaid: u64,
}

impl Throttled {
    /// Records one occurrence; `Some(unsaid since the last warning)` when this one is to be
    /// said.
    pub fn due(&mut self) -> Option<u64> {
        let now = tokio::time::Instant::now();
        if self.warned.is_none_or(|at| now - at >= ACCEPT_WARN_EVERY) {
            self.warned = Some(now);
            Some(std::mem::take(&mut self.unsaid))
        } else {
            self.unsaid += 1;
            None
        }
    }
}

/// A listener's answer to failed accepts (EMFILE and friends, which leave the connection in the
/// backlog): wait [`ACCEPT_RETRY`] rather than spin, count each failure in
/// `weir_accept_failures_total{listener}`, and warn at most once per [`ACCEPT_WARN_EVERY`] with
/// the number left unsaid since, so running out of descriptors does not also flood the log.
pub struct AcceptBackoff {
    listener: &'static str,
    warning: Throttled,
}

impl AcceptBackoff {
    /// For the listener named `listener` (the metric's label).
    pub fn new(listener: &'static str) -> Self {
        Self {
            listener,
            warning: Throttled::default(),
        }
    }

    /// Records the failed accept `e`, then waits before the next try.
    pub async fn failed(&mut self, e: &io::Error) {
        metrics::counter!(crate::metrics::ACCEPT_FAILURES, "listener" => self.listener)
            .increment(1);
        if let Some(unsaid) = self.warning.due() {
            tracing::warn!(
                listener = self.listener,
                error = %e,
                failures_since_last_warning = unsaid,
                "accept failed; retrying every 10 ms"
            );
        }
        tokio::time::sleep(ACCEPT_RETRY).await;
    }
}

/// Why a transparent listener closed a connection it accepted, before reading from it.
#[derive(Clone, Copy)]
pub enum Refusal {
    /// `SO_ORIGINAL_DST` had no answer: the connection was not redirected by the pod's
    /// iptables rules (a client dialled the proxy's port itself, or the rules are missing).
    NoOriginalDst,
    /// The original destination is one of the proxy's own listeners.
    Loop,
}

/// A transparent listener's refusals: each counted in
/// `weir_connections_refused_total{listener,reason}`, and warned of at most once per
/// [`ACCEPT_WARN_EVERY`] per reason (a misconfigured pod refuses every connection).
pub struct Refusals {
    listener: &'static str,
    warnings: [Throttled; 2],
}

impl Refusals {
    /// For the listener named `listener` (the metric's label).
    pub fn new(listener: &'static str) -> Self {
        Self {
            listener,
            warnings: Default::default(),
        }
    }

    /// Records that the connection from `client` was closed for `why` (`detail`: the OS's
    /// account, when there is one).
    pub fn refused(&mut self, why: Refusal, client: SocketAddr, detail: Option<&io::Error>) {
        let (reason, i, message) = match why {
            Refusal::NoOriginalDst => (
                "no-original-destination",
                0,
                "connection without an original destination (not redirected by iptables?); closed",
            ),
            Refusal::Loop => ("loop", 1, "connection aimed at the proxy itself; refused"),
        };
        metrics::counter!(crate::metrics::CONNECTIONS_REFUSED, "listener" => self.listener, "reason" => reason)
            .increment(1);
        if let Some(unsaid) = self.warnings[i].due() {
            tracing::warn!(
                listener = self.listener,
                client = %client,
                error = detail.map(tracing::field::display),
                refused_since_last_warning = unsaid,
                "{message}"
            );
        }
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
