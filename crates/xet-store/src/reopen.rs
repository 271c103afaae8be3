//! [`ReopeningDb`]: a redb database that is opened again after an I/O error.
//!
//! Once a write of redb's fails (a full disk), redb refuses every transaction with
//! `PreviousIo` (or, when its allocator panicked on the broken transaction, a poisoned lock)
//! until the database is opened again, so a server that ran into a full disk
//! would stay broken after the disk has room again. This wrapper drops the failed database
//! when a transaction is refused that way and opens it again (its last transaction rolled
//! back) at the next transaction, at most once a second, once the failed database's last
//! transaction has ended (redb locks its file while open).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, ReadTransaction, WriteTransaction};
use xet_protocol::util::sync::{LockAnyway as _, RwLockAnyway as _};

/// How often opening the database again is tried while it cannot be (the disk still full, or
/// a transaction of the failed database still running).
const REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// Why a transaction could not begin.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    #[error("{0}")]
    Redb(Box<redb::Error>),
    #[error("being opened again after an I/O error (a full disk?); try again in a moment")]
    Reopening,
}

/// See the module documentation.
#[derive(Debug)]
pub struct ReopeningDb {
    path: PathBuf,
    /// The open database; `None` after an I/O error made it unusable, until it is opened again.
    db: RwLock<Option<Arc<Database>>>,
    /// When opening it again was last tried.
    reopened: Mutex<Option<Instant>>,
}

impl ReopeningDb {
    /// `db`, opened from `path` by the caller (with its tables and migrations).
    pub fn new(path: &Path, db: Database) -> Self {
        Self {
            path: path.to_path_buf(),
            db: RwLock::new(Some(Arc::new(db))),
            reopened: Mutex::new(None),
        }
    }

    /// A read transaction.
    pub fn begin_read(&self) -> Result<ReadTransaction, BeginError> {
        let db = self.database()?;
        db.begin_read().map_err(|e| self.failed(&db, e))
    }

    /// A write transaction.
    pub fn begin_write(&self) -> Result<WriteTransaction, BeginError> {
        let db = self.database()?;
        db.begin_write().map_err(|e| self.failed(&db, e))
    }

    /// The open database, opened again if an I/O error closed it.
    fn database(&self) -> Result<Arc<Database>, BeginError> {
        if let Some(db) = self.db.read_anyway().as_ref() {
            return Ok(Arc::clone(db));
        }
        let mut slot = self.db.write_anyway();
        if let Some(db) = slot.as_ref() {
            return Ok(Arc::clone(db));
        }
        {
            let mut last = self.reopened.lock_anyway();
            if last.is_some_and(|t| t.elapsed() < REOPEN_INTERVAL) {
                return Err(BeginError::Reopening);
            }
            *last = Some(Instant::now());
        }
        match Database::create(&self.path) {
            Ok(db) => {
                tracing::info!(path = %self.path.display(), "database opened again after an I/O error");
                let db = Arc::new(db);
                *slot = Some(Arc::clone(&db));
                Ok(db)
            }
            // A transaction of the failed database still holds it: the next call tries again.
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(BeginError::Reopening),
            Err(e) => Err(BeginError::Redb(Box::new(e.into()))),
        }
    }

    /// `e`, from beginning a transaction on `db`: when it says an earlier I/O error made the
    /// database unusable, or that one of redb's internal locks was poisoned (redb's allocator
    /// has panicked on a transaction that a full disk broke), `db` is dropped, to be opened
    /// again by the next transaction.
    fn failed(&self, db: &Arc<Database>, e: redb::TransactionError) -> BeginError {
        if matches!(
            e,
            redb::TransactionError::Storage(
                redb::StorageError::PreviousIo | redb::StorageError::LockPoisoned(_)
            )
        ) {
            let mut slot = self.db.write_anyway();
            if slot.as_ref().is_some_and(|d| Arc::ptr_eq(d, db)) {
                tracing::warn!(path = %self.path.display(), "database failed on an I/O error (a full disk?): opening it again");
                *slot = None;
            }
        }
        BeginError::Redb(Box::new(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("t");

    #[test]
    fn transactions_run_on_the_database_and_a_closed_one_is_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.redb");
        let db = ReopeningDb::new(&path, Database::create(&path).unwrap());
        let txn = db.begin_write().unwrap();
        txn.open_table(T).unwrap().insert(1, 2).unwrap();
        txn.commit().unwrap();
        // As after an I/O error: the database is dropped; the next transaction opens it again.
        *db.db.write().unwrap() = None;
        let txn = db.begin_read().unwrap();
        assert_eq!(
            txn.open_table(T).unwrap().get(1).unwrap().unwrap().value(),
            2
        );
        // While the old database is still open elsewhere, opening it again waits.
        drop(txn);
        let held = db.database().unwrap();
        *db.db.write().unwrap() = None;
        *db.reopened.lock().unwrap() = None;
        assert!(matches!(db.begin_read(), Err(BeginError::Reopening)));
        drop(held);
        // Tried again at most once a second.
        assert!(matches!(db.begin_read(), Err(BeginError::Reopening)));
        *db.reopened.lock().unwrap() = None;
        assert!(db.begin_read().is_ok());
    }
}
