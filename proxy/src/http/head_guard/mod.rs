//! Refuses HTTP/1 requests with ambiguous framing before hyper's lenient parser resolves them, on
//! every request of a keep-alive or pipelined connection.
//!
//! `HeadGuard` sits between the downstream socket and hyper. It holds each request head back
//! until the whole head has arrived and passed `head::validate`, then lets the body through while
//! `body::Body` counts it, so it always knows where the next head starts. A refused head never
//! reaches hyper: in its place hyper reads a request line it answers with 400 (431 for size), then
//! end-of-stream, so hyper writes that answer after any responses still owed and closes.

pub(crate) mod body;
pub(crate) mod head;
mod switch_tap;
#[cfg(test)]
mod tests;

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use body::{Body, Chunked};
pub(crate) use head::HeadScan;
pub use head::Reject;
use head::{Framing, Verdict, MAX_HEADERS};
pub use switch_tap::SwitchTap;

/// Counter of refused requests, by `reason` (`Reject::as_str`).
pub const REJECTED_HEADS: &str = "weir_http1_rejected_heads_total";

/// hyper answers 400 to a method that is not a token.
const BAD_REQUEST: &[u8] = b"\x01 / HTTP/1.1\r\n\r\n";

const TOO_LARGE_LEN: usize = 16 + 4 * (MAX_HEADERS + 1) + 5;
/// One header more than hyper accepts, so hyper answers 431; should its limit ever be raised, the
/// invalid last field still makes it a 400, never a request.
const TOO_LARGE: [u8; TOO_LARGE_LEN] = too_large_head();

const fn too_large_head() -> [u8; TOO_LARGE_LEN] {
    const LINE: &[u8] = b"GET / HTTP/1.1\r\n";
    const TAIL: &[u8] = b"\x01\r\n\r\n";
    let mut out = [0u8; TOO_LARGE_LEN];
    let mut i = 0;
    while i < LINE.len() {
        out[i] = LINE[i];
        i += 1;
    }
    while i < LINE.len() + 4 * (MAX_HEADERS + 1) {
        out[i] = b"a:\r\n"[(i - LINE.len()) % 4];
        i += 1;
    }
    let mut t = 0;
    while t < TAIL.len() {
        out[i + t] = TAIL[t];
        t += 1;
    }
    out
}

/// How much is read at a time while a head is incomplete.
const READ_CHUNK: usize = 8 * 1024;
/// After a refusal, how long and how much to keep reading before closing, so the client's unread
/// bytes do not make the kernel send RST and destroy the 400 in flight.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

#[derive(Debug)]
enum State {
    /// Accumulating the next head in `buf`.
    Head,
    /// Passing a body through; then `Hold` if the request may switch protocols.
    Body { body: Body, then_hold: bool },
    /// Waiting for the answer to request `seq` before reading anything after it.
    Hold(u64),
    /// The protocol switched: no more HTTP/1 to inspect.
    Pass,
    /// Feeding hyper the replacement for a refused head.
    Refuse { head: &'static [u8], sent: usize },
    /// End of stream for hyper.
    Done,
}

pin_project_lite::pin_project! {
    /// The downstream IO with every HTTP/1 request head checked before hyper parses it.
    pub struct HeadGuard<T> {
        #[pin]
        io: T,
        buf: BytesMut,
        // Validated head bytes at the front of `buf`, owed to hyper before anything else.
        ready: usize,
        state: State,
        scan: HeadScan,
        max_head: usize,
        heads: u64,
        tap: Arc<SwitchTap>,
        refused: bool,
        linger: Option<Linger>,
        // Armed when a head is still incomplete after a read: hyper never sees a partial head,
        // so its own header-read timeout cannot fire; this one does.
        head_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        head_timeout: std::time::Duration,
    }
}

struct Linger {
    deadline: Pin<Box<tokio::time::Sleep>>,
    drained: usize,
}

impl<T> HeadGuard<T> {
    /// Guards `io`, refusing heads longer than `max_head` bytes. The tap goes to the service, which
    /// must `record` every response.
    pub fn new(io: T, max_head: usize) -> (Self, Arc<SwitchTap>) {
        let tap = Arc::new(SwitchTap::default());
        let guard = Self {
            io,
            buf: BytesMut::new(),
            ready: 0,
            state: State::Head,
            scan: HeadScan::default(),
            max_head,
            heads: 0,
            tap: tap.clone(),
            refused: false,
            linger: None,
            head_deadline: None,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
        };
        (guard, tap)
    }
}

/// Until `with_head_timeout` says otherwise (hyper's own default).
const DEFAULT_HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl<T> HeadGuard<T> {
    /// A head must be complete within `t` of its first byte, else the connection is closed
    /// (slowloris).
    pub fn with_head_timeout(mut self, t: std::time::Duration) -> Self {
        self.head_timeout = t;
        self
    }

    /// Frees the read buffer if it holds nothing (a parked connection keeps no buffers).
    pub fn release_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }
}

