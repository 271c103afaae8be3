//! The copies of stored xorbs a node keeps beside its storage, and the reads that go through
//! them: whole small xorbs in memory ([`crate::small_xorbs`]) and copies on the node's own disk
//! ([`crate::xorb_cache`]), both on object storage only, where every read is a request.
//!
//! [`Copies`] sits in front of the backend for the reads of xorbs' bytes: a range is served from
//! the node's copy when it keeps one, else read from the backend (and counted towards making a
//! copy in the background). It knows nothing of registrations, damage or garbage collection:
//! the store decides when a copy may answer without the storage (a registered xorb not being
//! collected, see `Store::registered_copy`) and tells this part when one must go.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use xet_format::XorbHash;
use xet_protocol::util::sync::LockAnyway as _;

use crate::backend::{BackendError, ObjectBackend, ObjectKey, ObjectStamp};
use crate::small_xorbs::SmallXorbs;
use crate::xorb_cache::{CacheStats, XorbCache};

/// How many locks readers of small xorbs are spread over (see [`Copies::one_reader`]).
const READING_STRIPES: usize = 64;

/// See the module documentation.
pub(crate) struct Copies {
    backend: Arc<dyn ObjectBackend>,
    /// Small xorbs read whole (object storage only).
    memory: Mutex<SmallXorbs>,
    /// Readers of a small xorb that is not in memory take the lock of its stripe (by the
    /// first byte of its hash), so that the downloads asking for one xorb at once read it once.
    reading_whole: Vec<Mutex<()>>,
    /// This node's copies on its own disk (object storage only, and only if configured).
    disk: Option<Arc<XorbCache>>,
    /// Copies made in the background that failed (for the server's `/metrics`).
    failed: Arc<AtomicU64>,
}

/// A copy on the node's disk a download may read: its length, and whether this process has
/// seen its bytes verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DiskCopy {
    pub len: u64,
    pub verified: bool,
}

impl Copies {
    pub fn new(backend: Arc<dyn ObjectBackend>, disk: Option<XorbCache>) -> Self {
        Self {
            backend,
            memory: Mutex::new(SmallXorbs::default()),
            reading_whole: (0..READING_STRIPES).map(|_| Mutex::new(())).collect(),
            disk: disk.map(Arc::new),
            failed: Arc::default(),
        }
    }

    /// The whole object of `xorb` if it is kept in memory (object storage only).
    pub fn in_memory(&self, xorb: &XorbHash) -> Option<Arc<Vec<u8>>> {
        if !self.backend.is_shared() {
            return None;
        }
        self.memory.lock_anyway().get(xorb)
    }

    /// Keeps `bytes`, the whole stored object of `xorb`, in memory (object storage only;
    /// nothing larger than [`crate::small_xorbs::SMALL_XORB_MAX`]).
    pub fn keep_in_memory(&self, xorb: XorbHash, bytes: Arc<Vec<u8>>) {
        if self.backend.is_shared() {
            self.memory.lock_anyway().insert(xorb, bytes);
        }
    }

    /// Keeps a whole stored object read from the storage and verified against its name: on
    /// the node's disk (as verified) and in memory. The bytes, shared.
    pub fn keep_verified(&self, xorb: XorbHash, bytes: Vec<u8>) -> Arc<Vec<u8>> {
        if let Some(disk) = &self.disk {
            disk.insert_bytes(&xorb, &bytes, true);
        }
        let bytes = Arc::new(bytes);
        self.keep_in_memory(xorb, Arc::clone(&bytes));
        bytes
    }

