//! Where object bytes live: the [`ObjectBackend`] trait and its filesystem implementation, and
//! the [`SharedBucket`] trait of storage several server processes share (the S3 backend), which
//! keeps their common records besides the objects: the shard log, batches of checked claims,
//! checkpoints, leases, gc's sweep records, nodes' status records. A directory, which one
//! process owns, has none ([`ObjectBackend::shared`] is `None`): callers say what they do
//! without them.
//!
//! A backend stores immutable, content-addressed objects (stored xorbs and accepted shards) by
//! [`ObjectKey`]. Writes are create-if-absent and atomic: a reader never sees a partly written
//! object, and of several concurrent writers of the same key exactly one reports that it created
//! it. The only other ways an object changes are the store's own: [`ObjectBackend::replace_file`]
//! (an atomic overwrite with a verified copy, to repair), [`ObjectBackend::quarantine`] (moved
//! aside when found damaged) and [`ObjectBackend::remove`] (garbage collection). The trait is
//! deliberately small so that an S3-compatible backend can implement it with conditional puts and
//! ranged gets.
//!
//! Every object has an [`ObjectStamp`]: its length and a token that changes whenever the object
//! is rewritten, replaced or modified in place. The store records the stamp of each object it
//! verified, so that "is this still the object we checked?" costs one `stat`.
//!
//! Filesystem layout under the backend's root:
//!
//! ```text
//! xorbs/<first two hex digits>/<xorb hash>    stored xorbs (chunk region + V1 footer)
//! shards/<shard hash>.mdb                      accepted shards, as uploaded
//! quarantine/xorbs/<hash>.<unix time>          damaged objects moved aside, kept for the operator
//! quarantine/shards/<hash>.mdb.<unix time>
//! tmp/                                         files being written (same filesystem, for rename)
//! ```
//!
//! A full disk: every write first checks that the filesystem keeps at least the reserve set with
//! [`FsBackend::with_min_free`] (0 by default) free after it, and otherwise fails with `ENOSPC`
//! exactly as a full disk would.

use crate::repo_name::RepoName;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::checkpoint_format::CheckpointId;
use xet_format::{FileHash, LfsOid, ShardHash, XorbHash};

/// The name of an object in a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKey {
    /// A stored xorb (with its footer).
    Xorb(XorbHash),
    /// An accepted shard, named by the hash of its bytes.
    Shard(ShardHash),
    /// A checkpoint of the shard log (shared storage only; see [`crate::checkpoint`]).
    Checkpoint(CheckpointId),
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectKey::Xorb(h) => write!(f, "xorb {h}"),
            ObjectKey::Shard(h) => write!(f, "shard {h}"),
            ObjectKey::Checkpoint(id) => write!(f, "checkpoint {id}"),
        }
    }
}

/// One stored version of an object: its length and a token that changes whenever the object is
/// rewritten, replaced or modified in place. On a filesystem the token is the inode number and
/// the inode change time (`ctime`), which every write, truncation, rename or link updates and
/// which no user-space call can set back (unlike `mtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectStamp {
    pub len: u64,
    pub version: [u8; 24],
}

impl ObjectStamp {
    /// The length of [`Self::to_bytes`].
    pub(crate) const ENCODED_LEN: usize = 32;

    /// `len` (u64 little-endian), then the version token.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..].copy_from_slice(&self.version);
        out
    }

    /// The inverse of [`Self::to_bytes`]; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != Self::ENCODED_LEN {
            return None;
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&b[..8]);
        let mut version = [0u8; 24];
        version.copy_from_slice(&b[8..]);
        Some(Self {
            len: u64::from_le_bytes(len),
            version,
        })
    }
}

/// A stored xorb object found by [`ObjectBackend::list_xorbs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedXorb {
    pub hash: XorbHash,
    pub len: u64,
    /// When the object was last written (stored or replaced).
    pub modified: SystemTime,
}

/// A backend failure, naming the object and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{op} {key}: {source}")]
    Io {
        op: &'static str,
        key: String,
        source: io::Error,
    },
    #[error("{key}: range {start}..{end} is outside the object's {len} bytes")]
    RangeOutOfBounds {
        key: ObjectKey,
        start: u64,
        end: u64,
        len: u64,
    },
}

/// Fails with [`BackendError::RangeOutOfBounds`] unless `range` lies within an object of `len`
/// bytes.
pub(crate) fn check_range(
    key: ObjectKey,
    range: &Range<u64>,
    len: u64,
) -> Result<(), BackendError> {
    if range.start > range.end || range.end > len {
        return Err(BackendError::RangeOutOfBounds {
            key,
            start: range.start,
            end: range.end,
            len,
        });
    }
    Ok(())
}

