//! [`MemoryBackend`]: an [`ObjectBackend`] that keeps its objects in memory, for tests of the
//! storage engine that need storage they can look into, damage, or make fail on demand, with
//! no directory layout or bucket behind it.
//!
//! It implements the core trait only (one process owns it, as a directory): the shared
//! records of [`crate::backend::SharedBucket`] belong to real shared storage. Object bytes
//! live in memory; the files callers prepare before a put ([`ObjectBackend::temp_path`]) are
//! written to a spool directory the caller names, and read in when put.
//!
//! Faults are injected per kind of operation ([`Op`]): the next `n` calls of that kind fail
//! with an I/O error naming the object, as a storage outage would, and change nothing.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use xet_format::ShardHash;
use xet_protocol::util::sync::LockAnyway as _;

use crate::backend::{
    check_range, BackendError, ListedXorb, ObjectBackend, ObjectKey, ObjectStamp, Spool,
};

/// A kind of backend operation, for injected faults and request counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// A put of a new object or a replacement.
    Put,
    /// A look at an object's stamp or modification time.
    Look,
    /// A read of an object's bytes.
    Read,
    /// A removal, a move to quarantine, or a touch.
    Change,
    /// A listing of xorbs or shards.
    List,
}

#[derive(Debug, Clone)]
struct Stored {
    bytes: Arc<Vec<u8>>,
    /// Changes whenever the object is written, replaced or touched.
    version: u64,
    modified: SystemTime,
}

/// See the module documentation.
#[derive(Debug)]
pub struct MemoryBackend {
    objects: Mutex<HashMap<ObjectKey, Stored>>,
    quarantined: Mutex<Vec<(ObjectKey, Arc<Vec<u8>>)>>,
    spool: Spool,
    versions: AtomicU64,
    faults: Mutex<HashMap<Op, u64>>,
    calls: Mutex<BTreeMap<Op, u64>>,
}

impl MemoryBackend {
    /// An empty backend whose callers prepare objects in `spool` (created if missing).
    pub fn new(spool: &Path) -> Result<Self, BackendError> {
        Ok(Self {
            objects: Mutex::default(),
            quarantined: Mutex::default(),
            spool: Spool::open(spool)?,
            versions: AtomicU64::new(1),
            faults: Mutex::default(),
            calls: Mutex::default(),
        })
    }

    /// Makes the next `n` operations of kind `op` fail (an I/O error, nothing changed).
    pub fn fail_next(&self, op: Op, n: u64) {
        *self.faults.lock_anyway().entry(op).or_default() += n;
    }

    /// Ends every pending injected fault.
    pub fn heal(&self) {
        self.faults.lock_anyway().clear();
    }

    /// How many operations of kind `op` were asked for so far, failed ones included.
    pub fn calls(&self, op: Op) -> u64 {
        self.calls.lock_anyway().get(&op).copied().unwrap_or(0)
    }

    /// The bytes of `key`, as stored (`None` if absent).
    pub fn object(&self, key: ObjectKey) -> Option<Vec<u8>> {
        let objects = self.objects.lock_anyway();
        objects.get(&key).map(|s| s.bytes.as_ref().clone())
    }

    /// Overwrites byte `at` of the stored object `key` with `f(byte)`, as damage on the medium
    /// would: the stamp does not change (a reader finds out only from the bytes). `false` if
    /// there is no such object or byte.
    pub fn damage_in_place(&self, key: ObjectKey, at: usize, f: impl FnOnce(u8) -> u8) -> bool {
        let mut objects = self.objects.lock_anyway();
        let Some(stored) = objects.get_mut(&key) else {
            return false;
        };
        let mut bytes = stored.bytes.as_ref().clone();
        let Some(b) = bytes.get_mut(at) else {
            return false;
        };
        *b = f(*b);
        stored.bytes = Arc::new(bytes);
        true
    }

    /// Removes `key` behind the store's back (an operator's mistake, a lost object).
    pub fn lose(&self, key: ObjectKey) -> bool {
        self.objects.lock_anyway().remove(&key).is_some()
    }

    /// The objects moved to quarantine so far.
    pub fn quarantined(&self) -> Vec<ObjectKey> {
        self.quarantined
            .lock_anyway()
            .iter()
            .map(|(k, _)| *k)
            .collect()
    }

    /// Counts a call of kind `op`, and fails it if a fault is pending.
    fn enter(&self, op: Op, what: &'static str, key: String) -> Result<(), BackendError> {
        *self.calls.lock_anyway().entry(op).or_default() += 1;
        let mut faults = self.faults.lock_anyway();
        match faults.get_mut(&op) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Err(BackendError::Io {
                    op: what,
                    key,
                    source: io::Error::other("injected storage failure"),
                })
            }
            _ => Ok(()),
        }
    }

    fn next_version(&self) -> u64 {
        self.versions.fetch_add(1, Ordering::Relaxed)
    }

    fn stored(&self, bytes: Vec<u8>) -> Stored {
        Stored {
            bytes: Arc::new(bytes),
            version: self.next_version(),
            modified: SystemTime::now(),
        }
    }

    fn read_file(key: ObjectKey, file: &Path) -> Result<Vec<u8>, BackendError> {
        let bytes = std::fs::read(file).map_err(|source| BackendError::Io {
            op: "read the prepared file of",
            key: key.to_string(),
            source,
        })?;
        let _ = std::fs::remove_file(file);
        Ok(bytes)
    }

    fn insert_if_absent(&self, key: ObjectKey, bytes: Vec<u8>) -> bool {
        let mut objects = self.objects.lock_anyway();
        if objects.contains_key(&key) {
            return false;
        }
        objects.insert(key, self.stored(bytes));
        true
    }
}

