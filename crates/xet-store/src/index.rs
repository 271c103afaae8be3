//! The store's index, in a redb database (`index.redb`): what is stored and how files are rebuilt.
//!
//! | table | key | value |
//! |---|---|---|
//! | `xorbs` | xorb hash (32) | num_chunks u32, stored_len u64, unpacked_len u64 (20 bytes) |
//! | `files` | file hash (32) | size u64, shard hash (32), then per term: xorb hash (32), chunk start u32, chunk end u32, unpacked_len u32 (44 bytes each) |
//! | `oids` | SHA-256 digest (32, usual byte order) | file hash (32): a mapping whose SHA-256 was checked (the store hashed the file) |
//! | `oid_files` | SHA-256 digest (32), then file hash (32) | empty: every checked mapping, the first one (`oids`) and any other file found to have the same SHA-256 (registered through another repository) |
//! | `claims` | SHA-256 digest (32), then file hash (32) | time claimed (u64, unix seconds), the file's size (u64), then the uploader (UTF-8: the repository of a scoped credential, empty for server-wide ones): a shard said the file has that SHA-256 and nobody has checked it yet. Rows of older stores hold the time only |
//! | `claim_load` | uploader (UTF-8) | count (u64), bytes (u64): the uploader's claims not checked yet |
//! | `claim_queue` | uploader's length (u16), uploader, time claimed (u64 big-endian), SHA-256 digest (32), file hash (32) | the file's size (u64): each uploader's claims, oldest first |
//! | `dedup` | chunk hash (32, unkeyed) | xorb hash (32), chunk index u32: the chunks global dedup queries are answered for (the first chunk and the probes of each registered file, the dense keys of each stored xorb; docs/format.md §5.1, §5.5). Stores written before dense keys were indexed have only the eligible chunks of their xorbs (hash `0 mod 1024`) |
//! | `shards` | shard hash (32) | number of files u32, registration time u64 (unix seconds), then flags u8 (bit 0: the registration is in a checkpoint, so the shard's object may be gone from the bucket; see `crate::checkpoint`); older rows have no flags |
//! | `verified` | xorb hash (32) | the [`ObjectStamp`] (32 bytes) of the stored object when it was last verified whole |
//! | `damaged` | xorb hash (32) | time found (u64, unix seconds), then why, as UTF-8 text |
//! | `xorb_file` | xorb hash (32) | the first registered file whose terms use the xorb (32): a dedup hit in the xorb is answered with that file's other xorbs too |
//! | `file_repos` | file hash (32), then a repository id (UTF-8) | empty: the file was registered through that repository (what a repository-scoped token may read) |
//!
//! A xorb in `damaged` is missing or was found damaged and quarantined: no shard may rely on it
//! and no dedup answer names it until an upload of the same xorb repairs it. Its row in `xorbs`
//! is removed when it is quarantined and written again by the repair.
//!
//! A shard's `FileMetadataExt` SHA-256 is only a claim: a client could name any oid. It becomes
//! an `oids` row once the store has hashed the file itself (`settle_claim`), or at once when the
//! store computed the SHA-256 while receiving the bytes (both through `settle_claim`). Downloads may use a
//! claim (git-lfs checks what it downloads); what lets an upload be skipped uses `oids` only.
//! Stores written before claims existed keep their `oids` rows as they were.
//!
//! All integers are little-endian. A shard's files, oids and dedup entries are written in one
//! transaction, so a shard is registered whole or not at all, and a commit is durable when it
//! returns. Entries are only ever added: the first registration of a file hash, oid or dedup
//! chunk wins and later ones keep it (all registrations of a file hash rebuild the same bytes),
//! except that a file whose recorded reconstruction lost a xorb is re-recorded by the next shard
//! that registers it intact (`ShardEntries::replace`).
//!
//! redb takes an exclusive lock on the database file, so one process at a time opens a store.

use crate::repo_name::RepoName;
use std::path::Path;

use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

use std::collections::HashSet;

use crate::backend::ObjectStamp;
use crate::checkpoint_format as checkpoint;
use xet_format::{ChunkHash, FileHash, LfsOid, ShardHash, XorbHash};

const XORBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("xorbs");
const FILES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("files");
const OIDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("oids");
const CLAIMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("claims");
const DEDUP: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dedup");
const SHARDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("shards");
const VERIFIED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("verified");
const DAMAGED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("damaged");
const XORB_FILE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("xorb_file");
const FILE_REPOS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("file_repos");
const OID_FILES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("oid_files");
const CLAIM_LOAD: TableDefinition<&[u8], &[u8]> = TableDefinition::new("claim_load");
const CLAIM_QUEUE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("claim_queue");

/// An index failure.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(
        "index database {path} is open in another process (a `git xet serve`, `scrub` or `gc`, \
         or the server the agents of a directory endpoint share): one process at a time uses a \
         store directory"
    )]
    InUse { path: String },
    #[error(
        "index database {path} is being opened again after an I/O error (a full disk?); \
         try again in a moment"
    )]
    Unavailable { path: String },
    #[error("index database {path}: {source}")]
    Open {
        path: String,
        source: Box<redb::Error>,
    },
    // Boxed: redb's error is large, and every store call returns this type.
    #[error("index database: {0}")]
    Db(Box<redb::Error>),
    #[error("index database is corrupt: {table} entry for {key} has {len} bytes")]
    Corrupt {
        table: &'static str,
        key: String,
        len: usize,
    },
}

fn db_err(e: impl Into<redb::Error>) -> IndexError {
    IndexError::Db(Box::new(e.into()))
}

/// What the index records about a stored xorb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XorbMeta {
    pub num_chunks: u32,
    /// Length of the stored object (chunk region + footer).
    pub stored_len: u64,
    /// Total uncompressed length of its chunks.
    pub unpacked_len: u64,
}

/// One term of a registered file (the reconstruction planner's input, defined with it).
pub use xet_protocol::reconstruction::StoredTerm;

/// A registered file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    pub size: u64,
    /// The shard that registered it first.
    pub shard: ShardHash,
    pub terms: Vec<StoredTerm>,
}

/// Everything one shard adds to the index.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardEntries {
    pub files: Vec<(FileHash, FileRecord)>,
    /// Files among `files` registered before whose recorded reconstruction needs a xorb that is
    /// now missing or damaged: their record is replaced by this shard's (a repair).
    pub replace: Vec<FileHash>,
    pub oids: Vec<(LfsOid, FileHash)>,
    pub dedup: Vec<(ChunkHash, XorbHash, u32)>,
}

/// A SHA-256 claim not checked yet: a shard said `file` has SHA-256 `oid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub oid: LfsOid,
    pub file: FileHash,
    /// When it was made (unix seconds; 0 for claims made of a pre-claims store's mappings).
    pub claimed_at: u64,
    /// The file's size (0 when the claim predates this field).
    pub size: u64,
    /// Who made it: the repository of a scoped credential, empty for server-wide credentials
    /// (and for claims older than this field). Claim checks are shared out fairly among
    /// uploaders, and each uploader's pending claims are bounded (`server::claims`).
    pub uploader: String,
}

const TERM_LEN: usize = 44;
const FILE_HEAD_LEN: usize = 40;

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn hash_at(b: &[u8], at: usize) -> [u8; 32] {
    let mut a = [0u8; 32];
    a.copy_from_slice(&b[at..at + 32]);
    a
}

fn encode_file(r: &FileRecord) -> Vec<u8> {
    let mut v = Vec::with_capacity(FILE_HEAD_LEN + TERM_LEN * r.terms.len());
    v.extend_from_slice(&r.size.to_le_bytes());
    v.extend_from_slice(r.shard.as_bytes());
    for t in &r.terms {
        v.extend_from_slice(t.xorb.as_bytes());
        v.extend_from_slice(&t.chunk_start.to_le_bytes());
        v.extend_from_slice(&t.chunk_end.to_le_bytes());
        v.extend_from_slice(&t.unpacked_len.to_le_bytes());
    }
    v
}

