//! `git xet serve`: a self-hostable Xet CAS server and Git LFS server over one [`Store`].
//!
//! | module | owns |
//! |---|---|
//! | [`auth`] | secrets, CAS access tokens, presigned URLs |
//! | [`error`] | the JSON error body and the mapping of store and auth errors to statuses |
//! | [`conn`] | the accept loop, connection cap, HTTP/1.1 settings, stall guard, shutdown deadline |
//! | [`limits`] | per-route concurrency limits (503), the body budget and ingest slots |
//! | [`body`] | request bodies: idle timeout, small bodies in memory, large ones spooled to disk |
//! | [`cas`] | the CAS API the reference client calls (docs/cas-api.md) |
//! | [`lfs`] | the Git LFS batch API, xet and basic transfers (docs/lfs-agent.md §11), file locking |
//! | [`maintenance`] | garbage collection and scrubbing of the store on a schedule |
//! | [`status`] | the status page for the operator (`/status`, `/status.json`), behind the admin token |
//!
//! This module owns configuration ([`ServeConfig`], [`Limits`]), shared state, the middleware
//! every request passes through (request ids, logs, error bodies, limits) and the server's
//! lifecycle: bind, serve, shut down gracefully on SIGINT/SIGTERM or when asked, within a
//! deadline.
//!
//! **Bounded resources.** Whatever a client does (stop reading, stop sending, open many
//! connections), what it holds is bounded: a connection slot, a slot of its route class, a
//! bounded buffer (at most two response pieces of [`cas::xorb_data::PIECE`] or
//! [`lfs::rebuild::PIECE`] bytes plus the connection buffer of [`conn::CONN_BUF`]; on object
//! storage, larger pieces read ahead come out of one server-wide budget,
//! [`Limits::read_memory`]), and for uploads a spool file; no blocking thread waits on a client. Every wait on a client has a
//! timeout ([`Limits`]).

pub mod auth;
pub mod body;
pub mod cas;
pub mod claims;
pub mod conn;
pub mod error;
pub mod lfs;
pub mod limits;
pub mod maintenance;
pub mod metrics;
pub mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xet_protocol::wire::ErrorCode;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use self::auth::{now_unix, Authority, Grant, Scope, ServerToken};
use self::error::ApiError;
pub(crate) use self::maintenance::Maintenance;
use xet_format::HmacKey;
use xet_protocol::util::sync::LockAnyway as _;
use xet_store::{Store, StoreOptions};

/// Everything `git xet serve` is configured with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The store directory; with [`Self::storage`], this node's own directory (its cache of
    /// the index, temporary files, locks).
    pub data_dir: PathBuf,
    /// Objects in an S3-compatible bucket several nodes share, instead of in `data_dir`.
    pub storage: Option<xet_store::storage_url::S3Config>,
    /// Reconstructions name presigned URLs of the bucket itself, so downloads go straight to
    /// the object storage instead of through this server (object storage only).
    pub storage_urls: bool,
    pub listen: SocketAddr,
    /// The URL clients reach this server at (used in CAS URLs, token-refresh and presigned
    /// URLs). Default: `http://<bound address>`.
    pub public_url: Option<String>,
    pub secrets: Vec<ServerToken>,
    /// The secrets that open the status page (`/status`); none: the page is off.
    pub admin_tokens: Vec<auth::AdminToken>,
    /// How often the status page's figures are refreshed.
    pub status: status::StatusSettings,
    /// Lifetime of CAS access tokens handed out by the batch API.
    pub token_ttl: Duration,
    /// Lifetime of presigned xorb URLs in reconstructions.
    pub url_ttl: Duration,
    /// Stop by itself after this long (for tests and demos).
    pub max_lifetime: Option<Duration>,
    /// Stop by itself once no connection has been open for this long (the private server
    /// agents share for a directory store).
    pub idle_exit: Option<Duration>,
    /// How often `POST /v2/shards` repeats its last frame while it works (docs/cas-api.md §5.6).
    /// 20 s; tests shorten it.
    pub shard_heartbeat: Duration,
    /// Connection, concurrency, memory and time limits.
    pub limits: Limits,
    /// How the store is opened (its free-space reserve).
    pub store: StoreOptions,
    /// Garbage collection and scrubbing on a schedule.
    pub maintenance: Maintenance,
    /// How many Git LFS locks the server keeps.
    pub locks: lfs::locks::LockLimits,
    /// The node that owns Git LFS locks for every node of a shared store (its URL, as nodes
    /// reach it): this node forwards the locking API to it instead of keeping locks itself
    /// (see [`lfs::locks::forward`]). `None`, or this node's own public URL: locks are here.
    /// Plain `http` only to this machine's loopback, unless [`Self::lock_owner_insecure_http`].
    pub lock_owner: Option<String>,
    /// Allows a [`Self::lock_owner`] of plain `http` to another machine, although clients'
    /// tokens are forwarded to it unencrypted (a network the operator trusts).
    pub lock_owner_insecure_http: bool,
}

