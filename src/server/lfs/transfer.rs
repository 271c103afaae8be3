//! Basic transfers (git-lfs `docs/api/basic-transfers.md`): `PUT` and `GET` of
//! `{repo}/info/lfs/objects/{oid}` and the `verify` action.
//!
//! **Uploads** stream: the request body is forwarded frame by frame through a bounded channel
//! to the upload pipeline running on a blocking thread ([`crate::pipeline::upload`]), which
//! chunks it, deduplicates the chunks against the store (so an edited file stores only what
//! changed) and checks the length against `Content-Length` and the SHA-256 against the oid. The
//! pipeline writes to the store through [`Staging`], so a body that fails the checks leaves
//! nothing behind: no xorb, no shard, no oid. Errors: 400 `size_mismatch` or `body_read_failed`,
//! 422 `oid_mismatch` (git-lfs does not retry a 422), 500 for the store.
//!
//! **Downloads** stream too: the file's reconstruction plan is walked on a blocking thread
//! ([`crate::pipeline::download`]) and each decoded chunk goes to the response body through a
//! bounded channel, so memory stays at one xorb range per download whatever the file size.
//! The response carries `Content-Length`; a failure half-way aborts the connection, which the
//! client sees as a short body (and git-lfs as a SHA-256 mismatch).

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_core::Stream;
use tokio::sync::mpsc;

use super::batch::EMPTY_OID;
use super::{authorize_transfer, lfs_json, Repo};
use crate::format::LfsOid;
use crate::pipeline::download::write_plan;
use crate::pipeline::upload::{upload, Staging, UploadError, UploadOptions};
use crate::server::auth::Scope;
use crate::server::error::ApiError;
use crate::server::{blocking, read_body, AppState};

/// Body frames buffered between the connection and the pipeline, each way.
const CHANNEL_DEPTH: usize = 16;

/// An oid from a URL path: 64 lowercase hex characters.
fn parse_oid(s: &str) -> Result<LfsOid, ApiError> {
    let valid = s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !valid {
        return Err(ApiError::bad_request(
            "invalid_oid",
            format!("{s:?} is not an oid: expected 64 lowercase hex characters (SHA-256)"),
        ));
    }
    LfsOid::from_hex(s)
        .map_err(|e| ApiError::bad_request("invalid_oid", format!("{s:?} is not an oid: {e}")))
}

fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::bad_request("invalid_length", "malformed Content-Length")),
    }
}

/// Reads the rest of a body and throws it away (for uploads of objects already stored).
async fn drain(body: Body) {
    let mut stream = body.into_data_stream();
    while let Some(Ok(_)) = next(&mut stream).await {}
}

async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

/// `PUT {repo}/info/lfs/objects/{oid}`.
pub async fn put(
    state: &Arc<AppState>,
    repo: &Repo,
    oid: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    authorize_transfer(state, headers, repo, Scope::Write, "uploading LFS objects")?;
    let oid = parse_oid(oid)?;
    let declared = content_length(headers)?;

    let store = Arc::clone(&state.store);
    let known = if oid.to_hex() == EMPTY_OID {
        Some(0)
    } else {
        blocking(move || Ok(store.file_by_oid(&oid)?.map(|(_, size)| size))).await?
    };
    if let Some(size) = known {
        if declared.is_some_and(|d| d != size) {
            return Err(ApiError::bad_request(
                "size_mismatch",
                format!(
                    "object {oid} is stored with {size} bytes; this upload declares {}",
                    declared.unwrap_or_default()
                ),
            ));
        }
        drain(body).await;
        tracing::info!(repo = %repo.id, %oid, size, "basic upload: already stored");
        return Ok(StatusCode::OK.into_response());
    }

    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(CHANNEL_DEPTH);
    let store = Arc::clone(&state.store);
    let task = tokio::task::spawn_blocking(move || {
        let staging_dir = store.root().join("tmp");
        let target = Staging::new(&*store, &staging_dir);
        let options = UploadOptions {
            expected_sha256: Some(oid),
            expected_size: declared,
            ..UploadOptions::default()
        };
        upload(&target, ChannelReader::new(rx), &options)
    });
    forward(body, tx).await;
    let result = task
        .await
        .map_err(|e| ApiError::internal(format!("object {oid}: upload worker failed: {e}")))?;
    match result {
        Ok(s) => {
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
        Err(e) => Err(upload_error(&oid, e)),
    }
}

fn upload_error(oid: &LfsOid, e: UploadError) -> ApiError {
    let message = format!("object {oid}: {e}");
    tracing::warn!(%oid, error = %e, "basic upload refused");
    match e {
        UploadError::Sha256Mismatch { .. } => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "oid_mismatch", message)
        }
        UploadError::TooLong { .. } | UploadError::TooShort { .. } => {
            ApiError::bad_request("size_mismatch", message)
        }
        UploadError::Read { .. } => ApiError::bad_request("body_read_failed", message),
        _ => ApiError::internal(message),
    }
}

/// Forwards the body's frames to `tx` until the body ends, fails, or the reader goes away.
async fn forward(body: Body, tx: mpsc::Sender<io::Result<Bytes>>) {
    let mut stream = body.into_data_stream();
    while let Some(frame) = next(&mut stream).await {
        let item = frame.map_err(|e| io::Error::other(format!("request body: {e}")));
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            break;
        }
    }
}

/// The request body as a blocking [`Read`], fed by [`forward`].
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    fn new(rx: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        Self {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(bytes)) => self.current = bytes,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// A response body fed by a blocking producer.
struct ChannelBody(mpsc::Receiver<io::Result<Bytes>>);

impl Stream for ChannelBody {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// `GET {repo}/info/lfs/objects/{oid}`.
pub async fn get(
    state: &Arc<AppState>,
    repo: &Repo,
    oid: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    authorize_transfer(state, headers, repo, Scope::Read, "downloading LFS objects")?;
    let oid = parse_oid(oid)?;
    let store = Arc::clone(&state.store);
    let found = blocking(move || {
        if oid.to_hex() == EMPTY_OID {
            return Ok(None);
        }
        let Some((file, size)) = store.file_by_oid(&oid)? else {
            return Err(ApiError::not_found(
                "object_not_found",
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

    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(CHANNEL_DEPTH);
    let store = Arc::clone(&state.store);
    let repo_id = repo.id.clone();
    tokio::task::spawn_blocking(move || {
        let mut sink = |piece: Vec<u8>| {
            tx.blocking_send(Ok(Bytes::from(piece)))
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client went away"))
        };
        match write_plan(&*store, &plan, &mut sink) {
            Ok(n) => tracing::info!(repo = %repo_id, %oid, %file, bytes = n, "basic download"),
            Err(e) => {
                tracing::warn!(repo = %repo_id, %oid, %file, error = %e, "basic download failed");
                let _ = tx.blocking_send(Err(io::Error::other(format!("object {oid}: {e}"))));
            }
        }
    });
    Ok(octet_stream(size, Body::from_stream(ChannelBody(rx))))
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
    let bytes = read_body(headers, body, 64 << 10, "verify request").await?;
    #[derive(serde::Deserialize)]
    struct VerifyRequest {
        oid: String,
        size: u64,
    }
    let req: VerifyRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_verify_request",
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
            StatusCode::UNPROCESSABLE_ENTITY,
            "size_mismatch",
            format!("object {oid} is stored with {size} bytes, not {}", req.size),
        )),
        None => Err(ApiError::not_found(
            "object_not_found",
            format!("object {oid} was not uploaded"),
        )),
    }
}
