//! The in-memory model of a shard: files with their terms, xorbs with their chunks, and the
//! footer metadata — typed hashes throughout — plus the queries the client and server need.
//!
//! The model stores exactly what the bytes say: in a keyed shard ([`ShardMeta::hmac_key`] not
//! zero) the chunk hashes are the keyed ones (§1.8). [`Shard::to_keyed`] turns a raw model into
//! a keyed one; [`Shard::find_chunk`] keys a raw query hash before looking it up.
//!
//! Block layouts (48 bytes each, little-endian):
//!
//! `FileDataSequenceHeader` ([`FileInfo`]):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 32 | file hash |
//! | 32 | 4 | flags: bit 31 WITH_VERIFICATION, bit 30 WITH_METADATA_EXT |
//! | 36 | 4 | num_entries (terms) |
//! | 40 | 8 | reserved (ignored on read, 0 on write) |
//!
//! `FileDataSequenceEntry` ([`Term`]):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 32 | xorb hash |
//! | 32 | 4 | xorb_flags |
//! | 36 | 4 | unpacked_segment_bytes |
//! | 40 | 4 | chunk_index_start |
//! | 44 | 4 | chunk_index_end (exclusive) |
//!
//! `FileVerificationEntry`: 32-byte range hash, 16 reserved. `FileMetadataExt`: 32-byte SHA-256
//! with each 8-byte word reversed (§1.9), 16 reserved.
//!
//! `XorbChunkSequenceHeader` ([`XorbInfo`]):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 32 | xorb hash |
//! | 32 | 4 | xorb_flags |
//! | 36 | 4 | num_entries (chunks) |
//! | 40 | 4 | num_bytes_in_xorb |
//! | 44 | 4 | num_bytes_on_disk |
//!
//! `XorbChunkSequenceEntry` ([`ChunkInfo`]):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 32 | chunk hash (keyed in a keyed shard) |
//! | 32 | 4 | chunk_byte_range_start |
//! | 36 | 4 | unpacked_segment_bytes |
//! | 40 | 4 | flags: bit 31 GLOBAL_DEDUP_ELIGIBLE |
//! | 44 | 4 | reserved (ignored on read, 0 on write) |

use std::collections::{BTreeSet, HashMap};

use super::error::ShardError;
use super::{
    CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, FILE_FLAG_WITH_METADATA_EXT, FILE_FLAG_WITH_VERIFICATION,
};
use crate::hash::{
    keyed_chunk_hash, ChunkHash, ChunkRef, FileHash, HmacKey, LfsOid, VerificationHash, XorbHash,
};

/// One term of a file reconstruction: chunks `[chunk_index_start, chunk_index_end)` of a xorb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Term {
    pub xorb_hash: XorbHash,
    /// `cas_flags`; the reference client writes 0.
    pub xorb_flags: u32,
    /// Uncompressed length of the term.
    pub unpacked_segment_bytes: u32,
    pub chunk_index_start: u32,
    /// Exclusive.
    pub chunk_index_end: u32,
}

impl Term {
    /// A term with `xorb_flags` 0, as the reference client writes.
    pub fn new(
        xorb_hash: XorbHash,
        unpacked_segment_bytes: u32,
        chunk_index_start: u32,
        chunk_index_end: u32,
    ) -> Self {
        Self {
            xorb_hash,
            xorb_flags: 0,
            unpacked_segment_bytes,
            chunk_index_start,
            chunk_index_end,
        }
    }

    /// Number of chunks the term covers (0 if the range is inverted).
    pub fn num_chunks(&self) -> u32 {
        self.chunk_index_end.saturating_sub(self.chunk_index_start)
    }
}

/// A file block: the file hash, its terms, and the optional per-term verification hashes and
/// SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FileInfo {
    pub hash: FileHash,
    pub terms: Vec<Term>,
    /// One range hash per term (§1.7), written iff `Some` (flag WITH_VERIFICATION). Must have
    /// exactly as many entries as `terms`.
    pub verification: Option<Vec<VerificationHash>>,
    /// The SHA-256 of the file, written iff `Some` (flag WITH_METADATA_EXT). xet-core stores 32
    /// zero bytes for a file it never fed to SHA-256 (the empty file).
    pub sha256: Option<LfsOid>,
    /// Flag bits other than WITH_VERIFICATION and WITH_METADATA_EXT, as read. xet-core writes 0
    /// and ignores them on read; our server rejects them (docs/cas-api.md §9.3). Kept so that a shard
    /// re-serialises to the same bytes; must not contain the two known bits.
    pub unknown_flags: u32,
}

