//! Runs a test's cases a few at a time on the test's runtime, each result kept with its case.

use std::future::Future;

use tokio::task::JoinSet;

/// Runs `f` on every item, at most `at_once` at a time; the results in the items' order.
pub async fn each<I, O, F, Fut>(items: impl IntoIterator<Item = I>, at_once: usize, f: F) -> Vec<O>
where
    F: Fn(I) -> Fut,
    Fut: Future<Output = O> + Send + 'static,
    O: Send + 'static,
{
    let mut running = JoinSet::new();
    let mut done = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        if running.len() >= at_once {
            done.push(
                running
                    .join_next()
                    .await
                    .expect("a task")
                    .expect("case task"),
            );
        }
        let fut = f(item);
        running.spawn(async move { (i, fut.await) });
    }
    while let Some(r) = running.join_next().await {
        done.push(r.expect("case task"));
    }
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}
