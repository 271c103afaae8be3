//! The lock database of `git xet serve`: a redb file of its own (`locks.redb` in the data
//! directory), apart from the store's index, so that locks survive restarts and the store's
//! tools (`git xet gc`, `scrub`) never see them.
//!
//! | table | key | value |
//! |---|---|---|
//! | `locks` | (repository id, lock id) | JSON `{"path","owner","locked_at","scope"?}` (unix seconds; `scope`: the repository pattern of the token that created it, if it had one) |
//! | `lock_paths` | (repository id, path) | lock id |
//! | `lock_counts` | repository id | number of its locks |
//! | `lock_scope_counts` | token scope (a repository pattern, `team-b/*`) | number of locks its tokens created |
//! | `meta` | `"schema"`, `"next_id"`, `"total"` | schema version, the next lock id, all locks |
//!
//! Lock ids are one sequence for the whole server (1, 2, …, never reused), so a repository's
//! locks in descending id order are in reverse chronological order, the order git-lfs's
//! pagination expects. A path has at most one lock per repository: creating a lock checks
//! `lock_paths` and writes both tables in one write transaction, and redb runs write
//! transactions one at a time, so two clients racing for a path cannot both win. Every
//! commit is durable when it returns.
//!
//! Sizes are bounded: at most [`LockLimits::per_repo`] locks per repository,
//! [`LockLimits::per_scope`] per token scope and [`LockLimits::total`] in all; paths and owner
//! names are bounded by the HTTP layer (`super::MAX_PATH`,
//! [`crate::server::auth::MAX_USER_NAME`]). The three counts live in tables of their own
//! (`lock_counts`, `lock_scope_counts`, `meta["total"]`) and change in the write transaction
//! that adds or removes the lock, so checking a limit reads three numbers, never the locks, and
//! no two writers can both take the last place.
//!
//! **Scopes.** A lock created with a token limited to a repository pattern
//! ([`crate::server::auth::RepoPattern`]) is charged to that pattern (`team-b/*`) and records
//! it, so removing it gives the place back to the same pattern whoever removes it (`--force`
//! from another token included). Every token with the same pattern shares one budget; locks of
//! server-wide tokens are charged to no scope. Schema 1 (before scopes) is upgraded in place:
//! its locks are charged to no scope.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const LOCKS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("locks");
const PATHS: TableDefinition<(&str, &str), u64> = TableDefinition::new("lock_paths");
const COUNTS: TableDefinition<&str, u64> = TableDefinition::new("lock_counts");
const SCOPE_COUNTS: TableDefinition<&str, u64> = TableDefinition::new("lock_scope_counts");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The layout this code reads and writes (`meta["schema"]`): 2 added `lock_scope_counts` and
/// the lock's `scope`. A database of schema 1 is upgraded when opened; an older git-xet refuses
/// schema 2 (it would not give scopes their places back).
const SCHEMA: u64 = 2;

/// How many locks the server keeps. The defaults let one token scope hold a tenth of the total,
/// so filling the server takes ten scopes, while one repository may still use a whole scope's
/// budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLimits {
    /// Locks of one repository at most. Default 10 000.
    pub per_repo: u64,
    /// Locks created by the tokens of one repository pattern (`team-b/*`), in all its
    /// repositories together, at most. Default 10 000.
    pub per_scope: u64,
    /// Locks of all repositories together at most: the last resort. Default 100 000.
    pub total: u64,
}

impl Default for LockLimits {
    fn default() -> Self {
        Self {
            per_repo: 10_000,
            per_scope: 10_000,
            total: 100_000,
        }
    }
}

/// A lock as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub id: u64,
    /// Relative to the root of the repository's working tree, `/`-separated.
    pub path: String,
    /// The user who created it ([`crate::server::auth::Grant::user`]).
    pub owner: String,
    /// Unix seconds.
    pub locked_at: u64,
    /// The token scope (repository pattern) it is charged to, if any.
    pub scope: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    path: String,
    owner: String,
    locked_at: u64,
    /// The token scope the lock is charged to (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
}

