//! The body of a basic LFS download: the file rebuilt chunk by chunk from the stored xorbs.
//!
//! The file's reconstruction plan lists its terms (chunk ranges of xorbs). For each term the
//! xorb's footer is loaded and checked once (its chunk hashes and lengths must hash to the
//! xorb's name); it says where every chunk lies in the stored object. A piece is a run of
//! consecutive chunks of one term of at most [`PIECE`] decoded bytes and `2 × PIECE` stored bytes
//! (at least one chunk): only those bytes are read from the stored xorb, and every chunk is
//! decompressed and its hash compared with the footer's before any of it is sent. Pieces are
//! made on a blocking thread, the next one while one is sent, so a client that stops reading
//! holds two pieces, whatever the size of the file, and no thread. On object storage, pieces
//! are larger and several are read ahead, each decoded as soon as its bytes arrive, within the
//! server's read budget.
//!
//! A damaged chunk (or a missing xorb) ends the body early with an error: the connection is
//! aborted and the client sees a short body, never wrong bytes.

use std::io;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use xet_format::xorb::{decompress_chunk_into, ChunkHeader, XorbError, XorbFooter};
use xet_format::{ChunkHash, FileHash, LfsOid, XorbHash};
use xet_protocol::PlannedTerm;
use xet_store::{Store, StoreError};

/// Decoded bytes of one piece of the body (a piece is at least one chunk, ≤ 128 KiB).
pub(crate) const PIECE: u64 = 256 * 1024;

/// Why a file could not be rebuilt.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RebuildError {
    #[error("xorb {xorb} is not stored")]
    MissingXorb { xorb: XorbHash },
    #[error("term {term} names chunks {start}..{end} of xorb {xorb}, which has {num_chunks}")]
    BadTerm {
        term: usize,
        xorb: XorbHash,
        start: u32,
        end: u32,
        num_chunks: usize,
    },
    #[error("chunk {index} of stored xorb {xorb} is damaged: {problem}")]
    DamagedChunk {
        xorb: XorbHash,
        index: usize,
        problem: String,
    },
    #[error("chunks {start}..{end} of xorb {xorb}: {source}")]
    Range {
        xorb: XorbHash,
        start: usize,
        end: usize,
        source: Box<XorbError>,
    },
    #[error(transparent)]
    Store(Box<StoreError>),
}

impl From<StoreError> for RebuildError {
    fn from(e: StoreError) -> Self {
        RebuildError::Store(Box::new(e))
    }
}

/// Where the rebuild is: the term, its next chunk, the term's checked footer.
struct Position {
    terms: Vec<PlannedTerm>,
    term: usize,
    chunk: u32,
    footer: Option<Arc<XorbFooter>>,
    /// The footers of the xorbs already met (a file's terms return to the same xorbs, and on
    /// object storage each footer check is a request). At most the plan's xorbs.
    footers: std::collections::HashMap<XorbHash, Arc<XorbFooter>>,
}

impl Position {
    fn new(terms: Vec<PlannedTerm>) -> Self {
        let chunk = terms.first().map_or(0, |t| t.chunks.start);
        Self {
            terms,
            term: 0,
            chunk,
            footer: None,
            footers: std::collections::HashMap::new(),
        }
    }
}

/// A piece of the file: chunks `start..end` of one term's xorb, stored at `range` of its
/// object (from `stored_start`), `decoded` bytes once decoded.
struct Planned {
    xorb: XorbHash,
    footer: Arc<XorbFooter>,
    start: usize,
    end: usize,
    stored_start: u64,
    decoded: u64,
    range: std::ops::RangeInclusive<u64>,
}

