//! `Tee`: a request body streamed on to the primary unchanged while a copy of up to 64 KiB is
//! kept for the mirrors; the copy is handed over when the body ends, or given up (the mirrors
//! are dropped) if it grows past the limit, fails, or is dropped unfinished.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use tokio::sync::oneshot;

/// The largest body a mirror gets a copy of.
pub const MAX_MIRROR_BODY: usize = 64 * 1024;

/// Streams `inner` while recording its data frames for each waiting mirror.
#[derive(Debug)]
pub struct Tee<B> {
    inner: B,
    /// The data frames so far (reference-counted, not copied).
    copy: Vec<Bytes>,
    len: usize,
    /// One per mirror; empty once the copy was handed over or given up.
    txs: Vec<oneshot::Sender<Bytes>>,
}

impl<B: Body<Data = Bytes> + Unpin> Tee<B> {
    /// Tees `inner` to `txs`, each of which gets the whole body or is dropped.
    pub fn new(inner: B, txs: Vec<oneshot::Sender<Bytes>>) -> Self {
        Self {
            inner,
            copy: Vec::new(),
            len: 0,
            txs,
        }
    }

    /// The body being teed.
    pub(crate) fn inner(&self) -> &B {
        &self.inner
    }

    /// Polls the inner body, recording what passes.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if self.txs.is_empty() {
            return polled;
        }
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.len += data.len();
                    if self.len > MAX_MIRROR_BODY {
                        self.give_up();
                        return polled;
                    }
                    self.copy.push(data.clone());
                }
                // The server may never poll again once the body says it is over.
                if self.inner.is_end_stream() {
                    self.hand_over();
                }
            }
            Poll::Ready(Some(Err(_))) => self.give_up(),
            Poll::Ready(None) => self.hand_over(),
            Poll::Pending => {}
        }
        polled
    }

    fn give_up(&mut self) {
        self.txs.clear();
        self.copy = Vec::new();
    }

    fn hand_over(&mut self) {
        let body = match self.copy.len() {
            0 => Bytes::new(),
            1 => self.copy.remove(0),
            _ => {
                let mut all = BytesMut::with_capacity(self.len);
                for chunk in self.copy.drain(..) {
                    all.extend_from_slice(&chunk);
                }
                all.freeze()
            }
        };
        for tx in self.txs.drain(..) {
            // A mirror that gave up waiting (timed out) is not our concern.
            let _ = tx.send(body.clone());
        }
    }
}

impl<B> Drop for Tee<B> {
    fn drop(&mut self) {
        // Dropping the senders tells the mirrors the copy will not come. A body whose last
        // frame was read, but whose end was never polled, was handed over already.
        self.txs.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::stream;
    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    type Chunks = StreamBody<stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

    fn chunks(parts: &[&'static [u8]]) -> Chunks {
        let frames: Vec<_> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(stream::iter(frames))
    }

    /// A body that yields through `Tee::poll_frame`.
    struct Teed(Tee<Chunks>);

    impl Body for Teed {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.get_mut().0.poll_frame(cx)
        }
    }

    fn tee(body: Chunks, mirrors: usize) -> (Teed, Vec<oneshot::Receiver<Bytes>>) {
        let (txs, rxs) = (0..mirrors).map(|_| oneshot::channel()).unzip();
        (Teed(Tee::new(body, txs)), rxs)
    }

    #[tokio::test]
    async fn the_primary_gets_every_chunk_and_each_mirror_the_whole_body() {
        let (body, rxs) = tee(chunks(&[b"ab", b"cd", b"e"]), 2);
        let primary = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(primary, "abcde");
        for rx in rxs {
            assert_eq!(rx.await.expect("the copy was handed over"), "abcde");
        }
    }

    #[tokio::test]
    async fn a_body_over_64_kib_streams_on_but_the_mirrors_are_dropped() {
        static BIG: [u8; MAX_MIRROR_BODY] = [7; MAX_MIRROR_BODY];
        let (body, rxs) = tee(chunks(&[&BIG, b"x"]), 1);
        let primary = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(primary.len(), MAX_MIRROR_BODY + 1);
        for rx in rxs {
            assert!(rx.await.is_err(), "no copy for a body over the limit");
        }
    }

    #[tokio::test]
    async fn exactly_64_kib_is_mirrored() {
        static FULL: [u8; MAX_MIRROR_BODY] = [9; MAX_MIRROR_BODY];
        let (body, rxs) = tee(chunks(&[&FULL[..1000], &FULL[1000..]]), 1);
        body.collect().await.expect("infallible");
        for rx in rxs {
            assert_eq!(rx.await.expect("copy").len(), MAX_MIRROR_BODY);
        }
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_drops_the_mirrors() {
        let (mut body, rxs) = tee(chunks(&[b"ab", b"cd"]), 1);
        let first = body.frame().await.expect("a frame").expect("infallible");
        assert_eq!(first.into_data().expect("data"), "ab");
        drop(body);
        for rx in rxs {
            assert!(rx.await.is_err());
        }
    }
}
