//! Whether stored xorbs are intact, and what happens when one is not: [`Store::check_xorb`]
//! (used before anything relies on a xorb), quarantine of damaged objects, and
//! [`Store::scrub`], which re-verifies everything.
//!
//! A xorb is **intact** when its stored object parses as a stored xorb whose chunks hash to the
//! chunk hashes of its footer and whose chunk hashes hash to its name. Checking that reads the
//! whole object, so it is done once per object version: the store records the object's
//! [`ObjectStamp`] when it writes a validated body or verifies an
//! object, and afterwards a `stat` that finds the same stamp is enough. Anything that changes the
//! object on disk (an in-place write, a truncation, a replacement) changes the stamp and makes the
//! next check verify the whole object again. Only silent media corruption keeps the stamp; that
//! is what [`Store::scrub`] is for (and every download checks chunk hashes end to end).
//!
//! A xorb found **damaged** (its bytes fail verification) or **missing** (the index knows it,
//! the object is gone) is recorded in the index's `damaged` table, its object moved to
//! `quarantine/`, and an error is logged naming it and how many files need it. From then on:
//!
//! - a shard whose terms or xorb blocks name it is refused (`xorb_damaged`);
//! - global dedup never answers with it; uploads do not treat it as stored;
//! - reconstructions of files that need it fail with an error naming it (no URLs to bad bytes);
//! - an upload of the same xorb stores the new copy and clears the record: re-pushing a file
//!   that contains it repairs the store, and every file that needed it works again.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use crate::backend::BackendError;
use crate::backend::{ObjectKey, ObjectStamp};
use crate::cas::Store;
use crate::error::StoreError;
use crate::footers::{verify_stored, XorbHealth, FIRST_READ_DEFAULT, STAMP_FRESH, WHOLE_READ_MAX};
use xet_format::hash::xorb_hash;
use xet_format::shard::ParsedShard;
use xet_format::xorb::XorbFooter;
use xet_format::{FileHash, ShardHash, XorbHash};
use xet_protocol::util::sync::LockAnyway as _;

/// On object storage, a registered xorb up to this size is read whole (and verified) when it
/// must be looked at: one request that also serves its files' reads (see `small_xorbs`).
const CHECK_READ_MAX: u64 = 1 << 20;

/// Progress of a [`Store::scrub`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScrubProgress {
    pub xorbs_done: u64,
    pub xorbs_total: u64,
    pub bytes_done: u64,
}

/// What a [`Store::scrub`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubReport {
    pub xorbs_checked: u64,
    pub bytes_checked: u64,
    /// Xorbs found missing or damaged (newly, or still since an earlier check), with why.
    pub damaged_xorbs: Vec<(XorbHash, String)>,
    pub shards_checked: u64,
    /// Shard files found damaged or missing, with why. The index keeps serving their files;
    /// the shard files are the store's record of what was registered.
    pub damaged_shards: Vec<(ShardHash, String)>,
    /// Checkpoints of the shard log checked whole (shared storage; [`crate::checkpoint`]).
    pub checkpoints_checked: u64,
    /// Checkpoints whose body does not hash to their name or does not parse, by name: nodes
    /// ignore them and read an older one.
    pub damaged_checkpoints: Vec<String>,
    /// Registered files that need a damaged xorb (some of them, and how many in all).
    pub affected_files: Vec<FileHash>,
    pub affected_file_count: u64,
}

impl ScrubReport {
    /// True when anything is damaged or missing.
    pub fn found_damage(&self) -> bool {
        !self.damaged_xorbs.is_empty()
            || !self.damaged_shards.is_empty()
            || !self.damaged_checkpoints.is_empty()
    }
}

/// What [`Store::read_footer`] found.
enum FooterRead {
    Footer(XorbFooter),
    Damaged(String),
    /// The object changed or disappeared while being read.
    Gone,
}

/// The footer in `tail`, the last bytes of a stored object of `xorb` (`len` bytes), checked
/// against the name (its chunk hashes and lengths hash to it); why not, if it is not one.
fn footer_of(xorb: &XorbHash, tail: &[u8], len: u64) -> Result<XorbFooter, String> {
    let footer = match XorbFooter::from_tail(tail, len) {
        Ok((footer, _)) => footer,
        Err(e) => return Err(format!("its footer does not parse: {e}")),
    };
    if footer.hash != *xorb || footer.unpacked_chunk_offsets.is_none() {
        return Err(format!(
            "its footer describes xorb {} or is not a V1 footer",
            footer.hash
        ));
    }
    // The chunk hashes and lengths every reader relies on must hash to the name.
    let computed = xorb_hash(&footer.chunk_refs());
    if computed != *xorb {
        return Err(format!(
            "its footer's chunk hashes hash to {computed}, not to its name"
        ));
    }
    Ok(footer)
}

