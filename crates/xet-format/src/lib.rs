//! The Xet formats: pure functions from bytes to bytes.
//!
//! Nothing in this layer does I/O, reads a clock or draws random numbers: timestamps and nonces
//! are parameters. That keeps every function deterministic, testable against fixed vectors and
//! safe to fuzz. Everything that parses input reads it through [`cursor::Cursor`], which checks
//! each length and offset before it slices.
//!
//! | module | owns |
//! |---|---|
//! | [`hash`] | typed hashes, their string form, and every hash function (docs/format.md §1) |
//! | [`chunking`] | gearhash content-defined chunking, streaming and parallel (docs/format.md §2) |
//! | [`dedup`] | which chunks of a file are dedup probes (docs/format.md §5.5) |
//! | [`xorb`] | chunk headers, compression, the xorb builder, footers and the validating reader (docs/format.md §3) |
//! | [`shard`] | the shard reader and writer (docs/format.md §4) |
//! | [`pointer`](mod@pointer) | Git LFS pointer files |
//! | [`cursor`] | the bounds-checked byte reader the parsers share |

// No unsafe code in the parsers of untrusted bytes, and nothing inside may allow it.
#![forbid(unsafe_code)]
// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod chunking;
pub mod cursor;
pub mod dedup;
pub mod hash;
pub mod pointer;
pub mod shard;
pub mod xorb;

#[cfg(any(test, feature = "test-util"))]
pub mod test_util;

pub use hash::{
    ChunkHash, ChunkRef, FileHash, HashParseError, HmacKey, LfsOid, ShardHash, VerificationHash,
    XorbHash,
};
