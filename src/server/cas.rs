//! The CAS API (cas-api.md): to be implemented.
use axum::Router;

use super::SharedState;

/// The CAS routes.
pub fn routes() -> Router<SharedState> {
    Router::new()
}
