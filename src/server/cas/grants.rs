//! Xorb upload grants (docs/cas-api.md §5.11), as the reference client (hf-xet 1.8) asks for
//! them before each xorb:
//!
//! 1. `POST /v1/xorb-grants/{prefix}/{xorb}` (write scope), body
//!    `{"length": N, "checksum": {"algo": "crc64nvme", "value": "<decimal>"}}`: 200 when the
//!    xorb is stored already, else 201 with a grant `{"id", "method": "PUT", "url", "headers"}`.
//!    The grant id is signed and carries the xorb, the length, the checksum and an expiry
//!    ([`crate::server::auth::UploadGrant`]), so the server keeps no state for it and any node
//!    sharing the key honours it. A checksum algorithm other than CRC-64/NVME gets 404, which
//!    makes the client upload through `POST /v1/xorbs` instead; a length of 0 is 400
//!    `invalid_grant_request` (a xorb has bytes), one over the xorb body limit 413.
//! 2. `PUT /v1/xorb-uploads/{id}` (the grant URL, no `Authorization`: the id is the
//!    capability): the body must have the granted length and checksum (400 otherwise; 403 when
//!    the grant expired, which makes the client ask for a new one). It is spooled, validated
//!    against the xorb hash like a direct upload, and stored. A xorb stored already is 412,
//!    which the client takes as done.
//! 3. `POST /v1/xorb-commits/{prefix}/{xorb}/grant/{id}` (write scope): 200 once the xorb is
//!    stored, 404 `grant_not_found` if it is not (the client starts over with a new grant).
//!    The answer is `{"was_inserted": bool}` as for a direct upload: `true` for the first
//!    commit of a grant whose upload stored the xorb, `false` when the xorb was there already
//!    (stored by another upload, or this grant committed before).
//!
//! The body of step 2 goes through the same limits, spool and ingest slot as a direct upload.
//!
//! **What a commit remembers.** Grants are stateless, so to tell a first commit from a repeated
//! one the node keeps, in memory, the grants whose upload stored a xorb here and that were not
//! committed yet ([`Uncommitted`], at most [`MAX_UNCOMMITTED`]). A commit that finds its grant
//! there takes it out and answers `true`; any other commit of a stored xorb answers `false`,
//! including a first commit that reaches another node than the upload did, or comes after a
//! restart, or whose grant was not kept because the set was full. Both answers are success: the
//! xorb is stored either way.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use xet_protocol::wire::ErrorCode;

use super::super::auth::{now_unix, AuthError, Scope, UploadGrant};
use super::super::body::{check_declared, content_length, drain, read_body, spool_body};
use super::super::error::ApiError;
use super::super::{blocking, parse_hash, SharedState};
use super::upload::XORB_BODY_LIMIT;
use xet_format::XorbHash;
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::wire::XorbUploaded;

/// The body of a grant request is a small JSON object; at most this much is read.
const GRANT_BODY_LIMIT: u64 = 64 * 1024;

/// How long a grant may be used for the upload.
pub(crate) const GRANT_TTL_SECS: u64 = 3600;

/// Most grants [`Uncommitted`] keeps (about 100 bytes each).
pub(crate) const MAX_UNCOMMITTED: usize = 16_384;

/// The grants whose upload stored a xorb on this node and that were not committed yet (see the
/// module documentation). Bounded: when it is full, grants that expired more than
/// [`GRANT_TTL_SECS`] ago (whose commit is long overdue) make room; when none did, a new grant
/// is not kept, and its commit will answer `was_inserted: false`.
#[derive(Debug, Default)]
pub(crate) struct Uncommitted(std::sync::Mutex<std::collections::HashSet<UploadGrant>>);

impl Uncommitted {
    /// Remembers that `grant`'s upload stored its xorb; `false` if there was no room.
    pub(crate) fn insert(&self, grant: UploadGrant, now: u64) -> bool {
        let mut set = self.0.lock_anyway();
        if set.len() >= MAX_UNCOMMITTED {
            set.retain(|g| g.expires.saturating_add(GRANT_TTL_SECS) >= now);
        }
        if set.len() >= MAX_UNCOMMITTED {
            return false;
        }
        set.insert(grant);
        true
    }

    /// Whether `grant` stored its xorb here and was not committed yet; it is committed now.
    pub(crate) fn take(&self, grant: &UploadGrant) -> bool {
        self.0.lock_anyway().remove(grant)
    }
}

/// The checksum a grant request declares.
#[derive(Debug, Deserialize)]
struct Checksum {
    algo: String,
    value: String,
}

/// The body of `POST /v1/xorb-grants/…`.
#[derive(Debug, Deserialize)]
struct GrantRequest {
    length: u64,
    checksum: Checksum,
}

