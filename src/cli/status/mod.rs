//! `git xet status` (alias `env`): is the agent registered, which mode and endpoint apply to this
//! repository and to each of its remotes, where the cache is and how large, is the server
//! reachable and does it accept the credential that would be sent.
//!
//! The command only reads: git configuration (with the scope each value comes from), `git lfs
//! env`, the hooks directory, the transfer journal, the cache directory and the endpoint
//! directories (never created: what could not be created is found by looking at the nearest
//! existing parent), plus, per http(s) endpoint or LFS server, `GET /health` and one
//! authenticated request (3 s timeout each): `GET /v1/lfs-files/<zero oid>` with the token the
//! agent would send, or an LFS batch request without objects with the credential git's helpers
//! hold (never prompting). Credentials are never shown. Missing pieces are findings, not
//! failures: it exits 0 whenever it could look, and 1 only if it could not (say, stdout is
//! closed).

mod gather;
mod probe;
mod render;
mod url;

use gather::*;
use probe::*;
use render::*;
use url::*;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::hooks::{self, HookKind};
use super::CmdResult;
use xet_protocol::redact::redact;

/// How long the reachability check waits for an answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 whenever the checks could run, even if they found problems.",
    after_long_help = "Prints, in order: this git-xet's version and path; git's and git-lfs's \
versions; whether git-xet is registered as Git LFS's `xet` transfer agent \
(lfs.customtransfer.xet.path, .args, .concurrent) and in which configuration scope, and whether \
git-lfs's filters are set up (filter.lfs.process).\n\n\
Inside a repository, also: the mode that applies to it, standalone (lfs.standalonetransferagent \
= xet: git-xet stores objects at its endpoint, xet.endpoint or GIT_XET_ENDPOINT, shown with where \
it came from) or negotiated (the LFS server chooses; its URL is shown as `git lfs env` reports \
it); whether the endpoint or LFS server answers (GET /health, 3 s timeout; a git-xet server \
answers with its version) and accepts the credential git-xet or git-lfs would send (a 401/403 is \
reported as a wrong stored credential; the credential is never shown); for a directory \
endpoint, whether it is a store, empty, missing, or cannot be created or used, and its size; each \
remote with its LFS URL, how git-lfs transfers for it (git-xet standalone with that remote's \
endpoint, remote.<name>.xetEndpoint or the repository's; negotiated; git-lfs's own file adapter \
for a file:// URL, where git-xet never runs); the pre-push hook; and the transfer journal \
(.git/xet/transfers.jsonl) with its record count and what its records add up to: the bytes \
uploads sent and downloads fetched over the wire, and the bytes downloads took from this machine \
instead (earlier versions, the download chunk cache, interrupted downloads). Nothing is \
created.\n\n\
Always: the local cache directory and its size (GIT_XET_CACHE_DIR overrides its location), then \
warnings with what to run to fix each.\n\n\
Exit status: 0 whenever the checks could run, even if they found problems (status is a \
diagnostic); 1 only if it failed itself.\n\n\
Examples:\n  git xet status\n  git xet env --json | jq .repository.mode"
)]
pub(crate) struct StatusArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not contact the endpoint or LFS server.
    #[arg(long)]
    pub no_network: bool,
}

type Error = Box<dyn std::error::Error>;

/// A configuration value and the scope it comes from (`global`, `local`, `system`, `worktree`,
/// `command`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Setting {
    pub value: String,
    pub scope: String,
}

/// How much a finding matters: a warning is something to fix, a note something to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Level {
    Warning,
    Note,
}

/// What one check found: how much it matters, what the matter is, and what to do about it.
#[derive(Debug, Clone, Serialize)]
struct Finding {
    level: Level,
    text: String,
    /// What to run or change, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

impl Finding {
    /// What to run or change about it.
    fn fix(&mut self, fix: impl Into<String>) {
        self.fix = Some(fix.into());
    }

