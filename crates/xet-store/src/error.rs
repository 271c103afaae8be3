//! What the storage engine says when it refuses or fails: [`StoreError`], with
//! [`ShardRejection`] for why a shard was refused; each names the object (file, xorb, term)
//! concerned. Whether a failure is the client's fault or a full disk is decided here, once.

use std::path::PathBuf;

use crate::backend::BackendError;
use crate::index::IndexError;
use xet_format::shard::ShardError;
use xet_format::xorb::XorbError;
use xet_format::{FileHash, XorbHash};
use xet_protocol::reconstruction::PlanError;

/// Why a shard was refused. Each names the file or xorb and the term concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardRejection {
    #[error("malformed shard: {0}")]
    Malformed(#[from] ShardError),
    #[error("an uploaded shard must not carry keyed chunk hashes")]
    Keyed,
    #[error("file {file} has no verification entries; every file of an uploaded shard needs them")]
    MissingVerification { file: FileHash },
    #[error("file {file} has unknown flag bits {flags:#010x}")]
    UnknownFlags { file: FileHash, flags: u32 },
    #[error("file {file} has no terms (only the empty file, hash 0, may)")]
    NoTerms { file: FileHash },
    #[error(
        "term {term} of file {file} references unknown xorb {xorb} (never uploaded, or lost): \
         upload the xorb first"
    )]
    UnknownXorb {
        file: FileHash,
        term: usize,
        xorb: XorbHash,
    },
    #[error(
        "term {term} of file {file}: chunks {start}..{end} are outside xorb {xorb} ({num_chunks} chunks)"
    )]
    ChunkRange {
        file: FileHash,
        term: usize,
        xorb: XorbHash,
        start: u32,
        end: u32,
        num_chunks: usize,
    },
    #[error(
        "term {term} of file {file}: unpacked_segment_bytes is {claimed}, the chunks hold {actual}"
    )]
    UnpackedLength {
        file: FileHash,
        term: usize,
        claimed: u32,
        actual: u64,
    },
    #[error("term {term} of file {file}: verification hash does not match xorb {xorb}")]
    Verification {
        file: FileHash,
        term: usize,
        xorb: XorbHash,
    },
    #[error("file hash {file} does not match the hash {computed} of its chunks")]
    FileHash { file: FileHash, computed: FileHash },
    #[error("xorb block {xorb} in the shard names a xorb that is not stored: upload it first")]
    UnknownXorbBlock { xorb: XorbHash },
    #[error(
        "the shard relies on xorb {xorb}, whose stored copy is damaged ({detail}): upload the \
         xorb again, which repairs it"
    )]
    DamagedXorb { xorb: XorbHash, detail: String },
    #[error("xorb block {xorb} does not match the stored xorb: {detail}")]
    XorbBlock { xorb: XorbHash, detail: String },
}

/// A store failure: the client's fault ([`StoreError::is_client_error`]) or the store's.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("xorb {xorb}: {source}")]
    InvalidXorb { xorb: XorbHash, source: XorbError },
    #[error("shard rejected: {0}")]
    ShardRejected(#[from] ShardRejection),
    #[error("shard of {len} bytes exceeds the {max}-byte limit")]
    ShardTooLarge { len: usize, max: u64 },
    #[error("cannot plan reconstruction of file {file}: {source}")]
    Plan { file: FileHash, source: PlanError },
    #[error(
        "stored xorb {xorb} is missing or damaged ({detail}); it is quarantined until a client \
         uploads it again (pushing a file that contains it repairs it)"
    )]
    DamagedXorb { xorb: XorbHash, detail: String },
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("{0}")]
    Index(#[from] IndexError),
    #[error("store directory {path}: {detail}")]
    Layout { path: PathBuf, detail: String },
    #[error(
        "{count} SHA-256 claims ({bytes} bytes of files) of {uploader} wait for the server to \
         check them, the most one uploader may have pending: try again in a minute"
    )]
    ClaimBacklog {
        uploader: String,
        count: u64,
        bytes: u64,
    },
    #[error(
        "garbage collection is deciding about xorb {xorb}, which the shard names: send the \
         shard again in a few seconds"
    )]
    SweepInProgress { xorb: XorbHash },
    #[error(
        "{url}: this git-xet was built without S3 storage (the `s3` feature); install the full \
         build (./install.sh, or `cargo install --path . --locked`) to use a bucket"
    )]
    S3NotBuilt { url: String },
}

impl StoreError {
    /// True when another process (or another `Store` in this one) has the store open: redb
    /// locks the index exclusively, so one opener at a time (see [`Store::open_waiting`](crate::Store::open_waiting)).
    pub fn is_locked(&self) -> bool {
        matches!(self, StoreError::Index(IndexError::InUse { .. }))
    }

    /// True when the store could not write because its disk (or quota) is full: a condition
    /// for the operator, not worth an immediate retry by the client (HTTP 507).
    pub fn is_storage_full(&self) -> bool {
        match self {
            StoreError::Backend(BackendError::Io { source, .. }) => is_storage_full(source),
            _ => false,
        }
    }

    /// True when the request was at fault (bad input), false when the store failed.
    pub fn is_client_error(&self) -> bool {
        match self {
            StoreError::InvalidXorb { .. }
            | StoreError::ShardRejected(_)
            | StoreError::ShardTooLarge { .. } => true,
            StoreError::Plan { source, .. } => {
                matches!(
                    source,
                    PlanError::NotSatisfiable { .. } | PlanError::Inverted { .. }
                )
            }
            _ => false,
        }
    }
}

/// ENOSPC or EDQUOT (the disk or the user's quota is full).
pub fn is_storage_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(28 | 122))
}
