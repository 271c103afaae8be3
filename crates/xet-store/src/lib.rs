//! The Xet storage engine: where a server's bytes live, built on [`xet_format`] and speaking the
//! client's traits ([`xet_protocol::CasTarget`], [`xet_protocol::XorbSource`],
//! [`xet_protocol::Endpoint`]), so that the agent's embedded mode and the server run the same code.
//!
//! | module | owns |
//! |---|---|
//! | [`backend`] | the [`ObjectBackend`](backend::ObjectBackend) trait and the filesystem backend: atomic, create-if-absent objects; the [`SharedBucket`](backend::SharedBucket) trait of storage several nodes share (their shard log, leases, sweep and node records) |
//! | [`index`] | the redb index: files → terms, LFS oids → files, dedup chunks → xorbs |
//! | [`cas`] | [`Store`]: the storage engine, validating every upload |
//! | [`checkpoint_format`] | the bytes of a checkpoint: pure encoding and decoding, no I/O |
//! | `collector` | what garbage collection in one process knows: its name, what it deletes, when it ran, the sweep records it read |
//! | `cluster` | what a node knows of the other nodes on shared storage: its place in the shard log, what catch-ups found |
//! | `claims` | the ledger of SHA-256 claims: which wait to be checked, the backlog limits, checks shared with the other nodes |
//! | [`checkpoint`] | checkpoints of the shard log on shared storage: bounded metadata, a new node's start in one read ([`Store::compact`]) |
//! | [`endpoint`] | [`Store`] as an upload target, a xorb source and an endpoint of the client's pipelines |
//! | [`footers`] | footers of xorbs known intact, kept in memory; how much of a xorb a first look reads; the check of a stored object's bytes |
//! | [`integrity`] | whether stored xorbs are intact ([`Store::check_xorb`]), quarantine of damaged ones, [`Store::scrub`] |
//! | [`announce`] | the announcement (`local-server.json`) of the private server agents share for a directory store |
//! | `parallel` | work on a few threads at once, for many small requests to object storage |
//! | [`reopen`] | a redb database opened again after an I/O error (a full disk) |
//! | `s3` | `S3Backend`: objects in an S3-compatible bucket that several server nodes share (feature `s3`) |
//! | [`storage_url`] | where a store in a bucket lives: its `s3://` URL and `AWS_*` settings (every build) |
//! | [`sync`] | catching a node's index up with the shards other nodes on shared storage accepted |
//! | [`repo_name`] | [`RepoName`], a repository's name as the store keeps it |
//! | [`tenancy`] | which repository may see what: the files a repository-scoped credential may read |
//! | [`gc`] | [`Store::gc`]: removing xorbs no registered file uses, after a grace period; on shared storage, by the holder of the lease ([`Store::take_gc_lease`]) |
//! | [`stats`] | what the store tells its operator: usage by repository, totals over time, recent pushes, garbage collections, nodes' status records |
//! | `copies` | the copies of xorbs a node keeps beside object storage (in memory, on its disk), and the reads of xorbs' bytes through them |
//! | [`memory`] | `MemoryBackend`: objects in memory, with faults on demand, for tests of the engine |
//! | [`small_xorbs`] | small xorbs kept whole in memory on object storage (packs of small files) |
//! | [`timings`] | how long object storage's requests take, by kind, for `/metrics` |
//! | [`xorb_cache`] | a node's copies of xorbs on its own disk, on object storage |

// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod announce;
pub mod backend;
pub mod cas;
pub mod checkpoint;
pub mod checkpoint_format;
mod claims;
mod cluster;
mod collector;
mod copies;
pub mod endpoint;
pub mod error;
pub mod footers;
pub mod gc;
pub mod index;
pub mod integrity;
pub mod memory;
mod parallel;
pub mod reopen;
pub mod repo_name;
#[cfg(feature = "s3")]
pub mod s3;
pub mod small_xorbs;
pub mod stats;
pub mod storage_url;
pub mod sync;
pub mod tenancy;
pub mod timings;
pub mod xorb_cache;

pub use cas::{
    BackgroundErrors, OidFile, ShardOutcome, ShardRejection, Store, StoreError, StoreOptions,
    ValidationProgress,
};
pub use footers::XorbHealth;
pub use gc::{GcOptions, GcReport, SWEEP_NOTICE, SWEEP_VIEW_FRESH};
pub use integrity::{ScrubProgress, ScrubReport};
pub use repo_name::RepoName;
