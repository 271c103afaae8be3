//! The storage engine: one [`Store`] behind both front doors, the `git xet serve` HTTP server
//! and the agent's embedded (serverless) mode.
//!
//! It accepts xorb upload bodies and shards, validating everything docs/cas-api.md §9 requires
//! (nothing is trusted: every hash is recomputed and every shard term is checked against the
//! stored xorb), stores objects through an [`ObjectBackend`] and records what they mean in the
//! [`Index`]. It answers the queries downloads and deduplication need: a file's
//! reconstruction plan, the file for a Git LFS oid, the xorb holding a chunk indexed for dedup, and
//! byte ranges of stored xorbs.
//!
//! Synchronous by design (file and database I/O); async callers use `spawn_blocking`.
//!
//! On-disk layout of a store directory:
//!
//! ```text
//! STORE-VERSION      "git-xet-store 1"
//! index.redb         the index (see store::index)
//! xorbs/, shards/, tmp/   objects (see store::backend)
//! ```

use std::collections::HashMap;
use std::fs::{self, File};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::backend::{BackendError, FsBackend, ObjectBackend, ObjectKey, ObjectStamp};
use crate::footers::FooterCache;
pub use crate::footers::XorbHealth;
use crate::index::{
    Claim, Commit, FileRecord, Index, IndexCounts, ShardEntries, StoredTerm, XorbMeta,
};
use crate::repo_name::RepoName;
use xet_format::hash::{file_hash, verification_hash};
use xet_format::shard::{ParsedShard, Shard, XorbInfo, MAX_SHARD_SIZE};
use xet_format::xorb::{ParsedXorb, ReadOptions, XorbFooter, XorbLimits};
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, ShardHash, XorbHash};
use xet_protocol::reconstruction::{bounded, plan, ReconstructionPlan};
use xet_protocol::util::sync::{LockAnyway as _, RwLockAnyway as _};

const VERSION_FILE: &str = "STORE-VERSION";
/// In the data directory of a node on object storage: the storage URL, one line. The
/// directory holds only that node's cache of the index and its temporary files.
const STORAGE_FILE: &str = "STORAGE";
/// A node's copies of xorbs on object storage, under its directory ([`crate::xorb_cache`]).
pub const XORB_CACHE_DIR: &str = "xorb-cache";
/// Chunks a global-dedup answer lists at most (about 4 GiB of data, a shard of about 3 MiB).
pub const DEDUP_ANSWER_MAX_CHUNKS: usize = 65_536;
const VERSION_TEXT: &str = "git-xet-store 1\n";

pub use crate::error::{is_storage_full, ShardRejection, StoreError};

/// Unchecked SHA-256 claims one uploader may have pending (see `server::claims`); a shard
/// that would make more is refused for now (HTTP 429), so that nobody fills the index with
/// claims or the server's hashing with work.
pub const MAX_PENDING_CLAIMS: u64 = 50_000;

/// Bytes of files one uploader's pending claims may name together.
pub const MAX_PENDING_CLAIM_BYTES: u64 = 4 << 40;

/// What a Git LFS oid resolves to for one reader ([`Store::oid_file`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OidFile {
    pub file: FileHash,
    pub size: u64,
    /// The store hashed the file and found that SHA-256; `false`: only a shard's claim.
    pub checked: bool,
}

/// The outcome of registering a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOutcome {
    pub shard: ShardHash,
    /// False when this exact shard was registered before.
    pub newly_registered: bool,
    /// Files the shard listed, and how many of them were new.
    pub files: usize,
    pub new_files: usize,
    /// The sizes of the new files together.
    pub new_bytes: u64,
    /// The SHA-256 claims the shard made that are not checked mappings: `(oid, file, size)`
    /// (see [`Store::oid_checked`]; the server checks small ones before it answers).
    pub claims: Vec<(LfsOid, FileHash, u64)>,
}

/// Progress of a shard validation: terms verified out of the total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationProgress {
    pub verified: u64,
    pub total: u64,
}

/// What a look at a stored file is for ([`Store::file_damage_memo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Serving a download: a xorb this node keeps a copy of counts as stored without asking
    /// the bucket (see [`crate::xorb_cache`]).
    Download,
    /// Anything an upload may skip work on: the bucket is asked.
    Upload,
}

/// What [`Store::xorb_for_reading`] found of a stored xorb.
#[derive(Debug, Clone)]
pub enum XorbBytes {
    /// The whole object, in memory.
    Whole(Arc<Vec<u8>>),
    /// Stored, this many bytes long: read its ranges with [`Store::read_checked_xorb`].
    Stored(u64),
}

impl XorbBytes {
    pub fn len(&self) -> u64 {
        match self {
            XorbBytes::Whole(b) => b.len() as u64,
            XorbBytes::Stored(len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The storage engine. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Store {
    pub(super) backend: Arc<dyn ObjectBackend>,
    pub(super) index: Index,
    /// Footers of xorbs known intact, with the stamp of the object they were read from.
    pub(super) footers: Mutex<FooterCache>,
    /// The copies of xorbs this node keeps beside object storage, in memory and on its disk,
    /// and the reads of xorbs' bytes through them (see [`crate::copies`]).
    pub(super) copies: crate::copies::Copies,
    /// One whole-object verification at a time (each reads a xorb of up to 64 MiB).
    pub(super) verifying: Mutex<()>,
    /// Shard registrations and xorb uploads hold it shared, garbage collection exclusively while
    /// it deletes, so a shard is never registered against a xorb being collected.
    pub(super) collecting: RwLock<()>,
    /// What garbage collection in this process knows and does (see [`crate::collector`]).
    pub(super) collector: crate::collector::Collector,
    /// Failures of work the store does in the background, by kind.
    /// Records of checked claims that could not be written (see [`BackgroundErrors`]).
    claim_record_errors: std::sync::atomic::AtomicU64,
    /// Where this node is among the other nodes of shared storage (see [`crate::cluster`]).
    pub(super) cluster: crate::cluster::Cluster,
    /// Sizes of the files this process registered for the first time (from uploads, not from
    /// other nodes' shards), since it opened the store.
    registered_bytes: std::sync::atomic::AtomicU64,
    /// The SHA-256 claims ledger (see [`crate::claims`]).
    claims: crate::claims::ClaimsLedger,
    root: PathBuf,
}

/// Storage failures of work a store does in the background, off any request, so far (for a
/// server's `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackgroundErrors {
    /// Copies of xorbs to the node's disk that failed.
    pub copies: u64,
    /// Records of checked claims (for the other nodes) that could not be written.
    pub claim_records: u64,
}

/// Whether a lookup that misses on shared storage first catches up with the other nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// A miss lists what other nodes registered since, then looks again.
    CatchUpOnMiss,
    /// The index as it is (the caller caught up already).
    IndexOnly,
}

/// How a store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Keep this many bytes of the store's filesystem free: writes that would leave less fail as
    /// on a full disk (`ENOSPC`, HTTP 507). 0: no reserve.
    pub min_free_bytes: u64,
    /// Unchecked SHA-256 claims one uploader may have pending ([`MAX_PENDING_CLAIMS`]).
    pub max_pending_claims: u64,
    /// Bytes of files one uploader's pending claims may name ([`MAX_PENDING_CLAIM_BYTES`]).
    pub max_pending_claim_bytes: u64,
    /// On object storage, bytes of xorbs a node keeps copies of on its own disk
    /// ([`crate::xorb_cache`]); 0: none. A directory store ignores it.
    pub xorb_cache_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            min_free_bytes: 0,
            max_pending_claims: MAX_PENDING_CLAIMS,
            max_pending_claim_bytes: MAX_PENDING_CLAIM_BYTES,
            xorb_cache_bytes: 0,
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).finish()
    }
}

/// Term `i` of file `file` against its xorb's `footer`: its chunk range within the xorb, its
/// unpacked length and its verification hash; its chunks join `chunks`.
fn check_term(
    footer: &XorbFooter,
    file: FileHash,
    i: usize,
    term: &xet_format::shard::Term,
    verification: &[xet_format::VerificationHash],
    chunks: &mut Vec<ChunkRef>,
) -> Result<StoredTerm, StoreError> {
    let xorb = term.xorb_hash;
    let (start, end) = (term.chunk_index_start, term.chunk_index_end);
    if start >= end || end as usize > footer.num_chunks() {
        return Err(ShardRejection::ChunkRange {
            file,
            term: i,
            xorb,
            start,
            end,
            num_chunks: footer.num_chunks(),
        }
        .into());
    }
    let range = start as usize..end as usize;
    let actual = footer.unpacked_len(range.clone()).unwrap_or(u64::MAX);
    if actual != u64::from(term.unpacked_segment_bytes) {
        return Err(ShardRejection::UnpackedLength {
            file,
            term: i,
            claimed: term.unpacked_segment_bytes,
            actual,
        }
        .into());
    }
    let hashes = &footer.chunk_hashes[range.clone()];
    if verification.get(i) != Some(&verification_hash(hashes)) {
        return Err(ShardRejection::Verification {
            file,
            term: i,
            xorb,
        }
        .into());
    }
    for c in range {
        let len = footer.chunk_len(c).unwrap_or(0);
        chunks.push(ChunkRef::new(footer.chunk_hashes[c], u64::from(len)));
    }
    Ok(StoredTerm {
        xorb,
        chunk_start: start,
        chunk_end: end,
        unpacked_len: term.unpacked_segment_bytes,
    })
}

