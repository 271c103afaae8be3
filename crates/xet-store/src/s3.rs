//! Objects in an S3-compatible bucket: [`S3Backend`], the storage of
//! `git xet serve --storage s3://BUCKET/PREFIX`, which several server processes (nodes) can
//! share.
//!
//! Layout under the prefix:
//!
//! | key | what |
//! |---|---|
//! | `STORE-VERSION` | `git-xet-store 1`: written by the first node, checked by every other |
//! | `server.key` | 32 random bytes: the key every node signs CAS tokens and presigned URLs with |
//! | `xorbs/<xorb hash>` | stored xorbs (chunk region + V1 footer), as in a store directory |
//! | `shards/<shard hash>.mdb` | accepted shards, as uploaded |
//! | `log/<16-digit ms>-<shard hash>[-<repo>]` | empty; one per accepted shard (and per repository it was registered through), named by when: what nodes list to catch up with each other ([`SharedBucket::logged_shards`]), and, until a checkpoint covers it, the record of which repositories' scoped tokens may read a shard's files that a node listing everything reads ([`SharedBucket::list_access`]); `<repo>` is the repository id in unpadded base64url |
//! | `access/<shard hash>/<repo>` | empty; written by earlier versions beside each log entry with a repository, still read |
//! | `touched/<xorb hash>` | empty; rewritten when an upload relies on a stored xorb (objects cannot be re-dated in place): garbage collection counts a xorb's age from the newer of the two |
//! | `claims/batches/<16-digit ms>-<16 hex>` | `<oid> <file hash>` lines: SHA-256 claims a node checked, for the others, one object per batch of at most 10,000 ([`SharedBucket::checked_claims_since`]) |
//! | `claims/<oid>` | the hash of the file a node checked the SHA-256 claim `<oid>` of (written by earlier versions, one per claim; still read) |
//! | `checkpoints/<16-digit ms>-<BLAKE3 hex>` | what the shards, log entries and claim batches registered until then give a node's index, in one object a new node reads at once; what it covers is removed after a grace ([`crate::checkpoint`]) |
//! | `leases/gc`, `leases/checkpoint` | `<end ms> <holder>`: the node that runs garbage collection (writes checkpoints), until when ([`SharedBucket::take_lease`]) |
//! | `nodes/<node id>` | a node's status record (JSON: its version, start, catch-up state, recent pushes and garbage collections), rewritten about every 30 s, read by the other nodes' status pages ([`SharedBucket::put_node_record`], `xet_store::stats`) |
//! | `gc/sweeps/<16-digit ms>-<16 hex>` | what a garbage collection is about to delete, and whether it is done ([`crate::gc`]); read by every registration of a shard, removed an hour after |
//! | `quarantine/xorbs/<hash>.<unix time>`, `quarantine/shards/<hash>.mdb.<unix time>` | damaged objects moved aside |
//!
//! Objects are created only when absent: a look, then a conditional put (`If-None-Match: *`),
//! so of several nodes storing one xorb exactly one creates it where the store honours the
//! condition, and at worst (Garage 2.5 ignores it) two that raced both write the same name
//! and one whole copy remains (see [`S3Backend`]'s `put`); reads are ranged GETs; an object is sent from a
//! memory map of its spooled file (xorbs are at most 64 MiB, so one PUT each, no multipart).
//! Temporary files stay on the node's own disk (its data directory's `tmp/`).
//!
//! Settings are the standard `AWS_*` variables, which the command line reads from the
//! environment ([`S3Config::from_vars`]); this module reads no environment itself:
//! `AWS_ENDPOINT` (a self-hosted store; plain `http://` is allowed when the endpoint says
//! so), `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and
//! path-style addressing unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`.
//!
//! Bodies are sent unsigned (`UNSIGNED-PAYLOAD`) unless `AWS_UNSIGNED_PAYLOAD=false`.
//!
//! A request that fails for a reason worth retrying (a connection refused, a 5xx) is retried
//! four times within 20 seconds (backing off from 100 ms); then the store's caller sees the
//! error, and the client retries the whole request.
//!
//! The [`ObjectBackend`] methods are blocking (the store is synchronous): each runs its
//! requests on the runtime whose handle the backend was opened with (the server's) and waits
//! for the answer. Callers on that runtime reach the store through `spawn_blocking` (the
//! server's `blocking` helper). A call from one of its worker threads is a bug that
//! [`expect_blocking_thread`](xet_protocol::util::worker::expect_blocking_thread) reports (a
//! debug build panics); a release build then gives the worker's other tasks away while it
//! waits (`block_in_place`) rather than stall them.

use crate::repo_name::RepoName;
use std::future::Future;
use xet_protocol::util::now_ms;

use crate::timings::{StorageOp, StorageTimings};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{
    GetOptions, GetRange, ObjectMeta, ObjectStore, PutMode, PutOptions, RetryConfig,
};

use crate::backend::{
    BackendError, ClaimCursor, ListedXorb, LogCursor, LogEntry, ObjectBackend, ObjectKey,
    ObjectStamp, RangeSigner, SharedBucket, Spool,
};
use crate::checkpoint_format::CheckpointId;
use xet_format::{FileHash, LfsOid, ShardHash, XorbHash};

pub use crate::storage_url::{S3Config, StorageUrl, LOG_WINDOW_MS};

/// Objects in an S3-compatible bucket (see the module documentation).
pub struct S3Backend {
    /// The store's endpoints, in the order configured (one when a single endpoint, or the
    /// provider's default, is configured).
    endpoints: Vec<Endpoint>,
    url: StorageUrl,
    /// The region requests are signed for (object_store's: `AWS_REGION`, else us-east-1).
    region: String,
    spool: Spool,
    /// The runtime the requests run on (the caller's; the backend has none of its own).
    runtime: tokio::runtime::Handle,
    /// How long its requests took, by kind.
    timings: StorageTimings,
}

/// One endpoint of the object store (a Garage node, a replica behind its own address): its
/// client and, after a failure, until when it is tried only after the others.
struct Endpoint {
    client: Arc<object_store::aws::AmazonS3>,
    /// Its URL, for the log, with any credentials in it masked.
    name: String,
    /// Unix milliseconds; 0: healthy.
    down_until_ms: std::sync::atomic::AtomicU64,
}

/// How long an endpoint that failed is tried only after the others.
const ENDPOINT_DOWN_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a request's error says the endpoint failed (connection refused or reset, a timeout,
/// a 5xx after the client's retries), so another endpoint may answer, rather than something
/// about the object or the credentials, which every endpoint would say too.
fn endpoint_failed(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Backend").field("url", &self.url).finish()
    }
}

