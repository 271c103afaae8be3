//! Running git: configuration in a chosen scope, and the few repository queries the agent and
//! the `git xet` commands need.
//!
//! Configuration and repository queries go through the `git` program rather than a library, so
//! that configuration includes, scopes and `urlmatch` rules are exactly what git and git-lfs
//! themselves see, and `git lfs` is found through git's exec path (as `git lfs …`), not by
//! looking for a `git-lfs` binary.
//!
//! Objects are the exception: [`objects`] reads trees and blobs in-process with `git2` (listing
//! the LFS pointers of a tree is one read per blob, too many for a process each), and
//! [`history`] finds the earlier versions of LFS files in recent commits the same way.
//! [`checkout`] holds the rule of which tree entries `git checkout` writes.

pub mod checkout;
pub mod history;
pub mod objects;
pub(crate) mod worktree;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Where a configuration value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `~/.gitconfig` (or `$XDG_CONFIG_HOME/git/config`).
    Global,
    /// `.git/config` of the current repository.
    Local,
    /// The system-wide `/etc/gitconfig`.
    System,
}

impl Scope {
    pub fn flag(self) -> &'static str {
        match self {
            Scope::Global => "--global",
            Scope::Local => "--local",
            Scope::System => "--system",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Local => "local",
            Scope::System => "system",
        }
    }
}

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git ({0}); is git installed and on PATH?")]
    Spawn(std::io::Error),
    #[error("`git {args}` failed (exit {code}): {stderr}")]
    Failed {
        args: String,
        code: i32,
        stderr: String,
    },
}

/// Runs git in `dir` (or the current directory).
#[derive(Debug, Clone, Default)]
pub struct Git {
    dir: Option<PathBuf>,
}

impl Git {
    /// Git in the current directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Git in `dir`.
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            dir: Some(dir.to_path_buf()),
        }
    }

    /// The directory git runs in, if not the current one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Command::new("git");
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        c.args(args).stdin(Stdio::null());
        c
    }

    /// Runs git and returns its output, whatever the exit status.
    pub fn output<I, S>(&self, args: I) -> Result<Output, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args).output().map_err(GitError::Spawn)
    }

    /// Runs git; fails on a non-zero exit; returns stdout without the trailing newline.
    pub fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self.output(args)?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: args.join(" "),
                code: out.status.code().unwrap_or(-1),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .trim_end_matches(['\n', '\r'])
            .to_string())
    }

    /// A configuration value as git resolves it (all scopes), if set.
    pub(crate) fn config_get(&self, key: &str) -> Result<Option<String>, GitError> {
        self.config_get_in(None, key)
    }

    /// A configuration value in one scope only (or as resolved, with `None`).
    pub(crate) fn config_get_in(
        &self,
        scope: Option<Scope>,
        key: &str,
    ) -> Result<Option<String>, GitError> {
        let mut args = vec!["config"];
        if let Some(s) = scope {
            args.push(s.flag());
        }
        args.extend(["--get", key]);
        let out = self.output(&args)?;
        match out.status.code() {
            Some(0) => Ok(Some(
                String::from_utf8_lossy(&out.stdout)
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
            )),
            // 1: the key is not set. Outside a repository `--local` fails with 128: unset too.
            Some(1) => Ok(None),
            Some(128) if scope == Some(Scope::Local) && !self.in_repository() => Ok(None),
            code => Err(GitError::Failed {
                args: args.join(" "),
                code: code.unwrap_or(-1),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }

    /// Sets a value in a scope.
    pub(crate) fn config_set(&self, scope: Scope, key: &str, value: &str) -> Result<(), GitError> {
        self.run(&["config", scope.flag(), key, value]).map(|_| ())
    }

    /// Removes a value from a scope; `Ok(false)` if it was not set.
    pub(crate) fn config_unset(&self, scope: Scope, key: &str) -> Result<bool, GitError> {
        let out = self.output(["config", scope.flag(), "--unset-all", key])?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(5) => Ok(false), // not set
            code => Err(GitError::Failed {
                args: format!("config {} --unset-all {key}", scope.flag()),
                code: code.unwrap_or(-1),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }

    /// Whether the directory is inside a git repository (work tree or bare).
    pub(crate) fn in_repository(&self) -> bool {
        self.output(["rev-parse", "--git-dir"])
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// The repository's common git directory (shared by worktrees), absolute.
    pub(crate) fn common_dir(&self) -> Result<PathBuf, GitError> {
        let dir = self.run(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
        Ok(PathBuf::from(dir))
    }

    /// Whether `git lfs` can be run.
    pub(crate) fn has_git_lfs(&self) -> bool {
        self.output(["lfs", "version"])
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trip_in_a_local_repository() {
        let dir = tempfile::tempdir().unwrap();
        let git = Git::in_dir(dir.path());
        assert!(!git.in_repository());
        assert_eq!(
            git.config_get_in(Some(Scope::Local), "xet.test").unwrap(),
            None
        );
        git.run(&["init", "-q"]).unwrap();
        assert!(git.in_repository());
        git.config_set(Scope::Local, "xet.test", "a value").unwrap();
        assert_eq!(
            git.config_get_in(Some(Scope::Local), "xet.test")
                .unwrap()
                .as_deref(),
            Some("a value")
        );
        assert!(git.config_unset(Scope::Local, "xet.test").unwrap());
        assert!(!git.config_unset(Scope::Local, "xet.test").unwrap());
        assert!(git.common_dir().unwrap().ends_with(".git"));
        let err = git.run(&["no-such-subcommand"]).unwrap_err();
        assert!(err.to_string().contains("no-such-subcommand"), "{err}");
    }
}
