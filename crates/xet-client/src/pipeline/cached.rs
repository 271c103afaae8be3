//! [`Cached`]: any upload target plus the local [`ShardCache`] of its endpoint.
//!
//! The wrapper delegates every operation to the inner target and adds three things:
//!
//! - [`CasTarget::local_dedup`] is answered from the cache (the inner target's own answer is
//!   not asked);
//! - every shard passed to [`CasTarget::register_shard`] is inserted into the cache once the
//!   inner target accepted it (shards without xorb blocks are skipped: a lookup by chunk can
//!   never find them);
//! - every global-dedup answer ([`CasTarget::dedup_query`] returning a shard) is inserted, keyed
//!   or not, with its key and expiry;
//! - when the inner target refuses a shard because a xorb it relies on is lost or damaged
//!   there ([`TargetError::is_lost_xorb`]), the xorbs the shard relied on without sending them
//!   are dropped from the cache, so that uploading again sends their chunks (the agent does).
//!
//! The cache is an optimisation and never fails an upload: a cache error is logged
//! (`tracing::warn!`), and after the first failed lookup the wrapper stops asking the cache for
//! the rest of its life, so a broken cache directory costs one warning rather than one per chunk.
//! All file I/O is the [`ShardCache`]'s; this module only routes calls.
//!
//! Downloads: with a [`ChunkCache`] attached ([`Cached::with_chunk_cache`], for remote
//! endpoints), xorb ranges are read through it, so chunks fetched once are read locally the
//! next time (see `crate::chunk_cache`); [`XorbSource::read_xorb_range_from`] says which chunks
//! of a range came from it and how many bytes were fetched.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{ChunkCache, ShardCache};
use xet_format::shard::{ParsedShard, Shard};
use xet_format::{ChunkHash, FileHash, LfsOid, XorbHash};
use xet_protocol::{CasTarget, Endpoint, Origin, RangeSink, TargetError, XorbSource};
use xet_protocol::{FetchRange, ReconstructionPlan, UploadClaim};

/// See the module documentation.
#[derive(Debug)]
pub struct Cached<T> {
    inner: T,
    cache: Arc<ShardCache>,
    lookups_disabled: AtomicBool,
    chunks: Option<ChunkCache>,
    /// Bytes fetched into the chunk cache since it was last pruned (`None` before the first
    /// prune of this process).
    unpruned: AtomicU64,
    pruned_once: AtomicBool,
}

impl<T: CasTarget> Cached<T> {
    /// Wraps `inner` with `cache`.
    pub fn new(inner: T, cache: ShardCache) -> Self {
        Self::shared(inner, Arc::new(cache))
    }

    /// Wraps `inner` with a cache shared with other wrappers (e.g. one per transfer over a
    /// store opened per transfer), so its in-memory index is built once.
    pub fn shared(inner: T, cache: Arc<ShardCache>) -> Self {
        Self {
            inner,
            cache,
            lookups_disabled: AtomicBool::new(false),
            chunks: None,
            unpruned: AtomicU64::new(0),
            pruned_once: AtomicBool::new(false),
        }
    }

    /// Reads xorb ranges through `chunks` (see the module documentation).
    pub fn with_chunk_cache(mut self, chunks: ChunkCache) -> Self {
        self.chunks = Some(chunks);
        self
    }

