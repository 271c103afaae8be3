//! `GET /v1/chunks/{prefix}/{chunk}`: the global dedup query (docs/cas-api.md §5.4, §9.4,
//! docs/format.md §5.2).
//!
//! The store finds the xorb holding a chunk it indexes for dedup (first chunks and probes of
//! files, dense keys of xorbs); the answer is a complete shard (all lookup tables and the
//! footer) with no files and that xorb's block and its neighbours', its chunk hashes keyed with
//! the server's current dedup key ([`super::super::AppState::dedup_key`]), the key and its
//! expiry in the footer and the creation timestamp set to now. A client can match only chunks
//! whose raw hashes it already has.
//!
//! Every answer, 200 or 404, carries `X-Xet-Dense-Keys` with the dense-key modulus
//! (docs/format.md §5.5, [`xet_protocol::wire::DENSE_KEYS_HEADER`]): our client asks about the
//! runs of a file only on a server that says it indexes them.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use xet_protocol::wire::{ErrorCode, DENSE_KEYS_HEADER};

use super::super::auth::{now_unix, Scope};
use super::super::error::ApiError;
use super::super::{blocking, parse_hash, SharedState};
use xet_format::shard::LookupTables;
use xet_format::ChunkHash;

/// Dedup answers may be cached at most this long (and never past the key's expiry).
pub(crate) const MAX_AGE_SECS: u64 = 3600;

pub async fn get(
    State(state): State<SharedState>,
    params: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.authorize_cas(&headers, Scope::Read, "a global dedup query")?;
    let (prefix, hash) = super::path(params)?;
    super::check_prefix(&prefix, &["default", "default-merkledb"], "dedup queries")?;
    let chunk: ChunkHash = parse_hash(&hash, "chunk hash")?;
    let key = state.dedup_key()?;
    let st = state.clone();
    let bytes = blocking(move || {
        let Some(shard) = st.store.dedup_shard(&chunk)? else {
            return Ok(None);
        };
        let internal = |e: xet_format::shard::ShardError| {
            ApiError::internal(format!(
                "cannot build the dedup shard for chunk {chunk}: {e}"
            ))
        };
        let mut keyed = shard.to_keyed(key.key).map_err(internal)?;
        keyed.meta.creation_timestamp = now_unix();
        keyed.meta.key_expiry = key.expires;
        keyed
            .to_complete_bytes(LookupTables::ALL)
            .map(Some)
            .map_err(internal)
    })
    .await?;
    let Some(bytes) = bytes else {
        let mut response = ApiError::new(
            ErrorCode::ChunkNotFound,
            format!("chunk {chunk} is not tracked by global dedup on this server"),
        )
        .into_response();
        announce_dense_keys(response.headers_mut());
        return Ok(response);
    };
    let max_age = key.expires.saturating_sub(now_unix()).min(MAX_AGE_SECS);
    let mut response = (StatusCode::OK, bytes).into_response();
    let h = response.headers_mut();
    announce_dense_keys(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={max_age}")) {
        h.insert(header::CACHE_CONTROL, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("authorization"));
    Ok(response)
}

/// `X-Xet-Dense-Keys: 64`: the store indexes the dense keys of every xorb it stores.
fn announce_dense_keys(headers: &mut HeaderMap) {
    headers.insert(
        DENSE_KEYS_HEADER,
        HeaderValue::from(xet_format::dedup::DENSE_KEY_MODULUS),
    );
}
