//! [`RemoteCas`]: the blocking client the pipelines' threads use, a thin layer over
//! [`AsyncRemoteCas`]. Each call runs the async operation on a current-thread runtime that the
//! calling thread drives itself (`block_on`; see `http::runtime`), so a small request costs no
//! hand-off to a client thread and back; threads that wait at the same time share the
//! runtime's I/O driver. It also reads xorb ranges straight from a directory store's files on
//! this machine ([`RemoteConfig::local_xorbs`]), which the async client leaves out: a file
//! read would hold up an async runtime.
//!
//! Like every blocking client, it must not be called from async code (tokio refuses to start
//! one runtime inside another); async programs use [`AsyncRemoteCas`] directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::runtime::Runtime;
use xet_format::shard::Shard;
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};
use xet_protocol::target::{
    CasTarget, Endpoint, RangeSink, SentBytes, TargetError, XorbPut, XorbSource,
};
use xet_protocol::{FetchRange, ReconstructionPlan};

use super::http::runtime;
use super::{AsyncRemoteCas, LocalXorbs, RemoteConfig, TokenSource};

/// The blocking HTTP client of a remote CAS server (see the module documentation).
pub struct RemoteCas {
    core: AsyncRemoteCas,
    /// See [`RemoteConfig::local_xorbs`].
    local_xorbs: Option<LocalXorbs>,
    /// What the core's requests run on; declared after it, so that it is dropped last.
    rt: Arc<Runtime>,
}

impl RemoteCas {
    /// A client for `config.cas_url` (see [`AsyncRemoteCas::new`]). Sends nothing.
    pub fn new(mut config: RemoteConfig) -> Result<Self, TargetError> {
        let rt = runtime().map_err(|e| TargetError::Remote {
            what: "starting the HTTP client".into(),
            message: format!("cannot start its runtime: {e}"),
            retryable: false,
            code: None,
        })?;
        let local_xorbs = config.local_xorbs.take();
        let core = {
            let _inside = rt.enter();
            AsyncRemoteCas::new(config)?
        };
        Ok(Self {
            core,
            local_xorbs,
            rt,
        })
    }

    /// The async client under this one.
    pub fn core(&self) -> &AsyncRemoteCas {
        &self.core
    }

    /// The CAS base URL, without a trailing `/`.
    pub fn cas_url(&self) -> &str {
        self.core.cas_url()
    }

    /// Where the bearer token comes from.
    pub fn token(&self) -> &TokenSource {
        self.core.token()
    }

    /// Runs `operation` to its end on this client's runtime, on the calling thread. Through
    /// one trait object, so that the runtime's `block_on` (its scheduler loop) is compiled once
    /// rather than once per operation's future type (about 150 KB of the binary).
    fn wait<T>(&self, operation: impl Future<Output = T>) -> T {
        let mut answer = None;
        {
            let slot = &mut answer;
            let run: Pin<Box<dyn Future<Output = ()> + '_>> = Box::pin(async move {
                *slot = Some(operation.await);
            });
            self.rt.block_on(run);
        }
        answer.unwrap_or_else(|| unreachable!("block_on returns once the operation has ended"))
    }
}

impl CasTarget for RemoteCas {
    fn has_xorb(&self, _xorb: &XorbHash) -> Result<bool, TargetError> {
        // The API has no cheap existence check, and xorb uploads are idempotent.
        Ok(false)
    }

    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        self.put_xorb_owned(xorb, body.to_vec())
    }

    fn put_xorb_owned(&self, xorb: XorbHash, body: Vec<u8>) -> Result<bool, TargetError> {
        Ok(self.wait(self.core.put_xorb(xorb, body, None))?.inserted)
    }

    fn put_xorb_with_progress(
        &self,
        xorb: XorbHash,
        body: Vec<u8>,
        sent: SentBytes,
    ) -> Result<XorbPut, TargetError> {
        self.wait(self.core.put_xorb(xorb, body, Some(sent)))
    }

    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        self.wait(self.core.register_shard(shard))
    }

    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        self.wait(self.core.dedup_query(chunk))
    }

    fn dense_key_modulus(&self) -> Option<u64> {
        self.core.dense_key_modulus()
    }

    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        self.wait(self.core.file_by_sha256(oid))
    }

    fn checks_sha256_claims(&self) -> bool {
        self.core.checks_sha256_claims()
    }
}

impl XorbSource for RemoteCas {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        if let Some(bytes) = self.read_local(xorb, range) {
            return Ok(bytes);
        }
        self.wait(self.core.read_xorb_range(xorb, range))
    }

    fn stream_xorb_range(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        if let Some(bytes) = self.read_local(xorb, range) {
            xet_protocol::target::hand_whole(bytes, sink);
            return Ok(());
        }
        self.wait(self.core.stream_xorb_range(xorb, range, sink))
    }

    fn stream_xorb_range_once(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut RangeSink<'_>,
    ) -> Result<(), TargetError> {
        self.stream_xorb_range(xorb, range, sink)
    }
}

impl RemoteCas {
    /// `range` of `xorb` read from the directory store's file on this machine, if there is one
    /// and it can be read.
    fn read_local(&self, xorb: &XorbHash, range: &FetchRange) -> Option<Vec<u8>> {
        let root = self.local_xorbs.as_ref()?;
        read_local_range(root, xorb, *range.bytes.start(), *range.bytes.end())
    }
}

impl Endpoint for RemoteCas {
    fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, TargetError> {
        self.wait(self.core.reconstruction(file, range))
    }

    fn reconstructions(
        &self,
        files: &[FileHash],
    ) -> Result<Option<std::collections::BTreeMap<FileHash, ReconstructionPlan>>, TargetError> {
        self.wait(self.core.reconstructions(files))
    }

    fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        self.wait(self.core.locate_oid(oid))
    }

    fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, TargetError> {
        self.wait(self.core.file_chunks(file))
    }

    fn describe(&self) -> String {
        self.core.describe()
    }
}

/// Bytes `start..=end` of the xorb file of `hash` in a directory store on this machine, if they
/// can be read (any failure: `None`, and the caller fetches them over HTTP).
#[cfg(unix)]
fn read_local_range(local: &LocalXorbs, hash: &XorbHash, start: u64, end: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt as _;
    let path = local.path(hash);
    let file = std::fs::File::open(&path).ok()?;
    let len = file.metadata().ok()?.len();
    if end < start || end >= len {
        return None;
    }
    let mut buf = vec![0u8; usize::try_from(end - start + 1).ok()?];
    match file.read_exact_at(&mut buf, start) {
        Ok(()) => Some(buf),
        Err(e) => {
            tracing::debug!(path = %path.display(), "cannot read a local xorb range: {e}");
            None
        }
    }
}

/// Elsewhere the ranges are always fetched over HTTP.
#[cfg(not(unix))]
fn read_local_range(_: &LocalXorbs, _: &XorbHash, _: u64, _: u64) -> Option<Vec<u8>> {
    None
}
