//! Request bodies with bounded resources, whatever the client does.
//!
//! - [`IdleTimeout`] wraps every request body: when no part of it arrives for
//!   [`super::Limits::body_timeout`] while a handler waits for one, reading fails and the handler
//!   answers 408 `body_timeout`.
//! - [`read_body`] reads a small body (batch, verify, telemetry, grants, shards ≤ 64 MiB) into
//!   memory under a server-wide byte budget ([`super::Limits::body_memory`]): the bytes are
//!   counted as they arrive and held until the request is done; when the budget is spent the
//!   request is answered 503 `server_busy` with `Retry-After`. A `Content-Length` over the
//!   request's limit is 413 before anything is read, and so is a chunked body that turns out
//!   longer.
//! - [`spool_body`] streams a large body (xorb uploads, basic LFS uploads) to a file in the
//!   store's spool directory, one frame at a time, each written on a blocking thread only for
//!   the time of the write; a stalled writer holds a file and an idle task, no thread and no
//!   big buffer. A full disk is 507.
//! - [`drain`] reads and drops a body (uploads of objects already stored), with a limit.

use std::future::Future as _;
use std::io::Write as _;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use xet_protocol::wire::ErrorCode;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body::{Frame, SizeHint};
use sha2::Digest as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use super::error::ApiError;
use xet_format::LfsOid;
use xet_store::Store;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long the client left a body waiting, as the error [`IdleTimeout`] fails with.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("no part of the request body arrived for {} s", .0.as_secs_f64())]
pub(crate) struct BodyTimedOut(pub Duration);

/// A request body that fails with [`BodyTimedOut`] when no frame arrives for a while.
pub(crate) struct IdleTimeout {
    inner: Body,
    timeout: Duration,
    /// Armed while the reader waits; created on the first wait.
    deadline: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl IdleTimeout {
    pub fn new(inner: Body, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: None,
            armed: false,
        }
    }
}

impl http_body::Body for IdleTimeout {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.armed = false;
                Poll::Ready(r.map(|r| r.map_err(BoxError::from)))
            }
            Poll::Pending => {
                let at = Instant::now() + this.timeout;
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                if !this.armed {
                    deadline.as_mut().reset(at);
                    this.armed = true;
                }
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// The next data frame of a body (trailers are skipped), `None` at its end.
pub(crate) async fn next_data(body: &mut Body) -> Option<Result<Bytes, axum::Error>> {
    loop {
        let frame =
            std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut *body), cx))
                .await?;
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    return Some(Ok(data));
                }
            }
            Err(e) => return Some(Err(e)),
        }
    }
}

/// The answer to a body that could not be read: 408 when it stopped arriving, else 400
/// `body_read_failed` (the client closed the connection half-way, or broke the framing).
pub(crate) fn read_error(what: &str, e: axum::Error) -> ApiError {
    let inner = e.into_inner();
    if let Some(t) = xet_protocol::util::error::find::<BodyTimedOut>(inner.as_ref()) {
        tracing::info!(what, "request body timed out");
        return ApiError::body_timeout(what, t.0);
    }
    ApiError::new(
        ErrorCode::BodyReadFailed,
        format!("{what}: the request body could not be read: {inner}"),
    )
}

/// The declared `Content-Length`, if any (hyper has already refused malformed ones).
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// 413 when the declared length is over `limit`.
pub(crate) fn check_declared(headers: &HeaderMap, limit: u64, what: &str) -> Result<(), ApiError> {
    match content_length(headers) {
        Some(len) if len > limit => Err(ApiError::too_large(what, len, limit)),
        _ => Ok(()),
    }
}

fn longer_than(what: &str, limit: u64) -> ApiError {
    ApiError::new(
        ErrorCode::BodyTooLarge,
        format!("{what}: the body is longer than the limit of {limit} bytes"),
    )
}

