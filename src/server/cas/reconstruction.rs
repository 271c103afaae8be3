//! `GET /v1/reconstructions/{file}` and `GET /v2/reconstructions/{file}` (docs/cas-api.md §5.1, §6):
//! the store's reconstruction plan as the v1 or v2 JSON, with presigned `xorb-data` URLs
//! ([`Presigner`]): each URL grants exactly the byte ranges of the entry it is issued for, so a
//! reader of one file never gets the other bytes of a xorb it shares with other files.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use xet_protocol::wire::ErrorCode;

use super::super::auth::{now_unix, Scope};
use super::super::error::ApiError;
use super::super::{blocking, parse_hash, SharedState};
use std::ops::RangeInclusive;

use xet_format::{FileHash, XorbHash};
use xet_protocol::reconstruction::PlanError;
use xet_protocol::util::range::{parse_byte_ranges, ByteRangeSpec, GrantedRanges};
use xet_store::backend::RangeSigner;
use xet_store::StoreError;

pub use super::plan_json::{to_batch_v1, to_v1, to_v2, FetchUrls, RANGES_PER_ENTRY};
pub use xet_protocol::wire::{
    BatchReconstructionV1, ByteRange, ChunkRange, FetchInfoV1, RangeV2, ReconstructionV1,
    ReconstructionV2, Term, XorbEntryV2, MAX_BATCH_FILES,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

pub(crate) async fn get_v1(
    State(state): State<SharedState>,
    hash: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    respond(state, hash, headers, Version::V1).await
}

pub(crate) async fn get_v2(
    State(state): State<SharedState>,
    hash: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    respond(state, hash, headers, Version::V2).await
}

async fn respond(
    state: SharedState,
    hash: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    version: Version,
) -> Response {
    match reconstruct(state, hash, &headers, version).await {
        Ok(r) => r,
        Err(r) => r,
    }
}

async fn reconstruct(
    state: SharedState,
    hash: Result<Path<String>, PathRejection>,
    headers: &HeaderMap,
    version: Version,
) -> Result<Response, Response> {
    let fail = |e: ApiError| e.into_response();
    let (_, limited_to) = state
        .authorize_cas(headers, Scope::Read, "reading a reconstruction")
        .map_err(fail)?;
    let hash = super::path(hash).map_err(fail)?;
    let file: FileHash = parse_hash(&hash, "file hash").map_err(fail)?;
    let range = match headers.get(header::RANGE) {
        None => None,
        Some(v) => Some(parse_range(v).map_err(fail)?),
    };
    let st = state.clone();
    let answered = blocking(move || {
        // The empty file is answered with an empty plan whatever the range (docs/cas-api.md §5.1).
        let range = if file.is_zero() { None } else { range };
        // A file another repository registered is not there for a token limited to one.
        if !st.store.visible_to(&file, limited_to.as_ref())? {
            return Ok(Ok(None));
        }
        let plan = match st.store.reconstruction(&file, range) {
            Ok(Some(plan)) => plan,
            Ok(None) => return Ok(Ok(None)),
            Err(e) => return Ok(Err(e)),
        };
        tracing::debug!(%file, terms = plan.terms.len(), v = ?version, "reconstruction");
        // Signing URLs of the bucket may ask for its credentials: done here, off the workers.
        let urls = Presigner::new(&st);
        Ok(Ok(Some(match version {
            Version::V1 => Json(to_v1(&plan, &urls)).into_response(),
            Version::V2 => Json(to_v2(&plan, &urls)).into_response(),
        })))
    })
    .await
    .map_err(fail)?;
    let mut response = match answered {
        Ok(Some(response)) => response,
        Ok(None) => {
            return Err(fail(ApiError::missing(
                &state.store,
                ErrorCode::FileNotFound,
                format!("file {file} is not registered on this server"),
            )))
        }
        Err(e) => {
            let size = match &e {
                StoreError::Plan {
                    source: PlanError::NotSatisfiable { size, .. },
                    ..
                } => Some(*size),
                _ => None,
            };
            let mut response = ApiError::from(e).into_response();
            if let Some(size) = size {
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    response.headers_mut().insert(header::CONTENT_RANGE, v);
                }
            }
            return Err(response);
        }
    };
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    Ok(response)
}