/// What the server allows each client and all of them together. The defaults suit a small
/// team's server; tests shorten the timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections; one more is answered 503 and closed. Default 1024.
    pub max_connections: usize,
    /// Uploads in progress (xorbs, shards, basic PUTs); more are 503. Default 256.
    pub max_uploads: usize,
    /// Downloads in progress (presigned xorb data, basic GETs); more are 503. Default 256.
    pub max_downloads: usize,
    /// Other requests in progress (reconstructions, batch, dedup, …); more are 503. Default 512.
    pub max_requests: usize,
    /// Ingest jobs at once (storing a xorb, the upload pipeline of a basic PUT); uploads whose
    /// body has arrived wait for one. Default: the number of CPUs, between 1 and 4.
    pub max_ingest: usize,
    /// Bytes of small request bodies (shards, batch, verify, telemetry) held in memory by all
    /// requests together; a request that needs more is 503. Default 256 MiB.
    pub body_memory: u64,
    /// Bytes of stored xorb data read ahead of the connections that send it, by all downloads
    /// together, where the store is object storage (each read a request, so reads are made
    /// larger and started ahead); beyond it, downloads read in small pieces as they are sent.
    /// Default 256 MiB.
    pub read_memory: u64,
    /// Time for a request head to arrive, and for an idle keep-alive connection to stay open.
    /// Default 30 s.
    pub header_timeout: Duration,
    /// Time a request body may pause between two pieces while the server waits for it; then
    /// 408. Default 60 s.
    pub body_timeout: Duration,
    /// Time a response may stall because the client does not read it; then the connection is
    /// closed. Default 60 s.
    pub send_timeout: Duration,
    /// On SIGINT/SIGTERM (or a stop), how long requests in flight may take to finish before
    /// their connections are closed. Default 10 s.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            max_connections: 1024,
            max_uploads: 256,
            max_downloads: 256,
            max_requests: 512,
            max_ingest: cpus.clamp(1, 4),
            body_memory: 256 << 20,
            read_memory: 256 << 20,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