/// Content-addressed object storage (see the module documentation).
pub trait ObjectBackend: Send + Sync + 'static {
    /// Stores `bytes` under `key` unless the key exists. Atomic: the object appears whole or not
    /// at all, and it is durable when this returns. `Ok(true)` if this call created it.
    fn put_if_absent(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError>;
    /// [`Self::put_if_absent`] for an object the caller believes new: storage that would look
    /// first may skip the look (see [`Self::put_new_file`]).
    fn put_new(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError> {
        self.put_if_absent(key, bytes)
    }
    /// [`Self::put_if_absent`] for a complete object already written (and flushed) to `file`, a
    /// path from [`Self::temp_path`]. The file is consumed: moved into place or removed.
    fn put_file_if_absent(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError>;
    /// [`Self::put_file_if_absent`] for a caller that found `key` absent a moment ago (its
    /// stamp was `None`): storage that would look first may skip the look. A store that
    /// honours conditional writes still never replaces the object; one that ignores them
    /// (Garage) may replace it with these same bytes, which for a content-addressed key is
    /// the same object.
    fn put_new_file(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError> {
        self.put_file_if_absent(key, file)
    }
    /// Atomically puts the complete object in `file` (from [`Self::temp_path`]) in place of
    /// whatever `key` holds: a repair with a verified copy. The file is consumed.
    fn replace_file(&self, key: ObjectKey, file: &Path) -> Result<(), BackendError>;
    /// A new unique path where an object (or a request body) can be prepared before
    /// [`Self::put_file_if_absent`], on the same filesystem; nothing is created. `what` ends the
    /// name, for whoever lists the directory.
    fn temp_path(&self, what: &str) -> PathBuf;
    /// Fails with `ENOSPC` unless writing `bytes` more leaves the configured reserve free.
    fn check_space(&self, bytes: u64) -> Result<(), BackendError>;
    /// The object's length, or `None` if it does not exist (its stamp's length).
    fn len(&self, key: ObjectKey) -> Result<Option<u64>, BackendError> {
        Ok(self.stamp(key)?.map(|s| s.len))
    }
    /// The object's current [`ObjectStamp`], or `None` if it does not exist.
    fn stamp(&self, key: ObjectKey) -> Result<Option<ObjectStamp>, BackendError>;
    /// When the object was last written (stored, replaced or touched), or `None` if it does not
    /// exist.
    fn modified(&self, key: ObjectKey) -> Result<Option<SystemTime>, BackendError>;
    /// Bytes `range` of the object (end exclusive); `None` if it does not exist.
    fn read_range(
        &self,
        key: ObjectKey,
        range: Range<u64>,
    ) -> Result<Option<Vec<u8>>, BackendError>;
    /// The whole object; `None` if it does not exist.
    fn read_all(&self, key: ObjectKey) -> Result<Option<Vec<u8>>, BackendError>;
    /// The last `n` bytes of the object (all of it if shorter) and the stamp of the version
    /// read (object storage answers both in one request); `None` if it does not exist. Here:
    /// the stamp, then the bytes, unless the stamp changed meanwhile (`None` then too).
    fn read_tail(
        &self,
        key: ObjectKey,
        n: u64,
    ) -> Result<Option<(Vec<u8>, ObjectStamp)>, BackendError> {
        let Some(stamp) = self.stamp(key)? else {
            return Ok(None);
        };
        let Some(bytes) = self.read_range(key, stamp.len.saturating_sub(n)..stamp.len)? else {
            return Ok(None);
        };
        Ok((self.stamp(key)? == Some(stamp)).then_some((bytes, stamp)))
    }
    /// The whole object and the stamp of the version read (object storage answers both in one
    /// request); `None` if it does not exist. Here: the stamp, then the object, unless the
    /// stamp changed meanwhile (`None` then too: the caller looks again its usual way).
    fn read_all_stamped(
        &self,
        key: ObjectKey,
    ) -> Result<Option<(Vec<u8>, ObjectStamp)>, BackendError> {
        let Some(stamp) = self.stamp(key)? else {
            return Ok(None);
        };
        let Some(bytes) = self.read_all(key)? else {
            return Ok(None);
        };
        Ok((self.stamp(key)? == Some(stamp)).then_some((bytes, stamp)))
    }
    /// Deletes the object. `Ok(false)` if it did not exist.
    fn remove(&self, key: ObjectKey) -> Result<bool, BackendError>;
    /// Moves a damaged object out of the way: kept for the operator, no longer served.
    /// `Ok(false)` if it did not exist.
    fn quarantine(&self, key: ObjectKey) -> Result<bool, BackendError>;
    /// Sets the object's modification time to now (an upload found it already stored: garbage
    /// collection counts its grace period from now). Changes its stamp.
    fn touch(&self, key: ObjectKey) -> Result<(), BackendError>;
    /// Every stored xorb object, sorted by hash.
    fn list_xorbs(&self) -> Result<Vec<ListedXorb>, BackendError>;
    /// Removes files in the temporary directory last written more than `older_than` ago (left
    /// by interrupted uploads): how many, and their bytes.
    fn clean_temp(&self, older_than: std::time::Duration) -> Result<(u64, u64), BackendError>;
    /// Every shard stored, for rebuilding an index.
    fn list_shards(&self) -> Result<Vec<ShardHash>, BackendError>;

    /// The records the processes sharing this storage keep beside the objects (the shard log,
    /// checked claims, checkpoints, leases, sweep records, node records): `None` for a
    /// directory, which one process owns.
    fn shared(&self) -> Option<&dyn SharedBucket> {
        None
    }
    /// Whether other server processes store objects in the same place (several nodes on one
    /// bucket): the store then catches up with the shards they accept (see [`SharedBucket`]).
    fn is_shared(&self) -> bool {
        self.shared().is_some()
    }
}

/// What storage several server processes share keeps besides the objects, and how they learn
/// of each other's work (see [`ObjectBackend::shared`]).
pub trait SharedBucket: Send + Sync {
    /// Tells the other processes sharing the storage that `shard` (already stored) was
    /// accepted, through repository `repo` if the uploader's token named one (recorded for
    /// good: see [`Self::list_access`]).
    fn log_shard(&self, shard: &ShardHash, repo: Option<&RepoName>) -> Result<(), BackendError>;
    /// Shards logged by any process since `cursor`, which it advances, each with the
    /// repository it was registered through and the time its entry is named by (milliseconds
    /// since the Unix epoch). May repeat entries returned before (the caller skips those it
    /// knows).
    fn logged_shards(&self, cursor: &mut LogCursor) -> Result<Vec<LogEntry>, BackendError>;
    /// Every (shard, repository) registration ever logged with a repository (shared storage
    /// only; a directory's index is its own record).
    fn list_access(&self) -> Result<Vec<(ShardHash, RepoName)>, BackendError>;
    /// Every entry of the shard log, oldest first: what a checkpoint
    /// covers ([`crate::checkpoint`]).
    fn list_log(&self) -> Result<Vec<LogEntry>, BackendError>;
    /// Deletes a log entry a checkpoint covers (nothing if it is gone).
    fn remove_log_entry(&self, entry: &LogEntry) -> Result<(), BackendError>;
    /// The names of the batches of checked claims ([`Self::record_checked_claims`]), oldest
    /// first.
    fn list_claim_batches(&self) -> Result<Vec<String>, BackendError>;
    /// Deletes a batch of checked claims a checkpoint covers (nothing if it is gone).
    fn remove_claim_batch(&self, name: &str) -> Result<(), BackendError>;
    /// Every checkpoint stored ([`ObjectKey::Checkpoint`]), oldest first.
    fn list_checkpoints(&self) -> Result<Vec<CheckpointId>, BackendError>;
    /// Signs URLs that read byte ranges of stored xorbs straight from the storage for `ttl`,
    /// with the storage's own credentials. May wait for credentials: not for async workers.
    fn range_signer(&self, ttl: std::time::Duration) -> Option<Box<dyn RangeSigner>>;
    /// A small named value every process sharing the storage must agree on (the key that signs
    /// tokens, the store version): stored as `initial` unless it exists, then read back.
    fn shared_value(&self, name: &str, initial: &[u8]) -> Result<Option<Vec<u8>>, BackendError>;
    /// Records for every process sharing the storage that `oid` was checked to be the SHA-256
    /// of `file`, so that no other one rebuilds the file to check it again.
    fn record_checked_claim(&self, oid: &LfsOid, file: &FileHash) -> Result<(), BackendError>;
    /// [`Self::record_checked_claim`] for many claims at once: on shared storage, one object
    /// per batch (read back with [`Self::checked_claims_since`]) instead of one per claim.
    fn record_checked_claims(&self, claims: &[(LfsOid, FileHash)]) -> Result<(), BackendError>;
    /// The file a process sharing the storage checked `oid` to be the SHA-256 of, if any, in
    /// a record of its own ([`Self::record_checked_claim`]).
    fn checked_claim(&self, oid: &LfsOid) -> Result<Option<FileHash>, BackendError>;
    /// The claims recorded in batches ([`Self::record_checked_claims`]) that `cursor` has not
    /// seen, oldest first; moves the cursor on.
    fn checked_claims_since(
        &self,
        cursor: &mut ClaimCursor,
    ) -> Result<Vec<(LfsOid, FileHash)>, BackendError>;
    /// How long the storage's requests took so far.
    fn timings(&self) -> Option<&crate::timings::StorageTimings>;
    /// Takes (or renews) the lease `name` for `holder` for `ttl`, unless another holder's lease
    /// on it is still running: then that holder and when its lease ends (Unix milliseconds). May wait a moment (see the S3
    /// backend): not for async workers.
    fn take_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<(String, u64)>, BackendError>;
    /// Writes (or rewrites) garbage collection's sweep record `name` on shared storage: what
    /// a collector is about to delete, read by every registration of a shard (see
    /// [`crate::gc`]).
    fn put_sweep(&self, name: &str, body: &[u8]) -> Result<(), BackendError>;
    /// The names of the sweep records, in name order (oldest first).
    fn list_sweeps(&self) -> Result<Vec<String>, BackendError>;
    /// Sweep record `name`, at most `max + 1` bytes of it (more than `max`: it is longer than
    /// a record may be); `None` if it is gone.
    fn read_sweep(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, BackendError>;
    /// Deletes sweep record `name` (nothing if it is gone).
    fn remove_sweep(&self, name: &str) -> Result<(), BackendError>;
    /// Writes (or rewrites) node `id`'s status record on shared storage, what the other nodes'
    /// status pages show of it (see [`crate::stats`]).
    fn put_node_record(&self, id: &str, body: &[u8]) -> Result<(), BackendError>;
    /// The node status records on shared storage, at most `limit` of them (the most recently
    /// written), each with when it was written and at most `max` bytes of it (a longer one is
    /// left out).
    fn node_records(
        &self,
        limit: usize,
        max: u64,
    ) -> Result<Vec<(String, SystemTime, Vec<u8>)>, BackendError>;
    /// Deletes node `id`'s status record (nothing if it is gone).
    fn remove_node_record(&self, id: &str) -> Result<(), BackendError>;
}

/// One entry of the shard log ([`SharedBucket::logged_shards`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// The time the entry is named by (its writer's clock), milliseconds since the Unix epoch.
    pub ms: u64,
    pub shard: ShardHash,
    /// The repository the shard was registered through, if the uploader's token named one.
    pub repo: Option<RepoName>,
}

/// Presigned URLs of the storage for one answer ([`SharedBucket::range_signer`]): each reads
/// one byte range of one xorb, and its signature covers the `Range` header, so the URL serves
/// that range and nothing else (a request with another `Range`, or none, is refused by the
/// storage).
pub trait RangeSigner: Send {
    /// The URL for bytes `range` (inclusive) of `xorb`; the request must send
    /// `Range: bytes=START-END` exactly. `None` if it cannot be signed.
    fn sign(&self, xorb: &XorbHash, range: &std::ops::RangeInclusive<u64>) -> Option<String>;
}

/// Where a reader of the shard log ([`SharedBucket::logged_shards`]) is: the newest entry time
/// it has seen, in milliseconds since the Unix epoch (0: from the start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogCursor {
    pub newest_ms: u64,
}

/// Where a reader of the claim batches ([`SharedBucket::checked_claims_since`]) is: the
/// newest batch time it has seen (milliseconds since the Unix epoch) and the batches it has
/// read that are recent enough to be listed again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimCursor {
    pub newest_ms: u64,
    pub read: std::collections::HashSet<String>,
}

/// Exactly the next `len` bytes of `reader` (an `UnexpectedEof` error if it ends first), read
/// into memory that is not zeroed first: a download's reads are most of what a server does,
/// and zeroing each buffer before the read overwrites it cost a sixth of a node's CPU.
pub(crate) fn read_len(reader: &mut impl io::Read, len: u64) -> io::Result<Vec<u8>> {
    let capacity = usize::try_from(len).map_err(|_| io::Error::other("range too large"))?;
    let mut buf = Vec::with_capacity(capacity);
    reader.take(len).read_to_end(&mut buf)?;
    if buf.len() != capacity {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{} bytes where {len} were expected", buf.len()),
        ));
    }
    Ok(buf)
}

