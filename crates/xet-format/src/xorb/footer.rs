//! Xorb footers: version 1 written and read (docs/format.md §3.7), the legacy version 0 read only
//! (§3.8), and the `url_range` rule (§3.10).
//!
//! V1 footer (`XorbObjectInfoV1`), offsets relative to the footer's start, `N` chunks:
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 7 | ident `XETBLOB` |
//! | 7 | 1 | version = 1 |
//! | 8 | 32 | xorb hash (raw) |
//! | 40 | 7 | ident `XBLBHSH` |
//! | 47 | 1 | hashes_version = 0 |
//! | 48 | 4 | num_chunks (u32) |
//! | 52 | 32·N | chunk hashes (raw) |
//! | 52+32N | 7 | ident `XBLBBND` |
//! | 59+32N | 1 | boundaries_version = 1 |
//! | 60+32N | 4 | num_chunks (u32) |
//! | 64+32N | 4·N | `chunk_boundary_offsets[i]`: end of chunk i in the chunk region, header included |
//! | 64+36N | 4·N | `unpacked_chunk_offsets[i]`: end of chunk i in the uncompressed data |
//! | 64+40N | 4 | num_chunks (u32) |
//! | 68+40N | 4 | `hashes_section_offset_from_end` = 52 + 40N |
//! | 72+40N | 4 | `boundary_section_offset_from_end` = 40 + 8N |
//! | 76+40N | 16 | buffer: bytes 0–3 an optional server nonce, 4–15 reserved; readers ignore all 16 |
//!
//! Then, outside the footer, `u32 info_length` = 92 + 40N.
//!
//! V0 footer (read only): `XETBLOB`, version 0, xorb hash (32), num_chunks (u32), N boundary
//! offsets (u32), N chunk hashes (32 each), 16-byte buffer; `info_length` = 60 + 36N. It has no
//! unpacked offsets.

use std::ops::{Range, RangeInclusive};

use super::error::{FooterProblem, XorbError};
use super::header::{CHUNK_HEADER_LEN, MAX_CHUNK_LEN, MAX_COMPRESSED_LEN};
use crate::cursor::{Cursor, Truncated};
use crate::hash::{ChunkHash, XorbHash};

/// The footer ident; also what ends the chunk region for stream parsers.
pub const FOOTER_IDENT: [u8; 7] = *b"XETBLOB";
/// Ident of the V1 hashes section.
pub const HASHES_IDENT: [u8; 7] = *b"XBLBHSH";
/// Ident of the V1 boundaries section.
pub const BOUNDARIES_IDENT: [u8; 7] = *b"XBLBBND";
/// Bytes in the trailing buffer.
pub const BUFFER_LEN: usize = 16;
/// Bytes of the buffer that may hold the server's uniqueness nonce.
pub const NONCE_LEN: usize = 4;

const V1_FIXED: u64 = 92;
const V1_PER_CHUNK: u64 = 40;
const V0_FIXED: u64 = 60;
const V0_PER_CHUNK: u64 = 36;

/// Length of a V1 footer of `n` chunks (what `info_length` holds).
pub const fn v1_len(num_chunks: u64) -> u64 {
    V1_FIXED + V1_PER_CHUNK * num_chunks
}

/// Length of a V0 footer of `n` chunks.
pub const fn v0_len(num_chunks: u64) -> u64 {
    V0_FIXED + V0_PER_CHUNK * num_chunks
}

/// Footer versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FooterVersion {
    /// Legacy, read only, no unpacked offsets.
    V0,
    /// Current.
    V1,
}

/// The contents of a xorb footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorbFooter {
    pub hash: XorbHash,
    pub chunk_hashes: Vec<ChunkHash>,
    /// End offset of each chunk in the chunk region, header included.
    pub chunk_boundary_offsets: Vec<u32>,
    /// End offset of each chunk in the uncompressed data; `None` in a V0 footer.
    pub unpacked_chunk_offsets: Option<Vec<u32>>,
    /// The 16 buffer bytes as found (or to be written): nonce in bytes 0–3, the rest reserved.
    pub buffer: [u8; BUFFER_LEN],
}

impl XorbFooter {
    pub fn version(&self) -> FooterVersion {
        match self.unpacked_chunk_offsets {
            Some(_) => FooterVersion::V1,
            None => FooterVersion::V0,
        }
    }

