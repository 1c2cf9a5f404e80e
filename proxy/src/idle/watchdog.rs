//! Deadlines for waits that almost never expire, one table per worker thread: the idle timeout
//! around the wait for a response head is minutes long, the wait microseconds.
//!
//! A tokio timer per wait linked every request into the timer wheel's list for its slot, and
//! arming and disarming it wrote the neighbouring entries: other requests' futures, gone from
//! the CPU's cache with a few hundred connections (~0.55 µs a request at `-c500`). Here arming
//! takes a slot of the thread's table (the one freed last) and disarming frees it; one sweeper
//! task per thread sleeps until the earliest deadline armed and wakes the waits that expired.

use std::{
    cell::RefCell,
    future::{poll_fn, Future},
    pin::{pin, Pin},
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll, Waker},
    time::Duration,
};

use tokio::time::Instant;

/// The wait outlived its deadline.
#[derive(Debug, PartialEq, Eq)]
pub struct Elapsed;

/// `fut` to its end, or [`Elapsed`] once `after` has passed first. No deadline is armed unless
/// `fut` has to wait.
pub fn timeout<F: Future>(after: Duration, fut: F) -> Timeout<F> {
    Timeout {
        fut,
        deadline: Instant::now() + after,
        armed: None,
    }
}

pin_project_lite::pin_project! {
    /// A named future rather than an `async fn`: the wrapped future (the whole exchange, a few
    /// kilobytes) is built in place instead of moved into a second state machine.
    pub struct Timeout<F> {
        #[pin]
        fut: F,
        deadline: Instant,
        armed: Option<Armed>,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.project();
        if let Poll::Ready(out) = me.fut.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match me.armed {
            None => *me.armed = Some(Armed::new(*me.deadline, cx.waker())),
            Some(a) if a.expired(cx.waker()) => return Poll::Ready(Err(Elapsed)),
            Some(_) => {}
        }
        Poll::Pending
    }
}

enum Slot {
    Free,
    Waiting { deadline: Instant, waker: Waker },
    Expired,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// No armed deadline is earlier (one disarmed since may be later): when the sweeper wakes.
    earliest: Option<Instant>,
    sweeper: Option<Waker>,
    /// A sweeper task runs for this table (it ends with its runtime).
    sweeping: bool,
}

#[derive(Default)]
struct Shared(Mutex<Table>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock left the table whole: every change is one assignment.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

thread_local! {
    static TABLE: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
}

/// A deadline armed in its thread's table; dropping it disarms it (from any thread).
struct Armed {
    table: Arc<Shared>,
    slot: usize,
}

impl Armed {
    fn new(deadline: Instant, waker: &Waker) -> Self {
        let table = TABLE.with_borrow_mut(|t| t.get_or_insert_with(Default::default).clone());
        let mut t = table.lock();
        let waiting = Slot::Waiting {
            deadline,
            waker: waker.clone(),
        };
        let slot = match t.free.pop() {
            Some(i) => {
                t.slots[i] = waiting;
                i
            }
            None => {
                t.slots.push(waiting);
                t.slots.len() - 1
            }
        };
        if !t.sweeping {
            t.sweeping = true;
            t.earliest = Some(deadline);
            tokio::spawn(sweep(table.clone()));
        } else if t.earliest.is_none_or(|e| deadline < e) {
            t.earliest = Some(deadline);
            if let Some(w) = &t.sweeper {
                w.wake_by_ref();
            }
        }
        drop(t);
        Self { table, slot }
    }

    /// Whether the deadline passed; if not, `waker` is the one to wake when it does.
    fn expired(&self, waker: &Waker) -> bool {
        let mut t = self.table.lock();
        match &mut t.slots[self.slot] {
            Slot::Expired => true,
            Slot::Waiting { waker: w, .. } => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                false
            }
            Slot::Free => unreachable!("an armed slot is freed only by its own drop"),
        }
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        t.slots[self.slot] = Slot::Free;
        t.free.push(self.slot);
    }
}

/// Marks the table unswept when the sweeper ends (its runtime shut down), so the next deadline
/// armed on this thread starts another.
struct Sweeping(Arc<Shared>);

