//! Chunk compression (xet-format.md §3.3–§3.5): LZ4 frames, BG4-LZ4, the None fallback, the
//! compression policy and Auto scheme selection, and bomb-safe decompression.
//!
//! - **LZ4** payloads are one LZ4 *frame*, written by `lz4_flex`'s `FrameEncoder` with default
//!   settings and the whole chunk in one write, exactly as the reference client does, so our
//!   payloads are byte-identical to its payloads.
//! - **BG4-LZ4** payloads are the LZ4 frame of the [`bg4::split`] bytes.
//! - **None fallback** (§3.4): whatever the policy, a chunk whose compressed payload would not be
//!   strictly shorter than the chunk itself is stored raw with scheme None.
//! - **Auto** (§3.5): the chunks of a xorb are cut into per-file segments, each segment into
//!   blocks of [`AUTO_RETEST_INTERVAL`] chunks; the predictor looks only at the first chunk of a
//!   block and its choice (LZ4 or BG4-LZ4) applies to the whole block. [`SchemeSelector`] tracks
//!   this as chunks arrive; [`plan_schemes`] does it for a whole list.
//!
//! Decompression never produces more than the header's `uncompressed_length` plus one byte (to
//! detect overflow), whatever the payload claims, and fails unless the output length is exact.
//! Readers accept any LZ4 frame `lz4_flex::frame::FrameDecoder` accepts, as xet-core does; like
//! xet-core, decoding stops at the end of the first frame.

use std::fmt;
use std::io::{Read, Write};
use std::str::FromStr;

use lz4_flex::frame::{FrameDecoder, FrameEncoder};

use super::bg4;
use super::header::{ChunkHeader, CompressionScheme, MAX_CHUNK_LEN};
use super::XorbError;
use crate::format::hash::ChunkHash;

/// Default Auto block length in chunks (`HF_XET_XORB_COMPRESSION_SCHEME_RETEST_INTERVAL`).
/// 0 means one block per segment.
pub const AUTO_RETEST_INTERVAL: usize = 32;

/// One LZ4 frame of `data`, as `lz4_flex` 0.13 `FrameEncoder` writes it with default settings:
/// header `04 22 4d 18 60 40 82` (64 KiB blocks) for up to 65536 bytes, `04 22 4d 18 60 50 fb`
/// (256 KiB blocks) above. `None` only if the encoder reports an error, which writing into a
/// `Vec` does not produce.
pub fn lz4_compress(data: &[u8]) -> Option<Vec<u8>> {
    let mut enc = FrameEncoder::new(Vec::with_capacity(data.len() / 2 + 64));
    enc.write_all(data).ok()?;
    enc.finish().ok()
}

/// Compresses one chunk with `scheme` and applies the None fallback (§3.4). Returns the scheme
/// actually used and the payload. Pure, so chunks can be compressed in parallel.
pub fn compress_chunk(data: &[u8], scheme: CompressionScheme) -> (CompressionScheme, Vec<u8>) {
    let compressed = match scheme {
        CompressionScheme::None => None,
        CompressionScheme::Lz4 => lz4_compress(data),
        CompressionScheme::Bg4Lz4 => lz4_compress(&bg4::split(data)),
    };
    match compressed {
        Some(payload) if payload.len() < data.len() => (scheme, payload),
        _ => (CompressionScheme::None, data.to_vec()),
    }
}

/// The scheme Auto picks for a block whose first chunk is `first_chunk`: BG4-LZ4 if the
/// predictor recommends it, LZ4 otherwise.
pub fn choose_scheme(first_chunk: &[u8]) -> CompressionScheme {
    if bg4::bg4_recommended(first_chunk) {
        CompressionScheme::Bg4Lz4
    } else {
        CompressionScheme::Lz4
    }
}