    pub fn num_chunks(&self) -> usize {
        self.chunk_hashes.len()
    }

    /// The per-upload uniqueness nonce (buffer bytes 0–3).
    pub fn nonce(&self) -> [u8; NONCE_LEN] {
        let [a, b, c, d, ..] = self.buffer;
        [a, b, c, d]
    }

    /// Sets buffer bytes 0–3, leaving the reserved bytes alone.
    pub fn set_nonce(&mut self, nonce: [u8; NONCE_LEN]) {
        for (slot, byte) in self.buffer.iter_mut().zip(nonce) {
            *slot = byte;
        }
    }

    /// The length of this footer in its own version (`info_length`).
    pub fn encoded_len(&self) -> u64 {
        let n = self.num_chunks() as u64;
        match self.version() {
            FooterVersion::V1 => v1_len(n),
            FooterVersion::V0 => v0_len(n),
        }
    }

    /// Appends the V1 footer and the trailing `info_length` to `out`. Fails for a V0 footer
    /// (writers must not produce V0) and if the vectors disagree in length.
    pub fn write_v1(&self, out: &mut Vec<u8>) -> Result<(), XorbError> {
        let unpacked = self
            .unpacked_chunk_offsets
            .as_ref()
            .ok_or(XorbError::Unwritable("a V0 footer has no unpacked offsets"))?;
        let n = self.num_chunks();
        if self.chunk_boundary_offsets.len() != n || unpacked.len() != n {
            return Err(XorbError::Unwritable(
                "chunk hashes, boundary offsets and unpacked offsets differ in length",
            ));
        }
        let n32 = u32::try_from(n).map_err(|_| XorbError::Unwritable("too many chunks"))?;
        let len = v1_len(n as u64);
        let info_length =
            u32::try_from(len).map_err(|_| XorbError::Unwritable("too many chunks"))?;
        // Both fit: each is smaller than info_length.
        let hashes_from_end = (len - 40) as u32;
        let boundary_from_end = (40 + 8 * n as u64) as u32;

        out.reserve(len as usize + 4);
        out.extend_from_slice(&FOOTER_IDENT);
        out.push(1);
        out.extend_from_slice(self.hash.as_bytes());
        out.extend_from_slice(&HASHES_IDENT);
        out.push(0);
        out.extend_from_slice(&n32.to_le_bytes());
        for h in &self.chunk_hashes {
            out.extend_from_slice(h.as_bytes());
        }
        out.extend_from_slice(&BOUNDARIES_IDENT);
        out.push(1);
        out.extend_from_slice(&n32.to_le_bytes());
        for b in &self.chunk_boundary_offsets {
            out.extend_from_slice(&b.to_le_bytes());
        }
        for u in unpacked {
            out.extend_from_slice(&u.to_le_bytes());
        }
        out.extend_from_slice(&n32.to_le_bytes());
        out.extend_from_slice(&hashes_from_end.to_le_bytes());
        out.extend_from_slice(&boundary_from_end.to_le_bytes());
        out.extend_from_slice(&self.buffer);
        out.extend_from_slice(&info_length.to_le_bytes());
        Ok(())
    }

    /// The V1 footer followed by `info_length`.
    pub fn encode_v1(&self) -> Result<Vec<u8>, XorbError> {
        let mut out = Vec::new();
        self.write_v1(&mut out)?;
        Ok(out)
    }

    /// Reads one footer (V1, or legacy V0) from `c`, which must be at its `XETBLOB` ident, with
    /// the reader checks of §3.7: idents and versions, the three `num_chunks` copies equal, both
    /// section offsets equal to the bytes actually read. The buffer bytes are kept but not
    /// checked. Does not read the trailing `info_length`.
    pub fn read(c: &mut Cursor<'_>) -> Result<Self, XorbError> {
        let start = c.offset();
        let ident = c.array::<7>("footer ident")?;
        if ident != FOOTER_IDENT {
            return Err(footer_error(
                start,
                FooterProblem::Ident {
                    section: "footer",
                    found: ident,
                    expected: "XETBLOB",
                },
            ));
        }
        match c.u8("footer version")? {
            1 => Self::read_v1_body(c, start),
            0 => Self::read_v0_body(c, start),
            found => Err(footer_error(
                start,
                FooterProblem::Version {
                    section: "footer",
                    found,
                    expected: "0 or 1",
                },
            )),
        }
    }

