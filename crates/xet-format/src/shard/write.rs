//! The shard writer: a [`Shard`] model to the complete form or the upload form, byte-for-byte as
//! xet-core's `MDBShardInfo::serialize_from` (and, for keyed or table-less shards,
//! `export_as_keyed_shard` / `MDBMinimalShard::serialize`) would write it.
//!
//! - File blocks are written in file-hash order, xorb blocks in xorb-hash order.
//! - The file and xorb lookup tables follow the block order (already sorted by truncated hash).
//! - The chunk lookup table is sorted by truncated (stored) chunk hash. Ties (the same chunk in
//!   two xorbs, or a 64-bit collision) are ordered the way xet-core orders them: with the
//!   standard library's unstable sort over the same element type as `serialize_from` for an
//!   unkeyed shard, and with the stable sort of `export_as_keyed_shard` for a keyed one.
//! - The footer totals are computed from the content ([`Shard::totals`]); the key, creation
//!   timestamp and expiry come from [`Shard::meta`] (see [`ShardMeta::SESSION`]).
//! - Reserved fields are written as zero.
//!
//! Models that cannot be written are rejected with an error: more than `u32::MAX` terms or
//! chunks in a block, a verification list whose length differs from the term count, a file or
//! xorb hash equal to the bookend marker, two blocks with the same hash, an output over
//! [`MAX_SHARD_SIZE`], or (upload form only) a keyed shard.
//!
//! [`ShardMeta::SESSION`]: super::ShardMeta::SESSION

use super::error::ShardError;
use super::model::{FileInfo, Shard, XorbInfo};
use super::{
    BOOKEND_HASH, CHUNK_LOOKUP_ENTRY_SIZE, FILE_FLAGS_KNOWN, FILE_LOOKUP_ENTRY_SIZE, FOOTER_SIZE,
    FOOTER_VERSION, HEADER_SIZE, HEADER_TAG, HEADER_VERSION, MAX_SHARD_SIZE, RECORD_SIZE,
    XORB_LOOKUP_ENTRY_SIZE,
};
use crate::hash::ShardHash;

/// Which lookup tables a complete shard carries. xet-core's stored shards have all three;
/// its dedup shards (and the reference local server's stored copies) have none. A table that is
/// left out is declared empty in the footer (count 0, offset = where it would start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LookupTables {
    pub file: bool,
    pub xorb: bool,
    pub chunk: bool,
}

impl LookupTables {
    /// All three tables: `serialize_from`.
    pub const ALL: LookupTables = LookupTables {
        file: true,
        xorb: true,
        chunk: true,
    };
    /// No tables: `MDBMinimalShard::serialize`, global-dedup answers.
    pub const NONE: LookupTables = LookupTables {
        file: false,
        xorb: false,
        chunk: false,
    };
}

impl Default for LookupTables {
    fn default() -> Self {
        Self::ALL
    }
}

/// The local file name of a complete shard: `<S form of its hash>.mdb` (§4.10).
pub fn shard_file_name(hash: &ShardHash) -> String {
    format!("{hash}.mdb")
}

/// The checked, ordered view of a model that both forms are written from.
struct Plan<'a> {
    files: Vec<&'a FileInfo>,
    xorbs: Vec<&'a XorbInfo>,
    /// Offset of the xorb info section.
    xorb_info_offset: u64,
    /// Offset just past the xorb bookend (= `file_lookup_offset`).
    body_end: u64,
}

fn file_records(f: &FileInfo) -> u64 {
    let n = f.terms.len() as u64;
    let v = if f.verification.is_some() { n } else { 0 };
    let e = u64::from(f.sha256.is_some());
    1 + n + v + e
}

fn too_large(len: u64) -> ShardError {
    ShardError::OutputTooLarge {
        len,
        max: MAX_SHARD_SIZE,
    }
}

