//! What the agent and the `git xet` commands read from the environment and git configuration:
//! the standalone endpoint, the credentials (which secret may go to which origin), the retry
//! horizon, and where git-lfs wants downloads written.
//!
//! | setting | first match wins |
//! |---|---|
//! | endpoint | `GIT_XET_ENDPOINT`, then `git config xet.endpoint` |
//! | token for an http(s) endpoint | `GIT_XET_TOKEN`, then the password in the endpoint URL (`http://user:TOKEN@host`), then `git credential fill` for the endpoint URL (the password is the token) |
//! | credential of a negotiated token refresh (`GET href`) | the action's own `Authorization` header, then `HF_TOKEN` if `href` is https on Hugging Face's hosts, then `git credential fill` for `href` |
//! | retry horizon | `GIT_XET_RETRY_SECS` (seconds), else 60 |
//! | download temp dir | `<lfs.storage or <git common dir>/lfs>/tmp` (lfs-agent.md §7) |
//!
//! **The credential rule: a secret goes only to the origin it was issued for.** `GIT_XET_TOKEN`
//! and a password in the endpoint URL are for the standalone endpoint; they never go to an
//! `href` an LFS server named (a committed `.lfsconfig` can point any repository's LFS traffic
//! anywhere). `HF_TOKEN` goes only to Hugging Face's own hosts over https. A credential helper
//! answer is asked for the exact URL it is sent to, so git's own matching decides. Every
//! secret read here is registered with [`crate::redact`].

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};

