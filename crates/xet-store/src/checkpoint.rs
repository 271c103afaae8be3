//! Checkpoints of the shard log: what keeps the metadata in a shared bucket bounded, and a new
//! node's start short.
//!
//! Every accepted shard leaves a shard object and a log entry in the bucket, and every batch of
//! checked SHA-256 claims an object; a node on an empty disk reads and checks them all
//! ([`crate::sync`]). A **checkpoint** (`checkpoints/<ms>-<BLAKE3>`, [`mod@format`]) is one object
//! holding what registering all of them gave a node's index (files, oids, claims, dedup
//! entries, which repositories registered which files) and the names of the objects it covers.
//! Like the checkpoints of table formats' transaction logs, it is a full copy, not a delta: a
//! node reads the newest one in one request, adds its rows to its index, and then registers
//! from the log only what came after.
//!
//! [`Store::compact`] (run by one node at a time, under the `checkpoint` lease) lists the log,
//! the claim batches and the shards; catches up with all of them (so they are in its index);
//! writes a checkpoint of its index; reads it back to check it; then, for every older
//! checkpoint at least a grace old ([`CHECKPOINT_GRACE`] by default), deletes the objects it
//! covers and the checkpoint itself (the new one holds everything it did). The grace lets
//! every running node register a log entry from the log before it goes; a node whose catch-up
//! failed for longer, or that starts on an empty disk, reads the newest checkpoint
//! ([`Store::catch_up_all`]).
//!
//! What stays safe:
//! - A checkpoint whose body does not hash to its name (damaged, cut short) or does not parse
//!   is ignored with a warning; the next older one is read instead, and nothing it would have
//!   covered is deleted (covered objects are deleted only on behalf of a checkpoint read back
//!   whole).
//! - A shard object is not deleted while a log entry the checkpoint does not cover names it (a
//!   later push of the same shard through another repository).
//! - Garbage collection works from the index, which holds the checkpoint's files; scrub does
//!   not count a shard whose registration came from a checkpoint as missing.

pub use crate::checkpoint_format as format;

use crate::repo_name::RepoName;
use std::collections::HashSet;
use std::time::Duration;
use xet_protocol::util::now_ms;

use crate::backend::{ClaimCursor, LogEntry, ObjectKey, SharedBucket};
use crate::cas::Store;
use crate::error::StoreError;
use crate::parallel;
use format::{CheckpointId, Table};
use xet_format::ShardHash;
use xet_protocol::util::sync::{LockAnyway as _, RwLockAnyway as _};

/// How long a checkpoint stays before the objects it covers are deleted, by default.
pub const CHECKPOINT_GRACE: Duration = Duration::from_secs(3600);

/// Deletions of covered objects in flight at once.
const DELETE_CONCURRENCY: usize = 16;

/// The largest checkpoint a node reads (about 20 million rows).
pub const MAX_CHECKPOINT_BYTES: u64 = 2 << 30;

/// How [`Store::compact`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactOptions {
    /// How old a checkpoint must be before what it covers is deleted.
    pub grace: Duration,
}

impl Default for CompactOptions {
    fn default() -> Self {
        Self {
            grace: CHECKPOINT_GRACE,
        }
    }
}

/// What [`Store::compact`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// The checkpoint written (`None` on unshared storage).
    pub written: Option<CheckpointId>,
    /// Its rows and bytes.
    pub rows: u64,
    pub bytes: u64,
    /// Objects it covers (deleted by a later compaction, once it is old enough).
    pub covered: u64,
    /// Objects deleted on behalf of older checkpoints: log entries, claim batches, shards.
    pub log_entries_removed: u64,
    pub claim_batches_removed: u64,
    pub shards_removed: u64,
    /// Older checkpoints deleted.
    pub checkpoints_removed: u64,
    /// Checkpoints ignored: their body does not hash to their name or does not parse.
    pub damaged_checkpoints: Vec<String>,
}

