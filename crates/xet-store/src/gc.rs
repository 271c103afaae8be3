//! Garbage collection: [`Store::gc`] removes xorbs that no registered file uses.
//!
//! A xorb is stored before the shard that uses it is registered (docs/cas-api.md §7), so a push that
//! is interrupted after some xorbs leaves them behind, used by nothing. They are collected only
//! once they are older than a grace period (a day by default; the command line and the server
//! accept no less than [`MIN_GRACE`]): an upload in flight usually registers its shard well
//! within it, and an upload that finds a xorb already stored refreshes its time
//! ([`Store::put_xorb`]), so its grace period starts again.
//!
//! "Used" means named by a term of a registered file. Xorbs recorded as damaged and used by
//! nothing are forgotten too. Deletion happens under the store's `collecting` lock, which shard
//! registrations (from validation to commit) and xorb uploads hold shared, so in one process no
//! shard is ever registered against a xorb being deleted and no upload is told "already stored"
//! about one. A client that deduplicated against a collected xorb (from an old dedup answer or
//! its local shard cache) has its shard refused with `unknown_xorb` and uploads the chunks
//! again. Files left in `tmp/` by interrupted uploads older than the grace period are removed as
//! well.
//!
//! **Several processes on one bucket** (server nodes, `git xet gc --storage`) share no lock, and
//! a push can take longer than any grace period between storing a xorb and registering the
//! shard that names it. What keeps a registered file whole is a handshake in which each side
//! writes before it reads what the other wrote, so that one of them always sees the other:
//!
//! 1. The collector announces each batch of at most [`SWEEP_BATCH`] xorbs it found unused in a
//!    *sweep record* (`gc/sweeps/<ms>-<id>`: the xorbs, a deadline [`SWEEP_DEADLINE`] ahead,
//!    `running`), waits [`SWEEP_NOTICE`], then reads the shard log again ([`Store::catch_up`]),
//!    drops every xorb a shard logged meanwhile names, deletes the rest before the deadline, and
//!    marks the record `done`.
//! 2. A registration stores its shard and writes its log entry, then looks at the sweep records
//!    (`Store::confirm_against_sweeps`) of a listing that started at most [`SWEEP_VIEW_FRESH`]
//!    before its log entry was written (shared by the registrations of that second, so that a
//!    push of many small files does not list the records once per shard). For each xorb of its
//!    files that a record names, it waits until that record is done (or past its deadline) and
//!    looks at the xorb in the bucket: if it is gone, the node puts it back from its own copy if
//!    it has one (`xorb_cache`), else the shard is refused with `unknown_xorb` and the client
//!    uploads the xorb again. Only then is the shard registered in the node's index and
//!    acknowledged.
//!
//! If the collector's second read of the log came after the registration's log entry, it keeps
//! the xorb. If not, the record was written before the registration's listing started: a record
//! written after that start is read again from the log no sooner than [`SWEEP_NOTICE`] later,
//! which is after the log entry (written within [`SWEEP_VIEW_FRESH`] of the listing's start).
//! So the listing finds the record, and either way no acknowledged file loses a xorb (the
//! argument compares durations each process measures on its own monotonic clock, never one
//! clock with another). Records stay [`SWEEP_RETENTION`] (a registration that
//! took longer than half of it, from validation to this check, looks at all its xorbs), and
//! nodes' clocks must agree within the shard log's window (two minutes), as catch-up needs.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::backend::ObjectKey;
use crate::cas::Store;
use crate::collector::{sweep_name_ms, unix_ms, Running, SweepRecord};
use crate::error::{ShardRejection, StoreError};
use xet_format::{FileHash, XorbHash};
use xet_protocol::util::sync::LockAnyway as _;

/// The default grace period: a day.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);

/// The shortest grace period `git xet gc` and `git xet serve --gc-grace` accept: less would
/// have collections delete the xorbs of pushes in flight, which then fail and send them
/// again (nothing registered is lost whatever the grace: see the module documentation).
pub const MIN_GRACE: Duration = Duration::from_secs(600);

