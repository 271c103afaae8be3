//! Earlier versions of a file, matched chunk by chunk against what the endpoint stores: which
//! of their chunks sit at which index of which stored xorb.
//!
//! An upload deduplicates against them ([`PriorVersion::seeds`]): a new version of a file shares
//! most of its chunks with the one before, wherever the edit is, and the lookup needs no
//! eligible chunk to hit. A download copies the chunks it finds in them ([`LocalChunks`])
//! instead of fetching them.
//!
//! An earlier version's chunk hashes come from one of two places, and neither is trusted on its
//! word:
//!
//! - a copy on this machine ([`PriorVersion::index`]), used only if its size is the object's
//!   and its chunks, hashed here, give exactly the Xet file hash the endpoint has registered
//!   for that object. A copy modified since it was downloaded does not, and is ignored;
//! - the endpoint's chunk list of the registered file ([`PriorVersion::listed`], docs/cas-api.md
//!   §5.8), for a version this machine never downloaded: used only if the listed lengths add
//!   up to the object's size and the listed chunks give the file's Xet hash (the hash is a
//!   function of exactly these hashes and lengths, so the list cannot lie). The endpoint
//!   answers only for a credential that may read the file.
//!
//! The chunk hashes are then the registered file's chunk hashes, in order, and the endpoint's
//! plan says where each of them is stored ([`locate_chunks`]). A download checks every copied
//! chunk's hash again as it reads it (the file may change in between), and the whole file's
//! hash at the end.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::pipeline::hasher::{hash_file, HasherError};
use xet_format::chunking::MAX_CHUNK_SIZE;
use xet_format::hash::file_hash;
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};
use xet_protocol::{Endpoint, ReconstructionPlan, TargetError};

/// Why an earlier version could not be matched (never fatal to a transfer: it goes on without).
#[derive(Debug, thiserror::Error)]
pub enum PriorError {
    #[error("{0}")]
    Hash(#[from] HasherError),
    #[error("cannot look up object {oid}: {source}")]
    Lookup { oid: LfsOid, source: TargetError },
    #[error("cannot get the reconstruction of {file}: {source}")]
    Plan { file: FileHash, source: TargetError },
    #[error("cannot list the chunks of {file}: {source}")]
    List { file: FileHash, source: TargetError },
    #[error("{endpoint} listed chunks of {file} that do not make that file: {why}")]
    BadList {
        endpoint: String,
        file: FileHash,
        why: String,
    },
}

/// One chunk of an earlier version: where it is in the file, and where it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorChunk {
    pub hash: ChunkHash,
    pub offset: u64,
    pub len: u32,
    pub xorb: XorbHash,
    pub index: u32,
}

/// An earlier version whose chunks match the endpoint's record of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorVersion {
    pub oid: LfsOid,
    pub file: FileHash,
    /// The local copy; `None` for a version learnt from the endpoint's chunk list (none of its
    /// bytes are on this machine).
    pub path: Option<PathBuf>,
    /// Its chunks, in file order.
    pub chunks: Vec<PriorChunk>,
}

/// The least number of chunks a file of `size` bytes has (every chunk but the last is at most
/// [`MAX_CHUNK_SIZE`] bytes): what a chunk list of it costs at least, known before asking.
pub fn least_chunks(size: u64) -> u64 {
    size.div_ceil(MAX_CHUNK_SIZE as u64)
}

