//! The upload pipeline: one stream in, one registered Xet file out. Written once for the
//! server's basic-transfer uploads and for the agent.
//!
//! [`upload`] reads the stream in blocks of [`READ_BLOCK`] bytes ([`upload_file_with_seeds`]
//! maps a file's blocks instead) and, per block:
//!
//! 1. computes SHA-256 (not when the caller got the SHA-256 from whoever named the bytes and the
//!    target checks claims itself: [`UploadOptions::sha256_declared_by_namer`]) alongside the
//!    chunk-and-hash engine of [`hasher`](crate::pipeline::hasher) (`ChunkHasher`), which finds
//!    the block's chunks (docs/format.md §2) and hashes them on the rayon pool, the same engine
//!    and so the same chunks as `git xet hash`;
//! 2. while the session's chunks are mostly new, compresses the block's chunks in parallel;
//! 3. hands each chunk in order to the file session (`session`), which deduplicates it
//!    against this upload's own xorbs and, through [`CasTarget::dedup_query`], against the
//!    target (§5), packs new chunks into xorbs ([`XorbBuilder`](xet_format::xorb::XorbBuilder), [`CompressionPolicy::Auto`],
//!    [`XorbLimits::CLIENT`] by default) and builds the reconstruction terms (consecutive chunks
//!    of one xorb form one term).
//!
//! Full xorbs go to an uploader thread through a rendezvous channel, so at most two xorbs are in
//! memory (the one being filled and the one being put) besides one read block. At the end of
//! the stream the declared size and SHA-256 are checked; only then is the last xorb put, and
//! only once every xorb is stored is the shard built — one file block with verification entries
//! and the `FileMetadataExt` SHA-256 (§4.3), plus the blocks of the xorbs this upload built —
//! and registered (docs/cas-api.md §7). A mismatch ends the upload before any shard is registered;
//! wrap the target in [`Staging`] to keep even the xorbs out of it.
//!
//! Shortcuts: when the caller declares the SHA-256 and the target already has a file with it,
//! nothing is read and nothing uploaded ([`UploadSummary::already_stored`]). The empty stream
//! is the all-zero file hash, which every target knows: nothing is uploaded or registered.
//!
//! A shard larger than [`MAX_SHARD_SIZE`] (files of tens of GB) is split: shards holding only
//! xorb blocks are registered first, the file's shard last.

mod done;
mod session;
pub mod staging;

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use rayon::prelude::*;
use sha2::Digest as _;

use self::done::Done;
use self::session::{FileResult, FileSession, SpareBodies};
pub use self::staging::Staging;
use crate::pipeline::hasher::ChunkHasher;
use xet_format::shard::{FileInfo, Shard, XorbInfo, MAX_SHARD_SIZE, RECORD_SIZE};
use xet_format::xorb::{BuiltXorb, CompressedChunk, CompressionPolicy, XorbLimits};
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid};
use xet_protocol::{CasTarget, TargetError};

/// Bytes read from the stream per block.
pub const READ_BLOCK: usize = 8 << 20;

/// How to upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadOptions {
    /// The SHA-256 the stream must have (the Git LFS oid). Checked at the end; also lets a file
    /// the target already has be skipped without reading it.
    pub expected_sha256: Option<LfsOid>,
    /// The number of bytes the stream must have. A longer stream fails as soon as it is.
    pub expected_size: Option<u64>,
    pub policy: CompressionPolicy,
    /// Xorb size limits (tests use small ones to get several xorbs from small inputs).
    pub limits: XorbLimits,
    /// Ask the target about dedup-eligible chunks (docs/format.md §5.1).
    pub global_dedup: bool,
    /// Shards larger than this are split (see the module documentation).
    pub max_shard_bytes: u64,
    /// Xorbs put at once (uploader threads). Each holds one xorb of up to 64 MiB in memory.
    pub parallel_puts: usize,
    /// Whoever declared `expected_sha256` computed it from these very bytes (git-lfs names
    /// its objects by their SHA-256): when the target checks SHA-256 claims itself
    /// ([`CasTarget::checks_sha256_claims`]), the stream is not hashed again and the declared
    /// SHA-256 goes into the shard as a claim. Otherwise it is hashed and checked as usual.
    pub sha256_declared_by_namer: bool,
}

impl Default for UploadOptions {
    fn default() -> Self {
        Self {
            expected_sha256: None,
            expected_size: None,
            policy: CompressionPolicy::Auto,
            limits: XorbLimits::CLIENT,
            global_dedup: true,
            max_shard_bytes: MAX_SHARD_SIZE,
            parallel_puts: 2,
            sha256_declared_by_namer: false,
        }
    }
}

/// What an upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadSummary {
    pub file_hash: FileHash,
    pub size: u64,
    pub sha256: LfsOid,
    /// The target already had a file with the declared SHA-256; the stream was not read.
    pub already_stored: bool,
    /// Chunks in the file.
    pub chunks: u64,
    /// Chunks (and their bytes) found in a xorb already, here or at the target.
    pub dedup_chunks: u64,
    pub dedup_bytes: u64,
    /// Global-dedup queries sent.
    pub dedup_queries: u64,
    /// Of `dedup_queries`, the probes (docs/format.md §5.5).
    pub probe_queries: u64,
    /// Of `dedup_bytes`, the bytes matched against an earlier version of the file (the seeds
    /// of [`upload_with_seeds`]).
    pub history_dedup_bytes: u64,
    /// Xorbs the target newly stored.
    pub new_xorbs: u64,
    /// Bytes of xorb bodies sent to the target (what went over the wire, whether or not the
    /// target turned out to have the xorb already).
    pub uploaded_bytes: u64,
    /// Xorbs built whose hash the target already had (not sent).
    pub existing_xorbs: u64,
    /// Shards registered (0 for the empty file or a skipped one).
    pub shards: u64,
    /// The stream was hashed with SHA-256 here (`false`: the declared SHA-256 was sent as a
    /// claim for the target to check, see [`UploadOptions::sha256_declared_by_namer`]).
    pub sha256_computed: bool,
    /// The file's chunks, in file order, when this upload chunked it (empty when the target
    /// had the file already): what a later version deduplicates against, remembered by the
    /// caller (see [`crate::object_chunks`]).
    pub file_chunks: Vec<ChunkRef>,
}

