//! Rebuilding a file from its reconstruction plan.
//!
//! The plan's terms are grouped into steps: each run of consecutive terms served by the same
//! fetch range (a byte range of whole chunks of one stored xorb, docs/cas-api.md §6.4) is one step.
//! A step's range is read from a [`XorbSource`], its chunk headers indexed once
//! ([`ChunkRange`]), and only the chunks its terms use are decompressed; for the Xet file hash,
//! each chunk is hashed the first time it is used. Two ways to write the result:
//!
//! - [`write_file_at`] (the agent's): steps are grouped by range, each range is fetched once,
//!   and [`DOWNLOAD_WORKERS`] threads fetch, decode and write their terms where they belong in
//!   the file (positional writes, one at a time). A range whose terms use its chunks in order, once each (all
//!   of a file without repeated content) is decoded as its bytes arrive ([`ChunkSplitter`]):
//!   a 1 MiB write buffer and one chunk per thread. A range used out of order or by several
//!   terms is held whole (at most one xorb, 64 MiB) while its terms are decoded. Into a
//!   [`PartialFile`] ([`write_part`]), each stretch written is recorded as it lands, and what
//!   an interrupted download of the file recorded is checked and kept: only the rest of each
//!   range is fetched.
//! - [`write_plan`] and [`write_file`]: a sink that takes the bytes in file order. Up to
//!   [`READ_AHEAD`] ranges are fetched concurrently ahead of the one being decoded, and ranges
//!   needed again later are kept within [`REUSE_BUDGET`].
//!
//! [`write_file_at_with`] and [`write_part`] also say where the file's bytes came from
//! ([`Written`]): copied from earlier versions on this machine, kept from a partial file, read
//! from a source's local cache (each read's [`Origin`]), and the stored xorb bytes fetched from
//! the endpoint, which is what the transfer journal records as the wire.
//!
//! [`write_file`] and [`write_file_at`] also check that the chunks hash to the expected Xet
//! file hash, which catches damaged stored data end to end. For a ranged plan the bytes start
//! `offset_into_first_range` into the first term, and the caller stops reading at the range
//! end (the last term is whole).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use crate::pipeline::prior::LocalChunks;
use crate::pipeline::resume::{Extent, PartialFile};
use xet_format::hash::file_hash;
use xet_format::xorb::header::{CHUNK_HEADER_LEN, MAX_CHUNK_LEN};
use xet_format::xorb::{
    decompress_chunk_into, ChunkRange, ChunkSplitter, SplitChunk, XorbError, XorbLimits,
};
use xet_format::{ChunkHash, ChunkRef, FileHash, XorbHash};
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::{FetchRange, ReconstructionPlan};
use xet_protocol::{Origin, TargetError, XorbSource};

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
/// and checks end to end that the chunks written hash to `expected` (docs/format.md §1.6): a
/// fetch range of damaged or substituted chunks that still decodes is caught here, even though
/// reconstruction answers carry no chunk hashes. Returns the number of bytes written.
pub fn write_file(
    source: &dyn XorbSource,
    expected: &FileHash,
    plan: &ReconstructionPlan,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<u64, DownloadError> {
    if plan.offset_into_first_range != 0 {
        return Err(DownloadError::Plan(format!(
            "a whole-file plan of {expected} starts {} bytes into its first term",
            plan.offset_into_first_range
        )));
    }
    let mut chunks = Vec::new();
    let written = write_terms(source, plan, sink, Some(&mut chunks))?;
    check_file_hash(expected, plan, &chunks)?;
    Ok(written)
}

/// Checks that `chunks` hash to `expected`.
fn check_file_hash(
    expected: &FileHash,
    plan: &ReconstructionPlan,
    chunks: &[ChunkRef],
) -> Result<(), DownloadError> {
    let actual = file_hash(chunks);
    if actual == *expected {
        return Ok(());
    }
    let mut names: Vec<String> = Vec::new();
    for (x, _) in &plan.fetch {
        if names.len() == 4 {
            names.push("…".into());
            break;
        }
        names.push(x.to_hex());
    }
    Err(DownloadError::WrongFile {
        expected: *expected,
        actual,
        xorbs: names.join(", "),
    })
}

/// Writes the file `plan` describes to `sink`, one decoded chunk per call. Returns the number
/// of bytes written.
pub fn write_plan(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<u64, DownloadError> {
    write_terms(source, plan, sink, None)
}

/// [`write_plan`] into memory: appends the plan's bytes to `out` (decoded there directly, with
/// no copy through a sink) and returns every chunk the plan's terms decode (hash and length, in
/// order, from the first term's first chunk, whatever `offset_into_first_range` skips): what a
/// reader of part of a file checks against the file's chunk list.
pub(crate) fn write_plan_into(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    out: &mut Vec<u8>,
) -> Result<Vec<ChunkRef>, DownloadError> {
    let mut chunks = Vec::new();
    write_terms_to(source, plan, Output::Collect(out), Some(&mut chunks))?;
    Ok(chunks)
}

/// Where decoded bytes go.
enum Output<'a> {
    /// Passed to a sink in pieces of about [`EMIT_BYTES`].
    Stream(&'a mut dyn FnMut(&[u8]) -> io::Result<()>),
    /// Appended to a buffer.
    Collect(&'a mut Vec<u8>),
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

impl Step<'_> {
    fn damaged(&self, source: XorbError) -> DownloadError {
        DownloadError::Damaged {
            xorb: self.xorb,
            start: *self.range.bytes.start(),
            end: *self.range.bytes.end(),
            source: Box::new(source),
        }
    }
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
/// range is one fetch (docs/cas-api.md §6.4).
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
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    chunks: Option<&mut Vec<ChunkRef>>,
) -> Result<u64, DownloadError> {
    write_terms_to(source, plan, Output::Stream(sink), chunks)
}

fn write_terms_to(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    output: Output,
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
        return decode_steps(plan, &steps, &mut next, output, chunks);
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
            scope.spawn(move || fetch_in_turn(fetched, next, abort, taken, &tx, fetch));
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
        let result = decode_steps(plan, &steps, &mut take, output, chunks);
        // Stop the fetchers (on failure, or if the walk ended early) and let the scope join them.
        abort.store(true, Ordering::Relaxed);
        taken.1.notify_all();
        result
    })
}

/// One fetcher of [`write_terms_to`]: takes the next of `fetched` in turn (`next`) and sends
/// its bytes with its index, waiting while it would be more than [`READ_AHEAD`] ahead of the
/// fetches the consumer has `taken`; stops when none is left, on `abort`, or when the consumer
/// is gone.
fn fetch_in_turn(
    fetched: &[&Step<'_>],
    next: &AtomicUsize,
    abort: &AtomicBool,
    taken: &(Mutex<usize>, Condvar),
    tx: &mpsc::Sender<(usize, Result<Vec<u8>, DownloadError>)>,
    fetch: &dyn Fn(&Step<'_>) -> Result<Vec<u8>, DownloadError>,
) {
    loop {
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
        if abort.load(Ordering::Relaxed) || tx.send((j, fetch(fetched[j]))).is_err() {
            return;
        }
    }
}

/// A fetched range, indexed, with the hashes of the chunks decoded so far (a range used by
/// several steps is neither indexed nor hashed twice).
struct Decoded {
    bytes: Vec<u8>,
    index: ChunkRange,
    hashes: Vec<Option<ChunkHash>>,
}

impl Drop for Decoded {
    /// The fetched range's buffer is kept for the next fetch (see [`xet_protocol::util::buffers`]).
    fn drop(&mut self) {
        xet_protocol::util::buffers::give(std::mem::take(&mut self.bytes));
    }
}

impl Decoded {
    /// Indexes the bytes fetched for `step`, checking they hold the chunks the plan expects.
    fn new(step: &Step, bytes: Vec<u8>) -> Result<Self, DownloadError> {
        let index = ChunkRange::index(&bytes, &XorbLimits::SERVER).map_err(|e| step.damaged(e))?;
        let expected = step
            .range
            .chunks
            .end
            .saturating_sub(step.range.chunks.start) as usize;
        if index.len() != expected {
            return Err(DownloadError::Plan(format!(
                "bytes {}-{} of xorb {} hold {} chunks, the plan expects {expected}",
                step.range.bytes.start(),
                step.range.bytes.end(),
                step.xorb,
                index.len(),
            )));
        }
        Ok(Self {
            hashes: vec![None; index.len()],
            index,
            bytes,
        })
    }
}

/// What decoded bytes are passed on to.
type Emit<'a> = dyn FnMut(&[u8]) -> Result<(), DownloadError> + 'a;

/// Bytes decoded before they are passed on: the size of one write.
const EMIT_BYTES: usize = 1 << 20;

/// Decodes the chunks of `step`'s terms from `decoded` and appends the file's bytes, in order,
/// to `buf`; with `emit`, passes them on in pieces of about [`EMIT_BYTES`] (`buf`, empty
/// before, is then a reused buffer, emptied at the end). Only the chunks
/// the terms use are decompressed; with `refs`, each chunk's hash (computed the first time
/// the chunk is used) and length are pushed. Checks each term's length against the plan.
fn decode_step(
    plan: &ReconstructionPlan,
    step: &Step,
    decoded: &mut Decoded,
    mut refs: Option<&mut Vec<ChunkRef>>,
    buf: &mut Vec<u8>,
    mut emit: Option<&mut Emit>,
) -> Result<(), DownloadError> {
    let first = step.range.chunks.start;
    if emit.is_some() {
        buf.clear();
    }
    for i in step.terms.clone() {
        let t = &plan.terms[i];
        let mut term_len = 0u64;
        for c in t.chunks.clone() {
            let local = c.checked_sub(first).map_or(usize::MAX, |l| l as usize);
            let before = buf.len();
            decoded
                .index
                .decode_into(&decoded.bytes, local, buf)
                .map_err(|e| step.damaged(e))?;
            let data = &buf[before..];
            term_len += data.len() as u64;
            if let Some(refs) = refs.as_deref_mut() {
                let hash = match decoded.hashes.get_mut(local) {
                    Some(Some(h)) => *h,
                    Some(slot) => *slot.insert(ChunkHash::of(data)),
                    None => ChunkHash::of(data),
                };
                refs.push(ChunkRef {
                    hash,
                    len: data.len() as u64,
                });
            }
            if let Some(emit) = emit.as_deref_mut() {
                if buf.len() >= EMIT_BYTES {
                    emit(buf)?;
                    buf.clear();
                }
            }
        }
        if term_len != u64::from(t.unpacked_len) {
            return Err(DownloadError::Plan(format!(
                "term {i} (xorb {}, chunks {}..{}) decodes to {term_len} bytes, not {}",
                step.xorb, t.chunks.start, t.chunks.end, t.unpacked_len
            )));
        }
    }
    if let Some(emit) = emit {
        if !buf.is_empty() {
            emit(buf)?;
            buf.clear();
        }
    }
    Ok(())
}

/// Decodes each step's bytes (from `next`, in step order) and writes the terms' bytes.
fn decode_steps(
    plan: &ReconstructionPlan,
    steps: &[Step],
    next: &mut dyn FnMut() -> Result<Vec<u8>, DownloadError>,
    output: Output,
    mut chunks: Option<&mut Vec<ChunkRef>>,
) -> Result<u64, DownloadError> {
    let mut skip = plan.offset_into_first_range;
    let mut written = 0u64;
    // Ranges kept for later steps (see `plan_reuse`), by the step that fetched them.
    let mut kept: HashMap<usize, Decoded> = HashMap::new();
    let last_reuse = last_reuses(steps);
    let mut own = Vec::new();
    let (buf, mut sink) = match output {
        Output::Stream(sink) => {
            own.reserve(EMIT_BYTES + MAX_CHUNK_LEN as usize);
            (&mut own, Some(sink))
        }
        Output::Collect(out) => (out, None),
    };
    let collected_from = buf.len();
    let streaming = sink.is_some();
    let mut emit = |piece: &[u8]| -> Result<(), DownloadError> {
        let mut piece = piece;
        if skip > 0 {
            let n = skip.min(piece.len() as u64) as usize;
            piece = &piece[n..];
            skip -= n as u64;
        }
        if piece.is_empty() {
            return Ok(());
        }
        written += piece.len() as u64;
        match sink.as_mut() {
            Some(sink) => sink(piece).map_err(DownloadError::Write),
            None => Ok(()),
        }
    };
    let mut current;
    for (index, step) in steps.iter().enumerate() {
        let decoded: &mut Decoded = match step.source {
            Source::Fetch(_) => {
                current = Decoded::new(step, next()?)?;
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
        decode_step(
            plan,
            step,
            decoded,
            chunks.as_deref_mut(),
            buf,
            streaming.then_some(&mut emit as &mut Emit),
        )?;
        if let Source::Reuse(holder) = step.source {
            if last_reuse.get(&holder) == Some(&index) {
                kept.remove(&holder);
            }
        }
    }
    if !streaming {
        // Collected: what `offset_into_first_range` skips comes off the front.
        let n = skip.min((buf.len() - collected_from) as u64) as usize;
        buf.drain(collected_from..collected_from + n);
        written = (buf.len() - collected_from) as u64;
    }
    Ok(written)
}

/// The last step reusing each kept range (by the step that fetched it), after which it is
/// dropped.
fn last_reuses(steps: &[Step]) -> HashMap<usize, usize> {
    let mut last = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        if let Source::Reuse(holder) = s.source {
            last.insert(holder, i);
        }
    }
    last
}

/// Where [`write_file_at`] writes: a file written at offsets, from several threads at once.
pub trait WriteAt: Sync {
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Whether this writer makes concurrent writes take turns itself where they must (so that
    /// [`write_file_at`] lets its threads call it at once).
    fn takes_turns(&self) -> bool {
        false
    }
}

#[cfg(unix)]
impl WriteAt for std::fs::File {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }
}

/// Writes to a [`WriteAt`] one at a time (unless it takes turns itself, like a
/// [`PartialFile`], whose writes go to several files). A filesystem takes a file's lock for
/// each buffered write (ext4 does), and writers waiting on it in the kernel spin while the
/// holder copies: on a machine of few cores that spinning takes a core from the fetching,
/// decoding and hashing of the other threads. Waiting here parks the thread instead.
struct OneWriteAtATime<'a> {
    out: &'a dyn WriteAt,
    turn: std::sync::Mutex<()>,
}

impl WriteAt for OneWriteAtATime<'_> {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.out.takes_turns() {
            return self.out.write_all_at(buf, offset);
        }
        let _turn = self.turn.lock_anyway();
        self.out.write_all_at(buf, offset)
    }
}