/// What [`LockDb::create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// A new lock.
    New(Lock),
    /// The path was locked already: this lock, unchanged.
    Exists(Lock),
    /// The repository has [`LockLimits::per_repo`] locks; nothing was written.
    RepoFull { limit: u64 },
    /// The token scope has [`LockLimits::per_scope`] locks; nothing was written.
    ScopeFull { scope: String, limit: u64 },
    /// The server has [`LockLimits::total`] locks; nothing was written.
    ServerFull { limit: u64 },
}

/// What [`LockDb::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removed {
    /// The lock was removed; here is what it was.
    Done(Lock),
    /// The repository has no lock with that id.
    NotFound,
    /// The caller's check refused it; the lock is kept.
    Refused(Lock),
}

/// A failure of the lock database.
#[derive(Debug, thiserror::Error)]
pub enum LockDbError {
    #[error("lock database {path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        source: Box<redb::Error>,
    },
    #[error("lock database {path}: {source}")]
    Db {
        path: PathBuf,
        source: Box<redb::Error>,
    },
    #[error(
        "lock database {path} is being opened again after an I/O error (a full disk?); try \
         again in a moment"
    )]
    Reopening { path: PathBuf },
    #[error("lock database {path}: schema {found}, but this git-xet understands {SCHEMA}")]
    Schema { path: PathBuf, found: u64 },
    #[error("lock database {path} is corrupt: lock {id} of repository {repo:?}: {detail}")]
    Corrupt {
        path: PathBuf,
        repo: String,
        id: u64,
        detail: String,
    },
}

impl LockDbError {
    /// True when the database could not write because the disk (or quota) is full.
    pub fn is_storage_full(&self) -> bool {
        match self {
            LockDbError::Db { source, .. } | LockDbError::Open { source, .. } => {
                matches!(&**source, redb::Error::Io(e) if xet_store::cas::is_storage_full(e))
            }
            _ => false,
        }
    }
}

/// The lock database. Its methods block (every write commits to disk): call them off the
/// async threads.
pub struct LockDb {
    db: xet_store::reopen::ReopeningDb,
    path: PathBuf,
    limits: LockLimits,
    /// One writer at a time: redb runs write transactions one by one, so writers queue here,
    /// as async tasks, rather than as blocked threads.
    writer: tokio::sync::Semaphore,
}

impl std::fmt::Debug for LockDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockDb")
            .field("path", &self.path)
            .field("limits", &self.limits)
            .finish()
    }
}

impl LockDb {
    /// Opens the database at `path`, creating it (and its tables) if missing.
    pub fn open(path: &Path, limits: LockLimits) -> Result<Self, LockDbError> {
        let open_err = |e: redb::Error| LockDbError::Open {
            path: path.to_path_buf(),
            source: Box::new(e),
        };
        let db = Database::create(path).map_err(|e| open_err(e.into()))?;
        let txn = db.begin_write().map_err(|e| open_err(e.into()))?;
        {
            txn.open_table(LOCKS).map_err(|e| open_err(e.into()))?;
            txn.open_table(PATHS).map_err(|e| open_err(e.into()))?;
            txn.open_table(COUNTS).map_err(|e| open_err(e.into()))?;
            txn.open_table(SCOPE_COUNTS)
                .map_err(|e| open_err(e.into()))?;
            let mut meta = txn.open_table(META).map_err(|e| open_err(e.into()))?;
            let schema = meta
                .get("schema")
                .map_err(|e| open_err(e.into()))?
                .map(|v| v.value());
            match schema {
                // New, or schema 1: its locks have no scope, and the scope table is there now.
                None | Some(1) => {
                    meta.insert("schema", SCHEMA)
                        .map_err(|e| open_err(e.into()))?;
                }
                Some(SCHEMA) => {}
                Some(found) => {
                    return Err(LockDbError::Schema {
                        path: path.to_path_buf(),
                        found,
                    })
                }
            }
        }
        txn.commit().map_err(|e| open_err(e.into()))?;
        Ok(Self {
            db: xet_store::reopen::ReopeningDb::new(path, db),
            path: path.to_path_buf(),
            limits,
            writer: tokio::sync::Semaphore::new(1),
        })
    }