/// Plans the next piece of the file (of about `piece` decoded bytes and at most twice that
/// stored) and moves `at` past it; `None` after the last one. Loads and checks each term's
/// footer once (the only request to the storage besides the reads).
fn plan_piece(
    store: &Store,
    at: &mut Position,
    piece: u64,
) -> Result<Option<Planned>, RebuildError> {
    loop {
        let Some(term) = at.terms.get(at.term) else {
            return Ok(None);
        };
        if at.chunk < term.chunks.end {
            break;
        }
        at.term += 1;
        at.footer = None;
        if let Some(next) = at.terms.get(at.term) {
            at.chunk = next.chunks.start;
        }
    }
    let footer = term_footer(store, at)?;
    let term = &at.terms[at.term];
    let xorb = term.xorb;
    let boundaries = &footer.chunk_boundary_offsets;
    let start = at.chunk as usize;
    let stored_start = if start == 0 {
        0
    } else {
        u64::from(boundaries[start - 1])
    };
    let mut end = start;
    let mut decoded = 0u64;
    while end < term.chunks.end as usize {
        let len = u64::from(footer.chunk_len(end).unwrap_or(0));
        let stored = u64::from(boundaries[end]) - stored_start;
        if end > start && (decoded + len > piece || stored > 2 * piece) {
            break;
        }
        decoded += len;
        end += 1;
    }
    let range = footer
        .url_range(start..end)
        .map_err(|source| RebuildError::Range {
            xorb,
            start,
            end,
            source: Box::new(source),
        })?;
    at.chunk = end as u32;
    Ok(Some(Planned {
        xorb,
        footer,
        start,
        end,
        stored_start,
        decoded,
        range,
    }))
}

/// The footer of the xorb of the term at `at` (loaded once per xorb, kept for the term), its
/// chunk range checked against it. The store hands out only footers whose chunk hashes and
/// lengths hash to the xorb's name (crates/xet-store/src/integrity.rs).
fn term_footer(store: &Store, at: &mut Position) -> Result<Arc<XorbFooter>, RebuildError> {
    if let Some(f) = &at.footer {
        return Ok(Arc::clone(f));
    }
    let term = &at.terms[at.term];
    let xorb = term.xorb;
    let f = match at.footers.get(&xorb) {
        Some(f) => Arc::clone(f),
        None => {
            let f = store
                .footer(&xorb)?
                .ok_or(RebuildError::MissingXorb { xorb })?;
            at.footers.insert(xorb, Arc::clone(&f));
            f
        }
    };
    if term.chunks.end as usize > f.num_chunks() || term.chunks.start > term.chunks.end {
        return Err(RebuildError::BadTerm {
            term: at.term,
            xorb,
            start: term.chunks.start,
            end: term.chunks.end,
            num_chunks: f.num_chunks(),
        });
    }
    at.footer = Some(Arc::clone(&f));
    Ok(f)
}

/// The stored bytes of a planned piece (its xorb was checked when its footer was loaded).
fn read_piece(store: &Store, p: &Planned) -> Result<Vec<u8>, RebuildError> {
    store
        .read_checked_xorb(&p.xorb, p.range.clone())?
        .ok_or(RebuildError::MissingXorb { xorb: p.xorb })
}

/// Decodes and checks a planned piece from its stored bytes; damage takes the xorb out of
/// service.
fn decode_planned(store: &Store, p: &Planned, raw: &[u8]) -> Result<Bytes, RebuildError> {
    decode_piece(
        raw,
        &p.footer,
        p.xorb,
        p.start,
        p.end,
        p.stored_start,
        p.decoded,
    )
    .inspect_err(|e| {
        if let RebuildError::DamagedChunk { problem, .. } = e {
            // Silent damage (the object's stamp did not change): take it out of service.
            store.report_damage(&p.xorb, problem);
        }
    })
    .map(Bytes::from)
}

/// The next piece of the file, `None` after the last one: planned, read and decoded at once
/// (on a disk, where a read costs no round trip).
fn next_piece(store: &Store, at: &mut Position) -> Result<Option<Bytes>, RebuildError> {
    let Some(p) = plan_piece(store, at, PIECE)? else {
        return Ok(None);
    };
    let raw = read_piece(store, &p)?;
    decode_planned(store, &p, &raw).map(Some)
}

