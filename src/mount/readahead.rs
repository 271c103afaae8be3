//! Read-ahead for the mount: the sequential streams within each open file, the window each one
//! is read ahead by, and the queue and threads of background fetches.
//!
//! One open file is often read in several places at once: pyarrow reading one column of a
//! Parquet file reads its column chunks (megabytes apart) in 128 KiB requests that alternate
//! between them, and a loader of several tensors may do the same. A single read position per
//! file would see only random reads there, and every request would wait for its own round trip.
//! So each handle keeps up to [`MAX_STREAMS`] streams ([`Streams`]), each where its reader has
//! got to: a read that starts within [`SEQUENTIAL_SLACK`] of a stream goes on it, any other
//! read starts a stream (the least recently used one goes). Once a stream has read
//! [`START_AFTER`] bytes it is read ahead by half what it has read (at least [`MIN_WINDOW`]),
//! so its window doubles as it proves sequential, up to [`MAX_WINDOW`] for a lone stream and
//! an equal share of [`SHARED_WINDOWS`] when several are being read ahead: a reader of a
//! header or of one tensor fetches little more than it reads, a scan never waits a round trip
//! per request, readers of several places are fetched for together, and what a handle holds
//! ahead of its readers (at most [`MAX_WINDOW`]) stays within the file's span cache.
//!
//! Bytes ahead are fetched by [`PREFETCH_THREADS`] threads from one queue for the whole mount
//! ([`Prefetcher`], at most [`QUEUE_JOBS`] ranges waiting), so the streams of a file are
//! fetched at the same time. A range queued next to or over one queued already for the same
//! file is merged with it (up to [`MAX_FETCH`]), and a read that must fetch takes a queued
//! range it touches into its own request: touching ranges go out as one request. A range that
//! does not fit in the queue is dropped, and its stream asks for it again on its next read.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::agent::reader::EndpointHandle;
use xet_client::pipeline::ranged::{RangedFile, SPAN_CACHE_BYTES};
use xet_protocol::util::sync::LockAnyway as _;

/// Streams followed per open file.
pub(crate) const MAX_STREAMS: usize = 16;

/// How far from where a stream has got to a read may start and still go on it: the kernel's
/// requests reach several threads and may be handled slightly out of order.
pub(crate) const SEQUENTIAL_SLACK: u64 = 1 << 20;

/// Bytes a stream reads before it is read ahead.
pub(crate) const START_AFTER: u64 = 512 << 10;

/// The smallest read-ahead window.
pub(crate) const MIN_WINDOW: u64 = 256 << 10;

/// The largest read-ahead window: of a lone stream (several share [`SHARED_WINDOWS`]). Below
/// the span cache of a file, so that what is fetched ahead is still there when its reader gets
/// to it.
pub(crate) const MAX_WINDOW: u64 = 16 << 20;

/// Read-ahead windows of the streams of one handle together, when several are read ahead at
/// once. Enough in flight together to keep a link busy, while the window each reader overshoots
/// its region by (a column chunk, a tensor) stays small.
pub(crate) const SHARED_WINDOWS: u64 = 8 << 20;

/// A stream not read in this many reads of its handle takes no share of [`SHARED_WINDOWS`]
/// (its reader is done with it).
pub(crate) const ACTIVE_WITHIN: u64 = 64;

const _: () = assert!(
    MAX_WINDOW < SPAN_CACHE_BYTES as u64
        && SHARED_WINDOWS <= MAX_WINDOW
        && MIN_WINDOW * MAX_STREAMS as u64 <= MAX_WINDOW
);

/// The largest background fetch (a window is fetched in pieces of at most this, at the same
/// time; queued ranges are merged up to this).
pub(crate) const MAX_FETCH: u64 = 4 << 20;

/// Threads fetching ahead, in the whole mount: fetches ahead at once, so at most this many
/// times [`MAX_FETCH`] bytes are on their way in the background.
pub(crate) const PREFETCH_THREADS: usize = 8;

/// Ranges waiting for a thread, in the whole mount.
pub(crate) const QUEUE_JOBS: usize = 16;

/// What a read asks of the read-ahead: the stream it went on, and the ranges to fetch ahead
/// of it (in order, each at most [`MAX_FETCH`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Advice {
    pub stream: u64,
    pub ahead: Vec<(u64, u64)>,
}

/// One sequential reader within a file.
#[derive(Debug, Clone)]
struct Stream {
    id: u64,
    /// Where the reader has got to (the furthest end of its reads).
    next: u64,
    /// Bytes read on this stream.
    run: u64,
    /// How far ahead fetches were asked for.
    ahead: u64,
    /// When it was last read (the streams' clock), for eviction.
    used: u64,
}

