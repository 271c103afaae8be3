//! A reconstruction plan written as the CAS API's JSON (docs/cas-api.md §5, §6), with a URL for
//! every fetch entry from the server's [`FetchUrls`]: v1 (one range per URL), v2 (up to
//! [`RANGES_PER_ENTRY`] ranges per URL) and the batch answer of several files. Only the server
//! writes plans; the client reads them back with [`ReconstructionV2::into_plan`]. Converting
//! cannot fail.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use xet_format::{FileHash, XorbHash};
use xet_protocol::wire::{
    BatchReconstructionV1, ByteRange, ChunkRange, FetchInfoV1, RangeV2, ReconstructionV1,
    ReconstructionV2, Term, XorbEntryV2,
};
use xet_protocol::{FetchRange, ReconstructionPlan};

/// At most this many ranges in one v2 `xorbs` entry (one URL); longer lists are split into
/// several entries, each with its own URL, so that a client in multi-range mode stays within
/// the server's limit on ranges per request.
pub const RANGES_PER_ENTRY: usize = 256;

/// Where the bytes of a plan are fetched from: the URL of each v1 fetch entry or v2 `xorbs`
/// entry, which grants exactly that entry's byte ranges of the xorb and nothing else.
pub trait FetchUrls {
    /// The URL that serves `ranges` (sorted, inclusive byte ranges) of `xorb`.
    fn url(&self, xorb: &XorbHash, ranges: &[RangeInclusive<u64>]) -> String;

    /// How many ranges one URL may serve (a v2 entry holds at most this many): 1 for URLs
    /// whose signature covers the `Range` header itself.
    fn ranges_per_url(&self) -> usize {
        RANGES_PER_ENTRY
    }
}

fn term_json(plan: &ReconstructionPlan) -> Vec<Term> {
    plan.terms
        .iter()
        .map(|t| Term {
            hash: t.xorb,
            unpacked_length: t.unpacked_len,
            range: ChunkRange {
                start: t.chunks.start,
                end: t.chunks.end,
            },
        })
        .collect()
}

fn chunk_range(r: &FetchRange) -> ChunkRange {
    ChunkRange {
        start: r.chunks.start,
        end: r.chunks.end,
    }
}

fn byte_range(r: &FetchRange) -> ByteRange {
    ByteRange {
        start: *r.bytes.start(),
        end: *r.bytes.end(),
    }
}

/// The batch answer for the plans of several files: each file's terms, and per xorb the fetch
/// entries of every file (the same range listed once). Where one URL may serve several ranges
/// ([`FetchUrls::ranges_per_url`] above 1), ranges that touch or overlap share one URL that
/// grants all of them, so that a client may fetch such a run in one request; each entry still
/// names its own range. The files' ranges are those of files the caller may read, so a run
/// grants nothing else.
pub fn to_batch_v1(
    plans: &[(FileHash, ReconstructionPlan)],
    urls: &dyn FetchUrls,
) -> BatchReconstructionV1 {
    let mut out = BatchReconstructionV1::default();
    let mut ranges: BTreeMap<XorbHash, Vec<(ChunkRange, ByteRange)>> = BTreeMap::new();
    for (file, plan) in plans {
        out.files.insert(*file, term_json(plan));
        for (xorb, fetch) in &plan.fetch {
            let of_xorb = ranges.entry(*xorb).or_default();
            of_xorb.extend(fetch.iter().map(|r| (chunk_range(r), byte_range(r))));
        }
    }
    let coalesce = urls.ranges_per_url() > 1;
    for (xorb, mut rs) in ranges {
        rs.sort_by_key(|(c, b)| (c.start, c.end, b.start));
        rs.dedup();
        let mut entries = Vec::with_capacity(rs.len());
        let mut i = 0;
        while i < rs.len() {
            let (mut chunks_end, mut bytes_end) = (rs[i].0.end, rs[i].1.end);
            let mut j = i + 1;
            while coalesce && j < rs.len() && rs[j].0.start <= chunks_end {
                chunks_end = chunks_end.max(rs[j].0.end);
                bytes_end = bytes_end.max(rs[j].1.end);
                j += 1;
            }
            let url = urls.url(&xorb, &[rs[i].1.start..=bytes_end]);
            entries.extend(rs[i..j].iter().map(|&(range, url_range)| FetchInfoV1 {
                range,
                url: url.clone(),
                url_range,
            }));
            i = j;
        }
        out.fetch_info.insert(xorb, entries);
    }
    out
}

