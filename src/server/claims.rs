//! Checking the SHA-256 claims of registered shards, in the background.
//!
//! A shard's `FileMetadataExt` says which SHA-256 (Git LFS oid) its file has, and any client
//! with write access could name any oid. Until the server has hashed the file itself, the
//! mapping is only a claim (see `xet_store::index`): downloads may use it, because git-lfs checks
//! the SHA-256 of everything it downloads, but nothing that would let an upload be skipped
//! trusts it, so a wrong claim can never keep the right content out. This job rebuilds each
//! claimed file from its xorbs, hashes it, and settles the claim: a claim that holds becomes the
//! oid's mapping, a wrong one is dropped and logged.
//!
//! That is what lets the agent skip hashing what git-lfs already hashed (git-lfs names its
//! objects by their SHA-256): the server answers oid lookups with `X-Xet-Checks-Sha256: 1`, and
//! an agent that sees it sends the oid as a claim instead of hashing the file a second time.
//!
//! Claims on small files are checked before the shard upload is answered ([`check_now`], up to
//! [`CHECK_NOW_BYTES`] per shard), so that an object pushed a moment ago is a checked mapping
//! when the next push or `git xet prune` asks; larger ones wait for the job, seconds later.
//!
//! Fairness: claims are checked in turns that go round the uploaders (the repository of a
//! scoped credential; server-wide credentials count as one), each turn hashing at most
//! [`SLICE_BYTES`] of one claimed file, so nobody's many or huge claims hold up another's. Each
//! uploader may have at most `xet_store::cas::MAX_PENDING_CLAIMS` claims and
//! `MAX_PENDING_CLAIM_BYTES` bytes of files waiting; a shard that would make more is refused
//! for now (429).
//!
//! Resources: one slice at a time on one blocking thread, a file streamed through the hasher
//! (memory: the download pipeline's read-ahead, of pieces of at most [`FETCH_BYTES`]), a pass at most every [`PASS_INTERVAL`]. A
//! claim whose file cannot be rebuilt (a xorb lost or damaged) is tried again after
//! [`RETRY_AFTER`]. On shared storage a claim is checked once in the cluster: a node that finds
//! it holds records that in the bucket, and a node that catches up with the shard settles the
//! claim from that record instead of rebuilding the file (each node keeps its own index).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::Digest as _;

use super::metrics::StorageOperation;
use xet_client::pipeline::download::{write_file, write_plan};
use xet_format::{FileHash, LfsOid};
use xet_store::{Store, StoreError};

pub use xet_protocol::wire::CHECKS_SHA256_HEADER;

/// How often the job looks for new claims, by default.
pub(crate) const PASS_INTERVAL: Duration = Duration::from_secs(1);

/// How long a claim whose file could not be rebuilt waits before it is tried again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(600);

/// Files up to this size are checked at once ([`check_now`]).
pub(crate) const CHECK_NOW_MAX_FILE: u64 = 8 << 20;

/// At most this many bytes of files are checked at once per shard; the rest wait for the job.
pub(crate) const CHECK_NOW_BYTES: u64 = 64 << 20;

/// Bytes of one claimed file hashed in one turn: a larger file is hashed over several turns,
/// between other uploaders' claims.
pub(crate) const SLICE_BYTES: u64 = 256 << 20;

/// Stored bytes of a fetch range at most (at least one chunk): the walk that rebuilds a file
/// holds the range it decodes, [`xet_client::pipeline::download::READ_AHEAD`] more read ahead
/// and those kept for reuse, each whole. With the ranges of a plan for clients (each xorb's
/// ranges merged, so often whole xorbs of up to 64 MiB) checking a 1 GiB file held about
/// 340 MiB (a node ingesting two at once peaked at 300-330 MiB while it checked them, three
/// times what it needed for the ingest).
pub(crate) const FETCH_BYTES: u64 = 8 << 20;

/// Claims of one uploader looked at per turn (deferred ones are skipped).
const CANDIDATES: usize = 64;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Claims that held: the oid now maps to the file.
    pub held: u64,
    /// Claims that were wrong, and were dropped.
    pub wrong: u64,
    /// Claims left for later: the file could not be rebuilt now.
    pub deferred: u64,
}

/// A claim partly hashed: the SHA-256 so far and the next term of the file to hash.
struct Partial {
    oid: LfsOid,
    file: FileHash,
    sha: sha2::Sha256,
    next_term: usize,
}

/// The checker's memory between turns and passes: claims that could not be checked and when,
/// the file each uploader is half-way through, and whose turn was last. Bounded: one partial
/// hash per uploader, one entry per deferred claim (dropped after [`RETRY_AFTER`]).
pub struct Checker {
    deferred: HashMap<(LfsOid, FileHash), Instant>,
    partial: HashMap<String, Partial>,
    last: Option<String>,
    slice: u64,
}

impl Default for Checker {
    fn default() -> Self {
        Self::with_slice(SLICE_BYTES)
    }
}

