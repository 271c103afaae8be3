//! The files of a shard cache: atomic writes, reading and checking a cached shard, the
//! directory scan, and upload claims.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;
use xet_format::shard::{ParsedShard, Shard, ShardLayout, FOOTER_SIZE, HEADER_SIZE};
use xet_format::{ChunkHash, ShardHash};
use xet_protocol::util::fs::AtomicWrite;

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

/// Marks a file used now. Failures (the file vanished, a read-only cache) only cost the LRU
/// order.
pub(super) fn touch(path: &Path) {
    if let Ok(f) = File::options().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Handles a cached file that could not be used: a damaged one is deleted with a warning, a
/// vanished one is ignored, an unreadable one is reported and left alone.
pub(super) fn discard(path: &Path, e: &CacheError) {
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

/// Writes `bytes` to `path` in `dir` through a synced temporary file (`.<random>.mdb_temp`)
/// and a rename ([`AtomicWrite`]).
pub(super) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    fs::create_dir_all(dir).map_err(CacheError::io("cannot create", dir))?;
    match AtomicWrite::new()
        .temp_name(".", TEMP_SUFFIX)
        .durable()
        .write(path, bytes)
    {
        Ok(()) => Ok(()),
        // Another process put the same shard there first (platforms that do not replace).
        Err(_) if path.exists() => Ok(()),
        Err(e) => Err(CacheError::io("cannot write", path)(e)),
    }
}

/// Reads and checks a cached shard's header and footer.
pub(super) fn read_layout(path: &Path) -> Result<ShardLayout, CacheError> {
    let mut f = File::open(path).map_err(CacheError::io("cannot open", path))?;
    read_layout_from(&mut f, path)
}

pub(super) fn read_layout_from(f: &mut File, path: &Path) -> Result<ShardLayout, CacheError> {
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

/// Reads a whole cached shard, checking that its bytes hash to its name and parse.
pub(super) fn read_shard(path: &Path, hash: &ShardHash) -> Result<Shard, CacheError> {
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

impl ShardCache {
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

    /// Every cached shard file (`<64 hex digits>.mdb`) with its size and mtime. Files that
    /// vanish during the scan are left out; a missing directory is an empty cache.
    pub(super) fn scan(&self) -> Result<Vec<Entry>, CacheError> {
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
}
