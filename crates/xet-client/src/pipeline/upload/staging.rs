//! A [`CasTarget`] that holds new xorbs back until the shard is registered.
//!
//! The server's basic-transfer uploads learn whether the body matches its oid only at the end
//! of the body, after xorbs were built. [`Staging`] writes each new xorb to a file in a local
//! directory instead of the inner target; [`CasTarget::register_shard`] first puts every staged
//! xorb into the inner target (so xorbs still precede the shard, docs/cas-api.md §7) and then
//! registers the shard. If the upload fails before that, dropping the `Staging` deletes the
//! files and the inner target never sees a byte of it.
//!
//! Cost: new xorbs are written to disk twice (staging file, then store). Staging files are
//! named `stage-<random>-<xorb hash>`; a directory the store cleans at startup (`tmp/`) is the
//! right place for them, so a crash leaves nothing behind for long.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use xet_format::shard::Shard;
use xet_format::{ChunkHash, FileHash, LfsOid, XorbHash};
use xet_protocol::target::{CasTarget, TargetError};
use xet_protocol::util::sync::LockAnyway as _;

/// See the module documentation.
pub struct Staging<'a> {
    inner: &'a dyn CasTarget,
    dir: PathBuf,
    tag: String,
    staged: Mutex<Vec<(XorbHash, PathBuf)>>,
}

impl<'a> Staging<'a> {
    /// Stages xorbs for `inner` as files in `dir` (which must exist).
    pub fn new(inner: &'a dyn CasTarget, dir: &Path) -> Self {
        Self {
            inner,
            dir: dir.to_path_buf(),
            tag: xet_protocol::random_hex(8),
            staged: Mutex::new(Vec::new()),
        }
    }

    /// Number of xorbs staged and not yet committed.
    pub fn staged(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(XorbHash, PathBuf)>> {
        self.staged.lock_anyway()
    }

    /// Puts every staged xorb into the inner target, oldest first, deleting each file once its
    /// xorb is stored.
    fn commit(&self) -> Result<(), TargetError> {
        let mut staged = self.lock();
        while let Some((xorb, path)) = staged.first().cloned() {
            let body = std::fs::read(&path).map_err(|source| TargetError::Io {
                what: format!("reading staged xorb {xorb} from {}", path.display()),
                source,
            })?;
            self.inner.put_xorb(xorb, &body)?;
            let _ = std::fs::remove_file(&path);
            staged.remove(0);
        }
        Ok(())
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        for (_, path) in self.lock().drain(..) {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl CasTarget for Staging<'_> {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        if self.lock().iter().any(|(h, _)| h == xorb) {
            return Ok(true);
        }
        self.inner.has_xorb(xorb)
    }

    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        if self.has_xorb(&xorb)? {
            return Ok(false);
        }
        let path = self.dir.join(format!("stage-{}-{xorb}", self.tag));
        std::fs::write(&path, body).map_err(|source| TargetError::Io {
            what: format!("staging xorb {xorb} in {}", path.display()),
            source,
        })?;
        self.lock().push((xorb, path));
        Ok(true)
    }

    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        self.commit()?;
        self.inner.register_shard(shard)
    }

    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        self.inner.dedup_query(chunk)
    }

    fn dense_key_modulus(&self) -> Option<u64> {
        self.inner.dense_key_modulus()
    }

    fn checks_sha256_claims(&self) -> bool {
        self.inner.checks_sha256_claims()
    }

    fn sha256_computed(&self, oid: &LfsOid, file: &FileHash) -> Result<(), TargetError> {
        self.inner.sha256_computed(oid, file)
    }

    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        self.inner.file_by_sha256(oid)
    }

    fn local_dedup(&self, chunk: &ChunkHash) -> Result<Option<Arc<Shard>>, TargetError> {
        self.inner.local_dedup(chunk)
    }
}