fn decode_file(key: &FileHash, b: &[u8]) -> Result<FileRecord, IndexError> {
    if b.len() < FILE_HEAD_LEN || !(b.len() - FILE_HEAD_LEN).is_multiple_of(TERM_LEN) {
        return Err(IndexError::Corrupt {
            table: "files",
            key: key.to_hex(),
            len: b.len(),
        });
    }
    let terms = b[FILE_HEAD_LEN..]
        .chunks_exact(TERM_LEN)
        .map(|t| StoredTerm {
            xorb: XorbHash::from_bytes(hash_at(t, 0)),
            chunk_start: u32_at(t, 32),
            chunk_end: u32_at(t, 36),
            unpacked_len: u32_at(t, 40),
        })
        .collect();
    Ok(FileRecord {
        size: u64_at(b, 0),
        shard: ShardHash::from_bytes(hash_at(b, 8)),
        terms,
    })
}

/// Whether a write is on disk when it returns, or only with the next durable one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// On disk when it returns (an upload's registration: the client is told it is stored).
    Durable,
    /// With the next durable write (or [`Index::persist`]): for what the bucket can give again,
    /// a catch-up's registrations of shards other nodes accepted, which every start and every
    /// full catch-up repeat for what the index lacks. A catch-up after a push of 1000 small
    /// files registers 1000 shards (and as many repository grants): with an fsync each, that
    /// is 2000 disk round trips, seconds on a disk that syncs in milliseconds.
    Lazy,
}

impl Commit {
    fn apply(self, txn: &mut redb::WriteTransaction) {
        if self == Commit::Lazy {
            txn.set_durability(redb::Durability::None);
        }
    }
}

/// A shard found in storage, ready to register ([`Index::add_stored_shards`]): its entries
/// (`None`: registered already), and the repository its files were registered through with
/// those files.
#[derive(Debug)]
pub(crate) struct StoredShard {
    pub shard: ShardHash,
    pub entries: Option<ShardEntries>,
    pub repo: Option<RepoName>,
    pub files: Vec<FileHash>,
}

/// [`Index::add_shard`]'s writes, in `txn`.
fn put_shard(
    txn: &redb::WriteTransaction,
    shard: ShardHash,
    entries: &ShardEntries,
    now: u64,
    uploader: &str,
) -> Result<(usize, u64), IndexError> {
    let (mut new_files, mut new_bytes) = (0, 0);
    let mut files = txn.open_table(FILES).map_err(db_err)?;
    for (hash, record) in &entries.files {
        let absent = files
            .get(hash.as_bytes().as_slice())
            .map_err(db_err)?
            .is_none();
        if absent || entries.replace.contains(hash) {
            files
                .insert(hash.as_bytes().as_slice(), encode_file(record).as_slice())
                .map_err(db_err)?;
            new_files += 1;
            new_bytes += record.size;
        }
    }
    record_claims(txn, entries, now, uploader)?;
    let mut dedup = txn.open_table(DEDUP).map_err(db_err)?;
    for (chunk, xorb, index) in &entries.dedup {
        insert_new(&mut dedup, chunk.as_bytes(), &dedup_value(xorb, *index))?;
    }
    let mut xorb_file = txn.open_table(XORB_FILE).map_err(db_err)?;
    for (hash, record) in &entries.files {
        for t in &record.terms {
            insert_new(&mut xorb_file, t.xorb.as_bytes(), hash.as_bytes())?;
        }
    }
    let mut shards = txn.open_table(SHARDS).map_err(db_err)?;
    let mut v = (entries.files.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(&now.to_le_bytes());
    shards
        .insert(shard.as_bytes().as_slice(), v.as_slice())
        .map_err(db_err)?;
    Ok((new_files, new_bytes))
}

/// [`Index::add_file_repos`]'s writes, in `txn`.
fn put_file_repos(
    txn: &redb::WriteTransaction,
    files: &[FileHash],
    repo: &RepoName,
) -> Result<(), IndexError> {
    let mut t = txn.open_table(FILE_REPOS).map_err(db_err)?;
    for f in files {
        let key = file_repo_key(f, repo);
        t.insert(key.as_slice(), [].as_slice()).map_err(db_err)?;
    }
    Ok(())
}

/// The index database of one store.
#[derive(Debug)]
pub struct Index {
    /// Opened again after an I/O error (a full disk), so that the store works again once the
    /// disk has room (see [`crate::reopen`]).
    db: crate::reopen::ReopeningDb,
    path: std::path::PathBuf,
}

impl Index {
    /// Opens or creates `path`, creating every table.
    pub fn open(path: &Path) -> Result<Self, IndexError> {
        let db = open_database(path)?;
        let index = Self {
            db: crate::reopen::ReopeningDb::new(path, db),
            path: path.to_path_buf(),
        };
        index.backfill_xorb_files()?;
        index.backfill_claim_queue()?;
        Ok(index)
    }

    /// A read transaction.
    fn begin_read(&self) -> Result<redb::ReadTransaction, IndexError> {
        self.db.begin_read().map_err(|e| self.begin_error(e))
    }

    /// A write transaction.
    fn begin_write(&self) -> Result<redb::WriteTransaction, IndexError> {
        xet_protocol::util::worker::expect_blocking_thread("a write to the store's index");
        self.db.begin_write().map_err(|e| self.begin_error(e))
    }

    fn begin_error(&self, e: crate::reopen::BeginError) -> IndexError {
        match e {
            crate::reopen::BeginError::Redb(e) => IndexError::Db(e),
            crate::reopen::BeginError::Reopening => IndexError::Unavailable {
                path: self.path.display().to_string(),
            },
        }
    }
}

/// Opens or creates the database at `path` with every table.
fn open_database(path: &Path) -> Result<Database, IndexError> {
    let open_err = |e: redb::Error| IndexError::Open {
        path: path.display().to_string(),
        source: Box::new(e),
    };
    let db = Database::create(path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => IndexError::InUse {
            path: path.display().to_string(),
        },
        e => open_err(e.into()),
    })?;
    let tables = [
        XORBS,
        FILES,
        OIDS,
        CLAIMS,
        DEDUP,
        SHARDS,
        VERIFIED,
        DAMAGED,
        XORB_FILE,
        FILE_REPOS,
        OID_FILES,
        CLAIM_LOAD,
        CLAIM_QUEUE,
    ];
    // A write transaction (and its fsync) only when a table is missing: the agent's
    // embedded mode opens the store once per object.
    let (complete, had_claims) = match db.begin_read() {
        Ok(txn) => (
            tables.iter().all(|&t| txn.open_table(t).is_ok()),
            txn.open_table(CLAIMS).is_ok(),
        ),
        Err(_) => (false, false),
    };
    if !complete {
        let txn = db.begin_write().map_err(|e| open_err(e.into()))?;
        for table in tables {
            txn.open_table(table).map_err(|e| open_err(e.into()))?;
        }
        if !had_claims {
            demote_unchecked_oids(&txn)?;
        }
        txn.commit().map_err(|e| open_err(e.into()))?;
    }
    Ok(db)
}