/// The file of xorb `hash` in the store rooted at `root` (layout in the module docs).
pub fn xorb_path(root: &Path, hash: &XorbHash) -> PathBuf {
    let hex = hash.to_hex();
    root.join("xorbs").join(&hex[..2]).join(hex)
}

/// Objects as files under a root directory (layout in the module docs).
#[derive(Debug)]
pub struct FsBackend {
    root: PathBuf,
    spool: Spool,
}

/// A directory of temporary files on the machine's own disk (`tmp/` of a store directory):
/// objects and request bodies prepared there before they are stored, with the free-space
/// reserve checked before each write.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    /// Makes temporary file names unique within this process.
    counter: AtomicU64,
    /// Writes fail as if the disk were full when they would leave less than this free.
    min_free: u64,
}

impl Spool {
    /// The spool in `dir` (created if missing). Files left by a crash more than an hour ago are
    /// removed; a second process sharing the directory keeps the files it is writing.
    pub fn open(dir: &Path) -> Result<Self, BackendError> {
        fs::create_dir_all(dir).map_err(|source| BackendError::Io {
            op: "create directory",
            key: dir.display().to_string(),
            source,
        })?;
        let spool = Self {
            dir: dir.to_path_buf(),
            counter: AtomicU64::new(0),
            min_free: 0,
        };
        let _ = spool.clean(std::time::Duration::from_secs(3600));
        Ok(spool)
    }

