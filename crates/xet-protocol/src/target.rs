//! Where objects go and come from: the [`CasTarget`] (uploads), [`XorbSource`] (downloads) and
//! [`Endpoint`] (both, plus reconstruction plans) traits. The HTTP client (`xet_client::RemoteCas`)
//! and the storage engine's store (`xet-store`) implement them; the client's pipelines use them.
//!
//! The trait is the set of CAS operations an upload needs (docs/cas-api.md §5.4–§5.7) and nothing
//! more. It is **blocking** and object-safe (`&dyn CasTarget`), for three reasons:
//!
//! - the work around it is CPU-bound (chunking, hashing, compression) and runs on plain threads
//!   and the rayon pool; an async trait would force a runtime on every caller for no gain;
//! - the storage engine's store is synchronous by design (file and database I/O);
//! - the agent is a synchronous stdin/stdout loop and its HTTP client blocks on requests; the
//!   server calls the pipeline from `spawn_blocking`.
//!
//! Implementations must be `Send + Sync`: the pipeline puts xorbs from an uploader thread while
//! the reading thread queries dedup.
//!
//! The traits are implemented for references too, so wrappers such as the client's shard-cache
//! wrapper (`xet_client::pipeline::cached::Cached`) can hold a `&Store` or a `&dyn CasTarget`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use xet_format::shard::Shard;
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};

use crate::wire::ErrorCode;
use crate::{FetchRange, ReconstructionPlan};

/// Told how many bytes of an upload's body have gone out so far
/// ([`CasTarget::put_xorb_with_progress`]).
pub type SentBytes = Arc<dyn Fn(u64) + Send + Sync>;

/// What [`CasTarget::put_xorb_with_progress`] did.
#[derive(Debug)]
pub struct XorbPut {
    /// Whether the xorb was newly stored (`false`: it was there already).
    pub inserted: bool,
    /// The body's buffer, when the target is done with it and no one else holds it: the upload
    /// builds its next xorb in it, in memory already written once, instead of in fresh pages
    /// (each a page fault and a page cleared by the kernel; 64 MiB per xorb).
    pub buffer: Option<Vec<u8>>,
}

/// A failed CAS operation.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A store in this process (the agent's embedded mode, the server's own) refused or failed.
    #[error(transparent)]
    Store(Box<LocalFailure>),
    /// Something the operation needs does not exist at the target.
    #[error("{what} not found")]
    NotFound { what: String },
    /// A remote target answered with an error or could not be reached.
    #[error("{what}: {message}")]
    Remote {
        what: String,
        message: String,
        /// Whether trying again later may succeed (network trouble, 5xx, 429).
        retryable: bool,
        /// The server's error code (the JSON `error` field of its refusal, e.g.
        /// [`ErrorCode::XorbDamaged`]), when it sent one this client knows.
        code: Option<ErrorCode>,
    },
    /// Local I/O around the operation failed (e.g. a staging file).
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// The failure of a store in this process: its error, and the wire code a server would answer
/// it with, so that callers decide on codes whether the store is here or across the network.
#[derive(Debug)]
pub struct LocalFailure {
    /// The code of the refusal, for those callers act on (a lost xorb, a full disk).
    pub code: Option<ErrorCode>,
    /// The store's own error, with the object and offset it names.
    pub error: Box<dyn std::error::Error + Send + Sync>,
}

impl fmt::Display for LocalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for LocalFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl TargetError {
    /// True when the same operation may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        match self {
            TargetError::Remote { retryable, .. } => *retryable,
            TargetError::Io { .. } => true,
            TargetError::Store(_) | TargetError::NotFound { .. } => false,
        }
    }

    /// True when a shard was refused because a xorb it relies on is not stored intact at the
    /// target (`unknown_xorb`, `xorb_damaged`): lost, damaged or collected since the client
    /// learned of it.
    pub fn is_lost_xorb(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::UnknownXorb | ErrorCode::XorbDamaged)
        )
    }

    /// The refusal's error code: a remote server's (the JSON `error` field, when it sent one this
    /// client knows), or the one a store in this process gave its failure.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            TargetError::Remote { code, .. } => *code,
            TargetError::Store(failure) => failure.code,
            _ => None,
        }
    }
}

