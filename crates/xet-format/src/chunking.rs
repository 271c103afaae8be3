//! Gearhash content-defined chunking (docs/format.md §2): where a byte stream is cut into chunks.
//!
//! This module owns the chunking constants, the gear table, and three ways to find the chunk
//! boundaries of a byte sequence, all of which produce exactly the same cuts:
//!
//! - [`chunk_boundaries`]: the canonical loop of §2.2 with the skip-ahead of §2.3. Short and
//!   obviously right; it is the reference the other two are tested against.
//! - [`Chunker`]: a streaming chunker fed blocks of any size. It is built from two halves that
//!   pipelines can also use on their own: a [`CandidateScanner`] finds *candidates* (positions
//!   where the gear hash of the 64-byte window ending there has its top 16 bits zero) with
//!   several interleaved hash lanes, optionally on every rayon thread; a [`BoundaryWalk`] applies
//!   the minimum/maximum size rules in a cheap sequential walk over the candidates.
//! - [`chunk_boundaries_parallel`]: a one-shot [`Chunker`] using every rayon thread.
//!
//! Why candidates are enough: the canonical loop resets its hash at each boundary, but it only
//! tests the hash once the chunk holds at least [`MIN_CHUNK_SIZE`] bytes, and by then the 64-bit
//! gear hash depends only on the last [`WINDOW`] bytes (older bytes have been shifted out). So
//! every tested value equals the window hash at that position, which does not depend on where
//! the chunk started and can be computed for any part of the input independently.
//!
//! The gear hash is hand-written rather than taken from a crate because it must match the format's
//! table and loop byte for byte, and because the scanning kernel's speed is the point of this
//! module. Pure code: no I/O; the parallel scan uses rayon threads but its output does not depend
//! on scheduling.

use rayon::prelude::*;

/// The target (average) chunk size of §2.1.
pub const TARGET_CHUNK_SIZE: usize = 65536;
/// No chunk except the last one of an input is shorter than this (`TARGET_CHUNK_SIZE / 8`).
pub const MIN_CHUNK_SIZE: usize = TARGET_CHUNK_SIZE / 8;
/// No chunk is longer than this (`TARGET_CHUNK_SIZE * 2`); a chunk reaching it is cut there.
pub const MAX_CHUNK_SIZE: usize = TARGET_CHUNK_SIZE * 2;
/// A position is a boundary candidate when `hash & BOUNDARY_MASK == 0` (the top 16 bits).
pub const BOUNDARY_MASK: u64 = 0xFFFF_0000_0000_0000;
/// The gear hash forgets a byte after this many further updates.
pub const WINDOW: usize = 64;