    /// See [`FsBackend::with_min_free`].
    pub fn with_min_free(mut self, bytes: u64) -> Self {
        self.min_free = bytes;
        self
    }

    /// A new unique path in the spool; nothing is created. `what` ends the name.
    pub fn temp_path(&self, what: &str) -> PathBuf {
        self.dir.join(format!(
            "{}-{}-{}-{what}.tmp",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed),
            xet_protocol::random_hex(8),
        ))
    }

    /// Fails with `ENOSPC` unless writing `bytes` more leaves the reserve free.
    pub fn check_space(&self, bytes: u64) -> Result<(), BackendError> {
        if self.min_free == 0 {
            return Ok(());
        }
        xet_protocol::util::worker::expect_blocking_thread("measuring the free space (statvfs)");
        let free = available_space(&self.dir).map_err(|source| BackendError::Io {
            op: "measure the free space of",
            key: self.dir.display().to_string(),
            source,
        })?;
        if free < self.min_free.saturating_add(bytes) {
            return Err(BackendError::Io {
                op: "make room for",
                key: format!(
                    "{bytes} bytes in {} ({free} bytes free, {} kept in reserve)",
                    self.dir.display(),
                    self.min_free
                ),
                source: storage_full(),
            });
        }
        Ok(())
    }

    /// Removes files last written more than `older_than` ago: how many, and their bytes.
    pub fn clean(&self, older_than: std::time::Duration) -> Result<(u64, u64), BackendError> {
        let entries = fs::read_dir(&self.dir).map_err(|source| BackendError::Io {
            op: "list",
            key: self.dir.display().to_string(),
            source,
        })?;
        let (mut count, mut bytes) = (0u64, 0u64);
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let old = meta
                .modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= older_than);
            if meta.is_file() && old && fs::remove_file(entry.path()).is_ok() {
                count += 1;
                bytes += meta.len();
            }
        }
        Ok((count, bytes))
    }
}

