//! `ReplayBody`: streams a request body to the first attempt while keeping a copy of up to
//! 64 KiB, so a retry can send it again byte for byte.

use std::{
    error::Error,
    fmt,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, PoisonError,
    },
    task::{Context, Poll},
};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The most body a request may have and still be retried.
pub const MAX_REPLAY: usize = 64 * 1024;

/// One attempt's view of a request body. The first is made by [`ReplayBody::new`], every retry by
/// `clone()`; each yields the whole body from its first byte.
///
/// The client's body and the copy live in one state that exactly one attempt holds at a time.
/// Whoever holds it reads the client's body, and every chunk it takes is recorded in the copy
/// *before* it is yielded, so a retry that starts early (before the client's body has been fully
/// read) replays the recorded prefix, then carries on reading the client's body where the
/// previous attempt stopped: no chunk twice, none lost. A retry polled while the previous attempt
/// still holds the state asks it to let go and waits; the previous attempt hands the state over
/// on its next poll (ending its own stream with [`ReplayError::Superseded`]) or when dropped.
///
/// Handing over is an `ArcSwapOption` swap: no lock, no allocation. Reading is plain `&mut`
/// access through `Arc::get_mut` (the `Mutex` is there only to make the state `Sync`; it is never
/// locked). Only one attempt at a time may be in flight: this is for retries, not hedging.
pub struct ReplayBody<B> {
    shared: Arc<Shared<B>>,
    /// The state, while this attempt is the one reading.
    state: Option<Arc<Mutex<State<B>>>>,
    /// Data frames this attempt has yielded; the copy's index of the next one.
    pos: usize,
    /// Bytes this attempt has yielded (for `size_hint`).
    yielded: u64,
    /// This attempt's stream is over (ended, failed or superseded).
    done: bool,
    /// This attempt has nothing left to yield (kept here so `is_end_stream` needs no state).
    at_end: bool,
}

struct Shared<B> {
    /// The state when no attempt holds it.
    slot: ArcSwapOption<Mutex<State<B>>>,
    /// The attempt waiting for the state.
    waiter: AtomicWaker,
    /// A newer attempt wants the state.
    abandon: AtomicBool,
    replayable: AtomicBool,
    /// The client's body as it arrived, which every attempt reproduces from the start.
    hint: SizeHint,
    empty: bool,
}

struct State<B> {
    body: B,
    /// Data frames taken from the client's body, in order, while they fit in `MAX_REPLAY`.
    copy: Vec<Bytes>,
    copied: usize,
    /// Data frames taken from the client's body in all; an attempt at `pos == taken` reads on.
    taken: usize,
    /// The copy was dropped (too big, or the client's body failed): a fresh attempt cannot start.
    dropped: bool,
    trailers: Option<HeaderMap>,
    /// The client's body has ended (with or without trailers).
    ended: bool,
}

/// What `poll_frame` returns.
type Polled<E> = Poll<Option<Result<Frame<Bytes>, ReplayError<E>>>>;

/// Why an attempt's body ended in an error.
#[derive(Debug)]
pub enum ReplayError<E> {
    /// The client's body failed.
    Body(E),
    /// The body outgrew [`MAX_REPLAY`] (or failed) before this retry could replay it: the retry
    /// must not be sent. Check [`ReplayBody::is_replayable`] before retrying to avoid it.
    NotReplayable,
    /// A retry took over the body; this attempt is abandoned.
    Superseded,
}

impl<B: Body<Data = Bytes> + Unpin> ReplayBody<B> {
    /// Wraps the client's body. A body that announces more than [`MAX_REPLAY`] (Content-Length)
    /// is not copied at all.
    pub fn new(body: B) -> Self {
        let hint = body.size_hint();
        let too_big = hint.lower() > MAX_REPLAY as u64;
        let shared = Arc::new(Shared {
            slot: ArcSwapOption::empty(),
            waiter: AtomicWaker::new(),
            abandon: AtomicBool::new(false),
            replayable: AtomicBool::new(!too_big),
            hint,
            empty: body.is_end_stream(),
        });
        let state = State {
            body,
            copy: Vec::new(),
            copied: 0,
            taken: 0,
            dropped: too_big,
            trailers: None,
            ended: false,
        };
        ReplayBody {
            shared,
            state: Some(Arc::new(Mutex::new(state))),
            pos: 0,
            yielded: 0,
            done: false,
            at_end: false,
        }
    }

    /// Whether a retry could still send this body in full. Turns false for good once the body
    /// outgrows [`MAX_REPLAY`] or the client's body fails.
    pub fn is_replayable(&self) -> bool {
        self.shared.replayable.load(Ordering::Acquire)
    }

    /// Takes the state from the slot, or asks its holder to let go and waits for it.
    fn acquire(&mut self, cx: &mut Context<'_>) -> bool {
        if self.take_from_slot() {
            return true;
        }
        self.shared.waiter.register(cx.waker());
        self.shared.abandon.store(true, Ordering::Release);
        // The holder may have let go between the first look and the registration.
        self.take_from_slot()
    }