/// The gear table (the `DEFAULT_TABLE` of the `gearhash` crate 0.1.3), four values per line; a
/// unit test checks its SHA-256 against the one in docs/format.md §2.1.
#[rustfmt::skip]
pub static GEAR_TABLE: [u64; 256] = [
    0xb088d3a9e840f559, 0x5652c7f739ed20d6, 0x45b28969898972ab, 0x6b0a89d5b68ec777,
    0x368f573e8b7a31b7, 0x1dc636dce936d94b, 0x207a4c4e5554d5b6, 0xa474b34628239acb,
    0x3b06a83e1ca3b912, 0x90e78d6c2f02baf7, 0xe1c92df7150d9a8a, 0x8e95053a1086d3ad,
    0x5a2ef4f1b83a0722, 0xa50fac949f807fae, 0x0e7303eb80d8d681, 0x99b07edc1570ad0f,
    0x689d2fb555fd3076, 0x00005082119ea468, 0xc4b08306a88fcc28, 0x3eb0678af6374afd,
    0xf19f87ab86ad7436, 0xf2129fbfbe6bc736, 0x481149575c98a4ed, 0x0000010695477bc5,
    0x1fba37801a9ceacc, 0x3bf06fd663a49b6d, 0x99687e9782e3874b, 0x79a10673aa50d8e3,
    0xe4accf9e6211f420, 0x2520e71f87579071, 0x2bd5d3fd781a8a9b, 0x00de4dcddd11c873,
    0xeaa9311c5a87392f, 0xdb748eb617bc40ff, 0xaf579a8df620bf6f, 0x86a6e5da1b09c2b1,
    0xcc2fc30ac322a12e, 0x355e2afec1f74267, 0x2d99c8f4c021a47b, 0xbade4b4a9404cfc3,
    0xf7b518721d707d69, 0x3286b6587bf32c20, 0x0000b68886af270c, 0xa115d6e4db8a9079,
    0x484f7e9c97b2e199, 0xccca7bb75713e301, 0xbf2584a62bb0f160, 0xade7e813625dbcc8,
    0x000070940d87955a, 0x8ae69108139e626f, 0xbd776ad72fde38a2, 0xfb6b001fc2fcc0cf,
    0xc7a474b8e67bc427, 0xbaf6f11610eb5d58, 0x09cb1f5b6de770d1, 0xb0b219e6977d4c47,
    0x00ccbc386ea7ad4a, 0xcc849d0adf973f01, 0x73a3ef7d016af770, 0xc807d2d386bdbdfe,
    0x7f2ac9966c791730, 0xd037a86bc6c504da, 0xf3f17c661eaa609d, 0xaca626b04daae687,
    0x755a99374f4a5b07, 0x90837ee65b2caede, 0x6ee8ad93fd560785, 0x0000d9e11053edd8,
    0x9e063bb2d21cdbd7, 0x07ab77f12a01d2b2, 0xec550255e6641b44, 0x78fb94a8449c14c6,
    0xc7510e1bc6c0f5f5, 0x0000320b36e4cae3, 0x827c33262c8b1a2d, 0x14675f0b48ea4144,
    0x267bd3a6498deceb, 0xf1916ff982f5035e, 0x86221b7ff434fb88, 0x9dbecee7386f49d8,
    0xea58f8cac80f8f4a, 0x008d198692fc64d8, 0x6d38704fbabf9a36, 0xe032cb07d1e7be4c,
    0x228d21f6ad450890, 0x635cb1bfc02589a5, 0x4620a1739ca2ce71, 0xa7e7dfe3aae5fb58,
    0x0c10ca932b3c0deb, 0x2727fee884afed7b, 0xa2df1c6df9e2ab1f, 0x4dcdd1ac0774f523,
    0x000070ffad33e24e, 0xa2ace87bc5977816, 0x9892275ab4286049, 0xc2861181ddf18959,
    0xbb9972a042483e19, 0xef70cd3766513078, 0x00000513abfc9864, 0xc058b61858c94083,
    0x09e850859725e0de, 0x9197fb3bf83e7d94, 0x7e1e626d12b64bce, 0x520c54507f7b57d1,
    0xbee1797174e22416, 0x6fd9ac3222e95587, 0x0023957c9adfbf3e, 0xa01c7d7e234bbe15,
    0xaba2c758b8a38cbb, 0x0d1fa0ceec3e2b30, 0x0bb6a58b7e60b991, 0x4333dd5b9fa26635,
    0xc2fd3b7d4001c1a3, 0xfb41802454731127, 0x65a56185a50d18cb, 0xf67a02bd8784b54f,
    0x696f11dd67e65063, 0x00002022fca814ab, 0x8cd6be912db9d852, 0x695189b6e9ae8a57,
    0xee9453b50ada0c28, 0xd8fc5ea91a78845e, 0xab86bf191a4aa767, 0x0000c6b5c86415e5,
    0x267310178e08a22e, 0xed2d101b078bca25, 0x3b41ed84b226a8fb, 0x13e622120f28dc06,
    0xa315f5ebfb706d26, 0x8816c34e3301bace, 0xe9395b9cbb71fdae, 0x002ce9202e721648,
    0x4283db1d2bb3c91c, 0xd77d461ad2b1a6a5, 0xe2ec17e46eeb866b, 0xb8e0be4039fbc47c,
    0xdea160c4d5299d04, 0x7eec86c8d28c3634, 0x2119ad129f98a399, 0xa6ccf46b61a283ef,
    0x2c52cedef658c617, 0x2db4871169acdd83, 0x0000f0d6f39ecbe9, 0x3dd5d8c98d2f9489,
    0x8a1872a22b01f584, 0xf282a4c40e7b3cf2, 0x8020ec2ccb1ba196, 0x6693b6e09e59e313,
    0x0000ce19cc7c83eb, 0x20cb5735f6479c3b, 0x762ebf3759d75a5b, 0x207bfe823d693975,
    0xd77dc112339cd9d5, 0x9ba7834284627d03, 0x217dc513e95f51e9, 0xb27b1a29fc5e7816,
    0x00d5cd9831bb662d, 0x71e39b806d75734c, 0x7e572af006fb1a23, 0xa2734f2f6ae91f85,
    0xbf82c6b5022cddf2, 0x5c3beac60761a0de, 0xcdc893bb47416998, 0x6d1085615c187e01,
    0x77f8ae30ac277c5d, 0x917c6b81122a2c91, 0x5b75b699add16967, 0x0000cf6ae79a069b,
    0xf3c40afa60de1104, 0x2063127aa59167c3, 0x621de62269d1894d, 0xd188ac1de62b4726,
    0x107036e2154b673c, 0x0000b85f28553a1d, 0xf2ef4e4c18236f3d, 0xd9d6de6611b9f602,
    0xa1fc7955fb47911c, 0xeb85fd032f298dbd, 0xbe27502fb3befae1, 0xe3034251c4cd661e,
    0x441364d354071836, 0x0082b36c75f2983e, 0xb145910316fa66f0, 0x021c069c9847caf7,
    0x2910dfc75a4b5221, 0x735b353e1c57a8b5, 0xce44312ce98ed96c, 0xbc942e4506bdfa65,
    0xf05086a71257941b, 0xfec3b215d351cead, 0x00ae1055e0144202, 0xf54b40846f42e454,
    0x00007fd9c8bcbcc8, 0xbfbd9ef317de9bfe, 0xa804302ff2854e12, 0x39ce4957a5e5d8d4,
    0xffb9e2a45637ba84, 0x55b9ad1d9ea0818b, 0x00008acbf319178a, 0x48e2bfc8d0fbfb38,
    0x8be39841e848b5e8, 0x0e2712160696a08b, 0xd51096e84b44242a, 0x1101ba176792e13a,
    0xc22e770f4531689d, 0x1689eff272bbc56c, 0x00a92a197f5650ec, 0xbc765990bda1784e,
    0xc61441e392fcb8ae, 0x07e13a2ced31e4a0, 0x92cbe984234e9d4d, 0x8f4ff572bb7d8ac5,
    0x0b9670c00b963bd0, 0x62955a581a03eb01, 0x645f83e5ea000254, 0x41fce516cd88f299,
    0xbbda9748da7a98cf, 0x0000aab2fe4845fa, 0x19761b069bf56555, 0x8b8f5e8343b6ad56,
    0x3e5d1cfd144821d9, 0xec5c1e2ca2b0cd8f, 0xfaf7e0fea7fbb57f, 0x000000d3ba12961b,
    0xda3f90178401b18e, 0x70ff906de33a5feb, 0x0527d5a7c06970e7, 0x22d8e773607c13e9,
    0xc9ab70df643c3bac, 0xeda4c6dc8abe12e3, 0xecef1f410033e78a, 0x0024c2b274ac72cb,
    0x06740d954fa900b4, 0x1d7a299b323d6304, 0xb3c37cb298cbead5, 0xc986e3c76178739b,
    0x9fabea364b46f58a, 0x6da214c5af85cc56, 0x17a43ed8b7a38f84, 0x6eccec511d9adbeb,
    0xf9cab30913335afb, 0x4a5e60c5f415eed2, 0x00006967503672b4, 0x9da51d121454bb87,
    0x84321e13b9bbc816, 0xfb3d6fb6ab2fdd8d, 0x60305eed8e160a8d, 0xcbbf4b14e9946ce8,
    0x00004f63381b10c3, 0x07d5b7816fcc4e10, 0xe5a536726a6a8155, 0x57afb23447a07fdd,
    0x18f346f7abc9d394, 0x636dc655d61ad33d, 0xcc8bab4939f7f3f6, 0x63c7a906c1dd187b,
];

