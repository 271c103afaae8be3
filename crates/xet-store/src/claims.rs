//! The ledger of SHA-256 claims: a shard names the LFS oid (SHA-256) of each of its files, which
//! is only a claim until the server has hashed the file. This part of the store decides which
//! claims of a new shard wait to be checked, refuses an uploader whose unchecked claims pile up
//! past the limits, settles claims as checks end, and on shared storage shares the checks with
//! the other nodes (batches of checked claims, written by the claims job, read by the others so
//! that a claim is hashed once per cluster). The pending claims themselves live in the index.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::backend::{ClaimCursor, SharedBucket};
use crate::error::StoreError;
use crate::index::{Claim, Index, ShardEntries};
use xet_format::{FileHash, LfsOid};
use xet_protocol::util::sync::LockAnyway as _;

/// How long the claims read from the cluster's batches are taken as current before they are
/// listed again (a claims pass asks about many claims at once).
const CLAIM_BATCHES_FRESH: Duration = Duration::from_secs(1);

/// At most this many claims read from the cluster's batches are kept (about 70 MB); past it
/// they are dropped and the batches of the last window read again.
const MAX_KNOWN_CLUSTER_CLAIMS: usize = 1_000_000;

/// The checked claims of the cluster's batches a node has read.
#[derive(Debug, Default)]
struct ClusterClaims {
    cursor: ClaimCursor,
    claims: HashMap<LfsOid, FileHash>,
    /// When the batches were last listed.
    listed: Option<Instant>,
}

/// The claims ledger of one store (see the module documentation).
#[derive(Debug)]
pub(crate) struct ClaimsLedger {
    /// Claims found to hold, to be recorded for the other nodes of shared storage by
    /// [`Self::record_checked`] (off the path of the request that checked them).
    checked: Mutex<Vec<(LfsOid, FileHash)>>,
    /// The checked claims read from the cluster's batches (shared storage).
    cluster: Mutex<ClusterClaims>,
    /// Unchecked claims one uploader may have pending, and the bytes of their files.
    max_count: u64,
    max_bytes: u64,
}

impl ClaimsLedger {
    pub(crate) fn new(max_count: u64, max_bytes: u64) -> Self {
        Self {
            checked: Mutex::new(Vec::new()),
            cluster: Mutex::new(ClusterClaims::default()),
            max_count,
            max_bytes,
        }
    }

    /// The claims of `entries` not checked yet (oid, file, size), to be checked.
    pub(crate) fn unchecked(
        &self,
        index: &Index,
        entries: &ShardEntries,
    ) -> Result<Vec<(LfsOid, FileHash, u64)>, StoreError> {
        let mut claims = Vec::new();
        for (oid, file) in &entries.oids {
            if !index.checked_files(oid)?.contains(file) {
                let size = entries
                    .files
                    .iter()
                    .find(|(f, _)| f == file)
                    .map_or(0, |(_, r)| r.size);
                claims.push((*oid, *file, size));
            }
        }
        Ok(claims)
    }

    /// Refuses `entries` if the claims they would add took `uploader` past the ledger's
    /// limits ([`crate::StoreOptions::max_pending_claims`] and
    /// [`crate::StoreOptions::max_pending_claim_bytes`]).
    pub(crate) fn check_backlog(
        &self,
        index: &Index,
        entries: &ShardEntries,
        uploader: &str,
    ) -> Result<(), StoreError> {
        if entries.oids.is_empty() {
            return Ok(());
        }
        let (count, bytes) = index.claim_load(uploader)?;
        let adding = entries.oids.len() as u64;
        let adding_bytes: u64 = entries.files.iter().map(|(_, r)| r.size).sum();
        if count.saturating_add(adding) > self.max_count
            || bytes.saturating_add(adding_bytes) > self.max_bytes
        {
            return Err(StoreError::ClaimBacklog {
                uploader: if uploader.is_empty() {
                    "server-wide credentials".to_string()
                } else {
                    format!("repository {uploader}")
                },
                count,
                bytes,
            });
        }
        Ok(())
    }

