//! Graceful shutdown: a signal every connection watches, and a count of connections still open
//! (each holds a `Drain`; `DrainTx::drain` returns when the last is dropped).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::sync::watch;

/// Held by every connection task; tells it when to start draining.
#[derive(Debug, Clone)]
pub struct Drain {
    rx: watch::Receiver<bool>,
}

/// Starts the drain and waits for it.
#[derive(Debug)]
pub struct DrainTx {
    tx: watch::Sender<bool>,
}

/// A new drain pair.
pub fn channel() -> (DrainTx, Drain) {
    let (tx, rx) = watch::channel(false);
    (DrainTx { tx }, Drain { rx })
}

/// A wait for shutdown made to be polled often (a connection loop's, between every two
/// requests): its first poll registers for the signal, and later ones only read the flag. A poll
/// of the channel's own wait cost ~200 instructions each time.
pub struct Shutdown {
    wait: Pin<Box<dyn Future<Output = ()> + Send>>,
    drain: Drain,
    registered: bool,
}

impl Future for Shutdown {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.registered {
            self.registered = true;
            return self.wait.as_mut().poll(cx);
        }
        // The registered wait wakes this task when the signal comes. The waker stays valid:
        // a `Shutdown` is polled by the one task that made it.
        if self.drain.is_draining() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drain {
    /// A [`Shutdown`] wait for the task that calls it.
    pub fn shutdown(&self) -> Shutdown {
        let mut d = self.clone();
        Shutdown {
            wait: Box::pin(async move { d.signaled().await }),
            drain: self.clone(),
            registered: false,
        }
    }

    /// Resolves once shutdown has begun.
    pub async fn signaled(&mut self) {
        let _ = self.rx.wait_for(|draining| *draining).await;
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        *self.rx.borrow()
    }
}

impl DrainTx {
    /// Signals every holder and waits until all have dropped their `Drain`.
    pub async fn drain(self) {
        let _ = self.tx.send(true);
        self.tx.closed().await;
    }

    /// Signals without waiting.
    pub fn signal(&self) {
        let _ = self.tx.send(true);
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        *self.tx.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `f` once, in this task.
    async fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
    }

    #[tokio::test]
    async fn a_shutdown_wait_polled_before_the_signal_is_woken_by_it_and_cheap_to_poll_again() {
        let (tx, drain) = channel();
        let mut wait = drain.shutdown();
        // Registered and polled again before the signal, as a connection between requests.
        assert!(poll_once(&mut wait).await.is_pending());
        assert!(poll_once(&mut wait).await.is_pending());
        let signal = async {
            tokio::task::yield_now().await;
            tx.signal();
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            tokio::join!(&mut wait, signal)
        })
        .await
        .expect("the signal wakes the waiting task");
        assert!(poll_once(&mut wait).await.is_ready(), "and it stays ready");
    }

    #[tokio::test]
    async fn drain_waits_for_every_holder() {
        let (tx, drain) = channel();
        let mut held = drain.clone();
        drop(drain);
        let waiter = tokio::spawn(async move {
            held.signaled().await;
            // the holder finishes its work, then lets go
            drop(held);
        });
        tx.drain().await;
        waiter.await.expect("holder task");
    }
}