    pub fn limits(&self) -> LockLimits {
        self.limits
    }

    /// Waits for the turn to write ([`LockDb::create`], [`LockDb::remove`]); the turn lasts
    /// while the permit is held.
    pub(crate) async fn write_turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.writer.acquire().await.ok()
    }

    fn err(&self, e: impl Into<redb::Error>) -> LockDbError {
        LockDbError::Db {
            path: self.path.clone(),
            source: Box::new(e.into()),
        }
    }

    /// A read transaction (see [`xet_store::reopen`]: after a full disk the database is opened
    /// again once there is room).
    fn begin_read(&self) -> Result<redb::ReadTransaction, LockDbError> {
        self.db.begin_read().map_err(|e| self.begin_err(e))
    }

    /// A write transaction (as [`Self::begin_read`]).
    fn begin_write(&self) -> Result<redb::WriteTransaction, LockDbError> {
        self.db.begin_write().map_err(|e| self.begin_err(e))
    }

    fn begin_err(&self, e: xet_store::reopen::BeginError) -> LockDbError {
        match e {
            xet_store::reopen::BeginError::Redb(source) => LockDbError::Db {
                path: self.path.clone(),
                source,
            },
            xet_store::reopen::BeginError::Reopening => LockDbError::Reopening {
                path: self.path.clone(),
            },
        }
    }

    fn decode(&self, repo: &str, id: u64, bytes: &[u8]) -> Result<Lock, LockDbError> {
        let s: Stored = serde_json::from_slice(bytes).map_err(|e| LockDbError::Corrupt {
            path: self.path.clone(),
            repo: repo.to_string(),
            id,
            detail: e.to_string(),
        })?;
        Ok(Lock {
            id,
            path: s.path,
            owner: s.owner,
            locked_at: s.locked_at,
            scope: s.scope,
        })
    }

    /// Locks `path` of `repo` for `owner`, charged to the token scope `scope` (a repository
    /// pattern; `None` for a server-wide token), unless it is locked already or a limit is
    /// reached: the repository's, then the scope's, then the total.
    pub fn create(
        &self,
        repo: &str,
        path: &str,
        owner: &str,
        scope: Option<&str>,
        now: u64,
    ) -> Result<Created, LockDbError> {
        let txn = self.begin_write()?;
        let outcome = {
            let mut locks = txn.open_table(LOCKS).map_err(|e| self.err(e))?;
            let mut paths = txn.open_table(PATHS).map_err(|e| self.err(e))?;
            let mut counts = txn.open_table(COUNTS).map_err(|e| self.err(e))?;
            let mut scope_counts = txn.open_table(SCOPE_COUNTS).map_err(|e| self.err(e))?;
            let mut meta = txn.open_table(META).map_err(|e| self.err(e))?;
            let existing = paths
                .get((repo, path))
                .map_err(|e| self.err(e))?
                .map(|v| v.value());
            let count = counts
                .get(repo)
                .map_err(|e| self.err(e))?
                .map_or(0, |v| v.value());
            let scope_count = match scope {
                Some(s) => scope_counts
                    .get(s)
                    .map_err(|e| self.err(e))?
                    .map_or(0, |v| v.value()),
                None => 0,
            };
            let total = meta
                .get("total")
                .map_err(|e| self.err(e))?
                .map_or(0, |v| v.value());
            if let Some(id) = existing {
                Created::Exists(self.named_lock(&locks, repo, path, id)?)
            } else if count >= self.limits.per_repo {
                Created::RepoFull {
                    limit: self.limits.per_repo,
                }
            } else if let Some(s) = scope.filter(|_| scope_count >= self.limits.per_scope) {
                Created::ScopeFull {
                    scope: s.to_string(),
                    limit: self.limits.per_scope,
                }
            } else if total >= self.limits.total {
                Created::ServerFull {
                    limit: self.limits.total,
                }
            } else {
                let id = meta
                    .get("next_id")
                    .map_err(|e| self.err(e))?
                    .map_or(1, |v| v.value());
                let stored = Stored {
                    path: path.to_string(),
                    owner: owner.to_string(),
                    locked_at: now,
                    scope: scope.map(str::to_string),
                };
                // Serialising strings and an integer cannot fail.
                let bytes = serde_json::to_vec(&stored).unwrap_or_default();
                locks
                    .insert((repo, id), bytes.as_slice())
                    .map_err(|e| self.err(e))?;
                paths.insert((repo, path), id).map_err(|e| self.err(e))?;
                counts.insert(repo, count + 1).map_err(|e| self.err(e))?;
                if let Some(s) = scope {
                    scope_counts
                        .insert(s, scope_count + 1)
                        .map_err(|e| self.err(e))?;
                }
                meta.insert("total", total + 1).map_err(|e| self.err(e))?;
                meta.insert("next_id", id + 1).map_err(|e| self.err(e))?;
                Created::New(Lock {
                    id,
                    path: stored.path,
                    owner: stored.owner,
                    locked_at: now,
                    scope: stored.scope,
                })
            }
        };
        if matches!(outcome, Created::New(_)) {
            txn.commit().map_err(|e| self.err(e))?;
        } else {
            txn.abort().map_err(|e| self.err(e))?;
        }
        Ok(outcome)
    }

    /// The lock `id` of `repo` that `path` names; its absence is damage.
    fn named_lock(
        &self,
        locks: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
        repo: &str,
        path: &str,
        id: u64,
    ) -> Result<Lock, LockDbError> {
        let bytes = locks
            .get((repo, id))
            .map_err(|e| self.err(e))?
            .map(|v| v.value().to_vec());
        match bytes {
            Some(b) => self.decode(repo, id, &b),
            None => Err(LockDbError::Corrupt {
                path: self.path.clone(),
                repo: repo.to_string(),
                id,
                detail: format!("path {path:?} names it, but it is missing"),
            }),
        }
    }

    /// The lock `id` of `repo`.
    pub fn get(&self, repo: &str, id: u64) -> Result<Option<Lock>, LockDbError> {
        let txn = self.begin_read()?;
        let locks = txn.open_table(LOCKS).map_err(|e| self.err(e))?;
        let bytes = locks
            .get((repo, id))
            .map_err(|e| self.err(e))?
            .map(|v| v.value().to_vec());
        bytes.map(|b| self.decode(repo, id, &b)).transpose()
    }

    /// The lock of `path` in `repo`.
    pub(crate) fn by_path(&self, repo: &str, path: &str) -> Result<Option<Lock>, LockDbError> {
        let id = {
            let txn = self.begin_read()?;
            let paths = txn.open_table(PATHS).map_err(|e| self.err(e))?;
            let id = paths
                .get((repo, path))
                .map_err(|e| self.err(e))?
                .map(|v| v.value());
            id
        };
        match id {
            Some(id) => self.get(repo, id),
            None => Ok(None),
        }
    }

    /// At most `limit` locks of `repo`, newest first, starting with id `from` (inclusive) when
    /// given; and the id to start the next page with, if there are more.
    pub fn page(
        &self,
        repo: &str,
        from: Option<u64>,
        limit: usize,
    ) -> Result<(Vec<Lock>, Option<u64>), LockDbError> {
        let txn = self.begin_read()?;
        let locks = txn.open_table(LOCKS).map_err(|e| self.err(e))?;
        let upper = from.unwrap_or(u64::MAX);
        let range = locks
            .range((repo, 0)..=(repo, upper))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for entry in range.rev() {
            let (key, value) = entry.map_err(|e| self.err(e))?;
            let id = key.value().1;
            if out.len() == limit {
                return Ok((out, Some(id)));
            }
            out.push(self.decode(repo, id, value.value())?);
        }
        Ok((out, None))
    }

    /// Removes lock `id` of `repo` if `allow` agrees, in one write transaction.
    pub fn remove(
        &self,
        repo: &str,
        id: u64,
        allow: impl FnOnce(&Lock) -> bool,
    ) -> Result<Removed, LockDbError> {
        let txn = self.begin_write()?;
        let outcome = {
            let mut locks = txn.open_table(LOCKS).map_err(|e| self.err(e))?;
            let mut paths = txn.open_table(PATHS).map_err(|e| self.err(e))?;
            let mut counts = txn.open_table(COUNTS).map_err(|e| self.err(e))?;
            let mut scope_counts = txn.open_table(SCOPE_COUNTS).map_err(|e| self.err(e))?;
            let mut meta = txn.open_table(META).map_err(|e| self.err(e))?;
            let bytes = locks
                .get((repo, id))
                .map_err(|e| self.err(e))?
                .map(|v| v.value().to_vec());
            match bytes {
                None => Removed::NotFound,
                Some(b) => {
                    let lock = self.decode(repo, id, &b)?;
                    if !allow(&lock) {
                        Removed::Refused(lock)
                    } else {
                        locks.remove((repo, id)).map_err(|e| self.err(e))?;
                        paths
                            .remove((repo, lock.path.as_str()))
                            .map_err(|e| self.err(e))?;
                        let count = counts
                            .get(repo)
                            .map_err(|e| self.err(e))?
                            .map_or(0, |v| v.value());
                        if count <= 1 {
                            counts.remove(repo).map_err(|e| self.err(e))?;
                        } else {
                            counts.insert(repo, count - 1).map_err(|e| self.err(e))?;
                        }
                        if let Some(s) = lock.scope.as_deref() {
                            let n = scope_counts
                                .get(s)
                                .map_err(|e| self.err(e))?
                                .map_or(0, |v| v.value());
                            if n <= 1 {
                                scope_counts.remove(s).map_err(|e| self.err(e))?;
                            } else {
                                scope_counts.insert(s, n - 1).map_err(|e| self.err(e))?;
                            }
                        }
                        let total = meta
                            .get("total")
                            .map_err(|e| self.err(e))?
                            .map_or(0, |v| v.value());
                        meta.insert("total", total.saturating_sub(1))
                            .map_err(|e| self.err(e))?;
                        Removed::Done(lock)
                    }
                }
            }
        };
        if matches!(outcome, Removed::Done(_)) {
            txn.commit().map_err(|e| self.err(e))?;
        } else {
            txn.abort().map_err(|e| self.err(e))?;
        }
        Ok(outcome)
    }

    /// The number of locks of `repo`.
    pub fn count(&self, repo: &str) -> Result<u64, LockDbError> {
        let txn = self.begin_read()?;
        let counts = txn.open_table(COUNTS).map_err(|e| self.err(e))?;
        let n = counts
            .get(repo)
            .map_err(|e| self.err(e))?
            .map_or(0, |v| v.value());
        Ok(n)
    }

    /// The number of locks charged to the token scope `scope` (a repository pattern).
    pub fn scope_count(&self, scope: &str) -> Result<u64, LockDbError> {
        let txn = self.begin_read()?;
        let counts = txn.open_table(SCOPE_COUNTS).map_err(|e| self.err(e))?;
        let n = counts
            .get(scope)
            .map_err(|e| self.err(e))?
            .map_or(0, |v| v.value());
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &tempfile::TempDir, limits: LockLimits) -> LockDb {
        LockDb::open(&dir.path().join("locks.redb"), limits).unwrap()
    }

    fn new(c: Created) -> Lock {
        match c {
            Created::New(l) => l,
            other => panic!("expected a new lock, got {other:?}"),
        }
    }

    #[test]
    fn one_lock_per_path_and_repositories_apart() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir, LockLimits::default());
        let a = new(db.create("team/a", "x.bin", "alice", None, 100).unwrap());
        assert_eq!((a.id, a.owner.as_str(), a.locked_at), (1, "alice", 100));
        assert_eq!(
            db.create("team/a", "x.bin", "bob", None, 101).unwrap(),
            Created::Exists(a.clone())
        );
        // The same path in another repository is another lock.
        let b = new(db.create("team/b", "x.bin", "bob", None, 102).unwrap());
        assert_eq!(b.id, 2);
        assert_eq!(db.get("team/b", a.id).unwrap(), None);
        assert_eq!(db.by_path("team/a", "x.bin").unwrap(), Some(a.clone()));
        assert_eq!(db.count("team/a").unwrap(), 1);
        // Removal: refused, then done; the path is free again; ids are not reused.
        assert_eq!(
            db.remove("team/a", a.id, |_| false).unwrap(),
            Removed::Refused(a.clone())
        );
        assert_eq!(
            db.remove("team/b", a.id, |_| true).unwrap(),
            Removed::NotFound
        );
        assert_eq!(
            db.remove("team/a", a.id, |_| true).unwrap(),
            Removed::Done(a.clone())
        );
        assert_eq!(db.by_path("team/a", "x.bin").unwrap(), None);
        assert_eq!(db.count("team/a").unwrap(), 0);
        assert_eq!(
            new(db.create("team/a", "x.bin", "bob", None, 103).unwrap()).id,
            3
        );
    }

    #[test]
    fn pages_newest_first_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = db(&dir, LockLimits::default());
            for i in 0..5 {
                new(db.create("r", &format!("f{i}"), "u", None, i).unwrap());
            }
            new(db.create("other", "f", "u", None, 9).unwrap());
        }
        let db = db(&dir, LockLimits::default());
        let (p1, next) = db.page("r", None, 2).unwrap();
        assert_eq!(p1.iter().map(|l| l.id).collect::<Vec<_>>(), [5, 4]);
        assert_eq!(next, Some(3));
        let (p2, next) = db.page("r", next, 2).unwrap();
        assert_eq!(p2.iter().map(|l| l.id).collect::<Vec<_>>(), [3, 2]);
        let (p3, next) = db.page("r", next, 2).unwrap();
        assert_eq!(p3.iter().map(|l| l.id).collect::<Vec<_>>(), [1]);
        assert_eq!(next, None);
        assert_eq!(db.page("nothing", None, 10).unwrap(), (vec![], None));
        // Exactly a page: no next cursor.
        assert_eq!(db.page("r", None, 5).unwrap().1, None);
        assert_eq!(new(db.create("r", "g", "u", None, 10).unwrap()).id, 7);
    }

    #[test]
    fn limits_per_repository_and_in_all() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(
            &dir,
            LockLimits {
                per_repo: 2,
                per_scope: 100,
                total: 3,
            },
        );
        new(db.create("a", "1", "u", None, 0).unwrap());
        new(db.create("a", "2", "u", None, 0).unwrap());
        assert_eq!(
            db.create("a", "3", "u", None, 0).unwrap(),
            Created::RepoFull { limit: 2 }
        );
        // An existing lock is still reported as such when the repository is full.
        assert!(matches!(
            db.create("a", "1", "v", None, 0).unwrap(),
            Created::Exists(_)
        ));
        new(db.create("b", "1", "u", None, 0).unwrap());
        assert_eq!(
            db.create("c", "1", "u", None, 0).unwrap(),
            Created::ServerFull { limit: 3 }
        );
        // Unlocking makes room.
        assert!(matches!(
            db.remove("a", 1, |_| true).unwrap(),
            Removed::Done(_)
        ));
        new(db.create("c", "1", "u", None, 0).unwrap());
    }

    #[test]
    fn limits_per_scope_leave_other_scopes_and_repositories_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(
            &dir,
            LockLimits {
                per_repo: 10,
                per_scope: 3,
                total: 6,
            },
        );
        let b = Some("team-b/*");
        // Team b spreads its locks over several repositories: the scope counts them all.
        new(db.create("team-b/r0", "1", "u", b, 0).unwrap());
        new(db.create("team-b/r1", "1", "u", b, 0).unwrap());
        new(db.create("team-b/r2", "1", "u", b, 0).unwrap());
        assert_eq!(
            db.create("team-b/r3", "1", "u", b, 0).unwrap(),
            Created::ScopeFull {
                scope: "team-b/*".into(),
                limit: 3
            }
        );
        assert_eq!(db.scope_count("team-b/*").unwrap(), 3);
        // An existing lock is still reported as such when the scope is full.
        assert!(matches!(
            db.create("team-b/r0", "1", "u", b, 0).unwrap(),
            Created::Exists(_)
        ));
        // Another scope, and a server-wide token, still lock, in team b's repositories too.
        new(db
            .create("team-a/r0", "1", "u", Some("team-a/*"), 0)
            .unwrap());
        new(db
            .create("team-b/r0", "2", "u", Some("team-b/r0"), 0)
            .unwrap());
        let wide = new(db.create("team-b/r3", "1", "u", None, 0).unwrap());
        assert_eq!(wide.scope, None);
        assert_eq!(db.scope_count("team-a/*").unwrap(), 1);
        assert_eq!(db.scope_count("team-b/*").unwrap(), 3);
        // Removing a lock (by anyone) gives the place back to the scope that was charged.
        let (page, _) = db.page("team-b/r1", None, 10).unwrap();
        assert_eq!(page[0].scope.as_deref(), Some("team-b/*"));
        assert!(matches!(
            db.remove("team-b/r1", page[0].id, |_| true).unwrap(),
            Removed::Done(_)
        ));
        assert_eq!(db.scope_count("team-b/*").unwrap(), 2);
        assert!(matches!(
            db.remove("team-b/r3", wide.id, |_| true).unwrap(),
            Removed::Done(_)
        ));
        assert_eq!(db.scope_count("team-b/*").unwrap(), 2);
        new(db.create("team-b/r3", "1", "u", b, 0).unwrap());
        // The total is the last resort: 5 locks now, one more fits, then none whatever the
        // scope.
        new(db.create("c/r", "1", "u", Some("c/*"), 0).unwrap());
        assert_eq!(
            db.create("d/r", "1", "u", Some("d/*"), 0).unwrap(),
            Created::ServerFull { limit: 6 }
        );
        assert_eq!(db.scope_count("d/*").unwrap(), 0);
        // Counts survive reopening.
        drop(db);
        let db = self::db(&dir, LockLimits::default());
        assert_eq!(db.scope_count("team-b/*").unwrap(), 3);
        assert_eq!(db.scope_count("team-a/*").unwrap(), 1);
    }

    #[test]
    fn schema_1_is_upgraded_and_its_locks_are_charged_to_no_scope() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.redb");
        // A database as schema 1 wrote it: no scope table, locks without a scope.
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut locks = txn.open_table(LOCKS).unwrap();
                let old = br#"{"path":"a.bin","owner":"alice","locked_at":5}"#;
                locks.insert(("team/r", 1), old.as_slice()).unwrap();
                txn.open_table(PATHS)
                    .unwrap()
                    .insert(("team/r", "a.bin"), 1)
                    .unwrap();
                txn.open_table(COUNTS).unwrap().insert("team/r", 1).unwrap();
                let mut meta = txn.open_table(META).unwrap();
                meta.insert("schema", 1).unwrap();
                meta.insert("total", 1).unwrap();
                meta.insert("next_id", 2).unwrap();
            }
            txn.commit().unwrap();
        }
        let db = db(&dir, LockLimits::default());
        let old = db.get("team/r", 1).unwrap().unwrap();
        assert_eq!((old.owner.as_str(), old.scope), ("alice", None));
        new(db
            .create("team/r", "b.bin", "bob", Some("team/*"), 6)
            .unwrap());
        assert_eq!(db.scope_count("team/*").unwrap(), 1);
        assert!(matches!(
            db.remove("team/r", 1, |_| true).unwrap(),
            Removed::Done(_)
        ));
        assert_eq!(db.scope_count("team/*").unwrap(), 1);
        drop(db);
        let raw = Database::create(&path).unwrap();
        let txn = raw.begin_read().unwrap();
        let schema = txn.open_table(META).unwrap().get("schema").unwrap();
        assert_eq!(schema.map(|v| v.value()), Some(SCHEMA));
    }

    #[test]
    fn unknown_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("schema", 99).unwrap();
            txn.commit().unwrap();
        }
        let e = LockDb::open(&path, LockLimits::default()).unwrap_err();
        assert!(e.to_string().contains("schema 99"), "{e}");
    }
}
