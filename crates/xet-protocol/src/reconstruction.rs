//! Planning a file's reconstruction (docs/cas-api.md §6.4): which chunks of which xorbs rebuild a byte
//! range of a file, and which byte ranges of the stored xorbs to fetch.
//!
//! Pure: given the file's terms and the footers of its xorbs, no I/O. For a ranged query the
//! terms that end before the range are skipped, the first kept term loses the leading chunks that
//! end at or before the range start, the last kept term loses the trailing chunks that start
//! after the range end, and `offset_into_first_range` says how many bytes of the first kept
//! chunk precede the range. Fetch ranges are the chunk ranges the kept terms need, per xorb,
//! sorted and merged when they overlap or touch, with their inclusive byte ranges in the stored
//! xorb by the `url_range` rule (docs/format.md §3.10).

use std::collections::HashMap;
use std::ops::{Range, RangeInclusive};

use xet_format::xorb::XorbFooter;
use xet_format::XorbHash;

/// One term of a registered file: chunks `[chunk_start, chunk_end)` of a xorb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredTerm {
    pub xorb: XorbHash,
    pub chunk_start: u32,
    pub chunk_end: u32,
    pub unpacked_len: u32,
}

/// One term of a plan: chunks `chunks` of `xorb`, `unpacked_len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTerm {
    pub xorb: XorbHash,
    pub chunks: Range<u32>,
    pub unpacked_len: u32,
}

/// A byte range of a stored xorb holding whole chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRange {
    pub chunks: Range<u32>,
    /// Inclusive, headers included.
    pub bytes: RangeInclusive<u64>,
    /// Where to fetch it, for plans received from a remote server (its presigned URL); `None`
    /// for plans made by a local store.
    pub url: Option<String>,
}

/// The reconstruction of (a range of) a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReconstructionPlan {
    /// Size of the whole file.
    pub file_size: u64,
    /// Bytes to drop from the start of the first term's data.
    pub offset_into_first_range: u64,
    pub terms: Vec<PlannedTerm>,
    /// Per xorb, in order of first use by `terms`: the ranges to fetch, sorted by chunk start.
    pub fetch: Vec<(XorbHash, Vec<FetchRange>)>,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("range start {start} is at or past the end of the {size}-byte file")]
    NotSatisfiable { start: u64, size: u64 },
    #[error("range end {end} is before its start {start}")]
    Inverted { start: u64, end: u64 },
    #[error("term {term} names xorb {xorb}, whose footer is missing")]
    MissingXorb { term: usize, xorb: XorbHash },
    #[error("term {term}: chunks {start}..{end} do not fit xorb {xorb} ({num_chunks} chunks)")]
    BadTerm {
        term: usize,
        xorb: XorbHash,
        start: u32,
        end: u32,
        num_chunks: usize,
    },
}

/// Plans the reconstruction of bytes `range` (inclusive; `None` = the whole file) of a file made
/// of `terms`. `footers` gives the footer of every xorb the terms name (V1: with unpacked
/// offsets). A range end past the file is clamped to the last byte.
pub fn plan(
    terms: &[StoredTerm],
    footers: &HashMap<XorbHash, &XorbFooter>,
    range: Option<(u64, u64)>,
) -> Result<ReconstructionPlan, PlanError> {
    let file_size: u64 = terms.iter().map(|t| u64::from(t.unpacked_len)).sum();
    let mut out = ReconstructionPlan {
        file_size,
        ..Default::default()
    };
    let (start, end) = match range {
        None if file_size == 0 => return Ok(out),
        None => (0, file_size - 1),
        Some((s, e)) if e < s => return Err(PlanError::Inverted { start: s, end: e }),
        Some((s, _)) if s >= file_size => {
            return Err(PlanError::NotSatisfiable {
                start: s,
                size: file_size,
            })
        }
        Some((s, e)) => (s, e.min(file_size - 1)),
    };

    // The chunk ranges each xorb must give, in order of first use.
    let mut needed: Vec<(XorbHash, Vec<Range<u32>>)> = Vec::new();
    let mut pos = 0u64; // file offset of the current term
    for (i, term) in terms.iter().enumerate() {
        let term_end = pos + u64::from(term.unpacked_len);
        if term_end <= start {
            pos = term_end;
            continue;
        }
        if pos > end {
            break;
        }
        let footer = footers.get(&term.xorb).ok_or(PlanError::MissingXorb {
            term: i,
            xorb: term.xorb,
        })?;
        if let Some(kept) = keep_chunks(i, term, footer, pos, start, end)? {
            if out.terms.is_empty() {
                out.offset_into_first_range = kept.skipped;
            }
            match needed.iter_mut().find(|(x, _)| *x == term.xorb) {
                Some((_, ranges)) => ranges.push(kept.term.chunks.clone()),
                None => needed.push((term.xorb, vec![kept.term.chunks.clone()])),
            }
            out.terms.push(kept.term);
        }
        pos = term_end;
    }
    for (xorb, ranges) in needed {
        out.fetch
            .push((xorb, fetch_ranges(xorb, footers[&xorb], ranges)?));
    }
    Ok(out)
}

