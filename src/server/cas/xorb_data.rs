//! `GET /v1/xorb-data/{xorb}?e=…&r=…&s=…`: the presigned xorb byte fetch (docs/cas-api.md §5.9,
//! §10).
//!
//! No `Authorization`: the query string is the capability, a signature over the xorb, the
//! expiry and the byte ranges `r` the URL grants (see [`super::super::auth`]); a bad or expired
//! one is 403, which makes the reference client ask for a fresh reconstruction. The URL serves
//! the granted bytes and no others: every requested range must lie within a granted one (403
//! `range_not_granted` otherwise, whatever else the xorb holds); a request without `Range`
//! gets the granted ranges. One range → 206 with `Content-Range`; several → 206
//! `multipart/byteranges`; none satisfiable → 416.
//!
//! The body streams: the stored bytes are read in pieces of at most [`PIECE`] bytes, each on a
//! blocking thread when the connection asks for more, so a client that does not read holds one
//! piece, whatever the size of its ranges. On object storage, pieces are [`OBJECT_PIECE`] bytes
//! and up to [`OBJECT_READ_AHEAD`] next ones are read while one is sent, within a server-wide
//! read budget
//! ([`crate::server::Limits::read_memory`]); the xorb is checked once per request, not per
//! piece. Every response carries `Content-Length`; a read
//! failure half-way aborts the connection (the client sees a short body).

use crate::server::limits::OBJECT_READ_AHEAD;
use std::collections::VecDeque;
use std::io;
use std::ops::RangeInclusive;
use std::sync::Arc;
use xet_protocol::wire::ErrorCode;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::super::auth::{now_unix, AuthError};
use super::super::error::ApiError;
use super::super::{blocking, parse_hash, SharedState};
use xet_format::XorbHash;
use xet_protocol::util::range::{parse_byte_ranges, ByteRangeSpec, GrantedRanges};
use xet_store::cas::XorbBytes;
use xet_store::Store;

/// At most this many ranges in one request.
pub(crate) const MAX_RANGES: usize = 1024;

/// Bytes of a stored xorb read at once for a response body.
pub(crate) const PIECE: u64 = 256 * 1024;

/// Why a `Range` header cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RangeProblem {
    #[error("malformed Range {0:?}: use bytes=START-END, bytes=START- or bytes=-SUFFIX, comma-separated")]
    Malformed(String),
    #[error("no requested range starts within the {len}-byte object")]
    Unsatisfiable { len: u64 },
    #[error("{count} ranges requested; at most {MAX_RANGES} are served per request")]
    TooMany { count: usize },
    #[error("the ranges add up to {total} bytes, more than the {len}-byte object: overlapping ranges are refused")]
    TooMuch { total: u64, len: u64 },
    #[error("bytes {start}-{end} are not among the bytes this URL grants ({granted}); fetch what the reconstruction lists, with the URL it gives for it")]
    NotGranted {
        start: u64,
        end: u64,
        granted: String,
    },
}

/// `ranges` (satisfiable ranges of the object), if each lies within a range of `granted`.
fn within(
    ranges: Vec<RangeInclusive<u64>>,
    granted: &GrantedRanges,
) -> Result<Vec<RangeInclusive<u64>>, RangeProblem> {
    match ranges.iter().find(|r| !granted.covers(r)) {
        None => Ok(ranges),
        Some(r) => Err(RangeProblem::NotGranted {
            start: *r.start(),
            end: *r.end(),
            granted: clip(&granted.to_param(), 200),
        }),
    }
}

/// The granted ranges of an object of `len` bytes, when the request names none: all of them,
/// which must lie within the object.
fn granted_within(
    granted: &GrantedRanges,
    len: u64,
) -> Result<Vec<RangeInclusive<u64>>, RangeProblem> {
    match granted.ranges().last() {
        Some(last) if *last.end() < len => Ok(granted.ranges().to_vec()),
        _ => Err(RangeProblem::Unsatisfiable { len }),
    }
}

