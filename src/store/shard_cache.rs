//! The local shard cache: shards of our own uploads and the server's global-dedup answers, kept
//! on disk per endpoint so that later uploads (in this process or another) deduplicate against
//! them without asking the server (docs/format.md §5.3).
//!
//! # Where
//!
//! `<cache root>/shards/<endpoint key>/<shard hash>.mdb`, where the cache root is
//! `$GIT_XET_CACHE_DIR` if set, else the user's cache directory for git-xet (the `directories`
//! crate: `~/.cache/git-xet` on Linux, `~/Library/Caches/git-xet` on macOS,
//! `%LOCALAPPDATA%\git-xet\cache` on Windows). The endpoint key ([`ShardCache::endpoint_key`]) is
//! a readable, filesystem-safe name plus 16 hex digits of the SHA-256 of the endpoint, so two
//! endpoints never share a directory.
//!
//! # Files
//!
//! Every shard is stored in the complete form with all three lookup tables (docs/format.md §4.6)
//! and named by its hash (§4.10), whatever form it arrived in: an upload-form shard we
//! registered, or a dedup answer (keyed or not, with its key and expiry in the footer).
//! Writes go to `.<random>.mdb_temp` in the same directory, are fsynced and renamed into place,
//! so a reader never sees half a shard, and two processes writing the same shard write the same
//! bytes under the same name.
//!
//! # Lookups
//!
//! [`ShardCache::lookup`] builds an in-memory index on its first call from the header, footer
//! and chunk lookup table of every cached shard (not the whole shards): the sorted truncated
//! chunk hashes with the shard each belongs to. A lookup then costs a binary search for the raw
//! hash and one per HMAC key of a non-expired keyed shard (after keying the hash, §1.8); only a
//! candidate is read from disk, verified against its file name and parsed in full, and the
//! last few shards read are kept in memory. Shards this process inserts are added to the index.
//! **Shards other processes write after the index was built are not seen** by this
//! `ShardCache` (a new one, e.g. for the next upload, sees them).
//!
//! Keyed shards are skipped once `now > shard_key_expiry`, and deleted 7 days after that
//! ([`EXPIRY_BUFFER_SECS`], xet-core's `MDB_SHARD_EXPIRATION_BUFFER`).
//!
//! # Size
//!
//! Each endpoint directory is limited to [`ShardCache::max_bytes`] (default
//! [`DEFAULT_MAX_BYTES`], 1 GiB; `$GIT_XET_CACHE_MAX_SIZE` for [`ShardCache::for_endpoint`]).
//! A hit or an insert sets the file's modification time to now; when an insert takes the
//! directory over the limit, the least recently used shards are deleted until it is at 90% of it.
//! Pruning tolerates files that other processes delete or add under it.
//!
//! # Damage
//!
//! A file that is truncated, corrupt or does not match its name is removed with a warning
//! (`tracing::warn!`) when it is met; it never fails a lookup.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use sha2::Digest as _;

use crate::format::hash::keyed_chunk_hash;
use crate::format::shard::{
    shard_file_name, LookupTables, ParsedShard, Shard, ShardError, ShardLayout, FOOTER_SIZE,
    HEADER_SIZE,
};
use crate::format::{ChunkHash, HmacKey, ShardHash, XorbHash};

/// Environment variable overriding the cache root.
pub const CACHE_DIR_ENV: &str = "GIT_XET_CACHE_DIR";
/// Environment variable setting the size limit of each endpoint directory (e.g. `500M`, `2G`).
pub const CACHE_MAX_SIZE_ENV: &str = "GIT_XET_CACHE_MAX_SIZE";
/// The default size limit of each endpoint directory: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// How long after its key expired a keyed shard is deleted (xet-core's
/// `MDB_SHARD_EXPIRATION_BUFFER`, 7 days).
pub const EXPIRY_BUFFER_SECS: u64 = 7 * 24 * 3600;
/// The directory under the cache root that holds the endpoint directories.
pub const SHARDS_SUBDIR: &str = "shards";

const TEMP_SUFFIX: &str = ".mdb_temp";
/// Temporary files older than this are left over from a crash and deleted by pruning.
const STALE_TEMP: Duration = Duration::from_secs(3600);
/// How many parsed shards a cache keeps in memory, and how many chunk entries at most in all
/// (about 64 MiB of model; a single larger shard is still kept).
const LOADED_CAPACITY: usize = 16;
const LOADED_MAX_CHUNKS: usize = 1 << 20;

