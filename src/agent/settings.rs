//! What the agent and the `git xet` commands read from the environment and git configuration:
//! the standalone endpoint, the credentials (which secret may go to which origin), the retry
//! horizon, and where git-lfs wants downloads written.
//!
//! | setting | first match wins |
//! |---|---|
//! | endpoint of a remote | `GIT_XET_ENDPOINT`, then `git config remote.<name>.xetEndpoint` (the remote git-lfs names in `init`), then `git config xet.endpoint` |
//! | token for an http(s) endpoint | `GIT_XET_TOKEN`, then the password in the endpoint URL (`http://user:TOKEN@host`), then `git credential fill` for the endpoint URL (the password is the token) |
//! | credential of a negotiated token refresh (`GET href`) | the action's own `Authorization` header, then `HF_TOKEN` if `href` is https on Hugging Face's hosts, then for an SSH remote `git-lfs-authenticate`'s `Authorization` (when it is for `href`'s origin), then the netrc file's password for `href`'s host, then `git credential fill` for `href` |
//! | credential of git-xet's own batch requests | `http.extraheader`'s or `git-lfs-authenticate`'s `Authorization` (SSH remotes), else the password in the LFS URL, then the netrc file (`~/.netrc`) for its host, then `git credential fill` (never prompting); sent with the first request when `lfs.<url>.access` is `basic`, else after a 401 |
//! | retry horizon | `GIT_XET_RETRY_SECS` (seconds), else 60 |
//! | hash uploads with SHA-256 even where the server checks the oid itself | `GIT_XET_HASH_UPLOADS=1` (default: git-lfs named the object by its SHA-256 when it stored it; a server that answers `X-Xet-Checks-Sha256: 1` checks that claim before it relies on it, so the agent does not hash the file a second time) |
//! | download temp dir | `<lfs.storage or <git common dir>/lfs>/tmp` (docs/lfs-agent.md §7) |
//!
//! **The credential rule: a secret goes only to the origin it was issued for.** `GIT_XET_TOKEN`
//! and a password in the endpoint URL are for the standalone endpoint; they never go to an
//! `href` an LFS server named (a committed `.lfsconfig` can point any repository's LFS traffic
//! anywhere). `HF_TOKEN` goes only to Hugging Face's own hosts over https. A credential helper
//! answer is asked for the exact URL it is sent to, so git's own matching decides. Every
//! secret read here is registered with [`xet_protocol::redact`].

use std::path::{Path, PathBuf};
use xet_client::{CacheConfig, CacheError};
use xet_protocol::util::secret::Secret;

use super::environment;
use crate::git::{Git, GitError};

/// The git configuration key naming the standalone endpoint.
pub(crate) const ENDPOINT_KEY: &str = "xet.endpoint";
/// The last part of the per-remote endpoint key, `remote.<name>.xetEndpoint` (see
/// [`remote_endpoint_key`]).
pub(crate) const REMOTE_ENDPOINT_SUFFIX: &str = "xetEndpoint";
/// The file that makes a directory a git-xet store (written by the store when it creates one;
/// its layout is `crates/xet-store/src/cas.rs`'s).
pub(crate) const STORE_VERSION_FILE: &str = "STORE-VERSION";
/// What [`STORE_VERSION_FILE`] holds in a store this git-xet understands.
pub(crate) const STORE_VERSION_TEXT: &str = "git-xet-store 1";
/// Environment variable overriding [`ENDPOINT_KEY`].
pub(crate) const ENDPOINT_ENV: &str = "GIT_XET_ENDPOINT";
/// Environment variable giving the token for an http(s) endpoint.
pub(crate) const TOKEN_ENV: &str = "GIT_XET_TOKEN";
/// Environment variable with the user's Hugging Face token (sent only to Hugging Face).
pub(crate) const HF_TOKEN_ENV: &str = "HF_TOKEN";
/// Environment variable with the retry horizon of remote requests, in seconds.
pub(crate) const RETRY_SECS_ENV: &str = "GIT_XET_RETRY_SECS";
/// Environment variable that makes the agent hash every upload with SHA-256 (see the table).
pub(crate) const HASH_UPLOADS_ENV: &str = "GIT_XET_HASH_UPLOADS";

/// Whether the agent must hash uploads itself even for a server that checks SHA-256 claims
/// (`GIT_XET_HASH_UPLOADS` set to anything but empty or `0`).
pub(crate) fn hash_uploads_forced() -> bool {
    environment::var_os(HASH_UPLOADS_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The git setting that turns off uploading small objects in the packs an LFS server names
/// (docs/lfs-agent.md §12.4): `git config xet.packUploads false`.
pub(crate) const PACK_UPLOADS_KEY: &str = "xet.packUploads";

/// Whether small objects may go up in the packs the LFS server names: yes unless
/// [`PACK_UPLOADS_KEY`] is false (`false`, `no`, `off`, `0`, as git reads booleans).
pub(crate) fn pack_uploads(git: &Git) -> bool {
    match git.config_get(PACK_UPLOADS_KEY) {
        Ok(Some(v)) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "false" | "no" | "off" | "0"
        ),
        _ => true,
    }
}

/// Where objects live in standalone mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointSpec {
    /// A `git xet serve` (or another Xet CAS) at this base URL, without a trailing slash.
    Http(String),
    /// A local store directory, used in-process (the embedded default).
    Dir(PathBuf),
}

impl EndpointSpec {
    /// The one parser of endpoints, wherever they come from (`git xet install --endpoint`,
    /// `xet.endpoint`, `remote.<name>.xetEndpoint`, `GIT_XET_ENDPOINT`), so that a value means
    /// the same everywhere:
    ///
    /// - `http://…` or `https://…`, the scheme in any case (`HTTP://host` is `http://host`),
    ///   without a trailing slash; it must name a host;
    /// - `file:///path` (or `file://localhost/path`), the scheme in any case;
    /// - any other `scheme://…` (`s3://bucket`) is refused rather than taken for a directory;
    /// - `~` and `~/dir` are in the home directory;
    /// - any other text is a directory, relative to `base` unless absolute.
    ///
    /// Directories come back absolute, without `.` and `..` (resolved by name: the directory
    /// may not exist yet).
    pub fn parse(text: &str, base: &Path) -> Result<Self, SettingsError> {
        let text = text.trim();
        let bad = |why: &str| SettingsError::BadEndpoint {
            value: text.into(),
            why: why.into(),
        };
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        if let Some((scheme, rest)) = text.split_once("://") {
            let scheme = scheme.to_ascii_lowercase();
            return match scheme.as_str() {
                "http" | "https" => {
                    if rest.is_empty() || rest.starts_with('/') {
                        return Err(bad("the URL has no host"));
                    }
                    Ok(EndpointSpec::Http(format!(
                        "{scheme}://{}",
                        rest.trim_end_matches('/')
                    )))
                }
                "file" => {
                    let path = rest.strip_prefix("localhost").unwrap_or(rest);
                    if !path.starts_with('/') {
                        return Err(bad(
                            "a file:// URL needs an absolute path (file:///srv/xet-store);                              a relative directory can be given as a plain path",
                        ));
                    }
                    Ok(EndpointSpec::Dir(lexically_clean(Path::new(path))))
                }
                _ => Err(bad(
                    "only http:// and https:// (a `git xet serve`), file:// URLs and directory                      paths are supported",
                )),
            };
        }
        let path = match text.strip_prefix('~') {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                let home = environment::var_os("HOME")
                    .filter(|h| !h.is_empty())
                    .ok_or_else(|| bad("it starts with ~ but HOME is not set"))?;
                PathBuf::from(home).join(rest.trim_start_matches('/'))
            }
            _ => PathBuf::from(text),
        };
        let path = if path.is_absolute() {
            path
        } else {
            base.join(path)
        };
        Ok(EndpointSpec::Dir(lexically_clean(&path)))
    }

    /// The endpoint as written to git configuration by `git xet install`: the URL as parsed
    /// (password included: the configuration is where the user chose to keep it), or the
    /// absolute directory.
    pub(crate) fn config_value(&self) -> String {
        match self {
            EndpointSpec::Http(url) => url.clone(),
            EndpointSpec::Dir(path) => path.to_string_lossy().into_owned(),
        }
    }

    /// The endpoint as shown to users (a password in the URL masked).
    pub fn display(&self) -> String {
        match self {
            EndpointSpec::Http(url) => xet_protocol::redact::redact(url),
            EndpointSpec::Dir(path) => path.display().to_string(),
        }
    }
}

