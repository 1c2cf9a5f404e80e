//! `ProxyBody`: the one body type that flows through the proxy, without boxing.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::pool::PoolReturn;

/// A request or response body: streamed from a peer, or produced by the proxy.
#[derive(Debug)]
pub enum ProxyBody {
    /// No bytes.
    Empty,
    /// One chunk produced by the proxy (errors, admin pages).
    Full(Option<Bytes>),
    /// Streamed from the downstream client (requests) or the upstream (responses).
    Incoming(Incoming),
    /// Streamed from a pooled upstream connection, returned to the pool once fully read.
    Pooled(Incoming, PoolReturn),
    /// A gRPC response counted in metrics when its trailers pass.
    Classified(Box<crate::classify::Classified>),
    /// A request body streamed on while a copy is kept for mirrors.
    Tee(Box<crate::mirror::tee::Tee<Incoming>>),
}

impl From<Incoming> for ProxyBody {
    fn from(b: Incoming) -> Self {
        ProxyBody::Incoming(b)
    }
}

impl ProxyBody {
    /// An empty body.
    pub fn empty() -> Self {
        ProxyBody::Empty
    }

    /// A body of one chunk.
    pub fn full(b: impl Into<Bytes>) -> Self {
        ProxyBody::Full(Some(b.into()))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Incoming(b) => Pin::new(b).poll_frame(cx),
            ProxyBody::Pooled(b, ret) => {
                let polled = Pin::new(b).poll_frame(cx);
                if let Poll::Ready(None) = polled {
                    ret.finished();
                }
                polled
            }
            ProxyBody::Classified(c) => c.poll_frame(cx),
            ProxyBody::Tee(t) => t.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Incoming(b) | ProxyBody::Pooled(b, _) => b.is_end_stream(),
            ProxyBody::Classified(c) => c.inner().is_end_stream(),
            ProxyBody::Tee(t) => t.inner().is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Incoming(b) | ProxyBody::Pooled(b, _) => b.size_hint(),
            ProxyBody::Classified(c) => c.inner().size_hint(),
            ProxyBody::Tee(t) => t.inner().size_hint(),
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // A body with nothing left to read (HEAD, 204, Content-Length: 0) may never be polled.
        if let ProxyBody::Pooled(b, ret) = self {
            if b.is_end_stream() {
                ret.finished();
            }
        }
    }
}