/// `text`, cut to at most `max` characters.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// Parses a `Range` header against an object of `len` bytes into the satisfiable ranges, in
/// request order, each clamped to the object (RFC 9110 §14.1.2).
pub(crate) fn parse_ranges(
    value: &str,
    len: u64,
) -> Result<Vec<RangeInclusive<u64>>, RangeProblem> {
    let malformed = || RangeProblem::Malformed(value.chars().take(200).collect());
    let specs = parse_byte_ranges(value).map_err(|_| malformed())?;
    if specs.len() > MAX_RANGES {
        return Err(RangeProblem::TooMany { count: specs.len() });
    }
    let mut out = Vec::with_capacity(specs.len());
    let mut total: u64 = 0;
    for spec in specs {
        let range = match spec {
            ByteRangeSpec::Suffix(suffix) => {
                if suffix == 0 || len == 0 {
                    continue;
                }
                len - suffix.min(len)..=len - 1
            }
            ByteRangeSpec::From { first, last } => {
                if first >= len {
                    continue;
                }
                first..=last.unwrap_or(u64::MAX).min(len - 1)
            }
        };
        total = total.saturating_add(range.end() - range.start() + 1);
        if total > len {
            return Err(RangeProblem::TooMuch { total, len });
        }
        out.push(range);
    }
    if out.is_empty() {
        return Err(RangeProblem::Unsatisfiable { len });
    }
    Ok(out)
}

pub async fn get(
    State(state): State<SharedState>,
    hash: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    match fetch(state, hash, query, &headers).await {
        Ok(r) => r,
        Err(r) => r,
    }
}

async fn fetch(
    state: SharedState,
    hash: Result<Path<String>, PathRejection>,
    query: Option<String>,
    headers: &HeaderMap,
) -> Result<Response, Response> {
    let fail = |e: ApiError| e.into_response();
    let hash = super::path(hash).map_err(fail)?;
    let xorb: XorbHash = parse_hash(&hash, "xorb hash").map_err(fail)?;
    let now = now_unix();
    let (expires, granted) = verify_url(&state, &xorb, query.as_deref(), now).map_err(fail)?;
    let range_text = range_text(headers).map_err(fail)?;
    // One trip to a blocking thread for the xorb's length and, when one range of at most
    // PIECE bytes is asked for (every small file's download), its bytes too.
    let st = state.clone();
    let whole = whole_read_permit(&state);
    let found = blocking(move || {
        let may_read_whole = whole.is_some();
        let stored = st.store.xorb_for_reading(&xorb, may_read_whole)?;
        drop(whole);
        let Some(stored) = stored else {
            return Ok(None);
        };
        let len = stored.len();
        let parsed = match range_text.as_deref() {
            Some(text) => parse_ranges(text, len).and_then(|r| within(r, &granted)),
            // No Range: the granted ranges, as if asked for.
            None => granted_within(&granted, len),
        };
        let small = match (&parsed, &stored) {
            // A small xorb read whole (object storage): the range from memory.
            (Ok(r), XorbBytes::Whole(bytes)) if r.len() == 1 => {
                let (start, end) = (*r[0].start() as usize, *r[0].end() as usize);
                bytes.get(start..=end).map(Bytes::copy_from_slice)
            }
            (Ok(r), _) if r.len() == 1 && r[0].end() - r[0].start() < PIECE => st
                .store
                .read_checked_xorb(&xorb, r[0].clone())?
                .map(Bytes::from),
            _ => None,
        };
        Ok(Some((len, parsed, small)))
    })
    .await
    .map_err(fail)?;
    let (len, parsed, small) = found.ok_or_else(|| {
        fail(ApiError::new(
            ErrorCode::XorbNotFound,
            format!("xorb {xorb} is not stored on this server"),
        ))
    })?;
    let ranges = parsed.map_err(|problem| range_refusal(&xorb, problem))?;
    tracing::debug!(%xorb, ranges = ranges.len(), "xorb data");
    let mut response = ranged_response(&state, xorb, &ranges, len, small);
    let max_age = expires.saturating_sub(now);
    if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={max_age}, immutable")) {
        response.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    Ok(response)
}

/// The `Range` header's text, if there is one; 400 if it is not ASCII.
fn range_text(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    let text = v
        .to_str()
        .map_err(|_| ApiError::new(ErrorCode::InvalidRange, "the Range header is not ASCII"))?;
    Ok(Some(text.to_string()))
}

