//! The validating shard reader for untrusted bytes: the complete form and the upload form, into a
//! [`Shard`] model plus what the footer said ([`ParsedShard`]).
//!
//! The sections are delimited by their bookends, never by the header's `footer_size`: an input
//! that ends right after the xorb bookend is the upload form (with `footer_size` 0, or 200 as
//! older clients sent it); anything else must be lookup tables followed by a footer that agrees
//! with what was read. Checked, in order:
//!
//! - size at most [`MAX_SHARD_SIZE`]; all 32 tag bytes; header version 2; `footer_size` 0 or 200
//!   (200 when a footer follows);
//! - every block's entry count against the bytes remaining, **before** anything is allocated;
//! - footer version 1; `footer_offset` = length − 200; `file_info_offset` = 48;
//!   `xorb_info_offset` = just after the file bookend; `file_lookup_offset` = just after the xorb
//!   bookend; each table count either 0 or one entry per record; the tables exactly fill the
//!   space up to the footer;
//! - every lookup entry: keys in non-decreasing `u64` order; the index names the header of a
//!   block (and, for chunks, an existing chunk of it) whose hash truncates to the key; no record
//!   named twice.
//!
//! Following xet-core, the reader ignores reserved fields (including the rest of a bookend record
//! and the footer's 48 reserved bytes), accepts any xorb and chunk flags, keeps unknown file flag
//! bits in [`FileInfo::unknown_flags`] (so the server can reject them), accepts blocks in any
//! order and duplicate hashes. The footer's byte totals are reported, not enforced: every xet-core
//! writer computes them exactly, so [`ParsedShard::totals_match`] flags a hand-made or corrupted
//! footer without refusing an otherwise sound shard.
//!
//! Footer (200 bytes, at `footer_offset`):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 8 | version = 1 |
//! | 8 | 8 | file_info_offset (48) |
//! | 16 | 8 | xorb_info_offset |
//! | 24 | 8 | file_lookup_offset |
//! | 32 | 8 | file_lookup_num_entry |
//! | 40 | 8 | xorb_lookup_offset |
//! | 48 | 8 | xorb_lookup_num_entry |
//! | 56 | 8 | chunk_lookup_offset |
//! | 64 | 8 | chunk_lookup_num_entry |
//! | 72 | 32 | chunk_hash_hmac_key |
//! | 104 | 8 | shard_creation_timestamp |
//! | 112 | 8 | shard_key_expiry |
//! | 120 | 48 | reserved |
//! | 168 | 8 | stored_bytes_on_disk |
//! | 176 | 8 | materialized_bytes |
//! | 184 | 8 | stored_bytes |
//! | 192 | 8 | footer_offset |

use super::error::{Record, ShardError, Table};
use super::model::{ChunkInfo, FileInfo, Shard, ShardMeta, ShardTotals, Term, XorbInfo};
use super::write::LookupTables;
use super::{
    BOOKEND_HASH, CHUNK_LOOKUP_ENTRY_SIZE, FILE_FLAGS_KNOWN, FILE_FLAG_WITH_METADATA_EXT,
    FILE_FLAG_WITH_VERIFICATION, FILE_LOOKUP_ENTRY_SIZE, FOOTER_SIZE, FOOTER_VERSION, HEADER_SIZE,
    HEADER_TAG, HEADER_VERSION, MAX_SHARD_SIZE, RECORD_SIZE, XORB_LOOKUP_ENTRY_SIZE,
};
use crate::format::cursor::Cursor;
use crate::format::hash::{ChunkHash, FileHash, HmacKey, LfsOid, VerificationHash, XorbHash};

/// What the footer of a complete-form shard declared, beyond the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FooterInfo {
    /// Which lookup tables are present (non-empty).
    pub lookup_tables: LookupTables,
    /// The byte totals as stored.
    pub totals: ShardTotals,
    /// Where the footer starts (= length − 200).
    pub footer_offset: u64,
}