/// The streams of one handle (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Streams {
    streams: Vec<Stream>,
    clock: u64,
    ids: u64,
}

/// The window of a stream that has read `run` bytes, when windows are at most `cap`.
fn window(run: u64, cap: u64) -> u64 {
    if run < START_AFTER {
        0
    } else {
        (run / 2).max(MIN_WINDOW).min(cap)
    }
}

impl Streams {
    /// Records a read of `size` bytes at `offset` of a file of `file_size` bytes, and says
    /// what to fetch ahead of it. Reads of nothing (empty, or past the end) change nothing.
    pub fn read(&mut self, offset: u64, size: u64, file_size: u64) -> Advice {
        let end = offset.saturating_add(size).min(file_size);
        if offset >= end {
            return Advice::default();
        }
        self.clock += 1;
        let Some(i) = self.continued(offset, end) else {
            self.start(offset, end);
            return Advice::default();
        };
        let clock = self.clock;
        let s = &mut self.streams[i];
        s.run = s.run.saturating_add(end - offset);
        s.next = s.next.max(end);
        s.used = clock;
        let cap = self.cap();
        let s = &mut self.streams[i];
        let window = window(s.run, cap);
        let want = s.next.saturating_add(window).min(file_size);
        let from = s.ahead.max(s.next);
        // Fetch ahead once half a window is missing (or the rest of the file): fewer, larger
        // requests than one per read.
        let mut advice = Advice {
            stream: s.id,
            ahead: Vec::new(),
        };
        if window == 0 || want <= from || (want - from < window / 2 && want < file_size) {
            return advice;
        }
        s.ahead = want;
        let mut at = from;
        while at < want {
            let stop = at.saturating_add(MAX_FETCH).min(want);
            advice.ahead.push((at, stop));
            at = stop;
        }
        advice
    }

    /// The range from `start` of stream `id` was not queued: its next read asks again.
    pub fn not_queued(&mut self, id: u64, start: u64) {
        if let Some(s) = self.streams.iter_mut().find(|s| s.id == id) {
            s.ahead = s.ahead.min(start);
        }
    }

    /// The stream a read of `offset..end` goes on: the one whose end is nearest, within
    /// [`SEQUENTIAL_SLACK`] of the read.
    fn continued(&self, offset: u64, end: u64) -> Option<usize> {
        (self.streams.iter().enumerate())
            .filter(|(_, s)| {
                offset <= s.next.saturating_add(SEQUENTIAL_SLACK)
                    && s.next <= end.saturating_add(SEQUENTIAL_SLACK)
            })
            .min_by_key(|(_, s)| s.next.abs_diff(offset))
            .map(|(i, _)| i)
    }

    /// A new stream at `offset..end`, in place of the least recently used when there are
    /// [`MAX_STREAMS`] already.
    fn start(&mut self, offset: u64, end: u64) {
        if self.streams.len() >= MAX_STREAMS {
            if let Some(oldest) = (self.streams.iter().enumerate())
                .min_by_key(|(_, s)| s.used)
                .map(|(i, _)| i)
            {
                self.streams.swap_remove(oldest);
            }
        }
        self.ids += 1;
        self.streams.push(Stream {
            id: self.ids,
            next: end,
            run: end - offset.min(end),
            ahead: end,
            used: self.clock,
        });
    }

    /// The largest window now: [`MAX_WINDOW`] for a lone stream, else an equal share of
    /// [`SHARED_WINDOWS`] among the streams being read ahead (read lately).
    fn cap(&self) -> u64 {
        let active = (self.streams.iter())
            .filter(|s| s.run >= START_AFTER && self.clock - s.used <= ACTIVE_WITHIN)
            .count() as u64;
        if active <= 1 {
            MAX_WINDOW
        } else {
            (SHARED_WINDOWS / active).clamp(MIN_WINDOW, MAX_WINDOW)
        }
    }
}

/// Ranges of files waiting to be fetched, oldest first; `K` says which file.
#[derive(Debug)]
pub(crate) struct Pending<K> {
    jobs: VecDeque<(K, u64, u64)>,
    limit: usize,
}

impl<K: PartialEq> Pending<K> {
    pub fn new(limit: usize) -> Self {
        Self {
            jobs: VecDeque::new(),
            limit,
        }
    }

