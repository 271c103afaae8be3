//! The xorb builder: packs chunks into one xorb within the limits of docs/format.md §3.6 and
//! yields its hash, its upload form (chunk region only, §3.9) and its stored form (chunk region,
//! V1 footer, `info_length`, §3.7).
//!
//! Limits (default [`XorbLimits::CLIENT`]): at most 8192 chunks, at most 64 MiB of uncompressed
//! data (the reference client's rule), and, our project rule, an upload body of at most 64 MiB.
//! A chunk that would break a limit is refused with [`Push::Full`] and changes nothing: the caller
//! finishes this xorb and offers the chunk to a new one.
//!
//! The builder compresses each chunk as it arrives, with the scheme its [`CompressionPolicy`]
//! picks. Under Auto that depends on where file segments start ([`XorbBuilder::start_file`]) and
//! on the first chunk of each block of 32 (§3.5), which is how the reference client's xorbs come
//! out byte for byte. A pipeline that compresses in parallel can instead compress with
//! [`compress_chunk`](super::compress_chunk) / [`CompressedChunk::new`] on the schemes of
//! [`plan_schemes`](super::plan_schemes) and hand the results to
//! [`XorbBuilder::add_compressed`].

use std::ops::{Range, RangeInclusive};

use super::compress::{CompressedChunk, CompressionPolicy, SchemeSelector, AUTO_RETEST_INTERVAL};
use super::footer::{url_range, XorbFooter, BUFFER_LEN, NONCE_LEN};
use super::header::{CompressionScheme, CHUNK_HEADER_LEN, MAX_CHUNK_LEN};
use super::{XorbChunk, XorbError, XorbLimits};
use crate::hash::{xorb_hash, ChunkRef, XorbHash};

/// What happened to a chunk offered to the builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Push {
    /// The chunk is in the xorb at this index.
    Added(usize),
    /// The chunk would break a limit; the builder is unchanged.
    Full,
}

/// Packs chunks into one xorb. See the module documentation.
#[derive(Debug, Clone)]
pub struct XorbBuilder {
    limits: XorbLimits,
    selector: SchemeSelector,
    body: Vec<u8>,
    chunks: Vec<XorbChunk>,
    uncompressed: u64,
    segment_starts: Vec<usize>,
    new_segment: bool,
}

impl XorbBuilder {
    /// A builder with the client limits.
    pub fn new(policy: CompressionPolicy) -> Self {
        Self::with_limits(policy, XorbLimits::CLIENT)
    }

    /// A builder with other limits (for tests, or a server re-packing data). Limits too small for
    /// one maximal chunk are raised to fit one, and byte limits are capped at `u32::MAX` because
    /// footer offsets are `u32`.
    pub fn with_limits(policy: CompressionPolicy, limits: XorbLimits) -> Self {
        let max_chunk = u64::from(MAX_CHUNK_LEN);
        let limits = XorbLimits {
            max_chunks: limits.max_chunks.clamp(1, u32::MAX as usize),
            max_uncompressed_bytes: limits
                .max_uncompressed_bytes
                .clamp(max_chunk, u64::from(u32::MAX)),
            max_body_bytes: limits
                .max_body_bytes
                .clamp(CHUNK_HEADER_LEN as u64 + max_chunk, u64::from(u32::MAX)),
        };
        Self {
            limits,
            selector: SchemeSelector::with_retest_interval(policy, AUTO_RETEST_INTERVAL),
            body: Vec::new(),
            chunks: Vec::new(),
            uncompressed: 0,
            segment_starts: Vec::new(),
            new_segment: true,
        }
    }

    /// Builds the body in `buffer` (its contents are dropped, its capacity kept): a buffer
    /// reused from an earlier xorb saves the memory's first writes. Call before adding chunks.
    pub fn with_body_buffer(mut self, mut buffer: Vec<u8>) -> Self {
        if self.chunks.is_empty() {
            buffer.clear();
            self.body = buffer;
        }
        self
    }

    /// Sets the Auto block length (default 32; 0 = one block per file segment). Call before
    /// adding chunks.
    pub fn with_retest_interval(mut self, interval: usize) -> Self {
        if self.chunks.is_empty() {
            self.selector = SchemeSelector::with_retest_interval(self.selector.policy(), interval);
        }
        self
    }

    pub fn policy(&self) -> CompressionPolicy {
        self.selector.policy()
    }

    pub fn limits(&self) -> XorbLimits {
        self.limits
    }

    /// The next chunk added starts a new file segment (for Auto scheme selection). The first
    /// chunk of a xorb always does.
    pub fn start_file(&mut self) {
        self.new_segment = true;
        self.selector.start_segment();
    }

    /// The scheme [`Self::add_chunk`] would compress `data` with if it were the next chunk.
    pub fn scheme_for_next(&self, data: &[u8]) -> CompressionScheme {
        self.selector.peek(data)
    }

