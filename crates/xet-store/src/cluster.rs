//! What a node knows of the other nodes sharing its storage ([`Cluster`]): its place in the
//! shard log and what the catch-ups of [`crate::sync`] found. State only; the catch-up itself
//! is `sync`'s.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::backend::LogCursor;
use crate::checkpoint_format::CheckpointId;
use crate::repo_name::RepoName;
use xet_format::ShardHash;

/// Where a node is among the other nodes of shared storage: its place in the shard log, what
/// it logged itself, when it last caught up.
#[derive(Debug, Default)]
pub(crate) struct Cluster {
    /// Where this node is in the shard log.
    pub(crate) state: std::sync::Mutex<SyncState>,
    /// (shard, repository) registrations this node logged itself since the last catch-up, so
    /// that the catch-up that lists them does not read the shard again for them (outside
    /// `state`: an upload never waits on a catch-up).
    pub(crate) logged_here: std::sync::Mutex<Vec<(ShardHash, RepoName)>>,
    /// When the last catch-up with the other nodes succeeded, unix milliseconds (0: never);
    /// outside `state`, so that reading it never waits on a catch-up.
    pub(crate) caught_up_ms: std::sync::atomic::AtomicU64,
    /// Since when catch-ups fail, unix milliseconds (0: the last one succeeded).
    pub(crate) catch_up_failing_ms: std::sync::atomic::AtomicU64,
    /// A full catch-up (every shard in storage listed and registered) has succeeded since the
    /// store opened: before that, what the index lacks may be in storage.
    pub(crate) listed_all: std::sync::atomic::AtomicBool,
}

/// Where a node is in the shard log.
#[derive(Debug, Default)]
pub(crate) struct SyncState {
    pub(crate) cursor: LogCursor,
    /// When the last catch-up started.
    pub(crate) last: Option<Instant>,
    /// Shards that could not be registered (a xorb they need is missing), with the time of
    /// the newest log entry of theirs seen then: tried again when a newer entry is logged (the
    /// client sent the xorb again and registered the shard again) or at the next full
    /// catch-up.
    pub(crate) refused: HashMap<ShardHash, u64>,
    /// (shard, repository) registrations already recorded in the index.
    pub(crate) access: HashSet<(ShardHash, RepoName)>,
    /// The checkpoint read last ([`crate::checkpoint`]).
    pub(crate) checkpoint: Option<CheckpointId>,
    /// Log entries whose shard was not in the bucket yet when they were listed (the node that
    /// logged it stores the shard and writes the entry at once), with when that was first
    /// seen: tried again at each catch-up for a while (`crate::sync`), then taken as gone.
    pub(crate) pending: HashMap<(ShardHash, Option<RepoName>), (u64, Instant)>,
    /// A log entry named a shard that is gone from the bucket (a checkpoint covered it and
    /// it was deleted): the next catch-up reads the newest checkpoint.
    pub(crate) gone: bool,
    /// Catch-ups may have missed log entries a checkpoint covered and a compaction deleted
    /// (none succeeded for a while): the next full one reads the newest checkpoint.
    pub(crate) out_of_step: bool,
}

impl SyncState {
    /// Shards that could not be registered.
    pub(crate) fn refused_shards(&self) -> HashSet<ShardHash> {
        self.refused.keys().copied().collect()
    }
}
