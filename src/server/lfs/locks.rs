//! The Git LFS locking API (`docs/api/locking.md`): not implemented, on purpose.
//!
//! Tokens identify no user, so a lock could not be "ours" or "theirs". Every locking route
//! answers 501 with a JSON message. For `POST …/locks/verify`, the request git-lfs makes on
//! every push, git-lfs 3.3.0 maps 404 and 501 to "not implemented", quietly records
//! `lfs.<endpoint>.locksverify=false` in the repository's config and goes on with the push;
//! `git lfs lock` and `git lfs locks` show the message. No authentication is required to learn
//! that a feature is missing.

use axum::http::StatusCode;

use crate::server::error::ApiError;

/// The answer of every locking route.
pub fn not_implemented() -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "locking_not_implemented",
        "git-xet serve does not implement the Git LFS locking API",
    )
}