/// Pairs the chunks of a file (in file order) with the terms of its whole-file `plan`, which
/// list the same chunks in the same order: chunk k is the next chunk index of the current
/// term. `None` when they do not line up (a plan of part of the file, a chunk count or a term
/// length that differs, a chunk longer than a chunk can be).
pub fn locate_chunks(chunks: &[ChunkRef], plan: &ReconstructionPlan) -> Option<Vec<PriorChunk>> {
    if plan.offset_into_first_range != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(chunks.len());
    let mut next = chunks.iter();
    let mut offset = 0u64;
    for term in &plan.terms {
        let mut term_len = 0u64;
        for index in term.chunks.clone() {
            let c = next.next()?;
            let len = u32::try_from(c.len).ok()?;
            out.push(PriorChunk {
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
            return None;
        }
    }
    if next.next().is_some() || offset != plan.file_size {
        return None;
    }
    Some(out)
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
        let Some(file) = registered(endpoint, oid, size)? else {
            return Ok(None);
        };
        let hashed = hash_file(path)?;
        if hashed.file_hash != file {
            tracing::info!(%oid, path = %path.display(),
                "a local copy of an earlier version differs from the stored one (modified since?); not used");
            return Ok(None);
        }
        Ok(
            Self::planned(endpoint, *oid, file, &hashed.chunks)?.map(|chunks| Self {
                oid: *oid,
                file,
                path: Some(path.to_path_buf()),
                chunks,
            }),
        )
    }

    /// Object `oid` (`size` bytes) as the endpoint lists it (docs/cas-api.md §5.8), for an
    /// earlier version that is not on this machine: its chunk hashes, checked against the
    /// registered file's hash (see the module documentation), and where they are stored.
    /// `Ok(None)`: not usable (the endpoint does not know the object, does not offer chunk
    /// lists, or the list would have more than `max_chunks` chunks; a file whose size says so
    /// is not asked about).
    pub fn listed(
        endpoint: &dyn Endpoint,
        oid: &LfsOid,
        size: u64,
        max_chunks: usize,
    ) -> Result<Option<Self>, PriorError> {
        if size == 0 || least_chunks(size) > max_chunks as u64 {
            return Ok(None);
        }
        let Some(file) = registered(endpoint, oid, size)? else {
            return Ok(None);
        };
        let Some(list) = endpoint
            .file_chunks(&file)
            .map_err(|source| PriorError::List { file, source })?
        else {
            return Ok(None);
        };
        if list.len() > max_chunks {
            return Ok(None);
        }
        check_list(&list, &file, size).map_err(|why| PriorError::BadList {
            endpoint: endpoint.describe(),
            file,
            why,
        })?;
        Ok(
            Self::planned(endpoint, *oid, file, &list)?.map(|chunks| Self {
                oid: *oid,
                file,
                path: None,
                chunks,
            }),
        )
    }

    /// `chunks` (of registered file `file`) paired with the endpoint's whole-file plan.
    fn planned(
        endpoint: &dyn Endpoint,
        oid: LfsOid,
        file: FileHash,
        chunks: &[ChunkRef],
    ) -> Result<Option<Vec<PriorChunk>>, PriorError> {
        let Some(plan) = endpoint
            .reconstruction(&file, None)
            .map_err(|source| PriorError::Plan { file, source })?
        else {
            return Ok(None);
        };
        let located = locate_chunks(chunks, &plan);
        if located.is_none() {
            tracing::info!(%oid, %file, "the endpoint's plan of an earlier version does not match its chunks; not used");
        }
        Ok(located)
    }

    /// Object `oid` (`size` bytes) from a chunk list remembered on this machine
    /// ([`crate::object_chunks`]): used only if the endpoint's registered file of the oid is
    /// the list's file, then planned like [`Self::index`] without hashing any copy. `path` is
    /// the local copy, if any (the object in git-lfs's store, which the list was made from).
    pub fn remembered(
        endpoint: &dyn Endpoint,
        oid: &LfsOid,
        size: u64,
        list: &crate::object_chunks::ObjectChunks,
        path: Option<PathBuf>,
    ) -> Result<Option<Self>, PriorError> {
        if size == 0 {
            return Ok(None);
        }
        let Some(file) = registered(endpoint, oid, size)? else {
            return Ok(None);
        };
        if file != list.file {
            tracing::info!(%oid, "a remembered chunk list is not of the stored file; not used");
            return Ok(None);
        }
        Ok(
            Self::planned(endpoint, *oid, file, &list.chunks)?.map(|chunks| Self {
                oid: *oid,
                file,
                path,
                chunks,
            }),
        )
    }

    /// Its chunks as a chunk list (hash and length, in file order).
    pub fn chunk_refs(&self) -> Vec<ChunkRef> {
        self.chunks
            .iter()
            .map(|c| ChunkRef::new(c.hash, u64::from(c.len)))
            .collect()
    }

    /// What an upload learns from it: each chunk's hash and where it is stored.
    pub fn seeds(&self) -> impl Iterator<Item = (ChunkHash, XorbHash, u32)> + '_ {
        self.chunks.iter().map(|c| (c.hash, c.xorb, c.index))
    }

    /// Whether any of its chunks is stored in `xorb`.
    pub fn uses_xorb(&self, xorb: &XorbHash) -> bool {
        self.chunks.iter().any(|c| c.xorb == *xorb)
    }
}

