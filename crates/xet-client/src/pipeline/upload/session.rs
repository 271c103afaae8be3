//! The deduplication, xorb packing and reconstruction terms of one file, or of several files
//! packed into the same xorbs one after another ([`FileSession::end_file`]).
//!
//! Chunks arrive in file order with their hashes. Each is either *matched* (its bytes are
//! already in a xorb: one this upload built, or one named in a shard the target knows locally
//! or sent as a global-dedup answer) or *new* (appended to the xorb being built). Either way it extends the file's reconstruction:
//! a chunk that continues the previous term (same xorb, next chunk index) lengthens it,
//! anything else opens a new term.
//!
//! Xorbs this upload builds are named by a sequence number until they are finished and hashed
//! ([`XorbId::Session`]), so a chunk can match a chunk of the xorb still being built (repeated
//! content inside one file).
//!
//! A chunk that matches nothing the session knows is first looked up locally
//! ([`CasTarget::local_dedup`], e.g. a shard cache, docs/format.md §5.3), for every such chunk.
//! Global-dedup queries (§5.1) go out, once per hash:
//! - for the file's first chunk, always, even when an earlier version of the file (the seeds)
//!   or a local shard covers it: the answer may name a file that shares more with this one;
//! - for chunks whose hash is `0 mod 1024`, when nothing local matched;
//! - while no chunk of the file has matched stored data yet, for its file-start probes (§5.5,
//!   at most [`MAX_PROBES`]), so that an edit at the very start of a file still finds the rest
//!   of it;
//! - when the target indexes dense keys ([`CasTarget::dense_key_modulus`]), for the probes of
//!   each run of chunks nothing matched ([`RunProbes`], §5.5): its first chunks, and its dense
//!   keys, asked ahead of the chunk being added (among the chunks of the block read with it,
//!   [`FileSession::look_ahead`]), so that a hit teaches the chunks before the dense key too.
//!   Seeds never stop these: a run is whatever the seeds, the session and the local shards do
//!   not cover.
//!
//! A local or global answer teaches every chunk of the xorbs it lists, so the chunks around the
//! queried one match too; what the session already knew (seeds included) keeps its place.
//! Keyed answers (§5.2) are looked up by keying the local hash with each key seen. There is no
//! fragmentation guard (§5.4) yet: every match is taken.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use super::UploadError;
use xet_format::dedup::{is_probe, RunProbes, MAX_PROBES};
use xet_format::hash::{file_hash, keyed_chunk_hash, verification_hash};
use xet_format::shard::{FileInfo, Shard, Term, XorbInfo};
use xet_format::xorb::{
    BuiltXorb, CompressedChunk, CompressionPolicy, Push, XorbBuilder, XorbLimits,
};
use xet_format::{ChunkHash, ChunkRef, FileHash, HmacKey, LfsOid, XorbHash};
use xet_protocol::target::CasTarget;

/// Buffers of xorbs already put, for the session to build its next xorbs in: memory written
/// once is written again without a page fault and a cleared page per 4 KiB (a 64 MiB xorb
/// body in fresh memory is 16384 of them). Holds at most `limit` buffers.
#[derive(Debug)]
pub(crate) struct SpareBodies {
    limit: usize,
    spare: Mutex<Vec<Vec<u8>>>,
}

impl SpareBodies {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            spare: Mutex::new(Vec::new()),
        }
    }

    /// Keeps `buffer` for a next xorb, unless `limit` are kept already.
    pub(crate) fn give(&self, mut buffer: Vec<u8>) {
        if let Ok(mut spare) = self.spare.lock() {
            if spare.len() < self.limit {
                buffer.clear();
                spare.push(buffer);
            }
        }
    }

    fn take(&self) -> Option<Vec<u8>> {
        self.spare.lock().ok()?.pop()
    }
}

/// A xorb a term can point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XorbId {
    /// Stored at the target already (learned from a dedup answer).
    Stored(XorbHash),
    /// Built by this upload: the n-th xorb, hashed once finished.
    Session(u32),
}

/// Where a chunk's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    xorb: XorbId,
    index: u32,
    /// Learned from an earlier version of the file ([`FileSession::seed`]).
    history: bool,
}