    fn take_from_slot(&mut self) -> bool {
        match self.shared.slot.swap(None) {
            Some(state) => {
                self.shared.abandon.store(false, Ordering::Release);
                self.state = Some(state);
                true
            }
            None => false,
        }
    }

    fn poll_held(&mut self, cx: &mut Context<'_>) -> Polled<B::Error> {
        let Some(state) = self.state.as_mut().and_then(Arc::get_mut) else {
            // Unreachable: the state is only ever referenced by its holder or by the slot.
            return Poll::Ready(Some(Err(ReplayError::NotReplayable)));
        };
        let state = state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if self.pos < state.taken {
            let Some(chunk) = state.copy.get(self.pos).filter(|_| !state.dropped) else {
                return Poll::Ready(Some(Err(ReplayError::NotReplayable)));
            };
            self.pos += 1;
            self.yielded += chunk.len() as u64;
            self.at_end = state.ended && state.trailers.is_none() && self.pos == state.taken;
            return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
        }
        if state.ended {
            return Poll::Ready(state.trailers.clone().map(|t| Ok(Frame::trailers(t))));
        }
        let frame = match Pin::new(&mut state.body).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                state.ended = true;
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(e))) => {
                state.drop_copy(&self.shared);
                return Poll::Ready(Some(Err(ReplayError::Body(e))));
            }
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        match frame.into_data() {
            Ok(chunk) => {
                state.taken += 1;
                self.pos += 1;
                self.yielded += chunk.len() as u64;
                // Knowing the end now lets HTTP/2 set END_STREAM on this last DATA frame.
                state.ended |= state.body.is_end_stream();
                if !state.dropped {
                    if state.copied + chunk.len() > MAX_REPLAY {
                        state.drop_copy(&self.shared);
                    } else {
                        state.copied += chunk.len();
                        state.copy.push(chunk.clone());
                    }
                }
                self.at_end = state.ended && state.trailers.is_none() && self.pos == state.taken;
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Err(frame) => {
                // Trailers end the body; a frame of some future kind is passed on as it is.
                if let Some(t) = frame.trailers_ref() {
                    state.trailers = Some(t.clone());
                    state.ended = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }
}

impl<B> State<B> {
    fn drop_copy(&mut self, shared: &Shared<B>) {
        self.dropped = true;
        self.copy = Vec::new();
        shared.replayable.store(false, Ordering::Release);
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for ReplayBody<B> {
    type Data = Bytes;
    type Error = ReplayError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if this.state.is_none() && !this.acquire(cx) {
            return Poll::Pending;
        }
        // One atomic load per frame buys an early retry that does not wait for this attempt to
        // finish sending (or be dropped by) a connection that already answered.
        if this.shared.abandon.load(Ordering::Acquire) {
            this.release();
            this.done = true;
            return Poll::Ready(Some(Err(ReplayError::Superseded)));
        }
        let polled = this.poll_held(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.done = true,
            Poll::Ready(Some(Ok(f))) if f.is_trailers() => this.done = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // hyper asks before the first poll, to choose HTTP/1 framing and to end an HTTP/2 stream
        // with its headers; a GET must not turn into a chunked request because it was wrapped.
        if self.done || self.shared.empty {
            return true;
        }
        self.at_end
    }

    fn size_hint(&self) -> SizeHint {
        let full = &self.shared.hint;
        let mut hint = SizeHint::new();
        hint.set_lower(full.lower().saturating_sub(self.yielded));
        if let Some(upper) = full.upper() {
            hint.set_upper(upper.saturating_sub(self.yielded));
        }
        hint
    }
}

impl<B: Body<Data = Bytes> + Unpin> Clone for ReplayBody<B> {
    /// A retry: yields the whole body again from its first byte.
    fn clone(&self) -> Self {
        ReplayBody {
            shared: Arc::clone(&self.shared),
            state: None,
            pos: 0,
            yielded: 0,
            done: false,
            at_end: false,
        }
    }
}

impl<B> ReplayBody<B> {
    /// Hands the state to whichever attempt comes next.
    fn release(&mut self) {
        if let Some(state) = self.state.take() {
            // No other attempt exists and none can be made: let the state drop with us.
            if Arc::strong_count(&self.shared) > 1 {
                self.shared.slot.store(Some(state));
                self.shared.waiter.wake();
            }
        }
    }
}

impl<B> Drop for ReplayBody<B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayBody")
            .field("pos", &self.pos)
            .field("holds_state", &self.state.is_some())
            .field(
                "replayable",
                &self.shared.replayable.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl<E: fmt::Display> fmt::Display for ReplayError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Body(e) => write!(f, "request body failed: {e}"),
            ReplayError::NotReplayable => {
                write!(
                    f,
                    "request body larger than {MAX_REPLAY} bytes cannot be replayed"
                )
            }
            ReplayError::Superseded => f.write_str("request body taken over by a retry"),
        }
    }
}

impl<E: Error + 'static> Error for ReplayError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ReplayError::Body(e) => Some(e),
            ReplayError::NotReplayable | ReplayError::Superseded => None,
        }
    }
}

#[cfg(test)]
mod tests;