/// Why a chunk payload does not decompress to its header's `uncompressed_length`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("payload is {actual} bytes but compressed_length is {expected}")]
    PayloadLength { expected: u32, actual: usize },
    #[error(
        "scheme none with compressed_length {compressed} != uncompressed_length {uncompressed}"
    )]
    RawLengths { compressed: u32, uncompressed: u32 },
    #[error("invalid LZ4 frame: {0}")]
    Lz4(String),
    #[error("decompresses to more than uncompressed_length {expected}")]
    TooLong { expected: u32 },
    #[error("decompresses to {actual} bytes but uncompressed_length is {expected}")]
    TooShort { expected: u32, actual: usize },
}

/// Decodes one LZ4 frame from `payload`, appending at most `expected + 1` bytes to `out`; fails
/// unless exactly `expected` bytes come out.
fn lz4_decompress_into(
    payload: &[u8],
    expected: u32,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    let before = out.len();
    let limit = u64::from(expected) + 1;
    out.reserve(expected as usize + 1);
    let mut decoder = FrameDecoder::new(payload).take(limit);
    decoder
        .read_to_end(out)
        .map_err(|e| DecompressError::Lz4(e.to_string()))?;
    let produced = out.len() - before;
    if produced > expected as usize {
        return Err(DecompressError::TooLong { expected });
    }
    if produced < expected as usize {
        return Err(DecompressError::TooShort {
            expected,
            actual: produced,
        });
    }
    Ok(())
}

/// Decompresses one chunk payload, appending exactly `header.uncompressed_len()` bytes to `out`.
/// On error, `out` is left as it was.
pub fn decompress_chunk_into(
    header: &ChunkHeader,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    if payload.len() != header.compressed_len() as usize {
        return Err(DecompressError::PayloadLength {
            expected: header.compressed_len(),
            actual: payload.len(),
        });
    }
    let before = out.len();
    let result = match header.scheme() {
        CompressionScheme::None => {
            if header.compressed_len() == header.uncompressed_len() {
                out.extend_from_slice(payload);
                Ok(())
            } else {
                Err(DecompressError::RawLengths {
                    compressed: header.compressed_len(),
                    uncompressed: header.uncompressed_len(),
                })
            }
        }
        CompressionScheme::Lz4 => lz4_decompress_into(payload, header.uncompressed_len(), out),
        CompressionScheme::Bg4Lz4 => {
            let mut grouped = Vec::new();
            lz4_decompress_into(payload, header.uncompressed_len(), &mut grouped).map(|()| {
                out.extend_from_slice(&bg4::regroup(&grouped));
            })
        }
    };
    if result.is_err() {
        out.truncate(before);
    }
    result
}

/// Decompresses one chunk payload to exactly `header.uncompressed_len()` bytes.
pub fn decompress_chunk(header: &ChunkHeader, payload: &[u8]) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    decompress_chunk_into(header, payload, &mut out)?;
    Ok(out)
}

/// How a writer picks each chunk's scheme (`HF_XET_XORB_COMPRESSION_POLICY`, §3.5). Whatever
/// the policy, the None fallback applies per chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CompressionPolicy {
    /// Per block of chunks, LZ4 or BG4-LZ4 as the predictor says (the reference default).
    #[default]
    Auto,
    /// Every chunk raw.
    None,
    /// Every chunk LZ4.
    Lz4,
    /// Every chunk BG4-LZ4.
    Bg4Lz4,
}

impl CompressionPolicy {
    /// The scheme of a fixed policy; `None` for Auto.
    pub fn fixed_scheme(self) -> Option<CompressionScheme> {
        match self {
            Self::Auto => None,
            Self::None => Some(CompressionScheme::None),
            Self::Lz4 => Some(CompressionScheme::Lz4),
            Self::Bg4Lz4 => Some(CompressionScheme::Bg4Lz4),
        }
    }

    /// The name the reference client's setting uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::None => "none",
            Self::Lz4 => "lz4",
            Self::Bg4Lz4 => "bg4-lz4",
        }
    }
}

impl fmt::Display for CompressionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A compression policy name that is not one of `auto` (or empty), `none`, `lz4`, `bg4-lz4`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid compression policy {0:?}: expected auto, none, lz4 or bg4-lz4")]
pub struct PolicyParseError(pub String);

impl FromStr for CompressionPolicy {
    type Err = PolicyParseError;