/// `GET /v1/reconstructions?file_id=A&file_id=B…` (the reference client's batch query,
/// docs/cas-api.md §5.1): the v1 terms of each file the caller may read and the fetch entries of
/// their xorbs ([`to_batch_v1`]: touching ranges share one URL). Files that are not there (or
/// whose plan cannot be made) are left out; at most [`MAX_BATCH_FILES`] ids.
pub(crate) async fn get_batch(
    State(state): State<SharedState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    match batch(state, query, &headers).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn batch(
    state: SharedState,
    query: Option<String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (_, limited_to) = state.authorize_cas(headers, Scope::Read, "reading reconstructions")?;
    let files = batch_ids(query.as_deref().unwrap_or(""))?;
    let st = state.clone();
    let answer = blocking(move || {
        let mut plans = Vec::with_capacity(files.len());
        for file in files {
            if file.is_zero() || !st.store.visible_to(&file, limited_to.as_ref())? {
                continue;
            }
            match st.store.reconstruction(&file, None) {
                Ok(Some(plan)) => plans.push((file, plan)),
                Ok(None) => {}
                Err(e) => tracing::debug!(%file, "left out of a batch reconstruction: {e}"),
            }
        }
        tracing::debug!(files = plans.len(), "batch reconstruction");
        Ok(to_batch_v1(&plans, &Presigner::new(&st)))
    })
    .await?;
    let mut response = Json(answer).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    Ok(response)
}

/// The distinct file hashes of a batch query (`file_id=…` pairs; other keys are ignored).
fn batch_ids(query: &str) -> Result<Vec<FileHash>, ApiError> {
    let mut files: Vec<FileHash> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let Some(("file_id", value)) = pair.split_once('=') else {
            continue;
        };
        let file: FileHash = parse_hash(value, "file_id")?;
        if !files.contains(&file) {
            files.push(file);
        }
        if files.len() > MAX_BATCH_FILES {
            return Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("more than {MAX_BATCH_FILES} file_id values; ask in smaller batches"),
            ));
        }
    }
    if files.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "no file_id: ask /v1/reconstructions?file_id=<hash>&file_id=<hash>…",
        ));
    }
    Ok(files)
}

/// Files up to this size get their reconstruction sent along with the answer that names them
/// (download actions of the batch API, `GET /v1/lfs-files/{oid}?reconstruction=v2`).
pub(crate) const INLINE_MAX_SIZE: u64 = 4 << 20;

/// The longest reconstruction JSON sent along; longer ones are left to this route.
pub(crate) const INLINE_MAX_JSON: usize = 8 << 10;

/// The plan of `file` (of `size` bytes) to send along with another answer: for a file of at
/// most [`INLINE_MAX_SIZE`] bytes whose plan can be made. A plan that cannot be made is left
/// out; this route reports why when the client asks it.
pub(crate) fn small_plan(
    store: &xet_store::Store,
    file: &FileHash,
    size: u64,
) -> Option<xet_protocol::ReconstructionPlan> {
    if size > INLINE_MAX_SIZE || file.is_zero() {
        return None;
    }
    store.reconstruction(file, None).ok().flatten()
}

/// The v2 answer for `plan`, with presigned URLs, if its JSON is at most [`INLINE_MAX_JSON`]
/// long: what is sent along with another answer. Blocking with `--storage-urls` (see
/// [`Presigner::new`]).
pub(crate) fn inline_v2(
    state: &crate::server::AppState,
    plan: &xet_protocol::ReconstructionPlan,
) -> Option<ReconstructionV2> {
    let v2 = to_v2(plan, &Presigner::new(state));
    let len = serde_json::to_vec(&v2).ok()?.len();
    (len <= INLINE_MAX_JSON).then_some(v2)
}

