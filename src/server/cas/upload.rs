//! The write side of the CAS API: xorb uploads (docs/cas-api.md §5.5, §9.2), shard uploads v1 and v2
//! (§5.6, §5.7, §9.3) and telemetry (§5.10); upload grants are [`super::grants`].
//!
//! Sizes are checked against `Content-Length` before a body is read (413), and again as the
//! body arrives. A xorb body is spooled to a file in the store's spool directory
//! ([`crate::server::body::spool_body`]) and validated from there once it has fully arrived, in
//! an ingest slot ([`crate::server::limits::Resources::ingest_slot`]); shards, grants and
//! telemetry are read into memory under the server's body budget. Validation and storage run
//! on blocking threads.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use xet_protocol::wire::ErrorCode;
use xet_store::RepoName;

use super::super::auth::Scope;
use super::super::body::{check_declared, content_length, drain, read_body, spool_body, SmallBody};
use super::super::claims;
use super::super::error::ApiError;
use super::super::{blocking, parse_hash, SharedState};
use super::progress::{self, Failure, Frame};
use xet_format::shard::{FOOTER_SIZE, HEADER_SIZE, HEADER_TAG, HEADER_VERSION, MAX_SHARD_SIZE};
use xet_format::xorb::footer::v1_len;
use xet_format::xorb::{MAX_ACCEPTED_BODY, MAX_XORB_CHUNKS};
use xet_format::XorbHash;
use xet_protocol::wire::{ShardRegistered, XorbUploaded};
use xet_store::StoreError;

/// The largest xorb upload body: the chunk-region limit plus a trailing V1 footer of
/// [`MAX_XORB_CHUNKS`] chunks with its `info_length` (older clients send one).
pub const XORB_BODY_LIMIT: u64 = MAX_ACCEPTED_BODY + v1_len(MAX_XORB_CHUNKS as u64) + 4;
/// The largest telemetry body (docs/cas-api.md §5.10).
pub const TELEMETRY_LIMIT: u64 = 1024 * 1024;

fn empty_body(what: String) -> ApiError {
    ApiError::new(ErrorCode::EmptyBody, format!("{what}: the body is empty"))
}

/// `POST /v1/xorbs/{prefix}/{xorb}`: validates the body against the hash in the path and stores
/// it. `{"was_inserted": false}` when it was already stored (the body is read, not validated).
pub async fn post_xorb(
    State(state): State<SharedState>,
    params: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    state.authorize_cas(&headers, Scope::Write, "uploading a xorb")?;
    let (prefix, hash) = super::path(params)?;
    super::check_prefix(&prefix, &["default"], "xorb uploads")?;
    let xorb: XorbHash = parse_hash(&hash, "xorb hash")?;
    let what = format!("xorb {xorb}");
    if content_length(&headers) == Some(0) {
        return Err(empty_body(what));
    }
    check_declared(&headers, XORB_BODY_LIMIT, &what)?;
    let st = state.clone();
    if blocking(move || Ok(st.store.already_stored(&xorb)?)).await? {
        let len = drain(body, Some(XORB_BODY_LIMIT), &what).await?;
        state.metrics.received_xorb_bytes.inc_by(len);
        tracing::info!(%xorb, bytes = len, inserted = false, "xorb upload: already stored");
        return Ok(uploaded(false));
    }
    let spooled = spool_body(
        &state.store,
        content_length(&headers),
        body,
        Some(XORB_BODY_LIMIT),
        false,
        &what,
    )
    .await?;
    if spooled.len == 0 {
        return Err(empty_body(what));
    }
    let len = spooled.len;
    state.metrics.received_xorb_bytes.inc_by(len);
    let slot = state.resources.ingest_slot().await?;
    let st = state.clone();
    let inserted = blocking(move || {
        let stored = st.store.put_xorb_file(xorb, &spooled.path);
        drop((spooled, slot));
        Ok(stored?)
    })
    .await?;
    if inserted {
        state.metrics.stored_xorb_bytes.inc_by(len);
    }
    tracing::info!(%xorb, bytes = len, inserted, "xorb upload");
    Ok(uploaded(inserted))
}

fn uploaded(was_inserted: bool) -> Response {
    super::no_store(Json(XorbUploaded { was_inserted }).into_response())
}

