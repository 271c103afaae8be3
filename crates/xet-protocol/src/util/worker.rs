//! Which threads are an async runtime's workers, so that blocking work that lands on one is
//! caught instead of stalling every connection that worker serves: a runtime whose workers
//! call [`mark_async_worker`] when they park (tokio's `on_thread_park`, which its blocking pool
//! never runs), and code that blocks (file system calls, database transactions, waiting for
//! object storage) calls [`expect_blocking_thread`] first. A debug build (the tests) panics
//! there, naming what blocked; a release build logs the mistake once and goes on.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static ASYNC_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as an async worker (for `on_thread_park`).
pub fn mark_async_worker() {
    ASYNC_WORKER.with(|w| w.set(true));
}

/// Whether the calling thread was marked an async worker.
pub fn on_async_worker() -> bool {
    ASYNC_WORKER.with(Cell::get)
}

/// Set once a release build has logged blocking work on an async worker.
static LOGGED: AtomicBool = AtomicBool::new(false);

/// Says that `what` is about to block the calling thread: on an async worker, a debug build
/// panics and a release build logs an error (once per process).
pub fn expect_blocking_thread(what: &str) {
    if !on_async_worker() {
        return;
    }
    debug_assert!(
        false,
        "{what} blocks, and was called on an async worker thread: call it through \
         spawn_blocking"
    );
    if !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::error!(
            what,
            "blocking work on an async worker thread (a missing spawn_blocking); it goes on, \
             but other requests on this worker wait"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_marked_when_they_park_and_the_blocking_pool_is_not() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .on_thread_park(mark_async_worker)
            .build()
            .unwrap();
        let (worker, blocking) = runtime.block_on(async {
            // The worker parks while this sleeps.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let worker = tokio::spawn(async {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                on_async_worker()
            })
            .await
            .unwrap();
            let blocking = tokio::task::spawn_blocking(on_async_worker).await.unwrap();
            (worker, blocking)
        });
        assert!(worker, "a worker thread is marked");
        assert!(!blocking, "a blocking-pool thread is not");
        assert!(!on_async_worker(), "nor is this test's thread");
        // Off a worker, blocking work is fine.
        expect_blocking_thread("a test");
    }

    #[test]
    #[cfg(debug_assertions)]
    fn blocking_on_a_worker_panics_in_a_debug_build() {
        let caught = std::thread::spawn(|| {
            mark_async_worker();
            std::panic::catch_unwind(|| expect_blocking_thread("reading a file")).unwrap_err()
        })
        .join()
        .unwrap();
        let text = caught.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            text.contains("reading a file") && text.contains("spawn_blocking"),
            "{text}"
        );
    }
}
