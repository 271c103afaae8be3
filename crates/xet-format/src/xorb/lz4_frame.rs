//! LZ4 frame decoding whose memory and work are bounded by the chunk, never by what the frame
//! declares (docs/format.md §3.3).
//!
//! The reference client decodes a chunk payload with `lz4_flex::frame::FrameDecoder`, which
//! allocates and zero-fills buffers sized from the block maximum size the frame *declares* (4 MiB
//! for BD code 7, 8 MiB for a legacy frame), however short the chunk. A 280 KB xorb of 8192 tiny
//! chunks declaring 4 MiB blocks took half a minute to parse that way. This module parses the
//! frame itself and decodes each block with `lz4_flex::block` straight into a slice of exactly the
//! chunk header's `uncompressed_length` bytes: memory is that slice (≤ 128 KiB), work is linear in
//! the payload plus that slice, and no size read from the frame is ever allocated.
//!
//! Offsets in errors count from the start of the payload (the frame's first byte).
//!
//! # Frame (magic `0x184D2204`)
//!
//! | Offset | Size | Field | Rule |
//! |---|---|---|---|
//! | 0 | 4 | magic | `04 22 4d 18` |
//! | 4 | 1 | FLG | bits 7-6 version, must be `01`; bit 5 blocks independent; bit 4 block checksums; bit 3 content size present; bit 2 content checksum; bit 1 reserved, must be 0; bit 0 dictionary id present |
//! | 5 | 1 | BD | bits 6-4 block maximum size: 4 = 64 KiB, 5 = 256 KiB, 6 = 1 MiB, 7 = 4 MiB (others rejected); bits 7 and 3-0 reserved, must be 0 |
//! | 6 | 0 or 8 | content size | u64 LE, if FLG bit 3; must equal `uncompressed_length` |
//! | 6 or 14 | 0 or 4 | dictionary id | u32 LE, if FLG bit 0; rejected: no dictionary is available |
//! | D | 1 | header checksum | `(xxh32(bytes 4..D, seed 0) >> 8) & 0xff`, verified |
//! | D + 1 | … | data blocks | as below, until the end mark |
//! | E | 4 | end mark | u32 LE 0 |
//! | E + 4 | 0 or 4 | content checksum | u32 LE, if FLG bit 2: xxh32 (seed 0) of the decoded content, verified |
//! | | | end of payload | nothing may follow |
//!
//! A data block:
//!
//! | Offset | Size | Field | Rule |
//! |---|---|---|---|
//! | 0 | 4 | block size | u32 LE; bit 31 set = data stored uncompressed; bits 30-0 = data length, at most the block maximum size; the whole word 0 is the end mark |
//! | 4 | length | data | an LZ4 block (or the bytes themselves if stored) decoding to 1 to block-maximum-size bytes |
//! | 4 + length | 0 or 4 | block checksum | u32 LE, if FLG bit 4: xxh32 (seed 0) of the data as stored, verified |
//!
//! Linked blocks (FLG bit 5 clear) may copy from the last 64 KiB decoded before them in the frame;
//! independent blocks only from themselves.
//!
//! # Legacy frame (magic `0x184C2102`)
//!
//! | Offset | Size | Field | Rule |
//! |---|---|---|---|
//! | 0 | 4 | magic | `02 21 4c 18` |
//! | 4 | 4 | block size | u32 LE, 1 to 8 MiB: the compressed length of the block |
//! | 8 | size | data | an LZ4 block decoding to 1 byte to 8 MiB |
//! | … | | more blocks | until the end of the payload |
//!
//! No descriptor, checksums or end mark. Every block but the last decodes to exactly 8 MiB, so a
//! chunk (≤ 128 KiB) holds at most one. Legacy frames are accepted because the reference decoder
//! accepts them; their output is capped like any other.
//!
//! # Compared with the reference decoder
//!
//! Every payload accepted here is accepted by `FrameDecoder` and decodes to the same bytes (same
//! block decoder: `lz4_flex` with `safe-decode`, as xet-core builds it). Some payloads it accepts
//! are refused here, because a server must never store a chunk that some reader could decode
//! differently, and the reference writer (`FrameEncoder`) never produces them:
//!
//! - a frame without an end mark, or with bytes after it (`FrameDecoder` ignores what follows the
//!   first frame, and takes the end of input as an end mark);
//! - a data block that decodes to nothing (`FrameDecoder`'s reader reports end of stream there and
//!   silently drops the rest of the frame);
//! - legacy block sizes of 0 or with bit 31 set (`FrameDecoder` reads them as an end mark and a
//!   stored block, which the legacy format does not have);
//! - a payload too short to hold a magic number and descriptor (`FrameDecoder` reads 4 to 6 such
//!   bytes as an empty stream).