    /// Queues `start..end` of `key`, merged with the queued ranges of the same key it touches
    /// or overlaps (as long as the whole stays within [`MAX_FETCH`]), in the place of the
    /// first of them. False when it fits nowhere: the queue is full.
    pub fn push(&mut self, key: K, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        let (mut start, mut end) = (start, end);
        let mut place = None::<usize>;
        while let Some(i) = self.jobs.iter().position(|(k, s, e)| {
            *k == key && *s <= end && start <= *e && (*e).max(end) - (*s).min(start) <= MAX_FETCH
        }) {
            if let Some((_, s, e)) = self.jobs.remove(i) {
                start = start.min(s);
                end = end.max(e);
                place = Some(place.map_or(i, |p| p.min(i)));
            }
        }
        match place {
            Some(i) => self.jobs.insert(i.min(self.jobs.len()), (key, start, end)),
            None if self.jobs.len() < self.limit => self.jobs.push_back((key, start, end)),
            None => return false,
        }
        true
    }

    /// The oldest range.
    pub fn pop(&mut self) -> Option<(K, u64, u64)> {
        self.jobs.pop_front()
    }

    /// Takes out the first queued range of `key` that touches or overlaps `start..end`.
    pub fn take(&mut self, key: &K, start: u64, end: u64) -> Option<(u64, u64)> {
        let i = (self.jobs.iter()).position(|(k, s, e)| k == key && *s <= end && start <= *e)?;
        self.jobs.remove(i).map(|(_, s, e)| (s, e))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.jobs.len()
    }
}

/// A file to fetch ahead in, and where from. Two are the same when their file is.
#[derive(Clone)]
pub(crate) struct Target {
    pub file: Arc<RangedFile>,
    pub endpoint: EndpointHandle,
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
    }
}

/// The queue, and whether the threads should stop.
struct Queue {
    pending: Pending<Target>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a range is queued or the queue is closed.
    queued: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock_anyway()
    }
}

/// A fixed set of threads fetching queued ranges ahead of readers (see the module
/// documentation). The threads stop when it is dropped.
pub(crate) struct Prefetcher {
    shared: Arc<Shared>,
}

impl Prefetcher {
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                pending: Pending::new(QUEUE_JOBS),
                closed: false,
            }),
            queued: Condvar::new(),
        });
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("xet-read-ahead-{i}"))
                .spawn(move || run(&shared));
            if let Err(e) = spawned {
                tracing::warn!(
                    "cannot start a read-ahead thread ({e}); reads fetch for themselves"
                );
            }
        }
        Self { shared }
    }

    /// Queues a fetch of `start..end` of `target` (merged with queued ranges it touches);
    /// false when the queue is full.
    pub fn submit(&self, target: Target, start: u64, end: u64) -> bool {
        let queued = self.shared.lock().pending.push(target, start, end);
        if queued {
            self.shared.queued.notify_one();
        }
        queued
    }

    /// Takes out a queued range of `target` that touches `start..end`, for a read that is
    /// about to fetch those bytes itself to fetch in the same request.
    pub fn take(&self, target: &Target, start: u64, end: u64) -> Option<(u64, u64)> {
        self.shared.lock().pending.take(target, start, end)
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.queued.notify_all();
    }
}