/// `path` without `.` and `..` components, resolved by name (the directory may not exist yet,
/// so the filesystem is not asked): `/a/b/../c/.` becomes `/a/c`.
pub(crate) fn lexically_clean(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// A setting that could not be read or makes no sense.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("endpoint {value:?} is not usable: {why}")]
    BadEndpoint { value: String, why: String },
}

/// The repository's standalone endpoint (whatever the remote) and where it was configured,
/// e.g. `(Dir(..), "git config xet.endpoint")`: [`ENDPOINT_ENV`], then [`ENDPOINT_KEY`].
pub fn endpoint(git: &Git, base: &Path) -> Result<Option<(EndpointSpec, String)>, SettingsError> {
    endpoint_for_remote(git, base, None)
}

/// The configuration key of `remote`'s own endpoint: `remote.<name>.xetEndpoint`.
pub(crate) fn remote_endpoint_key(remote: &str) -> String {
    format!("remote.{remote}.{REMOTE_ENDPOINT_SUFFIX}")
}

/// The standalone endpoint for `remote` (a remote name or URL, as git-lfs names it in `init`)
/// and where it was configured: [`ENDPOINT_ENV`] (an override for one command), then
/// `remote.<name>.xetEndpoint` of the configured remote `remote` names (see
/// [`configured_remote`]), then [`ENDPOINT_KEY`]. `None` for `remote` is the repository's
/// endpoint.
pub(crate) fn endpoint_for_remote(
    git: &Git,
    base: &Path,
    remote: Option<&str>,
) -> Result<Option<(EndpointSpec, String)>, SettingsError> {
    if let Some(value) = environment::var_os(ENDPOINT_ENV) {
        let value = value.to_string_lossy().into_owned();
        if !value.trim().is_empty() {
            return Ok(Some((
                EndpointSpec::parse(&value, base)?,
                format!("environment {ENDPOINT_ENV}"),
            )));
        }
    }
    if let Some(name) = remote.and_then(|r| configured_remote(git, r)) {
        let key = remote_endpoint_key(&name);
        if let Some(value) = git.config_get(&key)?.filter(|v| !v.trim().is_empty()) {
            return Ok(Some((
                EndpointSpec::parse(&value, base)?,
                format!("git config {key}"),
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

/// The configured remote that `remote` (what git-lfs passes in `init`: a remote name, or the
/// URL given to `git push`/`git lfs fetch`) stands for: itself if `remote.<it>.url` is set,
/// else the first remote whose `url` or `pushurl` is exactly `remote`.
pub(crate) fn configured_remote(git: &Git, remote: &str) -> Option<String> {
    let remote = remote.trim();
    if remote.is_empty() || remote.contains(['\n', '\0']) {
        return None;
    }
    let remotes = remotes(git);
    remotes
        .iter()
        .find(|r| r.name == remote)
        .or_else(|| {
            remotes
                .iter()
                .find(|r| r.url.as_deref() == Some(remote) || r.push_url.as_deref() == Some(remote))
        })
        .map(|r| r.name.clone())
}

/// A configured remote: its name and URLs as git config has them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Remote {
    pub name: String,
    /// `remote.<name>.url`.
    pub url: Option<String>,
    /// `remote.<name>.pushurl`.
    pub push_url: Option<String>,
    /// `remote.<name>.lfsurl`, as git config has it (git-lfs also reads `.lfsconfig`).
    pub lfs_url: Option<String>,
    /// `remote.<name>.xetEndpoint`.
    pub xet_endpoint: Option<String>,
}

/// The configured remotes (those with a `url`), in configuration order.
pub fn remotes(git: &Git) -> Vec<Remote> {
    let Ok(out) = git.output([
        "config",
        "--null",
        "--get-regexp",
        r"^remote\..*\.(url|pushurl|lfsurl|xetendpoint)$",
    ]) else {
        return Vec::new();
    };
    parse_remotes(&String::from_utf8_lossy(&out.stdout))
}

/// Parses `git config --null --get-regexp` output (`key\nvalue\0` records) into remotes.
fn parse_remotes(text: &str) -> Vec<Remote> {
    let mut remotes: Vec<Remote> = Vec::new();
    for record in text.split('\0') {
        let (key, value) = record.split_once('\n').unwrap_or((record, ""));
        let Some(rest) = key.strip_prefix("remote.") else {
            continue;
        };
        let Some((name, field)) = rest.rsplit_once('.') else {
            continue;
        };
        let index = match remotes.iter().position(|r| r.name == name) {
            Some(i) => i,
            None => {
                remotes.push(Remote {
                    name: name.to_string(),
                    ..Remote::default()
                });
                remotes.len() - 1
            }
        };
        let r = &mut remotes[index];
        let value = Some(value.to_string());
        // Keys are case-insensitive; git prints them lower-cased. The last value wins, as for
        // `git config --get`.
        match field.to_ascii_lowercase().as_str() {
            "url" => r.url = r.url.take().or(value),
            "pushurl" => r.push_url = r.push_url.take().or(value),
            "lfsurl" => r.lfs_url = value,
            "xetendpoint" => r.xet_endpoint = value,
            _ => {}
        }
    }
    remotes.retain(|r| r.url.is_some());
    remotes
}

/// The LFS endpoint of each remote as git-lfs resolves it (`git lfs env`: `lfs.url`, then
/// `remote.<name>.lfsurl`, then the remote's URL, reading `.lfsconfig` too): `(remote, URL)`,
/// the remote `None` for git-lfs's default remote. Empty if git-lfs cannot be run.
pub(crate) fn lfs_env_endpoints(git: &Git) -> Vec<(Option<String>, String)> {
    let Ok(out) = git.output(["lfs", "env"]) else {
        return Vec::new();
    };
    parse_lfs_env(&String::from_utf8_lossy(&out.stdout))
}

/// The `Endpoint=URL (auth=…)` (default remote) and `Endpoint (NAME)=URL (auth=…)` lines of
/// `git lfs env`.
pub(crate) fn parse_lfs_env(text: &str) -> Vec<(Option<String>, String)> {
    let mut urls = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("Endpoint") else {
            continue;
        };
        let Some((label, value)) = rest.split_once('=') else {
            continue;
        };
        let label = label.trim();
        let remote = if label.is_empty() {
            None
        } else if let Some(name) = label.strip_prefix('(').and_then(|l| l.strip_suffix(')')) {
            Some(name.to_string())
        } else {
            continue;
        };
        let url = value
            .rsplit_once(" (auth=")
            .map_or(value, |(u, _)| u)
            .trim();
        if url.is_empty() {
            continue;
        }
        urls.push((remote, url.to_string()));
    }
    urls
}

/// The LFS endpoint git-lfs uses for `remote` (a configured remote's name), from
/// [`lfs_env_endpoints`]: its own line, else the default line when `remote` is the only remote
/// without one (`git lfs env` prints the default remote without its name).
pub(crate) fn lfs_url_of(
    endpoints: &[(Option<String>, String)],
    remotes: &[Remote],
    remote: &str,
) -> Option<String> {
    if let Some((_, url)) = endpoints.iter().find(|(r, _)| r.as_deref() == Some(remote)) {
        return Some(url.clone());
    }
    let unnamed: Vec<&Remote> = remotes
        .iter()
        .filter(|r| !endpoints.iter().any(|(n, _)| n.as_deref() == Some(&r.name)))
        .collect();
    match unnamed.as_slice() {
        [only] if only.name == remote => endpoints
            .iter()
            .find(|(r, _)| r.is_none())
            .map(|(_, u)| u.clone()),
        _ => None,
    }
}

/// How git-lfs moves a remote's objects, by its rule (docs/lfs-agent.md §10, git-lfs's
/// `tq/manifest.go`): the standalone agent `lfs.<url>.standalonetransferagent` names for the
/// LFS URL (git's URL matching), else `lfs.standalonetransferagent`, else its own file adapter
/// for a `file://` URL, else the batch API of the LFS server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TransferMode {
    /// Standalone mode with git-xet (the agent `xet`).
    Standalone,
    /// Standalone mode with another agent: its name.
    OtherStandalone(String),
    /// git-lfs's built-in `lfs-standalone-file` adapter: git-xet is never started.
    FileAdapter,
    /// The LFS server's batch API chooses (git-xet when it offers `xet`).
    Negotiated,
}

impl TransferMode {
    /// Whether git-xet does this remote's transfers in standalone mode.
    pub(crate) fn is_xet_standalone(&self) -> bool {
        matches!(self, TransferMode::Standalone)
    }
}

/// The [`TransferMode`] of a remote whose LFS URL is `lfs_url` (`None`: not known).
pub(crate) fn transfer_mode(git: &Git, lfs_url: Option<&str>) -> TransferMode {
    let agent = match lfs_url {
        Some(url) if url.contains("://") => git
            .output([
                "config",
                "--get-urlmatch",
                "lfs.standalonetransferagent",
                url,
            ])
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
        _ => git.config_get("lfs.standalonetransferagent").ok().flatten(),
    };
    match agent.filter(|a| !a.trim().is_empty()) {
        Some(a) if a.trim() == xet_protocol::wire::XET_TRANSFER => TransferMode::Standalone,
        Some(a) => TransferMode::OtherStandalone(a.trim().to_string()),
        None if lfs_url.is_some_and(|u| u.to_ascii_lowercase().starts_with("file://")) => {
            TransferMode::FileAdapter
        }
        None => TransferMode::Negotiated,
    }
}

/// Whether git-lfs runs git-xet in standalone mode for `remote` (a remote name or URL, as in
/// `init`). Asks `git lfs env` for the LFS URL only when a URL-matched
/// `lfs.<url>.standalonetransferagent` exists (for a URL that is no configured remote's, only
/// `lfs.standalonetransferagent` is considered).
pub(crate) fn xet_standalone_for(git: &Git, remote: &str) -> bool {
    let url_keys = git
        .output([
            "config",
            "--get-regexp",
            r"^lfs\..*\.standalonetransferagent$",
        ])
        .map(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or(false);
    if !url_keys {
        return transfer_mode(git, None).is_xet_standalone();
    }
    let endpoints = lfs_env_endpoints(git);
    let remotes = remotes(git);
    // A URL that is no configured remote's: only the plain key is known to apply.
    let url =
        configured_remote(git, remote).and_then(|name| lfs_url_of(&endpoints, &remotes, &name));
    transfer_mode(git, url.as_deref()).is_xet_standalone()
}

/// What a standalone directory endpoint holds, found without creating or changing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DirState {
    /// A store (its [`STORE_VERSION_FILE`] says [`STORE_VERSION_TEXT`]); `writable`: this user
    /// may write to it (uploads need to).
    Store { writable: bool },
    /// A store of another version (what its version file says).
    OtherVersion(String),
    /// An empty directory: the first upload makes it a store; nothing can be downloaded yet.
    Empty { writable: bool },
    /// Does not exist; the first upload creates it (its nearest existing parent is a directory
    /// this user may write to). Nothing can be downloaded from it.
    Missing,
    /// A directory with other files and no version file: uploads and downloads refuse it.
    NotAStore,
    /// Something other than a directory.
    NotADirectory,
    /// Does not exist and cannot be created: why (a parent is a file, no permission).
    CannotCreate(String),
    /// Cannot be read: the system's words.
    Unreadable(String),
}

impl DirState {
    /// Whether a download can be served from it (a store of this version).
    #[cfg(test)]
    pub(crate) fn is_store(&self) -> bool {
        matches!(self, DirState::Store { .. })
    }

    /// Why nothing can be downloaded from it, for messages ("does not exist", …); `None` for a
    /// store.
    pub(crate) fn why_not_a_store(&self) -> Option<String> {
        Some(match self {
            DirState::Store { .. } => return None,
            DirState::OtherVersion(v) => {
                format!("holds a store of another version ({STORE_VERSION_FILE} says {v:?})")
            }
            DirState::Empty { .. } => "is empty (nothing was ever pushed there)".into(),
            DirState::Missing => "does not exist (nothing was ever pushed there)".into(),
            DirState::NotAStore => {
                format!("is not a git-xet store (it holds other files and no {STORE_VERSION_FILE})")
            }
            DirState::NotADirectory => "is not a directory".into(),
            DirState::CannotCreate(why) => format!("does not exist and cannot be created: {why}"),
            DirState::Unreadable(why) => format!("cannot be read: {why}"),
        })
    }
}

/// What the directory endpoint `dir` holds (see [`DirState`]); reads only.
pub(crate) fn inspect_dir_endpoint(dir: &Path) -> DirState {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return DirState::NotADirectory,
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return missing_dir_state(dir),
        Err(e) if e.raw_os_error() == Some(ENOTDIR) => {
            return missing_dir_state(dir);
        }
        Err(e) => return DirState::Unreadable(e.to_string()),
    }
    match std::fs::read_to_string(dir.join(STORE_VERSION_FILE)) {
        Ok(text) if text.trim_end() == STORE_VERSION_TEXT => {
            return DirState::Store {
                writable: may_write(dir),
            }
        }
        Ok(text) => {
            return DirState::OtherVersion(
                xet_protocol::redact::clip(text.trim(), 100).into_owned(),
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return DirState::Unreadable(format!("{STORE_VERSION_FILE}: {e}")),
    }
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_none() {
                DirState::Empty {
                    writable: may_write(dir),
                }
            } else {
                DirState::NotAStore
            }
        }
        Err(e) => DirState::Unreadable(e.to_string()),
    }
}

#[cfg(unix)]
const ENOTDIR: i32 = libc::ENOTDIR;
#[cfg(not(unix))]
const ENOTDIR: i32 = -1;

/// The state of a directory that does not exist: [`DirState::Missing`] if it could be
/// created (its nearest existing ancestor is a directory this user may write to), else why not.
fn missing_dir_state(dir: &Path) -> DirState {
    let mut ancestor = dir.parent();
    while let Some(a) = ancestor {
        let shown = if a.as_os_str().is_empty() {
            Path::new(".")
        } else {
            a
        };
        match std::fs::metadata(shown) {
            Ok(m) if m.is_dir() => {
                return if may_write(shown) {
                    DirState::Missing
                } else {
                    DirState::CannotCreate(format!(
                        "no permission to create directories in {}",
                        shown.display()
                    ))
                };
            }
            Ok(_) => {
                return DirState::CannotCreate(format!(
                    "{} is a file, not a directory",
                    shown.display()
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(ENOTDIR) => {}
            Err(e) => return DirState::CannotCreate(format!("{}: {e}", shown.display())),
        }
        ancestor = a.parent();
    }
    DirState::CannotCreate("no existing parent directory".into())
}

/// Whether this user may create and remove entries in the directory `dir` (`access(W_OK|X_OK)`).
fn may_write(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        xet_protocol::util::os::may_write_dir(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(dir).is_ok_and(|m| !m.permissions().readonly())
    }
}

/// An http(s) URL split into the URL without its userinfo (what requests go to and what is
/// shown), the URL with the user name but without the password (what `git credential fill` is
/// asked about) and the password, percent-decoded. The password is registered with
/// [`xet_protocol::redact`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlCredentials {
    pub bare: String,
    pub with_user: String,
    pub password: Option<String>,
}

/// Splits the userinfo off `url` (see [`UrlCredentials`]). A URL that does not parse is kept.
pub(crate) fn split_userinfo(url: &str) -> UrlCredentials {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return UrlCredentials {
            bare: url.to_string(),
            with_user: url.to_string(),
            password: None,
        };
    };
    let password = parsed
        .password()
        .map(percent_decode)
        .filter(|p| !p.is_empty());
    if let Some(p) = &password {
        xet_protocol::redact::register_secret(p);
        xet_protocol::redact::register_secret(parsed.password().unwrap_or_default());
    }
    let _ = parsed.set_password(None);
    let with_user = parsed.as_str().trim_end_matches('/').to_string();
    let _ = parsed.set_username("");
    let bare = parsed.as_str().trim_end_matches('/').to_string();
    UrlCredentials {
        bare,
        with_user,
        password,
    }
}

/// `%XX` sequences decoded (invalid ones kept as they are).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// A non-blank environment variable, trimmed.
fn env_secret(name: &str) -> Option<Secret> {
    Secret::non_blank(&environment::var(name)?)
}

/// Registers the secrets of the environment ([`TOKEN_ENV`], comma-separated as `git xet
/// serve` takes it, and [`HF_TOKEN_ENV`]) with [`xet_protocol::redact`], so that they are masked even
/// before anything reads them.
pub(crate) fn register_env_secrets() {
    // GIT_XET_TOKEN, GIT_XET_READ_TOKEN and GIT_XET_ADMIN_TOKEN may be comma-separated lists
    // (`git xet serve`).
    for var in [TOKEN_ENV, "GIT_XET_READ_TOKEN", "GIT_XET_ADMIN_TOKEN"] {
        if let Some(t) = env_secret(var) {
            for part in t.expose().split(',') {
                xet_protocol::redact::register_secret(part.trim());
            }
        }
    }
    let _ = env_secret(HF_TOKEN_ENV);
}

/// Where the token of a standalone http(s) endpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenOrigin {
    Env,
    UrlPassword,
    CredentialHelper,
}

/// The token for the standalone http(s) endpoint `url` (see the module documentation):
/// [`TOKEN_ENV`], else the password in `url`, else `git credential fill` for `url` (which may
/// run a credential helper or prompt on the terminal), else none. It is sent only to `url`'s
/// origin.
pub(crate) fn endpoint_token(git: &Git, url: &str) -> Option<(Secret, TokenOrigin)> {
    endpoint_token_with(git, url, true)
}

/// [`endpoint_token`] without ever prompting (for `git xet status`): a credential helper is
/// asked, the terminal never.
pub(crate) fn endpoint_token_quiet(git: &Git, url: &str) -> Option<(Secret, TokenOrigin)> {
    endpoint_token_with(git, url, false)
}

fn endpoint_token_with(git: &Git, url: &str, interactive: bool) -> Option<(Secret, TokenOrigin)> {
    if let Some(t) = env_secret(TOKEN_ENV) {
        return Some((t, TokenOrigin::Env));
    }
    let split = split_userinfo(url);
    if let Some(p) = split.password {
        return Some((Secret::new(p), TokenOrigin::UrlPassword));
    }
    credential_fill(git, &split.with_user, interactive).map(|t| (t, TokenOrigin::CredentialHelper))
}

impl TokenOrigin {
    /// Where the token came from, in words for messages.
    pub fn describe(self) -> &'static str {
        match self {
            TokenOrigin::Env => "GIT_XET_TOKEN",
            TokenOrigin::UrlPassword => "the password in the endpoint URL",
            TokenOrigin::CredentialHelper => "your git credential helper",
        }
    }
}

/// The user name and password git's credential helpers hold for `url`, asked without ever
/// prompting (for `git xet status`'s check of an LFS server); both registered with
/// [`xet_protocol::redact`].
pub(crate) fn stored_credential(git: &Git, url: &str) -> Option<(String, String)> {
    let answer = credential_answer(git, url, false)?;
    let user = answer
        .lines()
        .find_map(|l| l.strip_prefix("username="))
        .unwrap_or_default()
        .to_string();
    let password = answer
        .lines()
        .find_map(|l| l.strip_prefix("password="))
        .filter(|p| !p.is_empty())?
        .to_string();
    xet_protocol::redact::register_secret(&password);
    Some((user, password))
}

/// The user's netrc file as git-lfs finds it: `$HOME/.netrc`; on Windows `$HOME/_netrc` when
/// `.netrc` is missing. `None` without `HOME` or without the file.
pub(crate) fn netrc_path() -> Option<PathBuf> {
    let home = PathBuf::from(environment::var_os("HOME").filter(|h| !h.is_empty())?);
    let path = home.join(".netrc");
    if path.is_file() {
        return Some(path);
    }
    if cfg!(windows) {
        let alt = home.join("_netrc");
        if alt.is_file() {
            return Some(alt);
        }
    }
    None
}

/// The login and password the user's netrc file ([`netrc_path`]) holds for `url`'s host (the
/// URL's user name, if any, must be the entry's login; see [`super::netrc`]); the password is
/// registered with [`xet_protocol::redact`]. A file that cannot be read or parsed gives none (a
/// warning names the file and line, never its text).
pub(crate) fn netrc_credential(url: &str) -> Option<(String, String)> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?.to_string();
    let path = netrc_path()?;
    let text = match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            tracing::warn!(
                "cannot read {}: {e}; its credentials are not used",
                path.display()
            );
            return None;
        }
    };
    let netrc = match super::netrc::Netrc::parse(&text) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(
                "bad netrc file {} ({e}); its credentials are not used, as git-lfs does not use them",
                path.display()
            );
            return None;
        }
    };
    let user = percent_decode(parsed.username());
    let entry = netrc.find(&host, Some(user.as_str()))?;
    if entry.password.expose().is_empty() {
        return None;
    }
    tracing::debug!(%host, login = %entry.login, "credential from {}", path.display());
    Some((entry.login.clone(), entry.password.expose().to_string()))
}