impl FsBackend {
    /// Opens (creating if needed) a backend rooted at `root`.
    pub fn open(root: &Path) -> Result<Self, BackendError> {
        for dir in ["xorbs", "shards"] {
            let path = root.join(dir);
            fs::create_dir_all(&path).map_err(|source| BackendError::Io {
                op: "create directory",
                key: path.display().to_string(),
                source,
            })?;
        }
        Ok(Self {
            root: root.to_path_buf(),
            spool: Spool::open(&root.join("tmp"))?,
        })
    }

    /// Keeps `bytes` of the filesystem free: a write that would leave less fails with `ENOSPC`
    /// (HTTP 507 at the server). `u64::MAX` makes the store behave as if its disk were full.
    pub fn with_min_free(mut self, bytes: u64) -> Self {
        self.spool = self.spool.with_min_free(bytes);
        self
    }

    /// The file holding `key`.
    pub fn path(&self, key: ObjectKey) -> PathBuf {
        match key {
            ObjectKey::Xorb(h) => xorb_path(&self.root, &h),
            ObjectKey::Shard(h) => self.root.join("shards").join(format!("{h}.mdb")),
            ObjectKey::Checkpoint(id) => self.root.join("checkpoints").join(id.name()),
        }
    }

    fn io(op: &'static str, key: ObjectKey) -> impl FnOnce(io::Error) -> BackendError {
        move |source| BackendError::Io {
            op,
            key: key.to_string(),
            source,
        }
    }