/// Decodes chunks `start..end` of `xorb` from `raw` (their stored bytes, beginning at
/// `stored_start`), checking each against the footer.
fn decode_piece(
    raw: &[u8],
    footer: &XorbFooter,
    xorb: XorbHash,
    start: usize,
    end: usize,
    stored_start: u64,
    decoded: u64,
) -> Result<Vec<u8>, RebuildError> {
    let boundaries = &footer.chunk_boundary_offsets;
    let mut out = Vec::with_capacity(decoded as usize);
    let mut offset = 0usize;
    for (index, &boundary) in boundaries.iter().enumerate().take(end).skip(start) {
        let damaged = |problem: String| RebuildError::DamagedChunk {
            xorb,
            index,
            problem,
        };
        let chunk_end = (u64::from(boundary) - stored_start) as usize;
        let header: [u8; 8] = raw
            .get(offset..offset + 8)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| damaged("the chunk header is cut short".into()))?;
        let header = ChunkHeader::decode(&header).map_err(|e| damaged(e.to_string()))?;
        let payload = raw
            .get(offset + 8..chunk_end)
            .ok_or_else(|| damaged("the chunk is cut short".into()))?;
        let before = out.len();
        decompress_chunk_into(&header, payload, &mut out).map_err(|e| damaged(e.to_string()))?;
        let expected = footer.chunk_len(index).unwrap_or(0) as usize;
        if out.len() - before != expected {
            return Err(damaged(format!(
                "{} bytes decoded, the footer says {expected}",
                out.len() - before
            )));
        }
        let hash = ChunkHash::of(&out[before..]);
        if hash != footer.chunk_hashes[index] {
            return Err(damaged(format!(
                "the data hashes to {hash}, the footer says {}",
                footer.chunk_hashes[index]
            )));
        }
        offset = chunk_end;
    }
    Ok(out)
}

/// What a download is, for its log line.
#[derive(Debug, Clone)]
pub struct Download {
    pub repo: String,
    pub oid: LfsOid,
    pub file: FileHash,
}

/// Decoded bytes of one piece on object storage, where each read is a request.
pub(crate) const OBJECT_PIECE: u64 = 4 << 20;

/// The response body rebuilding `terms` (a whole-file plan) from `store`. On object storage
/// (`budget`: the server's read budget), pieces are [`OBJECT_PIECE`] bytes while the budget
/// allows, and up to [`OBJECT_READ_AHEAD`](crate::server::limits::OBJECT_READ_AHEAD) next pieces are read while one is decoded and
/// sent.
pub fn body(
    store: Arc<Store>,
    terms: Vec<PlannedTerm>,
    download: Download,
    budget: Option<Arc<Semaphore>>,
) -> Body {
    match budget {
        None => local_body(store, terms, download),
        Some(budget) => object_body(store, terms, download, budget),
    }
}

/// Logs how a download ended; the error to send, if it failed.
fn finish(download: &Download, sent: u64, error: Option<&RebuildError>) -> Option<io::Error> {
    let Download { repo, oid, file } = download;
    match error {
        None => {
            tracing::info!(%repo, %oid, %file, bytes = sent, "basic download");
            None
        }
        Some(e) => {
            tracing::error!(%repo, %oid, %file, sent, error = %e, "basic download failed");
            Some(io::Error::other(format!("object {oid}: {e}")))
        }
    }
}

fn worker_failed(download: &Download, e: tokio::task::JoinError) -> io::Error {
    io::Error::other(format!(
        "object {}: download worker failed: {e}",
        download.oid
    ))
}

/// A piece of a disk body being made on a blocking thread; it hands the position back.
type Making = tokio::task::JoinHandle<(Result<Option<Bytes>, RebuildError>, Position)>;

fn make_next(store: &Arc<Store>, mut at: Position) -> Making {
    let st = Arc::clone(store);
    tokio::task::spawn_blocking(move || {
        let piece = next_piece(&st, &mut at);
        (piece, at)
    })
}

