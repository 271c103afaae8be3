//! The transfer agent: the loop git-lfs talks to as `git-xet transfer` (docs/lfs-agent.md §3–§10).
//!
//! [`run`] reads one request line at a time from git-lfs, answers `init` at once (no network
//! or credential work: git-lfs starts up to `lfs.concurrenttransfers` processes per batch),
//! and serves each upload or download to completion before reading the next line. Every
//! request gets exactly one `complete`; a per-object failure is a `complete` with an error
//! message a user can act on, never the end of the process. Only [`ProtocolWriter`] writes to
//! stdout; logs go through `tracing` (stderr, and a file when `GIT_XET_LOG` is set).
//!
//! Where objects go, per request:
//!
//! | request | endpoint |
//! |---|---|
//! | `action` with `X-Xet-Cas-Url` (negotiated) | the CAS at that URL, with the action's token, refreshed through `href` |
//! | `action: null` (standalone), endpoint a directory | the store in that directory, through the private server the agents share ([`super::shared_server`]; xorb ranges are read from the store's files); if none answers, opened in-process for this one transfer ([`Store::open_waiting`]: agent processes take turns). A download from a directory without a store fails and creates nothing |
//! | `action: null`, endpoint an http(s) URL | the `git xet serve` at that URL, token from [`settings::endpoint_token`] |
//!
//! Choosing the endpoint of a request (this table) is `agent/endpoint.rs`; the request loop and
//! the transfers themselves are here.
//!
//! The standalone endpoint is the one of the remote git-lfs names in `init`
//! ([`settings::endpoint_for_remote`]: `GIT_XET_ENDPOINT`, `remote.<name>.xetEndpoint`,
//! `xet.endpoint`). A download `init` from a `git lfs prune` that wants objects verified with a
//! standalone remote is refused ([`super::prune`]: git-lfs would not ask, and would count every
//! object as verified).
//!
//! Uploads run the upload pipeline (chunk, dedup, xorbs, shard) and send `complete` only once
//! the shard is registered, since git-lfs kills the agent 30 s after `terminate`. Downloads
//! find the Xet hash for the oid, rebuild the file into git-lfs's temp directory (same
//! filesystem as `.git/lfs/objects`, which git-lfs renames it into) checking every chunk hash
//! and the Xet file hash, check the size, and answer with the file's absolute path (git-lfs
//! checks the SHA-256 itself before keeping it).
//!
//! Robustness against what comes in:
//! - **Input limits.** A request line is read up to [`MAX_LINE`] (1 MiB) and never buffered
//!   beyond; a longer one is answered with an error `complete` for the oid found at its start
//!   (after `init`), else it is fatal. Input echoed in a message is clipped ([`echo`]).
//! - **Fatal protocol errors** (no object to answer: garbage, a second `init`, a request before
//!   `init`) are explained on stderr and in the log (`explain_fatal`: git-lfs shows only
//!   "EOF", `GIT_TRACE=1` shows this, `git xet uninstall` falls back to plain LFS, report the
//!   bug), and before `init` in the `init` error reply, which git-lfs does show.
//! - **Upload paths** are opened non-blocking and must be regular files (a FIFO would block).
//! - **Partial downloads** (`xet-<oid16>-<pid>-*.part`) name the agent process that writes
//!   them and are locked while written; those of objects from 1 MiB on record what they hold.
//!   An interrupted download's file is taken over by the next download of the object, in
//!   whichever agent process, which fetches only what it does not hold; files of no use are
//!   removed by the first transfer of each agent process (`agent/parts.rs`).
//! - **Secrets.** What goes to git-lfs and to the log is redacted ([`xet_protocol::redact`]); which
//!   credential goes where is decided in [`settings`] (a secret only to its own origin).

mod download_pack;
mod endpoint;
mod gather;
mod pack;
mod parts;
/// The smallest object a download writes through a record of what it holds (resumable, and
/// written to a second file as it lands when asked: see [`InProcessAgent::download`]).
pub(crate) use parts::RESUMABLE_MIN;
mod prior;

use endpoint::*;
pub(crate) use endpoint::{connect_negotiated, open_standalone, Lease};

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::TransferError;
use xet_protocol::wire::MAX_PACK_MEMBERS;

use super::journal::{self, Direction, Record};
use super::protocol::{
    echo, find_oid, parse_request, read_line, Action, LineRead, Operation, ProtocolError,
    ProtocolWriter, Request, State, Transfer, WireError, MAX_LINE, TRANSFER_ERROR_CODE,
};
use super::settings::{self, EndpointSpec};
use crate::git::Git;
use xet_client::object_chunks::{object_path, ChunkLists};
use xet_client::pipeline::cached::Cached;
use xet_client::pipeline::download::{write_file_at_with, write_part, DownloadError, Written};
use xet_client::pipeline::prior::{
    check_list, locate_chunks, LocalChunks, PriorChunk, PriorVersion,
};
use xet_client::pipeline::upload::{
    upload_file_with_seeds, UploadOptions, UploadProgress, UploadSummary,
};
use xet_client::{
    ChunkCache, RefreshingToken, RemoteCas, RemoteConfig, RetryPolicy, ShardCache, TokenSource,
};
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};
use xet_protocol::wire::{ReconstructionV2, RECONSTRUCTION_HEADER};
use xet_protocol::ReconstructionPlan;
use xet_protocol::{Endpoint, ReadOnce, Tallied};
use xet_store::Store;

/// Bytes of objects in git-lfs's store without a chunk list (placed by git-lfs itself, or
/// there before lists were kept) that one agent process hashes, once each, so that downloads
/// find their chunks: a few seconds of hashing at most.
const HASH_UNLISTED_BUDGET: u64 = 4 << 30;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Git in the directory git-lfs started the agent in (the work tree, usually).
    pub git: Git,
    /// Relative directory endpoints are taken relative to this.
    pub base_dir: PathBuf,
    /// How long to wait for another agent process to release an embedded store.
    pub store_patience: Duration,
    /// Upload settings (sizes and SHA-256 are filled in per object).
    pub upload: UploadOptions,
}

impl AgentOptions {
    /// Options for an agent running in `dir`.
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            git: Git::in_dir(dir),
            base_dir: dir.to_path_buf(),
            store_patience: Duration::from_secs(30 * 60),
            upload: UploadOptions::default(),
        }
    }
}

/// A failure that ends the agent (everything else is answered per object).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot talk to git-lfs: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
}

/// What a run did, for the log line at exit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    pub succeeded: u64,
    pub failed: u64,
}

