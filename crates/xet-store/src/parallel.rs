//! Work on a few threads at once, for the store's many small requests to object storage
//! (registering shards from the bucket, deleting what a checkpoint covers): each item waits on
//! the network, so a handful in flight go several times faster than one at a time.

use xet_protocol::util::sync::LockAnyway as _;

/// `f` of each of `items` on up to `threads` threads; the results in the order of `items`.
pub(crate) fn map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let done = std::sync::Mutex::new(&mut results);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let result = f(item);
                done.lock_anyway()[i] = Some(result);
            });
        }
    });
    // Every index was taken by exactly one thread, which stored its result.
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_in_the_order_of_the_items() {
        let items: Vec<u32> = (0..100).collect();
        for threads in [0, 1, 4, 200] {
            let out = super::map(&items, threads, |x| x * 2);
            assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        }
    }
}