impl FileInfo {
    /// A file without verification entries or SHA-256.
    pub fn new(hash: FileHash, terms: Vec<Term>) -> Self {
        Self {
            hash,
            terms,
            ..Self::default()
        }
    }

    /// The flags word as written: the two layout bits derived from the optional parts, plus
    /// [`FileInfo::unknown_flags`].
    pub fn flags(&self) -> u32 {
        let mut flags = self.unknown_flags;
        if self.verification.is_some() {
            flags |= FILE_FLAG_WITH_VERIFICATION;
        }
        if self.sha256.is_some() {
            flags |= FILE_FLAG_WITH_METADATA_EXT;
        }
        flags
    }

    /// True when the block carries verification entries.
    pub fn has_verification(&self) -> bool {
        self.verification.is_some()
    }

    /// The Git LFS oid stored in `FileMetadataExt`, if any.
    pub fn lfs_oid(&self) -> Option<LfsOid> {
        self.sha256
    }

    /// The file size: the sum of the terms' `unpacked_segment_bytes`.
    pub fn size(&self) -> u64 {
        self.terms.iter().fold(0u64, |acc, t| {
            acc.saturating_add(u64::from(t.unpacked_segment_bytes))
        })
    }

    /// Pairs each term with its verification hash, if the block has them.
    pub fn verified_terms(&self) -> Option<impl Iterator<Item = (&Term, &VerificationHash)> + '_> {
        self.verification
            .as_ref()
            .map(|v| self.terms.iter().zip(v.iter()))
    }
}

/// One chunk entry of a xorb block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkInfo {
    /// The chunk hash as stored: keyed when the shard is keyed.
    pub hash: ChunkHash,
    /// Cumulative uncompressed offset of the chunk inside the xorb.
    pub chunk_byte_range_start: u32,
    /// Uncompressed length of the chunk.
    pub unpacked_segment_bytes: u32,
    /// Bit 31: GLOBAL_DEDUP_ELIGIBLE; xet-core ignores the others and so do we.
    pub flags: u32,
}

impl ChunkInfo {
    /// xet-core's `is_global_dedup_eligible`: the flag, or `hash % 1024 == 0` on the stored hash.
    pub fn is_global_dedup_eligible(&self) -> bool {
        self.flags & CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE != 0 || self.hash.is_global_dedup_eligible()
    }
}

/// A xorb block: the xorb header and its chunks in xorb order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct XorbInfo {
    pub hash: XorbHash,
    /// `cas_flags`; 0 in everything xet-core writes.
    pub flags: u32,
    /// Sum of the uncompressed chunk lengths (as declared; not recomputed).
    pub num_bytes_in_xorb: u32,
    /// Serialised xorb size; the reference client writes 0 and the server fills it in.
    pub num_bytes_on_disk: u32,
    pub chunks: Vec<ChunkInfo>,
}

impl XorbInfo {
    /// Builds the block of a xorb from its chunks in xorb order, as the client does: cumulative
    /// start offsets, chunk flags 0, `num_bytes_on_disk` 0. Fails if the xorb is longer than the
    /// u32 shard fields allow.
    pub fn from_chunks(hash: XorbHash, chunks: &[ChunkRef]) -> Result<Self, ShardError> {
        let mut out = Vec::with_capacity(chunks.len());
        let mut start: u64 = 0;
        for (i, c) in chunks.iter().enumerate() {
            let end = start.saturating_add(c.len);
            let too_long = || ShardError::XorbTooLong {
                xorb: hash,
                chunk: i,
                end,
            };
            out.push(ChunkInfo {
                hash: c.hash,
                chunk_byte_range_start: u32::try_from(start).map_err(|_| too_long())?,
                unpacked_segment_bytes: u32::try_from(c.len).map_err(|_| too_long())?,
                flags: 0,
            });
            u32::try_from(end).map_err(|_| too_long())?;
            start = end;
        }
        Ok(Self {
            hash,
            flags: 0,
            // Checked in the loop above.
            num_bytes_in_xorb: u32::try_from(start).unwrap_or(u32::MAX),
            num_bytes_on_disk: 0,
            chunks: out,
        })
    }
}

/// The footer fields that are not derived from the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardMeta {
    /// Zero: chunk hashes are raw. Otherwise every chunk hash in the xorb section (and chunk
    /// lookup) is `keyed_chunk_hash(key, raw)`.
    pub hmac_key: HmacKey,
    /// `shard_creation_timestamp`, unix seconds.
    pub creation_timestamp: u64,
    /// `shard_key_expiry`, unix seconds.
    pub key_expiry: u64,
}