/// The credential git-lfs would find for an LFS request to `url` (which may name the user),
/// without prompting: the user's netrc file first, then git's credential helpers (as git-lfs
/// asks its helpers in that order).
pub(crate) fn lfs_credential(git: &Git, url: &str) -> Option<(String, String)> {
    netrc_credential(url).or_else(|| stored_credential(git, url))
}

/// git-lfs's access mode of an LFS URL (`lfs.<url>.access`, git's URL matching): whether
/// credentials go with the first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccessMode {
    /// Unset or `none`: the first request goes without credentials; a 401 brings them.
    None,
    /// `basic` (or its old name `private`): credentials go with the first request.
    Basic,
    /// `negotiate` (Kerberos/SPNEGO), which git-xet's own requests do not speak: they are
    /// sent as for [`AccessMode::None`].
    Negotiate,
}

impl AccessMode {
    /// The mode a value of `lfs.<url>.access` names (as git-lfs reads it: case-insensitive,
    /// anything unknown as `none`).
    pub(crate) fn parse(value: &str) -> Self {
        match value.trim().to_ascii_lowercase().as_str() {
            "basic" | "private" => AccessMode::Basic,
            "negotiate" => AccessMode::Negotiate,
            _ => AccessMode::None,
        }
    }
}

/// The [`AccessMode`] of the LFS URL `url` (its userinfo left out, as git-lfs leaves it out).
pub(crate) fn lfs_access(git: &Git, url: &str) -> AccessMode {
    let bare = split_userinfo(url).bare;
    git.output(["config", "--get-urlmatch", "lfs.access", bare.as_str()])
        .ok()
        .filter(|o| o.status.success())
        .map_or(AccessMode::None, |o| {
            AccessMode::parse(&String::from_utf8_lossy(&o.stdout))
        })
}

