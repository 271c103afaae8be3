//! What a store tells its operator beyond its counts, for the status page of `git xet serve`:
//! how much each repository holds ([`Store::usage`]), the totals sampled over time
//! ([`Store::record_sample`]), recent pushes ([`Store::record_push`]), garbage collections
//! ([`Store::record_gc_run`]) and, on shared storage, the status records nodes publish for each
//! other ([`Store::put_node_record`]).
//!
//! Three small tables in the index database (`index.redb`) beside the index's own, written only
//! here, each capped, with lazy durability ([`Commit::Lazy`]: a crash may lose their last rows,
//! never anything the store needs):
//!
//! | table | key | value |
//! |---|---|---|
//! | `stats_history` | unix seconds (u64 big-endian), a sequence number (u32 big-endian) | a [`Sample`] as JSON; at most [`MAX_SAMPLES`] rows, older ones thinned out (every other row of the older half goes) so that the rows cover the store's whole life |
//! | `stats_pushes` | unix milliseconds (u64 big-endian), a sequence number (u32 big-endian) | a [`Push`] as JSON; the last [`MAX_PUSHES`] |
//! | `stats_gc_runs` | unix milliseconds of the start (u64 big-endian), a sequence number (u32 big-endian) | a [`GcRun`] as JSON; the last [`MAX_GC_RUNS`] |
//!
//! **Logical and stored bytes.** A repository's *logical bytes* are the sizes of the distinct
//! files registered through it (a push or a basic upload), added up: what its clones download.
//! Its *stored bytes* are the stored sizes (compressed chunks and footer) of the distinct xorbs
//! those files' reconstructions use, whole: what storage would free if no other repository used
//! them. Xorbs are shared between repositories (deduplication is global), so repositories'
//! stored bytes add up to more than the store's. The store's totals are the sizes of all
//! registered files, each counted once, and the stored sizes of all the xorbs it records, used
//! or not yet collected; their ratio is what deduplication and compression save together.
//!
//! [`Store::usage`] reads the whole index (every file's terms): run it in the background, not
//! per request. Its memory is bounded ([`UsageLimits`]): beyond the limits it says which
//! figures are incomplete instead of growing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};
use xet_protocol::util::now_ms;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use xet_format::XorbHash;

use crate::cas::Store;
use crate::error::StoreError;
use crate::index::{Commit, IndexError};

const HISTORY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("stats_history");
const PUSHES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("stats_pushes");
const GC_RUNS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("stats_gc_runs");

/// Rows of `stats_history` kept (thinned beyond; see the module documentation).
pub const MAX_SAMPLES: usize = 720;
/// Rows of `stats_pushes` kept.
pub const MAX_PUSHES: usize = 200;
/// Rows of `stats_gc_runs` kept.
pub const MAX_GC_RUNS: usize = 50;
/// A sample is taken at least this often even when the totals did not change, so that the
/// chart shows the time that passed.
pub const FLAT_SAMPLE_EVERY: Duration = Duration::from_secs(6 * 3600);

/// The store's totals at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix seconds.
    pub t: u64,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
    pub files: u64,
    pub xorbs: u64,
}

/// How a push reached the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushKind {
    /// A shard registered through the CAS API (git-xet's agent, hf-xet).
    Shard,
    /// A basic Git LFS upload, chunked by the server.
    Basic,
}

/// One push registered through this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Push {
    /// Unix milliseconds.
    pub t_ms: u64,
    /// The repository it was registered through; `None`: a server-wide credential on the CAS
    /// API, which names none.
    pub repo: Option<String>,
    pub kind: PushKind,
    /// The files it registered, and their sizes together.
    pub files: u64,
    pub bytes: u64,
    /// Of those, the files new to the store and their sizes (known for shards).
    pub new_files: Option<u64>,
    pub new_bytes: Option<u64>,
}

/// How a garbage collection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GcOutcome {
    Done,
    Failed,
}

/// One garbage collection this node ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRun {
    /// Unix milliseconds.
    pub started_ms: u64,
    pub ended_ms: u64,
    pub outcome: GcOutcome,
    /// Unused xorbs deleted, and their bytes.
    pub xorbs_removed: u64,
    pub bytes_freed: u64,
    /// Unused xorbs kept because they were younger than the grace period, and their bytes.
    pub xorbs_young: u64,
    pub bytes_young: u64,
    /// Xorbs in storage, and how many of them registered files use (kept).
    pub xorbs_stored: u64,
    pub xorbs_used: u64,
    /// Leftover temporary files removed.
    pub temp_files_removed: u64,
    /// Why it failed (for the operator; redacted by the caller).
    pub error: Option<String>,
}

