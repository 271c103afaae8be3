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

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::hooks::{self, HookKind};
use super::CmdResult;
use crate::git::Git;
use crate::lfs::journal;
use crate::lfs::settings::{self, DirState, EndpointSpec, TransferMode};
use crate::redact::redact;

/// How long the reachability check waits for an answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

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
(.git/xet/transfers.jsonl) with its record count. Nothing is created.\n\n\
Always: the local cache directory and its size (GIT_XET_CACHE_DIR overrides its location), then \
warnings with what to run to fix each.\n\n\
Exit status: 0 whenever the checks could run, even if they found problems (status is a \
diagnostic); 1 only if it failed itself.\n\n\
Examples:\n  git xet status\n  git xet env --json | jq .repository.mode"
)]
pub struct StatusArgs {
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
pub struct Setting {
    pub value: String,
    pub scope: String,
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
    warnings: Vec<String>,
    notes: Vec<String>,
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
    /// `standalone` or `negotiated`.
    mode: &'static str,
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
    /// Who wrote the pre-push hook: `git-xet`, `git-lfs`, `other` or `none`.
    pre_push_hook: &'static str,
    /// The hook git-xet's pre-push replaced and runs after its check, if any.
    pre_push_chained: Option<String>,
    journal: JournalInfo,
}

#[derive(Debug, Serialize)]
struct EndpointInfo {
    /// `http` or `dir`.
    kind: &'static str,
    value: String,
    /// Where it was configured, e.g. `git config xet.endpoint`.
    source: String,
    /// A directory's contents: `store`, `empty`, `missing`, `not_a_store`, `other_version`,
    /// `not_a_directory`, `cannot_create` or `unreadable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
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
    /// How git-lfs transfers its objects: `standalone` (git-xet, at `endpoint`),
    /// `negotiated` (the LFS server's batch API chooses), `git-lfs-file` (git-lfs's own file
    /// adapter; git-xet is not used) or `other-agent` (another standalone agent).
    transfer: &'static str,
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
    /// `accepted`, `not_needed` (no credential, none asked for), `refused` (the stored
    /// credential is wrong), `missing` (one is needed, none is stored) or `unknown`.
    verdict: &'static str,
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

fn gather(args: &StatusArgs) -> Result<Report, Error> {
    let git = Git::new();
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    let exe = std::env::current_exe()
        .ok()
        .map(|p| p.canonicalize().unwrap_or(p));
    let git_xet = Program {
        version: env!("CARGO_PKG_VERSION"),
        path: exe.as_ref().map(|p| p.display().to_string()),
    };
    let cache = dir_info(cache_dir());

    let git_version = version_of(&git, &["--version"], "git version ");
    if git_version.is_none() {
        warnings.push("git: not found; install git, then run `git xet install`".to_string());
        return Ok(Report {
            git_xet,
            git: None,
            git_lfs: None,
            registration: Registration::default(),
            repository: None,
            cache,
            warnings,
            notes,
        });
    }
    let lfs_version = version_of(&git, &["lfs", "version"], "git-lfs/");
    if lfs_version.is_none() {
        warnings.push("git-lfs: not found — install it: https://git-lfs.com".to_string());
    }

    let registration = registration(&git, exe.as_deref(), &mut warnings)?;

    let repository = if git.in_repository() {
        Some(repository(
            &git,
            args,
            lfs_version.is_some(),
            &mut warnings,
            &mut notes,
        )?)
    } else {
        notes.push("not inside a git repository: only global settings are shown".to_string());
        None
    };

    Ok(Report {
        git_xet,
        git: git_version,
        git_lfs: lfs_version,
        registration,
        repository,
        cache,
        warnings,
        notes,
    })
}

/// The first line of a `--version`-style output, without `prefix` and anything after a space.
fn version_of(git: &Git, args: &[&str], prefix: &str) -> Option<String> {
    let out = git.output(args).ok().filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    let rest = line.strip_prefix(prefix).unwrap_or(line);
    Some(rest.split_whitespace().next().unwrap_or(rest).to_string())
}

/// A configuration value as git resolves it, with the scope it comes from.
pub fn config_with_scope(git: &Git, key: &str) -> Result<Option<Setting>, Error> {
    let out = git.output(["config", "--show-scope", "--get", key])?;
    match out.status.code() {
        Some(0) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.trim_end_matches(['\n', '\r']);
            let (scope, value) = line.split_once('\t').unwrap_or(("", line));
            Ok(Some(Setting {
                value: value.to_string(),
                scope: scope.to_string(),
            }))
        }
        Some(1) => Ok(None),
        code => Err(format!(
            "`git config --show-scope --get {key}` failed (exit {}): {}",
            code.unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into()),
    }
}

fn registration(
    git: &Git,
    exe: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Result<Registration, Error> {
    let key = |k: &str| config_with_scope(git, k);
    let mut r = Registration {
        path: key("lfs.customtransfer.xet.path")?,
        args: key("lfs.customtransfer.xet.args")?,
        concurrent: key("lfs.customtransfer.xet.concurrent")?,
        direction: key("lfs.customtransfer.xet.direction")?,
        filter_lfs_process: key("filter.lfs.process")?,
        basic_transfers_only: key("lfs.basictransfersonly")?,
        ..Registration::default()
    };
    match &r.path {
        None => warnings.push(
            "git-xet is not registered as Git LFS's `xet` transfer agent \
             (lfs.customtransfer.xet.path is not set): run `git xet install`"
                .to_string(),
        ),
        Some(path) => {
            r.registered = true;
            let resolved = resolve_program(&path.value);
            r.runnable = Some(resolved.is_some());
            match &resolved {
                None => warnings.push(format!(
                    "lfs.customtransfer.xet.path ({} configuration) is {:?}, which cannot be run: \
                     run `git xet install` again",
                    path.scope, path.value
                )),
                Some(program) => {
                    let same = exe.is_some_and(|exe| {
                        program.canonicalize().unwrap_or_else(|_| program.clone()) == exe
                    });
                    r.this_executable = Some(same);
                }
            }
            if r.args.as_ref().map(|a| a.value.trim()) != Some("transfer") {
                warnings.push(
                    "lfs.customtransfer.xet.args is not `transfer`: git-lfs will not start the \
                     agent correctly; run `git xet install` again"
                        .to_string(),
                );
            }
        }
    }
    if r.direction
        .as_ref()
        .is_some_and(|d| d.value.trim() == "download")
    {
        warnings.push(
            "lfs.customtransfer.xet.direction is `download`: git-lfs does not use git-xet for \
             uploads"
                .to_string(),
        );
    }
    if r.basic_transfers_only
        .as_ref()
        .is_some_and(|b| is_true(&b.value))
    {
        warnings.push(
            "lfs.basictransfersonly is true: git-lfs uses no custom transfer agent, so not \
             git-xet; unset it with `git config --unset lfs.basictransfersonly`"
                .to_string(),
        );
    }
    if r.filter_lfs_process.is_none() {
        warnings.push(
            "git-lfs's filters are not set up (filter.lfs.process is not set): run \
             `git xet install` (it runs `git lfs install`)"
                .to_string(),
        );
    }
    Ok(r)
}

fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "yes" | "on" | "1"
    )
}

/// The file a program name runs, as `sh -c` would find it: a path as it is, a bare name on PATH.
fn resolve_program(program: &str) -> Option<PathBuf> {
    let program = program.trim();
    if program.is_empty() {
        return None;
    }
    if program.contains('/') || program.contains(std::path::MAIN_SEPARATOR) {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}

fn repository(
    git: &Git,
    args: &StatusArgs,
    have_lfs: bool,
    warnings: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<Repository, Error> {
    let common = git.common_dir()?;
    let work_tree = git
        .run(&["rev-parse", "--show-toplevel"])
        .ok()
        .filter(|s| !s.is_empty());
    let base = match &work_tree {
        Some(w) => PathBuf::from(w),
        None => std::env::current_dir().unwrap_or_else(|_| common.clone()),
    };

    let standalone_agent = config_with_scope(git, "lfs.standalonetransferagent")?;
    let standalone = standalone_agent.as_ref().is_some_and(|s| s.value == "xet");
    if let Some(other) = standalone_agent.as_ref().filter(|s| s.value != "xet") {
        warnings.push(format!(
            "lfs.standalonetransferagent is {:?} ({} configuration): git-lfs sends every \
             transfer to that agent, not to git-xet",
            other.value, other.scope
        ));
    }
    for (key, value) in url_standalone_agents(git) {
        if value == "xet" && !standalone {
            notes.push(format!(
                "{key} = xet: standalone mode for LFS URLs matching that URL"
            ));
        }
    }

    let endpoint = match settings::endpoint(git, &base) {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!(
                "{e}: fix it with `git xet install --local --endpoint URL-or-DIR`"
            ));
            None
        }
    };

    // Each remote: its LFS URL as git-lfs resolves it, how git-lfs transfers for it, and (when
    // git-xet does, in standalone mode) the endpoint the agent would use for it.
    let configured = settings::remotes(git);
    let lfs_urls = if have_lfs {
        lfs_env_urls(git)
    } else {
        derived_lfs_urls(git)
    };
    let pairs: Vec<(Option<String>, String)> = lfs_urls
        .iter()
        .map(|u| (u.remote.clone(), u.url.clone()))
        .collect();
    let mut remotes = Vec::new();
    for r in &configured {
        let lfs_url = settings::lfs_url_of(&pairs, &configured, &r.name);
        let mode = settings::transfer_mode(git, lfs_url.as_deref());
        let endpoint = if mode.is_xet_standalone() {
            match settings::endpoint_for_remote(git, &base, Some(&r.name)) {
                Ok(found) => found,
                Err(e) => {
                    warnings.push(format!(
                        "remote {}: {e}: fix it with `git xet install --local --endpoint \
                         URL-or-DIR --remote {}`",
                        r.name, r.name
                    ));
                    None
                }
            }
        } else {
            None
        };
        remotes.push((r, lfs_url, mode, endpoint));
    }

    // Each distinct endpoint is checked once: the repository's, then the remotes' own.
    let mut checked: Vec<(EndpointSpec, EndpointCheck)> = Vec::new();
    let mut check =
        |spec: &EndpointSpec, source: &str, warnings: &mut Vec<String>, notes: &mut Vec<String>| {
            if let Some((_, c)) = checked.iter().find(|(s, _)| s == spec) {
                return c.clone();
            }
            let c = check_endpoint(git, spec, source, args.no_network, warnings, notes);
            checked.push((spec.clone(), c.clone()));
            c
        };

    let mut reachability = Vec::new();
    let mut store = None;
    let mut endpoint_state = None;
    let mut endpoint_credential = None;
    let any_xet_remote = remotes.iter().any(|(_, _, m, _)| m.is_xet_standalone());
    let remote_without_endpoint = remotes
        .iter()
        .any(|(_, _, m, e)| m.is_xet_standalone() && e.is_none());
    if standalone || any_xet_remote {
        match &endpoint {
            None if standalone && (configured.is_empty() || remote_without_endpoint) => warnings
                .push(
                    "standalone mode is on (lfs.standalonetransferagent = xet) but no endpoint \
                     is set, so git-xet has nowhere to store objects: run `git xet install \
                     --local --endpoint URL-or-DIR` (or `git config xet.endpoint URL-or-DIR`; \
                     `--remote NAME` for one remote's own)"
                        .to_string(),
                ),
            None => {}
            Some((spec, source)) => {
                let c = check(spec, source, warnings, notes);
                if let Some(h) = c.health.clone() {
                    reachability.push(h);
                }
                store = c.store.clone();
                endpoint_state = c.state;
                endpoint_credential = c.credential.clone();
            }
        }
    } else if let Some((_, source)) = &endpoint {
        warnings.push(format!(
            "an endpoint is set ({source}) but standalone mode is off \
             (lfs.standalonetransferagent is not xet), so it is not used: run \
             `git xet install --local --endpoint URL-or-DIR` to turn standalone mode on"
        ));
    }

    let mut remote_infos = Vec::new();
    for (r, lfs_url, mode, ep) in &remotes {
        let name = &r.name;
        let mut info = RemoteInfo {
            name: name.clone(),
            url: r.url.as_deref().map(redact),
            lfs_url: lfs_url.as_deref().map(redact),
            transfer: match mode {
                TransferMode::Standalone(a) if a == "xet" => "standalone",
                TransferMode::Standalone(_) => "other-agent",
                TransferMode::FileAdapter => "git-lfs-file",
                TransferMode::Negotiated => "negotiated",
            },
            standalone_agent: match mode {
                TransferMode::Standalone(a) => Some(a.clone()),
                _ => None,
            },
            endpoint: None,
        };
        // git-lfs's rule: lfs.url wins over remote.<name>.lfsurl.
        if let (Some(own), Some(effective)) = (&r.lfs_url, lfs_url) {
            if own.trim_end_matches('/') != effective.trim_end_matches('/') {
                warnings.push(format!(
                    "remote.{name}.lfsurl is {} but git-lfs uses {} for remote {name} (lfs.url, \
                     or an .lfsconfig, takes precedence over remote.<name>.lfsurl for every \
                     remote): unset lfs.url (`git config --unset lfs.url`) and give each remote \
                     its own remote.<name>.lfsurl",
                    redact(own),
                    redact(effective)
                ));
            }
        }
        match mode {
            TransferMode::FileAdapter => warnings.push(format!(
                "remote {name}: its LFS URL is {}, so git-lfs copies LFS objects there with its \
                 own file adapter and never starts git-xet (no deduplication; `git lfs prune \
                 --verify-remote` checks nothing there): to store them with git-xet, run `git \
                 xet install --local --endpoint DIR-or-URL --remote {name}` (standalone mode)",
                redact(lfs_url.as_deref().unwrap_or("file://…"))
            )),
            TransferMode::Standalone(a) if a != "xet" => warnings.push(format!(
                "remote {name}: git-lfs sends its transfers to the standalone agent {a:?} \
                 (lfs.<url>.standalonetransferagent or lfs.standalonetransferagent), not git-xet"
            )),
            TransferMode::Standalone(_) => match ep {
                None => {
                    if endpoint.is_some() || !standalone {
                        warnings.push(format!(
                            "remote {name}: standalone mode, but no endpoint is set for it: run \
                             `git xet install --local --endpoint URL-or-DIR --remote {name}`"
                        ));
                    }
                }
                Some((spec, source)) => {
                    let c = check(spec, source, warnings, notes);
                    if let Some(h) = &c.health {
                        if !reachability.iter().any(|x: &Reachability| x.url == h.url) {
                            reachability.push(h.clone());
                        }
                    }
                    info.endpoint = Some(EndpointInfo {
                        kind: spec_kind(spec),
                        value: redact(&spec.display()),
                        source: source.clone(),
                        state: c.state,
                        credential: c.credential.clone(),
                    });
                }
            },
            TransferMode::Negotiated => {
                if let Some(own) = &r.xet_endpoint {
                    warnings.push(format!(
                        "remote.{name}.xetEndpoint is set ({}) but git-lfs does not use git-xet in \
                         standalone mode for remote {name}, so it is not used: run `git xet \
                         install --local --endpoint URL-or-DIR --remote {name}` to turn \
                         standalone mode on",
                        redact(own)
                    ));
                }
            }
        }
        remote_infos.push(info);
    }

    let mut credential_checks = Vec::new();
    if !standalone {
        if lfs_urls.is_empty() {
            notes.push(
                "no remote yet: the LFS server is the remote's, once one is added".to_string(),
            );
        }
        if !args.no_network {
            let mut seen: Vec<String> = Vec::new();
            let mut asked: Vec<String> = Vec::new();
            for lfs in &lfs_urls {
                let negotiated = match &lfs.remote {
                    Some(n) => remote_infos
                        .iter()
                        .find(|r| r.name == *n)
                        .is_none_or(|r| r.transfer == "negotiated"),
                    None => {
                        remote_infos.iter().all(|r| r.transfer == "negotiated")
                            || remote_infos.is_empty()
                    }
                };
                let Some(origin) = http_origin(&lfs.url) else {
                    continue;
                };
                if !negotiated {
                    continue;
                }
                let url = format!("{origin}/health");
                if !seen.contains(&url) {
                    seen.push(url.clone());
                    let check = probe(&url);
                    if !check.reachable {
                        warnings.push(format!(
                            "the LFS server {} does not answer ({})",
                            redact(&origin),
                            check.error.as_deref().unwrap_or("no answer")
                        ));
                    }
                    let reachable = check.reachable;
                    reachability.push(check);
                    if !reachable {
                        continue;
                    }
                }
                let over_ssh = lfs.remote.as_ref().is_some_and(|n| {
                    configured
                        .iter()
                        .any(|r| r.name == *n && r.url.as_deref().is_some_and(is_ssh_url))
                });
                if over_ssh || asked.contains(&lfs.url) {
                    continue;
                }
                asked.push(lfs.url.clone());
                let c = probe_lfs_credential(git, &lfs.url);
                let who = lfs
                    .remote
                    .as_deref()
                    .map_or("the default remote".to_string(), |r| format!("remote {r}"));
                match c.verdict {
                    "refused" => warnings.push(format!(
                        "the LFS server {} refused the stored credential ({}, HTTP {}) for {who}: \
                         the stored credential is wrong or expired; replace it (`git credential \
                         reject` for that URL, then push once to be asked, or store the right \
                         one with `git credential approve`)",
                        redact(&lfs.url),
                        c.source.as_deref().unwrap_or("credential helper"),
                        c.http_status.unwrap_or(0)
                    )),
                    "missing" => warnings.push(format!(
                        "the LFS server {} needs a credential for {who} and none is stored \
                         (HTTP {}): git-lfs will ask for one on the next push or fetch; store it \
                         with your credential helper to avoid that",
                        redact(&lfs.url),
                        c.http_status.unwrap_or(0)
                    )),
                    "unknown" => notes.push(format!(
                        "could not check the credential for the LFS server {} ({who}): {}",
                        redact(&lfs.url),
                        c.error.as_deref().unwrap_or("unexpected answer")
                    )),
                    _ => {}
                }
                credential_checks.push(c);
            }
        }
    }

    if (standalone || any_xet_remote) && crate::lfs::prune::prune_verifies_always(git) {
        warnings.push(
            "lfs.pruneverifyremotealways is true, but git-lfs cannot verify objects git-xet \
                 stores in standalone mode (it does not ask the agent): git-xet refuses those \
                 checks, so `git lfs prune` prunes nothing reachable and `git lfs fetch --prune` \
                 fails; prune with `git xet prune` instead, and unset it (`git config --unset \
                 lfs.pruneverifyremotealways`)"
                .to_string(),
        );
    }

    let hooks_dir = hooks::hooks_dir(git).ok();
    let pre_push_hook = hooks_dir
        .as_deref()
        .map_or(HookKind::None, |d| hooks::kind_in(d, "pre-push"))
        .name();
    let pre_push_chained = hooks_dir
        .as_deref()
        .map(|d| d.join(format!("pre-push{}", hooks::BEFORE_SUFFIX)))
        .filter(|p| pre_push_hook == "git-xet" && p.is_file())
        .map(|p| p.display().to_string());

    let journal_path = journal::path(&common);
    let (exists, records) = match std::fs::read_to_string(&journal_path) {
        Ok(text) => (
            true,
            text.lines()
                .filter(|l| serde_json::from_str::<journal::Record>(l).is_ok())
                .count() as u64,
        ),
        Err(_) => (false, 0),
    };
    let objects = journal::read(&common).map(|m| m.len() as u64).unwrap_or(0);

    // A store that is missing or empty is normal before the first push, but not when this
    // repository already has LFS files that must come from it.
    let storeless: Vec<String> = checked
        .iter()
        .filter(|(_, c)| matches!(c.state, Some("missing" | "empty")))
        .map(|(s, _)| s.display())
        .collect();
    if !storeless.is_empty() && have_lfs {
        let files = lfs_file_count(git);
        if files > 0 {
            for dir in storeless {
                warnings.push(format!(
                    "this repository has {files} LFS file{} but the endpoint directory {dir} \
                     holds no store, so they cannot be downloaded from it: check the path (`git \
                     xet install --local --endpoint DIR`, or `--remote NAME` for one remote)",
                    if files == 1 { "" } else { "s" }
                ));
            }
        }
    }

    Ok(Repository {
        work_tree,
        git_dir: common.display().to_string(),
        mode: if standalone {
            "standalone"
        } else {
            "negotiated"
        },
        standalone_agent,
        endpoint: endpoint.as_ref().map(|(spec, source)| EndpointInfo {
            kind: spec_kind(spec),
            value: redact(&spec.display()),
            source: source.clone(),
            state: endpoint_state,
            credential: endpoint_credential,
        }),
        remotes: remote_infos,
        lfs_urls,
        reachability,
        credential_checks,
        store,
        hooks_dir: hooks_dir.map(|d| d.display().to_string()),
        pre_push_hook,
        pre_push_chained,
        journal: JournalInfo {
            path: journal_path.display().to_string(),
            exists,
            records,
            objects,
        },
    })
}

fn spec_kind(spec: &EndpointSpec) -> &'static str {
    match spec {
        EndpointSpec::Http(_) => "http",
        EndpointSpec::Dir(_) => "dir",
    }
}

