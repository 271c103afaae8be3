//! Reading byte ranges of a stored file without downloading it (`git xet cat --range`, `git xet
//! mount`).
//!
//! A read asks the endpoint for the reconstruction of just the bytes it needs (a ranged plan
//! names only the chunks that cover them, docs/cas-api.md §5.1), fetches those ranges (through
//! the endpoint's chunk cache, if it has one) and decodes them. Every decoded chunk is checked
//! against the file's chunk list, which the endpoint gives once per file
//! ([`crate::store::Endpoint::file_chunks`]) and which is itself checked: its Xet file hash must
//! be the file's. A reconstruction carries no chunk hashes, so without the list nothing could be
//! checked; an endpoint that cannot give it cannot be read in part.
//!
//! Decoded spans are kept in a small cache per file ([`SPAN_CACHE_BYTES`]), so that the reads of
//! a span the kernel splits into 128 KiB requests cost one fetch.

use std::sync::Mutex;

use crate::format::hash::file_hash;
use crate::format::{ChunkRef, FileHash};
use crate::pipeline::download::{write_plan_with_chunks, DownloadError};
use crate::store::{Endpoint, TargetError};

/// Bytes of decoded spans kept per file.
pub const SPAN_CACHE_BYTES: usize = 48 << 20;

/// Why part of a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RangedError {
    #[error("{what}: {source}")]
    Endpoint { what: String, source: TargetError },
    #[error(
        "{endpoint} cannot list the chunks of file {file}, so its parts cannot be checked: \
         download the object instead (`git lfs fetch`)"
    )]
    NoChunkList { endpoint: String, file: FileHash },
    #[error("{endpoint} does not know file {file}")]
    UnknownFile { endpoint: String, file: FileHash },
    #[error(
        "the chunk list {endpoint} gave for file {file} does not add up to it ({why}); the \
         server's record is damaged"
    )]
    BadChunkList {
        endpoint: String,
        file: FileHash,
        why: String,
    },
    #[error("bytes {start}-{end} of file {file}: {source}")]
    Download {
        file: FileHash,
        start: u64,
        end: u64,
        source: Box<DownloadError>,
    },
    #[error(
        "bytes {start}-{end} of file {file} do not match its chunk list at chunk {chunk}: the \
         stored data is damaged"
    )]
    Mismatch {
        file: FileHash,
        start: u64,
        end: u64,
        chunk: usize,
    },
}

/// A stored file, read in parts (see the module documentation).
pub struct RangedFile {
    file: FileHash,
    size: u64,
    chunks: Vec<ChunkRef>,
    /// `starts[i]`: the offset of chunk `i`; `starts[n]` is the size.
    starts: Vec<u64>,
    cache: Mutex<SpanCache>,
}

/// Decoded spans, most recently used last.
#[derive(Default)]
struct SpanCache {
    spans: Vec<(u64, std::sync::Arc<Vec<u8>>)>,
    bytes: usize,
}

impl SpanCache {
    /// The bytes `start..end`, if one span holds them all.
    fn get(&mut self, start: u64, end: u64) -> Option<Vec<u8>> {
        let i = self
            .spans
            .iter()
            .rposition(|(s, data)| *s <= start && end <= s.saturating_add(data.len() as u64))?;
        let (s, data) = self.spans.remove(i);
        let piece = data[(start - s) as usize..(end - s) as usize].to_vec();
        self.spans.push((s, data));
        Some(piece)
    }

    fn has(&self, start: u64, end: u64) -> bool {
        self.spans
            .iter()
            .any(|(s, data)| *s <= start && end <= s.saturating_add(data.len() as u64))
    }

    fn put(&mut self, start: u64, data: Vec<u8>) {
        self.bytes += data.len();
        self.spans.push((start, std::sync::Arc::new(data)));
        while self.bytes > SPAN_CACHE_BYTES && self.spans.len() > 1 {
            let (_, old) = self.spans.remove(0);
            self.bytes -= old.len();
        }
    }
}

