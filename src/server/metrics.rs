//! What the server counts for operators, served as Prometheus text at `GET /metrics`
//! (unauthenticated, like `/health`: volumes and timings, no names or secrets).
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `gitxet_http_requests_total` | `route`, `method`, `status` | requests answered; `route` is the matched route template (`unmatched` for none; LFS requests by their LFS route, e.g. `/{repo}/info/lfs/objects/batch`) |
//! | `gitxet_http_request_duration_seconds` | `route` | time to the response head (bodies stream after it) |
//! | `gitxet_received_xorb_bytes_total` | | xorb upload bodies, new or not |
//! | `gitxet_received_object_bytes_total` | | basic-transfer upload bodies |
//! | `gitxet_sent_xorb_bytes_total` | | xorb bytes answered to downloads through the CAS API |
//! | `gitxet_stored_xorb_bytes_total` | | upload bodies of xorbs that were new (what storage grew by, compressed) |
//! | `gitxet_registered_file_bytes_total` | | sizes of files registered for the first time: what clients stored; minus the line above, what deduplication saved |
//! | `gitxet_storage_errors_total` | `operation` | what failed because storage did (a full disk included): `request` (HTTP requests answered 5xx or 507), and the background work `catch_up`, `claims`, `gc`, `scrub`, `checkpoint` (checkpoints of the shard log), `copies` (copies of xorbs on the node's disk), `claim_records` (checked claims recorded for the other nodes) |
//! | `gitxet_files`, `gitxet_xorbs` | | registered files and known xorbs now |
//! | `gitxet_unchecked_sha256_claims` | | oids shards claimed that the server has not hashed yet (see `server::claims`); should stay near 0 |
//! | `gitxet_storage_requests_total` | `op` | on object storage, requests sent to it by kind (`head`, `get`, `put`, `list`, `delete`, `copy`, `sign`) |
//! | `gitxet_storage_request_seconds_total` | `op` | on object storage, their total time, retries included (divided by the line above: the mean latency) |
//! | `gitxet_storage_failovers_total` | | on object storage with several endpoints (`GIT_XET_S3_ENDPOINTS`), requests sent to the next endpoint because one failed |
//! | `gitxet_xorb_cache_reads_total` | `result` | on object storage, ranges of xorbs read from this node's copies (`hit`) or, without one, from the bucket (`miss`; see `xet_store::xorb_cache`) |
//! | `gitxet_xorb_cache_bytes` | | bytes of the copies of xorbs this node keeps now |
//! | `gitxet_gc_running_seconds` | | how long the garbage collection this node runs has been running (on shared storage it holds the gc lease meanwhile); 0 when none runs |
//! | `gitxet_gc_last_end_timestamp_seconds` | | when this node's last garbage collection ended (unix seconds; 0 before the first) |
//! | `gitxet_data_free_bytes` | | free space for this node on the file system of its `--data` directory |
//! | `gitxet_catch_up_age_seconds` | | on shared object storage, how old this node's knowledge of the other nodes' uploads is (the start of its last successful catch-up; about 1 s normally, -1 before the first, 0 on a store no other node writes to) |
use std::sync::LazyLock;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

use super::error::ApiError;
use super::SharedState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

/// What failed because storage did, by operation; counted where store errors become
/// responses ([`super::error`]) and where background jobs fail ([`super::maintenance`]), which
/// know no server state, hence one count per process.
static STORAGE_ERRORS: LazyLock<Family<OperationLabels, Counter>> = LazyLock::new(|| {
    let family = Family::<OperationLabels, Counter>::default();
    // Shown at 0 from the start, so that an alert on its rate has a series.
    drop(family.get_or_create(&OperationLabels {
        operation: StorageOperation::Request.name(),
    }));
    family
});

/// The operation a storage error is counted under (`gitxet_storage_errors_total{operation}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StorageOperation {
    /// An HTTP request answered with an error because storage failed.
    Request,
    /// Catching up with the other nodes' shards.
    CatchUp,
    /// Checking SHA-256 claims.
    Claims,
    /// Scheduled garbage collection (its lease included).
    Gc,
    /// Scheduled scrubbing.
    Scrub,
    /// Scheduled checkpoints of the shard log (their lease included).
    Checkpoint,
    /// Copying xorbs to the node's disk.
    Copies,
    /// Recording checked claims for the other nodes.
    ClaimRecords,
}