/// What one endpoint was found to be: for a URL, whether it answers and accepts the credential
/// the agent would send; for a directory, what it holds. Reads only: nothing is created.
#[derive(Debug, Clone, Default)]
struct EndpointCheck {
    health: Option<Reachability>,
    credential: Option<CredentialCheck>,
    store: Option<DirInfo>,
    state: Option<&'static str>,
}

fn check_endpoint(
    git: &Git,
    spec: &EndpointSpec,
    source: &str,
    no_network: bool,
    warnings: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> EndpointCheck {
    // What to run to point git-xet elsewhere, for the place this endpoint was configured.
    let fix = match source
        .strip_prefix("git config remote.")
        .and_then(|r| r.rsplit_once('.'))
    {
        Some((remote, _)) => {
            format!("`git xet install --local --endpoint URL-or-DIR --remote {remote}`")
        }
        None if source.starts_with("environment") => {
            format!("a right {}, or unset it", settings::ENDPOINT_ENV)
        }
        None => "`git xet install --local --endpoint URL-or-DIR`".to_string(),
    };
    let mut c = EndpointCheck::default();
    match spec {
        EndpointSpec::Http(url) => {
            if no_network {
                return c;
            }
            let health = probe(&format!("{url}/health"));
            if !health.reachable {
                warnings.push(format!(
                    "the endpoint {} ({source}) does not answer ({}): is the server running and \
                     the URL right?",
                    redact(url),
                    health.error.as_deref().unwrap_or("no answer")
                ));
            } else {
                let cred = probe_endpoint_credential(git, url);
                let bare = settings::split_userinfo(url).bare;
                match cred.verdict {
                    "refused" => warnings.push(format!(
                        "the endpoint {} refused the credential git-xet would send (from {}; \
                         HTTP {}): the stored credential is wrong or expired. Store the right \
                         token: `printf 'url={bare}\\nusername=git\\npassword=TOKEN\\n\\n' | git \
                         credential approve` (after `git credential reject` of the old one), or \
                         set GIT_XET_TOKEN",
                        redact(url),
                        cred.source.as_deref().unwrap_or("?"),
                        cred.http_status.unwrap_or(0)
                    )),
                    "missing" => warnings.push(format!(
                        "the endpoint {} needs a token (HTTP {}) and git-xet has none: set \
                         GIT_XET_TOKEN, or store it with `printf \
                         'url={bare}\\nusername=git\\npassword=TOKEN\\n\\n' | git credential \
                         approve`",
                        redact(url),
                        cred.http_status.unwrap_or(0)
                    )),
                    "unknown" => notes.push(format!(
                        "could not check the credential for {}: {}",
                        redact(url),
                        cred.error.as_deref().unwrap_or("unexpected answer")
                    )),
                    _ => {}
                }
                c.credential = Some(cred);
            }
            c.health = Some(health);
        }
        EndpointSpec::Dir(dir) => {
            let state = settings::inspect_dir_endpoint(dir);
            let shown = format!("{} ({source})", dir.display());
            c.state = Some(match &state {
                DirState::Store { .. } => "store",
                DirState::OtherVersion(_) => "other_version",
                DirState::Empty { .. } => "empty",
                DirState::Missing => "missing",
                DirState::NotAStore => "not_a_store",
                DirState::NotADirectory => "not_a_directory",
                DirState::CannotCreate(_) => "cannot_create",
                DirState::Unreadable(_) => "unreadable",
            });
            match &state {
                DirState::Store { writable: true } => {}
                DirState::Store { writable: false } | DirState::Empty { writable: false } => {
                    warnings.push(format!(
                        "the endpoint directory {shown} is not writable by you, so pushes will \
                         fail: fix its permissions, or use another endpoint: {fix}"
                    ))
                }
                DirState::Empty { writable: true } => notes.push(format!(
                    "the endpoint directory {shown} is empty: the first push makes it a store"
                )),
                DirState::Missing => notes.push(format!(
                    "the endpoint directory {shown} does not exist yet: the first push creates \
                     it (nothing can be downloaded from it until then)"
                )),
                DirState::OtherVersion(_) | DirState::NotAStore | DirState::NotADirectory => {
                    warnings.push(format!(
                        "the endpoint directory {shown} {}: git-xet can neither push to it nor \
                         pull from it; point git-xet at a store directory (a new or empty one \
                         for a fresh store): {fix}",
                        state.why_not_a_store().unwrap_or_default()
                    ))
                }
                DirState::CannotCreate(_) | DirState::Unreadable(_) => warnings.push(format!(
                    "the endpoint directory {shown} {}: pushes will fail; fix the path or its \
                     permissions, or use another endpoint: {fix}",
                    state.why_not_a_store().unwrap_or_default()
                )),
            }
            c.store = Some(dir_info(Some(dir.clone())));
        }
    }
    c
}

/// `GET <endpoint>/v1/lfs-files/<zero oid>` with the token the agent would send (without
/// prompting for one): a 404 means the server accepted it, a 401/403 that it did not.
fn probe_endpoint_credential(git: &Git, url: &str) -> CredentialCheck {
    let bare = settings::split_userinfo(url).bare;
    let token = settings::endpoint_token_quiet(git, url);
    let target = format!("{bare}/v1/lfs-files/{}", "0".repeat(64));
    let mut check = CredentialCheck {
        url: redact(&target),
        source: token.as_ref().map(|(_, o)| o.describe().to_string()),
        http_status: None,
        verdict: "unknown",
        error: None,
    };
    let Ok(client) = probe_client() else {
        check.error = Some("cannot build an HTTP client".into());
        return check;
    };
    let mut request = client.get(&target);
    if let Some((t, _)) = &token {
        request = request.bearer_auth(t);
    }
    match request.send() {
        Ok(response) => {
            let status = response.status().as_u16();
            check.http_status = Some(status);
            // 404: the server looked the (made-up) oid up, so it accepted the request.
            check.verdict = credential_verdict(status, token.is_some(), true);
            if check.verdict == "unknown" {
                check.error = Some(format!("HTTP {status}"));
            }
        }
        Err(e) => check.error = Some(error_chain(&e)),
    }
    check
}

/// A download batch request without objects to the LFS server `lfs_url`, as git-lfs would
/// send it: without a credential first, then with the one git's credential helpers hold (never
/// prompting) if the server asks for one.
fn probe_lfs_credential(git: &Git, lfs_url: &str) -> CredentialCheck {
    let split = settings::split_userinfo(lfs_url);
    let target = format!("{}/objects/batch", split.bare.trim_end_matches('/'));
    let mut check = CredentialCheck {
        url: redact(&target),
        source: None,
        http_status: None,
        verdict: "unknown",
        error: None,
    };
    let Ok(client) = probe_client() else {
        check.error = Some("cannot build an HTTP client".into());
        return check;
    };
    let send = |auth: Option<(&str, &str)>| {
        let mut r = client
            .post(&target)
            .header("Accept", "application/vnd.git-lfs+json")
            .header("Content-Type", "application/vnd.git-lfs+json")
            .body(r#"{"operation":"download","transfers":["basic"],"objects":[]}"#);
        if let Some((user, password)) = auth {
            r = r.basic_auth(user, Some(password));
        }
        r.send().map(|resp| resp.status().as_u16())
    };
    let mut result = send(None);
    if let Ok(401 | 403) = result {
        let credential = settings::stored_credential(git, &split.with_user)
            .or_else(|| split.password.clone().map(|p| (String::from("git"), p)));
        if let Some((user, password)) = credential {
            check.source = Some("your git credential helper".into());
            result = send(Some((&user, &password)));
        }
    }
    match result {
        Ok(status) => {
            check.http_status = Some(status);
            // 404 here is "no such repository", which says nothing about the credential.
            check.verdict = credential_verdict(status, check.source.is_some(), false);
            if check.verdict == "unknown" {
                check.error = Some(format!("HTTP {status}"));
            }
        }
        Err(e) => check.error = Some(error_chain(&e)),
    }
    check
}

/// `accepted` / `not_needed` / `refused` / `missing` / `unknown` for an answer (`sent`: with a
/// credential; `not_found_ok`: a 404 means the request itself was accepted).
fn credential_verdict(status: u16, sent: bool, not_found_ok: bool) -> &'static str {
    let ok = (200..300).contains(&status) || (status == 404 && not_found_ok);
    match (ok, status, sent) {
        (true, _, true) => "accepted",
        (true, _, false) => "not_needed",
        (false, 401 | 403, true) => "refused",
        (false, 401 | 403, false) => "missing",
        _ => "unknown",
    }
}

fn probe_client() -> reqwest::Result<reqwest::blocking::Client> {
    reqwest::blocking::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .connect_timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("git-xet/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Whether a remote URL makes git-lfs authenticate over ssh (`ssh://…`, `user@host:path`).
fn is_ssh_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("ssh://") || lower.starts_with("git+ssh://") {
        return true;
    }
    !url.contains("://")
        && url
            .split_once(':')
            .is_some_and(|(host, _)| !host.contains('/') && host.len() > 1)
}

/// How many files of the current checkout git-lfs tracks (`git lfs ls-files --name-only`).
fn lfs_file_count(git: &Git) -> usize {
    git.output(["lfs", "ls-files", "--name-only"])
        .ok()
        .filter(|o| o.status.success())
        .map_or(0, |o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .count()
        })
}

/// `lfs.<url>.standalonetransferagent` keys and values.
fn url_standalone_agents(git: &Git) -> Vec<(String, String)> {
    let Ok(out) = git.output([
        "config",
        "--get-regexp",
        r"^lfs\..*\.standalonetransferagent$",
    ]) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The LFS URLs `git lfs env` reports: `Endpoint=URL (auth=…)` for the default remote and
/// `Endpoint (NAME)=URL (auth=…)` for the others.
fn lfs_env_urls(git: &Git) -> Vec<LfsUrl> {
    to_lfs_urls(settings::lfs_env_endpoints(git))
}

fn to_lfs_urls(pairs: Vec<(Option<String>, String)>) -> Vec<LfsUrl> {
    pairs
        .into_iter()
        .map(|(remote, url)| LfsUrl {
            remote,
            url,
            source: "git lfs env".to_string(),
        })
        .collect()
}

/// The LFS URL of each remote as git-lfs would derive it, for when git-lfs is missing:
/// `remote.<name>.lfsurl`, else `lfs.url`, else the remote's URL + `/info/lfs`.
fn derived_lfs_urls(git: &Git) -> Vec<LfsUrl> {
    let remotes = git.run(&["remote"]).unwrap_or_default();
    let lfs_url = git.config_get("lfs.url").ok().flatten();
    let mut urls = Vec::new();
    for name in remotes.lines().map(str::trim).filter(|n| !n.is_empty()) {
        let (url, source) = if let Ok(Some(u)) = git.config_get(&format!("remote.{name}.lfsurl")) {
            (u, format!("remote.{name}.lfsurl"))
        } else if let Some(u) = &lfs_url {
            (u.clone(), "lfs.url".to_string())
        } else if let Some(u) = remote_url(git, name) {
            (
                lfs_url_from_remote(&u),
                format!("remote.{name}.url + /info/lfs"),
            )
        } else {
            continue;
        };
        urls.push(LfsUrl {
            remote: Some(name.to_string()),
            url,
            source,
        });
    }
    urls
}

/// The URL of remote `name` with `url.<base>.insteadOf` applied, as git and git-lfs use it
/// (`git remote get-url`).
fn remote_url(git: &Git, name: &str) -> Option<String> {
    git.run(&["remote", "get-url", name])
        .ok()
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
}

/// git-lfs's rule: `<url>.git/info/lfs`, or `<url>/info/lfs` when it already ends in `.git`;
/// `user@host:path` becomes `https://host/path`.
fn lfs_url_from_remote(remote: &str) -> String {
    let mut url = remote.trim().trim_end_matches('/').to_string();
    if !url.contains("://") {
        if let Some((host, path)) = url.split_once(':') {
            if !host.contains('/') && !path.starts_with("//") && host.len() > 1 {
                let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
                url = format!("https://{host}/{}", path.trim_start_matches('/'));
            }
        }
    } else if let Some(rest) = url.strip_prefix("ssh://") {
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = host.split(':').next().unwrap_or(host);
        url = format!("https://{host}/{path}");
    }
    if url.ends_with(".git") {
        format!("{url}/info/lfs")
    } else {
        format!("{url}.git/info/lfs")
    }
}

/// `scheme://host[:port]` of an http(s) URL, without user info.
fn http_origin(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return None;
    }
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() {
        return None;
    }
    Some(format!("{scheme}://{host}"))
}

/// `GET url` with a [`PROBE_TIMEOUT`]: reachable if anything answers over HTTP; a git-xet
/// server's `/health` answers `{"status":"ok","version":…}`.
fn probe(url: &str) -> Reachability {
    let start = Instant::now();
    let mut check = Reachability {
        url: redact(url),
        reachable: false,
        http_status: None,
        git_xet_server: false,
        server_version: None,
        millis: 0,
        error: None,
    };
    // `/health` needs no credential: a password in the URL is not sent, and a redirect is
    // an answer, not followed.
    let bare = settings::split_userinfo(url).bare;
    let client = reqwest::blocking::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .connect_timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("git-xet/", env!("CARGO_PKG_VERSION")))
        .build();
    let result = client.and_then(|c| c.get(&bare).send());
    match result {
        Ok(response) => {
            check.reachable = true;
            let status = response.status();
            check.http_status = Some(status.as_u16());
            if status.is_success() {
                let mut body = Vec::new();
                // /health is tiny; read no more than 64 KiB of whatever answered.
                let _ = response.take(64 << 10).read_to_end(&mut body);
                if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) {
                    if value.get("status").and_then(|s| s.as_str()) == Some("ok") {
                        check.git_xet_server = true;
                        check.server_version = value
                            .get("version")
                            .and_then(|v| v.as_str())
                            .map(String::from);
                    }
                }
            }
        }
        Err(e) => {
            check.error = Some(if e.is_timeout() {
                format!("no answer within {} s", PROBE_TIMEOUT.as_secs())
            } else if e.is_connect() {
                format!("cannot connect: {}", innermost(&e))
            } else {
                error_chain(&e)
            });
        }
    }
    check.millis = start.elapsed().as_millis() as u64;
    check
}

