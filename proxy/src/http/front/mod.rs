//! The downstream HTTP/1.1 fast path. Plain requests (no body, or a Content-Length body of at
//! most 64 KiB; no upgrade, CONNECT or `Expect`) are read, handed to the request path and
//! answered by this loop itself, read into buffers the worker thread lends between requests
//! (`read_room`). The first request that is anything else, or that the head guard would refuse,
//! hands the connection, with every byte already read, to hyper behind the guard
//! (`server::serve_http1`) for the rest of its life, so refusals and the rarer protocol features
//! behave exactly as before.
//!
//! hyper's server cost about a third of the proxy's instructions per request (its dispatcher,
//! buffers reallocated per request, the guard's second look at every head).

pub(crate) mod request;
mod response;
#[cfg(test)]
mod tests;

use std::{future::poll_fn, future::Future, io, pin::Pin, task::Poll, time::Duration};

use bytes::BytesMut;
use http::{request::Parts, Method, Response};
use http_body::Body;
use tokio::{
    io::AsyncWriteExt,
    net::TcpStream,
    time::{Instant, Sleep},
};

use super::{
    body::ProxyBody,
    h1::case::HeaderCase,
    h1::{
        names,
        write::{BodyWriter, WriteError},
    },
    head_guard::{self, HeadScan, Reject},
    read_room, scratch,
    server::{self, Parked, ServerConfig},
    spare_maps,
};
use crate::{
    drain::{Drain, Shutdown},
    error::{self, ProxyError},
    transport::prefixed::Prefixed,
};
use request::Plan;
use response::Framing;

/// Reads never go below this much free buffer space...
const MIN_READ: usize = 2 * 1024;
/// ...and grow the buffer by this much; heads are split off it without copying.
const READ_SIZE: usize = 8 * 1024;
/// A body at most this long goes out in the same write as its head.
const INLINE_BODY: usize = 16 * 1024;

/// What the client sent next.
// Returned once per request and moved straight on; boxing the request would be an allocation
// per request to save a copy of ~300 bytes.
#[allow(clippy::large_enum_variant)]
enum Next {
    Request(Plan, Box<Parts>, ProxyBody),
    /// The proxy's own answer to a request it will not forward; the connection closes after it.
    /// Boxed: it is rare, and every connection's task is as large as its largest state.
    Refuse(Box<Refusal>),
    /// Not for the fast path: hyper takes over.
    Hyper,
    /// The client left, stayed idle, was too slow, or the proxy is draining.
    Close,
}

/// A request the fast path answers itself, then closes the connection.
struct Refusal {
    plan: Plan,
    method: Method,
    error: ProxyError,
}

/// One downstream connection on the fast path.
struct Front {
    io: TcpStream,
    /// Held while a request is read and answered, then given back to the thread (`read_room`).
    rbuf: BytesMut,
    /// A streamed body's chunk framing; heads go out from the thread's [`scratch`] buffer.
    wbuf: Vec<u8>,
    /// Fires to park an idle connection, then to close it; reset only when it fires, and only to
    /// points on a grid shared by every connection (see [`quiet_point`]).
    quiet: Pin<Box<Sleep>>,
    /// `quiet`'s deadline when it was last polled (it holds this task's waker until then).
    quiet_at: Option<Instant>,
    /// Resolves when shutdown begins. Made once per connection: a wait made afresh between
    /// every two requests registered with (and left) the drain channel each time.
    draining: Shutdown,
    parked: Option<Parked>,
    /// How response heads spell header names (in the struct's padding: the connection task's
    /// size is what an idle connection costs).
    case: HeaderCase,
}