/// The chunks of a file indexed for global dedup: its first chunk and its dedup probes
/// (docs/format.md §5.1, §5.5), each with the xorb and index it is stored at.
fn dedup_probes(terms: &[StoredTerm], chunks: &[ChunkRef]) -> Vec<(ChunkHash, XorbHash, u32)> {
    let mut out = Vec::new();
    let mut position = 0usize;
    let mut offset = 0u64;
    for t in terms {
        for index in t.chunk_start..t.chunk_end {
            let Some(c) = chunks.get(position) else {
                return out;
            };
            if xet_format::dedup::is_probe(position, offset, offset + c.len) {
                out.push((c.hash, t.xorb, index));
            }
            offset += c.len;
            position += 1;
            if offset > xet_format::dedup::LAST_PROBE_OFFSET
                && position >= xet_format::dedup::LEADING_PROBES
            {
                return out;
            }
        }
    }
    out
}

pub(super) use xet_protocol::util::now_unix;

/// Every xorb the terms of `shard`'s files name, with the first file and term naming it.
fn term_xorbs(shard: &Shard) -> HashMap<XorbHash, (FileHash, usize)> {
    let mut named = HashMap::new();
    for file in &shard.files {
        for (i, term) in file.terms.iter().enumerate() {
            named.entry(term.xorb_hash).or_insert((file.hash, i));
        }
    }
    named
}