impl ShardMeta {
    /// What xet-core's session shards carry (`serialize_from` without expiry): no key,
    /// creation 0, expiry `u64::MAX`. Also what the reader reports for an upload-form shard.
    pub const SESSION: ShardMeta = ShardMeta {
        hmac_key: HmacKey::ZERO,
        creation_timestamp: 0,
        key_expiry: u64::MAX,
    };
}

impl Default for ShardMeta {
    fn default() -> Self {
        Self::SESSION
    }
}

/// The three byte totals of the footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ShardTotals {
    /// Σ `num_bytes_on_disk` over the xorb blocks.
    pub stored_bytes_on_disk: u64,
    /// Σ over files of Σ `unpacked_segment_bytes` of their terms.
    pub materialized_bytes: u64,
    /// Σ `num_bytes_in_xorb` over the xorb blocks.
    pub stored_bytes: u64,
}

/// Where a chunk sits: the xorb block (by position in [`Shard::xorbs`]) and the chunk index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkLocation {
    pub xorb_index: usize,
    pub xorb_hash: XorbHash,
    pub chunk_index: u32,
}

/// A shard: its file blocks, its xorb blocks and the footer metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shard {
    pub files: Vec<FileInfo>,
    pub xorbs: Vec<XorbInfo>,
    pub meta: ShardMeta,
}

impl Shard {
    /// An empty session shard.
    pub fn new() -> Self {
        Self::default()
    }

    /// The file blocks, in model order.
    pub fn files(&self) -> std::slice::Iter<'_, FileInfo> {
        self.files.iter()
    }

    /// The xorb blocks, in model order.
    pub fn xorbs(&self) -> std::slice::Iter<'_, XorbInfo> {
        self.xorbs.iter()
    }

    /// True when the chunk hashes are keyed.
    pub fn is_keyed(&self) -> bool {
        !self.meta.hmac_key.is_zero()
    }

    /// Total number of chunk entries over all xorb blocks.
    pub fn num_chunks(&self) -> usize {
        self.xorbs.iter().map(|x| x.chunks.len()).sum()
    }

    /// The footer totals as xet-core computes them from the content.
    pub fn totals(&self) -> ShardTotals {
        let mut t = ShardTotals::default();
        for f in &self.files {
            t.materialized_bytes = t.materialized_bytes.saturating_add(f.size());
        }
        for x in &self.xorbs {
            t.stored_bytes_on_disk = t
                .stored_bytes_on_disk
                .saturating_add(u64::from(x.num_bytes_on_disk));
            t.stored_bytes = t
                .stored_bytes
                .saturating_add(u64::from(x.num_bytes_in_xorb));
        }
        t
    }

    /// The first file block with this hash (linear scan; see [`ShardIndex`] for many queries).
    pub fn file(&self, hash: &FileHash) -> Option<&FileInfo> {
        self.files.iter().find(|f| f.hash == *hash)
    }

    /// The first xorb block with this hash.
    pub fn xorb(&self, hash: &XorbHash) -> Option<&XorbInfo> {
        self.xorbs.iter().find(|x| x.hash == *hash)
    }

    /// The LFS oid (SHA-256) recorded for a file, if the file is present and carries one.
    pub fn lfs_oid(&self, file: &FileHash) -> Option<LfsOid> {
        self.file(file).and_then(|f| f.sha256)
    }

    /// Finds a chunk by its **raw** hash: keyed with the shard's key first when it has one.
    pub fn find_chunk(&self, raw: &ChunkHash) -> Option<ChunkLocation> {
        self.find_stored_chunk(&keyed_chunk_hash(&self.meta.hmac_key, raw))
    }

    /// Finds a chunk by the hash as stored in the shard (keyed or not): first match in xorb
    /// order, then chunk order.
    pub fn find_stored_chunk(&self, stored: &ChunkHash) -> Option<ChunkLocation> {
        self.xorbs.iter().enumerate().find_map(|(xi, x)| {
            let ci = x.chunks.iter().position(|c| c.hash == *stored)?;
            Some(ChunkLocation {
                xorb_index: xi,
                xorb_hash: x.hash,
                chunk_index: u32::try_from(ci).ok()?,
            })
        })
    }

    /// Files without verification entries, with their positions.
    pub fn files_without_verification(&self) -> impl Iterator<Item = (usize, &FileInfo)> + '_ {
        self.files
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.has_verification())
    }

    /// The server's rule for uploaded shards (§4.3): every file has verification entries.
    /// Names the first file that does not.
    pub fn check_all_files_verified(&self) -> Result<(), ShardError> {
        match self.files_without_verification().next() {
            None => Ok(()),
            Some((index, f)) => Err(ShardError::MissingVerification {
                index,
                file: f.hash,
            }),
        }
    }

    /// xet-core's weaker rule for untrusted shards (`MDBMinimalShard`): either every file has
    /// verification entries or none does.
    pub fn verification_all_or_none(&self) -> bool {
        let with = self.files.iter().filter(|f| f.has_verification()).count();
        with == 0 || with == self.files.len()
    }

    /// A copy whose chunk hashes are keyed with `key` (§1.8) and whose footer carries the key:
    /// the form of a global-dedup answer. A zero key leaves the hashes as they are. Fails if the
    /// shard is already keyed.
    pub fn to_keyed(&self, key: HmacKey) -> Result<Shard, ShardError> {
        if self.is_keyed() {
            return Err(ShardError::AlreadyKeyed);
        }
        let mut out = self.clone();
        for x in &mut out.xorbs {
            for c in &mut x.chunks {
                c.hash = keyed_chunk_hash(&key, &c.hash);
            }
        }
        out.meta.hmac_key = key;
        Ok(out)
    }

    /// Sets GLOBAL_DEDUP_ELIGIBLE on every chunk that starts a file listed in this shard (the
    /// first chunk of the file's first term, when that xorb's block is in the shard), as
    /// xet-core's `MDBMinimalShard::serialize` does; the reference local server stores uploaded
    /// shards that way. Other flags are left as they are.
    pub fn mark_file_start_chunks(&mut self) {
        let starts: BTreeSet<(XorbHash, u32)> = self
            .files
            .iter()
            .filter_map(|f| f.terms.first())
            .map(|t| (t.xorb_hash, t.chunk_index_start))
            .collect();
        for x in &mut self.xorbs {
            for (i, c) in x.chunks.iter_mut().enumerate() {
                let Ok(i) = u32::try_from(i) else { break };
                if starts.contains(&(x.hash, i)) {
                    c.flags |= CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE;
                }
            }
        }
    }

    /// The chunk hashes a server indexes for global dedup (xet-core's
    /// `global_dedup_eligible_chunks`): chunks that start a file of this shard, carry the flag, or
    /// satisfy `hash % 1024 == 0`. Each hash once, in xorb order then chunk order.
    pub fn global_dedup_eligible_chunks(&self) -> Vec<ChunkHash> {
        let starts: BTreeSet<(XorbHash, u32)> = self
            .files
            .iter()
            .filter_map(|f| f.terms.first())
            .map(|t| (t.xorb_hash, t.chunk_index_start))
            .collect();
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for x in &self.xorbs {
            for (i, c) in x.chunks.iter().enumerate() {
                let is_start = u32::try_from(i).is_ok_and(|i| starts.contains(&(x.hash, i)));
                if (is_start || c.is_global_dedup_eligible()) && seen.insert(c.hash) {
                    out.push(c.hash);
                }
            }
        }
        out
    }

    /// Puts files and xorbs in the order the writer uses (by hash; ties keep their order), so
    /// that a model compares equal to what reading its bytes back gives.
    pub fn sort(&mut self) {
        self.files.sort_by_key(|f| f.hash);
        self.xorbs.sort_by_key(|x| x.hash);
    }

    /// Hash maps over this shard for repeated queries.
    pub fn index(&self) -> ShardIndex<'_> {
        ShardIndex::new(self)
    }
}

