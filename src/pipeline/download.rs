//! Rebuilding a file from its reconstruction plan, streaming.
//!
//! [`write_plan`] walks the plan's terms in order. For each run of consecutive terms served by
//! the same fetch range (a byte range of whole chunks of one stored xorb, cas-api.md §6.3) it
//! reads that range once from a [`XorbSource`], indexes its chunk headers ([`ChunkRange`]),
//! decompresses the chunks the terms use (hashing each once, for the file hash), and passes the
//! file's bytes to the sink one chunk at a time. Up to [`READ_AHEAD`] ranges are fetched concurrently ahead of the one
//! being decoded, so memory is bounded by `READ_AHEAD + 1` fetch ranges (each at most one xorb,
//! 64 MiB), plus the ranges kept for reuse by later terms (at most [`REUSE_BUDGET`]), plus one
//! chunk, whatever the file size. [`write_file`] also checks that the chunks
//! hash to the expected Xet file hash, which catches damaged stored data end to end.
//!
//! The bytes start `offset_into_first_range` into the first term; for a ranged plan the caller
//! stops reading at the range end (the last term is whole).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use crate::format::hash::file_hash;
use crate::format::xorb::{ChunkRange, XorbError, XorbLimits};
use crate::format::{ChunkHash, ChunkRef, FileHash, XorbHash};
use crate::pipeline::upload::{TargetError, XorbSource};
use crate::store::{FetchRange, ReconstructionPlan};

/// Why a file could not be rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("{what}: {source}")]
    Source { what: String, source: TargetError },
    #[error("bytes {start}-{end} of xorb {xorb} are damaged: {source}")]
    Damaged {
        xorb: XorbHash,
        start: u64,
        end: u64,
        source: Box<XorbError>,
    },
    #[error("inconsistent reconstruction plan: {0}")]
    Plan(String),
    #[error("cannot write the output: {0}")]
    Write(io::Error),
    #[error(
        "the downloaded chunks hash to Xet file {actual}, not {expected}: the server's copy of \
         one of the xorbs it was rebuilt from ({xorbs}) is damaged, or its reconstruction is \
         wrong; ask the server's administrator to run `git xet scrub`"
    )]
    WrongFile {
        expected: FileHash,
        actual: FileHash,
        /// The xorbs of the plan (the first few, for the message).
        xorbs: String,
    },
}

/// Writes the whole file `expected` from its (unranged) `plan` to `sink`, like [`write_plan`],
/// and checks end to end that the chunks written hash to `expected` (xet-format.md §1.6): a
/// fetch range of damaged or substituted chunks that still decodes is caught here, even though
/// reconstruction answers carry no chunk hashes. Returns the number of bytes written.
pub fn write_file(
    source: &dyn XorbSource,
    expected: &FileHash,
    plan: &ReconstructionPlan,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
) -> Result<u64, DownloadError> {
    if plan.offset_into_first_range != 0 {
        return Err(DownloadError::Plan(format!(
            "a whole-file plan of {expected} starts {} bytes into its first term",
            plan.offset_into_first_range
        )));
    }
    let mut chunks = Vec::new();
    let written = write_terms(source, plan, sink, Some(&mut chunks))?;
    let actual = file_hash(&chunks);
    if actual != *expected {
        let mut names: Vec<String> = Vec::new();
        for (x, _) in &plan.fetch {
            if names.len() == 4 {
                names.push("…".into());
                break;
            }
            names.push(x.to_hex());
        }
        return Err(DownloadError::WrongFile {
            expected: *expected,
            actual,
            xorbs: names.join(", "),
        });
    }
    Ok(written)
}

/// Writes the file `plan` describes to `sink`, one decoded chunk per call. Returns the number
/// of bytes written.
pub fn write_plan(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
) -> Result<u64, DownloadError> {
    write_terms(source, plan, sink, None)
}

/// Fetch ranges read ahead of the one being decoded. Each holds at most one xorb (64 MiB).
pub const READ_AHEAD: usize = 2;

/// Bytes of fetched ranges kept for later steps that need the same range again.
pub const REUSE_BUDGET: u64 = 128 << 20;

/// One fetch: a byte range of one xorb, serving terms `terms` of the plan.
struct Step<'p> {
    terms: std::ops::Range<usize>,
    xorb: XorbHash,
    range: &'p FetchRange,
    /// Where the bytes come from: fetched for this step, or kept from an earlier one.
    source: Source,
    /// Keep the bytes after this step, for a later step that reuses them.
    keep: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The n-th fetch (fetches are numbered in step order).
    Fetch(usize),
    /// The bytes kept from this earlier step.
    Reuse(usize),
}