impl GcRun {
    /// A run that ended with `report`.
    pub fn done(started_ms: u64, ended_ms: u64, report: &crate::GcReport) -> Self {
        Self {
            started_ms,
            ended_ms,
            outcome: GcOutcome::Done,
            xorbs_removed: report.xorbs_removed,
            bytes_freed: report.bytes_freed,
            xorbs_young: report.xorbs_young,
            bytes_young: report.bytes_young,
            xorbs_stored: report.xorbs_stored,
            xorbs_used: report.xorbs_used,
            temp_files_removed: report.temp_files_removed,
            error: None,
        }
    }

    /// A run that failed with `error`.
    pub fn failed(started_ms: u64, ended_ms: u64, error: String) -> Self {
        Self {
            started_ms,
            ended_ms,
            outcome: GcOutcome::Failed,
            xorbs_removed: 0,
            bytes_freed: 0,
            xorbs_young: 0,
            bytes_young: 0,
            xorbs_stored: 0,
            xorbs_used: 0,
            temp_files_removed: 0,
            error: Some(error),
        }
    }
}

/// What [`Store::usage`] may hold in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageLimits {
    /// Repositories counted; files of further repositories count only in the totals
    /// ([`Usage::repos_complete`] is then false).
    pub max_repos: usize,
    /// (repository, xorb) pairs held to find each repository's distinct xorbs, 36 bytes each;
    /// beyond, stored bytes are not given ([`Usage::stored_complete`]).
    pub max_pairs: usize,
    /// Repositories returned, the largest (logical bytes) first.
    pub shown: usize,
}

impl Default for UsageLimits {
    fn default() -> Self {
        Self {
            max_repos: 10_000,
            max_pairs: 1 << 20,
            shown: 100,
        }
    }
}

/// One repository's figures (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepoUsage {
    pub repo: String,
    pub files: u64,
    pub logical_bytes: u64,
    /// `None` when [`Usage::stored_complete`] is false.
    pub stored_bytes: Option<u64>,
}

/// What the store holds, by repository and in all ([`Store::usage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// When it was computed (unix seconds), and how long it took (milliseconds).
    pub computed_at: u64,
    pub took_ms: u64,
    /// Registered files, each counted once, and their sizes together.
    pub files: u64,
    pub logical_bytes: u64,
    /// Xorbs the index records, and their stored sizes together.
    pub xorbs: u64,
    pub stored_bytes: u64,
    /// The largest repositories ([`UsageLimits::shown`]), by logical bytes.
    pub repos: Vec<RepoUsage>,
    /// Repositories counted in all.
    pub repo_count: u64,
    /// Every repository was counted (else some exceeded [`UsageLimits::max_repos`]).
    pub repos_complete: bool,
    /// Repositories' stored bytes are given (else the pairs exceeded
    /// [`UsageLimits::max_pairs`]).
    pub stored_complete: bool,
    /// Files registered through no repository (a server-wide credential on the CAS API), and
    /// their sizes.
    pub unattributed_files: u64,
    pub unattributed_bytes: u64,
}

impl Usage {
    /// The totals as a sample taken now.
    pub fn sample(&self) -> Sample {
        Sample {
            t: self.computed_at,
            logical_bytes: self.logical_bytes,
            stored_bytes: self.stored_bytes,
            files: self.files,
            xorbs: self.xorbs,
        }
    }
}

fn db_err(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Index(IndexError::Db(Box::new(e.into())))
}

/// Keys of rows written in the same millisecond differ by this.
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

fn timed_key(ms: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&ms.to_be_bytes());
    k[8..].copy_from_slice(&SEQUENCE.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    k
}

/// Repositories' accumulated figures during [`Store::usage`].
#[derive(Default)]
struct RepoTally {
    index: HashMap<String, u32>,
    names: Vec<String>,
    files: Vec<u64>,
    logical: Vec<u64>,
    complete: bool,
}

impl RepoTally {
    /// The number of `repo`, counting it if there is room.
    fn id(&mut self, repo: &str, max: usize) -> Option<u32> {
        if let Some(&id) = self.index.get(repo) {
            return Some(id);
        }
        if self.names.len() >= max {
            self.complete = false;
            return None;
        }
        let id = self.names.len() as u32;
        self.index.insert(repo.to_string(), id);
        self.names.push(repo.to_string());
        self.files.push(0);
        self.logical.push(0);
        Some(id)
    }
}