/// A failed cache operation. Every variant names the file or directory involved.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot find a cache directory for git-xet (no home directory); set {CACHE_DIR_ENV}")]
    NoCacheDir,
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What failed, e.g. "cannot read".
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not a usable cached shard: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: ShardError,
    },
    #[error("{}: damaged, its content hashes to {actual}", path.display())]
    WrongName { path: PathBuf, actual: ShardHash },
    #[error("cannot serialise a shard for the cache in {}: {source}", dir.display())]
    Serialize {
        dir: PathBuf,
        #[source]
        source: ShardError,
    },
    #[error("invalid size {value:?} (from {origin}): expected a number of bytes with an optional K, M, G or T suffix, e.g. 500M")]
    InvalidSize { value: String, origin: String },
}

impl CacheError {
    fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CacheError + 'a {
        move |source| CacheError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// True when the error is a damaged cached file (which is then deleted).
    fn is_damage(&self) -> bool {
        matches!(
            self,
            CacheError::Corrupt { .. } | CacheError::WrongName { .. }
        )
    }

    /// True when the error is a file that vanished (another process deleted it).
    fn is_not_found(&self) -> bool {
        matches!(self, CacheError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What one endpoint directory holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    pub dir: PathBuf,
    /// Number of cached shard files.
    pub shards: u64,
    /// Their total size.
    pub bytes: u64,
}

/// What a prune (or clear) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneReport {
    /// Shards deleted, and their bytes (expired, damaged or least recently used).
    pub removed_shards: u64,
    pub removed_bytes: u64,
    /// Shards left, and their bytes.
    pub kept_shards: u64,
    pub kept_bytes: u64,
}

/// One cached shard known to the index.
#[derive(Debug)]
struct Slot {
    hash: ShardHash,
    key: HmacKey,
    expiry: u64,
    /// Deleted or found unusable; never a candidate again.
    dead: bool,
    /// Its mtime was set by a hit of this process already.
    touched: bool,
}

/// The in-memory chunk index; see the module documentation.
#[derive(Debug, Default)]
struct Index {
    slots: Vec<Slot>,
    by_hash: HashMap<ShardHash, u32>,
    /// Truncated stored chunk hashes, sorted, and the slot of each (parallel vectors).
    keys: Vec<u64>,
    key_slots: Vec<u32>,
    /// Shards inserted after the index was built: truncated stored hash → slots.
    recent: HashMap<u64, Vec<u32>>,
    /// Distinct non-zero HMAC keys, each with the latest expiry of a shard using it.
    hmac_keys: Vec<(HmacKey, u64)>,
}

impl Index {
    fn add_slot(&mut self, hash: ShardHash, key: HmacKey, expiry: u64) -> u32 {
        let id = self.slots.len() as u32;
        self.slots.push(Slot {
            hash,
            key,
            expiry,
            dead: false,
            touched: false,
        });
        self.by_hash.insert(hash, id);
        if !key.is_zero() {
            match self.hmac_keys.iter_mut().find(|(k, _)| *k == key) {
                Some((_, e)) => *e = (*e).max(expiry),
                None => self.hmac_keys.push((key, expiry)),
            }
        }
        id
    }

    /// Slots whose shard may hold a chunk with this truncated stored hash.
    fn candidates(&self, truncated: u64) -> impl Iterator<Item = u32> + '_ {
        let start = self.keys.partition_point(|&k| k < truncated);
        let end = start + self.keys[start..].partition_point(|&k| k == truncated);
        self.key_slots[start..end]
            .iter()
            .copied()
            .chain(self.recent.get(&truncated).into_iter().flatten().copied())
    }
}

#[derive(Debug, Default)]
struct State {
    index: Option<Index>,
    /// Recently parsed shards, most recent last.
    loaded: VecDeque<(ShardHash, Arc<Shard>)>,
    /// The directory's size as last measured plus what this process inserted since.
    approx_bytes: Option<u64>,
}

impl State {
    fn remember(&mut self, hash: ShardHash, shard: Arc<Shard>) {
        self.loaded.retain(|(h, _)| *h != hash);
        let mut chunks = shard.num_chunks();
        self.loaded.push_back((hash, shard));
        chunks += self
            .loaded
            .iter()
            .rev()
            .skip(1)
            .map(|(_, s)| s.num_chunks())
            .sum::<usize>();
        while self.loaded.len() > 1
            && (self.loaded.len() > LOADED_CAPACITY || chunks > LOADED_MAX_CHUNKS)
        {
            if let Some((_, s)) = self.loaded.pop_front() {
                chunks -= s.num_chunks();
            }
        }
    }