impl Index {
    /// Fills `xorb_file` from `files` when it is empty and files exist (a store written before
    /// the table was): one pass, once.
    fn backfill_xorb_files(&self) -> Result<(), IndexError> {
        // Looked at in a read transaction first: nearly always there is nothing to do.
        {
            let txn = self.begin_read()?;
            let map = txn.open_table(XORB_FILE).map_err(db_err)?;
            let files = txn.open_table(FILES).map_err(db_err)?;
            if map.len().map_err(db_err)? > 0 || files.is_empty().map_err(db_err)? {
                return Ok(());
            }
        }
        let txn = self.begin_write()?;
        {
            let mut map = txn.open_table(XORB_FILE).map_err(db_err)?;
            if map.len().map_err(db_err)? > 0 {
                return Ok(());
            }
            let files = txn.open_table(FILES).map_err(db_err)?;
            for row in files.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                let key = k.value();
                if key.len() != 32 {
                    continue;
                }
                let file = FileHash::from_bytes(hash_at(key, 0));
                let record = decode_file(&file, v.value())?;
                for t in &record.terms {
                    insert_new(&mut map, t.xorb.as_bytes(), file.as_bytes())?;
                }
            }
        }
        txn.commit().map_err(db_err)
    }

    /// The first registered file that uses `xorb` in its reconstruction.
    pub(crate) fn file_of_xorb(&self, xorb: &XorbHash) -> Result<Option<FileHash>, IndexError> {
        let Some(b) = self.get(XORB_FILE, xorb.as_bytes())? else {
            return Ok(None);
        };
        if b.len() != 32 {
            return Err(IndexError::Corrupt {
                table: "xorb_file",
                key: xorb.to_hex(),
                len: b.len(),
            });
        }
        Ok(Some(FileHash::from_bytes(hash_at(&b, 0))))
    }

    fn get(
        &self,
        table: TableDefinition<&[u8], &[u8]>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(table).map_err(db_err)?;
        Ok(t.get(key).map_err(db_err)?.map(|v| v.value().to_vec()))
    }

    /// Records a stored xorb and its chunks indexed for dedup, its dense keys (first
    /// registration wins).
    pub(crate) fn add_xorb(
        &self,
        xorb: XorbHash,
        meta: XorbMeta,
        dedup: &[(ChunkHash, u32)],
    ) -> Result<(), IndexError> {
        let txn = self.begin_write()?;
        {
            let mut t = txn.open_table(XORBS).map_err(db_err)?;
            let mut v = Vec::with_capacity(20);
            v.extend_from_slice(&meta.num_chunks.to_le_bytes());
            v.extend_from_slice(&meta.stored_len.to_le_bytes());
            v.extend_from_slice(&meta.unpacked_len.to_le_bytes());
            t.insert(xorb.as_bytes().as_slice(), v.as_slice())
                .map_err(db_err)?;
            let mut d = txn.open_table(DEDUP).map_err(db_err)?;
            for (chunk, index) in dedup {
                insert_new(&mut d, chunk.as_bytes(), &dedup_value(&xorb, *index))?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// What the index knows of a xorb, if it is stored.
    pub fn xorb(&self, xorb: &XorbHash) -> Result<Option<XorbMeta>, IndexError> {
        let Some(b) = self.get(XORBS, xorb.as_bytes())? else {
            return Ok(None);
        };
        if b.len() != 20 {
            return Err(IndexError::Corrupt {
                table: "xorbs",
                key: xorb.to_hex(),
                len: b.len(),
            });
        }
        Ok(Some(XorbMeta {
            num_chunks: u32_at(&b, 0),
            stored_len: u64_at(&b, 4),
            unpacked_len: u64_at(&b, 12),
        }))
    }

    /// Whether a shard with this hash was registered.
    /// Fills `claim_queue` and `claim_load` from `claims` when the queue is empty and claims
    /// exist (a store written before the queue was): one pass, once.
    fn backfill_claim_queue(&self) -> Result<(), IndexError> {
        {
            let txn = self.begin_read()?;
            let queue = txn.open_table(CLAIM_QUEUE).map_err(db_err)?;
            let claims = txn.open_table(CLAIMS).map_err(db_err)?;
            if !queue.is_empty().map_err(db_err)? || claims.is_empty().map_err(db_err)? {
                return Ok(());
            }
        }
        let txn = self.begin_write()?;
        {
            let claims = txn.open_table(CLAIMS).map_err(db_err)?;
            let mut queue = txn.open_table(CLAIM_QUEUE).map_err(db_err)?;
            let mut load = txn.open_table(CLAIM_LOAD).map_err(db_err)?;
            load.retain(|_, _| false).map_err(db_err)?;
            for row in claims.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                if let Some(claim) = decode_claim(k.value(), v.value()) {
                    enqueue(&mut queue, &claim)?;
                    add_load(&mut load, &claim.uploader, 1, claim.size)?;
                }
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Puts every [`Commit::Lazy`] write made so far on disk (one durable commit).
    pub fn persist(&self) -> Result<(), IndexError> {
        let txn = self.begin_write()?;
        txn.commit().map_err(db_err)
    }

    pub(crate) fn has_shard(&self, shard: &ShardHash) -> Result<bool, IndexError> {
        Ok(self.get(SHARDS, shard.as_bytes())?.is_some())
    }

    /// Registers a shard's entries in one transaction, its SHA-256 claims in the name of
    /// `uploader` (see [`Claim::uploader`]). Returns the number of files that were new, and
    /// their bytes. Existing files, oids and dedup entries are kept.
    pub(crate) fn add_shard(
        &self,
        shard: ShardHash,
        entries: &ShardEntries,
        now: u64,
        uploader: &str,
        commit: Commit,
    ) -> Result<(usize, u64), IndexError> {
        self.write(commit, |txn| put_shard(txn, shard, entries, now, uploader))
    }

    /// Runs `f` in one write transaction committed as `commit` says.
    fn write<T>(
        &self,
        commit: Commit,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, IndexError>,
    ) -> Result<T, IndexError> {
        let mut txn = self.begin_write()?;
        commit.apply(&mut txn);
        let out = f(&txn)?;
        txn.commit().map_err(db_err)?;
        Ok(out)
    }

    /// Registers shards found in storage, and the repositories their files were registered
    /// through, in one transaction: what [`Self::add_shard`] and [`Self::add_file_repos`] do
    /// for each, without a transaction (its page writes) per shard.
    pub(crate) fn add_stored_shards(
        &self,
        shards: &[StoredShard],
        now: u64,
        commit: Commit,
    ) -> Result<(), IndexError> {
        if shards.is_empty() {
            return Ok(());
        }
        self.write(commit, |txn| {
            for s in shards {
                if let Some(entries) = &s.entries {
                    put_shard(
                        txn,
                        s.shard,
                        entries,
                        now,
                        s.repo.as_ref().map_or("", RepoName::as_str),
                    )?;
                }
                if let Some(repo) = &s.repo {
                    put_file_repos(txn, &s.files, repo)?;
                }
            }
            Ok(())
        })
    }

    /// Records that `files` were registered through repository `repo` (in one transaction).
    pub(crate) fn add_file_repos(
        &self,
        files: &[FileHash],
        repo: &RepoName,
        commit: Commit,
    ) -> Result<(), IndexError> {
        if files.is_empty() {
            return Ok(());
        }
        self.write(commit, |txn| put_file_repos(txn, files, repo))
    }

    /// Appends to `body` every row a checkpoint carries ([`checkpoint::Table`]), read in one
    /// transaction (a consistent view), each `shards` row marked as in a checkpoint (see
    /// [`Self::shard_in_checkpoint`]). Returns the number of rows.
    pub(crate) fn checkpoint_rows(&self, body: &mut Vec<u8>) -> Result<u64, IndexError> {
        let txn = self.begin_read()?;
        let mut rows = 0u64;
        for table in checkpoint::Table::INDEX {
            let Some(def) = checkpoint_table(table) else {
                continue;
            };
            let t = txn.open_table(def).map_err(db_err)?;
            for row in t.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                let (key, mut value) = (k.value(), v.value().to_vec());
                if table == checkpoint::Table::Shards {
                    mark_in_checkpoint(&mut value);
                }
                // A row the index would not take back (an older shape) stays out.
                if table.check(key, &value) && checkpoint::push_row(body, table, key, &value) {
                    rows += 1;
                }
            }
        }
        Ok(rows)
    }

    /// Adds the rows of a checkpoint: what is there already is kept (as for a shard's
    /// entries, the first registration wins), a `shards` row is marked as in a checkpoint,
    /// and a SHA-256 claim is queued for checking unless it was checked here. Committed lazily
    /// in transactions of [`CHECKPOINT_ROWS_PER_TXN`] rows, then persisted once (the bucket
    /// can give them again). Returns the number of rows that were new.
    pub(crate) fn add_checkpoint_rows<'a>(
        &self,
        rows: impl Iterator<Item = checkpoint::Row<'a>>,
    ) -> Result<u64, IndexError> {
        let mut rows = rows.peekable();
        let mut added = 0u64;
        while rows.peek().is_some() {
            added += self.write(Commit::Lazy, |txn| {
                let mut added = 0u64;
                for row in rows.by_ref().take(CHECKPOINT_ROWS_PER_TXN) {
                    added += u64::from(add_checkpoint_row(txn, row)?);
                }
                Ok(added)
            })?;
        }
        self.persist()?;
        Ok(added)
    }

    /// Whether `shard`'s registration is in a checkpoint (one this node wrote or read): its
    /// object may be gone from the bucket, removed once the checkpoint covered it.
    pub(crate) fn shard_in_checkpoint(&self, shard: &ShardHash) -> Result<bool, IndexError> {
        Ok(self.get(SHARDS, shard.as_bytes())?.is_some_and(|v| {
            v.get(SHARD_FLAGS_AT)
                .is_some_and(|f| f & IN_CHECKPOINT != 0)
        }))
    }

    /// Whether `file` was registered through repository `repo`.
    pub(crate) fn file_in_repo(
        &self,
        file: &FileHash,
        repo: &RepoName,
    ) -> Result<bool, IndexError> {
        Ok(self.get(FILE_REPOS, &file_repo_key(file, repo))?.is_some())
    }

    /// A registered file's reconstruction.
    pub fn file(&self, file: &FileHash) -> Result<Option<FileRecord>, IndexError> {
        self.get(FILES, file.as_bytes())?
            .map(|b| decode_file(file, &b))
            .transpose()
    }

    /// The Xet file registered for a Git LFS oid.
    pub fn file_by_oid(&self, oid: &LfsOid) -> Result<Option<FileHash>, IndexError> {
        let Some(b) = self.get(OIDS, oid.digest())? else {
            return Ok(None);
        };
        if b.len() != 32 {
            return Err(IndexError::Corrupt {
                table: "oids",
                key: oid.to_hex(),
                len: b.len(),
            });
        }
        Ok(Some(FileHash::from_bytes(hash_at(&b, 0))))
    }

    /// Every file checked to have SHA-256 `oid`: the first mapping first, then the others in
    /// file-hash order.
    pub(crate) fn checked_files(&self, oid: &LfsOid) -> Result<Vec<FileHash>, IndexError> {
        let mut out: Vec<FileHash> = self.file_by_oid(oid)?.into_iter().collect();
        let txn = self.begin_read()?;
        let t = txn.open_table(OID_FILES).map_err(db_err)?;
        let (lo, hi) = oid_key_span(oid);
        for row in t.range(lo.as_slice()..=hi.as_slice()).map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            let k = k.value();
            if k.len() == 64 {
                let file = FileHash::from_bytes(hash_at(k, 32));
                if !out.contains(&file) {
                    out.push(file);
                }
            }
        }
        Ok(out)
    }

    /// The unchecked claims on `oid`, oldest first.
    pub(crate) fn claims_on(&self, oid: &LfsOid) -> Result<Vec<Claim>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(CLAIMS).map_err(db_err)?;
        let (lo, hi) = oid_key_span(oid);
        let mut out = Vec::new();
        for row in t.range(lo.as_slice()..=hi.as_slice()).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            if let Some(claim) = decode_claim(k.value(), v.value()) {
                out.push(claim);
            }
        }
        out.sort_by_key(|c| c.claimed_at);
        Ok(out)
    }

    /// The file of the oldest unchecked claim on `oid`, if any.
    #[cfg(test)]
    pub(crate) fn claimed_file(&self, oid: &LfsOid) -> Result<Option<FileHash>, IndexError> {
        Ok(self.claims_on(oid)?.first().map(|c| c.file))
    }

    /// Up to `limit` unchecked claims, in key order from `after` (exclusive).
    pub fn claims(
        &self,
        after: Option<&(LfsOid, FileHash)>,
        limit: usize,
    ) -> Result<Vec<Claim>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(CLAIMS).map_err(db_err)?;
        let start = after.map(|(o, f)| claim_key(o, f));
        let rows = match &start {
            Some(k) => t.range::<&[u8]>((
                std::ops::Bound::Excluded(k.as_slice()),
                std::ops::Bound::Unbounded,
            )),
            None => t.range::<&[u8]>(..),
        }
        .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            if out.len() == limit {
                break;
            }
            let (k, v) = row.map_err(db_err)?;
            if let Some(claim) = decode_claim(k.value(), v.value()) {
                out.push(claim);
            }
        }
        Ok(out)
    }

    /// Everyone with claims waiting to be checked, in name order.
    pub fn claim_uploaders(&self) -> Result<Vec<String>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(CLAIM_LOAD).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            out.push(String::from_utf8_lossy(k.value()).into_owned());
        }
        Ok(out)
    }

    /// Up to `limit` of `uploader`'s claims waiting to be checked, oldest first.
    pub fn oldest_claims(&self, uploader: &str, limit: usize) -> Result<Vec<Claim>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(CLAIM_QUEUE).map_err(db_err)?;
        let prefix = queue_prefix(uploader);
        let mut out = Vec::new();
        for row in t.range(prefix.as_slice()..).map_err(db_err)? {
            if out.len() == limit {
                break;
            }
            let (k, v) = row.map_err(db_err)?;
            let (k, v) = (k.value(), v.value());
            let Some(rest) = k.strip_prefix(prefix.as_slice()) else {
                break;
            };
            if rest.len() != 8 + 64 || v.len() != 8 {
                continue;
            }
            let mut at = [0u8; 8];
            at.copy_from_slice(&rest[..8]);
            out.push(Claim {
                oid: LfsOid::from_digest(hash_at(rest, 8)),
                file: FileHash::from_bytes(hash_at(rest, 40)),
                claimed_at: u64::from_be_bytes(at),
                size: u64_at(v, 0),
                uploader: uploader.to_string(),
            });
        }
        Ok(out)
    }

    /// How many claims of `uploader` wait to be checked, and the bytes of their files.
    pub(crate) fn claim_load(&self, uploader: &str) -> Result<(u64, u64), IndexError> {
        Ok(self
            .get(CLAIM_LOAD, uploader.as_bytes())?
            .and_then(|v| load_of(&v))
            .unwrap_or((0, 0)))
    }

    /// Ends the claim that `file` has SHA-256 `oid`: when `holds`, the pair becomes a checked
    /// mapping (the oid's first one, unless another file was checked for it first); either
    /// way the claim is removed.
    ///
    /// Not synced to disk by itself (the next durable commit carries it): a crash before then
    /// only leaves the claim pending, to be checked again, so an fsync per checked file (one
    /// per small object of a push) buys nothing.
    pub fn settle_claim(
        &self,
        oid: &LfsOid,
        file: &FileHash,
        holds: bool,
    ) -> Result<(), IndexError> {
        let mut txn = self.begin_write()?;
        txn.set_durability(redb::Durability::None);
        {
            let mut claims = txn.open_table(CLAIMS).map_err(db_err)?;
            let key = claim_key(oid, file);
            let removed = claims.remove(key.as_slice()).map_err(db_err)?;
            if let Some(claim) = removed.and_then(|v| decode_claim(&key, v.value())) {
                let mut load = txn.open_table(CLAIM_LOAD).map_err(db_err)?;
                sub_load(&mut load, &claim.uploader, 1, claim.size)?;
                let mut queue = txn.open_table(CLAIM_QUEUE).map_err(db_err)?;
                queue.remove(queue_key(&claim).as_slice()).map_err(db_err)?;
            }
            if holds {
                let mut oids = txn.open_table(OIDS).map_err(db_err)?;
                insert_new(&mut oids, oid.digest(), file.as_bytes())?;
                let mut oid_files = txn.open_table(OID_FILES).map_err(db_err)?;
                insert_new(&mut oid_files, &key, &[])?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// The xorb and chunk index holding a chunk indexed for dedup.
    pub fn dedup(&self, chunk: &ChunkHash) -> Result<Option<(XorbHash, u32)>, IndexError> {
        let Some(b) = self.get(DEDUP, chunk.as_bytes())? else {
            return Ok(None);
        };
        if b.len() != 36 {
            return Err(IndexError::Corrupt {
                table: "dedup",
                key: chunk.to_hex(),
                len: b.len(),
            });
        }
        Ok(Some((XorbHash::from_bytes(hash_at(&b, 0)), u32_at(&b, 32))))
    }

    /// The stamp of the stored xorb object when it was last verified whole.
    pub fn verified(&self, xorb: &XorbHash) -> Result<Option<ObjectStamp>, IndexError> {
        let Some(b) = self.get(VERIFIED, xorb.as_bytes())? else {
            return Ok(None);
        };
        ObjectStamp::from_bytes(&b)
            .map(Some)
            .ok_or_else(|| IndexError::Corrupt {
                table: "verified",
                key: xorb.to_hex(),
                len: b.len(),
            })
    }

    /// Records that the stored object of `xorb` with `stamp` was verified whole (and clears any
    /// damage record: the xorb is intact again).
    pub(crate) fn set_verified(
        &self,
        xorb: &XorbHash,
        stamp: &ObjectStamp,
    ) -> Result<(), IndexError> {
        let txn = self.begin_write()?;
        {
            let mut t = txn.open_table(VERIFIED).map_err(db_err)?;
            t.insert(xorb.as_bytes().as_slice(), stamp.to_bytes().as_slice())
                .map_err(db_err)?;
            let mut d = txn.open_table(DAMAGED).map_err(db_err)?;
            d.remove(xorb.as_bytes().as_slice()).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Records that `xorb` is missing or damaged (`why`), found at `now`: its `xorbs` and
    /// `verified` rows go, so nothing relies on it until it is stored again.
    pub(crate) fn set_damaged(
        &self,
        xorb: &XorbHash,
        why: &str,
        now: u64,
    ) -> Result<(), IndexError> {
        let txn = self.begin_write()?;
        {
            let mut d = txn.open_table(DAMAGED).map_err(db_err)?;
            let mut v = now.to_le_bytes().to_vec();
            v.extend_from_slice(why.as_bytes());
            d.insert(xorb.as_bytes().as_slice(), v.as_slice())
                .map_err(db_err)?;
            let mut x = txn.open_table(XORBS).map_err(db_err)?;
            x.remove(xorb.as_bytes().as_slice()).map_err(db_err)?;
            let mut t = txn.open_table(VERIFIED).map_err(db_err)?;
            t.remove(xorb.as_bytes().as_slice()).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Why `xorb` is recorded as missing or damaged, with when that was found.
    pub fn damaged(&self, xorb: &XorbHash) -> Result<Option<(u64, String)>, IndexError> {
        let Some(b) = self.get(DAMAGED, xorb.as_bytes())? else {
            return Ok(None);
        };
        if b.len() < 8 {
            return Err(IndexError::Corrupt {
                table: "damaged",
                key: xorb.to_hex(),
                len: b.len(),
            });
        }
        Ok(Some((
            u64_at(&b, 0),
            String::from_utf8_lossy(&b[8..]).into_owned(),
        )))
    }

    /// Every xorb recorded as missing or damaged, with when and why.
    pub(crate) fn all_damaged(&self) -> Result<Vec<(XorbHash, u64, String)>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(DAMAGED).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let (k, v) = (k.value(), v.value());
            if k.len() != 32 || v.len() < 8 {
                continue;
            }
            out.push((
                XorbHash::from_bytes(hash_at(k, 0)),
                u64_at(v, 0),
                String::from_utf8_lossy(&v[8..]).into_owned(),
            ));
        }
        Ok(out)
    }

    /// Every registered shard.
    pub fn shards(&self) -> Result<Vec<ShardHash>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(SHARDS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            if k.value().len() == 32 {
                out.push(ShardHash::from_bytes(hash_at(k.value(), 0)));
            }
        }
        Ok(out)
    }

    /// Every xorb the index records as stored.
    pub fn xorbs(&self) -> Result<Vec<XorbHash>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(XORBS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            if k.value().len() == 32 {
                out.push(XorbHash::from_bytes(hash_at(k.value(), 0)));
            }
        }
        Ok(out)
    }

    /// Every xorb some registered file's reconstruction uses, with how many files use it.
    pub(crate) fn referenced_xorbs(
        &self,
    ) -> Result<std::collections::HashMap<XorbHash, u64>, IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(FILES).map_err(db_err)?;
        let mut out: std::collections::HashMap<XorbHash, u64> = std::collections::HashMap::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let key = k.value();
            if key.len() != 32 {
                continue;
            }
            let record = decode_file(&FileHash::from_bytes(hash_at(key, 0)), v.value())?;
            let distinct: HashSet<XorbHash> = record.terms.iter().map(|t| t.xorb).collect();
            for x in distinct {
                *out.entry(x).or_default() += 1;
            }
        }
        Ok(out)
    }

    /// The registered files whose reconstruction uses any of `xorbs` (at most `limit`), and how
    /// many there are in all.
    pub(crate) fn files_using(
        &self,
        xorbs: &HashSet<XorbHash>,
        limit: usize,
    ) -> Result<(Vec<FileHash>, u64), IndexError> {
        let txn = self.begin_read()?;
        let t = txn.open_table(FILES).map_err(db_err)?;
        let (mut some, mut count) = (Vec::new(), 0u64);
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let key = k.value();
            if key.len() != 32 {
                continue;
            }
            let file = FileHash::from_bytes(hash_at(key, 0));
            let record = decode_file(&file, v.value())?;
            if record.terms.iter().any(|t| xorbs.contains(&t.xorb)) {
                count += 1;
                if some.len() < limit {
                    some.push(file);
                }
            }
        }
        Ok((some, count))
    }

    /// Forgets `xorbs` entirely (garbage collection): their `xorbs`, `verified` and `damaged`
    /// rows and every dedup entry naming them, in one transaction.
    pub(crate) fn remove_xorbs(&self, xorbs: &HashSet<XorbHash>) -> Result<(), IndexError> {
        if xorbs.is_empty() {
            return Ok(());
        }
        let txn = self.begin_write()?;
        {
            for table in [XORBS, VERIFIED, DAMAGED, XORB_FILE] {
                let mut t = txn.open_table(table).map_err(db_err)?;
                for x in xorbs {
                    t.remove(x.as_bytes().as_slice()).map_err(db_err)?;
                }
            }
            let mut d = txn.open_table(DEDUP).map_err(db_err)?;
            let mut stale: Vec<[u8; 32]> = Vec::new();
            for row in d.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                let (k, v) = (k.value(), v.value());
                if k.len() == 32
                    && v.len() == 36
                    && xorbs.contains(&XorbHash::from_bytes(hash_at(v, 0)))
                {
                    stale.push(hash_at(k, 0));
                }
            }
            for k in stale {
                d.remove(k.as_slice()).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Counts of entries, for status output.
    pub fn counts(&self) -> Result<IndexCounts, IndexError> {
        let txn = self.begin_read()?;
        let count = |table| -> Result<u64, IndexError> {
            txn.open_table(table).map_err(db_err)?.len().map_err(db_err)
        };
        Ok(IndexCounts {
            xorbs: count(XORBS)?,
            files: count(FILES)?,
            oids: count(OIDS)?,
            claims: count(CLAIMS)?,
            dedup_chunks: count(DEDUP)?,
            shards: count(SHARDS)?,
        })
    }
}

/// How many entries each table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexCounts {
    pub xorbs: u64,
    pub files: u64,
    pub oids: u64,
    /// SHA-256 claims not checked yet.
    pub claims: u64,
    pub dedup_chunks: u64,
    pub shards: u64,
}