fn stamp_of(stored: &Stored) -> ObjectStamp {
    let mut version = [0u8; 24];
    version[..8].copy_from_slice(&stored.version.to_le_bytes());
    ObjectStamp {
        len: stored.bytes.len() as u64,
        version,
    }
}

impl ObjectBackend for MemoryBackend {
    fn put_if_absent(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError> {
        self.enter(Op::Put, "put", key.to_string())?;
        Ok(self.insert_if_absent(key, bytes.to_vec()))
    }

    fn put_file_if_absent(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError> {
        if let Err(e) = self.enter(Op::Put, "put", key.to_string()) {
            let _ = std::fs::remove_file(file);
            return Err(e);
        }
        let bytes = Self::read_file(key, file)?;
        Ok(self.insert_if_absent(key, bytes))
    }

    fn replace_file(&self, key: ObjectKey, file: &Path) -> Result<(), BackendError> {
        if let Err(e) = self.enter(Op::Put, "replace", key.to_string()) {
            let _ = std::fs::remove_file(file);
            return Err(e);
        }
        let bytes = Self::read_file(key, file)?;
        let stored = self.stored(bytes);
        self.objects.lock_anyway().insert(key, stored);
        Ok(())
    }

    fn temp_path(&self, what: &str) -> PathBuf {
        self.spool.temp_path(what)
    }

    fn check_space(&self, bytes: u64) -> Result<(), BackendError> {
        self.spool.check_space(bytes)
    }

    fn stamp(&self, key: ObjectKey) -> Result<Option<ObjectStamp>, BackendError> {
        self.enter(Op::Look, "look at", key.to_string())?;
        Ok(self.objects.lock_anyway().get(&key).map(stamp_of))
    }

    fn modified(&self, key: ObjectKey) -> Result<Option<SystemTime>, BackendError> {
        self.enter(Op::Look, "look at", key.to_string())?;
        Ok(self.objects.lock_anyway().get(&key).map(|s| s.modified))
    }

    fn read_range(
        &self,
        key: ObjectKey,
        range: Range<u64>,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        self.enter(Op::Read, "read", key.to_string())?;
        let Some(bytes) = self
            .objects
            .lock_anyway()
            .get(&key)
            .map(|s| Arc::clone(&s.bytes))
        else {
            return Ok(None);
        };
        check_range(key, &range, bytes.len() as u64)?;
        // In bounds of an in-memory object, checked just above.
        Ok(Some(
            bytes[range.start as usize..range.end as usize].to_vec(),
        ))
    }

    fn read_all(&self, key: ObjectKey) -> Result<Option<Vec<u8>>, BackendError> {
        self.enter(Op::Read, "read", key.to_string())?;
        let objects = self.objects.lock_anyway();
        Ok(objects.get(&key).map(|s| s.bytes.as_ref().clone()))
    }

    fn remove(&self, key: ObjectKey) -> Result<bool, BackendError> {
        self.enter(Op::Change, "remove", key.to_string())?;
        Ok(self.objects.lock_anyway().remove(&key).is_some())
    }

    fn quarantine(&self, key: ObjectKey) -> Result<bool, BackendError> {
        self.enter(Op::Change, "quarantine", key.to_string())?;
        let Some(stored) = self.objects.lock_anyway().remove(&key) else {
            return Ok(false);
        };
        self.quarantined.lock_anyway().push((key, stored.bytes));
        Ok(true)
    }

    fn touch(&self, key: ObjectKey) -> Result<(), BackendError> {
        self.enter(Op::Change, "touch", key.to_string())?;
        let version = self.next_version();
        if let Some(stored) = self.objects.lock_anyway().get_mut(&key) {
            stored.version = version;
            stored.modified = SystemTime::now();
        }
        Ok(())
    }

    fn list_xorbs(&self) -> Result<Vec<ListedXorb>, BackendError> {
        self.enter(Op::List, "list", "xorbs".into())?;
        let objects = self.objects.lock_anyway();
        let mut listed: Vec<ListedXorb> = objects
            .iter()
            .filter_map(|(key, stored)| match key {
                ObjectKey::Xorb(hash) => Some(ListedXorb {
                    hash: *hash,
                    len: stored.bytes.len() as u64,
                    modified: stored.modified,
                }),
                _ => None,
            })
            .collect();
        listed.sort_by_key(|x| x.hash);
        Ok(listed)
    }

    fn clean_temp(&self, older_than: std::time::Duration) -> Result<(u64, u64), BackendError> {
        self.spool.clean(older_than)
    }

    fn list_shards(&self) -> Result<Vec<ShardHash>, BackendError> {
        self.enter(Op::List, "list", "shards".into())?;
        let objects = self.objects.lock_anyway();
        let mut shards: Vec<ShardHash> = objects
            .keys()
            .filter_map(|key| match key {
                ObjectKey::Shard(hash) => Some(*hash),
                _ => None,
            })
            .collect();
        shards.sort();
        Ok(shards)
    }
}