/// Chunk lengths as `u64`, for arithmetic on absolute stream offsets.
const MIN_LEN: u64 = MIN_CHUNK_SIZE as u64;
const MAX_LEN: u64 = MAX_CHUNK_SIZE as u64;

/// Interleaved hash lanes in the scanning kernel. Each lane's update depends on its previous
/// value (a 2-cycle chain per byte), so independent lanes keep the core's ALUs busy. Three lanes,
/// each advanced 8 bytes per loop iteration, measured fastest on Zen 3: about 3.0 GB/s on one
/// core with the data in cache, against 2.3-2.5 GB/s for four lanes (unrolled or not) and
/// 1.1 GB/s for a single lane.
const LANES: usize = 3;
/// Bytes each lane advances per loop iteration.
const UNROLL: usize = 8;
/// Below this many bytes per lane the kernel runs a single lane (warming up a lane costs 63
/// byte updates).
const MIN_LANE_LEN: usize = 4096;
/// Default length of the pieces a parallel [`Chunker`] or [`CandidateScanner`] hands to each
/// rayon task.
pub const DEFAULT_SEGMENT_LEN: usize = 1 << 20;

/// One gear-hash update: `h = (h << 1) + TABLE[byte]`, wrapping.
#[inline(always)]
fn step(h: u64, byte: u8) -> u64 {
    (h << 1).wrapping_add(GEAR_TABLE[byte as usize])
}

