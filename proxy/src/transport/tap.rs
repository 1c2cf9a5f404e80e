//! `Tapped`: a byte stream that tells a [`Tap`] how many bytes each read and write moved,
//! without touching them (byte counters for opaque TCP, the idle clock of a spliced upgrade).

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Hears the bytes a [`Tapped`] stream moves.
pub trait Tap {
    /// `n` > 0 bytes were read.
    fn read(&self, n: usize);
    /// `n` > 0 bytes were written.
    fn wrote(&self, _n: usize) {}
}

/// `io`, reporting every read and write to `tap`.
#[derive(Debug)]
pub struct Tapped<T, P> {
    pub io: T,
    pub tap: P,
}

impl<T: AsyncRead + Unpin, P: Tap + Unpin> AsyncRead for Tapped<T, P> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.tap.read(n);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin, P: Tap + Unpin> AsyncWrite for Tapped<T, P> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.tap.wrote(n);
            }
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
