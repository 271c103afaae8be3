//! The status page: `GET /status` (one self-contained HTML page) and `GET /status.json` (what
//! it shows), for the operator, behind the admin token ([`super::auth::AdminToken`]).
//!
//! **Access.** Both routes need the admin token, as `Authorization: Bearer <token>` or as the
//! password of HTTP Basic credentials (any user name). `/status` asks for Basic credentials
//! (`401` with `WWW-Authenticate: Basic`), so a browser prompts for them once and sends them
//! again with the page's own request for `status.json`; the page holds no token itself. Read
//! and write tokens are refused (401) like any wrong secret, and the admin token opens nothing
//! else. Without an admin token configured both routes answer 404, saying how to turn the page
//! on.
//!
//! **The page** is static: inline CSS and JavaScript, no external resource, served with a
//! Content-Security-Policy that allows only its own inline style and script (by their SHA-256)
//! and requests to this origin; its script fetches `status.json` every 30 s and renders it with
//! DOM methods only (no HTML from data).
//!
//! **What it shows, and where it comes from** (nothing per page load reads more than a few
//! hundred index rows):
//!
//! | part | source |
//! |---|---|
//! | totals and repositories | [`xet_store::Store::usage`], computed by a background job ([`spawn`]) when the index changed, at most every [`StatusSettings::usage_every`] and never more often than 20 times the last pass took; the page shows the last result |
//! | dedup ratio over time | the store's sample history ([`xet_store::Store::record_sample`]), one sample per pass when due |
//! | nodes | this node, and on shared storage the status records the nodes publish in the bucket (`nodes/<id>`) every [`StatusSettings::heartbeat_every`]; a record older than three of those is shown stale, one older than [`FORGET_NODE_AFTER`] is deleted |
//! | recent pushes, garbage collections | this node's records ([`xet_store::Store::recent_pushes`], [`xet_store::Store::gc_runs`]) and the last few of every other node's, from their status records |
//! | claims backlog | the store's count of unchecked claims, and each uploader's |
//!
//! The node's id is kept in `--data DIR/node-id` (made up once: the host name and random
//! digits), so that it stays the same across restarts.

use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime};
use xet_protocol::util::now_ms;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::wire::ErrorCode;
use xet_store::stats::{GcRun, Push, Sample, Usage, UsageLimits};
use xet_store::Store;

use super::error::ApiError;
use super::{blocking, SharedState};

/// How often the status page's figures are refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusSettings {
    /// How often the background job looks whether the index changed. Default 5 s.
    pub poll: Duration,
    /// The shortest pause between two passes over the index ([`Store::usage`]); a pass also
    /// waits 20 times as long as the last one took. Default a minute.
    pub usage_every: Duration,
    /// The shortest time between two samples of the totals whose values differ (see
    /// [`Store::record_sample`]). Default 10 minutes.
    pub sample_every: Duration,
    /// On shared storage, how often this node rewrites its status record. Default 30 s.
    pub heartbeat_every: Duration,
}

impl Default for StatusSettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(5),
            usage_every: Duration::from_secs(60),
            sample_every: Duration::from_secs(600),
            heartbeat_every: Duration::from_secs(30),
        }
    }
}

/// A pass over the index runs at least this often, changed or not (garbage collection and
/// repairs change stored bytes without changing the counts).
const USAGE_MAX_AGE: Duration = Duration::from_secs(3600);
/// How many times its last duration a pass over the index waits before the next.
const USAGE_PAUSE_FACTOR: u32 = 20;
/// A node record unwritten for this long is deleted (the node is gone).
pub const FORGET_NODE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);
/// Node records read at most, and the largest read.
const MAX_NODE_RECORDS: usize = 64;
const MAX_NODE_RECORD_BYTES: u64 = 64 << 10;
/// Pushes and garbage collections a node publishes in its record.
const RECORD_PUSHES: usize = 20;
const RECORD_GC_RUNS: usize = 5;
/// Rows the API answers at most.
const SHOWN_PUSHES: usize = 50;
const SHOWN_GC_RUNS: usize = 20;
const SHOWN_UPLOADERS: usize = 20;
/// Uploaders with pending claims looked at (each one index read).
const MAX_UPLOADERS: usize = 1000;

