//! The validating xorb reader (docs/format.md §3.2, §3.7–§3.10), and the server's rebuild of the
//! stored form from an upload body.
//!
//! [`ParsedXorb::parse`] accepts the three shapes a xorb arrives in:
//!
//! | Form | Bytes |
//! |---|---|
//! | [`XorbForm::Upload`] | chunk region only (what clients send, §3.9) |
//! | [`XorbForm::Stored`] | chunk region, footer (V1, or legacy V0), `u32 info_length` |
//! | [`XorbForm::UploadWithFooter`] | chunk region, footer, no `info_length` (older writers) |
//!
//! It walks the chunk region from offset 0 the way xet-core's footer rebuilder does: each header
//! says how long its chunk is, and a header position starting with `XETBLOB` ends the region (no
//! valid header can start so). Whatever follows must be exactly one footer, optionally followed by
//! an `info_length` equal to the footer's length; so a stored object's trailing `info_length` and
//! ident are both checked. Every chunk header passes the checks of §3.2, every payload is
//! decompressed (never past its declared length) and hashed, and the xorb hash is recomputed. A
//! footer, if present, must agree with the chunks: count, hashes, boundary offsets, unpacked
//! offsets (V1) and xorb hash.
//!
//! Decompressed data is hashed and dropped, not kept: [`ParsedXorb::extract`] decompresses again
//! on demand. Limits ([`XorbLimits::SERVER`] by default) are enforced while walking, before any
//! chunk beyond them is decompressed.

use std::ops::{Range, RangeInclusive};

use super::compress::decompress_chunk_into;
use super::error::{ChunkProblem, FooterProblem, XorbError};
use super::footer::{url_range, XorbFooter, BUFFER_LEN, NONCE_LEN};
use super::header::{starts_footer, ChunkHeader, CHUNK_HEADER_LEN, MAX_CHUNK_LEN};
use super::{XorbChunk, XorbLimits};
use crate::cursor::Cursor;
use crate::hash::{xorb_hash, ChunkHash, ChunkRef, XorbHash};

/// The shape a xorb arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XorbForm {
    /// Chunk region only.
    Upload,
    /// Chunk region and a footer without the trailing `info_length`.
    UploadWithFooter,
    /// Chunk region, footer and `info_length`.
    Stored,
}

/// What [`ParsedXorb::parse_with`] checks beyond the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// The hash the xorb must have (e.g. the one in the upload URL).
    pub expected_hash: Option<XorbHash>,
    /// Chunk count, uncompressed bytes and chunk-region bytes allowed.
    pub limits: XorbLimits,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            expected_hash: None,
            limits: XorbLimits::SERVER,
        }
    }
}

/// A xorb whose every chunk and footer field has been checked. Borrows the input bytes, so
/// [`Self::extract`] can decompress chunks again.
#[derive(Debug, Clone)]
pub struct ParsedXorb<'a> {
    bytes: &'a [u8],
    region_len: u64,
    form: XorbForm,
    hash: XorbHash,
    chunks: Vec<XorbChunk>,
    uncompressed: u64,
    footer: Option<XorbFooter>,
}