impl<T: crate::http::park::ReadReady> crate::http::park::ReadReady for HeadGuard<T> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.buf.is_empty() || !matches!(self.state, State::Head | State::Pass) {
            return Poll::Ready(Ok(()));
        }
        self.io.poll_read_ready(cx)
    }
}

impl<T: AsyncRead> AsyncRead for HeadGuard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut this = self.project();
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        // Every arm either fills `out`, reports end of stream on purpose, or moves the state on.
        loop {
            if *this.ready > 0 {
                let n = (*this.ready).min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                *this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            match this.state {
                State::Done => return Poll::Ready(Ok(())),
                State::Refuse { head, sent } => {
                    if *sent == head.len() {
                        *this.state = State::Done;
                        continue;
                    }
                    let n = (head.len() - *sent).min(out.remaining());
                    out.put_slice(&head[*sent..*sent + n]);
                    *sent += n;
                    return Poll::Ready(Ok(()));
                }
                State::Pass if this.buf.is_empty() => return this.io.as_mut().poll_read(cx, out),
                State::Pass => {
                    let n = this.buf.len().min(out.remaining());
                    out.put_slice(&this.buf[..n]);
                    this.buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                State::Hold(seq) => {
                    let switched = ready!(this.tap.poll_switched(*seq, cx));
                    *this.state = if switched { State::Pass } else { State::Head };
                }
                State::Body { body, then_hold } => {
                    let then_hold = *then_hold;
                    let (n, done) = if this.buf.is_empty() {
                        // Straight into hyper's buffer; only what follows the body is kept back.
                        let before = out.filled().len();
                        ready!(this.io.as_mut().poll_read(cx, out))?;
                        let fresh = &out.filled()[before..];
                        if fresh.is_empty() {
                            *this.state = State::Done;
                            return Poll::Ready(Ok(()));
                        }
                        match body.advance(fresh) {
                            Ok((n, done)) => {
                                this.buf.extend_from_slice(&fresh[n..]);
                                out.set_filled(before + n);
                                (n, done)
                            }
                            Err(r) => {
                                out.set_filled(before);
                                return Poll::Ready(Err(refuse_body(this.state, this.refused, r)));
                            }
                        }
                    } else {
                        let take = this.buf.len().min(out.remaining());
                        match body.advance(&this.buf[..take]) {
                            Ok((n, done)) => {
                                out.put_slice(&this.buf[..n]);
                                this.buf.advance(n);
                                (n, done)
                            }
                            Err(r) => {
                                return Poll::Ready(Err(refuse_body(this.state, this.refused, r)))
                            }
                        }
                    };
                    if done {
                        *this.state = after_message(then_hold, *this.heads);
                    }
                    if n > 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
                State::Head => {
                    let window = this.buf.len().min(*this.max_head);
                    let verdict = match this.scan.feed(&this.buf[..window]) {
                        Ok(Some(end)) => head::validate(&this.buf[..end]).map(|v| (end, v)),
                        Ok(None) if this.buf.len() >= *this.max_head => Err(Reject::HeadTooLarge),
                        Ok(None) => {
                            match fill(this.buf, this.io.as_mut(), cx) {
                                Poll::Ready(Ok(0)) => *this.state = State::Done,
                                Poll::Ready(Ok(_)) => {}
                                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                                Poll::Pending if this.buf.is_empty() => return Poll::Pending,
                                Poll::Pending => {
                                    let timeout = *this.head_timeout;
                                    let deadline = this.head_deadline.get_or_insert_with(|| {
                                        Box::pin(tokio::time::sleep(timeout))
                                    });
                                    if deadline.as_mut().poll(cx).is_ready() {
                                        record(Reject::HeadTimeout);
                                        return Poll::Ready(Err(io::Error::new(
                                            io::ErrorKind::TimedOut,
                                            "request head not complete in time",
                                        )));
                                    }
                                    return Poll::Pending;
                                }
                            }
                            continue;
                        }
                        Err(r) => Err(r),
                    };
                    match verdict {
                        Ok((end, v)) => {
                            *this.head_deadline = None;
                            *this.ready = end;
                            *this.heads += 1;
                            *this.scan = HeadScan::default();
                            *this.state = admit(v, *this.heads, *this.max_head);
                        }
                        Err(r) => {
                            record(r);
                            *this.refused = true;
                            *this.buf = BytesMut::new();
                            let head = if r.too_large() {
                                &TOO_LARGE[..]
                            } else {
                                BAD_REQUEST
                            };
                            *this.state = State::Refuse { head, sent: 0 };
                        }
                    }
                }
            }
        }
    }
}

fn admit(v: Verdict, seq: u64, max_head: usize) -> State {
    let then_hold = v.may_switch;
    match v.framing {
        Framing::None => after_message(then_hold, seq),
        Framing::Length(n) => State::Body {
            body: Body::Length(n),
            then_hold,
        },
        Framing::Chunked => State::Body {
            body: Body::Chunked(Chunked::new(max_head)),
            then_hold,
        },
    }
}

fn after_message(then_hold: bool, seq: u64) -> State {
    if then_hold {
        State::Hold(seq)
    } else {
        State::Head
    }
}

/// Counts and logs a refused head.
pub(crate) fn record(r: Reject) {
    metrics::counter!(REJECTED_HEADS, "reason" => r.as_str()).increment(1);
    tracing::debug!(reason = r.as_str(), "refused an HTTP/1 request");
}

/// Mid-body there is no head left to replace: hyper gets an I/O error, fails the request and
/// closes, and nothing after the bad chunk is ever parsed.
fn refuse_body(state: &mut State, refused: &mut bool, r: Reject) -> io::Error {
    record(r);
    *state = State::Done;
    *refused = true;
    io::Error::new(io::ErrorKind::InvalidData, r.as_str())
}

/// Reads more of an incomplete head into `buf`.
fn fill<T: AsyncRead>(
    buf: &mut BytesMut,
    io: Pin<&mut T>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    // Reads into spare capacity without zeroing it first (a memset of READ_CHUNK per read
    // showed in profiles).
    buf.reserve(READ_CHUNK);
    tokio_util::io::poll_read_buf(io, cx, buf)
}

impl<T: AsyncRead + AsyncWrite> AsyncWrite for HeadGuard<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    /// After a refusal: send FIN, then drain what the client still sends (bounded), so the close
    /// does not turn into a reset that discards the 400.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        if !*this.refused {
            return this.io.poll_shutdown(cx);
        }
        if this.linger.is_none() {
            ready!(this.io.as_mut().poll_shutdown(cx))?;
            *this.linger = Some(Linger {
                deadline: Box::pin(tokio::time::sleep(LINGER)),
                drained: 0,
            });
        }
        let Some(linger) = this.linger.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let mut scratch = [0u8; 4096];
        loop {
            if linger.drained >= LINGER_BYTES || linger.deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut scratch);
            match ready!(this.io.as_mut().poll_read(cx, &mut rb)) {
                Ok(()) if !rb.filled().is_empty() => linger.drained += rb.filled().len(),
                // End of stream or a reset: nothing left to protect.
                _ => return Poll::Ready(Ok(())),
            }
        }
    }
}