/// Environment variables naming the SSH program, as git reads them.
pub(crate) const GIT_SSH_COMMAND_ENV: &str = "GIT_SSH_COMMAND";
/// See [`GIT_SSH_COMMAND_ENV`].
pub(crate) const GIT_SSH_ENV: &str = "GIT_SSH";
/// See [`GIT_SSH_COMMAND_ENV`].
pub(crate) const GIT_SSH_VARIANT_ENV: &str = "GIT_SSH_VARIANT";

/// Which SSH program runs `git-lfs-authenticate` ([`super::ssh_auth`]): `GIT_SSH_COMMAND`,
/// `GIT_SSH`, `core.sshCommand`, and `GIT_SSH_VARIANT` over `ssh.variant`.
pub(crate) fn ssh_settings(git: &Git) -> super::ssh_auth::SshSettings {
    let env = |name: &str| environment::var(name).filter(|v| !v.trim().is_empty());
    let config = |key: &str| {
        git.config_get(key)
            .ok()
            .flatten()
            .filter(|v| !v.trim().is_empty())
    };
    super::ssh_auth::SshSettings {
        env_command: env(GIT_SSH_COMMAND_ENV),
        env_program: env(GIT_SSH_ENV),
        config_command: config("core.sshCommand"),
        variant: env(GIT_SSH_VARIANT_ENV).or_else(|| config("ssh.variant")),
        // git-lfs reads a negative count as none.
        retries: config("lfs.ssh.retries")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)),
    }
}

