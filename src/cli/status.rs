//! `git xet status` (alias `env`): is the agent registered, which mode and endpoint apply to this
//! repository, where the cache is and how large, is the server reachable.
//!
//! The command only reads: git configuration (with the scope each value comes from), `git lfs
//! env`, the hooks directory, the transfer journal and the cache directory, plus one `GET
//! /health` (3 s timeout) per http(s) endpoint. Missing pieces are findings, not failures: it
//! exits 0 whenever it could look, and 1 only if it could not (say, stdout is closed).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::hooks::{self, HookKind};
use super::CmdResult;
use crate::git::Git;
use crate::lfs::journal;
use crate::lfs::settings::{self, EndpointSpec};
use crate::redact::redact;

/// How long the reachability check waits for an answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Environment variable overriding the cache directory.

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
answers with its version); for a directory endpoint, whether it exists and its size; the pre-push \
hook; and the transfer journal (.git/xet/transfers.jsonl) with its record count.\n\n\
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
    /// The standalone endpoint, if one is configured (whatever the mode).
    endpoint: Option<EndpointInfo>,
    /// The LFS server URLs (negotiated mode).
    lfs_urls: Vec<LfsUrl>,
    /// One check per distinct URL contacted.
    reachability: Vec<Reachability>,
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
}

#[derive(Debug, Serialize)]
struct LfsUrl {
    /// The remote it is for; `None` for the default remote.
    remote: Option<String>,
    url: String,
    source: String,
}

#[derive(Debug, Serialize)]
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

#[derive(Debug, Default, Serialize)]
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
    let endpoint_info = endpoint.as_ref().map(|(spec, source)| EndpointInfo {
        kind: match spec {
            EndpointSpec::Http(_) => "http",
            EndpointSpec::Dir(_) => "dir",
        },
        value: redact(&spec.display()),
        source: source.clone(),
    });

    let mut reachability = Vec::new();
    let mut store = None;
    let mut lfs_urls = Vec::new();
    if standalone {
        match &endpoint {
            None => warnings.push(
                "standalone mode is on (lfs.standalonetransferagent = xet) but no endpoint is \
                 set, so git-xet has nowhere to store objects: run `git xet install --local \
                 --endpoint URL-or-DIR` (or `git config xet.endpoint URL-or-DIR`)"
                    .to_string(),
            ),
            Some((EndpointSpec::Http(url), _)) => {
                if !args.no_network {
                    let check = probe(&format!("{url}/health"));
                    if !check.reachable {
                        warnings.push(format!(
                            "the endpoint {} does not answer ({}): is the server running and \
                             the URL right?",
                            redact(url),
                            check.error.as_deref().unwrap_or("no answer")
                        ));
                    }
                    reachability.push(check);
                }
            }
            Some((EndpointSpec::Dir(dir), _)) => {
                let info = dir_info(Some(dir.clone()));
                if !info.exists {
                    notes.push(format!(
                        "the endpoint directory {} does not exist yet",
                        dir.display()
                    ));
                }
                store = Some(info);
            }
        }
    } else {
        if let Some((_, source)) = &endpoint {
            warnings.push(format!(
                "an endpoint is set ({source}) but standalone mode is off \
                 (lfs.standalonetransferagent is not xet), so it is not used: run \
                 `git xet install --local --endpoint URL-or-DIR` to turn standalone mode on"
            ));
        }
        lfs_urls = if have_lfs {
            lfs_env_urls(git)
        } else {
            derived_lfs_urls(git)
        };
        if lfs_urls.is_empty() {
            notes.push(
                "no remote yet: the LFS server is the remote's, once one is added".to_string(),
            );
        }
        if !args.no_network {
            let mut seen: Vec<String> = Vec::new();
            for lfs in &lfs_urls {
                let Some(origin) = http_origin(&lfs.url) else {
                    continue;
                };
                let url = format!("{origin}/health");
                if seen.contains(&url) {
                    continue;
                }
                seen.push(url.clone());
                let check = probe(&url);
                if !check.reachable {
                    warnings.push(format!(
                        "the LFS server {} does not answer ({})",
                        redact(&origin),
                        check.error.as_deref().unwrap_or("no answer")
                    ));
                }
                reachability.push(check);
            }
        }
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

    Ok(Repository {
        work_tree,
        git_dir: common.display().to_string(),
        mode: if standalone {
            "standalone"
        } else {
            "negotiated"
        },
        standalone_agent,
        endpoint: endpoint_info,
        lfs_urls,
        reachability,
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
    let Ok(out) = git.output(["lfs", "env"]) else {
        return Vec::new();
    };
    parse_lfs_env(&String::from_utf8_lossy(&out.stdout))
}

fn parse_lfs_env(text: &str) -> Vec<LfsUrl> {
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
        urls.push(LfsUrl {
            remote,
            url: url.to_string(),
            source: "git lfs env".to_string(),
        });
    }
    urls
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
        } else if let Ok(Some(u)) = git.config_get(&format!("remote.{name}.url")) {
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
            for u in &repo.lfs_urls {
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
        let urls = parse_lfs_env(text);
        assert_eq!(urls.len(), 2);
        assert_eq!(urls[0].remote, None);
        assert_eq!(urls[0].url, "https://example.com/foo/bar.git/info/lfs");
        assert_eq!(urls[1].remote.as_deref(), Some("up"));
        assert_eq!(urls[1].url, "/tmp/bare.git/info/lfs");
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
