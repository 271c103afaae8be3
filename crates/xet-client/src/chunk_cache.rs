//! The download chunk cache: xorb byte ranges fetched from a remote CAS, kept on disk so that a
//! later download (the next version of an edited file, an older version in the same
//! `git lfs fetch --all`, another agent of the same fetch) reads the chunks it shares with
//! them locally instead of fetching them again.
//!
//! Layout, under `<cache root>/chunks/<endpoint key>/` (the key is [`ShardCache::endpoint_key`]'s):
//!
//! | path | what |
//! |---|---|
//! | `<xorb hex>/<c0>-<c1>-<b0>` | chunks `c0..c1` of the xorb exactly as stored (8-byte chunk headers and payloads), which start at byte `b0` of the xorb |
//! | `<xorb hex>/.lock` | held (`flock`) while a process reads or fills this xorb's entries |
//!
//! A chunk's stored bytes never change within a xorb (the xorb hash covers them), so the bytes
//! of any chunk range can be put together from entries and fetched pieces, and equal what the
//! server would have sent for that range. [`ChunkCache::read_through`] is asked for a fetch
//! range; under the xorb's lock it takes what the entries hold, fetches only the gaps between
//! them (each gap ends on chunk boundaries whose byte offsets are known: the fetch range's own
//! ends, or an entry's), stores each fetched gap as a new entry and returns the whole range.
//! Agents fetching versions of one file at once therefore wait for each other per xorb and each
//! range crosses the network once. Downloads stream instead of gathering
//! (`ChunkCache::stream_through_keeping`), so that a download keeps a piece of a range in
//! memory, not the range (up to a 64 MiB xorb per download thread): a range the cache holds
//! nothing of (a first download) is handed on as it arrives and written into its new entry on
//! the way; of a range it holds part of (an older version after the newest), the gaps are
//! streamed into new entries under the lock, and the range is then read out of the entries'
//! files a block at a time once the lock is let go.
//!
//! **Never trusted blindly.** What comes out of the cache is decoded like fetched bytes: every
//! chunk header is checked here, every chunk hash is recomputed by the decoder, and the whole
//! file's Xet hash is checked before git-lfs gets the file. When that fails, the caller
//! [`forget`](ChunkCache::forget)s the file's xorbs and fetches again without the cache. An
//! entry whose name, length or chunk headers do not add up is deleted when it is found.
//!
//! **Bounded.** [`ChunkCache::prune`] deletes the least recently used entries until the cache
//! is under its limit (`GIT_XET_CHUNK_CACHE_MAX_SIZE`, [`DEFAULT_MAX_BYTES`] by default; `0`
//! turns the cache off). Entries are written to a temporary file and renamed into place and
//! are not synced: losing one to a crash only costs a fetch.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::shard_cache::{CacheConfig, ShardCache};
use xet_format::xorb::{ChunkHeader, CHUNK_HEADER_LEN};
use xet_format::XorbHash;
use xet_protocol::target::{Origin, RangeSink, TargetError};
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::FetchRange;

/// The cache's part of the cache root.
pub const CHUNKS_SUBDIR: &str = "chunks";
/// The default limit per endpoint: enough for the shared chunks of a few versions of a large
/// model, small next to the `.git/lfs/objects` copies of them.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// Ranges smaller than this bypass the cache (no lock, no listing, no entry file): a small
/// file's whole download costs less than the cache's bookkeeping, and is rarely shared.
pub(crate) const MIN_CACHED_RANGE: u64 = 256 << 10;
/// How long to wait for another process that holds a xorb's lock before fetching without the
/// cache (a fetch of one range takes seconds; a stuck holder must not stop a download).
pub(crate) const LOCK_PATIENCE: Duration = Duration::from_secs(600);

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct ChunkCache {
    dir: PathBuf,
    max_bytes: u64,
    patience: Duration,
    min_range: u64,
}

/// Why a range goes without the cache ([`ChunkCache::enter`]).
enum Bypass {
    /// Smaller than the cache keeps.
    Small,
    Because(String),
}

/// The file name of the entry holding exactly `range`: `<c0>-<c1>-<b0>`.
fn entry_name(range: &FetchRange) -> String {
    format!(
        "{}-{}-{}",
        range.chunks.start,
        range.chunks.end,
        range.bytes.start()
    )
}

/// One entry file: chunks `chunks` of a xorb, starting at byte `start` of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    chunks: std::ops::Range<u32>,
    start: u64,
    len: u64,
    path: PathBuf,
}

/// Where the bytes of a piece of the range come from.
enum Piece {
    /// Chunks `chunks` out of this entry.
    Entry(Entry, std::ops::Range<u32>),
    /// These bytes, fetched now (chunks exactly as in the range).
    Fetched(Vec<u8>),
}

/// What [`ChunkCache::fill_gaps`] made of a range.
enum Filled {
    /// The range's pieces in order, and how many bytes were fetched for them.
    Pieces(Vec<Piece>, u64),
    /// The whole range, fetched at once, and its length (a URL that serves its whole range
    /// only).
    Whole(Vec<u8>, u64),
    /// Entries and the range's byte offsets do not add up.
    Inconsistent,
}

