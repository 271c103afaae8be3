//! [`RepoName`]: the name of a repository whose files a scoped credential may read, typed from
//! the server's routes and tokens down to the index and the shard log. A leaf of the crate (the
//! backends, the index and catch-up name repositories; `crate::tenancy` decides who sees what).

use serde::{Deserialize, Serialize};

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
