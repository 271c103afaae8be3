//! Earlier versions of a file that are on this machine, matched chunk by chunk against what
//! the endpoint stores: which of their chunks sit at which index of which stored xorb.
//!
//! An upload deduplicates against them ([`PriorVersion::seeds`]): a new version of a file shares
//! most of its chunks with the one before, wherever the edit is, and the lookup needs no
//! eligible chunk to hit. A download copies the chunks it finds in them ([`LocalChunks`])
//! instead of fetching them.
//!
//! Nothing local is trusted on its word: a copy is used only if its size is the object's and
//! its chunks, hashed here, give exactly the Xet file hash the endpoint has registered for
//! that object. A copy modified since it was downloaded does not, and is ignored. The chunk
//! hashes are then the registered file's chunk hashes, in order, and the endpoint's plan says
//! where each of them is stored. A download checks every copied chunk's hash again as it
//! reads it (the file may change in between), and the whole file's hash at the end.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::pipeline::hasher::{hash_file, HasherError};
use crate::{Endpoint, TargetError};
use xet_format::{ChunkHash, FileHash, LfsOid, XorbHash};

/// Why an earlier version could not be matched (never fatal to a transfer: it goes on without).
#[derive(Debug, thiserror::Error)]
pub enum PriorError {
    #[error("{0}")]
    Hash(#[from] HasherError),
    #[error("cannot look up object {oid}: {source}")]
    Lookup { oid: LfsOid, source: TargetError },
    #[error("cannot get the reconstruction of {file}: {source}")]
    Plan { file: FileHash, source: TargetError },
}

/// One chunk of an earlier version: where it is in the local copy, and where it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorChunk {
    pub hash: ChunkHash,
    pub offset: u64,
    pub len: u32,
    pub xorb: XorbHash,
    pub index: u32,
}

/// An earlier version on this machine whose chunks match the endpoint's record of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorVersion {
    pub oid: LfsOid,
    pub file: FileHash,
    /// The local copy.
    pub path: PathBuf,
    /// Its chunks, in file order.
    pub chunks: Vec<PriorChunk>,
}

impl PriorVersion {
    /// Matches the local copy at `path` of object `oid` (`size` bytes) against the endpoint
    /// (see the module documentation). `Ok(None)`: not usable (the endpoint does not know the
    /// object or cannot say where its chunks are, or the copy is not that object).
    pub fn index(
        endpoint: &dyn Endpoint,
        oid: &LfsOid,
        size: u64,
        path: &Path,
    ) -> Result<Option<Self>, PriorError> {
        let on_disk = std::fs::metadata(path).map(|m| m.len()).ok();
        if size == 0 || on_disk != Some(size) {
            return Ok(None);
        }
        let Some((file, stored_size)) = endpoint
            .locate_oid(oid)
            .map_err(|source| PriorError::Lookup { oid: *oid, source })?
        else {
            return Ok(None);
        };
        if stored_size != size {
            return Ok(None);
        }
        let hashed = hash_file(path)?;
        if hashed.file_hash != file {
            tracing::info!(%oid, path = %path.display(),
                "a local copy of an earlier version differs from the stored one (modified since?); not used");
            return Ok(None);
        }
        let Some(plan) = endpoint
            .reconstruction(&file, None)
            .map_err(|source| PriorError::Plan { file, source })?
        else {
            return Ok(None);
        };
        // The plan's terms list the file's chunks in order: chunk k of the copy is the next
        // chunk index of the current term.
        let mut chunks = Vec::with_capacity(hashed.chunks.len());
        let mut next = hashed.chunks.iter();
        let mut offset = 0u64;
        for term in &plan.terms {
            let mut term_len = 0u64;
            for index in term.chunks.clone() {
                let Some(c) = next.next() else {
                    return Ok(None);
                };
                let Ok(len) = u32::try_from(c.len) else {
                    return Ok(None);
                };
                chunks.push(PriorChunk {
                    hash: c.hash,
                    offset,
                    len,
                    xorb: term.xorb,
                    index,
                });
                offset += c.len;
                term_len += c.len;
            }
            if term_len != u64::from(term.unpacked_len) {
                return Ok(None);
            }
        }
        if next.next().is_some() {
            return Ok(None);
        }
        Ok(Some(Self {
            oid: *oid,
            file,
            path: path.to_path_buf(),
            chunks,
        }))
    }

    /// What an upload learns from it: each chunk's hash and where it is stored.
    pub fn seeds(&self) -> impl Iterator<Item = (ChunkHash, XorbHash, u32)> + '_ {
        self.chunks.iter().map(|c| (c.hash, c.xorb, c.index))
    }
}

/// Chunks of stored xorbs whose bytes are in local files (earlier versions), for a download.
#[derive(Default)]
pub struct LocalChunks {
    files: Vec<File>,
    at: HashMap<(XorbHash, u32), (usize, PriorChunk)>,
}

impl std::fmt::Debug for LocalChunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalChunks")
            .field("files", &self.files.len())
            .field("chunks", &self.at.len())
            .finish()
    }
}

impl LocalChunks {
    /// Adds the chunks of `version` (its copy opened now). A copy that cannot be opened adds
    /// nothing.
    pub fn add(&mut self, version: &PriorVersion) {
        let Ok(file) = File::open(&version.path) else {
            return;
        };
        let n = self.files.len();
        self.files.push(file);
        for c in &version.chunks {
            self.at.entry((c.xorb, c.index)).or_insert((n, *c));
        }
    }

    /// Whether no chunk is known.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Whether chunk `index` of `xorb` is here.
    pub fn has(&self, xorb: &XorbHash, index: u32) -> bool {
        self.at.contains_key(&(*xorb, index))
    }

    /// The bytes of chunk `index` of `xorb`, appended to `out`, with its hash: `None` when it
    /// is not here, cannot be read, or no longer hashes to what it did (the copy changed).
    pub fn read(&self, xorb: &XorbHash, index: u32, out: &mut Vec<u8>) -> Option<ChunkHash> {
        let (file, c) = self.at.get(&(*xorb, index))?;
        let before = out.len();
        out.resize(before + c.len as usize, 0);
        let read = read_exact_at(&self.files[*file], &mut out[before..], c.offset);
        if read.is_err() || ChunkHash::of(&out[before..]) != c.hash {
            out.truncate(before);
            tracing::warn!(%xorb, index, "a local chunk no longer matches its hash; fetching it");
            return None;
        }
        Some(c.hash)
    }
}

/// Reads exactly `buf.len()` bytes at `offset` of `file`.
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
pub(crate) fn read_exact_at(_file: &File, _buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "positional reads are not supported here",
    ))
}
