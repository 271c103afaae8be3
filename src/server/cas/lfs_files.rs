//! `GET /v1/lfs-files/{oid}`: this server's extension for git: the Xet file registered for a Git
//! LFS oid (the SHA-256 a shard's `FileMetadataExt` carries, docs/cas-api.md §9.3 item 7).
//!
//! A standalone agent has only the oid from the pointer; this tells it which file hash to
//! reconstruct, and an uploader can skip a file the server already holds intact. Answers
//! `{"oid": "<sha256>", "file_hash": "<xet hash>", "size": <bytes>, "intact": <bool>}`
//! ([`LfsFile`]), or 404. `intact` is false when a xorb the file needs is missing or damaged: an
//! uploader then sends the file again, which repairs it. With `?reconstruction=v2`, an intact
//! file of up to 4 MiB also comes with its v2 reconstruction (`"reconstruction"`), which saves a
//! downloading agent the second request. `"sha256_checked": false` marks a mapping that is only
//! a shard's claim so far (see `server::claims`); every answer, 404 included, carries
//! `X-Xet-Checks-Sha256: 1`, which tells an uploader that claims are checked here.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use xet_protocol::wire::ErrorCode;

use super::super::auth::Scope;
use super::super::claims::CHECKS_SHA256_HEADER;
use super::super::error::ApiError;
use super::super::{blocking, SharedState};
use super::reconstruction::{inline_v2, small_plan};
use xet_format::LfsOid;
use xet_protocol::wire::LfsFile;

/// The query of the route: `reconstruction=v2` asks for the plan of a small file along;
/// `fresh=index` answers from this node's index as it is, without first listing what other
/// nodes registered when the oid is not there (uploads ask so: a miss only costs an upload,
/// where a listing of the bucket per new file cost each push of many files dearly).
#[derive(Debug, Default, serde::Deserialize)]
pub struct LookupQuery {
    reconstruction: Option<String>,
    fresh: Option<String>,
}

pub async fn get(
    State(state): State<SharedState>,
    params: Result<Path<String>, PathRejection>,
    query: Result<Query<LookupQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, limited_to) = state.authorize_cas(&headers, Scope::Read, "an LFS oid lookup")?;
    let Path(text) = params.map_err(|e| ApiError::new(ErrorCode::InvalidUrlPath, e.to_string()))?;
    let oid = LfsOid::from_hex(&text).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidOid,
            format!("{text:?} is not a SHA-256 oid: {e}"),
        )
    })?;
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidQuery, e.to_string()))?;
    let with_plan = match query.reconstruction.as_deref() {
        None => false,
        Some("v2") => true,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("reconstruction={other:?}: only v2 is offered"),
            ))
        }
    };
    let fresh = match query.fresh.as_deref() {
        None => xet_store::cas::Freshness::CatchUpOnMiss,
        Some("index") => xet_store::cas::Freshness::IndexOnly,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("fresh={other:?}: only fresh=index is known"),
            ))
        }
    };
    let st = state.clone();
    let found = blocking(move || {
        let Some(found) = st.store.oid_file(&oid, limited_to.as_ref(), fresh)? else {
            return Ok(None);
        };
        let (file, size, checked) = (found.file, found.size, found.checked);
        // A lookup with a plan is a download's, which may read this node's copies of xorbs;
        // one without, an upload's question, is answered from the bucket.
        let purpose = match with_plan {
            true => xet_store::cas::Purpose::Download,
            false => xet_store::cas::Purpose::Upload,
        };
        let intact = st
            .store
            .file_damage_memo(&file, purpose, &mut Default::default())?
            .is_none();
        // A plan that cannot be made is left out: the reconstruction route reports why.
        let plan = (with_plan && intact)
            .then(|| small_plan(&st.store, &file, size))
            .flatten()
            .and_then(|p| inline_v2(&st, &p));
        Ok(Some((file, size, intact, checked, plan)))
    })
    .await?;
    let mut response = match found {
        Some((file, size, intact, checked, plan)) => Json(LfsFile {
            oid,
            file_hash: file,
            size,
            intact: Some(intact),
            sha256_checked: Some(checked),
            reconstruction: plan,
        })
        .into_response(),
        None => ApiError::missing(
            &state.store,
            ErrorCode::OidNotFound,
            format!("no file with LFS oid {oid} is stored on this server"),
        )
        .into_response(),
    };
    response
        .headers_mut()
        .insert(CHECKS_SHA256_HEADER, HeaderValue::from_static("1"));
    Ok(response)
}
