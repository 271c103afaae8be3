//! Per-route concurrency limits and the resources every request is charged for.
//!
//! Every request except `/health` belongs to a [`RouteClass`]; each class has a number of
//! slots ([`super::Limits`]). A request takes a slot before its handler runs and keeps it until
//! its response body has been sent or dropped (a slow download holds its slot for as long as it
//! lasts); when a class has no slot left the request is answered at once with 503
//! `server_busy` and `Retry-After: 1`, which git-lfs, hf-xet and our agent retry.
//!
//! The same middleware gives every request body an idle timeout ([`IdleTimeout`]).
//!
//! [`Resources`] also holds the two server-wide budgets handlers draw from: the bytes of
//! request bodies held in memory ([`super::body::read_body`]) and the slots for ingest work
//! (validating and storing a spooled xorb, running the upload pipeline of a basic PUT), for
//! which requests whose body has fully arrived wait their turn.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Reads of object storage a download keeps in flight ahead of the piece being sent, while
/// the server's read budget allows (each read holds its bytes of it): one read at a time left
/// the store idle between requests (a 256 MiB basic download from a Garage node took 1.2 s
/// with one read ahead, 0.9-1.0 s with four).
pub(crate) const OBJECT_READ_AHEAD: usize = 4;

use super::body::IdleTimeout;
use super::error::ApiError;
use super::{Limits, SharedState};

/// What kind of work a request is, for the concurrency limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteClass {
    /// Request bodies that go to storage: xorb and shard uploads, basic LFS PUTs.
    Upload,
    /// Response bodies read from storage: presigned xorb data, basic LFS GETs.
    Download,
    /// Everything else: reconstructions, batch, dedup queries, verify, tokens, telemetry.
    Metadata,
}

impl RouteClass {
    /// The class of a request; `None` for `/health`, which is never limited.
    pub fn of(method: &Method, path: &str) -> Option<Self> {
        if path == "/health" {
            return None;
        }
        let upload_path = path.starts_with("/v1/xorbs/")
            || path.starts_with("/xorbs/")
            || matches!(path, "/v1/shards" | "/shards" | "/v2/shards");
        if *method == Method::POST && upload_path {
            return Some(Self::Upload);
        }
        if *method == Method::PUT && path.starts_with("/v1/xorb-uploads/") {
            return Some(Self::Upload);
        }
        if *method == Method::GET && path.starts_with("/v1/xorb-data/") {
            return Some(Self::Download);
        }
        if let Some((_, rest)) = path.split_once("/info/lfs/objects/") {
            if rest != "batch" {
                match *method {
                    Method::PUT => return Some(Self::Upload),
                    Method::GET => return Some(Self::Download),
                    _ => {}
                }
            }
        }
        Some(Self::Metadata)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Upload => "uploads",
            Self::Download => "downloads",
            Self::Metadata => "requests",
        }
    }
}

/// The server's shared limits, as semaphores.
#[derive(Debug)]
pub struct Resources {
    uploads: Arc<Semaphore>,
    downloads: Arc<Semaphore>,
    metadata: Arc<Semaphore>,
    /// Bytes of request bodies held in memory, one permit per byte.
    pub body_budget: Arc<Semaphore>,
    /// Concurrent ingest jobs (xorb validation and storage, basic-upload pipelines).
    pub ingest: Arc<Semaphore>,
    /// Bytes of stored data read ahead for responses on object storage, one permit per byte.
    pub read_budget: Arc<Semaphore>,
    limits: Limits,
}

impl Resources {
    pub fn new(limits: &Limits) -> Self {
        let budget = usize::try_from(limits.body_memory)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            uploads: Arc::new(Semaphore::new(limits.max_uploads)),
            downloads: Arc::new(Semaphore::new(limits.max_downloads)),
            metadata: Arc::new(Semaphore::new(limits.max_requests)),
            body_budget: Arc::new(Semaphore::new(budget)),
            ingest: Arc::new(Semaphore::new(limits.max_ingest.max(1))),
            read_budget: Arc::new(Semaphore::new(
                usize::try_from(limits.read_memory)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            limits: limits.clone(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn slots(&self, class: RouteClass) -> (&Arc<Semaphore>, usize) {
        match class {
            RouteClass::Upload => (&self.uploads, self.limits.max_uploads),
            RouteClass::Download => (&self.downloads, self.limits.max_downloads),
            RouteClass::Metadata => (&self.metadata, self.limits.max_requests),
        }
    }

    /// Waits for an ingest slot.
    pub(crate) async fn ingest_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.ingest)
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the server is shutting down"))
    }
}

/// The middleware: the idle timeout on the request body, a slot of the request's class for the
/// whole exchange, 503 when none is free.
pub async fn limit(State(state): State<SharedState>, request: Request, next: Next) -> Response {
    let resources = &state.resources;
    let (parts, body) = request.into_parts();
    let body = Body::new(IdleTimeout::new(body, resources.limits.body_timeout));
    let request = Request::from_parts(parts, body);
    let Some(class) = RouteClass::of(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    let (slots, max) = resources.slots(class);
    let Ok(slot) = Arc::clone(slots).try_acquire_owned() else {
        tracing::warn!(class = class.name(), max, "route class saturated");
        return ApiError::busy(
            format!(
                "the server is handling as many {} as it allows ({max}); retry shortly",
                class.name()
            ),
            1,
        )
        .into_response();
    };
    next.run(request).await.map(|body| {
        Body::new(Holding {
            inner: body,
            _slot: slot,
        })
    })
}

/// A response body that keeps a slot until it is finished or dropped.
struct Holding {
    inner: Body,
    _slot: OwnedSemaphorePermit,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_classes() {
        let x = "a".repeat(64);
        for (m, p, c) in [
            (
                Method::POST,
                format!("/v1/xorbs/default/{x}"),
                Some(RouteClass::Upload),
            ),
            (
                Method::POST,
                format!("/xorbs/default/{x}"),
                Some(RouteClass::Upload),
            ),
            (Method::POST, "/v2/shards".into(), Some(RouteClass::Upload)),
            (Method::POST, "/shards".into(), Some(RouteClass::Upload)),
            (
                Method::PUT,
                format!("/t/r.git/info/lfs/objects/{x}"),
                Some(RouteClass::Upload),
            ),
            (
                Method::GET,
                format!("/t/r.git/info/lfs/objects/{x}"),
                Some(RouteClass::Download),
            ),
            (
                Method::GET,
                format!("/v1/xorb-data/{x}"),
                Some(RouteClass::Download),
            ),
            (
                Method::POST,
                "/t/r.git/info/lfs/objects/batch".into(),
                Some(RouteClass::Metadata),
            ),
            (
                Method::POST,
                "/t/r/info/lfs/verify".into(),
                Some(RouteClass::Metadata),
            ),
            (
                Method::GET,
                format!("/v2/reconstructions/{x}"),
                Some(RouteClass::Metadata),
            ),
            (
                Method::GET,
                format!("/v1/xorbs/default/{x}"),
                Some(RouteClass::Metadata),
            ),
            (Method::GET, "/health".into(), None),
        ] {
            assert_eq!(RouteClass::of(&m, &p), c, "{m} {p}");
        }
    }
}
