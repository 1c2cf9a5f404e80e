//! Parks idle HTTP/1 keep-alive connections: after an eighth to a quarter second of quiet with no
//! request in flight and nothing left to write, hyper's connection (and its ~16 KiB of buffers) is
//! taken apart, only the socket is kept, and a fresh connection is built when the client speaks
//! again. Idle keep-alives then cost about as much as the socket, and hyper's header-read timeout
//! only runs while a head is actually arriving.

use std::{
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed},
        Arc,
    },
    task::{Context, Poll},
};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use super::body::ProxyBody;
use crate::transport::prefixed::Prefixed;

/// What one connection is doing, as seen from its socket and its service.
#[derive(Debug, Default)]
pub struct Activity {
    inflight: AtomicU32,
    /// Bytes were written (or a write was refused) since the last completed flush.
    dirty: AtomicBool,
    /// Bytes of a next request arrived that hyper has not turned into a request yet.
    partial: AtomicBool,
    ops: AtomicU64,
}

impl Activity {
    /// A request head was parsed; the returned guard ends it when its response body is dropped.
    pub fn begin(self: &Arc<Self>) -> InflightGuard {
        self.inflight.fetch_add(1, Relaxed);
        self.partial.store(false, Relaxed);
        InflightGuard(self.clone())
    }

    /// Resolves once the connection has been idle (see `is_idle`) with no reads or writes for
    /// between `d / 2` and `d`: one timer per connection, ticking every `d / 2` on the grid of
    /// [`crate::clock::on_grid`] (so all connections tick in one wake-up), parks it at the first
    /// tick that finds it idle with no operation since the tick before. Requests cost the timer
    /// nothing (no re-arming, no wake-up when one ends), and a write that drains late is seen at
    /// the next tick.
    pub async fn quiet_for(&self, d: std::time::Duration) {
        let half = d / 2;
        let first = crate::clock::on_grid(tokio::time::Instant::now() + half, half);
        let tick = tokio::time::sleep_until(first);
        tokio::pin!(tick);
        let mut seen = self.ops();
        loop {
            tick.as_mut().await;
            let now = self.ops();
            if now == seen && self.is_idle() {
                return;
            }
            seen = now;
            let next = tick.deadline() + half;
            tick.as_mut().reset(next);
        }
    }

    /// A counter that moves with every read and write.
    pub fn ops(&self) -> u64 {
        self.ops.load(Relaxed)
    }

    /// Nothing in flight, nothing unflushed, no half-read head.
    pub fn is_idle(&self) -> bool {
        self.inflight.load(Relaxed) == 0 && !self.dirty.load(Relaxed) && !self.partial.load(Relaxed)
    }
}

/// Ends one request's activity when dropped.
#[derive(Debug)]
pub struct InflightGuard(Arc<Activity>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Relaxed);
    }
}

/// A response body that holds its request's activity until hyper has finished with it.
#[derive(Debug)]
pub struct TrackedBody {
    inner: ProxyBody,
    _guard: InflightGuard,
}

impl TrackedBody {
    /// Wraps `inner`.
    pub fn new(inner: ProxyBody, guard: InflightGuard) -> Self {
        Self {
            inner,
            _guard: guard,
        }
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = super::body::BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that can say when it has bytes without reading them (no buffer needed to wait).
pub trait ReadReady {
    /// Ready when a read would not block (data or EOF).
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl ReadReady for TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }
}

/// In-memory pipes cannot report readiness without reading; tests that use them never park.
#[cfg(test)]
impl ReadReady for tokio::io::DuplexStream {
    fn poll_read_ready(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl<T: ReadReady> ReadReady for Prefixed<T> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_prefix() {
            return Poll::Ready(Ok(()));
        }
        self.get_ref().poll_read_ready(cx)
    }
}

pin_project_lite::pin_project! {
    /// The downstream socket, reporting activity; holds bytes hyper read but did not use when a
    /// connection was parked.
    pub struct Watched<T> {
        #[pin]
        io: T,
        leftover: Bytes,
        act: Arc<Activity>,
    }
}

impl<T> Watched<T> {
    /// Wraps `io`.
    pub fn new(io: T, act: Arc<Activity>) -> Self {
        Self {
            io,
            leftover: Bytes::new(),
            act,
        }
    }

    /// The wrapped stream.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.io
    }

    /// Bytes to read before the socket's (from a parked connection's read buffer). They are
    /// copied out: the `Bytes` hyper hands back keeps its whole read buffer alive.
    pub fn set_leftover(&mut self, b: Bytes) {
        self.leftover = if b.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(&b)
        };
    }
}

impl<T: ReadReady> Watched<T> {
    /// Waits until the client sends something (or closes), holding no buffer.
    pub async fn readable(&self) -> io::Result<()> {
        if !self.leftover.is_empty() {
            return Ok(());
        }
        std::future::poll_fn(|cx| self.io.poll_read_ready(cx)).await
    }
}

impl<T: AsyncRead> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let res = if this.leftover.is_empty() {
            this.io.poll_read(cx, buf)
        } else {
            let n = this.leftover.len().min(buf.remaining());
            buf.put_slice(&this.leftover[..n]);
            this.leftover.advance(n);
            Poll::Ready(Ok(()))
        };
        if buf.filled().len() > before {
            this.act.ops.fetch_add(1, Relaxed);
            if this.act.inflight.load(Relaxed) == 0 {
                this.act.partial.store(true, Relaxed);
            }
        }
        res
    }
}

impl<T: AsyncWrite> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        this.act.ops.fetch_add(1, Relaxed);
        this.act.dirty.store(true, Relaxed);
        this.io.poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        this.act.ops.fetch_add(1, Relaxed);
        this.act.dirty.store(true, Relaxed);
        this.io.poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let res = this.io.poll_flush(cx);
        if let Poll::Ready(Ok(())) = res {
            this.act.dirty.store(false, Relaxed);
        }
        res
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}
