//! Reading byte ranges of a stored file without downloading it (`git xet cat --range`, `git xet
//! mount`).
//!
//! A read asks the endpoint for the reconstruction of just the bytes it needs (a ranged plan
//! names only the chunks that cover them, docs/cas-api.md §5.1), fetches those ranges (through
//! the endpoint's chunk cache, if it has one) and decodes them. Every decoded chunk is checked
//! against the file's chunk list, which the endpoint gives once per file
//! ([`xet_protocol::Endpoint::file_chunks`]) and which is itself checked: its Xet file hash must
//! be the file's. A reconstruction carries no chunk hashes, so without the list nothing could be
//! checked; an endpoint that cannot give it cannot be read in part.
//!
//! Decoded spans are kept in a small cache per file ([`SPAN_CACHE_BYTES`]), so that the reads of
//! a span the kernel splits into 128 KiB requests cost one fetch.

use std::sync::{Condvar, Mutex, MutexGuard};

use bytes::Bytes;

use crate::pipeline::download::{write_plan_into, DownloadError};
use crate::pipeline::prior::check_list;
use xet_format::{ChunkRef, FileHash};
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::{Endpoint, TargetError};

/// Bytes of decoded spans kept per file.
pub const SPAN_CACHE_BYTES: usize = 40 << 20;

/// Why part of a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RangedError {
    #[error("{what}: {source}")]
    Endpoint { what: String, source: TargetError },
    #[error(
        "{endpoint} cannot list the chunks of file {file}, so its parts cannot be checked: \
         download the object instead (`git lfs fetch`)"
    )]
    NoChunkList { endpoint: String, file: FileHash },
    #[error("{endpoint} does not know file {file}")]
    UnknownFile { endpoint: String, file: FileHash },
    #[error(
        "the chunk list {endpoint} gave for file {file} does not add up to it ({why}); the \
         server's record is damaged"
    )]
    BadChunkList {
        endpoint: String,
        file: FileHash,
        why: String,
    },
    #[error("bytes {start}-{end} of file {file}: {source}")]
    Download {
        file: FileHash,
        start: u64,
        end: u64,
        source: Box<DownloadError>,
    },
    #[error(
        "bytes {start}-{end} of file {file} do not match its chunk list at chunk {chunk}: the \
         stored data is damaged"
    )]
    Mismatch {
        file: FileHash,
        start: u64,
        end: u64,
        chunk: usize,
    },
}

/// A stored file, read in parts (see the module documentation).
pub struct RangedFile {
    file: FileHash,
    size: u64,
    chunks: Vec<ChunkRef>,
    /// `starts[i]`: the offset of chunk `i`; `starts[n]` is the size.
    starts: Vec<u64>,
    state: Mutex<State>,
    /// Signalled whenever a fetch ends (kept or failed).
    fetched: Condvar,
}

/// What is in memory, and what is being fetched.
#[derive(Default)]
struct State {
    cache: SpanCache,
    /// Ranges being fetched now: a read that needs one of them waits for it instead of
    /// fetching the same bytes again.
    in_flight: Vec<(u64, u64)>,
}

impl State {
    /// The first byte from `start` (at most `end`) that memory does not hold and no fetch
    /// is getting.
    fn first_missing(&self, start: u64, end: u64) -> u64 {
        let mut at = start;
        while at < end {
            let held = self
                .cache
                .spans
                .iter()
                .filter(|s| s.holds(at))
                .map(Span::end);
            let fetching = (self.in_flight.iter())
                .filter(|&&(s, e)| s <= at && at < e)
                .map(|&(_, e)| e);
            match held.chain(fetching).max() {
                Some(reach) => at = reach,
                None => return at,
            }
        }
        end
    }