    /// Parses like the reference: surrounding whitespace and case are ignored, and the empty
    /// string means auto.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "none" => Ok(Self::None),
            "lz4" => Ok(Self::Lz4),
            "bg4-lz4" => Ok(Self::Bg4Lz4),
            _ => Err(PolicyParseError(s.to_string())),
        }
    }
}

/// Picks the scheme of each chunk of one xorb, in order, the way the reference client does.
///
/// Under Auto, a block starts at the first chunk of the xorb, at the first chunk of every file
/// segment, and every `retest_interval` chunks into a segment (never again within a segment if
/// the interval is 0). The predictor runs only on a block's first chunk.
#[derive(Debug, Clone)]
pub struct SchemeSelector {
    policy: CompressionPolicy,
    retest_interval: usize,
    /// Index of the next chunk.
    next: usize,
    /// Index of the first chunk of the current segment.
    segment_start: usize,
    /// The next chunk starts a new segment.
    new_segment: bool,
    /// The scheme chosen for the current block.
    block_scheme: Option<CompressionScheme>,
}

impl SchemeSelector {
    pub fn new(policy: CompressionPolicy) -> Self {
        Self::with_retest_interval(policy, AUTO_RETEST_INTERVAL)
    }

    pub fn with_retest_interval(policy: CompressionPolicy, retest_interval: usize) -> Self {
        Self {
            policy,
            retest_interval,
            next: 0,
            segment_start: 0,
            new_segment: true,
            block_scheme: None,
        }
    }

    pub fn policy(&self) -> CompressionPolicy {
        self.policy
    }

    /// The next chunk starts a new file segment.
    pub fn start_segment(&mut self) {
        self.new_segment = true;
    }

    /// True if the next chunk starts an Auto block (so [`Self::peek`] will run the predictor).
    pub fn at_block_start(&self) -> bool {
        if self.new_segment || self.block_scheme.is_none() {
            return true;
        }
        let into_segment = self.next - self.segment_start;
        self.retest_interval != 0 && into_segment % self.retest_interval == 0
    }

    /// The scheme for the next chunk, whose bytes are `data`, without advancing.
    pub fn peek(&self, data: &[u8]) -> CompressionScheme {
        if let Some(fixed) = self.policy.fixed_scheme() {
            return fixed;
        }
        match self.block_scheme {
            Some(scheme) if !self.at_block_start() => scheme,
            _ => choose_scheme(data),
        }
    }

    /// Records that the next chunk was compressed with `selected` (as returned by
    /// [`Self::peek`]) and moves on.
    pub fn advance(&mut self, selected: CompressionScheme) {
        if self.at_block_start() {
            self.block_scheme = Some(selected);
        }
        if self.new_segment {
            self.segment_start = self.next;
            self.new_segment = false;
        }
        self.next += 1;
    }

    /// [`Self::peek`] then [`Self::advance`].
    pub fn select(&mut self, data: &[u8]) -> CompressionScheme {
        let scheme = self.peek(data);
        self.advance(scheme);
        scheme
    }
}

/// The scheme of every chunk of one xorb (before the None fallback), given the chunk indices at
/// which a new file starts (chunk 0 always starts one; other entries may be in any order).
pub fn plan_schemes<C: AsRef<[u8]>>(
    policy: CompressionPolicy,
    chunks: &[C],
    segment_starts: &[usize],
    retest_interval: usize,
) -> Vec<CompressionScheme> {
    let mut selector = SchemeSelector::with_retest_interval(policy, retest_interval);
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            if segment_starts.contains(&i) {
                selector.start_segment();
            }
            selector.select(chunk.as_ref())
        })
        .collect()
}

/// A chunk compressed and ready for a [`XorbBuilder`](super::XorbBuilder): its hash, its header
/// and its payload. Built only by [`CompressedChunk::new`], so it is always consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressedChunk {
    hash: ChunkHash,
    selected: CompressionScheme,
    header: ChunkHeader,
    payload: Vec<u8>,
}