/// Threads of [`write_file_at`], each fetching and decoding one range at a time: memory is
/// bounded by this many fetch ranges held whole (each at most one xorb, 64 MiB; streamed
/// ranges hold one chunk) plus one write buffer each, whatever the file size.
pub const DOWNLOAD_WORKERS: usize = 3;

/// Writes the whole file `expected` from its (unranged) `plan` into `out` at its offsets, and
/// checks that the chunks hash to `expected`, like [`write_file`]. Each distinct fetch range is
/// fetched once and decoded on [`DOWNLOAD_WORKERS`] threads, each writing the terms it decodes
/// where they belong in the file (repeated content costs no second fetch, and nothing is kept
/// for later). `progress` is called on the calling thread with the bytes written so far.
/// Returns the number of bytes written.
pub fn write_file_at(
    source: &dyn XorbSource,
    expected: &FileHash,
    plan: &ReconstructionPlan,
    out: &dyn WriteAt,
    progress: &mut dyn FnMut(u64) -> io::Result<()>,
) -> Result<u64, DownloadError> {
    let local = LocalChunks::default();
    write_file_at_with(source, expected, plan, out, &local, progress).map(|w| w.written)
}

/// What [`write_file_at_with`] wrote, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Written {
    /// Bytes of the file written.
    pub written: u64,
    /// Of those, bytes copied from local chunks instead of fetched.
    pub local: u64,
    /// Of those, bytes an earlier download had written into the partial file (see
    /// [`write_part`]), checked and kept instead of fetched.
    pub resumed: u64,
    /// Of those, bytes decoded from chunks the source read from a cache on this machine (the
    /// download chunk cache; [`Origin::local`]).
    pub cached: u64,
    /// Stored xorb bytes (compressed, chunk headers included) the source fetched from the
    /// endpoint for the file ([`Origin::fetched`]): what crossed the wire, which is not a count
    /// of file bytes.
    pub fetched: u64,
    /// The file's chunks in order (checked: they hash to the file's hash), for the caller to
    /// remember (see [`crate::object_chunks`]).
    pub chunks: Vec<ChunkRef>,
}