impl Store {
    /// Whether `xorb` is stored intact (see the module documentation): one `stat` when the object
    /// is the version verified before, a whole verification otherwise. A xorb found damaged or
    /// missing is quarantined and logged here.
    pub fn check_xorb(&self, xorb: &XorbHash) -> Result<XorbHealth, StoreError> {
        Ok(self.check_xorb_stamped(xorb)?.0)
    }

    /// [`Store::check_xorb`], reading `first_read` bytes of its end if this is the node's first
    /// look at it on object storage (see [`first_read_len`]).
    pub(crate) fn check_xorb_reading(
        &self,
        xorb: &XorbHash,
        first_read: u64,
    ) -> Result<XorbHealth, StoreError> {
        Ok(self.check_xorb_stamped_reading(xorb, first_read)?.0)
    }

    /// [`Store::check_xorb`], with the stamp (length and version) of the object found intact,
    /// so that a reader needs no second request for its length.
    pub(crate) fn check_xorb_stamped(
        &self,
        xorb: &XorbHash,
    ) -> Result<(XorbHealth, Option<ObjectStamp>), StoreError> {
        self.check_xorb_stamped_reading(xorb, FIRST_READ_DEFAULT)
    }

    fn check_xorb_stamped_reading(
        &self,
        xorb: &XorbHash,
        first_read: u64,
    ) -> Result<(XorbHealth, Option<ObjectStamp>), StoreError> {
        if self.being_collected(xorb) {
            return Ok((XorbHealth::Missing, None));
        }
        if self.backend.is_shared() {
            // On object storage a look is a request: an object seen intact a moment ago is
            // taken as still there (xorbs never change; a read of one collected meanwhile
            // fails and says so).
            let seen = self.footers.lock_anyway().seen_within(xorb, STAMP_FRESH);
            if let Some((stamp, footer)) = seen {
                return Ok((XorbHealth::Intact(footer), Some(stamp)));
            }
            // A registered xorb of at most `CHECK_READ_MAX` is read whole and verified
            // instead of looked at (its footer would be another request, and its files' reads
            // then need none), once for the requests that want it at once; a small xorb read
            // whole within `small_xorbs`' time is as good.
            if self.small_xorb_read_once(xorb, CHECK_READ_MAX)?.is_some() {
                let footers = self.footers.lock_anyway();
                if let Some((stamp, footer)) = footers.latest(xorb) {
                    return Ok((XorbHealth::Intact(footer), Some(stamp)));
                }
            }
        }
        let key = ObjectKey::Xorb(*xorb);
        // On object storage, a xorb whose footer this node has not read is read from its end
        // at once: its stamp and its footer (all of it if small) in one request, not a look
        // and then reads.
        let first_contact =
            self.backend.is_shared() && self.footers.lock_anyway().any(xorb).is_none();
        let (stamp, tail) = if first_contact {
            match self.backend.read_tail(key, first_read)? {
                Some((tail, stamp)) => (Some(stamp), Some(tail)),
                None => (None, None),
            }
        } else {
            (self.backend.stamp(key)?, None)
        };
        let Some(stamp) = stamp else {
            self.forget_footer(xorb);
            if let Some((_, why)) = self.index.damaged(xorb)? {
                self.drop_copy(xorb);
                return Ok((XorbHealth::Damaged(why), None));
            }
            if self.index.xorb(xorb)?.is_some() {
                if self.backend.is_shared() && self.index.file_of_xorb(xorb)?.is_none() {
                    // No file here uses it: another process's garbage collection removed it
                    // (a push that had not registered its shard yet). Forgotten, as missing;
                    // this node's copy stays, for a registration that names it to put back.
                    self.index
                        .remove_xorbs(&std::collections::HashSet::from([*xorb]))?;
                    self.footers.lock_anyway().note_missing(xorb);
                    return Ok((XorbHealth::Missing, None));
                }
                self.drop_copy(xorb);
                let why = "its stored object is missing (deleted outside git-xet)".to_string();
                self.mark_damaged(xorb, &why)?;
                return Ok((XorbHealth::Damaged(why), None));
            }
            self.drop_copy(xorb);
            if self.backend.is_shared() {
                self.footers.lock_anyway().note_missing(xorb);
            }
            return Ok((XorbHealth::Missing, None));
        };
        if let Some(f) = self.cached_footer(xorb, &stamp) {
            return Ok((XorbHealth::Intact(f), Some(stamp)));
        }
        // On shared storage an object another node stored is adopted on its footer: that node
        // validated it whole before storing it (see store::sync).
        let verified = self.index.verified(xorb)? == Some(stamp);
        if verified || self.backend.is_shared() {
            match self.read_footer(xorb, stamp.len, tail)? {
                FooterRead::Footer(footer) => {
                    if !verified {
                        self.index.set_verified(xorb, &stamp)?;
                        if self.index.xorb(xorb)?.is_none() {
                            self.record_xorb(&footer, stamp.len)?;
                        }
                    }
                    let footer = Arc::new(footer);
                    self.cache_footer(stamp, Arc::clone(&footer));
                    return Ok((XorbHealth::Intact(footer), Some(stamp)));
                }
                FooterRead::Damaged(why) => {
                    self.mark_damaged(xorb, &why)?;
                    return Ok((XorbHealth::Damaged(why), None));
                }
                // Removed or replaced while it was read: look again.
                FooterRead::Gone => return self.check_xorb_stamped_reading(xorb, first_read),
            }
        }
        let health = self.verify_whole(xorb, stamp)?;
        let stamp = matches!(health, XorbHealth::Intact(_)).then_some(stamp);
        Ok((health, stamp))
    }