/// What a checkpoint covers, read from its rows.
#[derive(Debug, Default)]
struct Covered {
    log: Vec<LogEntry>,
    batches: Vec<String>,
    shards: Vec<ShardHash>,
}

impl Store {
    /// Writes a checkpoint of everything registered from the bucket and deletes what older
    /// checkpoints cover (see the module documentation). Does nothing on unshared storage.
    /// Lists and reads the bucket: not for async workers.
    pub fn compact(&self, options: CompactOptions) -> Result<CompactReport, StoreError> {
        let mut report = CompactReport::default();
        let Some(bucket) = self.backend.shared() else {
            return Ok(report);
        };
        let older = bucket.list_checkpoints()?;
        // What is there now; everything of it is registered below, so the checkpoint
        // covers it.
        let log = bucket.list_log()?;
        let batches = bucket.list_claim_batches()?;
        let shards = self.backend.list_shards()?;
        self.catch_up_all()?;
        self.settle_batch_claims(bucket)?;
        let refused = self.refused_shards();
        let registered = |shard: &ShardHash| -> Result<bool, StoreError> {
            Ok(!refused.contains(shard) && self.index.has_shard(shard)?)
        };
        let mut body = format::MAGIC.to_vec();
        report.rows = self.index.checkpoint_rows(&mut body)?;
        let mut covered_log = HashSet::new();
        for entry in &log {
            if registered(&entry.shard)? {
                let key = log_entry_key(entry);
                if format::push_row(&mut body, Table::CoveredLogEntry, &key, &[]) {
                    covered_log.insert(key);
                    report.covered += 1;
                }
            }
        }
        for name in &batches {
            if format::push_row(&mut body, Table::CoveredClaimBatch, name.as_bytes(), &[]) {
                report.covered += 1;
            }
        }
        for shard in &shards {
            if registered(shard)?
                && format::push_row(&mut body, Table::CoveredShard, shard.as_bytes(), &[])
            {
                report.covered += 1;
            }
        }
        let id = CheckpointId::of(now_ms(), &body);
        report.bytes = body.len() as u64;
        self.backend.put_new(ObjectKey::Checkpoint(id), &body)?;
        drop(body);
        // Read back whole before anything it covers goes; its rows mark this node's shards
        // as in a checkpoint.
        match self.read_checkpoint(id)? {
            Some(_) => report.written = Some(id),
            None => {
                report.damaged_checkpoints.push(id.name());
                return Ok(report);
            }
        }
        // Log entries written since the listing (not covered) keep the shards they name.
        let uncovered: HashSet<ShardHash> = bucket
            .list_log()?
            .iter()
            .filter(|e| !covered_log.contains(&log_entry_key(e)))
            .map(|e| e.shard)
            .collect();
        let now = now_ms();
        for old in older {
            let age = Duration::from_millis(now.saturating_sub(old.ms));
            if age < options.grace {
                continue;
            }
            let Some(covered) = self.covered_by(old, &mut report)? else {
                // Damaged: what it covers is covered by the new one, deleted in its turn.
                if self.backend.remove(ObjectKey::Checkpoint(old))? {
                    report.checkpoints_removed += 1;
                }
                continue;
            };
            let removed = |done: Vec<Result<bool, crate::backend::BackendError>>| {
                done.into_iter()
                    .try_fold(0u64, |n, r| r.map(|gone| n + u64::from(gone)))
            };
            report.log_entries_removed +=
                removed(parallel::map(&covered.log, DELETE_CONCURRENCY, |e| {
                    bucket.remove_log_entry(e).map(|()| true)
                }))?;
            report.claim_batches_removed += removed(parallel::map(
                &covered.batches,
                DELETE_CONCURRENCY,
                |name| bucket.remove_claim_batch(name).map(|()| true),
            ))?;
            let shards: Vec<ShardHash> = covered
                .shards
                .into_iter()
                .filter(|s| !uncovered.contains(s))
                .collect();
            report.shards_removed += removed(parallel::map(&shards, DELETE_CONCURRENCY, |s| {
                self.backend.remove(ObjectKey::Shard(*s))
            }))?;
            if self.backend.remove(ObjectKey::Checkpoint(old))? {
                report.checkpoints_removed += 1;
            }
        }
        tracing::info!(
            checkpoint = %id,
            rows = report.rows,
            bytes = report.bytes,
            covered = report.covered,
            log_entries_removed = report.log_entries_removed,
            claim_batches_removed = report.claim_batches_removed,
            shards_removed = report.shards_removed,
            checkpoints_removed = report.checkpoints_removed,
            "checkpoint of the shard log written"
        );
        Ok(report)
    }