/// Serves git-lfs on `input`/`output` until `terminate` or end of input.
pub fn run(
    mut input: impl BufRead,
    output: impl Write,
    options: AgentOptions,
) -> Result<RunSummary, AgentError> {
    let mut writer = ProtocolWriter::new(output);
    let mut agent = Agent::new(options);
    let mut state = State::AwaitInit;
    let mut summary = RunSummary::default();
    let mut bytes = Vec::new();
    let mut line = 0usize;
    loop {
        let request = match next_request(&mut input, &mut bytes, &mut line, &mut state)? {
            Next::Eof => {
                tracing::debug!("stdin closed");
                break;
            }
            Next::Blank => continue,
            Next::Line(request) => request,
        };
        let request = match request {
            Ok(r) => r,
            Err(e) => match e.oid() {
                // The failing request names an object: answer it and go on (docs/lfs-agent.md §5).
                Some(oid) => {
                    tracing::error!(%oid, "{e}");
                    summary.failed += 1;
                    writer.complete(&oid, Err(&transfer_error(unreadable_request(&e))))?;
                    continue;
                }
                None => {
                    let explained = explain_fatal(&e);
                    tracing::error!("{explained}");
                    if state == State::AwaitInit {
                        writer.init_error(&format!("git-xet: {explained}"))?;
                    }
                    return Err(e.into());
                }
            },
        };
        match request {
            Request::Init(init) => {
                if !agent.start(&init, &mut writer)? {
                    return Ok(summary);
                }
            }
            Request::Upload(t) => {
                let started = Instant::now();
                let result = agent.upload(&t, &mut writer);
                finish(&mut writer, &t, result, started, &mut summary)?;
            }
            Request::Download(t) => {
                let started = Instant::now();
                match agent.download(&t, &mut writer) {
                    Ok(path) => finish(&mut writer, &t, Ok(Some(&path)), started, &mut summary)?,
                    Err(e) => finish(&mut writer, &t, Err(e), started, &mut summary)?,
                }
            }
            Request::Terminate => {
                tracing::debug!("terminate");
                break;
            }
        }
    }
    tracing::info!(
        succeeded = summary.succeeded,
        failed = summary.failed,
        peak_rss_kib = peak_rss_kib().unwrap_or(0),
        "agent done"
    );
    Ok(summary)
}

/// What the next line of input holds.
enum Next {
    Eof,
    Blank,
    /// A request, checked against the protocol's state, or why it is not one.
    Line(Result<Request, ProtocolError>),
}

/// Reads and parses the next line (line `*line + 1`), accepting it into `state`.
fn next_request(
    input: &mut impl BufRead,
    bytes: &mut Vec<u8>,
    line: &mut usize,
    state: &mut State,
) -> Result<Next, AgentError> {
    let read = read_line(input, bytes, MAX_LINE)?;
    if read == LineRead::Eof {
        return Ok(Next::Eof);
    }
    *line += 1;
    let line = *line;
    Ok(Next::Line(match read {
        LineRead::TooLong { len } => Err(ProtocolError::TooLong {
            line,
            len,
            // Answerable only once the process knows its direction.
            oid: find_oid(bytes).filter(|_| matches!(state, State::Ready(_))),
        }),
        _ => {
            let text = String::from_utf8_lossy(bytes);
            if text.trim().is_empty() {
                return Ok(Next::Blank);
            }
            parse_request(text.trim_end(), line).and_then(|r| {
                state.accept(&r, line)?;
                Ok(r)
            })
        }
    }))
}

/// A failed upload as git-lfs is told it: the local file's fault (it is not what git-lfs
/// named), or the endpoint's.
fn upload_failed(
    e: xet_client::pipeline::upload::UploadError,
    path: &Path,
    endpoint: &dyn Endpoint,
) -> TransferError {
    if e.is_input_error() {
        TransferError::Mismatch {
            path: echo(&path.to_string_lossy()),
            source: Box::new(e),
        }
    } else {
        TransferError::Upload {
            endpoint: endpoint.describe(),
            source: Box::new(e),
        }
    }
}

/// What git-lfs is told about an object whose request could not be read.
fn unreadable_request(e: &ProtocolError) -> String {
    match e {
        ProtocolError::TooLong { .. } => format!(
            "{e}; the request for this object was not read. git-lfs never sends such lines: \
             report this as a git-xet bug (GIT_TRACE=1 shows what was sent)"
        ),
        _ => format!(
            "{e}; git-xet could not read the request for this object: report this as a git-xet \
             bug (GIT_TRACE=1 shows what was sent), or run `git xet uninstall` to use plain LFS"
        ),
    }
}

/// A fatal protocol error in words a user can act on: git-lfs shows only "EOF" when the agent
/// stops (and its stderr only with `GIT_TRACE=1`).
fn explain_fatal(e: &ProtocolError) -> String {
    format!(
        "{e}. git-xet, the Git LFS transfer agent, received a message it cannot answer from \
         git-lfs and stops; git-lfs will report only \"EOF\" (or an error without details) for \
         this transfer. To see this message among git-lfs's output, run the git command again \
         with GIT_TRACE=1; to work without git-xet meanwhile, run `git xet uninstall` (git-lfs \
         then uses plain LFS transfers); and please report this as a git-xet bug, with that \
         output and `git lfs version`"
    )
}

/// The process's peak resident set size in KiB (Linux `VmHWM`), for the exit log line that
/// benchmarks read.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Sends the `complete` of a request.
fn finish<W: Write>(
    writer: &mut ProtocolWriter<W>,
    t: &Transfer,
    result: Result<Option<&Path>, TransferError>,
    started: Instant,
    summary: &mut RunSummary,
) -> Result<(), AgentError> {
    match result {
        Ok(path) => {
            summary.succeeded += 1;
            writer.progress(&t.oid, t.size)?;
            tracing::info!(oid = %t.oid, size = t.size, secs = started.elapsed().as_secs_f64(), "done");
            writer.complete(&t.oid, Ok(path))?;
        }
        Err(e) => {
            let message = e.to_string();
            summary.failed += 1;
            tracing::error!(oid = %t.oid, "{message}");
            writer.complete(&t.oid, Err(&transfer_error(message)))?;
        }
    }
    Ok(())
}

fn transfer_error(message: String) -> WireError {
    WireError {
        code: TRANSFER_ERROR_CODE,
        message,
    }
}

/// An agent working in this process rather than for git-lfs (`git xet fetch`): the same
/// downloads (earlier versions and local chunks copied, interrupted downloads resumed, every
/// chunk and the file's Xet hash checked, the journal kept), each object written to a file in
/// git-lfs's temp directory for the caller to check and move into place.
pub(crate) struct InProcessAgent {
    agent: Agent,
}

impl InProcessAgent {
    /// An agent downloading from `remote` (a remote name or URL; default: as the agent
    /// would pick) of the repository `options.git` is in.
    pub(crate) fn new(options: AgentOptions, remote: Option<&str>) -> Result<Self, TransferError> {
        let mut agent = Agent::new(options);
        agent.sha256_as_written = true;
        agent.init(&super::protocol::Init {
            operation: Operation::Download,
            remote: remote.unwrap_or_default().to_string(),
            concurrent: true,
            concurrenttransfers: 1,
        })?;
        Ok(Self { agent })
    }

    /// An agent uploading to the standalone endpoint of `remote` (as git-lfs names it to its
    /// agents in a push: the remote's name or URL), for [`Self::upload_ahead`].
    fn for_upload(options: AgentOptions, remote: &str) -> Result<Self, TransferError> {
        let mut agent = Agent::new(options);
        agent.init(&super::protocol::Init {
            operation: Operation::Upload,
            remote: remote.to_string(),
            concurrent: true,
            concurrenttransfers: 1,
        })?;
        Ok(Self { agent })
    }

    /// Uploads the push's small objects `objects` (oid, size) in packs before git-lfs hands
    /// them to its agents, which then find them registered (docs/lfs-agent.md §12.7): how many
    /// were. Nothing in negotiated mode, or with `xet.packUploads` false.
    fn upload_ahead(&mut self, packs: &[Vec<(LfsOid, u64)>]) -> Result<usize, TransferError> {
        if !self.agent.packs_allowed() {
            return Ok(0);
        }
        self.agent.upload_ahead(packs)
    }
}