impl ChunkCache {
    /// The cache of `endpoint` (a CAS URL) under the root of `config`, with its chunk limit;
    /// `None` when the limit is 0 (turned off). Creates nothing until an entry is stored.
    pub fn for_endpoint(config: &CacheConfig, endpoint: &str) -> Option<ChunkCache> {
        if config.chunk_max_bytes == 0 {
            return None;
        }
        let dir = config
            .root
            .join(CHUNKS_SUBDIR)
            .join(ShardCache::endpoint_key(endpoint));
        Some(ChunkCache::open(&dir).with_max_bytes(config.chunk_max_bytes))
    }

    /// The cache in `dir`, limited to [`DEFAULT_MAX_BYTES`].
    pub fn open(dir: &Path) -> ChunkCache {
        ChunkCache {
            dir: dir.to_path_buf(),
            max_bytes: DEFAULT_MAX_BYTES,
            patience: LOCK_PATIENCE,
            min_range: MIN_CACHED_RANGE,
        }
    }

    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Caches ranges of at least `bytes` (default [`MIN_CACHED_RANGE`]).
    #[cfg(test)]
    pub(crate) fn with_min_range(mut self, bytes: u64) -> Self {
        self.min_range = bytes;
        self
    }

    /// The size the cache is pruned down to.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn xorb_dir(&self, xorb: &XorbHash) -> PathBuf {
        self.dir.join(xorb.to_hex())
    }

    /// Whether the cache may hold chunks of `xorb` (its directory exists): a read that will
    /// not keep what it fetches can go straight to the server when it does not.
    pub(crate) fn may_hold(&self, xorb: &XorbHash) -> bool {
        self.xorb_dir(xorb).exists()
    }

    /// The bytes of `range` of `xorb`: from the cache where it holds them, the rest from
    /// `fetch` (called with sub-ranges of `range`, same URL), which is then cached. Falls back
    /// to fetching the whole range when the cache cannot be used (logged, never an error of
    /// its own). Returns the bytes and how many of them were fetched.
    pub fn read_through(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        fetch: &dyn Fn(&FetchRange) -> Result<Vec<u8>, TargetError>,
    ) -> Result<(Vec<u8>, u64), TargetError> {
        self.read_through_keeping(xorb, range, true, fetch)
            .map(|(bytes, origin)| (bytes, origin.fetched))
    }

    /// [`ChunkCache::read_through`], saying which chunks of the range came from the cache;
    /// with `keep` false, what is fetched is not stored (a download nothing else on this
    /// machine is expected to want: it still uses the entries there are, and waits for a
    /// process filling them).
    pub(crate) fn read_through_keeping(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
        fetch: &dyn Fn(&FetchRange) -> Result<Vec<u8>, TargetError>,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        let fetch_all = || -> Result<(Vec<u8>, Origin), TargetError> {
            let bytes = fetch(range)?;
            let n = bytes.len() as u64;
            Ok((bytes, Origin::fetched(n)))
        };
        let whole = |why: &dyn std::fmt::Display| {
            tracing::debug!(%xorb, "fetching without the chunk cache: {why}");
            fetch_all()
        };
        let (dir, lock) = match self.enter(xorb, range) {
            Ok(entered) => entered,
            Err(Bypass::Small) => return fetch_all(),
            Err(Bypass::Because(why)) => return whole(&why),
        };
        let result = self.read_locked(&dir, range, keep, fetch);
        drop(lock);
        match result {
            Ok(Some(done)) => Ok(done),
            Ok(None) => whole(&"its entries do not add up (deleted)"),
            Err(e) => Err(e),
        }
    }

    /// [`ChunkCache::read_through_keeping`] handing the bytes to `sink` as they arrive
    /// ([`xet_protocol::XorbSource::stream_xorb_range`]'s contract), so that no more than a
    /// piece of the range is in memory: when the cache holds nothing of the range (a first
    /// download), it is streamed from `stream` and, with `keep`, written into a new entry on
    /// the way; when it holds part of it, with `keep`, the gaps are streamed into new entries
    /// and the range read out of the entries (`stream_partly_held`). Otherwise (not `keep`, or
    /// a URL whose signature covers its Range) it is put together whole from the entries and
    /// `fetch` as [`ChunkCache::read_through_keeping`] does, and handed over at once.
    pub(crate) fn stream_through_keeping(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
        stream: &dyn Fn(&FetchRange, &mut RangeSink<'_>) -> Result<Origin, TargetError>,
        fetch: &dyn Fn(&FetchRange) -> Result<Vec<u8>, TargetError>,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        let (dir, lock) = match self.enter(xorb, range) {
            Ok(entered) => entered,
            Err(Bypass::Small) => return stream(range, sink),
            Err(Bypass::Because(why)) => {
                tracing::debug!(%xorb, "streaming without the chunk cache: {why}");
                return stream(range, sink);
            }
        };
        let (c, d) = (range.chunks.start, range.chunks.end);
        let (s, e) = (*range.bytes.start(), *range.bytes.end());
        let mut offsets: BTreeMap<u32, u64> = BTreeMap::from([(c, s), (d, e + 1)]);
        let well_formed = c < d && s <= e;
        let entries = if well_formed {
            usable_entries(&dir, c..d, &mut offsets)
        } else {
            Vec::new()
        };
        if well_formed && entries.is_empty() {
            let streamed = self.stream_into_entry(&dir, range, keep, stream, sink);
            drop(lock);
            return streamed;
        }
        let exact = range.url.as_deref().is_some_and(crate::url::signs_range);
        if well_formed && keep && !exact {
            let parts = Parts {
                dir: &dir,
                range,
                entries: &entries,
                offsets: &offsets,
            };
            return match self.stream_partly_held(parts, lock, stream, sink)? {
                Some(origin) => Ok(origin),
                None => {
                    tracing::debug!(%xorb, "streaming without the chunk cache: its entries do not add up");
                    stream(range, sink)
                }
            };
        }
        // Under the same lock: the entries just listed are still the ones there.
        let result = self.read_locked(&dir, range, keep, fetch);
        drop(lock);
        match result? {
            Some((bytes, origin)) => {
                xet_protocol::target::hand_whole(bytes, sink);
                Ok(origin)
            }
            None => {
                tracing::debug!(%xorb, "streaming without the chunk cache: its entries do not add up (deleted)");
                stream(range, sink)
            }
        }
    }

    /// A range the cache holds part of, handed to `sink` without gathering it: under `lock`,
    /// each gap between the entries is streamed from `stream` into a new entry; then the lock
    /// is let go (other downloads of the xorb need not wait for this one's decoding) and the
    /// range is read out of the entries' files a block at a time. `None` when the entries do
    /// not add up (those at fault are deleted; the caller streams the range without the
    /// cache). The sink sees only whole, well-formed entries; the decoder checks every chunk.
    fn stream_partly_held(
        &self,
        parts: Parts<'_>,
        lock: XorbLock,
        stream: &dyn Fn(&FetchRange, &mut RangeSink<'_>) -> Result<Origin, TargetError>,
        sink: &mut RangeSink<'_>,
    ) -> Result<Option<Origin>, TargetError> {
        use std::os::unix::fs::FileExt as _;
        let Parts {
            dir,
            range,
            entries,
            offsets,
        } = parts;
        let Some(planned) = plan(range, entries, offsets) else {
            return Ok(None);
        };
        let mut stretches = Vec::with_capacity(planned.len());
        let mut origin = Origin {
            fetched: 0,
            local: Vec::new(),
        };
        for p in planned {
            let stretch = match p {
                Planned::Entry(entry, chunks) => {
                    let Some(stretch) = Stretch::of_entry(&entry, chunks.clone()) else {
                        return Ok(None);
                    };
                    origin.local.push(chunks);
                    stretch
                }
                Planned::Gap(gap) => {
                    let Some(stretch) = fetch_into_entry(dir, &gap, stream)? else {
                        return Ok(None);
                    };
                    origin.fetched += stretch.to;
                    stretch
                }
            };
            stretches.push(stretch);
        }
        drop(lock);
        let want = range.bytes.end() - range.bytes.start() + 1;
        if stretches.iter().map(|s| s.to - s.from).sum::<u64>() != want {
            // Entries and the server disagree about where chunks start: drop this xorb's.
            let _ = fs::remove_dir_all(dir);
            return Ok(None);
        }
        let mut block = vec![0u8; usize::try_from(want.min(HAND_BLOCK)).unwrap_or(0)];
        let mut at = 0u64;
        for stretch in &stretches {
            let mut off = stretch.from;
            while off < stretch.to {
                let n = usize::try_from(stretch.to - off)
                    .unwrap_or(usize::MAX)
                    .min(block.len());
                if let Err(e) = stretch.file.read_exact_at(&mut block[..n], off) {
                    // The sink skips what it holds: the source starts the range again.
                    tracing::warn!(dir = %dir.display(), "cannot read a chunk cache entry ({e}); fetching the range");
                    return stream(range, sink).map(Some);
                }
                if sink(at, &block[..n]).is_break() {
                    return Ok(Some(origin));
                }
                at += n as u64;
                off += n as u64;
            }
        }
        Ok(Some(origin))
    }

    /// Streams `range` from `stream` to `sink`, and with `keep` into a new entry of `dir` too
    /// (kept only when every byte of the range came; a failure to write it is logged).
    fn stream_into_entry(
        &self,
        dir: &Path,
        range: &FetchRange,
        keep: bool,
        stream: &dyn Fn(&FetchRange, &mut RangeSink<'_>) -> Result<Origin, TargetError>,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        let mut entry = keep.then(|| NewEntry::create(dir, range)).flatten();
        let origin = stream(range, &mut |at, piece| {
            if entry.as_mut().is_some_and(|e| !e.write(at, piece)) {
                entry = None;
            }
            sink(at, piece)
        })?;
        if let Some(entry) = entry {
            entry.persist();
        }
        Ok(origin)
    }

    /// The cache's directory for `xorb`, made, and the right to use it for `range` (see
    /// [`ChunkCache::lock`]); or why the range goes without the cache.
    fn enter(&self, xorb: &XorbHash, range: &FetchRange) -> Result<(PathBuf, XorbLock), Bypass> {
        let len = range.bytes.end().saturating_sub(*range.bytes.start()) + 1;
        if len < self.min_range {
            return Err(Bypass::Small);
        }
        let dir = self.xorb_dir(xorb);
        if let Err(e) = fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), "the chunk cache cannot be used: {e}");
            return Err(Bypass::Because(e.to_string()));
        }
        match self.lock(&dir, range.chunks.clone()) {
            Ok(Some(held)) => Ok((dir, held)),
            Ok(None) => Err(Bypass::Because(
                "another process holds this xorb's cache entries".into(),
            )),
            Err(e) => Err(Bypass::Because(e.to_string())),
        }
    }

    /// Waits for the right to read and fill chunks `chunks` of the xorb whose entries are in
    /// `dir` (at most the patience); `None` if it did not come. Between processes, the file
    /// lock: one process at a time uses a xorb's entries. Within this process, threads whose
    /// chunk ranges overlap take turns (woken the moment the other is done), and threads with
    /// separate ranges of one xorb go on together under the process's one file lock, since
    /// what they fetch and store cannot meet.
    fn lock(&self, dir: &Path, chunks: std::ops::Range<u32>) -> std::io::Result<Option<XorbLock>> {
        let deadline = Instant::now() + self.patience;
        let Some(held) = XorbLock::take_range(dir, chunks, deadline) else {
            return Ok(None);
        };
        if held.share_file_lock() {
            return Ok(Some(held));
        }
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))?;
        loop {
            match f.try_lock() {
                Ok(()) => {
                    held.keep_file_lock(f);
                    return Ok(Some(held));
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
            // Another thread of this process may have got it meanwhile.
            if held.share_file_lock() {
                return Ok(Some(held));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `Ok(None)` when entries turned out inconsistent (they are deleted; the caller fetches
    /// the whole range).
    fn read_locked(
        &self,
        dir: &Path,
        range: &FetchRange,
        keep: bool,
        fetch: &dyn Fn(&FetchRange) -> Result<Vec<u8>, TargetError>,
    ) -> Result<Option<(Vec<u8>, Origin)>, TargetError> {
        let (c, d) = (range.chunks.start, range.chunks.end);
        let (s, e) = (*range.bytes.start(), *range.bytes.end());
        if c >= d || e < s {
            return Ok(None);
        }
        // Byte offsets of chunk boundaries known so far: the range's own ends, then entries'.
        let mut offsets: BTreeMap<u32, u64> = BTreeMap::from([(c, s), (d, e + 1)]);
        let entries = usable_entries(dir, c..d, &mut offsets);
        let (pieces, fetched) = match self.fill_gaps(dir, range, keep, &entries, &offsets, fetch)? {
            Filled::Pieces(pieces, fetched) => (pieces, fetched),
            Filled::Whole(bytes, n) => return Ok(Some((bytes, Origin::fetched(n)))),
            Filled::Inconsistent => return Ok(None),
        };
        let local = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Entry(_, chunks) => Some(chunks.clone()),
                Piece::Fetched(_) => None,
            })
            .collect();
        let origin = Origin { fetched, local };
        let want = usize::try_from(e - s + 1).unwrap_or(usize::MAX);
        let Some(out) = assemble(pieces, want) else {
            return Ok(None);
        };
        if out.len() != want {
            // Entries and the server disagree about where chunks start: drop this xorb's.
            let _ = fs::remove_dir_all(dir);
            return Ok(None);
        }
        Ok(Some((out, origin)))
    }

    /// Fetches the gaps [`plan`] finds in `range` between `entries` (each stored as a new entry
    /// when `keep`). A URL whose signature covers its Range is fetched whole instead.
    fn fill_gaps(
        &self,
        dir: &Path,
        range: &FetchRange,
        keep: bool,
        entries: &[Entry],
        offsets: &BTreeMap<u32, u64>,
        fetch: &dyn Fn(&FetchRange) -> Result<Vec<u8>, TargetError>,
    ) -> Result<Filled, TargetError> {
        let Some(planned) = plan(range, entries, offsets) else {
            return Ok(Filled::Inconsistent);
        };
        // A URL whose signature covers its Range is fetched whole or not at all.
        let exact = range.url.as_deref().is_some_and(crate::url::signs_range);
        let partial_gap = |p: &Planned| matches!(p, Planned::Gap(g) if g.chunks != range.chunks);
        if exact && planned.iter().any(partial_gap) {
            // The URL serves its whole range only: fetch it all, keep it as one entry.
            let bytes = fetch(range)?;
            let n = bytes.len() as u64;
            if keep && chunk_spans(&bytes, range.chunks.end - range.chunks.start).is_some() {
                self.store(dir, range, &bytes);
            }
            return Ok(Filled::Whole(bytes, n));
        }
        let mut pieces = Vec::with_capacity(planned.len());
        let mut fetched = 0u64;
        for p in planned {
            match p {
                Planned::Entry(entry, chunks) => pieces.push(Piece::Entry(entry, chunks)),
                Planned::Gap(gap) => {
                    let bytes = fetch(&gap)?;
                    fetched += bytes.len() as u64;
                    if keep && chunk_spans(&bytes, gap.chunks.end - gap.chunks.start).is_some() {
                        self.store(dir, &gap, &bytes);
                    }
                    pieces.push(Piece::Fetched(bytes));
                }
            }
        }
        Ok(Filled::Pieces(pieces, fetched))
    }

    /// Stores fetched bytes as an entry (a failure is logged: the cache is an optimisation).
    fn store(&self, dir: &Path, gap: &FetchRange, bytes: &[u8]) {
        // Not synced: losing an entry to a crash only costs a fetch.
        let path = dir.join(entry_name(gap));
        if let Err(e) = xet_protocol::util::fs::AtomicWrite::new().write(&path, bytes) {
            tracing::warn!(dir = %dir.display(), "cannot store a chunk cache entry: {e}");
        }
    }

    /// Deletes every entry of these xorbs (a file rebuilt with them did not verify).
    pub fn forget(&self, xorbs: &[XorbHash]) {
        for x in xorbs {
            let dir = self.xorb_dir(x);
            if dir.exists() {
                tracing::info!(xorb = %x, "dropping the chunk cache's entries of xorb");
                let _ = fs::remove_dir_all(&dir);
            }
        }
    }

    /// The chunk caches of every endpoint under the cache root `root`.
    pub fn all_under(root: &Path) -> Vec<ChunkCache> {
        let Ok(rd) = fs::read_dir(root.join(CHUNKS_SUBDIR)) else {
            return Vec::new();
        };
        let mut out: Vec<ChunkCache> = rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| ChunkCache::open(&e.path()))
            .collect();
        out.sort_by(|a, b| a.dir.cmp(&b.dir));
        out
    }

    /// How many entries the cache holds and their bytes.
    pub fn stats(&self) -> (u64, u64) {
        let Ok(xorbs) = fs::read_dir(&self.dir) else {
            return (0, 0);
        };
        let (mut n, mut bytes) = (0, 0);
        for x in xorbs.flatten() {
            for entry in list(&x.path()) {
                n += 1;
                bytes += entry.len;
            }
        }
        (n, bytes)
    }

    /// Deletes the least recently used entries until the cache holds at most its limit.
    /// Returns the bytes deleted.
    pub fn prune(&self) -> u64 {
        let Ok(xorbs) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut all: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let mut total = 0u64;
        for x in xorbs.flatten() {
            for entry in list(&x.path()) {
                let used = fs::metadata(&entry.path)
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                total += entry.len;
                all.push((used, entry.len, entry.path));
            }
        }
        if total <= self.max_bytes {
            return 0;
        }
        all.sort();
        let mut deleted = 0u64;
        for (_, len, path) in all {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
                deleted += len;
                if let Some(parent) = path.parent() {
                    // Only succeeds once the lock file is the last thing left, which nobody
                    // holds for long; a racing holder recreates the directory.
                    if list(parent).is_empty() {
                        let _ = fs::remove_file(parent.join(".lock"));
                        let _ = fs::remove_dir(parent);
                    }
                }
            }
        }
        deleted
    }
}

