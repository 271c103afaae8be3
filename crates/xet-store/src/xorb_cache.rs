//! A node's copies of xorbs on its own disk, when its store is on object storage.
//!
//! Every read of a xorb on object storage is a request to the bucket, and the bucket (its CPU,
//! its network, its per-request cost) bounds how fast a node serves downloads. A node keeps
//! copies of xorbs in `<data>/xorb-cache/`, one file per xorb named by its hash, and reads the
//! ranges it serves from them:
//!
//! - a xorb this node stores (an upload it validated) is copied in as it is put (a hard link
//!   of the spool file when the filesystem allows, else a copy);
//! - a xorb this node reads whole from the bucket anyway (a small one, for its footer or for a
//!   download: see [`crate::small_xorbs`]) is kept if its chunks verify;
//! - a xorb this node reads from the bucket is copied in once the bytes read of it add up to
//!   more than its size (it was read whole once already and is being read again: a model
//!   that CI clones again and again), by a background read of the whole object;
//! - at most the configured bytes are kept, the least recently used out first; a copy is
//!   never made when it would leave the disk with less than [`MIN_FREE`] (or the store's own
//!   reserve) free.
//!
//! Downloads of a registered xorb (one a shard names: garbage collection keeps it while a file
//! uses it) read its copy without asking the bucket ([`crate::cas::Purpose::Download`]), once
//! the process has seen the copy's bytes verified (a small copy found at start or read in the
//! background is read whole and checked first, and dropped if it fails; a larger one is read
//! after a look at the bucket);
//! anything an upload may skip work on, and every check of a shard, asks the bucket
//! ([`crate::cas::Purpose::Upload`]): a copy never vouches that the bucket holds a xorb. A copy
//! is dropped when the xorb is removed or quarantined, and when a read finds a damaged chunk
//! the copy is dropped before the bucket's object is verified (a bad copy never takes a good
//! object out of service). Xorbs never change, so a copy never goes stale.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use xet_format::XorbHash;
use xet_protocol::util::sync::LockAnyway as _;

/// Free bytes a copy never takes the disk below (besides the store's own reserve).
pub const MIN_FREE: u64 = 1 << 30;

/// The default size of the cache of a node on object storage.
pub const DEFAULT_BYTES: u64 = 8 << 30;

/// Xorbs whose reads are counted (for copying read xorbs in) at most; past it, the counts
/// start over.
const MAX_COUNTED: usize = 100_000;

/// Whole-xorb reads copying xorbs in at once, at most (each holds its xorb in memory).
pub const MAX_FILLS: usize = 2;

/// Copies read whole to be verified at once, at most ([`XorbCache::verify_slot`]).
pub const MAX_VERIFIES: usize = 4;

/// The largest copy read whole to be verified before it serves without the bucket (a small
/// xorb's size); a larger one this process has not seen verified serves after a look at the
/// bucket, as any range read.
pub const MAX_VERIFIED_READ: u64 = crate::small_xorbs::SMALL_XORB_MAX;

/// The largest object copied: a xorb of the largest upload body this server accepts, with its
/// footer (anything larger in the bucket was not stored by a node).
pub const MAX_COPY: u64 = xet_format::xorb::MAX_ACCEPTED_BODY + (1 << 20);

/// What the cache did so far, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Ranges served from copies.
    pub hits: u64,
    /// Ranges read from the bucket because no copy was there.
    pub misses: u64,
    /// Bytes of the copies kept now.
    pub bytes: u64,
    /// Copies kept now.
    pub xorbs: u64,
}

#[derive(Debug)]
struct Entry {
    len: u64,
    /// The entry's place in the use order (larger: used more recently).
    used: u64,
    /// Whether this process has seen the copy's bytes verified against the xorb's name (a
    /// validated upload, a whole read checked chunk by chunk); see [`XorbCache::len_of`].
    verified: bool,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<XorbHash, Entry>,
    /// Use order → xorb, least recently used first.
    order: BTreeMap<u64, XorbHash>,
    bytes: u64,
    tick: u64,
    /// Bytes read from the bucket of xorbs with no copy (see the module documentation).
    read: HashMap<XorbHash, u64>,
    /// Xorbs being copied in by a background read.
    filling: std::collections::HashSet<XorbHash>,
}

