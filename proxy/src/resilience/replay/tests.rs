//! The replay body under early retries at every chunk boundary, trailers and the size limit.

use std::{
    collections::VecDeque,
    convert::Infallible,
    sync::atomic::{AtomicUsize, Ordering},
    task::{Wake, Waker},
};

use http::HeaderValue;
use http_body_util::BodyExt;

use super::*;

/// A client body that hands out its frames one at a time, `Pending` (and a wake-up) before each
/// when `stutter` is set, like a socket that delivers one chunk per read.
struct Client {
    frames: VecDeque<Frame<Bytes>>,
    stutter: bool,
    ready: bool,
    hint: Option<u64>,
}

impl Client {
    fn new(chunks: &[Bytes], trailers: Option<HeaderMap>) -> Self {
        let mut frames: VecDeque<_> = chunks.iter().cloned().map(Frame::data).collect();
        frames.extend(trailers.map(Frame::trailers));
        Client {
            frames,
            stutter: false,
            ready: false,
            hint: None,
        }
    }
}

impl Body for Client {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.stutter && !self.ready {
            self.ready = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = false;
        Poll::Ready(self.frames.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        self.hint.map_or_else(SizeHint::new, SizeHint::with_exact)
    }
}

/// Counts wake-ups, so a test can tell a waiting retry was woken rather than forgotten.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll(
    body: &mut ReplayBody<Client>,
    waker: &Waker,
) -> Poll<Option<Result<Frame<Bytes>, ReplayError<Infallible>>>> {
    Pin::new(body).poll_frame(&mut Context::from_waker(waker))
}

/// Reads `n` data frames (looping through `Pending`), returning them.
async fn read_frames(body: &mut ReplayBody<Client>, n: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    while out.len() < n {
        let frame = body.frame().await.expect("a frame").expect("no error");
        out.push(frame.into_data().expect("a data frame"));
    }
    out
}

/// Reads to the end: the data frames and the trailers.
async fn read_rest(body: &mut ReplayBody<Client>) -> (Vec<Bytes>, Option<HeaderMap>) {
    let mut data = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame.expect("no error").into_data() {
            Ok(chunk) => data.push(chunk),
            Err(frame) => return (data, frame.into_trailers().ok()),
        }
    }
    (data, None)
}

fn chunks(n: usize, size: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(vec![b'a' + i as u8; size]))
        .collect()
}

fn trailers() -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("0"));
    t
}

#[tokio::test]
async fn the_first_attempt_streams_the_body_unchanged() {
    let body = chunks(4, 10);
    let mut first = ReplayBody::new(Client::new(&body, Some(trailers())));
    assert_eq!(read_rest(&mut first).await, (body, Some(trailers())));
}

#[tokio::test]
async fn a_retry_after_the_whole_body_was_read_replays_it_byte_for_byte_with_trailers() {
    let body = chunks(3, 100);
    let mut first = ReplayBody::new(Client::new(&body, Some(trailers())));
    let mut retry = first.clone();
    assert_eq!(
        read_rest(&mut first).await,
        (body.clone(), Some(trailers()))
    );
    drop(first);
    assert!(retry.is_replayable());
    assert_eq!(read_rest(&mut retry).await, (body, Some(trailers())));
}

/// Linkerd's 2026 bug: a retry started before the client's body was fully read lost or
/// duplicated a chunk at the seam between the replayed prefix and the rest.
#[tokio::test]
async fn an_early_retry_at_every_chunk_boundary_loses_and_duplicates_nothing() {
    for with_trailers in [false, true] {
        for stutter in [false, true] {
            let body = chunks(5, 7);
            let want = (body.clone(), with_trailers.then(trailers));
            for k in 0..=body.len() {
                let mut client = Client::new(&body, with_trailers.then(trailers));
                client.stutter = stutter;
                let mut first = ReplayBody::new(client);
                let mut retry = first.clone();
                assert_eq!(read_frames(&mut first, k).await, body[..k]);
                drop(first);
                assert_eq!(read_rest(&mut retry).await, want, "retry after {k} chunks");
            }
        }
    }
}

