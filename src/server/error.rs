//! The JSON error every refused request gets: a status, a stable machine-readable code and one
//! sentence saying what was wrong (docs/cas-api.md §9). The request-id middleware adds
//! `request_id` to the body.
//!
//! This module is the one place where failures become statuses: every [`ErrorCode`] has one
//! HTTP status ([`status_of`]), so a handler names what went wrong and never picks a status.
//! The storage engine's errors become codes here too ([`From<StoreError>`](ApiError#impl-From%3CStoreError%3E-for-ApiError),
//! [`shard_rejection_code`]). In short:
//!
//! | failure | status, code |
//! |---|---|
//! | bad input (xorb, shard, range) | 400 / 413 / 416 with a specific code |
//! | a request body that stopped arriving | 408 `body_timeout` |
//! | a route class or the request-body memory budget saturated | 503 `server_busy`, `Retry-After` |
//! | the disk (or quota) is full | 507 `insufficient_storage` (clients do not retry it) |
//! | a stored xorb found damaged | 500 `xorb_damaged` (final for clients) |
//! | any other storage failure | 500 `internal_error` |

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use xet_protocol::wire::ErrorCode;

use super::auth::AuthError;
use xet_store::StoreError;

/// A refused or failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Seconds for a `Retry-After` header (503 answers).
    pub retry_after: Option<u64>,
}

/// Seconds a client waits before asking a node that is catching up again.
pub(crate) const CATCHING_UP_RETRY_SECS: u64 = 2;

impl ApiError {
    /// A refusal with `code` (whose status is [`status_of`] it) saying `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The HTTP status of this refusal: its code's.
    pub fn status(&self) -> StatusCode {
        status_of(self.code)
    }