/// A shard read from bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParsedShard {
    /// The content, in the order read. For the upload form `meta` is [`ShardMeta::SESSION`].
    pub shard: Shard,
    /// The header's `footer_size` (0 or 200).
    pub footer_size: u64,
    /// `None` for the upload form.
    pub footer: Option<FooterInfo>,
}

impl ParsedShard {
    /// Reads and validates a shard in either form. See the module docs for what is checked.
    pub fn parse(bytes: &[u8]) -> Result<Self, ShardError> {
        parse(bytes)
    }

    /// True when the input ended right after the xorb section.
    pub fn is_upload_form(&self) -> bool {
        self.footer.is_none()
    }

    /// The lookup tables present ([`LookupTables::NONE`] for the upload form).
    pub fn lookup_tables(&self) -> LookupTables {
        self.footer.map_or(LookupTables::NONE, |f| f.lookup_tables)
    }

    /// The totals stored in the footer (`None` for the upload form).
    pub fn stored_totals(&self) -> Option<ShardTotals> {
        self.footer.map(|f| f.totals)
    }

    /// False when the footer's totals differ from those computed from the content.
    pub fn totals_match(&self) -> bool {
        self.footer
            .map_or(true, |f| f.totals == self.shard.totals())
    }

    /// Writes the shard again in the form it was read in (the upload form always with
    /// `footer_size` 0). Equal to the input for anything xet-core writes, as long as blocks are
    /// in hash order and the totals match.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ShardError> {
        match self.footer {
            None => self.shard.to_upload_bytes(),
            Some(f) => self.shard.to_complete_bytes(f.lookup_tables),
        }
    }
}

impl Shard {
    /// Reads a shard in either form and keeps only the model.
    pub fn from_bytes(bytes: &[u8]) -> Result<Shard, ShardError> {
        parse(bytes).map(|p| p.shard)
    }
}

fn hash_bytes(c: &mut Cursor<'_>, what: &'static str) -> Result<[u8; 32], ShardError> {
    Ok(c.hash(what)?)
}

/// The file info section, up to and including its bookend. Returns the files and the record
/// index (counted from offset 48) of each file header.
fn read_files(c: &mut Cursor<'_>) -> Result<(Vec<FileInfo>, Vec<u64>), ShardError> {
    let mut files = Vec::new();
    let mut starts = Vec::new();
    let mut record: u64 = 0;
    loop {
        let offset = c.offset();
        let hash = hash_bytes(c, "file block header")?;
        let flags = c.u32("file block flags")?;
        let n = c.u32("file block num_entries")?;
        let _reserved = c.u64("file block reserved field")?;
        if hash == BOOKEND_HASH {
            return Ok((files, starts));
        }
        let index = files.len();
        let with_verification = flags & FILE_FLAG_WITH_VERIFICATION != 0;
        let with_ext = flags & FILE_FLAG_WITH_METADATA_EXT != 0;
        let entries = u64::from(n);
        let per_entry = if with_verification { 2 } else { 1 };
        let remaining = c.remaining() as u64;
        if entries * per_entry * RECORD_SIZE > remaining {
            return Err(ShardError::EntriesExceedInput {
                record: Record::File(index),
                offset,
                entries,
                remaining,
            });
        }
        // n * 48 <= remaining <= 64 MiB, so this allocation is bounded by the input.
        let mut terms = Vec::with_capacity(n as usize);
        for _ in 0..n {
            terms.push(Term {
                xorb_hash: XorbHash::from_bytes(hash_bytes(c, "term xorb hash")?),
                xorb_flags: c.u32("term xorb_flags")?,
                unpacked_segment_bytes: c.u32("term unpacked_segment_bytes")?,
                chunk_index_start: c.u32("term chunk_index_start")?,
                chunk_index_end: c.u32("term chunk_index_end")?,
            });
        }
        let verification = if with_verification {
            let mut v = Vec::with_capacity(n as usize);
            for _ in 0..n {
                v.push(VerificationHash::from_bytes(hash_bytes(
                    c,
                    "verification entry",
                )?));
                c.skip(16, "verification entry reserved bytes")?;
            }
            Some(v)
        } else {
            None
        };
        let sha256 = if with_ext {
            let raw = hash_bytes(c, "metadata extension")?;
            c.skip(16, "metadata extension reserved bytes")?;
            Some(LfsOid::from_metadata_ext_bytes(&raw))
        } else {
            None
        };
        starts.push(record);
        record += 1 + entries * per_entry + u64::from(with_ext);
        files.push(FileInfo {
            hash: FileHash::from_bytes(hash),
            terms,
            verification,
            sha256,
            unknown_flags: flags & !FILE_FLAGS_KNOWN,
        });
    }
}