fn file_repo_key(file: &FileHash, repo: &RepoName) -> Vec<u8> {
    let repo = repo.as_str();
    let mut key = Vec::with_capacity(32 + repo.len());
    key.extend_from_slice(file.as_bytes());
    key.extend_from_slice(repo.as_bytes());
    key
}

/// Inserts `value` under `key` unless the key is already there: the first registration wins.
fn insert_new(
    table: &mut redb::Table<&[u8], &[u8]>,
    key: &[u8],
    value: &[u8],
) -> Result<(), IndexError> {
    if table.get(key).map_err(db_err)?.is_none() {
        table.insert(key, value).map_err(db_err)?;
    }
    Ok(())
}

/// A `claims` row's key: the oid, then the file.
/// In a store written before the `claims` table existed, every `oids` row is the first claim
/// a client made, never checked: each becomes a claim (dated 0, so that it is checked first),
/// to be checked like new ones. Downloads may use claims meanwhile; an upload of one of these
/// oids is no longer skipped until the server has hashed the file.
fn demote_unchecked_oids(txn: &redb::WriteTransaction) -> Result<(), IndexError> {
    let mut oids = txn.open_table(OIDS).map_err(db_err)?;
    let mut claims = txn.open_table(CLAIMS).map_err(db_err)?;
    let mut moved = 0u64;
    for row in oids.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let (k, v) = (k.value(), v.value());
        if k.len() != 32 || v.len() != 32 {
            continue;
        }
        let oid = LfsOid::from_digest(hash_at(k, 0));
        let file = FileHash::from_bytes(hash_at(v, 0));
        claims
            .insert(
                claim_key(&oid, &file).as_slice(),
                0u64.to_le_bytes().as_slice(),
            )
            .map_err(db_err)?;
        moved += 1;
    }
    oids.retain(|_, _| false).map_err(db_err)?;
    if moved > 0 {
        tracing::info!(
            oids = moved,
            "store index: the oid mappings written before SHA-256 claims were checked are claims \
             now, to be checked by `git xet serve`"
        );
    }
    Ok(())
}

