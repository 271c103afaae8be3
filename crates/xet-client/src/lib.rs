//! The client side of the Xet protocol: everything an agent needs to talk to a CAS, built on the
//! pure formats of [`xet_format`] and the wire bodies and traits of [`xet_protocol`].
//!
//! | module | owns |
//! |---|---|
//! | [`remote`] | the HTTP client of a remote CAS server (ours or Hugging Face's): [`AsyncRemoteCas`], async, for async programs; [`RemoteCas`], the blocking [`Endpoint`](xet_protocol::Endpoint) over it that the pipelines' threads use |
//! | [`shard_cache`] | [`ShardCache`]: the client's per-endpoint cache of shards (its uploads and dedup answers) |
//! | [`chunk_cache`] | [`ChunkCache`]: downloaded chunks kept for the next version of a file |
//! | [`object_chunks`] | [`ChunkLists`](object_chunks::ChunkLists): the chunk lists of a repository's objects, computed once and remembered |
//! | [`pipeline`] | hashing, uploads and downloads over any [`Endpoint`](xet_protocol::Endpoint) |
//! | [`url`] | URL pieces shown to users and compared for credentials |
//! | `fake_server` | (tests, and the `test-util` feature) a scripted HTTP server on loopback |
//!
//! The storage engine (`xet-store`) implements [`CasTarget`](xet_protocol::CasTarget),
//! [`XorbSource`](xet_protocol::XorbSource) and [`Endpoint`](xet_protocol::Endpoint) for its
//! store, so the same pipelines run against a server in the same process.

// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod chunk_cache;
#[cfg(any(test, feature = "test-util"))]
pub mod fake_server;
pub mod object_chunks;
pub mod pipeline;
pub mod remote;
pub mod shard_cache;
pub mod url;

pub use chunk_cache::ChunkCache;
pub use remote::{
    AsyncRemoteCas, HttpOptions, LocalXorbs, RefreshingToken, RemoteCas, RemoteConfig, RetryPolicy,
    TokenSource,
};
pub use shard_cache::{CacheConfig, CacheError, CacheStats, PruneReport, ShardCache};