    fn open_existing(&self, key: ObjectKey) -> Result<Option<File>, BackendError> {
        match File::open(self.path(key)) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io("open", key)(e)),
        }
    }

    /// Links the complete object `file` into place unless `key` exists; removes `file` either
    /// way.
    fn link_into_place(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError> {
        let path = self.path(key);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        if let Err(e) = fs::create_dir_all(&dir) {
            let _ = fs::remove_file(file);
            return Err(Self::io("create directory for", key)(e));
        }
        // A hard link creates the final name only if it is absent, atomically: of concurrent
        // writers exactly one succeeds, and the others see AlreadyExists.
        let linked = fs::hard_link(file, &path);
        let _ = fs::remove_file(file);
        match linked {
            Ok(()) => {
                sync_dir(&dir).map_err(Self::io("sync directory of", key))?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Self::io("link", key)(e)),
        }
    }

    /// Renames `from` to `to` (creating `to`'s directory) and flushes the directory.
    fn move_to(&self, key: ObjectKey, from: &Path, to: &Path) -> Result<(), BackendError> {
        let dir = to.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(Self::io("create directory for", key))?;
        fs::rename(from, to).map_err(Self::io("move", key))?;
        sync_dir(&dir).map_err(Self::io("sync directory of", key))
    }
}

/// Flushes a directory entry to disk (needed after a link or rename for durability).
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The stamp of a file's metadata (see [`ObjectStamp`]).
fn stamp_of(m: &fs::Metadata) -> ObjectStamp {
    let mut version = [0u8; 24];
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        version[..8].copy_from_slice(&m.ino().to_le_bytes());
        version[8..16].copy_from_slice(&m.ctime().to_le_bytes());
        version[16..24].copy_from_slice(&m.ctime_nsec().to_le_bytes());
    }
    #[cfg(not(unix))]
    {
        let t = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        version[..16].copy_from_slice(&t.to_le_bytes());
    }
    ObjectStamp {
        len: m.len(),
        version,
    }
}

/// Bytes an unprivileged writer may still use on the filesystem holding `path`.
pub(crate) fn free_space(path: &Path) -> io::Result<u64> {
    available_space(path)
}

#[cfg(unix)]
fn available_space(path: &Path) -> io::Result<u64> {
    xet_protocol::util::os::available_space(path)
}

#[cfg(not(unix))]
fn available_space(_path: &Path) -> io::Result<u64> {
    Ok(u64::MAX)
}

/// `ENOSPC`: what a full disk answers, and what a write into the reserve answers too.
fn storage_full() -> io::Error {
    io::Error::from(io::ErrorKind::StorageFull)
}

impl ObjectBackend for FsBackend {
    fn put_if_absent(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError> {
        if self.path(key).exists() {
            return Ok(false);
        }
        self.check_space(bytes.len() as u64)?;
        let tmp = self.temp_path("object");
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(Self::io("write", key)(e));
        }
        self.link_into_place(key, &tmp)
    }

    fn put_file_if_absent(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError> {
        if self.path(key).exists() {
            let _ = fs::remove_file(file);
            return Ok(false);
        }
        self.link_into_place(key, file)
    }

    fn replace_file(&self, key: ObjectKey, file: &Path) -> Result<(), BackendError> {
        let result = self.move_to(key, file, &self.path(key));
        if result.is_err() {
            let _ = fs::remove_file(file);
        }
        result
    }

    fn temp_path(&self, what: &str) -> PathBuf {
        self.spool.temp_path(what)
    }

    fn check_space(&self, bytes: u64) -> Result<(), BackendError> {
        self.spool.check_space(bytes)
    }

    fn stamp(&self, key: ObjectKey) -> Result<Option<ObjectStamp>, BackendError> {
        match fs::metadata(self.path(key)) {
            Ok(m) => Ok(Some(stamp_of(&m))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io("stat", key)(e)),
        }
    }

    fn modified(&self, key: ObjectKey) -> Result<Option<SystemTime>, BackendError> {
        match fs::metadata(self.path(key)) {
            Ok(m) => Ok(Some(m.modified().map_err(Self::io("stat", key))?)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io("stat", key)(e)),
        }
    }

    fn read_range(
        &self,
        key: ObjectKey,
        range: Range<u64>,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        let Some(mut f) = self.open_existing(key)? else {
            return Ok(None);
        };
        let len = f.metadata().map_err(Self::io("stat", key))?.len();
        check_range(key, &range, len)?;
        f.seek(SeekFrom::Start(range.start))
            .map_err(Self::io("seek", key))?;
        let buf = read_len(&mut f, range.end - range.start).map_err(Self::io("read", key))?;
        Ok(Some(buf))
    }

    fn read_all(&self, key: ObjectKey) -> Result<Option<Vec<u8>>, BackendError> {
        match fs::read(self.path(key)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io("read", key)(e)),
        }
    }