/// Uploads the small objects among `objects` (oid, size: a push's LFS objects) of the
/// repository at `dir` to the standalone endpoint of `remote` before git-lfs's pre-push hands
/// them to its agents (docs/lfs-agent.md §12.7): in packs of up to 64 objects and
/// [`AHEAD_PACK_BYTES`], `workers` at once, each worker an agent of its own. Returns how many
/// were registered; those that were not (an error, negotiated mode, fewer than
/// [`AHEAD_AT_LEAST`] small objects in all) are left to git-lfs's agents as usual.
pub(crate) fn upload_ahead(
    dir: &Path,
    remote: &str,
    objects: &[(LfsOid, u64)],
    workers: usize,
) -> Result<usize, TransferError> {
    let mut packs: Vec<Vec<(LfsOid, u64)>> = Vec::new();
    let mut bytes = 0u64;
    let small = objects
        .iter()
        .filter(|(_, size)| gather::gathered_size(*size));
    if small.clone().count() < AHEAD_AT_LEAST {
        return Ok(0);
    }
    for &(oid, size) in small {
        match packs.last_mut() {
            Some(pack) if pack.len() < MAX_PACK_MEMBERS && bytes + size <= AHEAD_PACK_BYTES => {
                pack.push((oid, size));
                bytes += size;
            }
            _ => {
                packs.push(vec![(oid, size)]);
                bytes = size;
            }
        }
    }
    // Packs dealt in turn to the workers.
    let workers = workers.clamp(1, 8);
    let mut shares: Vec<Vec<Vec<(LfsOid, u64)>>> = vec![Vec::new(); workers];
    for (i, pack) in packs.into_iter().enumerate() {
        shares[i % workers].push(pack);
    }
    std::thread::scope(|scope| {
        let running: Vec<_> = shares
            .iter()
            .filter(|share| !share.is_empty())
            .map(|share| {
                scope.spawn(move || {
                    InProcessAgent::for_upload(AgentOptions::in_dir(dir), remote)?
                        .upload_ahead(share)
                })
            })
            .collect();
        let mut registered = 0;
        for worker in running {
            registered += worker.join().map_err(|_| {
                TransferError::Setup("an upload-ahead worker panicked".to_string())
            })??;
        }
        Ok(registered)
    })
}

/// Fewer small objects than this are left to git-lfs's agents, which gather that many
/// themselves.
const AHEAD_AT_LEAST: usize = 16;

/// The most bytes of members a pack uploaded ahead of git-lfs holds: its xorb (the members'
/// chunks, their headers and its footer, a few KiB more) then stays within the 1 MiB that a
/// node on object storage catching up with the push reads whole and keeps a copy of (the
/// store's `footers::WHOLE_READ_MAX`), so a fetch of the files one by one through that node
/// (standalone fetches have no download packs) costs no request to the bucket per file. With
/// packs of up to 64 files whatever their size, such a fetch of 10,000 files of 1-100 KiB
/// through the other node of a Garage bucket sent 3,269 reads to the bucket and took twice as
/// long.
const AHEAD_PACK_BYTES: u64 = (1 << 20) - (32 << 10);

impl InProcessAgent {
    /// Downloads `t` (its action from the LFS server's batch answer in negotiated mode, none
    /// in standalone mode); the file it was written to, and the file's SHA-256 when it was
    /// computed while its bytes were written (not checked here). With `mirror`, the bytes are
    /// also written there as they land (see `xet_client::pipeline::mirror`); the third value
    /// says whether `mirror` holds all of them (a download that took over an earlier one's
    /// bytes, or an object too small to be written through a record, leaves it incomplete:
    /// the caller copies the object then).
    pub(crate) fn download(
        &mut self,
        t: &Transfer,
        mirror: Option<std::fs::File>,
    ) -> Result<(PathBuf, Option<LfsOid>, bool), TransferError> {
        let mut writer = ProtocolWriter::new(std::io::sink());
        self.agent.last_sha256 = None;
        self.agent.last_mirrored = false;
        self.agent.next_mirror = mirror;
        let path = self.agent.download(t, &mut writer);
        self.agent.next_mirror = None;
        let path = path?;
        let sha = self
            .agent
            .last_sha256
            .take()
            .filter(|(oid, _)| *oid == t.oid)
            .map(|(_, sha)| sha);
        Ok((path, sha, std::mem::take(&mut self.agent.last_mirrored)))
    }
}

struct Agent {
    options: AgentOptions,
    /// The remote git-lfs named in `init` (a name or a URL), which picks the standalone
    /// endpoint.
    remote: Option<String>,
    standalone: Option<Result<Standalone, Arc<TransferError>>>,
    /// Negotiated endpoints by CAS URL and refresh route.
    negotiated: Vec<((String, String), Arc<dyn Endpoint>)>,
    temp_dir: Option<PathBuf>,
    /// git-lfs's temp directory and its `xet-packs` directory, once created by this process
    /// (each request would otherwise lock their parents to learn they exist).
    made_dirs: Option<(PathBuf, PathBuf)>,
    common_dir: Option<Option<PathBuf>>,
    /// git's common directory and git-lfs's temp directory, being found on a thread started at
    /// `init` (two git processes, run while git-lfs makes its batch call instead of before the
    /// first object), taken at first use.
    dirs_ahead: Option<std::thread::JoinHandle<FoundDirs>>,
    /// The shared server of a directory store, its URL, and when it was last used.
    shared: Option<(Arc<dyn Endpoint>, String, Instant)>,
    /// No shared server could be had: this process opens the store itself.
    shared_failed: bool,
    /// The transfer journal, opened at the first record.
    journal: Option<journal::Appender>,
    /// The partial downloads stopped agents left that a download may take over, once this
    /// process has looked (see [`parts::Parts::scan`]).
    parts: Option<parts::Parts>,
    /// Earlier versions of objects, from the repository's history (read at first use).
    earlier: prior::Earlier,
    /// The chunk lists of this repository's objects, once found (and pruned) at first use;
    /// `Some(None)` without a git directory.
    chunk_lists: Option<Option<ChunkLists>>,
    /// Whether git-lfs's store holds objects whose chunks a download may copy (see
    /// [`Agent::may_hold_chunks`]), once looked at.
    store_has_objects: Option<bool>,
    /// Bytes of local objects without a chunk list this process may still hash to make one
    /// (see [`Agent::add_local_chunks`]).
    unlisted_budget: u64,
    /// Whether small objects may go up in packs (`xet.packUploads`, read at the first pack).
    packs_allowed: Option<bool>,
    /// The outcomes of upload and download packs this agent saw concluded, by the name of
    /// their files: the other members it is handed need no lock and no file read.
    concluded_packs: std::collections::HashMap<String, Arc<pack::Outcome>>,
    /// How long the last round of gathered small objects this agent led took (see `gather`).
    last_gathered_round: Option<Duration>,
    /// Whether downloads compute the file's SHA-256 while its bytes are written (in-process
    /// fetches, which put the object in place themselves; git-lfs hashes what an agent
    /// gives it anyway).
    sha256_as_written: bool,
    /// The last download's object and the SHA-256 computed while it was written.
    last_sha256: Option<(LfsOid, LfsOid)>,
    /// A file the next download also writes its bytes to (in-process fetches: the work-tree
    /// file of a checkout, written in the same pass; see `xet_client::pipeline::mirror`).
    next_mirror: Option<std::fs::File>,
    /// Whether the last download's mirror holds the whole object.
    last_mirrored: bool,
}

