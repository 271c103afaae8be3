//! Denial-of-service regression: reading a xorb allocates what its chunk headers announce, never
//! what an LZ4 frame inside declares.
//!
//! `lz4_flex::frame::FrameDecoder` sizes and zero-fills its buffers from the frame's declared
//! block maximum size (4 MiB, or 8 MiB for legacy frames), so a 280 KB xorb of 8192 chunks of 100
//! bytes, each a frame declaring 4 MiB blocks, made it allocate and clear 8192 × 8 MiB and took
//! about half a minute to parse. Rather than time the parse, this test installs a counting global
//! allocator and asserts that no single allocation made while parsing exceeds 1 MiB, and that
//! live heap memory stays under 4 MiB. It also runs `FrameDecoder` on one of the chunks under the same
//! counter, to show the counter does see the allocations the old decoder made.
//!
//! The crafted xorbs are *accepted*: each chunk is a valid LZ4 frame (a 4 MiB block maximum size
//! is legal, and is what the `lz4` command line writes by default) that decodes to exactly the
//! 100 bytes its header announces, and the reference client decodes it to the same bytes. What
//! was wrong was only the cost of reading them.
//!
//! Only allocations made by the measuring thread are counted, one measurement at a time, so the
//! test harness's other threads do not disturb the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Read;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use xet_format::hash::{xorb_hash, ChunkHash, ChunkRef};
use xet_format::xorb::{CompressionScheme, ParsedXorb, XorbForm};

// ---------------------------------------------------------------------------------------------
// The counting allocator

struct Counting;

/// Largest single allocation (or reallocation target) while measuring.
static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated minus bytes freed while measuring (negative if older memory was freed).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Highest `LIVE` seen while measuring.
static PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

fn measuring() -> bool {
    MEASURING.try_with(Cell::get).unwrap_or(false)
}

fn grew(size: usize) {
    if measuring() {
        LARGEST.fetch_max(size, Relaxed);
        let live = LIVE.fetch_add(size as isize, Relaxed) + size as isize;
        PEAK.fetch_max(live, Relaxed);
    }
}

fn shrank(size: usize) {
    if measuring() {
        LIVE.fetch_sub(size as isize, Relaxed);
    }
}

// A global allocator cannot be written without unsafe code: this one only counts, and hands
// every call to the system allocator unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            // Counted as a new block then the old one freed: a moving realloc holds both.
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Debug, Clone, Copy)]
struct Usage {
    largest: usize,
    peak: isize,
}

/// Tests run on parallel threads: one measurement at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `f` on this thread, counting its allocations.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Usage) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    LARGEST.store(0, Relaxed);
    LIVE.store(0, Relaxed);
    PEAK.store(0, Relaxed);
    MEASURING.with(|m| m.set(true));
    let out = f();
    MEASURING.with(|m| m.set(false));
    let usage = Usage {
        largest: LARGEST.load(Relaxed),
        peak: PEAK.load(Relaxed),
    };
    (out, usage)
}

const MIB: usize = 1024 * 1024;

/// The most any single allocation may take while parsing a crafted xorb.
const LARGEST_ALLOWED: usize = MIB;
/// The most live heap memory may reach while parsing one. What the reader needs for 8192 chunks
/// whatever they hold (its chunk list, the xorb hash's inputs, a 128 KiB scratch buffer) peaks
/// at about 1.7 MiB; `FrameDecoder` held 8 MiB (4 MiB-block frames) or 16 MiB (legacy) for
/// every chunk.
const PEAK_ALLOWED: isize = 4 * MIB as isize;

// ---------------------------------------------------------------------------------------------
// The crafted xorbs (the reviewer's reproducers dos_4mb.xorb and dos_legacy.xorb)

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// An LZ4 block of 100 zero bytes: one literal 0, then a match of 99 at offset 1.
const ZEROS_100_BLOCK: &str = "1f0001004a60000000000000";

/// Chunk header (LZ4, 27 bytes in, 100 out) and a frame with 4 MiB blocks (BD 0x70) holding the
/// block, then the end mark: 35 bytes.
fn chunk_4mib_blocks() -> Vec<u8> {
    unhex(&format!(
        "00 1b0000 01 640000  04224d18 60 70 73  0c000000 {ZEROS_100_BLOCK}  00000000"
    ))
}

/// Chunk header (LZ4, 20 bytes in, 100 out) and a legacy frame (8 MiB blocks): 28 bytes.
fn chunk_legacy() -> Vec<u8> {
    unhex(&format!(
        "00 140000 01 640000  02214c18  0c000000 {ZEROS_100_BLOCK}"
    ))
}