/// [`write_file_at`], copying the chunks `local` holds instead of fetching them: a run of terms
/// whose every chunk is local is read from the local files (each chunk's hash checked as it is
/// read) and its fetch range is not fetched for it. A local chunk that no longer reads back
/// right makes its terms fetched after all.
pub fn write_file_at_with(
    source: &dyn XorbSource,
    expected: &FileHash,
    plan: &ReconstructionPlan,
    out: &dyn WriteAt,
    local: &LocalChunks,
    progress: &mut dyn FnMut(u64) -> io::Result<()>,
) -> Result<Written, DownloadError> {
    write_at(source, expected, plan, out, local, None, progress)
}

/// [`write_file_at_with`] into a [`PartialFile`]: every stretch written is recorded in it as
/// soon as its bytes are in the file, and what an earlier, interrupted download of the same
/// file recorded there is kept instead of fetched again: per fetch range, the stretches
/// recorded from its first chunk on, each read back and checked chunk by chunk; the range's
/// remaining chunks are fetched alone (the whole range when its URL's signature covers its
/// `Range`). The recorded chunks count in the Xet file hash checked at the end like fetched
/// ones. See [`crate::pipeline::resume`].
pub fn write_part(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    part: &PartialFile,
    local: &LocalChunks,
    progress: &mut dyn FnMut(u64) -> io::Result<()>,
) -> Result<Written, DownloadError> {
    if plan.file_size != part.size() {
        return Err(DownloadError::Plan(format!(
            "the plan of {} is of {} bytes, the partial file of {}",
            part.file_hash(),
            plan.file_size,
            part.size()
        )));
    }
    let expected = *part.file_hash();
    write_at(source, &expected, plan, part, local, Some(part), progress)
}

