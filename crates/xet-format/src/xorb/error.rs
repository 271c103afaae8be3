//! [`XorbError`]: every way building or reading a xorb can fail.
//!
//! Errors about one chunk name its index and the offset of its header ("chunk 3 at offset 1234:
//! compressed_length 300000 exceeds 262144"); errors about the footer name the footer's offset.
//! Running out of input reports what was being read and where ([`Truncated`]).

use std::ops::Range;

use super::compress::DecompressError;
use super::header::HeaderError;
use crate::cursor::Truncated;
use crate::hash::{ChunkHash, XorbHash};

/// Why a xorb could not be built or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XorbError {
    /// The input ended inside a footer or another fixed structure.
    #[error(transparent)]
    Truncated(#[from] Truncated),

    /// Something is wrong with one chunk.
    #[error("chunk {index} at offset {offset}: {problem}")]
    Chunk {
        index: usize,
        offset: u64,
        problem: ChunkProblem,
    },

    /// Something is wrong with the footer (offset = where the footer starts).
    #[error("footer at offset {offset}: {problem}")]
    Footer { offset: u64, problem: FooterProblem },

    /// The recomputed xorb hash is not the one the caller expected (e.g. the name in the URL).
    #[error("xorb hash is {computed}, expected {expected}")]
    HashMismatch {
        expected: XorbHash,
        computed: XorbHash,
    },

    /// A xorb must hold at least one chunk: empty xorbs are never built nor accepted (§3.6).
    #[error("a xorb must hold at least one chunk")]
    Empty,

    /// A chunk handed to the builder is longer than a chunk may be.
    #[error("a chunk of {len} bytes exceeds the maximum chunk length {max}")]
    ChunkTooLong { len: usize, max: u32 },

    /// A chunk range asked of a xorb is empty, reversed or past its end.
    #[error("chunk range {}..{} is invalid for a xorb of {num_chunks} chunks", .range.start, .range.end)]
    BadChunkRange {
        range: Range<usize>,
        num_chunks: usize,
    },

    /// Footer fields that do not describe a writable V1 footer (vector lengths differ, offsets
    /// overflow `u32`, a V0 footer asked to be written).
    #[error("cannot write footer: {0}")]
    Unwritable(&'static str),
}

/// What is wrong with one chunk (the `problem` of [`XorbError::Chunk`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkProblem {
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error(transparent)]
    Truncated(Truncated),
    #[error(transparent)]
    Decompress(#[from] DecompressError),
    #[error("the xorb already holds {limit} chunks, the most allowed")]
    TooManyChunks { limit: usize },
    #[error("uncompressed data would reach {total} bytes, over the limit of {limit}")]
    TooMuchData { total: u64, limit: u64 },
    #[error("chunk region would reach {total} bytes, over the limit of {limit}")]
    BodyTooLong { total: u64, limit: u64 },
    #[error("hash is {computed} but the footer says {footer}")]
    HashMismatch {
        computed: ChunkHash,
        footer: ChunkHash,
    },
    #[error("ends at byte {actual} but the footer's boundary offset is {footer}")]
    BoundaryMismatch { actual: u64, footer: u32 },
    #[error("uncompressed data ends at {actual} but the footer's unpacked offset is {footer}")]
    UnpackedMismatch { actual: u64, footer: u32 },
}

/// What is wrong with a footer (the `problem` of [`XorbError::Footer`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FooterProblem {
    #[error("{section} ident is {found:02x?}, expected {expected:?}")]
    Ident {
        section: &'static str,
        found: [u8; 7],
        expected: &'static str,
    },
    #[error("{section} version {found} is not supported (expected {expected})")]
    Version {
        section: &'static str,
        found: u8,
        expected: &'static str,
    },
    #[error(
        "num_chunks copies differ: {first} in the {where_first}, {other} in the {where_other}"
    )]
    NumChunksDiffer {
        first: u32,
        where_first: &'static str,
        other: u32,
        where_other: &'static str,
    },
    #[error("num_chunks {num_chunks} needs {needed} more bytes but only {available} remain")]
    TooManyChunks {
        num_chunks: u32,
        needed: u64,
        available: u64,
    },
    #[error("{field} is {stored} but the section is {actual} bytes long")]
    SectionOffset {
        field: &'static str,
        stored: u32,
        actual: u64,
    },
    #[error("info_length is {stored} but the footer is {actual} bytes long")]
    InfoLength { stored: u32, actual: u64 },
    #[error("info_length {info_length} does not fit in an object of {object_len} bytes")]
    InfoLengthTooLarge { info_length: u32, object_len: u64 },
    #[error("{count} unexpected bytes after the footer")]
    TrailingBytes { count: usize },
    #[error("the footer lists {footer} chunks but the chunk region holds {actual}")]
    ChunkCount { footer: usize, actual: usize },
    #[error("chunk {index}: boundary offset {offset} does not follow the previous one {previous} by 8 to 262152 bytes")]
    BadBoundary {
        index: usize,
        offset: u32,
        previous: u32,
    },
    #[error("chunk {index}: unpacked offset {offset} does not follow the previous one {previous} by 0 to 131072 bytes")]
    BadUnpacked {
        index: usize,
        offset: u32,
        previous: u32,
    },
    #[error("the last boundary offset is {last} but the footer starts at {footer_start}")]
    RegionEnd { last: u64, footer_start: u64 },
    #[error("xorb hash is {footer} but the chunks hash to {computed}")]
    XorbHash {
        footer: XorbHash,
        computed: XorbHash,
    },
}