/// The entries in a xorb's directory, by their names; files that are not entries are skipped.
fn list(dir: &Path) -> Vec<Entry> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for f in rd.flatten() {
        let name = f.file_name();
        let Some(name) = name.to_str() else { continue };
        let mut parts = name.splitn(3, '-');
        let (Some(a), Some(b), Some(o)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(c0), Ok(c1), Ok(b0)) = (a.parse::<u32>(), b.parse::<u32>(), o.parse::<u64>())
        else {
            continue;
        };
        let Ok(meta) = f.metadata() else { continue };
        if c0 >= c1 || !meta.is_file() || meta.len() < (c1 - c0) as u64 * CHUNK_HEADER_LEN as u64 {
            let _ = fs::remove_file(f.path());
            continue;
        }
        out.push(Entry {
            chunks: c0..c1,
            start: b0,
            len: meta.len(),
            path: f.path(),
        });
    }
    out
}

fn read_entry(entry: &Entry) -> Option<Vec<u8>> {
    let bytes = fs::read(&entry.path).ok()?;
    (bytes.len() as u64 == entry.len).then_some(bytes)
}

/// The entries of a xorb's directory that overlap chunks `chunks`, recording their chunk
/// boundaries' byte offsets in `offsets`. An entry whose offsets disagree with those already
/// known (the range's own ends, or an earlier entry's) is deleted and skipped.
fn usable_entries(
    dir: &Path,
    chunks: std::ops::Range<u32>,
    offsets: &mut BTreeMap<u32, u64>,
) -> Vec<Entry> {
    let (c, d) = (chunks.start, chunks.end);
    let mut entries = Vec::new();
    for entry in list(dir) {
        let consistent = [
            (entry.chunks.start, entry.start),
            (entry.chunks.end, entry.start + entry.len),
        ]
        .iter()
        .all(|(k, off)| offsets.get(k).is_none_or(|o| o == off));
        if !consistent {
            tracing::warn!(entry = %entry.path.display(), "chunk cache entry disagrees with the server's offsets; deleting it");
            let _ = fs::remove_file(&entry.path);
            continue;
        }
        if entry.chunks.end <= c || entry.chunks.start >= d {
            continue;
        }
        offsets.insert(entry.chunks.start, entry.start);
        offsets.insert(entry.chunks.end, entry.start + entry.len);
        entries.push(entry);
    }
    entries
}

