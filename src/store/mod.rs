//! Where bytes live: object storage, the index, and the storage engine built on them.
//!
//! | module | owns |
//! |---|---|
//! | [`backend`] | the [`ObjectBackend`](backend::ObjectBackend) trait and the filesystem backend: atomic, create-if-absent objects |
//! | [`index`] | the redb index: files → terms, LFS oids → files, dedup chunks → xorbs |
//! | [`reconstruction`] | planning a file's (ranged) reconstruction from its terms and xorb footers (pure) |
//! | [`cas`] | [`Store`]: the storage engine, validating every upload, used by the server and by the agent's embedded mode |
//! | [`integrity`] | whether stored xorbs are intact ([`Store::check_xorb`]), quarantine of damaged ones, [`Store::scrub`] |
//! | [`local_server`] | the announcement (`local-server.json`) of the private server agents share for a directory store |
//! | [`s3`] | [`S3Backend`](s3::S3Backend): objects in an S3-compatible bucket that several server nodes share |
//! | [`sync`] | catching a node's index up with the shards other nodes on shared storage accepted |
//! | [`gc`] | [`Store::gc`]: removing xorbs no registered file uses, after a grace period |
//! | [`wire`] | the JSON bodies of the CAS API, shared by the server and the remote client |
//! | [`remote`] | [`RemoteCas`]: the blocking HTTP client of a remote CAS server (ours or Hugging Face's), an [`Endpoint`] |
//! | [`target`] | the traits every place objects live implements: [`CasTarget`] (uploads), [`XorbSource`] (downloads), [`Endpoint`] (both, plus reconstruction plans), implemented by [`Store`] and [`RemoteCas`] |
//! | [`shard_cache`] | [`ShardCache`]: the client's per-endpoint cache of shards (its uploads and dedup answers) in the user's cache directory |

pub mod backend;
pub mod cas;
pub mod chunk_cache;
pub mod gc;
pub mod index;
pub mod integrity;
pub mod local_server;
pub mod reconstruction;
pub mod remote;
pub mod s3;
pub mod shard_cache;
pub mod sync;
pub mod target;
pub mod wire;

pub use cas::{
    OidFile, ShardOutcome, ShardRejection, Store, StoreError, StoreOptions, ValidationProgress,
};
pub use chunk_cache::ChunkCache;
pub use gc::{GcOptions, GcReport};
pub use integrity::{ScrubProgress, ScrubReport, XorbHealth};
pub use reconstruction::{FetchRange, PlannedTerm, ReconstructionPlan};
pub use remote::{HttpOptions, RefreshingToken, RemoteCas, RemoteConfig, RetryPolicy, TokenSource};
pub use shard_cache::{CacheConfig, CacheError, CacheStats, PruneReport, ShardCache};
pub use target::{CasTarget, Endpoint, RangeSink, ReadOnce, TargetError, XorbSource};

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