impl CompressedChunk {
    /// Hashes `data` and compresses it with `scheme` (then the None fallback). Fails only if
    /// `data` is longer than [`MAX_CHUNK_LEN`].
    pub fn new(data: &[u8], scheme: CompressionScheme) -> Result<Self, XorbError> {
        let too_long = XorbError::ChunkTooLong {
            len: data.len(),
            max: MAX_CHUNK_LEN,
        };
        let len = u32::try_from(data.len()).map_err(|_| too_long.clone())?;
        if len > MAX_CHUNK_LEN {
            return Err(too_long);
        }
        let (used, payload) = compress_chunk(data, scheme);
        // The fallback guarantees payload.len() <= data.len() <= MAX_CHUNK_LEN.
        let payload_len = u32::try_from(payload.len()).map_err(|_| too_long.clone())?;
        let header = ChunkHeader::new(used, payload_len, len).map_err(|_| too_long)?;
        Ok(Self {
            hash: ChunkHash::of(data),
            selected: scheme,
            header,
            payload,
        })
    }

    pub fn hash(&self) -> ChunkHash {
        self.hash
    }

    /// The scheme that was asked for (what Auto chose for the block).
    pub fn selected_scheme(&self) -> CompressionScheme {
        self.selected
    }

    /// The scheme in the header (None if the fallback applied).
    pub fn scheme(&self) -> CompressionScheme {
        self.header.scheme()
    }

    pub fn header(&self) -> &ChunkHeader {
        &self.header
    }

    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    pub fn uncompressed_len(&self) -> u32 {
        self.header.uncompressed_len()
    }