/// Xorbs announced in one sweep record and deleted after it.
pub const SWEEP_BATCH: usize = 256;

/// How long after announcing a batch a collector may delete what it names: the rest waits for
/// the next collection. Registrations that need a record to be done wait at most this long.
pub const SWEEP_DEADLINE: Duration = Duration::from_secs(60);

/// How long a collector waits after its sweep record is written before it reads the shard log
/// again: registrations may rely on a listing of the sweep records that started up to
/// [`SWEEP_VIEW_FRESH`] before their log entry was written (see the module documentation).
pub const SWEEP_NOTICE: Duration = Duration::from_secs(2);

/// How old (from its start to the end of a registration's log entry) a listing of the sweep
/// records may be for the registration to rely on it: well under [`SWEEP_NOTICE`].
pub const SWEEP_VIEW_FRESH: Duration = Duration::from_secs(1);

/// How long sweep records stay in the bucket after they are written.
pub const SWEEP_RETENTION: Duration = Duration::from_secs(3600);

/// The longest a sweep record may be: its header and [`SWEEP_BATCH`] hashes fit many times.
const SWEEP_RECORD_MAX: u64 = 64 << 10;

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
    /// How long the garbage collection this process is running has been running (while it
    /// runs on shared storage, this node holds the gc lease); `None` when none runs.
    pub fn gc_running_for(&self) -> Option<Duration> {
        match self.collector.gc_clock.started_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
                    .unwrap_or(Duration::ZERO),
            ),
        }
    }

    /// When this process's last garbage collection ended (whether it succeeded or not);
    /// `None` before the first.
    pub fn gc_last_ended(&self) -> Option<SystemTime> {
        match self.collector.gc_clock.ended_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }

    /// On shared storage, takes (or renews) the lease on garbage collection for `holder` (a
    /// name for this process) for `ttl`, so that of several nodes with scheduled collection one
    /// collects: `None` when granted (always, on a directory), else the holder of the running
    /// lease and when it ends. May wait a second: not for async workers.
    pub fn take_gc_lease(
        &self,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<(String, SystemTime)>, StoreError> {
        self.take_lease("gc", holder, ttl)
    }

    /// [`Self::take_gc_lease`] for the job `name` (`gc`, `checkpoint`).
    pub fn take_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<(String, SystemTime)>, StoreError> {
        // A directory has one process: always granted.
        let Some(bucket) = self.backend.shared() else {
            return Ok(None);
        };
        Ok(bucket
            .take_lease(name, holder, ttl)?
            .map(|(who, end_ms)| (who, SystemTime::UNIX_EPOCH + Duration::from_millis(end_ms))))
    }

    /// Removes xorbs no registered file uses, once older than `options.grace` (see the module
    /// documentation).
    pub fn gc(&self, options: GcOptions) -> Result<GcReport, StoreError> {
        let _running = Running::start(&self.collector.gc_clock);
        // What the index does not know yet must not look unused: on shared storage, every
        // shard in storage is registered first (once per opening), then what was logged since.
        if self.catching_up() {
            self.catch_up_all()?;
        } else {
            self.catch_up()?;
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
        {
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
            if !options.dry_run {
                self.remove_doomed(&forgotten, &[], None)?;
            }
        }
        for batch in candidates.chunks(SWEEP_BATCH) {
            let (removed, bytes) = self.sweep(batch, now, &options)?;
            report.xorbs_removed += removed;
            report.bytes_freed += bytes;
        }
        if !options.dry_run {
            // Spool and staging files of uploads in flight are younger than an hour whatever
            // the grace period.
            let (files, bytes) = self
                .backend
                .clean_temp(options.grace.max(Duration::from_secs(3600)))?;
            report.temp_files_removed = files;
            report.temp_bytes_freed = bytes;
            self.prune_sweeps();
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

    /// Decides and deletes one batch of candidates: on shared storage announced in a sweep
    /// record first and checked against the shard log read after it (see the module
    /// documentation). How many were removed (or would be, in a dry run), and their bytes.
    fn sweep(
        &self,
        batch: &[crate::backend::ListedXorb],
        now: SystemTime,
        options: &GcOptions,
    ) -> Result<(u64, u64), StoreError> {
        let announced = match options.dry_run {
            true => None,
            false => self.announce_sweep(batch)?,
        };
        let result = (|| {
            let deadline = match &announced {
                Some((_, record)) => {
                    // Registrations whose listing of the records started before this one was
                    // written have logged their shards by now; then every shard logged before
                    // the announcement is registered from here on.
                    std::thread::sleep(SWEEP_NOTICE);
                    self.catch_up()?;
                    Some(record.deadline_ms)
                }
                None => None,
            };
            let Some(_exclusive) = self.collection_lock() else {
                tracing::warn!(
                    "garbage collection stopped: uploads kept the store busy for 10 minutes"
                );
                return Ok((0, 0));
            };
            let used = self.index.referenced_xorbs()?;
            let doomed = self.doomed(batch.to_vec(), &used, now, options)?;
            if options.dry_run {
                return Ok((doomed.len() as u64, doomed.iter().map(|(_, len)| len).sum()));
            }
            let hashes: Vec<XorbHash> = doomed.iter().map(|(hash, _)| *hash).collect();
            let entries: HashSet<XorbHash> = hashes.iter().copied().collect();
            let removed = self.remove_doomed(&entries, &hashes, deadline)?;
            let bytes = doomed.iter().take(removed).map(|(_, len)| len).sum();
            Ok((removed as u64, bytes))
        })();
        if let (Some((name, mut record)), Some(bucket)) = (announced, self.backend.shared()) {
            record.done = true;
            if let Err(e) = bucket.put_sweep(&name, record.to_text().as_bytes()) {
                // Registrations that wait for it stop waiting at its deadline.
                tracing::warn!(record = %name, error = %e, "cannot mark a sweep record done");
            }
        }
        result
    }

    /// On shared storage, writes the sweep record that announces `batch` (see the module
    /// documentation): its name and contents. `None` on unshared storage.
    fn announce_sweep(
        &self,
        batch: &[crate::backend::ListedXorb],
    ) -> Result<Option<(String, SweepRecord)>, StoreError> {
        let Some(bucket) = self.backend.shared() else {
            return Ok(None);
        };
        let written_ms = unix_ms(SystemTime::now());
        let name = format!("{written_ms:016}-{}", xet_protocol::random_hex(8));
        let record = SweepRecord {
            holder: self.collector.sweeper_id.clone(),
            deadline_ms: written_ms.saturating_add(SWEEP_DEADLINE.as_millis() as u64),
            done: false,
            xorbs: Some(batch.iter().map(|x| x.hash).collect()),
        };
        bucket.put_sweep(&name, record.to_text().as_bytes())?;
        Ok(Some((name, record)))
    }

    /// Removes the sweep records older than [`SWEEP_RETENTION`]. Failures are logged: the
    /// next collection tries again.
    fn prune_sweeps(&self) {
        let Some(bucket) = self.backend.shared() else {
            return;
        };
        let names = match bucket.list_sweeps() {
            Ok(names) => names,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the sweep records to prune them");
                return;
            }
        };
        let oldest_kept =
            unix_ms(SystemTime::now()).saturating_sub(SWEEP_RETENTION.as_millis() as u64);
        for name in names {
            if sweep_name_ms(&name).is_some_and(|ms| ms < oldest_kept) {
                if let Err(e) = bucket.remove_sweep(&name) {
                    tracing::warn!(record = %name, error = %e, "cannot remove an old sweep record");
                }
            }
        }
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
    /// With a `deadline` (Unix milliseconds; a sweep record's), objects not deleted by then
    /// are left for the next collection. How many objects were deleted.
    fn remove_doomed(
        &self,
        entries: &HashSet<XorbHash>,
        doomed: &[XorbHash],
        deadline: Option<u64>,
    ) -> Result<usize, StoreError> {
        self.collector
            .doomed
            .lock_anyway()
            .extend(entries.iter().copied());
        let result = self.remove_collected(entries, doomed, deadline);
        self.collector.doomed.lock_anyway().clear();
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
        deadline: Option<u64>,
    ) -> Result<usize, StoreError> {
        if entries.is_empty() {
            return Ok(0);
        }
        self.index.remove_xorbs(entries)?;
        {
            let mut cache = self.footers.lock_anyway();
            for x in entries {
                cache.remove(x);
            }
        }
        self.copies.forget_in_memory(entries);
        for (i, x) in objects.iter().enumerate() {
            if deadline.is_some_and(|d| unix_ms(SystemTime::now()) >= d) {
                tracing::warn!(
                    left = objects.len() - i,
                    "garbage collection left xorbs for the next run: its sweep's deadline passed"
                );
                return Ok(i);
            }
            self.drop_copy(x);
            self.backend.remove(ObjectKey::Xorb(*x))?;
        }
        Ok(objects.len())
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

/// How often a registration looks again at a running sweep record it waits for.
const SWEEP_POLL: Duration = Duration::from_millis(250);

impl Store {
    /// The check a registration makes after it stored and logged its shard, on shared storage
    /// (see the module documentation): every xorb of `named` (with the file and term that name
    /// it first, for the error) that a sweep record names is looked at in storage once the
    /// sweep is over, put back from this node's copy if it is gone, else the shard is refused
    /// with `unknown_xorb`. `validated` is when the registration started checking xorbs.
    /// `Ok(true)` when a xorb was put back: other processes may have refused the shard while
    /// it was gone, so the caller logs it again and checks again.
    pub(crate) fn confirm_against_sweeps(
        &self,
        named: &HashMap<XorbHash, (FileHash, usize)>,
        validated: Instant,
        logged: Option<Instant>,
    ) -> Result<bool, StoreError> {
        if !self.backend.is_shared() || named.is_empty() {
            return Ok(false);
        }
        // After a log entry written at `logged`, a listing that started up to
        // SWEEP_VIEW_FRESH before it will do; otherwise one that starts now.
        let not_before = match logged {
            Some(at) => at.checked_sub(SWEEP_VIEW_FRESH).unwrap_or(at),
            None => Instant::now(),
        };
        let records = self.sweep_records(not_before)?;
        let mut suspect: HashSet<XorbHash> = HashSet::new();
        if validated.elapsed() >= SWEEP_RETENTION / 2 {
            // Records of sweeps since the validation may be gone already: look at everything.
            suspect.extend(named.keys().copied());
        }
        for (name, record) in &records {
            // This process's own collections wait for its registrations (the collection lock).
            if record.holder == self.collector.sweeper_id {
                continue;
            }
            let hits: Vec<XorbHash> = named.keys().filter(|x| record.names(x)).copied().collect();
            if hits.is_empty() {
                continue;
            }
            if !record.settled(unix_ms(SystemTime::now())) {
                self.wait_for_sweep(name, hits[0])?;
            }
            suspect.extend(hits);
        }
        let mut restored = false;
        let mut lost = None;
        // Every one is looked at (and forgotten as seen), so that the client's next upload of
        // any that are gone is stored, not answered "already stored".
        for xorb in suspect {
            self.forget_seen(&xorb);
            if self.backend.stamp(ObjectKey::Xorb(xorb))?.is_some() {
                continue;
            }
            if self.restore_from_copy(&xorb) {
                restored = true;
                continue;
            }
            let (file, term) = named[&xorb];
            tracing::warn!(%xorb, %file, "a shard names a xorb garbage collection removed: refused");
            lost.get_or_insert(ShardRejection::UnknownXorb { file, term, xorb });
        }
        match lost {
            Some(rejection) => {
                // The client sends the shard's xorbs again: each is looked at in the bucket
                // then, not taken as there from a look before the refusal (a collection that
                // was still deleting may have removed another since).
                for xorb in named.keys() {
                    self.forget_seen(xorb);
                }
                Err(rejection.into())
            }
            None => Ok(restored),
        }
    }

    /// The sweep records of a listing that started at `not_before` or later: the last one if it
    /// did, else a new one (concurrent callers share it).
    fn sweep_records(
        &self,
        not_before: Instant,
    ) -> Result<Vec<(String, Arc<SweepRecord>)>, StoreError> {
        let Some(bucket) = self.backend.shared() else {
            return Ok(Vec::new());
        };
        let mut view = self.collector.sweeps.lock_anyway();
        if view.listed_at.is_none_or(|t| t < not_before) {
            let started = Instant::now();
            let names = bucket.list_sweeps()?;
            let mut records = HashMap::with_capacity(names.len());
            for name in names {
                let known = view.records.get(&name).filter(|r| r.done).cloned();
                let record = match known {
                    Some(r) => r,
                    None => Arc::new(self.read_sweep_record(&name)?),
                };
                records.insert(name, record);
            }
            view.records = records;
            view.listed_at = Some(started);
        }
        let mut out: Vec<(String, Arc<SweepRecord>)> = view
            .records
            .iter()
            .map(|(n, r)| (n.clone(), Arc::clone(r)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Sweep record `name`; one that is gone counts as done, one that cannot be read as
    /// naming every xorb (and done: nothing says when it ends).
    fn read_sweep_record(&self, name: &str) -> Result<SweepRecord, StoreError> {
        let settled = |xorbs| SweepRecord {
            holder: String::new(),
            deadline_ms: 0,
            done: true,
            xorbs,
        };
        let read = match self.backend.shared() {
            Some(bucket) => bucket.read_sweep(name, SWEEP_RECORD_MAX)?,
            None => None,
        };
        Ok(match read {
            None => settled(Some(HashSet::new())),
            Some(bytes) => {
                let parsed = (bytes.len() as u64 <= SWEEP_RECORD_MAX)
                    .then(|| SweepRecord::parse(&bytes))
                    .flatten();
                parsed.unwrap_or_else(|| {
                    tracing::warn!(record = %name, "a sweep record cannot be read: xorbs are looked at");
                    settled(None)
                })
            }
        })
    }

    /// Waits until sweep record `name` is settled (see [`SweepRecord::settled`]), looking at it
    /// every [`SWEEP_POLL`], for at most [`SWEEP_DEADLINE`]; then the registration is answered
    /// "busy, try again" naming `xorb`.
    fn wait_for_sweep(&self, name: &str, xorb: XorbHash) -> Result<(), StoreError> {
        let started = Instant::now();
        loop {
            std::thread::sleep(SWEEP_POLL);
            let record = self.read_sweep_record(name)?;
            if record.settled(unix_ms(SystemTime::now())) {
                if let Some(r) = self.collector.sweeps.lock_anyway().records.get_mut(name) {
                    *r = Arc::new(record);
                }
                return Ok(());
            }
            if started.elapsed() >= SWEEP_DEADLINE {
                return Err(StoreError::SweepInProgress { xorb });
            }
        }
    }

    /// [`Self::forget_seen`] for every xorb `shard` names (its terms and its xorb blocks), on
    /// shared storage: after a refusal for a lost xorb, the rest may be going too.
    pub(crate) fn forget_seen_of(&self, shard: &xet_format::shard::Shard) {
        if !self.backend.is_shared() {
            return;
        }
        let terms = shard.files.iter().flat_map(|f| f.terms.iter());
        for xorb in terms
            .map(|t| t.xorb_hash)
            .chain(shard.xorbs.iter().map(|b| b.hash))
        {
            self.forget_seen(&xorb);
        }
    }

    /// Forgets what this process saw of `xorb` lately (its footer, its bytes in memory), so
    /// that the next look asks storage.
    fn forget_seen(&self, xorb: &XorbHash) {
        self.footers.lock_anyway().remove(xorb);
        self.copies.forget_in_memory([xorb]);
    }

    /// Puts `xorb` back into storage from this node's copy of it, validated as an upload is;
    /// `false` if there is no copy or it fails.
    pub(crate) fn restore_from_copy(&self, xorb: &XorbHash) -> bool {
        let Some(copy) = self.copies.disk_copy(xorb) else {
            return false;
        };
        let Some(bytes) = self.copies.read_disk_copy(xorb, 0..copy.len) else {
            return false;
        };
        match self.put_xorb(*xorb, &bytes) {
            Ok(_) => {
                tracing::warn!(%xorb, "put a collected xorb back from this node's copy: a shard registered meanwhile names it");
                true
            }
            Err(e) => {
                tracing::warn!(%xorb, error = %e, "cannot put a collected xorb back from this node's copy");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::CLOCK_SKEW_MS;

    fn xorb(n: u8) -> XorbHash {
        XorbHash::from_bytes([n; 32])
    }

    #[test]
    fn the_clock_of_garbage_collection_says_when_it_ran() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.gc_running_for(), None);
        assert_eq!(store.gc_last_ended(), None);
        let before = SystemTime::now() - Duration::from_millis(1);
        {
            let _running = Running::start(&store.collector.gc_clock);
            assert!(store
                .gc_running_for()
                .is_some_and(|d| d < Duration::from_secs(60)));
        }
        assert_eq!(store.gc_running_for(), None);
        let options = GcOptions {
            grace: Duration::from_secs(3600),
            dry_run: true,
        };
        store.gc(options).unwrap();
        assert_eq!(store.gc_running_for(), None);
        assert!(store.gc_last_ended().is_some_and(|t| t >= before));
    }

    #[test]
    fn a_sweep_record_reads_back_as_written() {
        let record = SweepRecord {
            holder: "0123456789abcdef".into(),
            deadline_ms: 1_700_000_060_000,
            done: false,
            xorbs: Some([xorb(1), xorb(2)].into_iter().collect()),
        };
        let text = record.to_text();
        assert!(
            text.starts_with("git-xet sweep 1\nholder 0123456789abcdef\n"),
            "{text}"
        );
        assert_eq!(SweepRecord::parse(text.as_bytes()), Some(record.clone()));
        let done = SweepRecord {
            done: true,
            ..record
        };
        assert_eq!(SweepRecord::parse(done.to_text().as_bytes()), Some(done));
    }

    #[test]
    fn anything_else_is_not_a_sweep_record() {
        let good = SweepRecord {
            holder: "h".into(),
            deadline_ms: 5,
            done: true,
            xorbs: Some([xorb(3)].into_iter().collect()),
        }
        .to_text();
        for bad in [
            String::new(),
            "git-xet sweep 2\n".to_string(),
            good.replace("state done", "state maybe"),
            good.replace("deadline 5", "deadline soon"),
            good.replace("holder h", "owner h"),
            format!("{good}not a hash\n"),
            good[..good.len() - 10].to_string(),
        ] {
            assert_eq!(SweepRecord::parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(SweepRecord::parse(&[0xff, 0xfe]), None);
    }

    #[test]
    fn a_record_names_its_xorbs_and_an_unreadable_one_names_all() {
        let record = SweepRecord {
            holder: "h".into(),
            deadline_ms: 10_000,
            done: false,
            xorbs: Some([xorb(1)].into_iter().collect()),
        };
        assert!(record.names(&xorb(1)) && !record.names(&xorb(2)));
        let unreadable = SweepRecord {
            xorbs: None,
            ..record.clone()
        };
        assert!(unreadable.names(&xorb(2)));
        // Running until its deadline and the clocks' allowance have passed; done at once.
        assert!(!record.settled(10_000 + CLOCK_SKEW_MS));
        assert!(record.settled(10_001 + CLOCK_SKEW_MS));
        assert!(SweepRecord {
            done: true,
            ..record
        }
        .settled(0));
    }

    #[test]
    fn sweep_names_carry_their_time() {
        assert_eq!(
            sweep_name_ms("0001700000000000-0123456789abcdef"),
            Some(1_700_000_000_000)
        );
        for bad in [
            "",
            "17-ab",
            "0001700000000000-",
            "000170000000000x-ab",
            "nodash",
        ] {
            assert_eq!(sweep_name_ms(bad), None, "{bad}");
        }
    }
}