/// A grant, as the reference client reads it.
#[derive(Debug, Serialize)]
struct GrantAnswer {
    id: String,
    method: &'static str,
    url: String,
    headers: std::collections::HashMap<String, String>,
}

fn not_offered(why: String) -> ApiError {
    ApiError::new(ErrorCode::XorbGrantsNotOffered, why)
}

/// `POST /v1/xorb-grants/{prefix}/{xorb}`.
pub(crate) async fn post_grant(
    State(state): State<SharedState>,
    params: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    state.authorize_cas(&headers, Scope::Write, "asking for a xorb upload grant")?;
    let (prefix, hash) = super::path(params)?;
    super::check_prefix(&prefix, &["default"], "xorb upload grants")?;
    let xorb: XorbHash = parse_hash(&hash, "xorb hash")?;
    let bytes = read_body(
        &state.resources.body_budget,
        &headers,
        body,
        GRANT_BODY_LIMIT,
        "xorb grant request",
    )
    .await?;
    let request: GrantRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidGrantRequest,
            format!(
                "the grant request for xorb {xorb} is not {{\"length\", \"checksum\"}} JSON: {e}"
            ),
        )
    })?;
    if !request.checksum.algo.eq_ignore_ascii_case("crc64nvme") {
        return Err(not_offered(format!(
            "checksum {:?} is not offered (only crc64nvme): upload xorb {xorb} with POST /v1/xorbs/default/{xorb}",
            xet_protocol::redact::clip(&request.checksum.algo, 40)
        )));
    }
    let crc64nvme: u64 = request.checksum.value.trim().parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidGrantRequest,
            format!("the crc64nvme of xorb {xorb} is not a decimal u64"),
        )
    })?;
    if request.length == 0 {
        return Err(ApiError::new(
            ErrorCode::InvalidGrantRequest,
            format!(
                "the grant request for xorb {xorb} has length 0: the length of the xorb's body \
                 must be a positive number of bytes"
            ),
        ));
    }
    if request.length > XORB_BODY_LIMIT {
        return Err(ApiError::too_large(
            &format!("xorb {xorb}"),
            request.length,
            XORB_BODY_LIMIT,
        ));
    }
    let st = state.clone();
    if blocking(move || Ok(st.store.already_stored(&xorb)?)).await? {
        return Ok(super::no_store(
            (StatusCode::OK, Json(serde_json::json!({}))).into_response(),
        ));
    }
    let grant = UploadGrant {
        xorb,
        length: request.length,
        crc64nvme,
        expires: now_unix().saturating_add(GRANT_TTL_SECS),
    };
    let id = state.auth.issue_upload_grant(&grant);
    let answer = GrantAnswer {
        url: format!("{}/v1/xorb-uploads/{id}", state.public_url),
        id,
        method: "PUT",
        headers: Default::default(),
    };
    tracing::debug!(%xorb, length = request.length, "xorb upload grant");
    Ok(super::no_store(
        (StatusCode::CREATED, Json(answer)).into_response(),
    ))
}

/// The grant `id` names, or a 403 saying why not.
fn grant_of(state: &SharedState, id: &str, check_expiry: bool) -> Result<UploadGrant, ApiError> {
    let grant = state.auth.verify_upload_grant(id).map_err(|e| match e {
        AuthError::Invalid => ApiError::new(
            ErrorCode::InvalidGrant,
            "the upload grant is not valid: ask for a new one",
        ),
        other => ApiError::new(ErrorCode::InvalidGrant, other.to_string()),
    })?;
    let now = now_unix();
    if check_expiry && grant.expires < now {
        return Err(ApiError::new(
            ErrorCode::GrantExpired,
            format!(
                "the upload grant for xorb {} expired at {} (now {now}): ask for a new one",
                grant.xorb, grant.expires
            ),
        ));
    }
    Ok(grant)
}