/// Rows of a checkpoint added in one transaction ([`Index::add_checkpoint_rows`]).
const CHECKPOINT_ROWS_PER_TXN: usize = 50_000;

/// Where a `shards` row's flags byte is (after the file count and the time), and the flag of a
/// registration that is in a checkpoint.
const SHARD_FLAGS_AT: usize = 12;
const IN_CHECKPOINT: u8 = 1;

fn mark_in_checkpoint(value: &mut Vec<u8>) {
    if value.len() < SHARD_FLAGS_AT {
        return;
    }
    value.resize(value.len().max(SHARD_FLAGS_AT + 1), 0);
    value[SHARD_FLAGS_AT] |= IN_CHECKPOINT;
}

/// The index table a checkpoint's table is a copy of (`None`: not an index table).
fn checkpoint_table(
    t: checkpoint::Table,
) -> Option<TableDefinition<'static, &'static [u8], &'static [u8]>> {
    Some(match t {
        checkpoint::Table::Shards => SHARDS,
        checkpoint::Table::Files => FILES,
        checkpoint::Table::Oids => OIDS,
        checkpoint::Table::OidFiles => OID_FILES,
        checkpoint::Table::Claims => CLAIMS,
        checkpoint::Table::Dedup => DEDUP,
        checkpoint::Table::XorbFile => XORB_FILE,
        checkpoint::Table::FileRepos => FILE_REPOS,
        checkpoint::Table::CoveredLogEntry
        | checkpoint::Table::CoveredClaimBatch
        | checkpoint::Table::CoveredShard => return None,
    })
}