    fn forget(&mut self, hash: &ShardHash) {
        self.loaded.retain(|(h, _)| h != hash);
        if let Some(index) = &mut self.index {
            if let Some(&id) = index.by_hash.get(hash) {
                index.slots[id as usize].dead = true;
            }
        }
    }
}

/// The directory under an endpoint directory holding the upload claims ([`ShardCache::claim`]).
pub const CLAIMS_SUBDIR: &str = "claims";

/// An upload claim ([`ShardCache::claim`]), held until dropped.
#[derive(Debug)]
pub struct Claim {
    /// The locked file; `None` when the wait ran out and the upload goes ahead unclaimed.
    file: Option<File>,
    /// How long the claim was waited for.
    pub waited: Duration,
}

impl Claim {
    /// Whether the claim is held (false: the wait ran out).
    pub fn is_held(&self) -> bool {
        self.file.is_some()
    }
}

/// A cached shard file seen by a directory scan.
struct Entry {
    path: PathBuf,
    hash: ShardHash,
    len: u64,
    mtime: SystemTime,
}

/// The shard cache of one endpoint. See the module documentation.
#[derive(Debug)]
pub struct ShardCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
}

impl ShardCache {
    /// The cache root: `$GIT_XET_CACHE_DIR` if set and not empty, else the user's cache
    /// directory for git-xet.
    pub fn root_dir() -> Result<PathBuf, CacheError> {
        if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
            return Ok(PathBuf::from(dir));
        }
        directories::ProjectDirs::from("", "", "git-xet")
            .map(|d| d.cache_dir().to_path_buf())
            .ok_or(CacheError::NoCacheDir)
    }

    /// The size limit from `$GIT_XET_CACHE_MAX_SIZE` (see [`parse_size`]), or
    /// [`DEFAULT_MAX_BYTES`] when it is unset or empty.
    pub fn configured_max_bytes() -> Result<u64, CacheError> {
        match std::env::var(CACHE_MAX_SIZE_ENV) {
            Ok(v) if !v.trim().is_empty() => parse_size(&v).ok_or(CacheError::InvalidSize {
                value: v,
                origin: CACHE_MAX_SIZE_ENV.into(),
            }),
            _ => Ok(DEFAULT_MAX_BYTES),
        }
    }

    /// The cache of `endpoint` (a CAS URL or a local store directory) under [`Self::root_dir`],
    /// limited to [`Self::configured_max_bytes`]. A local directory that exists is made
    /// absolute first, so that every spelling of it shares one cache. Creates nothing until a
    /// shard is inserted.
    pub fn for_endpoint(endpoint: &str) -> Result<ShardCache, CacheError> {
        let normalized = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            fs::canonicalize(endpoint)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| endpoint.to_string())
        };
        let dir = Self::root_dir()?
            .join(SHARDS_SUBDIR)
            .join(Self::endpoint_key(&normalized));
        Ok(Self::open(&dir).with_max_bytes(Self::configured_max_bytes()?))
    }

    /// The cache in `dir` (created on the first insert), limited to [`DEFAULT_MAX_BYTES`].
    pub fn open(dir: &Path) -> ShardCache {
        ShardCache {
            dir: dir.to_path_buf(),
            max_bytes: DEFAULT_MAX_BYTES,
            state: Mutex::new(State::default()),
        }
    }

    /// Sets the size limit.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> ShardCache {
        self.max_bytes = max_bytes;
        self
    }

    /// The caches of every endpoint under `root` (a cache root, see [`Self::root_dir`]), sorted
    /// by directory name; none if `root/shards` does not exist.
    pub fn all_under(root: &Path) -> Result<Vec<ShardCache>, CacheError> {
        let shards = root.join(SHARDS_SUBDIR);
        let entries = match fs::read_dir(&shards) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CacheError::io("cannot list", &shards)(e)),
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(CacheError::io("cannot list", &shards))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs.iter().map(|d| ShardCache::open(d)).collect())
    }

    /// The directory name of an endpoint: its host (for a URL, without user info, lowercased)
    /// or last path component (for a directory), reduced to `[A-Za-z0-9._-]` and at most 40
    /// characters, then `-` and the first 16 hex digits of the SHA-256 of the endpoint (URL
    /// scheme and host lowercased, user info and trailing slashes removed).
    pub fn endpoint_key(endpoint: &str) -> String {
        let e = endpoint.trim();
        let e = match e.trim_end_matches(['/', '\\']) {
            "" => e,
            trimmed => trimmed,
        };
        let (readable, hashed) = match e.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let host = authority
                    .rsplit_once('@')
                    .map_or(authority, |(_, h)| h)
                    .to_ascii_lowercase();
                let hashed = format!("{}://{host}{path}", scheme.to_ascii_lowercase());
                let readable = if host.is_empty() {
                    last_component(path).to_string()
                } else {
                    host
                };
                (readable, hashed)
            }
            None => (last_component(e).to_string(), e.to_string()),
        };
        let mut name: String = readable
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        // No hidden directories, no `.` or `..`.
        name = name.trim_start_matches('.').to_string();
        if name.is_empty() {
            name = "endpoint".into();
        }
        let digest = sha2::Sha256::digest(hashed.as_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("{name}-{hex}")
    }

    /// The directory of this cache.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `shard` (any form of model: our upload shard or a dedup answer, keyed or not)
    /// under its hash, atomically, and adds it to this cache's index. Storing a shard that is
    /// already there only marks it used. May prune the directory afterwards (see the module
    /// documentation). Returns the shard's hash.
    pub fn insert_shard(&self, shard: &Shard) -> Result<ShardHash, CacheError> {
        let mut sorted = shard.clone();
        sorted.sort();
        let (bytes, hash) = sorted
            .to_complete_bytes_and_hash(LookupTables::ALL)
            .map_err(|source| CacheError::Serialize {
                dir: self.dir.clone(),
                source,
            })?;
        let path = self.dir.join(shard_file_name(&hash));
        let written = if path.exists() {
            touch(&path);
            false
        } else {
            write_atomically(&self.dir, &path, &bytes)?;
            true
        };

        let over = {
            let mut state = self.state();
            if let Some(index) = &mut state.index {
                match index.by_hash.get(&hash) {
                    Some(&id) => {
                        let slot = &mut index.slots[id as usize];
                        slot.dead = false;
                        slot.touched = true;
                    }
                    None => {
                        let id = index.add_slot(hash, sorted.meta.hmac_key, sorted.meta.key_expiry);
                        index.slots[id as usize].touched = true;
                        for x in &sorted.xorbs {
                            for c in &x.chunks {
                                let ids = index.recent.entry(c.hash.truncated()).or_default();
                                if ids.last() != Some(&id) {
                                    ids.push(id);
                                }
                            }
                        }
                    }
                }
            }
            state.remember(hash, Arc::new(sorted));
            if written {
                if let Some(b) = &mut state.approx_bytes {
                    *b += bytes.len() as u64;
                }
            }
            state.approx_bytes.is_none_or(|b| b > self.max_bytes)
        };
        if over {
            // Measure (another process may have pruned already) and prune if really over.
            let stats = self.stats()?;
            if stats.bytes > self.max_bytes {
                self.prune_keeping(self.max_bytes / 10 * 9, Some(&hash))?;
            } else {
                self.state().approx_bytes = Some(stats.bytes);
            }
        }
        Ok(hash)
    }

    /// Adds to this cache's index the shards other processes wrote since it was built (agents of
    /// the same push finishing their uploads). Cheap when nothing changed: one directory listing.
    /// Returns how many shards were added. Before the index is built there is nothing to do
    /// (the first lookup builds it from the directory).
    pub fn refresh(&self) -> Result<usize, CacheError> {
        let now = unix_now();
        let entries = self.scan()?;
        let mut state = self.state();
        let Some(index) = &mut state.index else {
            return Ok(0);
        };
        let mut added = 0;
        for entry in entries {
            if index.by_hash.contains_key(&entry.hash) {
                continue;
            }
            let found = match index_file(&entry.path, &entry.hash, now) {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) if e.is_not_found() => continue,
                Err(e) => {
                    discard(&entry.path, &e);
                    continue;
                }
            };
            let id = index.add_slot(entry.hash, found.key, found.expiry);
            for k in found.keys {
                let ids = index.recent.entry(k).or_default();
                if ids.last() != Some(&id) {
                    ids.push(id);
                }
            }
            added += 1;
        }
        Ok(added)
    }

    /// Takes this endpoint's claim on uploading content that starts with the chunk `first`,
    /// waiting up to `patience` while another process (an agent of the same push, uploading
    /// another version of the same file) holds it. Whoever waited then finds that upload's
    /// shard here ([`Self::refresh`]) and sends only what differs. The claim is a lock on a file
    /// in `claims/`, released when the [`Claim`] is dropped or the process ends. Past
    /// `patience` the upload goes ahead unclaimed (it only deduplicates less).
    pub fn claim(&self, first: &ChunkHash, patience: Duration) -> Result<Claim, CacheError> {
        let dir = self.dir.join(CLAIMS_SUBDIR);
        fs::create_dir_all(&dir).map_err(CacheError::io("cannot create", &dir))?;
        let path = dir.join(format!("{}.lock", &first.to_hex()[..32]));
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(CacheError::io("cannot open", &path))?;
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => {
                    return Ok(Claim {
                        file: Some(file),
                        waited: started.elapsed(),
                    })
                }
                Err(fs::TryLockError::WouldBlock) if started.elapsed() < patience => {
                    std::thread::sleep(Duration::from_millis(25));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Ok(Claim {
                        file: None,
                        waited: started.elapsed(),
                    })
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(CacheError::io("cannot lock", &path)(e))
                }
            }
        }
    }

    /// A cached shard whose xorb section holds `chunk` (a raw chunk hash; keyed shards are
    /// searched with the keyed form under their key, and skipped once expired). Builds the
    /// index on the first call; see the module documentation for what it costs and misses.
    /// Damaged files met on the way are removed with a warning.
    pub fn lookup(&self, chunk: &ChunkHash) -> Result<Option<Arc<Shard>>, CacheError> {
        let now = unix_now();
        let mut state = self.state();
        if state.index.is_none() {
            let (index, bytes) = self.build_index(now)?;
            state.index = Some(index);
            state.approx_bytes.get_or_insert(bytes);
        }
        let Some(index) = &state.index else {
            return Ok(None);
        };
        let mut candidates: Vec<u32> = index
            .candidates(chunk.truncated())
            .filter(|&id| index.slots[id as usize].key.is_zero())
            .collect();
        for (key, expiry) in &index.hmac_keys {
            if now > *expiry {
                continue;
            }
            let keyed = keyed_chunk_hash(key, chunk).truncated();
            candidates.extend(index.candidates(keyed).filter(|&id| {
                let slot = &index.slots[id as usize];
                slot.key == *key && now <= slot.expiry
            }));
        }
        candidates.dedup();
        for id in candidates {
            let Some(index) = &state.index else { break };
            let slot = &index.slots[id as usize];
            if slot.dead {
                continue;
            }
            let (hash, touched) = (slot.hash, slot.touched);
            let Some(shard) = self.load(&mut state, &hash) else {
                state.forget(&hash);
                continue;
            };
            if shard.find_chunk(chunk).is_none() {
                // A collision of truncated hashes.
                continue;
            }
            if !touched {
                touch(&self.dir.join(shard_file_name(&hash)));
                if let Some(index) = &mut state.index {
                    index.slots[id as usize].touched = true;
                }
            }
            return Ok(Some(shard));
        }
        Ok(None)
    }

    /// The parsed shard `hash`, from memory or disk; `None` (after a warning and removing the
    /// file, if it is damaged) when it cannot be used.
    fn load(&self, state: &mut State, hash: &ShardHash) -> Option<Arc<Shard>> {
        if let Some((_, s)) = state.loaded.iter().find(|(h, _)| h == hash) {
            return Some(s.clone());
        }
        let path = self.dir.join(shard_file_name(hash));
        match read_shard(&path, hash) {
            Ok(shard) => {
                let shard = Arc::new(shard);
                state.remember(*hash, shard.clone());
                Some(shard)
            }
            Err(e) => {
                discard(&path, &e);
                None
            }
        }
    }

    /// Reads the header, footer and chunk lookup table of every cached shard. Also returns the
    /// size of the directory as scanned.
    fn build_index(&self, now: u64) -> Result<(Index, u64), CacheError> {
        let mut index = Index::default();
        let mut pairs: Vec<(u64, u32)> = Vec::new();
        let entries = self.scan()?;
        let bytes = entries.iter().map(|e| e.len).sum();
        for entry in entries {
            let found = match index_file(&entry.path, &entry.hash, now) {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => {
                    discard(&entry.path, &e);
                    continue;
                }
            };
            let id = index.add_slot(entry.hash, found.key, found.expiry);
            pairs.extend(found.keys.into_iter().map(|k| (k, id)));
        }
        pairs.sort_unstable();
        pairs.dedup();
        (index.keys, index.key_slots) = pairs.into_iter().unzip();
        Ok((index, bytes))
    }

    /// Every cached shard file (`<64 hex digits>.mdb`) with its size and mtime. Files that
    /// vanish during the scan are left out; a missing directory is an empty cache.
    fn scan(&self) -> Result<Vec<Entry>, CacheError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CacheError::io("cannot list", &self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(CacheError::io("cannot list", &self.dir))?;
            let name = entry.file_name();
            let Some(hash) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".mdb"))
                .and_then(|stem| stem.parse::<ShardHash>().ok())
            else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            out.push(Entry {
                path: entry.path(),
                hash,
                len: meta.len(),
                mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        Ok(out)
    }

    /// Deletes every cached shard that lists any of `xorbs` in its xorb section: the server said
    /// it no longer has them intact, so no later upload may deduplicate against them. Returns
    /// how many shards were deleted. Shards that cannot be read are left to pruning.
    pub fn forget_xorbs(&self, xorbs: &[XorbHash]) -> Result<usize, CacheError> {
        if xorbs.is_empty() {
            return Ok(0);
        }
        let mut report = PruneReport::default();
        let mut forgotten = Vec::new();
        for entry in self.scan()? {
            let Ok(shard) = read_shard(&entry.path, &entry.hash) else {
                continue;
            };
            if shard.xorbs.iter().any(|x| xorbs.contains(&x.hash))
                && self.remove(&entry, &mut report)
            {
                forgotten.push(entry.hash);
            }
        }
        let mut state = self.state();
        for hash in &forgotten {
            state.forget(hash);
        }
        if let Some(bytes) = &mut state.approx_bytes {
            *bytes = bytes.saturating_sub(report.removed_bytes);
        }
        Ok(forgotten.len())
    }

    /// The number and total size of the cached shards.
    pub fn stats(&self) -> Result<CacheStats, CacheError> {
        let entries = self.scan()?;
        Ok(CacheStats {
            dir: self.dir.clone(),
            shards: entries.len() as u64,
            bytes: entries.iter().map(|e| e.len).sum(),
        })
    }

    /// Deletes temporary files left by crashed writers, damaged shards and keyed shards whose
    /// key expired more than [`EXPIRY_BUFFER_SECS`] ago, then the least recently used shards
    /// until at most `max_bytes` remain. Files other processes delete meanwhile are skipped.
    pub fn prune(&self, max_bytes: u64) -> Result<PruneReport, CacheError> {
        self.prune_keeping(max_bytes, None)
    }

    /// [`Self::prune`], never deleting `keep` for its size (the shard just inserted, whose
    /// modification time may tie with older ones on a coarse file system clock).
    fn prune_keeping(
        &self,
        max_bytes: u64,
        keep: Option<&ShardHash>,
    ) -> Result<PruneReport, CacheError> {
        self.remove_temp_files(Some(STALE_TEMP));
        let now = unix_now();
        let mut report = PruneReport::default();
        let mut removed = Vec::new();
        let mut live = Vec::new();
        for entry in self.scan()? {
            match read_layout(&entry.path) {
                Ok(layout) if expired_long_ago(&layout, now) => {
                    if self.remove(&entry, &mut report) {
                        removed.push(entry.hash);
                    }
                }
                Ok(_) => live.push(entry),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    discard(&entry.path, &e);
                    removed.push(entry.hash);
                }
            }
        }
        live.sort_by(|a, b| a.mtime.cmp(&b.mtime).then_with(|| a.hash.cmp(&b.hash)));
        let mut total: u64 = live.iter().map(|e| e.len).sum();
        let mut kept = live.len() as u64;
        for entry in &live {
            if total <= max_bytes {
                break;
            }
            if Some(&entry.hash) == keep {
                continue;
            }
            if self.remove(entry, &mut report) {
                removed.push(entry.hash);
                total -= entry.len;
                kept -= 1;
            }
        }
        report.kept_shards = kept;
        report.kept_bytes = total;
        let mut state = self.state();
        for hash in &removed {
            state.forget(hash);
        }
        state.approx_bytes = Some(total);
        Ok(report)
    }

    /// Deletes one shard file, counting it in `report` if this call deleted it. Returns
    /// whether the file is gone (deleted by this call or, before it, by another process).
    fn remove(&self, entry: &Entry, report: &mut PruneReport) -> bool {
        match fs::remove_file(&entry.path) {
            Ok(()) => {
                report.removed_shards += 1;
                report.removed_bytes += entry.len;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => {
                tracing::warn!(path = %entry.path.display(), error = %e, "cannot delete a cached shard");
                false
            }
        }
    }

    /// Deletes temporary files (only those older than `older_than`, if given).
    fn remove_temp_files(&self, older_than: Option<Duration>) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let is_temp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with('.') && n.ends_with(TEMP_SUFFIX));
            if !is_temp {
                continue;
            }
            let old_enough = older_than.is_none_or(|age| {
                entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| now.duration_since(m).ok())
                    .is_some_and(|d| d > age)
            });
            if old_enough {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// Deletes every cached shard (and temporary file) and the directory itself if it is then
    /// empty; forgets the in-memory index.
    pub fn clear(&self) -> Result<PruneReport, CacheError> {
        self.remove_temp_files(None);
        let mut report = PruneReport::default();
        for entry in self.scan()? {
            self.remove(&entry, &mut report);
        }
        let left = self.stats()?;
        report.kept_shards = left.shards;
        report.kept_bytes = left.bytes;
        if left.shards == 0 {
            // Fails harmlessly if another process wrote meanwhile or left other files.
            let _ = fs::remove_dir(&self.dir);
        }
        let mut state = self.state();
        *state = State::default();
        Ok(report)
    }
}