/// How much of a partly held range is read out of the cache's files per hand-over.
const HAND_BLOCK: u64 = 1 << 20;

/// A range being read through the cache: its xorb's directory, the usable entries listed
/// under the lock, and the chunk boundaries' offsets they and the range give.
struct Parts<'a> {
    dir: &'a Path,
    range: &'a FetchRange,
    entries: &'a [Entry],
    offsets: &'a BTreeMap<u32, u64>,
}

/// Bytes `from..to` of an open entry file: one stretch of a range being handed over.
struct Stretch {
    file: File,
    from: u64,
    to: u64,
}

impl Stretch {
    /// Chunks `chunks` of `entry`, opened (so that a prune meanwhile does not take them away)
    /// and marked as used; `None` (and the entry deleted) when it cannot be read or its chunk
    /// headers do not add up.
    fn of_entry(entry: &Entry, chunks: std::ops::Range<u32>) -> Option<Self> {
        let opened = File::open(&entry.path).ok().filter(|f| {
            f.metadata()
                .is_ok_and(|m| m.is_file() && m.len() == entry.len)
        });
        let spans = opened
            .as_ref()
            .and_then(|f| file_spans(f, entry.chunks.end - entry.chunks.start, entry.len));
        let (Some(file), Some(spans)) = (opened, spans) else {
            tracing::warn!(entry = %entry.path.display(), "damaged chunk cache entry; deleting it");
            let _ = fs::remove_file(&entry.path);
            return None;
        };
        let first = (chunks.start - entry.chunks.start) as usize;
        let last = (chunks.end - entry.chunks.start) as usize;
        touch(&entry.path);
        Some(Self {
            from: *spans.get(first)?,
            to: *spans.get(last)?,
            file,
        })
    }
}