/// The xorb info section, up to and including its bookend. Returns the xorbs and the record
/// index (counted from `xorb_info_offset`) of each xorb header.
fn read_xorbs(c: &mut Cursor<'_>) -> Result<(Vec<XorbInfo>, Vec<u64>), ShardError> {
    let mut xorbs = Vec::new();
    let mut starts = Vec::new();
    let mut record: u64 = 0;
    loop {
        let offset = c.offset();
        let hash = hash_bytes(c, "xorb block header")?;
        let flags = c.u32("xorb block flags")?;
        let n = c.u32("xorb block num_entries")?;
        let num_bytes_in_xorb = c.u32("xorb block num_bytes_in_xorb")?;
        let num_bytes_on_disk = c.u32("xorb block num_bytes_on_disk")?;
        if hash == BOOKEND_HASH {
            return Ok((xorbs, starts));
        }
        let entries = u64::from(n);
        let remaining = c.remaining() as u64;
        if entries * RECORD_SIZE > remaining {
            return Err(ShardError::EntriesExceedInput {
                record: Record::Xorb(xorbs.len()),
                offset,
                entries,
                remaining,
            });
        }
        let mut chunks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            chunks.push(ChunkInfo {
                hash: ChunkHash::from_bytes(hash_bytes(c, "chunk entry hash")?),
                chunk_byte_range_start: c.u32("chunk entry chunk_byte_range_start")?,
                unpacked_segment_bytes: c.u32("chunk entry unpacked_segment_bytes")?,
                flags: c.u32("chunk entry flags")?,
            });
            c.skip(4, "chunk entry reserved field")?;
        }
        starts.push(record);
        record += 1 + entries;
        xorbs.push(XorbInfo {
            hash: XorbHash::from_bytes(hash),
            flags,
            num_bytes_in_xorb,
            num_bytes_on_disk,
            chunks,
        });
    }
}

/// The 200-byte footer, field by field.
struct Footer {
    version: u64,
    file_info_offset: u64,
    xorb_info_offset: u64,
    file_lookup_offset: u64,
    file_lookup_num_entry: u64,
    xorb_lookup_offset: u64,
    xorb_lookup_num_entry: u64,
    chunk_lookup_offset: u64,
    chunk_lookup_num_entry: u64,
    hmac_key: HmacKey,
    creation_timestamp: u64,
    key_expiry: u64,
    totals: ShardTotals,
    footer_offset: u64,
}