impl<'a> ParsedXorb<'a> {
    /// Parses and validates `bytes` (any [`XorbForm`]) with the server limits.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, XorbError> {
        Self::parse_with(bytes, &ReadOptions::default())
    }

    /// Parses and validates `bytes` (any [`XorbForm`]).
    pub fn parse_with(bytes: &'a [u8], options: &ReadOptions) -> Result<Self, XorbError> {
        let mut c = Cursor::new(bytes);
        let (chunks, uncompressed) = read_chunks(&mut c, &options.limits)?;
        let region_len = c.offset();
        check_u32_sizes(region_len, uncompressed)?;
        let refs: Vec<ChunkRef> = chunks.iter().map(XorbChunk::chunk_ref).collect();
        let hash = xorb_hash(&refs);
        let (form, footer) = read_after_region(&mut c, &chunks, hash, region_len)?;
        if let Some(expected) = options.expected_hash {
            if expected != hash {
                return Err(XorbError::HashMismatch {
                    expected,
                    computed: hash,
                });
            }
        }
        Ok(Self {
            bytes,
            region_len,
            form,
            hash,
            chunks,
            uncompressed,
            footer,
        })
    }

    /// The recomputed xorb hash.
    pub fn hash(&self) -> XorbHash {
        self.hash
    }

    pub fn form(&self) -> XorbForm {
        self.form
    }

    /// Every chunk: hash, scheme, byte range in the chunk region, uncompressed length and offset.
    pub fn chunks(&self) -> &[XorbChunk] {
        &self.chunks
    }

    pub fn num_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Bytes of uncompressed data in the whole xorb.
    pub fn uncompressed_len(&self) -> u64 {
        self.uncompressed
    }

    /// The chunk region (= the upload body without any footer).
    pub fn chunk_region(&self) -> &'a [u8] {
        let mut c = Cursor::new(self.bytes);
        // region_len was measured on these bytes.
        c.take(self.region_len, "chunk region").unwrap_or_default()
    }

    /// The footer found in the input (checked against the chunks), if there was one.
    pub fn footer(&self) -> Option<&XorbFooter> {
        self.footer.as_ref()
    }

    /// The V1 footer that describes these chunks, with `nonce` in the buffer: what a server
    /// stores. Equal to [`Self::footer`] for a stored V1 xorb with that nonce.
    pub fn rebuilt_footer(&self, nonce: [u8; NONCE_LEN]) -> XorbFooter {
        let mut footer = XorbFooter {
            hash: self.hash,
            chunk_hashes: self.chunks.iter().map(|c| c.hash).collect(),
            // Both offsets fit in u32: the parse refused anything larger.
            chunk_boundary_offsets: self.chunks.iter().map(|c| c.end as u32).collect(),
            unpacked_chunk_offsets: Some(
                self.chunks
                    .iter()
                    .map(|c| c.unpacked_end() as u32)
                    .collect(),
            ),
            buffer: [0; BUFFER_LEN],
        };
        footer.set_nonce(nonce);
        footer
    }

    /// The stored form: the chunk region followed by a freshly built V1 footer carrying `nonce`,
    /// and `info_length`. A footer that came with the input is replaced.
    pub fn to_stored(&self, nonce: [u8; NONCE_LEN]) -> Result<Vec<u8>, XorbError> {
        let region = self.chunk_region();
        let footer = self.rebuilt_footer(nonce);
        let mut out = Vec::with_capacity(region.len() + footer.encoded_len() as usize + 4);
        out.extend_from_slice(region);
        footer.write_v1(&mut out)?;
        Ok(out)
    }

    /// The uncompressed bytes of chunks `[start, end)`, in order. An empty range gives nothing.
    pub fn extract(&self, chunks: Range<usize>) -> Result<Vec<u8>, XorbError> {
        let selected = self
            .chunks
            .get(chunks.clone())
            .ok_or(XorbError::BadChunkRange {
                range: chunks.clone(),
                num_chunks: self.chunks.len(),
            })?;
        let total: u64 = selected.iter().map(|c| u64::from(c.uncompressed_len)).sum();
        let mut out = Vec::with_capacity(total as usize);
        for (k, chunk) in selected.iter().enumerate() {
            let fail = |problem| XorbError::Chunk {
                index: chunks.start + k,
                offset: chunk.start,
                problem,
            };
            let mut c = Cursor::new(self.bytes);
            c.skip(chunk.start, "chunk region")?;
            let raw = c
                .array::<CHUNK_HEADER_LEN>("chunk header")
                .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
            let header = ChunkHeader::decode(&raw).map_err(|e| fail(e.into()))?;
            let payload = c
                .take(u64::from(header.compressed_len()), "chunk payload")
                .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
            decompress_chunk_into(&header, payload, &mut out).map_err(|e| fail(e.into()))?;
        }
        Ok(out)
    }

    /// The inclusive byte range to download chunks `[start, end)` (§3.10).
    pub fn url_range(&self, chunks: Range<usize>) -> Result<RangeInclusive<u64>, XorbError> {
        let ends: Vec<u64> = self.chunks.iter().map(|c| c.end).collect();
        url_range(&ends, chunks)
    }
}