impl StorageOperation {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::CatchUp => "catch_up",
            Self::Claims => "claims",
            Self::Gc => "gc",
            Self::Scrub => "scrub",
            Self::Checkpoint => "checkpoint",
            Self::Copies => "copies",
            Self::ClaimRecords => "claim_records",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

/// Counts one failure of `op` because storage failed.
pub(crate) fn storage_error(op: StorageOperation) {
    storage_errors(op).inc();
}

/// The count of `op`'s failures so far (for tests).
#[cfg(test)]
pub(crate) fn storage_errors_of(op: StorageOperation) -> u64 {
    storage_errors(op).get()
}

fn storage_errors(op: StorageOperation) -> Counter {
    STORAGE_ERRORS
        .get_or_create(&OperationLabels {
            operation: op.name(),
        })
        .clone()
}

/// The server's metrics and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    pub received_xorb_bytes: Counter,
    pub received_object_bytes: Counter,
    pub sent_xorb_bytes: Counter,
    pub stored_xorb_bytes: Counter,
    pub registered_file_bytes: Counter,
    files: Gauge<i64, AtomicI64>,
    xorbs: Gauge<i64, AtomicI64>,
    claims: Gauge<i64, AtomicI64>,
    /// Seconds; set only on shared storage.
    catch_up_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    gc_running: Gauge<f64, std::sync::atomic::AtomicU64>,
    gc_last_end: Gauge<i64, AtomicI64>,
    data_free: Gauge<i64, AtomicI64>,
    /// Object storage's requests and their time, caught up with the store's own count.
    storage_requests: Family<OpLabels, Counter>,
    storage_seconds: Family<OpLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    storage_failovers: Counter,
    /// The cache of xorbs' reads, caught up with its own count.
    cache_reads: Family<CacheLabels, Counter>,
    cache_bytes: Gauge<i64, AtomicI64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    result: &'static str,
}

use std::sync::atomic::AtomicI64;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The byte counters, by name and help, in the order they are registered (and encoded).
const BYTE_COUNTERS: [(&str, &str); 5] = [
    (
        "received_xorb_bytes",
        "Bytes of xorb upload bodies, new or not",
    ),
    (
        "received_object_bytes",
        "Bytes of basic-transfer upload bodies",
    ),
    (
        "sent_xorb_bytes",
        "Xorb bytes answered to downloads through the CAS API",
    ),
    (
        "stored_xorb_bytes",
        "Bytes of upload bodies of xorbs that were new (what storage grew by)",
    ),
    (
        "registered_file_bytes",
        "Sizes of files registered for the first time (minus stored xorb bytes: what \
         deduplication and compression saved)",
    ),
];

/// The gauges of the store's counts, by name and help, in the order they are registered.
const COUNT_GAUGES: [(&str, &str); 3] = [
    ("files", "Registered files"),
    ("xorbs", "Known xorbs"),
    (
        "unchecked_sha256_claims",
        "SHA-256 claims of shards not checked yet",
    ),
];

/// Registers `metric` under `name` with `help` and returns it (a handle on the same values).
fn register<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("gitxet");
        let requests = register(
            &mut registry,
            "http_requests",
            "HTTP requests answered, by matched route, method and status",
            Family::<RequestLabels, Counter>::default(),
        );
        // 1 ms to about 65 s.
        let latency = register(
            &mut registry,
            "http_request_duration_seconds",
            "Time from the request to the response head, by matched route",
            Family::<RouteLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            }),
        );
        let [received_xorbs, received_objects, sent_xorbs, stored_xorbs, registered_files] =
            BYTE_COUNTERS
                .map(|(name, help)| register(&mut registry, name, help, Counter::default()));
        register(
            &mut registry,
            "storage_errors",
            "What failed because storage did, by operation (HTTP requests, background work)",
            STORAGE_ERRORS.clone(),
        );
        let [files, xorbs, claims] = COUNT_GAUGES.map(|(name, help)| {
            register(
                &mut registry,
                name,
                help,
                Gauge::<i64, AtomicI64>::default(),
            )
        });
        let catch_up_age = register(
            &mut registry,
            "catch_up_age_seconds",
            "On shared object storage, seconds since the start of this node's last successful \
             catch-up with the shards other nodes accepted (-1 before the first; 0 elsewhere)",
            Gauge::<f64, std::sync::atomic::AtomicU64>::default(),
        );
        let gc_running = register(
            &mut registry,
            "gc_running_seconds",
            "How long the garbage collection this node runs has been running (it holds the gc \
             lease meanwhile on shared storage); 0 when none runs",
            Gauge::<f64, std::sync::atomic::AtomicU64>::default(),
        );
        let gc_last_end = register(
            &mut registry,
            "gc_last_end_timestamp_seconds",
            "When this node's last garbage collection ended, in unix seconds (0 before the first)",
            Gauge::<i64, AtomicI64>::default(),
        );
        let data_free = register(
            &mut registry,
            "data_free_bytes",
            "Free space for this node on the file system of its data directory",
            Gauge::<i64, AtomicI64>::default(),
        );
        let storage_requests = register(
            &mut registry,
            "storage_requests",
            "On object storage, requests sent to it, by kind",
            Family::<OpLabels, Counter>::default(),
        );
        let storage_seconds = register(
            &mut registry,
            "storage_request_seconds",
            "On object storage, the total time of its requests by kind, retries included",
            Family::<OpLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default(),
        );
        let storage_failovers = register(
            &mut registry,
            "storage_failovers",
            "On object storage with several endpoints, requests sent to the next endpoint \
             because one failed",
            Counter::default(),
        );
        let cache_reads = register(
            &mut registry,
            "xorb_cache_reads",
            "On object storage, ranges of xorbs read from this node's copies (hit) or from the \
             bucket (miss)",
            Family::<CacheLabels, Counter>::default(),
        );
        let cache_bytes = register(
            &mut registry,
            "xorb_cache_bytes",
            "Bytes of the copies of xorbs this node keeps",
            Gauge::<i64, AtomicI64>::default(),
        );
        Self {
            registry,
            requests,
            latency,
            received_xorb_bytes: received_xorbs,
            received_object_bytes: received_objects,
            sent_xorb_bytes: sent_xorbs,
            stored_xorb_bytes: stored_xorbs,
            registered_file_bytes: registered_files,
            files,
            xorbs,
            claims,
            catch_up_age,
            gc_running,
            gc_last_end,
            data_free,
            storage_requests,
            storage_seconds,
            storage_failovers,
            cache_reads,
            cache_bytes,
        }
    }
}