/// [`Index::add_checkpoint_rows`] for one row: whether it was new.
fn add_checkpoint_row(
    txn: &redb::WriteTransaction,
    row: checkpoint::Row<'_>,
) -> Result<bool, IndexError> {
    let Some(def) = checkpoint_table(row.table) else {
        return Ok(false);
    };
    let mut table = txn.open_table(def).map_err(db_err)?;
    let existing = table
        .get(row.key)
        .map_err(db_err)?
        .map(|v| v.value().to_vec());
    match (row.table, existing) {
        (checkpoint::Table::Shards, Some(mut v)) => {
            mark_in_checkpoint(&mut v);
            table.insert(row.key, v.as_slice()).map_err(db_err)?;
            Ok(false)
        }
        (_, Some(_)) => Ok(false),
        (checkpoint::Table::Claims, None) => {
            drop(table);
            let Some(claim) = decode_claim(row.key, row.value) else {
                return Ok(false);
            };
            let entries = ShardEntries {
                oids: vec![(claim.oid, claim.file)],
                files: vec![(
                    claim.file,
                    FileRecord {
                        size: claim.size,
                        shard: ShardHash::from_bytes([0; 32]),
                        terms: Vec::new(),
                    },
                )],
                ..ShardEntries::default()
            };
            // Skipped if checked here already; queued for checking otherwise.
            record_claims(txn, &entries, claim.claimed_at, &claim.uploader)?;
            Ok(true)
        }
        (checkpoint::Table::Shards, None) => {
            let mut v = row.value.to_vec();
            mark_in_checkpoint(&mut v);
            table.insert(row.key, v.as_slice()).map_err(db_err)?;
            Ok(true)
        }
        (_, None) => {
            table.insert(row.key, row.value).map_err(db_err)?;
            Ok(true)
        }
    }
}

/// A `claims` row, if well formed (a row of another shape is skipped, never trusted).
fn decode_claim(k: &[u8], v: &[u8]) -> Option<Claim> {
    if k.len() != 64 || v.len() < 8 {
        return None;
    }
    let (size, uploader) = if v.len() >= 16 {
        (u64_at(v, 8), String::from_utf8_lossy(&v[16..]).into_owned())
    } else {
        (0, String::new())
    };
    Some(Claim {
        oid: LfsOid::from_digest(hash_at(k, 0)),
        file: FileHash::from_bytes(hash_at(k, 32)),
        claimed_at: u64_at(v, 0),
        size,
        uploader,
    })
}

/// The start of `uploader`'s rows in `claim_queue`.
fn queue_prefix(uploader: &str) -> Vec<u8> {
    // Uploaders are repository ids (short); a longer name is cut, which only merges queues.
    let name = &uploader.as_bytes()[..uploader.len().min(u16::MAX as usize)];
    let mut k = Vec::with_capacity(2 + name.len() + 72);
    k.extend_from_slice(&(name.len() as u16).to_le_bytes());
    k.extend_from_slice(name);
    k
}

/// A claim's row key in `claim_queue`.
fn queue_key(claim: &Claim) -> Vec<u8> {
    let mut k = queue_prefix(&claim.uploader);
    k.extend_from_slice(&claim.claimed_at.to_be_bytes());
    k.extend_from_slice(claim.oid.digest());
    k.extend_from_slice(claim.file.as_bytes());
    k
}

/// Puts `claim` in its uploader's queue.
fn enqueue(queue: &mut redb::Table<&[u8], &[u8]>, claim: &Claim) -> Result<(), IndexError> {
    queue
        .insert(
            queue_key(claim).as_slice(),
            claim.size.to_le_bytes().as_slice(),
        )
        .map_err(db_err)?;
    Ok(())
}

/// The first and last keys of `oid`'s rows in tables keyed by oid, then file.
fn oid_key_span(oid: &LfsOid) -> ([u8; 64], [u8; 64]) {
    (
        claim_key(oid, &FileHash::from_bytes([0; 32])),
        claim_key(oid, &FileHash::from_bytes([0xff; 32])),
    )
}

/// A `claim_load` row's count and bytes, if well formed.
fn load_of(v: &[u8]) -> Option<(u64, u64)> {
    (v.len() == 16).then(|| (u64_at(v, 0), u64_at(v, 8)))
}

/// Adds `count` claims of `bytes` to `uploader`'s load.
fn add_load(
    load: &mut redb::Table<&[u8], &[u8]>,
    uploader: &str,
    count: u64,
    bytes: u64,
) -> Result<(), IndexError> {
    let (c, b) = load
        .get(uploader.as_bytes())
        .map_err(db_err)?
        .and_then(|v| load_of(v.value()))
        .unwrap_or((0, 0));
    let mut v = c.saturating_add(count).to_le_bytes().to_vec();
    v.extend_from_slice(&b.saturating_add(bytes).to_le_bytes());
    load.insert(uploader.as_bytes(), v.as_slice())
        .map_err(db_err)?;
    Ok(())
}

/// Takes `count` claims of `bytes` off `uploader`'s load (the row goes when it reaches 0).
fn sub_load(
    load: &mut redb::Table<&[u8], &[u8]>,
    uploader: &str,
    count: u64,
    bytes: u64,
) -> Result<(), IndexError> {
    let Some((c, b)) = load
        .get(uploader.as_bytes())
        .map_err(db_err)?
        .and_then(|v| load_of(v.value()))
    else {
        return Ok(());
    };
    let (c, b) = (c.saturating_sub(count), b.saturating_sub(bytes));
    if c == 0 {
        load.remove(uploader.as_bytes()).map_err(db_err)?;
    } else {
        let mut v = c.to_le_bytes().to_vec();
        v.extend_from_slice(&b.to_le_bytes());
        load.insert(uploader.as_bytes(), v.as_slice())
            .map_err(db_err)?;
    }
    Ok(())
}

fn claim_key(oid: &LfsOid, file: &FileHash) -> [u8; 64] {
    let mut k = [0u8; 64];
    k[..32].copy_from_slice(oid.digest());
    k[32..].copy_from_slice(file.as_bytes());
    k
}

/// A `dedup` row's value: the xorb and the chunk's index in it.
fn dedup_value(xorb: &XorbHash, index: u32) -> Vec<u8> {
    let mut v = xorb.as_bytes().to_vec();
    v.extend_from_slice(&index.to_le_bytes());
    v
}