    /// The finding as one line: its text, then what to do after a colon.
    fn line(&self) -> String {
        match &self.fix {
            Some(fix) => format!("{}: {fix}", self.text),
            None => self.text.clone(),
        }
    }
}

/// The findings of the checks, in the order the checks ran.
#[derive(Debug, Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, level: Level, text: String) -> &mut Finding {
        self.0.push(Finding {
            level,
            text,
            fix: None,
        });
        let last = self.0.len() - 1;
        &mut self.0[last]
    }

    /// A problem; say what fixes it with [`Finding::fix`].
    fn warn(&mut self, text: impl Into<String>) -> &mut Finding {
        self.add(Level::Warning, text.into())
    }

    /// Something worth knowing that needs nothing done.
    fn note(&mut self, text: impl Into<String>) -> &mut Finding {
        self.add(Level::Note, text.into())
    }

    /// The lines of the findings of `level`.
    fn lines(&self, level: Level) -> Vec<String> {
        self.0
            .iter()
            .filter(|f| f.level == level)
            .map(Finding::line)
            .collect()
    }
}

#[derive(Debug, Serialize)]
struct Report {
    git_xet: Program,
    /// git's version, `None` if git cannot be run.
    git: Option<String>,
    /// git-lfs's version, `None` if `git lfs` cannot be run.
    git_lfs: Option<String>,
    registration: Registration,
    /// `None` outside a repository.
    repository: Option<Repository>,
    cache: DirInfo,
    /// The warnings as lines (text, then what to do), as the text report shows them.
    warnings: Vec<String>,
    notes: Vec<String>,
    /// The same findings, each with its level, text and fix apart.
    findings: Vec<Finding>,
}

/// How git-lfs picks the transfer of a repository: git-xet for every remote (`standalone`), or
/// the LFS server's batch API (`negotiated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Standalone,
    Negotiated,
}

/// How git-lfs transfers one remote's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Transfer {
    /// git-xet, at the remote's standalone endpoint.
    Standalone,
    /// The LFS server's batch API chooses.
    Negotiated,
    /// git-lfs's own file adapter (git-xet is not used).
    GitLfsFile,
    /// Another standalone agent than git-xet.
    OtherAgent,
}

/// What kind of endpoint a standalone endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum EndpointKind {
    Http,
    Dir,
}

/// What a directory endpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreState {
    Store,
    OtherVersion,
    Empty,
    Missing,
    NotAStore,
    NotADirectory,
    CannotCreate,
    Unreadable,
}

/// What a server's answer to the credential git-xet (or git-lfs) would send means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// The credential was sent and accepted.
    Accepted,
    /// None was sent, and none was asked for.
    NotNeeded,
    /// The stored credential is wrong (401/403 with one).
    Refused,
    /// One is needed and none is stored (401/403 without one).
    Missing,
    /// Anything else (no answer, another status).
    Unknown,
}

impl StoreState {
    /// The name `--json` gives it (the text report shows it with spaces).
    fn as_str(self) -> &'static str {
        match self {
            StoreState::Store => "store",
            StoreState::OtherVersion => "other_version",
            StoreState::Empty => "empty",
            StoreState::Missing => "missing",
            StoreState::NotAStore => "not_a_store",
            StoreState::NotADirectory => "not_a_directory",
            StoreState::CannotCreate => "cannot_create",
            StoreState::Unreadable => "unreadable",
        }
    }
}

impl Verdict {
    /// The name `--json` gives it (the text report shows it with spaces).
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::NotNeeded => "not_needed",
            Verdict::Refused => "refused",
            Verdict::Missing => "missing",
            Verdict::Unknown => "unknown",
        }
    }
}

impl Serialize for StoreState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Debug, Serialize)]
struct Program {
    version: &'static str,
    path: Option<String>,
}