/// A term under construction: chunks `[start, end)` of `xorb`, which are chunks
/// `[first_chunk, first_chunk + end - start)` of the file.
#[derive(Debug, Clone, Copy)]
struct OpenTerm {
    xorb: XorbId,
    start: u32,
    end: u32,
    bytes: u64,
    first_chunk: usize,
}

/// A file of the session whose chunks have all been added, waiting for its last xorb to be
/// finished (its terms may name it).
#[derive(Debug)]
struct EndedFile {
    terms: Vec<OpenTerm>,
    chunks: Vec<ChunkRef>,
    sha256: LfsOid,
    dedup_bytes: u64,
}

/// One file of a finished session.
#[derive(Debug)]
pub(super) struct SessionFile {
    pub info: FileInfo,
    /// Bytes of the file found already stored.
    pub dedup_bytes: u64,
    /// Its chunks, in file order (what its hash is computed from).
    pub chunks: Vec<ChunkRef>,
}

/// What a finished session produced.
#[derive(Debug)]
pub(super) struct FileResult {
    /// The files, in the order they were added.
    pub files: Vec<SessionFile>,
    /// Blocks of the xorbs this upload built, for the shard's xorb section.
    pub blocks: Vec<XorbInfo>,
    pub chunks: u64,
    pub dedup_chunks: u64,
    pub dedup_bytes: u64,
    pub dedup_queries: u64,
    /// Of `dedup_queries`, the probes (§5.5).
    pub probe_queries: u64,
    /// Of `dedup_bytes`, bytes matched through [`FileSession::seed`].
    pub history_dedup_bytes: u64,
}

/// The largest first xorb of a file's session (see [`FileSession::with_early_first_xorb`]).
pub(crate) const FIRST_XORB_BYTES: u64 = 8 << 20;

/// See the module documentation.
pub(super) struct FileSession<'t> {
    target: &'t dyn CasTarget,
    /// Where each chunk's bytes are counted as done (see [`super::done`]).
    done: &'t super::done::Done,
    policy: CompressionPolicy,
    limits: XorbLimits,
    global_dedup: bool,
    /// Ask about probes while nothing has matched stored data (see the module documentation).
    probe: bool,
    /// Ask about each file's first chunk (off for packed small files: a pack's members are
    /// new to the target, which found none of them by SHA-256, and a query per member is a
    /// round trip per member).
    query_first: bool,
    builder: XorbBuilder,
    /// Where the next builder's body comes from, when buffers are handed back.
    spare_bodies: Option<&'t SpareBodies>,
    builder_refs: Vec<ChunkRef>,
    /// Hashes of the finished session xorbs, by sequence number.
    resolved: Vec<XorbHash>,
    blocks: Vec<XorbInfo>,
    /// Raw chunk hash → location: chunks of session xorbs and of unkeyed dedup answers.
    known: HashMap<ChunkHash, Loc>,
    /// Per key of a keyed dedup answer: keyed chunk hash → location.
    keyed: Vec<(HmacKey, HashMap<ChunkHash, Loc>)>,
    queried: HashSet<ChunkHash>,
    terms: Vec<OpenTerm>,
    chunks: Vec<ChunkRef>,
    /// Chunks of every file of the session.
    chunks_total: u64,
    dedup_chunks: u64,
    dedup_bytes: u64,
    dedup_queries: u64,
    probe_queries: u64,
    history_dedup_bytes: u64,
    /// Files ended, whose terms wait for their xorbs to be finished.
    ended: Vec<EndedFile>,
    /// `dedup_bytes` when the current file began.
    file_dedup_start: u64,
    /// Bytes of the file before the next chunk.
    offset: u64,
    /// Chunks matched to stored xorbs so far.
    stored_matches: u64,
    /// File-start probes asked about for the current file (at most [`MAX_PROBES`]).
    file_probes: u64,
    /// The current file's runs of unmatched chunks and their probes.
    runs: RunProbes,
    /// The chunks not added yet of the block being added (position in the file, hash), for
    /// dense probes asked ahead.
    ahead: VecDeque<(usize, ChunkHash)>,
    /// The run (its first position) whose dense probes were looked for ahead, and the first
    /// position not looked at yet for it: within a run, each chunk ahead is considered once
    /// (its probes only thin out or stop as the run goes on).
    ahead_seen: (Option<usize>, usize),
    /// New chunks, and all chunks, since [`Self::start_block`].
    recent_new: u64,
    recent_total: u64,
}