fn write_at(
    source: &dyn XorbSource,
    expected: &FileHash,
    plan: &ReconstructionPlan,
    out: &dyn WriteAt,
    local: &LocalChunks,
    part: Option<&PartialFile>,
    progress: &mut dyn FnMut(u64) -> io::Result<()>,
) -> Result<Written, DownloadError> {
    if plan.offset_into_first_range != 0 {
        return Err(DownloadError::Plan(format!(
            "a whole-file plan of {expected} starts {} bytes into its first term",
            plan.offset_into_first_range
        )));
    }
    let out = OneWriteAtATime {
        out,
        turn: std::sync::Mutex::new(()),
    };
    let job = FileJob::new(source, plan, &out, local, part)?;
    let groups = job.groups();
    let mut refs_by_step: Vec<Option<Vec<ChunkRef>>> = vec![None; job.steps.len()];
    if groups.len() == 1 {
        // One range (every small file): no thread to start.
        let cap = (plan.file_size as usize).min(EMIT_BYTES) + MAX_CHUNK_LEN as usize;
        let mut buf = Vec::with_capacity(cap);
        for (i, refs) in job.run_group(&groups[0], &mut buf)? {
            refs_by_step[i] = Some(refs);
        }
        progress(job.written.load(Ordering::Relaxed)).map_err(DownloadError::Write)?;
    } else {
        write_groups(
            &groups,
            &|group: &[usize], buf: &mut Vec<u8>| job.run_group(group, buf),
            &job.written,
            &job.abort,
            &mut refs_by_step,
            progress,
        )?;
    }
    let mut chunks = Vec::new();
    for (i, refs) in refs_by_step.into_iter().enumerate() {
        let refs = refs.ok_or_else(|| DownloadError::Plan(format!("step {i} was not written")))?;
        chunks.extend(refs);
    }
    check_file_hash(expected, plan, &chunks)?;
    Ok(Written {
        written: job.written.into_inner(),
        local: job.copied.into_inner(),
        resumed: job.resumed.into_inner(),
        cached: job.cached.into_inner(),
        fetched: job.fetched.into_inner(),
        chunks,
    })
}

/// One whole-file download at offsets: the plan's steps, where each starts in the file, which
/// are on this machine already, and what the worker threads share while they write.
struct FileJob<'a> {
    source: &'a dyn XorbSource,
    plan: &'a ReconstructionPlan,
    out: &'a dyn WriteAt,
    local: &'a LocalChunks,
    /// The partial file `out` writes to, whose record is kept and taken from.
    part: Option<&'a PartialFile>,
    steps: Vec<Step<'a>>,
    /// Where each step's bytes start in the file.
    offsets: Vec<u64>,
    /// Steps whose every chunk is on this machine.
    is_local: Vec<bool>,
    abort: AtomicBool,
    written: AtomicU64,
    copied: AtomicU64,
    resumed: AtomicU64,
    /// See [`Written::cached`] and [`Written::fetched`].
    cached: AtomicU64,
    fetched: AtomicU64,
}

impl<'a> FileJob<'a> {
    fn new(
        source: &'a dyn XorbSource,
        plan: &'a ReconstructionPlan,
        out: &'a dyn WriteAt,
        local: &'a LocalChunks,
        part: Option<&'a PartialFile>,
    ) -> Result<Self, DownloadError> {
        let steps = steps(plan)?;
        let mut offsets = Vec::with_capacity(steps.len());
        let mut at = 0u64;
        for step in &steps {
            offsets.push(at);
            for t in &plan.terms[step.terms.clone()] {
                at += u64::from(t.unpacked_len);
            }
        }
        let is_local = steps
            .iter()
            .map(|s| {
                !local.is_empty()
                    && plan.terms[s.terms.clone()]
                        .iter()
                        .all(|t| t.chunks.clone().all(|c| local.has(&t.xorb, c)))
            })
            .collect();
        Ok(Self {
            source,
            plan,
            out,
            local,
            part,
            steps,
            offsets,
            is_local,
            abort: AtomicBool::new(false),
            written: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            cached: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
        })
    }