/// The message of the deepest source of an error (for a refused connection, the OS's words).
fn innermost(e: &dyn std::error::Error) -> String {
    let mut last = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    last
}

/// An error and its sources, without repeating a message its parent already includes.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// The local cache directory, as the shard cache computes it (`GIT_XET_CACHE_DIR`, else the
/// platform's cache directory for git-xet).
pub(crate) fn cache_dir() -> Option<PathBuf> {
    crate::store::ShardCache::root_dir().ok()
}

/// Whether `dir` exists, and the total size and number of the files under it (symbolic links
/// are not followed; unreadable parts are skipped).
fn dir_info(dir: Option<PathBuf>) -> DirInfo {
    let Some(dir) = dir else {
        return DirInfo::default();
    };
    let mut info = DirInfo {
        path: Some(dir.display().to_string()),
        exists: dir.is_dir(),
        bytes: 0,
        files: 0,
    };
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                info.bytes += meta.len();
                info.files += 1;
            }
        }
    }
    info
}

/// `1234567` → `1.2 MiB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn setting_text(s: &Option<Setting>) -> String {
    match s {
        Some(s) => format!("{}  [{}]", s.value, s.scope),
        None => "(not set)".to_string(),
    }
}

fn dir_text(info: &DirInfo) -> String {
    let path = info.path.as_deref().unwrap_or("(unknown: HOME is not set)");
    if !info.exists {
        format!("{path} (does not exist yet)")
    } else {
        format!(
            "{path} ({}, {} file{})",
            human_size(info.bytes),
            info.files,
            if info.files == 1 { "" } else { "s" }
        )
    }
}

