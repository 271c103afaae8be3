//! A fetched range of whole chunks (docs/cas-api.md §6.4) split into chunks as its bytes
//! arrive, piece by piece, so that a download decodes each chunk as soon as it is complete
//! instead of holding the whole range (up to a xorb, 64 MiB) first.
//!
//! [`ChunkSplitter::feed`] takes the pieces in order and hands each complete chunk (its header
//! and payload) to a callback: straight from the piece when the chunk lies inside it, else from
//! a carry buffer of at most one chunk (8 + 256 KiB), filled across pieces. Every header is
//! checked as [`ChunkRange::index`](super::ChunkRange::index) checks it (version, scheme, the
//! chunk count, uncompressed total and length within the limits, no footer); a range that ends
//! inside a chunk is refused by [`ChunkSplitter::finish`]. Offsets in errors are offsets into
//! the range. Nothing here decompresses or hashes.

use super::error::{ChunkProblem, XorbError};
use super::header::{starts_footer, ChunkHeader, HeaderError, CHUNK_HEADER_LEN};
use super::XorbLimits;
use crate::cursor::Truncated;

/// Splits a range's bytes, given in pieces, into chunks. See the module documentation.
#[derive(Debug, Clone)]
pub struct ChunkSplitter {
    limits: XorbLimits,
    /// The start of a chunk that did not fit in the pieces so far.
    carry: Vec<u8>,
    /// Chunks handed out.
    chunks: usize,
    /// Where the next chunk starts in the range: the bytes of the chunks handed out.
    taken: u64,
    /// Bytes of the range fed so far (the carried ones included).
    fed: u64,
    /// Uncompressed bytes of the chunks handed out.
    uncompressed: u64,
}

impl ChunkSplitter {
    /// A splitter for one range, checking its chunks against `limits`.
    pub fn new(limits: XorbLimits) -> Self {
        Self {
            limits,
            carry: Vec::new(),
            chunks: 0,
            taken: 0,
            fed: 0,
            uncompressed: 0,
        }
    }

    /// Bytes of the range fed so far: where the next piece must start.
    pub fn position(&self) -> u64 {
        self.fed
    }

    /// Chunks handed out so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Takes the next `piece` of the range and calls `each(chunk, payload)` for every chunk it
    /// completes, in order. Stops at the first error, a damaged header's or the callback's; the
    /// splitter should not be fed after an error.
    pub fn feed<E: From<XorbError>>(
        &mut self,
        mut piece: &[u8],
        each: &mut EachChunk<'_, E>,
    ) -> Result<(), E> {
        self.fed += piece.len() as u64;
        loop {
            if !self.carry.is_empty() {
                // Finish the carried chunk: its header first, then its payload.
                if self.carry.len() < CHUNK_HEADER_LEN {
                    let n = (CHUNK_HEADER_LEN - self.carry.len()).min(piece.len());
                    self.carry.extend_from_slice(&piece[..n]);
                    piece = &piece[n..];
                    if self.carry.len() < CHUNK_HEADER_LEN {
                        return Ok(());
                    }
                }
                let start = self.taken;
                let header = self.header(&self.carry[..CHUNK_HEADER_LEN], start)?;
                let len = CHUNK_HEADER_LEN + header.compressed_len() as usize;
                let n = (len - self.carry.len()).min(piece.len());
                self.carry.extend_from_slice(&piece[..n]);
                piece = &piece[n..];
                if self.carry.len() < len {
                    return Ok(());
                }
                let carry = std::mem::take(&mut self.carry);
                self.hand_out(&header, &carry[CHUNK_HEADER_LEN..], each)?;
                self.carry = carry;
                self.carry.clear();
                continue;
            }
            if piece.is_empty() {
                return Ok(());
            }
            if piece.len() < CHUNK_HEADER_LEN {
                self.carry.extend_from_slice(piece);
                return Ok(());
            }
            let header = self.header(&piece[..CHUNK_HEADER_LEN], self.taken)?;
            let len = CHUNK_HEADER_LEN + header.compressed_len() as usize;
            if piece.len() < len {
                self.carry.reserve(len);
                self.carry.extend_from_slice(piece);
                return Ok(());
            }
            self.hand_out(&header, &piece[CHUNK_HEADER_LEN..len], each)?;
            piece = &piece[len..];
        }
    }

    /// The end of the range: the number of chunks in it. An error if it ended inside a chunk
    /// or held none.
    pub fn finish(&self) -> Result<usize, XorbError> {
        if !self.carry.is_empty() {
            let needed = match self.carry.get(..CHUNK_HEADER_LEN) {
                Some(h) => {
                    let h: [u8; CHUNK_HEADER_LEN] = h.try_into().unwrap_or_default();
                    ChunkHeader::decode(&h).map_or(CHUNK_HEADER_LEN as u64, |h| h.chunk_len())
                }
                None => CHUNK_HEADER_LEN as u64,
            };
            return Err(XorbError::Chunk {
                index: self.chunks,
                offset: self.taken,
                problem: ChunkProblem::Truncated(Truncated {
                    what: "chunk at the end of the range",
                    offset: self.taken,
                    needed,
                    available: self.carry.len() as u64,
                }),
            });
        }
        if self.chunks == 0 {
            return Err(XorbError::Empty);
        }
        Ok(self.chunks)
    }