    /// Steps grouped by the range they need, in order of first use; each local step alone.
    fn groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of: HashMap<(XorbHash, u64, u64), usize> = HashMap::new();
        for (i, s) in self.steps.iter().enumerate() {
            if self.is_local[i] {
                groups.push(vec![i]);
                continue;
            }
            let key = (s.xorb, *s.range.bytes.start(), *s.range.bytes.end());
            let g = *group_of.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(i);
        }
        groups
    }

    /// One group: copy a local step, stream a step that reads its range forward only, or fetch
    /// the range once and decode each of the group's steps from it; the chunk refs of each step.
    fn run_group(&self, group: &[usize], buf: &mut Vec<u8>) -> Result<GroupRefs, DownloadError> {
        if let [i] = group {
            if self.is_local[*i] {
                if let Some(refs) = self.copy_step(*i, buf)? {
                    return Ok(vec![(*i, refs)]);
                }
            }
            if forward_only(self.plan, &self.steps[*i]) {
                return Ok(vec![(*i, self.stream(*i, buf)?)]);
            }
        }
        self.fetch_group(group, buf)
    }

    /// Streams step `i`, whose terms read its range forward only, from where the partial
    /// file's record of an earlier download leaves off.
    fn stream(&self, i: usize, buf: &mut Vec<u8>) -> Result<Vec<ChunkRef>, DownloadError> {
        let step = &self.steps[i];
        let at = self.offsets[i];
        let to = FileOut {
            out: self.out,
            written: &self.written,
            abort: &self.abort,
            part: self.part,
        };
        let resumed = self
            .part
            .and_then(|p| resumed_step(p, self.plan, step, at, buf))
            .filter(|r| {
                // A URL whose signature covers its Range serves the whole range or nothing.
                let whole_only = step
                    .range
                    .url
                    .as_deref()
                    .is_some_and(crate::url::signs_range);
                r.next.0 == step.range.chunks.end || !whole_only
            });
        let (refs, origin) = match resumed {
            None => {
                let from = Resumed::none(step, at);
                stream_step(self.source, self.plan, step, step.range, from, &to, buf)?
            }
            Some(r) => {
                self.written.fetch_add(r.len, Ordering::Relaxed);
                self.resumed.fetch_add(r.len, Ordering::Relaxed);
                if r.next.0 == step.range.chunks.end {
                    return Ok(r.refs);
                }
                let rest = FetchRange {
                    chunks: r.next.0..step.range.chunks.end,
                    bytes: r.next.1..=*step.range.bytes.end(),
                    url: step.range.url.clone(),
                };
                stream_step(self.source, self.plan, step, &rest, r, &to, buf)?
            }
        };
        self.fetched.fetch_add(origin.fetched, Ordering::Relaxed);
        self.count_local(i, &refs, &origin);
        Ok(refs)
    }

    /// Counts the file bytes of step `i` (whose chunks are `refs`) decoded from chunks that
    /// `origin`, the read of its range, took from this machine.
    fn count_local(&self, i: usize, refs: &[ChunkRef], origin: &Origin) {
        let local = local_bytes(self.plan, &self.steps[i], refs, origin);
        self.cached.fetch_add(local, Ordering::Relaxed);
    }

    /// Fetches the range of `group`'s steps whole, then decodes and writes each step; steps
    /// the partial file holds whole from an earlier download are kept (and the range not
    /// fetched if that is all of them).
    fn fetch_group(&self, group: &[usize], buf: &mut Vec<u8>) -> Result<GroupRefs, DownloadError> {
        let first = &self.steps[group[0]];
        let mut out_refs = Vec::with_capacity(group.len());
        let mut todo = Vec::with_capacity(group.len());
        for &i in group {
            let kept = self
                .part
                .and_then(|p| whole_step(p, self.plan, &self.steps[i], self.offsets[i], buf));
            match kept {
                Some(refs) => {
                    let len: u64 = refs.iter().map(|c| c.len).sum();
                    self.written.fetch_add(len, Ordering::Relaxed);
                    self.resumed.fetch_add(len, Ordering::Relaxed);
                    out_refs.push((i, refs));
                }
                None => todo.push(i),
            }
        }
        if todo.is_empty() {
            return Ok(out_refs);
        }
        let (start, end) = (*first.range.bytes.start(), *first.range.bytes.end());
        let (bytes, origin) = self
            .source
            .read_xorb_range_from(&first.xorb, first.range, true)
            .map_err(|source| DownloadError::Source {
                what: format!("reading bytes {start}-{end} of xorb {}", first.xorb),
                source,
            })?;
        self.fetched.fetch_add(origin.fetched, Ordering::Relaxed);
        let mut decoded = Decoded::new(first, bytes)?;
        for i in todo {
            if self.abort.load(Ordering::Relaxed) {
                break;
            }
            let mut refs = Vec::new();
            let mut offset = self.offsets[i];
            decode_step(
                self.plan,
                &self.steps[i],
                &mut decoded,
                Some(&mut refs),
                buf,
                Some(&mut |piece| {
                    self.out
                        .write_all_at(piece, offset)
                        .map_err(DownloadError::Write)?;
                    offset += piece.len() as u64;
                    self.written
                        .fetch_add(piece.len() as u64, Ordering::Relaxed);
                    Ok(())
                }),
            )?;
            if let Some(part) = self.part {
                let step = &self.steps[i];
                let range = step.range;
                note(
                    part,
                    &Extent {
                        at: self.offsets[i],
                        xorb: step.xorb,
                        from: (range.chunks.start, *range.bytes.start()),
                        to: (range.chunks.end, range.bytes.end().saturating_add(1)),
                        chunks: refs.clone(),
                    },
                );
            }
            self.count_local(i, &refs, &origin);
            out_refs.push((i, refs));
        }
        Ok(out_refs)
    }

    /// Copies step `i` from the local chunks; `None` if one of them does not read back right.
    fn copy_step(
        &self,
        i: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Vec<ChunkRef>>, DownloadError> {
        let mut refs = Vec::new();
        let mut offset = self.offsets[i];
        let mut step_bytes = 0u64;
        buf.clear();
        let mut flush = |buf: &mut Vec<u8>, offset: &mut u64| -> Result<(), DownloadError> {
            self.out
                .write_all_at(buf, *offset)
                .map_err(DownloadError::Write)?;
            *offset += buf.len() as u64;
            step_bytes += buf.len() as u64;
            buf.clear();
            Ok(())
        };
        for t in &self.plan.terms[self.steps[i].terms.clone()] {
            let mut term_len = 0u64;
            for c in t.chunks.clone() {
                let before = buf.len();
                let Some(hash) = self.local.read(&t.xorb, c, buf) else {
                    return Ok(None);
                };
                let len = (buf.len() - before) as u64;
                term_len += len;
                refs.push(ChunkRef { hash, len });
                if buf.len() >= EMIT_BYTES {
                    flush(buf, &mut offset)?;
                }
            }
            if term_len != u64::from(t.unpacked_len) {
                return Ok(None);
            }
        }
        if !buf.is_empty() {
            flush(buf, &mut offset)?;
        }
        self.written.fetch_add(step_bytes, Ordering::Relaxed);
        self.copied.fetch_add(step_bytes, Ordering::Relaxed);
        Ok(Some(refs))
    }
}