    /// The rest of a V1 footer, after its ident and version byte; `start` is where the footer
    /// starts, for errors. Checks that the third `num_chunks` copy equals the first and that both
    /// section offsets equal the bytes actually read.
    fn read_v1_body(c: &mut Cursor<'_>, start: u64) -> Result<Self, XorbError> {
        let hash = XorbHash::from_bytes(c.hash("xorb hash")?);
        let hashes_start = c.offset();
        let (n, chunk_hashes) = read_hashes_section(c, start)?;
        let boundaries_start = c.offset();
        let (chunk_boundary_offsets, unpacked) = read_boundaries_section(c, start, n)?;
        let n3 = c.u32("num_chunks (footer end)")?;
        if n3 != n {
            return Err(footer_error(
                start,
                FooterProblem::NumChunksDiffer {
                    first: n,
                    where_first: "hashes section",
                    other: n3,
                    where_other: "end of the footer",
                },
            ));
        }
        let hashes_from_end = c.u32("hashes_section_offset_from_end")?;
        let boundary_from_end = c.u32("boundary_section_offset_from_end")?;
        let buffer = c.array::<BUFFER_LEN>("footer buffer")?;
        let end = c.offset();
        for (field, stored, section_start) in [
            (
                "hashes_section_offset_from_end",
                hashes_from_end,
                hashes_start,
            ),
            (
                "boundary_section_offset_from_end",
                boundary_from_end,
                boundaries_start,
            ),
        ] {
            let actual = end - section_start;
            if u64::from(stored) != actual {
                return Err(footer_error(
                    start,
                    FooterProblem::SectionOffset {
                        field,
                        stored,
                        actual,
                    },
                ));
            }
        }
        Ok(Self {
            hash,
            chunk_hashes,
            chunk_boundary_offsets,
            unpacked_chunk_offsets: Some(unpacked),
            buffer,
        })
    }

    /// The rest of a V0 footer, after its ident and version byte.
    fn read_v0_body(c: &mut Cursor<'_>, start: u64) -> Result<Self, XorbError> {
        let hash = XorbHash::from_bytes(c.hash("xorb hash")?);
        let n = c.u32("num_chunks")?;
        let needed = V0_PER_CHUNK * u64::from(n) + BUFFER_LEN as u64;
        if needed > c.remaining() as u64 {
            return Err(XorbError::Footer {
                offset: start,
                problem: FooterProblem::TooManyChunks {
                    num_chunks: n,
                    needed,
                    available: c.remaining() as u64,
                },
            });
        }
        let chunk_boundary_offsets = read_u32s(c, n, "chunk boundary offset")?;
        let mut chunk_hashes = Vec::with_capacity(n as usize);
        for _ in 0..n {
            chunk_hashes.push(ChunkHash::from_bytes(c.hash("chunk hash")?));
        }
        let buffer = c.array::<BUFFER_LEN>("footer buffer")?;
        Ok(Self {
            hash,
            chunk_hashes,
            chunk_boundary_offsets,
            unpacked_chunk_offsets: None,
            buffer,
        })
    }

    /// Parses `bytes` as exactly one footer (no trailing `info_length`); `offset` is where the
    /// footer sits in its object, for error messages.
    pub fn parse(bytes: &[u8], offset: u64) -> Result<Self, XorbError> {
        let mut c = Cursor::with_base(bytes, offset);
        let footer = Self::read(&mut c)?;
        if !c.is_empty() {
            return Err(XorbError::Footer {
                offset,
                problem: FooterProblem::TrailingBytes {
                    count: c.remaining(),
                },
            });
        }
        Ok(footer)
    }

    /// The footer-only parse of a stored xorb, for a server that needs only the footer: reads
    /// `info_length` from the last 4 bytes, parses the footer before it (V1 or V0), checks that
    /// `info_length` equals the footer's length, and checks the footer's structure against the
    /// chunk region in front of it ([`Self::check_structure`]). Does not decompress or hash
    /// anything. Returns the footer and the offset where it starts (= the chunk region length).
    pub fn from_stored(object: &[u8]) -> Result<(Self, u64), XorbError> {
        Self::from_tail(object, object.len() as u64)
    }

