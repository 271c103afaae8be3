//! Chunk compression (docs/format.md §3.3–§3.5): LZ4 frames, BG4-LZ4, the None fallback, the
//! compression policy and Auto scheme selection, and bomb-safe decompression.
//!
//! - **LZ4** payloads are one LZ4 *frame*, written by `lz4_flex`'s `FrameEncoder` with default
//!   settings and the whole chunk in one write, exactly as the reference client does, so our
//!   payloads are byte-identical to its payloads.
//! - **BG4-LZ4** payloads are the LZ4 frame of the [`bg4::split`] bytes.
//! - **None fallback** (§3.4): whatever the policy, a chunk whose compressed payload would not be
//!   strictly shorter than the chunk itself is stored raw with scheme None. A chunk whose samples
//!   do not compress at all ([`hopeless`]: random bytes) is stored raw without compressing it
//!   whole, which is what the reference stores for it after compressing it.
//! - **Auto** (§3.5): the chunks of a xorb are cut into per-file segments, each segment into
//!   blocks of [`AUTO_RETEST_INTERVAL`] chunks; the predictor looks only at the first chunk of a
//!   block and its choice (LZ4 or BG4-LZ4) applies to the whole block. [`SchemeSelector`] tracks
//!   this as chunks arrive; [`plan_schemes`] does it for a whole list.
//!
//! Decompression writes into exactly the header's `uncompressed_length` bytes, whatever the payload
//! claims, and fails unless the output length is exact. LZ4 frames are parsed by [`lz4_frame`]
//! (not by `lz4_flex::frame::FrameDecoder`, whose buffers follow the block size a frame declares,
//! up to 8 MiB per chunk): it accepts a subset of what the reference decoder accepts, decodes it
//! to the same bytes, and never allocates more than that output.
//!
//! [`lz4_frame`]: super::lz4_frame

use std::fmt;
use std::io::Write;
use std::str::FromStr;

use lz4_flex::frame::FrameEncoder;

use super::bg4;
use super::header::{ChunkHeader, CompressionScheme, MAX_CHUNK_LEN};
use super::lz4_frame::{decode_frame, Lz4FrameError};
use super::XorbError;
use crate::hash::ChunkHash;

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

/// Bytes of each sample [`hopeless`] compresses.
pub const PROBE_SAMPLE: usize = 4096;

/// Whether compressing `data` with `scheme` is certain enough to gain nothing that it is not
/// tried: chunks of at least four samples whose samples (the first [`PROBE_SAMPLE`] bytes and
/// the middle ones, through BG4 for BG4-LZ4), compressed as LZ4 blocks, each come out no shorter
/// than they went in. Random bytes (encrypted, already compressed or noisy data) are such
/// chunks; LZ4 gives up on them only after reading all of them, at a quarter to a third of its
/// speed on text. A chunk with any compressible sample is compressed whole, so the only chunks
/// stored raw that LZ4 would have shortened are those whose compressible bytes all lie outside
/// both samples.
pub fn hopeless(data: &[u8], scheme: CompressionScheme) -> bool {
    if scheme == CompressionScheme::None || data.len() < 4 * PROBE_SAMPLE {
        return false;
    }
    // The middle sample starts on a multiple of 4, so BG4 groups it as it groups the chunk.
    let middle = (data.len() / 2) & !3;
    [0, middle].iter().all(|&at| {
        let sample = &data[at..at + PROBE_SAMPLE];
        let grouped;
        let input = if scheme == CompressionScheme::Bg4Lz4 {
            grouped = bg4::split(sample);
            &grouped[..]
        } else {
            sample
        };
        lz4_flex::block::compress(input).len() >= input.len()
    })
}