impl Agent {
    fn new(options: AgentOptions) -> Self {
        let earlier = prior::Earlier::in_dir(options.git.dir());
        Self {
            options,
            remote: None,
            standalone: None,
            negotiated: Vec::new(),
            temp_dir: None,
            made_dirs: None,
            common_dir: None,
            dirs_ahead: None,
            shared: None,
            shared_failed: false,
            journal: None,
            parts: None,
            earlier,
            chunk_lists: None,
            store_has_objects: None,
            unlisted_budget: HASH_UNLISTED_BUDGET,
            packs_allowed: None,
            concluded_packs: std::collections::HashMap::new(),
            last_gathered_round: None,
            sha256_as_written: false,
            last_sha256: None,
            next_mirror: None,
            last_mirrored: false,
        }
    }

    /// Whether small objects may go up in the packs the LFS server names (see
    /// [`settings::pack_uploads`]), read once.
    fn packs_allowed(&mut self) -> bool {
        let git = &self.options.git;
        *self
            .packs_allowed
            .get_or_insert_with(|| settings::pack_uploads(git))
    }

    /// Answers `init`: logs the start and replies ok, or with the error that makes git-lfs stop
    /// this worker (`false`: the agent stops too).
    fn start<W: Write>(
        &mut self,
        init: &super::protocol::Init,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<bool, AgentError> {
        tracing::info!(
            operation = ?init.operation,
            remote = %xet_protocol::redact::redact(&init.remote),
            concurrent = init.concurrent,
            "git-xet {} agent started",
            env!("CARGO_PKG_VERSION")
        );
        if let Err(message) = self.init(init) {
            // git-lfs stops this worker (and shows its error where it can).
            tracing::error!("{message}");
            writer.init_error(&format!("git-xet: {message}"))?;
            return Ok(false);
        }
        writer.init_ok()?;
        Ok(true)
    }

    /// Takes note of `init`. Refuses the downloads of a `git lfs prune` that wants objects
    /// verified with a remote git-xet serves in standalone mode: git-lfs would count every
    /// object as present without asking (see [`super::prune`]).
    fn init(&mut self, init: &super::protocol::Init) -> Result<(), TransferError> {
        self.remote = Some(init.remote.clone()).filter(|r| !r.trim().is_empty());
        if self.dirs_ahead.is_none() && self.common_dir.is_none() {
            let git = self.options.git.clone();
            self.dirs_ahead = std::thread::Builder::new()
                .name("git-dirs".into())
                .spawn(move || find_dirs(&git))
                .ok();
        }
        if init.operation != Operation::Download {
            return Ok(());
        }
        let Some(caller) = super::prune::verifying_caller() else {
            return Ok(());
        };
        if !settings::xet_standalone_for(&self.options.git, &init.remote) {
            return Ok(());
        }
        let message = super::prune::refusal(&caller, &init.remote);
        super::terminal::tell_user_once(&self.options.git, caller.pid, "prune", &message);
        Err(TransferError::Setup(message))
    }

    fn common_dir(&mut self) -> Option<PathBuf> {
        self.take_dirs_ahead();
        if self.common_dir.is_none() {
            self.common_dir = Some(self.options.git.common_dir().ok());
        }
        self.common_dir.clone().flatten()
    }

    /// What the thread started at `init` found, once it is done (waiting for it).
    fn take_dirs_ahead(&mut self) {
        let Some(found) = self.dirs_ahead.take().and_then(|h| h.join().ok()) else {
            return;
        };
        if self.common_dir.is_none() {
            self.common_dir = Some(found.common);
        }
        if let (None, Some(dir)) = (&self.temp_dir, found.temp) {
            self.temp_dir = Some(dir);
        }
    }

    fn record(&mut self, record: Record) {
        let Some(dir) = self.common_dir() else {
            return;
        };
        let appended = match &mut self.journal {
            Some(j) => j.append(&record),
            None => journal::Appender::open(&dir).and_then(|mut j| {
                let appended = j.append(&record);
                self.journal = Some(j);
                appended
            }),
        };
        if let Err(e) = appended {
            tracing::warn!(
                "cannot update the transfer journal in {}: {e}",
                dir.display()
            );
        }
    }

    /// git-lfs's temp directory (where downloads are written), found once.
    fn lfs_temp_dir(&mut self) -> Result<PathBuf, TransferError> {
        self.take_dirs_ahead();
        if let Some(dir) = &self.temp_dir {
            return Ok(dir.clone());
        }
        let dir = match self.common_dir() {
            Some(common) => settings::lfs_temp_dir_in(&self.options.git, &common),
            None => settings::lfs_temp_dir(&self.options.git),
        }
        .map_err(TransferError::TempDir)?;
        Ok(self.temp_dir.insert(dir).clone())
    }

    /// [`Self::lfs_temp_dir`], created if it is not there yet.
    fn made_lfs_temp_dir(&mut self) -> Result<PathBuf, TransferError> {
        Ok(self.made_dirs()?.0)
    }

    /// The directory of the pack files in git-lfs's temp directory (see `pack`), created if it
    /// is not there yet.
    fn made_pack_dir(&mut self) -> Result<PathBuf, TransferError> {
        Ok(self.made_dirs()?.1)
    }

    fn made_dirs(&mut self) -> Result<(PathBuf, PathBuf), TransferError> {
        if let Some(made) = &self.made_dirs {
            return Ok(made.clone());
        }
        let dir = self.lfs_temp_dir()?;
        let packs = dir.join(pack::PACK_DIR);
        std::fs::create_dir_all(&packs).map_err(|e| TransferError::Local {
            what: "cannot create git-lfs's temp directory",
            path: packs.clone(),
            source: e,
        })?;
        Ok(self.made_dirs.insert((dir, packs)).clone())
    }

    /// The earlier versions of `t`'s object that match `endpoint`, looked for as `look` says
    /// (see [`prior`]), without those using a xorb in `lost`.
    fn prior_versions(
        &mut self,
        endpoint: &dyn Endpoint,
        t: &Transfer,
        look: prior::Look,
        lost: &[XorbHash],
    ) -> Vec<PriorVersion> {
        if t.size < prior::MIN_PRIOR_SIZE {
            return Vec::new();
        }
        let objects = self.lfs_objects_dir();
        let lists = self.chunk_lists();
        let here = prior::Here {
            objects: objects.as_deref(),
            lists: lists.as_ref(),
        };
        self.earlier
            .versions(endpoint, &t.oid, t.size, here, look, lost)
    }

    /// `<LFS storage>/objects`, beside git-lfs's temp directory.
    fn lfs_objects_dir(&mut self) -> Option<PathBuf> {
        self.lfs_temp_dir()
            .ok()
            .map(|tmp| settings::objects_beside(&tmp))
    }

    /// The chunk lists of this repository's objects (`<git common dir>/xet/chunk-lists`, see
    /// [`ChunkLists`]), pruned now and then at first use.
    fn chunk_lists(&mut self) -> Option<ChunkLists> {
        if self.chunk_lists.is_none() {
            let lists = self.common_dir().map(|dir| ChunkLists::in_git_dir(&dir));
            if let (Some(lists), Some(objects)) = (&lists, self.lfs_objects_dir()) {
                lists.prune_now_and_then(&|oid: &LfsOid| object_path(&objects, oid).is_file());
            }
            self.chunk_lists = Some(lists);
        }
        self.chunk_lists.clone().flatten()
    }

    /// Remembers the chunks of object `oid` (`size` bytes, Xet file `file`) for later
    /// versions of it, if it is large enough for them to look ([`prior::MIN_PRIOR_SIZE`]).
    fn remember_chunks(&mut self, oid: &LfsOid, size: u64, file: &FileHash, chunks: &[ChunkRef]) {
        if size < prior::MIN_PRIOR_SIZE || chunks.is_empty() {
            return;
        }
        if let Some(lists) = self.chunk_lists() {
            if let Err(e) = lists.put(oid, size, file, chunks) {
                tracing::debug!("{e}");
            }
        }
    }

    /// Whether git-lfs's store may hold chunks of another object than `oid`: it holds an
    /// object of at least [`prior::MIN_PRIOR_SIZE`] bytes besides it. Looked at once per
    /// process (a fresh clone's store is empty); an object this process downloads counts
    /// from then on.
    fn may_hold_chunks(&mut self, objects: &Path, oid: &LfsOid) -> bool {
        let found = *self.store_has_objects.get_or_insert_with(|| {
            xet_client::object_chunks::local_objects(objects)
                .iter()
                .any(|(other, size, _)| other != oid && *size >= prior::MIN_PRIOR_SIZE)
        });
        found
    }

    /// Chunks of the file `hash` (whole-file `plan`) that `local` does not hold yet but that
    /// some other object in git-lfs's store holds, whatever version or path it came from:
    /// the endpoint's chunk list of the file (docs/cas-api.md §5.8) says which chunks the
    /// file has, the remembered chunk lists of the local objects say where they are
    /// ([`ChunkLists::find`]). Objects without a list are hashed once first (at most
    /// [`HASH_UNLISTED_BUDGET`] bytes per process). Never fails: the download fetches what is
    /// not found.
    fn add_local_chunks(
        &mut self,
        endpoint: &dyn Endpoint,
        t: &Transfer,
        hash: &FileHash,
        plan: &ReconstructionPlan,
        local: &mut LocalChunks,
    ) {
        if t.size < prior::MIN_PRIOR_SIZE {
            return;
        }
        let (Some(lists), Some(objects)) = (self.chunk_lists(), self.lfs_objects_dir()) else {
            return;
        };
        // The question costs a round trip: asked only when the plan leaves at least a small
        // object's worth uncovered and some object here could hold chunks of it.
        let uncovered: u64 = plan
            .terms
            .iter()
            .filter(|term| term.chunks.clone().any(|i| !local.has(&term.xorb, i)))
            .map(|term| u64::from(term.unpacked_len))
            .sum();
        if uncovered < prior::MIN_PRIOR_SIZE || !self.may_hold_chunks(&objects, &t.oid) {
            return;
        }
        let list = match endpoint.file_chunks(hash) {
            Ok(Some(list)) => list,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(oid = %t.oid, "no chunk list of the file; local objects not searched: {e}");
                return;
            }
        };
        if let Err(why) = check_list(&list, hash, t.size) {
            tracing::warn!(oid = %t.oid, "the endpoint's chunk list of {hash} does not make it: {why}");
            return;
        }
        let Some(located) = locate_chunks(&list, plan) else {
            return;
        };
        let wanted: HashSet<ChunkHash> = located
            .iter()
            .filter(|c| !local.has(&c.xorb, c.index))
            .map(|c| c.hash)
            .collect();
        if wanted.is_empty() {
            return;
        }
        if self.unlisted_budget > 0 {
            let hashed =
                lists.remember_unlisted(&objects, prior::MIN_PRIOR_SIZE, self.unlisted_budget);
            self.unlisted_budget = self.unlisted_budget.saturating_sub(hashed);
        }
        let mut copied = 0u64;
        for found in lists.find(&wanted, &objects) {
            let here: Vec<PriorChunk> = located
                .iter()
                .filter_map(|c| {
                    let (offset, len) = *found.chunks.get(&c.hash)?;
                    Some(PriorChunk { offset, len, ..*c })
                })
                .collect();
            let added = local.add_located(&found.path, &here);
            if added > 0 {
                let bytes: u64 = here.iter().map(|c| u64::from(c.len)).sum();
                tracing::info!(oid = %t.oid, from = %found.oid, chunks = added,
                    "chunks of another local object will be copied");
                copied += bytes;
            }
        }
        tracing::debug!(oid = %t.oid, wanted = wanted.len(), bytes = copied, "local chunk lists searched");
    }