    /// Checks the header of the chunk starting `start` bytes into the range.
    fn header(&self, bytes: &[u8], start: u64) -> Result<ChunkHeader, XorbError> {
        let index = self.chunks;
        let fail = |problem| XorbError::Chunk {
            index,
            offset: start,
            problem,
        };
        if starts_footer(bytes) {
            return Err(fail(ChunkProblem::Header(HeaderError::FooterIdent)));
        }
        if index >= self.limits.max_chunks {
            return Err(fail(ChunkProblem::TooManyChunks {
                limit: self.limits.max_chunks,
            }));
        }
        let raw: [u8; CHUNK_HEADER_LEN] = match bytes.try_into() {
            Ok(raw) => raw,
            Err(_) => {
                return Err(fail(ChunkProblem::Truncated(Truncated {
                    what: "chunk header",
                    offset: start,
                    needed: CHUNK_HEADER_LEN as u64,
                    available: bytes.len() as u64,
                })))
            }
        };
        let header = ChunkHeader::decode(&raw).map_err(|e| fail(e.into()))?;
        let total = self.uncompressed + u64::from(header.uncompressed_len());
        if total > self.limits.max_uncompressed_bytes {
            return Err(fail(ChunkProblem::TooMuchData {
                total,
                limit: self.limits.max_uncompressed_bytes,
            }));
        }
        let end = start + header.chunk_len();
        if end > self.limits.max_body_bytes {
            return Err(fail(ChunkProblem::BodyTooLong {
                total: end,
                limit: self.limits.max_body_bytes,
            }));
        }
        Ok(header)
    }

    fn hand_out<E>(
        &mut self,
        header: &ChunkHeader,
        payload: &[u8],
        each: &mut EachChunk<'_, E>,
    ) -> Result<(), E> {
        let chunk = SplitChunk {
            index: self.chunks,
            offset: self.taken,
            header: *header,
        };
        self.chunks += 1;
        self.taken += header.chunk_len();
        self.uncompressed += u64::from(header.uncompressed_len());
        each(chunk, payload)
    }
}

/// What [`ChunkSplitter::feed`] calls with each chunk and its payload.
pub type EachChunk<'a, E> = dyn FnMut(SplitChunk, &[u8]) -> Result<(), E> + 'a;