    /// Everyone with claims waiting to be checked, in name order (see [`Claim::uploader`]).
    pub(crate) fn uploaders(&self, index: &Index) -> Result<Vec<String>, StoreError> {
        Ok(index.claim_uploaders()?)
    }

    /// Up to `limit` of `uploader`'s claims waiting to be checked, oldest first.
    pub(crate) fn oldest(
        &self,
        index: &Index,
        uploader: &str,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        Ok(index.oldest_claims(uploader, limit)?)
    }

    /// How many of `uploader`'s claims wait to be checked, and the bytes of their files.
    pub(crate) fn load_of(&self, index: &Index, uploader: &str) -> Result<(u64, u64), StoreError> {
        Ok(index.claim_load(uploader)?)
    }

    /// Whether the claim that `file` has SHA-256 `oid` still waits to be checked.
    pub(crate) fn pending(
        &self,
        index: &Index,
        oid: &LfsOid,
        file: &FileHash,
    ) -> Result<bool, StoreError> {
        Ok(index.claims_on(oid)?.iter().any(|c| c.file == *file))
    }

    /// Records whether `file` has SHA-256 `oid`, as the caller found by hashing it (see
    /// [`crate::Store::settle_claim`]); a claim found to hold is kept for
    /// [`Self::record_checked`] when other nodes share the storage.
    pub(crate) fn settle(
        &self,
        index: &Index,
        shared: bool,
        oid: &LfsOid,
        file: &FileHash,
        holds: bool,
    ) -> Result<(), StoreError> {
        index.settle_claim(oid, file, holds)?;
        if holds && shared {
            self.checked.lock_anyway().push((*oid, *file));
        }
        Ok(())
    }

    /// Records the claims found to hold since the last call for the other nodes, as one batch;
    /// a failure counts in `failures` and is logged (another node then checks them itself).
    pub(crate) fn record_checked(&self, backend: &dyn SharedBucket, failures: &AtomicU64) {
        let checked = std::mem::take(&mut *self.checked.lock_anyway());
        if checked.is_empty() {
            return;
        }
        if let Err(e) = backend.record_checked_claims(&checked) {
            failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(claims = checked.len(), error = %e,
                "cannot record the checks of SHA-256 claims for the other nodes; they will check them themselves");
        }
    }

    /// The file the cluster's batches of checked claims name for `oid`: the batches are
    /// listed again at most every [`CLAIM_BATCHES_FRESH`].
    fn batch_checked(
        &self,
        backend: &dyn SharedBucket,
        oid: &LfsOid,
    ) -> Result<Option<FileHash>, StoreError> {
        let mut known = self.cluster.lock_anyway();
        let stale = known
            .listed
            .is_none_or(|at| at.elapsed() >= CLAIM_BATCHES_FRESH);
        if stale {
            known.listed = Some(Instant::now());
            let read = backend.checked_claims_since(&mut known.cursor)?;
            if known.claims.len() + read.len() > MAX_KNOWN_CLUSTER_CLAIMS {
                known.claims.clear();
            }
            known.claims.extend(read);
        }
        Ok(known.claims.get(oid).copied())
    }

    /// Settles the claim that `oid` is the SHA-256 of `file` without hashing it when another
    /// process sharing the storage checked it already; `false`: no such record, the claim is
    /// left pending.
    pub(crate) fn checked_elsewhere(
        &self,
        index: &Index,
        backend: &dyn SharedBucket,
        oid: &LfsOid,
        file: &FileHash,
    ) -> Result<bool, StoreError> {
        match self.batch_checked(backend, oid) {
            Ok(Some(checked)) if checked == *file => {
                index.settle_claim(oid, file, true)?;
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(%oid, error = %e, "cannot read the cluster's batches of checked SHA-256 claims");
            }
        }
        // A record of its own, as earlier versions wrote.
        match backend.checked_claim(oid) {
            Ok(Some(checked)) if checked == *file => {
                index.settle_claim(oid, file, true)?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) => {
                tracing::debug!(%oid, error = %e, "cannot read the cluster's record of a SHA-256 claim");
                Ok(false)
            }
        }
    }
}
