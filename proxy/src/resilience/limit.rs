//! Concurrency limit with a bounded queue: `maxConcurrentRequests` in flight, at most
//! `maxPendingRequests` waiting (each for at most the failfast time), the rest shed at once.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::model;

/// How long a queued request waits for a slot when the policy sets no `failfast`.
pub const DEFAULT_FAILFAST: Duration = Duration::from_secs(1);

/// Why a request was turned away (answered 503 with this in `weir-proxy-error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Shed {
    /// Every slot busy and the queue full.
    #[error("too many pending requests")]
    QueueFull,
    /// Queued, but no slot freed up within the failfast time.
    #[error("no request slot freed up in time")]
    Timeout,
}

impl Shed {
    /// The `weir-proxy-error` value and metric label.
    pub fn name(self) -> &'static str {
        match self {
            Shed::QueueFull => "overloaded",
            Shed::Timeout => "queue-timeout",
        }
    }
}

/// A service's request limit, shared by every request to it.
#[derive(Debug)]
pub struct ConcurrencyLimit {
    /// `None`: no limit.
    slots: Option<Arc<Semaphore>>,
    max_concurrent: usize,
    max_pending: u32,
    pending: AtomicU32,
    failfast: Duration,
}

/// A slot; freed when dropped (keep it until the response body is done).
#[derive(Debug)]
pub struct Permit {
    _slot: Option<OwnedSemaphorePermit>,
}

impl ConcurrencyLimit {
    /// From the service's policy. `maxPendingRequests` left out means no queue: a request over
    /// `maxConcurrentRequests` is shed at once. Without `maxConcurrentRequests` there is no limit.
    pub fn new(policy: &model::Policy) -> Self {
        Self {
            slots: policy
                .max_concurrent_requests
                .map(|n| Arc::new(Semaphore::new(n as usize))),
            max_concurrent: policy.max_concurrent_requests.unwrap_or(0) as usize,
            max_pending: policy.max_pending_requests.unwrap_or(0),
            pending: AtomicU32::new(0),
            failfast: policy.failfast.map_or(DEFAULT_FAILFAST, |d| d.0),
        }
    }

    /// Takes a slot: at once if one is free (an atomic CAS), else waits in the bounded queue
    /// (tokio's semaphore is fair: first queued, first served) for at most the failfast time.
    pub async fn acquire(&self) -> Result<Permit, Shed> {
        let Some(slots) = &self.slots else {
            return Ok(Permit { _slot: None });
        };
        if let Ok(p) = Arc::clone(slots).try_acquire_owned() {
            return Ok(Permit { _slot: Some(p) });
        }
        let queued = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_pending).then_some(n + 1)
            });
        if queued.is_err() {
            return Err(Shed::QueueFull);
        }
        let _leave = Leave(&self.pending);
        match tokio::time::timeout(self.failfast, Arc::clone(slots).acquire_owned()).await {
            Ok(Ok(p)) => Ok(Permit { _slot: Some(p) }),
            // The semaphore is never closed; treat it as no slot.
            Ok(Err(_)) | Err(_) => Err(Shed::Timeout),
        }
    }

    /// Requests holding a slot.
    pub fn in_flight(&self) -> usize {
        self.slots.as_ref().map_or(0, |s| {
            self.max_concurrent.saturating_sub(s.available_permits())
        })
    }

    /// Requests waiting for a slot.
    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::Acquire)
    }
}

/// Leaves the queue however the wait ends (slot, timeout, or the request cancelled).
struct Leave<'a>(&'a AtomicU32);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dur;

    fn limit(concurrent: u32, pending: Option<u32>) -> Arc<ConcurrencyLimit> {
        Arc::new(ConcurrencyLimit::new(&model::Policy {
            max_concurrent_requests: Some(concurrent),
            max_pending_requests: pending,
            failfast: Some(Dur(Duration::from_millis(100))),
            ..Default::default()
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn requests_over_the_limit_without_a_queue_are_shed_at_once() {
        let l = limit(2, None);
        let _a = l.acquire().await.expect("slot 1");
        let _b = l.acquire().await.expect("slot 2");
        assert_eq!(l.in_flight(), 2);
        let start = tokio::time::Instant::now();
        assert_eq!(l.acquire().await.err(), Some(Shed::QueueFull));
        assert_eq!(start.elapsed(), Duration::ZERO, "shed without waiting");
    }

    #[tokio::test(start_paused = true)]
    async fn queued_requests_take_freed_slots_and_the_queue_is_bounded() {
        let l = limit(1, Some(2));
        let held = l.acquire().await.expect("slot");
        let first = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        let second = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(l.pending(), 2);
        assert_eq!(
            l.acquire().await.err(),
            Some(Shed::QueueFull),
            "queue of 2 is full"
        );

        tokio::time::advance(Duration::from_millis(50)).await;
        drop(held);
        assert!(first.await.expect("task").is_ok());
        assert!(
            second.await.expect("task").is_ok(),
            "freed again when the first finished"
        );
        assert_eq!(l.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_request_gives_up_after_the_failfast_time() {
        let l = limit(1, Some(10));
        let _held = l.acquire().await.expect("slot");
        let start = tokio::time::Instant::now();
        assert_eq!(l.acquire().await.err(), Some(Shed::Timeout));
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert_eq!(l.pending(), 0, "left the queue");
    }

    #[tokio::test(start_paused = true)]
    async fn without_max_concurrent_requests_nothing_is_limited() {
        let l = ConcurrencyLimit::new(&model::Policy::default());
        let permits: Vec<_> =
            futures_util::future::join_all((0..10_000).map(|_| l.acquire())).await;
        assert!(permits.iter().all(Result::is_ok));
    }
}