use std::fmt;
use std::hash::Hasher as _;
use std::ops::RangeInclusive;

// xxh32 comes from `twox-hash` rather than `xxhash-rust`: `lz4_flex`'s `frame` feature already
// depends on it (same major version, same `xxhash32` feature), so it adds no crate to the build
// and checksums are computed by the very code the reference encoder uses to write them.
use lz4_flex::block::{decompress_into, decompress_into_with_dict, DecompressError as BlockError};
use twox_hash::XxHash32;

use super::compress::DecompressError;
use crate::cursor::{Cursor, Truncated};

/// Magic number of an LZ4 frame.
pub const FRAME_MAGIC: u32 = 0x184D_2204;
/// Magic number of a legacy LZ4 frame.
pub const LEGACY_MAGIC: u32 = 0x184C_2102;
/// Magic numbers of skippable frames (no data; refused).
const SKIPPABLE_MAGIC: RangeInclusive<u32> = 0x184D_2A50..=0x184D_2A5F;

const FLG_VERSION_SHIFT: u8 = 6;
const FLG_INDEPENDENT_BLOCKS: u8 = 0b0010_0000;
const FLG_BLOCK_CHECKSUMS: u8 = 0b0001_0000;
const FLG_CONTENT_SIZE: u8 = 0b0000_1000;
const FLG_CONTENT_CHECKSUM: u8 = 0b0000_0100;
const FLG_RESERVED: u8 = 0b0000_0010;
const FLG_DICTIONARY_ID: u8 = 0b0000_0001;
const BD_BLOCK_SIZE_SHIFT: u8 = 4;
const BD_RESERVED: u8 = 0b1000_1111;
/// Bit 31 of a block size: the block is stored uncompressed.
const STORED_BIT: u32 = 1 << 31;

/// How far back a match may reach (LZ4 offsets are 16-bit, at most 65535).
const WINDOW: usize = 64 * 1024;
/// Decoded size of every legacy block but the last (and the most the last may decode to).
const LEGACY_BLOCK_SIZE: u32 = 8 * 1024 * 1024;

/// The part of a frame where a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FramePart {
    /// The 4-byte magic number.
    Magic,
    /// FLG, BD, the optional fields and the header checksum.
    Descriptor,
    /// Data block `n` (0-based): its size word, data and checksum.
    Block(usize),
    /// The content checksum after the end mark.
    ContentChecksum,
    /// Where the frame should end: the end mark, and the end of the payload after the frame.
    End,
}

impl fmt::Display for FramePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Magic => f.write_str("magic number"),
            Self::Descriptor => f.write_str("frame descriptor"),
            Self::Block(n) => write!(f, "block {n}"),
            Self::ContentChecksum => f.write_str("content checksum"),
            Self::End => f.write_str("end of frame"),
        }
    }
}