impl<'t> FileSession<'t> {
    /// `probe`: ask about the file's probes while nothing of it matched (for files large
    /// enough to be worth it).
    pub fn new(
        target: &'t dyn CasTarget,
        policy: CompressionPolicy,
        limits: XorbLimits,
        global_dedup: bool,
        probe: bool,
        done: &'t super::done::Done,
    ) -> Self {
        Self {
            target,
            done,
            policy,
            limits,
            global_dedup,
            probe,
            query_first: true,
            builder: XorbBuilder::with_limits(policy, limits),
            spare_bodies: None,
            builder_refs: Vec::new(),
            resolved: Vec::new(),
            blocks: Vec::new(),
            known: HashMap::new(),
            keyed: Vec::new(),
            queried: HashSet::new(),
            terms: Vec::new(),
            chunks: Vec::new(),
            chunks_total: 0,
            dedup_chunks: 0,
            dedup_bytes: 0,
            dedup_queries: 0,
            probe_queries: 0,
            history_dedup_bytes: 0,
            ended: Vec::new(),
            file_dedup_start: 0,
            offset: 0,
            stored_matches: 0,
            file_probes: 0,
            runs: RunProbes::new(None),
            ahead: VecDeque::new(),
            ahead_seen: (None, 0),
            recent_new: 0,
            recent_total: 0,
        }
    }

    /// Builds xorbs in the buffers of xorbs put before, when there are some.
    pub(crate) fn with_spare_bodies(mut self, spare: &'t SpareBodies) -> Self {
        self.spare_bodies = Some(spare);
        self
    }

    /// Ends the session's first xorb at [`FIRST_XORB_BYTES`] at most, so that its upload
    /// starts while the rest of the file is still being chunked (a large file's first byte
    /// on the wire waits for 8 MiB of chunking, not 64 MiB); later xorbs are of the full size.
    pub(crate) fn with_early_first_xorb(mut self) -> Self {
        let first = XorbLimits {
            max_uncompressed_bytes: self.limits.max_uncompressed_bytes.min(FIRST_XORB_BYTES),
            ..self.limits
        };
        self.builder = XorbBuilder::with_limits(self.policy, first);
        self
    }

    /// Packs small files: no probes, and no query for each file's first chunk (see
    /// `query_first`).
    pub(crate) fn for_packing(mut self) -> Self {
        self.probe = false;
        self.query_first = false;
        self
    }

    /// Learns chunks known to be stored at the target (an earlier version of the file): each
    /// hash with its xorb and index there.
    pub fn seed(&mut self, seeds: &[(ChunkHash, XorbHash, u32)]) {
        for &(hash, xorb, index) in seeds {
            self.known.entry(hash).or_insert(Loc {
                xorb: XorbId::Stored(xorb),
                index,
                history: true,
            });
        }
    }

    fn lookup(&self, hash: &ChunkHash) -> Option<Loc> {
        if let Some(loc) = self.known.get(hash) {
            return Some(*loc);
        }
        self.keyed
            .iter()
            .find_map(|(key, table)| table.get(&keyed_chunk_hash(key, hash)).copied())
    }