/// Progress of an upload, reported after every block read and, while the last xorbs are being
/// sent, every [`PROGRESS_TICK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UploadProgress {
    /// Bytes of the stream chunked and deduplicated so far.
    pub bytes_read: u64,
    /// Bytes of xorb bodies sent to the target so far.
    pub bytes_uploaded: u64,
    /// Bytes of the file that are safe at the target: deduplicated against what it stores, or
    /// in xorbs it has stored. What a progress bar should show: it moves with the wire.
    pub bytes_done: u64,
}

/// How often progress is reported while the reading is over and xorbs are still being sent.
pub const PROGRESS_TICK: std::time::Duration = std::time::Duration::from_millis(100);

/// Why an upload failed. Input errors ([`UploadError::is_input_error`]) are the stream's fault;
/// the others are the target's or a bug.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("cannot read the input at offset {offset}: {source}")]
    Read { offset: u64, source: io::Error },
    #[error("the input is longer than the declared {expected} bytes")]
    TooLong { expected: u64 },
    #[error("the input has {actual} bytes, but {expected} were declared")]
    TooShort { expected: u64, actual: u64 },
    #[error("the input's SHA-256 is {actual}, not the declared {expected}")]
    Sha256Mismatch { expected: LfsOid, actual: LfsOid },
    #[error("{}", step_and_cause(what, source))]
    Target { what: String, source: TargetError },
    #[error("cannot build {what}: {detail}")]
    Build { what: String, detail: String },
    #[error("the xorb uploader stopped unexpectedly")]
    UploaderGone,
    /// A member of a pack ([`upload_pack`]) failed.
    #[error("packed object {oid}: {source}")]
    Member {
        oid: LfsOid,
        source: Box<UploadError>,
    },
}

/// `"<what>: <source>"`, or just the source when it already starts by saying what was being
/// done (a remote target names the operation too: "uploading xorb X: …" once, not twice).
fn step_and_cause(what: &str, source: &TargetError) -> String {
    let cause = source.to_string();
    if cause.starts_with(what) {
        cause
    } else {
        format!("{what}: {cause}")
    }
}

impl UploadError {
    /// True when the input was at fault (unreadable, wrong size, wrong SHA-256).
    pub fn is_input_error(&self) -> bool {
        match self {
            UploadError::Member { source, .. } => source.is_input_error(),
            _ => matches!(
                self,
                UploadError::Read { .. }
                    | UploadError::TooLong { .. }
                    | UploadError::TooShort { .. }
                    | UploadError::Sha256Mismatch { .. }
            ),
        }
    }

    /// True when the target refused the upload's shard because a xorb it relies on is not
    /// stored intact there (`unknown_xorb`, `xorb_damaged`): the upload deduplicated against a
    /// stale local shard cache, or the xorb was lost, damaged or collected meanwhile. Uploading
    /// again (the cache has dropped the xorb, see [`crate::pipeline::cached`]) sends its chunks.
    pub fn is_lost_xorb(&self) -> bool {
        match self {
            UploadError::Member { source, .. } => source.is_lost_xorb(),
            UploadError::Target { source, .. } => source.is_lost_xorb(),
            _ => false,
        }
    }

    /// `e`, said of the pack member `oid`.
    fn member(oid: LfsOid, e: UploadError) -> UploadError {
        UploadError::Member {
            oid,
            source: Box::new(e),
        }
    }

    fn target(what: impl Into<String>) -> impl FnOnce(TargetError) -> UploadError {
        let what = what.into();
        move |source| UploadError::Target { what, source }
    }
}

/// Uploads everything `reader` yields as one file. See the module documentation.
pub fn upload(
    target: &dyn CasTarget,
    reader: impl Read,
    options: &UploadOptions,
) -> Result<UploadSummary, UploadError> {
    upload_with_progress(target, reader, options, &mut |_| {})
}

/// [`upload`], calling `progress` after every block.
pub fn upload_with_progress(
    target: &dyn CasTarget,
    reader: impl Read,
    options: &UploadOptions,
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<UploadSummary, UploadError> {
    upload_with_seeds(target, reader, options, &[], progress)
}

/// [`upload_with_progress`], deduplicating also against `seeds`: chunks known to be stored at
/// the target, each with its xorb and index there (the chunks of an earlier version of the
/// file, [`crate::pipeline::prior::PriorVersion::seeds`]). Bytes matched through them are
/// counted in [`UploadSummary::history_dedup_bytes`].
pub fn upload_with_seeds(
    target: &dyn CasTarget,
    mut reader: impl Read,
    options: &UploadOptions,
    seeds: &[(ChunkHash, xet_format::XorbHash, u32)],
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<UploadSummary, UploadError> {
    upload_blocks(
        target,
        &mut ReadBlocks::new(&mut reader),
        options,
        seeds,
        progress,
    )
}

/// [`upload_with_seeds`] of a regular file, read through mappings of [`READ_BLOCK`] bytes at a
/// time instead of copies into a buffer (a 1 GiB push took about a tenth less CPU time).
/// The file must not be truncated while it is uploaded (see
/// [`map_readonly`](xet_protocol::util::os::map_readonly)): git-lfs's objects never are.
pub fn upload_file_with_seeds(
    target: &dyn CasTarget,
    file: &std::fs::File,
    options: &UploadOptions,
    seeds: &[(ChunkHash, xet_format::XorbHash, u32)],
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<UploadSummary, UploadError> {
    let len = file
        .metadata()
        .map_err(|source| UploadError::Read { offset: 0, source })?
        .len();
    upload_blocks(
        target,
        &mut MapBlocks {
            file,
            len,
            window: None,
        },
        options,
        seeds,
        progress,
    )
}

/// One file of a pack ([`upload_pack`]): its bytes and what git-lfs named it.
pub struct PackMember<'r> {
    pub reader: &'r mut dyn Read,
    /// The SHA-256 the bytes must have.
    pub oid: LfsOid,
    /// The number of bytes they must have.
    pub size: u64,
}

/// One file a pack registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedFile {
    pub oid: LfsOid,
    pub file_hash: FileHash,
    pub size: u64,
    /// Bytes of the file found already stored.
    pub dedup_bytes: u64,
}

/// What a pack upload did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackSummary {
    /// The members, in order.
    pub files: Vec<PackedFile>,
    /// Xorbs the target newly stored, and the bytes of xorb bodies sent.
    pub new_xorbs: u64,
    pub uploaded_bytes: u64,
    /// Shards registered (one, unless the members' records outgrow a shard).
    pub shards: u64,
    /// The members were hashed with SHA-256 here (`false`: their declared SHA-256 went to the
    /// target as claims, see [`UploadOptions::sha256_declared_by_namer`]).
    pub sha256_computed: bool,
}

