//! An I/O stream that first replays bytes already read (by detection), then reads the socket.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pin_project_lite::pin_project! {
    /// `io` with `prefix` in front of its read side; writes go straight through.
    pub struct Prefixed<T> {
        prefix: BytesMut,
        #[pin]
        io: T,
    }
}

impl<T> Prefixed<T> {
    /// Wraps `io`, replaying `prefix` first.
    pub fn new(prefix: BytesMut, io: T) -> Self {
        Self { prefix, io }
    }

    /// Whether replayed bytes remain.
    pub fn has_prefix(&self) -> bool {
        !self.prefix.is_empty()
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// The underlying stream and any prefix not yet read.
    pub fn into_parts(self) -> (BytesMut, T) {
        (self.prefix, self.io)
    }
}

impl<T: AsyncRead> AsyncRead for Prefixed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.prefix.is_empty() {
                // Give the detection buffer's memory back; idle connections should cost little.
                *this.prefix = BytesMut::new();
            }
            return Poll::Ready(Ok(()));
        }
        this.io.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for Prefixed<T> {
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
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn replays_the_prefix_before_the_stream() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut a, b" world")
            .await
            .expect("write");
        drop(a);
        let mut p = Prefixed::new(BytesMut::from(&b"hello"[..]), b);
        let mut out = String::new();
        p.read_to_string(&mut out).await.expect("read");
        assert_eq!(out, "hello world");
    }
}
