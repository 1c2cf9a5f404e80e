//! Graceful shutdown: a signal every connection watches, and a count of connections still open
//! (each holds a `Drain`; `DrainTx::drain` returns when the last is dropped).

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

impl Drain {
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