/// Whether `step`'s terms use the chunks of its range in order, each at most once: then the
/// range can be decoded as it arrives ([`stream_step`]) instead of held whole first.
fn forward_only(plan: &ReconstructionPlan, step: &Step) -> bool {
    let mut next = step.range.chunks.start;
    for t in &plan.terms[step.terms.clone()] {
        if t.chunks.start < next || t.chunks.end < t.chunks.start {
            return false;
        }
        next = t.chunks.end;
    }
    true
}

/// Where [`stream_step`] writes: the file, the count of bytes written, and the flag that
/// stops every thread of the download.
#[derive(Clone, Copy)]
struct FileOut<'a> {
    out: &'a dyn WriteAt,
    written: &'a AtomicU64,
    abort: &'a AtomicBool,
    /// The partial file whose record each stretch written goes into.
    part: Option<&'a PartialFile>,
}

/// Why a streamed range stopped: its bytes are damaged, or decoding or writing them failed.
enum StreamError {
    Xorb(XorbError),
    Download(DownloadError),
}

impl From<XorbError> for StreamError {
    fn from(e: XorbError) -> Self {
        Self::Xorb(e)
    }
}

/// Fetches `range` of `step`'s xorb (its whole range, or what `from` leaves of it; its terms
/// are [`forward_only`]) and decodes each chunk as it arrives, writing the terms' bytes into
/// `to` from `from.at` in pieces of about [`EMIT_BYTES`] (`buf` is the reused write buffer):
/// no more than one chunk of the range is held besides what the connection buffers. Returns
/// the refs of the step's chunks (those of `from` first) and where the range's bytes came
/// from; checks the chunk count and each term's length against the plan, as [`decode_step`]
/// does.
fn stream_step(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    step: &Step,
    range: &FetchRange,
    from: Resumed,
    to: &FileOut,
    buf: &mut Vec<u8>,
) -> Result<(Vec<ChunkRef>, Origin), DownloadError> {
    let (start, end) = (*range.bytes.start(), *range.bytes.end());
    let mut writer = StepWriter::new(plan, step, range, from, to, buf);
    let mut splitter = ChunkSplitter::new(XorbLimits::SERVER);
    let mut failure: Option<StreamError> = None;
    let read = source.stream_xorb_range_from(&step.xorb, range, true, &mut |at, piece| {
        if to.abort.load(Ordering::Relaxed) {
            failure = Some(StreamError::Download(DownloadError::Plan(
                "another part of the download failed".into(),
            )));
            return ControlFlow::Break(());
        }
        let pos = splitter.position();
        let piece_end = at + piece.len() as u64;
        if piece_end <= pos {
            return ControlFlow::Continue(()); // sent again after a retry: already taken
        }
        if at > pos {
            failure = Some(StreamError::Download(DownloadError::Plan(format!(
                "bytes {start}-{end} of xorb {} arrived with a gap at {pos}",
                step.xorb
            ))));
            return ControlFlow::Break(());
        }
        match splitter.feed(&piece[(pos - at) as usize..], &mut |chunk, payload| {
            writer.chunk(chunk, payload)
        }) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    match failure {
        Some(StreamError::Xorb(e)) => return Err(step.damaged(e)),
        Some(StreamError::Download(e)) => return Err(e),
        None => {}
    }
    let origin = read.map_err(|source| DownloadError::Source {
        what: format!("reading bytes {start}-{end} of xorb {}", step.xorb),
        source,
    })?;
    let chunks = splitter.finish().map_err(|e| step.damaged(e))?;
    if chunks != writer.expected {
        return Err(DownloadError::Plan(format!(
            "bytes {start}-{end} of xorb {} hold {chunks} chunks, the plan expects {}",
            step.xorb, writer.expected,
        )));
    }
    Ok((writer.finish()?, origin))
}

/// The file bytes of `step` decoded from chunks `origin` read on this machine, given `refs`,
/// the chunks the step's terms use in order (one per term and chunk, as [`decode_step`] and
/// [`StepWriter`] push them).
fn local_bytes(plan: &ReconstructionPlan, step: &Step, refs: &[ChunkRef], origin: &Origin) -> u64 {
    if origin.local.is_empty() {
        return 0;
    }
    plan.terms[step.terms.clone()]
        .iter()
        .flat_map(|t| t.chunks.clone())
        .zip(refs)
        .filter(|(c, _)| origin.is_local(*c))
        .map(|(_, r)| r.len)
        .sum()
}

/// Where a step's streaming starts: at its range's first chunk, or where the stretches an
/// earlier download recorded in the partial file end.
struct Resumed {
    /// Where the step's next bytes go in the file.
    at: u64,
    /// The next chunk to read: index and byte offset in the xorb.
    next: (u32, u64),
    /// Bytes of the step in the file already.
    len: u64,
    /// The refs of the chunks the step's terms used before `next`.
    refs: Vec<ChunkRef>,
    /// The term chunk `next` falls in (of the step's terms), and its bytes before it.
    term: usize,
    term_len: u64,
}

impl Resumed {
    /// The start of `step`, which begins at `at` in the file.
    fn none(step: &Step, at: u64) -> Self {
        Self {
            at,
            next: (step.range.chunks.start, *step.range.bytes.start()),
            len: 0,
            refs: Vec::new(),
            term: 0,
            term_len: 0,
        }
    }
}

/// What of `step` (starting at `at` in the file) the partial file holds from an earlier
/// download: its entries chained from the range's first chunk, each checked against the bytes
/// in the file (`buf` is scratch space); `None` when there are none, or they do not fit the
/// step's terms.
fn resumed_step(
    part: &PartialFile,
    plan: &ReconstructionPlan,
    step: &Step,
    at: u64,
    buf: &mut Vec<u8>,
) -> Option<Resumed> {
    let range = step.range;
    let last = (range.chunks.end, range.bytes.end().checked_add(1)?);
    let first = (range.chunks.start, *range.bytes.start());
    let mut r = Resumed::none(step, at);
    while r.next.0 < last.0 {
        let Some(e) = part.take(&step.xorb, r.next, r.at) else {
            break;
        };
        if e.to.0 > last.0 || e.to.1 > last.1 || !part.verify(&e, buf) {
            break;
        }
        r.at += e.len();
        r.len += e.len();
        r.refs.extend_from_slice(&e.chunks);
        r.next = e.to;
    }
    if r.next == first || (r.next.0 == last.0 && r.next != last) {
        return None;
    }
    (r.term, r.term_len) = term_state(plan, step, r.next.0, &r.refs)?;
    Some(r)
}

/// The term of `step` chunk `next` falls in, and its bytes before that chunk, given the
/// `refs` of the chunks the step's (forward only) terms use before it: what the step's
/// [`StepWriter`] would hold having read up to `next`. `None` when they do not add up.
fn term_state(
    plan: &ReconstructionPlan,
    step: &Step,
    next: u32,
    refs: &[ChunkRef],
) -> Option<(usize, u64)> {
    let mut used = 0usize;
    for (k, t) in plan.terms[step.terms.clone()].iter().enumerate() {
        if t.chunks.is_empty() {
            if t.unpacked_len != 0 {
                return None;
            }
            continue;
        }
        let n = (next.clamp(t.chunks.start, t.chunks.end) - t.chunks.start) as usize;
        let these = refs.get(used..used + n)?;
        used += n;
        let len: u64 = these.iter().map(|c| c.len).sum();
        if n < t.chunks.len() {
            return (used == refs.len()).then_some((k, len));
        }
        if len != u64::from(t.unpacked_len) {
            return None;
        }
    }
    (used == refs.len()).then_some((step.terms.len(), 0))
}

/// The refs of `step` (starting at `at` in the file) if the partial file holds all of it from
/// an earlier download in one entry, checked against the bytes in the file (`buf` is scratch
/// space) and against the lengths of the step's terms.
fn whole_step(
    part: &PartialFile,
    plan: &ReconstructionPlan,
    step: &Step,
    at: u64,
    buf: &mut Vec<u8>,
) -> Option<Vec<ChunkRef>> {
    let range = step.range;
    let e = part.take(&step.xorb, (range.chunks.start, *range.bytes.start()), at)?;
    if e.to != (range.chunks.end, range.bytes.end().checked_add(1)?) {
        return None;
    }
    let mut used = 0usize;
    for t in &plan.terms[step.terms.clone()] {
        let n = t.chunks.len();
        let len: u64 = e.chunks.get(used..used + n)?.iter().map(|c| c.len).sum();
        if len != u64::from(t.unpacked_len) {
            return None;
        }
        used += n;
    }
    (used == e.chunks.len() && part.verify(&e, buf)).then_some(e.chunks)
}

/// Records `extent` in `part`; a failure only costs a later download the fetch.
fn note(part: &PartialFile, extent: &Extent) {
    if let Err(e) = part.record(extent) {
        tracing::debug!("cannot record a written stretch in the partial file: {e}");
    }
}

/// Where [`stream_step`] is in its step: the term being written, the decoded bytes not yet
/// written (`buf`) and the file offset they go to, the chunk refs so far, and how far the
/// partial file's record goes.
struct StepWriter<'a> {
    plan: &'a ReconstructionPlan,
    step: &'a Step<'a>,
    to: &'a FileOut<'a>,
    buf: &'a mut Vec<u8>,
    offset: u64,
    /// The chunk index and byte offset in the xorb of the range's first chunk.
    first: (u32, u64),
    /// The chunks the range holds.
    expected: usize,
    refs: Vec<ChunkRef>,
    /// The term being written (of the step's terms), and its bytes so far.
    term: usize,
    term_len: u64,
    /// The chunk index and byte offset in the xorb just past the last chunk read.
    read: (u32, u64),
    /// What the partial file's record holds: up to `read` as it was then, the refs before
    /// this index, the file's bytes before this offset.
    noted: ((u32, u64), usize, u64),
}

impl<'a> StepWriter<'a> {
    fn new(
        plan: &'a ReconstructionPlan,
        step: &'a Step<'a>,
        range: &FetchRange,
        from: Resumed,
        to: &'a FileOut<'a>,
        buf: &'a mut Vec<u8>,
    ) -> Self {
        let expected = range.chunks.end.saturating_sub(range.chunks.start) as usize;
        buf.clear();
        let mut refs = from.refs;
        refs.reserve(expected);
        Self {
            plan,
            step,
            to,
            buf,
            offset: from.at,
            first: (range.chunks.start, *range.bytes.start()),
            expected,
            noted: (from.next, refs.len(), from.at),
            refs,
            term: from.term,
            term_len: from.term_len,
            read: from.next,
        }
    }

    fn terms(&self) -> &'a [xet_protocol::PlannedTerm] {
        &self.plan.terms[self.step.terms.clone()]
    }

    /// One chunk of the range, as the splitter checked it: decoded, hashed and written if a
    /// term uses it (each term uses its chunks in order, once).
    fn chunk(&mut self, chunk: SplitChunk, payload: &[u8]) -> Result<(), StreamError> {
        if chunk.index >= self.expected {
            let (start, end) = (self.step.range.bytes.start(), self.step.range.bytes.end());
            return Err(StreamError::Download(DownloadError::Plan(format!(
                "bytes {start}-{end} of xorb {} hold more than the {} chunks the plan expects",
                self.step.xorb, self.expected
            ))));
        }
        let c = self.first.0 + chunk.index as u32;
        let past =
            chunk.offset + CHUNK_HEADER_LEN as u64 + u64::from(chunk.header.compressed_len());
        self.read = (c + 1, self.first.1 + past);
        while let Some(t) = self.terms().get(self.term) {
            if t.chunks.is_empty() {
                self.close_term().map_err(StreamError::Download)?;
                continue;
            }
            if c < t.chunks.start {
                return Ok(()); // a chunk no term uses
            }
            let before = self.buf.len();
            decompress_chunk_into(&chunk.header, payload, self.buf).map_err(|e| {
                StreamError::Xorb(XorbError::Chunk {
                    index: chunk.index,
                    offset: chunk.offset,
                    problem: e.into(),
                })
            })?;
            let data = &self.buf[before..];
            self.term_len += data.len() as u64;
            self.refs.push(ChunkRef {
                hash: ChunkHash::of(data),
                len: data.len() as u64,
            });
            if c + 1 == t.chunks.end {
                self.close_term().map_err(StreamError::Download)?;
            }
            if self.buf.len() >= EMIT_BYTES {
                self.flush().map_err(StreamError::Download)?;
            }
            return Ok(());
        }
        Ok(()) // past the last term
    }

    /// Ends the current term, which must have decoded to its length. A term without chunks
    /// (never made by a server, but a plan can say so) writes nothing.
    fn close_term(&mut self) -> Result<(), DownloadError> {
        let i = self.step.terms.start + self.term;
        let t = &self.plan.terms[i];
        if self.term_len != u64::from(t.unpacked_len) {
            return Err(DownloadError::Plan(format!(
                "term {i} (xorb {}, chunks {}..{}) decodes to {} bytes, not {}",
                self.step.xorb, t.chunks.start, t.chunks.end, self.term_len, t.unpacked_len
            )));
        }
        self.term += 1;
        self.term_len = 0;
        Ok(())
    }

    /// Writes what is buffered, then records it in the partial file.
    fn flush(&mut self) -> Result<(), DownloadError> {
        if !self.buf.is_empty() {
            self.to
                .out
                .write_all_at(self.buf, self.offset)
                .map_err(DownloadError::Write)?;
            self.offset += self.buf.len() as u64;
            self.to
                .written
                .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
            self.buf.clear();
        }
        let (from, refs_from, at) = self.noted;
        if let (Some(part), true) = (self.to.part, self.read != from) {
            note(
                part,
                &Extent {
                    at,
                    xorb: self.step.xorb,
                    from,
                    to: self.read,
                    chunks: self.refs[refs_from..].to_vec(),
                },
            );
        }
        self.noted = (self.read, self.refs.len(), self.offset);
        Ok(())
    }

    /// Closes the terms left (those without chunks) and writes what is buffered: the step's
    /// chunk refs.
    fn finish(mut self) -> Result<Vec<ChunkRef>, DownloadError> {
        while self.term < self.terms().len() {
            self.close_term()?;
        }
        self.flush()?;
        Ok(self.refs)
    }
}