/// What is wrong with an LZ4 frame (the `problem` of [`Lz4FrameError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameProblem {
    #[error("{what} needs {needed} bytes but only {available} remain")]
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    #[error("{0:#010x} is neither the LZ4 frame magic 0x184d2204 nor the legacy magic 0x184c2102")]
    Magic(u32),
    #[error("{0:#010x} starts a skippable frame, which holds no data")]
    Skippable(u32),
    #[error("version bits are {0:02b}, only 01 is defined")]
    Version(u8),
    #[error("reserved bits of {field} byte {value:#04x} are set")]
    ReservedBits { field: &'static str, value: u8 },
    #[error("block maximum size code {0} is undefined (expected 4 to 7)")]
    BlockMaxSizeCode(u8),
    #[error("header checksum is {stored:#04x} but the descriptor hashes to {computed:#04x}")]
    HeaderChecksum { stored: u8, computed: u8 },
    #[error("the frame needs dictionary {0:#010x}, and no dictionary is available")]
    Dictionary(u32),
    #[error("content size is {declared} but the chunk's uncompressed_length is {expected}")]
    ContentSize { declared: u64, expected: u32 },
    #[error("block size {size} exceeds the declared maximum {max}")]
    BlockTooBig { size: u32, max: u32 },
    #[error("legacy block size {0} is outside 1 to 8388608")]
    LegacyBlockSize(u32),
    #[error("block checksum is {stored:#010x} but the block hashes to {computed:#010x}")]
    BlockChecksum { stored: u32, computed: u32 },
    #[error("decodes to more than the declared maximum block size {max}")]
    DecodedTooBig { max: u32 },
    #[error("corrupt LZ4 block data: {0}")]
    Corrupt(String),
    #[error("decodes to no bytes (the reference decoder would stop reading here)")]
    EmptyBlock,
    #[error("legacy block decodes to {decoded} bytes yet is not the last: every legacy block but the last decodes to 8388608 bytes")]
    LegacyBlockNotFull { decoded: usize },
    #[error("content checksum is {stored:#010x} but the content hashes to {computed:#010x}")]
    ContentChecksum { stored: u32, computed: u32 },
    #[error("the payload ends without an end mark")]
    MissingEndMark,
    #[error("{count} bytes follow the end of the frame")]
    TrailingBytes { count: usize },
}

/// An invalid LZ4 frame: which part, at which payload offset, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part} at offset {offset}: {problem}")]
pub struct Lz4FrameError {
    pub part: FramePart,
    /// Offset from the start of the payload.
    pub offset: u64,
    pub problem: FrameProblem,
}

fn invalid(part: FramePart, offset: u64, problem: FrameProblem) -> DecompressError {
    DecompressError::Lz4(Lz4FrameError {
        part,
        offset,
        problem,
    })
}

fn truncated(part: FramePart, t: Truncated) -> DecompressError {
    invalid(
        part,
        t.offset,
        FrameProblem::Truncated {
            what: t.what,
            needed: t.needed,
            available: t.available,
        },
    )
}

fn xxh32(data: &[u8]) -> u32 {
    XxHash32::oneshot(0, data)
}

/// The caller's output slice, `uncompressed_length` bytes, filled from the front.
struct Output<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// `buf.len()` as the chunk header gave it, for errors.
    expected: u32,
}

impl Output<'_> {
    fn written(&self) -> &[u8] {
        let end = self.len.min(self.buf.len());
        &self.buf[..end]
    }

    fn room(&self) -> usize {
        self.buf.len().saturating_sub(self.len)
    }

    /// Appends a stored block; `TooLong` if it does not fit.
    fn push(&mut self, data: &[u8]) -> Result<usize, DecompressError> {
        let end = self.len.saturating_add(data.len());
        match self.buf.get_mut(self.len..end) {
            Some(dst) => {
                dst.copy_from_slice(data);
                self.len = end;
                Ok(data.len())
            }
            None => Err(DecompressError::TooLong {
                expected: self.expected,
            }),
        }
    }

    /// Decodes one LZ4 block after what is already written, producing at most `max` bytes.
    /// `linked`: matches may reach into the last [`WINDOW`] bytes already written.
    fn decode(&mut self, data: &[u8], max: usize, linked: bool) -> Result<usize, DecodeFailure> {
        let room = self.room();
        let start = self.len.min(self.buf.len());
        let (prefix, rest) = self.buf.split_at_mut(start);
        let cap = max.min(rest.len());
        let dst = &mut rest[..cap];
        let result = if linked {
            let dict = &prefix[prefix.len().saturating_sub(WINDOW)..];
            decompress_into_with_dict(data, dst, dict)
        } else {
            decompress_into(data, dst)
        };
        match result {
            Ok(n) => {
                self.len = start + n.min(cap);
                Ok(n)
            }
            // The chunk's room ran out before the block maximum did (or both at once).
            Err(BlockError::OutputTooSmall { .. }) if room <= max => Err(DecodeFailure::TooLong),
            Err(BlockError::OutputTooSmall { .. }) => Err(DecodeFailure::OverMax),
            Err(e) => Err(DecodeFailure::Corrupt(e.to_string())),
        }
    }
}