/// [`body`] on a disk: each piece planned, read and decoded in one blocking task, the next
/// one made while this one is sent.
fn local_body(store: Arc<Store>, terms: Vec<PlannedTerm>, download: Download) -> Body {
    let making = make_next(&store, Position::new(terms));
    let start = (store, making, download, 0u64);
    Body::from_stream(futures_util::stream::unfold(
        Some(start),
        |state| async move {
            let (store, making, download, sent) = state?;
            match making.await {
                Ok((Ok(Some(piece)), at)) => {
                    let sent = sent + piece.len() as u64;
                    let making = make_next(&store, at);
                    Some((Ok(piece), Some((store, making, download, sent))))
                }
                Ok((Ok(None), _)) => {
                    finish(&download, sent, None);
                    None
                }
                Ok((Err(e), _)) => Some((
                    finish(&download, sent, Some(&e)).map_or(Ok(Bytes::new()), Err),
                    None,
                )),
                Err(e) => Some((Err(worker_failed(&download, e)), None)),
            }
        },
    ))
}

/// A planned piece being read and decoded on a blocking thread, with its share of the read
/// budget. Pieces ahead are decoded as soon as their bytes arrive, not when the connection asks
/// for them: the check of one piece overlaps the reads and the sending of the others.
struct Reading {
    task: tokio::task::JoinHandle<Result<Made, RebuildError>>,
    /// Whether the piece's stored bytes were read recently (no request to the store).
    recent: bool,
    held: Option<OwnedSemaphorePermit>,
}

/// A decoded piece, and its stored bytes if they are small enough to keep for later pieces.
struct Made {
    decoded: Bytes,
    keep: Option<(XorbHash, std::ops::RangeInclusive<u64>, Arc<Vec<u8>>)>,
}

/// Stored bytes of at most this size are kept for later pieces of the same download that
/// read the same range (repeated content: runs of zeros, a block that recurs).
const RECENT_PIECE: usize = 1 << 20;

/// Bytes of recent reads kept per download.
const RECENT_BYTES: usize = 4 << 20;

/// A read of the stored bytes `range` of a xorb, with its share of the server's read budget.
type RecentRead = (
    XorbHash,
    std::ops::RangeInclusive<u64>,
    Arc<Vec<u8>>,
    OwnedSemaphorePermit,
);

/// The recent small reads of one download, newest last; what it holds comes out of the
/// server's read budget (a read that does not fit is not kept).
struct Recent {
    reads: std::collections::VecDeque<RecentRead>,
    bytes: usize,
    budget: Arc<Semaphore>,
}

impl Recent {
    fn new(budget: Arc<Semaphore>) -> Self {
        Self {
            reads: std::collections::VecDeque::new(),
            bytes: 0,
            budget,
        }
    }

    fn get(&self, xorb: &XorbHash, range: &std::ops::RangeInclusive<u64>) -> Option<Arc<Vec<u8>>> {
        self.reads
            .iter()
            .rev()
            .find(|(x, r, _, _)| x == xorb && r == range)
            .map(|(_, _, b, _)| Arc::clone(b))
    }

    fn put(&mut self, xorb: XorbHash, range: std::ops::RangeInclusive<u64>, bytes: Arc<Vec<u8>>) {
        if bytes.len() > RECENT_PIECE || self.get(&xorb, &range).is_some() {
            return;
        }
        while self.bytes + bytes.len() > RECENT_BYTES {
            match self.reads.pop_front() {
                Some((_, _, old, _)) => self.bytes -= old.len(),
                None => break,
            }
        }
        let held = u32::try_from(bytes.len())
            .ok()
            .and_then(|n| Arc::clone(&self.budget).try_acquire_many_owned(n).ok());
        if let Some(held) = held {
            self.bytes += bytes.len();
            self.reads.push_back((xorb, range, bytes, held));
        }
    }
}

/// Where an object-storage body is.
struct ObjectState {
    store: Arc<Store>,
    at: Option<Position>,
    /// Pieces started, in body order.
    ahead: std::collections::VecDeque<Reading>,
    budget: Arc<Semaphore>,
    download: Download,
    sent: u64,
    recent: Recent,
}