    /// The first byte at or after `at` that memory holds or a fetch is getting.
    fn next_held(&self, at: u64) -> Option<u64> {
        let cached = self.cache.spans.iter().filter(|s| s.end() > at);
        let fetching = self.in_flight.iter().filter(|&&(_, e)| e > at);
        cached
            .map(|s| s.start.max(at))
            .chain(fetching.map(|&(s, _)| s.max(at)))
            .min()
    }

    fn overlaps_in_flight(&self, start: u64, end: u64) -> bool {
        self.in_flight.iter().any(|&(s, e)| s < end && start < e)
    }
}

/// Decoded spans, most recently used last.
#[derive(Default)]
struct SpanCache {
    spans: Vec<Span>,
    bytes: usize,
}

/// Bytes `start..start + data.len()` of the file.
struct Span {
    start: u64,
    data: Bytes,
    /// Whether a read has taken bytes from it (a span fetched ahead has not, yet).
    read: bool,
}

impl Span {
    fn end(&self) -> u64 {
        self.start.saturating_add(self.data.len() as u64)
    }

    fn holds(&self, at: u64) -> bool {
        self.start <= at && at < self.end()
    }
}

impl SpanCache {
    /// The index of the most recently used span holding byte `at`.
    fn holding(&self, at: u64) -> Option<usize> {
        self.spans.iter().rposition(|s| s.holds(at))
    }

    /// How far from `start` (at most to `end`) the spans hold every byte.
    fn covered_until(&self, start: u64, end: u64) -> u64 {
        let mut at = start;
        while at < end {
            match self
                .spans
                .iter()
                .filter(|s| s.holds(at))
                .map(Span::end)
                .max()
            {
                Some(r) => at = r,
                None => return at,
            }
        }
        end
    }

    /// Whether `span` is the one a read took bytes from last.
    fn last_read(&self, span: &Span) -> bool {
        self.spans.iter().rev().find(|s| s.read).map(|s| s.start) == Some(span.start)
    }

    /// Marks span `i` read and most recently used; returns its new index.
    fn touch(&mut self, i: usize) -> usize {
        let mut span = self.spans.remove(i);
        span.read = true;
        self.spans.push(span);
        self.spans.len() - 1
    }

    /// The bytes `start..end`, if the spans hold them all: a view of one span when one holds
    /// them (no copy), else pieced together from several.
    fn get(&mut self, start: u64, end: u64) -> Option<Bytes> {
        if self.covered_until(start, end) < end {
            return None;
        }
        if let Some(i) = self.holding(start) {
            let i = self.touch(i);
            let span = &self.spans[i];
            if end <= span.end() {
                let from = (start - span.start) as usize;
                return Some(span.data.slice(from..(end - span.start) as usize));
            }
        }
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut at = start;
        while at < end {
            let i = self.touch(self.holding(at)?);
            let span = &self.spans[i];
            let stop = end.min(span.end());
            out.extend_from_slice(
                &span.data[(at - span.start) as usize..(stop - span.start) as usize],
            );
            at = stop;
        }
        Some(Bytes::from(out))
    }

    /// Keeps `data` (bytes from `start`), then evicts down to [`SPAN_CACHE_BYTES`]: spans
    /// that were read first, least recently used first (a sequential reader is done with
    /// them, and the kernel keeps the pages it was given), then spans fetched ahead, oldest
    /// first, so that read-ahead is not thrown away before the reader gets to it.
    fn put(&mut self, start: u64, data: Vec<u8>) {
        self.bytes += data.len();
        self.spans.push(Span {
            start,
            data: Bytes::from(data),
            read: false,
        });
        while self.bytes > SPAN_CACHE_BYTES && self.spans.len() > 1 {
            // Never the span just kept, nor the one read from last (a reader is in it).
            let newest = self.spans.len() - 1;
            let spare = |i: usize, s: &Span| i != newest && !self.last_read(s);
            let victim = (self.spans.iter().enumerate())
                .position(|(i, s)| s.read && spare(i, s))
                .or_else(|| self.spans.iter().enumerate().position(|(i, s)| spare(i, s)))
                .unwrap_or(0);
            let old = self.spans.remove(victim);
            self.bytes -= old.data.len();
        }
    }