    /// The schemes [`Self::add_chunk`] would compress `next` with if they were the next chunks
    /// and all fit in this xorb: what chunks can be compressed with ahead of time, in parallel
    /// (a chunk that ends up elsewhere is compressed again if its scheme differs).
    pub fn predict_schemes(&self, next: &[&[u8]]) -> Vec<CompressionScheme> {
        let mut selector = self.selector.clone();
        next.iter()
            .map(|data| {
                let scheme = selector.peek(data);
                selector.advance(scheme);
                scheme
            })
            .collect()
    }

    /// True if a chunk of `uncompressed_len` bytes taking `serialized_len` bytes (header included)
    /// in the body fits within every limit.
    pub fn fits(&self, uncompressed_len: u64, serialized_len: u64) -> bool {
        self.chunks.len() < self.limits.max_chunks
            && self.uncompressed + uncompressed_len <= self.limits.max_uncompressed_bytes
            && self.body.len() as u64 + serialized_len <= self.limits.max_body_bytes
    }

    /// Hashes and compresses `data` and appends it, unless it would break a limit
    /// ([`Push::Full`], nothing changes). Fails only if `data` is longer than a chunk may be.
    pub fn add_chunk(&mut self, data: &[u8]) -> Result<Push, XorbError> {
        let len = data.len() as u64;
        if len > u64::from(MAX_CHUNK_LEN) {
            return Err(XorbError::ChunkTooLong {
                len: data.len(),
                max: MAX_CHUNK_LEN,
            });
        }
        // Compression is skipped when the chunk cannot fit even compressed to nothing.
        if !self.fits(len, CHUNK_HEADER_LEN as u64) {
            return Ok(Push::Full);
        }
        let chunk = CompressedChunk::new(data, self.selector.peek(data))?;
        Ok(match self.add_compressed(chunk) {
            Ok(index) => Push::Added(index),
            Err(_) => Push::Full,
        })
    }

    /// Appends a chunk compressed elsewhere and returns its index, or gives the chunk back if it
    /// would break a limit (nothing changes). The chunk's selected scheme becomes the Auto block's
    /// scheme when the chunk starts a block.
    pub fn add_compressed(&mut self, chunk: CompressedChunk) -> Result<usize, CompressedChunk> {
        let uncompressed_len = u64::from(chunk.uncompressed_len());
        if !self.fits(uncompressed_len, chunk.serialized_len()) {
            return Err(chunk);
        }
        let index = self.chunks.len();
        let start = self.body.len() as u64;
        self.body.extend_from_slice(&chunk.header().encode());
        self.body.extend_from_slice(chunk.payload());
        self.chunks.push(XorbChunk {
            hash: chunk.hash(),
            scheme: chunk.scheme(),
            start,
            end: self.body.len() as u64,
            uncompressed_len: chunk.uncompressed_len(),
            unpacked_start: self.uncompressed,
        });
        self.uncompressed += uncompressed_len;
        if self.new_segment {
            self.segment_starts.push(index);
            self.new_segment = false;
        }
        self.selector.advance(chunk.selected_scheme());
        Ok(index)
    }

    /// Chunks added so far.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Uncompressed bytes added so far.
    pub fn uncompressed_len(&self) -> u64 {
        self.uncompressed
    }

    /// Bytes of the upload body so far.
    pub fn body_len(&self) -> u64 {
        self.body.len() as u64
    }

    /// Indices of the chunks that start a file segment.
    pub fn segment_starts(&self) -> &[usize] {
        &self.segment_starts
    }

    /// Finishes the xorb. Fails if no chunk was added: empty xorbs are never built.
    pub fn finish(self) -> Result<BuiltXorb, XorbError> {
        if self.chunks.is_empty() {
            return Err(XorbError::Empty);
        }
        let refs: Vec<ChunkRef> = self.chunks.iter().map(XorbChunk::chunk_ref).collect();
        let hash = xorb_hash(&refs);
        let to_u32 = |v: u64| {
            u32::try_from(v).map_err(|_| XorbError::Unwritable("offset does not fit in u32"))
        };
        let footer = XorbFooter {
            hash,
            chunk_hashes: self.chunks.iter().map(|c| c.hash).collect(),
            chunk_boundary_offsets: self
                .chunks
                .iter()
                .map(|c| to_u32(c.end))
                .collect::<Result<_, _>>()?,
            unpacked_chunk_offsets: Some(
                self.chunks
                    .iter()
                    .map(|c| to_u32(c.unpacked_end()))
                    .collect::<Result<_, _>>()?,
            ),
            buffer: [0; BUFFER_LEN],
        };
        let footer_bytes = footer.encode_v1()?;
        Ok(BuiltXorb {
            hash,
            chunks: self.chunks,
            body: self.body,
            footer,
            footer_bytes,
            uncompressed: self.uncompressed,
            segment_starts: self.segment_starts,
        })
    }
}