    /// [`Self::from_stored`] given only the last `tail.len()` bytes of an object of `object_len`
    /// bytes, so that a store can read a footer without reading the chunks: read the last 4
    /// bytes, then [`Self::tail_len`] bytes, then call this. Fails with a truncation error when
    /// the tail does not reach back to the start of the footer.
    pub fn from_tail(tail: &[u8], object_len: u64) -> Result<(Self, u64), XorbError> {
        // A tail longer than the object is a caller's mistake; report it as a length mismatch.
        let tail_start = object_len.checked_sub(tail.len() as u64).ok_or(Truncated {
            what: "object (the tail given is longer than the object)",
            offset: 0,
            needed: tail.len() as u64,
            available: object_len,
        })?;
        let mut last = Cursor::with_base(tail, tail_start);
        last.skip((tail.len() as u64).saturating_sub(4), "footer")?;
        let info_length = last.u32("info_length")?;
        let footer_start =
            object_len
                .checked_sub(4 + u64::from(info_length))
                .ok_or(XorbError::Footer {
                    offset: 0,
                    problem: FooterProblem::InfoLengthTooLarge {
                        info_length,
                        object_len,
                    },
                })?;
        let mut c = Cursor::with_base(tail, tail_start);
        // A footer starting before the tail cannot be read from it.
        let skip = footer_start.checked_sub(tail_start).ok_or(Truncated {
            what: "footer (the tail given is shorter than info_length)",
            offset: footer_start,
            needed: 4 + u64::from(info_length),
            available: tail.len() as u64,
        })?;
        c.skip(skip, "chunk region")?;
        let footer_bytes = c.take(u64::from(info_length), "footer")?;
        let mut fc = Cursor::with_base(footer_bytes, footer_start);
        let footer = Self::read(&mut fc)?;
        let read = fc.offset() - footer_start;
        if read != u64::from(info_length) {
            return Err(XorbError::Footer {
                offset: footer_start,
                problem: FooterProblem::InfoLength {
                    stored: info_length,
                    actual: read,
                },
            });
        }
        footer.check_structure(footer_start, footer_start)?;
        Ok((footer, footer_start))
    }

    /// How many bytes from the end of a stored object [`Self::from_tail`] needs, given the
    /// object's last 4 bytes (`info_length`).
    pub fn tail_len(last_four: [u8; 4]) -> u64 {
        u64::from(u32::from_le_bytes(last_four)) + 4
    }

    /// Uncompressed length of chunks `[start, end)`, from the unpacked offsets (V1 footers);
    /// `None` for a V0 footer or a range outside the xorb.
    pub fn unpacked_len(&self, chunks: Range<usize>) -> Option<u64> {
        let offsets = self.unpacked_chunk_offsets.as_ref()?;
        if chunks.start > chunks.end || chunks.end > offsets.len() {
            return None;
        }
        let end = if chunks.end == 0 {
            0
        } else {
            offsets[chunks.end - 1]
        };
        let start = if chunks.start == 0 {
            0
        } else {
            offsets[chunks.start - 1]
        };
        Some(u64::from(end.checked_sub(start)?))
    }

    /// Every chunk's hash and uncompressed length, in order (what the xorb hash is over).
    pub fn chunk_refs(&self) -> Vec<crate::ChunkRef> {
        (0..self.num_chunks())
            .map(|i| {
                crate::ChunkRef::new(
                    self.chunk_hashes[i],
                    u64::from(self.chunk_len(i).unwrap_or(0)),
                )
            })
            .collect()
    }

    /// Uncompressed length of chunk `i` (V1 footers).
    pub fn chunk_len(&self, i: usize) -> Option<u32> {
        self.unpacked_len(i..i + 1).map(|n| n as u32)
    }