fn check_text(c: &Reachability) -> String {
    if c.reachable {
        let what = if c.git_xet_server {
            format!(
                "git-xet server {}",
                c.server_version.as_deref().unwrap_or("(version unknown)")
            )
        } else {
            "not a git-xet server (no git-xet /health there)".to_string()
        };
        format!(
            "reachable: {what}; GET {} answered HTTP {} in {} ms",
            c.url,
            c.http_status.unwrap_or(0),
            c.millis
        )
    } else {
        format!(
            "unreachable: GET {} failed: {}",
            c.url,
            c.error.as_deref().unwrap_or("no answer")
        )
    }
}

fn credential_text(c: &CredentialCheck) -> String {
    let from = c
        .source
        .as_deref()
        .map_or("no credential".to_string(), |s| {
            format!("credential from {s}")
        });
    let status = c
        .http_status
        .map_or(String::new(), |s| format!(" (HTTP {s})"));
    match c.verdict {
        "accepted" => format!("{from} accepted by {}{status}", c.url),
        "not_needed" => format!("{} needs no credential{status}", c.url),
        "refused" => format!("{from} REFUSED by {}{status}", c.url),
        "missing" => format!("{} NEEDS a credential and none is stored{status}", c.url),
        _ => format!(
            "{from}: {} gave no clear answer ({})",
            c.url,
            c.error.as_deref().unwrap_or("unknown")
        ),
    }
}