/// Whether a hash value allows a cut (its top 16 bits are zero).
#[inline(always)]
fn is_candidate(h: u64) -> bool {
    h & BOUNDARY_MASK == 0
}

/// The chunk end offsets of `data` by the canonical rule (§2.2), hashing only the last
/// [`WINDOW`] bytes before the first position that may be tested (§2.3). The last offset is
/// `data.len()`; empty input gives no chunks.
pub fn chunk_boundaries(data: &[u8]) -> Vec<usize> {
    let mut ends = Vec::with_capacity(data.len() / TARGET_CHUNK_SIZE + 1);
    let mut start = 0;
    while start < data.len() {
        let rest = &data[start..];
        if rest.len() <= MIN_CHUNK_SIZE {
            ends.push(data.len());
            break;
        }
        let limit = rest.len().min(MAX_CHUNK_SIZE);
        // The first test happens at length MIN_CHUNK_SIZE; the 63 bytes before it are hashed
        // without testing, which yields exactly the value the full loop would have there.
        let mut h = rest[MIN_CHUNK_SIZE - WINDOW..MIN_CHUNK_SIZE - 1]
            .iter()
            .fold(0, |h, &b| step(h, b));
        let len = rest[MIN_CHUNK_SIZE - 1..limit]
            .iter()
            .position(|&b| {
                h = step(h, b);
                is_candidate(h)
            })
            .map_or(limit, |p| MIN_CHUNK_SIZE + p);
        start += len;
        ends.push(start);
    }
    ends
}

/// The chunk end offsets of `data`, identical to [`chunk_boundaries`], computed on every rayon
/// thread.
pub fn chunk_boundaries_parallel(data: &[u8]) -> Vec<usize> {
    let mut chunker = Chunker::parallel();
    let mut ends = Vec::with_capacity(data.len() / TARGET_CHUNK_SIZE + 1);
    chunker.update(data, &mut ends);
    ends.extend(chunker.finish());
    // Every offset is at most data.len(), so it fits in usize.
    ends.into_iter().map(|e| e as usize).collect()
}

/// Finds boundary candidates: the positions where the gear hash of the 64-byte window ending
/// there allows a cut. Candidates do not depend on where chunks start, so any part of a stream
/// can be scanned on its own (given the 63 bytes before it) and the results concatenated.
///
/// Candidates are reported as end offsets: a candidate at byte `i` is reported as `i + 1`, the
/// end of the chunk a cut there would close. Candidates within the first 63 bytes of a stream
/// are reported from the shorter window; no chunk can be cut there anyway.
#[derive(Debug, Clone)]
pub struct CandidateScanner {
    /// The gear hash over everything scanned so far, never reset: from 64 bytes on, it is the
    /// window hash of the last 64 bytes.
    hash: u64,
    /// Stream offset of the next byte.
    pos: u64,
    /// `Some(len)`: split each block into rayon tasks of at least `len` bytes.
    segment_len: Option<usize>,
}