/// Hash-map lookups over a [`Shard`], for callers that query it many times. On duplicate hashes
/// the first occurrence wins, as in [`Shard::file`] and friends.
#[derive(Debug, Clone)]
pub struct ShardIndex<'a> {
    shard: &'a Shard,
    files: HashMap<FileHash, usize>,
    xorbs: HashMap<XorbHash, usize>,
    chunks: HashMap<ChunkHash, (usize, u32)>,
}

impl<'a> ShardIndex<'a> {
    pub fn new(shard: &'a Shard) -> Self {
        let mut files = HashMap::with_capacity(shard.files.len());
        for (i, f) in shard.files.iter().enumerate() {
            files.entry(f.hash).or_insert(i);
        }
        let mut xorbs = HashMap::with_capacity(shard.xorbs.len());
        let mut chunks = HashMap::with_capacity(shard.num_chunks());
        for (xi, x) in shard.xorbs.iter().enumerate() {
            xorbs.entry(x.hash).or_insert(xi);
            for (ci, c) in x.chunks.iter().enumerate() {
                if let Ok(ci) = u32::try_from(ci) {
                    chunks.entry(c.hash).or_insert((xi, ci));
                }
            }
        }
        Self {
            shard,
            files,
            xorbs,
            chunks,
        }
    }