/// A small request body in memory, holding its share of the server's body budget until
/// dropped.
#[derive(Debug)]
pub(crate) struct SmallBody {
    bytes: Bytes,
    _held: Option<OwnedSemaphorePermit>,
}

impl Deref for SmallBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads a body of at most `limit` bytes into memory, charging `budget` (one permit per byte
/// of buffer) as the buffer grows. See the module documentation.
pub(crate) async fn read_body(
    budget: &Arc<Semaphore>,
    headers: &HeaderMap,
    mut body: Body,
    limit: u64,
    what: &str,
) -> Result<SmallBody, ApiError> {
    check_declared(headers, limit, what)?;
    let declared = content_length(headers);
    let mut buf: Vec<u8> = Vec::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    while let Some(frame) = next_data(&mut body).await {
        let data = frame.map_err(|e| read_error(what, e))?;
        let needed = buf.len() as u64 + data.len() as u64;
        if needed > limit {
            return Err(longer_than(what, limit));
        }
        if needed > buf.capacity() as u64 {
            // Grow by doubling (from 64 KiB), never past the declared length or the limit, and
            // pay for it first: a client that declares a large body and sends little of it
            // holds little of the budget.
            let cap = declared.unwrap_or(limit).min(limit);
            let target = (buf.capacity() as u64 * 2)
                .max(64 << 10)
                .min(cap)
                .max(needed);
            let extra = target - buf.capacity() as u64;
            let permit = u32::try_from(extra)
                .ok()
                .and_then(|n| Arc::clone(budget).try_acquire_many_owned(n).ok())
                .ok_or_else(|| {
                    tracing::warn!(what, bytes = extra, "request body budget exhausted");
                    ApiError::busy(
                        format!(
                            "{what}: the server holds as many request bodies in memory as it \
                             allows; retry shortly"
                        ),
                        1,
                    )
                })?;
            match &mut held {
                Some(h) => h.merge(permit),
                None => held = Some(permit),
            }
            buf.reserve_exact((target as usize).saturating_sub(buf.len()));
        }
        buf.extend_from_slice(&data);
    }
    Ok(SmallBody {
        bytes: Bytes::from(buf),
        _held: held,
    })
}

/// Reads and drops a body of at most `limit` bytes (uploads of objects already stored, so that
/// the connection can be reused).
pub async fn drain(mut body: Body, limit: Option<u64>, what: &str) -> Result<u64, ApiError> {
    let mut n = 0u64;
    while let Some(frame) = next_data(&mut body).await {
        n += frame.map_err(|e| read_error(what, e))?.len() as u64;
        if let Some(limit) = limit.filter(|&l| n > l) {
            return Err(longer_than(what, limit));
        }
    }
    Ok(n)
}

/// After a spool write failed, at most this much more of the body is read before answering.
pub(crate) const DRAIN_AFTER_FAILURE: u64 = 256 << 20;

/// A request body spooled to a file, removed when dropped (unless consumed before).
#[derive(Debug)]
pub(crate) struct Spooled {
    pub path: tempfile::TempPath,
    pub len: u64,
    /// The SHA-256 of the body, when asked for.
    pub sha256: Option<LfsOid>,
}

/// Why spooling failed on the writing side.
enum SpoolFailure {
    /// The store's free-space reserve would be crossed.
    Store(xet_store::StoreError),
    /// Creating or writing the spool file failed.
    Io(&'static str, std::io::Error),
}

impl SpoolFailure {
    fn into_api(self, what: &str) -> ApiError {
        match self {
            SpoolFailure::Store(e) => ApiError::from(e),
            SpoolFailure::Io(doing, e) => ApiError::io(&format!("{what}: {doing}"), &e),
        }
    }
}

/// Bytes spooled between two checks of the store's free-space reserve.
const SPACE_CHECK_EVERY: u64 = 8 << 20;

/// Frames are gathered up to this many bytes and written in one blocking task: few tasks per
/// body, little memory per upload, and no thread held while the body is slow to arrive.
const WRITE_BATCH: usize = 256 << 10;

/// The spool file and what goes with it, moved to a blocking task for each batch of frames.
struct Writer {
    store: Arc<Store>,
    file: std::fs::File,
    hasher: Option<sha2::Sha256>,
    /// Bytes written so far.
    written: u64,
    /// Up to where the free-space reserve has been checked.
    checked: u64,
}

impl Writer {
    /// Writes `batch` (checking the reserve first when it goes past what was checked).
    fn write(mut self, batch: Vec<Bytes>) -> Result<Writer, SpoolFailure> {
        let len: u64 = batch.iter().map(|b| b.len() as u64).sum();
        if self.written + len > self.checked {
            self.store
                .check_space(SPACE_CHECK_EVERY.max(len))
                .map_err(SpoolFailure::Store)?;
            self.checked = self.written + SPACE_CHECK_EVERY.max(len);
        }
        for data in &batch {
            self.file
                .write_all(data)
                .map_err(|e| SpoolFailure::Io("cannot write the spool file", e))?;
            if let Some(h) = &mut self.hasher {
                h.update(data);
            }
        }
        self.written += len;
        Ok(self)
    }
}

/// Runs `write` on the blocking pool.
async fn blocking_write<T: Send + 'static>(
    what: &str,
    write: impl FnOnce() -> Result<T, SpoolFailure> + Send + 'static,
) -> Result<Result<T, SpoolFailure>, ApiError> {
    tokio::task::spawn_blocking(write)
        .await
        .map_err(|e| ApiError::internal(format!("{what}: spool worker failed: {e}")))
}

/// Streams a body of at most `limit` bytes to a new file in the store's spool directory,
/// hashing it with SHA-256 if `hash`. The store's free-space reserve is checked for the declared
/// length before anything is read, then every `SPACE_CHECK_EVERY` bytes (507 when it would
/// be crossed). See the module documentation.
///
/// The async task only reads frames from the connection; the reserve (a `statvfs`), the file's
/// creation, writes and hashing run on the blocking pool, a batch of frames ([`WRITE_BATCH`])
/// at a time, so that no file system call runs on the server's async workers and a stalled
/// body holds no thread.
pub(crate) async fn spool_body(
    store: &Arc<Store>,
    declared: Option<u64>,
    mut body: Body,
    limit: Option<u64>,
    hash: bool,
    what: &str,
) -> Result<Spooled, ApiError> {
    let st = Arc::clone(store);
    let created = blocking_write(what, move || {
        let checked = declared.unwrap_or(0);
        st.check_space(checked).map_err(SpoolFailure::Store)?;
        let (file, path) = tempfile::Builder::new()
            .prefix("spool-")
            .tempfile_in(st.spool_dir())
            .map_err(|e| SpoolFailure::Io("cannot create a spool file", e))?
            .into_parts();
        let writer = Writer {
            store: st,
            file,
            hasher: hash.then(sha2::Sha256::new),
            written: 0,
            checked,
        };
        Ok((writer, path))
    })
    .await?;
    let (mut writer, path) = match created {
        Ok(c) => c,
        Err(failure) => return Err(failed(failure, body, what).await),
    };
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batched = 0usize;
    let mut len = 0u64;
    let mut reading = true;
    while reading {
        match next_data(&mut body).await {
            Some(frame) => {
                let data = frame.map_err(|e| read_error(what, e))?;
                len += data.len() as u64;
                if let Some(limit) = limit.filter(|&l| len > l) {
                    return Err(longer_than(what, limit));
                }
                batched += data.len();
                batch.push(data);
                if batched < WRITE_BATCH {
                    continue;
                }
            }
            None => reading = false,
        }
        if batch.is_empty() {
            continue;
        }
        let full = std::mem::take(&mut batch);
        batched = 0;
        writer = match blocking_write(what, move || writer.write(full)).await? {
            Ok(w) => w,
            Err(failure) => return Err(failed(failure, body, what).await),
        };
    }
    Ok(Spooled {
        path,
        len,
        sha256: writer
            .hasher
            .map(|h| LfsOid::from_digest(h.finalize().into())),
    })
}

/// The answer to a spool that failed, after reading (and dropping) the rest of a body of
/// reasonable size, so that the client gets to read the answer (507 for a full disk, which it
/// should not retry) instead of a broken pipe (which it would).
async fn failed(failure: SpoolFailure, body: Body, what: &str) -> ApiError {
    let error = failure.into_api(what);
    let _ = drain(body, Some(DRAIN_AFTER_FAILURE), what).await;
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(n: usize) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(n))
    }

    #[tokio::test]
    async fn small_bodies_are_charged_to_the_budget_while_held() {
        let b = budget(1000);
        let body = read_body(&b, &HeaderMap::new(), Body::from(vec![7u8; 600]), 1000, "t")
            .await
            .unwrap();
        assert_eq!(body.len(), 600);
        assert!(b.available_permits() <= 400);
        // Another 600 bytes do not fit now: 503 with Retry-After.
        let e = read_body(&b, &HeaderMap::new(), Body::from(vec![7u8; 600]), 1000, "t")
            .await
            .unwrap_err();
        assert_eq!((e.status().as_u16(), e.code), (503, ErrorCode::ServerBusy));
        assert_eq!(e.retry_after, Some(1));
        drop(body);
        assert_eq!(b.available_permits(), 1000);
        // Over the limit: 413, declared or not.
        let e = read_body(
            &b,
            &HeaderMap::new(),
            Body::from(vec![0u8; 1001]),
            1000,
            "t",
        )
        .await
        .unwrap_err();
        assert_eq!(e.status().as_u16(), 413);
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, 5000.into());
        let e = read_body(&b, &h, Body::empty(), 1000, "t")
            .await
            .unwrap_err();
        assert_eq!(e.status().as_u16(), 413);
    }

    #[tokio::test]
    async fn a_stalled_body_times_out_with_408() {
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let body = Body::new(IdleTimeout::new(
            Body::from_stream(stream),
            Duration::from_millis(50),
        ));
        let e = read_body(&budget(100), &HeaderMap::new(), body, 100, "t")
            .await
            .unwrap_err();
        assert_eq!((e.status().as_u16(), e.code), (408, ErrorCode::BodyTimeout));
    }

    #[tokio::test]
    async fn spooled_bodies_are_hashed_and_removed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let s = spool_body(
            &store,
            None,
            Body::from(b"hello".to_vec()),
            Some(10),
            true,
            "t",
        )
        .await
        .unwrap();
        assert_eq!(s.len, 5);
        assert_eq!(s.sha256, Some(LfsOid::of(b"hello")));
        assert_eq!(std::fs::read(&s.path).unwrap(), b"hello");
        let path = s.path.to_path_buf();
        drop(s);
        assert!(!path.exists());
        let e = spool_body(
            &store,
            None,
            Body::from(vec![0u8; 11]),
            Some(10),
            false,
            "t",
        )
        .await
        .unwrap_err();
        assert_eq!(e.status().as_u16(), 413);
        // A store whose reserve is larger than its disk: 507 before anything is spooled.
        let full_dir = tempfile::tempdir().unwrap();
        let full = Arc::new(
            Store::open_with(
                full_dir.path(),
                xet_store::StoreOptions {
                    min_free_bytes: u64::MAX,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let e = spool_body(
            &full,
            Some(5),
            Body::from(b"hello".to_vec()),
            None,
            true,
            "t",
        )
        .await
        .unwrap_err();
        assert_eq!(e.status().as_u16(), 507);
        assert_eq!(std::fs::read_dir(full.spool_dir()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(store.spool_dir()).unwrap().count(), 0);
    }
}