impl Default for CandidateScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl CandidateScanner {
    /// A scanner at the start of a stream, scanning on the calling thread.
    pub fn new() -> Self {
        Self {
            hash: 0,
            pos: 0,
            segment_len: None,
        }
    }

    /// A scanner that continues a stream at `offset`, given `preceding`, the bytes just before
    /// `offset` (only the last 63 matter). `None` if fewer than `min(offset, 63)` are given, since
    /// the first candidates could then be wrong.
    pub fn resume(offset: u64, preceding: &[u8]) -> Option<Self> {
        let needed = offset.min(WINDOW as u64 - 1) as usize;
        if preceding.len() < needed {
            return None;
        }
        Some(Self {
            hash: warm_up(preceding, preceding.len()),
            pos: offset,
            segment_len: None,
        })
    }

    /// Splits each scanned block into rayon tasks of at least `segment_len` bytes (raised to
    /// [`WINDOW`] if smaller); blocks shorter than two segments are scanned on the calling thread.
    pub fn with_segment_len(mut self, segment_len: usize) -> Self {
        self.segment_len = Some(segment_len.max(WINDOW));
        self
    }

    /// Stream offset of the next byte to scan.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Scans the next block, appending its candidates to `candidates` in increasing order.
    pub fn scan(&mut self, block: &[u8], candidates: &mut Vec<u64>) {
        self.hash = scan_block(block, self.hash, self.pos, self.segment_len, candidates);
        self.pos += block.len() as u64;
    }
}

/// The sequential half of chunking: walks over candidates in stream order and applies the
/// minimum and maximum chunk sizes, which yields the chunk boundaries. Cheap: its work is
/// proportional to the number of candidates and chunks, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundaryWalk {
    /// Start of the chunk in progress.
    chunk_start: u64,
    /// How far the stream is known (the `upto` of the last [`BoundaryWalk::advance`]).
    end: u64,
}

impl Default for BoundaryWalk {
    fn default() -> Self {
        Self::new()
    }
}

impl BoundaryWalk {
    /// A walk at the start of a stream.
    pub fn new() -> Self {
        Self::starting_at(0)
    }

    /// A walk that assumes a chunk starts at `offset`. A pipeline can use this to guess the
    /// boundaries of a later part of a stream before the earlier parts are known; the guess
    /// matches the true boundaries from the first boundary both walks share.
    pub fn starting_at(offset: u64) -> Self {
        Self {
            chunk_start: offset,
            end: offset,
        }
    }

    /// Start offset of the chunk in progress.
    pub fn chunk_start(&self) -> u64 {
        self.chunk_start
    }

    /// Takes the candidates found up to stream offset `upto` (increasing, all after the
    /// candidates of earlier calls) and appends to `ends` every chunk end they determine. The
    /// chunk in progress is cut at the maximum size as far as `upto` allows.
    pub fn advance(&mut self, candidates: &[u64], upto: u64, ends: &mut Vec<u64>) {
        let mut start = self.chunk_start;
        for &c in candidates {
            while c.saturating_sub(start) > MAX_LEN {
                start += MAX_LEN;
                ends.push(start);
            }
            if c.saturating_sub(start) >= MIN_LEN {
                start = c;
                ends.push(c);
            }
        }
        let upto = upto.max(self.end);
        while upto.saturating_sub(start) >= MAX_LEN {
            start += MAX_LEN;
            ends.push(start);
        }
        self.chunk_start = start;
        self.end = upto;
    }

    /// Ends the stream at the last `upto`: the end of the final chunk, if any bytes are pending.
    pub fn finish(self) -> Option<u64> {
        (self.end > self.chunk_start).then_some(self.end)
    }
}

/// A streaming chunker: feed it consecutive blocks of any size with [`Chunker::update`], then
/// call [`Chunker::finish`]. The boundaries are exactly those of [`chunk_boundaries`] over the
/// concatenated input, whatever the block sizes and whether or not the scan is parallel. It is a
/// [`CandidateScanner`] followed by a [`BoundaryWalk`].
///
/// Boundaries are reported as absolute end offsets from the start of the stream. A chunk is
/// reported as soon as its end is certain, so at most [`MAX_CHUNK_SIZE`] − 1 bytes are ever
/// pending.
#[derive(Debug, Clone, Default)]
pub struct Chunker {
    scanner: CandidateScanner,
    walk: BoundaryWalk,
    /// Candidates of the current block (kept to reuse the allocation).
    candidates: Vec<u64>,
}

