//! git-lfs's authentication of an SSH remote (`lfshttp/ssh.go`, `ssh/ssh.go`, and
//! `docs/api/server-discovery.md` of git-lfs): when a remote's LFS endpoint is an SSH URL
//! (`git@host:path`, `ssh://[user@]host[:port]/path`), git-lfs runs
//!
//! ```text
//! ssh [-p PORT] [--] [USER@]HOST 'git-lfs-authenticate PATH OPERATION'
//! ```
//!
//! and reads `{"href", "header", "expires_in"/"expires_at"}` from its output: `href` (when
//! given) replaces the LFS URL, and the headers (an `Authorization`, usually short-lived) go with
//! the batch request. git-xet does the same for its own batch requests and for the CAS token
//! refreshes of a transfer whose remote is SSH.
//!
//! The program is git's: `GIT_SSH_COMMAND`, else `GIT_SSH`, else `core.sshCommand`, else `ssh`;
//! a command (`GIT_SSH_COMMAND`, `core.sshCommand`) runs through `sh -c` with its arguments
//! quoted. `GIT_SSH_VARIANT` (else `ssh.variant`) names the program's kind, as in git: `plink`
//! and `putty` take `-P` for the port, `tortoiseplink` also `-batch`; otherwise the kind is
//! guessed from the program's name. [`crate::agent::settings::ssh_settings`] reads these; this
//! module builds the command, runs it and reads its answer. git-lfs's pure SSH protocol
//! (`git-lfs-transfer`) is not spoken.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use super::protocol::Operation;

/// The largest answer read from `git-lfs-authenticate`.
const MAX_ANSWER: usize = 1 << 20;

/// How long `git-lfs-authenticate` may take (an SSH connection, perhaps a host-key prompt that
/// cannot be answered).
const TIMEOUT: Duration = Duration::from_secs(60);

/// An SSH remote: what git-lfs calls its SSH metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SshRemote {
    /// `user@host` or `host`.
    pub user_and_host: String,
    /// The port, when the URL names one.
    pub port: Option<String>,
    /// The repository path as git-lfs passes it: with its leading `/` for `ssh://` URLs,
    /// without for `host:path` ones.
    pub path: String,
}

impl SshRemote {
    /// The SSH remote `url` names, if it is an SSH URL (`ssh://`, `git+ssh://`, `ssh+git://`,
    /// or git's scp-like `[user@]host:path`, `[host:port]:path`), parsed as git-lfs parses it.
    pub(crate) fn parse(url: &str) -> Option<Self> {
        let url = url.trim();
        if url.is_empty() || url.chars().any(char::is_control) {
            return None;
        }
        if let Some((scheme, rest)) = url.split_once("://") {
            return match scheme.to_ascii_lowercase().as_str() {
                "ssh" | "git+ssh" | "ssh+git" => Self::from_authority_path(rest),
                _ => None,
            };
        }
        // scp-like: a colon before any slash (git's rule); a path on this machine has none.
        let colon = url.find(':')?;
        if url[..colon].contains('/') || url.starts_with('/') {
            return None;
        }
        let parts: Vec<&str> = url.split(':').collect();
        let rewritten = if parts.len() > 2 {
            // `[host:port]:path`
            let host = parts[0].trim_start_matches('[');
            let port = parts[1].trim_end_matches(']');
            format!("{host}:{port}/{}", parts[2..].join("/"))
        } else {
            parts.join("/")
        };
        let mut remote = Self::from_authority_path(&rewritten)?;
        if let Some(p) = remote.path.strip_prefix('/') {
            remote.path = p.to_string();
        }
        Some(remote)
    }

