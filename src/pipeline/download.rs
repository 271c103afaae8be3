//! Rebuilding a file from its reconstruction plan, streaming.
//!
//! [`write_plan`] walks the plan's terms in order. For each run of consecutive terms served by
//! the same fetch range (a byte range of whole chunks of one stored xorb, cas-api.md §6.3) it
//! reads that range once from a [`XorbSource`], validates and decodes its chunks
//! ([`ParsedXorb`], which recomputes every chunk hash), and passes the file's bytes to the sink
//! one chunk at a time. Memory is bounded by one fetch range (at most one xorb, 64 MiB) plus
//! one chunk, whatever the file size.
//!
//! The bytes start `offset_into_first_range` into the first term; for a ranged plan the caller
//! stops reading at the range end (the last term is whole).

use std::io;

use crate::format::hash::file_hash;
use crate::format::xorb::{ParsedXorb, ReadOptions, XorbError, XorbLimits};
use crate::format::{ChunkRef, FileHash, XorbHash};
use crate::pipeline::upload::{TargetError, XorbSource};
use crate::store::ReconstructionPlan;

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
        "the downloaded chunks hash to Xet file {actual}, not {expected}: the stored data is \
         damaged or the reconstruction is wrong"
    )]
    WrongFile {
        expected: FileHash,
        actual: FileHash,
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
        return Err(DownloadError::WrongFile {
            expected: *expected,
            actual,
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

/// The walk behind [`write_plan`] and [`write_file`]; collects every chunk's hash and length
/// into `chunks` when given.
fn write_terms(
    source: &dyn XorbSource,
    plan: &ReconstructionPlan,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
    mut chunks: Option<&mut Vec<ChunkRef>>,
) -> Result<u64, DownloadError> {
    let mut skip = plan.offset_into_first_range;
    let mut written = 0u64;
    let mut i = 0;
    while i < plan.terms.len() {
        let term = &plan.terms[i];
        let xorb = term.xorb;
        let covers = |chunks: &std::ops::Range<u32>, r: &std::ops::Range<u32>| {
            r.start <= chunks.start && chunks.end <= r.end
        };
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
        let (start, end) = (*range.bytes.start(), *range.bytes.end());
        let bytes =
            source
                .read_xorb_range(&xorb, range)
                .map_err(|source| DownloadError::Source {
                    what: format!("reading bytes {start}-{end} of xorb {xorb}"),
                    source,
                })?;
        let damaged = |source| DownloadError::Damaged {
            xorb,
            start,
            end,
            source: Box::new(source),
        };
        let options = ReadOptions {
            expected_hash: None,
            limits: XorbLimits::SERVER,
        };
        let parsed = ParsedXorb::parse_with(&bytes, &options).map_err(damaged)?;
        let first = range.chunks.start;
        if parsed.num_chunks() != (range.chunks.end - first) as usize {
            return Err(DownloadError::Plan(format!(
                "bytes {start}-{end} of xorb {xorb} hold {} chunks, the plan expects {}",
                parsed.num_chunks(),
                range.chunks.end - first
            )));
        }
        while let Some(t) = plan.terms.get(i) {
            if t.xorb != xorb || !covers(&t.chunks, &range.chunks) {
                break;
            }
            let mut term_len = 0u64;
            for c in t.chunks.clone() {
                let local = (c - first) as usize;
                let mut data = parsed.extract(local..local + 1).map_err(damaged)?;
                term_len += data.len() as u64;
                if let Some(refs) = chunks.as_deref_mut() {
                    refs.push(ChunkRef {
                        hash: parsed.chunks()[local].hash,
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
            i += 1;
        }
    }
    Ok(written)
}