    /// Settles in the index every pending claim the cluster's batches of checked claims
    /// confirm, so that a checkpoint of the index covers the batches.
    fn settle_batch_claims(&self, bucket: &dyn SharedBucket) -> Result<(), StoreError> {
        let mut cursor = ClaimCursor::default();
        for (oid, file) in bucket.checked_claims_since(&mut cursor)? {
            if self.claim_pending(&oid, &file)? {
                self.index.settle_claim(&oid, &file, true)?;
            }
        }
        Ok(())
    }

    /// What checkpoint `id` covers; `None` (and named in the report) when it is damaged.
    fn covered_by(
        &self,
        id: CheckpointId,
        report: &mut CompactReport,
    ) -> Result<Option<Covered>, StoreError> {
        let body = match self.checkpoint_body(id)? {
            Body::Gone => return Ok(Some(Covered::default())),
            Body::Damaged => {
                report.damaged_checkpoints.push(id.name());
                return Ok(None);
            }
            Body::Whole(body) => body,
        };
        let mut covered = Covered::default();
        for row in whole_rows(id, &body) {
            match row.table {
                Table::CoveredLogEntry => covered.log.extend(parse_log_entry_key(row.key)),
                Table::CoveredClaimBatch => {
                    covered
                        .batches
                        .extend(std::str::from_utf8(row.key).ok().map(str::to_owned));
                }
                Table::CoveredShard => {
                    covered.shards.push(ShardHash::from_bytes(hash32(row.key)));
                }
                _ => {}
            }
        }
        Ok(Some(covered))
    }

    /// The body of checkpoint `id`, checked whole: every row read and found well formed.
    fn checkpoint_body(&self, id: CheckpointId) -> Result<Body, StoreError> {
        let key = ObjectKey::Checkpoint(id);
        let damaged = |why: String| {
            tracing::warn!(checkpoint = %id, reason = %why, "ignoring a damaged checkpoint");
            Ok(Body::Damaged)
        };
        match self.backend.len(key)? {
            None => return Ok(Body::Gone),
            Some(len) if len > MAX_CHECKPOINT_BYTES => {
                return damaged(format!(
                    "it is {len} bytes, more than the {MAX_CHECKPOINT_BYTES} a node reads"
                ))
            }
            Some(_) => {}
        }
        let Some(body) = self.backend.read_all(key)? else {
            return Ok(Body::Gone);
        };
        let checked =
            format::rows(id, &body).and_then(|mut rows| rows.try_for_each(|r| r.map(|_| ())));
        match checked {
            Ok(()) => Ok(Body::Whole(body)),
            Err(e) => damaged(e.to_string()),
        }
    }

    /// Reads checkpoint `id` into the index: `Some(rows added)`, or `None` when it is gone or
    /// damaged (then nothing of it was added: it is checked whole first).
    fn read_checkpoint(&self, id: CheckpointId) -> Result<Option<u64>, StoreError> {
        let Body::Whole(body) = self.checkpoint_body(id)? else {
            return Ok(None);
        };
        let _collecting = self.collecting.read_anyway();
        let rows = whole_rows(id, &body).filter(|r| r.table.is_index());
        Ok(Some(self.index.add_checkpoint_rows(rows)?))
    }

