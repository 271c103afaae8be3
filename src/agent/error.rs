//! [`TransferError`]: why the agent could not serve a request from git-lfs, or start for one.
//!
//! git-lfs shows the message of a failed object as `[2] message` (and of a failed `init` as
//! `[32] message`), and it is all most users ever see of the agent, so every message is one
//! sentence naming what failed and, where there is something to do, what to do. Each variant
//! keeps the error that caused it as its `source` (boxed, so that the type stays small), and
//! its message ends with that cause (the message goes to git-lfs as it is; nothing prints the
//! chain again).

use std::path::PathBuf;
use std::sync::Arc;

use super::settings::SettingsError;
use xet_client::pipeline::download::DownloadError;
use xet_client::pipeline::upload::UploadError;
use xet_format::{FileHash, LfsOid};
use xet_protocol::TargetError;
use xet_store::StoreError;

/// Why one request (or the agent's start) failed. See the module documentation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransferError {
    /// Something to change in the configuration or the environment, said in full: no
    /// standalone endpoint, a directory endpoint without a store, the refusal of a verifying
    /// `git lfs prune`, an unusable action from the LFS server.
    #[error("{0}")]
    Setup(String),
    /// The LFS server refused git-xet's own batch request (401 or 403), or an SSH remote's
    /// `git-lfs-authenticate` failed: git-lfs may still get in (a prompt), said in full.
    #[error("{0}")]
    BatchRefused(String),
    /// The standalone endpoint's configuration cannot be read.
    #[error("cannot read the git-xet endpoint: {0}")]
    Settings(#[source] SettingsError),
    /// The directory endpoint's store cannot be opened.
    #[error("cannot open the store at {} ({configured}): {source}", dir.display())]
    OpenStore {
        dir: PathBuf,
        /// Where the endpoint was configured.
        configured: String,
        #[source]
        source: Box<StoreError>,
    },
    /// No client can be made for a CAS (a standalone endpoint, or one an LFS server named).
    #[error("cannot use {what}: {source}")]
    Connect {
        /// `the endpoint URL` or `the CAS URL the LFS server named`.
        what: String,
        #[source]
        source: Box<TargetError>,
    },
    /// git-lfs sent an upload request without the object's path.
    #[error("upload request without a path")]
    NoPath,
    /// The object to upload cannot be read.
    #[error("cannot read the LFS object {path} for upload: {source}")]
    ReadObject {
        /// As shown (redacted and clipped).
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The object to upload is a FIFO, a directory…
    #[error(
        "the LFS object {path} is not a regular file but {kind}; git-lfs hands over files of \
         .git/lfs/objects, so something replaced it: check that path, then push again"
    )]
    NotAFile { path: String, kind: &'static str },
    /// The object's content does not match the oid or size git-lfs gave.
    #[error("the LFS object {path} does not match its oid and size: {source}")]
    Mismatch {
        path: String,
        #[source]
        source: Box<UploadError>,
    },
    /// The upload pipeline failed.
    #[error("upload to {endpoint} failed: {source}")]
    Upload {
        endpoint: String,
        #[source]
        source: Box<UploadError>,
    },
    /// git-lfs stopped reading the agent's messages.
    #[error("cannot report progress to git-lfs: {0}")]
    Progress(#[source] std::io::Error),
    /// The Xet file of an oid cannot be found.
    #[error("{0}")]
    Lookup(String),
    /// The oid lookup failed.
    #[error("cannot look up LFS oid {oid} at {endpoint}: {source}")]
    LookupFailed {
        oid: LfsOid,
        endpoint: String,
        #[source]
        source: Box<TargetError>,
    },
    /// The reconstruction of a Xet file cannot be had.
    #[error("cannot get the reconstruction of Xet file {hash}: {source}")]
    Plan {
        hash: FileHash,
        #[source]
        source: Box<TargetError>,
    },
    /// The Xet file found for an oid has another size than the pointer says.
    #[error("Xet file {hash} has {actual} bytes, but LFS object {oid} should have {expected}")]
    WrongSize {
        hash: FileHash,
        oid: LfsOid,
        actual: u64,
        expected: u64,
    },
    /// The rebuilt file has another size than the pointer says.
    #[error("Xet file {hash} rebuilt to {actual} bytes, but LFS object {oid} has {expected}")]
    RebuiltSize {
        hash: FileHash,
        oid: LfsOid,
        actual: u64,
        expected: u64,
    },
    /// A local file operation of a download failed (git-lfs's temp directory, the file).
    #[error("{what} {}: {source}", path.display())]
    Local {
        /// e.g. "cannot create a file in".
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// git-lfs's temp directory cannot be found.
    #[error("cannot find git-lfs's temp directory: {0}")]
    TempDir(#[source] SettingsError),
    /// Rebuilding the file failed.
    #[error("download of {oid} from {endpoint} failed: {source}")]
    Download {
        oid: LfsOid,
        endpoint: String,
        #[source]
        source: Box<DownloadError>,
    },
    /// Every attempt to rebuild the file failed verification.
    #[error("download of {0} failed three times")]
    GaveUp(LfsOid),
    /// The finished file cannot be handed over.
    #[error("cannot keep the downloaded file: {0}")]
    Keep(#[source] std::io::Error),
    /// The same failure as an earlier request's (the standalone endpoint is resolved once).
    #[error(transparent)]
    Again(Arc<TransferError>),
}
