//! Keeping a shard cache within its size: statistics, least-recently-used pruning, expired
//! keyed shards, leftover temporary files, and removing shards that name given xorbs.

use std::fs::{self};
use std::io;
use std::time::{Duration, SystemTime};

use super::*;
use xet_format::shard::ShardLayout;
use xet_format::{ShardHash, XorbHash};

pub(super) fn expired_long_ago(layout: &ShardLayout, now: u64) -> bool {
    !layout.meta.hmac_key.is_zero()
        && now > layout.meta.key_expiry.saturating_add(EXPIRY_BUFFER_SECS)
}

impl ShardCache {
    /// Deletes every cached shard that lists any of `xorbs` in its xorb section: the server said
    /// it no longer has them intact, so no later upload may deduplicate against them. Returns
    /// how many shards were deleted. Shards that cannot be read are left to pruning.
    pub(crate) fn forget_xorbs(&self, xorbs: &[XorbHash]) -> Result<usize, CacheError> {
        if xorbs.is_empty() {
            return Ok(0);
        }
        let mut report = PruneReport::default();
        let mut forgotten = Vec::new();
        for entry in self.scan()? {
            let Ok(shard) = read_shard(&entry.path, &entry.hash) else {
                continue;
            };
            if shard.xorbs.iter().any(|x| xorbs.contains(&x.hash))
                && self.remove(&entry, &mut report)
            {
                forgotten.push(entry.hash);
            }
        }
        let mut state = self.state();
        for hash in &forgotten {
            state.forget(hash);
        }
        if let Some(bytes) = &mut state.approx_bytes {
            *bytes = bytes.saturating_sub(report.removed_bytes);
        }
        Ok(forgotten.len())
    }

    /// The number and total size of the cached shards.
    pub fn stats(&self) -> Result<CacheStats, CacheError> {
        let entries = self.scan()?;
        Ok(CacheStats {
            dir: self.dir.clone(),
            shards: entries.len() as u64,
            bytes: entries.iter().map(|e| e.len).sum(),
        })
    }

    /// Deletes temporary files left by crashed writers, damaged shards and keyed shards whose
    /// key expired more than [`EXPIRY_BUFFER_SECS`] ago, then the least recently used shards
    /// until at most `max_bytes` remain. Files other processes delete meanwhile are skipped.
    pub fn prune(&self, max_bytes: u64) -> Result<PruneReport, CacheError> {
        self.prune_keeping(max_bytes, None)
    }

    /// [`Self::prune`], never deleting `keep` for its size (the shard just inserted, whose
    /// modification time may tie with older ones on a coarse file system clock).
    pub(super) fn prune_keeping(
        &self,
        max_bytes: u64,
        keep: Option<&ShardHash>,
    ) -> Result<PruneReport, CacheError> {
        self.remove_temp_files(Some(STALE_TEMP));
        let now = xet_protocol::util::now_unix();
        let mut report = PruneReport::default();
        let mut removed = Vec::new();
        let mut live = Vec::new();
        for entry in self.scan()? {
            match read_layout(&entry.path) {
                Ok(layout) if expired_long_ago(&layout, now) => {
                    if self.remove(&entry, &mut report) {
                        removed.push(entry.hash);
                    }
                }
                Ok(_) => live.push(entry),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    discard(&entry.path, &e);
                    removed.push(entry.hash);
                }
            }
        }
        live.sort_by(|a, b| a.mtime.cmp(&b.mtime).then_with(|| a.hash.cmp(&b.hash)));
        let mut total: u64 = live.iter().map(|e| e.len).sum();
        let mut kept = live.len() as u64;
        for entry in &live {
            if total <= max_bytes {
                break;
            }
            if Some(&entry.hash) == keep {
                continue;
            }
            if self.remove(entry, &mut report) {
                removed.push(entry.hash);
                total -= entry.len;
                kept -= 1;
            }
        }
        report.kept_shards = kept;
        report.kept_bytes = total;
        let mut state = self.state();
        for hash in &removed {
            state.forget(hash);
        }
        state.approx_bytes = Some(total);
        Ok(report)
    }

    /// Deletes one shard file, counting it in `report` if this call deleted it. Returns
    /// whether the file is gone (deleted by this call or, before it, by another process).
    pub(super) fn remove(&self, entry: &Entry, report: &mut PruneReport) -> bool {
        match fs::remove_file(&entry.path) {
            Ok(()) => {
                report.removed_shards += 1;
                report.removed_bytes += entry.len;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => {
                tracing::warn!(path = %entry.path.display(), error = %e, "cannot delete a cached shard");
                false
            }
        }
    }

    /// Deletes temporary files (only those older than `older_than`, if given).
    pub(super) fn remove_temp_files(&self, older_than: Option<Duration>) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let is_temp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with('.') && n.ends_with(TEMP_SUFFIX));
            if !is_temp {
                continue;
            }
            let old_enough = older_than.is_none_or(|age| {
                entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| now.duration_since(m).ok())
                    .is_some_and(|d| d > age)
            });
            if old_enough {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// Deletes every cached shard (and temporary file) and the directory itself if it is then
    /// empty; forgets the in-memory index.
    pub fn clear(&self) -> Result<PruneReport, CacheError> {
        self.remove_temp_files(None);
        let mut report = PruneReport::default();
        for entry in self.scan()? {
            self.remove(&entry, &mut report);
        }
        let left = self.stats()?;
        report.kept_shards = left.shards;
        report.kept_bytes = left.bytes;
        if left.shards == 0 {
            // Fails harmlessly if another process wrote meanwhile or left other files.
            let _ = fs::remove_dir(&self.dir);
        }
        let mut state = self.state();
        *state = State::default();
        Ok(report)
    }
}