#[derive(Debug, Default, Serialize)]
struct Registration {
    /// `lfs.customtransfer.xet.path` is set.
    registered: bool,
    /// The registered program can be run (`None` when not registered).
    runnable: Option<bool>,
    /// The registered program is this executable.
    this_executable: Option<bool>,
    /// When it is not: another program than git-xet of this project (Hugging Face's
    /// `git-xet`, say), described by its path and `--version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    other_agent: Option<String>,
    path: Option<Setting>,
    args: Option<Setting>,
    concurrent: Option<Setting>,
    direction: Option<Setting>,
    filter_lfs_process: Option<Setting>,
    basic_transfers_only: Option<Setting>,
}

#[derive(Debug, Serialize)]
struct Repository {
    work_tree: Option<String>,
    git_dir: String,
    mode: Mode,
    standalone_agent: Option<Setting>,
    /// The repository's standalone endpoint (GIT_XET_ENDPOINT or xet.endpoint), if one is
    /// configured (whatever the mode).
    endpoint: Option<EndpointInfo>,
    /// Each configured remote: its LFS URL, how git-lfs transfers for it, and the endpoint
    /// git-xet uses for it in standalone mode.
    remotes: Vec<RemoteInfo>,
    /// The LFS server URLs (as `git lfs env` reports them).
    lfs_urls: Vec<LfsUrl>,
    /// One check per distinct URL contacted.
    reachability: Vec<Reachability>,
    /// What each negotiated LFS server said of the credential git's helpers hold for it.
    credential_checks: Vec<CredentialCheck>,
    /// The directory endpoint's contents.
    store: Option<DirInfo>,
    hooks_dir: Option<String>,
    /// Who wrote the pre-push hook.
    pre_push_hook: HookKind,
    /// The hook git-xet's pre-push replaced and runs after its check, if any.
    pre_push_chained: Option<String>,
    journal: JournalInfo,
}

#[derive(Debug, Serialize)]
struct EndpointInfo {
    kind: EndpointKind,
    value: String,
    /// Where it was configured, e.g. `git config xet.endpoint`.
    source: String,
    /// A directory's contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<StoreState>,
    /// A URL's answer to the credential git-xet would send.
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<CredentialCheck>,
}

#[derive(Debug, Serialize)]
struct RemoteInfo {
    name: String,
    url: Option<String>,
    /// The LFS URL git-lfs uses for it.
    lfs_url: Option<String>,
    /// How git-lfs transfers its objects.
    transfer: Transfer,
    standalone_agent: Option<String>,
    /// The endpoint git-xet uses for this remote (standalone).
    endpoint: Option<EndpointInfo>,
}

