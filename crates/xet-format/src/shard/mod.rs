//! Shards: the binary metadata files ("MDB shards") that record file reconstructions and the xorbs
//! they use (docs/format.md §4), read and written byte-for-byte as xet-core does.
//!
//! This module owns the in-memory model of a shard ([`model`]), the writer ([`write`](mod@write)), the
//! validating reader for untrusted bytes ([`read`]) and the error type ([`error`]). Everything is
//! pure: bytes in, bytes out, no I/O, no clock (timestamps are fields of [`ShardMeta`]).
//!
//! # Layout
//!
//! All integers are little-endian; every record of the two info sections is 48 bytes.
//!
//! | offset | size | part |
//! |---|---|---|
//! | 0 | 48 | header: 32-byte tag, `version` u64 = 2, `footer_size` u64 (200, or 0 in the upload form) |
//! | 48 | 48·k | file info section: file blocks (header, terms, verification entries, metadata ext) |
//! | X − 48 | 48 | file bookend: 32 × `ff`, 16 × `00` |
//! | X | 48·m | xorb info section: xorb blocks (header, chunk entries) |
//! | L − 48 | 48 | xorb bookend |
//! | L | 12·f | file lookup: (u64 truncated file hash, u32 record index) |
//! | L + 12·f | 12·x | xorb lookup: (u64 truncated xorb hash, u32 record index) |
//! | L + 12·(f+x) | 16·c | chunk lookup: (u64 truncated chunk hash, u32 xorb record index, u32 chunk index) |
//! | F = len − 200 | 200 | footer (see [`read`] for its field table) |
//!
//! The **complete form** is all of it (what xet-core stores and names by [`ShardHash::of`]). The
//! **upload form** is bytes `[0, L)` with the header's `footer_size` set to 0; older clients left
//! it at 200, so the reader finds the end of the data by the bookends and never by `footer_size`.
//! Lookup tables may each be empty (xet-core's dedup shards and the reference local server's
//! stored shards have all three empty); see [`LookupTables`].
//!
//! # Order
//!
//! The writer puts file blocks in file-hash order and xorb blocks in xorb-hash order (the `Ord`
//! of the hash types, which is xet-core's), so the same model always gives the same bytes. The
//! reader accepts any order and keeps the order it read.
//!
//! [`ShardHash::of`]: crate::hash::ShardHash::of

pub mod error;
pub mod model;
pub mod read;
pub mod write;

pub use error::{Record, ShardError, Table};
pub use model::{
    ChunkInfo, ChunkLocation, FileInfo, Shard, ShardIndex, ShardMeta, ShardTotals, Term, XorbInfo,
};
pub use read::{FooterInfo, ParsedShard, ShardLayout};
pub use write::{shard_file_name, LookupTables};

/// The 32-byte tag every shard starts with: `HFRepoMetaData`, a zero byte, then 17 magic bytes.
pub const HEADER_TAG: [u8; 32] = [
    b'H', b'F', b'R', b'e', b'p', b'o', b'M', b'e', b't', b'a', b'D', b'a', b't', b'a', 0, 85, 105,
    103, 69, 106, 123, 129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169,
];
/// The header version xet-core writes (and our reader requires).
pub const HEADER_VERSION: u64 = 2;
/// The footer version xet-core writes and checks.
pub const FOOTER_VERSION: u64 = 1;
/// Size of the header.
pub const HEADER_SIZE: u64 = 48;
/// Size of every record of the file and xorb info sections, bookends included.
pub const RECORD_SIZE: u64 = 48;
/// Size of the footer; also the value of the header's `footer_size` in the complete form.
pub const FOOTER_SIZE: u64 = 200;
/// Size of one file lookup entry.
pub const FILE_LOOKUP_ENTRY_SIZE: u64 = 12;
/// Size of one xorb lookup entry.
pub const XORB_LOOKUP_ENTRY_SIZE: u64 = 12;
/// Size of one chunk lookup entry.
pub const CHUNK_LOOKUP_ENTRY_SIZE: u64 = 16;
/// Largest shard we read or write: `MDB_SHARD_TARGET_SIZE`, 64 MiB.
pub const MAX_SHARD_SIZE: u64 = 64 * 1024 * 1024;

/// File flag: the block carries one verification entry per term.
pub const FILE_FLAG_WITH_VERIFICATION: u32 = 1 << 31;
/// File flag: the block ends with a `FileMetadataExt` record (the SHA-256).
pub const FILE_FLAG_WITH_METADATA_EXT: u32 = 1 << 30;
/// The two file flags that change the block layout.
pub const FILE_FLAGS_KNOWN: u32 = FILE_FLAG_WITH_VERIFICATION | FILE_FLAG_WITH_METADATA_EXT;
/// Chunk flag: the chunk is eligible for global dedup queries (§4.4).
pub const CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE: u32 = 1 << 31;

/// The hash field of a bookend record.
pub(crate) const BOOKEND_HASH: [u8; 32] = [0xff; 32];
