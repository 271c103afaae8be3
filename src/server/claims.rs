//! Checking the SHA-256 claims of registered shards, in the background.
//!
//! A shard's `FileMetadataExt` says which SHA-256 (Git LFS oid) its file has, and any client
//! with write access could name any oid. Until the server has hashed the file itself, the
//! mapping is only a claim (see `store::index`): downloads may use it, because git-lfs checks
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
//! Resources: one claim at a time on one blocking thread, a file streamed through the hasher
//! (memory: the download pipeline's read-ahead), a pass at most every [`PASS_INTERVAL`]. A
//! claim whose file cannot be rebuilt (a xorb lost or damaged) is tried again after
//! [`RETRY_AFTER`]. On shared storage every node checks the claims it registers or catches up
//! with (each keeps its own index).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::Digest as _;

use crate::format::{FileHash, LfsOid};
use crate::pipeline::download::write_file;
use crate::store::{Store, StoreError};

pub use crate::store::wire::CHECKS_SHA256_HEADER;

/// How often the job looks for new claims, by default.
pub const PASS_INTERVAL: Duration = Duration::from_secs(1);

/// How long a claim whose file could not be rebuilt waits before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(600);

/// Files up to this size are checked at once ([`check_now`]).
pub const CHECK_NOW_MAX_FILE: u64 = 8 << 20;

/// At most this many bytes of files are checked at once per shard; the rest wait for the job.
pub const CHECK_NOW_BYTES: u64 = 64 << 20;

/// Claims read from the index at a time.
const BATCH: usize = 64;

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

/// Claims that could not be checked, and when that was.
pub type Deferred = HashMap<(LfsOid, FileHash), Instant>;

/// What checking one claim found.
enum Checked {
    /// The file has the claimed SHA-256: the oid now maps to it.
    Held,
    /// It has another one (or is not registered): the claim is dropped.
    Wrong,
    /// The file could not be rebuilt now (why): the claim is left as it is.
    Unreadable(String),
}

/// Hashes the file of one claim and settles the claim by what it found.
fn check_one(store: &Store, oid: LfsOid, file: FileHash) -> Result<Checked, StoreError> {
    let holds = match sha256_of(store, &file) {
        Ok(Some(actual)) if actual == oid => true,
        Ok(Some(actual)) => {
            tracing::warn!(%oid, %file, %actual,
                "a shard claimed that this file has SHA-256 {oid}, but it has {actual}: the \
                 claim is dropped (a client with a damaged local object, or a wrong one)");
            false
        }
        Ok(None) => {
            tracing::warn!(%oid, %file, "a SHA-256 claim names a file that is not registered; dropped");
            false
        }
        Err(why) => return Ok(Checked::Unreadable(why)),
    };
    store.settle_claim(&oid, &file, holds)?;
    Ok(if holds { Checked::Held } else { Checked::Wrong })
}

/// Checks every pending claim once (except those deferred less than [`RETRY_AFTER`] ago).
pub fn check_pending(store: &Store, deferred: &mut Deferred) -> Result<Pass, StoreError> {
    deferred.retain(|_, at| at.elapsed() < RETRY_AFTER);
    let mut pass = Pass::default();
    let mut after: Option<(LfsOid, FileHash)> = None;
    loop {
        let batch = store.pending_claims(after.as_ref(), BATCH)?;
        let Some(last) = batch.last().copied() else {
            return Ok(pass);
        };
        for (oid, file) in batch {
            if deferred.contains_key(&(oid, file)) {
                continue;
            }
            match check_one(store, oid, file)? {
                Checked::Held => pass.held += 1,
                Checked::Wrong => pass.wrong += 1,
                Checked::Unreadable(why) => {
                    tracing::warn!(%oid, %file,
                        "cannot check the SHA-256 claim now ({why}); trying again in {} minutes",
                        RETRY_AFTER.as_secs() / 60);
                    deferred.insert((oid, file), Instant::now());
                    pass.deferred += 1;
                }
            }
        }
        after = Some(last);
    }
}

/// Checks the claims a shard upload just made on small files (see the module documentation).
/// What cannot be checked now is left for the job.
pub fn check_now(store: &Store, claims: &[(LfsOid, FileHash, u64)]) {
    let mut budget = CHECK_NOW_BYTES;
    for &(oid, file, size) in claims {
        if size > CHECK_NOW_MAX_FILE || size > budget {
            continue;
        }
        budget -= size;
        match check_one(store, oid, file) {
            Ok(Checked::Held | Checked::Wrong) => {}
            Ok(Checked::Unreadable(why)) => {
                tracing::debug!(%oid, %file, "SHA-256 claim left for the job: {why}")
            }
            Err(e) => {
                tracing::warn!(%oid, %file, error = %e, "cannot record the check of a SHA-256 claim")
            }
        }
    }
}

/// The SHA-256 of a registered file, rebuilt from its xorbs (every chunk checked on the way);
/// `None` when it is not registered.
fn sha256_of(store: &Store, file: &FileHash) -> Result<Option<LfsOid>, String> {
    let Some(plan) = store
        .reconstruction(file, None)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let mut sha = sha2::Sha256::new();
    write_file(store, file, &plan, &mut |bytes| {
        sha.update(bytes);
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok(Some(LfsOid::from_digest(sha.finalize().into())))
}

/// The job: a pass every `every` ([`PASS_INTERVAL`] by default), on a blocking thread; abort
/// the task to stop it. `busy` is true while a pass runs and after one that checked something
/// (there may be more): a server that exits when idle waits for it (an embedded store's private
/// server would otherwise leave large files unchecked).
pub fn spawn(
    store: &Arc<Store>,
    every: Duration,
    busy: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let store = Arc::clone(store);
    tokio::spawn(async move {
        let mut deferred = Deferred::new();
        loop {
            tokio::time::sleep(every).await;
            busy.store(true, Ordering::Relaxed);
            let st = Arc::clone(&store);
            let mut d = std::mem::take(&mut deferred);
            let job = move || {
                let r = check_pending(&st, &mut d);
                (r, d)
            };
            let outcome = tokio::task::spawn_blocking(job).await;
            let worked = matches!(&outcome, Ok((Ok(p), _)) if p.held + p.wrong > 0);
            busy.store(worked, Ordering::Relaxed);
            match outcome {
                Ok((r, d)) => {
                    deferred = d;
                    match r {
                        Ok(p) if p.held + p.wrong + p.deferred > 0 => tracing::info!(
                            held = p.held,
                            wrong = p.wrong,
                            deferred = p.deferred,
                            "checked SHA-256 claims"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "cannot check SHA-256 claims"),
                    }
                }
                Err(e) => tracing::error!(error = %e, "checking SHA-256 claims stopped"),
            }
        }
    })
}