impl Store {
    /// What the store holds by repository and in all (see the module documentation). Reads the
    /// whole index in one snapshot: for a background job. Blocks.
    pub fn usage(&self, limits: UsageLimits) -> Result<Usage, StoreError> {
        let started = std::time::Instant::now();
        let txn = self.index.read_txn()?;
        let (xorbs, stored_bytes) = self.index.stored_xorb_totals(&txn)?;
        let mut tally = RepoTally {
            complete: true,
            ..RepoTally::default()
        };
        let (mut files, mut logical) = (0u64, 0u64);
        let (mut unattributed_files, mut unattributed_bytes) = (0u64, 0u64);
        let mut pairs: Vec<(XorbHash, u32)> = Vec::new();
        let mut stored_complete = true;
        self.index.each_file_usage(&txn, &mut |f| {
            files += 1;
            logical = logical.saturating_add(f.size);
            if f.repos.is_empty() {
                unattributed_files += 1;
                unattributed_bytes = unattributed_bytes.saturating_add(f.size);
            }
            for repo in f.repos {
                let Some(id) = tally.id(repo, limits.max_repos) else {
                    continue;
                };
                let i = id as usize;
                tally.files[i] += 1;
                tally.logical[i] = tally.logical[i].saturating_add(f.size);
                if !stored_complete {
                    continue;
                }
                if pairs.len() + f.xorbs.len() > limits.max_pairs {
                    pairs.sort_unstable();
                    pairs.dedup();
                    if pairs.len() + f.xorbs.len() > limits.max_pairs / 2 {
                        stored_complete = false;
                        pairs = Vec::new();
                        continue;
                    }
                }
                pairs.extend(f.xorbs.iter().map(|x| (*x, id)));
            }
        })?;
        let mut stored = vec![0u64; tally.names.len()];
        if stored_complete {
            pairs.sort_unstable();
            pairs.dedup();
            let mut current: Option<(XorbHash, u64)> = None;
            for (xorb, id) in pairs {
                let len = match current {
                    Some((x, len)) if x == xorb => len,
                    _ => {
                        // A xorb no longer recorded (quarantined) counts nothing.
                        let len = self.index.stored_len_in(&txn, &xorb)?.unwrap_or(0);
                        current = Some((xorb, len));
                        len
                    }
                };
                let s = &mut stored[id as usize];
                *s = s.saturating_add(len);
            }
        }
        let mut repos: Vec<RepoUsage> = (0..tally.names.len())
            .map(|i| RepoUsage {
                repo: std::mem::take(&mut tally.names[i]),
                files: tally.files[i],
                logical_bytes: tally.logical[i],
                stored_bytes: stored_complete.then_some(stored[i]),
            })
            .collect();
        let repo_count = repos.len() as u64;
        repos.sort_by(|a, b| {
            b.logical_bytes
                .cmp(&a.logical_bytes)
                .then_with(|| a.repo.cmp(&b.repo))
        });
        repos.truncate(limits.shown);
        Ok(Usage {
            computed_at: now_ms() / 1000,
            took_ms: started.elapsed().as_millis() as u64,
            files,
            logical_bytes: logical,
            xorbs,
            stored_bytes,
            repos,
            repo_count,
            repos_complete: tally.complete,
            stored_complete,
            unattributed_files,
            unattributed_bytes,
        })
    }