    /// Reads the newest checkpoint that is whole into the index, unless it is `loaded`
    /// already: the one read (or `loaded`), `None` when there is none. Damaged ones are
    /// skipped with a warning (an older one is read).
    pub(crate) fn read_newest_checkpoint(
        &self,
        loaded: Option<CheckpointId>,
    ) -> Result<Option<CheckpointId>, StoreError> {
        let Some(bucket) = self.backend.shared() else {
            return Ok(loaded);
        };
        let mut all = bucket.list_checkpoints()?;
        while let Some(id) = all.pop() {
            if Some(id) == loaded {
                return Ok(loaded);
            }
            let started = std::time::Instant::now();
            if let Some(rows) = self.read_checkpoint(id)? {
                tracing::info!(checkpoint = %id, new_rows = rows,
                    seconds = started.elapsed().as_secs_f64(), "read a checkpoint of the shard log");
                return Ok(Some(id));
            }
        }
        Ok(loaded)
    }

    /// Reads every checkpoint whole, for scrub: how many, and the names of those damaged.
    pub(crate) fn check_checkpoints(&self) -> Result<(u64, Vec<String>), StoreError> {
        let mut damaged = Vec::new();
        let Some(bucket) = self.backend.shared() else {
            return Ok((0, damaged));
        };
        let all = bucket.list_checkpoints()?;
        for id in &all {
            if let Body::Damaged = self.checkpoint_body(*id)? {
                damaged.push(id.name());
            }
        }
        Ok((all.len() as u64, damaged))
    }

    /// Shards catch-up could not register (their xorbs missing): not covered by a checkpoint.
    fn refused_shards(&self) -> HashSet<ShardHash> {
        self.cluster.state.lock_anyway().refused_shards()
    }
}

/// A checkpoint's body, as found.
enum Body {
    Gone,
    /// It does not hash to its name, does not parse, or is too large (logged).
    Damaged,
    /// Every row read and well formed.
    Whole(Vec<u8>),
}

/// The rows of a body [`Store::checkpoint_body`] found whole.
fn whole_rows(id: CheckpointId, body: &[u8]) -> impl Iterator<Item = format::Row<'_>> {
    format::rows(id, body)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
}

/// A log entry as a checkpoint names it: its time (u64 LE), its shard, its repository.
fn log_entry_key(e: &LogEntry) -> Vec<u8> {
    let repo = e.repo.as_ref().map_or("", RepoName::as_str);
    let mut key = Vec::with_capacity(40 + repo.len());
    key.extend_from_slice(&e.ms.to_le_bytes());
    key.extend_from_slice(e.shard.as_bytes());
    key.extend_from_slice(repo.as_bytes());
    key
}

/// The inverse of [`log_entry_key`] (the lengths were checked when the row was read).
fn parse_log_entry_key(key: &[u8]) -> Option<LogEntry> {
    let ms = u64::from_le_bytes(key.get(..8)?.try_into().ok()?);
    let shard = ShardHash::from_bytes(hash32(key.get(8..40)?));
    let repo = std::str::from_utf8(key.get(40..)?).ok()?;
    Some(LogEntry {
        ms,
        shard,
        repo: RepoName::new(repo).ok(),
    })
}

fn hash32(b: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    if b.len() == 32 {
        out.copy_from_slice(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_entry_reads_back_from_its_key() {
        for repo in [None, Some(RepoName::new("team/models").unwrap())] {
            let e = LogEntry {
                ms: 1_700_000_000_000,
                shard: ShardHash::from_bytes([7; 32]),
                repo,
            };
            let key = log_entry_key(&e);
            assert!(Table::CoveredLogEntry.check(&key, &[]));
            assert_eq!(parse_log_entry_key(&key), Some(e));
        }
    }
}
