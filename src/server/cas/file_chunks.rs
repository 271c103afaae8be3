//! `GET /v1/file-chunks/{file}` (this server's extension, docs/cas-api.md §5.8): the chunks of a
//! registered file in order, each its hash and length ([`xet_protocol::wire::encode_file_chunks`]).
//!
//! What a reader of part of a file (`git xet mount`, `git xet cat --range`) checks the chunks it
//! fetches against: their Xet file hash must be the file's, so the list cannot lie, and a
//! reconstruction carries no chunk hashes. Only for a credential that may read the file (the
//! list reveals nothing the file's bytes would not). At most
//! [`xet_protocol::wire::MAX_LISTED_CHUNKS`] chunks (413 beyond); the answer is built under the
//! server's body-memory budget (503 when it is spent).

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use xet_protocol::wire::ErrorCode;

use super::super::auth::Scope;
use super::super::error::ApiError;
use super::super::{blocking, parse_hash, SharedState};
use xet_format::FileHash;
use xet_protocol::wire::{encode_file_chunks, FILE_CHUNK_RECORD, MAX_LISTED_CHUNKS};

pub async fn get(
    State(state): State<SharedState>,
    hash: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, limited_to) = state.authorize_cas(&headers, Scope::Read, "listing a file's chunks")?;
    let hash = super::path(hash)?;
    let file: FileHash = parse_hash(&hash, "file hash")?;
    let st = state.clone();
    let listed = blocking(move || {
        if !st.store.visible_to(&file, limited_to.as_ref())? {
            return Ok(None);
        }
        Ok(st.store.file_chunks(&file)?)
    })
    .await?;
    let Some(chunks) = listed else {
        return Err(ApiError::missing(
            &state.store,
            ErrorCode::FileNotFound,
            format!("file {file} is not registered on this server"),
        ));
    };
    if chunks.len() > MAX_LISTED_CHUNKS {
        return Err(ApiError::too_large(
            &format!("the chunk list of file {file}"),
            chunks.len() as u64,
            MAX_LISTED_CHUNKS as u64,
        ));
    }
    let bytes = chunks.len() * FILE_CHUNK_RECORD;
    let _budget = u32::try_from(bytes)
        .ok()
        .and_then(|n| {
            state
                .resources
                .body_budget
                .clone()
                .try_acquire_many_owned(n.max(1))
                .ok()
        })
        .ok_or_else(|| ApiError::busy("the server's memory budget for answers is spent", 1))?;
    let body = encode_file_chunks(&chunks);
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=3600, immutable"),
    );
    Ok(response)
}