/// Streams `gap` from `stream` into a new entry of `dir`, returned open as a whole stretch.
/// `Ok(None)` when it cannot be stored or what came is not whole chunks: the caller then goes
/// without the cache.
fn fetch_into_entry(
    dir: &Path,
    gap: &FetchRange,
    stream: &dyn Fn(&FetchRange, &mut RangeSink<'_>) -> Result<Origin, TargetError>,
) -> Result<Option<Stretch>, TargetError> {
    let Some(mut entry) = NewEntry::create(dir, gap) else {
        return Ok(None);
    };
    let mut written = true;
    stream(gap, &mut |at, piece| {
        written = entry.write(at, piece);
        if written {
            std::ops::ControlFlow::Continue(())
        } else {
            std::ops::ControlFlow::Break(())
        }
    })?;
    let len = entry.len;
    Ok(written
        .then(|| entry.persist())
        .flatten()
        .map(|file| Stretch {
            file,
            from: 0,
            to: len,
        }))
}

/// An entry being written as its range streams in: a temporary file in the xorb's directory,
/// renamed into place only when every byte of the range came and its chunk headers add up. A
/// failure to write it is logged (the cache is an optimisation, never an error of its own).
struct NewEntry<'d> {
    dir: &'d Path,
    name: String,
    chunks: u32,
    len: u64,
    tmp: tempfile::NamedTempFile,
    /// Bytes of the range in hand from its start (a source may start again from an earlier
    /// offset after a broken connection; writes at offsets make that harmless).
    through: u64,
}