    /// What an upload of `t` learns from the earlier versions of its object (see
    /// [`Self::prior_versions`]).
    fn upload_seeds(
        &mut self,
        endpoint: &dyn Endpoint,
        t: &Transfer,
        lost: &[XorbHash],
    ) -> Vec<(ChunkHash, XorbHash, u32)> {
        self.prior_versions(endpoint, t, prior::Look::Upload, lost)
            .iter()
            .flat_map(|v| v.seeds().collect::<Vec<_>>())
            .collect()
    }

    /// Whether the chunks a download fetches are worth keeping in the download chunk cache:
    /// when another version of the object that the history knows is not on this machine (one
    /// that `git lfs fetch --all`, another agent, or a later fetch may download). Not for an
    /// object without other versions, nor when they are all here already (later versions
    /// then copy from this one's object: see `prior_versions`): its bytes are written once,
    /// into git-lfs's object store, not twice.
    fn worth_caching(&mut self, t: &Transfer) -> bool {
        if t.size < prior::MIN_PRIOR_SIZE {
            return true;
        }
        let objects = self.lfs_objects_dir();
        self.earlier.others_missing(&t.oid, objects.as_deref())
    }

    /// Looks, once per process, at the partial downloads stopped agents left in git-lfs's
    /// temp directory, removing those of no use (see [`parts::Parts::scan`]). Never fails a
    /// transfer.
    fn clean_parts_once(&mut self) {
        if self.parts.is_some() {
            return;
        }
        self.parts = Some(parts::Parts::default());
        // The directories whose leftovers this process removed. Held while an agent scans:
        // another agent of this process (`git xet fetch` runs several) waits, so that no
        // file of its own is under way while the leftovers of a stopped process (perhaps
        // one with this very pid) are removed, and none is taken for one afterwards.
        static CLEANED: std::sync::Mutex<Vec<std::path::PathBuf>> =
            std::sync::Mutex::new(Vec::new());
        match self.lfs_temp_dir() {
            Ok(dir) => {
                let mut cleaned = xet_protocol::util::sync::LockAnyway::lock_anyway(&CLEANED);
                let first = !cleaned.contains(&dir);
                let objects = settings::objects_beside(&dir);
                self.parts = Some(parts::Parts::scan(&dir, Some(&objects), first));
                if first {
                    pack::remove_stale_packs(&dir.join(pack::PACK_DIR));
                    // Where earlier versions kept them.
                    pack::remove_stale_packs(&dir);
                    cleaned.push(dir);
                }
            }
            Err(e) => tracing::debug!("partial downloads not looked for: {e}"),
        }
    }

