//! [`ShardError`]: everything that can go wrong reading or writing a shard.
//!
//! Reader errors name the record (`file block 2`, `chunk lookup entry 7`, `footer field
//! xorb_info_offset`, …) and the absolute byte offset where the problem was found, so that a
//! server can hand the message to a client as it is. Writer errors name the file or xorb hash.

use std::fmt;

use crate::cursor::Truncated;
use crate::hash::{FileHash, XorbHash};

/// A block of one of the two info sections, by its position in the section (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    File(usize),
    Xorb(usize),
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::File(i) => write!(f, "file block {i}"),
            Record::Xorb(i) => write!(f, "xorb block {i}"),
        }
    }
}

/// One of the three lookup tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    File,
    Xorb,
    Chunk,
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Table::File => "file",
            Table::Xorb => "xorb",
            Table::Chunk => "chunk",
        })
    }
}

/// Why a shard could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// A fixed-size read ran past the end of the input.
    #[error(transparent)]
    Truncated(#[from] Truncated),

    #[error("shard of {len} bytes exceeds the {max}-byte limit (MDB_SHARD_TARGET_SIZE)")]
    TooLarge { len: u64, max: u64 },

    #[error("header at offset 0: not a shard, the 32-byte tag does not match")]
    BadTag,

    #[error("header at offset 32: version {found}, expected 2")]
    HeaderVersion { found: u64 },

    #[error("header at offset 40: footer_size {found}, expected {expected}")]
    FooterSize { found: u64, expected: &'static str },

    /// A block header claims more entries than the input can hold. Checked before allocating.
    #[error(
        "{record} at offset {offset}: {entries} entries exceed the {remaining} bytes remaining"
    )]
    EntriesExceedInput {
        record: Record,
        offset: u64,
        entries: u64,
        remaining: u64,
    },

    #[error(
        "{len} bytes at offset {offset}, after the xorb section, are neither the end of an \
         upload-form shard nor lookup tables followed by a {footer}-byte footer",
        footer = crate::shard::FOOTER_SIZE
    )]
    TrailingBytes { offset: u64, len: u64 },

    #[error("footer at offset {offset}: version {found}, expected 1")]
    FooterVersion { offset: u64, found: u64 },

    #[error("footer field {field} at offset {offset} is {found}, expected {expected}")]
    FooterField {
        field: &'static str,
        offset: u64,
        found: u64,
        expected: u64,
    },

    #[error(
        "footer field {table}_lookup_num_entry at offset {offset} is {found}: a lookup table \
         holds no entry or one per record ({records})"
    )]
    LookupCount {
        table: Table,
        offset: u64,
        found: u64,
        records: u64,
    },

    #[error(
        "{table} lookup entry {entry} at offset {offset}: key {key:#018x} sorts before the \
         previous key {prev:#018x}"
    )]
    LookupUnsorted {
        table: Table,
        entry: u64,
        offset: u64,
        key: u64,
        prev: u64,
    },

    #[error(
        "{table} lookup entry {entry} at offset {offset}: record index {index} is not the \
         header of a {kind} block",
        kind = if matches!(table, Table::File) { "file" } else { "xorb" }
    )]
    LookupBadRecord {
        table: Table,
        entry: u64,
        offset: u64,
        index: u32,
    },

    #[error(
        "chunk lookup entry {entry} at offset {offset}: chunk index {chunk} is past the \
         {num_chunks} chunks of the xorb block at record {index}"
    )]
    LookupBadChunk {
        entry: u64,
        offset: u64,
        index: u32,
        chunk: u32,
        num_chunks: usize,
    },

    #[error(
        "{table} lookup entry {entry} at offset {offset}: key {key:#018x} does not match the \
         truncated hash {actual:#018x} of the record it points at"
    )]
    LookupKeyMismatch {
        table: Table,
        entry: u64,
        offset: u64,
        key: u64,
        actual: u64,
    },

    #[error(
        "{table} lookup entry {entry} at offset {offset}: points at a record that an earlier \
         entry already points at"
    )]
    LookupDuplicate {
        table: Table,
        entry: u64,
        offset: u64,
    },

    // ---- writer and model errors ----
    #[error("writing this shard would take {len} bytes, over the {max}-byte limit (MDB_SHARD_TARGET_SIZE)")]
    OutputTooLarge { len: u64, max: u64 },

    #[error("file {file}: {count} terms exceed the u32 range of num_entries")]
    TooManyTerms { file: FileHash, count: usize },

    #[error("xorb {xorb}: {count} chunks exceed the u32 range of num_entries")]
    TooManyChunks { xorb: XorbHash, count: usize },

    #[error("file {file}: {verifications} verification entries for {terms} terms")]
    VerificationCount {
        file: FileHash,
        terms: usize,
        verifications: usize,
    },

    #[error(
        "file {file}: unknown_flags {flags:#010x} overlap WITH_VERIFICATION/WITH_METADATA_EXT, \
         which the writer derives from the verification entries and the SHA-256"
    )]
    KnownFlagInUnknownFlags { file: FileHash, flags: u32 },

    #[error("{what} hash is all ff, the bookend marker, and cannot be written")]
    BookendHash { what: &'static str },

    #[error("file {0} appears twice; xet-core keeps one block per file hash")]
    DuplicateFile(FileHash),

    #[error("xorb {0} appears twice; xet-core keeps one block per xorb hash")]
    DuplicateXorb(XorbHash),

    #[error(
        "the shard is keyed, but the upload form has no footer to carry the key; upload raw \
         chunk hashes"
    )]
    KeyedUpload,

    #[error("the shard is already keyed; key the raw chunk hashes only once")]
    AlreadyKeyed,

    #[error(
        "xorb {xorb}: chunk {chunk} ends at byte {end}, past the u32 range of the shard fields"
    )]
    XorbTooLong {
        xorb: XorbHash,
        chunk: usize,
        end: u64,
    },

    #[error(
        "file {index} ({file}) has no verification entries; every file of an uploaded shard must"
    )]
    MissingVerification { index: usize, file: FileHash },
}
