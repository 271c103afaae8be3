//! Remembered chunk lists of Git LFS objects: the Xet chunks (hash and length, in file order)
//! of an object, computed once and kept on this machine, so that a later push of a new version
//! of the file learns the earlier version's chunks without chunking and hashing it again.
//!
//! A download also finds here where the chunks it needs are in any local object
//! ([`ChunkLists::find`]), whatever version or path it came from; objects git-lfs placed
//! without a list are hashed once for it ([`ChunkLists::remember_unlisted`]).
//!
//! Lists live in one directory per repository (the agent uses `<git common dir>/xet/chunk-lists`),
//! one file per object, named by its oid and size: `<oid[..2]>/<oid>-<size>`. They are written
//! where the chunks are known anyway: after an upload (its session chunked the file), after a
//! download (it checked the chunks against the file's hash), after an earlier version on this
//! machine was hashed, and after a chunk list learnt from the endpoint was checked.
//!
//! A file is, little-endian:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | [`MAGIC`]: `XETCLST` and the format version, 1 |
//! | 32 | the object's oid (SHA-256) |
//! | 8 | its size |
//! | 32 | its Xet file hash |
//! | 8 | the number of chunks, n |
//! | 36 × n | per chunk its hash (32 bytes) and length (u32), as `GET /v1/file-chunks` sends them ([`xet_protocol::wire::encode_file_chunks`]) |
//!
//! Nothing read back is trusted on its word ([`ChunkLists::get`]): the header must name the
//! object asked for, the count must fit the size and the bytes present before anything is
//! allocated, every length must be one a chunk can have, the lengths must add up to the size
//! and the chunks must give the header's file hash (a function of exactly these hashes and
//! lengths, cheap to compute over a list). A file that fails any of it is removed, and the list
//! is computed again by whoever asked. A list only ever says "these chunks make the file with
//! this hash": the caller still checks that hash against the endpoint's record of the oid
//! before it relies on the list (see [`crate::pipeline::prior`]).
//!
//! The directory is kept bounded ([`ChunkLists::prune`]): lists of objects no longer in the
//! local object store that were not used for [`UNUSED_DAYS`] days go, then the least recently
//! used ones while the directory holds more than [`MAX_TOTAL_BYTES`]. A list's modification time
//! is its last use.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::pipeline::hasher::hash_file;
use crate::pipeline::prior::{check_list, least_chunks};
use xet_format::cursor::Cursor;
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid};
use xet_protocol::util::fs::AtomicWrite;
use xet_protocol::wire::{
    decode_file_chunks, encode_file_chunks, FILE_CHUNK_RECORD, MAX_LISTED_CHUNKS,
};

/// The first bytes of a list file: a name and the format version (1).
pub const MAGIC: [u8; 8] = *b"XETCLST\x01";

/// Bytes of a list file before its records.
pub const HEADER_LEN: usize = 8 + 32 + 8 + 32 + 8;

/// Lists whose object is not in the local object store are removed once unused this long.
pub const UNUSED_DAYS: u64 = 30;

/// The directory is cut down to this many bytes of lists, least recently used first.
pub const MAX_TOTAL_BYTES: u64 = 256 << 20;

/// How often a repository's lists are pruned (see [`ChunkLists::prune_now_and_then`]).
const PRUNE_EVERY: Duration = Duration::from_secs(24 * 3600);

/// The stamp of the last prune, in the lists' directory.
const PRUNE_STAMP: &str = ".pruned";