impl Footer {
    fn read(c: &mut Cursor<'_>) -> Result<Self, ShardError> {
        let version = c.u64("footer version")?;
        let file_info_offset = c.u64("footer file_info_offset")?;
        let xorb_info_offset = c.u64("footer xorb_info_offset")?;
        let file_lookup_offset = c.u64("footer file_lookup_offset")?;
        let file_lookup_num_entry = c.u64("footer file_lookup_num_entry")?;
        let xorb_lookup_offset = c.u64("footer xorb_lookup_offset")?;
        let xorb_lookup_num_entry = c.u64("footer xorb_lookup_num_entry")?;
        let chunk_lookup_offset = c.u64("footer chunk_lookup_offset")?;
        let chunk_lookup_num_entry = c.u64("footer chunk_lookup_num_entry")?;
        let hmac_key = HmacKey::from_bytes(hash_bytes(c, "footer chunk_hash_hmac_key")?);
        let creation_timestamp = c.u64("footer shard_creation_timestamp")?;
        let key_expiry = c.u64("footer shard_key_expiry")?;
        c.skip(48, "footer reserved bytes")?;
        let stored_bytes_on_disk = c.u64("footer stored_bytes_on_disk")?;
        let materialized_bytes = c.u64("footer materialized_bytes")?;
        let stored_bytes = c.u64("footer stored_bytes")?;
        let footer_offset = c.u64("footer footer_offset")?;
        Ok(Self {
            version,
            file_info_offset,
            xorb_info_offset,
            file_lookup_offset,
            file_lookup_num_entry,
            xorb_lookup_offset,
            xorb_lookup_num_entry,
            chunk_lookup_offset,
            chunk_lookup_num_entry,
            hmac_key,
            creation_timestamp,
            key_expiry,
            totals: ShardTotals {
                stored_bytes_on_disk,
                materialized_bytes,
                stored_bytes,
            },
            footer_offset,
        })
    }
}

fn expect_field(
    field: &'static str,
    offset: u64,
    found: u64,
    expected: u64,
) -> Result<(), ShardError> {
    if found == expected {
        Ok(())
    } else {
        Err(ShardError::FooterField {
            field,
            offset,
            found,
            expected,
        })
    }
}

fn expect_count(table: Table, offset: u64, found: u64, records: usize) -> Result<(), ShardError> {
    let records = records as u64;
    if found == 0 || found == records {
        Ok(())
    } else {
        Err(ShardError::LookupCount {
            table,
            offset,
            found,
            records,
        })
    }
}

/// Checks a file or xorb lookup table of `n` entries at the cursor: sorted keys, each index the
/// header of a distinct block whose truncated hash is the key.
fn check_block_table(
    c: &mut Cursor<'_>,
    table: Table,
    n: u64,
    starts: &[u64],
    truncated: impl Fn(usize) -> u64,
) -> Result<(), ShardError> {
    let mut seen = vec![false; starts.len()];
    let mut prev = 0u64;
    for entry in 0..n {
        let offset = c.offset();
        let key = c.u64("lookup entry key")?;
        let index = c.u32("lookup entry record index")?;
        if key < prev {
            return Err(ShardError::LookupUnsorted {
                table,
                entry,
                offset,
                key,
                prev,
            });
        }
        prev = key;
        let Ok(pos) = starts.binary_search(&u64::from(index)) else {
            return Err(ShardError::LookupBadRecord {
                table,
                entry,
                offset,
                index,
            });
        };
        let actual = truncated(pos);
        if actual != key {
            return Err(ShardError::LookupKeyMismatch {
                table,
                entry,
                offset,
                key,
                actual,
            });
        }
        match seen.get_mut(pos) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(ShardError::LookupDuplicate {
                    table,
                    entry,
                    offset,
                })
            }
        }
    }
    Ok(())
}

/// Checks the chunk lookup table of `n` entries at the cursor.
fn check_chunk_table(
    c: &mut Cursor<'_>,
    n: u64,
    xorbs: &[XorbInfo],
    starts: &[u64],
) -> Result<(), ShardError> {
    let table = Table::Chunk;
    // Position of each xorb's first chunk in a flat numbering of all chunks.
    let mut base = Vec::with_capacity(xorbs.len());
    let mut total = 0usize;
    for x in xorbs {
        base.push(total);
        total += x.chunks.len();
    }
    let mut seen = vec![false; total];
    let mut prev = 0u64;
    for entry in 0..n {
        let offset = c.offset();
        let key = c.u64("chunk lookup entry key")?;
        let index = c.u32("chunk lookup entry xorb record index")?;
        let chunk = c.u32("chunk lookup entry chunk index")?;
        if key < prev {
            return Err(ShardError::LookupUnsorted {
                table,
                entry,
                offset,
                key,
                prev,
            });
        }
        prev = key;
        let found = starts
            .binary_search(&u64::from(index))
            .ok()
            .and_then(|xi| Some((xi, xorbs.get(xi)?, *base.get(xi)?)));
        let Some((_, xorb, first)) = found else {
            return Err(ShardError::LookupBadRecord {
                table,
                entry,
                offset,
                index,
            });
        };
        let Some(info) = xorb.chunks.get(chunk as usize) else {
            return Err(ShardError::LookupBadChunk {
                entry,
                offset,
                index,
                chunk,
                num_chunks: xorb.chunks.len(),
            });
        };
        let actual = info.hash.truncated();
        if actual != key {
            return Err(ShardError::LookupKeyMismatch {
                table,
                entry,
                offset,
                key,
                actual,
            });
        }
        match seen.get_mut(first + chunk as usize) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(ShardError::LookupDuplicate {
                    table,
                    entry,
                    offset,
                })
            }
        }
    }
    Ok(())
}