/// The CAS operations an upload needs. See the module documentation for why it is blocking.
pub trait CasTarget: Send + Sync {
    /// Whether the target already stores this xorb. A target that cannot tell cheaply answers
    /// `false` and relies on [`CasTarget::put_xorb`] being idempotent.
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError>;

    /// Stores a xorb given in upload form (chunk region, no footer; docs/format.md §3.9). Returns
    /// whether it was newly stored (`false`: it was already there). Idempotent.
    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError>;

    /// [`CasTarget::put_xorb`] with the body handed over, so that a target which must own it
    /// (an HTTP request body) need not copy up to 64 MiB. The upload pipeline calls this one.
    fn put_xorb_owned(&self, xorb: XorbHash, body: Vec<u8>) -> Result<bool, TargetError> {
        self.put_xorb(xorb, &body)
    }

    /// [`CasTarget::put_xorb_owned`], telling `sent` how many bytes of the body have gone out
    /// so far (progress that follows the wire; a retry starts again from 0), and handing the
    /// body's buffer back when the target is done with it. The default puts the body with
    /// [`CasTarget::put_xorb`], tells `sent` once, when the put is done, and gives the buffer
    /// back; a target that overrides [`CasTarget::put_xorb_owned`] overrides this one too.
    fn put_xorb_with_progress(
        &self,
        xorb: XorbHash,
        body: Vec<u8>,
        sent: SentBytes,
    ) -> Result<XorbPut, TargetError> {
        let len = body.len() as u64;
        let inserted = self.put_xorb(xorb, &body)?;
        sent(len);
        Ok(XorbPut {
            inserted,
            buffer: Some(body),
        })
    }

    /// Registers a shard in upload form (docs/format.md §4.8). Every xorb it names must have been
    /// put before (docs/cas-api.md §7). Idempotent.
    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError>;

    /// Global dedup (docs/format.md §5.2): a shard whose xorb section lists a xorb holding
    /// `chunk`, possibly keyed, or `None`. The default answers `None` (no global dedup).
    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        let _ = chunk;
        Ok(None)
    }

    /// The dense-key modulus the target indexes for global dedup (docs/format.md §5.5), if it
    /// indexes dense keys: it then answers queries about the leading chunks and dense keys of
    /// any run of a file (`xet_format::dedup::RunProbes`). A remote server says so on its dedup
    /// answers, so this is known after the first [`CasTarget::dedup_query`]. The default:
    /// `None` (queries only about first, eligible and file-start probe chunks).
    fn dense_key_modulus(&self) -> Option<u64> {
        None
    }

    /// The registered file whose SHA-256 is `oid`, with its size, if the target can tell and
    /// holds it intact: an upload of that content may then be skipped. A file the target knows
    /// but holds damaged is `None`, so that uploading it again repairs it. The default answers
    /// `None`.
    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        let _ = oid;
        Ok(None)
    }

    /// Whether the target checks the SHA-256 a shard claims for a file (by hashing the file
    /// itself) before it lets that SHA-256 stand for the file. An uploader handed the SHA-256
    /// by whoever named the content (git-lfs names its objects by it) may then leave the
    /// hashing to the target. Known after [`CasTarget::file_by_sha256`]. The default: `false`.
    fn checks_sha256_claims(&self) -> bool {
        false
    }

    /// Tells the target that the uploader hashed `file` itself and found SHA-256 `oid` (after
    /// the file's shard was registered). A target that trusts its uploader (a store this
    /// process owns) records the mapping as checked; the default ignores it.
    fn sha256_computed(&self, oid: &LfsOid, file: &FileHash) -> Result<(), TargetError> {
        let _ = (oid, file);
        Ok(())
    }

    /// Local dedup (docs/format.md §5.3): a shard known locally, without asking the target (a
    /// shard cache), whose xorb section lists a xorb holding `chunk` (a raw hash; the shard may
    /// be keyed), or `None`. The upload asks for every chunk that matched nothing else, before
    /// any global query, so this must be cheap. The default knows no shards.
    fn local_dedup(&self, chunk: &ChunkHash) -> Result<Option<Arc<Shard>>, TargetError> {
        let _ = chunk;
        Ok(None)
    }

    /// Claims the upload of a file whose first chunk is `first` among the uploaders of this
    /// target on this machine (agents that git-lfs started for one push share a local shard
    /// cache): waits up to `patience` while another holds the claim, so that the second version
    /// of a file is sent after the first and deduplicated against it. Held until dropped.
    /// `None` when the target has no such coordination (the default) or it failed; the upload
    /// then goes ahead on its own.
    fn claim_upload(&self, first: &ChunkHash, patience: Duration) -> Option<UploadClaim> {
        let _ = (first, patience);
        None
    }
}