fn other(op: &'static str, key: impl Into<String>, e: impl std::fmt::Display) -> BackendError {
    BackendError::Io {
        op,
        key: key.into(),
        source: io::Error::other(e.to_string()),
    }
}

fn time_of(meta: &ObjectMeta) -> SystemTime {
    SystemTime::from(meta.last_modified)
}

/// How long a lease written to the bucket is left before it is read back (see
/// [`SharedBucket::take_lease`]).
pub const LEASE_SETTLE: std::time::Duration = std::time::Duration::from_millis(1000);

/// The stamp of an object: its length, and a digest of its ETag, version and time (any
/// rewrite changes the ETag or the time).
fn stamp_of(meta: &ObjectMeta) -> ObjectStamp {
    let mut h = blake3::Hasher::new();
    h.update(meta.e_tag.as_deref().unwrap_or("").as_bytes());
    h.update(b"\0");
    h.update(meta.version.as_deref().unwrap_or("").as_bytes());
    h.update(b"\0");
    h.update(meta.last_modified.to_rfc3339().as_bytes());
    let mut version = [0u8; 24];
    version.copy_from_slice(&h.finalize().as_bytes()[..24]);
    ObjectStamp {
        len: meta.size,
        version,
    }
}

impl S3Backend {
    /// Connects to the bucket of `url` with the `AWS_*` settings of `config`, keeping
    /// temporary files in `spool_dir`, whose disk keeps `min_free` bytes free (see [`Spool`]).
    /// Requests run on `runtime`, a multi-thread runtime's (a current-thread runtime would
    /// wait for itself when the store is called from its thread). Nothing is sent until the
    /// first request.
    pub fn open(
        config: &S3Config,
        spool_dir: &Path,
        min_free: u64,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, BackendError> {
        let url = &config.url;
        // Never in a log line or an error, whatever prints it.
        for secret in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] {
            if let Some(value) = config.setting(secret) {
                xet_protocol::redact::register_secret(&value);
            }
        }
        let endpoints = config.endpoints();
        let several = endpoints.len() > 1;
        let build = |endpoint: Option<&str>| -> Result<(object_store::aws::AmazonS3, String), BackendError> {
            let builder = Self::builder(config, endpoint, several)?;
            let region = builder
                .get_config_value(&object_store::aws::AmazonS3ConfigKey::Region)
                .unwrap_or_else(|| "us-east-1".to_string());
            let client = builder
                .build()
                .map_err(|e| other("configure", url.to_string(), e))?;
            Ok((client, region))
        };
        let mut clients = Vec::new();
        let mut region = String::new();
        if endpoints.is_empty() {
            let (client, r) = build(None)?;
            clients.push(Endpoint {
                client: Arc::new(client),
                name: "the provider's default endpoint".into(),
                down_until_ms: Default::default(),
            });
            region = r;
        }
        for endpoint in &endpoints {
            let (client, r) = build(Some(endpoint))?;
            clients.push(Endpoint {
                client: Arc::new(client),
                // Credentials written into the URL stay out of the log.
                name: xet_protocol::redact::redact(endpoint),
                down_until_ms: Default::default(),
            });
            region = r;
        }
        Ok(Self {
            endpoints: clients,
            url: url.clone(),
            region,
            spool: Spool::open(spool_dir)?.with_min_free(min_free),
            runtime,
            timings: StorageTimings::default(),
        })
    }

    /// The client settings for one endpoint (`None`: the provider's default). With `several`
    /// endpoints a failing one is given up quickly (a connection within 2 s, one retry within
    /// 3 s) so that the next one answers instead; with one, requests are retried four times
    /// within 20 seconds.
    fn builder(
        config: &S3Config,
        endpoint: Option<&str>,
        several: bool,
    ) -> Result<AmazonS3Builder, BackendError> {
        let url = &config.url;
        let mut builder = AmazonS3Builder::new();
        let mut options = object_store::ClientOptions::new();
        if endpoint.is_some_and(|e| e.starts_with("http://")) {
            // A store on the local network (Garage, MinIO) answering over plain http: one
            // connection per request, closed by the store (`Connection: close`, so that the
            // store's side, not this node's ports, holds TIME_WAIT). Garage sends a GET's
            // headers and body in separate writes without TCP_NODELAY, so on a kept connection
            // (past TCP's quick-ack start) each answer waited 40 ms for a delayed ACK: 43 ms
            // per small read instead of 2. Settings given below still win.
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(
                reqwest::header::CONNECTION,
                reqwest::header::HeaderValue::from_static("close"),
            );
            options = options
                .with_pool_max_idle_per_host(0)
                .with_default_headers(headers);
        }
        if several {
            options = options.with_connect_timeout(std::time::Duration::from_secs(2));
        }
        // Bodies are sent unsigned (`x-amz-content-sha256: UNSIGNED-PAYLOAD`; the request
        // itself is still signed): a signed body is one more SHA-256 pass over every byte here
        // and another in the store, which checks it (measured on Garage: 1 GiB pushes 10% slower
        // signed). What is stored is content-addressed: readers check chunks against their
        // hashes, scrub checks whole objects.
        // `AWS_UNSIGNED_PAYLOAD=false` (applied below) signs bodies again.
        builder = builder
            .with_client_options(options)
            .with_unsigned_payload(true);
        for (name, value) in &config.settings {
            if S3Config::ENDPOINT_SETTINGS.contains(&name.as_str()) {
                continue;
            }
            let key = name
                .to_ascii_lowercase()
                .parse()
                .map_err(|e| other("configure", format!("{url} ({name})"), e))?;
            builder = builder.with_config(key, value);
        }
        let retry = if several {
            RetryConfig {
                backoff: Default::default(),
                max_retries: 1,
                retry_timeout: std::time::Duration::from_secs(3),
            }
        } else {
            RetryConfig {
                backoff: Default::default(),
                max_retries: 4,
                retry_timeout: std::time::Duration::from_secs(20),
            }
        };
        builder = builder.with_bucket_name(&url.bucket).with_retry(retry);
        if let Some(endpoint) = endpoint {
            // An endpoint written as http:// is a deliberate choice (a store on the local
            // network); AWS_ALLOW_HTTP need not say it again.
            if endpoint.starts_with("http://") {
                builder = builder.with_allow_http(true);
            }
            builder = builder.with_endpoint(endpoint);
        }
        Ok(builder)
    }

    /// The endpoints in the order to try them now: those not marked down, in the configured
    /// order, then those marked down (the soonest back first).
    fn endpoint_order(&self) -> Vec<&Endpoint> {
        let now = now_ms();
        let mut order: Vec<&Endpoint> = self.endpoints.iter().collect();
        order.sort_by_key(|e| {
            let until = e.down_until_ms.load(std::sync::atomic::Ordering::Relaxed);
            if until <= now {
                0
            } else {
                until
            }
        });
        order
    }