/// Why a list could not be kept or read back.
#[derive(Debug, thiserror::Error)]
pub enum ChunkListError {
    #[error("cannot write the chunk list of {oid} to {path}: {source}")]
    Write {
        oid: LfsOid,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the chunk list of {oid} at {path}: {source}")]
    Read {
        oid: LfsOid,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the chunk list of {oid} at {path} is damaged: {why}")]
    Damaged {
        oid: LfsOid,
        path: PathBuf,
        why: String,
    },
    #[error("the chunks given for {oid} do not make it: {why}")]
    NotTheObject { oid: LfsOid, why: String },
}

/// An object's chunks, as remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectChunks {
    /// The object's Xet file hash, which the chunks give.
    pub file: FileHash,
    /// Its chunks, in file order.
    pub chunks: Vec<ChunkRef>,
}

/// The bytes of the list file of object `oid` (`size` bytes, Xet hash `file`) with `chunks`.
/// The caller has checked that they make the file ([`check_list`]).
pub fn encode(oid: &LfsOid, size: u64, file: &FileHash, chunks: &[ChunkRef]) -> Vec<u8> {
    let body = encode_file_chunks(chunks);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(oid.digest());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(file.as_bytes());
    out.extend_from_slice(&(chunks.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The list in `bytes`, if it is the list of object `oid` of `size` bytes and checks out (see
/// the module documentation); the reason when not. Never allocates for more chunks than the
/// bytes hold.
pub fn decode(bytes: &[u8], oid: &LfsOid, size: u64) -> Result<ObjectChunks, String> {
    let mut c = Cursor::new(bytes);
    let truncated = |e: xet_format::cursor::Truncated| e.to_string();
    let magic: [u8; 8] = c.array("magic").map_err(truncated)?;
    if magic[..7] != MAGIC[..7] {
        return Err("not a chunk list".into());
    }
    if magic[7] != MAGIC[7] {
        return Err(format!(
            "format version {} (this is {})",
            magic[7], MAGIC[7]
        ));
    }
    let named = LfsOid::from_digest(c.hash("oid").map_err(truncated)?);
    if named != *oid {
        return Err(format!("it is the list of {named}"));
    }
    let named_size = c.u64("size").map_err(truncated)?;
    if named_size != size {
        return Err(format!(
            "it is of {named_size} bytes, the object has {size}"
        ));
    }
    let file = FileHash::from_bytes(c.hash("file hash").map_err(truncated)?);
    let n = c.u64("chunk count").map_err(truncated)?;
    // A chunk has at least one byte and at most the largest chunk's.
    if n > MAX_LISTED_CHUNKS as u64 || n > size || n < least_chunks(size) {
        return Err(format!("{n} chunks cannot make {size} bytes"));
    }
    let body = c.rest();
    if Some(body.len() as u64) != n.checked_mul(FILE_CHUNK_RECORD as u64) {
        return Err(format!(
            "{} bytes of records for {n} chunks of {FILE_CHUNK_RECORD} bytes",
            body.len()
        ));
    }
    let chunks = decode_file_chunks(body).map_err(|e| e.0)?;
    check_list(&chunks, &file, size)?;
    Ok(ObjectChunks { file, chunks })
}

/// The chunk lists of one repository's objects: see the module documentation.
#[derive(Debug, Clone)]
pub struct ChunkLists {
    dir: PathBuf,
}

impl ChunkLists {
    /// The lists kept in `dir` (created when the first list is written).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The lists of the repository whose git common directory is `common_dir`:
    /// `<common_dir>/xet/chunk-lists`.
    pub fn in_git_dir(common_dir: &Path) -> Self {
        Self::new(common_dir.join("xet").join("chunk-lists"))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the list of object `oid` of `size` bytes is kept.
    pub fn path(&self, oid: &LfsOid, size: u64) -> PathBuf {
        let hex = oid.to_hex();
        self.dir.join(&hex[..2]).join(format!("{hex}-{size}"))
    }

    /// The remembered list of object `oid` (`size` bytes), checked (see the module
    /// documentation). `Ok(None)`: none is kept. A damaged list is removed, and said so in the
    /// error: the caller computes the list again. Using a list marks it as recently used.
    pub fn get(&self, oid: &LfsOid, size: u64) -> Result<Option<ObjectChunks>, ChunkListError> {
        self.read(oid, size, true)
    }

    /// [`Self::get`], marking the list as used only if `mark_used`.
    fn read(
        &self,
        oid: &LfsOid,
        size: u64,
        mark_used: bool,
    ) -> Result<Option<ObjectChunks>, ChunkListError> {
        let path = self.path(oid, size);
        let bytes = match read_bounded(&path, size) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ChunkListError::Read {
                    oid: *oid,
                    path,
                    source,
                })
            }
        };
        match decode(&bytes, oid, size) {
            Ok(list) => {
                if mark_used {
                    touch(&path);
                }
                Ok(Some(list))
            }
            Err(why) => {
                let _ = std::fs::remove_file(&path);
                Err(ChunkListError::Damaged {
                    oid: *oid,
                    path,
                    why,
                })
            }
        }
    }

    /// Remembers `chunks` as the list of object `oid` (`size` bytes, Xet hash `file`), after
    /// checking that they make that file; written atomically (a reader sees the old list or
    /// the new one). Lists longer than [`MAX_LISTED_CHUNKS`] are not kept (files of about
    /// 64 GiB and more).
    pub fn put(
        &self,
        oid: &LfsOid,
        size: u64,
        file: &FileHash,
        chunks: &[ChunkRef],
    ) -> Result<(), ChunkListError> {
        if chunks.len() > MAX_LISTED_CHUNKS {
            return Ok(());
        }
        check_list(chunks, file, size)
            .map_err(|why| ChunkListError::NotTheObject { oid: *oid, why })?;
        let path = self.path(oid, size);
        let write = |path: &Path| -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            AtomicWrite::new()
                .temp_name(".tmp-", ".list")
                .write(path, &encode(oid, size, file, chunks))
        };
        write(&path).map_err(|source| ChunkListError::Write {
            oid: *oid,
            path,
            source,
        })
    }

    /// Computes and remembers the lists of the objects in `objects` (git-lfs's object store,
    /// `<oid[..2]>/<oid[2..4]>/<oid>`) of at least `min_size` bytes that have none (objects
    /// git-lfs placed itself, or that were here before this machine kept lists), hashing at
    /// most `budget` bytes: the objects are hashed once, and later calls find their lists.
    /// Returns the bytes hashed. Never fails: an object that cannot be read is skipped.
    pub fn remember_unlisted(&self, objects: &Path, min_size: u64, budget: u64) -> u64 {
        let mut hashed = 0u64;
        for (oid, size, path) in local_objects(objects) {
            if size < min_size || self.path(&oid, size).is_file() {
                continue;
            }
            if hashed.saturating_add(size) > budget {
                tracing::debug!(%oid, size, "object not hashed for the local chunk lists: budget spent");
                continue;
            }
            hashed += size;
            match hash_file(&path) {
                Ok(h) if h.size == size => {
                    if let Err(e) = self.put(&oid, size, &h.file_hash, &h.chunks) {
                        tracing::debug!("{e}");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(%oid, "local object not hashed: {e}"),
            }
        }
        if hashed > 0 {
            tracing::info!(
                bytes = hashed,
                "hashed local objects once for their chunk lists"
            );
        }
        hashed
    }

    /// Where the chunks in `wanted` are in the objects of `objects` (git-lfs's object store)
    /// whose lists are kept: per object with at least one of them, its path and, for each,
    /// the offset and length in it (the first place a chunk is found). Objects no longer in
    /// the store, or of another size, are passed over; damaged lists are removed. Never
    /// fails.
    pub fn find(&self, wanted: &HashSet<ChunkHash>, objects: &Path) -> Vec<FoundChunks> {
        let mut out = Vec::new();
        let mut left: HashSet<ChunkHash> = wanted.clone();
        let Ok(fans) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        'scan: for fan in fans.flatten() {
            let Ok(entries) = std::fs::read_dir(fan.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                if left.is_empty() {
                    break 'scan;
                }
                let Some((oid, size)) = entry.file_name().to_str().and_then(parse_name) else {
                    continue;
                };
                let path = object_path(objects, &oid);
                if std::fs::metadata(&path).map(|m| m.len()).ok() != Some(size) {
                    continue;
                }
                let list = match self.read(&oid, size, false) {
                    Ok(Some(list)) => list,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::debug!("{e}");
                        continue;
                    }
                };
                let mut chunks = HashMap::new();
                let mut offset = 0u64;
                for c in &list.chunks {
                    if left.remove(&c.hash) {
                        if let Ok(len) = u32::try_from(c.len) {
                            chunks.insert(c.hash, (offset, len));
                        }
                    }
                    offset += c.len;
                }
                if !chunks.is_empty() {
                    touch(&self.path(&oid, size));
                    out.push(FoundChunks { oid, path, chunks });
                }
            }
        }
        out
    }

    /// Prunes the lists ([`Self::prune`]) if the last prune was more than a day ago (or never);
    /// what it removed. `has_object` says whether an object is in the local object store.
    pub fn prune_now_and_then(&self, has_object: &dyn Fn(&LfsOid) -> bool) -> usize {
        let stamp = self.dir.join(PRUNE_STAMP);
        let recent = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < PRUNE_EVERY);
        if recent || !self.dir.is_dir() {
            return 0;
        }
        if std::fs::write(&stamp, b"").is_err() {
            return 0;
        }
        self.prune(has_object, SystemTime::now(), MAX_TOTAL_BYTES)
    }

    /// Removes the lists whose object `has_object` says is gone and that were last used more
    /// than [`UNUSED_DAYS`] before `now`, the files that are not lists (leftover temporary
    /// files older than a day), then the least recently used lists while they take more than
    /// `max_bytes`. How many files it removed. Never fails: what cannot be read is left.
    pub fn prune(
        &self,
        has_object: &dyn Fn(&LfsOid) -> bool,
        now: SystemTime,
        max_bytes: u64,
    ) -> usize {
        let unused = Duration::from_secs(UNUSED_DAYS * 24 * 3600);
        let mut removed = 0;
        let mut kept: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let Ok(fans) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        for fan in fans.flatten() {
            if !fan.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(fan.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else {
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let used = meta.modified().unwrap_or(now);
                let age = now.duration_since(used).unwrap_or_default();
                let name = entry.file_name();
                let oid = name
                    .to_str()
                    .and_then(|n| n.split_once('-'))
                    .and_then(|(hex, _)| LfsOid::from_hex(hex).ok());
                let gone = match oid {
                    Some(oid) => age > unused && !has_object(&oid),
                    // A temporary file of a write that never finished.
                    None => age > Duration::from_secs(24 * 3600),
                };
                if gone {
                    if std::fs::remove_file(&path).is_ok() {
                        removed += 1;
                    }
                } else if oid.is_some() {
                    kept.push((used, meta.len(), path));
                }
            }
        }
        let mut total: u64 = kept.iter().map(|k| k.1).sum();
        if total > max_bytes {
            kept.sort_by_key(|k| k.0);
            for (_, len, path) in kept {
                if total <= max_bytes {
                    break;
                }
                if std::fs::remove_file(&path).is_ok() {
                    removed += 1;
                    total = total.saturating_sub(len);
                }
            }
        }
        if removed > 0 {
            tracing::debug!(dir = %self.dir.display(), removed, "pruned remembered chunk lists");
        }
        removed
    }
}

/// Chunks found in a local object ([`ChunkLists::find`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundChunks {
    pub oid: LfsOid,
    /// The object in git-lfs's object store.
    pub path: PathBuf,
    /// Per chunk, its offset and length in the object.
    pub chunks: HashMap<ChunkHash, (u64, u32)>,
}

/// The oid and size a list file's name `<oid>-<size>` gives.
fn parse_name(name: &str) -> Option<(LfsOid, u64)> {
    let (hex, size) = name.split_once('-')?;
    Some((LfsOid::from_hex(hex).ok()?, size.parse().ok()?))
}

/// Where git-lfs keeps object `oid` under its `objects` directory.
pub fn object_path(objects: &Path, oid: &LfsOid) -> PathBuf {
    let hex = oid.to_hex();
    objects.join(&hex[..2]).join(&hex[2..4]).join(hex)
}

/// The objects in git-lfs's `objects` directory: oid, size and path of each file named as an
/// object is (`<oid[..2]>/<oid[2..4]>/<oid>`); anything else is passed over.
pub fn local_objects(objects: &Path) -> Vec<(LfsOid, u64, PathBuf)> {
    let mut out = Vec::new();
    let dirs = |p: &Path| -> Vec<std::fs::DirEntry> {
        std::fs::read_dir(p)
            .map(|d| d.flatten().collect())
            .unwrap_or_default()
    };
    for a in dirs(objects) {
        for b in dirs(&a.path()) {
            for entry in dirs(&b.path()) {
                let Some(oid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| LfsOid::from_hex(n).ok())
                else {
                    continue;
                };
                let path = entry.path();
                if path != object_path(objects, &oid) {
                    continue;
                }
                if let Ok(meta) = entry.metadata() {
                    if meta.is_file() {
                        out.push((oid, meta.len(), path));
                    }
                }
            }
        }
    }
    out
}

/// The bytes of the list file at `path`, if it is no larger than a list of a `size`-byte object
/// can be (`None` when it is larger: not read, the caller treats it as absent and a new list
/// replaces it).
fn read_bounded(path: &Path, size: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let most_chunks = size.min(MAX_LISTED_CHUNKS as u64);
    let most = HEADER_LEN as u64 + most_chunks * FILE_CHUNK_RECORD as u64;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > most {
        let _ = std::fs::remove_file(path);
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(most + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > most {
        let _ = std::fs::remove_file(path);
        return Ok(None);
    }
    Ok(Some(bytes))
}

/// Marks the list at `path` as used now (its modification time), for pruning.
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_format::hash::file_hash;
    use xet_format::ChunkHash;

    fn list(n: u8) -> (LfsOid, u64, FileHash, Vec<ChunkRef>) {
        let chunks: Vec<ChunkRef> = (0..n)
            .map(|i| ChunkRef::new(ChunkHash::of(&[i; 9]), 1000 + u64::from(i)))
            .collect();
        let size = chunks.iter().map(|c| c.len).sum();
        (LfsOid::of(&[n]), size, file_hash(&chunks), chunks)
    }

    #[test]
    fn a_list_reads_back_as_written() {
        let (oid, size, file, chunks) = list(5);
        let bytes = encode(&oid, size, &file, &chunks);
        assert_eq!(bytes.len(), HEADER_LEN + 5 * FILE_CHUNK_RECORD);
        assert_eq!(
            decode(&bytes, &oid, size).unwrap(),
            ObjectChunks {
                file,
                chunks: chunks.clone()
            }
        );
        // Through the directory too.
        let dir = tempfile::tempdir().unwrap();
        let lists = ChunkLists::new(dir.path().join("lists"));
        assert!(lists.get(&oid, size).unwrap().is_none());
        lists.put(&oid, size, &file, &chunks).unwrap();
        let path = lists.path(&oid, size);
        assert!(path.ends_with(format!("{}/{oid}-{size}", &oid.to_hex()[..2])));
        assert_eq!(lists.get(&oid, size).unwrap().unwrap().chunks, chunks);
        // Another size of the same oid is another list.
        assert!(lists.get(&oid, size + 1).unwrap().is_none());
    }

    #[test]
    fn every_changed_byte_is_refused() {
        let (oid, size, file, chunks) = list(4);
        let bytes = encode(&oid, size, &file, &chunks);
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[at] ^= flip;
                assert!(
                    decode(&bad, &oid, size).is_err(),
                    "byte {at} changed by {flip:#x} was accepted"
                );
            }
        }
    }

