//! Hashing whole files: chunk boundaries, chunk hashes and the Xet file hash, as fast as the
//! machine allows.
//!
//! This module owns the hashing pipeline. Input is cut into blocks of [`BLOCK_LEN`] bytes that
//! flow through three overlapping stages, each running on the rayon pool:
//!
//! 1. *fetch* block `t + 2` (read it from the reader, or fault in its pages of the memory map),
//! 2. *scan* block `t + 1` for chunk boundaries (a parallel [`Chunker`]),
//! 3. *hash* the chunks that end in block `t` (BLAKE3 per chunk, in parallel) and feed block `t`
//!    to the optional SHA-256.
//!
//! Memory stays bounded by three blocks plus one chunk: a chunk that straddles blocks is copied
//! into a small carry buffer. Files are memory-mapped when possible (the fastest path on a
//! page-cached file) and read with large reads otherwise.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sha2::Digest as _;

use crate::format::chunking::Chunker;
use crate::format::hash::file_hash;
use crate::format::{ChunkHash, ChunkRef, FileHash, LfsOid};

/// Bytes per pipeline block. Two blocks are live in the scan and hash stages at once, so this
/// keeps them in a typical L3 cache while giving each stage enough work to split.
pub const BLOCK_LEN: usize = 8 << 20;

/// Bytes per parallel scanning task inside a block.
const SEGMENT_LEN: usize = 256 << 10;

/// The result of hashing one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedFile {
    /// Size of the content in bytes.
    pub size: u64,
    /// The Xet file hash (zero for an empty file).
    pub file_hash: FileHash,
    /// The chunks in file order; their lengths add up to `size`.
    pub chunks: Vec<ChunkRef>,
    /// SHA-256 of the content (the Git LFS oid), if [`HashOptions::sha256`] was set.
    pub sha256: Option<LfsOid>,
}

/// What to compute besides the Xet hashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashOptions {
    /// Also compute the SHA-256 of the content. It runs alongside the other stages but is
    /// sequential, so it bounds throughput at the speed of one core's SHA-256.
    pub sha256: bool,
}

/// Why a file or stream could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum HasherError {
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot read {} at offset {offset}: {source}", path.display())]
    Read {
        path: PathBuf,
        offset: u64,
        source: io::Error,
    },
    #[error("read failed at offset {offset}: {source}")]
    Stream { offset: u64, source: io::Error },
}

impl HasherError {
    /// Attaches a path to a stream error.
    fn with_path(self, path: &Path) -> Self {
        match self {
            HasherError::Stream { offset, source } => HasherError::Read {
                path: path.to_path_buf(),
                offset,
                source,
            },
            other => other,
        }
    }
}

/// Hashes the file at `path`.
pub fn hash_file(path: &Path) -> Result<HashedFile, HasherError> {
    hash_file_with(path, HashOptions::default())
}

/// Hashes the file at `path`, computing what `options` asks for as well.
pub fn hash_file_with(path: &Path, options: HashOptions) -> Result<HashedFile, HasherError> {
    let open_err = |source| HasherError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    // Only regular, non-empty files are mapped: pipes, devices and files whose size the kernel
    // reports as 0 (procfs) are read instead.
    if meta.is_file() && meta.len() > 0 {
        // SAFETY: the map is read-only and private to this call. Another process truncating or
        // rewriting the file while we hash it would change what we read (or raise SIGBUS on
        // truncation); every mmap-based tool shares this caveat, and the speed gain on large
        // files is the reason to accept it. The read fallback below is used if mapping fails.
        if let Ok(map) = unsafe { memmap2::Mmap::map(&file) } {
            return Ok(hash_mapped(&map, options));
        }
    }
    hash_reader_with(file, options).map_err(|e| e.with_path(path))
}

/// Hashes everything `reader` yields, reading [`BLOCK_LEN`] bytes at a time.
pub fn hash_reader(reader: impl Read) -> Result<HashedFile, HasherError> {
    hash_reader_with(reader, HashOptions::default())
}

/// Hashes in-memory bytes.
pub fn hash_bytes(data: &[u8], options: HashOptions) -> HashedFile {
    hash_slices(data, BLOCK_LEN, options)
}