    fn upload<W: Write>(
        &mut self,
        t: &Transfer,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<Option<&'static Path>, TransferError> {
        self.clean_parts_once();
        let path = t.path.as_deref().ok_or(TransferError::NoPath)?;
        if let Some(pack) = pack::pack_of(t).filter(|_| self.packs_allowed()) {
            match self.upload_in_pack(t, &pack, writer) {
                Ok(pack::Packed::Done) => return Ok(None),
                Ok(pack::Packed::Alone) => {}
                Err(e) => tracing::warn!(
                    oid = %t.oid,
                    "cannot take part in the object's pack; uploading it on its own: {e}"
                ),
            }
        } else if gather::gathers(t) && self.packs_allowed() {
            match self.upload_gathered(t, writer) {
                Ok(pack::Packed::Done) => return Ok(None),
                Ok(pack::Packed::Alone) => {}
                Err(e) => tracing::warn!(
                    oid = %t.oid,
                    "cannot gather the object with others; uploading it on its own: {e}"
                ),
            }
        }
        let file = open_upload(path)?;
        let lease = self.endpoint(t, Operation::Upload)?;
        let endpoint = lease.get();
        // Releases git-lfs's other workers, which wait for the first worker's credentials.
        if t.size > 0 {
            writer
                .progress(&t.oid, 1)
                .map_err(TransferError::Progress)?;
        }
        let options = self.upload_options(t, path, &lease);
        // Another version of this file in the same push (same first chunk) may be on its way
        // in another agent: wait for it, then send only what differs from it.
        let _claim = claim_related_uploads(endpoint, path, t);
        // Earlier versions of the file (from the history) that are stored there, here or
        // listed by the endpoint: their chunks are deduplicated against wherever the edit is.
        let looked = Instant::now();
        let mut seeds = self.upload_seeds(endpoint, t, &[]);
        if t.size >= prior::MIN_PRIOR_SIZE {
            tracing::info!(oid = %t.oid, seeds = seeds.len(),
                millis = looked.elapsed().as_millis() as u64, "earlier versions looked up");
        }
        let size = t.size;
        let mut stdout_gone = None;
        // Bytes sent by an attempt that had to be repeated, for the journal.
        let sent = std::cell::Cell::new(0u64);
        let mut report = |p: UploadProgress| {
            sent.set(p.bytes_uploaded);
            // Bytes count when they are safe at the endpoint (stored or deduplicated), so the
            // counter moves with the wire; the last byte only once the shard is registered.
            let done = p.bytes_done.min(size.saturating_sub(1));
            if let Err(e) = writer.progress(&t.oid, done) {
                stdout_gone.get_or_insert(e);
            }
        };
        let mut attempt = upload_file_with_seeds(endpoint, &file, &options, &seeds, &mut report);
        let mut sent_before = 0u64;
        if let Err(e) = &attempt {
            if e.is_lost_xorb() {
                // The shard relied on a xorb the endpoint no longer holds intact (a stale
                // local shard cache, or damage on the server); the cache has dropped it, so a
                // second pass sends those chunks, which also repairs the server's copy.
                tracing::warn!(
                    oid = %t.oid,
                    "{}; uploading the chunks it held again",
                    xet_protocol::redact::redact(&e.to_string())
                );
                sent_before = sent.get();
                // The seeds may rely on that xorb too: they are planned again (the endpoint
                // plans nothing through a xorb it found lost), without any version using a
                // xorb the refusal names.
                let lost = prior::named_xorbs(&e.to_string());
                seeds = self.upload_seeds(endpoint, t, &lost);
                let again = open_upload(path)?;
                attempt = upload_file_with_seeds(endpoint, &again, &options, &seeds, &mut report);
            }
        }
        let summary = attempt.map_err(|e| upload_failed(e, path, endpoint))?;
        if let Some(e) = stdout_gone {
            return Err(TransferError::Progress(e));
        }
        let described = xet_protocol::redact::redact(&endpoint.describe());
        drop(lease);
        self.note_upload(t, &summary, sent_before + summary.uploaded_bytes, described);
        self.remember_chunks(&t.oid, t.size, &summary.file_hash, &summary.file_chunks);
        Ok(None)
    }

    /// How `t` is uploaded from `path` to the endpoint of `lease`.
    fn upload_options(&self, t: &Transfer, path: &Path, lease: &Lease) -> UploadOptions {
        let mut options = UploadOptions {
            expected_sha256: Some(t.oid),
            expected_size: Some(t.size),
            // git-lfs named the object by hashing it (`…/objects/ab/cd/abcd…`); a server that
            // checks claims need not have it hashed again here (see `server::claims`).
            sha256_declared_by_namer: named_by_oid(path, &t.oid)
                && !crate::agent::settings::hash_uploads_forced(),
            ..self.options.upload
        };
        if matches!(lease, Lease::Owned(_)) {
            // An in-process store has no network latency to hide, and storing a xorb holds a
            // second copy of it: one put at a time keeps memory down.
            options.parallel_puts = 1;
        }
        options
    }

    /// Logs an upload and records it in the transfer journal (`sent`: bytes of xorb bodies
    /// sent, a repeated attempt's included).
    fn note_upload(&mut self, t: &Transfer, summary: &UploadSummary, sent: u64, endpoint: String) {
        tracing::info!(
            oid = %t.oid,
            xet = %summary.file_hash,
            size = summary.size,
            already_stored = summary.already_stored,
            dedup_bytes = summary.dedup_bytes,
            history_dedup_bytes = summary.history_dedup_bytes,
            uploaded_bytes = summary.uploaded_bytes,
            new_xorbs = summary.new_xorbs,
            sha256_computed = summary.sha256_computed,
            "uploaded"
        );
        let mut record = Record::new(Direction::Upload, &t.oid, &summary.file_hash, summary.size);
        record.dedup_bytes = if summary.already_stored {
            summary.size
        } else {
            summary.dedup_bytes
        };
        record.transferred_bytes = sent;
        record.history_bytes = summary.history_dedup_bytes;
        record.endpoint = endpoint;
        self.record(record);
    }