    /// Checks what any valid xorb satisfies, without its chunks: every chunk's boundary offset
    /// follows the previous one by 8 to 8 + 262144 bytes, every unpacked offset follows the
    /// previous by at most 131072 bytes, and the last boundary is `region_len` (the chunk region
    /// ends where the footer starts). Stricter than xet-core's footer parse, but it rejects only
    /// objects its full validation rejects too; it makes [`Self::url_range`] trustworthy.
    pub fn check_structure(&self, region_len: u64, footer_offset: u64) -> Result<(), XorbError> {
        let fail = |problem| XorbError::Footer {
            offset: footer_offset,
            problem,
        };
        let mut previous = 0u32;
        for (index, &offset) in self.chunk_boundary_offsets.iter().enumerate() {
            let step = u64::from(offset).wrapping_sub(u64::from(previous));
            let ok = offset >= previous
                && step >= CHUNK_HEADER_LEN as u64
                && step <= CHUNK_HEADER_LEN as u64 + u64::from(MAX_COMPRESSED_LEN);
            if !ok {
                return Err(fail(FooterProblem::BadBoundary {
                    index,
                    offset,
                    previous,
                }));
            }
            previous = offset;
        }
        if u64::from(previous) != region_len {
            return Err(fail(FooterProblem::RegionEnd {
                last: u64::from(previous),
                footer_start: region_len,
            }));
        }
        let mut previous = 0u32;
        for (index, &offset) in self.unpacked_chunk_offsets.iter().flatten().enumerate() {
            if offset < previous || offset - previous > MAX_CHUNK_LEN {
                return Err(fail(FooterProblem::BadUnpacked {
                    index,
                    offset,
                    previous,
                }));
            }
            previous = offset;
        }
        Ok(())
    }

    /// The inclusive byte range to download chunks `[start, end)` (§3.10): from the start of
    /// chunk `start` (0, or the boundary of chunk `start - 1`) to the last byte of chunk
    /// `end - 1`, headers included.
    pub fn url_range(&self, chunks: Range<usize>) -> Result<RangeInclusive<u64>, XorbError> {
        url_range(&self.chunk_boundary_offsets, chunks)
    }
}

/// The `url_range` rule over boundary offsets (chunk end offsets, header included).
pub(crate) fn url_range<B: Copy + Into<u64>>(
    boundaries: &[B],
    chunks: Range<usize>,
) -> Result<RangeInclusive<u64>, XorbError> {
    let bad = || XorbError::BadChunkRange {
        range: chunks.clone(),
        num_chunks: boundaries.len(),
    };
    if chunks.start >= chunks.end || chunks.end > boundaries.len() {
        return Err(bad());
    }
    let first = match chunks.start {
        0 => 0,
        s => boundaries.get(s - 1).copied().ok_or_else(bad)?.into(),
    };
    let end: u64 = boundaries
        .get(chunks.end - 1)
        .copied()
        .ok_or_else(bad)?
        .into();
    if end <= first {
        return Err(bad());
    }
    Ok(first..=end - 1)
}

/// A footer problem, reported at `start`, the offset where the footer starts.
fn footer_error(start: u64, problem: FooterProblem) -> XorbError {
    XorbError::Footer {
        offset: start,
        problem,
    }
}

/// The V1 hashes section at the cursor: ident, version 0, `num_chunks` and the chunk hashes;
/// returns `num_chunks` and the hashes. Checks that the rest of the footer can hold
/// `num_chunks` chunks before allocating anything sized by it. `start` is where the footer
/// starts, for errors.
fn read_hashes_section(c: &mut Cursor<'_>, start: u64) -> Result<(u32, Vec<ChunkHash>), XorbError> {
    let ident = c.array::<7>("hashes section ident")?;
    if ident != HASHES_IDENT {
        return Err(footer_error(
            start,
            FooterProblem::Ident {
                section: "hashes section",
                found: ident,
                expected: "XBLBHSH",
            },
        ));
    }
    let found = c.u8("hashes_version")?;
    if found != 0 {
        return Err(footer_error(
            start,
            FooterProblem::Version {
                section: "hashes section",
                found,
                expected: "0",
            },
        ));
    }
    let n = c.u32("num_chunks")?;
    // Everything after this point is 40 bytes per chunk plus 40 fixed bytes: check it is
    // there before allocating anything sized by n.
    let needed = V1_PER_CHUNK * u64::from(n) + 40;
    if needed > c.remaining() as u64 {
        return Err(footer_error(
            start,
            FooterProblem::TooManyChunks {
                num_chunks: n,
                needed,
                available: c.remaining() as u64,
            },
        ));
    }
    let mut chunk_hashes = Vec::with_capacity(n as usize);
    for _ in 0..n {
        chunk_hashes.push(ChunkHash::from_bytes(c.hash("chunk hash")?));
    }
    Ok((n, chunk_hashes))
}