impl Metrics {
    fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_string(),
                method: method.to_string(),
                status: status.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: route.to_string(),
            })
            .observe(seconds);
    }
}

/// Counts every request by its matched route (added with `Router::layer`, so the route is
/// known).
pub async fn count(State(state): State<SharedState>, request: Request, next: Next) -> Response {
    let route = match request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str())
    {
        // The LFS API is one wildcard route: labelled by what it dispatches to.
        Some("/{*path}") => super::lfs::route_template(request.uri().path()),
        Some(p) => p,
        None => "unmatched",
    }
    .to_string();
    // Methods a client makes up would each add a series: they count as "other".
    let method = match request.method().as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "PATCH" | "OPTIONS") => m,
        _ => "other",
    }
    .to_string();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    state.metrics.observe(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// `GET /metrics`: the Prometheus text format.
pub async fn serve(State(state): State<SharedState>) -> Response {
    let st = state.clone();
    if let Ok(Ok(c)) = tokio::task::spawn_blocking(move || st.store.counts()).await {
        state.metrics.files.set(c.files as i64);
        state.metrics.xorbs.set(c.xorbs as i64);
        state.metrics.claims.set(c.claims as i64);
    }
    let age = match (state.store.is_shared(), state.store.catch_up_age()) {
        (false, _) => 0.0,
        (true, Some(age)) => age.as_secs_f64(),
        (true, None) => -1.0,
    };
    state.metrics.catch_up_age.set(age);
    state.metrics.gc_running.set(
        state
            .store
            .gc_running_for()
            .map_or(0.0, |d| d.as_secs_f64()),
    );
    state.metrics.gc_last_end.set(
        state
            .store
            .gc_last_ended()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64),
    );
    let root = state.store.root().to_path_buf();
    if let Ok(Ok(free)) =
        tokio::task::spawn_blocking(move || xet_protocol::util::os::available_space(&root)).await
    {
        state
            .metrics
            .data_free
            .set(i64::try_from(free).unwrap_or(i64::MAX));
    }
    // The store counts what it registered (through every route); the counter catches up.
    let registered = state.store.registered_file_bytes();
    let counted = state.metrics.registered_file_bytes.get();
    if registered > counted {
        state
            .metrics
            .registered_file_bytes
            .inc_by(registered - counted);
    }
    // The store's own background work counts its failures; the counters catch up.
    let background = state.store.background_errors();
    for (op, count) in [
        (StorageOperation::Copies, background.copies),
        (StorageOperation::ClaimRecords, background.claim_records),
    ] {
        let counter = storage_errors(op);
        counter.inc_by(count.saturating_sub(counter.get()));
    }
    for t in state.store.storage_timings().unwrap_or_default() {
        let labels = OpLabels { op: t.op.name() };
        let requests = state.metrics.storage_requests.get_or_create(&labels);
        requests.inc_by(t.requests.saturating_sub(requests.get()));
        let seconds = state.metrics.storage_seconds.get_or_create(&labels);
        let behind = t.time.as_secs_f64() - seconds.get();
        if behind > 0.0 {
            seconds.inc_by(behind);
        }
    }
    if let Some(n) = state.store.storage_failovers() {
        let counter = &state.metrics.storage_failovers;
        counter.inc_by(n.saturating_sub(counter.get()));
    }
    if let Some(c) = state.store.xorb_cache_stats() {
        for (result, n) in [("hit", c.hits), ("miss", c.misses)] {
            let counter = state
                .metrics
                .cache_reads
                .get_or_create(&CacheLabels { result });
            counter.inc_by(n.saturating_sub(counter.get()));
        }
        state
            .metrics
            .cache_bytes
            .set(i64::try_from(c.bytes).unwrap_or(i64::MAX));
    }
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &state.metrics.registry) {
        return ApiError::internal(format!("cannot encode the metrics: {e}")).into_response();
    }
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}