/// Uploads several files as one session, as the reference client uploads the files of one
/// command: their new chunks packed into shared xorbs, and one shard registering them all.
/// Many small files cost a few xorbs and one shard instead of one of each per file. Each member
/// is read to its end and checked against its declared size and SHA-256 (hashed here unless
/// `options.sha256_declared_by_namer` and the target checks claims); any failure registers
/// nothing. `options.expected_sha256` and `expected_size` are ignored (each member has its
/// own). An empty list uploads nothing.
pub fn upload_pack(
    target: &dyn CasTarget,
    members: &mut [PackMember<'_>],
    options: &UploadOptions,
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<PackSummary, UploadError> {
    let Some(first) = members.first() else {
        return Ok(PackSummary::default());
    };
    if options.sha256_declared_by_namer {
        // A remote target learns whether it checks claims from its answer to a lookup.
        let oid = first.oid;
        target
            .file_by_sha256(&oid)
            .map_err(UploadError::target(format!("looking up SHA-256 {oid}")))?;
    }
    let trusted = options.sha256_declared_by_namer && target.checks_sha256_claims();
    let oids: Vec<(LfsOid, u64)> = members.iter().map(|m| (m.oid, m.size)).collect();
    let source = Source::Pack { members, trusted };
    let (result, _, put) = read_and_put(target, source, options, progress)?;
    let what = format!("a pack of {} files", oids.len());
    let mut files = Vec::with_capacity(oids.len());
    let mut infos = Vec::with_capacity(oids.len());
    for ((oid, size), file) in oids.into_iter().zip(result.files) {
        files.push(PackedFile {
            oid,
            file_hash: file.info.hash,
            size,
            dedup_bytes: file.dedup_bytes,
        });
        infos.push(file.info);
    }
    let shards = register_shards(target, infos, result.blocks, options.max_shard_bytes, &what)?;
    if !trusted {
        for f in &files {
            target
                .sha256_computed(&f.oid, &f.file_hash)
                .map_err(UploadError::target(format!(
                    "recording SHA-256 {} of file {}",
                    f.oid, f.file_hash
                )))?;
        }
    }
    tracing::debug!(
        files = files.len(),
        new_xorbs = put.new_xorbs,
        uploaded_bytes = put.bytes,
        "pack uploaded"
    );
    Ok(PackSummary {
        files,
        new_xorbs: put.new_xorbs,
        uploaded_bytes: put.bytes,
        shards,
        sha256_computed: !trusted,
    })
}

fn upload_blocks(
    target: &dyn CasTarget,
    blocks: &mut dyn Blocks,
    options: &UploadOptions,
    seeds: &[(ChunkHash, xet_format::XorbHash, u32)],
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<UploadSummary, UploadError> {
    if let Some(stored) = stored_already(target, options)? {
        return Ok(stored);
    }
    // Asked after the lookup above, which is how a remote target learns whether it checks.
    let trusted = match options.expected_sha256 {
        Some(oid) if options.sha256_declared_by_namer && target.checks_sha256_claims() => Some(oid),
        _ => None,
    };
    let source = Source::One {
        blocks,
        seeds,
        trusted,
    };
    let (mut file, size, uploader) = read_and_put(target, source, options, progress)?;
    let Some(one) = file.files.pop() else {
        return Err(UploadError::Build {
            what: "the upload".into(),
            detail: "the session ended without its file".into(),
        });
    };
    let sha256 = one.info.sha256.unwrap_or_default();
    let mut summary = UploadSummary {
        file_hash: one.info.hash,
        size,
        sha256,
        already_stored: false,
        chunks: file.chunks,
        dedup_chunks: file.dedup_chunks,
        dedup_bytes: file.dedup_bytes,
        dedup_queries: file.dedup_queries,
        probe_queries: file.probe_queries,
        history_dedup_bytes: file.history_dedup_bytes,
        new_xorbs: uploader.new_xorbs,
        uploaded_bytes: uploader.bytes,
        existing_xorbs: uploader.existing_xorbs,
        shards: 0,
        sha256_computed: trusted.is_none(),
        file_chunks: one.chunks,
    };
    if size == 0 {
        return Ok(summary);
    }
    let hash = one.info.hash;
    summary.shards = register_shards(
        target,
        vec![one.info],
        file.blocks,
        options.max_shard_bytes,
        &format!("file {hash}"),
    )?;
    if summary.sha256_computed {
        target
            .sha256_computed(&sha256, &hash)
            .map_err(UploadError::target(format!(
                "recording SHA-256 {sha256} of file {hash}"
            )))?;
    }
    tracing::debug!(file = %hash, %sha256, size, new_xorbs = summary.new_xorbs,
        uploaded_bytes = summary.uploaded_bytes, dedup_chunks = summary.dedup_chunks, "file uploaded");
    Ok(summary)
}

/// Builds the shards of `files` and `blocks` ([`build_shards`]) and registers them in order;
/// how many. `what` names the files in errors.
fn register_shards(
    target: &dyn CasTarget,
    files: Vec<FileInfo>,
    blocks: Vec<XorbInfo>,
    max: u64,
    what: &str,
) -> Result<u64, UploadError> {
    let shards = build_shards(files, blocks, max, what)?;
    for (i, bytes) in shards.iter().enumerate() {
        target
            .register_shard(bytes)
            .map_err(UploadError::target(format!(
                "registering shard {} of {} for {what}",
                i + 1,
                shards.len()
            )))?;
    }
    Ok(shards.len() as u64)
}

/// The summary of an upload the target needs no bytes for: it has a checked file with the
/// expected SHA-256 (and size).
fn stored_already(
    target: &dyn CasTarget,
    options: &UploadOptions,
) -> Result<Option<UploadSummary>, UploadError> {
    let Some(oid) = options.expected_sha256 else {
        return Ok(None);
    };
    let known = target
        .file_by_sha256(&oid)
        .map_err(UploadError::target(format!("looking up SHA-256 {oid}")))?;
    Ok(known
        .filter(|(_, size)| options.expected_size.is_none_or(|s| s == *size))
        .map(|(file_hash, size)| UploadSummary {
            file_hash,
            size,
            sha256: oid,
            already_stored: true,
            chunks: 0,
            dedup_chunks: 0,
            dedup_bytes: 0,
            dedup_queries: 0,
            probe_queries: 0,
            history_dedup_bytes: 0,
            new_xorbs: 0,
            uploaded_bytes: 0,
            existing_xorbs: 0,
            shards: 0,
            sha256_computed: false,
            file_chunks: Vec::new(),
        }))
}

/// Reads, chunks and deduplicates the stream on this thread while `options.parallel_puts`
/// uploader threads put the xorbs it builds; the file, its size and what the uploaders did.
fn read_and_put(
    target: &dyn CasTarget,
    source: Source<'_, '_>,
    options: &UploadOptions,
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<(FileResult, u64, PutStats), UploadError> {
    let shared = Shared {
        uploaded: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        done: Done::default(),
        // One buffer comes back per xorb built, in steady state: one kept is enough for the
        // next, and more would stay resident while idle (four 64 MiB bodies are 256 MiB).
        spare: SpareBodies::new(1),
    };
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<(u32, BuiltXorb)>(0);
        // Each uploader owns a handle on the receiver: when the last one quits, the channel
        // closes and the reader's next hand-over fails instead of waiting forever.
        let rx = Arc::new(Mutex::new(rx));
        let shared = &shared;
        // Each uploader says when it is finished, so the wait below ends at once.
        let (finished_tx, finished) = mpsc::channel::<()>();
        let uploaders: Vec<_> = (0..options.parallel_puts.max(1))
            .map(|_| {
                let rx = rx.clone();
                let finished_tx = finished_tx.clone();
                scope.spawn(move || {
                    let r = put_xorbs(target, &rx, shared);
                    let _ = finished_tx.send(());
                    r
                })
            })
            .collect();
        drop((rx, finished_tx));
        let read = read_file(target, source, options, tx, shared, progress);
        // The last xorbs are still on their way: keep the counter moving with the wire.
        let bytes_read = read.as_ref().map_or(0, |(_, size)| *size);
        let mut running = uploaders.len();
        while running > 0 {
            match finished.recv_timeout(PROGRESS_TICK) {
                Ok(()) => running -= 1,
                Err(mpsc::RecvTimeoutError::Timeout) => progress(UploadProgress {
                    bytes_read,
                    bytes_uploaded: shared.uploaded.load(Ordering::Relaxed),
                    bytes_done: shared.done.get(),
                }),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let mut put = Ok(PutStats::default());
        for u in uploaders {
            let r = u.join().unwrap_or(Err(UploadError::UploaderGone));
            put = match (put, r) {
                (Ok(a), Ok(b)) => Ok(a.merge(b)),
                // Keep the error that stopped the others, not their "gone".
                (Err(UploadError::UploaderGone), Err(e)) => Err(e),
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            };
        }
        match (read, put) {
            (Ok((file, size)), Ok(put)) => Ok((file, size, put)),
            // The uploader's own error explains why the reader could not hand it a xorb.
            (Err(UploadError::UploaderGone), Err(e)) => Err(e),
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        }
    })
}

/// The hash of the first chunk of what `reader` yields (`None` when it is empty): read from at
/// most the largest chunk's worth of its start. An upload of a new version of a file usually
/// starts with the same chunk as the old one, so agents use it to find uploads related to
/// theirs.
pub fn first_chunk_hash(reader: impl Read) -> io::Result<Option<ChunkHash>> {
    let mut head = Vec::with_capacity(xet_format::chunking::MAX_CHUNK_SIZE);
    reader
        .take(xet_format::chunking::MAX_CHUNK_SIZE as u64)
        .read_to_end(&mut head)?;
    // A boundary within the head is the first chunk's end; without one, the head is the whole
    // file or exactly one maximal chunk.
    let end = xet_format::chunking::chunk_boundaries(&head)
        .first()
        .copied()
        .unwrap_or(head.len());
    Ok((end > 0).then(|| ChunkHash::of(&head[..end])))
}

/// What the reading thread and the uploader threads share.
struct Shared {
    /// Body bytes sent so far.
    uploaded: AtomicU64,
    /// Raised by an uploader that failed: the others stop too.
    stop: AtomicBool,
    done: Done,
    /// Bodies handed back by the target, for the next xorbs.
    spare: SpareBodies,
}

/// What the uploader threads did.
#[derive(Debug, Default)]
struct PutStats {
    new_xorbs: u64,
    existing_xorbs: u64,
    bytes: u64,
}

impl PutStats {
    fn merge(self, o: PutStats) -> PutStats {
        PutStats {
            new_xorbs: self.new_xorbs + o.new_xorbs,
            existing_xorbs: self.existing_xorbs + o.existing_xorbs,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// One uploader thread: puts every xorb it receives, skipping those the target has. On a
/// failure it raises `stop`, so that the others quit too and the reader's next hand-over fails
/// (the channel closes when the last uploader is gone).
fn put_xorbs(
    target: &dyn CasTarget,
    rx: &Mutex<mpsc::Receiver<(u32, BuiltXorb)>>,
    shared: &Shared,
) -> Result<PutStats, UploadError> {
    let result = put_xorbs_until_done(target, rx, shared);
    if result.is_err() {
        shared.stop.store(true, Ordering::Relaxed);
    }
    result
}

fn put_xorbs_until_done(
    target: &dyn CasTarget,
    rx: &Mutex<mpsc::Receiver<(u32, BuiltXorb)>>,
    shared: &Shared,
) -> Result<PutStats, UploadError> {
    let Shared {
        uploaded,
        stop,
        done,
        spare,
    } = shared;
    let mut stats = PutStats::default();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(UploadError::UploaderGone);
        }
        // The lock is held only while waiting for the next xorb, not while putting it.
        let next = rx.lock().map_err(|_| UploadError::UploaderGone)?.recv();
        let Ok((seq, xorb)) = next else {
            return Ok(stats);
        };
        let hash = xorb.hash();
        if target
            .has_xorb(&hash)
            .map_err(UploadError::target(format!("checking for xorb {hash}")))?
        {
            stats.existing_xorbs += 1;
            done.xorb_stored(seq);
            continue;
        }
        let body = xorb.into_upload_body();
        let len = body.len() as u64;
        // Progress follows the body as it goes out (see `done`).
        let sent: xet_protocol::target::SentBytes = {
            let progress = done.clone();
            Arc::new(move |n: u64| progress.sending(seq, n, len))
        };
        let put = target
            .put_xorb_with_progress(hash, body, sent)
            .map_err(UploadError::target(format!("uploading xorb {hash}")))?;
        if let Some(buffer) = put.buffer {
            spare.give(buffer);
        }
        let inserted = put.inserted;
        // Sent either way: the journal and the summary say what went over the wire.
        stats.bytes += len;
        uploaded.fetch_add(len, Ordering::Relaxed);
        if inserted {
            stats.new_xorbs += 1;
        } else {
            stats.existing_xorbs += 1;
        }
        done.xorb_stored(seq);
    }
}

/// What an upload reads: one stream, or the members of a pack, one after another.
enum Source<'a, 'm> {
    One {
        blocks: &'a mut dyn Blocks,
        /// See [`upload_with_seeds`].
        seeds: &'a [(ChunkHash, xet_format::XorbHash, u32)],
        /// The declared SHA-256, when the target checks it (the stream is not hashed).
        trusted: Option<LfsOid>,
    },
    Pack {
        members: &'a mut [PackMember<'m>],
        /// The members' declared SHA-256 are sent as claims, not computed.
        trusted: bool,
    },
}

/// Reads, chunks and deduplicates the whole source, sending full xorbs to `tx`. Returns the
/// files' blocks and the bytes read once every size and SHA-256 was checked and every xorb was
/// sent.
fn read_file(
    target: &dyn CasTarget,
    source: Source<'_, '_>,
    options: &UploadOptions,
    tx: mpsc::SyncSender<(u32, BuiltXorb)>,
    shared: &Shared,
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<(FileResult, u64), UploadError> {
    let Shared {
        uploaded,
        done,
        spare,
        ..
    } = shared;
    // Xorbs are finished in sequence order, so the n-th one handed over is xorb #n. While
    // the uploaders are busy (a xorb on a slow link), the hand-over waits, and progress keeps
    // being reported: it moves as their puts complete.
    let progress = std::cell::RefCell::new(progress);
    let read_so_far = std::cell::Cell::new(0u64);
    let report = || {
        (progress.borrow_mut())(UploadProgress {
            bytes_read: read_so_far.get(),
            bytes_uploaded: uploaded.load(Ordering::Relaxed),
            bytes_done: done.get(),
        })
    };
    let mut seq = 0u32;
    let mut emit = |x: BuiltXorb| {
        let n = seq;
        seq += 1;
        let mut item = (n, x);
        // The hand-over is on the upload's critical path: a free uploader is noticed within
        // 2 ms (it was up to 20), at the cost of at most 500 wake-ups a second while waiting.
        let mut pause = std::time::Duration::from_micros(200);
        let mut last_report = std::time::Instant::now();
        loop {
            match tx.try_send(item) {
                Ok(()) => return Ok(()),
                Err(mpsc::TrySendError::Disconnected(_)) => return Err(UploadError::UploaderGone),
                Err(mpsc::TrySendError::Full(back)) => item = back,
            }
            if last_report.elapsed() >= PROGRESS_TICK {
                last_report = std::time::Instant::now();
                report();
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(2));
        }
    };
    let reading = Reading {
        target,
        options,
        done,
        spare,
        read_so_far: &read_so_far,
        report: &report,
    };
    match source {
        Source::One {
            blocks,
            seeds,
            trusted,
        } => reading.one(blocks, seeds, trusted, &mut emit),
        Source::Pack { members, trusted } => reading.members(members, trusted, &mut emit),
    }
}

/// What [`read_file`] reads with: where the xorbs go, and how progress is told.
struct Reading<'a> {
    target: &'a dyn CasTarget,
    options: &'a UploadOptions,
    done: &'a Done,
    spare: &'a SpareBodies,
    read_so_far: &'a std::cell::Cell<u64>,
    report: &'a dyn Fn(),
}

impl Reading<'_> {
    /// One stream: read, chunked and deduplicated (against `seeds` too), its size and SHA-256
    /// checked (the SHA-256 on a thread of its own for a large file, not at all when
    /// `trusted`).
    fn one(
        &self,
        blocks: &mut dyn Blocks,
        seeds: &[(ChunkHash, xet_format::XorbHash, u32)],
        trusted: Option<LfsOid>,
        emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    ) -> Result<(FileResult, u64), UploadError> {
        let options = self.options;
        let probe = options
            .expected_size
            .is_none_or(|size| size >= xet_format::dedup::MIN_PROBED_FILE);
        let mut session = FileSession::new(
            self.target,
            options.policy,
            options.limits,
            options.global_dedup,
            probe,
            self.done,
        )
        .with_spare_bodies(self.spare);
        // A file of at least a xorb's size (more than one xorb once chunk headers count, unless
        // it compresses) starts with a small one: its upload begins after 8 MiB of chunking,
        // not 64 MiB. A smaller file stays one xorb.
        if options
            .expected_size
            .is_some_and(|size| size >= options.limits.max_uncompressed_bytes)
        {
            session = session.with_early_first_xorb();
        }
        session.seed(seeds);
        // SHA-256 is the costliest pass over a large file and cannot be split: it runs on a
        // thread of its own, fed copies of the blocks, while this thread chunks, hashes and
        // packs.
        let big = options
            .expected_size
            .is_none_or(|size| size >= SHA_THREAD_MIN);
        let (actual, pos) = std::thread::scope(|scope| {
            let mut sha = if let Some(oid) = trusted {
                Sha::Declared(oid)
            } else if big {
                Sha::spawn(scope)
            } else {
                Sha::Inline(sha2::Sha256::new())
            };
            let pos = read_chunks(
                blocks,
                options,
                &mut sha,
                &mut session,
                emit,
                self.read_so_far,
                self.report,
            )?;
            Ok::<_, UploadError>((checked_sha(sha, options)?, pos))
        })?;
        Ok((session.finish(actual, emit)?, pos))
    }

    /// The members of a pack, read one after another into one session: each is chunked on
    /// its own (a file's chunks never span two files) and checked against its declared size
    /// and SHA-256. Returns the session's files and the bytes read.
    fn members(
        &self,
        members: &mut [PackMember<'_>],
        trusted: bool,
        emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    ) -> Result<(FileResult, u64), UploadError> {
        let options = self.options;
        let mut session = FileSession::new(
            self.target,
            options.policy,
            options.limits,
            options.global_dedup,
            false,
            self.done,
        )
        .with_spare_bodies(self.spare)
        .for_packing();
        let mut total = 0u64;
        let count = members.len();
        for (i, member) in members.iter_mut().enumerate() {
            let member_options = UploadOptions {
                expected_sha256: Some(member.oid),
                expected_size: Some(member.size),
                ..*options
            };
            let mut sha = if trusted {
                Sha::Declared(member.oid)
            } else {
                Sha::Inline(sha2::Sha256::new())
            };
            let pos = read_chunks(
                &mut ReadBlocks::new(&mut member.reader),
                &member_options,
                &mut sha,
                &mut session,
                emit,
                self.read_so_far,
                self.report,
            )
            .map_err(|e| UploadError::member(member.oid, e))?;
            let actual = checked_sha(sha, &member_options)
                .map_err(|e| UploadError::member(member.oid, e))?;
            total += pos;
            if i + 1 < count {
                session.end_file(actual);
            } else {
                return Ok((session.finish(actual, emit)?, total));
            }
        }
        Err(UploadError::Build {
            what: "a pack".into(),
            detail: "it has no members".into(),
        })
    }
}

/// The SHA-256 `sha` computed (or was declared), checked against the expected one.
fn checked_sha(sha: Sha<'_>, options: &UploadOptions) -> Result<LfsOid, UploadError> {
    let actual = sha.finish()?;
    match options.expected_sha256 {
        Some(expected) if actual != expected => {
            Err(UploadError::Sha256Mismatch { expected, actual })
        }
        _ => Ok(actual),
    }
}

/// Files from this size on are hashed with SHA-256 on a thread of their own (see [`Sha`]).
const SHA_THREAD_MIN: u64 = 16 << 20;

/// Blocks queued for the SHA-256 thread.
const SHA_QUEUE: usize = 3;

/// The SHA-256 of the stream: computed on the reading thread, or on a thread of its own that
/// gets a copy of each block (buffers are handed back for reuse, so memory stays at
/// [`SHA_QUEUE`] + 1 blocks), or not computed: the declared one, for a target that checks it.
enum Sha<'scope> {
    Declared(LfsOid),
    Inline(sha2::Sha256),
    Thread {
        blocks: mpsc::SyncSender<Vec<u8>>,
        spare: mpsc::Receiver<Vec<u8>>,
        digest: std::thread::ScopedJoinHandle<'scope, LfsOid>,
    },
}

impl<'scope> Sha<'scope> {
    fn spawn<'env>(scope: &'scope std::thread::Scope<'scope, 'env>) -> Self {
        let (blocks, queued) = mpsc::sync_channel::<Vec<u8>>(SHA_QUEUE);
        let (give_back, spare) = mpsc::channel::<Vec<u8>>();
        let digest = scope.spawn(move || {
            let mut sha = sha2::Sha256::new();
            for block in queued {
                sha.update(&block);
                let _ = give_back.send(block);
            }
            LfsOid::from_digest(sha.finalize().into())
        });
        Sha::Thread {
            blocks,
            spare,
            digest,
        }
    }

    fn update(&mut self, data: &[u8]) -> Result<(), UploadError> {
        match self {
            Sha::Declared(_) => {}
            Sha::Inline(sha) => sha.update(data),
            Sha::Thread { blocks, spare, .. } => {
                let mut block = spare.try_recv().unwrap_or_default();
                block.clear();
                block.extend_from_slice(data);
                blocks.send(block).map_err(|_| UploadError::UploaderGone)?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<LfsOid, UploadError> {
        match self {
            Sha::Declared(oid) => Ok(oid),
            Sha::Inline(sha) => Ok(LfsOid::from_digest(sha.finalize().into())),
            Sha::Thread { blocks, digest, .. } => {
                drop(blocks);
                digest.join().map_err(|_| UploadError::UploaderGone)
            }
        }
    }
}

/// Where an upload's bytes come from, a block at a time.
trait Blocks {
    /// The next block of at most `want` bytes, starting at stream offset `pos` (empty at the
    /// end). Valid until the next call.
    fn next_block(&mut self, want: usize, pos: u64) -> Result<&[u8], UploadError>;
}

/// Blocks read from a stream into one reused buffer.
struct ReadBlocks<'r> {
    reader: &'r mut dyn Read,
    buf: Vec<u8>,
}

impl<'r> ReadBlocks<'r> {
    fn new(reader: &'r mut dyn Read) -> Self {
        Self {
            reader,
            buf: Vec::new(),
        }
    }
}

/// Blocks of a file of `len` bytes, each a mapping of its own (the last one unmapped first).
struct MapBlocks<'f> {
    file: &'f std::fs::File,
    len: u64,
    window: Option<memmap2::Mmap>,
}

impl Blocks for MapBlocks<'_> {
    fn next_block(&mut self, want: usize, pos: u64) -> Result<&[u8], UploadError> {
        self.window = None;
        if pos >= self.len || want == 0 {
            return Ok(&[]);
        }
        let n = usize::try_from(self.len - pos).map_or(want, |left| left.min(want));
        let map = xet_protocol::util::os::map_readonly(self.file, pos, n).map_err(|source| {
            UploadError::Read {
                offset: pos,
                source,
            }
        })?;
        // Advisory only: the kernel reads ahead if the file is not cached.
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(&self.window.insert(map)[..])
    }
}

impl Blocks for ReadBlocks<'_> {
    fn next_block(&mut self, want: usize, pos: u64) -> Result<&[u8], UploadError> {
        // Zeroed once, when it grows: a block is read over what the last one left.
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        let n = fill_slice(self.reader, &mut self.buf[..want], pos)?;
        Ok(&self.buf[..n])
    }
}

/// Fills as much of `buf` as `reader` has; returns how many bytes (fewer only at the end).
fn fill_slice(reader: &mut dyn Read, buf: &mut [u8], pos: u64) -> Result<usize, UploadError> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(UploadError::Read {
                    offset: pos + got as u64,
                    source,
                })
            }
        }
    }
    Ok(got)
}