/// The fetch URLs of one answer (see the module documentation): presigned `xorb-data` URLs of
/// this server, valid for the server's URL lifetime from now, each granting exactly the byte
/// ranges of its entry; with `--storage-urls`, presigned URLs of the object storage itself (the
/// stored object has the same bytes at the same offsets), one per range, whose signature
/// covers that `Range` header, falling back to the server's own where one cannot be made.
pub(crate) struct Presigner<'a> {
    state: &'a crate::server::AppState,
    expires: u64,
    storage: Option<Box<dyn RangeSigner>>,
}

impl<'a> Presigner<'a> {
    /// The URLs of an answer made now. With `--storage-urls` this may wait for the storage's
    /// credentials: call it where blocking is allowed.
    pub fn new(state: &'a crate::server::AppState) -> Self {
        let storage = if state.storage_urls {
            state.store.range_signer(state.url_ttl)
        } else {
            None
        };
        Self {
            state,
            expires: now_unix().saturating_add(state.url_ttl.as_secs()),
            storage,
        }
    }
}

impl FetchUrls for Presigner<'_> {
    fn url(&self, xorb: &XorbHash, ranges: &[RangeInclusive<u64>]) -> String {
        if let (Some(signer), [range]) = (&self.storage, ranges) {
            if let Some(url) = signer.sign(xorb, range) {
                return url;
            }
        }
        let query = match GrantedRanges::new(ranges.iter().cloned()) {
            Some(granted) => self.state.auth.presign(xorb, self.expires, &granted),
            None => {
                // Entries hold 1 to RANGES_PER_ENTRY ranges: never reached. A URL that
                // grants nothing is refused by xorb-data with a clear error.
                tracing::error!(%xorb, ranges = ranges.len(), "no URL can grant these ranges");
                String::from("e=0")
            }
        };
        format!("{}/v1/xorb-data/{xorb}?{query}", self.state.public_url)
    }

    fn ranges_per_url(&self) -> usize {
        if self.storage.is_some() {
            1
        } else {
            RANGES_PER_ENTRY
        }
    }
}

/// Parses a reconstruction `Range`: `bytes=S-E` (inclusive) or `bytes=S-` (to the end).
fn parse_range(value: &HeaderValue) -> Result<(u64, u64), ApiError> {
    let bad = |why: &str| {
        ApiError::new(
            ErrorCode::InvalidRange,
            format!(
                "Range {:?} {why}: use bytes=START-END (inclusive)",
                String::from_utf8_lossy(value.as_bytes())
            ),
        )
    };
    let text = value.to_str().map_err(|_| bad("is not ASCII"))?;
    let specs = parse_byte_ranges(text).map_err(|e| bad(&e.to_string()))?;
    match specs[..] {
        [ByteRangeSpec::From { first, last }] => Ok((first, last.unwrap_or(u64::MAX))),
        _ => Err(bad("is not one START-END range")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn range(s: &str) -> Result<(u64, u64), StatusCode> {
        parse_range(&HeaderValue::from_str(s).unwrap()).map_err(|e| e.status())
    }

    #[test]
    fn reconstruction_ranges() {
        assert_eq!(range("bytes=0-99"), Ok((0, 99)));
        assert_eq!(range("BYTES= 5 - 7 "), Ok((5, 7)));
        assert_eq!(range("bytes=10-"), Ok((10, u64::MAX)));
        for bad in [
            "bytes=-5",
            "bytes=5-4",
            "items=0-1",
            "bytes=a-b",
            "bytes=0-1,3-4",
            "bytes=99999999999999999999-",
            "bytes",
            "",
        ] {
            assert_eq!(range(bad), Err(StatusCode::BAD_REQUEST), "{bad}");
        }
    }
}