    /// Asks the target's local shards about `hash` and learns the chunks of every xorb of the
    /// shard it names. A failure only costs dedup, so it is logged and otherwise ignored.
    fn local(&mut self, hash: &ChunkHash) {
        match self.target.local_dedup(hash) {
            Ok(Some(shard)) => self.learn(&shard),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(chunk = %hash, error = %e, "local dedup lookup failed; continuing without");
            }
        }
    }

    /// Asks the target about `hash` and learns the chunks of every xorb in its answer; whether
    /// it had the chunk. A failed query only costs dedup, so it is logged and otherwise ignored.
    fn query(&mut self, hash: &ChunkHash) -> bool {
        self.dedup_queries += 1;
        let shard = match self.target.dedup_query(hash) {
            Ok(Some(shard)) => shard,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(chunk = %hash, error = %e, "global dedup query failed; continuing without");
                return false;
            }
        };
        self.learn(&shard);
        true
    }

    fn learn(&mut self, shard: &Shard) {
        let key = shard.meta.hmac_key;
        let table = if key.is_zero() {
            &mut self.known
        } else {
            let at = match self.keyed.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    self.keyed.push((key, HashMap::new()));
                    self.keyed.len() - 1
                }
            };
            &mut self.keyed[at].1
        };
        for block in &shard.xorbs {
            for (i, c) in block.chunks.iter().enumerate() {
                let Ok(index) = u32::try_from(i) else { break };
                table.entry(c.hash).or_insert(Loc {
                    xorb: XorbId::Stored(block.hash),
                    index,
                    history: false,
                });
            }
        }
    }

    /// Whether the next chunks are worth compressing ahead of time (in parallel, before it is
    /// known whether they are new): while the chunks of the last block were mostly new. A file
    /// mostly stored already (the next version of a model) costs no compression of chunks that
    /// are then not sent.
    pub(crate) fn compress_ahead(&self) -> bool {
        self.recent_new * 2 >= self.recent_total
    }

    /// The schemes the next chunks would be compressed with if they were all new and fit in the
    /// xorb being built (see [`XorbBuilder::predict_schemes`]).
    pub fn predict_schemes(&self, next: &[&[u8]]) -> Vec<xet_format::xorb::CompressionScheme> {
        self.builder.predict_schemes(next)
    }

    /// Starts counting the chunks of a new block for [`Self::compress_ahead`].
    pub(crate) fn start_block(&mut self) {
        self.recent_new = 0;
        self.recent_total = 0;
    }

    /// The hashes of the chunks about to be added, in order (the block just read): dense keys
    /// among them may be asked about before the chunks in front of them are added (see the
    /// module documentation).
    pub(crate) fn look_ahead(&mut self, hashes: impl Iterator<Item = ChunkHash>) {
        self.ahead.clear();
        if self.probe && self.global_dedup {
            let next = self.chunks.len();
            self.ahead
                .extend(hashes.enumerate().map(|(i, h)| (next + i, h)));
        }
    }

    /// Whether the session knows where `hash` is, asking the local shards if need be.
    fn known_locally(&mut self, hash: &ChunkHash) -> bool {
        if self.lookup(hash).is_some() {
            return true;
        }
        self.local(hash);
        self.lookup(hash).is_some()
    }

    /// The run probes for the chunk at `position`, which matched nothing known (see the module
    /// documentation): the chunk itself if it leads its run, then the run's dense keys from
    /// here to the end of the block, until one hits. Returns where the chunk is, if an answer
    /// taught it.
    fn probe_run(&mut self, position: usize, hash: ChunkHash) -> Option<Loc> {
        self.runs.set_modulus(self.target.dense_key_modulus());
        self.runs.unmatched(position);
        if self.runs.is_leading(position) && self.queried.insert(hash) {
            let hit = self.query(&hash);
            if !hash.is_global_dedup_eligible() {
                self.probe_queries += 1;
            }
            self.runs.sent(false, hit);
        }
        while self.ahead.front().is_some_and(|&(q, _)| q < position) {
            self.ahead.pop_front();
        }
        if self.ahead_seen.0 != self.runs.run_start() {
            self.ahead_seen = (self.runs.run_start(), 0);
        }
        let mut i = self.ahead.partition_point(|&(q, _)| q < self.ahead_seen.1);
        while self.runs.may_probe() {
            let Some(&(q, ahead)) = self.ahead.get(i) else {
                break;
            };
            i += 1;
            self.ahead_seen.1 = q + 1;
            if !self.runs.is_dense(&ahead)
                || self.queried.contains(&ahead)
                || self.known_locally(&ahead)
            {
                continue;
            }
            self.queried.insert(ahead);
            let hit = self.query(&ahead);
            if !ahead.is_global_dedup_eligible() {
                self.probe_queries += 1;
            }
            self.runs.sent(true, hit);
        }
        self.lookup(&hash)
    }

    /// Adds the next chunk of the file. `emit` receives every xorb as soon as it is full.
    /// `ready`, if given, is the chunk already compressed (with the scheme predicted for it):
    /// used if the chunk is new and its scheme is still the one it would get.
    pub fn add_chunk(
        &mut self,
        data: &[u8],
        hash: ChunkHash,
        ready: Option<CompressedChunk>,
        emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    ) -> Result<(), UploadError> {
        self.recent_total += 1;
        self.chunks_total += 1;
        let len = data.len() as u64;
        let position = self.chunks.len();
        let start = self.offset;
        self.offset += len;
        self.chunks.push(ChunkRef::new(hash, len));
        let mut loc = self.lookup(&hash);
        if loc.is_none() {
            self.local(&hash);
            loc = self.lookup(&hash);
        }
        let first = position == 0 && self.query_first;
        let probe = self.probe
            && position > 0
            && self.stored_matches == 0
            && self.file_probes < MAX_PROBES as u64
            && is_probe(position, start, start + len);
        if self.global_dedup
            && (first || (loc.is_none() && (hash.is_global_dedup_eligible() || probe)))
            && self.queried.insert(hash)
        {
            if probe && !hash.is_global_dedup_eligible() {
                self.probe_queries += 1;
                self.file_probes += 1;
            }
            self.query(&hash);
            if loc.is_none() {
                loc = self.lookup(&hash);
            }
        }
        if loc.is_none() && self.probe && self.global_dedup {
            loc = self.probe_run(position, hash);
        }
        if loc.is_some() {
            self.runs.matched();
        }
        let loc = match loc {
            Some(loc) => {
                self.dedup_chunks += 1;
                self.dedup_bytes += len;
                if loc.history {
                    self.history_dedup_bytes += len;
                }
                loc
            }
            None => {
                self.recent_new += 1;
                self.pack(data, hash, ready, emit)?
            }
        };
        match loc.xorb {
            XorbId::Stored(_) => {
                self.stored_matches += 1;
                self.done.deduplicated(len)
            }
            XorbId::Session(n) => self.done.in_xorb(n, len),
        }
        match self.terms.last_mut() {
            Some(t) if t.xorb == loc.xorb && t.end == loc.index => {
                t.end += 1;
                t.bytes += len;
            }
            _ => self.terms.push(OpenTerm {
                xorb: loc.xorb,
                start: loc.index,
                end: loc.index + 1,
                bytes: len,
                first_chunk: position,
            }),
        }
        Ok(())
    }

    /// Appends a new chunk to the xorb being built, finishing it first if it is full.
    fn pack(
        &mut self,
        data: &[u8],
        hash: ChunkHash,
        mut ready: Option<CompressedChunk>,
        emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    ) -> Result<Loc, UploadError> {
        let build_err = |e: xet_format::xorb::XorbError| UploadError::Build {
            what: format!("chunk {hash}"),
            detail: e.to_string(),
        };
        let mut index = None;
        for _ in 0..2 {
            let pushed = match ready.take() {
                Some(c) if c.selected_scheme() == self.builder.scheme_for_next(data) => {
                    match self.builder.add_compressed(c) {
                        Ok(i) => Push::Added(i),
                        Err(c) => {
                            ready = Some(c);
                            Push::Full
                        }
                    }
                }
                _ => self.builder.add_chunk(data).map_err(build_err)?,
            };
            match pushed {
                Push::Added(i) => {
                    index = Some(i);
                    break;
                }
                Push::Full if self.builder.is_empty() => break,
                Push::Full => self.finish_xorb(emit)?,
            }
        }
        let Some(index) = index else {
            return Err(UploadError::Build {
                what: format!("chunk {hash}"),
                detail: "it does not fit in an empty xorb".into(),
            });
        };
        self.builder_refs
            .push(ChunkRef::new(hash, data.len() as u64));
        let loc = Loc {
            history: false,
            xorb: XorbId::Session(self.resolved.len() as u32),
            index: u32::try_from(index).map_err(|_| UploadError::Build {
                what: format!("chunk {hash}"),
                detail: "chunk index does not fit in u32".into(),
            })?,
        };
        self.known.entry(hash).or_insert(loc);
        Ok(loc)
    }

    /// Finishes the xorb being built (if it has chunks) and hands it to `emit`.
    fn finish_xorb(
        &mut self,
        emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    ) -> Result<(), UploadError> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let mut next = XorbBuilder::with_limits(self.policy, self.limits);
        if let Some(buffer) = self.spare_bodies.and_then(SpareBodies::take) {
            next = next.with_body_buffer(buffer);
        }
        let builder = std::mem::replace(&mut self.builder, next);
        let seq = self.resolved.len();
        let built = builder.finish().map_err(|e| UploadError::Build {
            what: format!("xorb #{seq} of this upload"),
            detail: e.to_string(),
        })?;
        let hash = built.hash();
        let block =
            XorbInfo::from_chunks(hash, &self.builder_refs).map_err(|e| UploadError::Build {
                what: format!("the shard block of xorb {hash}"),
                detail: e.to_string(),
            })?;
        self.builder_refs.clear();
        self.resolved.push(hash);
        self.blocks.push(block);
        emit(built)
    }

    /// Ends the current file (its chunks were all added; `sha256` is its SHA-256): the next
    /// chunk begins another file, packed into the same xorbs.
    pub(crate) fn end_file(&mut self, sha256: LfsOid) {
        self.ended.push(EndedFile {
            terms: std::mem::take(&mut self.terms),
            chunks: std::mem::take(&mut self.chunks),
            sha256,
            dedup_bytes: self.dedup_bytes - self.file_dedup_start,
        });
        self.file_dedup_start = self.dedup_bytes;
        self.offset = 0;
        self.stored_matches = 0;
        self.file_probes = 0;
        self.runs = RunProbes::new(None);
        self.ahead.clear();
        self.ahead_seen = (None, 0);
    }

    /// Ends the last file ([`Self::end_file`] with `sha256`) and the session: finishes the last
    /// xorb and builds every file's shard block (terms, verification hashes, SHA-256).
    pub fn finish(
        mut self,
        sha256: LfsOid,
        emit: &mut dyn FnMut(BuiltXorb) -> Result<(), UploadError>,
    ) -> Result<FileResult, UploadError> {
        self.end_file(sha256);
        self.finish_xorb(emit)?;
        let ended = std::mem::take(&mut self.ended);
        let files = ended
            .into_iter()
            .map(|f| {
                let info = self.file_info(&f)?;
                Ok(SessionFile {
                    info,
                    dedup_bytes: f.dedup_bytes,
                    chunks: f.chunks,
                })
            })
            .collect::<Result<Vec<_>, UploadError>>()?;
        Ok(FileResult {
            files,
            blocks: self.blocks,
            chunks: self.chunks_total,
            dedup_chunks: self.dedup_chunks,
            dedup_bytes: self.dedup_bytes,
            dedup_queries: self.dedup_queries,
            probe_queries: self.probe_queries,
            history_dedup_bytes: self.history_dedup_bytes,
        })
    }

    /// The shard block of an ended file, once every xorb it names is finished.
    fn file_info(&self, f: &EndedFile) -> Result<FileInfo, UploadError> {
        let hash = if f.chunks.is_empty() {
            FileHash::ZERO
        } else {
            file_hash(&f.chunks)
        };
        let mut terms = Vec::with_capacity(f.terms.len());
        let mut verification = Vec::with_capacity(f.terms.len());
        for t in &f.terms {
            let xorb = match t.xorb {
                XorbId::Stored(h) => h,
                XorbId::Session(n) => {
                    *self
                        .resolved
                        .get(n as usize)
                        .ok_or_else(|| UploadError::Build {
                            what: format!("file {hash}"),
                            detail: format!("a term names unfinished xorb #{n}"),
                        })?
                }
            };
            let bytes = u32::try_from(t.bytes).map_err(|_| UploadError::Build {
                what: format!("file {hash}"),
                detail: format!("a term of xorb {xorb} holds {} bytes", t.bytes),
            })?;
            terms.push(Term::new(xorb, bytes, t.start, t.end));
            let n = (t.end - t.start) as usize;
            let hashes = f
                .chunks
                .get(t.first_chunk..t.first_chunk + n)
                .unwrap_or(&[]);
            verification.push(verification_hash(hashes.iter().map(|c| &c.hash)));
        }
        Ok(FileInfo {
            hash,
            terms,
            verification: Some(verification),
            sha256: Some(f.sha256),
            unknown_flags: 0,
        })
    }
}