/// What a term keeps of its chunks for a byte range, and how many bytes of its first kept
/// chunk come before the range.
struct Kept {
    term: PlannedTerm,
    skipped: u64,
}

/// The chunks of term `i` (starting at file offset `pos`) that overlap bytes `start..=end`;
/// `None` if none do. The term must fit its xorb and its chunks add up to its length.
fn keep_chunks(
    i: usize,
    term: &StoredTerm,
    footer: &XorbFooter,
    pos: u64,
    start: u64,
    end: u64,
) -> Result<Option<Kept>, PlanError> {
    let bad = || PlanError::BadTerm {
        term: i,
        xorb: term.xorb,
        start: term.chunk_start,
        end: term.chunk_end,
        num_chunks: footer.num_chunks(),
    };
    if term.chunk_start >= term.chunk_end || term.chunk_end as usize > footer.num_chunks() {
        return Err(bad());
    }
    let mut kept_start = None;
    let mut kept_end = term.chunk_start;
    let mut kept_len = 0u64;
    let mut skipped = 0;
    let mut cpos = pos;
    for c in term.chunk_start..term.chunk_end {
        let clen = u64::from(footer.chunk_len(c as usize).ok_or_else(bad)?);
        let cend = cpos + clen;
        if cend > start && cpos <= end {
            if kept_start.is_none() {
                kept_start = Some(c);
                skipped = start.saturating_sub(cpos);
            }
            kept_end = c + 1;
            kept_len += clen;
        }
        cpos = cend;
    }
    if cpos != pos + u64::from(term.unpacked_len) {
        // The index says the term has a different length than its chunks: corrupt input.
        return Err(bad());
    }
    // kept_len <= the term's unpacked_len, a u32.
    Ok(kept_start.map(|s| Kept {
        term: PlannedTerm {
            xorb: term.xorb,
            chunks: s..kept_end,
            unpacked_len: kept_len as u32,
        },
        skipped,
    }))
}

/// The byte ranges of `xorb` to fetch for its chunk `ranges`: sorted, merged where they
/// overlap or touch, each with its bytes in the stored xorb by the `url_range` rule.
fn fetch_ranges(
    xorb: XorbHash,
    footer: &XorbFooter,
    mut ranges: Vec<Range<u32>>,
) -> Result<Vec<FetchRange>, PlanError> {
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u32>> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    fetch_ranges_of(xorb, footer, merged)
}

/// `ranges` of `xorb` (as they are) with their bytes in the stored xorb by the `url_range`
/// rule.
fn fetch_ranges_of(
    xorb: XorbHash,
    footer: &XorbFooter,
    ranges: Vec<Range<u32>>,
) -> Result<Vec<FetchRange>, PlanError> {
    ranges
        .into_iter()
        .map(|chunks| {
            let bytes = footer
                .url_range(chunks.start as usize..chunks.end as usize)
                .map_err(|_| PlanError::BadTerm {
                    term: 0,
                    xorb,
                    start: chunks.start,
                    end: chunks.end,
                    num_chunks: footer.num_chunks(),
                })?;
            Ok(FetchRange {
                chunks,
                bytes,
                url: None,
            })
        })
        .collect()
}