    /// [`Self::block`] for a request `call` makes with a client: sent to the first endpoint in
    /// [`Self::endpoint_order`]; if that endpoint fails ([`endpoint_failed`]) it is marked down
    /// for [`ENDPOINT_DOWN_FOR`] and the request goes to the next one. The last answer is
    /// returned whatever it is.
    fn block_any<T, F>(
        &self,
        op: StorageOp,
        what: &str,
        call: impl Fn(Arc<object_store::aws::AmazonS3>) -> F,
    ) -> Result<Result<T, object_store::Error>, BackendError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, object_store::Error>> + Send + 'static,
    {
        let order = self.endpoint_order();
        let mut tried = 0;
        loop {
            let Some(endpoint) = order.get(tried) else {
                return Err(other("reach", what, "no storage endpoint is configured"));
            };
            tried += 1;
            let answer = self.block(op, what, call(Arc::clone(&endpoint.client)))?;
            let down = &endpoint.down_until_ms;
            match answer {
                Err(e) if endpoint_failed(&e) => {
                    let until = now_ms() + ENDPOINT_DOWN_FOR.as_millis() as u64;
                    down.store(until, std::sync::atomic::Ordering::Relaxed);
                    if tried < order.len() {
                        tracing::warn!(endpoint = %endpoint.name, error = %e, what,
                            "object storage endpoint failed; trying the next one");
                        self.timings.record_failover();
                        continue;
                    }
                    return Ok(Err(e));
                }
                answer => {
                    down.store(0, std::sync::atomic::Ordering::Relaxed);
                    return Ok(answer);
                }
            }
        }
    }

    /// The bucket and prefix.
    pub fn url(&self) -> &StorageUrl {
        &self.url
    }

    fn key(&self, rest: &str) -> Key {
        if self.url.prefix.is_empty() {
            Key::from(rest)
        } else {
            Key::from(format!("{}/{rest}", self.url.prefix))
        }
    }

    fn object(&self, key: ObjectKey) -> Key {
        match key {
            ObjectKey::Xorb(h) => self.key(&format!("xorbs/{h}")),
            ObjectKey::Shard(h) => self.key(&format!("shards/{h}.mdb")),
            ObjectKey::Checkpoint(id) => self.key(&format!("checkpoints/{id}")),
        }
    }

    fn touched(&self, xorb: &XorbHash) -> Key {
        self.key(&format!("touched/{xorb}"))
    }

    /// Runs `fut` on the backend's runtime and waits for it. A wait on a worker thread of a
    /// multi-thread runtime hands that worker's other tasks to another thread first, so that a
    /// caller that forgot `spawn_blocking` slows itself, not the server.
    ///
    /// A request task that panics is an error of that request (its message says so), not the
    /// end of anything: the next request runs as usual. Only a runtime shutting down (the
    /// task dropped unfinished) is reported as such.
    fn block<T: Send + 'static>(
        &self,
        op: StorageOp,
        what: &str,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, BackendError> {
        xet_protocol::util::worker::expect_blocking_thread("a request to object storage");
        let started = std::time::Instant::now();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let task = self.runtime.spawn(fut);
        self.runtime.spawn(async move {
            let _ = tx.send(task.await);
        });
        let wait = || rx.recv();
        let answer = match tokio::runtime::Handle::try_current() {
            Ok(here) if here.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        };
        self.timings.record(op, started.elapsed());
        tracing::trace!(
            ?op,
            what,
            secs = started.elapsed().as_secs_f64(),
            "object storage request"
        );
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_panic() => Err(other(
                "finish a request for",
                what,
                format!(
                    "the storage request failed unexpectedly (it panicked: {})",
                    panic_message(e.into_panic())
                ),
            )),
            // The task is dropped unfinished only when the runtime shuts down.
            Ok(Err(_)) | Err(_) => Err(other(
                "finish a request for",
                what,
                "the server is shutting down",
            )),
        }
    }

    /// The object's metadata, `None` if it does not exist.
    fn head(&self, path: &Key, what: &str) -> Result<Option<ObjectMeta>, BackendError> {
        match self.block_any(StorageOp::Head, what, |store| {
            let p = path.clone();
            async move { store.head(&p).await }
        })? {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(other("look up", what, e)),
        }
    }

    /// Stores `payload` at `path` if absent (`mode` Create) or whatever is there (Overwrite).
    /// `Ok(false)`: it existed (Create only).
    ///
    /// A create looks first, then puts with `If-None-Match: *`: on a store that honours it
    /// (Amazon S3, MinIO, R2, Ceph) of several concurrent writers exactly one creates the
    /// object. Garage 2.5 ignores the condition, so there two writers that both looked before
    /// either wrote both write; the key still holds one whole object, the last written, and for
    /// a content-addressed object either copy is equally valid.
    fn put(
        &self,
        path: &Key,
        payload: bytes::Bytes,
        mode: PutMode,
        what: &str,
    ) -> Result<bool, BackendError> {
        if mode == PutMode::Create && self.head(path, what)?.is_some() {
            return Ok(false);
        }
        self.put_with(path, payload, mode, what)
    }

    /// Creates `key` holding `bytes`; `look`: looks whether the object exists first (see
    /// [`Self::put`]).
    fn create_bytes(&self, key: ObjectKey, bytes: &[u8], look: bool) -> Result<bool, BackendError> {
        let (path, what) = (self.object(key), key.to_string());
        let payload = bytes::Bytes::copy_from_slice(bytes);
        if look {
            self.put(&path, payload, PutMode::Create, &what)
        } else {
            self.put_with(&path, payload, PutMode::Create, &what)
        }
    }

    /// Sends the object in `file` (consumed, whatever happens) to `key`; `look`: a create looks
    /// whether the object exists first (see [`Self::put`]).
    fn send_file(
        &self,
        key: ObjectKey,
        file: &Path,
        mode: PutMode,
        look: bool,
    ) -> Result<bool, BackendError> {
        let what = key.to_string();
        let result = Self::file_bytes(file, &what).and_then(|payload| {
            let path = self.object(key);
            if look {
                self.put(&path, payload, mode, &what)
            } else {
                self.put_with(&path, payload, mode, &what)
            }
        });
        let _ = std::fs::remove_file(file);
        result
    }

    /// [`Self::put`] without the look a create makes first (see
    /// [`ObjectBackend::put_new_file`]).
    fn put_with(
        &self,
        path: &Key,
        payload: bytes::Bytes,
        mode: PutMode,
        what: &str,
    ) -> Result<bool, BackendError> {
        let put = |store: Arc<object_store::aws::AmazonS3>| {
            let (p, payload) = (path.clone(), payload.clone());
            let options = PutOptions {
                mode: mode.clone(),
                ..PutOptions::default()
            };
            async move { store.put_opts(&p, payload.into(), options).await }
        };
        match self.block_any(StorageOp::Put, what, put)? {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(other("store", what, e)),
        }
    }

    /// The whole of the file `file` as bytes to send: a memory map, not a copy.
    fn file_bytes(file: &Path, what: &str) -> Result<bytes::Bytes, BackendError> {
        let f = std::fs::File::open(file).map_err(|source| BackendError::Io {
            op: "open the prepared copy of",
            key: what.to_string(),
            source,
        })?;
        let len = f
            .metadata()
            .map_err(|source| BackendError::Io {
                op: "stat the prepared copy of",
                key: what.to_string(),
                source,
            })?
            .len();
        if len == 0 {
            return Ok(bytes::Bytes::new());
        }
        // The file is the store's own temporary file (from `temp_path`), complete and flushed;
        // nothing writes or truncates it while it is mapped (what `map_whole` requires).
        let map = xet_protocol::util::os::map_whole(&f).map_err(|source| BackendError::Io {
            op: "map the prepared copy of",
            key: what.to_string(),
            source,
        })?;
        Ok(bytes::Bytes::from_owner(map))
    }

    /// Every object under `dir/` (relative to the prefix), after `offset` (a full key) if
    /// given.
    fn list(&self, dir: &str, offset: Option<Key>) -> Result<Vec<ObjectMeta>, BackendError> {
        let prefix = self.key(dir);
        let what = format!("{}/{dir}/", self.url);
        let listing = |store: Arc<object_store::aws::AmazonS3>| {
            let (prefix, offset) = (prefix.clone(), offset.clone());
            async move {
                let mut stream = match &offset {
                    Some(o) => store.list_with_offset(Some(&prefix), o),
                    None => store.list(Some(&prefix)),
                };
                let mut out = Vec::new();
                while let Some(item) = stream.next().await {
                    out.push(item?);
                }
                Ok::<_, object_store::Error>(out)
            }
        };
        self.block_any(StorageOp::List, &what, listing)?
            .map_err(|e| other("list", what.clone(), e))
    }

    /// The whole object at `path`; `None` if it does not exist.
    fn get_whole(&self, path: &Key, what: &str) -> Result<Option<Vec<u8>>, BackendError> {
        match self.block_any(StorageOp::Get, what, |store| {
            let p = path.clone();
            async move { store.get(&p).await?.bytes().await }
        })? {
            Ok(bytes) => Ok(Some(Vec::from(bytes))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(other("read", what, e)),
        }
    }

    fn delete(&self, path: &Key, what: &str) -> Result<(), BackendError> {
        match self.block_any(StorageOp::Delete, what, |store| {
            let p = path.clone();
            async move { store.delete(&p).await }
        })? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(other("delete", what, e)),
        }
    }
}