/// On object storage, room in the server's read budget for a small xorb read whole (held
/// while it is read); without room there, only the range asked for is read.
fn whole_read_permit(state: &SharedState) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if !state.store.on_object_storage() {
        return None;
    }
    let n = u32::try_from(xet_store::small_xorbs::SMALL_XORB_MAX).ok()?;
    Arc::clone(&state.resources.read_budget)
        .try_acquire_many_owned(n)
        .ok()
}

/// The presigned URL's expiry and the byte ranges it grants, once its signature is checked.
fn verify_url(
    state: &SharedState,
    xorb: &XorbHash,
    query: Option<&str>,
    now: u64,
) -> Result<(u64, GrantedRanges), ApiError> {
    let (mut expires, mut granted_text, mut signature) = (None, None, None);
    for pair in query.unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("e", v)) => expires = v.parse::<u64>().ok(),
            Some(("r", v)) => granted_text = Some(v),
            Some(("s", v)) => signature = Some(v),
            _ => {}
        }
    }
    let (Some(expires), Some(granted_text), Some(signature)) = (expires, granted_text, signature)
    else {
        return Err(ApiError::new(
            ErrorCode::InvalidSignature,
            format!("the URL for xorb {xorb} is not presigned: it needs e=<expiry>&r=<ranges>&s=<signature>; get one from a reconstruction"),
        ));
    };
    match state
        .auth
        .verify_presigned(xorb, expires, granted_text, signature, now)
    {
        Ok(granted) => Ok((expires, granted)),
        Err(AuthError::Expired { expired, now }) => Err(ApiError::new(
            ErrorCode::UrlExpired,
            format!("the URL for xorb {xorb} expired at {expired} (now {now}); ask for a new reconstruction"),
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::InvalidSignature,
            format!("the signature of the URL for xorb {xorb} is not valid"),
        )),
    }
}

