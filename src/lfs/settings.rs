//! What the agent and the `git xet` commands read from the environment and git configuration:
//! the standalone endpoint, the token for it, and where git-lfs wants downloads written.
//!
//! | setting | first match wins |
//! |---|---|
//! | endpoint | `GIT_XET_ENDPOINT`, then `git config xet.endpoint` |
//! | token for an http(s) endpoint | `GIT_XET_TOKEN`, then `git credential fill` for the endpoint URL (the password is the token) |
//! | download temp dir | `<lfs.storage or <git common dir>/lfs>/tmp` (lfs-agent.md §7) |
//!
//! In negotiated mode none of these apply: the LFS server's action carries the CAS URL and token.

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};

/// The git configuration key naming the standalone endpoint.
pub const ENDPOINT_KEY: &str = "xet.endpoint";
/// Environment variable overriding [`ENDPOINT_KEY`].
pub const ENDPOINT_ENV: &str = "GIT_XET_ENDPOINT";
/// Environment variable giving the token for an http(s) endpoint.
pub const TOKEN_ENV: &str = "GIT_XET_TOKEN";

/// Where objects live in standalone mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointSpec {
    /// A `git xet serve` (or another Xet CAS) at this base URL, without a trailing slash.
    Http(String),
    /// A local store directory, used in-process (the embedded default).
    Dir(PathBuf),
}

impl EndpointSpec {
    /// Parses an endpoint as written in configuration: an `http://` or `https://` URL, a
    /// `file://` URL, or a directory path. A relative path is taken relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self, SettingsError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SettingsError::BadEndpoint {
                value: text.into(),
                why: "it is empty".into(),
            });
        }
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let rest = &text[text.find("://").map_or(0, |i| i + 3)..];
            if rest.is_empty() || rest.starts_with('/') {
                return Err(SettingsError::BadEndpoint {
                    value: text.into(),
                    why: "the URL has no host".into(),
                });
            }
            return Ok(EndpointSpec::Http(text.trim_end_matches('/').to_string()));
        }
        let path =
            match text.strip_prefix("file://") {
                Some(p) => PathBuf::from(p),
                None if text.contains("://") => return Err(SettingsError::BadEndpoint {
                    value: text.into(),
                    why: "only http://, https:// and file:// URLs or directory paths are supported"
                        .into(),
                }),
                None => match text.strip_prefix("~/") {
                    Some(rest) => match std::env::var_os("HOME") {
                        Some(home) => PathBuf::from(home).join(rest),
                        None => PathBuf::from(text),
                    },
                    None => PathBuf::from(text),
                },
            };
        Ok(EndpointSpec::Dir(if path.is_absolute() {
            path
        } else {
            base.join(path)
        }))
    }

    /// The endpoint as shown to users and used to key caches.
    pub fn display(&self) -> String {
        match self {
            EndpointSpec::Http(url) => url.clone(),
            EndpointSpec::Dir(path) => path.display().to_string(),
        }
    }
}

/// A setting that could not be read or makes no sense.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("endpoint {value:?} is not usable: {why}")]
    BadEndpoint { value: String, why: String },
}

/// The standalone endpoint and where it was configured, e.g. `(Dir(..), "git config xet.endpoint")`.
pub fn endpoint(git: &Git, base: &Path) -> Result<Option<(EndpointSpec, String)>, SettingsError> {
    if let Some(value) = std::env::var_os(ENDPOINT_ENV) {
        let value = value.to_string_lossy().into_owned();
        if !value.trim().is_empty() {
            return Ok(Some((
                EndpointSpec::parse(&value, base)?,
                format!("environment {ENDPOINT_ENV}"),
            )));
        }
    }
    match git.config_get(ENDPOINT_KEY)? {
        Some(value) => Ok(Some((
            EndpointSpec::parse(&value, base)?,
            format!("git config {ENDPOINT_KEY}"),
        ))),
        None => Ok(None),
    }
}

/// The token for an http(s) endpoint: [`TOKEN_ENV`], else `git credential fill` for the URL
/// (which may run a credential helper or prompt on the terminal), else none.
pub fn token(git: &Git, url: &str) -> Option<String> {
    if let Ok(t) = std::env::var(TOKEN_ENV) {
        if !t.trim().is_empty() {
            return Some(t.trim().to_string());
        }
    }
    credential_fill(git, url)
}

/// Asks git's credential helpers for `url`; the password is the token.
fn credential_fill(git: &Git, url: &str) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new("git");
    if let Some(dir) = git.dir() {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .args(["credential", "fill"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let request = format!("url={url}\n\n");
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits early closes the pipe; its answer (or failure) still counts.
        let _ = stdin.write_all(request.as_bytes());
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        tracing::debug!(
            url,
            stderr = %String::from_utf8_lossy(&out.stderr).trim(),
            "git credential fill found no credential"
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("password=").map(str::to_string))
        .filter(|p| !p.is_empty())
}

/// The directory git-lfs moves finished downloads from: `<LFS storage>/tmp`, on the same
/// filesystem as `.git/lfs/objects` (lfs-agent.md §7). Honours `lfs.storage`.
pub fn lfs_temp_dir(git: &Git) -> Result<PathBuf, SettingsError> {
    let common = git.common_dir()?;
    let storage = match git.config_get("lfs.storage")? {
        Some(s) if !s.trim().is_empty() => {
            let p = PathBuf::from(s.trim());
            if p.is_absolute() {
                p
            } else {
                common.join(p)
            }
        }
        _ => common.join("lfs"),
    };
    Ok(storage.join("tmp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let base = Path::new("/repo");
        assert_eq!(
            EndpointSpec::parse("https://cas.example/", base).unwrap(),
            EndpointSpec::Http("https://cas.example".into())
        );
        assert_eq!(
            EndpointSpec::parse("HTTP://127.0.0.1:8080", base).unwrap(),
            EndpointSpec::Http("HTTP://127.0.0.1:8080".into())
        );
        assert_eq!(
            EndpointSpec::parse("file:///srv/xet", base).unwrap(),
            EndpointSpec::Dir("/srv/xet".into())
        );
        assert_eq!(
            EndpointSpec::parse("store", base).unwrap(),
            EndpointSpec::Dir("/repo/store".into())
        );
        for bad in ["", "http://", "https:///x", "s3://bucket"] {
            let e = EndpointSpec::parse(bad, base).unwrap_err().to_string();
            assert!(e.contains("not usable"), "{bad}: {e}");
        }
    }
}
