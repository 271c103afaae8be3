//! Basic transfers (git-lfs `docs/api/basic-transfers.md`): `PUT` and `GET` of
//! `{repo}/info/lfs/objects/{oid}` and the `verify` action.
//!
//! **Uploads** are spooled: the request body streams to a file in the store's spool directory
//! ([`crate::server::body::spool_body`], hashed with SHA-256 on the way), so a client that stops
//! sending holds a file and an idle task, no thread. Once the whole body is there its length
//! and SHA-256 are checked, and in an ingest slot
//! ([`crate::server::limits::Resources::ingest_slot`]) the upload pipeline runs over the file on
//! a blocking thread ([`xet_client::pipeline::upload`]): it chunks it, deduplicates the chunks
//! against the store (so an edited file stores only what changed) and checks length and
//! SHA-256 again. The pipeline writes to the store through [`Staging`], so a body that fails
//! the checks leaves nothing behind: no xorb, no shard, no oid. Errors: 400 `size_mismatch` or
//! `body_read_failed`, 408 `body_timeout`, 422 `oid_mismatch` (git-lfs does not retry a 422),
//! 507 `insufficient_storage`, 500 for the store.
//!
//! **Downloads** stream chunk by chunk ([`super::rebuild`]): each piece is read from the stored
//! xorbs, decoded and hash-checked when the connection asks for it, so memory stays at one
//! piece per download whatever the file size. The response carries `Content-Length`; a
//! failure half-way aborts the connection, which the client sees as a short body (and git-lfs
//! as a SHA-256 mismatch).

use std::sync::Arc;
use xet_protocol::wire::ErrorCode;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::batch::EMPTY_OID;
use super::rebuild::{self, Download};
use super::{authorize_transfer, lfs_json, Repo};
use crate::server::auth::Scope;
use crate::server::body::{drain, read_body, spool_body, Spooled};
use crate::server::error::ApiError;
use crate::server::{blocking, AppState};
use xet_client::pipeline::upload::{upload, Staging, UploadError, UploadOptions, UploadSummary};
use xet_format::LfsOid;
use xet_protocol::target::TargetError;

/// Read buffer of the upload pipeline over a spooled body.
const SPOOL_READ_BUF: usize = 256 * 1024;

/// An oid from a URL path: 64 lowercase hex characters.
fn parse_oid(s: &str) -> Result<LfsOid, ApiError> {
    let valid = s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !valid {
        return Err(ApiError::new(
            ErrorCode::InvalidOid,
            format!("{s:?} is not an oid: expected 64 lowercase hex characters (SHA-256)"),
        ));
    }
    LfsOid::from_hex(s)
        .map_err(|e| ApiError::new(ErrorCode::InvalidOid, format!("{s:?} is not an oid: {e}")))
}

/// The declared length: `None` when absent (chunked), 400 when malformed.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(_) => crate::server::body::content_length(headers)
            .map(Some)
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidLength, "malformed Content-Length")),
    }
}

/// `PUT {repo}/info/lfs/objects/{oid}`.
pub async fn put(
    state: &Arc<AppState>,
    repo: &Repo,
    oid: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let grant = authorize_transfer(state, headers, repo, Scope::Write, "uploading LFS objects")?;
    let limited = super::limited_to(&grant, repo).cloned();
    let oid = parse_oid(oid)?;
    let declared = content_length(headers)?;

    if let Some(size) = stored_size(state, oid, limited).await? {
        return already_stored(repo, oid, size, declared, body).await;
    }

    let spooled = spool_checked(state, oid, declared, body).await?;
    let s = ingest(state, oid, spooled).await?;
    let (store, file, id) = (Arc::clone(&state.store), s.file_hash, repo.id.clone());
    let push = crate::server::status::push_now(
        Some(repo.id.to_string()),
        xet_store::stats::PushKind::Basic,
        1,
        s.size,
        None,
    );
    blocking(move || {
        store.add_file_repo(&file, &id)?;
        crate::server::status::record_push(&store, push);
        Ok(())
    })
    .await?;
    tracing::info!(
        repo = %repo.id,
        %oid,
        file = %s.file_hash,
        size = s.size,
        chunks = s.chunks,
        dedup_chunks = s.dedup_chunks,
        new_xorbs = s.new_xorbs,
        uploaded_bytes = s.uploaded_bytes,
        "basic upload"
    );
    Ok(StatusCode::OK.into_response())
}