/// The refs of the chunks of each step a group wrote.
type GroupRefs = Vec<(usize, Vec<ChunkRef>)>;

/// Fetches, decodes and writes one group of steps, with a reused buffer.
type RunGroup<'a> = dyn Fn(&[usize], &mut Vec<u8>) -> Result<GroupRefs, DownloadError> + Sync + 'a;

/// Runs `run_group` on every group from [`DOWNLOAD_WORKERS`] threads, collecting the chunk refs
/// by step and reporting `written` to `progress` from the calling thread.
fn write_groups(
    groups: &[Vec<usize>],
    run_group: &RunGroup<'_>,
    written: &AtomicU64,
    abort: &AtomicBool,
    refs_by_step: &mut [Option<Vec<ChunkRef>>],
    progress: &mut dyn FnMut(u64) -> io::Result<()>,
) -> Result<(), DownloadError> {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<Result<GroupRefs, DownloadError>>();
        for _ in 0..DOWNLOAD_WORKERS.min(groups.len()) {
            let tx = tx.clone();
            let (groups, next, abort, run_group) = (&groups, &next, &abort, &run_group);
            scope.spawn(move || {
                let mut buf = Vec::with_capacity(EMIT_BYTES + MAX_CHUNK_LEN as usize);
                loop {
                    let g = next.fetch_add(1, Ordering::Relaxed);
                    if g >= groups.len() || abort.load(Ordering::Relaxed) {
                        return;
                    }
                    if tx.send(run_group(&groups[g], &mut buf)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut reported = 0u64;
        let mut done = 0usize;
        let result = loop {
            if done == groups.len() {
                break Ok(());
            }
            match rx.recv_timeout(std::time::Duration::from_millis(100)) {
                Ok(Ok(step_refs)) => {
                    done += 1;
                    for (i, refs) in step_refs {
                        refs_by_step[i] = Some(refs);
                    }
                }
                Ok(Err(e)) => break Err(e),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(DownloadError::Plan("a download thread stopped".into()))
                }
            }
            let now = written.load(Ordering::Relaxed);
            if now > reported {
                reported = now;
                if let Err(e) = progress(now) {
                    break Err(DownloadError::Write(e));
                }
            }
        };
        // Stop the workers (on failure) and let the scope join them.
        abort.store(true, Ordering::Relaxed);
        result
    })
}