/// An upload's claim on the first chunk of its file ([`CasTarget::claim_upload`]), released
/// when dropped.
pub struct UploadClaim {
    /// How long the claim was waited for.
    pub waited: Duration,
    _held: Box<dyn Send + Sync>,
}

impl UploadClaim {
    /// A claim held by `guard` (a lock released when it is dropped) after waiting `waited`.
    pub fn new(waited: Duration, guard: impl Send + Sync + 'static) -> UploadClaim {
        UploadClaim {
            waited,
            _held: Box::new(guard),
        }
    }
}

impl fmt::Debug for UploadClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UploadClaim")
            .field("waited", &self.waited)
            .finish_non_exhaustive()
    }
}

impl<T: CasTarget + ?Sized> CasTarget for &T {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        (**self).has_xorb(xorb)
    }

    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        (**self).put_xorb(xorb, body)
    }

    fn put_xorb_owned(&self, xorb: XorbHash, body: Vec<u8>) -> Result<bool, TargetError> {
        (**self).put_xorb_owned(xorb, body)
    }

    fn put_xorb_with_progress(
        &self,
        xorb: XorbHash,
        body: Vec<u8>,
        sent: SentBytes,
    ) -> Result<XorbPut, TargetError> {
        (**self).put_xorb_with_progress(xorb, body, sent)
    }

    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        (**self).register_shard(shard)
    }

    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        (**self).dedup_query(chunk)
    }

    fn dense_key_modulus(&self) -> Option<u64> {
        (**self).dense_key_modulus()
    }

    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        (**self).file_by_sha256(oid)
    }

    fn checks_sha256_claims(&self) -> bool {
        (**self).checks_sha256_claims()
    }

    fn sha256_computed(&self, oid: &LfsOid, file: &FileHash) -> Result<(), TargetError> {
        (**self).sha256_computed(oid, file)
    }

    fn local_dedup(&self, chunk: &ChunkHash) -> Result<Option<Arc<Shard>>, TargetError> {
        (**self).local_dedup(chunk)
    }

    fn claim_upload(&self, first: &ChunkHash, patience: Duration) -> Option<UploadClaim> {
        (**self).claim_upload(first, patience)
    }
}

/// A source read through [`XorbSource::read_xorb_range_once`]: what it fetches for this
/// download is not kept in a local cache.
pub struct ReadOnce<'a, S: ?Sized>(pub &'a S);

impl<S: XorbSource + ?Sized> XorbSource for ReadOnce<'_, S> {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        self.0.read_xorb_range_once(xorb, range)
    }

    fn stream_xorb_range(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        self.0.stream_xorb_range_once(xorb, range, sink)
    }

    fn read_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        _keep: bool,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        self.0.read_xorb_range_from(xorb, range, false)
    }

    fn stream_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        _keep: bool,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        self.0.stream_xorb_range_from(xorb, range, false, sink)
    }

    fn forget_cached(&self, xorbs: &[XorbHash]) {
        self.0.forget_cached(xorbs)
    }

    fn trim_cache(&self) {
        self.0.trim_cache()
    }
}

/// Where the bytes of one read of a xorb range came from ([`XorbSource::read_xorb_range_from`]):
/// what a download's journal record counts as on the wire and as reused from this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Bytes fetched from the endpoint for the read: stored xorb bytes (compressed, chunk
    /// headers included) as the endpoint sent them, or as read from a directory store.
    pub fetched: u64,
    /// The chunks of the range (indices in the xorb, in order) read from a cache on this
    /// machine instead of fetched.
    pub local: Vec<std::ops::Range<u32>>,
}

impl Origin {
    /// All of a read of `len` bytes fetched.
    pub fn fetched(len: u64) -> Self {
        Self {
            fetched: len,
            local: Vec::new(),
        }
    }