/// The size `oid` is stored with, when an intact copy is already there for this upload (the
/// empty object always is); looked up on a blocking thread.
async fn stored_size(
    state: &Arc<AppState>,
    oid: LfsOid,
    limited: Option<xet_store::RepoName>,
) -> Result<Option<u64>, ApiError> {
    if oid.to_hex() == EMPTY_OID {
        return Ok(Some(0));
    }
    let store = Arc::clone(&state.store);
    // A damaged copy is not "already stored": this upload replaces it. Nor is what only
    // another repository registered, for a token limited to this one: the upload, checked
    // against its oid, registers it here.
    blocking(move || {
        Ok(store
            .intact_file_by_oid(&oid, limited.as_ref())?
            .map(|(_, size)| size))
    })
    .await
}

/// The answer to an upload of an object stored with `size` bytes already: 400 when the
/// declared length differs, else the body is drained and the upload succeeds.
async fn already_stored(
    repo: &Repo,
    oid: LfsOid,
    size: u64,
    declared: Option<u64>,
    body: Body,
) -> Result<Response, ApiError> {
    if declared.is_some_and(|d| d != size) {
        return Err(ApiError::new(
            ErrorCode::SizeMismatch,
            format!(
                "object {oid} is stored with {size} bytes; this upload declares {}",
                declared.unwrap_or_default()
            ),
        ));
    }
    drain(body, None, &format!("object {oid}")).await?;
    tracing::info!(repo = %repo.id, %oid, size, "basic upload: already stored");
    Ok(StatusCode::OK.into_response())
}

/// Spools the body to a file (counted in the metrics) and checks its length against the
/// declared one and its SHA-256 against the oid.
async fn spool_checked(
    state: &Arc<AppState>,
    oid: LfsOid,
    declared: Option<u64>,
    body: Body,
) -> Result<Spooled, ApiError> {
    let what = format!("object {oid}");
    let spooled = spool_body(&state.store, declared, body, declared, true, &what).await?;
    state.metrics.received_object_bytes.inc_by(spooled.len);
    if let Some(expected) = declared.filter(|&d| d != spooled.len) {
        return Err(upload_error(
            &oid,
            UploadError::TooShort {
                expected,
                actual: spooled.len,
            },
        ));
    }
    if let Some(actual) = spooled.sha256.filter(|h| *h != oid) {
        return Err(upload_error(
            &oid,
            UploadError::Sha256Mismatch {
                expected: oid,
                actual,
            },
        ));
    }
    Ok(spooled)
}

/// Runs the upload pipeline over the spooled body in an ingest slot, on a blocking thread
/// (where the spool file is also removed), into the store through [`Staging`].
async fn ingest(
    state: &Arc<AppState>,
    oid: LfsOid,
    spooled: Spooled,
) -> Result<UploadSummary, ApiError> {
    let slot = state.resources.ingest_slot().await?;
    let store = Arc::clone(&state.store);
    let result = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let file = std::fs::File::open(&spooled.path)
            .map_err(|source| UploadError::Read { offset: 0, source })?;
        let staging_dir = store.spool_dir();
        let target = Staging::new(&*store, &staging_dir);
        let options = UploadOptions {
            expected_sha256: Some(oid),
            expected_size: Some(spooled.len),
            // The target is local (a staging directory): a second xorb in flight would only
            // hold another 64 MiB per ingest slot.
            parallel_puts: 1,
            ..UploadOptions::default()
        };
        let reader = std::io::BufReader::with_capacity(SPOOL_READ_BUF, file);
        upload(&target, reader, &options)
    })
    .await
    .map_err(|e| ApiError::internal(format!("object {oid}: upload worker failed: {e}")))?;
    result.map_err(|e| upload_error(&oid, e))
}