impl Chunker {
    /// A chunker that scans on the calling thread.
    pub fn new() -> Self {
        Self::default()
    }

    /// A chunker that splits each block into pieces of about [`DEFAULT_SEGMENT_LEN`] bytes and
    /// scans them on the rayon thread pool.
    pub fn parallel() -> Self {
        Self::parallel_with_segment_len(DEFAULT_SEGMENT_LEN)
    }

    /// Like [`Chunker::parallel`] with pieces of at least `segment_len` bytes (raised to
    /// [`WINDOW`] if smaller). Small values are useful only to test the splitting.
    pub fn parallel_with_segment_len(segment_len: usize) -> Self {
        Self {
            scanner: CandidateScanner::new().with_segment_len(segment_len),
            ..Self::default()
        }
    }

    /// Bytes fed so far.
    pub fn position(&self) -> u64 {
        self.scanner.position()
    }

    /// Start offset of the chunk in progress: every byte before it belongs to a reported chunk.
    pub fn chunk_start(&self) -> u64 {
        self.walk.chunk_start()
    }

    /// Feeds the next block and appends to `ends` the end offset of every chunk that this block
    /// completes, in increasing order.
    pub fn update(&mut self, block: &[u8], ends: &mut Vec<u64>) {
        self.candidates.clear();
        self.scanner.scan(block, &mut self.candidates);
        self.walk
            .advance(&self.candidates, self.scanner.position(), ends);
    }

    /// Ends the stream: the end offset of the last chunk, if any bytes are pending.
    pub fn finish(self) -> Option<u64> {
        self.walk.finish()
    }
}

/// Scans `block` (stream offset `base`, running hash `h` before it) for candidates, on rayon
/// tasks of at least `segment_len` bytes if given. Returns the running hash after the block.
fn scan_block(
    block: &[u8],
    h: u64,
    base: u64,
    segment_len: Option<usize>,
    out: &mut Vec<u64>,
) -> u64 {
    let segments = segment_len.map_or(1, |s| block.len() / s.max(WINDOW));
    if segments < 2 {
        return scan(block, 0, h, base, out);
    }
    let seg = block.len() / segments;
    // Every segment but the first starts at least WINDOW bytes into the block, so it can warm up
    // on the bytes before it.
    let results: Vec<(Vec<u64>, u64)> = (0..segments)
        .into_par_iter()
        .map(|k| {
            let start = k * seg;
            let end = if k + 1 == segments {
                block.len()
            } else {
                start + seg
            };
            let h0 = if k == 0 { h } else { warm_up(block, start) };
            let mut found = Vec::new();
            let h_end = scan(&block[..end], start, h0, base, &mut found);
            (found, h_end)
        })
        .collect();
    let mut h_end = h;
    for (found, h_seg) in results {
        out.extend_from_slice(&found);
        h_end = h_seg;
    }
    h_end
}

/// The window hash just before `data[at]`: the gear hash of the `WINDOW - 1` bytes before it.
/// Callers pass `at >= WINDOW - 1`.
fn warm_up(data: &[u8], at: usize) -> u64 {
    let at = at.min(data.len());
    data[at.saturating_sub(WINDOW - 1)..at]
        .iter()
        .fold(0, |h, &b| step(h, b))
}