/// Reads the header of chunk `index` at the cursor, checking it (§3.2) and the limits: the
/// chunk count, the uncompressed total (`uncompressed` before this chunk; the new total is
/// returned) and the chunk region's length. Leaves the cursor at the payload.
pub(super) fn next_header(
    c: &mut Cursor<'_>,
    index: usize,
    uncompressed: u64,
    limits: &XorbLimits,
) -> Result<(ChunkHeader, u64), XorbError> {
    let start = c.offset();
    let fail = |problem| XorbError::Chunk {
        index,
        offset: start,
        problem,
    };
    if index >= limits.max_chunks {
        return Err(fail(ChunkProblem::TooManyChunks {
            limit: limits.max_chunks,
        }));
    }
    let raw = c
        .array::<CHUNK_HEADER_LEN>("chunk header")
        .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
    let header = ChunkHeader::decode(&raw).map_err(|e| fail(e.into()))?;
    let total = uncompressed + u64::from(header.uncompressed_len());
    if total > limits.max_uncompressed_bytes {
        return Err(fail(ChunkProblem::TooMuchData {
            total,
            limit: limits.max_uncompressed_bytes,
        }));
    }
    let end = start + header.chunk_len();
    if end > limits.max_body_bytes {
        return Err(fail(ChunkProblem::BodyTooLong {
            total: end,
            limit: limits.max_body_bytes,
        }));
    }
    Ok((header, total))
}

/// Walks the chunk region from the cursor up to the end of the input or a footer ident,
/// checking every chunk against `limits` before decompressing it. Returns the chunks and their
/// total uncompressed length; fails if there is no chunk.
fn read_chunks(
    c: &mut Cursor<'_>,
    limits: &XorbLimits,
) -> Result<(Vec<XorbChunk>, u64), XorbError> {
    let mut chunks: Vec<XorbChunk> = Vec::new();
    let mut uncompressed: u64 = 0;
    let mut scratch = Vec::with_capacity(MAX_CHUNK_LEN as usize);
    while !c.is_empty() && !starts_footer(c.rest()) {
        let (chunk, total) = read_chunk(c, chunks.len(), uncompressed, limits, &mut scratch)?;
        chunks.push(chunk);
        uncompressed = total;
    }
    if chunks.is_empty() {
        return Err(XorbError::Empty);
    }
    Ok((chunks, uncompressed))
}

/// Reads chunk `index` at the cursor: its header (checked, with the limits, by [`next_header`]),
/// then its payload, decompressed into `scratch` and hashed. `uncompressed` is the data before
/// this chunk; returns the chunk and the total including it.
fn read_chunk(
    c: &mut Cursor<'_>,
    index: usize,
    uncompressed: u64,
    limits: &XorbLimits,
    scratch: &mut Vec<u8>,
) -> Result<(XorbChunk, u64), XorbError> {
    let start = c.offset();
    let fail = |problem| XorbError::Chunk {
        index,
        offset: start,
        problem,
    };
    let (header, total) = next_header(c, index, uncompressed, limits)?;
    let end = start + header.chunk_len();
    let payload = c
        .take(u64::from(header.compressed_len()), "chunk payload")
        .map_err(|t| fail(ChunkProblem::Truncated(t)))?;
    scratch.clear();
    decompress_chunk_into(&header, payload, scratch).map_err(|e| fail(e.into()))?;
    let chunk = XorbChunk {
        hash: ChunkHash::of(scratch),
        scheme: header.scheme(),
        start,
        end,
        uncompressed_len: header.uncompressed_len(),
        unpacked_start: uncompressed,
    };
    Ok((chunk, total))
}