/// What a node publishes about itself on shared storage (`nodes/<id>`), as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeRecord {
    id: String,
    version: String,
    /// Unix seconds.
    started_at: u64,
    written_at: u64,
    /// When it was written, unix milliseconds (the writer's clock; 0 from a record without it).
    #[serde(default)]
    written_ms: u64,
    #[serde(default)]
    public_url: String,
    catching_up: bool,
    catch_up_age_secs: Option<f64>,
    #[serde(default)]
    pushes: Vec<Push>,
    #[serde(default)]
    gc_runs: Vec<GcRun>,
}

/// The other nodes as last read from storage.
#[derive(Debug, Default)]
struct NodesView {
    records: Vec<(NodeRecord, u64)>,
}

/// The status page's state in the server.
#[derive(Debug)]
pub(crate) struct StatusState {
    settings: StatusSettings,
    node_id: String,
    /// Unix seconds.
    started_at: u64,
    /// The `--gc-interval`, for the page.
    gc_interval: Option<Duration>,
    /// `directory`, or the bucket's URL (no credentials in it).
    storage: String,
    usage: Mutex<Option<Arc<Usage>>>,
    nodes: Mutex<NodesView>,
}

impl StatusState {
    pub(crate) fn new(
        settings: StatusSettings,
        node_id: String,
        gc_interval: Option<Duration>,
        storage: String,
    ) -> Self {
        Self {
            settings,
            node_id,
            started_at: now_secs(),
            gc_interval,
            storage,
            usage: Mutex::new(None),
            nodes: Mutex::new(NodesView::default()),
        }
    }
}

fn now_secs() -> u64 {
    xet_protocol::util::now_unix()
}

/// Whether `id` can name a node (and its object in the bucket): 1 to 64 of `[A-Za-z0-9._-]`,
/// not starting with a dot.
fn is_node_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// This node's id, from `dir/node-id`, made up and written there the first time.
pub(crate) fn node_id(dir: &Path) -> std::io::Result<String> {
    let path = dir.join("node-id");
    match std::fs::read_to_string(&path) {
        Ok(text) if is_node_id(text.trim()) => return Ok(text.trim().to_string()),
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} does not hold a node id (1 to 64 letters, digits, '.', '_' or '-'); \
                 delete it to make a new one",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let host: String = super::maintenance::hostname()
        .unwrap_or_else(|| "node".into())
        .chars()
        .take(48)
        .collect();
    let id = format!("{host}-{}", xet_protocol::random_hex(3));
    std::fs::create_dir_all(dir)?;
    std::fs::write(&path, format!("{id}\n"))?;
    Ok(id)
}

/// Runs `job` on a blocking thread; a failure or a panic is logged as `what` and gives `None`.
async fn background<T: Send + 'static>(
    what: &'static str,
    job: impl FnOnce() -> Result<T, xet_store::StoreError> + Send + 'static,
) -> Option<T> {
    match tokio::task::spawn_blocking(job).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "status page: failed {what}; trying again later");
            None
        }
        Err(e) => {
            tracing::error!(error = %e, "status page: failed {what} (a panic, a bug)");
            None
        }
    }
}

/// Starts the status page's background jobs: the pass over the index (when an admin token is
/// configured) and, on shared storage, this node's status record. Abort the returned tasks to stop them.
pub(crate) fn spawn(state: &SharedState) -> Vec<tokio::task::JoinHandle<()>> {
    let mut jobs = Vec::new();
    // The figures only for a page someone may open; the record for the other nodes' pages.
    if state.auth.has_admin() {
        jobs.push(tokio::spawn(usage_job(Arc::clone(state))));
    }
    if state.store.is_shared() {
        jobs.push(tokio::spawn(heartbeat_job(Arc::clone(state))));
    }
    jobs
}