enum DecodeFailure {
    /// Would write past `uncompressed_length`.
    TooLong,
    /// Would write more than the block maximum size.
    OverMax,
    Corrupt(String),
}

/// Decodes the one LZ4 frame that `payload` must be into `out`, whose length is the chunk
/// header's `uncompressed_length`. Succeeds only if the frame is valid, nothing follows it, and it
/// decodes to exactly `out.len()` bytes. Allocates nothing but an error message.
pub(super) fn decode_frame(payload: &[u8], out: &mut [u8]) -> Result<(), DecompressError> {
    let expected = u32::try_from(out.len()).unwrap_or(u32::MAX);
    let mut out = Output {
        buf: out,
        len: 0,
        expected,
    };
    let mut c = Cursor::new(payload);
    let magic = c
        .u32("magic number")
        .map_err(|t| truncated(FramePart::Magic, t))?;
    match magic {
        FRAME_MAGIC => decode_blocks(&mut c, &mut out)?,
        LEGACY_MAGIC => decode_legacy(&mut c, &mut out)?,
        m if SKIPPABLE_MAGIC.contains(&m) => {
            return Err(invalid(FramePart::Magic, 0, FrameProblem::Skippable(m)))
        }
        m => return Err(invalid(FramePart::Magic, 0, FrameProblem::Magic(m))),
    }
    if !c.is_empty() {
        return Err(invalid(
            FramePart::End,
            c.offset(),
            FrameProblem::TrailingBytes {
                count: c.remaining(),
            },
        ));
    }
    if out.len < out.buf.len() {
        return Err(DecompressError::TooShort {
            expected,
            actual: out.len,
        });
    }
    Ok(())
}

/// The descriptor, blocks, end mark and content checksum of a frame whose magic was just read.
fn decode_blocks(c: &mut Cursor<'_>, out: &mut Output<'_>) -> Result<(), DecompressError> {
    let format = read_descriptor(c, out.expected)?;
    let mut index = 0usize;
    while let Next::Block = decode_data_block(c, out, &format, index)? {
        index += 1;
    }
    if format.content_checksum {
        check_content_checksum(c, out)?;
    }
    Ok(())
}

/// What a frame descriptor declares about the data blocks and checksums that follow it.
struct BlockFormat {
    /// The block maximum size (BD bits 6-4).
    max_block: u32,
    /// Matches may reach into earlier blocks (FLG bit 5 clear).
    linked: bool,
    /// Each block is followed by its checksum (FLG bit 4).
    block_checksums: bool,
    /// The end mark is followed by the content checksum (FLG bit 2).
    content_checksum: bool,
}

/// What [`decode_data_block`] found at the cursor.
enum Next {
    /// A data block, decoded; another block or the end mark follows.
    Block,
    /// The end mark.
    EndMark,
}