    /// Whether chunk `chunk` of the xorb was read from this machine.
    pub fn is_local(&self, chunk: u32) -> bool {
        self.local.iter().any(|r| r.contains(&chunk))
    }
}

/// A source that adds up what its reads fetched from the endpoint ([`Origin::fetched`]) over
/// every read, a failed one's included as far as its bytes arrived: the bytes a download moved
/// over the wire, all its attempts together.
pub struct Tallied<'a, S: ?Sized> {
    inner: &'a S,
    fetched: std::sync::atomic::AtomicU64,
}

impl<'a, S: XorbSource + ?Sized> Tallied<'a, S> {
    pub fn new(inner: &'a S) -> Self {
        Self {
            inner,
            fetched: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Bytes fetched from the endpoint so far.
    pub fn fetched(&self) -> u64 {
        self.fetched.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn add(&self, n: u64) {
        self.fetched
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl<S: XorbSource + ?Sized> XorbSource for Tallied<'_, S> {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        self.read_xorb_range_from(xorb, range, true).map(|(b, _)| b)
    }

    fn read_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        self.read_xorb_range_from(xorb, range, false)
            .map(|(b, _)| b)
    }

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

    fn read_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        let (bytes, origin) = self.inner.read_xorb_range_from(xorb, range, keep)?;
        self.add(origin.fetched);
        Ok((bytes, origin))
    }

    fn stream_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        // Bytes handed over, for a read that fails after some arrived (it says nothing then).
        let mut arrived = 0u64;
        let result = self
            .inner
            .stream_xorb_range_from(xorb, range, keep, &mut |at, piece| {
                arrived += piece.len() as u64;
                sink(at, piece)
            });
        match result {
            Ok(origin) => {
                self.add(origin.fetched);
                Ok(origin)
            }
            Err(e) => {
                self.add(arrived);
                Err(e)
            }
        }
    }

    fn forget_cached(&self, xorbs: &[XorbHash]) {
        self.inner.forget_cached(xorbs)
    }

    fn trim_cache(&self) {
        self.inner.trim_cache()
    }
}

/// Hands a range read whole to `sink` as one piece, and its buffer back for reuse.
pub fn hand_whole(bytes: Vec<u8>, sink: &mut RangeSink<'_>) {
    let _ = sink(0, &bytes);
    crate::util::buffers::give(bytes);
}

/// Where [`XorbSource::stream_xorb_range`] hands a range's bytes: the offset into the range
/// of the piece's first byte, and the piece; [`ControlFlow::Break`] stops the read.
pub type RangeSink<'a> = dyn FnMut(u64, &[u8]) -> ControlFlow<()> + 'a;

/// Where a download reads stored xorb bytes from.
pub trait XorbSource: Send + Sync {
    /// The bytes of `range` (inclusive `range.bytes`, whole chunks, headers included) of the
    /// stored xorb. A remote source fetches `range.url`.
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError>;

