//! Tells the guard how hyper answered each request, so it resumes inspection unless a CONNECT
//! or Upgrade request really switched protocols.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    task::{Context, Poll},
};

use futures_util::task::AtomicWaker;
use http::StatusCode;

/// How hyper answered the requests of one connection, so the guard learns whether a request that
/// could switch protocols (CONNECT, Upgrade) really did. Without it, sending `Upgrade: x` would
/// switch inspection off for the rest of a connection that then carries on as HTTP/1.
#[derive(Debug, Default)]
pub struct SwitchTap {
    answered: AtomicU64,
    switched: AtomicU64,
    waker: AtomicWaker,
}

impl SwitchTap {
    /// Records the response to the next request, in order: once per request, after the handler.
    pub fn record(&self, connect: bool, status: StatusCode) {
        // One writer: hyper runs one request of a connection at a time.
        let seq = self.answered.load(Ordering::Acquire) + 1;
        if status == StatusCode::SWITCHING_PROTOCOLS || (connect && status.is_success()) {
            self.switched.store(seq, Ordering::Release);
        }
        self.answered.store(seq, Ordering::Release);
        self.waker.wake();
    }

    /// Whether request `seq` switched protocols, once it has been answered.
    pub(super) fn poll_switched(&self, seq: u64, cx: &mut Context<'_>) -> Poll<bool> {
        self.waker.register(cx.waker());
        if self.answered.load(Ordering::Acquire) < seq {
            return Poll::Pending;
        }
        Poll::Ready(self.switched.load(Ordering::Acquire) == seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::task::noop_waker;

    #[test]
    fn reports_only_the_request_that_switched() {
        let tap = SwitchTap::default();
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(tap.poll_switched(1, &mut cx), Poll::Pending);
        tap.record(false, StatusCode::OK);
        assert_eq!(tap.poll_switched(1, &mut cx), Poll::Ready(false));
        tap.record(true, StatusCode::OK);
        assert_eq!(tap.poll_switched(2, &mut cx), Poll::Ready(true));
        tap.record(true, StatusCode::FORBIDDEN);
        tap.record(false, StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(tap.poll_switched(3, &mut cx), Poll::Ready(false));
        assert_eq!(tap.poll_switched(4, &mut cx), Poll::Ready(true));
    }
}