/// Plans which steps fetch and which reuse bytes an earlier step fetched. Repeated content
/// (runs of zeros, repeated blocks) makes many terms name the same chunk range; fetching it
/// once instead of per term saves a request each. Ranges are kept only while the bytes kept at
/// once stay under [`REUSE_BUDGET`]; beyond that a range is fetched again.
fn plan_reuse(steps: &mut [Step]) -> usize {
    use std::collections::HashMap;
    type Key = (XorbHash, u64, u64);
    let key = |s: &Step| (s.xorb, *s.range.bytes.start(), *s.range.bytes.end());
    // Last step using each range.
    let mut last_use: HashMap<Key, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        last_use.insert(key(s), i);
    }
    // Ranges currently kept: key -> (step holding the bytes, its last use, size).
    let mut kept: HashMap<Key, (usize, usize)> = HashMap::new();
    let mut kept_bytes = 0u64;
    let mut fetches = 0usize;
    for (i, step) in steps.iter_mut().enumerate() {
        let k = key(step);
        let len = k.2.saturating_sub(k.1).saturating_add(1);
        // Drop what no later step needs.
        kept.retain(|kk, (_, last)| {
            let live = *last >= i;
            if !live {
                kept_bytes -= kk.2.saturating_sub(kk.1).saturating_add(1);
            }
            live
        });
        if let Some(&(holder, _)) = kept.get(&k) {
            step.source = Source::Reuse(holder);
            continue;
        }
        step.source = Source::Fetch(fetches);
        fetches += 1;
        let last = last_use[&k];
        if last > i && kept_bytes + len <= REUSE_BUDGET {
            step.keep = true;
            kept.insert(k, (i, last));
            kept_bytes += len;
        }
    }
    fetches
}

fn covers(chunks: &std::ops::Range<u32>, r: &std::ops::Range<u32>) -> bool {
    r.start <= chunks.start && chunks.end <= r.end
}

/// Groups the plan's terms into fetches: each run of consecutive terms served by the same fetch
/// range is one fetch (cas-api.md §6.3).
fn steps(plan: &ReconstructionPlan) -> Result<Vec<Step<'_>>, DownloadError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < plan.terms.len() {
        let term = &plan.terms[i];
        let xorb = term.xorb;
        let range = plan
            .fetch
            .iter()
            .find(|(x, _)| *x == xorb)
            .and_then(|(_, ranges)| ranges.iter().find(|r| covers(&term.chunks, &r.chunks)))
            .ok_or_else(|| {
                DownloadError::Plan(format!(
                    "no fetch range of xorb {xorb} covers chunks {}..{}",
                    term.chunks.start, term.chunks.end
                ))
            })?;
        let start = i;
        while plan
            .terms
            .get(i)
            .is_some_and(|t| t.xorb == xorb && covers(&t.chunks, &range.chunks))
        {
            i += 1;
        }
        out.push(Step {
            terms: start..i,
            xorb,
            range,
            source: Source::Fetch(0),
            keep: false,
        });
    }
    Ok(out)
}

/// The walk behind [`write_plan`] and [`write_file`]; collects every chunk's hash and length
/// into `chunks` when given.
///
/// Fetches run on [`READ_AHEAD`] threads, at most that many ranges ahead of the one being
/// decoded, and are consumed in plan order; decoding and writing stay on the calling thread.
fn write_terms(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
    chunks: Option<&mut Vec<ChunkRef>>,
) -> Result<u64, DownloadError> {
    let mut steps = steps(plan)?;
    let n_fetches = plan_reuse(&mut steps);
    let fetched: Vec<&Step> = steps
        .iter()
        .filter(|s| matches!(s.source, Source::Fetch(_)))
        .collect();
    debug_assert_eq!(fetched.len(), n_fetches);
    let fetch = |step: &Step| {
        let (start, end) = (*step.range.bytes.start(), *step.range.bytes.end());
        source
            .read_xorb_range(&step.xorb, step.range)
            .map_err(|source| DownloadError::Source {
                what: format!("reading bytes {start}-{end} of xorb {}", step.xorb),
                source,
            })
    };
    if fetched.len() <= 1 {
        let mut results = fetched.iter().map(|s| fetch(s));
        let mut next = || {
            results
                .next()
                .unwrap_or_else(|| Err(DownloadError::Plan("ran out of fetches".into())))
        };
        return decode_steps(plan, &steps, &mut next, sink, chunks);
    }
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    // How many fetches the consumer has taken; fetchers stay within READ_AHEAD of it.
    let taken = (Mutex::new(0usize), Condvar::new());
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(usize, Result<Vec<u8>, DownloadError>)>();
        for _ in 0..READ_AHEAD.min(fetched.len()) {
            let tx = tx.clone();
            let (fetched, next, abort, taken, fetch) = (&fetched, &next, &abort, &taken, &fetch);
            scope.spawn(move || loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= fetched.len() {
                    return;
                }
                {
                    let (lock, cv) = taken;
                    let mut n = lock.lock().unwrap_or_else(|e| e.into_inner());
                    while j >= *n + READ_AHEAD && !abort.load(Ordering::Relaxed) {
                        n = cv.wait(n).unwrap_or_else(|e| e.into_inner());
                    }
                }
                if abort.load(Ordering::Relaxed) {
                    return;
                }
                if tx.send((j, fetch(fetched[j]))).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut ready: BTreeMap<usize, Result<Vec<u8>, DownloadError>> = BTreeMap::new();
        let mut want = 0usize;
        let mut take = || -> Result<Vec<u8>, DownloadError> {
            let got = loop {
                if let Some(r) = ready.remove(&want) {
                    break r;
                }
                match rx.recv() {
                    Ok((j, r)) => {
                        ready.insert(j, r);
                    }
                    Err(_) => break Err(DownloadError::Plan("a fetch thread stopped".into())),
                }
            };
            want += 1;
            let (lock, cv) = &taken;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = want;
            cv.notify_all();
            got
        };
        let result = decode_steps(plan, &steps, &mut take, sink, chunks);
        // Stop the fetchers (on failure, or if the walk ended early) and let the scope join them.
        abort.store(true, Ordering::Relaxed);
        taken.1.notify_all();
        result
    })
}