impl Drop for Sweeping {
    fn drop(&mut self) {
        let mut t = self.0.lock();
        t.sweeping = false;
        t.sweeper = None;
    }
}

/// Sleeps until the table's earliest deadline, wakes every wait whose deadline passed, and
/// sleeps again until the next; idle (no timer) while nothing is armed.
async fn sweep(table: Arc<Shared>) {
    let _sweeping = Sweeping(table.clone());
    let mut sleep = pin!(tokio::time::sleep(Duration::ZERO));
    poll_fn(|cx| loop {
        let mut t = table.lock();
        if t.sweeper.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
            t.sweeper = Some(cx.waker().clone());
        }
        let Some(at) = t.earliest else {
            return Poll::Pending;
        };
        drop(t);
        if sleep.deadline() != at {
            sleep.as_mut().reset(at);
        }
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let now = Instant::now();
        let mut t = table.lock();
        let mut next: Option<Instant> = None;
        for slot in &mut t.slots {
            if let Slot::Waiting { deadline, waker } = slot {
                if *deadline <= now {
                    waker.wake_by_ref();
                    *slot = Slot::Expired;
                } else if next.is_none_or(|n| *deadline < n) {
                    next = Some(*deadline);
                }
            }
        }
        t.earliest = next;
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn armed_slots() -> usize {
        TABLE.with_borrow(|t| {
            t.as_ref().map_or(0, |t| {
                t.lock()
                    .slots
                    .iter()
                    .filter(|s| !matches!(s, Slot::Free))
                    .count()
            })
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_that_finishes_in_time_returns_its_output_and_disarms() {
        let out = timeout(100 * MS, async {
            tokio::time::sleep(60 * MS).await;
            7
        })
        .await;
        assert_eq!(out, Ok(7));
        assert_eq!(armed_slots(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_its_deadline_fails_at_the_deadline() {
        let start = Instant::now();
        let out = timeout(100 * MS, std::future::pending::<()>()).await;
        assert_eq!(out, Err(Elapsed));
        let took = start.elapsed();
        assert!((100 * MS..110 * MS).contains(&took), "{took:?}");
        assert_eq!(armed_slots(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_future_arms_nothing() {
        assert_eq!(timeout(MS, async { 1 }).await, Ok(1));
        // Each test runs on a thread of its own: a table here means something was armed.
        assert!(TABLE.with_borrow(Option::is_none), "a deadline was armed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_deadline_armed_later_fires_first_and_the_longer_still_fires() {
        let start = Instant::now();
        let long = tokio::spawn(timeout(300 * MS, std::future::pending::<()>()));
        tokio::task::yield_now().await;
        let short = timeout(50 * MS, std::future::pending::<()>()).await;
        assert_eq!(short, Err(Elapsed));
        assert!(start.elapsed() < 60 * MS, "{:?}", start.elapsed());
        assert_eq!(long.await.expect("task"), Err(Elapsed));
        assert!(start.elapsed() >= 300 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn many_waits_each_end_by_their_own_deadline_or_output() {
        let start = Instant::now();
        let tasks: Vec<_> = (1..=20u64)
            .map(|i| {
                tokio::spawn(timeout(ms(i * 10), async move {
                    // Odd ones finish just before their deadline, even ones never.
                    if i % 2 == 1 {
                        tokio::time::sleep(ms(i * 10 - 5)).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                    i
                }))
            })
            .collect();
        for (i, t) in (1..=20u64).zip(tasks) {
            let out = t.await.expect("task");
            if i % 2 == 1 {
                assert_eq!(out, Ok(i));
            } else {
                assert_eq!(out, Err(Elapsed));
                assert!(start.elapsed() >= ms(i * 10));
            }
        }
        assert_eq!(armed_slots(), 0);
    }

    #[test]
    fn a_new_runtime_on_the_same_thread_gets_a_sweeper_of_its_own() {
        for _ in 0..2 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            // tokio's own timer bounds the test should no sweeper run.
            let out = rt.block_on(async {
                let wait = timeout(10 * MS, std::future::pending::<()>());
                tokio::time::timeout(Duration::from_secs(1), wait).await
            });
            assert_eq!(out.expect("a sweeper fired the deadline"), Err(Elapsed));
        }
    }
}
