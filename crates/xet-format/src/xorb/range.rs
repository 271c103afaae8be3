//! A fetched byte range of whole chunks (docs/cas-api.md §6.4), indexed without decompressing.
//!
//! A download asks the server for a byte range of a stored xorb that holds a run of whole
//! chunks: chunk headers and payloads back to back, no footer. [`ChunkRange::index`] walks the
//! 8-byte headers once (every header checked as in §3.2, every payload inside the bytes, the
//! chunk count, uncompressed total and length within the limits, as the xorb reader checks them) and remembers where each payload lies;
//! [`ChunkRange::decode_into`] then decompresses only the chunks a file actually uses, each as
//! often as the file repeats it, without walking the range again.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | header of chunk 0: version, compressed length (u24), scheme, uncompressed length (u24) |
//! | 8 | compressed length | payload of chunk 0 |
//! | … | | chunk 1, 2, … to the end of the bytes |
//!
//! Nothing here hashes: a caller that must verify content hashes what it decoded.

use super::compress::decompress_chunk_into;
use super::error::{ChunkProblem, XorbError};
use super::header::{starts_footer, ChunkHeader, CHUNK_HEADER_LEN};
use super::reader::next_header;
use super::XorbLimits;
use crate::cursor::Cursor;

/// Where one chunk's payload lies in the range's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    header: ChunkHeader,
    /// Offset of the chunk header in the range's bytes.
    start: u64,
}

/// The chunks of a fetched range: their headers and where their payloads are. Holds offsets
/// only, so it can be kept beside the bytes it indexes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkRange {
    spans: Vec<Span>,
    len: u64,
}

impl ChunkRange {
    /// Indexes `bytes`, which must be whole chunks and nothing else (a footer is refused: a
    /// fetch range never includes one). Offsets in errors are offsets into `bytes`.
    pub fn index(bytes: &[u8], limits: &XorbLimits) -> Result<Self, XorbError> {
        let mut c = Cursor::new(bytes);
        let mut spans = Vec::new();
        let mut uncompressed = 0u64;
        while !c.is_empty() {
            let index = spans.len();
            let start = c.offset();
            let fail = |problem| XorbError::Chunk {
                index,
                offset: start,
                problem,
            };
            if starts_footer(c.rest()) {
                return Err(fail(ChunkProblem::Header(
                    super::header::HeaderError::FooterIdent,
                )));
            }
            let (header, total) = next_header(&mut c, index, uncompressed, limits)?;
            c.skip(u64::from(header.compressed_len()), "chunk payload")
                .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
            spans.push(Span { header, start });
            uncompressed = total;
        }
        if spans.is_empty() {
            return Err(XorbError::Empty);
        }
        Ok(Self {
            spans,
            len: bytes.len() as u64,
        })
    }

    /// Number of chunks in the range.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the range holds no chunk (never true of an indexed range).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Uncompressed length of chunk `i`, if there is such a chunk.
    pub fn uncompressed_len(&self, i: usize) -> Option<u32> {
        self.spans.get(i).map(|s| s.header.uncompressed_len())
    }

    /// Decompresses chunk `i` of `bytes` (the bytes this index was made from), appending exactly
    /// its uncompressed length to `out`. On error `out` is left as it was.
    pub fn decode_into(&self, bytes: &[u8], i: usize, out: &mut Vec<u8>) -> Result<(), XorbError> {
        let span = self.spans.get(i).ok_or(XorbError::BadChunkRange {
            range: i..i + 1,
            num_chunks: self.spans.len(),
        })?;
        let fail = |problem| XorbError::Chunk {
            index: i,
            offset: span.start,
            problem,
        };
        if bytes.len() as u64 != self.len {
            return Err(fail(ChunkProblem::Truncated(crate::cursor::Truncated {
                what: "indexed chunk range",
                offset: 0,
                needed: self.len,
                available: bytes.len() as u64,
            })));
        }
        let mut c = Cursor::new(bytes);
        c.skip(span.start + CHUNK_HEADER_LEN as u64, "chunk region")
            .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
        let payload = c
            .take(u64::from(span.header.compressed_len()), "chunk payload")
            .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
        decompress_chunk_into(&span.header, payload, out).map_err(|e| fail(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorb::{CompressionPolicy, XorbBuilder};

    fn built(chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut b = XorbBuilder::new(CompressionPolicy::Auto);
        for c in chunks {
            let pushed = b.add_chunk(c).expect("a valid chunk");
            assert!(matches!(pushed, crate::xorb::Push::Added(_)));
        }
        b.finish().expect("builds").into_upload_body()
    }

    fn sample() -> Vec<Vec<u8>> {
        vec![
            vec![7u8; 5000],
            (0..9000u32).map(|i| (i * 31 % 251) as u8).collect(),
            b"the quick brown fox ".repeat(300),
        ]
    }

    #[test]
    fn decodes_each_chunk_of_a_built_range_by_itself() {
        let chunks = sample();
        let body = built(&chunks);
        let range = ChunkRange::index(&body, &XorbLimits::SERVER).expect("indexes");
        assert_eq!(range.len(), 3);
        for i in [2, 0, 1, 2] {
            let mut out = b"prefix".to_vec();
            range.decode_into(&body, i, &mut out).expect("decodes");
            assert_eq!(&out[..6], b"prefix");
            assert_eq!(out[6..], chunks[i][..]);
            assert_eq!(range.uncompressed_len(i), Some(chunks[i].len() as u32));
        }
        assert!(range.decode_into(&body, 3, &mut Vec::new()).is_err());
        assert_eq!(range.uncompressed_len(3), None);
    }

    #[test]
    fn refuses_truncation_footers_limits_and_other_bytes() {
        let chunks = sample();
        let body = built(&chunks);
        for cut in [1, 7, 8, 9, body.len() - 1] {
            let err = ChunkRange::index(&body[..cut], &XorbLimits::SERVER).unwrap_err();
            assert!(
                matches!(err, XorbError::Chunk { .. }),
                "cut at {cut}: {err}"
            );
        }
        assert!(matches!(
            ChunkRange::index(&[], &XorbLimits::SERVER),
            Err(XorbError::Empty)
        ));
        let mut with_footer = body.clone();
        with_footer.extend_from_slice(b"XETBLOB and more");
        let err = ChunkRange::index(&with_footer, &XorbLimits::SERVER).unwrap_err();
        assert!(matches!(err, XorbError::Chunk { index: 3, .. }), "{err}");
        let tight = XorbLimits {
            max_chunks: 2,
            ..XorbLimits::SERVER
        };
        assert!(ChunkRange::index(&body, &tight).is_err());
        let small = XorbLimits {
            max_uncompressed_bytes: 10_000,
            ..XorbLimits::SERVER
        };
        assert!(ChunkRange::index(&body, &small).is_err());
        // Decoding with other bytes than the indexed ones is refused, not misread.
        let range = ChunkRange::index(&body, &XorbLimits::SERVER).expect("indexes");
        assert!(range
            .decode_into(&body[..body.len() - 1], 0, &mut Vec::new())
            .is_err());
        let mut flipped = body.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        let mut out = Vec::new();
        if range.decode_into(&flipped, 2, &mut out).is_ok() {
            assert_ne!(
                out, chunks[2],
                "a flipped byte must change or fail the chunk"
            );
        }
    }
}