/// Serves HTTP/1.1 on `io` (its prefix holds the bytes protocol detection read) until the client
/// leaves, idles out, or shutdown drains it, or until a request needs hyper.
pub async fn serve<F, Fut>(io: Prefixed<TcpStream>, cfg: &ServerConfig, drain: Drain, handler: F)
where
    F: Fn(Box<Parts>, ProxyBody) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let (rbuf, io) = io.into_parts();
    let mut c = Front {
        io,
        rbuf,
        wbuf: Vec::new(),
        quiet: Box::pin(tokio::time::sleep_until(quiet_point(
            Instant::now() + cfg.park_after,
            cfg,
        ))),
        quiet_at: None,
        draining: drain.shutdown(),
        parked: None,
        case: cfg.header_case,
    };
    loop {
        let (plan, parts, body) = match c.next(cfg).await {
            Next::Request(plan, parts, body) => (plan, parts, body),
            Next::Refuse(refusal) => {
                // On the heap: inline, its answer's state made every connection's task larger
                // (1,776 → 1,952 bytes, past the allocator's 2 KiB class with tokio's header).
                Box::pin(c.refuse(*refusal)).await;
                return;
            }
            Next::Hyper => break,
            Next::Close => return,
        };
        let method = parts.method.clone();
        let resp = start(|| handler(parts, body)).await;
        let close = plan.close || drain.is_draining();
        match c.respond(resp, &method, plan, close).await {
            Ok(false) => read_room::give_back(&mut c.rbuf),
            Ok(true) | Err(_) => {
                let _ = c.io.shutdown().await;
                return;
            }
        }
    }
    drop(c.draining);
    let io = Prefixed::new(c.rbuf, c.io);
    Box::pin(server::serve_http1(io, cfg, drain, handler)).await;
}

/// A request's future, on the heap: it is kilobytes, and an idle connection should not carry
/// it. Allocated first and then built in place: LLVM writes a value straight into a fresh
/// allocation (only what the future starts with, a few hundred bytes), where `Box::pin(make())`
/// built it on the stack and copied it whole. A fixed slot per connection cannot be written
/// that way, and copying 4 KB into 500 cold slots was most of the proxy's cache misses at
/// `-c500`.
#[inline(always)]
fn start<Fut: Future>(make: impl FnOnce() -> Fut) -> Pin<Box<Fut>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// When a quiet timer due at `at` fires: on the grid of half `park_after`, so the timers of
/// all busy connections come due together (one wake-up for the lot) and a connection parks
/// between `park_after` and one and a half times it after its last request.
fn quiet_point(at: Instant, cfg: &ServerConfig) -> Instant {
    crate::clock::on_grid(at, cfg.park_after / 2)
}

fn write_failed(e: WriteError) -> io::Error {
    match e {
        WriteError::Io(e) => e,
        WriteError::Longer => io::Error::new(
            io::ErrorKind::InvalidData,
            "response body longer than its length",
        ),
        WriteError::Shorter => io::Error::new(
            io::ErrorKind::InvalidData,
            "response body shorter than its length",
        ),
    }
}

/// What ended a wait between requests.
enum Woke {
    /// The socket turned readable (`false`: it failed).
    Readable(bool),
    Draining,
    Quiet,
}

/// The body's first frame if it is ready without waiting.
fn ready_frame(
    body: &mut ProxyBody,
) -> Option<Result<http_body::Frame<bytes::Bytes>, super::body::BodyError>> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        std::task::Poll::Ready(Some(f)) => Some(f),
        _ => None,
    }
}

impl Front {
    /// Waits for the next request: a whole head (and its short body), or a reason to stop.
    async fn next(&mut self, cfg: &ServerConfig) -> Next {
        let mut scan = HeadScan::default();
        // The header-read timeout (slowloris): armed once a head has begun and is incomplete.
        let mut deadline: Option<Pin<Box<Sleep>>> = None;
        loop {
            let more = if self.rbuf.is_empty() {
                self.idle(cfg).await && self.read().await
            } else {
                let window = self.rbuf.len().min(cfg.max_header_bytes);
                match scan.feed(&self.rbuf[..window]) {
                    Ok(Some(end)) => return self.take(end, cfg).await,
                    Ok(None) if self.rbuf.len() < cfg.max_header_bytes => {}
                    // Too large or malformed: the guard answers it (431 or 400).
                    Ok(None) | Err(_) => return Next::Hyper,
                }
                self.read_by(&mut deadline, cfg.header_read_timeout).await
            };
            if !more {
                return Next::Close;
            }
        }
    }