impl ServeConfig {
    /// Defaults: loopback on an ephemeral port, 15-minute tokens, 1-hour URLs.
    pub fn new(data_dir: PathBuf, secrets: Vec<ServerToken>) -> Self {
        Self {
            data_dir,
            storage: None,
            storage_urls: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            public_url: None,
            secrets,
            admin_tokens: Vec::new(),
            status: status::StatusSettings::default(),
            token_ttl: Duration::from_secs(900),
            url_ttl: Duration::from_secs(3600),
            max_lifetime: None,
            idle_exit: None,
            shard_heartbeat: Duration::from_secs(20),
            limits: Limits::default(),
            store: StoreOptions::default(),
            maintenance: Maintenance::default(),
            locks: lfs::locks::LockLimits::default(),
            lock_owner: None,
            lock_owner_insecure_http: false,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot open the store: {0}{hint}", hint = in_use_hint(.0))]
    Store(Box<xet_store::StoreError>),
    #[error("{0}")]
    Config(#[from] auth::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Locks(#[from] lfs::locks::LockDbError),
    #[error("--lock-owner: {0}")]
    LockOwner(#[from] lfs::locks::forward::LockOwnerError),
    #[error("cannot read or make this node's id: {0}")]
    NodeId(std::io::Error),
}

/// What to do when the data directory is another process's.
fn in_use_hint(e: &xet_store::StoreError) -> &'static str {
    if e.is_locked() {
        "; stop the other process first, or give this server its own --data (servers that \
         share one store are nodes on object storage: --storage s3://…, each with its own \
         --data)"
    } else {
        ""
    }
}

impl From<xet_store::StoreError> for ServeError {
    fn from(e: xet_store::StoreError) -> Self {
        ServeError::Store(Box::new(e))
    }
}

/// The key global-dedup answers are keyed with, and when it stops being used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DedupKey {
    pub key: HmacKey,
    pub expires: u64,
}

/// How long a dedup key is used before a new one is drawn.
pub(crate) const DEDUP_KEY_LIFETIME_SECS: u64 = 24 * 3600;

/// State shared by every request handler.
#[derive(Debug)]
pub struct AppState {
    pub store: Arc<Store>,
    pub auth: Authority,
    /// Without a trailing slash.
    pub public_url: String,
    pub token_ttl: Duration,
    pub url_ttl: Duration,
    /// See [`ServeConfig::storage_urls`].
    pub storage_urls: bool,
    /// Heartbeat interval of the `POST /v2/shards` progress stream.
    pub shard_heartbeat: Duration,
    /// Concurrency slots, the body budget and ingest slots.
    pub resources: limits::Resources,
    /// What the server counts, for `/metrics` and `/health`.
    pub metrics: metrics::Metrics,
    /// The Git LFS locks (`locks.redb` in the data directory).
    pub locks: Arc<lfs::locks::LockDb>,
    /// Where the locking API is forwarded, when another node owns locks.
    pub lock_owner: Option<lfs::locks::forward::LockOwner>,
    /// Xorbs stored through upload grants not committed yet (what a commit answers).
    pub(crate) uncommitted: cas::grants::Uncommitted,
    /// On shared storage, how far behind the other nodes this node may be and still answer
    /// `/ready` with 200 ([`Maintenance::ready_max_lag`]).
    pub(crate) ready_max_lag: Duration,
    /// The status page: its settings, this node's id and what its background jobs found.
    pub(crate) status: status::StatusState,
    dedup_key: Mutex<DedupKey>,
}

pub(crate) type SharedState = Arc<AppState>;

impl AppState {
    /// Checks the request's credentials for `needed`; `what` names the operation in errors.
    pub(crate) fn authorize(
        &self,
        headers: &HeaderMap,
        needed: Scope,
        what: &'static str,
    ) -> Result<Grant, ApiError> {
        let header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let grant = self.auth.verify_header(header, now_unix())?;
        if !grant.scope.allows(needed) {
            return Err(auth::AuthError::Forbidden { what }.into());
        }
        Ok(grant)
    }

    /// Checks a credential for the CAS API: what [`Self::authorize`] checks, and that it can
    /// say which files it may read (a repository-scoped secret cannot: it gets CAS tokens
    /// from the batch API of each of its repositories). Returns the grant and the repository
    /// whose files it is limited to, if any.
    pub(crate) fn authorize_cas(
        &self,
        headers: &HeaderMap,
        needed: Scope,
        what: &'static str,
    ) -> Result<(Grant, Option<xet_store::RepoName>), ApiError> {
        let grant = self.authorize(headers, needed, what)?;
        match grant.visibility() {
            Some(auth::Visibility::All) => Ok((grant, None)),
            Some(auth::Visibility::Repo(repo)) => Ok((grant, Some(repo))),
            None => Err(ApiError::new(
                ErrorCode::RepositoryScopedToken,
                format!(
                    "{what}: this token is limited to some repositories and names none here; \
                     use the CAS token the batch API of one of them hands out"
                ),
            )),
        }
    }

    /// The current global-dedup key, drawing a new one when the old one expired.
    pub(crate) fn dedup_key(&self) -> Result<DedupKey, ApiError> {
        let mut k = self.dedup_key.lock_anyway();
        let now = now_unix();
        if k.expires <= now {
            let key = xet_protocol::random_bytes::<32>()
                .map_err(|e| ApiError::internal(format!("no random source: {e}")))?;
            *k = DedupKey {
                key: HmacKey::from_bytes(key),
                expires: now + DEDUP_KEY_LIFETIME_SECS,
            };
        }
        Ok(*k)
    }
}

/// Runs a blocking store operation off the async threads.
pub async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("worker failed: {e}")))?
}