/// The SSH remote git-lfs authenticates with for `remote` (a configured remote's name) whose
/// LFS URL `git lfs env` reports as `lfs_url`: the first of `lfs.url`, `remote.<name>.lfsurl`
/// (in git config, then in `.lfsconfig`) and the remote's URL (`git ls-remote --get-url`, `url.<base>.insteadOf` applied) that is an
/// SSH URL whose https guess is `lfs_url` (so an https `lfs.url`, or one in `.lfsconfig`, wins
/// as it wins in git-lfs). `None` when the LFS URL is not an SSH remote's.
pub(crate) fn ssh_remote(
    git: &Git,
    remote: &str,
    lfs_url: &str,
) -> Option<super::ssh_auth::SshRemote> {
    use super::ssh_auth::SshRemote;
    let lfs_url = lfs_url.trim_end_matches('/');
    if !lfs_url.starts_with("https://") {
        return None;
    }
    let config = |key: &str| git.config_get(key).ok().flatten();
    let clone_url = || {
        (!remote.starts_with('-'))
            .then(|| git.output(["ls-remote", "--get-url", remote]).ok())
            .flatten()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let remote_key = format!("remote.{remote}.lfsurl");
    // git config first, then the committed `.lfsconfig`, as git-lfs reads them; each looked
    // up only if the ones before it do not match.
    let candidates: [(&dyn Fn() -> Option<String>, bool); 5] = [
        (&|| config("lfs.url"), false),
        (&|| config(&remote_key), false),
        (&|| lfsconfig_get(git, "lfs.url"), false),
        (&|| lfsconfig_get(git, &remote_key), false),
        (&clone_url, true),
    ];
    for (url, is_clone_url) in candidates {
        let Some(parsed) = url().as_deref().and_then(SshRemote::parse) else {
            continue;
        };
        let guess = parsed.https_guess();
        let guess = guess.trim_end_matches('/');
        let matches = if is_clone_url {
            let suffixed = if guess.ends_with(".git") {
                format!("{guess}/info/lfs")
            } else {
                format!("{guess}.git/info/lfs")
            };
            suffixed == lfs_url
        } else {
            guess == lfs_url
        };
        if matches {
            return Some(parsed);
        }
    }
    None
}

/// A value of the repository's `.lfsconfig` as git-lfs reads it: the work tree's file, else
/// the index's, else HEAD's; `None` when none of them sets `key`.
pub(crate) fn lfsconfig_get(git: &Git, key: &str) -> Option<String> {
    let in_tree = git
        .run(&["rev-parse", "--show-toplevel"])
        .ok()
        .map(|top| Path::new(&top).join(".lfsconfig"))
        .filter(|p| p.is_file());
    let source = match in_tree {
        Some(path) => vec!["--file".to_string(), path.to_string_lossy().into_owned()],
        None => {
            let blob = [":.lfsconfig", "HEAD:.lfsconfig"].into_iter().find(|b| {
                git.output(["cat-file", "-e", b])
                    .is_ok_and(|o| o.status.success())
            })?;
            vec!["--blob".to_string(), blob.to_string()]
        }
    };
    let out = git
        .output(
            ["config".to_string()]
                .into_iter()
                .chain(source)
                .chain(["--get".to_string(), key.to_string()]),
        )
        .ok()?;
    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !value.is_empty()).then_some(value)
}