/// What a server said when asked with the credential git-xet (or git-lfs) would send. The
/// credential itself is never shown.
#[derive(Debug, Clone, Serialize)]
struct CredentialCheck {
    /// What was asked.
    url: String,
    /// Where the credential came from (`GIT_XET_TOKEN`, `the password in the endpoint URL`,
    /// `your git credential helper`); `None`: no credential was sent.
    source: Option<String>,
    http_status: Option<u16>,
    verdict: Verdict,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct LfsUrl {
    /// The remote it is for; `None` for the default remote.
    remote: Option<String>,
    url: String,
    source: String,
}

#[derive(Debug, Clone, Serialize)]
struct Reachability {
    url: String,
    reachable: bool,
    http_status: Option<u16>,
    /// The answer was a git-xet server's `/health`.
    git_xet_server: bool,
    server_version: Option<String>,
    millis: u64,
    error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
struct DirInfo {
    path: Option<String>,
    exists: bool,
    bytes: u64,
    files: u64,
}

#[derive(Debug, Serialize)]
struct JournalInfo {
    path: String,
    exists: bool,
    /// Lines that parse as records.
    records: u64,
    /// Distinct objects among them.
    objects: u64,
    /// Upload records, and the bytes they sent over the wire.
    uploads: u64,
    sent_bytes: u64,
    /// Download records, the bytes they fetched over the wire, and the bytes of their files
    /// taken from this machine instead.
    downloads: u64,
    downloaded_bytes: u64,
    reused_bytes: u64,
}

pub fn run(args: &StatusArgs) -> CmdResult {
    let report = gather(args)?;
    // Everything shown goes through the one redaction (a password in an endpoint URL, a
    // signature in an LFS URL, a token in an error message).
    let mut text = Vec::new();
    if args.json {
        serde_json::to_writer_pretty(&mut text, &report)?;
        writeln!(text)?;
    } else {
        render(&report, &mut text)?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(redact(&String::from_utf8_lossy(&text)).as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// What one endpoint was found to be: for a URL, whether it answers and accepts the credential
/// the agent would send; for a directory, what it holds. Reads only: nothing is created.
#[derive(Debug, Clone, Default)]
struct EndpointCheck {
    health: Option<Reachability>,
    credential: Option<CredentialCheck>,
    store: Option<DirInfo>,
    state: Option<StoreState>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::settings;
    use crate::git::Git;
    use xet_client::url::http_origin;

    #[test]
    fn lfs_env_endpoints_parse() {
        let text = "git-lfs/3.3.0 (GitHub; linux amd64; go 1.19.8)\n\n\
Endpoint=https://example.com/foo/bar.git/info/lfs (auth=none)\n\
Endpoint (up)=/tmp/bare.git/info/lfs (auth=basic)\n\
  SSH=git@example.com:foo/bar.git\n\
LocalWorkingDir=/tmp/r\n";
        let urls = to_lfs_urls(settings::parse_lfs_env(text));
        assert_eq!(urls.len(), 2);
        assert_eq!(urls[0].remote, None);
        assert_eq!(urls[0].url, "https://example.com/foo/bar.git/info/lfs");
        assert_eq!(urls[1].remote.as_deref(), Some("up"));
        assert_eq!(urls[1].url, "/tmp/bare.git/info/lfs");
    }

    #[test]
    fn derived_lfs_urls_apply_instead_of() {
        let dir = tempfile::tempdir().unwrap();
        let git = Git::in_dir(dir.path());
        git.run(&["init", "-q"]).unwrap();
        git.run(&["remote", "add", "origin", "gh:team/models"])
            .unwrap();
        git.run(&["config", "url.https://git.example.org/.insteadOf", "gh:"])
            .unwrap();
        let urls = derived_lfs_urls(&git);
        assert_eq!(urls.len(), 1, "{urls:?}");
        assert_eq!(
            urls[0].url,
            "https://git.example.org/team/models.git/info/lfs"
        );
    }

    #[test]
    fn lfs_urls_derive_like_git_lfs() {
        assert_eq!(
            lfs_url_from_remote("https://example.com/foo/bar"),
            "https://example.com/foo/bar.git/info/lfs"
        );
        assert_eq!(
            lfs_url_from_remote("https://example.com/foo/bar.git/"),
            "https://example.com/foo/bar.git/info/lfs"
        );
        assert_eq!(
            lfs_url_from_remote("git@example.com:foo/bar.git"),
            "https://example.com/foo/bar.git/info/lfs"
        );
        assert_eq!(
            lfs_url_from_remote("ssh://git@example.com:22/foo/bar"),
            "https://example.com/foo/bar.git/info/lfs"
        );
    }

    #[test]
    fn urls_are_cut_and_redacted() {
        assert_eq!(
            http_origin("https://u:p@h.example:8080/a/info/lfs").as_deref(),
            Some("https://h.example:8080")
        );
        assert_eq!(http_origin("/tmp/x/info/lfs"), None);
        assert_eq!(
            redact("https://u:secret@h/x"),
            "https://u:***@h/x".to_string()
        );
        assert_eq!(redact("https://h/x"), "https://h/x");
    }

    #[test]
    fn directory_sizes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/x"), [0u8; 10]).unwrap();
        std::fs::write(dir.path().join("y"), [0u8; 5]).unwrap();
        let info = dir_info(Some(dir.path().to_path_buf()));
        assert!(info.exists);
        assert_eq!((info.bytes, info.files), (15, 2));
        assert!(!dir_info(Some(dir.path().join("none"))).exists);
    }
}