/// A chunk [`ChunkSplitter::feed`] hands out, with its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitChunk {
    /// Its index in the range.
    pub index: usize,
    /// Where its header starts in the range.
    pub offset: u64,
    /// Its header (checked).
    pub header: ChunkHeader,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorb::{decompress_chunk, ChunkRange, CompressionPolicy, XorbBuilder};

    fn range_bytes() -> (Vec<u8>, Vec<Vec<u8>>) {
        let chunks: Vec<Vec<u8>> = vec![
            vec![7u8; 5000],
            (0..9000u32).map(|i| (i * 31 % 251) as u8).collect(),
            b"the quick brown fox ".repeat(300),
            (0..3u8).collect(),
        ];
        let mut b = XorbBuilder::new(CompressionPolicy::Auto);
        for c in &chunks {
            let pushed = b.add_chunk(c).expect("a valid chunk");
            assert!(matches!(pushed, crate::xorb::Push::Added(_)));
        }
        (b.finish().expect("builds").into_upload_body(), chunks)
    }

    /// Splits `bytes` fed in pieces of `size`, decoding each chunk.
    fn split(bytes: &[u8], size: usize) -> Result<Vec<(usize, Vec<u8>)>, XorbError> {
        let mut s = ChunkSplitter::new(XorbLimits::SERVER);
        let mut out = Vec::new();
        for piece in bytes.chunks(size) {
            s.feed(piece, &mut |c, p| {
                out.push((c.index, decompress_chunk(&c.header, p).expect("decodes")));
                Ok::<(), XorbError>(())
            })?;
        }
        s.finish()?;
        Ok(out)
    }

    #[test]
    fn any_piece_size_gives_the_same_chunks_as_the_index() {
        let (bytes, chunks) = range_bytes();
        let index = ChunkRange::index(&bytes, &XorbLimits::SERVER).expect("indexes");
        for size in [1, 3, 7, 8, 9, 100, 4096, bytes.len() - 1, bytes.len()] {
            let got = split(&bytes, size).expect("splits");
            assert_eq!(got.len(), index.len(), "pieces of {size}");
            for (i, data) in &got {
                assert_eq!(data, &chunks[*i], "chunk {i}, pieces of {size}");
            }
        }
    }

    #[test]
    fn position_counts_every_byte_fed_and_chunks_know_their_offsets() {
        let (bytes, _) = range_bytes();
        let mut s = ChunkSplitter::new(XorbLimits::SERVER);
        let mut seen = 0;
        let mut offsets = Vec::new();
        s.feed(&bytes[..5], &mut |c, _| {
            offsets.push(c.offset);
            Ok::<(), XorbError>(())
        })
        .unwrap();
        assert_eq!((s.position(), offsets.len()), (5, 0));
        s.feed(&bytes[5..], &mut |c, _| {
            offsets.push(c.offset);
            Ok::<(), XorbError>(())
        })
        .unwrap();
        seen += offsets.len();
        // Each chunk starts where the one before it ends.
        let first_len = 8 + u64::from(u32::from_le_bytes([bytes[1], bytes[2], bytes[3], 0]));
        assert_eq!(&offsets[..2], &[0, first_len]);
        assert_eq!(s.position(), bytes.len() as u64);
        assert_eq!((s.finish(), seen), (Ok(4), 4));
    }

    #[test]
    fn a_range_ending_inside_a_chunk_is_refused_with_its_offset() {
        let (bytes, _) = range_bytes();
        for cut in [3, 8, 20, bytes.len() - 1] {
            let e = split(&bytes[..cut], 5).unwrap_err();
            match e {
                XorbError::Chunk {
                    problem: ChunkProblem::Truncated(t),
                    offset,
                    ..
                } => assert!(offset < cut as u64 && t.available > 0, "cut {cut}: {t:?}"),
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        assert_eq!(split(&[], 5).unwrap_err(), XorbError::Empty);
    }

    #[test]
    fn damaged_headers_and_footers_are_refused_with_index_and_offset() {
        let (mut bytes, _) = range_bytes();
        // The second chunk starts after the first one's header and payload.
        let second = 8 + u32::from_le_bytes([bytes[1], bytes[2], bytes[3], 0]) as usize;
        bytes[second] = 9; // version
        let e = split(&bytes, 64).unwrap_err();
        assert!(
            matches!(e, XorbError::Chunk { index: 1, offset, .. } if offset == second as u64),
            "{e:?}"
        );
        let footer = b"XETBLOB and more bytes after it".to_vec();
        let e = split(&footer, 3).unwrap_err();
        assert!(matches!(
            e,
            XorbError::Chunk {
                index: 0,
                problem: ChunkProblem::Header(HeaderError::FooterIdent),
                ..
            }
        ));
    }

    #[test]
    fn limits_are_held_before_the_payload_arrives() {
        let (bytes, _) = range_bytes();
        let tight = XorbLimits {
            max_chunks: 2,
            ..XorbLimits::SERVER
        };
        let mut s = ChunkSplitter::new(tight);
        let e = s
            .feed(&bytes, &mut |_, _| Ok::<(), XorbError>(()))
            .unwrap_err();
        assert!(matches!(
            e,
            XorbError::Chunk {
                index: 2,
                problem: ChunkProblem::TooManyChunks { limit: 2 },
                ..
            }
        ));
        // A header announcing more than the body limit fails on its 8 bytes alone.
        let small = XorbLimits {
            max_body_bytes: 10,
            ..XorbLimits::SERVER
        };
        let mut s = ChunkSplitter::new(small);
        let e = s
            .feed(&bytes[..8], &mut |_, _| Ok::<(), XorbError>(()))
            .unwrap_err();
        assert!(matches!(
            e,
            XorbError::Chunk {
                problem: ChunkProblem::BodyTooLong { .. },
                ..
            }
        ));
    }

    #[test]
    fn the_callbacks_error_stops_the_split() {
        let (bytes, _) = range_bytes();
        let mut s = ChunkSplitter::new(XorbLimits::SERVER);
        let mut calls = 0;
        let e = s
            .feed(&bytes, &mut |c, _| {
                calls += 1;
                if c.index == 1 {
                    Err(XorbError::Empty)
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert_eq!((e, calls), (XorbError::Empty, 2));
    }

    #[test]
    fn damaged_ranges_split_as_the_index_reads_them() {
        // The property the fuzz target checks, over a few thousand damaged copies.
        let (bytes, _) = range_bytes();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let mut b = bytes.clone();
            for _ in 0..(next() % 3) {
                let at = (next() % b.len() as u64) as usize;
                b[at] = next() as u8;
            }
            b.truncate((next() % (b.len() as u64 + 1)) as usize);
            let size = (next() % 300 + 1) as usize;
            let mut s = ChunkSplitter::new(XorbLimits::SERVER);
            let mut r = Ok(());
            for piece in b.chunks(size) {
                r = s.feed(piece, &mut |_, _| Ok::<(), XorbError>(()));
                if r.is_err() {
                    break;
                }
            }
            let split = r.and_then(|()| s.finish());
            let index = ChunkRange::index(&b, &XorbLimits::SERVER).map(|i| i.len());
            assert_eq!(split.is_ok(), index.is_ok(), "{split:?} {index:?}");
            if let (Ok(a), Ok(b)) = (split, index) {
                assert_eq!(a, b);
            }
        }
    }
}