impl<'d> NewEntry<'d> {
    fn create(dir: &'d Path, range: &FetchRange) -> Option<Self> {
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempfile_in(dir)
            .map_err(|e| Self::cannot(dir, &e))
            .ok()?;
        Some(Self {
            dir,
            name: entry_name(range),
            chunks: range.chunks.end.saturating_sub(range.chunks.start),
            len: range.bytes.end() - range.bytes.start() + 1,
            tmp,
            through: 0,
        })
    }

    /// Writes `piece` at offset `at` of the range; `false` (logged) when it cannot.
    fn write(&mut self, at: u64, piece: &[u8]) -> bool {
        use std::os::unix::fs::FileExt as _;
        if let Err(e) = self.tmp.as_file().write_all_at(piece, at) {
            Self::cannot(self.dir, &e);
            return false;
        }
        if at <= self.through {
            self.through = self.through.max(at + piece.len() as u64);
        }
        true
    }

    /// Puts the entry in place, returning it open, if the whole range came as whole chunks.
    fn persist(self) -> Option<File> {
        let whole = self.through == self.len
            && file_spans(self.tmp.as_file(), self.chunks, self.len).is_some();
        if !whole {
            return None;
        }
        self.tmp
            .persist(self.dir.join(&self.name))
            .map_err(|e| Self::cannot(self.dir, &e.error))
            .ok()
    }

