//! The JSON error every refused request gets: a status, a stable machine-readable code and one
//! sentence saying what was wrong (docs/cas-api.md §9). The request-id middleware adds
//! `request_id` to the body.
//!
//! This module is the one place where failures become statuses:
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
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    /// Seconds for a `Retry-After` header (503 answers).
    pub retry_after: Option<u64>,
}

/// Seconds a client waits before asking a node that is catching up again.
pub(crate) const CATCHING_UP_RETRY_SECS: u64 = 2;

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 503 `server_busy` with `Retry-After: retry_after_secs`: a limit of the server is reached
    /// for now (clients retry later).
    pub fn busy(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServerBusy,
                message,
            )
        }
    }

    /// 404 for what this server does not have; but while a node on shared storage is still
    /// registering the shards in storage (its first catch-up), 429 `catching_up` with
    /// `Retry-After`: it may be there in a moment. git-lfs and git-xet's agent both retry a 429.
    pub fn missing(store: &xet_store::Store, code: ErrorCode, message: impl Into<String>) -> Self {
        if !store.catching_up() {
            return Self::not_found(code, message);
        }
        Self {
            retry_after: Some(CATCHING_UP_RETRY_SECS),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
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
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::InsufficientStorage,
            "the server's storage is full; uploads fail until its administrator frees or adds \
             disk space",
        )
    }

    /// 408 `body_timeout`: the request body stopped arriving.
    pub fn body_timeout(what: &str, after: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
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

    pub(crate) fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub(crate) fn too_large(what: &str, len: u64, limit: u64) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::BodyTooLarge,
            format!("{what} of {len} bytes exceeds the limit of {limit} bytes"),
        )
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            message,
        )
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let (status, code) = match e {
            AuthError::Forbidden { .. } => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            AuthError::Expired { .. } => (StatusCode::UNAUTHORIZED, ErrorCode::TokenExpired),
            _ => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized),
        };
        Self::new(status, code, e.to_string())
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
                Self::bad_request(code, e.to_string())
            }
            StoreError::ShardRejected(r) => Self::bad_request(r.code(), e.to_string()),
            StoreError::ShardTooLarge { len, max } => Self::too_large("shard", *len as u64, *max),
            StoreError::ClaimBacklog { .. } => Self {
                retry_after: Some(60),
                ..Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::ClaimsBacklog,
                    e.to_string(),
                )
            },
            StoreError::SweepInProgress { .. } => Self {
                retry_after: Some(5),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::ServerBusy,
                    e.to_string(),
                )
            },
            StoreError::Plan {
                source: PlanError::NotSatisfiable { .. },
                ..
            } => Self::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                ErrorCode::RangeNotSatisfiable,
                e.to_string(),
            ),
            StoreError::Plan {
                source: PlanError::Inverted { .. },
                ..
            } => Self::bad_request(ErrorCode::InvalidRange, e.to_string()),
            _ if e.is_storage_full() => {
                super::metrics::storage_error(super::metrics::StorageOperation::Request);
                Self::storage_full(&e)
            }
            StoreError::DamagedXorb { .. } => {
                super::metrics::storage_error(super::metrics::StorageOperation::Request);
                tracing::error!(error = %e, "damaged xorb");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorCode::XorbDamaged,
                    e.to_string(),
                )
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
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_format::XorbHash;
    use xet_store::backend::BackendError;

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
                (e.status.as_u16(), e.code),
                (507, ErrorCode::InsufficientStorage)
            );
        }
        // Another I/O failure: 500.
        let e = ApiError::from(io_failure(5));
        assert_eq!((e.status.as_u16(), e.code), (500, ErrorCode::InternalError));
        // A stored xorb found damaged: 500 with its own code, naming the xorb.
        let xorb = XorbHash::from_hex(&"ab".repeat(32)).unwrap();
        let e = ApiError::from(StoreError::DamagedXorb {
            xorb,
            detail: "its bytes fail verification".into(),
        });
        assert_eq!((e.status.as_u16(), e.code), (500, ErrorCode::XorbDamaged));
        assert!(e.message.contains(&xorb.to_string()), "{}", e.message);
        // Spool files: ENOSPC is 507 too.
        let e = ApiError::io("xorb x", &std::io::Error::from_raw_os_error(28));
        assert_eq!(e.status.as_u16(), 507);
    }

    #[test]
    fn busy_answers_say_when_to_retry() {
        let r = ApiError::busy("full", 1).into_response();
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