/// Reads and validates a shard in either form.
pub fn parse(bytes: &[u8]) -> Result<ParsedShard, ShardError> {
    let len = bytes.len() as u64;
    if len > MAX_SHARD_SIZE {
        return Err(ShardError::TooLarge {
            len,
            max: MAX_SHARD_SIZE,
        });
    }
    let mut c = Cursor::new(bytes);
    let tag: [u8; 32] = c.array("shard header tag")?;
    if tag != HEADER_TAG {
        return Err(ShardError::BadTag);
    }
    let version = c.u64("shard header version")?;
    if version != HEADER_VERSION {
        return Err(ShardError::HeaderVersion { found: version });
    }
    let footer_size = c.u64("shard header footer_size")?;
    if footer_size != 0 && footer_size != FOOTER_SIZE {
        return Err(ShardError::FooterSize {
            found: footer_size,
            expected: "0 or 200",
        });
    }

    let (files, file_starts) = read_files(&mut c)?;
    let xorb_info_offset = c.offset();
    let (xorbs, xorb_starts) = read_xorbs(&mut c)?;
    let body_end = c.offset();

    if c.is_empty() {
        return Ok(ParsedShard {
            shard: Shard {
                files,
                xorbs,
                meta: ShardMeta::SESSION,
            },
            footer_size,
            footer: None,
        });
    }

    // Complete form: lookup tables, then the footer in the last 200 bytes.
    let trailing = len - body_end;
    if trailing < FOOTER_SIZE {
        return Err(ShardError::TrailingBytes {
            offset: body_end,
            len: trailing,
        });
    }
    if footer_size != FOOTER_SIZE {
        return Err(ShardError::FooterSize {
            found: footer_size,
            expected: "200, as a footer follows the xorb section",
        });
    }
    let footer_start = len - FOOTER_SIZE;
    let mut fc = Cursor::new(bytes);
    fc.skip(footer_start, "lookup tables")?;
    let f = Footer::read(&mut fc)?;
    let at = |field: u64| footer_start + field;

    if f.version != FOOTER_VERSION {
        return Err(ShardError::FooterVersion {
            offset: footer_start,
            found: f.version,
        });
    }
    expect_field("footer_offset", at(192), f.footer_offset, footer_start)?;
    expect_field("file_info_offset", at(8), f.file_info_offset, HEADER_SIZE)?;
    expect_field(
        "xorb_info_offset",
        at(16),
        f.xorb_info_offset,
        xorb_info_offset,
    )?;
    expect_field("file_lookup_offset", at(24), f.file_lookup_offset, body_end)?;
    expect_count(Table::File, at(32), f.file_lookup_num_entry, files.len())?;
    // Counts are now at most the number of records, so none of this can overflow.
    let xorb_lookup_offset = body_end + f.file_lookup_num_entry * FILE_LOOKUP_ENTRY_SIZE;
    expect_field(
        "xorb_lookup_offset",
        at(40),
        f.xorb_lookup_offset,
        xorb_lookup_offset,
    )?;
    expect_count(Table::Xorb, at(48), f.xorb_lookup_num_entry, xorbs.len())?;
    let chunk_lookup_offset = xorb_lookup_offset + f.xorb_lookup_num_entry * XORB_LOOKUP_ENTRY_SIZE;
    expect_field(
        "chunk_lookup_offset",
        at(56),
        f.chunk_lookup_offset,
        chunk_lookup_offset,
    )?;
    let num_chunks: usize = xorbs.iter().map(|x| x.chunks.len()).sum();
    expect_count(Table::Chunk, at(64), f.chunk_lookup_num_entry, num_chunks)?;
    let tables_end = chunk_lookup_offset + f.chunk_lookup_num_entry * CHUNK_LOOKUP_ENTRY_SIZE;
    if tables_end != footer_start {
        return Err(ShardError::TrailingBytes {
            offset: body_end,
            len: trailing,
        });
    }

    // c is at body_end = file_lookup_offset; the three tables follow each other.
    check_block_table(
        &mut c,
        Table::File,
        f.file_lookup_num_entry,
        &file_starts,
        |i| files.get(i).map_or(0, |f| f.hash.truncated()),
    )?;
    check_block_table(
        &mut c,
        Table::Xorb,
        f.xorb_lookup_num_entry,
        &xorb_starts,
        |i| xorbs.get(i).map_or(0, |x| x.hash.truncated()),
    )?;
    check_chunk_table(&mut c, f.chunk_lookup_num_entry, &xorbs, &xorb_starts)?;
    debug_assert_eq!(c.offset(), footer_start);

    Ok(ParsedShard {
        shard: Shard {
            files,
            xorbs,
            meta: ShardMeta {
                hmac_key: f.hmac_key,
                creation_timestamp: f.creation_timestamp,
                key_expiry: f.key_expiry,
            },
        },
        footer_size,
        footer: Some(FooterInfo {
            lookup_tables: LookupTables {
                file: f.file_lookup_num_entry != 0,
                xorb: f.xorb_lookup_num_entry != 0,
                chunk: f.chunk_lookup_num_entry != 0,
            },
            totals: f.totals,
            footer_offset: footer_start,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::hash::ChunkHash;

    fn one_xorb(n: u32) -> Shard {
        let mut s = Shard::new();
        s.xorbs.push(XorbInfo {
            hash: XorbHash::from_bytes([1; 32]),
            chunks: (0..n)
                .map(|i| ChunkInfo {
                    hash: ChunkHash::from_bytes([i as u8 + 2; 32]),
                    chunk_byte_range_start: i,
                    unpacked_segment_bytes: 1,
                    flags: 0,
                })
                .collect(),
            ..XorbInfo::default()
        });
        s
    }

    #[test]
    fn empty_shard_both_forms() {
        let s = Shard::new();
        let complete = s.to_complete_bytes(LookupTables::ALL).unwrap();
        let p = parse(&complete).unwrap();
        assert_eq!(p.shard, s);
        assert_eq!(p.lookup_tables(), LookupTables::NONE);
        assert_eq!(p.to_bytes().unwrap(), complete);
        let upload = s.to_upload_bytes().unwrap();
        assert!(parse(&upload).unwrap().is_upload_form());
        assert!(matches!(
            parse(&upload[..143]),
            Err(ShardError::Truncated(_))
        ));
        assert_eq!(
            parse(&[]).unwrap_err().to_string(),
            "truncated shard header tag at offset 0: need 32 bytes, only 0 left"
        );
    }

    #[test]
    fn partial_lookup_tables_are_refused() {
        // Chunk table with 1 of 2 entries: count and space both wrong, the count is reported.
        let s = one_xorb(2);
        let mut b = s.to_complete_bytes(LookupTables::ALL).unwrap();
        let footer = b.len() - 200;
        b[footer + 64] = 1;
        assert!(matches!(
            parse(&b),
            Err(ShardError::LookupCount {
                table: Table::Chunk,
                found: 1,
                records: 2,
                ..
            })
        ));
        // Footer declares no chunk table but the 32 bytes are still there.
        b[footer + 64] = 0;
        assert!(matches!(parse(&b), Err(ShardError::TrailingBytes { .. })));
    }
}