/// The first of `lfs.fetchinclude` and `lfs.fetchexclude` that is set (in git config or in
/// `.lfsconfig`): git-lfs then fetches and checks out only the files those path lists allow.
pub(crate) fn fetch_filter(git: &Git) -> Option<&'static str> {
    ["lfs.fetchinclude", "lfs.fetchexclude"]
        .into_iter()
        .find(|key| {
            git.config_get(key)
                .ok()
                .flatten()
                .or_else(|| lfsconfig_get(git, key))
                .is_some_and(|v| !v.trim().is_empty())
        })
}

/// [`ssh_remote`] for `remote` as git-lfs names it in `init` (a remote's name or URL), its LFS
/// URL asked of `git lfs env`.
pub(crate) fn ssh_remote_of(git: &Git, remote: &str) -> Option<super::ssh_auth::SshRemote> {
    let name = configured_remote(git, remote)?;
    let lfs_url = lfs_url_of(&lfs_env_endpoints(git), &remotes(git), &name)?;
    ssh_remote(git, &name, &lfs_url)
}

/// Whether `a` and `b` are URLs of one origin (scheme, host and port).
pub(crate) fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin() && a.origin().is_tuple(),
        _ => false,
    }
}

/// Whether `url` is https on Hugging Face's own hosts (`huggingface.co`, `hf.co` and their
/// subdomains, default port), the only place `HF_TOKEN` is sent.
pub(crate) fn is_hugging_face(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = u.host_str() else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    u.scheme() == "https"
        && u.port().is_none()
        && ["huggingface.co", "hf.co"]
            .iter()
            .any(|d| host == *d || host.ends_with(&format!(".{d}")))
}

/// Where the credential of a negotiated token refresh comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RefreshCredential {
    /// The `Authorization` header the LFS server put in the action.
    Action(String),
    /// `HF_TOKEN`, as a Bearer token (Hugging Face hosts only).
    HfToken(String),
    /// What the user's own setup holds for the refresh URL, as git-lfs would find it: for an
    /// SSH remote `git-lfs-authenticate`'s `Authorization` (when its URL is of the refresh
    /// URL's origin), then the netrc file, then `git credential fill`.
    CredentialHelper,
}

/// The credential of `GET href` (see the module documentation), without running anything:
/// `action_authorization` is the action's `Authorization` header, `hf_token` the value of
/// `HF_TOKEN`. `GIT_XET_TOKEN` is never a candidate.
pub(crate) fn refresh_credential(
    href: &str,
    action_authorization: Option<&str>,
    hf_token: Option<&str>,
) -> RefreshCredential {
    if let Some(a) = action_authorization
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        return RefreshCredential::Action(a.to_string());
    }
    match hf_token.map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) if is_hugging_face(href) => RefreshCredential::HfToken(t.to_string()),
        _ => RefreshCredential::CredentialHelper,
    }
}

/// The SSH remote of a transfer, for its token refreshes: `git-lfs-authenticate` is run for
/// it when a refresh needs a credential (the one the batch request had is short-lived).
#[derive(Debug, Clone)]
pub(crate) struct SshRefresh {
    pub remote: super::ssh_auth::SshRemote,
    pub operation: super::protocol::Operation,
}

/// The `Authorization` value of a negotiated token refresh at `href`, by
/// [`refresh_credential`]; `None` when there is none (the request is sent without). `ssh`: the
/// transfer's SSH remote, if it has one.
pub(crate) fn refresh_authorization(
    git: &Git,
    href: &str,
    action_authorization: Option<&str>,
    ssh: Option<&SshRefresh>,
) -> Option<Secret> {
    let hf_token = env_secret(HF_TOKEN_ENV);
    match refresh_credential(
        href,
        action_authorization,
        hf_token.as_ref().map(Secret::expose),
    ) {
        RefreshCredential::Action(a) => {
            xet_protocol::redact::register_authorization(&a);
            Some(Secret::new(a))
        }
        RefreshCredential::HfToken(t) => Some(Secret::new(format!("Bearer {t}"))),
        RefreshCredential::CredentialHelper => ssh
            .and_then(|ssh| ssh_refresh_authorization(git, href, ssh))
            .or_else(|| {
                netrc_credential(href)
                    .map(|(_, password)| Secret::new(format!("Bearer {password}")))
            })
            .or_else(|| {
                credential_fill(git, href, true)
                    .map(|t| Secret::new(format!("Bearer {}", t.expose())))
            }),
    }
}

/// `git-lfs-authenticate`'s `Authorization` for a refresh at `href`, if the SSH server answers
/// and the LFS URL it names (or the guessed one) is of `href`'s origin (a credential goes only
/// to the origin it was issued for).
fn ssh_refresh_authorization(git: &Git, href: &str, ssh: &SshRefresh) -> Option<Secret> {
    let answer = match super::ssh_auth::authenticate(
        &ssh_settings(git),
        &ssh.remote,
        ssh.operation,
        git.dir(),
    ) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("no SSH credential for the token refresh: {e}");
            return None;
        }
    };
    let issued_for = if answer.href.is_empty() {
        ssh.remote.https_guess()
    } else {
        answer.href.clone()
    };
    if !same_origin(&issued_for, href) {
        tracing::warn!(
            href = %xet_protocol::redact::redact(href),
            "git-lfs-authenticate's credential is for {}, another origin than the token \
             refresh route; not sent",
            xet_protocol::redact::redact(&issued_for)
        );
        return None;
    }
    answer.authorization().map(Secret::new)
}

/// Environment variable overriding the cache root.
pub(crate) const CACHE_DIR_ENV: &str = "GIT_XET_CACHE_DIR";
/// Environment variable with the shard cache's size limit per endpoint (e.g. `500M`, `2G`).
pub(crate) const CACHE_MAX_SIZE_ENV: &str = "GIT_XET_CACHE_MAX_SIZE";
/// Environment variable with the download chunk cache's size limit per endpoint (`0` turns it
/// off).
pub(crate) const CHUNK_CACHE_MAX_SIZE_ENV: &str = "GIT_XET_CHUNK_CACHE_MAX_SIZE";

/// The cache root: [`CACHE_DIR_ENV`] if set and not empty, else the user's cache directory
/// for git-xet.
pub(crate) fn cache_root() -> Result<PathBuf, CacheError> {
    match environment::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => CacheConfig::default_root(),
    }
}