    /// `[user@]host[:port]/path` (what follows `ssh://`).
    fn from_authority_path(rest: &str) -> Option<Self> {
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (user, host_port) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = match host_port.split_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                (h, Some(p.to_string()))
            }
            Some((h, "")) => (h, None),
            Some(_) => return None,
            None => (host_port, None),
        };
        if host.is_empty() {
            return None;
        }
        let user = user.map(percent_decode).filter(|u| !u.is_empty());
        let path = percent_decode(path);
        Some(SshRemote {
            user_and_host: match user {
                Some(u) => format!("{u}@{host}"),
                None => host.to_string(),
            },
            port,
            path,
        })
    }

    /// The https URL git-lfs guesses for this remote's LFS server when nothing else is known
    /// (`https://HOST/PATH`, without the port: it is SSH's), before the `.git/info/lfs` suffix
    /// of a clone URL.
    pub(crate) fn https_guess(&self) -> String {
        let host = self
            .user_and_host
            .rsplit_once('@')
            .map_or(self.user_and_host.as_str(), |(_, h)| h);
        let path = if self.path.starts_with('/') || self.path.is_empty() {
            self.path.clone()
        } else {
            format!("/{}", self.path)
        };
        format!("https://{host}{path}")
    }
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Which SSH program runs, as git and git-lfs take it from the environment and git config
/// (read by [`crate::agent::settings::ssh_settings`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SshSettings {
    /// `GIT_SSH_COMMAND`.
    pub env_command: Option<String>,
    /// `GIT_SSH`.
    pub env_program: Option<String>,
    /// `core.sshCommand`.
    pub config_command: Option<String>,
    /// `GIT_SSH_VARIANT`, else `ssh.variant`.
    pub variant: Option<String>,
    /// `lfs.ssh.retries`: how many times a failed `git-lfs-authenticate` is run again (git-lfs's
    /// default, [`DEFAULT_RETRIES`], when unset).
    pub retries: Option<u32>,
}

/// git-lfs's `lfs.ssh.retries` default.
pub(crate) const DEFAULT_RETRIES: u32 = 5;

/// The most retries honoured: each run may take up to [`TIMEOUT`].
const MAX_RETRIES: u32 = 10;

impl SshSettings {
    /// How many times `git-lfs-authenticate` runs at most: once, and again after each failure
    /// up to `lfs.ssh.retries` times, as in git-lfs (at most [`MAX_RETRIES`] here).
    fn attempts(&self) -> u32 {
        self.retries.unwrap_or(DEFAULT_RETRIES).min(MAX_RETRIES) + 1
    }
}

/// The kind of SSH program (git's `ssh.variant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Ssh,
    Putty,
    Tortoise,
}

/// The program and arguments that run `git-lfs-authenticate PATH OPERATION` on `remote`, as
/// git-lfs builds them (see the module documentation).
pub(crate) fn command_line(
    settings: &SshSettings,
    remote: &SshRemote,
    operation: Operation,
) -> (String, Vec<String>) {
    let nonblank = |v: &Option<String>| v.as_ref().filter(|v| !v.trim().is_empty()).cloned();
    // (the program's name, the command the shell runs, if any)
    let (program, shell_command) = if let Some(c) = nonblank(&settings.env_command) {
        (first_word(&c), Some(c))
    } else if let Some(p) = nonblank(&settings.env_program) {
        (p, None)
    } else if let Some(c) = nonblank(&settings.config_command) {
        (first_word(&c), Some(c))
    } else {
        ("ssh".to_string(), None)
    };
    let variant = variant(settings.variant.as_deref(), &program);
    let mut args = Vec::new();
    if variant == Variant::Tortoise {
        args.push("-batch".to_string());
    }
    if let Some(port) = &remote.port {
        args.push(if variant == Variant::Ssh { "-p" } else { "-P" }.to_string());
        args.push(port.clone());
    }
    if remote.user_and_host.starts_with('-') {
        // Never an option to ssh: `ssh -- -oProxyCommand=… …` (git-lfs does the same).
        if variant == Variant::Ssh {
            args.push("--".to_string());
            args.push(remote.user_and_host.clone());
        } else {
            args.push(remote.user_and_host.trim_start_matches('-').to_string());
        }
    } else {
        args.push(remote.user_and_host.clone());
    }
    args.push(format!(
        "git-lfs-authenticate {} {}",
        remote.path,
        operation_name(operation)
    ));
    match shell_command {
        Some(c) => {
            let quoted: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
            (
                "sh".to_string(),
                vec!["-c".to_string(), format!("{c} {}", quoted.join(" "))],
            )
        }
        None => (program, args),
    }
}

fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Upload => "upload",
        Operation::Download => "download",
    }
}