    /// Adds `sample` to the history if it is due: the first one, one whose totals differ from
    /// the last sample's at least `every` after it, or any [`FLAT_SAMPLE_EVERY`] after it.
    /// Returns whether it was added. Blocks.
    pub fn record_sample(&self, sample: &Sample, every: Duration) -> Result<bool, StoreError> {
        let last = self.samples_where(true)?.pop();
        let due = match last {
            None => true,
            Some(last) => {
                let gap = sample.t.saturating_sub(last.t);
                let changed = (
                    last.logical_bytes,
                    last.stored_bytes,
                    last.files,
                    last.xorbs,
                ) != (
                    sample.logical_bytes,
                    sample.stored_bytes,
                    sample.files,
                    sample.xorbs,
                );
                (changed && gap >= every.as_secs()) || gap >= FLAT_SAMPLE_EVERY.as_secs()
            }
        };
        if !due {
            return Ok(false);
        }
        let value = serde_json::to_vec(sample).map_err(|e| db_err(std::io::Error::other(e)))?;
        let txn = self.index.write_txn(Commit::Lazy)?;
        {
            let mut t = txn.open_table(HISTORY).map_err(db_err)?;
            // Samples of one second are kept apart, in the order they were taken.
            t.insert(timed_key(sample.t).as_slice(), value.as_slice())
                .map_err(db_err)?;
            let len = t.len().map_err(db_err)? as usize;
            if len > MAX_SAMPLES {
                // Every other row of the older half goes: the history keeps covering the
                // store's whole life, less finely the further back it goes.
                let mut doomed = Vec::new();
                for (i, row) in t.iter().map_err(db_err)?.take(len / 2).enumerate() {
                    let (k, _) = row.map_err(db_err)?;
                    if i % 2 == 1 {
                        doomed.push(k.value().to_vec());
                    }
                }
                for k in doomed {
                    t.remove(k.as_slice()).map_err(db_err)?;
                }
            }
        }
        txn.commit().map_err(db_err)?;
        Ok(true)
    }

    /// The history of samples, oldest first (at most [`MAX_SAMPLES`]). Blocks.
    pub fn samples(&self) -> Result<Vec<Sample>, StoreError> {
        self.samples_where(false)
    }

    /// Every sample, or (`last_only`) the last one.
    fn samples_where(&self, last_only: bool) -> Result<Vec<Sample>, StoreError> {
        let rows = self.rows(HISTORY, if last_only { 1 } else { MAX_SAMPLES * 2 })?;
        let mut out: Vec<Sample> = rows
            .iter()
            .filter_map(|v| serde_json::from_slice(v).ok())
            .collect();
        out.reverse();
        Ok(out)
    }