    #[test]
    fn cut_or_lengthened_lists_are_refused() {
        let (oid, size, file, chunks) = list(4);
        let bytes = encode(&oid, size, &file, &chunks);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], &oid, size).is_err(), "cut to {len}");
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; FILE_CHUNK_RECORD]);
        assert!(decode(&longer, &oid, size).is_err());
        longer.truncate(bytes.len() + 1);
        assert!(decode(&longer, &oid, size).is_err());
    }

    #[test]
    fn a_list_of_another_object_or_version_is_refused() {
        let (oid, size, file, chunks) = list(3);
        let bytes = encode(&oid, size, &file, &chunks);
        let err = decode(&bytes, &LfsOid::of(b"other"), size).unwrap_err();
        assert!(err.contains("the list of"), "{err}");
        let err = decode(&bytes, &oid, size + 1).unwrap_err();
        assert!(err.contains("bytes"), "{err}");
        let mut v2 = bytes.clone();
        v2[7] = 2;
        let err = decode(&v2, &oid, size).unwrap_err();
        assert!(err.contains("version 2"), "{err}");
    }

    #[test]
    fn counts_are_checked_against_the_size_and_the_bytes_before_allocating() {
        let (oid, size, file, chunks) = list(3);
        let count_at = HEADER_LEN - 8;
        let with_count = |n: u64| {
            let mut b = encode(&oid, size, &file, &chunks);
            b[count_at..HEADER_LEN].copy_from_slice(&n.to_le_bytes());
            b
        };
        // Counts no file of this size can have, and counts the bytes do not hold (a count
        // that would overflow the record arithmetic included): refused without allocating.
        for n in [
            u64::MAX,
            u64::MAX / 36 + 1,
            size + 1,
            MAX_LISTED_CHUNKS as u64 + 1,
            0,
            2,
            4,
        ] {
            assert!(decode(&with_count(n), &oid, size).is_err(), "count {n}");
        }
        // A huge object whose list claims a million chunks but holds none.
        let huge = 1u64 << 36;
        let b = encode(&oid, huge, &file, &[]);
        let mut b2 = b.clone();
        b2[count_at..HEADER_LEN].copy_from_slice(&(1u64 << 20).to_le_bytes());
        let err = decode(&b2, &oid, huge).unwrap_err();
        assert!(err.contains("bytes of records"), "{err}");
    }

    #[test]
    fn a_damaged_list_file_is_removed_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let lists = ChunkLists::new(dir.path().to_path_buf());
        let (oid, size, file, chunks) = list(4);
        lists.put(&oid, size, &file, &chunks).unwrap();
        let path = lists.path(&oid, size);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = lists.get(&oid, size).unwrap_err();
        assert!(matches!(err, ChunkListError::Damaged { .. }), "{err}");
        assert!(err.to_string().contains(&oid.to_hex()), "{err}");
        assert!(!path.exists(), "a damaged list is removed");
        assert!(lists.get(&oid, size).unwrap().is_none());
        // A file larger than any list of the object is not read, and goes too.
        std::fs::write(&path, vec![0u8; HEADER_LEN + (size as usize + 1) * 36]).unwrap();
        assert!(lists.get(&oid, size).unwrap().is_none());
        assert!(!path.exists());
    }

    #[test]
    fn chunks_that_do_not_make_the_object_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let lists = ChunkLists::new(dir.path().to_path_buf());
        let (oid, size, file, mut chunks) = list(4);
        chunks.swap(0, 1);
        assert!(matches!(
            lists.put(&oid, size, &file, &chunks),
            Err(ChunkListError::NotTheObject { .. })
        ));
        assert!(lists.put(&oid, size + 1, &file, &chunks).is_err());
        assert!(!lists.path(&oid, size).exists());
    }

    #[test]
    fn pruning_keeps_local_objects_and_recent_lists_within_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let lists = ChunkLists::new(dir.path().to_path_buf());
        let objects: Vec<_> = (1..=4u8).map(list).collect();
        for (oid, size, file, chunks) in &objects {
            lists.put(oid, *size, file, chunks).unwrap();
        }
        let day = Duration::from_secs(24 * 3600);
        let now = SystemTime::now();
        let age = |i: usize, days: u64| {
            let (oid, size, ..) = &objects[i];
            let f = std::fs::File::options()
                .append(true)
                .open(lists.path(oid, *size))
                .unwrap();
            f.set_modified(now - day * days as u32).unwrap();
        };
        // 0: old, object gone: removed. 1: old, object here: kept. 2: recent, gone: kept.
        // 3: recent, here: kept.
        age(0, UNUSED_DAYS + 1);
        age(1, UNUSED_DAYS + 1);
        age(2, 1);
        age(3, 0);
        let here = [objects[1].0, objects[3].0];
        let has = |oid: &LfsOid| here.contains(oid);
        // A temporary file a write left two days ago goes too.
        let fan = lists.path(&objects[0].0, 0).parent().unwrap().to_path_buf();
        let stale = fan.join(".tmp-x.list");
        std::fs::write(&stale, b"x").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&stale)
            .unwrap()
            .set_modified(now - day * 2)
            .unwrap();
        assert_eq!(lists.prune(&has, now, u64::MAX), 2);
        assert!(!stale.exists());
        let exists = |i: usize| lists.path(&objects[i].0, objects[i].1).exists();
        assert!(!exists(0) && exists(1) && exists(2) && exists(3));
        // Over the cap, the least recently used go first: 1 (oldest), then 2.
        let one = std::fs::metadata(lists.path(&objects[3].0, objects[3].1))
            .unwrap()
            .len();
        assert_eq!(lists.prune(&has, now, one + 10), 2);
        assert!(!exists(1) && !exists(2) && exists(3));
        // Pruning at most once a day.
        let all_gone = |_: &LfsOid| false;
        assert_eq!(lists.prune_now_and_then(&all_gone), 0, "nothing old enough");
        assert!(dir.path().join(PRUNE_STAMP).exists());
        age(3, UNUSED_DAYS + 1);
        assert_eq!(
            lists.prune_now_and_then(&all_gone),
            0,
            "pruned today already"
        );
    }

    /// Writes `data` into a git-lfs object store at `objects` under its SHA-256.
    fn put_object(objects: &Path, data: &[u8]) -> (LfsOid, PathBuf) {
        let oid = LfsOid::of(data);
        let path = object_path(objects, &oid);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
        (oid, path)
    }

    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn unlisted_objects_are_hashed_once_within_the_budget_and_their_chunks_found() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        let lists = ChunkLists::new(dir.path().join("lists"));
        let a = noise(1, 600_000);
        let b = noise(2, 700_000);
        let small = noise(3, 1000);
        let (oid_a, path_a) = put_object(&objects, &a);
        let (oid_b, _) = put_object(&objects, &b);
        let (oid_s, _) = put_object(&objects, &small);
        // Files that are not objects are passed over.
        std::fs::write(objects.join("stray"), b"x").unwrap();
        std::fs::create_dir_all(objects.join("ab/cd")).unwrap();
        std::fs::write(objects.join("ab/cd").join(oid_a.to_hex()), &a).unwrap();

        // A budget that fits one of the two large objects hashes just one.
        assert_eq!(lists.remember_unlisted(&objects, 10_000, 650_000), 600_000);
        assert!(lists.get(&oid_a, a.len() as u64).unwrap().is_some());
        assert!(lists.get(&oid_b, b.len() as u64).unwrap().is_none());
        assert!(lists.get(&oid_s, small.len() as u64).unwrap().is_none());
        // Listed objects are not hashed again.
        assert_eq!(lists.remember_unlisted(&objects, 10_000, u64::MAX), 700_000);
        assert_eq!(lists.remember_unlisted(&objects, 10_000, u64::MAX), 0);

        // Every chunk of `a` is found where it is in `a`.
        let hashed = hash_file(&path_a).unwrap();
        let wanted: HashSet<ChunkHash> = hashed.chunks.iter().map(|c| c.hash).collect();
        let found = lists.find(&wanted, &objects);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].oid, oid_a);
        assert_eq!(found[0].path, path_a);
        let mut offset = 0u64;
        for c in &hashed.chunks {
            let (at, len) = found[0].chunks[&c.hash];
            assert_eq!((at, u64::from(len)), (offset, c.len));
            offset += c.len;
        }
        // Chunks no object has are not found; an object gone from the store is passed over.
        let other: HashSet<ChunkHash> = [ChunkHash::of(b"nowhere")].into_iter().collect();
        assert!(lists.find(&other, &objects).is_empty());
        std::fs::remove_file(&path_a).unwrap();
        assert!(lists.find(&wanted, &objects).is_empty());
    }
}