/// The first word of a shell command (its program), for guessing the variant.
fn first_word(command: &str) -> String {
    let c = command.trim_start();
    let word = match c.chars().next() {
        Some(q @ ('\'' | '"')) => c[1..].split(q).next().unwrap_or_default(),
        _ => c.split_whitespace().next().unwrap_or_default(),
    };
    word.to_string()
}

/// The variant `configured` names (`GIT_SSH_VARIANT`/`ssh.variant`), else the one guessed
/// from the program's file name (`plink`, `tortoiseplink`), else OpenSSH's.
fn variant(configured: Option<&str>, program: &str) -> Variant {
    match configured.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("putty" | "plink") => return Variant::Putty,
        Some("tortoiseplink") => return Variant::Tortoise,
        Some("ssh" | "simple") => return Variant::Ssh,
        Some("auto") | Some("") | None => {}
        Some(_) => return Variant::Ssh,
    }
    let base = program.rsplit(['/', '\\']).next().unwrap_or(program);
    let base = base
        .rsplit_once('.')
        .map_or(base, |(stem, _)| stem)
        .to_ascii_lowercase();
    match base.as_str() {
        "plink" => Variant::Putty,
        "tortoiseplink" => Variant::Tortoise,
        _ => Variant::Ssh,
    }
}

/// `text` in single quotes for `sh` (`'` written as `'\''`).
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// What `git-lfs-authenticate` answered.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SshAuth {
    /// The LFS URL to use instead of the guessed one (empty: keep the guess).
    #[serde(default)]
    pub href: String,
    /// Headers for the batch request (an `Authorization`), registered with
    /// [`xet_protocol::redact`].
    #[serde(default)]
    pub header: std::collections::BTreeMap<String, String>,
    /// Seconds the headers are good for, when the server says.
    #[serde(default)]
    pub expires_in: Option<i64>,
}

impl SshAuth {
    /// The `Authorization` header of the answer, if any.
    pub(crate) fn authorization(&self) -> Option<&str> {
        self.header
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.trim().is_empty())
    }
}

/// Why `git-lfs-authenticate` gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SshAuthError {
    #[error(
        "cannot run {program:?} to authenticate with {host} over SSH: {source}; install OpenSSH's \
         client, or name your SSH program in GIT_SSH_COMMAND or core.sshCommand"
    )]
    Spawn {
        program: String,
        host: String,
        source: std::io::Error,
    },
    #[error(
        "the SSH server {host} has no git-lfs-authenticate command (`{program}` exited with \
         {status}){stderr}; set lfs.url to the LFS server's https URL"
    )]
    Unavailable {
        program: String,
        host: String,
        status: String,
        stderr: String,
    },
    #[error(
        "`git-lfs-authenticate` on {host} failed (`{program}` exited with {status}){stderr}: \
         check that `ssh {host}` works without a prompt (your SSH key is loaded, the host key \
         is known), or set lfs.url to the LFS server's https URL"
    )]
    Failed {
        program: String,
        host: String,
        status: String,
        stderr: String,
    },
    #[error(
        "`git-lfs-authenticate` on {host} took longer than {secs} s; check that `ssh {host}` \
         works without a prompt",
        secs = TIMEOUT.as_secs()
    )]
    TimedOut { host: String },
    #[error(
        "`git-lfs-authenticate` on {host} answered something that is not its JSON ({why}); \
         check the server's git-lfs-authenticate, or set lfs.url to the LFS server's https URL"
    )]
    BadAnswer { host: String, why: String },
}

impl SshAuthError {
    /// Whether the server has no `git-lfs-authenticate` (git-lfs then keeps the guessed URL).
    pub(crate) fn is_unavailable(&self) -> bool {
        matches!(self, SshAuthError::Unavailable { .. })
    }
}