#[tokio::test]
async fn a_retry_of_a_retry_at_every_pair_of_boundaries_sees_the_whole_body() {
    let body = chunks(4, 3);
    for k in 0..=body.len() {
        for j in 0..=body.len() {
            let mut first = ReplayBody::new(Client::new(&body, Some(trailers())));
            let mut second = first.clone();
            read_frames(&mut first, k).await;
            drop(first);
            let mut third = second.clone();
            assert_eq!(read_frames(&mut second, j).await, body[..j]);
            drop(second);
            assert_eq!(
                read_rest(&mut third).await,
                (body.clone(), Some(trailers())),
                "second retry after {k} then {j} chunks"
            );
        }
    }
}

#[tokio::test]
async fn a_retry_polled_while_the_first_attempt_lives_takes_over_at_the_first_attempts_next_poll() {
    let body = chunks(4, 5);
    let mut first = ReplayBody::new(Client::new(&body, None));
    let mut retry = first.clone();
    assert_eq!(read_frames(&mut first, 2).await, body[..2]);

    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    assert!(
        poll(&mut retry, &waker).is_pending(),
        "the first attempt still holds the body"
    );
    assert!(matches!(
        poll(&mut first, &waker),
        Poll::Ready(Some(Err(ReplayError::Superseded)))
    ));
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "the waiting retry was woken"
    );
    assert!(matches!(poll(&mut first, &waker), Poll::Ready(None)));
    assert_eq!(read_rest(&mut retry).await, (body, None));
}

#[tokio::test]
async fn a_body_over_64_kib_becomes_unreplayable_but_still_streams_in_full() {
    let body = chunks(5, 16 * 1024);
    let mut first = ReplayBody::new(Client::new(&body, None));
    let mut retry = first.clone();
    read_frames(&mut first, 4).await;
    assert!(first.is_replayable(), "exactly 64 KiB still fits");
    read_frames(&mut first, 1).await;
    assert!(!first.is_replayable());
    assert_eq!(read_rest(&mut first).await, (vec![], None));
    drop(first);
    assert!(matches!(
        retry.frame().await,
        Some(Err(ReplayError::NotReplayable))
    ));
    assert!(retry.frame().await.is_none());
}

#[tokio::test]
async fn an_early_retry_that_outgrows_the_limit_keeps_streaming_but_cannot_be_retried_again() {
    let body = chunks(6, 16 * 1024);
    let mut first = ReplayBody::new(Client::new(&body, None));
    let mut second = first.clone();
    let mut third = second.clone();
    read_frames(&mut first, 2).await;
    drop(first);
    assert_eq!(read_rest(&mut second).await, (body, None));
    assert!(!second.is_replayable());
    drop(second);
    assert!(matches!(
        third.frame().await,
        Some(Err(ReplayError::NotReplayable))
    ));
}

#[tokio::test]
async fn a_body_announcing_more_than_64_kib_is_never_copied() {
    let body = chunks(1, 10);
    let mut client = Client::new(&body, None);
    client.hint = Some(MAX_REPLAY as u64 + 1);
    let mut first = ReplayBody::new(client);
    assert!(!first.is_replayable());
    assert_eq!(read_rest(&mut first).await, (body, None));
}

#[tokio::test]
async fn every_attempt_reports_the_end_and_the_size_of_the_whole_body() {
    let empty = ReplayBody::new(Client::new(&[], None));
    assert!(empty.is_end_stream());
    assert!(
        empty.clone().is_end_stream(),
        "a retried GET stays bodiless"
    );

    let body = chunks(2, 10);
    let mut client = Client::new(&body, None);
    client.hint = Some(20);
    let mut first = ReplayBody::new(client);
    let retry = first.clone();
    assert!(!first.is_end_stream());
    read_frames(&mut first, 1).await;
    assert_eq!(first.size_hint().exact(), Some(10));
    assert!(!first.is_end_stream());
    read_frames(&mut first, 1).await;
    assert!(
        first.is_end_stream(),
        "known after the last chunk, for END_STREAM"
    );
    assert_eq!(retry.size_hint().exact(), Some(20));
}

#[test]
fn the_proxy_body_can_be_wrapped_and_sent_across_threads() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<ReplayBody<crate::http::body::ProxyBody>>();
    send_sync::<ReplayError<hyper::Error>>();
}