/// The git configuration key naming the standalone endpoint.
pub const ENDPOINT_KEY: &str = "xet.endpoint";
/// Environment variable overriding [`ENDPOINT_KEY`].
pub const ENDPOINT_ENV: &str = "GIT_XET_ENDPOINT";
/// Environment variable giving the token for an http(s) endpoint.
pub const TOKEN_ENV: &str = "GIT_XET_TOKEN";
/// Environment variable with the user's Hugging Face token (sent only to Hugging Face).
pub const HF_TOKEN_ENV: &str = "HF_TOKEN";
/// Environment variable with the retry horizon of remote requests, in seconds.
pub const RETRY_SECS_ENV: &str = "GIT_XET_RETRY_SECS";

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

    /// The endpoint as shown to users (a password in the URL masked).
    pub fn display(&self) -> String {
        match self {
            EndpointSpec::Http(url) => crate::redact::redact(url),
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

/// An http(s) URL split into the URL without its userinfo (what requests go to and what is
/// shown), the URL with the user name but without the password (what `git credential fill` is
/// asked about) and the password, percent-decoded. The password is registered with
/// [`crate::redact`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlCredentials {
    pub bare: String,
    pub with_user: String,
    pub password: Option<String>,
}

/// Splits the userinfo off `url` (see [`UrlCredentials`]). A URL that does not parse is kept.
pub fn split_userinfo(url: &str) -> UrlCredentials {
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
        crate::redact::register_secret(p);
        crate::redact::register_secret(parsed.password().unwrap_or_default());
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
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A non-blank environment variable, trimmed, registered with [`crate::redact`].
fn env_secret(name: &str) -> Option<String> {
    let value = std::env::var(name).ok()?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    crate::redact::register_secret(value);
    Some(value.to_string())
}

/// Registers the secrets of the environment ([`TOKEN_ENV`], comma-separated as `git xet
/// serve` takes it, and [`HF_TOKEN_ENV`]) with [`crate::redact`], so that they are masked even
/// before anything reads them.
pub fn register_env_secrets() {
    // GIT_XET_TOKEN and GIT_XET_READ_TOKEN may be comma-separated lists (`git xet serve`).
    for var in [TOKEN_ENV, "GIT_XET_READ_TOKEN"] {
        if let Some(t) = env_secret(var) {
            for part in t.split(',') {
                crate::redact::register_secret(part.trim());
            }
        }
    }
    let _ = env_secret(HF_TOKEN_ENV);
}

/// Where the token of a standalone http(s) endpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenOrigin {
    Env,
    UrlPassword,
    CredentialHelper,
}

/// The token for the standalone http(s) endpoint `url` (see the module documentation):
/// [`TOKEN_ENV`], else the password in `url`, else `git credential fill` for `url` (which may
/// run a credential helper or prompt on the terminal), else none. It is sent only to `url`'s
/// origin.
pub fn endpoint_token(git: &Git, url: &str) -> Option<(String, TokenOrigin)> {
    if let Some(t) = env_secret(TOKEN_ENV) {
        return Some((t, TokenOrigin::Env));
    }
    let split = split_userinfo(url);
    if let Some(p) = split.password {
        return Some((p, TokenOrigin::UrlPassword));
    }
    credential_fill(git, &split.with_user).map(|t| (t, TokenOrigin::CredentialHelper))
}

/// Whether `url` is https on Hugging Face's own hosts (`huggingface.co`, `hf.co` and their
/// subdomains, default port), the only place `HF_TOKEN` is sent.
pub fn is_hugging_face(url: &str) -> bool {
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
pub enum RefreshCredential {
    /// The `Authorization` header the LFS server put in the action.
    Action(String),
    /// `HF_TOKEN`, as a Bearer token (Hugging Face hosts only).
    HfToken(String),
    /// Ask `git credential fill` for the refresh URL.
    CredentialHelper,
}

/// The credential of `GET href` (see the module documentation), without running anything:
/// `action_authorization` is the action's `Authorization` header, `hf_token` the value of
/// `HF_TOKEN`. `GIT_XET_TOKEN` is never a candidate.
pub fn refresh_credential(
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

/// The `Authorization` value of a negotiated token refresh at `href`, by
/// [`refresh_credential`]; `None` when there is none (the request is sent without).
pub fn refresh_authorization(
    git: &Git,
    href: &str,
    action_authorization: Option<&str>,
) -> Option<String> {
    let hf_token = env_secret(HF_TOKEN_ENV);
    match refresh_credential(href, action_authorization, hf_token.as_deref()) {
        RefreshCredential::Action(a) => {
            crate::redact::register_authorization(&a);
            Some(a)
        }
        RefreshCredential::HfToken(t) => Some(format!("Bearer {t}")),
        RefreshCredential::CredentialHelper => {
            credential_fill(git, href).map(|t| format!("Bearer {t}"))
        }
    }
}

/// The retry horizon from [`RETRY_SECS_ENV`], if set to a number of seconds.
pub fn retry_horizon() -> Option<std::time::Duration> {
    let text = std::env::var(RETRY_SECS_ENV).ok()?;
    let secs: f64 = text.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| std::time::Duration::from_secs_f64(secs.min(1e6)))
}

/// Asks git's credential helpers for `url`; the password is the token (registered with
/// [`crate::redact`]).
fn credential_fill(git: &Git, url: &str) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    // The URL may come from a server (an action's `href`): a newline in it would add lines of
    // its own to the request (`host=` another site) and fetch another site's credential.
    let Some(url) = credential_url(url) else {
        tracing::warn!(
            url = %crate::redact::redact(&crate::redact::clip(url, 200)),
            "not asking git for a credential: not a plain http(s) URL"
        );
        return None;
    };
    let url = url.as_str();
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
            url = %crate::redact::redact(url),
            stderr = %crate::redact::redact(String::from_utf8_lossy(&out.stderr).trim()),
            "git credential fill found no credential"
        );
        return None;
    }
    let password = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("password=").map(str::to_string))
        .filter(|p| !p.is_empty())?;
    crate::redact::register_secret(&password);
    Some(password)
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
        assert_eq!(crate::redact::redact("x p@ss/w0rd y"), "x *** y");
        let u = split_userinfo("https://h.example/x");
        assert_eq!((u.bare.as_str(), u.password), ("https://h.example/x", None));
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
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
