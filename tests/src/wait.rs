//! Poll a condition with a deadline: the only way the tests synchronise with other processes.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// Shortest and longest pause between two polls: fast on the happy path, cheap when it waits long.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Calls `f` until it yields `Some`, for at most `deadline`; `None` on timeout.
/// `f` is always called at least once, and once more right at the deadline.
pub async fn try_poll_until<T, F, Fut>(deadline: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        let now = Instant::now();
        if now >= end {
            return None;
        }
        tokio::time::sleep(pause.min(end - now)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Calls `f` until it yields `Some`; panics with `timed out after .. waiting for <what>`.
pub async fn poll_until<T, F, Fut>(deadline: Duration, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match try_poll_until(deadline, f).await {
        Some(v) => v,
        None => panic!("timed out after {deadline:?} waiting for {what}"),
    }
}

/// Waits until a TCP connect to `addr` succeeds; panics on timeout.
pub async fn wait_for_port(addr: SocketAddr, deadline: Duration) {
    poll_until(
        deadline,
        &format!("{addr} to accept connections"),
        || async { TcpStream::connect(addr).await.ok().map(drop) },
    )
    .await
}

/// Runs `fut` with a deadline; panics with `what` when it does not finish in time.
pub async fn within<T>(deadline: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(deadline, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {deadline:?}: {what}"),
    }
}
