//! Keeping a node's index in step with the other nodes on shared object storage
//! ([`ObjectBackend::is_shared`](crate::backend::ObjectBackend::is_shared)).
//!
//! The bucket is the truth and each node's `index.redb` is a cache of it: everything the
//! index holds follows from the shards in the bucket (a shard names its files, their terms and
//! LFS oids; the xorbs it names give the dedup entries). A node that accepts a shard stores it
//! and writes an entry in the bucket's shard log; every node lists the log's recent entries
//! ([`Store::catch_up`], about once a second from the server, and at once when a lookup
//! misses) and registers the shards it does not know, checked like an upload against the xorbs
//! in the bucket. A node started with an empty disk reads the newest checkpoint of the log
//! ([`crate::checkpoint`]) and lists every shard left once ([`Store::catch_up_all`]), as it
//! also does every few minutes to find any log entry that was more than
//! [`LOG_WINDOW_MS`](crate::storage_url::LOG_WINDOW_MS) late.
//!
//! What this trusts: objects in the bucket were validated by the node that stored them, so a
//! node adopting a xorb another node stored checks its footer against its name (a ranged read)
//! but not every chunk; `git xet scrub` verifies them whole.

use crate::repo_name::RepoName;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Instant;
use xet_protocol::util::now_ms;

use crate::backend::ObjectKey;
use crate::cas::{now_unix, Store};
use crate::cluster::SyncState;
use crate::error::StoreError;
use crate::index::{Commit, StoredShard};
use xet_format::shard::ParsedShard;
use xet_format::ShardHash;
use xet_protocol::util::sync::{LockAnyway as _, RwLockAnyway as _};

/// Shards registered from storage at once: each waits on a few reads of the bucket (the
/// shard, the footers of the xorbs it names), so one at a time managed about 11 a second.
/// Each holds its shard in memory while it is checked: at most 16 × 64 MiB in the worst case
/// (shards of pushes are usually kilobytes).
pub(crate) const REGISTER_CONCURRENCY: usize = 16;

/// Shards found in storage registered in one index transaction: a transaction per shard
/// rewrote the index's pages once per shard (a node catching up with a push of 10,000 small
/// files spent seconds of CPU on it). As many as are checked at once, so that what a batch
/// holds in memory stays what the checks held before.
const REGISTER_BATCH: usize = REGISTER_CONCURRENCY;