/// Recomputes the figures when the index changed (see the module documentation) and samples
/// the totals.
async fn usage_job(state: SharedState) {
    let settings = state.status.settings;
    let mut last: Option<(xet_store::index::IndexCounts, std::time::Instant)> = None;
    let mut pause = Duration::ZERO;
    loop {
        let st = Arc::clone(&state);
        let Some(counts) = background("reading the counts", move || st.store.counts()).await else {
            tokio::time::sleep(settings.poll).await;
            continue;
        };
        let due = match &last {
            None => true,
            Some((before, at)) => {
                let waited = at.elapsed();
                (waited >= pause && *before != counts) || waited >= USAGE_MAX_AGE.max(pause)
            }
        };
        if due {
            let st = Arc::clone(&state);
            let started = std::time::Instant::now();
            let done = background("computing the store's figures", move || {
                let usage = st.store.usage(UsageLimits::default())?;
                st.store
                    .record_sample(&usage.sample(), settings.sample_every)?;
                Ok(usage)
            })
            .await;
            let took = started.elapsed();
            if let Some(usage) = done {
                *state.status.usage.lock_anyway() = Some(Arc::new(usage));
            }
            // Tried again after the same pause whether it succeeded or not.
            last = Some((counts, std::time::Instant::now()));
            pause = settings
                .usage_every
                .max(took.saturating_mul(USAGE_PAUSE_FACTOR));
        }
        tokio::time::sleep(settings.poll).await;
    }
}

/// This node's status record, as it publishes it.
fn own_record(state: &SharedState, store: &Store) -> Result<NodeRecord, xet_store::StoreError> {
    Ok(NodeRecord {
        id: state.status.node_id.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: state.status.started_at,
        written_at: now_secs(),
        written_ms: now_ms(),
        public_url: state.public_url.clone(),
        catching_up: store.catching_up(),
        catch_up_age_secs: store.catch_up_age().map(|d| d.as_secs_f64()),
        pushes: store.recent_pushes(RECORD_PUSHES)?,
        gc_runs: store.gc_runs(RECORD_GC_RUNS)?,
    })
}

/// On shared storage: writes this node's record, reads the others' and deletes the ones of
/// nodes long gone, every [`StatusSettings::heartbeat_every`].
async fn heartbeat_job(state: SharedState) {
    let every = state.status.settings.heartbeat_every;
    loop {
        let st = Arc::clone(&state);
        let read = background("publishing this node's status", move || {
            let record = own_record(&st, &st.store)?;
            let body = serde_json::to_vec(&record).unwrap_or_default();
            st.store.put_node_record(&record.id, &body)?;
            let mut others = Vec::new();
            for (name, written, body) in st
                .store
                .node_records(MAX_NODE_RECORDS, MAX_NODE_RECORD_BYTES)?
            {
                let written = written
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                if name == record.id {
                    continue;
                }
                if now_secs().saturating_sub(written) > FORGET_NODE_AFTER.as_secs() {
                    tracing::info!(node = %name, "status page: forgetting a node unheard of for a week");
                    st.store.remove_node_record(&name)?;
                    continue;
                }
                match serde_json::from_slice::<NodeRecord>(&body) {
                    Ok(r) if r.id == name => others.push((r, written)),
                    _ => tracing::warn!(node = %name, "status page: an unreadable node record"),
                }
            }
            Ok(others)
        })
        .await;
        if let Some(records) = read {
            state.status.nodes.lock_anyway().records = records;
        }
        tokio::time::sleep(every).await;
    }
}

/// What the page and the API answer without the admin token configured.
const OFF: &str = "the status page is off: give `git xet serve` an admin token (--admin-token, \
                   the GIT_XET_ADMIN_TOKEN variable, or an `admin <secret>` line in the token \
                   file) and open /status with it as the password";

/// What they answer to a request without it.
const REFUSED: &str = "the status page needs the admin token: send it as the password of HTTP \
                       Basic credentials (any user name) or as `Authorization: Bearer <token>`";