/// Footer offsets are u32: refuses a chunk region (`region_len` bytes) or uncompressed data
/// (`uncompressed` bytes) that they cannot describe.
fn check_u32_sizes(region_len: u64, uncompressed: u64) -> Result<(), XorbError> {
    for (what, value) in [
        (
            "the chunk region is too long for u32 footer offsets",
            region_len,
        ),
        (
            "the uncompressed data is too long for u32 footer offsets",
            uncompressed,
        ),
    ] {
        if u32::try_from(value).is_err() {
            return Err(XorbError::Unwritable(what));
        }
    }
    Ok(())
}

/// Reads what follows the chunk region (which ends at `region_len`, where the cursor is) and
/// tells the form: nothing, or exactly one footer, optionally followed by an `info_length` equal
/// to the footer's length. A footer must agree with `chunks` and their xorb `hash`.
fn read_after_region(
    c: &mut Cursor<'_>,
    chunks: &[XorbChunk],
    hash: XorbHash,
    region_len: u64,
) -> Result<(XorbForm, Option<XorbFooter>), XorbError> {
    if c.is_empty() {
        return Ok((XorbForm::Upload, None));
    }
    let footer = XorbFooter::read(c)?;
    let footer_len = c.offset() - region_len;
    let form = match c.remaining() {
        0 => XorbForm::UploadWithFooter,
        4 => {
            let stored = c.u32("info_length")?;
            if u64::from(stored) != footer_len {
                return Err(XorbError::Footer {
                    offset: region_len,
                    problem: FooterProblem::InfoLength {
                        stored,
                        actual: footer_len,
                    },
                });
            }
            XorbForm::Stored
        }
        count => {
            return Err(XorbError::Footer {
                offset: region_len,
                problem: FooterProblem::TrailingBytes { count },
            })
        }
    };
    check_footer(&footer, chunks, hash, region_len)?;
    Ok((form, Some(footer)))
}

/// Checks a footer against the chunks actually found.
fn check_footer(
    footer: &XorbFooter,
    chunks: &[XorbChunk],
    hash: XorbHash,
    footer_offset: u64,
) -> Result<(), XorbError> {
    if footer.num_chunks() != chunks.len() || footer.chunk_boundary_offsets.len() != chunks.len() {
        return Err(XorbError::Footer {
            offset: footer_offset,
            problem: FooterProblem::ChunkCount {
                footer: footer.num_chunks(),
                actual: chunks.len(),
            },
        });
    }
    let unpacked = footer.unpacked_chunk_offsets.as_deref();
    for (index, chunk) in chunks.iter().enumerate() {
        let fail = |problem| XorbError::Chunk {
            index,
            offset: chunk.start,
            problem,
        };
        if let Some(&listed) = footer.chunk_hashes.get(index) {
            if listed != chunk.hash {
                return Err(fail(ChunkProblem::HashMismatch {
                    computed: chunk.hash,
                    footer: listed,
                }));
            }
        }
        if let Some(&boundary) = footer.chunk_boundary_offsets.get(index) {
            if u64::from(boundary) != chunk.end {
                return Err(fail(ChunkProblem::BoundaryMismatch {
                    actual: chunk.end,
                    footer: boundary,
                }));
            }
        }
        if let Some(&offset) = unpacked.and_then(|u| u.get(index)) {
            if u64::from(offset) != chunk.unpacked_end() {
                return Err(fail(ChunkProblem::UnpackedMismatch {
                    actual: chunk.unpacked_end(),
                    footer: offset,
                }));
            }
        }
    }
    if footer.hash != hash {
        return Err(XorbError::Footer {
            offset: footer_offset,
            problem: FooterProblem::XorbHash {
                footer: footer.hash,
                computed: hash,
            },
        });
    }
    Ok(())
}