/// Reads and checks the frame descriptor at the cursor: FLG and BD, the optional content size
/// (which must equal `expected`, the chunk's `uncompressed_length`) and dictionary id (refused),
/// and the header checksum over all of them.
fn read_descriptor(c: &mut Cursor<'_>, expected: u32) -> Result<BlockFormat, DecompressError> {
    use FramePart::Descriptor;
    let desc_at = c.offset();
    let [flg, bd] = c
        .array::<2>("frame descriptor")
        .map_err(|t| truncated(Descriptor, t))?;
    let mut hasher = XxHash32::with_seed(0);
    hasher.write(&[flg, bd]);
    let max_block = check_flg_bd(flg, bd, desc_at)?;

    let content_size_at = c.offset();
    let has_content_size = flg & FLG_CONTENT_SIZE != 0;
    let content_size = optional_field::<8>(c, has_content_size, "content size", &mut hasher)?
        .map(u64::from_le_bytes);
    let dict_at = c.offset();
    let has_dict_id = flg & FLG_DICTIONARY_ID != 0;
    let dict_id =
        optional_field::<4>(c, has_dict_id, "dictionary id", &mut hasher)?.map(u32::from_le_bytes);
    check_header_checksum(c, &hasher)?;
    if let Some(id) = dict_id {
        return Err(invalid(Descriptor, dict_at, FrameProblem::Dictionary(id)));
    }
    if let Some(declared) = content_size {
        if declared != u64::from(expected) {
            let problem = FrameProblem::ContentSize { declared, expected };
            return Err(invalid(Descriptor, content_size_at, problem));
        }
    }
    Ok(BlockFormat {
        max_block,
        linked: flg & FLG_INDEPENDENT_BLOCKS == 0,
        block_checksums: flg & FLG_BLOCK_CHECKSUMS != 0,
        content_checksum: flg & FLG_CONTENT_CHECKSUM != 0,
    })
}

/// Checks the FLG and BD bytes read at `desc_at` (version, reserved bits, block maximum size
/// code) and returns the block maximum size BD declares.
fn check_flg_bd(flg: u8, bd: u8, desc_at: u64) -> Result<u32, DecompressError> {
    use FramePart::Descriptor;
    let version = flg >> FLG_VERSION_SHIFT;
    if version != 0b01 {
        return Err(invalid(Descriptor, desc_at, FrameProblem::Version(version)));
    }
    if flg & FLG_RESERVED != 0 {
        let problem = FrameProblem::ReservedBits {
            field: "FLG",
            value: flg,
        };
        return Err(invalid(Descriptor, desc_at, problem));
    }
    if bd & BD_RESERVED != 0 {
        let problem = FrameProblem::ReservedBits {
            field: "BD",
            value: bd,
        };
        return Err(invalid(Descriptor, desc_at + 1, problem));
    }
    match bd >> BD_BLOCK_SIZE_SHIFT {
        4 => Ok(64 * 1024),
        5 => Ok(256 * 1024),
        6 => Ok(1024 * 1024),
        7 => Ok(4 * 1024 * 1024),
        code => {
            let problem = FrameProblem::BlockMaxSizeCode(code);
            Err(invalid(Descriptor, desc_at + 1, problem))
        }
    }
}

/// Reads an optional `N`-byte descriptor field (`what`) if FLG says it is `present`, adding its
/// bytes to the header checksum.
fn optional_field<const N: usize>(
    c: &mut Cursor<'_>,
    present: bool,
    what: &'static str,
    hasher: &mut XxHash32,
) -> Result<Option<[u8; N]>, DecompressError> {
    if !present {
        return Ok(None);
    }
    let bytes = c
        .array::<N>(what)
        .map_err(|t| truncated(FramePart::Descriptor, t))?;
    hasher.write(&bytes);
    Ok(Some(bytes))
}

/// Reads the header checksum byte and checks it against the descriptor bytes in `hasher`.
fn check_header_checksum(c: &mut Cursor<'_>, hasher: &XxHash32) -> Result<(), DecompressError> {
    let checksum_at = c.offset();
    let stored = c
        .u8("header checksum")
        .map_err(|t| truncated(FramePart::Descriptor, t))?;
    // The second byte of the xxh32 (the shift leaves 24 bits; the cast keeps the low 8).
    let computed = (hasher.finish_32() >> 8) as u8;
    if stored != computed {
        let problem = FrameProblem::HeaderChecksum { stored, computed };
        return Err(invalid(FramePart::Descriptor, checksum_at, problem));
    }
    Ok(())
}