impl State {
    /// Records a copy of `len` bytes as the most recently used.
    fn add(&mut self, xorb: XorbHash, len: u64, verified: bool) {
        self.tick += 1;
        let used = self.tick;
        self.entries.insert(
            xorb,
            Entry {
                len,
                used,
                verified,
            },
        );
        self.order.insert(used, xorb);
        self.bytes += len;
    }

    fn touch(&mut self, xorb: &XorbHash) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.entries.get_mut(xorb) {
            self.order.remove(&e.used);
            e.used = tick;
            self.order.insert(tick, *xorb);
        }
    }

    fn forget(&mut self, xorb: &XorbHash) -> bool {
        match self.entries.remove(xorb) {
            Some(e) => {
                self.order.remove(&e.used);
                self.bytes -= e.len;
                true
            }
            None => false,
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct XorbCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Free bytes the disk keeps besides the copies ([`MIN_FREE`] or the store's reserve).
    keep_free: u64,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    temp: AtomicU64,
    verifying: std::sync::Arc<AtomicU64>,
}

/// A xorb's copy made before the xorb is put in the bucket, kept only once the put succeeded
/// ([`Staged::keep`]); dropped otherwise.
#[derive(Debug)]
pub struct Staged<'a> {
    cache: &'a XorbCache,
    xorb: XorbHash,
    temp: PathBuf,
    len: u64,
}

impl Staged<'_> {
    /// Keeps the copy (the xorb is stored).
    pub fn keep(self) {
        let (cache, xorb, len) = (self.cache, self.xorb, self.len);
        let temp = self.temp.clone();
        std::mem::forget(self);
        // The spool file of an upload the store validated.
        cache.adopt(xorb, &temp, len, true);
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.temp);
    }
}