/// A fetched range, indexed, with the hashes of the chunks decoded so far (a range kept for
/// later steps is neither indexed nor hashed twice).
struct Decoded {
    bytes: Vec<u8>,
    index: ChunkRange,
    hashes: Vec<Option<ChunkHash>>,
}

/// Decodes each step's bytes (from `next`, in step order) and writes the terms' chunks. Only
/// the chunks the terms use are decompressed, and each is hashed (when `chunks` wants hashes)
/// the first time it is used.
fn decode_steps(
    plan: &ReconstructionPlan,
    steps: &[Step],
    next: &mut dyn FnMut() -> Result<Vec<u8>, DownloadError>,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
    mut chunks: Option<&mut Vec<ChunkRef>>,
) -> Result<u64, DownloadError> {
    let mut skip = plan.offset_into_first_range;
    let mut written = 0u64;
    // Ranges kept for later steps (see `plan_reuse`), by the step that fetched them.
    let mut kept: HashMap<usize, Decoded> = HashMap::new();
    // The last step reusing each kept range, after which it is dropped.
    let mut last_reuse: HashMap<usize, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        if let Source::Reuse(holder) = s.source {
            last_reuse.insert(holder, i);
        }
    }
    let mut current;
    for (index, step) in steps.iter().enumerate() {
        let (xorb, range) = (step.xorb, step.range);
        let (start, end) = (*range.bytes.start(), *range.bytes.end());
        let damaged = |source| DownloadError::Damaged {
            xorb,
            start,
            end,
            source: Box::new(source),
        };
        let first = range.chunks.start;
        let decoded: &mut Decoded = match step.source {
            Source::Fetch(_) => {
                let bytes = next()?;
                let chunk_index =
                    ChunkRange::index(&bytes, &XorbLimits::SERVER).map_err(damaged)?;
                if chunk_index.len() != (range.chunks.end - first) as usize {
                    return Err(DownloadError::Plan(format!(
                        "bytes {start}-{end} of xorb {xorb} hold {} chunks, the plan expects {}",
                        chunk_index.len(),
                        range.chunks.end - first
                    )));
                }
                current = Decoded {
                    hashes: vec![None; chunk_index.len()],
                    index: chunk_index,
                    bytes,
                };
                if step.keep {
                    kept.entry(index).or_insert(current)
                } else {
                    &mut current
                }
            }
            Source::Reuse(holder) => kept.get_mut(&holder).ok_or_else(|| {
                DownloadError::Plan(format!("bytes of step {holder} were not kept"))
            })?,
        };
        for i in step.terms.clone() {
            let t = &plan.terms[i];
            let mut term_len = 0u64;
            for c in t.chunks.clone() {
                let local = (c - first) as usize;
                let len = decoded.index.uncompressed_len(local).unwrap_or(0) as usize;
                let mut data = Vec::with_capacity(len);
                decoded
                    .index
                    .decode_into(&decoded.bytes, local, &mut data)
                    .map_err(damaged)?;
                term_len += data.len() as u64;
                if let Some(refs) = chunks.as_deref_mut() {
                    let hash = match decoded.hashes.get_mut(local) {
                        Some(Some(h)) => *h,
                        Some(slot) => *slot.insert(ChunkHash::of(&data)),
                        None => ChunkHash::of(&data),
                    };
                    refs.push(ChunkRef {
                        hash,
                        len: data.len() as u64,
                    });
                }
                if skip > 0 {
                    let n = skip.min(data.len() as u64) as usize;
                    data.drain(..n);
                    skip -= n as u64;
                    if data.is_empty() {
                        continue;
                    }
                }
                written += data.len() as u64;
                sink(data).map_err(DownloadError::Write)?;
            }
            if term_len != u64::from(t.unpacked_len) {
                return Err(DownloadError::Plan(format!(
                    "term {i} (xorb {xorb}, chunks {}..{}) decodes to {term_len} bytes, not {}",
                    t.chunks.start, t.chunks.end, t.unpacked_len
                )));
            }
        }
        if let Source::Reuse(holder) = step.source {
            if last_reuse.get(&holder) == Some(&index) {
                kept.remove(&holder);
            }
        }
    }
    Ok(written)
}