/// Reads data block `index` at the cursor, or the end mark: the size word, the data (checked
/// against the block maximum size before it is taken), the block checksum if the frame has them;
/// then decodes the data after what `out` holds. A payload that ends where a size word should
/// be lacks its end mark.
fn decode_data_block(
    c: &mut Cursor<'_>,
    out: &mut Output<'_>,
    format: &BlockFormat,
    index: usize,
) -> Result<Next, DecompressError> {
    let part = FramePart::Block(index);
    let at = c.offset();
    if c.is_empty() {
        return Err(invalid(FramePart::End, at, FrameProblem::MissingEndMark));
    }
    let word = c.u32("block size").map_err(|t| truncated(part, t))?;
    if word == 0 {
        return Ok(Next::EndMark);
    }
    let size = word & !STORED_BIT;
    if size > format.max_block {
        let problem = FrameProblem::BlockTooBig {
            size,
            max: format.max_block,
        };
        return Err(invalid(part, at, problem));
    }
    let data = c
        .take(u64::from(size), "block data")
        .map_err(|t| truncated(part, t))?;
    if format.block_checksums {
        let checksum_at = c.offset();
        let stored = c.u32("block checksum").map_err(|t| truncated(part, t))?;
        let computed = xxh32(data);
        if stored != computed {
            let problem = FrameProblem::BlockChecksum { stored, computed };
            return Err(invalid(part, checksum_at, problem));
        }
    }
    let decoded = if word & STORED_BIT != 0 {
        out.push(data)?
    } else {
        decode_block(out, data, format.max_block, format.linked, part, at)?
    };
    if decoded == 0 {
        return Err(invalid(part, at, FrameProblem::EmptyBlock));
    }
    Ok(Next::Block)
}

/// Reads the content checksum after the end mark and checks it against everything decoded.
fn check_content_checksum(c: &mut Cursor<'_>, out: &Output<'_>) -> Result<(), DecompressError> {
    let at = c.offset();
    let stored = c
        .u32("content checksum")
        .map_err(|t| truncated(FramePart::ContentChecksum, t))?;
    let computed = xxh32(out.written());
    if stored != computed {
        let problem = FrameProblem::ContentChecksum { stored, computed };
        return Err(invalid(FramePart::ContentChecksum, at, problem));
    }
    Ok(())
}

/// Decodes one compressed block, mapping failures to errors about block `part` at `at`.
fn decode_block(
    out: &mut Output<'_>,
    data: &[u8],
    max: u32,
    linked: bool,
    part: FramePart,
    at: u64,
) -> Result<usize, DecompressError> {
    // `max` ≤ 8 MiB fits in usize on every supported target; saturate rather than assume.
    let max_usize = usize::try_from(max).unwrap_or(usize::MAX);
    out.decode(data, max_usize, linked).map_err(|f| match f {
        DecodeFailure::TooLong => DecompressError::TooLong {
            expected: out.expected,
        },
        DecodeFailure::OverMax => invalid(part, at, FrameProblem::DecodedTooBig { max }),
        DecodeFailure::Corrupt(message) => invalid(part, at, FrameProblem::Corrupt(message)),
    })
}

/// The blocks of a legacy frame whose magic was just read, up to the end of the payload.
fn decode_legacy(c: &mut Cursor<'_>, out: &mut Output<'_>) -> Result<(), DecompressError> {
    // (index, offset, decoded length) of the previous block.
    let mut previous: Option<(usize, u64, usize)> = None;
    let mut index = 0usize;
    while !c.is_empty() {
        if let Some((prev_index, prev_at, decoded)) = previous {
            // Only an 8 MiB block may be followed by another, and no chunk holds 8 MiB.
            let problem = FrameProblem::LegacyBlockNotFull { decoded };
            return Err(invalid(FramePart::Block(prev_index), prev_at, problem));
        }
        let part = FramePart::Block(index);
        let at = c.offset();
        let size = c.u32("block size").map_err(|t| truncated(part, t))?;
        if size == 0 || size > LEGACY_BLOCK_SIZE {
            return Err(invalid(part, at, FrameProblem::LegacyBlockSize(size)));
        }
        let data = c
            .take(u64::from(size), "block data")
            .map_err(|t| truncated(part, t))?;
        let decoded = decode_block(out, data, LEGACY_BLOCK_SIZE, false, part, at)?;
        if decoded == 0 {
            return Err(invalid(part, at, FrameProblem::EmptyBlock));
        }
        previous = Some((index, at, decoded));
        index += 1;
    }
    Ok(())
}