/// A size limit from the environment variable `name`, or `default` when it is unset or empty.
fn size_from_env(name: &str, default: u64) -> Result<u64, CacheError> {
    match environment::var(name) {
        Some(v) if !v.trim().is_empty() => {
            xet_protocol::util::size::parse_size(&v).ok_or(CacheError::InvalidSize {
                value: v,
                origin: name.into(),
            })
        }
        _ => Ok(default),
    }
}

/// Where the caches are and their limits: [`cache_root`], [`CACHE_MAX_SIZE_ENV`] and
/// [`CHUNK_CACHE_MAX_SIZE_ENV`] over the defaults.
pub(crate) fn cache_config() -> Result<CacheConfig, CacheError> {
    let defaults = CacheConfig::under(cache_root()?);
    Ok(CacheConfig {
        shard_max_bytes: size_from_env(CACHE_MAX_SIZE_ENV, defaults.shard_max_bytes)?,
        chunk_max_bytes: size_from_env(CHUNK_CACHE_MAX_SIZE_ENV, defaults.chunk_max_bytes)?,
        ..defaults
    })
}

/// The retry horizon from [`RETRY_SECS_ENV`] (seconds, or a duration such as `2m`), if set.
pub(crate) fn retry_horizon() -> Option<std::time::Duration> {
    xet_protocol::util::duration::parse_duration(&environment::var(RETRY_SECS_ENV)?)
}

/// Asks git's credential helpers for `url`; the password is the token (registered with
/// [`xet_protocol::redact`]). Not `interactive`: git may not prompt on the terminal.
fn credential_fill(git: &Git, url: &str, interactive: bool) -> Option<Secret> {
    let answer = credential_answer(git, url, interactive)?;
    let password = answer
        .lines()
        .find_map(|l| l.strip_prefix("password=").map(str::to_string))
        .filter(|p| !p.is_empty())?;
    Some(Secret::new(password))
}

/// What `git credential fill` answers for `url` (its stdout), `None` if it fails.
fn credential_answer(git: &Git, url: &str, interactive: bool) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    // The URL may come from a server (an action's `href`): a newline in it would add lines of
    // its own to the request (`host=` another site) and fetch another site's credential.
    let Some(url) = credential_url(url) else {
        tracing::warn!(
            url = %xet_protocol::redact::redact(&xet_protocol::redact::clip(url, 200)),
            "not asking git for a credential: not a plain http(s) URL"
        );
        return None;
    };
    let url = url.as_str();
    let mut cmd = Command::new("git");
    if let Some(dir) = git.dir() {
        cmd.current_dir(dir);
    }
    if !interactive {
        // No terminal prompt and no askpass program: only the helpers answer.
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS")
            .args(["-c", "core.askPass="]);
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
            url = %xet_protocol::redact::redact(url),
            stderr = %xet_protocol::redact::redact(String::from_utf8_lossy(&out.stderr).trim()),
            "git credential fill found no credential"
        );
        return None;
    }
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(p) = answer
        .lines()
        .find_map(|l| l.strip_prefix("password="))
        .filter(|p| !p.is_empty())
    {
        xet_protocol::redact::register_secret(p);
    }
    Some(answer)
}

/// `url` as the one line `git credential` may be asked about: an http(s) URL with a host and
/// no control characters, in its parsed (normalised, percent-encoded) form; `None` otherwise.
fn credential_url(url: &str) -> Option<String> {
    if url.chars().any(char::is_control) {
        return None;
    }
    let parsed = reqwest::Url::parse(url.trim()).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return None;
    }
    let text = parsed.to_string();
    (!text.chars().any(char::is_control)).then_some(text)
}

/// The directory git-lfs moves finished downloads from: `<LFS storage>/tmp`, on the same
/// filesystem as `.git/lfs/objects` (docs/lfs-agent.md §7). Honours `lfs.storage`.
pub(crate) fn lfs_temp_dir(git: &Git) -> Result<PathBuf, SettingsError> {
    lfs_temp_dir_in(git, &git.common_dir()?)
}

/// [`lfs_temp_dir`] for a caller that knows the common git directory already.
/// `<LFS storage>/objects`, where git-lfs keeps objects, beside its temp directory `tmp`
/// (`<LFS storage>/tmp`, from [`lfs_temp_dir_in`]).
pub(crate) fn objects_beside(tmp: &Path) -> PathBuf {
    tmp.parent()
        .map_or_else(|| tmp.join("objects"), |storage| storage.join("objects"))
}