/// Runs `git-lfs-authenticate` for `remote` and `operation` (see the module documentation) in
/// `dir`, without a terminal (stdin is empty): its answer. The answer's headers are registered
/// with [`xet_protocol::redact`]; nothing of them is logged.
///
/// A run that fails (the SSH program exits with an error: a connection dropped, a server busy)
/// is run again, up to `lfs.ssh.retries` times, as git-lfs does; one whose failure another run
/// would repeat (no `git-lfs-authenticate` on the server, an answer that is not its JSON, no SSH
/// program, a run past [`TIMEOUT`]) is not.
pub(crate) fn authenticate(
    settings: &SshSettings,
    remote: &SshRemote,
    operation: Operation,
    dir: Option<&std::path::Path>,
) -> Result<SshAuth, SshAuthError> {
    let attempts = settings.attempts();
    let mut attempt = 1;
    loop {
        match authenticate_once(settings, remote, operation, dir) {
            Err(e @ SshAuthError::Failed { .. }) if attempt < attempts => {
                tracing::warn!(
                    host = %remote.user_and_host,
                    attempt,
                    attempts,
                    error = %e,
                    "git-lfs-authenticate failed; trying again"
                );
                // A moment for a dropped connection or a busy server to recover.
                std::thread::sleep(Duration::from_millis(100 * u64::from(attempt)));
                attempt += 1;
            }
            answer => return answer,
        }
    }
}

/// One run of `git-lfs-authenticate` (see [`authenticate`]).
fn authenticate_once(
    settings: &SshSettings,
    remote: &SshRemote,
    operation: Operation,
    dir: Option<&std::path::Path>,
) -> Result<SshAuth, SshAuthError> {
    let (program, args) = command_line(settings, remote, operation);
    let host = remote.user_and_host.clone();
    let shown = if program == "sh" {
        args.last().cloned().unwrap_or_default()
    } else {
        program.clone()
    };
    tracing::debug!(program = %shown, %host, path = %remote.path, ?operation, "git-lfs-authenticate");
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let child = cmd.spawn().map_err(|source| SshAuthError::Spawn {
        program: shown.clone(),
        host: host.clone(),
        source,
    })?;
    let out =
        wait_with_timeout(child).ok_or_else(|| SshAuthError::TimedOut { host: host.clone() })?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let stderr_shown = if stderr.is_empty() {
        String::new()
    } else {
        format!(
            ": {}",
            xet_protocol::redact::redact(&xet_protocol::redact::clip(&stderr, 500))
        )
    };
    if !out.status.success() {
        let status = out
            .status
            .code()
            .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
        let lower = stderr.to_ascii_lowercase();
        let unavailable = out.status.code() == Some(127)
            || [
                "git-lfs-authenticate: not found",
                "git-lfs-authenticate: command not found",
                "git-lfs-authenticate: no such file",
                "command not found: git-lfs-authenticate",
            ]
            .iter()
            .any(|n| lower.contains(n));
        let (program, stderr) = (shown, stderr_shown);
        return Err(if unavailable {
            SshAuthError::Unavailable {
                program,
                host,
                status,
                stderr,
            }
        } else {
            SshAuthError::Failed {
                program,
                host,
                status,
                stderr,
            }
        });
    }
    if out.stdout.len() > MAX_ANSWER {
        return Err(SshAuthError::BadAnswer {
            host,
            why: format!("more than {MAX_ANSWER} bytes"),
        });
    }
    let answer: SshAuth =
        serde_json::from_slice(&out.stdout).map_err(|e| SshAuthError::BadAnswer {
            host: host.clone(),
            why: e.to_string(),
        })?;
    for value in answer.header.values() {
        xet_protocol::redact::register_authorization(value);
        xet_protocol::redact::register_secret(value);
    }
    if !answer.href.is_empty() {
        let scheme_ok = reqwest::Url::parse(&answer.href)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
        if !scheme_ok {
            return Err(SshAuthError::BadAnswer {
                host,
                why: format!(
                    "its href {:?} is not an http(s) URL",
                    xet_protocol::redact::clip(&answer.href, 200)
                ),
            });
        }
    }
    Ok(answer)
}

