//! Garbage collection: [`Store::gc`] removes xorbs that no registered file uses.
//!
//! A xorb is stored before the shard that uses it is registered (docs/cas-api.md §7), so a push that
//! is interrupted after some xorbs leaves them behind, used by nothing. They are collected only
//! once they are older than a grace period (a day by default): an upload in flight registers its
//! shard well within it, and an upload that finds a xorb already stored refreshes its time
//! ([`Store::put_xorb`]), so its grace period starts again.
//!
//! "Used" means named by a term of a registered file. Xorbs recorded as damaged and used by
//! nothing are forgotten too. Deletion happens under the store's `collecting` lock, which shard
//! registrations (from validation to commit) and xorb uploads hold shared, so no shard is ever
//! registered against a xorb being deleted and no upload is told "already stored" about one. A client that deduplicated against a collected xorb (from an old dedup
//! answer or its local shard cache) has its shard refused with `unknown_xorb` and uploads the
//! chunks again. Files left in `tmp/` by interrupted uploads older than the grace period are
//! removed as well.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use crate::backend::ObjectKey;
use crate::cas::{Store, StoreError};
use xet_format::XorbHash;

/// The default grace period: a day.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);

/// How [`Store::gc`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    /// Unused xorbs younger than this are kept.
    pub grace: Duration,
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        Self {
            grace: DEFAULT_GRACE,
            dry_run: false,
        }
    }
}

/// What [`Store::gc`] did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Xorbs on disk in all, and how many registered files use some xorb.
    pub xorbs_stored: u64,
    pub xorbs_used: u64,
    /// Unused xorbs removed, and their bytes.
    pub xorbs_removed: u64,
    pub bytes_freed: u64,
    /// Unused xorbs kept because they are younger than the grace period.
    pub xorbs_young: u64,
    pub bytes_young: u64,
    /// Index entries of unused xorbs no longer on disk (damaged, or deleted by hand), dropped.
    pub entries_dropped: u64,
    /// Leftover files of interrupted uploads removed from `tmp/`, and their bytes.
    pub temp_files_removed: u64,
    pub temp_bytes_freed: u64,
    pub dry_run: bool,
}