/// Returns once the process holding the store's index releases it (or after `timeout`):
/// the index database holds an exclusive `flock` while open, so a shared lock on it is granted
/// the moment the holder closes it. The lock is taken on a helper thread (a blocking `flock`
/// has no timeout) and let go at once; a waiter that timed out leaves the thread to finish
/// that on its own. Waking on the release instead of polling hands the store over without a
/// gap, which is what agents taking turns per small object need.
fn wait_for_release(index: &Path, timeout: Duration) {
    let Ok(file) = File::open(index) else {
        std::thread::sleep(Duration::from_millis(1));
        return;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = file.lock_shared();
        drop(file);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(timeout);
}

impl Store {
    /// Opens the store in `dir`, creating it if the directory is empty or missing.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, StoreOptions::default())
    }

    /// [`Store::open`] with options.
    pub fn open_with(dir: &Path, options: StoreOptions) -> Result<Self, StoreError> {
        let layout = |detail: String| StoreError::Layout {
            path: dir.to_path_buf(),
            detail,
        };
        fs::create_dir_all(dir).map_err(|e| layout(format!("cannot create: {e}")))?;
        if let Ok(url) = fs::read_to_string(dir.join(STORAGE_FILE)) {
            return Err(layout(format!(
                "it is the local cache of a server on {}; its objects are there, not here \
                 (start `git xet serve` with --storage {0})",
                url.trim()
            )));
        }
        let version = dir.join(VERSION_FILE);
        match fs::read_to_string(&version) {
            Ok(text) if text == VERSION_TEXT => {}
            Ok(text) => {
                return Err(layout(format!(
                    "{VERSION_FILE} says {:?}; this git-xet understands {:?}",
                    text.trim(),
                    VERSION_TEXT.trim()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let entries = fs::read_dir(dir)
                    .map_err(|e| layout(format!("cannot list: {e}")))?
                    .count();
                if entries > 0 {
                    return Err(layout(format!(
                        "not empty and has no {VERSION_FILE}: refusing to use it as a store"
                    )));
                }
                fs::write(&version, VERSION_TEXT)
                    .map_err(|e| layout(format!("cannot write {VERSION_FILE}: {e}")))?;
            }
            Err(e) => return Err(layout(format!("cannot read {VERSION_FILE}: {e}"))),
        }
        // The index first: it is what another process holding the store has locked, so a
        // process that has to wait fails here, before touching anything else.
        let index = Index::open(&dir.join("index.redb"))?;
        let backend = FsBackend::open(dir)?.with_min_free(options.min_free_bytes);
        Ok(Self::assemble(dir, index, Arc::new(backend), options, None))
    }

    /// Opens a store whose objects live in `backend` (one this process owns, such as
    /// [`crate::memory::MemoryBackend`]), with `dir` for its index. The directory store
    /// ([`Store::open_with`]) and the bucket ([`Store::open_s3`]) are this with their own
    /// backends and the checks of their layouts.
    pub fn open_on(
        dir: &Path,
        backend: Arc<dyn ObjectBackend>,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::Layout {
            path: dir.to_path_buf(),
            detail: format!("cannot create: {e}"),
        })?;
        let index = Index::open(&dir.join("index.redb"))?;
        Ok(Self::assemble(dir, index, backend, options, None))
    }

    fn assemble(
        dir: &Path,
        index: Index,
        backend: Arc<dyn ObjectBackend>,
        options: StoreOptions,
        xorb_cache: Option<crate::xorb_cache::XorbCache>,
    ) -> Self {
        Self {
            copies: crate::copies::Copies::new(Arc::clone(&backend), xorb_cache),
            backend,
            index,
            footers: Mutex::new(FooterCache::default()),
            verifying: Mutex::new(()),
            collecting: RwLock::new(()),
            collector: crate::collector::Collector::new(),
            claim_record_errors: Default::default(),
            cluster: crate::cluster::Cluster::default(),
            registered_bytes: std::sync::atomic::AtomicU64::new(0),
            claims: crate::claims::ClaimsLedger::new(
                options.max_pending_claims,
                options.max_pending_claim_bytes,
            ),
            root: dir.to_path_buf(),
        }
    }

    /// Without the S3 backend (feature `s3`), opening a bucket says how to get it.
    #[cfg(not(feature = "s3"))]
    pub fn open_s3(
        _dir: &Path,
        _options: StoreOptions,
        config: &crate::storage_url::S3Config,
        _runtime: tokio::runtime::Handle,
    ) -> Result<Self, StoreError> {
        Err(StoreError::S3NotBuilt {
            url: config.url.to_string(),
        })
    }

    /// Opens a store whose objects live in an S3-compatible bucket (see [`crate::s3`]), with
    /// `dir` as this node's own directory: its cache of the index, temporary files. Several
    /// processes may open the same bucket, each with its own directory; each catches up with
    /// the others' shards ([`Self::catch_up`], [`Self::catch_up_all`]). The bucket's requests
    /// run on `runtime` (see [`S3Backend::open`](crate::s3::S3Backend::open)).
    #[cfg(feature = "s3")]
    pub fn open_s3(
        dir: &Path,
        options: StoreOptions,
        config: &crate::s3::S3Config,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, StoreError> {
        let url = &config.url;
        let layout = |detail: String| StoreError::Layout {
            path: dir.to_path_buf(),
            detail,
        };
        fs::create_dir_all(dir).map_err(|e| layout(format!("cannot create: {e}")))?;
        let marker = dir.join(STORAGE_FILE);
        match fs::read_to_string(&marker) {
            Ok(text) if text.trim() == url.to_string() => {}
            Ok(text) => {
                return Err(layout(format!(
                    "it is the local cache of a server on {}, not {url}; give each storage its \
                     own --data directory",
                    text.trim()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if dir.join(VERSION_FILE).exists() {
                    return Err(layout(format!(
                        "it is a directory store (its objects are in it); a server on {url} \
                         needs a directory of its own"
                    )));
                }
                fs::write(&marker, format!("{url}\n"))
                    .map_err(|e| layout(format!("cannot write {STORAGE_FILE}: {e}")))?;
            }
            Err(e) => return Err(layout(format!("cannot read {STORAGE_FILE}: {e}"))),
        }
        let index = Index::open(&dir.join("index.redb"))?;
        let backend =
            crate::s3::S3Backend::open(config, &dir.join("tmp"), options.min_free_bytes, runtime)?;
        let version = crate::backend::SharedBucket::shared_value(
            &backend,
            VERSION_FILE,
            VERSION_TEXT.as_bytes(),
        )?;
        if let Some(v) = version.filter(|v| v.as_slice() != VERSION_TEXT.as_bytes()) {
            return Err(layout(format!(
                "{url}/{VERSION_FILE} says {:?}; this git-xet understands {:?}",
                String::from_utf8_lossy(&v).trim(),
                VERSION_TEXT.trim()
            )));
        }
        let cache = match options.xorb_cache_bytes {
            0 => None,
            bytes => {
                let cache_dir = dir.join(XORB_CACHE_DIR);
                let cache =
                    crate::xorb_cache::XorbCache::open(&cache_dir, bytes, options.min_free_bytes)
                        .map_err(|e| {
                        layout(format!(
                            "cannot open the xorb cache {}: {e}",
                            cache_dir.display()
                        ))
                    })?;
                Some(cache)
            }
        };
        Ok(Self::assemble(
            dir,
            index,
            Arc::new(backend),
            options,
            cache,
        ))
    }

    /// A value every process using this store's storage agrees on, created as `initial` by the
    /// first (see [`SharedBucket::shared_value`](crate::backend::SharedBucket::shared_value)); `None` for a directory store.
    pub fn shared_value(&self, name: &str, initial: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.backend.shared() {
            Some(bucket) => Ok(bucket.shared_value(name, initial)?),
            None => Ok(None),
        }
    }

    /// [`Store::open`], waiting while another process has the store open (the agent's
    /// embedded mode: up to `lfs.concurrenttransfers` agent processes share one directory and
    /// take turns, each holding it for one transfer). `waiting` is called once when the wait
    /// starts. Gives up with the lock error after `patience`.
    pub fn open_waiting(
        dir: &Path,
        patience: std::time::Duration,
        mut waiting: impl FnMut(),
    ) -> Result<Self, StoreError> {
        let start = std::time::Instant::now();
        let mut announced = false;
        loop {
            match Self::open(dir) {
                Err(e) if e.is_locked() && start.elapsed() < patience => {
                    if !announced {
                        announced = true;
                        waiting();
                    }
                    let left = patience.saturating_sub(start.elapsed());
                    wait_for_release(&dir.join("index.redb"), left.min(Duration::from_secs(1)));
                }
                other => return other,
            }
        }
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether an intact copy of a xorb is stored (see [`Self::check_xorb`]). Only looks.
    pub fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, StoreError> {
        Ok(matches!(self.check_xorb(xorb)?, XorbHealth::Intact(_)))
    }

    /// For an upload about to rely on `xorb` (skip sending it, or answer "already stored"):
    /// whether an intact copy is stored, and if so its grace period against garbage collection
    /// starts again (it is about to be used by a shard).
    ///
    /// On object storage a xorb this node has no record of (not stored, read or registered
    /// through it, nor found damaged) is taken as new without a look (a request): if another
    /// node stored it meanwhile, the upload puts the same bytes under the same key again.
    pub fn already_stored(&self, xorb: &XorbHash) -> Result<bool, StoreError> {
        let _collecting = self.collecting.read_anyway();
        if self.backend.is_shared() && self.unknown_here(xorb)? {
            self.footers.lock_anyway().note_missing(xorb);
            return Ok(false);
        }
        self.keep_existing(xorb)
    }

    /// Whether this node knows nothing of `xorb`: no index record, no damage record, no
    /// footer in memory.
    fn unknown_here(&self, xorb: &XorbHash) -> Result<bool, StoreError> {
        let in_memory = self.footers.lock_anyway().any(xorb).is_some();
        Ok(!in_memory && self.index.xorb(xorb)?.is_none() && self.index.damaged(xorb)?.is_none())
    }

    /// Validates an upload body (chunk region, optionally with a footer) against its hash and
    /// stores it with a rebuilt footer. `Ok(true)` if this call stored it, `Ok(false)` if an
    /// intact copy was already stored (the body is then not validated again). A stored copy that
    /// is missing or damaged is replaced: uploading a xorb again repairs it.
    pub fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, StoreError> {
        if self.already_stored(&xorb)? {
            return Ok(false);
        }
        let options = ReadOptions {
            expected_hash: Some(xorb),
            limits: XorbLimits::SERVER,
        };
        let invalid = |source| StoreError::InvalidXorb { xorb, source };
        let parsed = ParsedXorb::parse_with(body, &options).map_err(invalid)?;
        let stored = parsed.to_stored([0; 4]).map_err(invalid)?;
        let footer = parsed.rebuilt_footer([0; 4]);
        drop(parsed);
        self.backend.check_space(stored.len() as u64)?;
        let tmp = self.backend.temp_path("xorb");
        let shared = self.backend.is_shared();
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            f.write_all(&stored)?;
            // As in `put_xorb_spooled`: only a directory's objects need it.
            if shared {
                Ok(())
            } else {
                f.sync_all()
            }
        };
        if let Err(source) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(StoreError::Backend(BackendError::Io {
                op: "write",
                key: format!("xorb {xorb}"),
                source,
            }));
        }
        self.place(footer, stored.len() as u64, &tmp)
    }

    /// [`Self::put_xorb`] for an upload body spooled to the file `spool` (a path from
    /// [`Self::spool_path`]). The body is validated in place (memory-mapped, never copied), the
    /// file is turned into the stored object (the footer rebuilt at its end) and moved into
    /// place. The file is consumed whatever the outcome. The caller looked for an intact copy
    /// before it spooled the body ([`Self::already_stored`]): one that appeared since is found
    /// when the object is put in place (then kept, and `Ok(false)`), with no look before the
    /// validation (on object storage each look is a request).
    pub fn put_xorb_file(&self, xorb: XorbHash, spool: &Path) -> Result<bool, StoreError> {
        let result = self.put_xorb_spooled(xorb, spool);
        let _ = fs::remove_file(spool);
        result
    }

    fn put_xorb_spooled(&self, xorb: XorbHash, spool: &Path) -> Result<bool, StoreError> {
        let io = |op: &'static str| {
            move |source| {
                StoreError::Backend(BackendError::Io {
                    op,
                    key: format!("the spooled upload of xorb {xorb}"),
                    source,
                })
            }
        };
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(spool)
            .map_err(io("open"))?;
        let (footer, region_len) = {
            // The spool file is this request's own, in the store's tmp directory; nothing else
            // writes or truncates it while it is mapped (it is mapped only here).
            let map = xet_protocol::util::os::map_whole(&file).map_err(io("map"))?;
            let options = ReadOptions {
                expected_hash: Some(xorb),
                limits: XorbLimits::SERVER,
            };
            let invalid = |source| StoreError::InvalidXorb { xorb, source };
            let parsed = ParsedXorb::parse_with(&map, &options).map_err(invalid)?;
            (
                parsed.rebuilt_footer([0; 4]),
                parsed.chunk_region().len() as u64,
            )
        };
        let mut tail = Vec::with_capacity(footer.encoded_len() as usize + 4);
        footer
            .write_v1(&mut tail)
            .map_err(|source| StoreError::InvalidXorb { xorb, source })?;
        let stored_len = region_len + tail.len() as u64;
        self.backend.check_space(tail.len() as u64)?;
        {
            use std::io::{Seek, SeekFrom, Write};
            file.set_len(region_len).map_err(io("truncate"))?;
            file.seek(SeekFrom::Start(region_len)).map_err(io("seek"))?;
            file.write_all(&tail).map_err(io("write the footer of"))?;
            // On a directory the file becomes the stored object: on disk before it is
            // acknowledged. On object storage it is only what the PUT sends (and a copy for
            // the node's cache, checked before use): flushing it would only make the request
            // wait for the disk.
            if !self.backend.is_shared() {
                file.sync_all().map_err(io("flush"))?;
            }
        }
        drop(file);
        // On object storage a small xorb is kept in memory as stored (see `small_xorbs`): the
        // claims of its files are checked, and its first downloads read, without a request.
        let small = (self.backend.is_shared() && stored_len <= crate::small_xorbs::SMALL_XORB_MAX)
            .then(|| fs::read(spool).ok())
            .flatten()
            .filter(|b| b.len() as u64 == stored_len);
        let created = self.place(footer, stored_len, spool)?;
        if let (true, Some(bytes)) = (created, small) {
            self.copies.keep_in_memory(xorb, Arc::new(bytes));
        }
        Ok(created)
    }

    /// Puts the validated stored object in `file` (consumed) in place as the xorb `footer`
    /// describes: created if absent; if a copy is there, kept when intact (a concurrent upload
    /// won) and replaced when damaged (it could not be moved aside). `true` if this call stored
    /// it. Under the collection lock, so garbage collection never deletes what was just placed.
    fn place(&self, footer: XorbFooter, stored_len: u64, file: &Path) -> Result<bool, StoreError> {
        let _collecting = self.collecting.read_anyway();
        let xorb = footer.hash;
        let key = ObjectKey::Xorb(xorb);
        // On object storage a look is a request: an upload that found the object missing a
        // moment ago (before it took the body) puts it without looking again.
        let looked = self.backend.is_shared()
            && self
                .footers
                .lock_anyway()
                .missing_within(&xorb, crate::footers::STAMP_FRESH);
        let stamp = if looked {
            None
        } else {
            self.backend.stamp(key)?
        };
        // The validated object's copy for this node's cache, made before the put consumes it.
        let staged = self.copies.stage(&xorb, file, stored_len);
        let created = match stamp {
            None => self.backend.put_new_file(key, file)?,
            Some(_) if self.keep_existing(&xorb)? => {
                let _ = fs::remove_file(file);
                false
            }
            Some(_) => {
                self.backend.replace_file(key, file)?;
                true
            }
        };
        if created {
            self.stored_intact(footer, stored_len)?;
        } else if !self.keep_existing(&xorb)? {
            // A concurrent writer's copy appeared between the look and the link and is not
            // intact: this upload's bytes are gone, so the client must send them again.
            return Err(StoreError::Backend(BackendError::Io {
                op: "store",
                key: format!("xorb {xorb}"),
                source: std::io::Error::other(
                    "a concurrent upload left a damaged copy; upload the xorb again",
                ),
            }));
        }
        // Stored, by this upload or an intact one before it: the same validated bytes.
        if let Some(staged) = staged {
            staged.keep();
        }
        Ok(created)
    }

    /// Before an upload of `xorb` is stored: `true` when an intact copy is stored already (the
    /// upload is not needed; its file's age is refreshed so garbage collection counts its grace
    /// period from now). Called with the collection lock held.
    fn keep_existing(&self, xorb: &XorbHash) -> Result<bool, StoreError> {
        match self.check_xorb(xorb)? {
            XorbHealth::Intact(_) => {
                self.refresh(xorb)?;
                Ok(true)
            }
            XorbHealth::Missing | XorbHealth::Damaged(_) => Ok(false),
        }
    }

    /// Records a xorb this store has just written from a validated body: verified as it is now,
    /// indexed, its footer cached, and any damage record cleared (logged as a repair).
    fn stored_intact(&self, footer: XorbFooter, stored_len: u64) -> Result<(), StoreError> {
        let xorb = footer.hash;
        let key = ObjectKey::Xorb(xorb);
        let repaired = self.index.damaged(&xorb)?;
        self.record_xorb(&footer, stored_len)?;
        if self.backend.is_shared() {
            // On object storage a look is a request, and the object was just put whole: it is
            // taken as intact for the moment a seen object is (`footers::STAMP_FRESH`) under
            // a stamp of its length only, which no stored object has. After that a look finds
            // the real stamp, and the footer is read and the object recorded as verified then.
            let provisional = crate::backend::ObjectStamp {
                len: stored_len,
                version: [0; 24],
            };
            self.cache_footer(provisional, Arc::new(footer));
        } else if let Some(stamp) = self.backend.stamp(key)? {
            self.index.set_verified(&xorb, &stamp)?;
            self.cache_footer(stamp, Arc::new(footer));
        }
        if let Some((_, why)) = repaired {
            tracing::warn!(%xorb, was = %why, "stored xorb repaired by a new upload of it");
        }
        Ok(())
    }

    /// Fails with the storage-full error unless writing `bytes` more leaves the store's
    /// free-space reserve ([`StoreOptions::min_free_bytes`]) free: for request bodies spooled
    /// before they are stored.
    pub fn check_space(&self, bytes: u64) -> Result<(), StoreError> {
        Ok(self.backend.check_space(bytes)?)
    }

    /// The store's temporary directory (see [`Self::spool_path`]).
    pub fn spool_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A new unique path in the store's temporary directory (on the store's filesystem, cleaned
    /// of files older than an hour when a store opens) where a request body can be spooled
    /// before [`Self::put_xorb_file`]. Nothing is created.
    pub fn spool_path(&self, what: &str) -> PathBuf {
        self.backend.temp_path(what)
    }

    pub(super) fn record_xorb(
        &self,
        footer: &XorbFooter,
        stored_len: u64,
    ) -> Result<(), StoreError> {
        let unpacked = footer
            .unpacked_chunk_offsets
            .as_ref()
            .and_then(|o| o.last())
            .map_or(0, |&n| u64::from(n));
        // Dense keys (docs/format.md §5.5), every eligible chunk among them (§5.1).
        let indexed: Vec<(ChunkHash, u32)> = footer
            .chunk_hashes
            .iter()
            .enumerate()
            .filter(|(_, h)| xet_format::dedup::is_dense_key(h))
            .map(|(i, h)| (*h, i as u32))
            .collect();
        let meta = XorbMeta {
            num_chunks: footer.num_chunks() as u32,
            stored_len,
            unpacked_len: unpacked,
        };
        self.index.add_xorb(footer.hash, meta, &indexed)?;
        Ok(())
    }

    pub(super) fn cache_footer(&self, stamp: ObjectStamp, footer: Arc<XorbFooter>) {
        self.footers.lock_anyway().insert(stamp, footer);
    }

    /// The footer of an intact stored xorb (see [`Self::check_xorb`]); `None` when the xorb is
    /// not stored, and the damage error when its stored copy is damaged.
    pub fn footer(&self, xorb: &XorbHash) -> Result<Option<Arc<XorbFooter>>, StoreError> {
        match self.check_xorb(xorb)? {
            XorbHealth::Intact(f) => Ok(Some(f)),
            XorbHealth::Missing => Ok(None),
            XorbHealth::Damaged(detail) => Err(StoreError::DamagedXorb {
                xorb: *xorb,
                detail,
            }),
        }
    }

    /// Validates a shard (upload or complete form) against the stored xorbs and registers its
    /// files, atomically. `progress` is called as terms are verified.
    pub fn register_shard(
        &self,
        bytes: &[u8],
        progress: &mut dyn FnMut(ValidationProgress),
    ) -> Result<ShardOutcome, StoreError> {
        self.register_shard_staged(bytes, progress, &mut || {}, None)
    }

    /// [`Self::register_shard`], also telling `committing` when validation has passed and the
    /// shard is being written (the `committing` frame of `POST /v2/shards`). Not called for a
    /// shard that was registered before.
    pub fn register_shard_staged(
        &self,
        bytes: &[u8],
        progress: &mut dyn FnMut(ValidationProgress),
        committing: &mut dyn FnMut(),
        repo: Option<&RepoName>,
    ) -> Result<ShardOutcome, StoreError> {
        if bytes.len() as u64 > MAX_SHARD_SIZE {
            return Err(StoreError::ShardTooLarge {
                len: bytes.len(),
                max: MAX_SHARD_SIZE,
            });
        }
        let shard_hash = ShardHash::of(bytes);
        let parsed = ParsedShard::parse(bytes).map_err(ShardRejection::Malformed)?;
        let shard = parsed.shard;
        if shard.is_keyed() {
            return Err(ShardRejection::Keyed.into());
        }
        // Garbage collection deletes nothing between validation and commit.
        let _collecting = self.collecting.read_anyway();
        // The same bytes again are acknowledged without validation, unless a file they
        // register lost a xorb since: then validation refuses them naming it, so the client
        // uploads it again.
        let registered = self.index.has_shard(&shard_hash)?;
        if registered && self.files_intact(&shard)? && self.still_whole(&shard)? {
            return self.acknowledge_again(bytes, shard_hash, &shard, repo);
        }
        let validated = Instant::now();
        let mut entries = match self.validate(&shard, shard_hash, progress) {
            Ok(entries) => entries,
            Err(e) => {
                if matches!(
                    e,
                    StoreError::ShardRejected(
                        ShardRejection::UnknownXorb { .. }
                            | ShardRejection::UnknownXorbBlock { .. }
                    )
                ) {
                    // The client sends the shard's xorbs again: each is looked at in storage
                    // then, not answered "already stored" from a look before this refusal (a
                    // collection in another process may be deleting them).
                    self.forget_seen_of(&shard);
                }
                return Err(e);
            }
        };
        // Files registered before whose reconstruction lost a xorb: this shard, just validated
        // against intact xorbs, replaces their record (re-pushing a damaged file repairs it).
        for (file, _) in &entries.files {
            if let Some((xorb, _)) = self.file_damage(file)? {
                tracing::warn!(%file, %xorb, "file re-registered with intact xorbs (repaired)");
                entries.replace.push(*file);
            }
        }
        committing();
        // On shared storage, a collector in another process may have deleted a xorb since the
        // validation: the log entry first, then what collectors announced (see `crate::gc`).
        // A xorb put back from this node's copy means the shard is logged and checked again.
        self.put_and_log_shard(shard_hash, bytes, repo)?;
        let named = term_xorbs(&shard);
        let mut rounds = 0;
        loop {
            if rounds > 0 {
                self.log_shard(&shard_hash, repo)?;
            }
            let logged = Instant::now();
            if !self.confirm_against_sweeps(&named, validated, Some(logged))? {
                break;
            }
            rounds += 1;
            if rounds == 3 {
                let xorb = named
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(XorbHash::from_bytes([0; 32]));
                return Err(StoreError::SweepInProgress { xorb });
            }
        }
        let uploader = repo.map_or("", RepoName::as_str);
        self.claims.check_backlog(&self.index, &entries, uploader)?;
        let (new_files, new_bytes) =
            self.index
                .add_shard(shard_hash, &entries, now_unix(), uploader, Commit::Durable)?;
        let claims = self.claims.unchecked(&self.index, &entries)?;
        if let Some(repo) = repo {
            let files: Vec<FileHash> = shard.files.iter().map(|f| f.hash).collect();
            self.let_repo_read(&shard_hash, &files, repo, true)?;
        }
        self.registered_bytes
            .fetch_add(new_bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(ShardOutcome {
            shard: shard_hash,
            newly_registered: true,
            files: shard.files.len(),
            new_files,
            new_bytes,
            claims,
        })
    }

    /// For a shard registered before whose files look intact: on shared storage, whether no
    /// collection in another process removed one of its xorbs since this node last saw it
    /// (see `crate::gc`; a xorb put back from this node's copy counts as removed, so that the
    /// shard is registered and logged again). Always true for a store no other process uses.
    fn still_whole(&self, shard: &Shard) -> Result<bool, StoreError> {
        match self.confirm_against_sweeps(&term_xorbs(shard), Instant::now(), None) {
            Ok(restored) => Ok(!restored),
            Err(StoreError::ShardRejected(ShardRejection::UnknownXorb { .. })) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The answer to a shard registered before whose files are intact: nothing validated.
    /// Restores the shard file if it was lost or quarantined, and lets `repo` read its files
    /// if another repository registered them (its client just proved it knows their chunks).
    fn acknowledge_again(
        &self,
        bytes: &[u8],
        shard_hash: ShardHash,
        shard: &Shard,
        repo: Option<&RepoName>,
    ) -> Result<ShardOutcome, StoreError> {
        self.backend
            .put_if_absent(ObjectKey::Shard(shard_hash), bytes)?;
        if let Some(repo) = repo {
            let files: Vec<FileHash> = shard.files.iter().map(|f| f.hash).collect();
            self.let_repo_read(&shard_hash, &files, repo, false)?;
        }
        Ok(ShardOutcome {
            shard: shard_hash,
            newly_registered: false,
            files: shard.files.len(),
            new_files: 0,
            new_bytes: 0,
            claims: Vec::new(),
        })
    }

    /// Whether every xorb the files of `shard` need is intact.
    fn files_intact(&self, shard: &Shard) -> Result<bool, StoreError> {
        for f in &shard.files {
            if self.file_damage(&f.hash)?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// docs/cas-api.md §9.3, items 3–8: everything a shard claims is checked against stored xorbs.
    pub(super) fn validate(
        &self,
        shard: &Shard,
        shard_hash: ShardHash,
        progress: &mut dyn FnMut(ValidationProgress),
    ) -> Result<ShardEntries, StoreError> {
        let total: u64 = shard.files.iter().map(|f| f.terms.len() as u64).sum();
        let mut verified = 0u64;
        progress(ValidationProgress { verified, total });
        let mut entries = ShardEntries::default();
        // Each xorb is checked once per shard, however many terms name it; its block in the
        // shard (if any) says how much of it to read at a first look.
        let mut intact: HashMap<XorbHash, Arc<XorbFooter>> = HashMap::new();
        let blocks: HashMap<XorbHash, &XorbInfo> =
            shard.xorbs.iter().map(|b| (b.hash, b)).collect();
        for file in &shard.files {
            let id = file.hash;
            if file.unknown_flags != 0 {
                return Err(ShardRejection::UnknownFlags {
                    file: id,
                    flags: file.unknown_flags,
                }
                .into());
            }
            let Some(verification) = &file.verification else {
                return Err(ShardRejection::MissingVerification { file: id }.into());
            };
            if file.terms.is_empty() && !id.is_zero() {
                return Err(ShardRejection::NoTerms { file: id }.into());
            }
            let mut chunks: Vec<ChunkRef> = Vec::new();
            let mut terms = Vec::with_capacity(file.terms.len());
            for (i, term) in file.terms.iter().enumerate() {
                let first_read =
                    crate::footers::first_read_len(blocks.get(&term.xorb_hash).copied());
                let footer =
                    self.intact_footer(&mut intact, (id, i), term.xorb_hash, first_read)?;
                terms.push(check_term(&footer, id, i, term, verification, &mut chunks)?);
                verified += 1;
                if verified.is_multiple_of(64) {
                    progress(ValidationProgress { verified, total });
                }
            }
            let computed = file_hash(&chunks);
            if computed != id {
                return Err(ShardRejection::FileHash { file: id, computed }.into());
            }
            let size = chunks.iter().map(|c| c.len).sum();
            if let (Some(oid), false) = (file.sha256, id.is_zero()) {
                entries.oids.push((oid, id));
            }
            entries.dedup.extend(dedup_probes(&terms, &chunks));
            entries.files.push((
                id,
                FileRecord {
                    size,
                    shard: shard_hash,
                    terms,
                },
            ));
        }
        for block in &shard.xorbs {
            self.check_xorb_block(block)?;
        }
        progress(ValidationProgress { verified, total });
        Ok(entries)
    }

    /// The footer of the intact stored xorb that term `term` of file `file` uses, checked once
    /// per shard (`intact` keeps those checked), reading `first_read` bytes of its end at a
    /// first look ([`crate::footers::first_read_len`]).
    fn intact_footer(
        &self,
        intact: &mut HashMap<XorbHash, Arc<XorbFooter>>,
        (file, term): (FileHash, usize),
        xorb: XorbHash,
        first_read: u64,
    ) -> Result<Arc<XorbFooter>, StoreError> {
        if let Some(f) = intact.get(&xorb) {
            return Ok(Arc::clone(f));
        }
        let f = match self.check_or_restore(&xorb, first_read)? {
            XorbHealth::Intact(f) => f,
            XorbHealth::Missing => {
                return Err(ShardRejection::UnknownXorb { file, term, xorb }.into())
            }
            XorbHealth::Damaged(detail) => {
                return Err(ShardRejection::DamagedXorb { xorb, detail }.into())
            }
        };
        intact.insert(xorb, Arc::clone(&f));
        Ok(f)
    }

    /// [`Self::check_xorb_reading`] for a shard's validation: on shared storage, a xorb that is
    /// gone (collected by another process while its push was in flight) but of which this node
    /// keeps a copy is put back from the copy first.
    fn check_or_restore(&self, xorb: &XorbHash, first_read: u64) -> Result<XorbHealth, StoreError> {
        match self.check_xorb_reading(xorb, first_read)? {
            XorbHealth::Missing if self.backend.is_shared() && self.restore_from_copy(xorb) => {
                self.check_xorb_reading(xorb, first_read)
            }
            health => Ok(health),
        }
    }

    /// A shard's xorb block must describe the stored xorb exactly (dedup flag and on-disk size
    /// aside).
    fn check_xorb_block(&self, block: &XorbInfo) -> Result<(), StoreError> {
        let xorb = block.hash;
        let first_read = crate::footers::first_read_len(Some(block));
        let footer = match self.check_or_restore(&xorb, first_read)? {
            XorbHealth::Intact(f) => f,
            XorbHealth::Missing => return Err(ShardRejection::UnknownXorbBlock { xorb }.into()),
            XorbHealth::Damaged(detail) => {
                return Err(ShardRejection::DamagedXorb { xorb, detail }.into())
            }
        };
        let fail = |detail: String| StoreError::from(ShardRejection::XorbBlock { xorb, detail });
        if block.chunks.len() != footer.num_chunks() {
            return Err(fail(format!(
                "{} chunk entries, the xorb has {} chunks",
                block.chunks.len(),
                footer.num_chunks()
            )));
        }
        let mut start = 0u64;
        for (i, c) in block.chunks.iter().enumerate() {
            let len = u64::from(footer.chunk_len(i).unwrap_or(0));
            if c.hash != footer.chunk_hashes[i]
                || u64::from(c.chunk_byte_range_start) != start
                || u64::from(c.unpacked_segment_bytes) != len
            {
                return Err(fail(format!(
                    "chunk entry {i} differs from the stored chunk"
                )));
            }
            start += len;
        }
        if u64::from(block.num_bytes_in_xorb) != start {
            return Err(fail(format!(
                "num_bytes_in_xorb is {}, the chunks hold {start}",
                block.num_bytes_in_xorb
            )));
        }
        Ok(())
    }

    /// Stores a new shard (not registered here: new, unless another node stored it a moment
    /// ago, the same bytes under the same hash, so no look first) and logs it
    /// ([`Self::log_shard`]). On shared storage both requests go at once: a node that lists the
    /// entry before the shard is there tries it again at its next catch-up (`crate::sync`).
    fn put_and_log_shard(
        &self,
        shard: ShardHash,
        bytes: &[u8],
        repo: Option<&RepoName>,
    ) -> Result<(), StoreError> {
        let put = || self.backend.put_new(ObjectKey::Shard(shard), bytes);
        if !self.backend.is_shared() {
            put()?;
            return self.log_shard(&shard, repo);
        }
        let (stored, logged) = std::thread::scope(|s| {
            let stored = s.spawn(put);
            let logged = self.log_shard(&shard, repo);
            (stored.join(), logged)
        });
        match stored {
            Ok(result) => result?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        logged
    }

    /// A registered file's record.
    pub fn file(&self, file: &FileHash) -> Result<Option<FileRecord>, StoreError> {
        match self.index.file(file)? {
            None if self.caught_up_after_miss() => Ok(self.index.file(file)?),
            found => Ok(found),
        }
    }

    /// The reconstruction plan of bytes `range` (inclusive) of a file, or `None` if the file is
    /// not registered. The empty file (hash 0) is always known and has an empty plan.
    pub fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, StoreError> {
        self.reconstruction_with(file, range, None)
    }

    /// [`Store::reconstruction`] of the whole file for a reader of this store itself: terms and
    /// fetch ranges of at most `max_fetch` stored bytes each (at least a chunk; see
    /// [`xet_protocol::reconstruction::bounded`]). The download walk holds a few fetch ranges
    /// whole at once, and the ranges of a plan for clients are often whole xorbs.
    pub fn reconstruction_bounded(
        &self,
        file: &FileHash,
        max_fetch: u64,
    ) -> Result<Option<ReconstructionPlan>, StoreError> {
        self.reconstruction_with(file, None, Some(max_fetch))
    }

    fn reconstruction_with(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
        max_fetch: Option<u64>,
    ) -> Result<Option<ReconstructionPlan>, StoreError> {
        let terms = if file.is_zero() {
            Vec::new()
        } else {
            match self.file(file)? {
                Some(record) => record.terms,
                None => return Ok(None),
            }
        };
        let mut owned: HashMap<XorbHash, Arc<XorbFooter>> = HashMap::new();
        for t in &terms {
            if let std::collections::hash_map::Entry::Vacant(slot) = owned.entry(t.xorb) {
                // A file is served only whole: a missing or damaged xorb is an error naming it,
                // not presigned URLs to bytes that cannot be rebuilt.
                match self.check_xorb_for_download(&t.xorb)? {
                    XorbHealth::Intact(f) => {
                        slot.insert(f);
                    }
                    XorbHealth::Missing => {
                        return Err(StoreError::DamagedXorb {
                            xorb: t.xorb,
                            detail: format!("file {file} needs it and it is not stored"),
                        })
                    }
                    XorbHealth::Damaged(detail) => {
                        return Err(StoreError::DamagedXorb {
                            xorb: t.xorb,
                            detail: format!("file {file} needs it; {detail}"),
                        })
                    }
                }
            }
        }
        let footers: HashMap<XorbHash, &XorbFooter> =
            owned.iter().map(|(h, f)| (*h, f.as_ref())).collect();
        let planned = plan(&terms, &footers, range).and_then(|p| match max_fetch {
            Some(max) => bounded(p, &footers, max),
            None => Ok(p),
        });
        planned.map(Some).map_err(|source| StoreError::Plan {
            file: *file,
            source,
        })
    }

    /// The chunks of a registered file in order, from the footers of the xorbs it uses; `None`
    /// if it is not registered. A xorb that is missing or damaged is an error naming it.
    pub fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, StoreError> {
        if file.is_zero() {
            return Ok(Some(Vec::new()));
        }
        let Some(record) = self.index.file(file)? else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for t in &record.terms {
            let footer = match self.check_xorb(&t.xorb)? {
                XorbHealth::Intact(f) => f,
                XorbHealth::Missing => {
                    return Err(StoreError::DamagedXorb {
                        xorb: t.xorb,
                        detail: format!("file {file} needs it and it is not stored"),
                    })
                }
                XorbHealth::Damaged(detail) => {
                    return Err(StoreError::DamagedXorb {
                        xorb: t.xorb,
                        detail,
                    })
                }
            };
            for c in t.chunk_start..t.chunk_end {
                let (Some(hash), Some(len)) = (
                    footer.chunk_hashes.get(c as usize),
                    footer.chunk_len(c as usize),
                ) else {
                    return Err(StoreError::DamagedXorb {
                        xorb: t.xorb,
                        detail: format!("file {file} names chunk {c}, which it does not hold"),
                    });
                };
                out.push(ChunkRef::new(*hash, u64::from(len)));
            }
        }
        Ok(Some(out))
    }

    /// The Xet file registered for a Git LFS oid, with its size, for a reader who sees every
    /// repository (see [`Self::oid_file`]). What a download may use: git-lfs checks the SHA-256
    /// of what it downloads.
    pub fn file_by_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, StoreError> {
        Ok(self
            .oid_file(oid, None, Freshness::CatchUpOnMiss)?
            .map(|f| (f.file, f.size)))
    }

    /// The file `oid` stands for, to a credential that sees `reader`'s files only (`None`:
    /// every file), looked up as `freshness` says: a checked mapping it can see (the oid's
    /// first, then any other), else the oldest unchecked claim on a file it can see. Another
    /// repository's registrations and claims never answer, nor hide this one's.
    pub fn oid_file(
        &self,
        oid: &LfsOid,
        reader: Option<&RepoName>,
        freshness: Freshness,
    ) -> Result<Option<OidFile>, StoreError> {
        let lookup = || -> Result<Option<(FileHash, bool)>, StoreError> {
            for file in self.index.checked_files(oid)? {
                if self.visible_as(&file, reader, Freshness::IndexOnly)? {
                    return Ok(Some((file, true)));
                }
            }
            for claim in self.index.claims_on(oid)? {
                if self.visible_as(&claim.file, reader, Freshness::IndexOnly)? {
                    return Ok(Some((claim.file, false)));
                }
            }
            Ok(None)
        };
        let found = match lookup()? {
            None if freshness == Freshness::CatchUpOnMiss && self.caught_up_after_miss() => {
                lookup()?
            }
            found => found,
        };
        let Some((file, checked)) = found else {
            return Ok(None);
        };
        let size = self.index.file(&file)?.map_or(0, |r| r.size);
        Ok(Some(OidFile {
            file,
            size,
            checked,
        }))
    }

    /// Whether `oid` has a checked mapping (to any file): this store hashed a file and found
    /// that SHA-256. A shard's SHA-256 is only a claim until then (any client could name any
    /// oid).
    pub fn oid_checked(&self, oid: &LfsOid) -> Result<bool, StoreError> {
        Ok(self.index.file_by_oid(oid)?.is_some())
    }

    /// The checked mapping of `oid` that `reader` can see (see [`Self::oid_file`]), only if
    /// every xorb the file needs is intact: what an upload may skip as already stored (a
    /// damaged file is uploaded again, which repairs it; an unchecked claim is not trusted to
    /// stand for the oid).
    pub fn intact_file_by_oid(
        &self,
        oid: &LfsOid,
        reader: Option<&RepoName>,
    ) -> Result<Option<(FileHash, u64)>, StoreError> {
        let Some(found) = self.oid_file(oid, reader, Freshness::CatchUpOnMiss)? else {
            return Ok(None);
        };
        if !found.checked || self.file_damage(&found.file)?.is_some() {
            return Ok(None);
        }
        Ok(Some((found.file, found.size)))
    }

    /// Everyone with SHA-256 claims waiting to be checked, in name order (see
    /// [`Claim::uploader`]).
    pub fn claim_uploaders(&self) -> Result<Vec<String>, StoreError> {
        self.claims.uploaders(&self.index)
    }

    /// Up to `limit` of `uploader`'s claims waiting to be checked, oldest first.
    pub fn oldest_claims(&self, uploader: &str, limit: usize) -> Result<Vec<Claim>, StoreError> {
        self.claims.oldest(&self.index, uploader, limit)
    }

    /// How many of `uploader`'s claims wait to be checked, and the bytes of their files.
    pub fn claim_load_of(&self, uploader: &str) -> Result<(u64, u64), StoreError> {
        self.claims.load_of(&self.index, uploader)
    }

    /// Whether the claim that `file` has SHA-256 `oid` still waits to be checked.
    pub fn claim_pending(&self, oid: &LfsOid, file: &FileHash) -> Result<bool, StoreError> {
        self.claims.pending(&self.index, oid, file)
    }

    /// Records whether `file` has SHA-256 `oid`, as the caller found by hashing it: when it
    /// does, the mapping is checked (what [`Self::intact_file_by_oid`] trusts); either way the
    /// claim, if any, is gone.
    pub fn settle_claim(
        &self,
        oid: &LfsOid,
        file: &FileHash,
        holds: bool,
    ) -> Result<(), StoreError> {
        let shared = self.backend.is_shared();
        self.claims.settle(&self.index, shared, oid, file, holds)
    }

    /// Records the claims this process found to hold since the last call, for the other nodes
    /// of shared storage ([`Self::claim_checked_elsewhere`]): one batch object, written by the
    /// claims job rather than by the request that checked them. A record that cannot be
    /// written only costs another node its own check.
    pub fn record_checked_claims(&self) {
        if let Some(bucket) = self.backend.shared() {
            self.claims
                .record_checked(bucket, &self.claim_record_errors);
        }
    }

    /// Settles the claim that `oid` is the SHA-256 of `file` without hashing it, when another
    /// process sharing the storage checked it already (see [`Self::settle_claim`]). `false`:
    /// no such record; the claim is left pending.
    pub fn claim_checked_elsewhere(
        &self,
        oid: &LfsOid,
        file: &FileHash,
    ) -> Result<bool, StoreError> {
        match self.backend.shared() {
            Some(bucket) => self
                .claims
                .checked_elsewhere(&self.index, bucket, oid, file),
            None => Ok(false),
        }
    }

    /// The first xorb a registered file needs that is missing or damaged, with why; `None` when
    /// every one is intact (or the file is not registered). Asks the bucket (see
    /// [`Purpose::Upload`]).
    pub fn file_damage(&self, file: &FileHash) -> Result<Option<(XorbHash, String)>, StoreError> {
        self.file_damage_memo(file, Purpose::Upload, &mut std::collections::HashMap::new())
    }

    /// [`Store::file_damage`] for `purpose`, for many files at once (a batch request): each
    /// xorb is checked once, its verdict kept in `memo` for the files after it (small files
    /// packed together share xorbs; on object storage each check is a request).
    pub fn file_damage_memo(
        &self,
        file: &FileHash,
        purpose: Purpose,
        memo: &mut std::collections::HashMap<XorbHash, Option<String>>,
    ) -> Result<Option<(XorbHash, String)>, StoreError> {
        let Some(record) = self.index.file(file)? else {
            return Ok(None);
        };
        for t in &record.terms {
            let verdict = match memo.get(&t.xorb) {
                Some(v) => v.clone(),
                None => {
                    let health = match purpose {
                        Purpose::Download => self.check_xorb_for_download(&t.xorb)?,
                        Purpose::Upload => self.check_xorb(&t.xorb)?,
                    };
                    let v = match health {
                        XorbHealth::Intact(_) => None,
                        XorbHealth::Missing => Some("it is not stored".to_string()),
                        XorbHealth::Damaged(why) => Some(why),
                    };
                    memo.insert(t.xorb, v.clone());
                    v
                }
            };
            if let Some(why) = verdict {
                return Ok(Some((t.xorb, why)));
            }
        }
        Ok(None)
    }

    /// For a global-dedup query: an unkeyed shard with no files whose xorb section lists the
    /// xorb that holds `chunk` (if the chunk is indexed for dedup: a file's first chunk or probe,
    /// or a dense key of a stored xorb, docs/format.md §5.1, §5.5) and, after it, the
    /// other xorbs of the first file that used that xorb, in file order from there (the
    /// neighbourhood, docs/format.md §5.2): one hit lets the client deduplicate against the whole
    /// file, not one xorb of it. At most [`DEDUP_ANSWER_MAX_CHUNKS`] chunks in all; only intact
    /// xorbs. The caller keys it.
    pub fn dedup_shard(&self, chunk: &ChunkHash) -> Result<Option<Shard>, StoreError> {
        let Some((xorb, _)) = self.index.dedup(chunk)? else {
            return Ok(None);
        };
        // Never an answer that would make a client rely on a xorb that is not intact.
        let XorbHealth::Intact(footer) = self.check_xorb(&xorb)? else {
            return Ok(None);
        };
        let mut blocks = vec![self.xorb_block(&footer)?];
        let mut chunks = footer.num_chunks();
        if let Some(record) = self
            .index
            .file_of_xorb(&xorb)?
            .and_then(|f| self.index.file(&f).transpose())
            .transpose()?
        {
            let mut order: Vec<XorbHash> = Vec::new();
            for t in &record.terms {
                if !order.contains(&t.xorb) {
                    order.push(t.xorb);
                }
            }
            // Following the hit first (what comes next in an edited copy), then before it.
            let at = order.iter().position(|x| *x == xorb).unwrap_or(0);
            let (before, after) = order.split_at(at);
            for neighbour in after.iter().skip(1).chain(before.iter()) {
                let XorbHealth::Intact(f) = self.check_xorb(neighbour)? else {
                    continue;
                };
                if chunks + f.num_chunks() > DEDUP_ANSWER_MAX_CHUNKS {
                    break;
                }
                chunks += f.num_chunks();
                blocks.push(self.xorb_block(&f)?);
            }
        }
        Ok(Some(Shard {
            files: Vec::new(),
            xorbs: blocks,
            meta: Default::default(),
        }))
    }

    /// The shard xorb block describing a stored xorb.
    fn xorb_block(&self, footer: &XorbFooter) -> Result<XorbInfo, StoreError> {
        let mut info = XorbInfo::from_chunks(footer.hash, &footer.chunk_refs())
            .map_err(ShardRejection::Malformed)?;
        if let Some(meta) = self.index.xorb(&footer.hash)? {
            info.num_bytes_on_disk = u32::try_from(meta.stored_len).unwrap_or(u32::MAX);
        }
        Ok(info)
    }

    /// The length of an intact stored xorb object (with its footer); `None` if it is not
    /// stored, the damage error if its stored copy is found missing or damaged.
    pub fn xorb_len(&self, xorb: &XorbHash) -> Result<Option<u64>, StoreError> {
        match self.check_xorb_stamped(xorb)? {
            (XorbHealth::Intact(_), Some(stamp)) => Ok(Some(stamp.len)),
            (XorbHealth::Intact(_), None) => Ok(self.backend.len(ObjectKey::Xorb(*xorb))?),
            (XorbHealth::Missing, _) => Ok(None),
            (XorbHealth::Damaged(detail), _) => Err(StoreError::DamagedXorb {
                xorb: *xorb,
                detail,
            }),
        }
    }

    /// What a download of a range of `xorb` reads from: on object storage, a xorb of at most
    /// [`crate::small_xorbs::SMALL_XORB_MAX`] kept in memory or, with `may_read_whole` (the
    /// caller has room for it), read whole (see [`crate::small_xorbs`]); otherwise its length,
    /// as [`Store::xorb_len`] (`None`: not stored).
    pub fn xorb_for_reading(
        &self,
        xorb: &XorbHash,
        may_read_whole: bool,
    ) -> Result<Option<XorbBytes>, StoreError> {
        if !self.backend.is_shared() {
            return Ok(self.xorb_len(xorb)?.map(XorbBytes::Stored));
        }
        if let Some(bytes) = self.copies.in_memory(xorb) {
            return Ok(Some(XorbBytes::Whole(bytes)));
        }
        if let Some(len) = self.registered_copy(xorb)? {
            return Ok(Some(XorbBytes::Stored(len)));
        }
        if !may_read_whole {
            return Ok(self.xorb_len(xorb)?.map(XorbBytes::Stored));
        }
        let max = crate::small_xorbs::SMALL_XORB_MAX;
        if let Some(bytes) = self.small_xorb_read_once(xorb, max)? {
            return Ok(Some(XorbBytes::Whole(bytes)));
        }
        let Some(len) = self.xorb_len(xorb)? else {
            return Ok(None);
        };
        if len == 0 || len > crate::small_xorbs::SMALL_XORB_MAX {
            return Ok(Some(XorbBytes::Stored(len)));
        }
        let Some(bytes) = self.read_checked_xorb(xorb, 0..=len - 1)? else {
            return Ok(None);
        };
        if bytes.len() as u64 != len {
            // Changed under us (it cannot, unless replaced outside git-xet): read as asked.
            return Ok(Some(XorbBytes::Stored(len)));
        }
        let bytes = Arc::new(bytes);
        self.copies.keep_in_memory(*xorb, Arc::clone(&bytes));
        Ok(Some(XorbBytes::Whole(bytes)))
    }

    /// The length of this node's copy of `xorb` ([`crate::xorb_cache`]) if a download may read
    /// it without asking the bucket: the xorb is registered here with that length, not
    /// recorded damaged and not being collected, and its copy was seen verified by this
    /// process. A registered xorb is one some shard names, so garbage collection keeps it while
    /// a file uses it, and its copy holds the bytes the bucket's object was verified to hold;
    /// checks of a xorb (uploads, shard validation) never get here and always ask the bucket.
    pub(crate) fn registered_copy(&self, xorb: &XorbHash) -> Result<Option<u64>, StoreError> {
        let Some(copy) = self.copies.disk_copy(xorb) else {
            return Ok(None);
        };
        if self.being_collected(xorb) || self.index.damaged(xorb)?.is_some() {
            return Ok(None);
        }
        if self
            .index
            .xorb(xorb)?
            .is_none_or(|meta| meta.stored_len != copy.len)
        {
            return Ok(None);
        }
        // Once per process: a copy it has not seen verified (found on disk at start, read from
        // the bucket in the background) is read whole and checked before it serves without the
        // bucket; a bad one goes. Only small ones, a few at a time (memory): the others are
        // read after a look at the bucket, as before.
        let verify = |bytes: &[u8]| crate::footers::verify_stored(xorb, bytes).map(|_| ());
        if !copy.verified && !self.copies.verify_disk_copy(xorb, copy.len, verify) {
            return Ok(None);
        }
        Ok(Some(copy.len))
    }

    /// On object storage, the whole object of a registered small xorb: from memory, or if it
    /// is at most `max` bytes long, read whole with no look first by one of the requests that
    /// want it at once (the others wait for it: see `reading_whole`). `None` where that does
    /// not apply (see [`Self::read_small_xorb_verified`]).
    pub(crate) fn small_xorb_read_once(
        &self,
        xorb: &XorbHash,
        max: u64,
    ) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        if !self.backend.is_shared() {
            return Ok(None);
        }
        if let Some(bytes) = self.copies.in_memory(xorb) {
            return Ok(Some(bytes));
        }
        let _one_reader = self.copies.one_reader(xorb);
        // Another request may have read it while this one waited.
        if let Some(bytes) = self.copies.in_memory(xorb) {
            return Ok(Some(bytes));
        }
        self.read_small_xorb_verified(xorb, max)
    }

    /// A registered xorb of at most `max` bytes read whole with no look first, kept in memory
    /// if its bytes verify (every chunk against the name: more than a look at its stamp
    /// tells), its footer cached as seen now under the stamp of the version read. `None` when
    /// that does not apply (not registered here, larger, damaged, being collected) or the read
    /// does not give the registered object: the caller then checks it as usual, which also
    /// deals with damage.
    fn read_small_xorb_verified(
        &self,
        xorb: &XorbHash,
        max: u64,
    ) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        let Some(meta) = self.index.xorb(xorb)? else {
            return Ok(None);
        };
        if meta.stored_len == 0
            || meta.stored_len > max.min(crate::small_xorbs::SMALL_XORB_MAX)
            || self.being_collected(xorb)
            || self.index.damaged(xorb)?.is_some()
        {
            return Ok(None);
        }
        let Some((bytes, stamp)) = self.backend.read_all_stamped(ObjectKey::Xorb(*xorb))? else {
            return Ok(None);
        };
        if bytes.len() as u64 != meta.stored_len || stamp.len != meta.stored_len {
            return Ok(None);
        }
        let Ok(footer) = crate::footers::verify_stored(xorb, &bytes) else {
            return Ok(None);
        };
        self.cache_footer(stamp, Arc::new(footer));
        Ok(Some(self.copies.keep_verified(*xorb, bytes)))
    }

    /// Bytes `range` (inclusive) of the stored object of a xorb that [`Store::xorb_len`] or
    /// [`Store::check_xorb`] just found intact, without checking it again: the pieces of one
    /// response cost one request each to object storage, not two. `None` if it is gone since.
    pub fn read_checked_xorb(
        &self,
        xorb: &XorbHash,
        range: RangeInclusive<u64>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (start, end) = range.into_inner();
        self.read_stored_range(xorb, start..end.saturating_add(1))
    }

    /// Whether the objects are on shared object storage, where each read is a request (reads
    /// are then worth making larger and starting ahead).
    pub fn on_object_storage(&self) -> bool {
        self.backend.is_shared()
    }

    /// How long object storage's requests took so far, by kind; `None` for a directory.
    pub fn storage_timings(&self) -> Option<Vec<crate::timings::OpTotals>> {
        self.backend
            .shared()?
            .timings()
            .map(crate::timings::StorageTimings::read)
    }

    /// On object storage, requests sent to the next endpoint because one failed, since the
    /// store opened; `None` for a directory.
    pub fn storage_failovers(&self) -> Option<u64> {
        self.backend
            .shared()?
            .timings()
            .map(crate::timings::StorageTimings::failovers)
    }

    /// Bytes `range` (inclusive) of an intact stored xorb object; `None` if it is not stored,
    /// the damage error if its stored copy is found missing or damaged.
    pub fn read_xorb(
        &self,
        xorb: &XorbHash,
        range: RangeInclusive<u64>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(bytes) = self.copies.in_memory(xorb) {
            let (start, end) = (*range.start() as usize, *range.end() as usize);
            return Ok(bytes
                .get(start..=end.min(bytes.len().saturating_sub(1)))
                .map(<[u8]>::to_vec));
        }
        match self.check_xorb(xorb)? {
            XorbHealth::Intact(_) => {}
            XorbHealth::Missing => return Ok(None),
            XorbHealth::Damaged(detail) => {
                return Err(StoreError::DamagedXorb {
                    xorb: *xorb,
                    detail,
                })
            }
        }
        let (start, end) = range.into_inner();
        self.read_stored_range(xorb, start..end.saturating_add(1))
    }

    /// Bytes `range` of `xorb`'s stored object: from this node's copy if it keeps one, else
    /// from the storage (see [`crate::copies::Copies::read_range`]).
    fn read_stored_range(
        &self,
        xorb: &XorbHash,
        range: std::ops::Range<u64>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let len = || {
            self.footers
                .lock_anyway()
                .latest(xorb)
                .map(|(stamp, _)| stamp.len)
        };
        Ok(self.copies.read_range(xorb, range, len)?)
    }

    /// Failures of the store's background work so far.
    pub fn background_errors(&self) -> BackgroundErrors {
        BackgroundErrors {
            copies: self.copies.failed_copies(),
            claim_records: self
                .claim_record_errors
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Drops this node's copy of `xorb`, if it keeps one.
    pub(super) fn drop_copy(&self, xorb: &XorbHash) {
        self.copies.drop_disk_copy(xorb);
    }

    /// What this node's cache of xorbs did so far; `None` without one.
    pub fn xorb_cache_stats(&self) -> Option<crate::xorb_cache::CacheStats> {
        self.copies.stats()
    }

    /// Sizes of the files this process registered for the first time from uploads (shards
    /// other nodes accepted are theirs to count), since it opened the store.
    pub fn registered_file_bytes(&self) -> u64 {
        self.registered_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Signs URLs of the storage itself for byte ranges of xorbs (see
    /// [`SharedBucket::range_signer`](crate::backend::SharedBucket::range_signer)); `None` for a directory store. May block.
    pub fn range_signer(&self, ttl: Duration) -> Option<Box<dyn crate::backend::RangeSigner>> {
        self.backend.shared()?.range_signer(ttl)
    }

    /// Whether the object storage answers (a look at the store's version object on shared
    /// storage; nothing to ask of a directory, whose index answered already).
    pub fn probe_storage(&self) -> Result<(), StoreError> {
        if let Some(bucket) = self.backend.shared() {
            bucket.shared_value(VERSION_FILE, VERSION_TEXT.as_bytes())?;
        }
        Ok(())
    }

    /// Entry counts of the index.
    pub fn counts(&self) -> Result<IndexCounts, StoreError> {
        Ok(self.index.counts()?)
    }
}