/// The v1 JSON of a plan: one URL per fetch entry, granting that entry's range.
pub fn to_v1(plan: &ReconstructionPlan, urls: &dyn FetchUrls) -> ReconstructionV1 {
    let mut fetch_info = BTreeMap::new();
    for (xorb, ranges) in &plan.fetch {
        let entries = ranges
            .iter()
            .map(|r| FetchInfoV1 {
                range: chunk_range(r),
                url: urls.url(xorb, std::slice::from_ref(&r.bytes)),
                url_range: byte_range(r),
            })
            .collect();
        fetch_info.insert(*xorb, entries);
    }
    ReconstructionV1 {
        offset_into_first_range: plan.offset_into_first_range,
        terms: term_json(plan),
        fetch_info,
    }
}

/// The v2 JSON of a plan: entries of at most [`FetchUrls::ranges_per_url`] ranges (and never
/// more than [`RANGES_PER_ENTRY`]), each with a URL granting its ranges.
pub fn to_v2(plan: &ReconstructionPlan, urls: &dyn FetchUrls) -> ReconstructionV2 {
    let per_entry = urls.ranges_per_url().clamp(1, RANGES_PER_ENTRY);
    let mut xorbs = BTreeMap::new();
    for (xorb, ranges) in &plan.fetch {
        let entries = ranges
            .chunks(per_entry)
            .map(|group| {
                let bytes: Vec<RangeInclusive<u64>> =
                    group.iter().map(|r| r.bytes.clone()).collect();
                XorbEntryV2 {
                    url: urls.url(xorb, &bytes),
                    ranges: group
                        .iter()
                        .map(|r| RangeV2 {
                            chunks: chunk_range(r),
                            bytes: byte_range(r),
                        })
                        .collect(),
                }
            })
            .collect();
        xorbs.insert(*xorb, entries);
    }
    ReconstructionV2 {
        offset_into_first_range: plan.offset_into_first_range,
        terms: term_json(plan),
        xorbs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_protocol::PlannedTerm;

    const X: &str = "0101010101010101020202020202020203030303030303030404040404040404";

    #[test]
    fn a_batch_answer_lists_each_range_once_and_runs_share_a_url() {
        let xorb = XorbHash::from_hex(X).unwrap();
        let fetch = |c: std::ops::Range<u32>, b: RangeInclusive<u64>| FetchRange {
            chunks: c,
            bytes: b,
            url: None,
        };
        let term = |c: std::ops::Range<u32>, len: u32| PlannedTerm {
            xorb,
            chunks: c,
            unpacked_len: len,
        };
        let plan = |terms: Vec<PlannedTerm>, fetch: Vec<FetchRange>| ReconstructionPlan {
            file_size: terms.iter().map(|t| u64::from(t.unpacked_len)).sum(),
            offset_into_first_range: 0,
            terms,
            fetch: vec![(xorb, fetch)],
        };
        // A: chunks 0..2; B: chunks 2..3 (touching A's), C: chunks 5..6 (apart), D = A again.
        let a = plan(vec![term(0..2, 300)], vec![fetch(0..2, 0..=199)]);
        let b = plan(vec![term(2..3, 100)], vec![fetch(2..3, 200..=299)]);
        let c = plan(vec![term(5..6, 100)], vec![fetch(5..6, 500..=599)]);
        let files = [
            (FileHash::from_bytes([1; 32]), a.clone()),
            (FileHash::from_bytes([2; 32]), b.clone()),
            (FileHash::from_bytes([3; 32]), c.clone()),
            (FileHash::from_bytes([4; 32]), a.clone()),
        ];
        let answer = to_batch_v1(&files, &TestUrls);
        assert_eq!(answer.files.len(), 4);
        let entries = &answer.fetch_info[&xorb];
        let ranges: Vec<(u32, u32)> = entries
            .iter()
            .map(|e| (e.range.start, e.range.end))
            .collect();
        assert_eq!(ranges, vec![(0, 2), (2, 3), (5, 6)]);
        assert_eq!(entries[0].url, entries[1].url);
        assert!(entries[0].url.contains("&r=0-299&"), "{}", entries[0].url);
        assert!(entries[2].url.contains("&r=500-599&"), "{}", entries[2].url);
        // With one range per URL, nothing is joined.
        let one = to_batch_v1(&files, &OneRangeUrls);
        let urls: Vec<&str> = one.fetch_info[&xorb]
            .iter()
            .map(|e| e.url.as_str())
            .collect();
        assert!(urls[0].contains("&r=0-199&") && urls[1].contains("&r=200-299&"));
        // The JSON round trip gives each file its plan back, with only its own entries.
        let json = serde_json::to_string(&answer).unwrap();
        let plans = serde_json::from_str::<BatchReconstructionV1>(&json)
            .unwrap()
            .into_plans()
            .unwrap();
        for (file, original) in &files {
            let got = &plans[file];
            assert_eq!(
                (&got.terms, got.file_size),
                (&original.terms, original.file_size)
            );
            let got_ranges: Vec<_> = got.fetch[0]
                .1
                .iter()
                .map(|r| (r.chunks.clone(), r.bytes.clone()))
                .collect();
            let want: Vec<_> = original.fetch[0]
                .1
                .iter()
                .map(|r| (r.chunks.clone(), r.bytes.clone()))
                .collect();
            assert_eq!(got_ranges, want);
        }
    }

    /// URLs that name the ranges they grant, as the server's do.
    struct TestUrls;

    impl FetchUrls for TestUrls {
        fn url(&self, xorb: &XorbHash, ranges: &[RangeInclusive<u64>]) -> String {
            let r: Vec<String> = ranges
                .iter()
                .map(|r| format!("{}-{}", r.start(), r.end()))
                .collect();
            format!(
                "http://cas.test/v1/xorb-data/{xorb}?e=1&r={}&s=2",
                r.join(",")
            )
        }
    }

    /// [`TestUrls`] with one range per URL.
    struct OneRangeUrls;

    impl FetchUrls for OneRangeUrls {
        fn url(&self, xorb: &XorbHash, ranges: &[RangeInclusive<u64>]) -> String {
            TestUrls.url(xorb, ranges)
        }
        fn ranges_per_url(&self) -> usize {
            1
        }
    }

    #[test]
    fn every_entry_has_a_url_for_its_own_ranges() {
        let xorb = XorbHash::from_hex(X).unwrap();
        let fetch = |c: u32, b: u64| FetchRange {
            chunks: c..c + 1,
            bytes: b..=b + 99,
            url: None,
        };
        let plan = ReconstructionPlan {
            file_size: 0,
            offset_into_first_range: 0,
            terms: Vec::new(),
            fetch: vec![(xorb, vec![fetch(0, 0), fetch(5, 500), fetch(9, 900)])],
        };
        let v1 = to_v1(&plan, &TestUrls);
        let urls: Vec<&str> = v1.fetch_info[&xorb]
            .iter()
            .map(|f| f.url.as_str())
            .collect();
        assert!(urls[0].contains("&r=0-99&"), "{}", urls[0]);
        assert!(urls[1].contains("&r=500-599&"), "{}", urls[1]);
        assert!(urls[2].contains("&r=900-999&"), "{}", urls[2]);
        let v2 = to_v2(&plan, &TestUrls);
        assert_eq!(v2.xorbs[&xorb].len(), 1);
        assert!(v2.xorbs[&xorb][0].url.contains("&r=0-99,500-599,900-999&"));
        let one = to_v2(&plan, &OneRangeUrls);
        let entries = &one.xorbs[&xorb];
        assert_eq!(entries.len(), 3);
        assert!(entries.iter().all(|e| e.ranges.len() == 1));
        assert!(entries[1].url.contains("&r=500-599&"), "{}", entries[1].url);
        let many = ReconstructionPlan {
            fetch: vec![(
                xorb,
                (0..RANGES_PER_ENTRY as u32 + 1)
                    .map(|i| fetch(i, 200 * u64::from(i)))
                    .collect(),
            )],
            ..plan
        };
        let split = to_v2(&many, &TestUrls);
        let sizes: Vec<usize> = split.xorbs[&xorb].iter().map(|e| e.ranges.len()).collect();
        assert_eq!(sizes, vec![RANGES_PER_ENTRY, 1]);
        assert_ne!(split.xorbs[&xorb][0].url, split.xorbs[&xorb][1].url);
    }

    #[test]
    fn round_trip_through_json() {
        let xorb = XorbHash::from_hex(X).unwrap();
        let plan = ReconstructionPlan {
            file_size: 300,
            offset_into_first_range: 0,
            terms: vec![
                PlannedTerm {
                    xorb,
                    chunks: 0..2,
                    unpacked_len: 200,
                },
                PlannedTerm {
                    xorb,
                    chunks: 2..3,
                    unpacked_len: 100,
                },
            ],
            fetch: vec![(
                xorb,
                vec![FetchRange {
                    chunks: 0..3,
                    bytes: 0..=323,
                    url: None,
                }],
            )],
        };
        let url = |x: &XorbHash| format!("http://cas.test/v1/xorb-data/{x}?e=1&r=0-323&s=2");
        for json in [
            serde_json::to_string(&to_v2(&plan, &TestUrls)).unwrap(),
            serde_json::to_string(
                &serde_json::from_str::<ReconstructionV1>(
                    &serde_json::to_string(&to_v1(&plan, &TestUrls)).unwrap(),
                )
                .unwrap()
                .into_v2(),
            )
            .unwrap(),
        ] {
            let back: ReconstructionV2 = serde_json::from_str(&json).unwrap();
            let got = back.into_plan(None).unwrap();
            assert_eq!(got.terms, plan.terms);
            assert_eq!(got.file_size, 300);
            assert_eq!(got.fetch[0].1[0].bytes, 0..=323);
            assert_eq!(got.fetch[0].1[0].url.as_deref(), Some(url(&xorb).as_str()));
        }
    }
}
