//! Integration tests of the Xet formats: chunking, hashes, pointers, xorbs and shards, against known-answer vectors and the reference client's own files.
//!
//! One test binary for the format crate; each file below is one module of it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

mod fixtures;

mod chunking;
mod hash_vectors;
mod pointer;
mod reference_fixtures;
mod shard;
mod xorb;