    fn remove(&self, key: ObjectKey) -> Result<bool, BackendError> {
        match fs::remove_file(self.path(key)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Self::io("remove", key)(e)),
        }
    }

    fn quarantine(&self, key: ObjectKey) -> Result<bool, BackendError> {
        let from = self.path(key);
        if !from.exists() {
            return Ok(false);
        }
        let now = xet_protocol::util::now_unix();
        let to = match key {
            ObjectKey::Xorb(h) => self
                .root
                .join("quarantine")
                .join("xorbs")
                .join(format!("{h}.{now}")),
            ObjectKey::Shard(h) => self
                .root
                .join("quarantine")
                .join("shards")
                .join(format!("{h}.mdb.{now}")),
            ObjectKey::Checkpoint(id) => self
                .root
                .join("quarantine")
                .join("checkpoints")
                .join(format!("{id}.{now}")),
        };
        match self.move_to(key, &from, &to) {
            Ok(()) => Ok(true),
            Err(BackendError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn touch(&self, key: ObjectKey) -> Result<(), BackendError> {
        let f = OpenOptions::new()
            .write(true)
            .open(self.path(key))
            .map_err(Self::io("open", key))?;
        f.set_modified(SystemTime::now())
            .map_err(Self::io("set the modification time of", key))
    }

    fn clean_temp(&self, older_than: std::time::Duration) -> Result<(u64, u64), BackendError> {
        self.spool.clean(older_than)
    }

    fn list_xorbs(&self) -> Result<Vec<ListedXorb>, BackendError> {
        let list_err = |dir: &Path| {
            let key = dir.display().to_string();
            move |source| BackendError::Io {
                op: "list",
                key,
                source,
            }
        };
        let top = self.root.join("xorbs");
        let mut out = Vec::new();
        for sub in fs::read_dir(&top).map_err(list_err(&top))?.flatten() {
            let dir = sub.path();
            if !dir.is_dir() {
                continue;
            }
            for entry in fs::read_dir(&dir).map_err(list_err(&dir))?.flatten() {
                let name = entry.file_name();
                let Some(hash) = name.to_str().and_then(|n| XorbHash::from_hex(n).ok()) else {
                    continue;
                };
                let Ok(meta) = entry.metadata() else {
                    continue;
                };
                out.push(ListedXorb {
                    hash,
                    len: meta.len(),
                    modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
        }
        out.sort_by_key(|x| x.hash);
        Ok(out)
    }

    fn list_shards(&self) -> Result<Vec<ShardHash>, BackendError> {
        let dir = self.root.join("shards");
        let entries = fs::read_dir(&dir).map_err(|source| BackendError::Io {
            op: "list",
            key: dir.display().to_string(),
            source,
        })?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".mdb")) else {
                continue;
            };
            if let Ok(h) = ShardHash::from_hex(stem) {
                out.push(h);
            }
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn read_len_reads_exactly_that_many_bytes_or_fails() {
        let data: Vec<u8> = (0..100u8).collect();
        let mut reader = &data[..];
        assert_eq!(read_len(&mut reader, 40).unwrap(), data[..40]);
        assert_eq!(read_len(&mut reader, 0).unwrap(), Vec::<u8>::new());
        assert_eq!(read_len(&mut reader, 60).unwrap(), data[40..]);
        let mut short = &data[..10];
        let e = read_len(&mut short, 11).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn put_is_create_if_absent_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let b = FsBackend::open(dir.path()).unwrap();
        let key = ObjectKey::Xorb(XorbHash::from_bytes([7; 32]));
        assert_eq!(b.len(key).unwrap(), None);
        assert!(b.put_if_absent(key, b"hello world").unwrap());
        assert!(!b.put_if_absent(key, b"other bytes").unwrap());
        assert_eq!(b.read_all(key).unwrap().unwrap(), b"hello world");
        assert_eq!(b.read_range(key, 6..11).unwrap().unwrap(), b"world");
        assert!(b.read_range(key, 6..12).is_err());
        assert_eq!(b.len(key).unwrap(), Some(11));
        // Nothing is left in tmp.
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        let listed = b.list_xorbs().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].hash, listed[0].len),
            (XorbHash::from_bytes([7; 32]), 11)
        );
    }

    #[test]
    fn concurrent_writers_of_one_key_exactly_one_creates() {
        let dir = tempfile::tempdir().unwrap();
        let b = Arc::new(FsBackend::open(dir.path()).unwrap());
        let key = ObjectKey::Shard(ShardHash::from_bytes([1; 32]));
        let created: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let b = Arc::clone(&b);
                    s.spawn(move || b.put_if_absent(key, &[42u8; 100_000]).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(created.iter().filter(|c| **c).count(), 1);
        assert_eq!(b.read_all(key).unwrap().unwrap(), vec![42u8; 100_000]);
        assert_eq!(
            b.list_shards().unwrap(),
            vec![ShardHash::from_bytes([1; 32])]
        );
    }

    #[test]
    fn stamps_change_with_every_modification() {
        let dir = tempfile::tempdir().unwrap();
        let b = FsBackend::open(dir.path()).unwrap();
        let key = ObjectKey::Xorb(XorbHash::from_bytes([3; 32]));
        assert_eq!(b.stamp(key).unwrap(), None);
        b.put_if_absent(key, b"0123456789").unwrap();
        let first = b.stamp(key).unwrap().unwrap();
        assert_eq!(first.len, 10);
        assert_eq!(b.stamp(key).unwrap(), Some(first), "stable while untouched");
        assert_eq!(ObjectStamp::from_bytes(&first.to_bytes()), Some(first));
        // An in-place write of the same length, as bit rot by a careless tool would be.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut f = OpenOptions::new().write(true).open(b.path(key)).unwrap();
        f.write_all(b"X").unwrap();
        drop(f);
        let second = b.stamp(key).unwrap().unwrap();
        assert_eq!(second.len, 10);
        assert_ne!(second, first, "an in-place write changes the stamp");
        // A repair replaces the object atomically.
        let tmp = b.temp_path("repair");
        fs::write(&tmp, b"0123456789").unwrap();
        b.replace_file(key, &tmp).unwrap();
        assert!(!tmp.exists());
        assert_eq!(b.read_all(key).unwrap().unwrap(), b"0123456789");
        assert_ne!(b.stamp(key).unwrap().unwrap(), second);
    }

    #[test]
    fn quarantine_moves_aside_and_remove_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let b = FsBackend::open(dir.path()).unwrap();
        let key = ObjectKey::Xorb(XorbHash::from_bytes([4; 32]));
        assert!(!b.quarantine(key).unwrap());
        b.put_if_absent(key, b"damaged").unwrap();
        assert!(b.quarantine(key).unwrap());
        assert_eq!(b.len(key).unwrap(), None);
        let kept: Vec<_> = fs::read_dir(dir.path().join("quarantine/xorbs"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(kept.len(), 1);
        assert_eq!(fs::read(kept[0].path()).unwrap(), b"damaged");
        // The key is free again: an upload stores it anew.
        assert!(b.put_if_absent(key, b"good").unwrap());
        assert!(b.remove(key).unwrap());
        assert!(!b.remove(key).unwrap());
        assert!(b.list_xorbs().unwrap().is_empty());
    }

    #[test]
    fn a_reserve_larger_than_the_disk_refuses_writes_as_full() {
        let dir = tempfile::tempdir().unwrap();
        let b = FsBackend::open(dir.path()).unwrap().with_min_free(u64::MAX);
        let key = ObjectKey::Xorb(XorbHash::from_bytes([5; 32]));
        let e = b.put_if_absent(key, b"bytes").unwrap_err();
        match e {
            BackendError::Io { source, .. } => {
                assert_eq!(source.kind(), io::ErrorKind::StorageFull)
            }
            other => panic!("{other}"),
        }
        assert_eq!(b.len(key).unwrap(), None);
        let b = FsBackend::open(dir.path()).unwrap().with_min_free(1);
        assert!(
            b.put_if_absent(key, b"bytes").unwrap(),
            "a small reserve fits"
        );
    }
}