    fn cannot(dir: &Path, e: &dyn std::fmt::Display) {
        tracing::warn!(dir = %dir.display(), "cannot store a chunk cache entry: {e}");
    }
}

/// [`chunk_spans`] of a file of `len` bytes, reading only its chunk headers.
fn file_spans(file: &File, n: u32, len: u64) -> Option<Vec<u64>> {
    use std::os::unix::fs::FileExt as _;
    spans_by(n, len, |at| {
        let mut header = [0u8; CHUNK_HEADER_LEN];
        file.read_exact_at(&mut header, at).ok()?;
        Some(header)
    })
}

/// What a range is made of, in order: stretches of entries, and the gaps between them.
enum Planned {
    /// Chunks `chunks` out of this entry.
    Entry(Entry, std::ops::Range<u32>),
    /// Chunks the cache does not hold: a sub-range of the range (same URL), up to the next
    /// entry or the range's end.
    Gap(FetchRange),
}

/// Walks chunks `range.chunks` in order, taking each stretch from the entry that holds it
/// furthest, or else a gap up to the next entry. `None` when a gap's byte offsets are not
/// known or do not add up (`offsets`: the chunk boundaries known from the range's ends and
/// the entries).
fn plan(
    range: &FetchRange,
    entries: &[Entry],
    offsets: &BTreeMap<u32, u64>,
) -> Option<Vec<Planned>> {
    let (c, d) = (range.chunks.start, range.chunks.end);
    let mut planned = Vec::new();
    let mut k = c;
    while k < d {
        // The entry holding chunk k that reaches furthest.
        if let Some(entry) = entries
            .iter()
            .filter(|en| en.chunks.start <= k && k < en.chunks.end)
            .max_by_key(|en| en.chunks.end)
        {
            let end = entry.chunks.end.min(d);
            planned.push(Planned::Entry(entry.clone(), k..end));
            k = end;
            continue;
        }
        // A gap: up to the next entry's start or the range's end, both of known offset.
        let end = entries
            .iter()
            .map(|en| en.chunks.start)
            .filter(|&st| st > k && st < d)
            .min()
            .unwrap_or(d);
        let (from, to) = (*offsets.get(&k)?, *offsets.get(&end)?);
        if to <= from {
            return None;
        }
        planned.push(Planned::Gap(FetchRange {
            chunks: k..end,
            bytes: from..=to - 1,
            url: range.url.clone(),
        }));
        k = end;
    }
    Some(planned)
}

/// The pieces' bytes one after the other (`want` is the range's length, for reserving);
/// `None` when an entry cannot be read or is damaged (it is deleted).
fn assemble(pieces: Vec<Piece>, want: usize) -> Option<Vec<u8>> {
    // The first piece becomes the output without a copy (the whole range, in the common
    // cases of a first fetch or a range one entry holds): memory stays one range, not two.
    let mut out: Vec<u8> = Vec::new();
    for piece in pieces {
        let part = match piece {
            Piece::Fetched(bytes) => bytes,
            Piece::Entry(entry, chunks) => entry_part(&entry, chunks)?,
        };
        if out.is_empty() {
            out = part;
        } else {
            out.reserve(want.saturating_sub(out.len()).min(128 << 20));
            out.extend_from_slice(&part);
        }
    }
    Some(out)
}

/// The bytes of chunks `chunks` out of `entry`, which is marked as used; `None` (and the
/// entry deleted) when it cannot be read or its chunk headers do not add up.
fn entry_part(entry: &Entry, chunks: std::ops::Range<u32>) -> Option<Vec<u8>> {
    let Some(mut bytes) = read_entry(entry) else {
        let _ = fs::remove_file(&entry.path);
        return None;
    };
    let Some(spans) = chunk_spans(&bytes, entry.chunks.end - entry.chunks.start) else {
        tracing::warn!(entry = %entry.path.display(), "damaged chunk cache entry; deleting it");
        let _ = fs::remove_file(&entry.path);
        return None;
    };
    let first = (chunks.start - entry.chunks.start) as usize;
    let last = (chunks.end - entry.chunks.start) as usize;
    bytes.truncate(spans[last]);
    bytes.drain(..spans[first]);
    touch(&entry.path);
    Some(bytes)
}