/// The reading loop of [`read_file`]: reads, chunks and deduplicates the whole stream, feeding
/// `sha` every byte. Returns the number of bytes read, once the size was checked.
///
/// The chunk-and-hash engine ([`ChunkHasher`]) finds and hashes a block's chunks; they are
/// packed where the block holds them, only a chunk that spans two blocks being assembled (by
/// the engine, from the bytes of the chunk in progress at the end of a block).
#[allow(clippy::too_many_arguments)]
fn read_chunks(
    blocks: &mut dyn Blocks,
    options: &UploadOptions,
    sha: &mut Sha<'_>,
    session: &mut FileSession<'_>,
    emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    read_so_far: &std::cell::Cell<u64>,
    report: &dyn Fn(),
) -> Result<u64, UploadError> {
    let mut engine = ChunkHasher::new();
    let mut pos: u64 = 0;
    loop {
        // A file of known size is read in blocks of at most what is left of it (plus one
        // byte, which finds a file longer than expected): a small file zeroes and reads into
        // a small buffer, not a block-sized one (that was 9% of an embedded push of small files).
        let want = options.expected_size.map_or(READ_BLOCK, |size| {
            usize::try_from(size.saturating_sub(pos))
                .unwrap_or(usize::MAX)
                .saturating_add(1)
                .min(READ_BLOCK)
        });
        let block = blocks.next_block(want, pos)?;
        if block.is_empty() {
            break;
        }
        pos += block.len() as u64;
        read_so_far.set(pos);
        if let Some(expected) = options.expected_size {
            if pos > expected {
                return Err(UploadError::TooLong { expected });
            }
        }
        let hashed = match sha {
            Sha::Inline(inline) => engine.feed(block, Some(inline)),
            Sha::Thread { .. } | Sha::Declared(_) => {
                sha.update(block)?;
                engine.feed(block, None)
            }
        };
        let chunks: Vec<(&[u8], ChunkRef)> = hashed.with_bytes(block).collect();
        let compressed = compress_ahead(session, &chunks);
        session.start_block();
        session.look_ahead(chunks.iter().map(|(_, c)| c.hash));
        for ((bytes, chunk), ready) in chunks.into_iter().zip(compressed) {
            session.add_chunk(bytes, chunk.hash, ready, emit)?;
        }
        report();
    }
    if let Some((chunk, bytes)) = engine.finish() {
        session.add_chunk(&bytes, chunk.hash, None, emit)?;
    }
    if let Some(expected) = options.expected_size {
        if pos != expected {
            return Err(UploadError::TooShort {
                expected,
                actual: pos,
            });
        }
    }
    Ok(pos)
}