/// The V1 boundaries section at the cursor: ident, version 1, `num_chunks` (which must equal
/// `n`, the hashes section's), then the boundary offsets and the unpacked offsets, returned in
/// that order. `start` is where the footer starts, for errors.
fn read_boundaries_section(
    c: &mut Cursor<'_>,
    start: u64,
    n: u32,
) -> Result<(Vec<u32>, Vec<u32>), XorbError> {
    let ident = c.array::<7>("boundaries section ident")?;
    if ident != BOUNDARIES_IDENT {
        return Err(footer_error(
            start,
            FooterProblem::Ident {
                section: "boundaries section",
                found: ident,
                expected: "XBLBBND",
            },
        ));
    }
    let found = c.u8("boundaries_version")?;
    if found != 1 {
        return Err(footer_error(
            start,
            FooterProblem::Version {
                section: "boundaries section",
                found,
                expected: "1",
            },
        ));
    }
    let n2 = c.u32("num_chunks (boundaries section)")?;
    if n2 != n {
        return Err(footer_error(
            start,
            FooterProblem::NumChunksDiffer {
                first: n,
                where_first: "hashes section",
                other: n2,
                where_other: "boundaries section",
            },
        ));
    }
    let chunk_boundary_offsets = read_u32s(c, n, "chunk boundary offset")?;
    let unpacked = read_u32s(c, n, "unpacked chunk offset")?;
    Ok((chunk_boundary_offsets, unpacked))
}