    /// Reads and verifies the whole object of `xorb`, whose stamp was `stamp` (one verification
    /// at a time, so memory stays at one object).
    fn verify_whole(&self, xorb: &XorbHash, stamp: ObjectStamp) -> Result<XorbHealth, StoreError> {
        let _one = self.verifying.lock_anyway();
        let key = ObjectKey::Xorb(*xorb);
        if let Some(f) = self.cached_footer(xorb, &stamp) {
            return Ok(XorbHealth::Intact(f));
        }
        let Some(bytes) = self.backend.read_all(key)? else {
            drop(_one);
            return self.check_xorb(xorb);
        };
        match verify_stored(xorb, &bytes) {
            Ok(footer) => {
                // Record the stamp only if the object did not change while it was read.
                if self.backend.stamp(key)? == Some(stamp) {
                    self.index.set_verified(xorb, &stamp)?;
                }
                if self.index.xorb(xorb)?.is_none() {
                    self.record_xorb(&footer, bytes.len() as u64)?;
                }
                let footer = Arc::new(footer);
                self.cache_footer(stamp, Arc::clone(&footer));
                Ok(XorbHealth::Intact(footer))
            }
            Err(why) => {
                self.mark_damaged(xorb, &why)?;
                Ok(XorbHealth::Damaged(why))
            }
        }
    }

    /// For the plan of a registered file's download: `xorb` intact, with its footer, from this
    /// node's copy of it when it keeps one a download may read ([`Store::registered_copy`]),
    /// with no request to the bucket; otherwise (or if the copy's footer does not check out, the
    /// copy then dropped) as [`Store::check_xorb`] finds it.
    pub(crate) fn check_xorb_for_download(
        &self,
        xorb: &XorbHash,
    ) -> Result<XorbHealth, StoreError> {
        let Some(len) = self.registered_copy(xorb)? else {
            return self.check_xorb(xorb);
        };
        let known = self
            .footers
            .lock_anyway()
            .latest(xorb)
            .filter(|(stamp, _)| stamp.len == len);
        if let Some((_, footer)) = known {
            return Ok(XorbHealth::Intact(footer));
        }
        // The copy's footer (none if the copy went meanwhile).
        let tail = self
            .copies
            .read_disk_copy(xorb, len.saturating_sub(4)..len)
            .and_then(|last| <[u8; 4]>::try_from(last.as_slice()).ok())
            .and_then(|last| {
                let tail_len = XorbFooter::tail_len(last).min(len);
                self.copies.read_disk_copy(xorb, len - tail_len..len)
            });
        let Some(tail) = tail else {
            return self.check_xorb(xorb);
        };
        match footer_of(xorb, &tail, len) {
            Ok(footer) => Ok(XorbHealth::Intact(Arc::new(footer))),
            Err(why) => {
                tracing::warn!(%xorb, why, "dropping a xorb's copy whose footer does not check out");
                self.drop_copy(xorb);
                self.check_xorb(xorb)
            }
        }
    }