/// Compresses one chunk with `scheme` and applies the None fallback (§3.4). Returns the scheme
/// actually used and the payload. A chunk [`hopeless`] to compress is stored raw without trying.
/// Pure, so chunks can be compressed in parallel.
pub fn compress_chunk(data: &[u8], scheme: CompressionScheme) -> (CompressionScheme, Vec<u8>) {
    let compressed = match scheme {
        _ if hopeless(data, scheme) => None,
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
    /// The LZ4 frame is malformed, or uses something a chunk may not (see [`lz4_frame`]).
    ///
    /// [`lz4_frame`]: super::lz4_frame
    #[error("invalid LZ4 frame: {0}")]
    Lz4(Lz4FrameError),
    #[error("decompresses to more than uncompressed_length {expected}")]
    TooLong { expected: u32 },
    #[error("decompresses to {actual} bytes but uncompressed_length is {expected}")]
    TooShort { expected: u32, actual: usize },
}

/// Decodes the LZ4 frame `payload` into `expected` bytes appended to `out`. Allocates only those
/// bytes, whatever the frame declares; on error, `out` may hold a partial result (the caller
/// truncates it).
fn lz4_decompress_into(
    payload: &[u8],
    expected: u32,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    let before = out.len();
    // `expected` ≤ MAX_CHUNK_LEN (checked by `ChunkHeader`), so this is at most 128 KiB.
    out.resize(before + expected as usize, 0);
    decode_frame(payload, &mut out[before..])
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
        self.retest_interval != 0 && into_segment.is_multiple_of(self.retest_interval)
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
/// and its payload. Built only by [`CompressedChunk::new`], which hashes the bytes it compresses,
/// or by [`CompressedChunk::with_hash`] from the hash of those bytes, so it is consistent.
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
        Self::with_hash(data, ChunkHash::of(data), scheme)
    }

    /// [`CompressedChunk::new`] for a chunk whose hash the caller computed already (a pipeline
    /// that hashes chunks as it finds them): `hash` must be `ChunkHash::of(data)`, or the xorb
    /// built from the chunk names it wrongly.
    pub fn with_hash(
        data: &[u8],
        hash: ChunkHash,
        scheme: CompressionScheme,
    ) -> Result<Self, XorbError> {
        debug_assert!(hash == ChunkHash::of(data), "the hash of another chunk");
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
            hash,
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

    #[test]
    fn random_chunks_are_not_compressed_and_anything_compressible_is() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = vec![0u8; 65536];
        for b in &mut random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        for scheme in [CompressionScheme::Lz4, CompressionScheme::Bg4Lz4] {
            assert!(hopeless(&random, scheme));
            assert_eq!(compress_chunk(&random, scheme).0, CompressionScheme::None);
            // Compressible bytes in either sample: compressed whole, as without the probe.
            for at in [0, 32768] {
                let mut mixed = random.clone();
                mixed[at..at + 4096].fill(b'a');
                assert!(!hopeless(&mixed, scheme), "{scheme:?} at {at}");
                assert_eq!(compress_chunk(&mixed, scheme).0, scheme);
            }
            // Small chunks are never probed.
            assert!(!hopeless(&random[..16383], scheme));
        }
        assert!(!hopeless(&random, CompressionScheme::None));
        // Floats whose bytes group well under BG4 but not as they are.
        let floats: Vec<u8> = (0..16384u32)
            .flat_map(|i| (1.0f32 + (i.wrapping_mul(2_654_435_761) as f32) / 4e9).to_le_bytes())
            .collect();
        assert!(!hopeless(&floats, CompressionScheme::Bg4Lz4));
    }

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
        // lz4_flex's FrameDecoder reads 4 bytes that end the input as an empty stream, whatever
        // they are; we require a magic number.
        let short = ChunkHeader::new(CompressionScheme::Lz4, 4, 10).unwrap();
        assert_eq!(
            decompress_chunk(&short, &[0; 4]).unwrap_err().to_string(),
            "invalid LZ4 frame: magic number at offset 0: 0x00000000 is neither the LZ4 frame \
             magic 0x184d2204 nor the legacy magic 0x184c2102"
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
    fn a_chunk_hashed_beforehand_compresses_the_same() {
        let data: Vec<u8> = (0..5000u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
        for scheme in [
            CompressionScheme::None,
            CompressionScheme::Lz4,
            CompressionScheme::Bg4Lz4,
        ] {
            let hashed = CompressedChunk::with_hash(&data, ChunkHash::of(&data), scheme).unwrap();
            assert_eq!(hashed, CompressedChunk::new(&data, scheme).unwrap());
        }
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

    // -----------------------------------------------------------------------------------------
    // The LZ4 frame decoder (lz4_frame.rs), through decompress_chunk.

    use crate::test_util::pseudo_random;
    use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameInfo};
    use std::io::Read as _;

    /// One frame of `data` written by lz4_flex's encoder with `info`, flushing (ending a block)
    /// after every `piece` bytes.
    fn encode(info: FrameInfo, data: &[u8], piece: usize) -> Vec<u8> {
        let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
        for part in data.chunks(piece.max(1)) {
            enc.write_all(part).unwrap();
            enc.flush().unwrap();
        }
        enc.finish().unwrap()
    }

    fn lz4_header(frame: &[u8], uncompressed: usize) -> ChunkHeader {
        ChunkHeader::new(
            CompressionScheme::Lz4,
            frame.len() as u32,
            uncompressed as u32,
        )
        .unwrap()
    }

    fn decode(frame: &[u8], uncompressed: usize) -> Result<Vec<u8>, DecompressError> {
        decompress_chunk(&lz4_header(frame, uncompressed), frame)
    }

    /// What the reference decoder (lz4_flex's FrameDecoder, as xet-core reads) makes of `frame`.
    fn reference_decode(frame: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        FrameDecoder::new(frame).read_to_end(&mut out).ok()?;
        Some(out)
    }

    fn message(frame: &[u8], uncompressed: usize) -> String {
        decode(frame, uncompressed).unwrap_err().to_string()
    }

    /// A hand-made frame: magic, `flg`, `bd`, `optional` descriptor fields, a correct header
    /// checksum, then `rest`.
    fn frame(flg: u8, bd: u8, optional: &[u8], rest: &[u8]) -> Vec<u8> {
        let mut descriptor = vec![flg, bd];
        descriptor.extend_from_slice(optional);
        let checksum = (twox_hash::XxHash32::oneshot(0, &descriptor) >> 8) as u8;
        let mut f = super::super::lz4_frame::FRAME_MAGIC.to_le_bytes().to_vec();
        f.extend_from_slice(&descriptor);
        f.push(checksum);
        f.extend_from_slice(rest);
        f
    }

    /// `100 zero bytes` as one LZ4 block (12 bytes).
    const ZEROS_100_BLOCK: [u8; 12] = [0x1f, 0, 1, 0, 0x4a, 0x60, 0, 0, 0, 0, 0, 0];

    fn block(data: &[u8]) -> Vec<u8> {
        let mut b = (data.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(data);
        b
    }

    fn stored(data: &[u8]) -> Vec<u8> {
        let mut b = (data.len() as u32 | 1 << 31).to_le_bytes().to_vec();
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn encoder_frames_of_every_option_decode_like_the_reference() {
        let text: Vec<u8> = b"a chunk of compressible text, repeated. "
            .iter()
            .copied()
            .cycle()
            .take(131_072)
            .collect();
        let random = pseudo_random(131_072, 5);
        let infos = [
            FrameInfo::new(),
            FrameInfo::new().block_size(BlockSize::Max64KB),
            FrameInfo::new().block_size(BlockSize::Max256KB),
            FrameInfo::new().block_size(BlockSize::Max1MB),
            FrameInfo::new().block_size(BlockSize::Max4MB),
            FrameInfo::new().block_checksums(true),
            FrameInfo::new().content_checksum(true),
            FrameInfo::new().block_mode(BlockMode::Linked),
            FrameInfo::new()
                .block_size(BlockSize::Max64KB)
                .block_mode(BlockMode::Linked)
                .block_checksums(true)
                .content_checksum(true),
        ];
        let (mut checked, mut stored_blocks) = (0, 0);
        for len in [
            0, 1, 15, 100, 4095, 65_535, 65_536, 65_537, 100_000, 131_072,
        ] {
            for data in [&text[..len], &random[..len], &vec![0u8; len][..]] {
                for info in &infos {
                    for piece in [usize::MAX, 10_000] {
                        let sized = info.clone().content_size(Some(len as u64));
                        for info in [info.clone(), sized] {
                            let f = encode(info.clone(), data, piece);
                            let got = decode(&f, len);
                            assert_eq!(got.as_deref(), Ok(data), "{info:?} len {len}");
                            assert_eq!(reference_decode(&f).as_deref(), Some(data));
                            // A first block word (bytes 7..11 without content size) with bit 31
                            // set: a stored (incompressible) block.
                            stored_blocks += usize::from(f.get(10) == Some(&0x80));
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 10 * 3 * infos.len() * 2 * 2);
        assert!(stored_blocks > 0, "no frame held a stored block");
        // The default encoder's frames are the ones chunks hold.
        for len in [0, 1000, 65_536, 65_537, 131_072] {
            let f = lz4_compress(&random[..len]).unwrap();
            assert_eq!(decode(&f, len).unwrap(), &random[..len]);
        }
    }

    #[test]
    fn linked_blocks_reach_into_earlier_blocks() {
        // A 3000-byte pattern repeated: after the first block, blocks are mostly matches into
        // the blocks before them.
        let pattern = pseudo_random(3000, 9);
        let data: Vec<u8> = pattern.iter().copied().cycle().take(100_000).collect();
        let info = FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_mode(BlockMode::Linked);
        let f = encode(info, &data, 4000);
        assert!(f.len() < 10_000, "{} bytes", f.len());
        assert_eq!(decode(&f, data.len()).unwrap(), data);
        // The same blocks read as independent ones refer to data they do not have.
        let mut independent = frame(0x60, 0x40, &[], &[]);
        independent.extend_from_slice(&f[7..]);
        assert!(
            message(&independent, data.len()).starts_with("invalid LZ4 frame: block 1 at offset ")
        );
        assert!(reference_decode(&independent).is_none());
    }

    #[test]
    fn corrupted_checksums_are_rejected() {
        let data = pseudo_random(5000, 1).repeat(4);
        let info = FrameInfo::new()
            .block_checksums(true)
            .content_checksum(true);
        let f = encode(info, &data, 7000);
        assert_eq!(decode(&f, data.len()).unwrap(), data);

        let mut bad = f.clone();
        bad[6] ^= 1;
        assert!(message(&bad, data.len())
            .starts_with("invalid LZ4 frame: frame descriptor at offset 6: header checksum is "));
        // The first block's checksum: after its 4-byte size word and its data.
        let size = u32::from_le_bytes(f[7..11].try_into().unwrap()) as usize;
        let mut bad = f.clone();
        bad[11 + size] ^= 1;
        assert!(message(&bad, data.len()).starts_with(&format!(
            "invalid LZ4 frame: block 0 at offset {}: block checksum is ",
            11 + size
        )));
        let mut bad = f.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x80;
        assert!(message(&bad, data.len()).starts_with(&format!(
            "invalid LZ4 frame: content checksum at offset {}: content checksum is ",
            last - 3
        )));
        for bad in [&f[..6], &f[..f.len() - 1]] {
            assert!(decode(bad, data.len()).is_err());
        }
    }

    #[test]
    fn frame_rules() {
        let end = [0u8; 4];
        let good = [block(&ZEROS_100_BLOCK), end.to_vec()].concat();
        // 0x60: version 01, independent blocks. 0x70: 4 MiB blocks.
        assert_eq!(
            decode(&frame(0x60, 0x70, &[], &good), 100).unwrap(),
            [0; 100]
        );
        assert_eq!(
            decode(&frame(0x40, 0x40, &[], &good), 100).unwrap(),
            [0; 100]
        );
        // Content size equal to uncompressed_length.
        let size = 100u64.to_le_bytes();
        assert_eq!(
            decode(&frame(0x68, 0x40, &size, &good), 100).unwrap(),
            [0; 100]
        );
        // A stored block, and a frame of no blocks.
        let raw = [stored(b"hello"), end.to_vec()].concat();
        assert_eq!(decode(&frame(0x60, 0x40, &[], &raw), 5).unwrap(), b"hello");
        assert_eq!(decode(&frame(0x60, 0x40, &[], &end), 0).unwrap(), b"");

        let cases: Vec<(Vec<u8>, usize, &str)> = vec![
            (
                b"\x50\x2a\x4d\x18\0\0\0\0".to_vec(),
                0,
                "magic number at offset 0: 0x184d2a50 starts a skippable frame, which holds no data",
            ),
            (
                frame(0x60, 0x40, &[], &[])[..5].to_vec(),
                0,
                "frame descriptor at offset 4: frame descriptor needs 2 bytes but only 1 remain",
            ),
            (
                frame(0xa0, 0x40, &[], &good),
                100,
                "frame descriptor at offset 4: version bits are 10, only 01 is defined",
            ),
            (
                frame(0x62, 0x40, &[], &good),
                100,
                "frame descriptor at offset 4: reserved bits of FLG byte 0x62 are set",
            ),
            (
                frame(0x60, 0x41, &[], &good),
                100,
                "frame descriptor at offset 5: reserved bits of BD byte 0x41 are set",
            ),
            (
                frame(0x60, 0x30, &[], &good),
                100,
                "frame descriptor at offset 5: block maximum size code 3 is undefined (expected 4 to 7)",
            ),
            (
                frame(0x61, 0x40, &[1, 2, 3, 4], &good),
                100,
                "frame descriptor at offset 6: the frame needs dictionary 0x04030201, and no dictionary is available",
            ),
            (
                frame(0x68, 0x40, &99u64.to_le_bytes(), &good),
                100,
                "frame descriptor at offset 6: content size is 99 but the chunk's uncompressed_length is 100",
            ),
            (
                frame(0x60, 0x40, &[], &[&300_000u32.to_le_bytes()[..], &[0; 16]].concat()),
                100,
                "block 0 at offset 7: block size 300000 exceeds the declared maximum 65536",
            ),
            (
                frame(0x60, 0x40, &[], &[block(&ZEROS_100_BLOCK), stored(&[0; 65_537])].concat()),
                65_637,
                "block 1 at offset 23: block size 65537 exceeds the declared maximum 65536",
            ),
            (
                frame(0x60, 0x40, &[], &block(&ZEROS_100_BLOCK)),
                100,
                "end of frame at offset 23: the payload ends without an end mark",
            ),
            (
                frame(0x60, 0x40, &[], &[block(&ZEROS_100_BLOCK), vec![0, 0]].concat()),
                100,
                "block 1 at offset 23: block size needs 4 bytes but only 2 remain",
            ),
            (
                frame(0x60, 0x40, &[], &[good.clone(), vec![0]].concat()),
                100,
                "end of frame at offset 27: 1 bytes follow the end of the frame",
            ),
            (
                // Two frames back to back.
                [frame(0x60, 0x40, &[], &good), frame(0x60, 0x40, &[], &good)].concat(),
                200,
                "end of frame at offset 27: 27 bytes follow the end of the frame",
            ),
            (
                frame(0x60, 0x40, &[], &[block(&ZEROS_100_BLOCK[..11]), end.to_vec()].concat()),
                100,
                "block 0 at offset 7: corrupt LZ4 block data: literal is out of bounds of the input",
            ),
            (
                frame(0x60, 0x40, &[], &[stored(b""), good.clone()].concat()),
                100,
                "block 0 at offset 7: decodes to no bytes (the reference decoder would stop reading here)",
            ),
            (
                frame(0x60, 0x40, &[], &[block(&[0]), good.clone()].concat()),
                100,
                "block 0 at offset 7: decodes to no bytes (the reference decoder would stop reading here)",
            ),
        ];
        for (f, n, expected) in cases {
            let got = message(&f, n);
            assert_eq!(got, format!("invalid LZ4 frame: {expected}"));
        }

        // What lz4_flex's FrameDecoder makes of frames refused above (see lz4_frame's doc): it
        // stops at an empty block, takes the end of input as an end mark, and ignores what
        // follows the end mark.
        let reference =
            |rest: &[Vec<u8>]| reference_decode(&frame(0x60, 0x40, &[], &rest.concat()));
        let (abc, def) = (stored(b"abc"), stored(b"def"));
        let cut_short = reference(&[abc.clone(), stored(b""), def.clone(), end.to_vec()]);
        assert_eq!(cut_short.as_deref(), Some(&b"abc"[..]));
        let no_end_mark = reference(&[abc.clone(), def]);
        assert_eq!(no_end_mark.as_deref(), Some(&b"abcdef"[..]));
        let trailing = reference(&[abc, end.to_vec(), vec![0xff; 5]]);
        assert_eq!(trailing.as_deref(), Some(&b"abc"[..]));

        // Output beyond uncompressed_length, in a compressed or a stored block.
        assert_eq!(
            decode(&frame(0x60, 0x40, &[], &good), 99),
            Err(DecompressError::TooLong { expected: 99 })
        );
        let raw = [stored(b"hello"), end.to_vec()].concat();
        assert_eq!(
            decode(&frame(0x60, 0x40, &[], &raw), 4),
            Err(DecompressError::TooLong { expected: 4 })
        );
        // A block that decodes to more than the declared block maximum, though the chunk has
        // room: 70000 zero bytes in one block of a 64 KiB frame.
        let big = lz4_flex::block::compress(&[0u8; 70_000]);
        let f = frame(0x60, 0x40, &[], &[block(&big), end.to_vec()].concat());
        assert_eq!(
            message(&f, 70_000),
            "invalid LZ4 frame: block 0 at offset 7: decodes to more than the declared maximum \
             block size 65536"
        );
        assert!(reference_decode(&f).is_none());
    }

    #[test]
    fn legacy_frames() {
        let legacy = |rest: &[u8]| {
            let mut f = super::super::lz4_frame::LEGACY_MAGIC.to_le_bytes().to_vec();
            f.extend_from_slice(rest);
            f
        };
        let one = legacy(&block(&ZEROS_100_BLOCK));
        assert_eq!(decode(&one, 100).unwrap(), [0; 100]);
        assert_eq!(reference_decode(&one).unwrap(), [0; 100]);
        assert_eq!(decode(&legacy(&[]), 0).unwrap(), b"");
        assert_eq!(
            decode(&one, 99),
            Err(DecompressError::TooLong { expected: 99 })
        );
        let cases: [(Vec<u8>, usize, &str); 4] = [
            (
                legacy(&[block(&ZEROS_100_BLOCK), block(&ZEROS_100_BLOCK)].concat()),
                200,
                "block 0 at offset 4: legacy block decodes to 100 bytes yet is not the last: \
                 every legacy block but the last decodes to 8388608 bytes",
            ),
            (
                legacy(&[0; 4]),
                0,
                "block 0 at offset 4: legacy block size 0 is outside 1 to 8388608",
            ),
            (
                legacy(&stored(b"hello")),
                5,
                "block 0 at offset 4: legacy block size 2147483653 is outside 1 to 8388608",
            ),
            (
                legacy(&block(&ZEROS_100_BLOCK)[..10]),
                100,
                "block 0 at offset 8: block data needs 12 bytes but only 6 remain",
            ),
        ];
        for (f, n, expected) in cases {
            assert_eq!(message(&f, n), format!("invalid LZ4 frame: {expected}"));
        }
    }
}