/// True when an upload failed because the disk (or quota) is full.
fn storage_full(e: &UploadError) -> bool {
    match e {
        UploadError::Target { source, .. } => match source {
            TargetError::Store(s) => s.code == Some(ErrorCode::InsufficientStorage),
            TargetError::Io { source, .. } => xet_store::cas::is_storage_full(source),
            _ => false,
        },
        _ => false,
    }
}

fn upload_error(oid: &LfsOid, e: UploadError) -> ApiError {
    let message = format!("object {oid}: {e}");
    if storage_full(&e) {
        return ApiError::storage_full(message);
    }
    tracing::warn!(%oid, error = %e, "basic upload refused");
    match e {
        UploadError::Sha256Mismatch { .. } => ApiError::new(ErrorCode::OidMismatch, message),
        UploadError::TooLong { .. } | UploadError::TooShort { .. } => {
            ApiError::new(ErrorCode::SizeMismatch, message)
        }
        UploadError::Read { .. } => ApiError::new(ErrorCode::BodyReadFailed, message),
        _ => ApiError::internal(message),
    }
}

/// `GET {repo}/info/lfs/objects/{oid}`.
pub async fn get(
    state: &Arc<AppState>,
    repo: &Repo,
    oid: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize_transfer(state, headers, repo, Scope::Read, "downloading LFS objects")?;
    let limited = super::limited_to(&grant, repo).cloned();
    let oid = parse_oid(oid)?;
    let store = Arc::clone(&state.store);
    let found = blocking(move || {
        if oid.to_hex() == EMPTY_OID {
            return Ok(None);
        }
        let fresh = xet_store::cas::Freshness::CatchUpOnMiss;
        let Some(xet_store::OidFile { file, size, .. }) =
            store.oid_file(&oid, limited.as_ref(), fresh)?
        else {
            return Err(ApiError::missing(
                &store,
                ErrorCode::ObjectNotFound,
                format!("object {oid} not found"),
            ));
        };
        let plan = store.reconstruction(&file, None)?.ok_or_else(|| {
            ApiError::internal(format!(
                "object {oid} maps to file {file}, which is not registered"
            ))
        })?;
        Ok(Some((file, size, plan)))
    })
    .await?;
    let Some((file, size, plan)) = found else {
        return Ok(octet_stream(0, Body::empty()));
    };

    let download = Download {
        repo: repo.id.to_string(),
        oid,
        file,
    };
    let budget = state
        .store
        .on_object_storage()
        .then(|| Arc::clone(&state.resources.read_budget));
    let body = rebuild::body(Arc::clone(&state.store), plan.terms, download, budget);
    Ok(octet_stream(size, body))
}

fn octet_stream(len: u64, body: Body) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// `POST {repo}/info/lfs/verify` with `{"oid": …, "size": …}`.
pub async fn verify(
    state: &Arc<AppState>,
    repo: &Repo,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    authorize_transfer(state, headers, repo, Scope::Write, "verifying LFS uploads")?;
    let bytes = read_body(
        &state.resources.body_budget,
        headers,
        body,
        64 << 10,
        "verify request",
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct VerifyRequest {
        oid: String,
        size: u64,
    }
    let req: VerifyRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidVerifyRequest,
            format!("expected {{\"oid\": …, \"size\": …}}: {e}"),
        )
    })?;
    let oid = parse_oid(&req.oid)?;
    let store = Arc::clone(&state.store);
    let stored = if oid.to_hex() == EMPTY_OID {
        Some(0)
    } else {
        blocking(move || Ok(store.file_by_oid(&oid)?.map(|(_, s)| s))).await?
    };
    match stored {
        Some(size) if size == req.size => Ok(lfs_json(StatusCode::OK, &serde_json::json!({}))),
        Some(size) => Err(ApiError::new(
            ErrorCode::SizeMismatch,
            format!("object {oid} is stored with {size} bytes, not {}", req.size),
        )),
        None => Err(ApiError::new(
            ErrorCode::ObjectNotFound,
            format!("object {oid} was not uploaded"),
        )),
    }
}