/// Parses a hash from a URL path segment (64 hex digits; uppercase is accepted).
pub(crate) fn parse_hash<T: std::str::FromStr<Err = xet_format::HashParseError>>(
    s: &str,
    what: &str,
) -> Result<T, ApiError> {
    s.parse::<T>().map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidHash,
            format!("{what} {s:?} is not a hash: {e}"),
        )
    })
}

/// Assigns every request an id (`X-Request-Id`), logs it, and adds `request_id` to JSON error
/// bodies.
async fn request_context(request: Request, next: Next) -> Response {
    let id = xet_protocol::random_hex(8);
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let started = Instant::now();
    let mut response = next.run(request).await;
    let status = response.status();
    tracing::info!(
        request_id = %id,
        %method,
        %path,
        status = status.as_u16(),
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(b"application/json")
                || v.as_bytes().starts_with(lfs::LFS_MEDIA_TYPE.as_bytes())
        });
    if status.as_u16() >= 400 && is_json {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        let mut value: serde_json::Value =
            serde_json::from_slice(&bytes).unwrap_or(serde_json::json!({}));
        if let Some(obj) = value.as_object_mut() {
            obj.insert("request_id".into(), serde_json::Value::String(id));
        }
        let mut parts = parts;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(value.to_string()));
    }
    response
}