    /// Forgets the bytes of these xorbs kept in memory (their disk copies stay).
    pub fn forget_in_memory<'a>(&self, xorbs: impl IntoIterator<Item = &'a XorbHash>) {
        let mut memory = self.memory.lock_anyway();
        for x in xorbs {
            memory.remove(x);
        }
    }

    /// Drops the node's disk copy of `xorb`, if it keeps one.
    pub fn drop_disk_copy(&self, xorb: &XorbHash) {
        if let Some(disk) = &self.disk {
            disk.remove(xorb);
        }
    }

    /// The lock readers of `xorb` take before reading it whole, so that the requests that
    /// want it at once read it once (the others then find it in memory).
    pub fn one_reader(&self, xorb: &XorbHash) -> MutexGuard<'_, ()> {
        let stripe = usize::from(xorb.as_bytes()[0]) % self.reading_whole.len();
        self.reading_whole[stripe].lock_anyway()
    }

    /// The node's disk copy of `xorb`, if it keeps one.
    pub fn disk_copy(&self, xorb: &XorbHash) -> Option<DiskCopy> {
        let (len, verified) = self.disk.as_ref()?.len_of(xorb)?;
        Some(DiskCopy { len, verified })
    }

    /// Reads the node's disk copy of `xorb` (`len` bytes, at most
    /// [`crate::xorb_cache::MAX_VERIFIED_READ`]) whole and checks it with `verify` once per
    /// process: `true` if it passed (it is marked verified), `false` if it could not be read
    /// or checked now, or failed (then it is dropped, and `why` logged).
    pub fn verify_disk_copy(
        &self,
        xorb: &XorbHash,
        len: u64,
        verify: impl FnOnce(&[u8]) -> Result<(), String>,
    ) -> bool {
        let Some(disk) = &self.disk else {
            return false;
        };
        if len > crate::xorb_cache::MAX_VERIFIED_READ {
            return false;
        }
        let Some(_turn) = disk.verify_slot() else {
            return false;
        };
        let Some(bytes) = disk.read(xorb, 0..len) else {
            return false;
        };
        match verify(&bytes) {
            Ok(()) => {
                disk.mark_verified(xorb);
                true
            }
            Err(why) => {
                tracing::warn!(%xorb, why, "dropping a xorb's copy that fails verification");
                disk.remove(xorb);
                false
            }
        }
    }

    /// Bytes `range` of the node's disk copy of `xorb`, if it keeps one and can read it.
    pub fn read_disk_copy(&self, xorb: &XorbHash, range: Range<u64>) -> Option<Vec<u8>> {
        self.disk.as_ref()?.read(xorb, range)
    }

    /// A copy of the validated stored object in `file` (`len` bytes) staged for the node's
    /// disk, made before a put consumes the file; kept only if the caller says so.
    pub fn stage(
        &self,
        xorb: &XorbHash,
        file: &std::path::Path,
        len: u64,
    ) -> Option<crate::xorb_cache::Staged<'_>> {
        self.disk.as_ref()?.stage(xorb, file, len)
    }

    /// Bytes `range` of `xorb`'s stored object: from the node's disk copy if it keeps one,
    /// else from the storage. A read from the storage of a xorb `len` says is that long
    /// counts towards copying it whole to the node's disk in the background (see
    /// [`crate::xorb_cache`]).
    pub fn read_range(
        &self,
        xorb: &XorbHash,
        range: Range<u64>,
        len: impl FnOnce() -> Option<u64>,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        let Some(disk) = &self.disk else {
            return self.backend.read_range(ObjectKey::Xorb(*xorb), range);
        };
        if let Some(bytes) = disk.read(xorb, range.clone()) {
            return Ok(Some(bytes));
        }
        let read = self.backend.read_range(ObjectKey::Xorb(*xorb), range)?;
        if let (Some(bytes), Some(len)) = (&read, len()) {
            if disk.count_read(xorb, bytes.len() as u64, len) {
                self.copy_in_background(disk, *xorb, len);
            }
        }
        Ok(read)
    }

    /// Reads `xorb` (`len` bytes) whole from the storage into the node's disk on a thread of
    /// its own (at most [`crate::xorb_cache::MAX_FILLS`] at once, counted by the cache).
    fn copy_in_background(&self, disk: &Arc<XorbCache>, xorb: XorbHash, len: u64) {
        let (disk, backend, failed) = (
            Arc::clone(disk),
            Arc::clone(&self.backend),
            Arc::clone(&self.failed),
        );
        let copier = Arc::clone(&disk);
        let spawned = std::thread::Builder::new()
            .name("xorb-copy".into())
            .spawn(move || {
                match backend.read_all_stamped(ObjectKey::Xorb(xorb)) {
                    Ok(Some((bytes, stamp))) if stamp_fits(&bytes, &stamp, len) => {
                        copier.insert_bytes(&xorb, &bytes, false);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%xorb, error = %e, "cannot copy a xorb in");
                    }
                }
                copier.copied(&xorb);
            });
        if spawned.is_err() {
            disk.copied(&xorb);
        }
    }

    /// Copies to the node's disk that failed so far.
    pub fn failed_copies(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// What the node's disk copies did so far; `None` without them.
    pub fn stats(&self) -> Option<CacheStats> {
        self.disk.as_ref().map(|d| d.stats())
    }
}

/// Whether a whole object read with `stamp` is the `len` bytes expected.
fn stamp_fits(bytes: &[u8], stamp: &ObjectStamp, len: u64) -> bool {
    bytes.len() as u64 == len && stamp.len == len
}