/// Appends to `out` the end offset `base + i + 1` of every position `i >= from` of `data` at which
/// the hash is a candidate, given `h`, the running hash before `data[from]`. Returns the running
/// hash after the last byte.
fn scan(data: &[u8], from: usize, h: u64, base: u64, out: &mut Vec<u64>) -> u64 {
    let from = from.min(data.len());
    let body = &data[from..];
    let base = base + from as u64;
    let n = body.len() / LANES / UNROLL * UNROLL;
    if n < MIN_LANE_LEN {
        return scan_lane(body, h, base, out);
    }
    // Lane j covers body[j*n .. (j+1)*n]; lane 0 continues from `h`, the others warm up on the 63
    // bytes before them. The last lane then finishes the few bytes left over.
    let hashes: [u64; LANES] =
        std::array::from_fn(|j| if j == 0 { h } else { warm_up(body, j * n) });
    let mut found: [Vec<u64>; LANES] = Default::default();
    let h_last = scan_lanes(body, n, hashes, &mut found);
    for (j, lane_found) in found.iter().enumerate() {
        let lane_base = base + (j * n) as u64;
        out.extend(lane_found.iter().map(|&i| lane_base + i + 1));
    }
    scan_lane(&body[LANES * n..], h_last, base + (LANES * n) as u64, out)
}

/// The single-lane kernel: see [`scan`] (with `from = 0`).
fn scan_lane(data: &[u8], mut h: u64, base: u64, out: &mut Vec<u64>) -> u64 {
    for (i, &b) in data.iter().enumerate() {
        h = step(h, b);
        if is_candidate(h) {
            out.push(base + i as u64 + 1);
        }
    }
    h
}

/// The interleaved kernel: lane `j` is `body[j*n .. (j+1)*n]`, `n` a multiple of [`UNROLL`];
/// `found[j]` receives the lane-relative index of each candidate of lane `j`. Returns the last
/// lane's final hash.
// The loops index `words[j][u]` across lanes at one offset (a transposed access): explicit
// indices state that more plainly than nested iterators.
#[allow(clippy::needless_range_loop)]
#[inline(never)]
fn scan_lanes(body: &[u8], n: usize, mut h: [u64; LANES], found: &mut [Vec<u64>; LANES]) -> u64 {
    // Cutting the lanes here, from one slice, tells the compiler they have equal lengths, so one
    // bounds check per iteration covers all of them (in a microbenchmark: never slower than
    // checking each lane, and up to 30% faster depending on code placement).
    let Some(all) = body.get(..LANES * n) else {
        return h[LANES - 1];
    };
    let lanes: [&[u8]; LANES] = std::array::from_fn(|j| &all[j * n..(j + 1) * n]);
    let mut i = 0;
    while i + UNROLL <= n {
        // Fixed-size views let the compiler drop every bounds check in the unrolled steps.
        let mut words: [&[u8; UNROLL]; LANES] = [&[0; UNROLL]; LANES];
        for (word, lane) in words.iter_mut().zip(lanes) {
            match lane.get(i..i + UNROLL).map(<&[u8; UNROLL]>::try_from) {
                Some(Ok(w)) => *word = w,
                _ => return h[LANES - 1],
            }
        }
        for u in 0..UNROLL {
            for j in 0..LANES {
                h[j] = step(h[j], words[j][u]);
            }
            for j in 0..LANES {
                if is_candidate(h[j]) {
                    record(&mut found[j], (i + u) as u64);
                }
            }
        }
        i += UNROLL;
    }
    h[LANES - 1]
}

