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
use crate::cursor::Cursor;
use crate::hash::{ChunkHash, FileHash, HmacKey, LfsOid, VerificationHash, XorbHash};

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
        self.footer.is_none_or(|f| f.totals == self.shard.totals())
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

    /// Checks what a complete shard's footer at `footer_start` says whatever else the shard
    /// holds: version 1, `footer_offset` = `footer_start`, `file_info_offset` = 48.
    fn check_fixed_fields(&self, footer_start: u64) -> Result<(), ShardError> {
        if self.version != FOOTER_VERSION {
            return Err(ShardError::FooterVersion {
                offset: footer_start,
                found: self.version,
            });
        }
        let at = |field: u64| footer_start + field;
        expect_field("footer_offset", at(192), self.footer_offset, footer_start)?;
        expect_field(
            "file_info_offset",
            at(8),
            self.file_info_offset,
            HEADER_SIZE,
        )
    }

    /// The key, creation timestamp and expiry.
    fn meta(&self) -> ShardMeta {
        ShardMeta {
            hmac_key: self.hmac_key,
            creation_timestamp: self.creation_timestamp,
            key_expiry: self.key_expiry,
        }
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

/// Checks the total length of a shard of `len` bytes and its header's tag and version (§4.1);
/// returns the header's `footer_size`, which the caller checks against the form it expects.
fn read_header(c: &mut Cursor<'_>, len: u64) -> Result<u64, ShardError> {
    if len > MAX_SHARD_SIZE {
        return Err(ShardError::TooLarge {
            len,
            max: MAX_SHARD_SIZE,
        });
    }
    let tag: [u8; 32] = c.array("shard header tag")?;
    if tag != HEADER_TAG {
        return Err(ShardError::BadTag);
    }
    let version = c.u64("shard header version")?;
    if version != HEADER_VERSION {
        return Err(ShardError::HeaderVersion { found: version });
    }
    Ok(c.u64("shard header footer_size")?)
}

/// The file and xorb sections of a shard, as read.
struct Body {
    files: Vec<FileInfo>,
    /// The record index (counted from offset 48) of each file header.
    file_starts: Vec<u64>,
    /// Where the xorb section starts.
    xorb_info_offset: u64,
    xorbs: Vec<XorbInfo>,
    /// The record index (counted from `xorb_info_offset`) of each xorb header.
    xorb_starts: Vec<u64>,
    /// Where the xorb section ends, just after its bookend.
    end: u64,
}

/// Reads the file and xorb sections at the cursor, each up to and including its bookend.
fn read_body(c: &mut Cursor<'_>) -> Result<Body, ShardError> {
    let (files, file_starts) = read_files(c)?;
    let xorb_info_offset = c.offset();
    let (xorbs, xorb_starts) = read_xorbs(c)?;
    Ok(Body {
        files,
        file_starts,
        xorb_info_offset,
        xorbs,
        xorb_starts,
        end: c.offset(),
    })
}

/// Reads and validates a shard in either form.
pub fn parse(bytes: &[u8]) -> Result<ParsedShard, ShardError> {
    let len = bytes.len() as u64;
    let mut c = Cursor::new(bytes);
    let footer_size = read_header(&mut c, len)?;
    if footer_size != 0 && footer_size != FOOTER_SIZE {
        return Err(ShardError::FooterSize {
            found: footer_size,
            expected: "0 or 200",
        });
    }
    let body = read_body(&mut c)?;
    if c.is_empty() {
        return Ok(ParsedShard {
            shard: Shard {
                files: body.files,
                xorbs: body.xorbs,
                meta: ShardMeta::SESSION,
            },
            footer_size,
            footer: None,
        });
    }

    // Complete form: lookup tables, then the footer in the last 200 bytes.
    let (f, footer_start) = read_last_footer(bytes, body.end, footer_size)?;
    f.check_fixed_fields(footer_start)?;
    check_footer_against_body(&f, &body, footer_start)?;
    // c is at body.end = file_lookup_offset; the three tables follow each other.
    check_lookup_tables(&mut c, &f, &body)?;
    debug_assert_eq!(c.offset(), footer_start);

    Ok(ParsedShard {
        shard: Shard {
            files: body.files,
            xorbs: body.xorbs,
            meta: f.meta(),
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

/// Reads the footer from the last 200 bytes of a complete-form shard whose xorb section ends at
/// `body_end`, after checking that those bytes follow the xorb section and that the header's
/// `footer_size` announced them. Returns the footer and where it starts.
fn read_last_footer(
    bytes: &[u8],
    body_end: u64,
    footer_size: u64,
) -> Result<(Footer, u64), ShardError> {
    let len = bytes.len() as u64;
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
    Ok((f, footer_start))
}

/// Checks the footer's section offsets and lookup table offsets and counts against the sections
/// actually read: each table count 0 or one entry per record, and the tables, starting where
/// the xorb section ends, exactly filling the space up to the footer at `footer_start`.
fn check_footer_against_body(f: &Footer, body: &Body, footer_start: u64) -> Result<(), ShardError> {
    let at = |field: u64| footer_start + field;
    let body_end = body.end;
    expect_field(
        "xorb_info_offset",
        at(16),
        f.xorb_info_offset,
        body.xorb_info_offset,
    )?;
    expect_field("file_lookup_offset", at(24), f.file_lookup_offset, body_end)?;
    expect_count(
        Table::File,
        at(32),
        f.file_lookup_num_entry,
        body.files.len(),
    )?;
    // Counts are now at most the number of records, so none of this can overflow.
    let xorb_lookup_offset = body_end + f.file_lookup_num_entry * FILE_LOOKUP_ENTRY_SIZE;
    expect_field(
        "xorb_lookup_offset",
        at(40),
        f.xorb_lookup_offset,
        xorb_lookup_offset,
    )?;
    expect_count(
        Table::Xorb,
        at(48),
        f.xorb_lookup_num_entry,
        body.xorbs.len(),
    )?;
    let chunk_lookup_offset = xorb_lookup_offset + f.xorb_lookup_num_entry * XORB_LOOKUP_ENTRY_SIZE;
    expect_field(
        "chunk_lookup_offset",
        at(56),
        f.chunk_lookup_offset,
        chunk_lookup_offset,
    )?;
    let num_chunks: usize = body.xorbs.iter().map(|x| x.chunks.len()).sum();
    expect_count(Table::Chunk, at(64), f.chunk_lookup_num_entry, num_chunks)?;
    let tables_end = chunk_lookup_offset + f.chunk_lookup_num_entry * CHUNK_LOOKUP_ENTRY_SIZE;
    if tables_end != footer_start {
        // The footer is the last 200 bytes, so this is the input's length minus body_end.
        let trailing = footer_start + FOOTER_SIZE - body_end;
        return Err(ShardError::TrailingBytes {
            offset: body_end,
            len: trailing,
        });
    }
    Ok(())
}

/// Checks the three lookup tables, which follow each other from the cursor, against the
/// sections read; their entry counts come from a footer already checked against them.
fn check_lookup_tables(c: &mut Cursor<'_>, f: &Footer, body: &Body) -> Result<(), ShardError> {
    check_block_table(
        c,
        Table::File,
        f.file_lookup_num_entry,
        &body.file_starts,
        |i| body.files.get(i).map_or(0, |f| f.hash.truncated()),
    )?;
    check_block_table(
        c,
        Table::Xorb,
        f.xorb_lookup_num_entry,
        &body.xorb_starts,
        |i| body.xorbs.get(i).map_or(0, |x| x.hash.truncated()),
    )?;
    check_chunk_table(c, f.chunk_lookup_num_entry, &body.xorbs, &body.xorb_starts)
}

/// What the header and footer of a complete-form shard say about its layout, read without the
/// rest of the shard: for indexes that want only a lookup table (the local shard cache reads the
/// chunk lookup table of every cached shard this way).
///
/// [`ShardLayout::read`] checks only what the header and footer can show on their own; the
/// sections and tables themselves are checked when the whole shard is read with [`parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardLayout {
    /// Length of the whole shard.
    pub len: u64,
    pub xorb_info_offset: u64,
    pub file_lookup_offset: u64,
    pub file_lookup_num_entry: u64,
    pub xorb_lookup_offset: u64,
    pub xorb_lookup_num_entry: u64,
    pub chunk_lookup_offset: u64,
    pub chunk_lookup_num_entry: u64,
    /// Key, creation timestamp and expiry.
    pub meta: ShardMeta,
    pub totals: ShardTotals,
    /// Where the footer starts (= `len` − 200).
    pub footer_offset: u64,
}

impl ShardLayout {
    /// Reads the layout of a complete shard of `len` bytes from its first 48 bytes (`header`)
    /// and its last 200 bytes (`footer`). Checks the tag, both versions, `footer_size` 200,
    /// `footer_offset` = `len` − 200, `file_info_offset` = 48, that the xorb section starts
    /// after the header and a bookend, and that the three lookup tables follow each other from
    /// `file_lookup_offset` up to the footer.
    pub fn read(header: &[u8], footer: &[u8], len: u64) -> Result<Self, ShardError> {
        read_complete_header(header, len)?;
        let footer_start = len - FOOTER_SIZE;
        let mut fc = Cursor::with_base(footer, footer_start);
        let f = Footer::read(&mut fc)?;
        f.check_fixed_fields(footer_start)?;
        check_layout_sections(&f, footer_start)?;
        check_layout_tables(&f, footer_start)?;
        Ok(Self {
            len,
            xorb_info_offset: f.xorb_info_offset,
            file_lookup_offset: f.file_lookup_offset,
            file_lookup_num_entry: f.file_lookup_num_entry,
            xorb_lookup_offset: f.xorb_lookup_offset,
            xorb_lookup_num_entry: f.xorb_lookup_num_entry,
            chunk_lookup_offset: f.chunk_lookup_offset,
            chunk_lookup_num_entry: f.chunk_lookup_num_entry,
            meta: f.meta(),
            totals: f.totals,
            footer_offset: footer_start,
        })
    }

    /// True when the xorb section holds at least one block (it is more than its bookend).
    pub fn has_xorbs(&self) -> bool {
        self.file_lookup_offset - self.xorb_info_offset > RECORD_SIZE
    }

    /// The byte range of the chunk lookup table.
    pub fn chunk_lookup_range(&self) -> std::ops::Range<u64> {
        self.chunk_lookup_offset
            ..self.chunk_lookup_offset + self.chunk_lookup_num_entry * CHUNK_LOOKUP_ENTRY_SIZE
    }

    /// The keys (truncated chunk hashes, keyed in a keyed shard) of a chunk lookup table read
    /// from [`ShardLayout::chunk_lookup_range`], in table order. Fails if the table is not a
    /// whole number of entries or its keys are not sorted.
    pub fn chunk_lookup_keys(&self, table: &[u8]) -> Result<Vec<u64>, ShardError> {
        let mut c = Cursor::with_base(table, self.chunk_lookup_offset);
        let n = self.chunk_lookup_num_entry;
        if table.len() as u64 != n * CHUNK_LOOKUP_ENTRY_SIZE {
            return Err(ShardError::Truncated(crate::cursor::Truncated {
                what: "chunk lookup table",
                offset: self.chunk_lookup_offset,
                needed: n * CHUNK_LOOKUP_ENTRY_SIZE,
                available: table.len() as u64,
            }));
        }
        let mut keys = Vec::with_capacity(n as usize);
        let mut prev = 0u64;
        for entry in 0..n {
            let offset = c.offset();
            let key = c.u64("chunk lookup entry key")?;
            c.skip(8, "chunk lookup entry indices")?;
            if key < prev {
                return Err(ShardError::LookupUnsorted {
                    table: Table::Chunk,
                    entry,
                    offset,
                    key,
                    prev,
                });
            }
            prev = key;
            keys.push(key);
        }
        Ok(keys)
    }
}

/// Reads the first 48 bytes (`header`) of a shard of `len` bytes that must be in the complete
/// form: tag and version as [`read_header`] checks them, `footer_size` 200, and `len` enough for
/// a header, two bookends and a footer.
fn read_complete_header(header: &[u8], len: u64) -> Result<(), ShardError> {
    let mut c = Cursor::new(header);
    let footer_size = read_header(&mut c, len)?;
    if footer_size != FOOTER_SIZE {
        return Err(ShardError::FooterSize {
            found: footer_size,
            expected: "200 in a complete shard",
        });
    }
    // Header, file bookend, xorb bookend, footer.
    let min = HEADER_SIZE + 2 * RECORD_SIZE + FOOTER_SIZE;
    if len < min {
        return Err(ShardError::Truncated(crate::cursor::Truncated {
            what: "complete shard",
            offset: 0,
            needed: min,
            available: len,
        }));
    }
    Ok(())
}

/// Checks, from the footer at `footer_start` alone, that the xorb section starts a whole number
/// of records after the header and a file bookend, and the lookup tables a whole number of
/// records after the xorb section and its bookend. The caller has checked that the shard holds
/// a header, two bookends and a footer.
fn check_layout_sections(f: &Footer, footer_start: u64) -> Result<(), ShardError> {
    let at = |field: u64| footer_start + field;
    let in_range = |v: u64, lo: u64, hi: u64| lo <= v && v <= hi;
    // The file section holds at least its bookend, the xorb section too.
    if !in_range(
        f.xorb_info_offset,
        HEADER_SIZE + RECORD_SIZE,
        footer_start - RECORD_SIZE,
    ) || !(f.xorb_info_offset - HEADER_SIZE).is_multiple_of(RECORD_SIZE)
    {
        return Err(ShardError::FooterField {
            field: "xorb_info_offset",
            offset: at(16),
            found: f.xorb_info_offset,
            expected: HEADER_SIZE + RECORD_SIZE,
        });
    }
    if !in_range(
        f.file_lookup_offset,
        f.xorb_info_offset + RECORD_SIZE,
        footer_start,
    ) || !(f.file_lookup_offset - f.xorb_info_offset).is_multiple_of(RECORD_SIZE)
    {
        return Err(ShardError::FooterField {
            field: "file_lookup_offset",
            offset: at(24),
            found: f.file_lookup_offset,
            expected: f.xorb_info_offset + RECORD_SIZE,
        });
    }
    Ok(())
}

/// Checks, from the footer at `footer_start` alone, that the three lookup tables follow each
/// other from `file_lookup_offset` and end exactly where the footer starts. The caller has
/// checked that `file_lookup_offset` is at most `footer_start`.
fn check_layout_tables(f: &Footer, footer_start: u64) -> Result<(), ShardError> {
    let at = |field: u64| footer_start + field;
    expect_field(
        "xorb_lookup_offset",
        at(40),
        f.xorb_lookup_offset,
        lookup_table_end(
            "file_lookup_num_entry",
            at(32),
            f.file_lookup_num_entry,
            FILE_LOOKUP_ENTRY_SIZE,
            f.file_lookup_offset,
            footer_start,
        )?,
    )?;
    expect_field(
        "chunk_lookup_offset",
        at(56),
        f.chunk_lookup_offset,
        lookup_table_end(
            "xorb_lookup_num_entry",
            at(48),
            f.xorb_lookup_num_entry,
            XORB_LOOKUP_ENTRY_SIZE,
            f.xorb_lookup_offset,
            footer_start,
        )?,
    )?;
    let tables_end = lookup_table_end(
        "chunk_lookup_num_entry",
        at(64),
        f.chunk_lookup_num_entry,
        CHUNK_LOOKUP_ENTRY_SIZE,
        f.chunk_lookup_offset,
        footer_start,
    )?;
    if tables_end != footer_start {
        return Err(ShardError::TrailingBytes {
            offset: tables_end,
            len: footer_start.saturating_sub(tables_end),
        });
    }
    Ok(())
}

/// Where a lookup table of `n` entries of `size` bytes starting at `start` ends, after checking
/// that it fits before the footer at `footer_start`; `field` and `offset` name the footer's
/// entry count in the error. Each table starts where the previous one ends (checked in turn by
/// [`check_layout_tables`], so `start` is between `file_lookup_offset` and the footer); with the
/// count checked first, `n * size` cannot overflow.
fn lookup_table_end(
    field: &'static str,
    offset: u64,
    n: u64,
    size: u64,
    start: u64,
    footer_start: u64,
) -> Result<u64, ShardError> {
    let fits = footer_start.saturating_sub(start) / size;
    if n > fits {
        return Err(ShardError::FooterField {
            field,
            offset,
            found: n,
            expected: fits,
        });
    }
    Ok(start + n * size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::ChunkHash;

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

    fn layout_of(b: &[u8]) -> Result<ShardLayout, ShardError> {
        ShardLayout::read(
            &b[..48.min(b.len())],
            &b[b.len().saturating_sub(200)..],
            b.len() as u64,
        )
    }

    #[test]
    fn layout_from_header_and_footer() {
        let mut s = one_xorb(3);
        s.meta = ShardMeta {
            hmac_key: HmacKey::from_bytes([5; 32]),
            creation_timestamp: 7,
            key_expiry: 9,
        };
        let b = s.to_complete_bytes(LookupTables::ALL).unwrap();
        let l = layout_of(&b).unwrap();
        assert_eq!(l.meta, s.meta);
        assert_eq!(l.footer_offset, b.len() as u64 - 200);
        assert_eq!(l.chunk_lookup_num_entry, 3);
        assert!(l.has_xorbs());
        let r = l.chunk_lookup_range();
        let keys = l
            .chunk_lookup_keys(&b[r.start as usize..r.end as usize])
            .unwrap();
        let mut want: Vec<u64> = s.xorbs[0]
            .chunks
            .iter()
            .map(|c| c.hash.truncated())
            .collect();
        want.sort();
        assert_eq!(keys, want);
        assert!(l
            .chunk_lookup_keys(&b[r.start as usize..r.end as usize - 1])
            .is_err());

        // No tables at all, and an empty shard.
        let b = s.to_complete_bytes(LookupTables::NONE).unwrap();
        assert_eq!(layout_of(&b).unwrap().chunk_lookup_num_entry, 0);
        let b = Shard::new().to_complete_bytes(LookupTables::ALL).unwrap();
        assert!(!layout_of(&b).unwrap().has_xorbs());
    }

    #[test]
    fn layout_refuses_damaged_shards() {
        let b = one_xorb(3).to_complete_bytes(LookupTables::ALL).unwrap();
        // Truncated: the footer no longer sits where it says.
        assert!(layout_of(&b[..b.len() - 10]).is_err());
        assert!(layout_of(&b[..100]).is_err());
        // Upload form: no footer.
        let u = one_xorb(3).to_upload_bytes().unwrap();
        assert!(matches!(layout_of(&u), Err(ShardError::FooterSize { .. })));
        // A chunk count larger than the space before the footer.
        let mut d = b.clone();
        let footer = d.len() - 200;
        d[footer + 64] = 200;
        assert!(layout_of(&d).is_err());
        // A bad tag.
        let mut d = b.clone();
        d[0] ^= 1;
        assert_eq!(layout_of(&d), Err(ShardError::BadTag));
        // Unsorted keys.
        let l = layout_of(&b).unwrap();
        let r = l.chunk_lookup_range();
        let mut t = b[r.start as usize..r.end as usize].to_vec();
        t[..8].copy_from_slice(&[0xff; 8]);
        assert!(matches!(
            l.chunk_lookup_keys(&t),
            Err(ShardError::LookupUnsorted { .. })
        ));
    }
}