/// [`hash_bytes`] with a chosen block length (at least 1).
fn hash_slices(data: &[u8], block_len: usize, options: HashOptions) -> HashedFile {
    let blocks: Vec<&[u8]> = data.chunks(block_len.max(1)).collect();
    hash_blocks(&blocks, |_| {}, options)
}

/// Hashes a memory-mapped file, faulting in the pages of each block while the previous one is
/// scanned, so that page faults overlap the hashing instead of stalling the scan.
fn hash_mapped(map: &memmap2::Mmap, options: HashOptions) -> HashedFile {
    let blocks: Vec<&[u8]> = map.chunks(BLOCK_LEN).collect();
    let prefault = |t: usize| {
        if let Some(block) = blocks.get(t) {
            // Advisory only: where the kernel lacks MADV_POPULATE_READ the scan faults pages in.
            let _ = map.advise_range(memmap2::Advice::PopulateRead, t * BLOCK_LEN, block.len());
        }
    };
    hash_blocks(&blocks, prefault, options)
}

/// The pipeline over blocks that are all in memory: fetch (`prefault`) block `t + 1`, scan block
/// `t` and hash block `t - 1` at the same time.
fn hash_blocks(
    blocks: &[&[u8]],
    prefault: impl Fn(usize) + Sync,
    options: HashOptions,
) -> HashedFile {
    // Run the loop on a pool thread: joins issued from outside the pool are much slower.
    rayon::scope(|_| {
        let mut chunker = Chunker::parallel_with_segment_len(SEGMENT_LEN);
        let mut collector = Collector::new(options);
        let mut scanned: Option<Scanned<&[u8]>> = None;
        prefault(0);
        for (t, &block) in blocks.iter().enumerate() {
            let ((), (next, ())) = rayon::join(
                || prefault(t + 1),
                || {
                    rayon::join(
                        || scan(&mut chunker, block),
                        || collector.hash(scanned.as_ref()),
                    )
                },
            );
            scanned = Some(next);
        }
        collector.hash(scanned.as_ref());
        collector.finish(chunker)
    })
}

/// Hashes everything `reader` yields, computing what `options` asks for as well. Reading the
/// next block overlaps the scanning and hashing of the previous ones; memory stays at three
/// blocks of [`BLOCK_LEN`] bytes.
pub fn hash_reader_with(
    reader: impl Read,
    options: HashOptions,
) -> Result<HashedFile, HasherError> {
    read_blocks(reader, BLOCK_LEN, options)
}

/// [`hash_reader_with`] with a chosen block length (at least 1).
fn read_blocks(
    mut reader: impl Read,
    block_len: usize,
    options: HashOptions,
) -> Result<HashedFile, HasherError> {
    let block_len = block_len.max(1);
    let mut chunker = Chunker::parallel_with_segment_len(SEGMENT_LEN);
    let mut collector = Collector::new(options);
    let mut offset = 0u64;
    // Buffers move down one stage per round: read into `spare`, scan `next`, hash `scanned`.
    let mut next = Vec::new();
    fill(&mut reader, &mut next, block_len, &mut offset)?;
    let mut scanned: Option<Scanned<Vec<u8>>> = None;
    let mut spare = Vec::new();
    while !next.is_empty() {
        let mut result = None;
        let read = rayon::in_place_scope(|s| {
            let (chunker, collector, block, to_hash, result) = (
                &mut chunker,
                &mut collector,
                &next,
                scanned.as_ref(),
                &mut result,
            );
            s.spawn(move |_| {
                let (next, ()) = rayon::join(|| scan(chunker, block), || collector.hash(to_hash));
                *result = Some((next.base, next.ends));
            });
            // The calling thread reads while the pool scans and hashes.
            fill(&mut reader, &mut spare, block_len, &mut offset)
        });
        read?;
        let (base, ends) = result.unwrap_or_default();
        let hashed = scanned.replace(Scanned {
            base,
            data: std::mem::take(&mut next),
            ends,
        });
        next = std::mem::take(&mut spare);
        spare = hashed.map(|h| h.data).unwrap_or_default();
    }
    collector.hash(scanned.as_ref());
    Ok(collector.finish(chunker))
}