pub(crate) fn lfs_temp_dir_in(git: &Git, common: &Path) -> Result<PathBuf, SettingsError> {
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
    fn only_plain_urls_are_asked_about() {
        assert_eq!(
            credential_url("https://h.example/a/b?x=1").as_deref(),
            Some("https://h.example/a/b?x=1")
        );
        for bad in [
            "https://evil.example/r\nhost=github.com",
            "https://evil.example/r\rprotocol=https",
            "https://evil.example/\u{0}",
            "file:///etc/passwd",
            "ssh://git@host/x",
            "not a url",
        ] {
            assert_eq!(credential_url(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn userinfo_is_split_off() {
        let u = split_userinfo("http://git:p%40ss%2Fw0rd@127.0.0.1:8080/");
        assert_eq!(u.bare, "http://127.0.0.1:8080");
        assert_eq!(u.with_user, "http://git@127.0.0.1:8080");
        assert_eq!(u.password.as_deref(), Some("p@ss/w0rd"));
        assert_eq!(xet_protocol::redact::redact("x p@ss/w0rd y"), "x *** y");
        let u = split_userinfo("https://h.example/x");
        assert_eq!((u.bare.as_str(), u.password), ("https://h.example/x", None));
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }

    #[test]
    fn access_modes_read_as_git_lfs_reads_them() {
        assert_eq!(AccessMode::parse("basic\n"), AccessMode::Basic);
        assert_eq!(AccessMode::parse("Private"), AccessMode::Basic);
        assert_eq!(AccessMode::parse("NEGOTIATE"), AccessMode::Negotiate);
        for none in ["none", "", "ntlm", "whatever"] {
            assert_eq!(AccessMode::parse(none), AccessMode::None, "{none}");
        }
        assert!(same_origin(
            "https://h.example/a/info/lfs",
            "https://h.example:443/b"
        ));
        assert!(!same_origin("https://h.example/a", "http://h.example/a"));
        assert!(!same_origin(
            "https://h.example/a",
            "https://h.example:8443/a"
        ));
        assert!(!same_origin("https://h.example/a", "not a url"));
    }

    #[test]
    fn hf_token_goes_to_hugging_face_only() {
        for yes in [
            "https://huggingface.co/api/models/x/xet-write-token/main",
            "https://HF.co/x",
            "https://cas.hf.co/refresh",
            "https://a.b.huggingface.co",
        ] {
            assert!(is_hugging_face(yes), "{yes}");
        }
        for no in [
            "http://huggingface.co/x",
            "https://huggingface.co.evil.example/x",
            "https://evilhuggingface.co/x",
            "https://xhf.co/x",
            "https://huggingface.co:8443/x",
            "https://127.0.0.1/x",
            "not a url",
        ] {
            assert!(!is_hugging_face(no), "{no}");
        }
        let hf = "https://huggingface.co/refresh";
        let other = "http://127.0.0.1:9/refresh";
        assert_eq!(
            refresh_credential(other, Some("Basic abc"), Some("hf_x")),
            RefreshCredential::Action("Basic abc".into())
        );
        assert_eq!(
            refresh_credential(hf, None, Some(" hf_x ")),
            RefreshCredential::HfToken("hf_x".into())
        );
        assert_eq!(
            refresh_credential(other, None, Some("hf_x")),
            RefreshCredential::CredentialHelper
        );
        assert_eq!(
            refresh_credential(hf, Some("  "), None),
            RefreshCredential::CredentialHelper
        );
    }

    #[test]
    fn endpoints_parse() {
        let base = Path::new("/repo");
        assert_eq!(
            EndpointSpec::parse("https://cas.example/", base).unwrap(),
            EndpointSpec::Http("https://cas.example".into())
        );
        assert_eq!(
            EndpointSpec::parse("HTTP://127.0.0.1:8080", base).unwrap(),
            EndpointSpec::Http("http://127.0.0.1:8080".into())
        );
        assert_eq!(
            EndpointSpec::parse("Https://git:tok@h.example/x/", base).unwrap(),
            EndpointSpec::Http("https://git:tok@h.example/x".into())
        );
        for file in [
            "file:///srv/xet",
            "FILE:///srv/./xet",
            "file://localhost/srv/a/../xet",
        ] {
            assert_eq!(
                EndpointSpec::parse(file, base).unwrap(),
                EndpointSpec::Dir("/srv/xet".into()),
                "{file}"
            );
        }
        assert_eq!(
            EndpointSpec::parse("store", base).unwrap(),
            EndpointSpec::Dir("/repo/store".into())
        );
        assert_eq!(
            EndpointSpec::parse("../shared/./store/", base).unwrap(),
            EndpointSpec::Dir("/shared/store".into())
        );
        assert_eq!(
            EndpointSpec::parse("~store", base).unwrap(),
            EndpointSpec::Dir("/repo/~store".into()),
            "only ~ and ~/ mean the home directory"
        );
        for bad in [
            "",
            "http://",
            "https:///x",
            "s3://bucket",
            "s3://bucket/x",
            "ssh://host/x",
            "file://other-host/x",
            "file://relative",
        ] {
            let e = EndpointSpec::parse(bad, base).unwrap_err().to_string();
            assert!(e.contains("not usable"), "{bad}: {e}");
        }
        let e = EndpointSpec::parse("s3://bucket/x", base)
            .unwrap_err()
            .to_string();
        assert!(e.contains("http://") && e.contains("directory"), "{e}");
        assert_eq!(
            EndpointSpec::parse("/srv/x", base).unwrap().config_value(),
            "/srv/x"
        );
        assert_eq!(
            EndpointSpec::parse("HTTP://h:8080/", base)
                .unwrap()
                .config_value(),
            "http://h:8080"
        );
    }

    #[test]
    fn a_home_endpoint_is_in_home() {
        // HOME is read at parse time; no test changes it.
        let Some(home) = environment::var_os("HOME").filter(|h| !h.is_empty()) else {
            panic!("HOME is not set in the test environment");
        };
        let home = PathBuf::from(home);
        let base = Path::new("/repo");
        assert_eq!(
            EndpointSpec::parse("~/store", base).unwrap(),
            EndpointSpec::Dir(lexically_clean(&home.join("store")))
        );
        assert_eq!(
            EndpointSpec::parse("~", base).unwrap(),
            EndpointSpec::Dir(lexically_clean(&home))
        );
    }

    #[test]
    fn remotes_and_their_lfs_urls_parse() {
        let text = "remote.origin.url\n../remote.git\0remote.my.mirror.url\nhttps://h/x\0\
remote.my.mirror.pushurl\nhttps://h/push\0remote.my.mirror.xetendpoint\n/srv/b\0\
remote.my.mirror.lfsurl\nhttps://h/lfs\0remote.ghost.xetendpoint\n/x\0";
        let remotes = parse_remotes(text);
        assert_eq!(
            remotes.len(),
            2,
            "a remote without url is no remote: {remotes:?}"
        );
        assert_eq!(remotes[0].name, "origin");
        assert_eq!(remotes[1].name, "my.mirror");
        assert_eq!(remotes[1].push_url.as_deref(), Some("https://h/push"));
        assert_eq!(remotes[1].xet_endpoint.as_deref(), Some("/srv/b"));
        assert_eq!(remotes[1].lfs_url.as_deref(), Some("https://h/lfs"));
        assert_eq!(
            remote_endpoint_key("my.mirror"),
            "remote.my.mirror.xetEndpoint"
        );

        let env = "git-lfs/3.3.0\n\nEndpoint=file:///r.git (auth=none)\n\
Endpoint (my.mirror)=https://h/lfs (auth=basic)\n  SSH=git@h:x\nEndpoint ()= (auth=none)\n";
        let endpoints = parse_lfs_env(env);
        assert_eq!(endpoints.len(), 2);
        assert_eq!(
            lfs_url_of(&endpoints, &remotes, "my.mirror").as_deref(),
            Some("https://h/lfs")
        );
        // The default line belongs to the one remote without a line of its own.
        assert_eq!(
            lfs_url_of(&endpoints, &remotes, "origin").as_deref(),
            Some("file:///r.git")
        );
        assert_eq!(lfs_url_of(&endpoints, &remotes, "nope"), None);
    }

    #[test]
    fn directory_endpoints_are_inspected_without_creating_anything() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(inspect_dir_endpoint(&root.join("a/b")), DirState::Missing);
        assert!(!root.join("a").exists());
        std::fs::write(root.join("file"), b"x").unwrap();
        assert!(matches!(
            inspect_dir_endpoint(&root.join("file/sub/store")),
            DirState::CannotCreate(why) if why.contains("is a file")
        ));
        assert_eq!(
            inspect_dir_endpoint(&root.join("file")),
            DirState::NotADirectory
        );
        std::fs::create_dir(root.join("empty")).unwrap();
        assert!(matches!(
            inspect_dir_endpoint(&root.join("empty")),
            DirState::Empty { .. }
        ));
        std::fs::create_dir(root.join("store")).unwrap();
        std::fs::write(
            root.join("store").join(STORE_VERSION_FILE),
            "git-xet-store 1\n",
        )
        .unwrap();
        let state = inspect_dir_endpoint(&root.join("store"));
        assert!(
            state.is_store() && state.why_not_a_store().is_none(),
            "{state:?}"
        );
        // What the store itself writes is what is recognised.
        drop(xet_store::Store::open(&root.join("made")).unwrap());
        assert!(inspect_dir_endpoint(&root.join("made")).is_store());
        std::fs::write(root.join("empty/x"), b"x").unwrap();
        assert_eq!(
            inspect_dir_endpoint(&root.join("empty")),
            DirState::NotAStore
        );
        std::fs::write(
            root.join("store").join(STORE_VERSION_FILE),
            "git-xet-store 2\n",
        )
        .unwrap();
        assert_eq!(
            inspect_dir_endpoint(&root.join("store")),
            DirState::OtherVersion("git-xet-store 2".into())
        );
    }
}