/// Reads a shard upload body (≤ 64 MiB, non-empty), with the repository the credential
/// registers files through (a CAS token's).
async fn shard_body(
    state: &SharedState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(SmallBody, Option<RepoName>), ApiError> {
    let (grant, _) = state.authorize_cas(headers, Scope::Write, "uploading a shard")?;
    let repo = grant.registering_repo();
    if content_length(headers) == Some(0) {
        return Err(empty_body("shard".into()));
    }
    let bytes = read_body(
        &state.resources.body_budget,
        headers,
        body,
        MAX_SHARD_SIZE,
        "shard",
    )
    .await?;
    if bytes.is_empty() {
        return Err(empty_body("shard".into()));
    }
    Ok((bytes, repo))
}

/// Records a shard registered now as a push, for the status page (blocks).
fn record_shard_push(
    store: &xet_store::Store,
    shard: &[u8],
    repo: Option<RepoName>,
    outcome: &xet_store::ShardOutcome,
) {
    if !outcome.newly_registered {
        return;
    }
    let push = crate::server::status::push_now(
        repo.map(String::from),
        xet_store::stats::PushKind::Shard,
        outcome.files as u64,
        crate::server::status::shard_file_bytes(shard),
        Some((outcome.new_files as u64, outcome.new_bytes)),
    );
    crate::server::status::record_push(store, push);
}

/// `POST /v1/shards`: `{"result": 1}` when registered now, `{"result": 0}` when it already was.
pub(crate) async fn post_shard_v1(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (bytes, repo) = shard_body(&state, &headers, body).await?;
    let st = state.clone();
    let outcome = blocking(move || {
        let outcome =
            st.store
                .register_shard_staged(&bytes, &mut |_| {}, &mut || {}, repo.as_ref())?;
        claims::check_now(&st.store, &outcome.claims);
        record_shard_push(&st.store, &bytes, repo, &outcome);
        Ok(outcome)
    })
    .await?;
    tracing::info!(
        shard = %outcome.shard,
        new = outcome.newly_registered,
        files = outcome.files,
        new_files = outcome.new_files,
        "shard upload (v1)"
    );
    Ok(super::no_store(
        Json(ShardRegistered {
            result: u8::from(outcome.newly_registered),
        })
        .into_response(),
    ))
}

/// The checks of the shard header (docs/cas-api.md §9.3 item 2) made before the v2 stream starts,
/// so that a body that is not a shard at all gets an ordinary 400.
fn check_shard_header(bytes: &[u8]) -> Result<(), ApiError> {
    let bad = |why: String| ApiError::new(ErrorCode::InvalidShard, format!("shard: {why}"));
    if (bytes.len() as u64) < HEADER_SIZE {
        return Err(bad(format!(
            "{} bytes is shorter than the {HEADER_SIZE}-byte header",
            bytes.len()
        )));
    }
    if bytes[..32] != HEADER_TAG {
        return Err(bad("the header does not start with the shard tag".into()));
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    if word(32) != HEADER_VERSION {
        return Err(bad(format!(
            "header version {} (expected {HEADER_VERSION})",
            word(32)
        )));
    }
    let footer_size = word(40);
    if footer_size != 0 && footer_size != FOOTER_SIZE {
        return Err(bad(format!(
            "footer_size {footer_size} (expected 0 or {FOOTER_SIZE})"
        )));
    }
    Ok(())
}

/// `POST /v2/shards`: 200 and an NDJSON progress stream (see [`progress`]).
pub(crate) async fn post_shard_v2(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (bytes, repo) = shard_body(&state, &headers, body).await?;
    check_shard_header(&bytes)?;
    let store = state.store.clone();
    let body = progress::stream(state.shard_heartbeat, move |reporter| {
        let outcome = store.register_shard_staged(
            &bytes,
            &mut |p| {
                reporter.report(Frame::Validating {
                    verified: p.verified,
                    total: p.total,
                })
            },
            &mut || {
                reporter.report(Frame::Committing {
                    stage: "syncing".into(),
                })
            },
            repo.as_ref(),
        );
        match outcome {
            Ok(o) => {
                claims::check_now(&store, &o.claims);
                record_shard_push(&store, &bytes, repo, &o);
                tracing::info!(
                    shard = %o.shard,
                    new = o.newly_registered,
                    files = o.files,
                    new_files = o.new_files,
                    "shard upload (v2)"
                );
                Ok(())
            }
            Err(e) => {
                // A full disk is not worth an immediate retry (cf. 507 elsewhere).
                let retryable = !e.is_client_error() && !e.is_storage_full();
                if retryable {
                    tracing::error!(error = %e, "shard upload (v2) failed in the store");
                } else {
                    tracing::info!(error = %e, "shard upload (v2) refused");
                }
                // What the client sees, as for every other route: the store's own failures
                // (paths, system errors) stay in the log.
                let message = if e.is_client_error() || matches!(e, StoreError::DamagedXorb { .. })
                {
                    e.to_string()
                } else {
                    ApiError::from(e).message
                };
                Err(Failure { message, retryable })
            }
        }
    });
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `POST /v1/telemetry`: a JSON object of at most 1 MiB is accepted and discarded.
pub(crate) async fn post_telemetry(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    state.authorize(&headers, Scope::Read, "sending telemetry")?;
    let bytes = read_body(
        &state.resources.body_budget,
        &headers,
        body,
        TELEMETRY_LIMIT,
        "telemetry",
    )
    .await?;
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(_)) => {}
        Ok(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidTelemetry,
                "telemetry must be a JSON object",
            ))
        }
        Err(e) => {
            return Err(ApiError::new(
                ErrorCode::InvalidTelemetry,
                format!("telemetry is not valid JSON: {e}"),
            ))
        }
    }
    Ok(super::no_store(Json(serde_json::json!({})).into_response()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        // 64 MiB + 64 KiB of chunks, plus a footer of 8192 chunks (92 + 40 · 8192) and 4 bytes.
        assert_eq!(XORB_BODY_LIMIT, 67_174_400 + 327_772 + 4);
    }

    #[test]
    fn shard_headers() {
        let mut h = Vec::from(HEADER_TAG);
        h.extend_from_slice(&HEADER_VERSION.to_le_bytes());
        h.extend_from_slice(&0u64.to_le_bytes());
        assert!(check_shard_header(&h).is_ok());
        h[40] = 200;
        assert!(check_shard_header(&h).is_ok());
        h[40] = 7;
        assert!(check_shard_header(&h).is_err());
        assert!(check_shard_header(&h[..40]).is_err());
        assert!(check_shard_header(b"{\"not\": \"a shard\"} padding padding padding ...").is_err());
    }
}