/// Replaces the contents of `buf` with up to `block_len` bytes from `reader` (fewer only at the
/// end of the stream), advancing `offset`.
fn fill(
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
    block_len: usize,
    offset: &mut u64,
) -> Result<(), HasherError> {
    buf.clear();
    buf.reserve(block_len);
    let result = reader.take(block_len as u64).read_to_end(buf);
    // On error, `buf` still holds what was read before it.
    *offset += buf.len() as u64;
    result.map(|_| ()).map_err(|source| HasherError::Stream {
        offset: *offset,
        source,
    })
}

/// A block whose chunk boundaries are known and whose chunks are not hashed yet.
struct Scanned<B> {
    /// Stream offset of the block's first byte.
    base: u64,
    data: B,
    /// End offsets of the chunks that end inside this block.
    ends: Vec<u64>,
}

/// Finds the boundaries in the next block.
fn scan<B: AsRef<[u8]> + Copy>(chunker: &mut Chunker, block: B) -> Scanned<B> {
    let base = chunker.position();
    let mut ends = Vec::new();
    chunker.update(block.as_ref(), &mut ends);
    Scanned {
        base,
        data: block,
        ends,
    }
}

/// The hash stage: collects chunk hashes in order, and the SHA-256 if asked for.
struct Collector {
    /// Bytes of the chunk in progress that precede the block being hashed.
    carry: Vec<u8>,
    /// Stream offset where the chunk in progress starts.
    hashed_to: u64,
    chunks: Vec<ChunkRef>,
    sha256: Option<sha2::Sha256>,
}

impl Collector {
    fn new(options: HashOptions) -> Self {
        Self {
            carry: Vec::new(),
            hashed_to: 0,
            chunks: Vec::new(),
            sha256: options.sha256.then(sha2::Sha256::new),
        }
    }

    /// Hashes the chunks that end in `block` (blocks must come in stream order).
    fn hash<B: AsRef<[u8]> + Sync>(&mut self, block: Option<&Scanned<B>>) {
        let Some(block) = block else { return };
        let data = block.data.as_ref();
        let Self {
            carry,
            hashed_to,
            chunks,
            sha256,
        } = self;
        rayon::join(
            || {
                if let Some(sha) = sha256 {
                    sha.update(data);
                }
            },
            || hash_chunks(block.base, data, &block.ends, carry, hashed_to, chunks),
        );
    }

    /// Hashes the last chunk (whatever is pending) and computes the file hash.
    fn finish(mut self, chunker: Chunker) -> HashedFile {
        let size = chunker.position();
        if chunker.finish().is_some() {
            self.chunks.push(ChunkRef::new(
                ChunkHash::of(&self.carry),
                self.carry.len() as u64,
            ));
        }
        HashedFile {
            size,
            file_hash: file_hash(&self.chunks),
            chunks: self.chunks,
            sha256: self
                .sha256
                .map(|sha| LfsOid::from_digest(sha.finalize().into())),
        }
    }
}