impl<'a> Plan<'a> {
    fn new(shard: &'a Shard) -> Result<Self, ShardError> {
        for f in &shard.files {
            if u32::try_from(f.terms.len()).is_err() {
                return Err(ShardError::TooManyTerms {
                    file: f.hash,
                    count: f.terms.len(),
                });
            }
            if let Some(v) = &f.verification {
                if v.len() != f.terms.len() {
                    return Err(ShardError::VerificationCount {
                        file: f.hash,
                        terms: f.terms.len(),
                        verifications: v.len(),
                    });
                }
            }
            if f.unknown_flags & FILE_FLAGS_KNOWN != 0 {
                return Err(ShardError::KnownFlagInUnknownFlags {
                    file: f.hash,
                    flags: f.unknown_flags,
                });
            }
            if f.hash.as_bytes() == &BOOKEND_HASH {
                return Err(ShardError::BookendHash { what: "file" });
            }
        }
        for x in &shard.xorbs {
            if u32::try_from(x.chunks.len()).is_err() {
                return Err(ShardError::TooManyChunks {
                    xorb: x.hash,
                    count: x.chunks.len(),
                });
            }
            if x.hash.as_bytes() == &BOOKEND_HASH {
                return Err(ShardError::BookendHash { what: "xorb" });
            }
        }

        let mut files: Vec<&FileInfo> = shard.files.iter().collect();
        files.sort_by_key(|f| f.hash);
        if let Some(w) = files.windows(2).find(|w| w[0].hash == w[1].hash) {
            return Err(ShardError::DuplicateFile(w[0].hash));
        }
        let mut xorbs: Vec<&XorbInfo> = shard.xorbs.iter().collect();
        xorbs.sort_by_key(|x| x.hash);
        if let Some(w) = xorbs.windows(2).find(|w| w[0].hash == w[1].hash) {
            return Err(ShardError::DuplicateXorb(w[0].hash));
        }

        // Sizes, with every step checked against the limit so nothing can overflow.
        let mut pos = HEADER_SIZE;
        for f in &files {
            pos = pos.saturating_add(file_records(f).saturating_mul(RECORD_SIZE));
            if pos > MAX_SHARD_SIZE {
                return Err(too_large(pos));
            }
        }
        pos += RECORD_SIZE;
        let xorb_info_offset = pos;
        for x in &xorbs {
            let records = 1 + x.chunks.len() as u64;
            pos = pos.saturating_add(records.saturating_mul(RECORD_SIZE));
            if pos > MAX_SHARD_SIZE {
                return Err(too_large(pos));
            }
        }
        pos += RECORD_SIZE;
        if pos > MAX_SHARD_SIZE {
            return Err(too_large(pos));
        }
        Ok(Self {
            files,
            xorbs,
            xorb_info_offset,
            body_end: pos,
        })
    }

    /// Header, both info sections and both bookends.
    fn write_body(&self, out: &mut Vec<u8>, footer_size: u64) {
        out.extend_from_slice(&HEADER_TAG);
        put_u64(out, HEADER_VERSION);
        put_u64(out, footer_size);

        for f in &self.files {
            out.extend_from_slice(f.hash.as_bytes());
            put_u32(out, f.flags());
            // Checked in Plan::new.
            put_u32(out, f.terms.len() as u32);
            put_u64(out, 0);
            for t in &f.terms {
                out.extend_from_slice(t.xorb_hash.as_bytes());
                put_u32(out, t.xorb_flags);
                put_u32(out, t.unpacked_segment_bytes);
                put_u32(out, t.chunk_index_start);
                put_u32(out, t.chunk_index_end);
            }
            if let Some(v) = &f.verification {
                for h in v {
                    out.extend_from_slice(h.as_bytes());
                    out.extend_from_slice(&[0u8; 16]);
                }
            }
            if let Some(oid) = &f.sha256 {
                out.extend_from_slice(&oid.to_metadata_ext_bytes());
                out.extend_from_slice(&[0u8; 16]);
            }
        }
        put_bookend(out);

        for x in &self.xorbs {
            out.extend_from_slice(x.hash.as_bytes());
            put_u32(out, x.flags);
            put_u32(out, x.chunks.len() as u32);
            put_u32(out, x.num_bytes_in_xorb);
            put_u32(out, x.num_bytes_on_disk);
            for c in &x.chunks {
                out.extend_from_slice(c.hash.as_bytes());
                put_u32(out, c.chunk_byte_range_start);
                put_u32(out, c.unpacked_segment_bytes);
                put_u32(out, c.flags);
                put_u32(out, 0);
            }
        }
        put_bookend(out);
    }