/// Parses a size: a number of bytes with an optional binary suffix `K`, `M`, `G` or `T`
/// (powers of 1024, case-insensitive, optionally followed by `B` or `iB`), e.g. `500M`, `2G`,
/// `1.5G`, `1048576`. `None` if it is not one.
pub fn parse_size(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let (body, unit_required) = match lower.strip_suffix("ib") {
        Some(b) => (b, true),
        None => (lower.strip_suffix('b').unwrap_or(&lower), false),
    };
    let (number, shift) = match body.as_bytes().last()? {
        b'k' => (&body[..body.len() - 1], 10),
        b'm' => (&body[..body.len() - 1], 20),
        b'g' => (&body[..body.len() - 1], 30),
        b't' => (&body[..body.len() - 1], 40),
        _ if unit_required => return None,
        _ => (body, 0),
    };
    let number = number.trim_end();
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(1u64 << shift);
    }
    let f: f64 = number.parse().ok()?;
    let bytes = f * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// The size in binary units with one decimal, e.g. `1.5 GiB`, or bytes below 1 KiB.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn last_component(path: &str) -> &str {
    path.rsplit(['/', '\\'])
        .find(|c| !c.is_empty())
        .unwrap_or(path)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn expired_long_ago(layout: &ShardLayout, now: u64) -> bool {
    !layout.meta.hmac_key.is_zero()
        && now > layout.meta.key_expiry.saturating_add(EXPIRY_BUFFER_SECS)
}