/// `None` when the request may see the status page, else the refusal (404 without an admin
/// token configured, 401 without the admin token in the request).
fn refusal(state: &SharedState, headers: &HeaderMap) -> Option<ApiError> {
    if !state.auth.has_admin() {
        return Some(ApiError::new(ErrorCode::NotFound, OFF));
    }
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    (!state.auth.is_admin_header(header)).then(|| ApiError::new(ErrorCode::Unauthorized, REFUSED))
}

/// The page, from `status/page.html`.
const PAGE: &str = include_str!("status/page.html");

/// The Content-Security-Policy of [`PAGE`]: its one inline style and one inline script, by
/// their SHA-256, and requests to this origin only.
static PAGE_CSP: LazyLock<String> = LazyLock::new(|| {
    let hash = |open: &str, close: &str| {
        let start = PAGE.find(open).map_or(0, |i| i + open.len());
        let end = PAGE[start..].find(close).map_or(start, |i| start + i);
        use base64::Engine as _;
        let digest = sha2::Sha256::digest(&PAGE.as_bytes()[start..end]);
        format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    };
    format!(
        "default-src 'none'; style-src {}; script-src {}; connect-src 'self'; img-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash("<style>", "</style>"),
        hash("<script>", "</script>")
    )
});

/// Headers every answer of the status routes carries.
fn private_headers(response: &mut Response) {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// `GET /status`: the page, or a plain-text refusal (401 asks the browser for credentials).
async fn page(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let mut response = match refusal(&state, &headers) {
        Some(refused) => {
            let status = refused.status();
            let mut r = (status, format!("{}\n", refused.message)).into_response();
            if status == StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"git-xet status\", charset=\"UTF-8\""),
                );
            }
            r
        }
        None => {
            let mut r = PAGE.into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            if let Ok(csp) = HeaderValue::from_str(&PAGE_CSP) {
                h.insert(header::CONTENT_SECURITY_POLICY, csp);
            }
            r
        }
    };
    private_headers(&mut response);
    response
}

/// `GET /status.json`: what the page shows (see [`Snapshot`]).
async fn api(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let mut response = match refusal(&state, &headers) {
        Some(refused) => refused.into_response(),
        None => match snapshot(&state).await {
            Ok(s) => Json(s).into_response(),
            Err(e) => e.into_response(),
        },
    };
    private_headers(&mut response);
    response
}

/// One node as the API shows it.
#[derive(Debug, Serialize)]
struct NodeView {
    id: String,
    this_node: bool,
    version: String,
    started_at: u64,
    /// On shared storage.
    shared: bool,
    public_url: String,
    catching_up: bool,
    catch_up_age_secs: Option<f64>,
    /// When its record was written, how long ago, and whether that is too long.
    heard_at: u64,
    age_secs: u64,
    stale: bool,
}

/// A push with the node it went through.
#[derive(Debug, Serialize)]
struct PushView {
    node: String,
    #[serde(flatten)]
    push: Push,
}

/// A garbage collection with the node that ran it.
#[derive(Debug, Serialize)]
struct GcRunView {
    node: String,
    #[serde(flatten)]
    run: GcRun,
}

