//! Where object bytes live: the [`ObjectBackend`] trait and its filesystem implementation.
//!
//! A backend stores immutable, content-addressed objects (stored xorbs and accepted shards) by
//! [`ObjectKey`]. Writes are create-if-absent and atomic: a reader never sees a partly written
//! object, and of several concurrent writers of the same key exactly one reports that it created
//! it. The trait is deliberately small so that an S3-compatible backend can implement it with
//! conditional puts and ranged gets.
//!
//! Filesystem layout under the backend's root:
//!
//! ```text
//! xorbs/<first two hex digits>/<xorb hash>    stored xorbs (chunk region + V1 footer)
//! shards/<shard hash>.mdb                      accepted shards, as uploaded
//! tmp/                                         files being written (same filesystem, for rename)
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::format::{ShardHash, XorbHash};

/// The name of an object in a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKey {
    /// A stored xorb (with its footer).
    Xorb(XorbHash),
    /// An accepted shard, named by the hash of its bytes.
    Shard(ShardHash),
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectKey::Xorb(h) => write!(f, "xorb {h}"),
            ObjectKey::Shard(h) => write!(f, "shard {h}"),
        }
    }
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

/// Immutable content-addressed object storage.
pub trait ObjectBackend: Send + Sync + 'static {
    /// Stores `bytes` under `key` unless the key exists. Atomic: the object appears whole or not
    /// at all, and it is durable when this returns. `Ok(true)` if this call created it.
    fn put_if_absent(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError>;
    /// The object's length, or `None` if it does not exist.
    fn len(&self, key: ObjectKey) -> Result<Option<u64>, BackendError>;
    /// Bytes `range` of the object (end exclusive); `None` if it does not exist.
    fn read_range(
        &self,
        key: ObjectKey,
        range: Range<u64>,
    ) -> Result<Option<Vec<u8>>, BackendError>;
    /// The whole object; `None` if it does not exist.
    fn read_all(&self, key: ObjectKey) -> Result<Option<Vec<u8>>, BackendError>;
    /// Every shard stored, for rebuilding an index.
    fn list_shards(&self) -> Result<Vec<ShardHash>, BackendError>;
}

/// Objects as files under a root directory (layout in the module docs).
#[derive(Debug)]
pub struct FsBackend {
    root: PathBuf,
    /// Makes temporary file names unique within this process.
    counter: AtomicU64,
}

impl FsBackend {
    /// Opens (creating if needed) a backend rooted at `root`.
    pub fn open(root: &Path) -> Result<Self, BackendError> {
        for dir in ["xorbs", "shards", "tmp"] {
            let path = root.join(dir);
            fs::create_dir_all(&path).map_err(|source| BackendError::Io {
                op: "create directory",
                key: path.display().to_string(),
                source,
            })?;
        }
        let backend = Self {
            root: root.to_path_buf(),
            counter: AtomicU64::new(0),
        };
        backend.clean_tmp();
        Ok(backend)
    }

    /// The file holding `key`.
    pub fn path(&self, key: ObjectKey) -> PathBuf {
        match key {
            ObjectKey::Xorb(h) => {
                let hex = h.to_hex();
                self.root.join("xorbs").join(&hex[..2]).join(hex)
            }
            ObjectKey::Shard(h) => self.root.join("shards").join(format!("{h}.mdb")),
        }
    }

    /// Removes temporary files left by a crash. Only files older than an hour are removed, so a
    /// second process sharing the directory keeps the files it is writing.
    fn clean_tmp(&self) {
        let Ok(entries) = fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if old {
                let _ = fs::remove_file(entry.path());
            }
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
}

/// Flushes a directory entry to disk (needed after a link or rename for durability).
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl ObjectBackend for FsBackend {
    fn put_if_absent(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError> {
        let path = self.path(key);
        if path.exists() {
            return Ok(false);
        }
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(Self::io("create directory for", key))?;
        let tmp = self.root.join("tmp").join(format!(
            "{}-{}-{}.tmp",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed),
            crate::store::random_hex(8),
        ));
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(Self::io("write", key)(e));
        }
        // A hard link creates the final name only if it is absent, atomically: of concurrent
        // writers exactly one succeeds, and the others see AlreadyExists.
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                sync_dir(&dir).map_err(Self::io("sync directory of", key))?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Self::io("link", key)(e)),
        }
    }

    fn len(&self, key: ObjectKey) -> Result<Option<u64>, BackendError> {
        match fs::metadata(self.path(key)) {
            Ok(m) => Ok(Some(m.len())),
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
        if range.start > range.end || range.end > len {
            return Err(BackendError::RangeOutOfBounds {
                key,
                start: range.start,
                end: range.end,
                len,
            });
        }
        // range.end <= len, the size of a file we could open, so it fits in memory terms.
        let mut buf = vec![0u8; (range.end - range.start) as usize];
        f.seek(SeekFrom::Start(range.start))
            .map_err(Self::io("seek", key))?;
        f.read_exact(&mut buf).map_err(Self::io("read", key))?;
        Ok(Some(buf))
    }

    fn read_all(&self, key: ObjectKey) -> Result<Option<Vec<u8>>, BackendError> {
        match fs::read(self.path(key)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io("read", key)(e)),
        }
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
}