/// Claims per batch object ([`SharedBucket::record_checked_claims`]): about 1.3 MB.
const CLAIMS_PER_BATCH: usize = 10_000;

/// A listed batch of claims larger than this is not read (a batch of
/// [`CLAIMS_PER_BATCH`] claims is about 1.3 MB).
const MAX_CLAIM_BATCH_BYTES: u64 = 4 << 20;

/// The `<oid> <file hash>` lines of a batch of claims; lines that are not one are skipped.
fn parse_claim_batch(bytes: &[u8]) -> Vec<(LfsOid, FileHash)> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (oid, file) = line.split_once(' ')?;
            Some((LfsOid::from_hex(oid).ok()?, FileHash::from_hex(file).ok()?))
        })
        .collect()
}

/// A repository id from its unpadded base64url form in a key; `None` if it is not one.
fn decode_repo(encoded: &str) -> Option<RepoName> {
    URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|r| RepoName::new(r).ok())
}

/// The name of a log entry (under the prefix): the inverse of [`parse_log_entry`].
fn log_entry_name(entry: &LogEntry) -> String {
    match &entry.repo {
        Some(repo) => format!(
            "log/{:016}-{}-{}",
            entry.ms,
            entry.shard,
            URL_SAFE_NO_PAD.encode(repo.as_str())
        ),
        None => format!("log/{:016}-{}", entry.ms, entry.shard),
    }
}

/// A shard log entry's name, `<16-digit ms>-<shard hash>[-<repo>]`: when, which shard, and
/// through which repository; `None` for a name that is not one.
fn parse_log_entry(name: &str) -> Option<(u64, ShardHash, Option<RepoName>)> {
    let mut parts = name.splitn(3, '-');
    let ms = parts.next()?.parse::<u64>().ok()?;
    let hash = ShardHash::from_hex(parts.next()?).ok()?;
    let repo = match parts.next() {
        None => None,
        Some(encoded) => Some(decode_repo(encoded)?),
    };
    Some((ms, hash, repo))
}

/// What a panic said, if it said it with a string.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "no message".to_string(), |s| (*s).to_string()),
    }
}

/// The name after the last `/` of a listed key.
fn file_name(meta: &ObjectMeta) -> &str {
    meta.location.filename().unwrap_or("")
}