/// What a server does with an upload body (with or without a footer): validates it, checks the
/// expected hash if given, and returns the xorb hash and the stored form with a rebuilt V1 footer
/// carrying `nonce`.
pub fn stored_from_upload(
    body: &[u8],
    nonce: [u8; NONCE_LEN],
    options: &ReadOptions,
) -> Result<(XorbHash, Vec<u8>), XorbError> {
    let parsed = ParsedXorb::parse_with(body, options)?;
    Ok((parsed.hash(), parsed.to_stored(nonce)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorb::{CompressionPolicy, XorbBuilder};

    fn sample() -> crate::xorb::BuiltXorb {
        let mut b = XorbBuilder::new(CompressionPolicy::Auto);
        let _ = b.add_chunk(b"Hello World!").unwrap();
        let _ = b.add_chunk(&[0u8; 1000]).unwrap();
        let _ = b.add_chunk(b"").unwrap();
        b.finish().unwrap()
    }

    #[test]
    fn reads_every_form() {
        let x = sample();
        let stored = x.stored_form();
        let body = x.upload_body();
        let with_footer = &stored[..stored.len() - 4];
        for (bytes, form) in [
            (body, XorbForm::Upload),
            (&stored[..], XorbForm::Stored),
            (with_footer, XorbForm::UploadWithFooter),
        ] {
            let p = ParsedXorb::parse(bytes).unwrap();
            assert_eq!(p.form(), form);
            assert_eq!(p.hash(), x.hash());
            assert_eq!(p.chunks(), x.chunks());
            assert_eq!(p.chunk_region(), body);
            assert_eq!(p.to_stored([0; 4]).unwrap(), stored);
            assert_eq!(p.extract(0..3).unwrap().len(), 1012);
            assert_eq!(p.extract(1..1).unwrap(), b"");
            assert!(p.extract(2..4).is_err());
        }
        let p = ParsedXorb::parse(&stored).unwrap();
        assert_eq!(p.footer(), Some(x.footer()));
        assert_eq!(&p.rebuilt_footer([0; 4]), x.footer());
    }

    #[test]
    fn limits_are_enforced_while_walking() {
        let body = sample().into_upload_body();
        let opts = |max_chunks, max_uncompressed_bytes, max_body_bytes| ReadOptions {
            expected_hash: None,
            limits: XorbLimits {
                max_chunks,
                max_uncompressed_bytes,
                max_body_bytes,
            },
        };
        let err = ParsedXorb::parse_with(&body, &opts(2, 1 << 20, 1 << 20)).unwrap_err();
        assert!(matches!(
            err,
            XorbError::Chunk {
                index: 2,
                problem: ChunkProblem::TooManyChunks { limit: 2 },
                ..
            }
        ));
        let err = ParsedXorb::parse_with(&body, &opts(9, 1000, 1 << 20)).unwrap_err();
        assert!(matches!(
            err,
            XorbError::Chunk {
                index: 1,
                offset: 20,
                ..
            }
        ));
        let err = ParsedXorb::parse_with(&body, &opts(9, 1 << 20, 57)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "chunk 1 at offset 20: chunk region would reach 58 bytes, over the limit of 57"
        );
    }

    #[test]
    fn expected_hash_and_trailing_bytes() {
        let x = sample();
        let opts = ReadOptions {
            expected_hash: Some(XorbHash::ZERO),
            ..ReadOptions::default()
        };
        assert!(matches!(
            ParsedXorb::parse_with(x.upload_body(), &opts),
            Err(XorbError::HashMismatch { .. })
        ));
        let mut stored = x.stored_form();
        stored.push(0);
        assert!(matches!(
            ParsedXorb::parse(&stored),
            Err(XorbError::Footer {
                problem: FooterProblem::TrailingBytes { count: 5 },
                ..
            })
        ));
        assert_eq!(ParsedXorb::parse(b"").unwrap_err(), XorbError::Empty);
    }
}
