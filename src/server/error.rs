//! The JSON error every refused request gets: a status, a stable machine-readable code and one
//! sentence saying what was wrong (cas-api.md §9). The request-id middleware adds
//! `request_id` to the body.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::auth::AuthError;
use crate::store::StoreError;

/// A refused or failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn too_large(what: &str, len: u64, limit: u64) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("{what} of {len} bytes exceeds the limit of {limit} bytes"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let (status, code) = match e {
            AuthError::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            AuthError::Expired { .. } => (StatusCode::UNAUTHORIZED, "token_expired"),
            _ => (StatusCode::UNAUTHORIZED, "unauthorized"),
        };
        Self::new(status, code, e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        use crate::store::reconstruction::PlanError;
        match &e {
            StoreError::InvalidXorb { source, .. } => {
                let code = match source {
                    crate::format::xorb::XorbError::HashMismatch { .. } => "xorb_hash_mismatch",
                    _ => "invalid_xorb",
                };
                Self::bad_request(code, e.to_string())
            }
            StoreError::ShardRejected(r) => Self::bad_request(r.code(), e.to_string()),
            StoreError::ShardTooLarge { len, max } => Self::too_large("shard", *len as u64, *max),
            StoreError::Plan {
                source: PlanError::NotSatisfiable { .. },
                ..
            } => Self::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "range_not_satisfiable",
                e.to_string(),
            ),
            StoreError::Plan {
                source: PlanError::Inverted { .. },
                ..
            } => Self::bad_request("invalid_range", e.to_string()),
            _ => {
                tracing::error!(error = %e, "store failure");
                Self::internal(format!("storage failure: {e}"))
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
        response
    }
}