    /// [`XorbSource::read_xorb_range`] for a download nothing else on this machine is
    /// expected to want: a source with a local cache uses what it holds but does not keep
    /// what it fetches.
    fn read_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        self.read_xorb_range(xorb, range)
    }

    /// [`XorbSource::read_xorb_range`], with the bytes handed to `sink` as they arrive instead
    /// of gathered first: `sink(offset, bytes)` with the offset into the range of the piece's
    /// first byte, in order. After a broken connection a source may start again from an
    /// earlier offset (the sink skips what it already has). When `sink` answers
    /// [`ControlFlow::Break`] the read stops and returns `Ok` (the sink keeps its own reason).
    /// The default reads the whole range first.
    fn stream_xorb_range(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        hand_whole(self.read_xorb_range(xorb, range)?, sink);
        Ok(())
    }

    /// [`XorbSource::stream_xorb_range`] for a download nothing else on this machine is
    /// expected to want (see [`XorbSource::read_xorb_range_once`]).
    fn stream_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        hand_whole(self.read_xorb_range_once(xorb, range)?, sink);
        Ok(())
    }

    /// [`XorbSource::read_xorb_range`] (`keep`) or [`XorbSource::read_xorb_range_once`]
    /// (not `keep`), saying where the bytes came from. The default: all of them fetched.
    fn read_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        let bytes = if keep {
            self.read_xorb_range(xorb, range)?
        } else {
            self.read_xorb_range_once(xorb, range)?
        };
        let n = bytes.len() as u64;
        Ok((bytes, Origin::fetched(n)))
    }

    /// [`XorbSource::stream_xorb_range`] (`keep`) or [`XorbSource::stream_xorb_range_once`]
    /// (not `keep`), saying where the bytes came from. The default: every byte handed to
    /// `sink` was fetched (a piece sent again after a broken connection counts again).
    fn stream_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        let mut n = 0u64;
        let mut counting = |at: u64, piece: &[u8]| {
            n += piece.len() as u64;
            sink(at, piece)
        };
        if keep {
            self.stream_xorb_range(xorb, range, &mut counting)?;
        } else {
            self.stream_xorb_range_once(xorb, range, &mut counting)?;
        }
        Ok(Origin::fetched(n))
    }

    /// A file rebuilt from these xorbs did not verify: a source that keeps local copies of
    /// their bytes (a download chunk cache) drops them, so that the next read asks the server.
    fn forget_cached(&self, _xorbs: &[XorbHash]) {}

    /// A download is done: a source with a local cache keeps it within its limit.
    fn trim_cache(&self) {}
}

impl<T: XorbSource + ?Sized> XorbSource for &T {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        (**self).read_xorb_range(xorb, range)
    }

    fn read_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        (**self).read_xorb_range_once(xorb, range)
    }

    fn stream_xorb_range(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        (**self).stream_xorb_range(xorb, range, sink)
    }

    fn stream_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        (**self).stream_xorb_range_once(xorb, range, sink)
    }

    fn read_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        (**self).read_xorb_range_from(xorb, range, keep)
    }

    fn stream_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        keep: bool,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        (**self).stream_xorb_range_from(xorb, range, keep, sink)
    }

    fn forget_cached(&self, xorbs: &[XorbHash]) {
        (**self).forget_cached(xorbs)
    }

    fn trim_cache(&self) {
        (**self).trim_cache()
    }
}

/// Everything a transfer needs from where objects live: uploads ([`CasTarget`]), downloads
/// ([`XorbSource`]) and reconstruction plans. Implemented by the storage engine's `Store` (the agent's
/// embedded mode) and by the HTTP client of a remote CAS server.
pub trait Endpoint: CasTarget + XorbSource {
    /// The reconstruction plan of bytes `range` (inclusive) of a file, or `None` if the
    /// endpoint does not know the file.
    fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, TargetError>;

    /// The registered file whose SHA-256 is `oid`, for a download: intact or not (rebuilding a
    /// damaged one fails with an error naming the damage, which says more than "unknown"). The
    /// default is [`CasTarget::file_by_sha256`].
    fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        self.file_by_sha256(oid)
    }

    /// The chunks of a file in order (hash and length): what a reader of part of the file
    /// checks what it reads against (their Xet file hash must be the file's, which the caller
    /// checks). `None` when the endpoint cannot say (not registered, or another server that
    /// does not offer the list). The default answers `None`.
    fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, TargetError> {
        let _ = file;
        Ok(None)
    }

    /// The whole-file plans of several files in one request (a download pack): `None` when
    /// the endpoint cannot plan files together (the caller then plans each alone). A file the
    /// endpoint does not have, or cannot plan, is missing from the map. The default answers
    /// `None`.
    fn reconstructions(
        &self,
        files: &[FileHash],
    ) -> Result<Option<BTreeMap<FileHash, ReconstructionPlan>>, TargetError> {
        let _ = files;
        Ok(None)
    }

    /// A short description for messages, e.g. the URL or the directory.
    fn describe(&self) -> String;
}

impl<T: Endpoint + ?Sized> Endpoint for &T {
    fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, TargetError> {
        (**self).reconstruction(file, range)
    }

    fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        (**self).locate_oid(oid)
    }

    fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, TargetError> {
        (**self).file_chunks(file)
    }

    fn reconstructions(
        &self,
        files: &[FileHash],
    ) -> Result<Option<BTreeMap<FileHash, ReconstructionPlan>>, TargetError> {
        (**self).reconstructions(files)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