fn remote_text(r: &RemoteInfo) -> String {
    let how = match r.transfer {
        "standalone" => match &r.endpoint {
            Some(e) => {
                let state = match e.state {
                    Some("store") => "; a store".to_string(),
                    Some(s) => format!("; {}", s.replace('_', " ")),
                    None => String::new(),
                };
                let credential = e.credential.as_ref().map_or(String::new(), |c| {
                    format!("; credential {}", c.verdict.replace('_', " "))
                });
                format!(
                    "git-xet standalone -> {} (from {}{state}{credential})",
                    e.value, e.source
                )
            }
            None => "git-xet standalone -> NO ENDPOINT".to_string(),
        },
        "git-lfs-file" => "git-lfs's own file adapter (git-xet is not used)".to_string(),
        "other-agent" => format!(
            "standalone agent {:?} (not git-xet)",
            r.standalone_agent.as_deref().unwrap_or("?")
        ),
        _ => "negotiated with its LFS server".to_string(),
    };
    format!(
        "{}: {how}; LFS URL {}",
        r.name,
        r.lfs_url.as_deref().unwrap_or("(unknown)")
    )
}

fn render(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "git-xet  {}  {}",
        r.git_xet.version,
        r.git_xet.path.as_deref().unwrap_or("(path unknown)")
    )?;
    writeln!(out, "git      {}", r.git.as_deref().unwrap_or("not found"))?;
    writeln!(
        out,
        "git-lfs  {}",
        r.git_lfs
            .as_deref()
            .unwrap_or("not found — install it: https://git-lfs.com")
    )?;

    if r.git.is_some() {
        let g = &r.registration;
        writeln!(out)?;
        writeln!(
            out,
            "Agent registration: {}",
            match (g.registered, g.runnable) {
                (false, _) => "NOT REGISTERED",
                (true, Some(false)) => "registered, but the program cannot be run",
                (true, _) => "registered",
            }
        )?;
        let rows = [
            ("lfs.customtransfer.xet.path", &g.path),
            ("lfs.customtransfer.xet.args", &g.args),
            ("lfs.customtransfer.xet.concurrent", &g.concurrent),
            ("filter.lfs.process", &g.filter_lfs_process),
        ];
        for (key, value) in rows {
            writeln!(out, "  {key:<35} {}", setting_text(value))?;
        }
        for (key, value) in [
            ("lfs.customtransfer.xet.direction", &g.direction),
            ("lfs.basictransfersonly", &g.basic_transfers_only),
        ] {
            if value.is_some() {
                writeln!(out, "  {key:<35} {}", setting_text(value))?;
            }
        }
        if g.this_executable == Some(false) {
            writeln!(
                out,
                "  (the registered program is another git-xet than this one)"
            )?;
        }
    }

    writeln!(out)?;
    match &r.repository {
        None => writeln!(out, "Repository: none (not inside a git repository)")?,
        Some(repo) => {
            writeln!(
                out,
                "Repository {}",
                repo.work_tree.as_deref().unwrap_or(&repo.git_dir)
            )?;
            let label = |s: &str| format!("  {s:<10}");
            if repo.mode == "standalone" {
                let agent = repo.standalone_agent.as_ref();
                writeln!(
                    out,
                    "{} standalone (lfs.standalonetransferagent = xet  [{}]): no LFS server; \
                     git-xet stores objects at the endpoint",
                    label("mode"),
                    agent.map_or("", |a| a.scope.as_str())
                )?;
            } else {
                writeln!(
                    out,
                    "{} negotiated: the LFS server chooses; git-xet is used when it offers xet",
                    label("mode")
                )?;
            }
            match &repo.endpoint {
                Some(e) => writeln!(
                    out,
                    "{} {} ({}; from {})",
                    label("endpoint"),
                    e.value,
                    if e.kind == "http" { "URL" } else { "directory" },
                    e.source
                )?,
                None if repo.mode == "standalone" => {
                    writeln!(out, "{} NONE SET", label("endpoint"))?
                }
                None => {}
            }
            if let Some(store) = &repo.store {
                writeln!(out, "{} {}", label("store"), dir_text(store))?;
            }
            for u in repo.lfs_urls.iter().filter(|_| repo.mode != "standalone") {
                let remote = u.remote.as_deref().unwrap_or("default remote");
                writeln!(
                    out,
                    "{} {} ({remote}; from {})",
                    label("LFS URL"),
                    redact(&u.url),
                    u.source
                )?;
            }
            for c in &repo.reachability {
                writeln!(out, "{} {}", label("server"), check_text(c))?;
            }
            if let Some(c) = repo.endpoint.as_ref().and_then(|e| e.credential.as_ref()) {
                writeln!(out, "{} {}", label("credential"), credential_text(c))?;
            }
            for c in &repo.credential_checks {
                writeln!(out, "{} {}", label("credential"), credential_text(c))?;
            }
            for r in &repo.remotes {
                writeln!(out, "{} {}", label("remote"), remote_text(r))?;
            }
            let hook = match (repo.pre_push_hook, &repo.pre_push_chained) {
                ("git-xet", Some(chained)) => format!("git-xet's check, then {chained}"),
                ("git-xet", None) => "git-xet's check, then `git lfs pre-push`".to_string(),
                ("git-lfs", _) => "git-lfs's (no git-xet check)".to_string(),
                ("other", _) => "your own hook (no git-xet check)".to_string(),
                _ => "none".to_string(),
            };
            writeln!(out, "{} {hook}", label("pre-push"))?;
            writeln!(
                out,
                "{} {} ({})",
                label("journal"),
                repo.journal.path,
                if repo.journal.exists {
                    format!(
                        "{} record{}, {} object{}",
                        repo.journal.records,
                        if repo.journal.records == 1 { "" } else { "s" },
                        repo.journal.objects,
                        if repo.journal.objects == 1 { "" } else { "s" }
                    )
                } else {
                    "no transfers yet".to_string()
                }
            )?;
        }
    }

    writeln!(out)?;
    writeln!(out, "Cache {}", dir_text(&r.cache))?;

    if !r.notes.is_empty() {
        writeln!(out)?;
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
    }
    writeln!(out)?;
    if r.warnings.is_empty() {
        writeln!(out, "No problems found.")?;
    } else {
        writeln!(out, "Warnings:")?;
        for w in &r.warnings {
            writeln!(out, "  ! {w}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sizes_and_directories() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(5 << 30), "5.0 GiB");
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