/// How long a log entry whose shard is not in the bucket is taken as one whose shard is still
/// on its way (its node puts the shard and the entry at once) before the shard counts as gone.
const NOT_YET: std::time::Duration = std::time::Duration::from_secs(30);

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
        let mut state = self.cluster.state.lock_anyway();
        self.catch_up_locked(&mut state)
    }

    /// Since when catch-ups fail (every one since then did), `None` when the last one
    /// succeeded (or none ran yet).
    pub fn catch_up_failing_since(&self) -> Option<std::time::SystemTime> {
        match self.cluster.catch_up_failing_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        }
    }

    /// Notes how a catch-up ended, for [`Self::catch_up_failing_since`].
    fn note_catch_up<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match &result {
            Ok(_) => self.cluster.catch_up_failing_ms.store(0, Ordering::Relaxed),
            Err(_) => {
                let _ = self.cluster.catch_up_failing_ms.compare_exchange(
                    0,
                    now_ms().max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
        result
    }

    fn catch_up_locked(&self, state: &mut SyncState) -> Result<CatchUp, StoreError> {
        // Catch-ups that failed for long enough may have missed log entries a checkpoint
        // covered and a compaction deleted meanwhile: the whole bucket is read again.
        let out_of_step = self.catch_up_failing_since().is_some_and(|since| {
            since.elapsed().unwrap_or_default() >= crate::checkpoint::CHECKPOINT_GRACE / 2
        });
        state.out_of_step |= out_of_step;
        let result = if out_of_step || state.gone {
            self.catch_up_everything(state)
        } else {
            self.catch_up_log(state)
        };
        self.note_catch_up(result)
    }

    fn catch_up_log(&self, state: &mut SyncState) -> Result<CatchUp, StoreError> {
        let started = now_ms();
        state.last = Some(Instant::now());
        let mut cursor = state.cursor;
        let logged = match self.backend.shared() {
            Some(bucket) => bucket.logged_shards(&mut cursor)?,
            None => Vec::new(),
        };
        let logged = logged
            .into_iter()
            .map(|e| (e.shard, e.repo, e.ms))
            .collect();
        let outcome = self.register_from_storage(state, logged)?;
        state.cursor = cursor;
        self.cluster
            .caught_up_ms
            .fetch_max(started, Ordering::Relaxed);
        Ok(outcome)
    }

    /// How long ago the last catch-up that succeeded started (what this node knows of the
    /// others is at most that old); `None` for a store no other node writes to, or before the
    /// first one.
    pub fn catch_up_age(&self) -> Option<std::time::Duration> {
        if !self.is_shared() {
            return None;
        }
        match self.cluster.caught_up_ms.load(Ordering::Relaxed) {
            0 => None,
            at => Some(std::time::Duration::from_millis(
                now_ms().saturating_sub(at),
            )),
        }
    }

    /// Registers every shard in storage the index does not have: a node's first start on an
    /// empty disk, and a safety net for log entries that arrived too late to be seen. Shards
    /// refused before are tried again.
    pub fn catch_up_all(&self) -> Result<CatchUp, StoreError> {
        if !self.is_shared() {
            return Ok(CatchUp::default());
        }
        let mut state = self.cluster.state.lock_anyway();
        let result = self.catch_up_everything(&mut state);
        self.note_catch_up(result)
    }

    fn catch_up_everything(&self, state: &mut SyncState) -> Result<CatchUp, StoreError> {
        state.last = Some(Instant::now());
        // From now on the log is read from here (minus its window).
        let started = now_ms();
        state.refused.clear();
        // What the newest checkpoint holds first, in one read; then what came after it. A node
        // that kept up since it opened the store has registered all of it from the log: it
        // reads one only at its first full catch-up, or after it fell out of step.
        if !self.cluster.listed_all.load(Ordering::Relaxed) || state.gone || state.out_of_step {
            state.checkpoint = self.read_newest_checkpoint(state.checkpoint)?;
        }
        // A shard refused now is tried again for log entries written after this listing.
        let mut all: Vec<(ShardHash, Option<RepoName>, u64)> = self
            .backend
            .list_shards()?
            .into_iter()
            .map(|h| (h, None, started))
            .collect();
        if let Some(bucket) = self.backend.shared() {
            all.extend(
                bucket
                    .list_access()?
                    .into_iter()
                    .map(|(h, repo)| (h, Some(repo), started)),
            );
        }
        let outcome = self.register_from_storage(state, all)?;
        // What is still gone after the newest checkpoint was read is gone for good.
        state.gone = false;
        state.out_of_step = false;
        state.cursor.newest_ms = state.cursor.newest_ms.max(started);
        self.cluster
            .caught_up_ms
            .fetch_max(started, Ordering::Relaxed);
        self.cluster.listed_all.store(true, Ordering::Relaxed);
        Ok(outcome)
    }

    /// On shared storage, until the first full catch-up since the store opened has succeeded
    /// ([`Self::catch_up_all`]): a lookup that misses may miss only because this node has not
    /// registered the shard yet. A server answers such misses "try again shortly" and stays
    /// unready meanwhile; gc waits for it.
    pub fn catching_up(&self) -> bool {
        self.is_shared() && !self.cluster.listed_all.load(Ordering::Relaxed)
    }

    /// For a lookup that found nothing: makes sure a catch-up that started after the miss has
    /// run (one that another request started meanwhile counts: concurrent misses share one
    /// listing) and says whether the lookup is worth repeating.
    ///
    /// Before the first full catch-up has run, the shard log (what was stored recently) is read
    /// if no full catch-up is under way; a miss never waits for one, which lists everything
    /// (the caller says to come back instead).
    pub fn caught_up_after_miss(&self) -> bool {
        if !self.is_shared() {
            return false;
        }
        let missed = Instant::now();
        let mut state = if self.catching_up() {
            match self.cluster.state.try_lock() {
                Ok(state) => state,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return false,
            }
        } else {
            self.cluster.state.lock_anyway()
        };
        if state.last.is_some_and(|t| t > missed) {
            return true;
        }
        match self.catch_up_locked(&mut state) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot catch up with the other nodes' shards");
                false
            }
        }
    }

    fn register_from_storage(
        &self,
        state: &mut SyncState,
        shards: Vec<(ShardHash, Option<RepoName>, u64)>,
    ) -> Result<CatchUp, StoreError> {
        // What this node logged itself is known (its index has it).
        let logged_here = std::mem::take(&mut *self.cluster.logged_here.lock_anyway());
        state.access.extend(logged_here);
        // Entries listed before their shard was there, unless listed again.
        let mut shards = shards;
        let listed: HashSet<(ShardHash, Option<RepoName>)> =
            shards.iter().map(|(s, r, _)| (*s, r.clone())).collect();
        shards.extend(
            state
                .pending
                .iter()
                .filter(|(key, _)| !listed.contains(*key))
                .map(|((s, r), (ms, _))| (*s, r.clone(), *ms)),
        );
        // What is left to do, decided from the index (fast, local reads).
        let mut todo = Vec::new();
        let mut logged_at: HashMap<ShardHash, u64> = HashMap::new();
        for (shard, repo, ms) in shards {
            if state.refused.get(&shard).is_some_and(|&at| ms <= at) {
                continue;
            }
            let newest = logged_at.entry(shard).or_insert(ms);
            *newest = (*newest).max(ms);
            let known = self.index.has_shard(&shard)?;
            let granted = match &repo {
                Some(r) => state.access.contains(&(shard, r.clone())),
                None => true,
            };
            if known && granted {
                state.pending.remove(&(shard, repo));
            } else {
                todo.push((shard, repo, known));
            }
        }
        // Each shard is read and checked against the bucket (the shard, its xorbs' footers),
        // several at once, [`REGISTER_CONCURRENCY`] at most; then a batch of them is
        // registered in one transaction. Garbage collection waits meanwhile, so that no xorb a
        // checked shard names is deleted before the shard is registered.
        let mut outcome = CatchUp::default();
        let mut counted = HashSet::new();
        for batch in todo.chunks(REGISTER_BATCH) {
            let _collecting = self.collecting.read_anyway();
            let results = self.register_stored_shards(batch);
            let mut ready = Vec::new();
            for ((shard, repo, known), result) in batch.iter().zip(results) {
                let key = (*shard, repo.clone());
                let result = result?;
                if !matches!(result, Stored::Gone) {
                    state.pending.remove(&key);
                }
                match result {
                    Stored::Gone if !known && Self::still_on_its_way(state, key, &logged_at) => {}
                    Stored::Registered(prepared) => {
                        // A shard listed twice (with and without a repository) counts once.
                        if !known && counted.insert(*shard) {
                            outcome.registered += 1;
                        }
                        ready.push(prepared);
                    }
                    Stored::Gone if !known => {
                        // Deleted once a checkpoint covered it (or quarantined): the next
                        // catch-up reads the whole bucket, the newest checkpoint first; the
                        // entry is not tried again before.
                        state.gone = true;
                        let at = logged_at.get(shard).copied().unwrap_or(0);
                        state.refused.insert(*shard, at);
                    }
                    Stored::Gone => {}
                    Stored::Refused(why) => {
                        tracing::warn!(%shard, reason = %why, "a shard in storage cannot be registered");
                        let at = logged_at.get(shard).copied().unwrap_or(0);
                        state.refused.insert(*shard, at);
                        outcome.refused += 1;
                    }
                }
                if let Some(r) = repo {
                    state.access.insert((*shard, r.clone()));
                }
            }
            // Lazy commits: the bucket can give them again.
            self.index
                .add_stored_shards(&ready, now_unix(), Commit::Lazy)?;
        }
        // One fsync for all of them.
        if !todo.is_empty() {
            self.index.persist()?;
        }
        if outcome.registered > 0 {
            tracing::debug!(
                registered = outcome.registered,
                "registered shards other nodes accepted"
            );
        }
        Ok(outcome)
    }

    /// For a log entry whose shard is not in the bucket: whether it counts as on its way (first
    /// seen so less than [`NOT_YET`] ago; noted in `state.pending` to be tried again), or as
    /// gone (and forgotten as pending).
    fn still_on_its_way(
        state: &mut SyncState,
        key: (ShardHash, Option<RepoName>),
        logged_at: &HashMap<ShardHash, u64>,
    ) -> bool {
        let ms = logged_at.get(&key.0).copied().unwrap_or(0);
        let (_, first) = *state
            .pending
            .entry(key.clone())
            .or_insert((ms, Instant::now()));
        if first.elapsed() < NOT_YET {
            return true;
        }
        state.pending.remove(&key);
        false
    }

    /// [`Self::register_stored_shard`] for each of `todo`, on up to [`REGISTER_CONCURRENCY`]
    /// threads; the results in the order of `todo`.
    fn register_stored_shards(
        &self,
        todo: &[(ShardHash, Option<RepoName>, bool)],
    ) -> Vec<Result<Stored, StoreError>> {
        crate::parallel::map(todo, REGISTER_CONCURRENCY, |(shard, repo, known)| {
            self.register_stored_shard(*shard, *known, repo.as_ref())
        })
    }

    /// Reads and checks a shard found in storage (unless `known`) against the stored xorbs as
    /// an upload is, and prepares its registration, its files' as registered through `repo` if
    /// given. The caller holds the collection lock until it registers it.
    fn register_stored_shard(
        &self,
        shard: ShardHash,
        known: bool,
        repo: Option<&RepoName>,
    ) -> Result<Stored, StoreError> {
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
        let entries = if known {
            None
        } else {
            match self.validate(&parsed.shard, shard, &mut |_| {}) {
                Ok(entries) => Some(entries),
                Err(e) if e.is_client_error() => return Ok(Stored::Refused(e.to_string())),
                Err(e) => return Err(e),
            }
        };
        let files = match repo {
            Some(_) => parsed.shard.files.iter().map(|f| f.hash).collect(),
            None => Vec::new(),
        };
        Ok(Stored::Registered(StoredShard {
            shard,
            entries,
            repo: repo.cloned(),
            files,
        }))
    }
}

/// What became of a shard found in storage.
enum Stored {
    /// Checked: ready to register.
    Registered(StoredShard),
    /// Removed since it was listed.
    Gone,
    /// It does not check out against the stored xorbs (or is not a shard): why.
    Refused(String),
}
