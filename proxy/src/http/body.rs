//! `ProxyBody`: the one body type that flows through the proxy, without boxing.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::idle::{IdleBody, Touched};
use crate::mirror::tee::Tee;
use crate::resilience::{
    limit::Permit,
    replay::{ReplayBody, ReplayError},
};

/// Why a body stopped: the peer's stream failed, or (retried requests only) the replay buffer
/// gave up. An enum rather than a box, so the common path pays nothing for the rare one.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The peer's stream failed (reset, closed early, bad framing).
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    /// A request body kept for retries: the client's stream failed, it outgrew the replay
    /// buffer before a retry could resend it, or a retry took it over.
    #[error(transparent)]
    Replay(#[from] ReplayError<hyper::Error>),
    /// An upstream HTTP/1 response body broke off or broke its framing.
    #[error(transparent)]
    Upstream(#[from] super::h1::Error),
    /// A request body did not match the length it declared.
    #[error("request body {0}")]
    Length(&'static str),
    /// No body frame moved in either direction for the stream idle timeout.
    #[error("the stream was idle for its idle timeout")]
    Idle,
}

/// A request or response body: streamed from a peer, or produced by the proxy.
#[derive(Debug)]
pub enum ProxyBody {
    /// No bytes.
    Empty,
    /// One chunk produced by the proxy (errors, admin pages).
    Full(Option<Bytes>),
    /// Streamed from the downstream client (requests) or the upstream (responses).
    Incoming(Incoming),
    /// Streamed from a pooled upstream HTTP/1 connection, which goes back to its pool once the
    /// body has been read.
    H1(Box<super::h1::ResponseBody>),
    /// A request body that a retry may send again (only on routes that can retry a sent request).
    Replay(ReplayBody<ClientBody>),
    /// A response holding its service's concurrency slot until the body ends or is dropped.
    Held(Box<ProxyBody>, Permit),
    /// A gRPC response counted in metrics when its trailers pass.
    Classified(Box<crate::classify::Classified>),
    /// A request body streamed on while a copy is kept for mirrors.
    Tee(Box<Tee<Incoming>>),
    /// A request body that touches its stream's idle clock (routes with an idle timeout).
    Touched(Box<Touched<ClientBody>>),
    /// A response body cut when its stream stands idle (routes with an idle timeout).
    Idle(Pin<Box<IdleBody<ProxyBody>>>),
    /// A request body whose trailers are cleaned on their way upstream (`trailers.rs`).
    CleanTrailers(Box<super::trailers::Cleaned>),
    /// A response body whose end writes its request's access-log line (`access_log.rs`).
    Logged(Box<crate::access_log::Logged>),
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
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Incoming(b) => Pin::new(b).poll_frame(cx),
            ProxyBody::H1(b) => {
                return Pin::new(b.as_mut())
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(BodyError::Upstream)));
            }
            ProxyBody::Replay(b) => {
                return Pin::new(b)
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(BodyError::Replay)));
            }
            ProxyBody::Held(b, _) => return Pin::new(b.as_mut()).poll_frame(cx),
            ProxyBody::Classified(c) => return c.poll_frame(cx),
            ProxyBody::Tee(t) => t.poll_frame(cx),
            ProxyBody::Touched(t) => Pin::new(t.as_mut()).poll_frame(cx),
            ProxyBody::Idle(b) => return b.as_mut().poll_frame(cx),
            ProxyBody::CleanTrailers(c) => return c.poll_frame(cx),
            ProxyBody::Logged(l) => return l.poll_frame(cx),
        };
        polled.map(|f| f.map(|r| r.map_err(BodyError::Hyper)))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Incoming(b) => b.is_end_stream(),
            ProxyBody::H1(b) => b.is_end_stream(),
            ProxyBody::Replay(b) => b.is_end_stream(),
            ProxyBody::Held(b, _) => b.is_end_stream(),
            ProxyBody::Classified(c) => c.inner().is_end_stream(),
            ProxyBody::Tee(t) => t.inner().is_end_stream(),
            ProxyBody::Touched(t) => t.is_end_stream(),
            ProxyBody::Idle(b) => b.is_end_stream(),
            ProxyBody::CleanTrailers(c) => c.inner().is_end_stream(),
            ProxyBody::Logged(l) => l.inner().is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Incoming(b) => b.size_hint(),
            ProxyBody::H1(b) => b.size_hint(),
            ProxyBody::Replay(b) => b.size_hint(),
            ProxyBody::Held(b, _) => b.size_hint(),
            ProxyBody::Classified(c) => c.inner().size_hint(),
            ProxyBody::Tee(t) => t.inner().size_hint(),
            ProxyBody::Touched(t) => t.size_hint(),
            ProxyBody::Idle(b) => b.size_hint(),
            ProxyBody::CleanTrailers(c) => c.size_hint(),
            ProxyBody::Logged(l) => l.inner().size_hint(),
        }
    }
}

/// A client's request body as a retry keeps it: read straight, or through a mirror's tee (so a
/// mirrored request is still retried, and its shadow still gets one copy).
#[derive(Debug)]
pub enum ClientBody {
    /// Read straight from the client.
    Plain(Incoming),
    /// Read through the tee that copies it for mirrors.
    Teed(Box<Tee<Incoming>>),
    /// Read through the stream's idle clock.
    Touched(Box<Touched<ClientBody>>),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ClientBody::Plain(b) => Pin::new(b).poll_frame(cx),
            ClientBody::Teed(t) => t.poll_frame(cx),
            ClientBody::Touched(t) => Pin::new(t.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Plain(b) => b.is_end_stream(),
            ClientBody::Teed(t) => t.inner().is_end_stream(),
            ClientBody::Touched(t) => t.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Plain(b) => b.size_hint(),
            ClientBody::Teed(t) => t.inner().size_hint(),
            ClientBody::Touched(t) => t.size_hint(),
        }
    }
}
