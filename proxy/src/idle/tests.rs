//! The idle timeout under paused time: a stalled head or body is cut at the timeout, a stream
//! that keeps moving (either way) is not, however long it lasts.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::{sync::mpsc, time::Instant};

use super::*;
use crate::{
    http::body::BodyError,
    metrics::{install, Direction},
};

const MS: Duration = Duration::from_millis(1);

/// A body fed by a channel: pending until the next chunk, ended when the sender goes.
struct Chan(mpsc::Receiver<Bytes>);

impl Body for Chan {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|c| c.map(|c| Ok(Frame::data(c))))
    }
}

/// Sends `n` chunks, one every `every`, then ends the body.
fn drip(n: usize, every: Duration) -> Chan {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        for _ in 0..n {
            tokio::time::sleep(every).await;
            if tx.send(Bytes::from_static(b"drop")).await.is_err() {
                return;
            }
        }
    });
    Chan(rx)
}

fn idle_errors(service: &str) -> f64 {
    install()
        .render()
        .lines()
        .filter(|l| l.starts_with("weir_proxy_errors_total{"))
        .filter(|l| l.contains(&format!("service=\"{service}\"")))
        .filter(|l| l.contains("error=\"idle-timeout\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(start_paused = true)]
async fn a_response_body_that_stalls_is_cut_at_the_idle_timeout_and_counted() {
    install();
    let m = RouteMetrics::new(Direction::Outbound, "idle-stall", "r");
    let clock = Arc::new(IdleClock::new(500 * MS));
    // One chunk at 100 ms, then nothing.
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        tokio::time::sleep(100 * MS).await;
        let _ = tx.send(Bytes::from_static(b"first")).await;
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(tx);
    });
    let start = Instant::now();
    let mut body = Box::pin(IdleBody::new(Chan(rx), clock, Some(m)));
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.into_data().ok(), Some(Bytes::from_static(b"first")));
    let cut = body.frame().await.expect("an error, not the end");
    assert!(matches!(cut, Err(BodyError::Idle)), "{cut:?}");
    assert_eq!(start.elapsed(), 600 * MS, "500 ms after the last frame");
    assert_eq!(idle_errors("idle-stall"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_response_that_keeps_dripping_outlives_its_idle_timeout() {
    let clock = Arc::new(IdleClock::new(500 * MS));
    let start = Instant::now();
    let body = IdleBody::new(drip(10, 400 * MS), clock, None);
    let all = body.collect().await.expect("not cut").to_bytes();
    assert_eq!(all.len(), 40);
    assert_eq!(start.elapsed(), 4000 * MS, "eight times the idle timeout");
}

#[tokio::test(start_paused = true)]
async fn request_frames_keep_a_waiting_response_alive() {
    let clock = Arc::new(IdleClock::new(500 * MS));
    // The client uploads for 2 s in 400 ms steps; the response body answers after 2.2 s.
    let mut upload = Touched::new(drip(5, 400 * MS), clock.clone());
    tokio::spawn(async move { while upload.frame().await.is_some() {} });
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        tokio::time::sleep(2200 * MS).await;
        let _ = tx.send(Bytes::from_static(b"done")).await;
    });
    let body = IdleBody::new(Chan(rx), clock, None);
    let all = body.collect().await.expect("not cut").to_bytes();
    assert_eq!(all, Bytes::from_static(b"done"));
}

#[tokio::test(start_paused = true)]
async fn no_response_head_within_the_idle_timeout_answers_idle_timeout() {
    let start = Instant::now();
    let never = |_| std::future::pending::<Result<Response<ProxyBody>, ProxyError>>();
    let result = watch(Some(700 * MS), None, ProxyBody::empty(), never).await;
    assert!(
        matches!(result, Err(ProxyError::Timeout(TimeoutKind::Idle))),
        "{result:?}"
    );
    assert_eq!(start.elapsed(), 700 * MS);
}

#[tokio::test(start_paused = true)]
async fn without_an_idle_timeout_nothing_is_wrapped() {
    let answer = |_| async { Ok(Response::new(ProxyBody::full("hi"))) };
    let resp = watch(None, None, ProxyBody::empty(), answer)
        .await
        .expect("answered");
    assert!(matches!(resp.body(), ProxyBody::Full(_)));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_is_already_here_whole_is_not_watched() {
    // A streamed body that stalls is cut: e2e `idle.rs`, against a real upstream.
    let answer = |_| async { Ok(Response::new(ProxyBody::full("hi"))) };
    let resp = watch(Some(MS), None, ProxyBody::empty(), answer)
        .await
        .expect("answered");
    assert!(
        matches!(resp.body(), ProxyBody::Full(_)),
        "nothing can stall"
    );
}