/// Per chunk of a block (hashed, with its bytes), the chunk compressed in parallel with the
/// scheme it would get if all were new, while the session's chunks are mostly new, so that
/// compression is not left to the session's thread; `None` for each otherwise.
fn compress_ahead(
    session: &FileSession<'_>,
    chunks: &[(&[u8], ChunkRef)],
) -> Vec<Option<CompressedChunk>> {
    if !session.compress_ahead() {
        return vec![None; chunks.len()];
    }
    let bytes: Vec<&[u8]> = chunks.iter().map(|&(b, _)| b).collect();
    let schemes = session.predict_schemes(&bytes);
    chunks
        .par_iter()
        .enumerate()
        .map(|(i, &(b, chunk))| {
            let scheme = *schemes.get(i)?;
            CompressedChunk::with_hash(b, chunk.hash, scheme).ok()
        })
        .collect()
}

/// Serialised size of a shard holding `files` and `blocks`, in upload form.
fn shard_len(files: &[FileInfo], blocks: &[XorbInfo]) -> u64 {
    let file_records: u64 = files
        .iter()
        .map(|f| {
            let terms = f.terms.len() as u64;
            1 + terms
                + if f.verification.is_some() { terms } else { 0 }
                + u64::from(f.sha256.is_some())
        })
        .sum();
    let xorb_records: u64 = blocks.iter().map(|b| 1 + b.chunks.len() as u64).sum();
    // Header, both sections, both bookends.
    RECORD_SIZE * (1 + file_records + 1 + xorb_records + 1)
}