/// A finished xorb.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltXorb {
    hash: XorbHash,
    chunks: Vec<XorbChunk>,
    body: Vec<u8>,
    footer: XorbFooter,
    /// The encoded V1 footer and `info_length`, with a zero nonce.
    footer_bytes: Vec<u8>,
    uncompressed: u64,
    segment_starts: Vec<usize>,
}

impl BuiltXorb {
    pub fn hash(&self) -> XorbHash {
        self.hash
    }

    /// Every chunk: hash, scheme, byte range in the body, uncompressed length and offset.
    pub fn chunks(&self) -> &[XorbChunk] {
        &self.chunks
    }

    /// The upload form: the chunk region, no footer.
    pub fn upload_body(&self) -> &[u8] {
        &self.body
    }

    pub fn into_upload_body(self) -> Vec<u8> {
        self.body
    }

    /// The V1 footer (zero nonce).
    pub fn footer(&self) -> &XorbFooter {
        &self.footer
    }

    /// The stored form with a zero nonce.
    pub fn stored_form(&self) -> Vec<u8> {
        self.stored_form_with_nonce([0; NONCE_LEN])
    }

    /// The stored form: chunk region, V1 footer whose buffer starts with `nonce`, `info_length`.
    pub fn stored_form_with_nonce(&self, nonce: [u8; NONCE_LEN]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + self.footer_bytes.len());
        out.extend_from_slice(&self.body);
        out.extend_from_slice(&self.footer_bytes);
        // The buffer is the last 16 footer bytes, followed by the 4-byte info_length.
        let nonce_at = out.len().saturating_sub(4 + BUFFER_LEN);
        for (slot, byte) in out.iter_mut().skip(nonce_at).zip(nonce) {
            *slot = byte;
        }
        out
    }

    /// Bytes of uncompressed data.
    pub fn uncompressed_len(&self) -> u64 {
        self.uncompressed
    }

    /// Indices of the chunks that start a file segment.
    pub fn segment_starts(&self) -> &[usize] {
        &self.segment_starts
    }

    /// The inclusive byte range of chunks `[start, end)` (§3.10).
    pub fn url_range(&self, chunks: Range<usize>) -> Result<RangeInclusive<u64>, XorbError> {
        let ends: Vec<u64> = self.chunks.iter().map(|c| c.end).collect();
        url_range(&ends, chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_builder_refuses_to_finish() {
        assert_eq!(
            XorbBuilder::new(CompressionPolicy::Auto).finish(),
            Err(XorbError::Empty)
        );
    }

    #[test]
    fn a_reused_buffer_builds_the_same_xorb_in_place() {
        let chunks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 3000 + usize::from(i)]).collect();
        let build = |b: XorbBuilder| {
            let mut b = b;
            for c in &chunks {
                assert!(matches!(b.add_chunk(c).unwrap(), Push::Added(_)));
            }
            b.finish().unwrap()
        };
        let fresh = build(XorbBuilder::new(CompressionPolicy::Auto));
        let mut old = vec![0xaa; 100_000];
        old.truncate(50_000);
        let at = old.as_ptr();
        let reused = build(XorbBuilder::new(CompressionPolicy::Auto).with_body_buffer(old));
        assert_eq!(reused, fresh);
        let body = reused.into_upload_body();
        assert_eq!(body.as_ptr(), at, "the body was built in the buffer given");
        assert_eq!(body.capacity(), 100_000);
        // Once a chunk is in, the body is kept.
        let mut b = XorbBuilder::new(CompressionPolicy::None);
        let _ = b.add_chunk(b"first").unwrap();
        let b = b.with_body_buffer(vec![1, 2, 3]);
        assert_eq!(b.body_len(), 8 + 5);
    }

    #[test]
    fn chunk_limit_reports_full_and_keeps_state() {
        let limits = XorbLimits {
            max_chunks: 3,
            ..XorbLimits::CLIENT
        };
        let mut b = XorbBuilder::with_limits(CompressionPolicy::Lz4, limits);
        for i in 0..3 {
            assert_eq!(b.add_chunk(&[i; 10]).unwrap(), Push::Added(i as usize));
        }
        let before = b.clone().finish().unwrap();
        assert_eq!(b.add_chunk(b"more").unwrap(), Push::Full);
        let chunk = CompressedChunk::new(b"more", CompressionScheme::Lz4).unwrap();
        assert_eq!(b.add_compressed(chunk.clone()), Err(chunk));
        assert_eq!(b.finish().unwrap(), before);
    }

    #[test]
    fn byte_limits_report_full() {
        // Limits below one maximal chunk are raised to fit one.
        let limits = XorbLimits {
            max_chunks: 100,
            max_uncompressed_bytes: 1,
            max_body_bytes: 1,
        };
        let mut b = XorbBuilder::with_limits(CompressionPolicy::None, limits);
        assert_eq!(b.limits().max_uncompressed_bytes, 131_072);
        assert_eq!(b.limits().max_body_bytes, 131_080);
        assert_eq!(b.add_chunk(&[1; 131_072]).unwrap(), Push::Added(0));
        assert_eq!(b.add_chunk(&[]).unwrap(), Push::Full, "body is full");
        let mut b = XorbBuilder::with_limits(CompressionPolicy::Lz4, limits);
        assert_eq!(b.add_chunk(&[0; 131_072]).unwrap(), Push::Added(0));
        assert_eq!(b.add_chunk(&[0]).unwrap(), Push::Full, "data is full");
        assert_eq!(b.add_chunk(&[]).unwrap(), Push::Added(1));
        assert!(matches!(
            b.add_chunk(&[0; 131_073]),
            Err(XorbError::ChunkTooLong { len: 131_073, .. })
        ));
    }

    #[test]
    fn nonce_lands_in_the_buffer_only() {
        let mut b = XorbBuilder::new(CompressionPolicy::Auto);
        let _ = b.add_chunk(b"Hello World!").unwrap();
        let x = b.finish().unwrap();
        let plain = x.stored_form();
        let with = x.stored_form_with_nonce([1, 2, 3, 4]);
        let n = plain.len();
        assert_eq!(&with[n - 20..n - 16], &[1, 2, 3, 4]);
        assert_eq!(&with[..n - 20], &plain[..n - 20]);
        assert_eq!(&with[n - 16..], &plain[n - 16..]);
        assert_eq!(plain.len(), 20 + 92 + 40 + 4);
    }

    #[test]
    fn segments_are_recorded() {
        let mut b = XorbBuilder::new(CompressionPolicy::Auto);
        let _ = b.add_chunk(b"a").unwrap();
        b.start_file();
        b.start_file();
        let _ = b.add_chunk(b"b").unwrap();
        let _ = b.add_chunk(b"c").unwrap();
        b.start_file();
        let _ = b.add_chunk(b"d").unwrap();
        assert_eq!(b.segment_starts(), &[0, 1, 3]);
    }

    /// Chunks compressed ahead with the predicted schemes build the very xorb that compressing
    /// them one by one builds, across Auto blocks and file segments.
    #[test]
    fn chunks_compressed_ahead_build_the_same_xorb() {
        // Floats (BG4 wins), text, random bytes, in turn; 70 chunks of 4-12 KiB.
        let mut x = 7u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let chunks: Vec<Vec<u8>> = (0..70)
            .map(|i| {
                let len = 4096 + (next() % 8192) as usize;
                match (i / 5) % 3 {
                    0 => (0..len / 4)
                        .flat_map(|_| (1.0f32 + (next() % 1000) as f32 / 1e4).to_le_bytes())
                        .collect(),
                    1 => (0..len).map(|j| b"the quick brown fox "[j % 20]).collect(),
                    _ => (0..len).map(|_| next() as u8).collect(),
                }
            })
            .collect();
        let files_at = [0usize, 17, 40];
        let one_by_one = {
            let mut b = XorbBuilder::new(CompressionPolicy::Auto);
            for (i, c) in chunks.iter().enumerate() {
                if files_at.contains(&i) {
                    b.start_file();
                }
                assert!(matches!(b.add_chunk(c).unwrap(), Push::Added(_)));
            }
            b.finish().unwrap()
        };
        let ahead = {
            let mut b = XorbBuilder::new(CompressionPolicy::Auto);
            // Predicted per run of chunks between file starts, as a pipeline would per block.
            for (k, &from) in files_at.iter().enumerate() {
                let to = files_at.get(k + 1).copied().unwrap_or(chunks.len());
                b.start_file();
                let run: Vec<&[u8]> = chunks[from..to].iter().map(|c| &c[..]).collect();
                let schemes = b.predict_schemes(&run);
                for (c, scheme) in run.iter().zip(schemes) {
                    assert_eq!(scheme, b.scheme_for_next(c), "the prediction holds");
                    let ready = CompressedChunk::new(c, scheme).unwrap();
                    assert!(b.add_compressed(ready).is_ok());
                }
            }
            b.finish().unwrap()
        };
        assert_eq!(one_by_one.hash(), ahead.hash());
        assert!(one_by_one.stored_form() == ahead.stored_form());
        let schemes: std::collections::HashSet<_> =
            one_by_one.chunks().iter().map(|c| c.scheme).collect();
        assert_eq!(schemes.len(), 3, "all three schemes were used: {schemes:?}");
    }
}