    /// The file and xorb lookup tables (block order) and the sorted chunk lookup table.
    #[allow(clippy::type_complexity)]
    fn lookups(&self, keyed: bool) -> (Vec<(u64, u32)>, Vec<(u64, u32)>, Vec<(u64, (u32, u32))>) {
        let mut files = Vec::with_capacity(self.files.len());
        let mut index: u32 = 0;
        for f in &self.files {
            files.push((f.hash.truncated(), index));
            // Record counts fit in u32: the whole shard is at most 64 MiB of 48-byte records.
            index = index.wrapping_add(file_records(f) as u32);
        }

        let mut xorbs = Vec::with_capacity(self.xorbs.len());
        let mut keys: Vec<u64> = Vec::new();
        let mut vals: Vec<(u32, u32)> = Vec::new();
        let mut index: u32 = 0;
        for x in &self.xorbs {
            xorbs.push((x.hash.truncated(), index));
            for (i, c) in x.chunks.iter().enumerate() {
                keys.push(c.hash.truncated());
                vals.push((index, i as u32));
            }
            index = index.wrapping_add(1 + x.chunks.len() as u32);
        }

        let chunks = if keyed {
            // export_as_keyed_shard: a stable sort on (u64, (u32, u32)) by key.
            let mut c: Vec<(u64, (u32, u32))> = keys.into_iter().zip(vals).collect();
            c.sort_by_key(|s| s.0);
            c
        } else {
            // serialize_from: an unstable sort of (&u64, &(u32, u32)) pairs by key. Same element
            // type, same comparison, same algorithm, so ties land where xet-core puts them.
            let mut c = keys.iter().zip(vals.iter()).collect::<Vec<_>>();
            c.sort_unstable_by_key(|&(k, _)| k);
            c.into_iter().map(|(&k, &v)| (k, v)).collect()
        };
        (files, xorbs, chunks)
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bookend(out: &mut Vec<u8>) {
    out.extend_from_slice(&BOOKEND_HASH);
    out.extend_from_slice(&[0u8; 16]);
}

impl Shard {
    /// The complete form: header, info sections, the chosen lookup tables and the 200-byte
    /// footer. Deterministic: the same model always gives the same bytes.
    pub fn to_complete_bytes(&self, tables: LookupTables) -> Result<Vec<u8>, ShardError> {
        let plan = Plan::new(self)?;
        let (files, xorbs, chunks) = plan.lookups(self.is_keyed());
        let nf = if tables.file { files.len() as u64 } else { 0 };
        let nx = if tables.xorb { xorbs.len() as u64 } else { 0 };
        let nc = if tables.chunk { chunks.len() as u64 } else { 0 };

        let file_lookup_offset = plan.body_end;
        let xorb_lookup_offset = file_lookup_offset + nf * FILE_LOOKUP_ENTRY_SIZE;
        let chunk_lookup_offset = xorb_lookup_offset + nx * XORB_LOOKUP_ENTRY_SIZE;
        let footer_offset = chunk_lookup_offset + nc * CHUNK_LOOKUP_ENTRY_SIZE;
        let total = footer_offset + FOOTER_SIZE;
        if total > MAX_SHARD_SIZE {
            return Err(too_large(total));
        }

        let mut out = Vec::with_capacity(total as usize);
        plan.write_body(&mut out, FOOTER_SIZE);
        if tables.file {
            for (k, i) in &files {
                put_u64(&mut out, *k);
                put_u32(&mut out, *i);
            }
        }
        if tables.xorb {
            for (k, i) in &xorbs {
                put_u64(&mut out, *k);
                put_u32(&mut out, *i);
            }
        }
        if tables.chunk {
            for (k, (x, c)) in &chunks {
                put_u64(&mut out, *k);
                put_u32(&mut out, *x);
                put_u32(&mut out, *c);
            }
        }

        let totals = self.totals();
        put_u64(&mut out, FOOTER_VERSION);
        put_u64(&mut out, HEADER_SIZE);
        put_u64(&mut out, plan.xorb_info_offset);
        put_u64(&mut out, file_lookup_offset);
        put_u64(&mut out, nf);
        put_u64(&mut out, xorb_lookup_offset);
        put_u64(&mut out, nx);
        put_u64(&mut out, chunk_lookup_offset);
        put_u64(&mut out, nc);
        out.extend_from_slice(self.meta.hmac_key.as_bytes());
        put_u64(&mut out, self.meta.creation_timestamp);
        put_u64(&mut out, self.meta.key_expiry);
        out.extend_from_slice(&[0u8; 48]);
        put_u64(&mut out, totals.stored_bytes_on_disk);
        put_u64(&mut out, totals.materialized_bytes);
        put_u64(&mut out, totals.stored_bytes);
        put_u64(&mut out, footer_offset);
        debug_assert_eq!(out.len() as u64, total);
        Ok(out)
    }

    /// The complete form and its [`ShardHash`] (which names the local file, §4.10).
    pub fn to_complete_bytes_and_hash(
        &self,
        tables: LookupTables,
    ) -> Result<(Vec<u8>, ShardHash), ShardError> {
        let bytes = self.to_complete_bytes(tables)?;
        let hash = ShardHash::of(&bytes);
        Ok((bytes, hash))
    }

    /// The upload form (§4.8): header with `footer_size` 0, the file section and the xorb
    /// section, each closed by its bookend; no lookup tables, no footer. Equal to bytes
    /// `[0, file_lookup_offset)` of the complete form apart from `footer_size`. [`Shard::meta`]
    /// is not part of this form; a keyed shard is refused, since its key would be lost.
    pub fn to_upload_bytes(&self) -> Result<Vec<u8>, ShardError> {
        if self.is_keyed() {
            return Err(ShardError::KeyedUpload);
        }
        let plan = Plan::new(self)?;
        let mut out = Vec::with_capacity(plan.body_end as usize);
        plan.write_body(&mut out, 0);
        debug_assert_eq!(out.len() as u64, plan.body_end);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{ChunkHash, FileHash, HmacKey, XorbHash};
    use crate::shard::{ChunkInfo, Term};

    fn xorb_with(hash: u8, chunk_hashes: &[ChunkHash]) -> XorbInfo {
        XorbInfo {
            hash: XorbHash::from_bytes([hash; 32]),
            flags: 0,
            num_bytes_in_xorb: chunk_hashes.len() as u32,
            num_bytes_on_disk: 0,
            chunks: chunk_hashes
                .iter()
                .enumerate()
                .map(|(i, h)| ChunkInfo {
                    hash: *h,
                    chunk_byte_range_start: i as u32,
                    unpacked_segment_bytes: 1,
                    flags: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn empty_shard_layout() {
        let s = Shard::new();
        let b = s.to_complete_bytes(LookupTables::ALL).unwrap();
        assert_eq!(b.len(), 48 + 48 + 48 + 200);
        assert_eq!(&b[..32], &HEADER_TAG);
        assert_eq!(s.to_upload_bytes().unwrap().len(), 144);
        assert_eq!(
            shard_file_name(&ShardHash::from_bytes([0; 32])),
            format!("{}.mdb", "0".repeat(64))
        );
    }

    #[test]
    fn rejects_unwritable_models() {
        let mut s = Shard::new();
        s.files.push(FileInfo {
            verification: Some(vec![]),
            ..FileInfo::new(
                FileHash::from_bytes([1; 32]),
                vec![Term::new(XorbHash::ZERO, 1, 0, 1)],
            )
        });
        assert!(matches!(
            s.to_complete_bytes(LookupTables::ALL),
            Err(ShardError::VerificationCount {
                terms: 1,
                verifications: 0,
                ..
            })
        ));

        let mut s = Shard::new();
        s.files
            .push(FileInfo::new(FileHash::from_bytes([0xff; 32]), vec![]));
        assert!(matches!(
            s.to_upload_bytes(),
            Err(ShardError::BookendHash { .. })
        ));

        let mut s = Shard::new();
        s.xorbs.push(xorb_with(1, &[]));
        s.xorbs.push(xorb_with(1, &[]));
        assert!(matches!(
            s.to_upload_bytes(),
            Err(ShardError::DuplicateXorb(_))
        ));

        let mut s = Shard::new();
        s.files.push(FileInfo {
            unknown_flags: 1 << 31,
            ..FileInfo::new(FileHash::ZERO, vec![])
        });
        assert!(matches!(
            s.to_upload_bytes(),
            Err(ShardError::KnownFlagInUnknownFlags { .. })
        ));
    }

    #[test]
    fn chunk_lookup_ties_keep_xorb_then_chunk_order_in_small_tables() {
        let c = ChunkHash::from_bytes([5; 32]);
        let mut s = Shard::new();
        s.xorbs.push(xorb_with(2, &[c, c]));
        s.xorbs.push(xorb_with(1, &[c]));
        for keyed in [false, true] {
            let plan = Plan::new(&s).unwrap();
            let (_, _, chunks) = plan.lookups(keyed);
            // Xorb 1 is written first (record 0), xorb 2 second (record 2).
            let vals: Vec<(u32, u32)> = chunks.iter().map(|e| e.1).collect();
            assert_eq!(vals, vec![(0, 0), (2, 0), (2, 1)]);
        }
        let k = s.to_keyed(HmacKey::from_bytes([7; 32])).unwrap();
        assert!(k.to_complete_bytes(LookupTables::ALL).is_ok());
        assert_eq!(k.to_upload_bytes(), Err(ShardError::KeyedUpload));
    }
}