    pub fn file(&self, hash: &FileHash) -> Option<&'a FileInfo> {
        self.files.get(hash).and_then(|&i| self.shard.files.get(i))
    }

    pub fn xorb(&self, hash: &XorbHash) -> Option<&'a XorbInfo> {
        self.xorbs.get(hash).and_then(|&i| self.shard.xorbs.get(i))
    }

    /// By raw hash, keyed with the shard's key when it has one.
    pub fn find_chunk(&self, raw: &ChunkHash) -> Option<ChunkLocation> {
        self.find_stored_chunk(&keyed_chunk_hash(&self.shard.meta.hmac_key, raw))
    }

    /// By the hash as stored.
    pub fn find_stored_chunk(&self, stored: &ChunkHash) -> Option<ChunkLocation> {
        let &(xorb_index, chunk_index) = self.chunks.get(stored)?;
        let x = self.shard.xorbs.get(xorb_index)?;
        Some(ChunkLocation {
            xorb_index,
            xorb_hash: x.hash,
            chunk_index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::verification_hash;

    fn h(n: u8) -> [u8; 32] {
        [n; 32]
    }

    fn sample() -> Shard {
        let a = ChunkHash::of(b"a");
        let b = ChunkHash::of(b"b");
        let xh = XorbHash::from_bytes(h(3));
        let xorb = XorbInfo::from_chunks(xh, &[ChunkRef::new(a, 1), ChunkRef::new(b, 1)]).unwrap();
        let term = Term::new(xh, 2, 0, 2);
        let file = FileInfo {
            hash: FileHash::from_bytes(h(9)),
            terms: vec![term],
            verification: Some(vec![verification_hash([&a, &b])]),
            sha256: Some(LfsOid::of(b"ab")),
            unknown_flags: 0,
        };
        Shard {
            files: vec![file, FileInfo::new(FileHash::from_bytes(h(1)), vec![])],
            xorbs: vec![xorb],
            meta: ShardMeta::SESSION,
        }
    }

    #[test]
    fn queries() {
        let s = sample();
        let a = ChunkHash::of(b"a");
        let b = ChunkHash::of(b"b");
        let loc = s.find_chunk(&b).unwrap();
        assert_eq!((loc.xorb_index, loc.chunk_index), (0, 1));
        assert_eq!(s.index().find_chunk(&b), Some(loc));
        assert_eq!(
            s.lfs_oid(&FileHash::from_bytes(h(9))),
            Some(LfsOid::of(b"ab"))
        );
        assert_eq!(s.lfs_oid(&FileHash::from_bytes(h(1))), None);
        assert!(s.index().file(&FileHash::from_bytes(h(1))).is_some());
        assert!(s.xorb(&XorbHash::from_bytes(h(3))).is_some());
        assert_eq!(
            s.totals(),
            ShardTotals {
                stored_bytes_on_disk: 0,
                materialized_bytes: 2,
                stored_bytes: 2
            }
        );
        assert!(matches!(
            s.check_all_files_verified(),
            Err(ShardError::MissingVerification { index: 1, .. })
        ));
        assert!(!s.verification_all_or_none());

        let key = HmacKey::from_bytes([7; 32]);
        let k = s.to_keyed(key).unwrap();
        assert!(k.is_keyed());
        assert_eq!(k.xorbs[0].chunks[0].hash, keyed_chunk_hash(&key, &a));
        assert_eq!(k.find_chunk(&a).map(|l| l.chunk_index), Some(0));
        assert_eq!(k.index().find_chunk(&a).map(|l| l.chunk_index), Some(0));
        assert_eq!(k.find_stored_chunk(&a), None);
        assert_eq!(k.to_keyed(key), Err(ShardError::AlreadyKeyed));
    }

    #[test]
    fn dedup_flags_follow_file_starts() {
        let mut s = sample();
        assert_eq!(s.global_dedup_eligible_chunks(), vec![ChunkHash::of(b"a")]);
        s.mark_file_start_chunks();
        assert_eq!(s.xorbs[0].chunks[0].flags, CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE);
        assert_eq!(s.xorbs[0].chunks[1].flags, 0);
        assert!(s.xorbs[0].chunks[0].is_global_dedup_eligible());
    }

    #[test]
    fn from_chunks_rejects_overlong_xorbs() {
        let c = ChunkRef::new(ChunkHash::ZERO, u64::from(u32::MAX));
        let x = XorbHash::ZERO;
        assert!(XorbInfo::from_chunks(x, &[c]).is_ok());
        assert!(matches!(
            XorbInfo::from_chunks(x, &[c, ChunkRef::new(ChunkHash::ZERO, 1)]),
            Err(ShardError::XorbTooLong { chunk: 1, .. })
        ));
    }
}