    /// 503 `server_busy` with `Retry-After: retry_after_secs`: a limit of the server is reached
    /// for now (clients retry later).
    pub fn busy(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::new(ErrorCode::ServerBusy, message)
        }
    }

    /// 404 for what this server does not have; but while a node on shared storage is still
    /// registering the shards in storage (its first catch-up), 429 `catching_up` with
    /// `Retry-After`: it may be there in a moment. git-lfs and git-xet's agent both retry a 429.
    pub fn missing(store: &xet_store::Store, code: ErrorCode, message: impl Into<String>) -> Self {
        if !store.catching_up() {
            return Self::new(code, message);
        }
        Self {
            retry_after: Some(CATCHING_UP_RETRY_SECS),
            ..Self::new(
                ErrorCode::CatchingUp,
                format!(
                    "{}; this server is still registering what the other nodes stored, try \
                     again in a few seconds",
                    message.into()
                ),
            )
        }
    }

    /// 507 `insufficient_storage`: the disk or quota is full. Not worth an immediate retry.
    /// `detail` (paths, free bytes) goes to the log; the client is told only what it can act
    /// on.
    pub(crate) fn storage_full(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "storage full: uploads are refused with 507 until space is freed");
        Self::new(
            ErrorCode::InsufficientStorage,
            "the server's storage is full; uploads fail until its administrator frees or adds \
             disk space",
        )
    }

    /// 408 `body_timeout`: the request body stopped arriving.
    pub fn body_timeout(what: &str, after: std::time::Duration) -> Self {
        Self::new(
            ErrorCode::BodyTimeout,
            format!(
                "{what}: no part of the request body arrived for {} s",
                after.as_secs_f64()
            ),
        )
    }

    /// The answer to a local I/O failure around a request (a spool file): 507 when the disk is
    /// full, else 500.
    pub fn io(what: &str, e: &std::io::Error) -> Self {
        let message = format!("{what}: {e}");
        if xet_store::cas::is_storage_full(e) {
            Self::storage_full(message)
        } else {
            tracing::error!(error = %message, "I/O failure");
            Self::internal(message)
        }
    }

    pub(crate) fn too_large(what: &str, len: u64, limit: u64) -> Self {
        Self::new(
            ErrorCode::BodyTooLarge,
            format!("{what} of {len} bytes exceeds the limit of {limit} bytes"),
        )
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, message)
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let code = match e {
            AuthError::Forbidden { .. } => ErrorCode::Forbidden,
            AuthError::Expired { .. } => ErrorCode::TokenExpired,
            _ => ErrorCode::Unauthorized,
        };
        Self::new(code, e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        use xet_protocol::reconstruction::PlanError;
        match &e {
            StoreError::InvalidXorb { source, .. } => {
                let code = match source {
                    xet_format::xorb::XorbError::HashMismatch { .. } => ErrorCode::XorbHashMismatch,
                    _ => ErrorCode::InvalidXorb,
                };
                Self::new(code, e.to_string())
            }
            StoreError::ShardRejected(r) => Self::new(shard_rejection_code(r), e.to_string()),
            StoreError::ShardTooLarge { len, max } => Self::too_large("shard", *len as u64, *max),
            StoreError::ClaimBacklog { .. } => Self {
                retry_after: Some(60),
                ..Self::new(ErrorCode::ClaimsBacklog, e.to_string())
            },
            StoreError::SweepInProgress { .. } => Self {
                retry_after: Some(5),
                ..Self::new(ErrorCode::ServerBusy, e.to_string())
            },
            StoreError::Plan {
                source: PlanError::NotSatisfiable { .. },
                ..
            } => Self::new(ErrorCode::RangeNotSatisfiable, e.to_string()),
            StoreError::Plan {
                source: PlanError::Inverted { .. },
                ..
            } => Self::new(ErrorCode::InvalidRange, e.to_string()),
            _ if e.is_storage_full() => {
                super::metrics::storage_error(super::metrics::StorageOperation::Request);
                Self::storage_full(&e)
            }
            StoreError::DamagedXorb { .. } => {
                super::metrics::storage_error(super::metrics::StorageOperation::Request);
                tracing::error!(error = %e, "damaged xorb");
                Self::new(ErrorCode::XorbDamaged, e.to_string())
            }
            _ => {
                // The details (paths, system errors) are for the operator's log.
                super::metrics::storage_error(super::metrics::StorageOperation::Request);
                tracing::error!(error = %e, "store failure");
                Self::internal("the server's storage failed; its log has the details")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.code, "message": self.message});
        let status = self.status();
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The HTTP status of each code, the one table of them: 4xx for what the client sent or may
/// not do (clients do not retry these), 429 and 503 for "later" (with `Retry-After`), 5xx for
/// the server's own failures.
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        // The request is malformed or its content does not check out.
        C::BodyReadFailed
        | C::ChecksumMismatch
        | C::ChunkRange
        | C::EmptyBody
        | C::FileHashMismatch
        | C::GrantMismatch
        | C::InvalidCursor
        | C::InvalidGrantRequest
        | C::InvalidHash
        | C::InvalidJson
        | C::InvalidLength
        | C::InvalidLimit
        | C::InvalidOid
        | C::InvalidQuery
        | C::InvalidRange
        | C::InvalidShard
        | C::InvalidTelemetry
        | C::InvalidUrlPath
        | C::InvalidXorb
        | C::KeyedShard
        | C::LengthMismatch
        | C::MissingVerification
        | C::NoTerms
        | C::UnknownFlags
        | C::UnknownPrefix
        | C::UnknownXorb
        | C::UnpackedLengthMismatch
        | C::VerificationMismatch
        | C::XorbBlockMismatch
        | C::XorbHashMismatch => StatusCode::BAD_REQUEST,
        // Well-formed JSON of the LFS API whose fields are not acceptable (git-lfs's convention).
        C::InvalidForce
        | C::InvalidObjects
        | C::InvalidOperation
        | C::InvalidPath
        | C::InvalidVerifyRequest
        | C::MissingPath
        | C::OidMismatch
        | C::PathTooLong
        | C::SizeMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        C::TokenExpired | C::Unauthorized => StatusCode::UNAUTHORIZED,
        C::CasTokenNotAccepted
        | C::Forbidden
        | C::GrantExpired
        | C::InvalidGrant
        | C::InvalidSignature
        | C::LockOwnedByAnotherUser
        | C::RangeNotGranted
        | C::RepositoryScopedToken
        | C::UrlExpired
        | C::WrongRepository => StatusCode::FORBIDDEN,
        C::ChunkNotFound
        | C::FileNotFound
        | C::GrantNotFound
        | C::LockNotFound
        | C::NotFound
        | C::ObjectNotFound
        | C::OidNotFound
        | C::XorbGrantsNotOffered
        | C::XorbNotFound => StatusCode::NOT_FOUND,
        C::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        C::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
        C::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        C::LockExists | C::UnsupportedHashAlgo => StatusCode::CONFLICT,
        C::AlreadyStored => StatusCode::PRECONDITION_FAILED,
        C::BodyTooLarge | C::TooManyObjects => StatusCode::PAYLOAD_TOO_LARGE,
        C::RangeNotSatisfiable => StatusCode::RANGE_NOT_SATISFIABLE,
        C::CatchingUp | C::ClaimsBacklog => StatusCode::TOO_MANY_REQUESTS,
        C::InternalError | C::XorbDamaged => StatusCode::INTERNAL_SERVER_ERROR,
        C::LockOwnerUnreachable | C::NotReady | C::ServerBusy => StatusCode::SERVICE_UNAVAILABLE,
        C::InsufficientStorage | C::TooManyLocks => StatusCode::INSUFFICIENT_STORAGE,
        C::LockForwardLoop => StatusCode::LOOP_DETECTED,
        // The client's own code for a certificate it refused; a server never sends it.
        C::TlsCertificate => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The code of a shard the store refused, by what was wrong with it.
pub fn shard_rejection_code(r: &xet_store::cas::ShardRejection) -> ErrorCode {
    use xet_store::cas::ShardRejection as R;
    match r {
        R::Malformed(_) => ErrorCode::InvalidShard,
        R::Keyed => ErrorCode::KeyedShard,
        R::MissingVerification { .. } => ErrorCode::MissingVerification,
        R::UnknownFlags { .. } => ErrorCode::UnknownFlags,
        R::NoTerms { .. } => ErrorCode::NoTerms,
        R::UnknownXorb { .. } | R::UnknownXorbBlock { .. } => ErrorCode::UnknownXorb,
        R::ChunkRange { .. } => ErrorCode::ChunkRange,
        R::UnpackedLength { .. } => ErrorCode::UnpackedLengthMismatch,
        R::Verification { .. } => ErrorCode::VerificationMismatch,
        R::FileHash { .. } => ErrorCode::FileHashMismatch,
        R::XorbBlock { .. } => ErrorCode::XorbBlockMismatch,
        // The store's copy is damaged, not the shard: a 500 that clients do not retry as it
        // is, but answer by uploading the xorb again.
        R::DamagedXorb { .. } => ErrorCode::XorbDamaged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_format::XorbHash;
    use xet_store::backend::BackendError;

    #[test]
    fn every_code_is_sent_with_an_error_status_and_retryable_ones_with_429_or_503() {
        for &code in ErrorCode::ALL {
            let status = status_of(code);
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{code}: {status}"
            );
            // A status clients retry is used only for codes that mean "later".
            let later = matches!(
                code,
                ErrorCode::CatchingUp
                    | ErrorCode::ClaimsBacklog
                    | ErrorCode::ServerBusy
                    | ErrorCode::NotReady
                    | ErrorCode::LockOwnerUnreachable
            );
            let retried = matches!(status.as_u16(), 429 | 503);
            assert_eq!(later, retried, "{code}: {status}");
        }
        assert_eq!(status_of(ErrorCode::InvalidHash), StatusCode::BAD_REQUEST);
        assert_eq!(
            status_of(ErrorCode::InvalidPath),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            status_of(ErrorCode::XorbDamaged),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let e = ApiError::new(ErrorCode::Unauthorized, "no");
        let r = e.into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(r.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    fn io_failure(errno: i32) -> StoreError {
        StoreError::Backend(BackendError::Io {
            op: "write",
            key: "xorb x".into(),
            source: std::io::Error::from_raw_os_error(errno),
        })
    }

    #[test]
    fn store_failures_map_to_statuses() {
        // ENOSPC and EDQUOT: 507, which clients do not retry.
        for errno in [28, 122] {
            let e = ApiError::from(io_failure(errno));
            assert_eq!(
                (e.status().as_u16(), e.code),
                (507, ErrorCode::InsufficientStorage)
            );
        }
        // Another I/O failure: 500.
        let e = ApiError::from(io_failure(5));
        assert_eq!(
            (e.status().as_u16(), e.code),
            (500, ErrorCode::InternalError)
        );
        // A stored xorb found damaged: 500 with its own code, naming the xorb.
        let xorb = XorbHash::from_hex(&"ab".repeat(32)).unwrap();
        let e = ApiError::from(StoreError::DamagedXorb {
            xorb,
            detail: "its bytes fail verification".into(),
        });
        assert_eq!((e.status().as_u16(), e.code), (500, ErrorCode::XorbDamaged));
        assert!(e.message.contains(&xorb.to_string()), "{}", e.message);
        // Spool files: ENOSPC is 507 too.
        let e = ApiError::io("xorb x", &std::io::Error::from_raw_os_error(28));
        assert_eq!(e.status().as_u16(), 507);
    }

    #[test]
    fn busy_answers_say_when_to_retry() {
        let r = ApiError::busy("full", 1).into_response();
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