#[derive(Debug, Serialize)]
struct UploaderClaims {
    /// A repository (of a scoped token); empty for server-wide tokens.
    uploader: String,
    claims: u64,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct ClaimsView {
    unchecked: u64,
    /// The uploaders with the most unchecked claims.
    uploaders: Vec<UploaderClaims>,
}

#[derive(Debug, Serialize)]
struct GcView {
    /// How long this node's running collection has run; `None`: none runs.
    running_secs: Option<u64>,
    /// When this node's last collection ended (unix seconds).
    last_ended_at: Option<u64>,
    /// The scheduled interval (`--gc-interval`); `None`: off.
    interval_secs: Option<u64>,
    /// The last runs of every node, newest first.
    runs: Vec<GcRunView>,
}

#[derive(Debug, Serialize)]
struct NodeSelf {
    id: String,
    version: &'static str,
    started_at: u64,
    /// `directory` or the bucket's URL (`s3://BUCKET/PREFIX`).
    storage: String,
    data_free_bytes: Option<u64>,
}

/// `GET /status.json`'s body.
#[derive(Debug, Serialize)]
struct Snapshot {
    /// Unix seconds.
    generated_at: u64,
    node: NodeSelf,
    nodes: Vec<NodeView>,
    /// The last figures computed; `None` before the first pass ended.
    usage: Option<Usage>,
    /// Samples of the totals, oldest first.
    history: Vec<Sample>,
    pushes: Vec<PushView>,
    claims: ClaimsView,
    gc: GcView,
}

/// Everything the API answers, from the store's small tables and what the background jobs
/// found.
async fn snapshot(state: &SharedState) -> Result<Snapshot, ApiError> {
    let st = Arc::clone(state);
    let (history, own_pushes, own_runs, counts, uploaders, free) = blocking(move || {
        let store = &st.store;
        let counts = store.counts()?;
        let mut uploaders = Vec::new();
        for uploader in store.claim_uploaders()?.into_iter().take(MAX_UPLOADERS) {
            let (claims, bytes) = store.claim_load_of(&uploader)?;
            uploaders.push(UploaderClaims {
                uploader,
                claims,
                bytes,
            });
        }
        uploaders.sort_by_key(|u| std::cmp::Reverse(u.claims));
        uploaders.truncate(SHOWN_UPLOADERS);
        let free = xet_protocol::util::os::available_space(store.root()).ok();
        Ok((
            store.samples()?,
            store.recent_pushes(SHOWN_PUSHES)?,
            store.gc_runs(SHOWN_GC_RUNS)?,
            counts,
            uploaders,
            free,
        ))
    })
    .await?;
    let store = &state.store;
    let status = &state.status;
    let now = now_secs();
    let shared = store.is_shared();
    let mut nodes = vec![NodeView {
        id: status.node_id.clone(),
        this_node: true,
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: status.started_at,
        shared,
        public_url: state.public_url.clone(),
        catching_up: store.catching_up(),
        catch_up_age_secs: store.catch_up_age().map(|d| d.as_secs_f64()),
        heard_at: now,
        age_secs: 0,
        stale: false,
    }];
    let mut pushes: Vec<PushView> = own_pushes
        .into_iter()
        .map(|push| PushView {
            node: status.node_id.clone(),
            push,
        })
        .collect();
    let mut runs: Vec<GcRunView> = own_runs
        .into_iter()
        .map(|run| GcRunView {
            node: status.node_id.clone(),
            run,
        })
        .collect();
    let stale_after_ms = (status.settings.heartbeat_every.as_millis() as u64).saturating_mul(3);
    let now_ms = now_ms();
    for (record, written) in &status.nodes.lock_anyway().records {
        // The record's own time, to the millisecond; the storage's (seconds) for an older one.
        let age_ms = match record.written_ms {
            0 => now.saturating_sub(*written).saturating_mul(1000),
            ms => now_ms.saturating_sub(ms),
        };
        let age = age_ms / 1000;
        nodes.push(NodeView {
            id: record.id.clone(),
            this_node: false,
            version: record.version.clone(),
            started_at: record.started_at,
            shared: true,
            public_url: record.public_url.clone(),
            catching_up: record.catching_up,
            catch_up_age_secs: record.catch_up_age_secs,
            heard_at: *written,
            age_secs: age,
            stale: age_ms > stale_after_ms,
        });
        pushes.extend(record.pushes.iter().map(|p| PushView {
            node: record.id.clone(),
            push: p.clone(),
        }));
        runs.extend(record.gc_runs.iter().map(|r| GcRunView {
            node: record.id.clone(),
            run: r.clone(),
        }));
    }
    pushes.sort_by_key(|p| std::cmp::Reverse(p.push.t_ms));
    pushes.truncate(SHOWN_PUSHES);
    runs.sort_by_key(|r| std::cmp::Reverse(r.run.started_ms));
    runs.truncate(SHOWN_GC_RUNS);
    let storage = status.storage.clone();
    Ok(Snapshot {
        generated_at: now,
        node: NodeSelf {
            id: status.node_id.clone(),
            version: env!("CARGO_PKG_VERSION"),
            started_at: status.started_at,
            storage,
            data_free_bytes: free,
        },
        nodes,
        usage: status.usage.lock_anyway().as_deref().cloned(),
        history,
        pushes,
        claims: ClaimsView {
            unchecked: counts.claims,
            uploaders,
        },
        gc: GcView {
            running_secs: store.gc_running_for().map(|d| d.as_secs()),
            last_ended_at: store
                .gc_last_ended()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
            interval_secs: status.gc_interval.map(|d| d.as_secs()),
            runs,
        },
    })
}

/// Records a push registered through this node, for the page (a failure is logged: the push
/// itself succeeded). Blocks.
pub(crate) fn record_push(store: &Store, push: Push) {
    if let Err(e) = store.record_push(&push) {
        tracing::warn!(error = %e, "status page: cannot record a push");
    }
}

/// The sizes of the files a shard registers, added up (its terms' lengths); 0 if it does not
/// parse (it was validated already; this is only for the page).
pub(crate) fn shard_file_bytes(shard: &[u8]) -> u64 {
    xet_format::shard::ParsedShard::parse(shard).map_or(0, |p| {
        p.shard
            .files
            .iter()
            .flat_map(|f| f.terms.iter())
            .map(|t| u64::from(t.unpacked_segment_bytes))
            .sum()
    })
}

/// A push's record, now.
pub(crate) fn push_now(
    repo: Option<String>,
    kind: xet_store::stats::PushKind,
    files: u64,
    bytes: u64,
    new: Option<(u64, u64)>,
) -> Push {
    Push {
        t_ms: now_ms(),
        repo,
        kind,
        files,
        bytes,
        new_files: new.map(|n| n.0),
        new_bytes: new.map(|n| n.1),
    }
}

/// The status routes.
pub(crate) fn routes() -> Router<SharedState> {
    Router::new()
        .route("/status", get(page))
        .route("/status.json", get(api))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let id = node_id(dir.path()).unwrap();
        assert!(is_node_id(&id), "{id}");
        assert_eq!(node_id(dir.path()).unwrap(), id);
        std::fs::write(dir.path().join("node-id"), "../../etc\n").unwrap();
        assert!(node_id(dir.path()).is_err());
        for bad in ["", ".x", "a/b", "a b", &"x".repeat(65)] {
            assert!(!is_node_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_page_is_self_contained_and_its_policy_names_its_inline_code() {
        for external in ["src=", "href=", "@import", "url(", "http:", "https:"] {
            // The SVG namespace is a name, not a request.
            let uses = PAGE.matches(external).count();
            let namespace = PAGE.matches("http://www.w3.org/2000/svg").count();
            let allowed = if external == "http:" { namespace } else { 0 };
            assert_eq!(uses, allowed, "the page uses {external}");
        }
        assert_eq!(PAGE.matches("<script").count(), 1);
        assert_eq!(PAGE.matches("<style").count(), 1);
        assert!(!PAGE.contains("innerHTML") && !PAGE.contains("style=\""));
        let csp = PAGE_CSP.as_str();
        assert!(
            csp.starts_with("default-src 'none'; style-src 'sha256-"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        // The hashes are of the page's own code: the style's differs from the script's and
        // neither is the hash of nothing.
        let empty = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='";
        assert!(!csp.contains(empty), "{csp}");
        let hashes: Vec<&str> = csp
            .split_whitespace()
            .filter(|w| w.starts_with("'sha256-"))
            .collect();
        assert_eq!(hashes.len(), 2);
        assert_ne!(hashes[0], hashes[1]);
    }
}