/// `plan` (made by [`plan`] from `footers`) cut for a reader that holds a few fetch ranges
/// whole at once: the same bytes, with each term cut at chunk boundaries into pieces of at
/// most `max_bytes` stored bytes (at least one chunk each), and fetch ranges that are those
/// pieces, per xorb sorted and merged where they overlap or touch only while the merged range
/// stays within `max_bytes`. [`plan`] merges a xorb's ranges whatever their size, so that a
/// remote client makes one request per xorb: each is then often a whole xorb (up to 64 MiB),
/// and the download walk (the range decoded, those read ahead, those kept for reuse) holds
/// several xorbs at once. A reader of a store on its own machine (the server hashing a file)
/// gains nothing from that merging.
pub fn bounded(
    plan: ReconstructionPlan,
    footers: &HashMap<XorbHash, &XorbFooter>,
    max_bytes: u64,
) -> Result<ReconstructionPlan, PlanError> {
    let mut terms = Vec::with_capacity(plan.terms.len());
    let mut needed: Vec<(XorbHash, Vec<Range<u32>>)> = Vec::new();
    for (i, term) in plan.terms.into_iter().enumerate() {
        let footer = footers.get(&term.xorb).ok_or(PlanError::MissingXorb {
            term: i,
            xorb: term.xorb,
        })?;
        let bad = || PlanError::BadTerm {
            term: i,
            xorb: term.xorb,
            start: term.chunks.start,
            end: term.chunks.end,
            num_chunks: footer.num_chunks(),
        };
        if term.chunks.start >= term.chunks.end || term.chunks.end as usize > footer.num_chunks() {
            return Err(bad());
        }
        let boundaries = &footer.chunk_boundary_offsets;
        let mut start = term.chunks.start;
        while start < term.chunks.end {
            let stored_start = match start {
                0 => 0,
                s => u64::from(boundaries[s as usize - 1]),
            };
            let mut end = start;
            let mut len = 0u32;
            while end < term.chunks.end
                && (end == start || u64::from(boundaries[end as usize]) - stored_start <= max_bytes)
            {
                len = len
                    .checked_add(footer.chunk_len(end as usize).ok_or_else(bad)?)
                    .ok_or_else(bad)?;
                end += 1;
            }
            let piece = start..end;
            match needed.iter_mut().find(|(x, _)| *x == term.xorb) {
                Some((_, ranges)) => ranges.push(piece),
                None => needed.push((term.xorb, vec![piece])),
            }
            terms.push(PlannedTerm {
                xorb: term.xorb,
                chunks: start..end,
                unpacked_len: len,
            });
            start = end;
        }
    }
    let mut fetch = Vec::with_capacity(needed.len());
    for (xorb, mut ranges) in needed {
        let footer = footers[&xorb];
        // Stored bytes of chunks `r` (within the xorb: checked above).
        let stored = |r: &Range<u32>| {
            footer
                .url_range(r.start as usize..r.end as usize)
                .map_or(u64::MAX, |b| b.end() - b.start() + 1)
        };
        ranges.sort_by_key(|r| (r.start, r.end));
        ranges.dedup();
        let mut merged: Vec<Range<u32>> = Vec::new();
        for r in ranges {
            if let Some(last) = merged.last_mut() {
                if r.end <= last.end {
                    // Within the last range (sorted by start): covered.
                    continue;
                }
                let joined = last.start..r.end;
                if r.start <= last.end && stored(&joined) <= max_bytes {
                    *last = joined;
                    continue;
                }
            }
            merged.push(r);
        }
        fetch.push((xorb, fetch_ranges_of(xorb, footer, merged)?));
    }
    Ok(ReconstructionPlan {
        file_size: plan.file_size,
        offset_into_first_range: plan.offset_into_first_range,
        terms,
        fetch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_format::xorb::{CompressionPolicy, XorbBuilder};

    /// A xorb of chunks with the given lengths (distinct contents).
    fn xorb(lens: &[usize], seed: u8) -> (XorbHash, XorbFooter) {
        let mut b = XorbBuilder::new(CompressionPolicy::None);
        for (i, &len) in lens.iter().enumerate() {
            let data: Vec<u8> = (0..len).map(|j| (j as u8) ^ seed ^ (i as u8)).collect();
            assert!(matches!(
                b.add_chunk(&data).unwrap(),
                xet_format::xorb::Push::Added(_)
            ));
        }
        let stored = b.finish().unwrap().stored_form();
        let (footer, _) = XorbFooter::from_stored(&stored).unwrap();
        (footer.hash, footer)
    }

    fn term(x: XorbHash, s: u32, e: u32, len: u32) -> StoredTerm {
        StoredTerm {
            xorb: x,
            chunk_start: s,
            chunk_end: e,
            unpacked_len: len,
        }
    }

    #[test]
    fn whole_and_ranged_plans() {
        let (a, fa) = xorb(&[100, 200, 300, 400], 1);
        let (b, fb) = xorb(&[50, 60], 2);
        let footers: HashMap<XorbHash, &XorbFooter> = [(a, &fa), (b, &fb)].into_iter().collect();
        // File: a[0..2) (300 bytes), b[0..2) (110), a[2..4) (700) = 1110 bytes.
        let terms = [term(a, 0, 2, 300), term(b, 0, 2, 110), term(a, 2, 4, 700)];

        let whole = plan(&terms, &footers, None).unwrap();
        assert_eq!(whole.file_size, 1110);
        assert_eq!(whole.terms.len(), 3);
        assert_eq!(whole.offset_into_first_range, 0);
        // a's two ranges touch, so they merge into one fetch of all four chunks.
        assert_eq!(whole.fetch[0].0, a);
        assert_eq!(whole.fetch[0].1.len(), 1);
        assert_eq!(whole.fetch[0].1[0].chunks, 0..4);
        assert_eq!(whole.fetch[0].1[0].bytes, 0..=(4 * 8 + 1000 - 1));
        assert_eq!(whole.fetch[1].1[0].bytes, 0..=(2 * 8 + 110 - 1));

        // Bytes 150..=320: the second chunk of a (100..300), then b's first chunk (300..350).
        let p = plan(&terms, &footers, Some((150, 320))).unwrap();
        assert_eq!(p.offset_into_first_range, 50);
        assert_eq!(
            p.terms,
            vec![
                PlannedTerm {
                    xorb: a,
                    chunks: 1..2,
                    unpacked_len: 200
                },
                PlannedTerm {
                    xorb: b,
                    chunks: 0..1,
                    unpacked_len: 50
                },
            ]
        );
        assert_eq!(p.fetch[0].1[0].bytes, 108..=315);

        // An end past the file is clamped; a start past it is not satisfiable.
        let tail = plan(&terms, &footers, Some((1109, 5000))).unwrap();
        assert_eq!(
            tail.terms,
            vec![PlannedTerm {
                xorb: a,
                chunks: 3..4,
                unpacked_len: 400
            }]
        );
        assert_eq!(tail.offset_into_first_range, 399);
        assert_eq!(
            plan(&terms, &footers, Some((1110, 1200))),
            Err(PlanError::NotSatisfiable {
                start: 1110,
                size: 1110
            })
        );
        assert!(matches!(
            plan(&terms, &footers, Some((5, 4))),
            Err(PlanError::Inverted { .. })
        ));
    }

    #[test]
    fn empty_file_and_bad_terms() {
        let empty = plan(&[], &HashMap::new(), None).unwrap();
        assert_eq!(empty, ReconstructionPlan::default());
        let (a, fa) = xorb(&[10, 20], 3);
        let footers: HashMap<XorbHash, &XorbFooter> = [(a, &fa)].into_iter().collect();
        assert!(matches!(
            plan(&[term(a, 1, 3, 20)], &footers, None),
            Err(PlanError::BadTerm { .. })
        ));
        // A term whose length disagrees with its chunks.
        assert!(matches!(
            plan(&[term(a, 0, 2, 31)], &footers, None),
            Err(PlanError::BadTerm { .. })
        ));
        let other = XorbHash::from_bytes([9; 32]);
        assert!(matches!(
            plan(&[term(other, 0, 1, 5)], &footers, None),
            Err(PlanError::MissingXorb { .. })
        ));
    }

    #[test]
    fn bounded_plans_cut_terms_and_ranges() {
        let (a, fa) = xorb(&[100, 200, 300, 400], 4);
        let (b, fb) = xorb(&[50, 60], 5);
        let footers: HashMap<XorbHash, &XorbFooter> = [(a, &fa), (b, &fb)].into_iter().collect();
        // File: a[0..4) (1000 bytes), b[0..2) (110), a[0..2) again (300).
        let terms = [term(a, 0, 4, 1000), term(b, 0, 2, 110), term(a, 0, 2, 300)];
        let whole = plan(&terms, &footers, None).unwrap();
        // Unbounded: the same plan.
        assert_eq!(bounded(whole.clone(), &footers, u64::MAX).unwrap(), whole);
        // At most 320 stored bytes (chunks are stored with 8-byte headers: 108, 208, 308, 408):
        // a[0..4) is cut into 0..2 (316 bytes), 2..3 and 3..4 (408: one chunk, larger).
        let p = bounded(whole.clone(), &footers, 320).unwrap();
        assert_eq!((p.file_size, p.offset_into_first_range), (1410, 0));
        let cut: Vec<(XorbHash, std::ops::Range<u32>, u32)> = p
            .terms
            .iter()
            .map(|t| (t.xorb, t.chunks.clone(), t.unpacked_len))
            .collect();
        assert_eq!(
            cut,
            vec![
                (a, 0..2, 300),
                (a, 2..3, 300),
                (a, 3..4, 400),
                (b, 0..2, 110),
                (a, 0..2, 300),
            ]
        );
        let ranges = |x: usize| -> Vec<(std::ops::Range<u32>, RangeInclusive<u64>)> {
            (p.fetch[x].1.iter())
                .map(|r| (r.chunks.clone(), r.bytes.clone()))
                .collect()
        };
        assert_eq!((p.fetch[0].0, p.fetch[1].0), (a, b));
        assert_eq!(
            ranges(0),
            vec![(0..2, 0..=315), (2..3, 316..=623), (3..4, 624..=1031)]
        );
        assert_eq!(ranges(1), vec![(0..2, 0..=125)]);
        // Touching pieces are merged while they fit: at 700 bytes a's first two pieces are one.
        let p = bounded(whole, &footers, 700).unwrap();
        assert_eq!(
            (p.fetch[0].1.iter())
                .map(|r| r.chunks.clone())
                .collect::<Vec<_>>(),
            vec![0..3, 3..4]
        );
    }
}