    /// Wraps an endpoint with the shard cache of [`Endpoint::describe`] under `config` (see
    /// [`ShardCache::for_endpoint`]).
    pub fn for_endpoint(config: &crate::CacheConfig, inner: T) -> Self
    where
        T: Endpoint,
    {
        let cache = ShardCache::for_endpoint(config, &inner.describe());
        Self::new(inner, cache)
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    pub fn cache(&self) -> &ShardCache {
        &self.cache
    }

    pub fn into_inner(self) -> T {
        self.inner
    }

    /// After the target refused `shard` because a xorb it relies on is lost or damaged there:
    /// every xorb the shard's files rely on that this upload did not send itself (those came
    /// from the cache or from older dedup answers) is dropped from the cache, so the next upload
    /// does not deduplicate against them blindly again: it asks the server (whose answers name
    /// only intact xorbs) or sends their chunks, which also repairs the server's copy.
    fn forget_relied_on(&self, shard: &[u8], refusal: &TargetError) {
        if !refusal.is_lost_xorb() {
            return;
        }
        let Ok(parsed) = ParsedShard::parse(shard) else {
            return;
        };
        let sent: std::collections::HashSet<XorbHash> =
            parsed.shard.xorbs.iter().map(|x| x.hash).collect();
        let mut relied: Vec<XorbHash> = parsed
            .shard
            .files
            .iter()
            .flat_map(|f| f.terms.iter().map(|t| t.xorb_hash))
            .filter(|x| !sent.contains(x))
            .collect();
        relied.sort();
        relied.dedup();
        if relied.is_empty() {
            return;
        }
        match self.cache.forget_xorbs(&relied) {
            Ok(n) => tracing::warn!(
                xorbs = relied.len(),
                shards = n,
                "the server no longer holds a xorb this upload relied on; dropped the xorbs it \
                 had not sent itself from the local shard cache"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot drop lost xorbs from the shard cache"),
        }
    }

    /// The chunk cache a read of `xorb` goes through: any, for a read that keeps what it
    /// fetches (`keep`); otherwise only one that may hold some of the xorb.
    fn through_cache(&self, xorb: &XorbHash, keep: bool) -> Option<&ChunkCache> {
        self.chunks.as_ref().filter(|c| keep || c.may_hold(xorb))
    }

    fn insert(&self, shard: &Shard, what: &str) {
        if let Err(e) = self.cache.insert_shard(shard) {
            tracing::warn!(error = %e, "cannot add {what} to the shard cache; continuing without");
        }
    }
}

impl<T: CasTarget> CasTarget for Cached<T> {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        self.inner.has_xorb(xorb)
    }

    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        self.inner.put_xorb(xorb, body)
    }

    fn put_xorb_owned(&self, xorb: XorbHash, body: Vec<u8>) -> Result<bool, TargetError> {
        self.inner.put_xorb_owned(xorb, body)
    }

    fn put_xorb_with_progress(
        &self,
        xorb: XorbHash,
        body: Vec<u8>,
        sent: xet_protocol::target::SentBytes,
    ) -> Result<xet_protocol::target::XorbPut, TargetError> {
        self.inner.put_xorb_with_progress(xorb, body, sent)
    }

    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        if let Err(e) = self.inner.register_shard(shard) {
            self.forget_relied_on(shard, &e);
            return Err(e);
        }
        match ParsedShard::parse(shard) {
            Ok(parsed) if !parsed.shard.xorbs.is_empty() => {
                self.insert(&parsed.shard, "a registered shard")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "a registered shard does not parse; not caching it")
            }
        }
        Ok(())
    }

    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        let answer = self.inner.dedup_query(chunk)?;
        if let Some(shard) = &answer {
            self.insert(shard, "a global dedup answer");
        }
        Ok(answer)
    }

    fn dense_key_modulus(&self) -> Option<u64> {
        self.inner.dense_key_modulus()
    }

    fn checks_sha256_claims(&self) -> bool {
        self.inner.checks_sha256_claims()
    }

    fn sha256_computed(&self, oid: &LfsOid, file: &FileHash) -> Result<(), TargetError> {
        self.inner.sha256_computed(oid, file)
    }

    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        self.inner.file_by_sha256(oid)
    }

    /// Claims `first` in the shard cache ([`ShardCache::claim`]), a lock file the agents of
    /// this endpoint share; after a wait for another agent, reads the cache again to pick up
    /// the shard that agent registered.
    fn claim_upload(&self, first: &ChunkHash, patience: Duration) -> Option<UploadClaim> {
        match self.cache.claim(first, patience) {
            Ok(claim) => {
                if claim.waited > Duration::from_millis(50) {
                    if let Err(e) = self.cache.refresh() {
                        tracing::warn!(error = %e, "cannot read the shard cache again; continuing");
                    }
                }
                Some(UploadClaim::new(claim.waited, claim))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim the upload in the shard cache; continuing");
                None
            }
        }
    }

    fn local_dedup(&self, chunk: &ChunkHash) -> Result<Option<Arc<Shard>>, TargetError> {
        if self.lookups_disabled.load(Ordering::Relaxed) {
            return Ok(None);
        }
        match self.cache.lookup(chunk) {
            Ok(found) => Ok(found),
            Err(e) => {
                self.lookups_disabled.store(true, Ordering::Relaxed);
                tracing::warn!(error = %e, "the shard cache cannot be read; uploading without it");
                Ok(None)
            }
        }
    }
}

