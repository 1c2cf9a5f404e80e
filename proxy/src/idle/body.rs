//! The two bodies of a stream under an idle timeout: [`Touched`] (the request body, which only
//! touches the clock) and [`IdleBody`] (the response body, which holds the stream's timer).

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::{http::body::BodyError, metrics::RouteMetrics, resilience::idle::IdleClock};

/// A body that touches its stream's clock on every frame it passes.
#[derive(Debug)]
pub struct Touched<B> {
    inner: B,
    clock: Arc<IdleClock>,
}

impl<B> Touched<B> {
    /// Wraps `inner`, touching `clock`.
    pub fn new(inner: B, clock: Arc<IdleClock>) -> Self {
        Self { inner, clock }
    }
}

impl<B: Body + Unpin> Body for Touched<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            this.clock.touch();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// A response body that ends with [`BodyError::Idle`] once its stream stood still for the
    /// idle timeout. Its one timer is armed the first time the inner body has to wait (a body
    /// that is already there, the common small response, never registers one), set for the
    /// clock's due time and, when it fires early because something moved meanwhile, set again
    /// for what is left.
    #[derive(Debug)]
    pub struct IdleBody<B> {
        #[pin]
        inner: B,
        clock: Arc<IdleClock>,
        metrics: Option<Arc<RouteMetrics>>,
        timer: Option<Pin<Box<Sleep>>>,
    }
}

impl<B> IdleBody<B> {
    /// Watches `inner` on `clock`; `metrics` counts the cut.
    pub fn new(inner: B, clock: Arc<IdleClock>, metrics: Option<Arc<RouteMetrics>>) -> Self {
        Self {
            inner,
            clock,
            metrics,
            timer: None,
        }
    }
}

impl<B: Body<Data = Bytes, Error = BodyError>> Body for IdleBody<B> {
    type Data = Bytes;
    type Error = BodyError;

    /// Polls the inner body; while it waits, the timer.
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.clock.touch();
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(done) => return Poll::Ready(done),
            Poll::Pending => {}
        }
        let clock = &**this.clock;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(clock.left())));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let left = this.clock.left();
            if left.is_zero() {
                tracing::debug!("stream idle: response body cut");
                if let Some(m) = this.metrics.take() {
                    m.proxy_error(crate::resilience::timeout::TimeoutKind::Idle.name());
                }
                return Poll::Ready(Some(Err(BodyError::Idle)));
            }
            timer.as_mut().reset(Instant::now() + left);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