fn read_u32s(c: &mut Cursor<'_>, n: u32, what: &'static str) -> Result<Vec<u32>, XorbError> {
    let mut out = Vec::with_capacity((n as usize).min(c.remaining() / 4));
    for _ in 0..n {
        out.push(c.u32(what)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_tail_reads_a_footer_from_the_end_of_an_object() {
        use crate::xorb::{CompressionPolicy, XorbBuilder};
        let mut b = XorbBuilder::new(CompressionPolicy::Auto);
        for i in 0..5u8 {
            let pushed = b.add_chunk(&vec![i; 1000 + usize::from(i)]).unwrap();
            assert!(matches!(pushed, crate::xorb::Push::Added(_)));
        }
        let stored = b.finish().unwrap().stored_form();
        let (whole, start) = XorbFooter::from_stored(&stored).unwrap();
        let last: [u8; 4] = stored[stored.len() - 4..].try_into().unwrap();
        let need = XorbFooter::tail_len(last) as usize;
        let len = stored.len() as u64;
        let (tail_only, tail_start) =
            XorbFooter::from_tail(&stored[stored.len() - need..], len).unwrap();
        assert_eq!((tail_only, tail_start), (whole.clone(), start));
        // One byte short of the footer: a clear truncation error, not a panic.
        assert!(XorbFooter::from_tail(&stored[stored.len() - need + 1..], len).is_err());
        assert!(XorbFooter::from_tail(&stored, len - 1).is_err());
        assert_eq!(whole.unpacked_len(0..5), Some(5010));
        assert_eq!(whole.unpacked_len(1..3), Some(1001 + 1002));
        assert_eq!(whole.chunk_len(4), Some(1004));
        assert_eq!(whole.unpacked_len(3..6), None);
    }

    fn two_chunk_footer() -> XorbFooter {
        XorbFooter {
            hash: XorbHash::from_bytes([7; 32]),
            chunk_hashes: vec![
                ChunkHash::from_bytes([1; 32]),
                ChunkHash::from_bytes([2; 32]),
            ],
            chunk_boundary_offsets: vec![20, 58],
            unpacked_chunk_offsets: Some(vec![12, 1012]),
            buffer: [0; 16],
        }
    }

    #[test]
    fn v1_round_trip_and_layout() {
        let f = two_chunk_footer();
        let bytes = f.encode_v1().unwrap();
        assert_eq!(bytes.len(), 172 + 4);
        assert_eq!(&bytes[..8], b"XETBLOB\x01");
        assert_eq!(&bytes[148..152], &132u32.to_le_bytes());
        assert_eq!(&bytes[152..156], &56u32.to_le_bytes());
        assert_eq!(&bytes[172..], &172u32.to_le_bytes());
        assert_eq!(XorbFooter::parse(&bytes[..172], 0).unwrap(), f);
        assert_eq!(f.encoded_len(), 172);
    }

    #[test]
    fn zero_chunk_footer_is_92_bytes() {
        let f = XorbFooter {
            hash: XorbHash::ZERO,
            chunk_hashes: vec![],
            chunk_boundary_offsets: vec![],
            unpacked_chunk_offsets: Some(vec![]),
            buffer: [0; 16],
        };
        let bytes = f.encode_v1().unwrap();
        assert_eq!(bytes.len(), 96);
        assert_eq!(XorbFooter::parse(&bytes[..92], 0).unwrap(), f);
    }

    #[test]
    fn buffer_bytes_are_ignored_but_kept() {
        let mut f = two_chunk_footer();
        f.set_nonce([0xde, 0xad, 0xbe, 0xef]);
        f.buffer[15] = 0x55;
        let bytes = f.encode_v1().unwrap();
        let back = XorbFooter::parse(&bytes[..172], 0).unwrap();
        assert_eq!(back.nonce(), [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(back, f);
    }

    #[test]
    fn reader_checks_name_the_field() {
        let good = two_chunk_footer().encode_v1().unwrap();
        let footer = &good[..172];
        let mut bad = footer.to_vec();
        bad[7] = 2;
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::Version { found: 2, .. },
                ..
            })
        ));
        let mut bad = footer.to_vec();
        bad[40] = b'Y';
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::Ident {
                    section: "hashes section",
                    ..
                },
                ..
            })
        ));
        let mut bad = footer.to_vec();
        bad[124] = 3; // num_chunks in the boundaries section
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::NumChunksDiffer { other: 3, .. },
                ..
            })
        ));
        let mut bad = footer.to_vec();
        bad[144] = 1; // third num_chunks copy
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::NumChunksDiffer { other: 1, .. },
                ..
            })
        ));
        let mut bad = footer.to_vec();
        bad[148] = 133;
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::SectionOffset {
                    stored: 133,
                    actual: 132,
                    ..
                },
                ..
            })
        ));
        let mut bad = footer.to_vec();
        bad[152] = 57;
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::SectionOffset {
                    stored: 57,
                    actual: 56,
                    ..
                },
                ..
            })
        ));
        // A huge num_chunks is refused before anything is allocated.
        let mut bad = footer.to_vec();
        bad[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            XorbFooter::parse(&bad, 0),
            Err(XorbError::Footer {
                problem: FooterProblem::TooManyChunks { .. },
                ..
            })
        ));
        assert!(matches!(
            XorbFooter::parse(&[footer, b"x"].concat(), 0),
            Err(XorbError::Footer {
                problem: FooterProblem::TrailingBytes { count: 1 },
                ..
            })
        ));
    }

    #[test]
    fn v0_is_read() {
        let mut v0 = b"XETBLOB\x00".to_vec();
        v0.extend_from_slice(&[7; 32]);
        v0.extend_from_slice(&2u32.to_le_bytes());
        v0.extend_from_slice(&20u32.to_le_bytes());
        v0.extend_from_slice(&58u32.to_le_bytes());
        v0.extend_from_slice(&[1; 32]);
        v0.extend_from_slice(&[2; 32]);
        v0.extend_from_slice(&[9; 16]);
        assert_eq!(v0.len() as u64, v0_len(2));
        let f = XorbFooter::parse(&v0, 0).unwrap();
        assert_eq!(f.version(), FooterVersion::V0);
        assert_eq!(f.chunk_boundary_offsets, [20, 58]);
        assert_eq!(f.chunk_hashes[1], ChunkHash::from_bytes([2; 32]));
        assert_eq!(f.encoded_len(), 132);
        assert!(matches!(f.encode_v1(), Err(XorbError::Unwritable(_))));
    }

    #[test]
    fn url_range_rule() {
        let f = two_chunk_footer();
        assert_eq!(f.url_range(0..2).unwrap(), 0..=57);
        assert_eq!(f.url_range(0..1).unwrap(), 0..=19);
        assert_eq!(f.url_range(1..2).unwrap(), 20..=57);
        #[allow(clippy::reversed_empty_ranges)]
        for bad in [0..0, 1..1, 2..1, 0..3, 2..3] {
            assert!(f.url_range(bad).is_err());
        }
    }

    #[test]
    fn structure_checks() {
        let f = two_chunk_footer();
        assert!(f.check_structure(58, 58).is_ok());
        assert!(f.check_structure(59, 59).is_err());
        let mut g = f.clone();
        g.chunk_boundary_offsets = vec![20, 21];
        assert!(g.check_structure(21, 21).is_err());
        let mut g = f;
        g.unpacked_chunk_offsets = Some(vec![12, 11]);
        assert!(g.check_structure(58, 58).is_err());
    }
}