    /// The head is `rbuf[..end]`: the request, once its body is in, or hyper's turn.
    async fn take(&mut self, end: usize, cfg: &ServerConfig) -> Next {
        let head = self.rbuf.split_to(end).freeze();
        let Some((plan, parts)) = names::of_requests(|names| request::read(&head, names)) else {
            // Put the head back in front of what follows it, for the guard to read.
            let mut all = BytesMut::with_capacity(head.len() + self.rbuf.len());
            all.extend_from_slice(&head);
            all.extend_from_slice(&self.rbuf);
            self.rbuf = all;
            return Next::Hyper;
        };
        drop(head);
        // plan.body <= MAX_WHOLE_BODY, a usize.
        let want = plan.body as usize;
        // The body's deadline is its own, as nginx's `client_body_timeout`: each read within
        // the header-read timeout of the last, however long the whole takes (a slow 60 kB
        // upload was cut off when its head and body together took longer).
        let mut idle = None;
        while self.rbuf.len() < want {
            match self.readable_by(&mut idle, cfg.header_read_timeout).await {
                Some(true) if self.read().await => {
                    if let Some(d) = idle.as_mut() {
                        d.as_mut().reset(Instant::now() + cfg.header_read_timeout);
                    }
                }
                Some(_) => return Next::Close,
                None => {
                    head_guard::record(Reject::BodyTimeout);
                    return Next::Refuse(Box::new(Refusal {
                        plan,
                        method: parts.method.clone(),
                        error: ProxyError::BodyTimeout,
                    }));
                }
            }
        }
        let body = if want > 0 {
            ProxyBody::Full(Some(self.rbuf.split_to(want).freeze()))
        } else {
            ProxyBody::Empty
        };
        Next::Request(plan, parts, body)
    }

    /// Reads more of a head begun, once the socket turns readable before `deadline`
    /// (armed now, for `t`, if it is not yet); `false` once it passed or the client left.
    async fn read_by(&mut self, deadline: &mut Option<Pin<Box<Sleep>>>, t: Duration) -> bool {
        match self.readable_by(deadline, t).await {
            Some(ok) => ok && self.read().await,
            None => {
                head_guard::record(Reject::HeadTimeout);
                false
            }
        }
    }