impl RangedFile {
    /// Gets and checks the chunk list of `file` (`size` bytes) from `endpoint`.
    pub fn open(endpoint: &dyn Endpoint, file: FileHash, size: u64) -> Result<Self, RangedError> {
        let chunks = endpoint
            .file_chunks(&file)
            .map_err(|source| RangedError::Endpoint {
                what: format!("listing the chunks of file {file}"),
                source,
            })?
            .ok_or_else(|| RangedError::NoChunkList {
                endpoint: endpoint.describe(),
                file,
            })?;
        let bad = |why: String| RangedError::BadChunkList {
            endpoint: endpoint.describe(),
            file,
            why,
        };
        let mut starts = Vec::with_capacity(chunks.len() + 1);
        let mut at = 0u64;
        for c in &chunks {
            starts.push(at);
            at = at.saturating_add(c.len);
        }
        starts.push(at);
        if at != size {
            return Err(bad(format!("{at} bytes, the object has {size}")));
        }
        let computed = if chunks.is_empty() {
            FileHash::ZERO
        } else {
            file_hash(&chunks)
        };
        if computed != file {
            return Err(bad(format!("the chunks hash to {computed}")));
        }
        Ok(Self {
            file,
            size,
            chunks,
            starts,
            cache: Mutex::new(SpanCache::default()),
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Up to `len` bytes from `offset` (fewer at the end of the file; none past it), each
    /// chunk checked. A read of a span fetched before is served from memory.
    pub fn read(
        &self,
        endpoint: &dyn Endpoint,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, RangedError> {
        let end = offset.saturating_add(len).min(self.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        if let Some(bytes) = self.cached(offset, end) {
            return Ok(bytes);
        }
        self.fetch(endpoint, offset, end)?;
        self.cached(offset, end).ok_or(RangedError::Mismatch {
            file: self.file,
            start: offset,
            end: end - 1,
            chunk: self.chunk_at(offset),
        })
    }

    /// Whether bytes `offset..offset + len` are in memory already.
    pub fn is_cached(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len).min(self.size);
        offset >= end
            || self
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .has(offset, end)
    }

    fn cached(&self, start: u64, end: u64) -> Option<Vec<u8>> {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(start, end)
    }

    /// The index of the chunk holding byte `offset`.
    fn chunk_at(&self, offset: u64) -> usize {
        self.starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// Fetches, checks and keeps the bytes `start..end` (and to the end of their last chunk).
    pub fn fetch(&self, endpoint: &dyn Endpoint, start: u64, end: u64) -> Result<(), RangedError> {
        let end = end.min(self.size);
        if start >= end {
            return Ok(());
        }
        let plan = endpoint
            .reconstruction(&self.file, Some((start, end - 1)))
            .map_err(|source| RangedError::Endpoint {
                what: format!("planning bytes {start}-{} of file {}", end - 1, self.file),
                source,
            })?
            .ok_or_else(|| RangedError::UnknownFile {
                endpoint: endpoint.describe(),
                file: self.file,
            })?;
        let mut data = Vec::with_capacity((end - start) as usize + (128 << 10));
        let (_, decoded) = write_plan_with_chunks(endpoint, &plan, &mut |piece| {
            data.extend_from_slice(piece);
            Ok(())
        })
        .map_err(|source| RangedError::Download {
            file: self.file,
            start,
            end: end - 1,
            source: Box::new(source),
        })?;
        let first = self.chunk_at(start);
        let mismatch = |chunk: usize| RangedError::Mismatch {
            file: self.file,
            start,
            end: end - 1,
            chunk,
        };
        for (i, c) in decoded.iter().enumerate() {
            if self.chunks.get(first + i) != Some(c) {
                return Err(mismatch(first + i));
            }
        }
        // The decoded chunks must reach the end of the range asked for.
        let reached = self.starts[(first + decoded.len()).min(self.chunks.len())];
        if reached < end || data.len() as u64 != reached - start {
            return Err(mismatch(first + decoded.len()));
        }
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(start, data);
        Ok(())
    }
}