/// Queues the SHA-256 claims of `entries` that are neither checked nor queued yet, charged to
/// `uploader` (in `txn`, the transaction registering their shard).
fn record_claims(
    txn: &redb::WriteTransaction,
    entries: &ShardEntries,
    now: u64,
    uploader: &str,
) -> Result<(), IndexError> {
    let oids = txn.open_table(OIDS).map_err(db_err)?;
    let oid_files = txn.open_table(OID_FILES).map_err(db_err)?;
    let mut claims = txn.open_table(CLAIMS).map_err(db_err)?;
    let mut load = txn.open_table(CLAIM_LOAD).map_err(db_err)?;
    let mut queue = txn.open_table(CLAIM_QUEUE).map_err(db_err)?;
    for (oid, file) in &entries.oids {
        // A checked pair stands; anything else waits to be checked (another file
        // checked for the same oid does not make this one true, nor hide it).
        let key = claim_key(oid, file);
        let checked = oids
            .get(oid.digest().as_slice())
            .map_err(db_err)?
            .is_some_and(|v| v.value() == file.as_bytes().as_slice())
            || oid_files.get(key.as_slice()).map_err(db_err)?.is_some();
        if checked || claims.get(key.as_slice()).map_err(db_err)?.is_some() {
            continue;
        }
        let size = entries
            .files
            .iter()
            .find(|(f, _)| f == file)
            .map_or(0, |(_, r)| r.size);
        let mut v = now.to_le_bytes().to_vec();
        v.extend_from_slice(&size.to_le_bytes());
        v.extend_from_slice(uploader.as_bytes());
        claims
            .insert(key.as_slice(), v.as_slice())
            .map_err(db_err)?;
        add_load(&mut load, uploader, 1, size)?;
        let claim = Claim {
            oid: *oid,
            file: *file,
            claimed_at: now,
            size,
            uploader: uploader.to_string(),
        };
        enqueue(&mut queue, &claim)?;
    }
    Ok(())
}

/// One registered file as the operator's figures see it ([`Index::each_file_usage`]).
#[derive(Debug)]
pub(crate) struct FileUsage<'a> {
    pub size: u64,
    /// The distinct xorbs its terms use.
    pub xorbs: &'a [XorbHash],
    /// The repositories it was registered through (none: a server-wide credential on the CAS
    /// API).
    pub repos: &'a [String],
}

/// Reads for the operator's figures ([`crate::stats`]), each in a snapshot the caller holds,
/// and the transactions of the tables `stats` keeps in this database.
impl Index {
    /// A read transaction: one consistent snapshot for a whole pass.
    pub(crate) fn read_txn(&self) -> Result<redb::ReadTransaction, IndexError> {
        self.begin_read()
    }

    /// A write transaction committed as `commit` says when the caller commits it.
    pub(crate) fn write_txn(&self, commit: Commit) -> Result<redb::WriteTransaction, IndexError> {
        let mut txn = self.begin_write()?;
        commit.apply(&mut txn);
        Ok(txn)
    }

    /// Calls `visit` for every registered file of `txn`, in hash order, with its size, its
    /// distinct xorbs and the repositories it was registered through (`files` and
    /// `file_repos` read side by side: both are ordered by file hash).
    pub(crate) fn each_file_usage(
        &self,
        txn: &redb::ReadTransaction,
        visit: &mut dyn FnMut(FileUsage<'_>),
    ) -> Result<(), IndexError> {
        let files = txn.open_table(FILES).map_err(db_err)?;
        let file_repos = txn.open_table(FILE_REPOS).map_err(db_err)?;
        let mut repo_rows = file_repos.iter().map_err(db_err)?;
        // The key of the next `file_repos` row, read but not used yet; `None` at the end.
        let mut next_repo_row = match repo_rows.next() {
            Some(row) => Some(row.map_err(db_err)?.0.value().to_vec()),
            None => None,
        };
        let (mut xorbs, mut repos) = (Vec::new(), Vec::new());
        for row in files.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let key = k.value();
            if key.len() != 32 {
                continue;
            }
            let record = decode_file(&FileHash::from_bytes(hash_at(key, 0)), v.value())?;
            xorbs.clear();
            xorbs.extend(record.terms.iter().map(|t| t.xorb));
            xorbs.sort_unstable();
            xorbs.dedup();
            repos.clear();
            while let Some(rkey) = &next_repo_row {
                let file_part = &rkey[..rkey.len().min(32)];
                if file_part > key {
                    break;
                }
                if file_part == key {
                    if let Ok(repo) = std::str::from_utf8(&rkey[32..]) {
                        repos.push(repo.to_string());
                    }
                }
                next_repo_row = match repo_rows.next() {
                    Some(row) => Some(row.map_err(db_err)?.0.value().to_vec()),
                    None => None,
                };
            }
            visit(FileUsage {
                size: record.size,
                xorbs: &xorbs,
                repos: &repos,
            });
        }
        Ok(())
    }

