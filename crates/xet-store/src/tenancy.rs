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

use serde::{Deserialize, Serialize};
use xet_format::FileHash;
use xet_format::ShardHash;

use crate::cas::{Freshness, Store};
use crate::error::StoreError;
use crate::index::Commit;
use xet_protocol::util::sync::LockAnyway as _;

/// The name of a repository, as the server's tokens and routes name it (`team-a/model`): whose
/// files a scoped credential may read. Never empty. Which names are allowed is the server's
/// decision; the store keeps whatever it is given.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoName(String);

/// An empty repository name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a repository name cannot be empty")]
pub struct EmptyRepoName;

impl RepoName {
    /// `name`, unless it is empty.
    pub fn new(name: impl Into<String>) -> Result<Self, EmptyRepoName> {
        let name = name.into();
        if name.is_empty() {
            Err(EmptyRepoName)
        } else {
            Ok(Self(name))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RepoName {
    type Error = EmptyRepoName;

    fn try_from(name: String) -> Result<Self, EmptyRepoName> {
        Self::new(name)
    }
}

impl From<RepoName> for String {
    fn from(name: RepoName) -> String {
        name.0
    }
}

/// Read as the text it is (the server's own records, such as locks, key on the text).
impl std::ops::Deref for RepoName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RepoName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_name_is_never_empty_and_reads_back_as_given() {
        assert_eq!(RepoName::new(""), Err(EmptyRepoName));
        let name = RepoName::new("team-a/model").unwrap();
        assert_eq!(name.as_str(), "team-a/model");
        assert_eq!(name.to_string(), "team-a/model");
        let json = serde_json::to_string(&name).unwrap();
        assert_eq!(json, "\"team-a/model\"");
        assert_eq!(serde_json::from_str::<RepoName>(&json).unwrap(), name);
        assert!(serde_json::from_str::<RepoName>("\"\"").is_err());
    }
}