/// The start offset of each of `n` chunks in `bytes`, plus the end: `None` unless `bytes` is
/// exactly `n` well-formed chunks (header checks of docs/format.md §3.2; payloads are checked
/// by the decoder).
fn chunk_spans(bytes: &[u8], n: u32) -> Option<Vec<usize>> {
    let spans = spans_by(n, bytes.len() as u64, |at| {
        let at = usize::try_from(at).ok()?;
        bytes.get(at..at + CHUNK_HEADER_LEN)?.try_into().ok()
    })?;
    spans
        .into_iter()
        .map(|at| usize::try_from(at).ok())
        .collect()
}

/// The walk of [`chunk_spans`] over `n` chunks of `len` bytes, `header_at` giving the 8 bytes
/// at an offset (checked to lie within `len` first).
fn spans_by(
    n: u32,
    len: u64,
    mut header_at: impl FnMut(u64) -> Option<[u8; CHUNK_HEADER_LEN]>,
) -> Option<Vec<u64>> {
    let mut spans = Vec::with_capacity(n as usize + 1);
    let mut at = 0u64;
    for _ in 0..n {
        spans.push(at);
        if at.checked_add(CHUNK_HEADER_LEN as u64)? > len {
            return None;
        }
        let h = ChunkHeader::decode(&header_at(at)?).ok()?;
        at = at.checked_add(h.chunk_len())?;
        if at > len {
            return None;
        }
    }
    spans.push(at);
    (at == len).then_some(spans)
}

/// Marks an entry as used now (for [`ChunkCache::prune`]'s least-recently-used order).
fn touch(path: &Path) {
    if let Ok(f) = File::options().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// What this process's threads hold of the chunk cache: chunk ranges of xorb directories,
/// and the file lock of each directory in use with how many of them share it.
#[derive(Default)]
struct Holdings {
    ranges: Vec<(PathBuf, std::ops::Range<u32>)>,
    file_locks: std::collections::HashMap<PathBuf, (File, usize)>,
}

static HELD: std::sync::LazyLock<std::sync::Mutex<Holdings>> =
    std::sync::LazyLock::new(|| std::sync::Mutex::new(Holdings::default()));
/// Signalled whenever a range is let go.
static RELEASED: std::sync::Condvar = std::sync::Condvar::new();

fn holdings() -> std::sync::MutexGuard<'static, Holdings> {
    HELD.lock_anyway()
}

/// One thread's hold on a chunk range of a xorb directory (see [`ChunkCache::lock`]); the
/// range, and its share of the file lock once it has one, are let go when it is dropped.
struct XorbLock {
    dir: PathBuf,
    chunks: std::ops::Range<u32>,
    sharing: std::cell::Cell<bool>,
}

impl XorbLock {
    /// Waits until no other thread of this process holds a range of `dir` that overlaps
    /// `chunks` (at most until `deadline`), then holds it.
    fn take_range(dir: &Path, chunks: std::ops::Range<u32>, deadline: Instant) -> Option<Self> {
        let mut held = holdings();
        while held
            .ranges
            .iter()
            .any(|(d, r)| d == dir && r.start < chunks.end && chunks.start < r.end)
        {
            let left = deadline.checked_duration_since(Instant::now())?;
            held = RELEASED
                .wait_timeout(held, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        held.ranges.push((dir.to_path_buf(), chunks.clone()));
        Some(Self {
            dir: dir.to_path_buf(),
            chunks,
            sharing: std::cell::Cell::new(false),
        })
    }

    /// Shares the file lock another thread of this process holds on the directory, if any.
    fn share_file_lock(&self) -> bool {
        let mut held = holdings();
        match held.file_locks.get_mut(&self.dir) {
            Some((_, users)) => {
                *users += 1;
                self.sharing.set(true);
                true
            }
            None => false,
        }
    }

    /// Keeps `file`, just locked, as the process's file lock of the directory.
    fn keep_file_lock(&self, file: File) {
        let mut held = holdings();
        match held.file_locks.get_mut(&self.dir) {
            // Cannot happen (the file lock excludes a second holder even within a process),
            // but sharing is right if it did.
            Some((_, users)) => *users += 1,
            None => {
                held.file_locks.insert(self.dir.clone(), (file, 1));
            }
        }
        self.sharing.set(true);
    }
}

impl Drop for XorbLock {
    fn drop(&mut self) {
        let mut held = holdings();
        if let Some(i) = held
            .ranges
            .iter()
            .position(|(d, r)| *d == self.dir && *r == self.chunks)
        {
            held.ranges.swap_remove(i);
        }
        if self.sharing.get() {
            let last = match held.file_locks.get_mut(&self.dir) {
                Some((_, users)) => {
                    *users -= 1;
                    *users == 0
                }
                None => false,
            };
            if last {
                // Dropping the file releases the lock.
                held.file_locks.remove(&self.dir);
            }
        }
        drop(held);
        RELEASED.notify_all();
    }
}

#[cfg(test)]
mod tests;