/// Marks a file used now. Failures (the file vanished, a read-only cache) only cost the LRU
/// order.
fn touch(path: &Path) {
    if let Ok(f) = File::options().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Handles a cached file that could not be used: a damaged one is deleted with a warning, a
/// vanished one is ignored, an unreadable one is reported and left alone.
fn discard(path: &Path, e: &CacheError) {
    if e.is_not_found() {
        return;
    }
    if e.is_damage() {
        tracing::warn!(path = %path.display(), error = %e, "removing a damaged shard from the shard cache");
        let _ = fs::remove_file(path);
    } else {
        tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable cached shard");
    }
}

/// Writes `bytes` to `path` through a synced temporary file in `dir` and a rename.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    fs::create_dir_all(dir).map_err(CacheError::io("cannot create", dir))?;
    let tmp = dir.join(format!(".{}{TEMP_SUFFIX}", crate::store::random_hex(16)));
    let result = (|| {
        let mut f = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(CacheError::io("cannot create", &tmp))?;
        f.write_all(bytes)
            .map_err(CacheError::io("cannot write", &tmp))?;
        f.sync_all().map_err(CacheError::io("cannot sync", &tmp))?;
        drop(f);
        match fs::rename(&tmp, path) {
            Ok(()) => Ok(()),
            // Another process put the same shard there first (platforms that do not replace).
            Err(_) if path.exists() => Ok(()),
            Err(e) => Err(CacheError::io("cannot rename a temporary file to", path)(e)),
        }
    })();
    if result.is_err() || tmp.exists() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Reads and checks a cached shard's header and footer.
fn read_layout(path: &Path) -> Result<ShardLayout, CacheError> {
    let mut f = File::open(path).map_err(CacheError::io("cannot open", path))?;
    read_layout_from(&mut f, path)
}

fn read_layout_from(f: &mut File, path: &Path) -> Result<ShardLayout, CacheError> {
    let len = f
        .metadata()
        .map_err(CacheError::io("cannot read", path))?
        .len();
    let corrupt = |source| CacheError::Corrupt {
        path: path.to_path_buf(),
        source,
    };
    if len < HEADER_SIZE + FOOTER_SIZE {
        // Too short to be a complete shard: let the reader say what is missing.
        let mut all = Vec::new();
        f.read_to_end(&mut all)
            .map_err(CacheError::io("cannot read", path))?;
        let n = all.len();
        let header = &all[..n.min(HEADER_SIZE as usize)];
        let footer = &all[n.saturating_sub(FOOTER_SIZE as usize)..];
        return ShardLayout::read(header, footer, n as u64).map_err(corrupt);
    }
    let mut header = [0u8; HEADER_SIZE as usize];
    let mut footer = [0u8; FOOTER_SIZE as usize];
    f.read_exact(&mut header)
        .map_err(CacheError::io("cannot read", path))?;
    f.seek(SeekFrom::Start(len - FOOTER_SIZE))
        .and_then(|_| f.read_exact(&mut footer))
        .map_err(CacheError::io("cannot read", path))?;
    ShardLayout::read(&header, &footer, len).map_err(corrupt)
}

/// What the index needs of one cached shard.
struct IndexedFile {
    key: HmacKey,
    expiry: u64,
    /// The truncated stored hash of every chunk.
    keys: Vec<u64>,
}

/// Reads what the index needs of one cached shard. `None` for a shard with nothing to find (no
/// xorb blocks); keyed shards past their deletion time are deleted and give `None` too.
fn index_file(path: &Path, hash: &ShardHash, now: u64) -> Result<Option<IndexedFile>, CacheError> {
    let mut f = File::open(path).map_err(CacheError::io("cannot open", path))?;
    let layout = read_layout_from(&mut f, path)?;
    if expired_long_ago(&layout, now) {
        tracing::debug!(path = %path.display(), "deleting an expired cached shard");
        let _ = fs::remove_file(path);
        return Ok(None);
    }
    if !layout.has_xorbs() {
        return Ok(None);
    }
    let keys = if layout.chunk_lookup_num_entry > 0 {
        let range = layout.chunk_lookup_range();
        let mut table = vec![0u8; (range.end - range.start) as usize];
        f.seek(SeekFrom::Start(range.start))
            .and_then(|_| f.read_exact(&mut table))
            .map_err(CacheError::io("cannot read", path))?;
        layout
            .chunk_lookup_keys(&table)
            .map_err(|source| CacheError::Corrupt {
                path: path.to_path_buf(),
                source,
            })?
    } else {
        // Not written by us (we always write the tables): read it whole.
        let shard = read_shard(path, hash)?;
        shard
            .xorbs
            .iter()
            .flat_map(|x| x.chunks.iter().map(|c| c.hash.truncated()))
            .collect()
    };
    Ok(Some(IndexedFile {
        key: layout.meta.hmac_key,
        expiry: layout.meta.key_expiry,
        keys,
    }))
}

/// Reads a whole cached shard, checking that its bytes hash to its name and parse.
fn read_shard(path: &Path, hash: &ShardHash) -> Result<Shard, CacheError> {
    let bytes = fs::read(path).map_err(CacheError::io("cannot read", path))?;
    let parsed = ParsedShard::parse(&bytes).map_err(|source| CacheError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    let actual = ShardHash::of(&bytes);
    if actual != *hash {
        return Err(CacheError::WrongName {
            path: path.to_path_buf(),
            actual,
        });
    }
    Ok(parsed.shard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("500M"), Some(500 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("2GB"), Some(2 << 30));
        assert_eq!(parse_size("10k"), Some(10 << 10));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("1234"), Some(1234));
        assert_eq!(parse_size("1234B"), Some(1234));
        assert_eq!(parse_size(" 0 "), Some(0));
        for bad in ["", "G", "-1G", "12X", "1 2", "abc", "1e3", "99999999999T"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
    }

    #[test]
    fn endpoint_keys_are_readable_safe_and_distinct() {
        let a = ShardCache::endpoint_key("https://cas.example.com:8443/xet");
        assert!(a.starts_with("cas.example.com_8443-"), "{a}");
        assert_eq!(a.len(), "cas.example.com_8443-".len() + 16);
        // Credentials, case of the host and trailing slashes do not matter...
        assert_eq!(
            ShardCache::endpoint_key("https://user:secret@CAS.example.com:8443/xet/"),
            a
        );
        // ...the path does.
        assert_ne!(
            ShardCache::endpoint_key("https://cas.example.com:8443/other"),
            a
        );
        let d = ShardCache::endpoint_key("/srv/data/xet store");
        assert!(d.starts_with("xet_store-"), "{d}");
        assert_ne!(ShardCache::endpoint_key("/other/xet store"), d);
        for odd in ["", "/", "..", "https://", "C:\\data\\..\\x", "../../etc"] {
            let k = ShardCache::endpoint_key(odd);
            assert!(
                k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
                "{k}"
            );
            assert!(!k.starts_with('.'), "{k}");
        }
    }
}
