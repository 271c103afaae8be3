//! The CAS API (docs/cas-api.md) that the reference client (hf-xet 1.8) and our agent call.
//!
//! | endpoint | scope | what it does |
//! |---|---|---|
//! | `GET /v1/reconstructions/{file}`, `/v2/…`, `/reconstructions/{file}` | read | the file's terms and presigned fetch URLs, v1 or v2 JSON (§6); optional `Range: bytes=S-E` (inclusive, end clamped, 416 past the end) |
//! | `GET /v1/reconstructions?file_id=A&file_id=B…`, `/reconstructions?…` | read | the batch query: v1 terms of each file there and shared fetch entries; touching ranges share one URL granting the run (at most 64 files) |
//! | `GET /v1/xorb-data/{xorb}?e=…&r=…&s=…` | URL signature | the byte ranges of the stored xorb the URL grants (`r`), and no others: one range (206), several ranges (206 `multipart/byteranges`) |
//! | `GET /v1/chunks/{prefix}/{chunk}`, `/chunks/…` | read | global dedup: a keyed shard with the xorb holding the chunk, or 404 |
//! | `POST /v1/xorb-grants/{prefix}/{xorb}` | write | an upload grant (201), or 200 when the xorb is stored ([`grants`]) |
//! | `PUT /v1/xorb-uploads/{grant}` | the grant | a granted xorb body: checked against the grant's length and CRC-64/NVME, validated, stored |
//! | `POST /v1/xorb-commits/{prefix}/{xorb}/grant/{grant}` | write | 200 once the granted xorb is stored, else 404 |
//! | `POST /v1/xorbs/{prefix}/{xorb}`, `/xorbs/…` | write | stores a validated xorb: `{"was_inserted": bool}` |
//! | `POST /v1/shards`, `/shards` | write | registers a shard: `{"result": 0 \| 1}` |
//! | `POST /v2/shards` | write | registers a shard, answering with an NDJSON progress stream |
//! | `POST /v1/telemetry` | read | accepts a JSON object of at most 1 MiB and discards it |
//! | `GET /v1/lfs-files/{oid}` | read | extension for git: the Xet file hash and size registered for a Git LFS oid, or 404 |
//! | `GET /v1/file-chunks/{file}` | read | extension: the file's chunk hashes and lengths, what a ranged reader checks against ([`file_chunks`]) |
//!
//! `prefix` is `default` for xorbs and grants, `default` or `default-merkledb` for dedup
//! queries; anything else is 400. Every hash in a path is parsed into its typed hash before it
//! is used (400 otherwise), so no request names a file path. Every refusal is a JSON
//! [`ApiError`]. Not implemented: `GET /v2/file-chunk-hashes` (optional, for the reference
//! client's ranged edits); it answers 404.
//!
//! Decisions:
//! - **Xorb grants.** hf-xet 1.8 asks for an upload grant before each xorb (docs/cas-api.md
//!   §5.11); this server grants an upload to itself ([`grants`]), so the reference client
//!   uploads with its default settings and every xorb is still validated before it is stored.
//! - **Ranges of xorb data.** `bytes=S-E`, `S-` and `-N` forms, comma-separated. At most
//!   [`xorb_data::MAX_RANGES`] ranges, whose lengths may not add up to more than the object
//!   (so overlapping ranges cannot multiply the work); more is 400. Unsatisfiable ranges are
//!   dropped; if none is left, 416 with `Content-Range: bytes */LEN`. v2 reconstruction entries
//!   carry at most [`plan_json::RANGES_PER_ENTRY`] ranges, so a client in multi-range mode
//!   stays within the limit. The signature covers the xorb, the expiry and the granted ranges;
//!   every requested range must lie within a granted one (403 `range_not_granted`).
//! - **Shard progress.** `POST /v2/shards` answers 200 once auth, size and the shard header have
//!   been checked; then `validating` frames (at most every 100 ms), `committing` (stage
//!   `syncing`) when validation passed, and `result` or `error`. While nothing new happens the
//!   last frame is repeated every [`super::ServeConfig::shard_heartbeat`] (20 s). `retryable` is
//!   true only when the store failed (not the shard).

pub mod dedup;
pub mod file_chunks;
pub mod grants;
pub mod lfs_files;
pub mod plan_json;
pub mod progress;
pub mod reconstruction;
pub mod upload;
pub mod xorb_data;

use axum::extract::rejection::PathRejection;
use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::routing::{get, post, put, MethodRouter};
use axum::Router;
use xet_protocol::wire::ErrorCode;

use super::error::ApiError;
use super::SharedState;

/// The CAS routes.
pub fn routes() -> Router<SharedState> {
    Router::new()
        .route(
            "/v1/reconstructions/{file_hash}",
            only(get(reconstruction::get_v1)),
        )
        .route("/v1/reconstructions", only(get(reconstruction::get_batch)))
        .route("/reconstructions", only(get(reconstruction::get_batch)))
        .route(
            "/v2/reconstructions/{file_hash}",
            only(get(reconstruction::get_v2)),
        )
        .route(
            "/reconstructions/{file_hash}",
            only(get(reconstruction::get_v1)),
        )
        .route("/v1/xorb-data/{xorb_hash}", only(get(xorb_data::get)))
        .route("/v1/chunks/{prefix}/{chunk_hash}", only(get(dedup::get)))
        .route("/chunks/{prefix}/{chunk_hash}", only(get(dedup::get)))
        .route(
            "/v1/xorb-grants/{prefix}/{xorb_hash}",
            only(post(grants::post_grant)),
        )
        .route("/v1/xorb-uploads/{grant}", only(put(grants::put_upload)))
        .route(
            "/v1/xorb-commits/{prefix}/{xorb_hash}/grant/{grant}",
            only(post(grants::post_commit)),
        )
        .route(
            "/v1/xorbs/{prefix}/{xorb_hash}",
            only(post(upload::post_xorb)),
        )
        .route("/xorbs/{prefix}/{xorb_hash}", only(post(upload::post_xorb)))
        .route("/v1/shards", only(post(upload::post_shard_v1)))
        .route("/shards", only(post(upload::post_shard_v1)))
        .route("/v2/shards", only(post(upload::post_shard_v2)))
        .route("/v1/telemetry", only(post(upload::post_telemetry)))
        .route("/v1/lfs-files/{oid}", only(get(lfs_files::get)))
        .route("/v1/file-chunks/{file_hash}", only(get(file_chunks::get)))
}

/// A route's methods, answering any other method with a JSON 405.
fn only(route: MethodRouter<SharedState>) -> MethodRouter<SharedState> {
    route.fallback(|| async {
        ApiError::new(
            ErrorCode::MethodNotAllowed,
            "this endpoint does not take that method",
        )
    })
}

/// The path parameters, or a JSON 400 (e.g. for percent-escapes that are not UTF-8).
fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidUrlPath,
            format!("malformed URL path: {e}"),
        )
    })
}

/// Refuses a `prefix` path segment that is not one of `allowed`.
fn check_prefix(prefix: &str, allowed: &[&str], what: &str) -> Result<(), ApiError> {
    if allowed.contains(&prefix) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::UnknownPrefix,
        format!(
            "unknown prefix {prefix:?} for {what}: use {}",
            allowed.join(" or ")
        ),
    ))
}

/// Adds `Cache-Control: no-store` (uploads, telemetry).
fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
