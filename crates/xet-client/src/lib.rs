//! The client side of the Xet protocol: everything an agent needs to talk to a CAS, built on the
//! pure formats of [`xet_format`].
//!
//! | module | owns |
//! |---|---|
//! | [`wire`] | the JSON bodies and error codes of the CAS API, shared by servers and clients |
//! | [`target`] | the traits every place objects live implements: [`CasTarget`] (uploads), [`XorbSource`] (downloads), [`Endpoint`] (both, plus reconstruction plans) |
//! | [`reconstruction`] | planning a file's (ranged) reconstruction from its terms and xorb footers (pure) |
//! | [`remote`] | [`RemoteCas`]: the HTTP client of a remote CAS server (ours or Hugging Face's), an [`Endpoint`] |
//! | [`shard_cache`] | [`ShardCache`]: the client's per-endpoint cache of shards (its uploads and dedup answers) |
//! | [`chunk_cache`] | [`ChunkCache`]: downloaded chunks kept for the next version of a file |
//! | [`object_chunks`] | [`ChunkLists`](object_chunks::ChunkLists): the chunk lists of a repository's objects, computed once and remembered |
//! | [`pipeline`] | hashing, uploads and downloads over any [`Endpoint`] |
//! | [`redact`] | text made safe to show: secrets masked (pure) |
//! | [`util`] | the clock, sizes, durations, URLs, error chains, `Range` headers, atomic writes, buffers, secrets, and the workspace's only unsafe code |
//!
//! The storage engine (`xet-store`) implements [`CasTarget`], [`XorbSource`] and [`Endpoint`]
//! for its store, so the same pipelines run against a server in the same process.

// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod chunk_cache;
pub mod object_chunks;
pub mod pipeline;
pub mod reconstruction;
pub mod redact;
pub mod remote;
pub mod shard_cache;
pub mod target;
pub mod util;
pub mod wire;

pub use chunk_cache::ChunkCache;
pub use reconstruction::{FetchRange, PlannedTerm, ReconstructionPlan};
pub use remote::{
    HttpOptions, LocalXorbs, RefreshingToken, RemoteCas, RemoteConfig, RetryPolicy, TokenSource,
};
pub use shard_cache::{CacheConfig, CacheError, CacheStats, PruneReport, ShardCache};
pub use target::{
    CasTarget, Endpoint, Origin, RangeSink, ReadOnce, Tallied, TargetError, XorbPut, XorbSource,
};

/// `n` random bytes as hex, for unique temporary names and secrets.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    // The OS random source failing is not recoverable; fall back to the clock so that names stay
    // unique enough (secrets use `random_bytes`, which reports the failure).
    if getrandom::fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from the operating system's random source, for keys and secrets.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out)?;
    Ok(out)
}
