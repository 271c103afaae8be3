//! `GET /v1/lfs-files/{oid}`: this server's extension for git: the Xet file registered for a Git
//! LFS oid (the SHA-256 a shard's `FileMetadataExt` carries, cas-api.md §9.3 item 7).
//!
//! A standalone agent has only the oid from the pointer; this tells it which file hash to
//! reconstruct, and an uploader can skip a file the server already holds intact. Answers
//! `{"oid": "<sha256>", "file_hash": "<xet hash>", "size": <bytes>, "intact": <bool>}`
//! ([`LfsFile`]), or 404. `intact` is false when a xorb the file needs is missing or damaged: an
//! uploader then sends the file again, which repairs it.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;

use super::super::auth::Scope;
use super::super::error::ApiError;
use super::super::{blocking, SharedState};
use crate::format::LfsOid;
use crate::store::wire::LfsFile;

pub async fn get(
    State(state): State<SharedState>,
    params: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Json<LfsFile>, ApiError> {
    state.authorize(&headers, Scope::Read, "an LFS oid lookup")?;
    let Path(text) = params.map_err(|e| ApiError::bad_request("invalid_path", e.to_string()))?;
    let oid = LfsOid::from_hex(&text).map_err(|e| {
        ApiError::bad_request("invalid_oid", format!("{text:?} is not a SHA-256 oid: {e}"))
    })?;
    let st = state.clone();
    let found = blocking(move || {
        let Some((file, size)) = st.store.file_by_oid(&oid)? else {
            return Ok(None);
        };
        let intact = st.store.file_damage(&file)?.is_none();
        Ok(Some((file, size, intact)))
    })
    .await?;
    let Some((file, size, intact)) = found else {
        return Err(ApiError::not_found(
            "oid_not_found",
            format!("no file with LFS oid {oid} is stored on this server"),
        ));
    };
    Ok(Json(LfsFile {
        oid: oid.to_hex(),
        file_hash: file.to_hex(),
        size,
        intact: Some(intact),
    }))
}