    /// The xorbs `txn` records as stored: how many, and their stored bytes together.
    pub(crate) fn stored_xorb_totals(
        &self,
        txn: &redb::ReadTransaction,
    ) -> Result<(u64, u64), IndexError> {
        let t = txn.open_table(XORBS).map_err(db_err)?;
        let (mut count, mut bytes) = (0u64, 0u64);
        for row in t.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            if v.value().len() == 20 {
                count += 1;
                bytes = bytes.saturating_add(u64_at(v.value(), 4));
            }
        }
        Ok((count, bytes))
    }

    /// The stored length of `xorb` in `txn`, if it is stored.
    pub(crate) fn stored_len_in(
        &self,
        txn: &redb::ReadTransaction,
        xorb: &XorbHash,
    ) -> Result<Option<u64>, IndexError> {
        let t = txn.open_table(XORBS).map_err(db_err)?;
        let v = t.get(xorb.as_bytes().as_slice()).map_err(db_err)?;
        Ok(v.filter(|v| v.value().len() == 20)
            .map(|v| u64_at(v.value(), 4)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_of_a_store_from_before_claims_become_claims() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.redb");
        let oid = LfsOid::from_digest([5; 32]);
        let file = FileHash::from_bytes([6; 32]);
        // An index as written before the claims table existed: an oid mapped on first claim.
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            for t in [
                XORBS, FILES, OIDS, DEDUP, SHARDS, VERIFIED, DAMAGED, XORB_FILE,
            ] {
                txn.open_table(t).unwrap();
            }
            txn.open_table(OIDS)
                .unwrap()
                .insert(oid.digest().as_slice(), file.as_bytes().as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let index = Index::open(&path).unwrap();
        assert_eq!(
            index.file_by_oid(&oid).unwrap(),
            None,
            "not a checked mapping"
        );
        assert_eq!(index.claimed_file(&oid).unwrap(), Some(file));
        let pairs = |i: &Index| -> Vec<(LfsOid, FileHash)> {
            i.claims(None, 10)
                .unwrap()
                .into_iter()
                .map(|c| (c.oid, c.file))
                .collect()
        };
        assert_eq!(pairs(&index), vec![(oid, file)]);
        // Queued in the name of nobody in particular (the uploader was not recorded then).
        assert_eq!(index.claim_uploaders().unwrap(), vec![String::new()]);
        assert_eq!(index.oldest_claims("", 5).unwrap().len(), 1);
        // Checked once, it is a mapping again, and opening again moves nothing back.
        index.settle_claim(&oid, &file, true).unwrap();
        drop(index);
        let index = Index::open(&path).unwrap();
        assert_eq!(index.file_by_oid(&oid).unwrap(), Some(file));
        assert!(index.claims(None, 10).unwrap().is_empty());
    }

    #[test]
    fn entries_survive_reopening_and_first_registration_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.redb");
        let file = FileHash::from_bytes([1; 32]);
        let xorb = XorbHash::from_bytes([2; 32]);
        let record = FileRecord {
            size: 300,
            shard: ShardHash::from_bytes([3; 32]),
            terms: vec![StoredTerm {
                xorb,
                chunk_start: 0,
                chunk_end: 3,
                unpacked_len: 300,
            }],
        };
        let oid = LfsOid::from_digest([4; 32]);
        let chunk = ChunkHash::from_bytes([5; 32]);
        {
            let index = Index::open(&path).unwrap();
            let meta = XorbMeta {
                num_chunks: 3,
                stored_len: 500,
                unpacked_len: 300,
            };
            index.add_xorb(xorb, meta, &[(chunk, 0)]).unwrap();
            let entries = ShardEntries {
                files: vec![(file, record.clone())],
                oids: vec![(oid, file)],
                ..Default::default()
            };
            assert_eq!(
                index
                    .add_shard(record.shard, &entries, 10, "team-a", Commit::Durable)
                    .unwrap(),
                (1, record.size)
            );
            // Registering the same file again through another shard keeps the first record.
            let mut other = record.clone();
            other.shard = ShardHash::from_bytes([9; 32]);
            let again = ShardEntries {
                files: vec![(file, other)],
                ..Default::default()
            };
            assert_eq!(
                index
                    .add_shard(
                        ShardHash::from_bytes([9; 32]),
                        &again,
                        11,
                        "team-a",
                        Commit::Durable
                    )
                    .unwrap(),
                (0, 0)
            );
        }
        let index = Index::open(&path).unwrap();
        assert_eq!(index.file(&file).unwrap(), Some(record));
        // The shard's SHA-256 is a claim until it is checked; then it is the oid's mapping.
        assert_eq!(index.file_by_oid(&oid).unwrap(), None);
        assert_eq!(index.claimed_file(&oid).unwrap(), Some(file));
        let claims = index.claims(None, 10).unwrap();
        assert_eq!(
            claims,
            vec![Claim {
                oid,
                file,
                claimed_at: 10,
                size: 300,
                uploader: "team-a".into()
            }]
        );
        assert_eq!(index.claim_load("team-a").unwrap(), (1, 300));
        assert_eq!(index.claim_uploaders().unwrap(), vec!["team-a".to_string()]);
        assert_eq!(index.oldest_claims("team-a", 5).unwrap(), claims);
        assert!(index.oldest_claims("team-", 5).unwrap().is_empty());
        index.settle_claim(&oid, &file, true).unwrap();
        assert_eq!(index.claim_load("team-a").unwrap(), (0, 0));
        assert!(index.claim_uploaders().unwrap().is_empty());
        assert!(index.oldest_claims("team-a", 5).unwrap().is_empty());
        assert_eq!(index.file_by_oid(&oid).unwrap(), Some(file));
        assert_eq!(index.checked_files(&oid).unwrap(), vec![file]);
        assert_eq!(index.claimed_file(&oid).unwrap(), None);
        assert_eq!(index.counts().unwrap().claims, 0);
        assert_eq!(index.dedup(&chunk).unwrap(), Some((xorb, 0)));
        assert_eq!(index.xorb(&xorb).unwrap().unwrap().num_chunks, 3);
        assert!(index.has_shard(&ShardHash::from_bytes([9; 32])).unwrap());
        let counts = index.counts().unwrap();
        assert_eq!((counts.files, counts.shards, counts.xorbs), (1, 2, 1));
    }

    #[test]
    fn a_checkpoint_of_one_index_gives_another_the_same_registrations() {
        let dir = tempfile::tempdir().unwrap();
        let a = Index::open(&dir.path().join("a.redb")).unwrap();
        let file = |n: u8| FileHash::from_bytes([n; 32]);
        let record = |n: u8| FileRecord {
            size: 100 * u64::from(n),
            shard: ShardHash::from_bytes([n; 32]),
            terms: vec![StoredTerm {
                xorb: XorbHash::from_bytes([50 + n; 32]),
                chunk_start: 0,
                chunk_end: 1,
                unpacked_len: 100 * u32::from(n),
            }],
        };
        let (checked, pending) = (LfsOid::from_digest([7; 32]), LfsOid::from_digest([8; 32]));
        for (n, oid) in [(1u8, checked), (2, pending)] {
            let entries = ShardEntries {
                files: vec![(file(n), record(n))],
                oids: vec![(oid, file(n))],
                dedup: vec![(
                    ChunkHash::from_bytes([n; 32]),
                    XorbHash::from_bytes([50 + n; 32]),
                    0,
                )],
                ..Default::default()
            };
            a.add_shard(record(n).shard, &entries, 10, "team-a", Commit::Durable)
                .unwrap();
        }
        let team_a = RepoName::new("team-a").unwrap();
        a.add_file_repos(&[file(1)], &team_a, Commit::Durable)
            .unwrap();
        a.settle_claim(&checked, &file(1), true).unwrap();
        let mut body = checkpoint::MAGIC.to_vec();
        let rows = a.checkpoint_rows(&mut body).unwrap();
        let id = checkpoint::CheckpointId::of(1, &body);
        let read: Vec<checkpoint::Row<'_>> = checkpoint::rows(id, &body)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(read.len() as u64, rows);

        // A node that registered one of the files itself, another way, keeps its own record.
        let b = Index::open(&dir.path().join("b.redb")).unwrap();
        let mut own = record(2);
        own.shard = ShardHash::from_bytes([99; 32]);
        let entries = ShardEntries {
            files: vec![(file(2), own.clone())],
            ..Default::default()
        };
        b.add_shard(own.shard, &entries, 20, "", Commit::Durable)
            .unwrap();
        let added = b.add_checkpoint_rows(read.iter().copied()).unwrap();
        assert!(added > 0 && added < rows, "{added} of {rows}");
        assert_eq!(b.file(&file(1)).unwrap(), Some(record(1)));
        assert_eq!(b.file(&file(2)).unwrap(), Some(own));
        assert!(b.file_in_repo(&file(1), &team_a).unwrap());
        assert!(!b.file_in_repo(&file(2), &team_a).unwrap());
        assert_eq!(b.file_by_oid(&checked).unwrap(), Some(file(1)));
        assert_eq!(b.claimed_file(&pending).unwrap(), Some(file(2)));
        assert_eq!(b.claim_load("team-a").unwrap(), (1, 200));
        assert_eq!(b.oldest_claims("team-a", 5).unwrap().len(), 1);
        assert_eq!(
            b.dedup(&ChunkHash::from_bytes([1; 32])).unwrap(),
            Some((XorbHash::from_bytes([51; 32]), 0))
        );
        for n in [1, 2] {
            assert!(b.shard_in_checkpoint(&record(n).shard).unwrap());
            assert!(!a.shard_in_checkpoint(&record(n).shard).unwrap());
        }
        assert!(!b
            .shard_in_checkpoint(&ShardHash::from_bytes([99; 32]))
            .unwrap());
        // Read twice, nothing changes.
        assert_eq!(b.add_checkpoint_rows(read.iter().copied()).unwrap(), 0);
        assert_eq!(b.claim_load("team-a").unwrap(), (1, 200));
    }

    #[test]
    fn another_file_with_a_checked_oid_is_claimed_and_checked_too() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("index.redb")).unwrap();
        let oid = LfsOid::from_digest([7; 32]);
        let (a, b) = (FileHash::from_bytes([1; 32]), FileHash::from_bytes([2; 32]));
        let entries = |file: FileHash| ShardEntries {
            oids: vec![(oid, file)],
            ..Default::default()
        };
        index
            .add_shard(
                ShardHash::from_bytes([1; 32]),
                &entries(a),
                5,
                "team-a",
                Commit::Durable,
            )
            .unwrap();
        index.settle_claim(&oid, &a, true).unwrap();
        // Team B registers another file (other chunking) for the same oid: a claim of its own,
        // not hidden by A's checked mapping.
        index
            .add_shard(
                ShardHash::from_bytes([2; 32]),
                &entries(b),
                6,
                "team-b",
                Commit::Durable,
            )
            .unwrap();
        let on = index.claims_on(&oid).unwrap();
        assert_eq!(on.len(), 1);
        assert_eq!((on[0].file, on[0].uploader.as_str()), (b, "team-b"));
        assert_eq!(index.claim_load("team-b").unwrap(), (1, 0));
        // A registering its own checked file again claims nothing.
        index
            .add_shard(
                ShardHash::from_bytes([3; 32]),
                &entries(a),
                7,
                "team-a",
                Commit::Durable,
            )
            .unwrap();
        assert_eq!(index.claims_on(&oid).unwrap().len(), 1);
        index.settle_claim(&oid, &b, true).unwrap();
        assert_eq!(
            index.file_by_oid(&oid).unwrap(),
            Some(a),
            "the first mapping stays"
        );
        assert_eq!(index.checked_files(&oid).unwrap(), vec![a, b]);
        assert!(index.claims_on(&oid).unwrap().is_empty());
        assert_eq!(index.claim_load("team-b").unwrap(), (0, 0));
    }
}