/// `PUT /v1/xorb-uploads/{id}`: the body of a granted upload.
pub(crate) async fn put_upload(
    State(state): State<SharedState>,
    params: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = super::path(params)?;
    let grant = grant_of(&state, &id, true)?;
    let xorb = grant.xorb;
    let what = format!("xorb {xorb} (upload grant)");
    match content_length(&headers) {
        Some(n) if n != grant.length => {
            return Err(ApiError::new(
                ErrorCode::LengthMismatch,
                format!(
                    "{what}: the body declares {n} bytes, the grant {}",
                    grant.length
                ),
            ))
        }
        _ => {}
    }
    check_declared(&headers, grant.length, &what)?;
    let st = state.clone();
    if blocking(move || Ok(st.store.already_stored(&xorb)?)).await? {
        let len = drain(body, Some(grant.length), &what).await?;
        state.metrics.received_xorb_bytes.inc_by(len);
        return Ok(ApiError::new(
            ErrorCode::AlreadyStored,
            format!("{what} is stored already"),
        )
        .into_response());
    }
    let spooled = spool_body(
        &state.store,
        Some(grant.length),
        body,
        Some(grant.length),
        false,
        &what,
    )
    .await?;
    state.metrics.received_xorb_bytes.inc_by(spooled.len);
    if spooled.len != grant.length {
        return Err(ApiError::new(
            ErrorCode::LengthMismatch,
            format!(
                "{what}: {} bytes arrived, the grant is for {}",
                spooled.len, grant.length
            ),
        ));
    }
    let slot = state.resources.ingest_slot().await?;
    let st = state.clone();
    let len = spooled.len;
    let inserted = blocking(move || {
        let crc = crc64nvme_of(&spooled.path)
            .map_err(|e| ApiError::io(&format!("{what}: cannot read the spooled body"), &e))?;
        if crc != grant.crc64nvme {
            return Err(ApiError::new(
                ErrorCode::ChecksumMismatch,
                format!(
                    "{what}: the body's crc64nvme is {crc}, the grant's {}",
                    grant.crc64nvme
                ),
            ));
        }
        let stored = st.store.put_xorb_file(xorb, &spooled.path);
        drop((spooled, slot));
        Ok(stored?)
    })
    .await?;
    if inserted {
        state.metrics.stored_xorb_bytes.inc_by(len);
        if !state.uncommitted.insert(grant, now_unix()) {
            tracing::debug!(%xorb, "too many uncommitted grants: its commit will say was_inserted: false");
        }
    }
    tracing::info!(%xorb, bytes = len, inserted, "xorb upload through a grant");
    Ok(super::no_store(StatusCode::OK.into_response()))
}

/// `POST /v1/xorb-commits/{prefix}/{xorb}/grant/{id}`.
pub(crate) async fn post_commit(
    State(state): State<SharedState>,
    params: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.authorize_cas(&headers, Scope::Write, "committing a xorb upload")?;
    let (prefix, hash, id) = super::path(params)?;
    super::check_prefix(&prefix, &["default"], "xorb commits")?;
    let xorb: XorbHash = parse_hash(&hash, "xorb hash")?;
    let grant = grant_of(&state, &id, false)?;
    if grant.xorb != xorb {
        return Err(ApiError::new(
            ErrorCode::GrantMismatch,
            format!("the grant is for xorb {}, not {xorb}", grant.xorb),
        ));
    }
    let st = state.clone();
    if !blocking(move || Ok(st.store.has_xorb(&xorb)?)).await? {
        return Err(ApiError::new(
            ErrorCode::GrantNotFound,
            format!("nothing was stored through this grant for xorb {xorb}: ask for a new grant"),
        ));
    }
    let was_inserted = state.uncommitted.take(&grant);
    Ok(super::no_store(
        Json(XorbUploaded { was_inserted }).into_response(),
    ))
}

/// The CRC-64/NVME of the file at `path`, read in pieces.
fn crc64nvme_of(path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(digest.finalize());
        }
        digest.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(n: u8, expires: u64) -> UploadGrant {
        UploadGrant {
            xorb: XorbHash::from_bytes([n; 32]),
            length: 10,
            crc64nvme: 1,
            expires,
        }
    }

    #[test]
    fn a_grant_is_committed_once_and_the_set_is_bounded() {
        let u = Uncommitted::default();
        assert!(u.insert(grant(1, 100), 50));
        assert!(!u.take(&grant(2, 100)), "never stored through here");
        assert!(!u.take(&grant(1, 101)), "another grant of the same xorb");
        assert!(u.take(&grant(1, 100)));
        assert!(!u.take(&grant(1, 100)), "committed already");
        // Full: a new grant is not kept until old ones are long expired.
        let now = 1_000_000;
        for i in 0..MAX_UNCOMMITTED {
            assert!(u.insert(grant(3, now + i as u64), now));
        }
        assert!(!u.insert(grant(4, now), now));
        assert!(!u.take(&grant(4, now)));
        let later = now + 1 + GRANT_TTL_SECS;
        assert!(u.insert(grant(4, later), later), "the oldest made room");
        assert!(!u.take(&grant(3, now)), "dropped");
        assert!(u.take(&grant(3, now + 2)), "kept");
        assert!(u.take(&grant(4, later)));
    }

    #[test]
    fn crc64nvme_of_a_known_vector() {
        // The CRC-64/NVME check value: "123456789".
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v");
        std::fs::write(&path, b"123456789").unwrap();
        assert_eq!(super::crc64nvme_of(&path).unwrap(), 0xae8b_1486_0a79_9888);
    }
}