/// What checking (part of) one claim found.
enum Checked {
    /// The file has the claimed SHA-256: the oid now maps to it.
    Held,
    /// It has another one (or is not registered): the claim is dropped.
    Wrong,
    /// The file could not be rebuilt now (why): the claim is left as it is.
    Unreadable(String),
    /// A slice was hashed; more of the file is left for the uploader's next turn.
    Unfinished,
}

impl Checker {
    /// A checker that hashes at most `bytes` of a file per turn (at least one term).
    pub fn with_slice(bytes: u64) -> Self {
        Self {
            deferred: HashMap::new(),
            partial: HashMap::new(),
            last: None,
            slice: bytes,
        }
    }

    /// The uploader whose claim the last turn worked on.
    pub fn last_uploader(&self) -> Option<&str> {
        self.last.as_deref()
    }

    /// One turn: the next uploader after the last one (in name order, wrapping) with a claim
    /// that can be checked now gets [`SLICE_BYTES`] of its oldest claim hashed, or the rest of
    /// the claim it is half-way through. `None` when no claim is left to check now.
    ///
    /// Turns go round the uploaders, so one with many or huge claims (each can name terabytes
    /// of deduplicated data) delays another's check by one slice per turn, never by its whole
    /// backlog.
    pub fn turn(&mut self, store: &Store) -> Result<Option<Pass>, StoreError> {
        self.deferred.retain(|_, at| at.elapsed() < RETRY_AFTER);
        let uploaders = store.claim_uploaders()?;
        self.partial.retain(|u, _| uploaders.contains(u));
        let first = match &self.last {
            Some(last) => uploaders.partition_point(|u| u <= last),
            None => 0,
        };
        for i in 0..uploaders.len() {
            let uploader = &uploaders[(first + i) % uploaders.len()];
            let candidates = store.oldest_claims(uploader, CANDIDATES)?;
            // The claim half-way through goes on, if it is still pending.
            let resumed = self.partial.remove(uploader).filter(|p| {
                candidates
                    .iter()
                    .any(|c| (c.oid, c.file) == (p.oid, p.file))
                    || store.claim_pending(&p.oid, &p.file).unwrap_or(false)
            });
            let partial = match resumed {
                Some(p) => p,
                None => {
                    let Some(c) = candidates
                        .iter()
                        .find(|c| !self.deferred.contains_key(&(c.oid, c.file)))
                    else {
                        continue;
                    };
                    Partial {
                        oid: c.oid,
                        file: c.file,
                        sha: sha2::Sha256::new(),
                        next_term: 0,
                    }
                }
            };
            self.last = Some(uploader.clone());
            let (oid, file) = (partial.oid, partial.file);
            let mut pass = Pass::default();
            match check_slice(store, partial, self.slice, true)? {
                (Checked::Held, _) => pass.held += 1,
                (Checked::Wrong, _) => pass.wrong += 1,
                (Checked::Unreadable(why), _) => {
                    tracing::warn!(%oid, %file, %uploader,
                        "cannot check the SHA-256 claim now ({why}); trying again in {} minutes",
                        RETRY_AFTER.as_secs() / 60);
                    self.deferred.insert((oid, file), Instant::now());
                    pass.deferred += 1;
                }
                (Checked::Unfinished, partial) => {
                    if let Some(p) = partial {
                        self.partial.insert(uploader.clone(), p);
                    }
                }
            }
            return Ok(Some(pass));
        }
        Ok(None)
    }
}

/// Checks every pending claim that can be checked now (except those deferred less than
/// [`RETRY_AFTER`] ago), turn by turn (see [`Checker::turn`]).
/// Then records the claims found to hold for the other nodes of shared storage (those checked
/// when their shards were uploaded, too).
pub fn check_pending(store: &Store, checker: &mut Checker) -> Result<Pass, StoreError> {
    let mut pass = Pass::default();
    while let Some(p) = checker.turn(store)? {
        pass.held += p.held;
        pass.wrong += p.wrong;
        pass.deferred += p.deferred;
    }
    store.record_checked_claims();
    Ok(pass)
}