impl XorbCache {
    /// Opens (creating it) the cache in `dir`, keeping at most `max_bytes`, never leaving the
    /// disk with less than `keep_free` (at least [`MIN_FREE`]) bytes free. Copies left half
    /// made by an earlier process are removed; the rest are adopted, the most recently
    /// modified used last.
    pub fn open(dir: &Path, max_bytes: u64, keep_free: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            match XorbHash::from_hex(&name) {
                Ok(xorb) => {
                    let meta = entry.metadata()?;
                    let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                    found.push((modified, xorb, meta.len()));
                }
                // Half-made copies (and anything else) go.
                Err(_) => {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        found.sort();
        let cache = Self {
            dir: dir.to_path_buf(),
            max_bytes,
            keep_free: keep_free.max(MIN_FREE),
            state: Mutex::new(State::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            temp: AtomicU64::new(0),
            verifying: Default::default(),
        };
        {
            let mut state = cache.lock();
            for (_, xorb, len) in found {
                state.add(xorb, len, false);
            }
        }
        cache.evict();
        let stats = cache.stats();
        tracing::info!(
            dir = %dir.display(),
            copies = stats.xorbs,
            bytes = stats.bytes,
            max_bytes,
            "keeping copies of xorbs on this node's disk"
        );
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_anyway()
    }

    fn path(&self, xorb: &XorbHash) -> PathBuf {
        self.dir.join(xorb.to_hex())
    }

    fn temp_path(&self, xorb: &XorbHash) -> PathBuf {
        let n = self.temp.fetch_add(1, Ordering::Relaxed);
        self.dir
            .join(format!(".tmp-{}-{}-{n}", xorb.to_hex(), std::process::id()))
    }

    /// Bytes `range` of `xorb`'s copy; `None` (counted as a miss) when there is no copy or it
    /// does not hold the range (a copy that cannot be read is dropped).
    pub fn read(&self, xorb: &XorbHash, range: Range<u64>) -> Option<Vec<u8>> {
        let held = {
            let mut state = self.lock();
            let fits = state
                .entries
                .get(xorb)
                .is_some_and(|e| range.start <= range.end && range.end <= e.len);
            if fits {
                state.touch(xorb);
            }
            fits
        };
        if !held {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match read_at(&self.path(xorb), range) {
            Ok(bytes) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(bytes)
            }
            Err(e) => {
                tracing::warn!(%xorb, error = %e, "dropping a xorb's copy that cannot be read");
                self.remove(xorb);
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether a copy of `xorb` is kept.
    pub fn contains(&self, xorb: &XorbHash) -> bool {
        self.lock().entries.contains_key(xorb)
    }

    /// The length of `xorb`'s copy, if one is kept, and whether this process has seen its bytes
    /// verified (a copy found on disk at start, or read from the bucket in the background, has
    /// not been: see [`Self::mark_verified`]).
    pub fn len_of(&self, xorb: &XorbHash) -> Option<(u64, bool)> {
        self.lock().entries.get(xorb).map(|e| (e.len, e.verified))
    }

    /// A turn to read a copy of at most [`MAX_VERIFIED_READ`] bytes whole and verify it, held
    /// while the guard lives; `None` when [`MAX_VERIFIES`] are under way (the caller reads the
    /// bucket instead), so that verifications hold at most that many copies in memory.
    pub fn verify_slot(&self) -> Option<impl Drop> {
        struct Slot(std::sync::Arc<AtomicU64>);
        impl Drop for Slot {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let taken = self.verifying.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(std::sync::Arc::clone(&self.verifying));
        (taken < MAX_VERIFIES as u64).then_some(slot)
    }

    /// Notes that `xorb`'s copy was read whole and its chunks verified.
    pub fn mark_verified(&self, xorb: &XorbHash) {
        if let Some(e) = self.lock().entries.get_mut(xorb) {
            e.verified = true;
        }
    }

    /// Counts `bytes` read of `xorb` (of `len` bytes) from the bucket; `true` once they add up
    /// to more than `len`, no copy is kept and fewer than [`MAX_FILLS`] copies are being made:
    /// then the caller makes one and calls [`Self::copied`] when done.
    pub fn count_read(&self, xorb: &XorbHash, bytes: u64, len: u64) -> bool {
        if !self.fits(len) {
            return false;
        }
        let mut state = self.lock();
        if state.entries.contains_key(xorb) || state.filling.contains(xorb) {
            return false;
        }
        if state.read.len() >= MAX_COUNTED && !state.read.contains_key(xorb) {
            state.read.clear();
        }
        let read = state.read.entry(*xorb).or_insert(0);
        *read = read.saturating_add(bytes);
        if *read > len && state.filling.len() < MAX_FILLS {
            state.filling.insert(*xorb);
            true
        } else {
            false
        }
    }

    /// A copy [`Self::count_read`] asked for is made (or failed: the next read asks again).
    pub fn copied(&self, xorb: &XorbHash) {
        self.lock().filling.remove(xorb);
    }

    /// Prepares a copy of `xorb`'s object in `file` (`len` bytes), before `file` is put in the
    /// bucket (which may consume it); `None` when none is made (too large, no room on disk).
    pub fn stage(&self, xorb: &XorbHash, file: &Path, len: u64) -> Option<Staged<'_>> {
        if !self.worth_copying(xorb, len) {
            return None;
        }
        let temp = self.temp_path(xorb);
        if fs::hard_link(file, &temp).is_err() {
            if let Err(e) = fs::copy(file, &temp) {
                tracing::debug!(%xorb, error = %e, "cannot copy a xorb into the cache");
                let _ = fs::remove_file(&temp);
                return None;
            }
        }
        Some(Staged {
            cache: self,
            xorb: *xorb,
            temp,
            len,
        })
    }

    /// Keeps `bytes`, the whole object of `xorb`, as its copy; `verified`: the caller checked
    /// every chunk of them against the name.
    pub fn insert_bytes(&self, xorb: &XorbHash, bytes: &[u8], verified: bool) {
        let len = bytes.len() as u64;
        if !self.worth_copying(xorb, len) {
            return;
        }
        let temp = self.temp_path(xorb);
        match fs::write(&temp, bytes) {
            Ok(()) => self.adopt(*xorb, &temp, len, verified),
            Err(e) => {
                tracing::debug!(%xorb, error = %e, "cannot write a xorb's copy");
                let _ = fs::remove_file(&temp);
            }
        }
    }

    /// Whether a xorb of `len` bytes may be copied at all: not empty, at most a quarter of the
    /// cache and at most [`MAX_COPY`].
    fn fits(&self, len: u64) -> bool {
        len > 0 && len <= self.max_bytes / 4 && len <= MAX_COPY
    }

    fn worth_copying(&self, xorb: &XorbHash, len: u64) -> bool {
        if !self.fits(len) || self.contains(xorb) {
            return false;
        }
        match crate::backend::free_space(&self.dir) {
            Ok(free) => free >= len.saturating_add(self.keep_free),
            Err(_) => false,
        }
    }

    /// Moves the finished copy `temp` in place as `xorb`'s and makes room for it.
    fn adopt(&self, xorb: XorbHash, temp: &Path, len: u64, verified: bool) {
        if let Err(e) = fs::rename(temp, self.path(&xorb)) {
            tracing::debug!(%xorb, error = %e, "cannot keep a xorb's copy");
            let _ = fs::remove_file(temp);
            return;
        }
        {
            let mut state = self.lock();
            state.forget(&xorb);
            state.add(xorb, len, verified);
            state.read.remove(&xorb);
        }
        self.evict();
    }

    /// Drops least recently used copies until the copies fit in the cache's size.
    fn evict(&self) {
        loop {
            let victim = {
                let mut state = self.lock();
                if state.bytes <= self.max_bytes {
                    return;
                }
                let Some((_, xorb)) = state.order.pop_first() else {
                    return;
                };
                if let Some(e) = state.entries.remove(&xorb) {
                    state.bytes -= e.len;
                }
                xorb
            };
            let _ = fs::remove_file(self.path(&victim));
        }
    }

    /// Drops `xorb`'s copy (removed or quarantined in the bucket, or found damaged).
    pub fn remove(&self, xorb: &XorbHash) {
        let had = self.lock().forget(xorb);
        if had {
            let _ = fs::remove_file(self.path(xorb));
        }
    }

    /// What the cache did so far.
    pub fn stats(&self) -> CacheStats {
        let state = self.lock();
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: state.bytes,
            xorbs: state.entries.len() as u64,
        }
    }
}

fn read_at(path: &Path, range: Range<u64>) -> io::Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(range.start))?;
    crate::backend::read_len(&mut file, range.end.saturating_sub(range.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorb(n: u8) -> XorbHash {
        XorbHash::from_bytes([n; 32])
    }

    #[test]
    fn verifications_take_turns() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), 1 << 20);
        let turns: Vec<_> = (0..MAX_VERIFIES).map(|_| c.verify_slot()).collect();
        assert!(turns.iter().all(Option::is_some));
        assert!(
            c.verify_slot().is_none(),
            "no more than MAX_VERIFIES at once"
        );
        drop(turns);
        assert!(c.verify_slot().is_some(), "turns come back when done");
    }

    fn cache(dir: &Path, max: u64) -> XorbCache {
        // No reserve beyond what the test's disk has: the tests write a few KiB.
        XorbCache {
            keep_free: 0,
            ..XorbCache::open(dir, max, 0).unwrap()
        }
    }

    #[test]
    fn a_staged_copy_is_served_once_kept_and_gone_if_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(&dir.path().join("c"), 1 << 20);
        let spool = dir.path().join("spool");
        fs::write(&spool, b"0123456789").unwrap();
        let staged = c.stage(&xorb(1), &spool, 10).unwrap();
        // The bucket's put consumes the spool file: the copy does not depend on it.
        fs::remove_file(&spool).unwrap();
        assert_eq!(
            c.read(&xorb(1), 2..5),
            None,
            "not kept before the put succeeded"
        );
        staged.keep();
        assert_eq!(c.read(&xorb(1), 2..5).unwrap(), b"234");
        assert_eq!(c.read(&xorb(1), 8..11), None, "a range past the copy's end");

        fs::write(&spool, b"abc").unwrap();
        drop(c.stage(&xorb(2), &spool, 3).unwrap());
        assert!(!c.contains(&xorb(2)));
        let left: Vec<_> = fs::read_dir(dir.path().join("c")).unwrap().collect();
        assert_eq!(left.len(), 1, "only the kept copy is on disk: {left:?}");
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.bytes, s.xorbs), (1, 2, 10, 1));
    }

    #[test]
    fn the_least_recently_used_copies_go_first_and_a_reopened_cache_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), 44);
        for n in 1..=4 {
            c.insert_bytes(&xorb(n), &[n; 10], false);
        }
        assert!(c.read(&xorb(1), 0..10).is_some());
        c.insert_bytes(&xorb(5), &[5; 10], false);
        assert!(!c.contains(&xorb(2)), "the least recently used one went");
        assert!(!dir.path().join(xorb(2).to_hex()).exists());
        for n in [1, 3, 4, 5] {
            assert!(c.contains(&xorb(n)), "{n}");
        }
        c.insert_bytes(&xorb(6), &[6; 11], false);
        assert_eq!(c.stats().bytes, 41);
        assert!(!c.contains(&xorb(3)) && c.contains(&xorb(4)));
        // Larger than a quarter of the cache: not copied.
        c.insert_bytes(&xorb(7), &[7; 12], false);
        assert!(!c.contains(&xorb(7)));
        fs::write(dir.path().join(".tmp-half-made"), b"x").unwrap();
        drop(c);
        let again = cache(dir.path(), 44);
        assert_eq!(again.stats().bytes, 41);
        assert_eq!(again.read(&xorb(6), 10..11).unwrap(), [6]);
        assert!(!dir.path().join(".tmp-half-made").exists());
        again.remove(&xorb(6));
        assert!(!dir.path().join(xorb(6).to_hex()).exists());
        assert_eq!(again.stats().xorbs, 3);
    }

    #[test]
    fn a_xorb_is_worth_copying_once_read_past_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), 1000);
        assert!(!c.count_read(&xorb(1), 100, 200));
        assert!(!c.count_read(&xorb(1), 100, 200));
        assert!(c.count_read(&xorb(1), 1, 200), "read whole and again");
        assert!(!c.count_read(&xorb(1), 1, 200), "being copied");
        c.copied(&xorb(1));
        assert!(
            c.count_read(&xorb(1), 1, 200),
            "the copy failed: asked again"
        );
        assert!(c.count_read(&xorb(4), 300, 200));
        assert!(
            !c.count_read(&xorb(5), 300, 200),
            "two copies are being made already"
        );
        c.copied(&xorb(4));
        assert!(c.count_read(&xorb(5), 1, 200));
        assert!(!c.count_read(&xorb(2), 900, 300), "larger than a quarter");
        let huge = cache(&dir.path().join("huge"), 1 << 40);
        assert!(
            !huge.count_read(&xorb(6), MAX_COPY + 2, MAX_COPY + 1),
            "larger than any xorb a node stores"
        );
        assert!(huge.count_read(&xorb(6), MAX_COPY + 1, MAX_COPY));
        c.insert_bytes(&xorb(3), &[3; 10], false);
        assert!(!c.count_read(&xorb(3), 100, 10), "a copy is kept already");
    }

    #[test]
    fn a_copy_that_cannot_be_read_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), 1000);
        c.insert_bytes(&xorb(1), &[1; 10], false);
        fs::remove_file(dir.path().join(xorb(1).to_hex())).unwrap();
        assert_eq!(c.read(&xorb(1), 0..4), None);
        assert!(!c.contains(&xorb(1)));
    }
}