    /// Header plus payload: what the chunk adds to a xorb body.
    pub fn serialized_len(&self) -> u64 {
        self.header.chunk_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEROS_1000_FRAME: &str = "04224d186040820f0000001f000100ffffffd16000000000000000000000";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn lz4_frame_of_1000_zeros() {
        let frame = lz4_compress(&[0u8; 1000]).unwrap();
        assert_eq!(hex(&frame), ZEROS_1000_FRAME);
        let (used, payload) = compress_chunk(&[0u8; 1000], CompressionScheme::Bg4Lz4);
        assert_eq!(
            (used, hex(&payload)),
            (CompressionScheme::Bg4Lz4, ZEROS_1000_FRAME.into())
        );
        let header = ChunkHeader::new(CompressionScheme::Lz4, 30, 1000).unwrap();
        assert_eq!(decompress_chunk(&header, &frame).unwrap(), vec![0u8; 1000]);
    }

    #[test]
    fn fallback_applies_under_every_scheme() {
        for scheme in [
            CompressionScheme::None,
            CompressionScheme::Lz4,
            CompressionScheme::Bg4Lz4,
        ] {
            assert_eq!(
                compress_chunk(b"Hello World!", scheme),
                (CompressionScheme::None, b"Hello World!".to_vec())
            );
            // An empty chunk: any frame is longer than zero bytes.
            assert_eq!(
                compress_chunk(b"", scheme),
                (CompressionScheme::None, vec![])
            );
        }
    }

    #[test]
    fn decompression_is_bounded_and_exact() {
        let frame = lz4_compress(&[0u8; 1000]).unwrap();
        let claims = |n: u32| ChunkHeader::new(CompressionScheme::Lz4, 30, n).unwrap();
        assert_eq!(
            decompress_chunk(&claims(999), &frame),
            Err(DecompressError::TooLong { expected: 999 })
        );
        assert_eq!(
            decompress_chunk(&claims(1001), &frame),
            Err(DecompressError::TooShort {
                expected: 1001,
                actual: 1000
            })
        );
        let mut out = b"keep".to_vec();
        assert!(decompress_chunk_into(&claims(10), &frame, &mut out).is_err());
        assert_eq!(out, b"keep");
        let raw = ChunkHeader::new(CompressionScheme::None, 3, 4).unwrap();
        assert_eq!(
            decompress_chunk(&raw, b"abc"),
            Err(DecompressError::RawLengths {
                compressed: 3,
                uncompressed: 4
            })
        );
        assert!(matches!(
            decompress_chunk(&claims(1000), &frame[..29]),
            Err(DecompressError::PayloadLength { .. })
        ));
        let garbage = ChunkHeader::new(CompressionScheme::Bg4Lz4, 8, 10).unwrap();
        assert!(matches!(
            decompress_chunk(&garbage, &[0; 8]),
            Err(DecompressError::Lz4(_))
        ));
        // Like xet-core's decoder, lz4_flex reads 4 bytes that end the input as an empty stream,
        // whatever they are; the length check still refuses them.
        let short = ChunkHeader::new(CompressionScheme::Lz4, 4, 10).unwrap();
        assert_eq!(
            decompress_chunk(&short, &[0; 4]),
            Err(DecompressError::TooShort {
                expected: 10,
                actual: 0
            })
        );
    }

    #[test]
    fn policy_names() {
        for (s, p) in [
            ("", CompressionPolicy::Auto),
            ("auto", CompressionPolicy::Auto),
            (" LZ4 ", CompressionPolicy::Lz4),
            ("none", CompressionPolicy::None),
            ("bg4-lz4", CompressionPolicy::Bg4Lz4),
        ] {
            assert_eq!(s.parse::<CompressionPolicy>(), Ok(p));
        }
        assert!("zstd".parse::<CompressionPolicy>().is_err());
        assert_eq!(CompressionPolicy::Bg4Lz4.to_string(), "bg4-lz4");
    }

    #[test]
    fn auto_analyses_only_the_first_chunk_of_each_block() {
        let floats: Vec<u8> = (0..1024)
            .flat_map(|i| (i as f32 * 0.001).to_le_bytes())
            .collect();
        let zeros = vec![0u8; 4096];
        assert_eq!(choose_scheme(&floats), CompressionScheme::Bg4Lz4);
        assert_eq!(choose_scheme(&zeros), CompressionScheme::Lz4);

        // 70 chunks of one file: blocks start at 0, 32 and 64.
        let mut chunks = vec![zeros.clone(); 70];
        chunks[0] = floats.clone();
        chunks[33] = floats.clone();
        chunks[64] = floats.clone();
        let plan = plan_schemes(CompressionPolicy::Auto, &chunks, &[0], AUTO_RETEST_INTERVAL);
        let bg4: Vec<usize> = (0..70)
            .filter(|&i| plan[i] == CompressionScheme::Bg4Lz4)
            .collect();
        assert_eq!(bg4, (0..32).chain(64..70).collect::<Vec<_>>());

        // A new file at 40 starts a block there; the next block starts at 72.
        let mut chunks = vec![zeros.clone(); 80];
        chunks[40] = floats.clone();
        chunks[72] = floats.clone();
        let plan = plan_schemes(CompressionPolicy::Auto, &chunks, &[0, 40], 32);
        let bg4: Vec<usize> = (0..80)
            .filter(|&i| plan[i] == CompressionScheme::Bg4Lz4)
            .collect();
        assert_eq!(bg4, (40..80).collect::<Vec<_>>());

        // Interval 0: one block per segment.
        let plan = plan_schemes(CompressionPolicy::Auto, &chunks, &[0], 0);
        assert!(plan.iter().all(|&s| s == CompressionScheme::Lz4));

        // Fixed policies ignore the data.
        let plan = plan_schemes(CompressionPolicy::Bg4Lz4, &chunks, &[], 32);
        assert!(plan.iter().all(|&s| s == CompressionScheme::Bg4Lz4));
    }

    #[test]
    fn compressed_chunk_rejects_oversized_data() {
        let big = vec![0u8; MAX_CHUNK_LEN as usize + 1];
        assert!(matches!(
            CompressedChunk::new(&big, CompressionScheme::Lz4),
            Err(XorbError::ChunkTooLong { .. })
        ));
        let max = CompressedChunk::new(&big[1..], CompressionScheme::Lz4).unwrap();
        assert_eq!(max.scheme(), CompressionScheme::Lz4);
        assert_eq!(max.uncompressed_len(), MAX_CHUNK_LEN);
        assert_eq!(
            &max.payload()[..7],
            &[0x04, 0x22, 0x4d, 0x18, 0x60, 0x50, 0xfb]
        );
    }
}