/// Hashes the next slice of a claimed file; settles the claim when the file is done. A file
/// hashed in one slice is also checked against its Xet file hash (end to end); a longer one
/// is checked chunk by chunk only (its file hash would need every chunk's hash kept).
///
/// With `ask_cluster`, a claim another node of shared storage checked already is settled from
/// its record instead (not for claims a shard upload just made: nobody else can have them).
fn check_slice(
    store: &Store,
    mut partial: Partial,
    slice: u64,
    ask_cluster: bool,
) -> Result<(Checked, Option<Partial>), StoreError> {
    let (oid, file) = (partial.oid, partial.file);
    if ask_cluster && partial.next_term == 0 && store.claim_checked_elsewhere(&oid, &file)? {
        return Ok((Checked::Held, None));
    }
    let plan = match store.reconstruction_bounded(&file, FETCH_BYTES) {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            tracing::warn!(%oid, %file, "a SHA-256 claim names a file that is not registered; dropped");
            store.settle_claim(&oid, &file, false)?;
            return Ok((Checked::Wrong, None));
        }
        Err(e) => return Ok((Checked::Unreadable(e.to_string()), None)),
    };
    let start = partial.next_term.min(plan.terms.len());
    let mut end = start;
    let mut bytes = 0u64;
    while end < plan.terms.len() && (end == start || bytes < slice) {
        bytes += u64::from(plan.terms[end].unpacked_len);
        end += 1;
    }
    let whole = start == 0 && end == plan.terms.len();
    let sha = &mut partial.sha;
    let written = if whole {
        write_file(store, &file, &plan, &mut |b| {
            sha.update(b);
            Ok(())
        })
    } else {
        let slice = xet_protocol::ReconstructionPlan {
            terms: plan.terms[start..end].to_vec(),
            file_size: bytes,
            offset_into_first_range: 0,
            fetch: plan.fetch.clone(),
        };
        write_plan(store, &slice, &mut |b| {
            sha.update(b);
            Ok(())
        })
    };
    if let Err(e) = written {
        return Ok((Checked::Unreadable(e.to_string()), None));
    }
    if end < plan.terms.len() {
        partial.next_term = end;
        return Ok((Checked::Unfinished, Some(partial)));
    }
    let actual = LfsOid::from_digest(partial.sha.finalize().into());
    let holds = actual == oid;
    if !holds {
        tracing::warn!(%oid, %file, %actual,
            "a shard claimed that this file has SHA-256 {oid}, but it has {actual}: the \
             claim is dropped (a client with a damaged local object, or a wrong one)");
    }
    store.settle_claim(&oid, &file, holds)?;
    Ok((if holds { Checked::Held } else { Checked::Wrong }, None))
}

/// Checks the claims a shard upload just made on small files (see the module documentation).
/// What cannot be checked now is left for the job.
pub(crate) fn check_now(store: &Store, claims: &[(LfsOid, FileHash, u64)]) {
    let mut budget = CHECK_NOW_BYTES;
    for &(oid, file, size) in claims {
        if size > CHECK_NOW_MAX_FILE || size > budget {
            continue;
        }
        budget -= size;
        let partial = Partial {
            oid,
            file,
            sha: sha2::Sha256::new(),
            next_term: 0,
        };
        match check_slice(store, partial, CHECK_NOW_MAX_FILE, false) {
            Ok((Checked::Held | Checked::Wrong, _)) => {}
            Ok((Checked::Unreadable(why), _)) => {
                tracing::debug!(%oid, %file, "SHA-256 claim left for the job: {why}")
            }
            Ok((Checked::Unfinished, _)) => {
                tracing::debug!(%oid, %file, "SHA-256 claim left for the job: larger than a slice")
            }
            Err(e) => {
                tracing::warn!(%oid, %file, error = %e, "cannot record the check of a SHA-256 claim")
            }
        }
    }
}

/// The job: a pass every `every` ([`PASS_INTERVAL`] by default), on a blocking thread; abort
/// the task to stop it. `busy` is true while a pass runs and after one that checked something
/// (there may be more): a server that exits when idle waits for it (an embedded store's private
/// server would otherwise leave large files unchecked).
/// The longest pause after claim checks that failed.
const CLAIMS_RETRY_MAX: Duration = Duration::from_secs(30);

pub fn spawn(
    store: &Arc<Store>,
    every: Duration,
    busy: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let store = Arc::clone(store);
    tokio::spawn(async move {
        let mut checker = Checker::default();
        let mut backoff = super::maintenance::Backoff::new(every, every, CLAIMS_RETRY_MAX);
        let mut pause = every;
        loop {
            tokio::time::sleep(pause).await;
            busy.store(true, Ordering::Relaxed);
            let st = Arc::clone(&store);
            let (c, returned) = {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                let mut c = std::mem::take(&mut checker);
                let job = move || {
                    let r = check_pending(&st, &mut c);
                    let _ = tx.send(c);
                    r
                };
                let outcome = super::maintenance::run_job(
                    StorageOperation::Claims,
                    "checking SHA-256 claims",
                    job,
                )
                .await;
                // The checker comes back unless the job panicked (then a fresh one).
                (rx.try_recv().unwrap_or_default(), outcome)
            };
            checker = c;
            let worked = matches!(&returned, Some(p) if p.held + p.wrong > 0);
            busy.store(worked, Ordering::Relaxed);
            if let Some(p) = &returned {
                if p.held + p.wrong + p.deferred > 0 {
                    tracing::info!(
                        held = p.held,
                        wrong = p.wrong,
                        deferred = p.deferred,
                        "checked SHA-256 claims"
                    );
                }
            }
            pause = backoff.after(returned.is_some());
        }
    })
}