/// Candidates are rare (one in 65536 positions): keep their bookkeeping out of the hot loop.
#[cold]
#[inline(never)]
fn record(found: &mut Vec<u64>, i: u64) {
    found.push(i);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sha2::Digest as _;

    #[test]
    fn gear_table_matches_the_spec_digest() {
        let mut sha = sha2::Sha256::new();
        for v in GEAR_TABLE {
            sha.update(v.to_le_bytes());
        }
        let digest: [u8; 32] = sha.finalize().into();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "e1d3936666d7ae7a977c958e9afcc75f90aaca758ce5fbe4ece61dffefe1912c"
        );
    }

    #[test]
    fn mask_is_target_derived() {
        let t = TARGET_CHUNK_SIZE as u64 - 1;
        assert_eq!(t << t.leading_zeros(), BOUNDARY_MASK);
        assert_eq!(MIN_CHUNK_SIZE, 8192);
        assert_eq!(MAX_CHUNK_SIZE, 131072);
    }

    /// The §2.2 loop exactly as written, hashing every byte.
    fn naive(data: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        let (mut h, mut start) = (0u64, 0usize);
        for (i, &b) in data.iter().enumerate() {
            h = step(h, b);
            let len = i + 1 - start;
            if len < MIN_CHUNK_SIZE {
                continue;
            }
            if len >= MAX_CHUNK_SIZE || is_candidate(h) {
                ends.push(i + 1);
                start = i + 1;
                h = 0;
            }
        }
        if start < data.len() {
            ends.push(data.len());
        }
        ends
    }

    pub(crate) use crate::test_util::pseudo_random;

    #[test]
    fn small_inputs() {
        assert!(chunk_boundaries(&[]).is_empty());
        assert!(chunk_boundaries_parallel(&[]).is_empty());
        assert_eq!(chunk_boundaries(&[7]), vec![1]);
        assert_eq!(chunk_boundaries(&[0; MIN_CHUNK_SIZE]), vec![MIN_CHUNK_SIZE]);
        assert_eq!(chunk_boundaries_parallel(&[1; 1000]), vec![1000]);
        assert_eq!(Chunker::new().finish(), None);
    }

    #[test]
    fn skip_ahead_and_kernels_match_the_naive_loop() {
        let data = pseudo_random(700_000, 1);
        let expected = naive(&data);
        assert!(expected.len() > 5);
        assert_eq!(chunk_boundaries(&data), expected);
        assert_eq!(chunk_boundaries_parallel(&data), expected);
        let mut c = Chunker::parallel_with_segment_len(100);
        let mut ends = Vec::new();
        for piece in data.chunks(99_999) {
            c.update(piece, &mut ends);
        }
        ends.extend(c.finish());
        let ends: Vec<usize> = ends.into_iter().map(|e| e as usize).collect();
        assert_eq!(ends, expected);
    }

    #[test]
    fn resumed_scanners_see_the_same_candidates() {
        let data = pseudo_random(600_000, 2);
        let mut all = Vec::new();
        CandidateScanner::new().scan(&data, &mut all);
        assert!(all.len() > 3);
        for at in [0usize, 1, 62, 63, 64, 1000, 299_999] {
            let mut resumed = CandidateScanner::resume(at as u64, &data[..at]).unwrap();
            let mut tail = Vec::new();
            resumed.scan(&data[at..], &mut tail);
            let expected: Vec<u64> = all.iter().copied().filter(|&e| e > at as u64).collect();
            assert_eq!(tail, expected, "resumed at {at}");
            assert_eq!(resumed.position(), data.len() as u64);
        }
        // Too short a window is refused rather than giving wrong candidates.
        assert!(CandidateScanner::resume(100, &data[..50]).is_none());
        assert!(CandidateScanner::resume(10, &data[..10]).is_some());
    }

    #[test]
    fn a_walk_started_anywhere_joins_the_true_one() {
        let data = pseudo_random(900_000, 4);
        let mut candidates = Vec::new();
        CandidateScanner::new().scan(&data, &mut candidates);
        let truth: Vec<u64> = chunk_boundaries(&data).iter().map(|&e| e as u64).collect();
        let mut walk = BoundaryWalk::starting_at(100_000);
        let mut guessed = Vec::new();
        walk.advance(&candidates, data.len() as u64, &mut guessed);
        guessed.extend(walk.finish());
        let first_shared = guessed.iter().position(|e| truth.contains(e)).unwrap();
        let joined = guessed[first_shared];
        let from = truth.iter().position(|&e| e == joined).unwrap();
        assert_eq!(guessed[first_shared..], truth[from..]);
        // The walk never cuts before its start, and an empty walk ends nothing.
        assert!(guessed[0] > 100_000);
        assert_eq!(BoundaryWalk::new().finish(), None);
    }

    #[test]
    fn lanes_report_all_candidates_in_order() {
        let data = pseudo_random(3 * LANES * MIN_LANE_LEN + 5, 9);
        let mut one = Vec::new();
        let h1 = scan_lane(&data, 0, 10, &mut one);
        let mut many = Vec::new();
        // Start past the first window so both kernels see full windows everywhere they report.
        let h0 = scan_lane(&data[..100], 0, 10, &mut Vec::new());
        let h2 = scan(&data, 100, h0, 10, &mut many);
        one.retain(|&e| e > 110);
        assert_eq!(many, one);
        assert_eq!(h1, h2);
    }
}