/// The answer to a `Range` header that cannot be served: 416 with the object's length, 403 for
/// bytes the URL does not grant, 400 for the rest.
fn range_refusal(xorb: &XorbHash, problem: RangeProblem) -> Response {
    match problem {
        RangeProblem::Unsatisfiable { len } => {
            let mut r = ApiError::new(
                ErrorCode::RangeNotSatisfiable,
                format!("xorb {xorb}: {}", RangeProblem::Unsatisfiable { len }),
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r
        }
        e @ RangeProblem::NotGranted { .. } => {
            ApiError::new(ErrorCode::RangeNotGranted, format!("xorb {xorb}: {e}")).into_response()
        }
        e => ApiError::new(ErrorCode::InvalidRange, format!("xorb {xorb}: {e}")).into_response(),
    }
}

/// A 206 answer with `ranges` of the `len`-byte xorb: one range as it is (from `small` when its
/// bytes were read already), several as `multipart/byteranges`.
fn ranged_response(
    state: &SharedState,
    xorb: XorbHash,
    ranges: &[RangeInclusive<u64>],
    len: u64,
    small: Option<Bytes>,
) -> Response {
    let (segments, boundary) = if ranges.len() == 1 {
        (vec![Segment::Stored(ranges[0].clone())], None)
    } else {
        let boundary = format!("gitxet-{}", xet_protocol::random_hex(12));
        let segments = multipart(&boundary, ranges, len);
        (segments, Some(boundary))
    };
    let total: u64 = segments.iter().map(Segment::len).sum();
    state.metrics.sent_xorb_bytes.inc_by(total);
    let body = match small {
        Some(bytes) => Body::from(bytes),
        None => stream(
            Arc::clone(&state.store),
            xorb,
            segments,
            state
                .store
                .on_object_storage()
                .then(|| Arc::clone(&state.resources.read_budget)),
        ),
    };
    let mut response = (StatusCode::PARTIAL_CONTENT, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    let content_type = match &boundary {
        Some(boundary) => {
            HeaderValue::from_str(&format!("multipart/byteranges; boundary={boundary}")).ok()
        }
        None => {
            if let Ok(v) = HeaderValue::from_str(&content_range(&ranges[0], len)) {
                h.insert(header::CONTENT_RANGE, v);
            }
            None
        }
    };
    h.insert(
        header::CONTENT_TYPE,
        content_type.unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_str(&format!("\"{xorb}\"")) {
        h.insert(header::ETAG, v);
    }
    response
}

fn content_range(r: &RangeInclusive<u64>, len: u64) -> String {
    format!("bytes {}-{}/{len}", r.start(), r.end())
}

/// A piece of a response body: bytes made here, or a range of the stored xorb.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(Bytes),
    Stored(RangeInclusive<u64>),
}

impl Segment {
    fn len(&self) -> u64 {
        match self {
            Segment::Literal(b) => b.len() as u64,
            Segment::Stored(r) => r.end() - r.start() + 1,
        }
    }
}

/// A `multipart/byteranges` body (RFC 9110 §14.6) as segments.
fn multipart(boundary: &str, ranges: &[RangeInclusive<u64>], len: u64) -> Vec<Segment> {
    let mut out = Vec::with_capacity(2 * ranges.len() + 1);
    let mut first = true;
    for r in ranges {
        let head = format!(
            "{}--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: {}\r\n\r\n",
            if first { "" } else { "\r\n" },
            content_range(r, len)
        );
        first = false;
        out.push(Segment::Literal(Bytes::from(head)));
        out.push(Segment::Stored(r.clone()));
    }
    let tail = format!("{}--{boundary}--\r\n", if first { "" } else { "\r\n" });
    out.push(Segment::Literal(Bytes::from(tail)));
    out
}

/// The response body: the segments in order, stored ranges read [`PIECE`] bytes at a time
/// when the connection asks for more. On object storage, where each read is a request, a read
/// is [`OBJECT_PIECE`] bytes while the server's read budget allows, and up to
/// [`OBJECT_READ_AHEAD`] next reads start before the one the connection waits for is sent.
fn stream(
    store: Arc<Store>,
    xorb: XorbHash,
    segments: Vec<Segment>,
    budget: Option<Arc<Semaphore>>,
) -> Body {
    let state = BodyReader {
        store,
        xorb,
        pending: segments.into(),
        ahead: VecDeque::new(),
        budget,
    };
    Body::from_stream(futures_util::stream::unfold(state, |mut r| async move {
        let item = r.next_item().await?;
        if let Err(e) = &item {
            tracing::error!(xorb = %r.xorb, error = %e, "xorb data response aborted");
            r.pending.clear();
            r.ahead.clear();
        }
        Some((item, r))
    }))
}

/// Bytes of one read on object storage, where the next read starts while one is sent.
pub(crate) const OBJECT_PIECE: u64 = 4 << 20;

/// What [`stream`] has left to send, and the reads started ahead.
struct BodyReader {
    store: Arc<Store>,
    xorb: XorbHash,
    pending: VecDeque<Segment>,
    /// Reads started, in body order (all before `pending`'s first segment).
    ahead: VecDeque<PieceRead>,
    /// The server's read budget, on object storage; `None`: small reads, none ahead.
    budget: Option<Arc<Semaphore>>,
}

/// A read of stored bytes on a blocking thread, with its share of the read budget.
struct PieceRead {
    range: (u64, u64),
    task: tokio::task::JoinHandle<Result<Option<Vec<u8>>, xet_store::StoreError>>,
    _held: Option<OwnedSemaphorePermit>,
}

impl BodyReader {
    /// Starts reading the next piece of stored bytes, if the next segment is stored.
    fn start_next(&mut self) -> Option<PieceRead> {
        let Some(Segment::Stored(r)) = self.pending.front_mut() else {
            return None;
        };
        let (start, end) = (*r.start(), *r.end());
        // A large piece only with its bytes in the budget; else a small one, as on a disk.
        let want = (end - start + 1).min(OBJECT_PIECE);
        let held = self.budget.as_ref().and_then(|b| {
            let n = u32::try_from(want).ok()?;
            Arc::clone(b).try_acquire_many_owned(n).ok()
        });
        let len = if held.is_some() {
            want
        } else {
            want.min(PIECE)
        };
        let last = start + len - 1;
        if last < end {
            *r = last + 1..=end;
        } else {
            self.pending.pop_front();
        }
        let (store, xorb) = (Arc::clone(&self.store), self.xorb);
        let task =
            tokio::task::spawn_blocking(move || store.read_checked_xorb(&xorb, start..=last));
        Some(PieceRead {
            range: (start, last),
            task,
            _held: held,
        })
    }

    /// The next piece of the body; `None` at its end.
    async fn next_item(&mut self) -> Option<Result<Bytes, io::Error>> {
        let read = match self.ahead.pop_front() {
            Some(read) => read,
            None => match self.pending.front()? {
                Segment::Literal(_) => match self.pending.pop_front() {
                    Some(Segment::Literal(bytes)) => return Some(Ok(bytes)),
                    _ => return None,
                },
                Segment::Stored(_) => self.start_next()?,
            },
        };
        if self.budget.is_some() {
            // More reads go out while each holds its share of the budget.
            while self.ahead.len() < OBJECT_READ_AHEAD {
                let Some(next) = self.start_next() else { break };
                let budgeted = next._held.is_some();
                self.ahead.push_back(next);
                if !budgeted {
                    break;
                }
            }
        }
        let (start, last) = read.range;
        let xorb = self.xorb;
        Some(match read.task.await {
            Ok(Ok(Some(bytes))) => Ok(Bytes::from(bytes)),
            Ok(Ok(None)) => Err(io::Error::other(format!(
                "xorb {xorb} disappeared while being read"
            ))),
            Ok(Err(e)) => Err(io::Error::other(format!(
                "reading bytes {start}-{last} of xorb {xorb}: {e}"
            ))),
            Err(e) => Err(io::Error::other(format!("read worker failed: {e}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_forms() {
        assert_eq!(parse_ranges("bytes=0-9", 100), Ok(vec![0..=9]));
        assert_eq!(parse_ranges("bytes=90-", 100), Ok(vec![90..=99]));
        assert_eq!(parse_ranges("bytes=-10", 100), Ok(vec![90..=99]));
        assert_eq!(parse_ranges("bytes=-1000", 100), Ok(vec![0..=99]));
        assert_eq!(parse_ranges("bytes=50-1000", 100), Ok(vec![50..=99]));
        assert_eq!(
            parse_ranges("Bytes=0-1, 5-6,,10-", 20),
            Ok(vec![0..=1, 5..=6, 10..=19])
        );
        // Unsatisfiable ranges are dropped; if none is left, the whole set is.
        assert_eq!(parse_ranges("bytes=0-1,200-300", 100), Ok(vec![0..=1]));
        assert_eq!(
            parse_ranges("bytes=100-200", 100),
            Err(RangeProblem::Unsatisfiable { len: 100 })
        );
        assert_eq!(
            parse_ranges("bytes=-0", 100),
            Err(RangeProblem::Unsatisfiable { len: 100 })
        );
        for bad in [
            "bytes=5-4",
            "bytes=x-1",
            "bytes=",
            "bits=0-1",
            "bytes=1",
            "0-1",
        ] {
            assert!(
                matches!(parse_ranges(bad, 100), Err(RangeProblem::Malformed(_))),
                "{bad}"
            );
        }
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(
            parse_ranges(&many, 1 << 20),
            Err(RangeProblem::TooMany {
                count: MAX_RANGES + 1
            })
        );
        assert!(matches!(
            parse_ranges("bytes=0-99,0-99", 100),
            Err(RangeProblem::TooMuch { .. })
        ));
    }

    #[test]
    fn multipart_body_shape() {
        let data = b"ab...z...";
        let body: Vec<u8> = multipart("B", &[0..=1, 5..=5], 9)
            .into_iter()
            .flat_map(|s| match s {
                Segment::Literal(b) => b.to_vec(),
                Segment::Stored(r) => data[*r.start() as usize..=*r.end() as usize].to_vec(),
            })
            .collect();
        assert_eq!(
            body,
            b"--B\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 0-1/9\r\n\r\nab\r\n\
              --B\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 5-5/9\r\n\r\nz\r\n\
              --B--\r\n"
                .to_vec()
        );
    }
}