/// The shards to register, in order: the files' shard last, earlier ones holding xorb blocks
/// that did not fit in it. `what` names the files in errors.
fn build_shards(
    files: Vec<FileInfo>,
    mut blocks: Vec<XorbInfo>,
    max: u64,
    what: &str,
) -> Result<Vec<Vec<u8>>, UploadError> {
    let fail = |e: xet_format::shard::ShardError| UploadError::Build {
        what: format!("the shard of {what}"),
        detail: e.to_string(),
    };
    blocks.sort_by_key(|b| b.hash);
    let file_len = shard_len(&files, &[]);
    if file_len > max {
        return Err(UploadError::Build {
            what: format!("the shard of {what}"),
            detail: format!("its file blocks alone exceed {max} bytes"),
        });
    }
    let empty_len = shard_len(&[], &[]);
    let (mut last, mut last_len) = (Vec::new(), file_len);
    let (mut groups, mut group_len): (Vec<Vec<XorbInfo>>, u64) = (Vec::new(), 0);
    for block in blocks {
        let len = RECORD_SIZE * (1 + block.chunks.len() as u64);
        if last_len + len <= max {
            last_len += len;
            last.push(block);
        } else if !groups.is_empty() && group_len + len <= max {
            group_len += len;
            if let Some(g) = groups.last_mut() {
                g.push(block);
            }
        } else {
            // What does not fit next to the files goes into xorb-only shards.
            group_len = empty_len + len;
            groups.push(vec![block]);
        }
    }
    let mut out = Vec::with_capacity(groups.len() + 1);
    for g in groups {
        let shard = Shard {
            files: Vec::new(),
            xorbs: g,
            meta: Default::default(),
        };
        out.push(shard.to_upload_bytes().map_err(fail)?);
    }
    let shard = Shard {
        files,
        xorbs: last,
        meta: Default::default(),
    };
    out.push(shard.to_upload_bytes().map_err(fail)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_protocol::target::{SentBytes, XorbPut};

    /// Takes every xorb and shard; hands each body back with its capacity set to `MARK`, so
    /// that a body built in a buffer handed back is told apart from one in fresh memory.
    #[derive(Default)]
    struct MarkingTarget {
        capacities: Mutex<Vec<usize>>,
    }

    const MARK: usize = (3 << 20) + 17;

    impl CasTarget for MarkingTarget {
        fn has_xorb(&self, _: &xet_format::XorbHash) -> Result<bool, TargetError> {
            Ok(false)
        }
        fn put_xorb(&self, _: xet_format::XorbHash, _: &[u8]) -> Result<bool, TargetError> {
            Ok(true)
        }
        fn put_xorb_with_progress(
            &self,
            _: xet_format::XorbHash,
            mut body: Vec<u8>,
            sent: SentBytes,
        ) -> Result<XorbPut, TargetError> {
            sent(body.len() as u64);
            self.capacities.lock().unwrap().push(body.capacity());
            body.clear();
            body.reserve_exact(MARK);
            body.shrink_to(MARK);
            assert_eq!(body.capacity(), MARK);
            Ok(XorbPut {
                inserted: true,
                buffer: Some(body),
            })
        }
        fn register_shard(&self, _: &[u8]) -> Result<(), TargetError> {
            Ok(())
        }
    }

    #[test]
    fn xorbs_are_built_in_the_buffers_of_xorbs_already_put() {
        let data = xet_format::test_util::pseudo_random(3 << 20, 7);
        for parallel_puts in [1, 3] {
            let target = MarkingTarget::default();
            let options = UploadOptions {
                limits: XorbLimits {
                    max_chunks: 2,
                    ..XorbLimits::CLIENT
                },
                parallel_puts,
                ..Default::default()
            };
            let summary = upload(&target, &data[..], &options).unwrap();
            let capacities = target.capacities.into_inner().unwrap();
            assert_eq!(capacities.len() as u64, summary.new_xorbs);
            assert!(summary.new_xorbs > 20, "{}", summary.new_xorbs);
            // Most xorbs are built in a buffer handed back: all but those built before the
            // first one came back, and those after a burst of puts ended at once (one buffer is
            // kept, the others freed).
            let fresh = capacities.iter().filter(|&&c| c != MARK).count();
            assert!(fresh * 2 <= capacities.len(), "{fresh} of {capacities:?}");
        }
    }

    /// Takes every xorb and shard, recording each xorb body's length in the order put.
    #[derive(Default)]
    struct LengthsTarget {
        lengths: Mutex<Vec<usize>>,
    }

    impl CasTarget for LengthsTarget {
        fn has_xorb(&self, _: &xet_format::XorbHash) -> Result<bool, TargetError> {
            Ok(false)
        }
        fn put_xorb(&self, _: xet_format::XorbHash, body: &[u8]) -> Result<bool, TargetError> {
            self.lengths.lock().unwrap().push(body.len());
            Ok(true)
        }
        fn register_shard(&self, _: &[u8]) -> Result<(), TargetError> {
            Ok(())
        }
    }

    #[test]
    fn a_large_files_first_xorb_is_small_so_that_its_upload_starts_early() {
        let limits = XorbLimits {
            max_uncompressed_bytes: 16 << 20,
            ..XorbLimits::CLIENT
        };
        let lengths = |size: usize| {
            let data = xet_format::test_util::pseudo_random(size, 11);
            let target = LengthsTarget::default();
            let options = UploadOptions {
                parallel_puts: 1,
                limits,
                expected_size: Some(size as u64),
                ..Default::default()
            };
            upload(&target, &data[..], &options).unwrap();
            target.lengths.into_inner().unwrap()
        };
        // Larger than a xorb: the first is at most FIRST_XORB_BYTES, the next full.
        let large = lengths(40 << 20);
        assert!(large.len() >= 3, "{large:?}");
        let first_max = session::FIRST_XORB_BYTES as usize + (64 << 10) + 4096;
        assert!(large[0] <= first_max, "{large:?}");
        assert!(large[0] >= 6 << 20, "{large:?}");
        assert!(large[1] > 15 << 20, "the next xorb is full: {large:?}");
        // So does a file of exactly a xorb's size: its xorbs are two either way.
        let exact = lengths(16 << 20);
        assert_eq!(exact.len(), 2, "{exact:?}");
        assert!(exact[0] <= first_max, "{exact:?}");
        // A smaller file stays one xorb.
        let small = lengths(12 << 20);
        assert_eq!(small.len(), 1, "{small:?}");
    }
}