/// The child's output, or `None` (the child killed) after [`TIMEOUT`].
fn wait_with_timeout(mut child: std::process::Child) -> Option<std::process::Output> {
    use std::io::Read;
    let mut stdout = child.stdout.take()?;
    let mut stderr = child.stderr.take()?;
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stdout)
            .take(MAX_ANSWER as u64 + 1)
            .read_to_end(&mut buf);
        // Drain the rest so that the child never blocks on a full pipe.
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut buf);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        buf
    });
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    Some(std::process::Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_urls_parse_as_git_lfs_parses_them() {
        let r = SshRemote::parse("git@h.example:team/repo.git").unwrap();
        assert_eq!(
            r,
            SshRemote {
                user_and_host: "git@h.example".into(),
                port: None,
                path: "team/repo.git".into()
            }
        );
        assert_eq!(r.https_guess(), "https://h.example/team/repo.git");
        let r = SshRemote::parse("ssh://git@h.example:2222/team/repo.git").unwrap();
        assert_eq!(r.user_and_host, "git@h.example");
        assert_eq!(r.port.as_deref(), Some("2222"));
        assert_eq!(r.path, "/team/repo.git");
        assert_eq!(r.https_guess(), "https://h.example/team/repo.git");
        let r = SshRemote::parse("[h.example:2222]:team/repo").unwrap();
        assert_eq!(
            (r.user_and_host.as_str(), r.port.as_deref(), r.path.as_str()),
            ("h.example", Some("2222"), "team/repo")
        );
        let r = SshRemote::parse("git+ssh://h.example/x").unwrap();
        assert_eq!(
            (r.user_and_host.as_str(), r.path.as_str()),
            ("h.example", "/x")
        );
        for not_ssh in [
            "https://h.example/x",
            "file:///srv/x",
            "/srv/repo.git",
            "../repo.git",
            "./a:b",
            "",
            "ssh://",
            "ssh://h:port/x",
            "git@h\n:x",
        ] {
            assert_eq!(SshRemote::parse(not_ssh), None, "{not_ssh:?}");
        }
    }

    #[test]
    fn the_command_line_is_git_lfs_s() {
        let remote = SshRemote::parse("ssh://git@h.example:2222/team/repo.git").unwrap();
        let plain = SshSettings::default();
        assert_eq!(
            command_line(&plain, &remote, Operation::Download),
            (
                "ssh".to_string(),
                vec![
                    "-p".to_string(),
                    "2222".into(),
                    "git@h.example".into(),
                    "git-lfs-authenticate /team/repo.git download".into()
                ]
            )
        );
        let settings = SshSettings {
            env_command: Some("ssh -i 'my key'".into()),
            config_command: Some("other".into()),
            ..SshSettings::default()
        };
        assert_eq!(
            command_line(&settings, &remote, Operation::Upload),
            (
                "sh".to_string(),
                vec![
                    "-c".to_string(),
                    "ssh -i 'my key' '-p' '2222' 'git@h.example' \
                     'git-lfs-authenticate /team/repo.git upload'"
                        .into()
                ]
            )
        );
        let plink = SshSettings {
            env_program: Some("C:\\tools\\plink.exe".into()),
            config_command: Some("ignored".into()),
            ..SshSettings::default()
        };
        let (program, args) = command_line(&plink, &remote, Operation::Download);
        assert_eq!(program, "C:\\tools\\plink.exe");
        assert_eq!(&args[..2], ["-P", "2222"]);
        let tortoise = SshSettings {
            config_command: Some("tortoiseplink".into()),
            variant: Some("auto".into()),
            ..SshSettings::default()
        };
        let (program, args) = command_line(&tortoise, &remote, Operation::Download);
        assert_eq!(program, "sh");
        assert!(
            args[1].starts_with("tortoiseplink '-batch' '-P' '2222'"),
            "{args:?}"
        );
        let forced = SshSettings {
            env_program: Some("plink".into()),
            variant: Some("ssh".into()),
            ..SshSettings::default()
        };
        assert_eq!(
            command_line(&forced, &remote, Operation::Download).1[0],
            "-p"
        );
        // A host that looks like an option stays a host.
        let evil = SshRemote::parse("ssh://-oProxyCommand=x/repo").unwrap();
        let (_, args) = command_line(&plain, &evil, Operation::Download);
        assert_eq!(&args[..2], ["--", "-oProxyCommand=x"]);
        let quote = shell_quote("it's");
        assert_eq!(quote, r"'it'\''s'");
    }

    #[test]
    fn answers_are_read_and_failures_explained() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fake-ssh");
        std::fs::write(
            &script,
            "#!/bin/sh\ncase \"$*\" in\n*missing*) echo 'sh: git-lfs-authenticate: not found' >&2; exit 1;;\n\
             *broken*) echo 'Permission denied (publickey).' >&2; exit 255;;\n\
             *garbage*) echo 'not json';;\n\
             *) echo '{\"href\":\"https://lfs.example/r.git/info/lfs\",\"header\":{\"Authorization\":\"RemoteAuth s3cr3t-token\"},\"expires_in\":60}';;\nesac\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let settings = SshSettings {
            env_program: Some(script.to_string_lossy().into_owned()),
            retries: Some(0),
            ..SshSettings::default()
        };
        let run = |url: &str| {
            authenticate(
                &settings,
                &SshRemote::parse(url).unwrap(),
                Operation::Download,
                None,
            )
        };
        let ok = run("git@h:ok/repo").unwrap();
        assert_eq!(ok.href, "https://lfs.example/r.git/info/lfs");
        assert_eq!(ok.authorization(), Some("RemoteAuth s3cr3t-token"));
        assert_eq!(ok.expires_in, Some(60));
        assert!(!xet_protocol::redact::redact("x RemoteAuth s3cr3t-token y").contains("s3cr3t"));
        let e = run("git@h:missing/repo").unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        let e = run("git@h:broken/repo").unwrap_err();
        assert!(!e.is_unavailable());
        let text = e.to_string();
        assert!(
            text.contains("Permission denied") && text.contains("lfs.url"),
            "{text}"
        );
        let e = run("git@h:garbage/repo").unwrap_err().to_string();
        assert!(e.contains("not its JSON"), "{e}");
        let none = SshSettings {
            env_program: Some(
                dir.path()
                    .join("no-such-ssh")
                    .to_string_lossy()
                    .into_owned(),
            ),
            ..SshSettings::default()
        };
        let e = authenticate(
            &none,
            &SshRemote::parse("git@h:x").unwrap(),
            Operation::Download,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("GIT_SSH_COMMAND"), "{e}");
    }

    #[test]
    fn a_failed_run_is_tried_again_up_to_lfs_ssh_retries_times() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("flaky-ssh");
        let count = dir.path().join("runs");
        // Fails (as a dropped connection does) until its third run, then answers; a server
        // without git-lfs-authenticate says so every time.
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho run >> '{runs}'\n\
                 case \"$*\" in *missing*) echo 'sh: git-lfs-authenticate: not found' >&2; exit 127;; esac\n\
                 if [ \"$(wc -l < '{runs}')\" -lt 3 ]; then echo 'Connection closed by 10.0.0.1 port 22' >&2; exit 255; fi\n\
                 echo '{{\"header\":{{\"Authorization\":\"RemoteAuth t0ken\"}}}}'\n",
                runs = count.display()
            ),
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let runs = || {
            let n = std::fs::read_to_string(&count).map_or(0, |t| t.lines().count());
            let _ = std::fs::remove_file(&count);
            n
        };
        let with = |retries: Option<u32>, url: &str| {
            let settings = SshSettings {
                env_program: Some(script.to_string_lossy().into_owned()),
                retries,
                ..SshSettings::default()
            };
            authenticate(
                &settings,
                &SshRemote::parse(url).unwrap(),
                Operation::Upload,
                None,
            )
        };
        // git-lfs's default (5 retries): the third run answers.
        let ok = with(None, "git@h:team/repo").unwrap();
        assert_eq!(ok.authorization(), Some("RemoteAuth t0ken"));
        assert_eq!(runs(), 3);
        // One retry: two runs, and the last run's error.
        let e = with(Some(1), "git@h:team/repo").unwrap_err().to_string();
        assert!(e.contains("Connection closed"), "{e}");
        assert_eq!(runs(), 2);
        // None: one run.
        assert!(with(Some(0), "git@h:team/repo").is_err());
        assert_eq!(runs(), 1);
        // No git-lfs-authenticate on the server: asked once, whatever the retries.
        assert!(with(Some(5), "git@h:missing/repo")
            .unwrap_err()
            .is_unavailable());
        assert_eq!(runs(), 1);
    }
}