/// The registered file of object `oid`, if the endpoint has one of `size` bytes.
fn registered(
    endpoint: &dyn Endpoint,
    oid: &LfsOid,
    size: u64,
) -> Result<Option<FileHash>, PriorError> {
    let found = endpoint
        .locate_oid(oid)
        .map_err(|source| PriorError::Lookup { oid: *oid, source })?;
    Ok(found.and_then(|(file, stored_size)| (stored_size == size).then_some(file)))
}

/// Whether a chunk list is that of `file` (`size` bytes): its lengths add up to the size and
/// its chunks hash to the file's hash. The reason when not.
pub fn check_list(list: &[ChunkRef], file: &FileHash, size: u64) -> Result<(), String> {
    let total = list.iter().fold(0u64, |n, c| n.saturating_add(c.len));
    if total != size {
        return Err(format!("{total} bytes, the object has {size}"));
    }
    let computed = if list.is_empty() {
        FileHash::ZERO
    } else {
        file_hash(list)
    };
    if computed != *file {
        return Err(format!("the chunks hash to {computed}"));
    }
    Ok(())
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
    /// Adds the chunks of `version` (its copy opened now). A version without a local copy, or
    /// whose copy cannot be opened, adds nothing.
    pub fn add(&mut self, version: &PriorVersion) {
        let Some(path) = &version.path else {
            return;
        };
        let Ok(file) = File::open(path) else {
            return;
        };
        let n = self.files.len();
        self.files.push(file);
        for c in &version.chunks {
            self.at.entry((c.xorb, c.index)).or_insert((n, *c));
        }
    }

    /// Adds chunks of the local file at `path` (opened now): each `PriorChunk` names where
    /// the chunk is stored (xorb and index) and where its bytes are in that file (offset and
    /// length). What is known already stays. Returns the chunks added (none when the file
    /// cannot be opened).
    pub fn add_located(&mut self, path: &Path, chunks: &[PriorChunk]) -> usize {
        let Ok(file) = File::open(path) else {
            return 0;
        };
        let n = self.files.len();
        let mut added = 0;
        for c in chunks {
            if let std::collections::hash_map::Entry::Vacant(e) = self.at.entry((c.xorb, c.index)) {
                e.insert((n, *c));
                added += 1;
            }
        }
        if added > 0 {
            self.files.push(file);
        }
        added
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use xet_protocol::{CasTarget, FetchRange, PlannedTerm, XorbSource};

    fn chunk(seed: u8, len: u64) -> ChunkRef {
        ChunkRef::new(ChunkHash::of(&[seed; 7]), len)
    }

    fn xorb(n: u8) -> XorbHash {
        XorbHash::from_bytes([n; 32])
    }

    /// A plan of `terms` (xorb, chunk range, bytes), whole file.
    fn plan(terms: &[(u8, std::ops::Range<u32>, u32)]) -> ReconstructionPlan {
        ReconstructionPlan {
            file_size: terms.iter().map(|t| u64::from(t.2)).sum(),
            offset_into_first_range: 0,
            terms: terms
                .iter()
                .map(|(x, chunks, len)| PlannedTerm {
                    xorb: xorb(*x),
                    chunks: chunks.clone(),
                    unpacked_len: *len,
                })
                .collect(),
            fetch: Vec::new(),
        }
    }

    #[test]
    fn chunks_are_paired_with_the_terms_of_the_plan_in_order() {
        let chunks = [chunk(1, 100), chunk(2, 50), chunk(3, 30)];
        let located = locate_chunks(&chunks, &plan(&[(7, 4..6, 150), (9, 0..1, 30)])).unwrap();
        let at: Vec<_> = located
            .iter()
            .map(|c| (c.hash, c.offset, c.len, c.xorb, c.index))
            .collect();
        assert_eq!(
            at,
            vec![
                (chunks[0].hash, 0, 100, xorb(7), 4),
                (chunks[1].hash, 100, 50, xorb(7), 5),
                (chunks[2].hash, 150, 30, xorb(9), 0),
            ]
        );
    }

    #[test]
    fn chunks_and_a_plan_that_do_not_line_up_are_refused() {
        let chunks = [chunk(1, 100), chunk(2, 50), chunk(3, 30)];
        // A term whose length is not its chunks'.
        assert!(locate_chunks(&chunks, &plan(&[(7, 4..6, 151), (9, 0..1, 29)])).is_none());
        // More chunks than the plan has.
        assert!(locate_chunks(&chunks, &plan(&[(7, 4..6, 150)])).is_none());
        // Fewer.
        assert!(locate_chunks(&chunks[..2], &plan(&[(7, 4..6, 150), (9, 0..1, 30)])).is_none());
        // A plan of part of the file.
        let mut part = plan(&[(7, 4..6, 150), (9, 0..1, 30)]);
        part.offset_into_first_range = 10;
        assert!(locate_chunks(&chunks, &part).is_none());
        // A file size that is not the chunks'.
        let mut size = plan(&[(7, 4..6, 150), (9, 0..1, 30)]);
        size.file_size += 1;
        assert!(locate_chunks(&chunks, &size).is_none());
        // A chunk longer than a u32 says.
        let huge = [ChunkRef::new(ChunkHash::of(b"x"), 1 << 33)];
        assert!(locate_chunks(&huge, &plan(&[(7, 0..1, u32::MAX)])).is_none());
    }

    #[test]
    fn a_chunk_list_must_make_the_file() {
        let list = [chunk(1, 100), chunk(2, 50)];
        let file = file_hash(&list);
        assert_eq!(check_list(&list, &file, 150), Ok(()));
        assert!(check_list(&list, &file, 151)
            .unwrap_err()
            .contains("150 bytes"));
        let reordered = [chunk(2, 50), chunk(1, 100)];
        assert!(check_list(&reordered, &file, 150)
            .unwrap_err()
            .contains("hash to"));
        assert_eq!(check_list(&[], &FileHash::ZERO, 0), Ok(()));
        assert!(check_list(&[], &file, 0).is_err());
    }

    #[test]
    fn the_least_chunk_count_follows_the_largest_chunk() {
        let max = MAX_CHUNK_SIZE as u64;
        assert_eq!(least_chunks(0), 0);
        assert_eq!(least_chunks(1), 1);
        assert_eq!(least_chunks(max), 1);
        assert_eq!(least_chunks(max + 1), 2);
    }

    /// An endpoint that knows one object: its file, chunk list (`None`: not offered) and plan.
    struct Lister {
        oid: LfsOid,
        file: FileHash,
        size: u64,
        list: Option<Vec<ChunkRef>>,
        plan: ReconstructionPlan,
        lists: AtomicUsize,
    }

    impl CasTarget for Lister {
        fn has_xorb(&self, _: &XorbHash) -> Result<bool, TargetError> {
            Ok(false)
        }
        fn put_xorb(&self, _: XorbHash, _: &[u8]) -> Result<bool, TargetError> {
            Ok(false)
        }
        fn register_shard(&self, _: &[u8]) -> Result<(), TargetError> {
            Ok(())
        }
    }

    impl XorbSource for Lister {
        fn read_xorb_range(&self, xorb: &XorbHash, _: &FetchRange) -> Result<Vec<u8>, TargetError> {
            Err(TargetError::NotFound {
                what: format!("xorb {xorb}"),
            })
        }
    }

    impl Endpoint for Lister {
        fn reconstruction(
            &self,
            file: &FileHash,
            _: Option<(u64, u64)>,
        ) -> Result<Option<ReconstructionPlan>, TargetError> {
            Ok((*file == self.file).then(|| self.plan.clone()))
        }
        fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
            Ok((*oid == self.oid).then_some((self.file, self.size)))
        }
        fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, TargetError> {
            self.lists.fetch_add(1, Ordering::Relaxed);
            Ok(self.list.clone().filter(|_| *file == self.file))
        }
        fn describe(&self) -> String {
            "the lister".into()
        }
    }

    fn lister(list: Option<Vec<ChunkRef>>) -> Lister {
        let real = vec![chunk(1, 100), chunk(2, 50), chunk(3, 30)];
        Lister {
            oid: LfsOid::of(b"v0"),
            file: file_hash(&real),
            size: 180,
            list,
            plan: plan(&[(7, 4..6, 150), (9, 0..1, 30)]),
            lists: AtomicUsize::new(0),
        }
    }

    #[test]
    fn a_listed_version_is_the_list_checked_and_placed_by_the_plan() {
        let real = vec![chunk(1, 100), chunk(2, 50), chunk(3, 30)];
        let e = lister(Some(real.clone()));
        let v = PriorVersion::listed(&e, &e.oid, 180, 10).unwrap().unwrap();
        assert_eq!((v.oid, v.file, v.path.clone()), (e.oid, e.file, None));
        let seeds: Vec<_> = v.seeds().collect();
        assert_eq!(
            seeds,
            vec![
                (real[0].hash, xorb(7), 4),
                (real[1].hash, xorb(7), 5),
                (real[2].hash, xorb(9), 0)
            ]
        );
        assert!(v.uses_xorb(&xorb(9)) && !v.uses_xorb(&xorb(8)));
        // Nothing of it is on this machine: a download copies nothing from it.
        let mut local = LocalChunks::default();
        local.add(&v);
        assert!(local.is_empty());
    }

    #[test]
    fn a_listed_version_is_not_used_when_anything_is_off() {
        let real = vec![chunk(1, 100), chunk(2, 50), chunk(3, 30)];
        // An endpoint without lists, an unknown object, another size.
        let e = lister(None);
        assert!(PriorVersion::listed(&e, &e.oid, 180, 10).unwrap().is_none());
        let e = lister(Some(real.clone()));
        assert!(PriorVersion::listed(&e, &LfsOid::of(b"other"), 180, 10)
            .unwrap()
            .is_none());
        assert!(PriorVersion::listed(&e, &e.oid, 181, 10).unwrap().is_none());
        assert!(PriorVersion::listed(&e, &e.oid, 0, 10).unwrap().is_none());
        // A list longer than allowed is not used.
        assert!(PriorVersion::listed(&e, &e.oid, 180, 2).unwrap().is_none());
        // A list that does not make the file is refused, saying so.
        let mut lying = real.clone();
        lying[1] = chunk(5, 50);
        let e = lister(Some(lying));
        let err = PriorVersion::listed(&e, &e.oid, 180, 10).unwrap_err();
        assert!(matches!(err, PriorError::BadList { .. }), "{err}");
        assert!(err.to_string().contains("the lister"), "{err}");
        // A plan that does not match the list.
        let mut e = lister(Some(real));
        e.plan = plan(&[(7, 4..6, 180)]);
        assert!(PriorVersion::listed(&e, &e.oid, 180, 10).unwrap().is_none());
    }

    #[test]
    fn a_file_too_large_for_the_allowance_is_not_asked_about() {
        let mut e = lister(Some(Vec::new()));
        let size = 10 * MAX_CHUNK_SIZE as u64 + 1;
        e.size = size;
        assert!(PriorVersion::listed(&e, &e.oid, size, 10)
            .unwrap()
            .is_none());
        assert_eq!(e.lists.load(Ordering::Relaxed), 0);
        // Within it, the list is asked for (and this one, empty, is refused).
        assert!(PriorVersion::listed(&e, &e.oid, size, 11).is_err());
        assert_eq!(e.lists.load(Ordering::Relaxed), 1);
    }
}