async fn health(State(state): State<SharedState>) -> Response {
    let st = Arc::clone(&state);
    let counts = blocking(move || st.store.counts().map_err(ApiError::from)).await;
    match counts {
        Ok(c) => Json(serde_json::json!({
            "status": "ok",
            "version": env!("CARGO_PKG_VERSION"),
            "files": c.files,
            "xorbs": c.xorbs,
            "unchecked_sha256_claims": c.claims,
            "received_xorb_bytes": state.metrics.received_xorb_bytes.get(),
            "received_object_bytes": state.metrics.received_object_bytes.get(),
            "sent_xorb_bytes": state.metrics.sent_xorb_bytes.get(),
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /ready`: 200 when the store answers (its index, and for object storage the bucket)
/// and, on shared storage, the node has registered every shard in it once and its last
/// successful catch-up with the other nodes is at most [`AppState::ready_max_lag`] old; 503
/// otherwise, saying why: for load balancers deciding where to send requests.
async fn ready(State(state): State<SharedState>) -> Response {
    let not_ready = |message: String| ApiError::new(ErrorCode::NotReady, message).into_response();
    if state.store.catching_up() {
        return not_ready(
            "this server is still registering the shards the other nodes stored".into(),
        );
    }
    if let Some(why) = lag_reason(&state.store, state.ready_max_lag) {
        return not_ready(why);
    }
    let st = state.clone();
    let probe = tokio::task::spawn_blocking(move || {
        st.store.counts()?;
        st.store.probe_storage()
    })
    .await;
    match probe {
        Ok(Ok(())) => Json(serde_json::json!({"status": "ready"})).into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "not ready: the store does not answer");
            ApiError::new(
                ErrorCode::NotReady,
                "the server's storage does not answer; its log has the details",
            )
            .into_response()
        }
        Err(e) => ApiError::internal(format!("worker failed: {e}")).into_response(),
    }
}

/// Why a node on shared storage is too far behind the other nodes to be ready, or `None`: its
/// last successful catch-up is older than `max` and catch-ups fail since, or older than
/// [`STUCK_LAG_FACTOR`] times `max` whatever the reason (a catch-up that does not end; a full
/// listing of a large bucket that succeeds takes a while without making the node unready).
fn lag_reason(store: &Store, max: Duration) -> Option<String> {
    let age = store.catch_up_age().filter(|age| *age > max)?;
    let failing = store
        .catch_up_failing_since()
        .and_then(|t| t.elapsed().ok());
    let why = match failing {
        Some(d) => format!(
            "its catch-ups have failed for {} s (storage errors: see its log)",
            d.as_secs()
        ),
        None if age > max.saturating_mul(STUCK_LAG_FACTOR) => {
            "its catch-up has not ended (storage does not answer: see its log)".to_string()
        }
        None => return None,
    };
    Some(format!(
        "this node last caught up with the other nodes {} s ago, more than the {} s allowed: {why}",
        age.as_secs(),
        max.as_secs()
    ))
}

/// How many times the allowed lag a catch-up that does not fail may take before the node is
/// unready anyway (see [`lag_reason`]).
const STUCK_LAG_FACTOR: u32 = 5;

async fn fallback() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such endpoint")
}

/// The whole application: health, the CAS API and the LFS API, with the middleware.
pub(crate) fn router(state: SharedState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics::serve))
        .route("/ready", get(ready))
        .merge(status::routes())
        .merge(cas::routes())
        .merge(lfs::routes())
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            limits::limit,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            metrics::count,
        ))
        .layer(middleware::from_fn(request_context))
        .with_state(state)
}

/// A bound server, ready to run.
pub struct Server {
    listener: tokio::net::TcpListener,
    state: SharedState,
    max_lifetime: Option<Duration>,
    idle_exit: Option<Duration>,
    maintenance: Maintenance,
}

/// How long a runtime waits for blocking work (an upload pipeline, a shard validation) after
/// the server stopped, before the process goes on without it. The store is crash-safe.
pub(crate) const BLOCKING_GRACE: Duration = Duration::from_secs(1);

impl Server {
    /// Opens the store and binds the listener (inside a tokio runtime).
    pub async fn bind(config: ServeConfig) -> Result<Self, ServeError> {
        // The address first: a busy port leaves the data directory as it was.
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.listen,
                source,
            })?;
        let local = listener.local_addr().map_err(ServeError::Serve)?;
        let public_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{local}"))
            .trim_end_matches('/')
            .to_string();
        // Before the store: a refused owner URL leaves the data directory as it was.
        let lock_owner = match &config.lock_owner {
            Some(url) if url.trim().trim_end_matches('/') != public_url => Some(
                lfs::locks::forward::LockOwner::new(url, config.lock_owner_insecure_http)?,
            ),
            _ => None,
        };
        let store = Arc::new(open_store(&config).await?);
        let key = match shared_key(&store).await? {
            Some(key) => key,
            None => Authority::load_or_create_key(&config.data_dir.join("server.key"))?,
        };
        let locks = lfs::locks::LockDb::open(&config.data_dir.join("locks.redb"), config.locks)?;
        // A node id is kept only where it is shown: on the status page, in the bucket.
        let node_id = if config.storage.is_some() || !config.admin_tokens.is_empty() {
            status::node_id(&config.data_dir).map_err(ServeError::NodeId)?
        } else {
            "this-node".to_string()
        };
        let storage = config
            .storage
            .as_ref()
            .map_or_else(|| "directory".to_string(), |s| s.url.to_string());
        let state = Arc::new(AppState {
            store,
            auth: Authority::new(config.secrets, key).with_admin(config.admin_tokens)?,
            public_url,
            token_ttl: config.token_ttl,
            url_ttl: config.url_ttl,
            storage_urls: config.storage_urls,
            shard_heartbeat: config.shard_heartbeat,
            resources: limits::Resources::new(&config.limits),
            metrics: metrics::Metrics::default(),
            locks: Arc::new(locks),
            lock_owner,
            uncommitted: cas::grants::Uncommitted::default(),
            ready_max_lag: config.maintenance.ready_max_lag,
            status: status::StatusState::new(
                config.status,
                node_id,
                config.maintenance.gc_interval,
                storage,
            ),
            dedup_key: Mutex::new(DedupKey {
                key: HmacKey::ZERO,
                expires: 0,
            }),
        });
        Ok(Self {
            listener,
            state,
            max_lifetime: config.max_lifetime,
            idle_exit: config.idle_exit,
            maintenance: config.maintenance,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    pub fn public_url(&self) -> &str {
        &self.state.public_url
    }

    pub fn state(&self) -> &SharedState {
        &self.state
    }

    /// Serves until `shutdown` completes, SIGINT/SIGTERM arrives, the maximum lifetime passes,
    /// or no connection has been open for the idle time (if set); then finishes the requests in flight, for at most
    /// [`Limits::shutdown_timeout`].
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        if !self.state.auth.has_secrets() {
            tracing::warn!("no tokens configured: every authenticated request will be refused");
        }
        let lifetime = self.max_lifetime;
        let stop = async move {
            let lifetime = async {
                match lifetime {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown => {}
                _ = signal() => tracing::info!("signal received, shutting down"),
                _ = lifetime => tracing::info!("maximum lifetime reached, shutting down"),
            }
        };
        let limits = self.state.resources.limits().clone();
        let mut jobs = maintenance::spawn(&self.state.store, self.maintenance);
        jobs.extend(maintenance::spawn_sync(&self.state.store, self.maintenance));
        jobs.extend(status::spawn(&self.state));
        let checking = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(every) = self.maintenance.claims_interval {
            jobs.push(claims::spawn(
                &self.state.store,
                every,
                Arc::clone(&checking),
            ));
        }
        conn::serve(
            self.listener,
            router(self.state),
            &limits,
            self.idle_exit.map(|after| conn::IdleExit {
                after,
                unless: checking,
            }),
            stop,
        )
        .await;
        for job in jobs {
            job.abort();
        }
        Ok(())
    }

    /// Runs the server on a thread of its own with its own runtime, for tests and the demo. The
    /// server stops when the returned handle is dropped.
    pub fn spawn(config: ServeConfig) -> Result<RunningServer, ServeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_park(xet_protocol::util::worker::mark_async_worker)
            .build()
            .map_err(ServeError::Runtime)?;
        let server = runtime.block_on(Server::bind(config))?;
        let addr = server.local_addr();
        let url = server.public_url().to_string();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let result = runtime.block_on(server.run(async {
                let _ = rx.await;
            }));
            runtime.shutdown_timeout(BLOCKING_GRACE);
            result
        });
        Ok(RunningServer {
            addr,
            url,
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

/// Opens the store `config` names: a directory, or a bucket (then registers what the other
/// nodes stored before this one serves anything).
async fn open_store(config: &ServeConfig) -> Result<Store, ServeError> {
    let Some(storage) = config.storage.clone() else {
        return Ok(Store::open_with(&config.data_dir, config.store)?);
    };
    let (dir, options) = (config.data_dir.clone(), config.store);
    // The bucket's requests run on the server's own runtime.
    let runtime = tokio::runtime::Handle::current();
    let opened = tokio::task::spawn_blocking(move || {
        let store = Store::open_s3(&dir, options, &storage, runtime)?;
        // What the other nodes stored is registered by the sync job, which starts with a full
        // catch-up; the node serves meanwhile (see `Store::catching_up`).
        tracing::info!(storage = %storage.url, "serving while catching up with the shards in storage");
        Ok::<_, xet_store::StoreError>(store)
    })
    .await
    .map_err(|e| ServeError::Serve(std::io::Error::other(e.to_string())))?;
    Ok(opened?)
}

/// The key that signs tokens and presigned URLs, shared by every node of shared storage (so
/// that a token or URL one node issued is good at any other); `None` for a directory store.
async fn shared_key(store: &Arc<Store>) -> Result<Option<[u8; 32]>, ServeError> {
    if !store.is_shared() {
        return Ok(None);
    }
    let initial = xet_protocol::random_bytes::<32>()
        .map_err(|e| ServeError::Serve(std::io::Error::other(format!("no random source: {e}"))))?;
    let st = Arc::clone(store);
    let value = tokio::task::spawn_blocking(move || st.shared_value("server.key", &initial))
        .await
        .map_err(|e| ServeError::Serve(std::io::Error::other(e.to_string())))??;
    match value.map(<[u8; 32]>::try_from) {
        Some(Ok(key)) => Ok(Some(key)),
        Some(Err(v)) => Err(ServeError::Serve(std::io::Error::other(format!(
            "the storage's server.key has {} bytes, expected 32; delete it to make a new key \
             (this invalidates issued tokens)",
            v.len()
        )))),
        None => Ok(None),
    }
}

async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// A server running on its own thread; dropping it shuts the server down.
pub struct RunningServer {
    pub addr: SocketAddr,
    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), ServeError>>>,
}

impl RunningServer {
    /// Stops the server and waits for it to finish.
    pub fn stop(mut self) -> Result<(), ServeError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ServeError::Serve(std::io::Error::other(
                "server thread panicked",
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