impl Store {
    /// On shared storage, takes (or renews) the lease on garbage collection for `holder` (a
    /// name for this process) for `ttl`, so that of several nodes with scheduled collection one
    /// collects: `None` when granted (always, on a directory), else the holder of the running
    /// lease and when it ends. May wait a second: not for async workers.
    pub fn take_gc_lease(
        &self,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<(String, SystemTime)>, StoreError> {
        Ok(self
            .backend
            .take_lease("gc", holder, ttl)?
            .map(|(who, end_ms)| (who, SystemTime::UNIX_EPOCH + Duration::from_millis(end_ms))))
    }

    /// Removes xorbs no registered file uses, once older than `options.grace` (see the module
    /// documentation).
    pub fn gc(&self, options: GcOptions) -> Result<GcReport, StoreError> {
        // What the index does not know yet must not look unused: on shared storage, every
        // shard in storage is registered first (once per opening).
        if self.catching_up() {
            self.catch_up_all()?;
        }
        let mut report = GcReport {
            dry_run: options.dry_run,
            ..GcReport::default()
        };
        let now = SystemTime::now();
        let listed = self.backend.list_xorbs()?;
        report.xorbs_stored = listed.len() as u64;
        // Candidates first, without blocking uploads; then decided again under the lock.
        let used = self.index.referenced_xorbs()?;
        let old_enough = |modified: SystemTime| {
            now.duration_since(modified).unwrap_or(Duration::ZERO) >= options.grace
        };
        let mut candidates = Vec::new();
        for x in &listed {
            if used.contains_key(&x.hash) {
                continue;
            }
            if old_enough(x.modified) {
                candidates.push(*x);
            } else {
                report.xorbs_young += 1;
                report.bytes_young += x.len;
            }
        }
        let Some(_exclusive) = self.collection_lock() else {
            tracing::warn!(
                "garbage collection skipped: uploads kept the store busy for 10 minutes"
            );
            return Ok(report);
        };
        let used = self.index.referenced_xorbs()?;
        report.xorbs_used = listed.iter().filter(|x| used.contains_key(&x.hash)).count() as u64;
        let forgotten = self.forgotten_entries(&used)?;
        report.entries_dropped = forgotten.len() as u64;
        let doomed = self.doomed(candidates, &used, now, &options)?;
        report.xorbs_removed = doomed.len() as u64;
        report.bytes_freed = doomed.iter().map(|(_, len)| len).sum();
        let doomed: Vec<XorbHash> = doomed.into_iter().map(|(hash, _)| hash).collect();
        if !options.dry_run {
            let mut entries: HashSet<XorbHash> = doomed.iter().copied().collect();
            entries.extend(forgotten);
            self.remove_doomed(&entries, &doomed)?;
        }
        drop(_exclusive);
        if !options.dry_run {
            // Spool and staging files of uploads in flight are younger than an hour whatever
            // the grace period.
            let (files, bytes) = self
                .backend
                .clean_temp(options.grace.max(Duration::from_secs(3600)))?;
            report.temp_files_removed = files;
            report.temp_bytes_freed = bytes;
        }
        if report.xorbs_removed > 0 || report.entries_dropped > 0 {
            tracing::info!(
                removed = report.xorbs_removed,
                bytes_freed = report.bytes_freed,
                entries_dropped = report.entries_dropped,
                dry_run = options.dry_run,
                "garbage collection"
            );
        }
        Ok(report)
    }

    /// The candidates to remove (hash and length) that are still unused, decided under the
    /// collection lock: unless `options.dry_run`, each still stored at its listed length and
    /// still older than the grace period (an upload since the listing refreshed it; uploads
    /// wait for the lock, so nothing changes from here on).
    fn doomed(
        &self,
        candidates: Vec<crate::backend::ListedXorb>,
        used: &std::collections::HashMap<XorbHash, impl Sized>,
        now: SystemTime,
        options: &GcOptions,
    ) -> Result<Vec<(XorbHash, u64)>, StoreError> {
        let mut doomed = Vec::new();
        for x in candidates {
            if used.contains_key(&x.hash) {
                continue;
            }
            if !options.dry_run {
                match self.backend.stamp(ObjectKey::Xorb(x.hash))? {
                    Some(s) if s.len == x.len => {}
                    _ => continue,
                }
                if !self.still_old(&x.hash, now, options.grace)? {
                    continue;
                }
            }
            doomed.push((x.hash, x.len));
        }
        Ok(doomed)
    }

    /// Index entries of unused xorbs whose objects are gone (damaged and quarantined, or
    /// deleted by hand), decided under the collection lock on the objects as they are now.
    fn forgotten_entries(
        &self,
        used: &std::collections::HashMap<XorbHash, impl Sized>,
    ) -> Result<HashSet<XorbHash>, StoreError> {
        let mut forgotten = HashSet::new();
        for x in self
            .index
            .xorbs()?
            .into_iter()
            .chain(self.index.all_damaged()?.into_iter().map(|(x, _, _)| x))
        {
            if !used.contains_key(&x) && self.backend.stamp(ObjectKey::Xorb(x))?.is_none() {
                forgotten.insert(x);
            }
        }
        Ok(forgotten)
    }

    /// Removes the index `entries` and the stored objects of `doomed`, under the collection
    /// lock. Readers (downloads, dedup answers) do not take the lock: while the entries and
    /// files go, these xorbs count as not stored, so none is verified and indexed again.
    fn remove_doomed(
        &self,
        entries: &HashSet<XorbHash>,
        doomed: &[XorbHash],
    ) -> Result<(), StoreError> {
        self.doomed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(entries.iter().copied());
        let result = self.remove_collected(entries, doomed);
        self.doomed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        result
    }

    /// The collection lock, taken without making uploads queue behind a waiting collector: tries
    /// for up to ten minutes (uploads hold it shared only briefly), `None` if it never got it.
    fn collection_lock(&self) -> Option<std::sync::RwLockWriteGuard<'_, ()>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        loop {
            match self.collecting.try_write() {
                Ok(guard) => return Some(guard),
                Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {
                    if std::time::Instant::now() >= deadline {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// Drops the index entries of `entries`, then deletes the objects of `objects`. The index
    /// first: a crash in between leaves files no entry names, which the next collection
    /// removes, rather than entries whose files are gone.
    fn remove_collected(
        &self,
        entries: &HashSet<XorbHash>,
        objects: &[XorbHash],
    ) -> Result<(), StoreError> {
        self.index.remove_xorbs(entries)?;
        {
            let mut cache = self.footers.lock().unwrap_or_else(|p| p.into_inner());
            for x in entries {
                cache.remove(x);
            }
            let mut small = self.small_xorbs.lock().unwrap_or_else(|p| p.into_inner());
            for x in entries {
                small.remove(x);
            }
        }
        for x in objects {
            self.drop_copy(x);
            self.backend.remove(ObjectKey::Xorb(*x))?;
        }
        Ok(())
    }

    /// Whether the stored object of `xorb` was last written at least `grace` before `now` (not
    /// refreshed by an upload since it was listed).
    fn still_old(
        &self,
        xorb: &XorbHash,
        now: SystemTime,
        grace: Duration,
    ) -> Result<bool, StoreError> {
        let listed = self.backend.modified(ObjectKey::Xorb(*xorb))?;
        Ok(listed.is_some_and(|m| now.duration_since(m).unwrap_or(Duration::ZERO) >= grace))
    }
}