    /// Waits for the socket to turn readable before `deadline` (armed now, for `t`, if it is
    /// not yet): whether it is usable, or `None` once the deadline passed.
    async fn readable_by(
        &mut self,
        deadline: &mut Option<Pin<Box<Sleep>>>,
        t: Duration,
    ) -> Option<bool> {
        let d = deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(t)));
        tokio::select! {
            r = self.io.readable() => Some(r.is_ok()),
            () = d.as_mut() => None,
        }
    }

    /// Between requests: waits for the next byte, parking the connection (buffers freed) once it
    /// has been quiet for `park_after`; `false` when it should close.
    async fn idle(&mut self, cfg: &ServerConfig) -> bool {
        let since = Instant::now();
        // The quiet timer keeps this task's waker from its last poll until it fires, and it does
        // not fire before its deadline: until then a wait need not poll it (its entry is memory
        // of its own per connection, out of the CPU's cache with a few hundred of them) unless a
        // wake-up finds nothing else ready.
        let mut watch_quiet = self.quiet_at.is_none_or(|at| since >= at);
        loop {
            let woke = poll_fn(|cx| {
                if let Poll::Ready(r) = self.io.poll_read_ready(cx) {
                    return Poll::Ready(Woke::Readable(r.is_ok()));
                }
                if Pin::new(&mut self.draining).poll(cx).is_ready() {
                    return Poll::Ready(Woke::Draining);
                }
                if watch_quiet {
                    if self.quiet.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Woke::Quiet);
                    }
                    self.quiet_at = Some(self.quiet.deadline());
                }
                watch_quiet = true;
                Poll::Pending
            })
            .await;
            match woke {
                Woke::Readable(ok) => {
                    self.parked = None;
                    return ok;
                }
                Woke::Draining => return false,
                Woke::Quiet => {
                    let quiet = since.elapsed();
                    if quiet >= cfg.idle_timeout {
                        return false;
                    }
                    if self.parked.is_none() && quiet >= cfg.park_after {
                        self.rbuf = BytesMut::new();
                        self.wbuf = Vec::new();
                        self.parked = Some(Parked::new());
                    }
                    let next = if self.parked.is_some() {
                        since + cfg.idle_timeout
                    } else {
                        since + cfg.park_after
                    };
                    self.quiet.as_mut().reset(quiet_point(next, cfg));
                    watch_quiet = true;
                }
            }
        }
    }

    /// Reads what the socket has; `false` when the client left or the socket failed (a read
    /// that would block is fine: the caller waits for readiness again).
    ///
    /// Polled once rather than `try_read`: tokio's `poll_read` takes a short read as proof the
    /// socket is drained and clears its readiness, so the wait for the next request does not
    /// begin with a read that can only fail (one `recvfrom` per request, ~0.9 measured).
    async fn read(&mut self) -> bool {
        read_room::make(&mut self.rbuf, MIN_READ, READ_SIZE);
        poll_fn(|cx| {
            Poll::Ready(
                match tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf) {
                    Poll::Ready(Ok(n)) => n > 0,
                    Poll::Ready(Err(_)) => false,
                    Poll::Pending => true,
                },
            )
        })
        .await
    }

    /// Answers a refused request with its error and closes the connection.
    async fn refuse(&mut self, r: Refusal) {
        // A refusal's account is the request's own fault, which names nothing inside.
        let resp = error::rescue(&r.error, false, error::Audience::Edge);
        let _ = self.respond(resp, &r.method, r.plan, true).await;
        let _ = self.io.shutdown().await;
    }

    /// Writes the response; `Ok(true)` if the connection must close after it.
    async fn respond(
        &mut self,
        resp: Response<ProxyBody>,
        method: &Method,
        plan: Plan,
        close: bool,
    ) -> io::Result<bool> {
        let case = self.case;
        let (parts, mut body) = resp.into_parts();
        let mut head = scratch::take();
        let exact = body.size_hint().exact();
        let (framing, close) =
            response::head(&parts, method, exact, close, plan.http10, case, &mut head);
        spare_maps::give_back(parts.headers);
        if let Framing::Length(n) = framing {
            // A small body that is already here (most are, whatever wraps them) goes out in the
            // head's write: one system call per response.
            if n <= INLINE_BODY as u64 {
                if let Some(first) = ready_frame(&mut body) {
                    let data = first
                        .map_err(|e| io::Error::other(e.to_string()))?
                        .into_data()
                        .unwrap_or_default();
                    let rest = n.checked_sub(data.len() as u64).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "body longer than its length")
                    })?;
                    head.extend_from_slice(&data);
                    self.io.write_all(&head).await?;
                    scratch::give_back(head);
                    if rest > 0 {
                        self.stream(&mut body, BodyWriter::new(Some(rest), case), false)
                            .await?;
                    }
                    return Ok(close);
                }
            }
        }
        self.io.write_all(&head).await?;
        scratch::give_back(head);
        let writer = match framing {
            Framing::None => return Ok(close),
            Framing::Length(n) => BodyWriter::new(Some(n), case),
            Framing::Chunked => BodyWriter::new(None, case),
            Framing::UntilClose => BodyWriter::until_close(),
        };
        let trailers_ok = plan.trailers && framing == Framing::Chunked;
        self.stream(&mut body, writer, trailers_ok).await?;
        Ok(close)
    }

    /// Streams `body` through `writer` (raw against a length, chunked, or raw until the close);
    /// a body that fails or breaks its length closes the connection, as with hyper.
    async fn stream(
        &mut self,
        body: &mut ProxyBody,
        mut writer: BodyWriter,
        trailers_ok: bool,
    ) -> io::Result<()> {
        let mut trailers = None;
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            let frame = frame.map_err(|e| io::Error::other(e.to_string()))?;
            match frame.into_data() {
                Ok(data) => writer.data(&mut self.io, &mut self.wbuf, data).await,
                Err(f) => {
                    trailers = f.into_trailers().ok().filter(|_| trailers_ok);
                    Ok(())
                }
            }
            .map_err(write_failed)?;
        }
        writer
            .finish(&mut self.io, &mut self.wbuf, trailers.as_ref())
            .await
            .map_err(write_failed)
    }
}