    fn clear(&mut self) {
        self.spans.clear();
        self.bytes = 0;
    }
}

/// Takes a range out of the in-flight list when its fetch ends, however it ends.
struct InFlight<'a> {
    file: &'a RangedFile,
    range: (u64, u64),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut state = self.file.lock();
        if let Some(i) = state.in_flight.iter().position(|r| *r == self.range) {
            state.in_flight.swap_remove(i);
        }
        drop(state);
        self.file.fetched.notify_all();
    }
}

impl RangedFile {
    /// Gets and checks the chunk list of `file` (`size` bytes) from `endpoint`.
    pub fn open(endpoint: &dyn Endpoint, file: FileHash, size: u64) -> Result<Self, RangedError> {
        let chunks = endpoint
            .file_chunks(&file)
            .map_err(|source| RangedError::Endpoint {
                what: format!("listing the chunks of file {file}"),
                source,
            })?
            .ok_or_else(|| RangedError::NoChunkList {
                endpoint: endpoint.describe(),
                file,
            })?;
        let bad = |why: String| RangedError::BadChunkList {
            endpoint: endpoint.describe(),
            file,
            why,
        };
        check_list(&chunks, &file, size).map_err(bad)?;
        let mut starts = Vec::with_capacity(chunks.len() + 1);
        let mut at = 0u64;
        for c in &chunks {
            starts.push(at);
            at = at.saturating_add(c.len);
        }
        starts.push(at);
        Ok(Self {
            file,
            size,
            chunks,
            starts,
            state: Mutex::new(State::default()),
            fetched: Condvar::new(),
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_anyway()
    }

    /// Up to `len` bytes from `offset` (fewer at the end of the file; none past it), each
    /// chunk checked. A read of bytes fetched before is served from memory.
    pub fn read(
        &self,
        endpoint: &dyn Endpoint,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, RangedError> {
        self.read_fetching(endpoint, offset, len, len)
    }

    /// [`RangedFile::read`], but when bytes must be fetched, fetch `fetch_len` bytes from
    /// where memory stops holding them (at least up to the end of the read): a reader that
    /// will want the following bytes gets them in the same request. A read that needs bytes
    /// another thread is fetching waits for that fetch instead of fetching them again.
    pub fn read_fetching(
        &self,
        endpoint: &dyn Endpoint,
        offset: u64,
        len: u64,
        fetch_len: u64,
    ) -> Result<Bytes, RangedError> {
        let end = offset.saturating_add(len).min(self.size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        // At most a few rounds: each one either returns, waits for a fetch that ends, or
        // fetches what is missing itself.
        let mut fetched_here = false;
        loop {
            let mut state = self.lock();
            if let Some(bytes) = state.cache.get(offset, end) {
                return Ok(bytes);
            }
            let from = state.cache.covered_until(offset, end);
            if state.overlaps_in_flight(from, end) {
                drop(xet_protocol::util::sync::wait_anyway(&self.fetched, state));
                continue;
            }
            if fetched_here {
                // Fetched and checked, and still not held: the span cache is too small for
                // this read (it cannot be: reads are at most a few MiB) or the bytes were
                // evicted at once by other readers; say so rather than loop.
                return Err(RangedError::Mismatch {
                    file: self.file,
                    start: offset,
                    end: end - 1,
                    chunk: self.chunk_at(from),
                });
            }
            // Up to the next bytes held in memory or being fetched by another thread, not
            // into them (they start at or after `end`, or this read would have them or wait).
            let wanted = offset.saturating_add(fetch_len).max(end);
            let wanted = state.next_held(end).map_or(wanted, |s| s.min(wanted));
            let (from, fetch_end) = self.whole_chunks(from, wanted);
            let guard = self.begin(&mut state, from, fetch_end);
            drop(state);
            self.fetch_now(endpoint, from, fetch_end, guard)?;
            fetched_here = true;
        }
    }

    /// Whether some byte of `start..end` (within the file) is neither in memory nor being
    /// fetched: a read of them would fetch.
    pub fn missing(&self, start: u64, end: u64) -> bool {
        let end = end.min(self.size);
        start < end && self.lock().first_missing(start, end) < end
    }

    /// Fetches bytes `start..end` in the background's name (read-ahead): each stretch that
    /// memory does not hold and no other fetch is getting, in turn.
    pub fn prefetch(
        &self,
        endpoint: &dyn Endpoint,
        start: u64,
        end: u64,
    ) -> Result<(), RangedError> {
        let end = end.min(self.size);
        let mut at = start;
        while at < end {
            let mut state = self.lock();
            // From the first byte neither held nor being fetched, up to the next that is: the
            // bytes around are someone else's (a range ahead overlaps the one before it by the
            // part of a chunk that fetches are widened to).
            let from = state.first_missing(at, end);
            if from >= end {
                return Ok(());
            }
            let stop = state.next_held(from).map_or(end, |s| s.min(end));
            let (from, stop) = self.whole_chunks(from, stop);
            let guard = self.begin(&mut state, from, stop);
            drop(state);
            self.fetch_now(endpoint, from, stop, guard)?;
            // `stop` is past `at`: it is at least the end of the stretch that started there.
            at = stop;
        }
        Ok(())
    }

    /// Drops the spans held in memory (the chunk list stays): when nothing has the file open.
    pub fn forget_spans(&self) {
        self.lock().cache.clear();
    }

    fn begin(&self, state: &mut State, start: u64, end: u64) -> InFlight<'_> {
        state.in_flight.push((start, end));
        InFlight {
            file: self,
            range: (start, end),
        }
    }

    /// `start..end` widened to whole chunks (what the server sends for it anyway), so that
    /// every fetched byte is kept and fetches of neighbouring reads line up.
    fn whole_chunks(&self, start: u64, end: u64) -> (u64, u64) {
        let end = end.min(self.size);
        if start >= end {
            return (start, end);
        }
        let first = self.chunk_at(start);
        let last = self.chunk_at(end - 1);
        (
            self.starts[first],
            self.starts[(last + 1).min(self.chunks.len())],
        )
    }

    /// The index of the chunk holding byte `offset`.
    fn chunk_at(&self, offset: u64) -> usize {
        self.starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// Fetches, checks and keeps the bytes `start..end` (and to the end of their last
    /// chunk); `in_flight` announces them to other readers until this ends.
    fn fetch_now(
        &self,
        endpoint: &dyn Endpoint,
        start: u64,
        end: u64,
        in_flight: InFlight<'_>,
    ) -> Result<(), RangedError> {
        let end = end.min(self.size);
        if start >= end {
            return Ok(());
        }
        let began = std::time::Instant::now();
        let plan = endpoint
            .reconstruction(&self.file, Some((start, end - 1)))
            .map_err(|source| RangedError::Endpoint {
                what: format!("planning bytes {start}-{} of file {}", end - 1, self.file),
                source,
            })?
            .ok_or_else(|| RangedError::UnknownFile {
                endpoint: endpoint.describe(),
                file: self.file,
            })?;
        let mut data = Vec::with_capacity((end - start) as usize + (128 << 10));
        let decoded = write_plan_into(endpoint, &plan, &mut data).map_err(|source| {
            RangedError::Download {
                file: self.file,
                start,
                end: end - 1,
                source: Box::new(source),
            }
        })?;
        let first = self.chunk_at(start);
        let mismatch = |chunk: usize| RangedError::Mismatch {
            file: self.file,
            start,
            end: end - 1,
            chunk,
        };
        for (i, c) in decoded.iter().enumerate() {
            if self.chunks.get(first + i) != Some(c) {
                return Err(mismatch(first + i));
            }
        }
        // The decoded chunks must reach the end of the range asked for.
        let reached = self.starts[(first + decoded.len()).min(self.chunks.len())];
        if reached < end || data.len() as u64 != reached - start {
            return Err(mismatch(first + decoded.len()));
        }
        tracing::trace!(
            file = %self.file,
            start,
            end,
            ms = began.elapsed().as_millis() as u64,
            "fetched"
        );
        let mut state = self.lock();
        state.cache.put(start, data);
        drop(state);
        drop(in_flight);
        // What was fetched went into the download chunk cache: keep it within its limit.
        endpoint.trim_cache();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn span(cache: &mut SpanCache, start: u64, len: usize) {
        cache.put(start, vec![(start % 251) as u8; len]);
    }

    #[test]
    fn eviction_keeps_read_ahead_and_the_span_being_read() {
        let mut cache = SpanCache::default();
        let n = SPAN_CACHE_BYTES / (8 * MIB);
        // A reader in span 0; spans 1.. fetched ahead and not read yet.
        span(&mut cache, 0, 8 * MIB);
        assert!(cache.get(100, 200).is_some());
        for i in 1..n {
            span(&mut cache, (i * 8 * MIB) as u64, 8 * MIB);
        }
        // One more span goes over the budget: the read span is spared as the one a reader
        // is in, so the oldest span fetched ahead goes ... unless a span read before exists.
        span(&mut cache, (n * 8 * MIB) as u64, 8 * MIB);
        assert!(cache.bytes <= SPAN_CACHE_BYTES);
        assert!(cache.covered_until(0, 1) == 1, "the span being read stays");
        // The reader moves on to span 2: span 0 is behind it now and goes first.
        assert!(cache
            .get((2 * 8 * MIB) as u64, (2 * 8 * MIB + 10) as u64)
            .is_some());
        span(&mut cache, ((n + 1) * 8 * MIB) as u64, 8 * MIB);
        assert_eq!(cache.covered_until(0, 1), 0, "the span read before went");
        for i in 2..=n + 1 {
            let at = (i * 8 * MIB) as u64;
            assert_eq!(cache.covered_until(at, at + 1), at + 1, "span {i} stays");
        }
    }

    #[test]
    fn reads_across_spans_are_pieced_together() {
        let mut cache = SpanCache::default();
        span(&mut cache, 0, 1000);
        span(&mut cache, 1000, 500);
        let got = cache.get(990, 1010).unwrap();
        let mut want = vec![0u8; 10];
        want.extend_from_slice(&[(1000 % 251) as u8; 10]);
        assert_eq!(&got[..], &want[..]);
        assert!(cache.get(1400, 1600).is_none(), "past what is held");
        assert_eq!(cache.covered_until(0, 2000), 1500);
    }

    #[test]
    fn fetches_stop_where_held_or_fetching_bytes_begin() {
        let mut state = State::default();
        state.cache.put(5000, vec![0; 1000]);
        state.in_flight.push((9000, 12_000));
        assert_eq!(state.next_held(0), Some(5000));
        assert_eq!(state.next_held(5500), Some(5500), "inside a held span");
        assert_eq!(state.next_held(6000), Some(9000));
        assert_eq!(state.next_held(10_000), Some(10_000), "inside a fetch");
        assert_eq!(state.next_held(12_000), None);
        assert_eq!(state.first_missing(0, 20_000), 0);
        assert_eq!(state.first_missing(5000, 20_000), 6000);
        assert_eq!(state.first_missing(9500, 20_000), 12_000, "past a fetch");
        assert_eq!(state.first_missing(9500, 11_000), 11_000, "nothing missing");
        assert!(state.overlaps_in_flight(8000, 9001));
        assert!(!state.overlaps_in_flight(8000, 9000));
    }
}
