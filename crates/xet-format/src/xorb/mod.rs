//! Xorbs (docs/format.md §3): chunk headers, compression, the xorb builder, footers and the
//! validating reader.
//!
//! A xorb is a content-addressed object holding up to 8192 compressed chunks. Its bytes are:
//!
//! ```text
//! [chunk 0: 8-byte header + payload] … [chunk N-1]   the chunk region = the upload body (§3.9)
//! [footer: XorbObjectInfoV1]                           stored xorbs only (§3.7)
//! [u32 info_length]                                    footer length, not counting these 4 bytes
//! ```
//!
//! | module | owns |
//! |---|---|
//! | [`header`] | the 8-byte chunk header and [`CompressionScheme`] (§3.2) |
//! | [`bg4`] | the BG4 byte-grouping transform and the BG4 predictor (§3.5) |
//! | [`compress`] | LZ4 frames, the None fallback, [`CompressionPolicy`] and Auto scheme selection, bomb-safe decompression (§3.3–§3.5) |
//! | [`lz4_frame`] | the LZ4 frame decoder: memory and work bounded by the chunk, not by what the frame declares |
//! | [`footer`] | the V1 footer (write and read), the legacy V0 footer (read only), the `url_range` rule (§3.7, §3.8, §3.10) |
//! | [`builder`] | [`XorbBuilder`]: packs chunks within the limits of §3.6 and yields the upload and stored forms |
//! | [`range`] | [`ChunkRange`]: a fetched range of whole chunks, indexed once, each chunk decoded on demand |
//! | [`split`] | [`ChunkSplitter`]: a fetched range split into chunks as its pieces arrive |
//! | [`reader`] | [`ParsedXorb`]: the validating reader of either form, chunk extraction, the server's footer rebuild |
//!
//! Everything here is pure: bytes in, bytes out. Untrusted bytes are read only through
//! [`Cursor`](super::cursor::Cursor); decompression never produces more than a chunk header
//! announces, nor allocates more than that whatever a payload declares. Errors are [`XorbError`],
//! whose messages name the chunk index and byte offset.

pub mod bg4;
pub mod builder;
pub mod compress;
mod error;
pub mod footer;
pub mod header;
pub mod lz4_frame;
pub mod range;
pub mod reader;
pub mod split;

pub use builder::{BuiltXorb, Push, XorbBuilder};
pub use compress::{
    choose_scheme, compress_chunk, decompress_chunk, decompress_chunk_into, plan_schemes,
    CompressedChunk, CompressionPolicy, DecompressError, PolicyParseError, SchemeSelector,
    AUTO_RETEST_INTERVAL,
};
pub use error::{ChunkProblem, FooterProblem, XorbError};
pub use footer::{FooterVersion, XorbFooter};
pub use header::{
    ChunkHeader, CompressionScheme, HeaderError, CHUNK_HEADER_LEN, MAX_CHUNK_LEN,
    MAX_COMPRESSED_LEN,
};
pub use lz4_frame::{FramePart, FrameProblem, Lz4FrameError};
pub use range::ChunkRange;
pub use reader::{stored_from_upload, ParsedXorb, ReadOptions, XorbForm};
pub use split::{ChunkSplitter, SplitChunk};

use super::hash::ChunkHash;

/// At most this many chunks in one xorb (`MAX_XORB_CHUNKS`, §3.6).
pub const MAX_XORB_CHUNKS: usize = 8192;
/// At most this many bytes of uncompressed chunk data in one xorb (`MAX_XORB_BYTES`, §3.6).
pub const MAX_XORB_BYTES: u64 = 64 * 1024 * 1024;
/// Project rule (§3.6): the serialised upload body our client sends is at most 64 MiB.
pub const MAX_UPLOAD_BODY: u64 = 64 * 1024 * 1024;
/// Project rule (§3.6): our server accepts upload bodies up to 64 MiB + 64 KiB, the worst case of a
/// reference-client xorb of 8192 incompressible chunks (8 header bytes each).
pub const MAX_ACCEPTED_BODY: u64 = MAX_UPLOAD_BODY + 64 * 1024;

/// Size limits of one xorb. The chunk region (upload body) is what `max_body_bytes` bounds; a
/// stored xorb adds its footer on top.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XorbLimits {
    pub max_chunks: usize,
    pub max_uncompressed_bytes: u64,
    pub max_body_bytes: u64,
}

impl XorbLimits {
    /// What our client builds: 8192 chunks, 64 MiB uncompressed, 64 MiB serialised body.
    pub const CLIENT: Self = Self {
        max_chunks: MAX_XORB_CHUNKS,
        max_uncompressed_bytes: MAX_XORB_BYTES,
        max_body_bytes: MAX_UPLOAD_BODY,
    };

    /// What our server accepts: 8192 chunks and 64 MiB uncompressed exactly, and a serialised body
    /// of up to 64 MiB + 64 KiB.
    pub const SERVER: Self = Self {
        max_chunks: MAX_XORB_CHUNKS,
        max_uncompressed_bytes: MAX_XORB_BYTES,
        max_body_bytes: MAX_ACCEPTED_BODY,
    };
}

impl Default for XorbLimits {
    fn default() -> Self {
        Self::CLIENT
    }
}

/// One chunk of a xorb, as the builder wrote it or the reader found it.
///
/// Offsets are absolute byte offsets in the chunk region (which starts at offset 0 of both the
/// upload body and the stored object); `end` is what the footer calls the chunk's boundary offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XorbChunk {
    /// `blake3_keyed(DATA_KEY, uncompressed bytes)`.
    pub hash: ChunkHash,
    /// The scheme in the chunk's header.
    pub scheme: CompressionScheme,
    /// Offset of the chunk's header.
    pub start: u64,
    /// Offset one past the chunk's payload.
    pub end: u64,
    /// Length of the chunk's uncompressed data.
    pub uncompressed_len: u32,
    /// Offset of the chunk's first byte in the concatenated uncompressed data of the xorb.
    pub unpacked_start: u64,
}

impl XorbChunk {
    /// The chunk's bytes in the chunk region, header included: `start..end`.
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        self.start..self.end
    }

    /// The payload length (`compressed_length` of the header).
    pub fn compressed_len(&self) -> u64 {
        self.end
            .saturating_sub(self.start)
            .saturating_sub(CHUNK_HEADER_LEN as u64)
    }

    /// Offset one past the chunk's last byte in the concatenated uncompressed data.
    pub fn unpacked_end(&self) -> u64 {
        self.unpacked_start + u64::from(self.uncompressed_len)
    }

    /// The chunk as the hash functions see it.
    pub fn chunk_ref(&self) -> super::hash::ChunkRef {
        super::hash::ChunkRef::new(self.hash, u64::from(self.uncompressed_len))
    }
}