    /// The footer at the end of the object of `xorb` (`len` bytes), checked against the name
    /// (its chunk hashes and lengths hash to it) but without reading the chunks. An I/O failure
    /// is an error, not damage: a full descriptor table must not quarantine intact objects.
    fn read_footer(
        &self,
        xorb: &XorbHash,
        len: u64,
        tail: Option<Vec<u8>>,
    ) -> Result<FooterRead, StoreError> {
        let key = ObjectKey::Xorb(*xorb);
        let range = |range: std::ops::Range<u64>| -> Result<Option<Vec<u8>>, StoreError> {
            match self.backend.read_range(key, range) {
                Ok(bytes) => Ok(bytes),
                // Shorter than its stamp said: changed since, look again.
                Err(BackendError::RangeOutOfBounds { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            }
        };
        // The object's last bytes, read already (at most `len`); the whole object if that many.
        let mut known_tail = tail.filter(|t| t.len() as u64 <= len).unwrap_or_default();
        // On object storage a small xorb is read whole in one request (not its length word,
        // then its footer) and kept for the reads of its files that tend to follow.
        let whole = if known_tail.len() as u64 == len && len > 0 {
            Some(std::mem::take(&mut known_tail))
        } else if self.backend.is_shared() && len <= WHOLE_READ_MAX {
            match range(0..len)? {
                Some(bytes) => Some(bytes),
                None => return Ok(FooterRead::Gone),
            }
        } else {
            None
        };
        let last = match &whole {
            Some(bytes) => bytes[bytes.len().saturating_sub(4)..].to_vec(),
            None if known_tail.len() >= 4 => known_tail[known_tail.len() - 4..].to_vec(),
            None => match range(len.saturating_sub(4)..len)? {
                Some(last) => last,
                None => return Ok(FooterRead::Gone),
            },
        };
        let Ok(last) = <[u8; 4]>::try_from(last.as_slice()) else {
            return Ok(FooterRead::Damaged(format!(
                "its stored object has {len} bytes, too short for a footer length"
            )));
        };
        let tail_len = XorbFooter::tail_len(last).min(len);
        let tail = match &whole {
            Some(bytes) => bytes[(len - tail_len) as usize..].to_vec(),
            None if known_tail.len() as u64 >= tail_len => {
                known_tail[known_tail.len() - tail_len as usize..].to_vec()
            }
            None => match range(len - tail_len..len)? {
                Some(tail) => tail,
                None => return Ok(FooterRead::Gone),
            },
        };
        let footer = match footer_of(xorb, &tail, len) {
            Ok(footer) => footer,
            Err(why) => return Ok(FooterRead::Damaged(why)),
        };
        if let Some(bytes) = whole {
            // Read whole anyway: kept on this node's disk too if its chunks verify (see
            // `xorb_cache`), so that its files' downloads here need no request.
            if verify_stored(xorb, &bytes).is_ok() {
                self.copies.keep_verified(*xorb, bytes);
            } else {
                self.copies.keep_in_memory(*xorb, Arc::new(bytes));
            }
        }
        Ok(FooterRead::Footer(footer))
    }

    /// Whether garbage collection is removing `xorb` right now (it counts as not stored).
    pub(crate) fn being_collected(&self, xorb: &XorbHash) -> bool {
        self.collector.doomed.lock_anyway().contains(xorb)
    }

    fn cached_footer(&self, xorb: &XorbHash, stamp: &ObjectStamp) -> Option<Arc<XorbFooter>> {
        self.footers.lock_anyway().get(xorb, stamp)
    }

    fn forget_footer(&self, xorb: &XorbHash) {
        self.footers.lock_anyway().remove(xorb);
        self.copies.forget_in_memory([xorb]);
    }

    /// Takes a damaged or missing xorb out of service: its object (if any) is moved to
    /// `quarantine/`, the index records why (the first reason found is kept), and an error is
    /// logged for the operator.
    fn mark_damaged(&self, xorb: &XorbHash, why: &str) -> Result<(), StoreError> {
        if self.index.damaged(xorb)?.is_some() {
            // Found by another request already (or the object is back): just make sure it is
            // out of the way.
            let _ = self.backend.quarantine(ObjectKey::Xorb(*xorb));
            self.forget_footer(xorb);
            self.drop_copy(xorb);
            return Ok(());
        }
        let quarantined = match self.backend.quarantine(ObjectKey::Xorb(*xorb)) {
            Ok(moved) => moved,
            Err(e) => {
                tracing::error!(%xorb, error = %e, "cannot move a damaged xorb to quarantine");
                false
            }
        };
        self.index
            .set_damaged(xorb, why, xet_protocol::util::now_unix())?;
        self.forget_footer(xorb);
        self.drop_copy(xorb);
        let only: HashSet<XorbHash> = [*xorb].into();
        let (_, files) = self.index.files_using(&only, 0).unwrap_or_default();
        tracing::error!(
            %xorb,
            reason = why,
            quarantined,
            files_affected = files,
            store = %self.root().display(),
            "stored xorb is damaged or missing: taken out of service until a client uploads it \
             again (re-push a file that contains it); run `git xet scrub` to check the whole store"
        );
        Ok(())
    }

    /// A reader found `xorb`'s bytes not what its footer says (`why`) although its stamp did not
    /// change (silent media damage): the object is verified whole again and, if it fails,
    /// quarantined like any damaged xorb. Never fails the caller: problems are logged.
    pub fn report_damage(&self, xorb: &XorbHash, why: &str) {
        tracing::error!(%xorb, reason = why, "a read found a stored xorb's bytes damaged");
        self.forget_footer(xorb);
        // The bytes may have come from this node's copy: it goes, and the storage's object is
        // verified on its own.
        self.drop_copy(xorb);
        let outcome = match self.backend.stamp(ObjectKey::Xorb(*xorb)) {
            Ok(Some(stamp)) => self.verify_whole(xorb, stamp).map(|_| ()),
            Ok(None) => self.check_xorb(xorb).map(|_| ()),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = outcome {
            tracing::error!(%xorb, error = %e, "cannot verify a xorb reported damaged");
        }
    }

    /// Sets the stored object's modification time to now and records the new stamp (the object
    /// was intact a moment ago and only its time changed).
    pub(super) fn refresh(&self, xorb: &XorbHash) -> Result<(), StoreError> {
        let key = ObjectKey::Xorb(*xorb);
        if let Err(e) = self.backend.touch(key) {
            tracing::debug!(%xorb, error = %e, "cannot refresh a stored xorb's time");
            return Ok(());
        }
        if let Some(stamp) = self.backend.stamp(key)? {
            self.index.set_verified(xorb, &stamp)?;
            let cached = self.footers.lock_anyway().any(xorb);
            if let Some(f) = cached {
                self.cache_footer(stamp, f);
            }
        }
        Ok(())
    }

    /// Re-verifies every stored xorb (whole, whatever its recorded stamp) and every stored shard,
    /// quarantining what is damaged (see the module documentation). Xorbs recorded as damaged
    /// before are checked again: one restored by hand counts as repaired.
    pub fn scrub(
        &self,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<ScrubReport, StoreError> {
        let mut report = ScrubReport::default();
        let mut all: BTreeSet<XorbHash> = BTreeSet::new();
        all.extend(self.backend.list_xorbs()?.into_iter().map(|x| x.hash));
        all.extend(self.index.xorbs()?);
        all.extend(self.index.all_damaged()?.into_iter().map(|(x, _, _)| x));
        let mut p = ScrubProgress {
            xorbs_total: all.len() as u64,
            ..ScrubProgress::default()
        };
        progress(&p);
        let mut bad: HashSet<XorbHash> = HashSet::new();
        for xorb in &all {
            let key = ObjectKey::Xorb(*xorb);
            let health = match self.backend.stamp(key)? {
                Some(stamp) => {
                    self.forget_footer(xorb);
                    report.bytes_checked += stamp.len;
                    p.bytes_done += stamp.len;
                    self.verify_whole(xorb, stamp)?
                }
                None => self.check_xorb(xorb)?,
            };
            report.xorbs_checked += 1;
            if let XorbHealth::Damaged(why) = health {
                report.damaged_xorbs.push((*xorb, why));
                bad.insert(*xorb);
            }
            p.xorbs_done += 1;
            progress(&p);
        }
        let stored: BTreeSet<ShardHash> = self.backend.list_shards()?.into_iter().collect();
        for shard in &stored {
            report.shards_checked += 1;
            let key = ObjectKey::Shard(*shard);
            let Some(bytes) = self.backend.read_all(key)? else {
                continue;
            };
            let why = if ShardHash::of(&bytes) != *shard {
                Some(format!(
                    "its {} bytes hash to {}, not to its name",
                    bytes.len(),
                    ShardHash::of(&bytes)
                ))
            } else {
                ParsedShard::parse(&bytes)
                    .err()
                    .map(|e| format!("it does not parse: {e}"))
            };
            if let Some(why) = why {
                let moved = self.backend.quarantine(key).unwrap_or(false);
                tracing::error!(%shard, reason = %why, quarantined = moved, "stored shard is damaged");
                report.damaged_shards.push((*shard, why));
            }
        }
        for shard in self.index.shards()? {
            // A registration a checkpoint holds may have had its shard object deleted.
            if !stored.contains(&shard) && !self.index.shard_in_checkpoint(&shard)? {
                report.shards_checked += 1;
                let why = "its file is missing (the index still serves its files)".to_string();
                tracing::error!(%shard, reason = %why, "stored shard is missing");
                report.damaged_shards.push((shard, why));
            }
        }
        (report.checkpoints_checked, report.damaged_checkpoints) = self.check_checkpoints()?;
        let (some, count) = self.index.files_using(&bad, 20)?;
        report.affected_files = some;
        report.affected_file_count = count;
        Ok(report)
    }
}

#[cfg(test)]
mod damage_tests {
    use crate::backend::ObjectKey;
    use crate::{Store, XorbHealth};
    use xet_format::xorb::{CompressionPolicy, XorbBuilder};

    /// Damage that leaves the object's stamp as it was (media errors) is not seen by
    /// `check_xorb`, but a reader that finds it reports it, and the xorb leaves service.
    #[test]
    fn silent_damage_reported_by_a_reader_is_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut b = XorbBuilder::new(CompressionPolicy::None);
        for i in 0..4u8 {
            let _ = b.add_chunk(&vec![i; 10_000]).unwrap();
        }
        let built = b.finish().unwrap();
        let xorb = built.hash();
        assert!(store.put_xorb(xorb, built.upload_body()).unwrap());
        // Damage the bytes, then record the damaged object's stamp as verified: what a disk
        // that silently flips a bit looks like to the store.
        let key = ObjectKey::Xorb(xorb);
        let mut bytes = store.backend.read_all(key).unwrap().unwrap();
        bytes[20_000] ^= 1;
        let tmp = store.backend.temp_path("rot");
        std::fs::write(&tmp, &bytes).unwrap();
        store.backend.replace_file(key, &tmp).unwrap();
        let stamp = store.backend.stamp(key).unwrap().unwrap();
        store.index.set_verified(&xorb, &stamp).unwrap();
        assert!(matches!(
            store.check_xorb(&xorb).unwrap(),
            XorbHealth::Intact(_)
        ));

        store.report_damage(&xorb, "chunk 2 hashes to something else");
        assert!(matches!(
            store.check_xorb(&xorb).unwrap(),
            XorbHealth::Damaged(_)
        ));
        assert!(!store.has_xorb(&xorb).unwrap());
        // And an upload repairs it.
        assert!(store.put_xorb(xorb, built.upload_body()).unwrap());
        assert!(store.has_xorb(&xorb).unwrap());
    }

    /// A first look reads all of a xorb its shard block says is small (the bound holds for
    /// incompressible chunks, the longest stored form), and just the footer of a larger one.
    #[test]
    fn a_first_look_reads_a_small_xorb_whole_and_a_larger_ones_footer() {
        use crate::footers::{first_read_len, FIRST_READ_DEFAULT, WHOLE_READ_MAX};
        use xet_format::shard::XorbInfo;

        let built = |chunks: usize, len: usize| {
            let mut b = XorbBuilder::new(CompressionPolicy::Auto);
            let mut state = 7u64;
            for _ in 0..chunks {
                let chunk: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                        (state >> 56) as u8
                    })
                    .collect();
                let _ = b.add_chunk(&chunk).unwrap();
            }
            b.finish().unwrap()
        };
        let small = built(12, 60_000);
        let block = XorbInfo::from_chunks(small.hash(), &small.footer().chunk_refs()).unwrap();
        let stored = small.stored_form().len() as u64;
        let read = first_read_len(Some(&block));
        assert!(
            read >= stored && read <= WHOLE_READ_MAX,
            "{read} for {stored}"
        );

        let large = built(40, 60_000);
        let block = XorbInfo::from_chunks(large.hash(), &large.footer().chunk_refs()).unwrap();
        let stored = large.stored_form();
        let tail_len =
            xet_format::xorb::XorbFooter::tail_len(stored[stored.len() - 4..].try_into().unwrap());
        assert_eq!(first_read_len(Some(&block)), tail_len, "just the footer");
        assert_eq!(first_read_len(None), FIRST_READ_DEFAULT);
    }
}