impl ObjectBackend for S3Backend {
    fn put_if_absent(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError> {
        self.create_bytes(key, bytes, true)
    }

    fn put_new(&self, key: ObjectKey, bytes: &[u8]) -> Result<bool, BackendError> {
        self.create_bytes(key, bytes, false)
    }

    fn put_file_if_absent(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError> {
        self.send_file(key, file, PutMode::Create, true)
    }

    fn put_new_file(&self, key: ObjectKey, file: &Path) -> Result<bool, BackendError> {
        self.send_file(key, file, PutMode::Create, false)
    }

    fn replace_file(&self, key: ObjectKey, file: &Path) -> Result<(), BackendError> {
        self.send_file(key, file, PutMode::Overwrite, false)
            .map(|_| ())
    }

    fn temp_path(&self, what: &str) -> PathBuf {
        self.spool.temp_path(what)
    }

    fn check_space(&self, bytes: u64) -> Result<(), BackendError> {
        self.spool.check_space(bytes)
    }

    fn stamp(&self, key: ObjectKey) -> Result<Option<ObjectStamp>, BackendError> {
        Ok(self
            .head(&self.object(key), &key.to_string())?
            .map(|m| stamp_of(&m)))
    }

    fn modified(&self, key: ObjectKey) -> Result<Option<SystemTime>, BackendError> {
        let what = key.to_string();
        let Some(meta) = self.head(&self.object(key), &what)? else {
            return Ok(None);
        };
        let mut newest = time_of(&meta);
        if let ObjectKey::Xorb(h) = key {
            if let Some(t) = self.head(&self.touched(&h), &what)? {
                newest = newest.max(time_of(&t));
            }
        }
        Ok(Some(newest))
    }

    fn read_range(
        &self,
        key: ObjectKey,
        range: Range<u64>,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        let what = key.to_string();
        let path = self.object(key);
        let out_of_bounds = |len: u64| BackendError::RangeOutOfBounds {
            key,
            start: range.start,
            end: range.end,
            len,
        };
        if range.start >= range.end {
            // Nothing to fetch: only whether the object exists and the range fits.
            return match self.head(&path, &what)? {
                None => Ok(None),
                Some(m) if range.start > range.end || range.end > m.size => {
                    Err(out_of_bounds(m.size))
                }
                Some(_) => Ok(Some(Vec::new())),
            };
        }
        let get = |store: Arc<object_store::aws::AmazonS3>| {
            let (p, r) = (path.clone(), range.clone());
            async move {
                let options = GetOptions {
                    range: Some(GetRange::Bounded(r)),
                    ..GetOptions::default()
                };
                store.get_opts(&p, options).await?.bytes().await
            }
        };
        match self.block_any(StorageOp::Get, &what, get)? {
            Ok(bytes) if bytes.len() as u64 == range.end - range.start => {
                Ok(Some(Vec::from(bytes)))
            }
            // A range past the end is answered with what there is.
            Ok(bytes) => Err(out_of_bounds(range.start + bytes.len() as u64)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => match self.head(&path, &what)? {
                None => Ok(None),
                Some(m) if range.end > m.size => Err(out_of_bounds(m.size)),
                Some(_) => Err(other("read", what, e)),
            },
        }
    }

    fn read_all(&self, key: ObjectKey) -> Result<Option<Vec<u8>>, BackendError> {
        self.get_whole(&self.object(key), &key.to_string())
    }

    fn read_tail(
        &self,
        key: ObjectKey,
        n: u64,
    ) -> Result<Option<(Vec<u8>, ObjectStamp)>, BackendError> {
        let what = key.to_string();
        let path = self.object(key);
        let get = |store: Arc<object_store::aws::AmazonS3>| {
            let p = path.clone();
            async move {
                let options = GetOptions {
                    range: Some(GetRange::Suffix(n)),
                    ..GetOptions::default()
                };
                let got = store.get_opts(&p, options).await?;
                let stamp = stamp_of(&got.meta);
                Ok::<_, object_store::Error>((got.bytes().await?, stamp))
            }
        };
        match self.block_any(StorageOp::Get, &what, get)? {
            Ok((bytes, stamp)) if bytes.len() as u64 == n.min(stamp.len) => {
                Ok(Some((Vec::from(bytes), stamp)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            // An empty object, a store that answers a suffix otherwise: its length, then the
            // bytes (the trait's way).
            _ => {
                let Some(stamp) = self.stamp(key)? else {
                    return Ok(None);
                };
                let range = stamp.len.saturating_sub(n)..stamp.len;
                let Some(bytes) = self.read_range(key, range)? else {
                    return Ok(None);
                };
                Ok(Some((bytes, stamp)))
            }
        }
    }

    fn read_all_stamped(
        &self,
        key: ObjectKey,
    ) -> Result<Option<(Vec<u8>, ObjectStamp)>, BackendError> {
        let what = key.to_string();
        let path = self.object(key);
        match self.block_any(StorageOp::Get, &what, |store| {
            let p = path.clone();
            async move {
                let got = store.get(&p).await?;
                let stamp = stamp_of(&got.meta);
                Ok::<_, object_store::Error>((got.bytes().await?, stamp))
            }
        })? {
            Ok((bytes, stamp)) => Ok(Some((Vec::from(bytes), stamp))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(other("read", what, e)),
        }
    }

    fn remove(&self, key: ObjectKey) -> Result<bool, BackendError> {
        let what = key.to_string();
        let path = self.object(key);
        if self.head(&path, &what)?.is_none() {
            return Ok(false);
        }
        self.delete(&path, &what)?;
        if let ObjectKey::Xorb(h) = key {
            self.delete(&self.touched(&h), &what)?;
        }
        Ok(true)
    }

    fn quarantine(&self, key: ObjectKey) -> Result<bool, BackendError> {
        let what = key.to_string();
        let path = self.object(key);
        if self.head(&path, &what)?.is_none() {
            return Ok(false);
        }
        let now = now_ms() / 1000;
        let aside = match key {
            ObjectKey::Xorb(h) => self.key(&format!("quarantine/xorbs/{h}.{now}")),
            ObjectKey::Shard(h) => self.key(&format!("quarantine/shards/{h}.mdb.{now}")),
            ObjectKey::Checkpoint(id) => self.key(&format!("quarantine/checkpoints/{id}.{now}")),
        };
        match self.block_any(StorageOp::Copy, &what, |store| {
            let (from, aside) = (path.clone(), aside.clone());
            async move { store.copy(&from, &aside).await }
        })? {
            Ok(()) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(other("copy to quarantine", what, e)),
        }
        self.delete(&path, &what)?;
        Ok(true)
    }

    fn touch(&self, key: ObjectKey) -> Result<(), BackendError> {
        match key {
            ObjectKey::Xorb(h) => self
                .put(
                    &self.touched(&h),
                    bytes::Bytes::new(),
                    PutMode::Overwrite,
                    &key.to_string(),
                )
                .map(|_| ()),
            // Shards and checkpoints are removed by what covers them, not by age.
            ObjectKey::Shard(_) | ObjectKey::Checkpoint(_) => Ok(()),
        }
    }

    fn list_xorbs(&self) -> Result<Vec<ListedXorb>, BackendError> {
        let mut touched = std::collections::HashMap::new();
        for meta in self.list("touched", None)? {
            if let Ok(h) = XorbHash::from_hex(file_name(&meta)) {
                touched.insert(h, time_of(&meta));
            }
        }
        let mut out = Vec::new();
        for meta in self.list("xorbs", None)? {
            let Ok(hash) = XorbHash::from_hex(file_name(&meta)) else {
                continue;
            };
            let mut modified = time_of(&meta);
            if let Some(t) = touched.get(&hash) {
                modified = modified.max(*t);
            }
            out.push(ListedXorb {
                hash,
                len: meta.size,
                modified,
            });
        }
        out.sort_by_key(|x| x.hash);
        Ok(out)
    }

    fn clean_temp(&self, older_than: std::time::Duration) -> Result<(u64, u64), BackendError> {
        self.spool.clean(older_than)
    }

    fn list_shards(&self) -> Result<Vec<ShardHash>, BackendError> {
        let mut out: Vec<ShardHash> = self
            .list("shards", None)?
            .iter()
            .filter_map(|m| file_name(m).strip_suffix(".mdb"))
            .filter_map(|stem| ShardHash::from_hex(stem).ok())
            .collect();
        out.sort();
        Ok(out)
    }

    fn shared(&self) -> Option<&dyn SharedBucket> {
        Some(self)
    }
}

impl SharedBucket for S3Backend {
    fn log_shard(&self, shard: &ShardHash, repo: Option<&RepoName>) -> Result<(), BackendError> {
        // One object: the log entry is also the record of the registration until a
        // checkpoint covers it (`crate::checkpoint`), read whole by a full listing
        // (`list_access`).
        let name = log_entry_name(&LogEntry {
            ms: now_ms(),
            shard: *shard,
            repo: repo.cloned(),
        });
        self.put(
            &self.key(&name),
            bytes::Bytes::new(),
            PutMode::Overwrite,
            &format!("the log entry of shard {shard}"),
        )
        .map(|_| ())
    }

    fn logged_shards(&self, cursor: &mut LogCursor) -> Result<Vec<LogEntry>, BackendError> {
        let from = cursor.newest_ms.saturating_sub(LOG_WINDOW_MS);
        let offset = self.key(&format!("log/{from:016}"));
        let mut out = Vec::new();
        for meta in self.list("log", Some(offset))? {
            if let Some((ms, shard, repo)) = parse_log_entry(file_name(&meta)) {
                cursor.newest_ms = cursor.newest_ms.max(ms);
                out.push(LogEntry { ms, shard, repo });
            }
        }
        Ok(out)
    }

    fn list_access(&self) -> Result<Vec<(ShardHash, RepoName)>, BackendError> {
        let mut out: Vec<(ShardHash, RepoName)> = self
            .list("log", None)?
            .iter()
            .filter_map(|meta| parse_log_entry(file_name(meta)))
            .filter_map(|(_, shard, repo)| Some((shard, repo?)))
            .collect();
        // Earlier versions also wrote `access/<shard>/<repo>` for each registration.
        for meta in self.list("access", None)? {
            let parts: Vec<String> = meta
                .location
                .parts()
                .map(|p| p.as_ref().to_string())
                .collect();
            let [.., shard, repo] = parts.as_slice() else {
                continue;
            };
            if let (Ok(shard), Some(repo)) = (ShardHash::from_hex(shard), decode_repo(repo)) {
                out.push((shard, repo));
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn list_log(&self) -> Result<Vec<LogEntry>, BackendError> {
        Ok(self
            .list("log", None)?
            .iter()
            .filter_map(|meta| parse_log_entry(file_name(meta)))
            .map(|(ms, shard, repo)| LogEntry { ms, shard, repo })
            .collect())
    }

    fn remove_log_entry(&self, entry: &LogEntry) -> Result<(), BackendError> {
        let name = log_entry_name(entry);
        self.delete(&self.key(&name), &format!("{}/{name}", self.url))
    }

    fn list_claim_batches(&self) -> Result<Vec<String>, BackendError> {
        Ok(self
            .list("claims/batches", None)?
            .iter()
            .map(|meta| file_name(meta).to_string())
            .collect())
    }

    fn remove_claim_batch(&self, name: &str) -> Result<(), BackendError> {
        let name = format!("claims/batches/{name}");
        self.delete(&self.key(&name), &format!("{}/{name}", self.url))
    }

    fn list_checkpoints(&self) -> Result<Vec<CheckpointId>, BackendError> {
        let mut out: Vec<CheckpointId> = self
            .list("checkpoints", None)?
            .iter()
            .filter_map(|meta| CheckpointId::parse(file_name(meta)))
            .collect();
        out.sort();
        Ok(out)
    }

    fn range_signer(&self, ttl: std::time::Duration) -> Option<Box<dyn RangeSigner>> {
        use object_store::signer::Signer as _;
        // The endpoint requests go to now: clients then read from it too.
        let signer = Arc::clone(&self.endpoint_order().first()?.client);
        // A xorb's URL up to its name, from object_store's URL of one (path or virtual-host
        // style and encoding as it reaches the bucket); the credential of the moment.
        let sample = self.object(ObjectKey::Xorb(XorbHash::from_bytes([0; 32])));
        let what = format!("{}/xorbs", self.url);
        let fetched = self
            .block(StorageOp::Sign, &what, async move {
                let url = signer
                    .signed_url(reqwest::Method::GET, &sample, ttl)
                    .await?;
                let credential = signer.credentials().get_credential().await?;
                Ok::<_, object_store::Error>((url, credential))
            })
            .and_then(|r| r.map_err(|e| other("sign URLs for", what.clone(), e)));
        let (mut url, credential) = match fetched {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sign storage URLs; the node's own URLs are used");
                return None;
            }
        };
        url.set_query(None);
        let base = url
            .as_str()
            .strip_suffix(&XorbHash::from_bytes([0; 32]).to_hex())?;
        let identity = aws_credential_types::Credentials::new(
            credential.key_id.clone(),
            credential.secret_key.clone(),
            credential.token.clone(),
            None,
            "git-xet",
        )
        .into();
        Some(Box::new(S3RangeSigner {
            identity,
            region: self.region.clone(),
            base: base.to_string(),
            ttl,
            time: SystemTime::now(),
        }))
    }

    fn shared_value(&self, name: &str, initial: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let path = self.key(name);
        let what = format!("{}/{name}", self.url);
        self.put(
            &path,
            bytes::Bytes::copy_from_slice(initial),
            PutMode::Create,
            &what,
        )?;
        match self.get_whole(&path, &what)? {
            Some(bytes) => Ok(Some(bytes)),
            None => Err(other(
                "read",
                what,
                "it disappeared right after it was stored",
            )),
        }
    }

    fn record_checked_claim(&self, oid: &LfsOid, file: &FileHash) -> Result<(), BackendError> {
        let path = self.key(&format!("claims/{oid}"));
        let what = format!("{}/claims/{oid}", self.url);
        // The same content whoever writes it: one PUT, no look first.
        let body = bytes::Bytes::from(file.to_hex().into_bytes());
        self.put(&path, body, PutMode::Overwrite, &what).map(|_| ())
    }

    fn record_checked_claims(&self, claims: &[(LfsOid, FileHash)]) -> Result<(), BackendError> {
        for batch in claims.chunks(CLAIMS_PER_BATCH) {
            let mut id = [0u8; 8];
            getrandom::fill(&mut id)
                .map_err(|e| other("name a batch of claims in", self.url.to_string(), e))?;
            let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let name = format!("claims/batches/{:016}-{id}", now_ms());
            let what = format!("{}/{name}", self.url);
            let mut body = String::with_capacity(batch.len() * 130);
            for (oid, file) in batch {
                body.push_str(&format!("{oid} {file}\n"));
            }
            self.put(
                &self.key(&name),
                bytes::Bytes::from(body.into_bytes()),
                PutMode::Overwrite,
                &what,
            )?;
        }
        Ok(())
    }

    fn checked_claims_since(
        &self,
        cursor: &mut ClaimCursor,
    ) -> Result<Vec<(LfsOid, FileHash)>, BackendError> {
        // Batches are named by their writer's clock: those of the last window are listed
        // again, so that one written late (or by a node whose clock is behind) is not missed.
        let from = cursor.newest_ms.saturating_sub(LOG_WINDOW_MS);
        let offset = self.key(&format!("claims/batches/{from:016}"));
        let mut out = Vec::new();
        for meta in self.list("claims/batches", Some(offset))? {
            let name = file_name(&meta).to_string();
            let Some(ms) = name.split('-').next().and_then(|ms| ms.parse::<u64>().ok()) else {
                continue;
            };
            if cursor.read.contains(&name) {
                continue;
            }
            cursor.read.insert(name.clone());
            cursor.newest_ms = cursor.newest_ms.max(ms);
            if meta.size > MAX_CLAIM_BATCH_BYTES {
                tracing::warn!(batch = %name, bytes = meta.size, "ignoring an oversized batch of claims");
                continue;
            }
            let what = format!("{}/claims/batches/{name}", self.url);
            let Some(bytes) = self.get_whole(&meta.location, &what)? else {
                continue;
            };
            out.extend(parse_claim_batch(&bytes));
        }
        let from = cursor.newest_ms.saturating_sub(LOG_WINDOW_MS);
        cursor.read.retain(|name| {
            name.split('-')
                .next()
                .and_then(|ms| ms.parse::<u64>().ok())
                .is_some_and(|ms| ms >= from)
        });
        Ok(out)
    }

    fn checked_claim(&self, oid: &LfsOid) -> Result<Option<FileHash>, BackendError> {
        let path = self.key(&format!("claims/{oid}"));
        let what = format!("{}/claims/{oid}", self.url);
        // Anything but a file hash in hex is no record (a check is then done here).
        Ok(self.get_whole(&path, &what)?.and_then(|bytes| {
            std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| FileHash::from_hex(text.trim()).ok())
        }))
    }

    fn timings(&self) -> Option<&StorageTimings> {
        Some(&self.timings)
    }

    /// `leases/<name>` holds `<end ms> <holder>`. Stores such as Garage ignore conditional
    /// writes, so a lease is written, left to settle for [`LEASE_SETTLE`], and read back: of
    /// two processes that write at once, both read the last write, and only its holder goes on.
    fn take_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<(String, u64)>, BackendError> {
        let path = self.key(&format!("leases/{name}"));
        let what = format!("{}/leases/{name}", self.url);
        let read = |bytes: Option<Vec<u8>>| -> Option<(String, u64)> {
            let text = String::from_utf8(bytes?).ok()?;
            let (end, who) = text.trim().split_once(' ')?;
            Some((who.to_string(), end.parse().ok()?))
        };
        if let Some((who, end)) = read(self.get_whole(&path, &what)?) {
            if who != holder && end > now_ms() {
                return Ok(Some((who, end)));
            }
        }
        let end = now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let body = bytes::Bytes::from(format!("{end} {holder}").into_bytes());
        self.put(&path, body, PutMode::Overwrite, &what)?;
        std::thread::sleep(LEASE_SETTLE);
        match read(self.get_whole(&path, &what)?) {
            Some((who, _)) if who == holder => Ok(None),
            Some((who, end)) => Ok(Some((who, end))),
            None => Err(other(
                "read",
                what,
                "the lease disappeared right after it was written",
            )),
        }
    }

    fn put_sweep(&self, name: &str, body: &[u8]) -> Result<(), BackendError> {
        let key = self.key(&format!("gc/sweeps/{name}"));
        let what = format!("{}/gc/sweeps/{name}", self.url);
        let body = bytes::Bytes::copy_from_slice(body);
        self.put(&key, body, PutMode::Overwrite, &what).map(|_| ())
    }

    fn list_sweeps(&self) -> Result<Vec<String>, BackendError> {
        let mut names: Vec<String> = self
            .list("gc/sweeps", None)?
            .iter()
            .map(|m| file_name(m).to_string())
            .collect();
        names.sort();
        Ok(names)
    }

    fn read_sweep(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, BackendError> {
        let key = self.key(&format!("gc/sweeps/{name}"));
        let what = format!("{}/gc/sweeps/{name}", self.url);
        // One byte more than allowed tells a record that is too long, without reading it all.
        let get = |store: Arc<object_store::aws::AmazonS3>| {
            let key = key.clone();
            async move {
                let options = GetOptions {
                    range: Some(GetRange::Bounded(0..max.saturating_add(1))),
                    ..GetOptions::default()
                };
                store.get_opts(&key, options).await?.bytes().await
            }
        };
        match self.block_any(StorageOp::Get, &what, get)? {
            Ok(bytes) => Ok(Some(Vec::from(bytes))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(other("read", what, e)),
        }
    }

    fn remove_sweep(&self, name: &str) -> Result<(), BackendError> {
        let key = self.key(&format!("gc/sweeps/{name}"));
        let what = format!("{}/gc/sweeps/{name}", self.url);
        self.delete(&key, &what)
    }

    fn put_node_record(&self, id: &str, body: &[u8]) -> Result<(), BackendError> {
        let key = self.key(&format!("nodes/{id}"));
        let what = format!("{}/nodes/{id}", self.url);
        let body = bytes::Bytes::copy_from_slice(body);
        self.put(&key, body, PutMode::Overwrite, &what).map(|_| ())
    }

    fn node_records(
        &self,
        limit: usize,
        max: u64,
    ) -> Result<Vec<(String, SystemTime, Vec<u8>)>, BackendError> {
        let mut listed = self.list("nodes", None)?;
        listed.sort_by_key(|m| std::cmp::Reverse(m.last_modified));
        let mut out = Vec::new();
        for meta in listed.iter().filter(|m| m.size <= max).take(limit) {
            let what = format!("{}/{}", self.url, meta.location);
            // Gone since the listing: a node record removed meanwhile.
            if let Some(body) = self.get_whole(&meta.location, &what)? {
                out.push((file_name(meta).to_string(), time_of(meta), body));
            }
        }
        Ok(out)
    }

    fn remove_node_record(&self, id: &str) -> Result<(), BackendError> {
        let key = self.key(&format!("nodes/{id}"));
        let what = format!("{}/nodes/{id}", self.url);
        self.delete(&key, &what)
    }
}

/// Range-bound URLs of the bucket for one answer ([`RangeSigner`]): the credential and the
/// xorbs' URL were fetched once, each URL is then signed here by AWS's SigV4 signer with the
/// `Range` header among the signed headers (`X-Amz-SignedHeaders=host;range`).
struct S3RangeSigner {
    identity: aws_smithy_runtime_api::client::identity::Identity,
    region: String,
    /// A xorb's URL without its hash.
    base: String,
    ttl: std::time::Duration,
    time: SystemTime,
}

impl RangeSigner for S3RangeSigner {
    fn sign(&self, xorb: &XorbHash, range: &std::ops::RangeInclusive<u64>) -> Option<String> {
        use aws_sigv4::http_request::{
            sign, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation,
            SigningSettings, UriPathNormalizationMode,
        };
        let url = format!("{}{xorb}", self.base);
        let range = format!("bytes={}-{}", range.start(), range.end());
        let mut settings = SigningSettings::default();
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(self.ttl);
        // S3 signs the path as sent (encoded once), never normalised.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("s3")
            .time(self.time)
            .settings(settings)
            .build()
            .ok()?
            .into();
        let request = SignableRequest::new(
            "GET",
            &url,
            [("range", range.as_str())].into_iter(),
            SignableBody::UnsignedPayload,
        )
        .ok()?;
        let (instructions, _) = sign(request, &params).ok()?.into_parts();
        let mut url = reqwest::Url::parse(&url).ok()?;
        {
            let mut query = url.query_pairs_mut();
            for (name, value) in instructions.params() {
                query.append_pair(name, value);
            }
        }
        Some(url.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The multi-thread runtime (one worker) the backend's requests run on in these tests.
    fn one_worker_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_request_task_that_panics_is_an_error_of_that_request_only() {
        let runtime = one_worker_runtime();
        let spool = tempfile::tempdir().unwrap();
        let config = S3Config {
            url: "s3://nowhere/x".parse().unwrap(),
            settings: vec![("AWS_ENDPOINT".into(), "http://127.0.0.1:9".into())],
        };
        let b = S3Backend::open(&config, spool.path(), 0, runtime.handle().clone()).unwrap();
        let e = b
            .block(StorageOp::Get, "xorb 00", async {
                panic!("a bug in a storage request");
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("xorb 00"), "{e}");
        assert!(e.contains("panicked: a bug in a storage request"), "{e}");
        assert!(!e.contains("shutting down"), "{e}");
        // The next request runs as usual.
        assert_eq!(b.block(StorageOp::Get, "xorb 01", async { 7 }).unwrap(), 7);
        // A runtime that shuts down does end requests, and says so.
        let handle = runtime.handle().clone();
        runtime.shutdown_background();
        let b = S3Backend::open(&config, spool.path(), 0, handle).unwrap();
        let e = b
            .block(StorageOp::Get, "xorb 02", async { 8 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("shutting down"), "{e}");
    }

    /// The headers of the first request a one-shot HTTP server on loopback receives after
    /// `send` runs against it (the server answers 200 with an ETag and closes).
    fn first_request_headers(settings: &[(&str, &str)], send: impl FnOnce(&S3Backend)) -> String {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended before its headers");
                got.extend_from_slice(&buf[..n]);
            }
            let answer =
                "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            conn.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&got).to_ascii_lowercase()
        });
        let runtime = one_worker_runtime();
        let spool = tempfile::tempdir().unwrap();
        let mut all = vec![
            ("AWS_ENDPOINT".to_string(), endpoint),
            ("AWS_ACCESS_KEY_ID".to_string(), "GKtest".to_string()),
            (
                "AWS_SECRET_ACCESS_KEY".to_string(),
                "not-a-real-secret".to_string(),
            ),
        ];
        all.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = S3Config {
            url: "s3://bucket/x".parse().unwrap(),
            settings: all,
        };
        let b = S3Backend::open(&config, spool.path(), 0, runtime.handle().clone()).unwrap();
        send(&b);
        server.join().unwrap()
    }

    #[test]
    fn objects_are_sent_unsigned_unless_the_settings_ask_for_signed_payloads() {
        let put = |b: &S3Backend| {
            let key = ObjectKey::Xorb(XorbHash::from_bytes([7; 32]));
            assert!(b.create_bytes(key, b"some xorb bytes", false).unwrap());
        };
        // The payload's SHA-256 is neither computed here nor checked by the store (each would
        // be a pass over every byte); the request itself is still signed.
        let headers = first_request_headers(&[], put);
        assert!(headers.starts_with("put /bucket/x/xorbs/"), "{headers}");
        assert!(
            headers.contains("x-amz-content-sha256: unsigned-payload\r\n"),
            "{headers}"
        );
        assert!(
            headers.contains("authorization: aws4-hmac-sha256 "),
            "{headers}"
        );
        // AWS_UNSIGNED_PAYLOAD=false: the body's hash is signed as before.
        let headers = first_request_headers(&[("AWS_UNSIGNED_PAYLOAD", "false")], put);
        let signed = format!(
            "x-amz-content-sha256: {}\r\n",
            LfsOid::of(b"some xorb bytes").to_hex()
        );
        assert!(headers.contains(&signed), "{headers}");
    }

    #[test]
    fn a_batch_of_claims_keeps_only_whole_lines() {
        let (oid, file) = (LfsOid::of(b"seven"), FileHash::from_bytes([9; 32]));
        let good = format!("{oid} {file}");
        let text = format!("{good}\n{oid}\n{oid} zz\nnot hex {file}\n{oid}  {file}\n\n{good}");
        assert_eq!(
            parse_claim_batch(text.as_bytes()),
            vec![(oid, file), (oid, file)]
        );
        assert!(parse_claim_batch(&[0xff, 0xfe, b' ', b'\n']).is_empty());
        assert!(parse_claim_batch(b"").is_empty());
    }

    #[test]
    fn storage_urls_parse_and_print() {
        let u: StorageUrl = "s3://my-bucket/teams/ml/".parse().unwrap();
        assert_eq!(u.bucket, "my-bucket");
        assert_eq!(u.prefix, "teams/ml");
        assert_eq!(u.to_string(), "s3://my-bucket/teams/ml");
        let u: StorageUrl = "s3://xet-data".parse().unwrap();
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("xet-data", ""));
        assert_eq!(u.to_string(), "s3://xet-data");
        for bad in [
            "/srv/xet",
            "http://bucket/x",
            "s3://",
            "s3://Upper/x",
            "s3://b/x",
            "s3://bucket/a//b",
            "s3://bucket/a/../b",
        ] {
            let e = bad.parse::<StorageUrl>().unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
