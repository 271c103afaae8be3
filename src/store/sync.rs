//! Keeping a node's index in step with the other nodes on shared object storage
//! ([`ObjectBackend::is_shared`](super::backend::ObjectBackend::is_shared)).
//!
//! The bucket is the truth and each node's `index.redb` is a cache of it: everything the
//! index holds follows from the shards in the bucket (a shard names its files, their terms and
//! LFS oids; the xorbs it names give the dedup entries). A node that accepts a shard stores it
//! and writes an entry in the bucket's shard log; every node lists the log's recent entries
//! ([`Store::catch_up`], about once a second from the server, and at once when a lookup
//! misses) and registers the shards it does not know, checked like an upload against the xorbs
//! in the bucket. A node started with an empty disk lists every shard once
//! ([`Store::catch_up_all`]), as it also does every few minutes to find any log entry that was
//! more than [`LOG_WINDOW_MS`](super::s3::LOG_WINDOW_MS) late.
//!
//! What this trusts: objects in the bucket were validated by the node that stored them, so a
//! node adopting a xorb another node stored checks its footer against its name (a ranged read)
//! but not every chunk; `git xet scrub` verifies them whole.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::backend::{LogCursor, ObjectKey};
use super::cas::{now_unix, Store, StoreError};
use crate::format::shard::ParsedShard;
use crate::format::ShardHash;

/// A lookup that misses catches up first, unless a catch-up finished this recently.
const MISS_RECHECK: Duration = Duration::from_millis(250);

/// Where a node is in the shard log.
#[derive(Debug, Default)]
pub struct SyncState {
    cursor: LogCursor,
    /// When the last catch-up finished.
    last: Option<Instant>,
    /// Shards that could not be registered (a xorb they need is missing), with why: not tried
    /// again until the next full catch-up.
    refused: HashSet<ShardHash>,
}

/// What a catch-up did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// Shards registered from storage.
    pub registered: usize,
    /// Shards that could not be (logged, not tried again until the next full catch-up).
    pub refused: usize,
}

impl Store {
    /// Whether other nodes write to this store's storage (see the module documentation).
    pub fn is_shared(&self) -> bool {
        self.backend.is_shared()
    }

    /// Registers the shards other nodes logged since the last call. Does nothing for a store
    /// no other process writes to.
    pub fn catch_up(&self) -> Result<CatchUp, StoreError> {
        if !self.is_shared() {
            return Ok(CatchUp::default());
        }
        let mut state = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        let mut cursor = state.cursor;
        let logged = self.backend.logged_shards(&mut cursor)?;
        let outcome = self.register_from_storage(&mut state, logged)?;
        state.cursor = cursor;
        state.last = Some(Instant::now());
        Ok(outcome)
    }

    /// Registers every shard in storage the index does not have: a node's first start on an
    /// empty disk, and a safety net for log entries that arrived too late to be seen. Shards
    /// refused before are tried again.
    pub fn catch_up_all(&self) -> Result<CatchUp, StoreError> {
        if !self.is_shared() {
            return Ok(CatchUp::default());
        }
        let mut state = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        // From now on the log is read from here (minus its window).
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        state.refused.clear();
        let all = self.backend.list_shards()?;
        let outcome = self.register_from_storage(&mut state, all)?;
        state.cursor.newest_ms = state.cursor.newest_ms.max(started);
        state.last = Some(Instant::now());
        Ok(outcome)
    }

    /// For a lookup that found nothing: catches up (unless that was just done) and says
    /// whether anything new was registered, in which case the lookup is worth repeating.
    pub(super) fn caught_up_after_miss(&self) -> bool {
        if !self.is_shared() {
            return false;
        }
        {
            let state = self.sync.lock().unwrap_or_else(|p| p.into_inner());
            if state.last.is_some_and(|t| t.elapsed() < MISS_RECHECK) {
                return false;
            }
        }
        match self.catch_up() {
            Ok(c) => c.registered > 0,
            Err(e) => {
                tracing::warn!(error = %e, "cannot catch up with the other nodes' shards");
                false
            }
        }
    }

    fn register_from_storage(
        &self,
        state: &mut SyncState,
        shards: Vec<ShardHash>,
    ) -> Result<CatchUp, StoreError> {
        let mut outcome = CatchUp::default();
        for shard in shards {
            if state.refused.contains(&shard) || self.index.has_shard(&shard)? {
                continue;
            }
            match self.register_stored_shard(shard)? {
                Stored::Registered => outcome.registered += 1,
                Stored::Gone => {}
                Stored::Refused(why) => {
                    tracing::warn!(%shard, reason = %why, "a shard in storage cannot be registered");
                    state.refused.insert(shard);
                    outcome.refused += 1;
                }
            }
        }
        if outcome.registered > 0 {
            tracing::debug!(
                registered = outcome.registered,
                "registered shards other nodes accepted"
            );
        }
        Ok(outcome)
    }

    /// Registers a shard found in storage, checked against the stored xorbs as an upload is.
    fn register_stored_shard(&self, shard: ShardHash) -> Result<Stored, StoreError> {
        let Some(bytes) = self.backend.read_all(ObjectKey::Shard(shard))? else {
            return Ok(Stored::Gone);
        };
        let computed = ShardHash::of(&bytes);
        if computed != shard {
            return Ok(Stored::Refused(format!(
                "its {} bytes hash to {computed}",
                bytes.len()
            )));
        }
        let parsed = match ParsedShard::parse(&bytes) {
            Ok(p) => p,
            Err(e) => return Ok(Stored::Refused(e.to_string())),
        };
        let _collecting = self.collecting.read().unwrap_or_else(|p| p.into_inner());
        match self.validate(&parsed.shard, shard, &mut |_| {}) {
            Ok(entries) => {
                self.index.add_shard(shard, &entries, now_unix())?;
                Ok(Stored::Registered)
            }
            Err(e) if e.is_client_error() => Ok(Stored::Refused(e.to_string())),
            Err(e) => Err(e),
        }
    }
}

/// What became of a shard found in storage.
enum Stored {
    Registered,
    /// Removed since it was listed.
    Gone,
    /// It does not check out against the stored xorbs (or is not a shard): why.
    Refused(String),
}