    fn download<W: Write>(
        &mut self,
        t: &Transfer,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<PathBuf, TransferError> {
        if let Some(pack) = download_pack::download_pack_of(t) {
            match self.download_in_pack(t, pack, writer) {
                Ok(Some(path)) => return Ok(path),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    oid = %t.oid,
                    "cannot take part in the object's download pack; downloading it on its own: {e}"
                ),
            }
        }
        let lease = self.endpoint(t, Operation::Download)?;
        let endpoint = lease.get();
        // Shows a large download has started (a small one completes as soon).
        if t.size >= EARLY_PROGRESS_MIN {
            writer
                .progress(&t.oid, 1)
                .map_err(TransferError::Progress)?;
        }
        let hash = find_xet_hash(endpoint, t)?;
        // The LFS server may have sent the plan with the action (git xet serve does for small
        // objects); otherwise, or if it is unusable, ask the CAS server.
        let (plan, inline) = match inline_plan(t).filter(|p| p.file_size == t.size) {
            Some(p) => (p, true),
            None => (ask_plan(endpoint, t, hash)?, false),
        };
        let dir = self.made_lfs_temp_dir()?;
        self.clean_parts_once();
        let keep = self.worth_caching(t);
        // Chunks of earlier versions on this machine are copied, not fetched.
        let mut local = LocalChunks::default();
        for version in self.prior_versions(endpoint, t, prior::Look::Download, &[]) {
            local.add(&version);
        }
        self.add_local_chunks(endpoint, t, &hash, &plan, &mut local);
        // An interrupted download of the object is taken over, else a new one starts.
        let earlier = match &mut self.parts {
            Some(found) if t.size >= parts::RESUMABLE_MIN => {
                found.adopt(&dir, &t.oid, &hash, t.size)
            }
            _ => None,
        };
        let part = match earlier {
            Some(part) => part,
            None => parts::new_part(&dir, &t.oid, &hash, t.size)?,
        };
        // No SHA-256 for git-lfs: it hashes the file itself after `complete` and refuses it on
        // a mismatch before it enters .git/lfs/objects (docs/lfs-agent.md §7). Hashing it here
        // too would only word that refusal better, at the cost of a pass over every byte. What
        // the agent checks is what git-lfs cannot: every chunk's hash and the Xet file hash.
        // In-process fetches put the object in place themselves: the SHA-256 is computed as
        // the bytes land, while the download goes on.
        if self.sha256_as_written {
            if let Some(record) = part.record() {
                record.hash_as_written();
            }
        }
        if let (Some(mirror), Some(record)) = (self.next_mirror.take(), part.record()) {
            if let Err(e) = record.mirror_to(mirror) {
                tracing::debug!(oid = %t.oid, "cannot write the work-tree file as the object lands: {e}");
            }
        }
        let job = Rebuild {
            endpoint,
            t,
            hash,
            keep,
            local: &local,
        };
        let (n, fetched) = match job.run(plan, inline, &part, writer) {
            Ok(done) => done,
            Err(e) => {
                self.end_part(&t.oid, part);
                return Err(e);
            }
        };
        endpoint.trim_cache();
        let Written {
            written: n,
            local: copied,
            resumed,
            cached,
            chunks,
            ..
        } = n;
        if n != t.size {
            part.discard();
            self.end_part(&t.oid, part);
            return Err(TransferError::RebuiltSize {
                hash,
                oid: t.oid,
                actual: n,
                expected: t.size,
            });
        }
        self.last_mirrored = part.record().is_some_and(|r| r.mirrored());
        if let Some(sha) = part.record().and_then(|r| r.sha256()) {
            match sha {
                Ok(sha) => self.last_sha256 = Some((t.oid, sha)),
                Err(e) => tracing::debug!(oid = %t.oid, "cannot finish the SHA-256: {e}"),
            }
        }
        let path = part.keep()?;
        tracing::info!(oid = %t.oid, xet = %hash, size = t.size, "downloaded");
        if copied > 0 {
            tracing::info!(oid = %t.oid, copied, "bytes copied from earlier versions on this machine");
        }
        if resumed > 0 {
            tracing::info!(oid = %t.oid, resumed, "bytes an interrupted download had written kept");
        }
        if cached > 0 {
            tracing::info!(oid = %t.oid, cached, "bytes read from the download chunk cache");
        }
        let mut record = Record::new(Direction::Download, &t.oid, &hash, t.size);
        record.transferred_bytes = fetched;
        record.reused_bytes = copied + resumed + cached;
        record.history_bytes = copied;
        record.endpoint = xet_protocol::redact::redact(&endpoint.describe());
        drop(lease);
        self.record(record);
        self.remember_chunks(&t.oid, t.size, &hash, &chunks);
        if t.size >= prior::MIN_PRIOR_SIZE {
            // git-lfs moves it into its store once this answer is read.
            self.store_has_objects = Some(true);
        }
        Ok(path)
    }

    /// A download of `oid` failed: its partial file stays for the next attempt if it holds
    /// something, and is removed otherwise (see [`parts::Parts::end`]).
    fn end_part(&mut self, oid: &LfsOid, part: parts::Part) {
        match &mut self.parts {
            Some(found) => found.end(oid, part),
            None => drop(part),
        }
    }
}

/// What [`find_dirs`] found: git's common directory and git-lfs's temp directory (`None`
/// where git could not say; asked again at first use, for the error).
struct FoundDirs {
    common: Option<PathBuf>,
    temp: Option<PathBuf>,
}

/// git's common directory and git-lfs's temp directory of the repository `git` is in.
fn find_dirs(git: &Git) -> FoundDirs {
    let common = git.common_dir().ok();
    let temp = common
        .as_deref()
        .and_then(|c| settings::lfs_temp_dir_in(git, c).ok());
    FoundDirs { common, temp }
}

/// The reconstruction plan of Xet file `hash` for the download `t`, from the CAS server; its
/// size must be the object's.
fn ask_plan(
    endpoint: &dyn Endpoint,
    t: &Transfer,
    hash: FileHash,
) -> Result<ReconstructionPlan, TransferError> {
    let plan = endpoint
        .reconstruction(&hash, None)
        .map_err(|e| TransferError::Plan {
            hash,
            source: Box::new(e),
        })?
        .ok_or_else(|| {
            TransferError::Lookup(format!(
                "{} does not have Xet file {hash} (LFS object {}); was it pushed?",
                endpoint.describe(),
                t.oid
            ))
        })?;
    if plan.file_size != t.size {
        return Err(TransferError::WrongSize {
            hash,
            oid: t.oid,
            actual: plan.file_size,
            expected: t.size,
        });
    }
    Ok(plan)
}

/// One object's rebuild into its partial download file.
struct Rebuild<'a> {
    endpoint: &'a dyn Endpoint,
    t: &'a Transfer,
    hash: FileHash,
    /// Keep what is fetched in the download chunk cache.
    keep: bool,
    /// Chunks of earlier versions on this machine, copied instead of fetched.
    local: &'a LocalChunks,
}

impl Rebuild<'_> {
    /// Writes the file from `plan` into `tmp`, reporting progress to git-lfs. At most three
    /// attempts: a failed inline plan (`inline`; its URLs may have expired while git-lfs
    /// queued the object) is replaced by the CAS server's once, and after a first attempt that
    /// did not verify, the chunk cache's copies of the plan's xorbs are dropped and everything
    /// is fetched again. Returns what was written and the xorb bytes fetched from the endpoint
    /// by every attempt.
    fn run<W: Write>(
        &self,
        mut plan: ReconstructionPlan,
        mut inline: bool,
        part: &parts::Part,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<(Written, u64), TransferError> {
        let (endpoint, t, hash) = (self.endpoint, self.t, self.hash);
        let once = ReadOnce(endpoint);
        let source: &dyn xet_protocol::XorbSource = if self.keep { endpoint } else { &once };
        let source = Tallied::new(source);
        let mut reported = 0u64;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if attempt > 3 {
                part.discard();
                return Err(TransferError::GaveUp(t.oid));
            }
            if attempt > 1 {
                part.restart(&t.oid).map_err(|e| TransferError::Local {
                    what: "cannot write",
                    path: part.path().to_path_buf(),
                    source: e,
                })?;
            }
            let mut progress = |written: u64| -> std::io::Result<()> {
                // Progress only moves forward, also when a second attempt starts over.
                if written >= reported + (1 << 20) {
                    reported = written;
                    writer.progress(&t.oid, written.min(t.size.saturating_sub(1)))?;
                }
                Ok(())
            };
            let written = match (part.record(), part.file()) {
                (Some(record), _) => write_part(&source, &plan, record, self.local, &mut progress),
                (None, Some(file)) => {
                    write_file_at_with(&source, &hash, &plan, file, self.local, &mut progress)
                }
                (None, None) => Err(DownloadError::Write(std::io::Error::other(
                    "the partial download is gone",
                ))),
            };
            match written {
                Ok(n) => return Ok((n, source.fetched())),
                Err(e @ DownloadError::Source { .. }) if std::mem::take(&mut inline) => {
                    tracing::info!(oid = %t.oid, "{e}; asking the CAS server for a new plan");
                    plan = ask_plan(endpoint, t, hash)?;
                    attempt -= 1;
                }
                // Chunks read from the local chunk cache may be what did not verify: drop
                // them and fetch everything from the server once more.
                Err(e @ (DownloadError::WrongFile { .. } | DownloadError::Damaged { .. }))
                    if attempt == 1 =>
                {
                    tracing::warn!(oid = %t.oid, "{e}; trying again without the local chunk cache");
                    let xorbs: Vec<_> = plan.fetch.iter().map(|(x, _)| *x).collect();
                    endpoint.forget_cached(&xorbs);
                }
                Err(e) => {
                    if matches!(
                        e,
                        DownloadError::WrongFile { .. } | DownloadError::Damaged { .. }
                    ) {
                        part.discard();
                    }
                    return Err(TransferError::Download {
                        oid: t.oid,
                        endpoint: endpoint.describe(),
                        source: Box::new(e),
                    });
                }
            }
        }
    }
}