/// The upload form (chunk region, no footer) of 8192 copies of `chunk`.
fn xorb_of(chunk: &[u8]) -> Vec<u8> {
    chunk.repeat(8192)
}

/// The hash both crafted xorbs have: 8192 chunks of 100 zero bytes (the reviewer's runs of
/// `git-xet inspect` printed it too).
const HASH_OF_8192_ZERO_CHUNKS: &str =
    "6af523ddc3dcf948ca06e02498fa14e812d76384eb54f2a6e3847211ac4c3279";

/// Parses `bytes` under the counter and checks it is the xorb of 8192 chunks of 100 zero bytes.
fn parse_crafted(bytes: &[u8], payload_len: u64) -> Usage {
    let (parsed, usage) = measure(|| ParsedXorb::parse(bytes));
    let p = parsed.expect("the crafted xorb is valid");
    assert_eq!(p.form(), XorbForm::Upload);
    assert_eq!(p.num_chunks(), 8192);
    assert_eq!(p.uncompressed_len(), 8192 * 100);
    let zeros = ChunkHash::of(&[0u8; 100]);
    for c in p.chunks() {
        assert_eq!(c.hash, zeros);
        assert_eq!(c.scheme, CompressionScheme::Lz4);
        assert_eq!(c.compressed_len(), payload_len);
    }
    assert_eq!(p.hash(), xorb_hash(&vec![ChunkRef::new(zeros, 100); 8192]));
    assert_eq!(p.hash().to_hex(), HASH_OF_8192_ZERO_CHUNKS);
    assert_eq!(p.extract(0..8192).unwrap(), vec![0u8; 8192 * 100]);
    usage
}

#[test]
fn crafted_lz4_frames_cost_what_the_chunk_headers_announce() {
    // The reproducers: 8192 × 35 = 286720 bytes and 8192 × 28 = 229376 bytes.
    let four_mib = xorb_of(&chunk_4mib_blocks());
    let legacy = xorb_of(&chunk_legacy());
    assert_eq!((four_mib.len(), legacy.len()), (286_720, 229_376));

    let usage = parse_crafted(&four_mib, 27);
    eprintln!("4 MiB-block frames: {usage:?}");
    assert!(usage.largest <= LARGEST_ALLOWED, "{usage:?}");
    assert!(usage.peak <= PEAK_ALLOWED, "{usage:?}");

    let usage = parse_crafted(&legacy, 20);
    eprintln!("legacy frames: {usage:?}");
    assert!(usage.largest <= LARGEST_ALLOWED, "{usage:?}");
    assert!(usage.peak <= PEAK_ALLOWED, "{usage:?}");

    // The counter sees what the old decoder (lz4_flex's FrameDecoder) allocates for one chunk.
    for chunk in [chunk_4mib_blocks(), chunk_legacy()] {
        let payload = &chunk[8..];
        let (decoded, usage) = measure(|| {
            let mut out = Vec::new();
            lz4_flex::frame::FrameDecoder::new(payload)
                .read_to_end(&mut out)
                .map(|_| out)
        });
        assert_eq!(decoded.unwrap(), vec![0u8; 100]);
        eprintln!("FrameDecoder, one chunk: {usage:?}");
        assert!(usage.largest >= 4 * MIB, "{usage:?}");
    }
}

#[test]
fn a_frame_decoding_past_the_chunk_stops_at_the_chunk() {
    // One chunk announcing 131072 bytes whose frame (4 MiB blocks) decodes to 4 MiB of zeros:
    // decoding stops at 131072 bytes and the chunk is rejected.
    let block = lz4_flex::block::compress(&vec![0u8; 4 * MIB]);
    let mut payload = unhex("04224d18 60 70 73");
    payload.extend_from_slice(&(block.len() as u32).to_le_bytes());
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0; 4]);
    let mut bytes = vec![0, 0, 0, 0, 1, 0, 0, 2];
    bytes[1..4].copy_from_slice(&(payload.len() as u32).to_le_bytes()[..3]);
    bytes.extend_from_slice(&payload);

    let (parsed, usage) = measure(|| ParsedXorb::parse(&bytes).map(|p| p.num_chunks()));
    eprintln!("4 MiB bomb in one chunk: {usage:?}");
    assert_eq!(
        parsed.unwrap_err().to_string(),
        "chunk 0 at offset 0: decompresses to more than uncompressed_length 131072"
    );
    assert!(usage.largest <= LARGEST_ALLOWED, "{usage:?}");
    assert!(usage.peak <= PEAK_ALLOWED, "{usage:?}");
}