/// A read-ahead thread: fetches queued ranges until the queue is closed.
fn run(shared: &Shared) {
    loop {
        let mut queue = shared.lock();
        let (target, start, end) = loop {
            if queue.closed {
                return;
            }
            if let Some(job) = queue.pending.pop() {
                break job;
            }
            queue = xet_protocol::util::sync::wait_anyway(&shared.queued, queue);
        };
        drop(queue);
        if let Err(e) = target.file.prefetch(target.endpoint.get(), start, end) {
            tracing::debug!(start, end, "read-ahead failed (a read will try again): {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    /// Bytes asked for ahead.
    fn total(ahead: &[(u64, u64)]) -> u64 {
        ahead.iter().map(|(s, e)| e - s).sum()
    }

    #[test]
    fn interleaved_sequential_readers_each_get_a_growing_window() {
        let size = 1 << 40;
        let regions: Vec<u64> = (0..8).map(|i| i * 20 * MIB + 12345).collect();
        let mut streams = Streams::default();
        let mut ahead_of: Vec<u64> = regions.clone();
        let mut windows: Vec<Vec<u64>> = vec![Vec::new(); regions.len()];
        let mut ids = vec![0u64; regions.len()];
        for step in 0..64u64 {
            for (r, &base) in regions.iter().enumerate() {
                let offset = base + step * 128 * KIB;
                let advice = streams.read(offset, 128 * KIB, size);
                if step == 0 {
                    assert!(advice.ahead.is_empty(), "a new stream is not read ahead");
                    continue;
                }
                if ids[r] == 0 {
                    ids[r] = advice.stream;
                }
                assert_eq!(advice.stream, ids[r], "region {r} stays on its stream");
                for &(s, e) in &advice.ahead {
                    assert_eq!(s, ahead_of[r].max(offset + 128 * KIB), "contiguous");
                    assert!(e > s && e - s <= MAX_FETCH);
                    ahead_of[r] = e;
                }
                if !advice.ahead.is_empty() {
                    windows[r].push(ahead_of[r] - (offset + 128 * KIB));
                }
            }
        }
        assert_eq!(streams.streams.len(), regions.len());
        let cap = SHARED_WINDOWS / regions.len() as u64;
        for (r, w) in windows.iter().enumerate() {
            assert!(w.len() >= 3, "region {r} was read ahead: {w:?}");
            assert!(w[0] <= MIN_WINDOW, "small at first: {w:?}");
            assert!(w.windows(2).all(|p| p[1] >= p[0]), "never shrinks: {w:?}");
            assert!(*w.last().unwrap_or(&0) >= 4 * w[0], "grows: {w:?}");
            assert!(w.iter().all(|&x| x <= cap), "within its share: {w:?}");
            // The reader (at 8 MiB into its region) is never waited on by more than a window.
            assert!(ahead_of[r] <= regions[r] + 8 * MIB + cap, "region {r}");
        }
    }

    #[test]
    fn a_lone_stream_grows_to_the_largest_window_in_few_requests() {
        let mut streams = Streams::default();
        let mut requests = 0;
        let mut asked = 0;
        let read = 128 * KIB;
        for i in 0..1024u64 {
            let advice = streams.read(i * read, read, u64::MAX);
            requests += usize::from(!advice.ahead.is_empty());
            asked += total(&advice.ahead);
        }
        let end = 1024 * read;
        assert!(
            asked >= end - START_AFTER,
            "everything after the start came ahead"
        );
        assert!(
            asked <= end + MAX_WINDOW,
            "at most a window past the reader"
        );
        assert!(requests < 64, "{requests} requests for 128 MiB");
        let s = &streams.streams[0];
        let ahead = s.ahead - s.next;
        assert!(
            (MAX_WINDOW / 2..=MAX_WINDOW).contains(&ahead),
            "at the largest window: {ahead}"
        );
    }

    #[test]
    fn a_stream_left_behind_takes_no_share() {
        let mut streams = Streams::default();
        let read = 128 * KIB;
        // Two streams at once: each within its share.
        for i in 0..64u64 {
            for base in [0, 100 * MIB] {
                for (s, e) in streams.read(base + i * read, read, 1 << 40).ahead {
                    assert!(e - s <= SHARED_WINDOWS / 2, "{s}-{e}");
                }
            }
        }
        // The first reader stops; the second goes on, and grows to the largest window.
        for i in 64..1024u64 {
            streams.read(100 * MIB + i * read, read, 1 << 40);
        }
        let s = (streams.streams.iter()).find(|s| s.next > 100 * MIB);
        assert!(s.is_some_and(|s| s.ahead - s.next > SHARED_WINDOWS));
    }

    #[test]
    fn random_reads_are_not_read_ahead() {
        let mut streams = Streams::default();
        // A fixed sequence of offsets far apart (an LCG), 128 KiB each.
        let mut x: u64 = 20_261_125;
        for _ in 0..10_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let offset = (x >> 20) % (1 << 40);
            let advice = streams.read(offset, 128 * KIB, 1 << 40);
            assert!(advice.ahead.is_empty(), "{offset}");
            assert!(streams.streams.len() <= MAX_STREAMS);
        }
        assert!(streams.streams.iter().all(|s| s.ahead <= s.next));
    }

    #[test]
    fn a_header_or_a_small_read_fetches_nothing_ahead() {
        let mut streams = Streams::default();
        for i in 0..(START_AFTER / (64 * KIB) - 1) {
            assert!(streams
                .read(i * 64 * KIB, 64 * KIB, 1 << 30)
                .ahead
                .is_empty());
        }
        // 1 MiB read in 128 KiB requests: asked ahead stays under 1 MiB more.
        let mut streams = Streams::default();
        let asked: u64 = (0..8)
            .map(|i| {
                total(
                    &streams
                        .read(5 * MIB + i * 128 * KIB, 128 * KIB, 1 << 30)
                        .ahead,
                )
            })
            .sum();
        assert!(asked <= MIB, "{asked}");
    }

    #[test]
    fn out_of_order_requests_stay_on_their_stream() {
        let mut streams = Streams::default();
        let read = 128 * KIB;
        for i in 0..16u64 {
            // Pairs swapped, as two threads may handle them.
            let at = (i ^ 1) * read;
            streams.read(at, read, 1 << 30);
        }
        assert_eq!(streams.streams.len(), 1);
        assert_eq!(streams.streams[0].next, 16 * read);
    }

    #[test]
    fn the_least_recently_used_stream_goes() {
        let mut streams = Streams::default();
        for i in 0..MAX_STREAMS as u64 {
            streams.read(i * 100 * MIB, 4096, 1 << 40);
        }
        // Stream 0 read again; then a new one: stream 1 goes.
        streams.read(4096, 4096, 1 << 40);
        streams.read(5000 * MIB, 4096, 1 << 40);
        assert_eq!(streams.streams.len(), MAX_STREAMS);
        assert!(streams.streams.iter().any(|s| s.next == 8192));
        assert!(!streams.streams.iter().any(|s| s.next == 100 * MIB + 4096));
    }

    #[test]
    fn odd_offsets_and_sizes_do_not_panic_or_ask_past_the_end() {
        let mut streams = Streams::default();
        let size = 10 * MIB + 7;
        for (offset, len) in [
            (0, 0),
            (size, 10),
            (size + 1, 0),
            (u64::MAX, u64::MAX),
            (u64::MAX - 5, 10),
            (size - 3, u64::MAX),
            (0, u64::MAX),
            (5, 1),
        ] {
            let advice = streams.read(offset, len, size);
            assert!(advice.ahead.iter().all(|&(s, e)| s < e && e <= size));
        }
        // Reading to the end asks for no byte past it, and once at the end, nothing more.
        let mut streams = Streams::default();
        let mut at = 0;
        while at < size {
            let advice = streams.read(at, 128 * KIB, size);
            assert!(advice.ahead.iter().all(|&(s, e)| s < e && e <= size));
            at += 128 * KIB;
        }
        assert!(streams.read(size - 1, 128 * KIB, size).ahead.is_empty());
        // A file of nothing.
        assert_eq!(streams.read(0, 4096, 0), Advice::default());
        assert!(streams.streams.len() <= MAX_STREAMS);
        streams.not_queued(12345, 0);
    }

    #[test]
    fn a_range_not_queued_is_asked_for_again() {
        let mut streams = Streams::default();
        let read = 128 * KIB;
        let mut i = 0;
        let first = loop {
            let advice = streams.read(i * read, read, 1 << 30);
            i += 1;
            if let Some(&(s, _)) = advice.ahead.first() {
                streams.not_queued(advice.stream, s);
                break s;
            }
        };
        let again = streams.read(i * read, read, 1 << 30);
        assert_eq!(
            again.ahead.first().map(|r| r.0),
            Some(first.max((i + 1) * read))
        );
    }

    #[test]
    fn touching_ranges_are_merged_in_the_queue() {
        let mut q = Pending::new(4);
        assert!(q.push(1, 0, 100));
        assert!(q.push(2, 100, 200), "another file: not merged");
        assert!(q.push(1, 100, 300), "touches the first: merged");
        assert!(q.push(1, 50, 150), "inside: merged");
        assert_eq!(q.len(), 2);
        // A range bridging two queued ones merges all three, in the place of the first.
        assert!(q.push(1, 1000, 2000));
        assert!(q.push(1, 300, 1000));
        assert_eq!(q.pop(), Some((1, 0, 2000)));
        assert_eq!(q.pop(), Some((2, 100, 200)));
        assert_eq!(q.pop(), None);
        // Not past MAX_FETCH.
        assert!(q.push(1, 0, MAX_FETCH));
        assert!(q.push(1, MAX_FETCH, MAX_FETCH + 10));
        assert_eq!(q.len(), 2);
        // A full queue takes no new range, but still merges.
        assert!(q.push(3, 0, 1));
        assert!(q.push(4, 0, 1));
        assert!(!q.push(5, 0, 1));
        assert!(q.push(4, 1, 2));
        assert_eq!(q.len(), 4);
        // Empty ranges are nothing to do.
        assert!(q.push(5, 10, 10));
        assert!(q.push(5, 10, 0));
        assert_eq!(q.len(), 4);
    }

    #[test]
    fn a_read_takes_the_queued_range_it_touches() {
        let mut q = Pending::new(8);
        q.push(1, 1000, 5000);
        q.push(2, 0, 1000);
        assert_eq!(q.take(&1, 0, 999), None, "apart");
        assert_eq!(q.take(&1, 0, 1000), Some((1000, 5000)), "touching");
        assert_eq!(q.take(&1, 0, 1000), None, "taken");
        assert_eq!(q.len(), 1);
    }
}