    /// The values of the last `limit` rows of `table`, newest first; none if the table was
    /// never written.
    fn rows(
        &self,
        table: TableDefinition<&[u8], &[u8]>,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let txn = self.index.read_txn()?;
        let t = match txn.open_table(table) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(db_err(e)),
        };
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)?.rev().take(limit) {
            let (_, v) = row.map_err(db_err)?;
            out.push(v.value().to_vec());
        }
        Ok(out)
    }

    /// Appends `value` to `table` under `key`, keeping its last `max` rows.
    fn append_capped(
        &self,
        table: TableDefinition<&[u8], &[u8]>,
        key: &[u8],
        value: &[u8],
        max: usize,
    ) -> Result<(), StoreError> {
        let txn = self.index.write_txn(Commit::Lazy)?;
        {
            let mut t = txn.open_table(table).map_err(db_err)?;
            t.insert(key, value).map_err(db_err)?;
            let len = t.len().map_err(db_err)? as usize;
            if len > max {
                let mut doomed = Vec::new();
                for row in t.iter().map_err(db_err)?.take(len - max) {
                    let (k, _) = row.map_err(db_err)?;
                    doomed.push(k.value().to_vec());
                }
                for k in doomed {
                    t.remove(k.as_slice()).map_err(db_err)?;
                }
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Records a push registered through this node (the last [`MAX_PUSHES`] are kept). Blocks.
    pub fn record_push(&self, push: &Push) -> Result<(), StoreError> {
        let value = serde_json::to_vec(push).map_err(|e| db_err(std::io::Error::other(e)))?;
        self.append_capped(PUSHES, &timed_key(push.t_ms), &value, MAX_PUSHES)
    }

    /// The last `limit` pushes recorded, newest first. Blocks.
    pub fn recent_pushes(&self, limit: usize) -> Result<Vec<Push>, StoreError> {
        Ok(self
            .rows(PUSHES, limit.min(MAX_PUSHES))?
            .iter()
            .filter_map(|v| serde_json::from_slice(v).ok())
            .collect())
    }

    /// Records a garbage collection this node ran (the last [`MAX_GC_RUNS`] are kept). Blocks.
    pub fn record_gc_run(&self, run: &GcRun) -> Result<(), StoreError> {
        let value = serde_json::to_vec(run).map_err(|e| db_err(std::io::Error::other(e)))?;
        self.append_capped(GC_RUNS, &timed_key(run.started_ms), &value, MAX_GC_RUNS)
    }

    /// The last `limit` garbage collections recorded, newest first. Blocks.
    pub fn gc_runs(&self, limit: usize) -> Result<Vec<GcRun>, StoreError> {
        Ok(self
            .rows(GC_RUNS, limit.min(MAX_GC_RUNS))?
            .iter()
            .filter_map(|v| serde_json::from_slice(v).ok())
            .collect())
    }

    /// Publishes node `id`'s status record for the other nodes of shared storage (nothing on a
    /// directory store). Blocks.
    pub fn put_node_record(&self, id: &str, body: &[u8]) -> Result<(), StoreError> {
        match self.backend.shared() {
            Some(bucket) => Ok(bucket.put_node_record(id, body)?),
            None => Ok(()),
        }
    }

    /// The status records the nodes of shared storage published (at most `limit`, the most
    /// recently written, each at most `max` bytes): name, when written, body. Blocks.
    pub fn node_records(
        &self,
        limit: usize,
        max: u64,
    ) -> Result<Vec<(String, SystemTime, Vec<u8>)>, StoreError> {
        match self.backend.shared() {
            Some(bucket) => Ok(bucket.node_records(limit, max)?),
            None => Ok(Vec::new()),
        }
    }

    /// Removes node `id`'s status record (a node long gone). Blocks.
    pub fn remove_node_record(&self, id: &str) -> Result<(), StoreError> {
        match self.backend.shared() {
            Some(bucket) => Ok(bucket.remove_node_record(id)?),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: u64, logical: u64) -> Sample {
        Sample {
            t,
            logical_bytes: logical,
            stored_bytes: logical / 2,
            files: 1,
            xorbs: 1,
        }
    }

    #[test]
    fn samples_are_taken_when_due_and_thinned_beyond_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store.samples().unwrap().is_empty());
        let every = Duration::from_secs(600);
        assert!(store.record_sample(&sample(1000, 10), every).unwrap());
        // Too soon, and unchanged: neither is due.
        assert!(!store.record_sample(&sample(1100, 20), every).unwrap());
        assert!(!store.record_sample(&sample(2000, 10), every).unwrap());
        // Changed and late enough.
        assert!(store.record_sample(&sample(1600, 20), every).unwrap());
        // Unchanged, but the flat interval passed.
        let flat = 1600 + FLAT_SAMPLE_EVERY.as_secs();
        assert!(store.record_sample(&sample(flat, 20), every).unwrap());
        assert_eq!(
            store.samples().unwrap(),
            [sample(1000, 10), sample(1600, 20), sample(flat, 20)]
        );
        // Two changes within one second are two samples.
        assert!(store
            .record_sample(&sample(flat, 30), Duration::ZERO)
            .unwrap());
        assert_eq!(store.samples().unwrap().len(), 4);
        // Past the cap the older half is thinned; the newest and the oldest rows stay.
        for i in 0..(MAX_SAMPLES as u64 * 2) {
            store
                .record_sample(&sample(100_000 + i, i + 100), Duration::ZERO)
                .unwrap();
        }
        let kept = store.samples().unwrap();
        assert!(kept.len() <= MAX_SAMPLES, "{}", kept.len());
        assert!(kept.len() > MAX_SAMPLES / 2, "{}", kept.len());
        assert_eq!(kept[0], sample(1000, 10));
        assert_eq!(kept.last().unwrap().t, 100_000 + MAX_SAMPLES as u64 * 2 - 1);
        assert!(kept.windows(2).all(|w| w[0].t < w[1].t));
    }

    #[test]
    fn pushes_and_gc_runs_keep_the_last_ones_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store.recent_pushes(10).unwrap().is_empty());
        for i in 0..(MAX_PUSHES as u64 + 5) {
            store
                .record_push(&Push {
                    t_ms: 1_000 + i,
                    repo: Some(format!("team/r{i}")),
                    kind: PushKind::Shard,
                    files: i,
                    bytes: i * 10,
                    new_files: Some(1),
                    new_bytes: None,
                })
                .unwrap();
        }
        let pushes = store.recent_pushes(usize::MAX).unwrap();
        assert_eq!(pushes.len(), MAX_PUSHES);
        assert_eq!(pushes[0].files, MAX_PUSHES as u64 + 4);
        assert_eq!(pushes.last().unwrap().files, 5);
        assert_eq!(store.recent_pushes(3).unwrap().len(), 3);
        let run = GcRun::failed(5, 6, "the disk is full".into());
        store.record_gc_run(&run).unwrap();
        assert_eq!(store.gc_runs(10).unwrap(), [run]);
        // A directory store has no other nodes.
        store.put_node_record("n1", b"{}").unwrap();
        assert!(store.node_records(10, 1000).unwrap().is_empty());
    }
}