/// Hashes the chunks ending at `ends` (inside `data`, which starts at stream offset `base`).
/// The first may have begun in earlier blocks: its earlier bytes are in `carry`. Afterwards
/// `carry` holds the bytes of the chunk still in progress and `hashed_to` its start.
fn hash_chunks(
    base: u64,
    data: &[u8],
    ends: &[u64],
    carry: &mut Vec<u8>,
    hashed_to: &mut u64,
    chunks: &mut Vec<ChunkRef>,
) {
    // Offsets inside `data`; every end lies in (base, base + data.len()] and the chunk in
    // progress never starts after `base`.
    let local = |offset: u64| (offset - base) as usize;
    let mut inner = ends;
    if let Some((&first, rest)) = ends.split_first() {
        if *hashed_to < base {
            carry.extend_from_slice(&data[..local(first)]);
            chunks.push(ChunkRef::new(ChunkHash::of(carry), carry.len() as u64));
            carry.clear();
            *hashed_to = first;
            inner = rest;
        }
    }
    let start = *hashed_to;
    chunks.par_extend(inner.par_iter().enumerate().map(|(k, &end)| {
        let begin = if k == 0 { start } else { inner[k - 1] };
        ChunkRef::new(ChunkHash::of(&data[local(begin)..local(end)]), end - begin)
    }));
    if let Some(&last) = ends.last() {
        *hashed_to = last;
        carry.clear();
        carry.extend_from_slice(&data[local(last)..]);
    } else {
        carry.extend_from_slice(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::chunking::chunk_boundaries;

    fn pseudo_random(n: usize, mut s: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 56) as u8
            })
            .collect()
    }

    /// The straightforward computation: canonical boundaries, then each chunk hashed in turn.
    fn reference(data: &[u8]) -> HashedFile {
        let mut start = 0;
        let chunks: Vec<ChunkRef> = chunk_boundaries(data)
            .into_iter()
            .map(|end| {
                let c = ChunkRef::new(ChunkHash::of(&data[start..end]), (end - start) as u64);
                start = end;
                c
            })
            .collect();
        HashedFile {
            size: data.len() as u64,
            file_hash: file_hash(&chunks),
            chunks,
            sha256: None,
        }
    }

    #[test]
    fn every_block_length_gives_the_reference_result() {
        // Random data with a long constant stretch (maximum-size cuts across many blocks).
        let mut data = pseudo_random(400_000, 3);
        data.extend(std::iter::repeat(7u8).take(300_000));
        data.extend(pseudo_random(150_000, 4));
        let expected = reference(&data);
        assert!(expected.chunks.len() > 5);
        for block_len in [4099, 65_536, 131_072, 200_003, data.len(), usize::MAX] {
            assert_eq!(
                hash_slices(&data, block_len, HashOptions::default()),
                expected,
                "slices, block {block_len}"
            );
            let read = read_blocks(&data[..], block_len.min(1 << 20), HashOptions::default());
            assert_eq!(read.unwrap(), expected, "reader, block {block_len}");
        }
        // Tiny blocks: a chunk is assembled from many carried pieces.
        let small = &data[..20_000];
        for block_len in [1, 37] {
            assert_eq!(
                hash_slices(small, block_len, HashOptions::default()),
                reference(small)
            );
        }
        // Each reader round costs a thread hand-off, so keep this one short.
        let read = read_blocks(&small[..3000], 7, HashOptions::default());
        assert_eq!(read.unwrap(), reference(&small[..3000]));
    }

    #[test]
    fn empty_and_tiny_inputs() {
        let empty = hash_bytes(&[], HashOptions::default());
        assert_eq!(empty.size, 0);
        assert!(empty.chunks.is_empty());
        assert_eq!(empty.file_hash, FileHash::ZERO);
        assert_eq!(hash_reader(&[][..]).unwrap(), empty);
        let hw = hash_reader(&b"Hello World!"[..]).unwrap();
        assert_eq!(
            hw.file_hash.to_hex(),
            "a9dae0ad88b060bdd7e7c87abdcf95b132c95a0414b06d4f6beb68d287b87165"
        );
        assert_eq!(hw.size, 12);
    }

    #[test]
    fn sha256_is_computed_on_request() {
        let data = pseudo_random(300_000, 5);
        let with = read_blocks(&data[..], 70_000, HashOptions { sha256: true }).unwrap();
        assert_eq!(with.sha256, Some(LfsOid::of(&data)));
        assert_eq!(with.file_hash, reference(&data).file_hash);
        assert_eq!(hash_bytes(&data, HashOptions::default()).sha256, None);
        let empty = hash_bytes(&[], HashOptions { sha256: true });
        assert_eq!(empty.sha256, Some(LfsOid::of(&[])));
    }

    /// Yields `ok` bytes, then fails.
    struct Failing {
        ok: usize,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.ok == 0 {
                return Err(io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.ok).min(1000);
            buf[..n].fill(1);
            self.ok -= n;
            Ok(n)
        }
    }

    #[test]
    fn read_errors_report_the_offset() {
        for (ok, block_len) in [(0, 100), (2500, 1000), (2500, 100_000)] {
            let err = read_blocks(Failing { ok }, block_len, HashOptions::default()).unwrap_err();
            match &err {
                HasherError::Stream { offset, .. } => assert_eq!(*offset, ok as u64),
                other => panic!("unexpected {other:?}"),
            }
            let named = err.with_path(Path::new("/some/file"));
            assert_eq!(
                named.to_string(),
                format!("cannot read /some/file at offset {ok}: disk on fire")
            );
        }
    }

    #[test]
    fn missing_files_name_the_path() {
        let err = hash_file(Path::new("/nonexistent/x.bin")).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("cannot open /nonexistent/x.bin: "));
    }
}