impl<T: CasTarget + XorbSource> XorbSource for Cached<T> {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        self.read_xorb_range_from(xorb, range, true)
            .map(|(bytes, _)| bytes)
    }

    fn read_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        self.read_xorb_range_from(xorb, range, false)
            .map(|(bytes, _)| bytes)
    }

    /// Streamed straight from the server unless the read goes through the chunk cache.
    fn stream_xorb_range(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        self.stream_xorb_range_from(xorb, range, true, sink)
            .map(|_| ())
    }

    fn stream_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        self.stream_xorb_range_from(xorb, range, false, sink)
            .map(|_| ())
    }

    /// Through the chunk cache, if there is one; a read that keeps nothing (not `keep`) has no
    /// use for a cache that holds nothing of the xorb and goes straight to the server.
    fn read_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        let Some(chunks) = self.through_cache(xorb, keep) else {
            return self.inner.read_xorb_range_from(xorb, range, keep);
        };
        let (bytes, origin) = chunks
            .read_through_keeping(xorb, range, keep, &|r| self.inner.read_xorb_range(xorb, r))?;
        if keep {
            self.unpruned.fetch_add(origin.fetched, Ordering::Relaxed);
        }
        Ok((bytes, origin))
    }

    /// Through the chunk cache when [`Cached::read_xorb_range_from`] would use it (streamed
    /// when the cache holds nothing of the range, else put together whole), else streamed
    /// from the server as it arrives.
    fn stream_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        let Some(chunks) = self.through_cache(xorb, keep) else {
            return self.inner.stream_xorb_range_from(xorb, range, keep, sink);
        };
        let origin = chunks.stream_through_keeping(
            xorb,
            range,
            keep,
            &|r, sink| self.inner.stream_xorb_range_from(xorb, r, keep, sink),
            &|r| self.inner.read_xorb_range(xorb, r),
            sink,
        )?;
        if keep {
            self.unpruned.fetch_add(origin.fetched, Ordering::Relaxed);
        }
        Ok(origin)
    }

    fn forget_cached(&self, xorbs: &[XorbHash]) {
        if let Some(chunks) = &self.chunks {
            chunks.forget(xorbs);
        }
    }

    /// Prunes the chunk cache after the first download of the process, then whenever 256 MiB
    /// (or a quarter of the limit, if less) more went into it (a prune lists every entry), so
    /// that the cache never holds much more than its limit.
    fn trim_cache(&self) {
        let Some(chunks) = &self.chunks else { return };
        let first = !self.pruned_once.swap(true, Ordering::Relaxed);
        let every = (256u64 << 20).min(chunks.max_bytes() / 4).max(1);
        if first || self.unpruned.load(Ordering::Relaxed) >= every {
            self.unpruned.store(0, Ordering::Relaxed);
            let deleted = chunks.prune();
            if deleted > 0 {
                tracing::debug!(deleted, "pruned the download chunk cache");
            }
        }
    }
}

impl<T: Endpoint> Endpoint for Cached<T> {
    fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, TargetError> {
        self.inner.reconstruction(file, range)
    }

    fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        self.inner.locate_oid(oid)
    }

    fn reconstructions(
        &self,
        files: &[FileHash],
    ) -> Result<Option<std::collections::BTreeMap<FileHash, ReconstructionPlan>>, TargetError> {
        self.inner.reconstructions(files)
    }

    fn file_chunks(
        &self,
        file: &xet_format::FileHash,
    ) -> Result<Option<Vec<xet_format::ChunkRef>>, TargetError> {
        self.inner.file_chunks(file)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}
