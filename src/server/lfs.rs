//! The Git LFS batch API (lfs-agent.md §11): to be implemented.
use axum::Router;

use super::SharedState;

/// The LFS routes.
pub fn routes() -> Router<SharedState> {
    Router::new()
}