impl ObjectState {
    /// Plans the next piece (a large one if the budget allows) and starts reading it; `None`
    /// after the last one.
    async fn start_next(&mut self) -> Result<Option<Reading>, io::Error> {
        let Some(mut at) = self.at.take() else {
            return Ok(None);
        };
        // A piece's stored bytes (at most twice its size) and, for a moment, its decoded ones.
        let held = u32::try_from(3 * OBJECT_PIECE)
            .ok()
            .and_then(|n| Arc::clone(&self.budget).try_acquire_many_owned(n).ok());
        let piece = if held.is_some() { OBJECT_PIECE } else { PIECE };
        let st = Arc::clone(&self.store);
        let (at, planned) = tokio::task::spawn_blocking(move || {
            let p = plan_piece(&st, &mut at, piece);
            (at, p)
        })
        .await
        .map_err(|e| worker_failed(&self.download, e))?;
        let planned = match planned {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(None),
            Err(e) => {
                return Err(finish(&self.download, self.sent, Some(&e))
                    .unwrap_or_else(|| io::Error::other("rebuild failed")))
            }
        };
        self.at = Some(at);
        let st = Arc::clone(&self.store);
        if let Some(raw) = self.recent.get(&planned.xorb, &planned.range) {
            let task = tokio::task::spawn_blocking(move || {
                decode_planned(&st, &planned, &raw).map(|decoded| Made {
                    decoded,
                    keep: None,
                })
            });
            return Ok(Some(Reading {
                task,
                recent: true,
                held: None,
            }));
        }
        let task = tokio::task::spawn_blocking(move || {
            let raw = read_piece(&st, &planned)?;
            let decoded = decode_planned(&st, &planned, &raw)?;
            let keep = (raw.len() <= RECENT_PIECE)
                .then(|| (planned.xorb, planned.range.clone(), Arc::new(raw)));
            Ok(Made { decoded, keep })
        });
        Ok(Some(Reading {
            task,
            recent: false,
            held,
        }))
    }

    /// The next piece of the body; `None` at its end.
    async fn next_item(&mut self) -> Option<Result<Bytes, io::Error>> {
        let current = match self.ahead.pop_front() {
            Some(r) => r,
            None => match self.start_next().await {
                Ok(Some(r)) => r,
                Ok(None) => {
                    finish(&self.download, self.sent, None);
                    return None;
                }
                Err(e) => return Some(Err(e)),
            },
        };
        // The next reads go out before this piece is decoded and sent: at least one, then
        // more while each holds its share of the budget (or needs no read), up to
        // OBJECT_READ_AHEAD.
        let mut more = true;
        while more && self.ahead.len() < crate::server::limits::OBJECT_READ_AHEAD {
            match self.start_next().await {
                Ok(Some(next)) => {
                    more = next.held.is_some() || next.recent;
                    self.ahead.push_back(next);
                }
                Ok(None) => break,
                Err(e) => return Some(Err(e)),
            }
        }
        let Reading {
            task, held: _held, ..
        } = current;
        Some(match task.await {
            Ok(Ok(Made { decoded, keep })) => {
                if let Some((xorb, range, raw)) = keep {
                    self.recent.put(xorb, range, raw);
                }
                self.sent += decoded.len() as u64;
                Ok(decoded)
            }
            Ok(Err(e)) => Err(finish(&self.download, self.sent, Some(&e))
                .unwrap_or_else(|| io::Error::other("rebuild failed"))),
            Err(e) => Err(worker_failed(&self.download, e)),
        })
    }
}

/// [`body`] on object storage.
fn object_body(
    store: Arc<Store>,
    terms: Vec<PlannedTerm>,
    download: Download,
    budget: Arc<Semaphore>,
) -> Body {
    let state = ObjectState {
        store,
        at: Some(Position::new(terms)),
        ahead: std::collections::VecDeque::new(),
        recent: Recent::new(Arc::clone(&budget)),
        budget,
        download,
        sent: 0,
    };
    Body::from_stream(futures_util::stream::unfold(
        Some(state),
        |state| async move {
            let mut state = state?;
            let item = state.next_item().await?;
            // After an error the body ends: the connection is aborted.
            let next = item.is_ok().then_some(state);
            Some((item, next))
        },
    ))
}
