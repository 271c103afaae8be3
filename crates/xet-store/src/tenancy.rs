//! Which repository may see what. A credential scoped to a repository ([`RepoName`]) reads only
//! the files registered through that repository: by a shard its client registered, by a basic
//! upload, or by a shard sent again whose client thereby proved it knows the files' chunks. A
//! server-wide credential (no repository) reads every file, and the empty file is everyone's.
//! Deduplication stays global: xorbs are shared between repositories, the right to read a file
//! is not.
//!
//! The records live in the index (a `(file, repository)` row each) and, on shared storage, in
//! the shard log, whose entries name the repository their shard was registered through: the
//! other nodes learn from it who may read what (`crate::sync`), and a node that misses a file
//! it was asked about catches up once before saying no.

use xet_format::FileHash;
use xet_format::ShardHash;

use crate::cas::{Freshness, Store};
use crate::error::StoreError;
use crate::index::Commit;
pub use crate::repo_name::{EmptyRepoName, RepoName};
use xet_protocol::util::sync::LockAnyway as _;

impl Store {
    /// Whether `file` may be read by a credential that sees `repo`'s files only (`None`: it
    /// sees everything). The empty file is everyone's.
    pub fn visible_to(&self, file: &FileHash, repo: Option<&RepoName>) -> Result<bool, StoreError> {
        self.visible_as(file, repo, Freshness::CatchUpOnMiss)
    }

    /// [`Self::visible_to`] as `freshness` says (see [`Freshness`]).
    pub(crate) fn visible_as(
        &self,
        file: &FileHash,
        repo: Option<&RepoName>,
        freshness: Freshness,
    ) -> Result<bool, StoreError> {
        match repo {
            None => Ok(true),
            Some(_) if file.is_zero() => Ok(true),
            Some(repo) => match self.index.file_in_repo(file, repo)? {
                false if freshness == Freshness::CatchUpOnMiss && self.caught_up_after_miss() => {
                    Ok(self.index.file_in_repo(file, repo)?)
                }
                found => Ok(found),
            },
        }
    }

    /// Whether every one of `files` was registered through repository `repo`.
    pub(crate) fn files_in_repo(
        &self,
        files: &[FileHash],
        repo: &RepoName,
    ) -> Result<bool, StoreError> {
        for f in files {
            if !f.is_zero() && !self.index.file_in_repo(f, repo)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Lets `repo` read `files`, which shard `shard` registered: `logged` says whether the
    /// shard's log entry already names `repo` (a new registration logs it with the
    /// repository); otherwise it is logged again with it, so that the other nodes of shared
    /// storage learn it.
    pub(crate) fn let_repo_read(
        &self,
        shard: &ShardHash,
        files: &[FileHash],
        repo: &RepoName,
        logged: bool,
    ) -> Result<(), StoreError> {
        if !logged {
            if self.files_in_repo(files, repo)? {
                return Ok(());
            }
            self.log_shard(shard, Some(repo))?;
        }
        Ok(self.index.add_file_repos(files, repo, Commit::Durable)?)
    }

    /// Records that `file` (registered) was stored through repository `repo`: a basic upload,
    /// which registers its shard through the store directly. On shared storage the other nodes
    /// learn it through the shard that registered the file.
    pub fn add_file_repo(&self, file: &FileHash, repo: &RepoName) -> Result<(), StoreError> {
        if file.is_zero() || self.index.file_in_repo(file, repo)? {
            return Ok(());
        }
        if let Some(record) = self.index.file(file)? {
            self.log_shard(&record.shard, Some(repo))?;
        }
        Ok(self.index.add_file_repos(&[*file], repo, Commit::Durable)?)
    }

    /// Logs `shard` (registered through `repo`, if given) for the other nodes of shared
    /// storage, and notes the registration as known here.
    pub(crate) fn log_shard(
        &self,
        shard: &ShardHash,
        repo: Option<&RepoName>,
    ) -> Result<(), StoreError> {
        let Some(bucket) = self.backend.shared() else {
            return Ok(());
        };
        bucket.log_shard(shard, repo)?;
        if let Some(repo) = repo {
            self.cluster
                .logged_here
                .lock_anyway()
                .push((*shard, repo.clone()));
        }
        Ok(())
    }
}