/// Opens an object to upload without ever blocking: non-blocking (a FIFO would block `open`
/// until a writer comes), and only if what was opened is a regular file.
fn open_upload(path: &Path) -> Result<std::fs::File, TransferError> {
    let shown = || echo(&path.to_string_lossy());
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let unreadable = |e| TransferError::ReadObject {
        path: shown(),
        source: e,
    };
    let file = options.open(path).map_err(unreadable)?;
    let kind = file.metadata().map_err(unreadable)?.file_type();
    if kind.is_file() {
        // O_NONBLOCK means nothing for a regular file's reads.
        return Ok(file);
    }
    Err(TransferError::NotAFile {
        path: shown(),
        kind: file_kind(&kind),
    })
}

/// "a directory", "a FIFO", … for messages.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "something else"
    }
}

/// Objects from this size on get a progress message as soon as their download starts.
const EARLY_PROGRESS_MIN: u64 = 1 << 20;

/// How long an upload waits for another agent uploading a related file (see
/// [`claim_related_uploads`]) before it goes ahead anyway.
const RELATED_UPLOAD_PATIENCE: Duration = Duration::from_secs(3600);

/// Objects smaller than this upload without claiming their first chunk.
const MIN_CLAIM_SIZE: u64 = 512 << 10;

/// git-lfs hands the versions of a file in one push (several commits, `git lfs migrate`) to
/// parallel agents, which would each send the chunks they share. Versions of a file usually
/// start with the same chunk: an upload first claims that chunk in the endpoint's shard cache
/// (a file lock in its shard cache, [`CasTarget::claim_upload`](xet_protocol::CasTarget::claim_upload)). Whoever finds it claimed waits until the other agent
/// has registered its file, then picks up its shard from the cache and sends only what
/// differs; unrelated files go on in parallel. Without a cache, nothing is claimed.
fn claim_related_uploads(
    endpoint: &dyn Endpoint,
    path: &Path,
    t: &Transfer,
) -> Option<xet_protocol::UploadClaim> {
    // Small objects are not worth it: versions of them share at most a few chunks, and the
    // claim (reading the start of the file again, a lock file) costs more than that.
    if t.size < MIN_CLAIM_SIZE {
        return None;
    }
    let first = match open_upload(path)
        .map_err(std::io::Error::other)
        .and_then(xet_client::pipeline::upload::first_chunk_hash)
    {
        Ok(Some(first)) => first,
        Ok(None) => return None,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the start of the object to claim it");
            return None;
        }
    };
    let claim = endpoint.claim_upload(&first, RELATED_UPLOAD_PATIENCE)?;
    if claim.waited > Duration::from_millis(50) {
        tracing::info!(
            oid = %t.oid,
            waited_secs = claim.waited.as_secs_f64(),
            "waited for another agent uploading a version of the same file"
        );
    }
    Some(claim)
}

/// The reconstruction the LFS server sent with the action ([`RECONSTRUCTION_HEADER`]), if it is
/// there and parses; anything else is ignored (the agent then asks the CAS server).
fn inline_plan(t: &Transfer) -> Option<ReconstructionPlan> {
    let text = t.action.as_ref()?.header(RECONSTRUCTION_HEADER)?;
    if text.len() > MAX_INLINE_RECONSTRUCTION {
        return None;
    }
    let parsed = serde_json::from_str::<ReconstructionV2>(text)
        .map_err(|e| e.to_string())
        .and_then(|r| r.into_plan(None).map_err(|e| e.0));
    match parsed {
        Ok(plan) => Some(plan),
        Err(e) => {
            tracing::debug!(oid = %t.oid, "ignoring the reconstruction sent with the action: {e}");
            None
        }
    }
}

/// The longest reconstruction accepted from an action header.
const MAX_INLINE_RECONSTRUCTION: usize = 64 << 10;

/// The Xet file holding `t`'s content: the action's `X-Xet-Hash`, else the endpoint's oid index.
fn find_xet_hash(endpoint: &dyn Endpoint, t: &Transfer) -> Result<FileHash, TransferError> {
    if let Some(text) = t.action.as_ref().and_then(|a| a.header("X-Xet-Hash")) {
        return FileHash::from_hex(text).map_err(|e| {
            TransferError::Setup(format!(
                "the LFS server sent a bad X-Xet-Hash {:?}: {e}",
                echo(text)
            ))
        });
    }
    match endpoint.locate_oid(&t.oid) {
        Ok(Some((hash, _))) => Ok(hash),
        Ok(None) => Err(TransferError::Lookup(format!(
            "{} has no file with LFS oid {}; was it pushed with git-xet?",
            endpoint.describe(),
            t.oid
        ))),
        Err(e) => Err(TransferError::LookupFailed {
            oid: t.oid,
            endpoint: endpoint.describe(),
            source: Box::new(e),
        }),
    }
}

/// Whether `path` is where git-lfs keeps the object `oid` in its storage (`…/ab/cd/abcd…`): a file
/// git-lfs named by hashing it.
fn named_by_oid(path: &Path, oid: &LfsOid) -> bool {
    path.ends_with(xet_client::object_chunks::object_path(Path::new(""), oid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_git_lfs_storage_paths_are_named_by_their_oid() {
        let oid = LfsOid::of(b"x");
        let hex = oid.to_hex();
        let stored = Path::new("/r/.git/lfs/objects")
            .join(&hex[..2])
            .join(&hex[2..4])
            .join(&hex);
        assert!(named_by_oid(&stored, &oid));
        assert!(!named_by_oid(&stored, &LfsOid::of(b"y")));
        assert!(!named_by_oid(&Path::new("/r/work").join(&hex), &oid));
        let swapped = Path::new("/o").join(&hex[2..4]).join(&hex[..2]).join(&hex);
        assert!(!named_by_oid(&swapped, &oid));
    }
}
