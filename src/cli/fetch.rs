//! `git xet fetch` and `git xet pull`: git's part through git, the LFS objects through
//! git-xet's own downloads in this process ([`crate::agent::fetch`]); the work-tree files are
//! written as their objects land, or from the local objects afterwards
//! ([`crate::agent::fetch::CheckoutPlan`]). A remote whose LFS server does not offer the xet
//! transfer is fetched by `git lfs fetch` instead, as git-lfs would.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::{Command, ExitCode};

use super::CmdResult;
use crate::agent::fetch::{fetch_objects, plan_checkout, FetchError, Mirrors, Progress};
use crate::git::objects;
use crate::git::Git;
use xet_format::pointer::MAX_POINTER_LEN;
use xet_format::LfsOid;
use xet_protocol::util::size::format_size;

/// Objects downloaded at once by default (each on up to three threads of its own).
const DEFAULT_JOBS: usize = 3;

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Download the LFS files of the given refs (default: HEAD) into .git/lfs/objects, \
in this process: several files at once, chunks this machine already has (earlier versions, \
any local object, the download chunk cache) copied instead of fetched, every chunk and each \
file's SHA-256 checked, interrupted downloads resumed. What `git lfs fetch REMOTE REF…` does, \
without git-lfs hashing every object again after the download. The work tree is not changed \
(`git lfs checkout` or `git xet pull` does that).\n\nA remote whose LFS server does not offer \
the xet transfer is fetched with `git lfs fetch`.",
    after_long_help = "Examples:\n  git xet fetch\n  git xet fetch --remote upstream main dev\n  \
git xet fetch --all"
)]
pub(crate) struct FetchArgs {
    /// The remote to fetch from (default: origin).
    #[arg(long, value_name = "REMOTE")]
    pub remote: Option<String>,
    /// The LFS files of every commit reachable from the refs (default: all refs), not only
    /// of their trees: every version, as `git lfs fetch --all`.
    #[arg(long)]
    pub all: bool,
    /// Files downloaded at once.
    #[arg(long, short = 'j', value_name = "N", default_value_t = DEFAULT_JOBS)]
    pub jobs: usize,
    /// The refs whose LFS files are fetched (default: HEAD).
    #[arg(value_name = "REF")]
    pub refs: Vec<String>,
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "`git pull` with the LFS files downloaded by git-xet in this process: runs `git \
pull` (with the arguments after `--`) without git-lfs's downloads, then fetches the LFS files of \
the new HEAD as `git xet fetch` does, then replaces the files that are still pointers with \
copies of the local objects and records them in git's index (files with other attributes than \
`filter=lfs -text` are written by `git checkout -- PATH…` through git-lfs's smudge filter).\n\nA remote whose LFS server does not offer the xet transfer is fetched with `git \
lfs fetch`.",
    after_long_help = "Examples:\n  git xet pull\n  git xet pull -- origin main --rebase"
)]
pub(crate) struct PullArgs {
    /// The remote whose LFS server holds the files (default: the remote `git pull` names
    /// first, else origin).
    #[arg(long, value_name = "REMOTE")]
    pub remote: Option<String>,
    /// Files downloaded at once.
    #[arg(long, short = 'j', value_name = "N", default_value_t = DEFAULT_JOBS)]
    pub jobs: usize,
    /// Arguments for `git pull`, after `--`.
    #[arg(last = true, value_name = "GIT-PULL-ARGS")]
    pub git_args: Vec<OsString>,
}

/// Logging as the agent's (warnings on stderr, or everything from `info` with `GIT_TRACE`;
/// `GIT_XET_LOG` names a file for `info` and up), with the environment's secrets redacted.
pub(crate) fn start_logging() {
    crate::agent::settings::register_env_secrets();
    super::transfer::init_logging(super::transfer::Stderr::AgentTrace);
}

pub fn fetch(args: &FetchArgs) -> CmdResult {
    start_logging();
    let git = Git::new();
    if !git.in_repository() {
        return Err("not inside a git repository: run `git xet fetch` in one".into());
    }
    let refs = if args.refs.is_empty() && !args.all {
        vec!["HEAD".to_string()]
    } else {
        args.refs.clone()
    };
    let scope = match args.all {
        true => Scope::History(&refs),
        false => Scope::Trees(&refs),
    };
    fetch_refs(
        &git,
        Path::new("."),
        args.remote.as_deref(),
        scope,
        args.jobs,
        &Mirrors::default(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Which LFS files of some refs a fetch wants.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// Those of the refs' trees.
    Trees(&'a [String]),
    /// Those of every commit reachable from the refs (all refs when none is given).
    History(&'a [String]),
}

impl Scope<'_> {
    /// The LFS objects wanted, each once, in the order first met.
    fn wanted(self, dir: &Path, repo: &git2::Repository) -> Result<Vec<(LfsOid, u64)>, String> {
        let mut wanted = Vec::new();
        match self {
            Scope::Trees(refs) => {
                let mut seen = std::collections::HashSet::new();
                for rev in refs {
                    let pointers = objects::lfs_pointers(repo, rev).map_err(|e| e.to_string())?;
                    for p in pointers {
                        if seen.insert(p.pointer.oid) {
                            wanted.push((p.pointer.oid, p.pointer.size));
                        }
                    }
                }
            }
            Scope::History(refs) => {
                // Every object of the history once (`git rev-list --objects`), blobs too large
                // to be pointers left out by git; then the pointers among them, read
                // in-process.
                let mut rev_list = Command::new("git");
                rev_list.current_dir(dir).args([
                    "rev-list".to_string(),
                    "--objects".to_string(),
                    format!("--filter=blob:limit={MAX_POINTER_LEN}"),
                ]);
                match refs.is_empty() {
                    true => rev_list.arg("--all"),
                    false => rev_list.args(refs.iter()).arg("--"),
                };
                let out = rev_list
                    .stdin(std::process::Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run git rev-list: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "git rev-list --objects failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let oids: Vec<git2::Oid> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| git2::Oid::from_str(l.split(' ').next()?).ok())
                    .collect();
                let pointers = objects::pointers_among(repo, &oids).map_err(|e| e.to_string())?;
                wanted.extend(pointers.iter().map(|p| (p.oid, p.size)));
            }
        }
        // git-lfs stores no empty object.
        wanted.retain(|(_, size)| *size > 0);
        Ok(wanted)
    }

    /// `git lfs fetch`'s arguments after the remote for the same files.
    fn lfs_fetch_args(self) -> Vec<String> {
        match self {
            Scope::Trees(refs) => refs.to_vec(),
            Scope::History(refs) => std::iter::once("--all".to_string())
                .chain(refs.iter().cloned())
                .collect(),
        }
    }
}

pub fn pull(args: &PullArgs) -> CmdResult {
    start_logging();
    let git = Git::new();
    if !git.in_repository() {
        return Err("not inside a git repository: run `git xet pull` in one".into());
    }
    let mut pull = Command::new("git");
    pull.arg("pull")
        .args(&args.git_args)
        .env("GIT_LFS_SKIP_SMUDGE", "1");
    run_step(&mut pull, "git pull")?;
    let remote = args.remote.clone().or_else(|| {
        let remotes = crate::agent::settings::remotes(&git);
        args.git_args
            .iter()
            .filter_map(|a| a.to_str())
            .find(|a| !a.starts_with('-'))
            .filter(|a| remotes.iter().any(|r| r.name == *a))
            .map(str::to_string)
    });
    fetch_and_checkout(&git, Path::new("."), remote.as_deref(), args.jobs)?;
    // git pull updated the submodules too (their LFS files as pointers) when asked to.
    let recurse = recurse_submodules(&args.git_args).is_some()
        || git
            .config_get("submodule.recurse")
            .ok()
            .flatten()
            .is_some_and(|v| matches!(v.as_str(), "true" | "yes" | "on" | "1"));
    if recurse {
        fetch_in_submodules(Path::new("."), None, args.jobs)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether git's arguments ask for the submodules (`--recurse-submodules`, with its pathspec
/// if given, or `--recursive`): `Some` of the pathspec (`None` for all).
pub(crate) fn recurse_submodules(git_args: &[std::ffi::OsString]) -> Option<Option<&str>> {
    git_args.iter().filter_map(|a| a.to_str()).find_map(|a| {
        if a == "--recurse-submodules" || a == "--recursive" {
            Some(None)
        } else {
            a.strip_prefix("--recurse-submodules=").map(Some)
        }
    })
}

/// Fetches and writes the LFS files of every checked-out submodule of the repository at `dir`
/// (and theirs) as [`fetch_and_checkout`] does for a repository, with `endpoint` (standalone
/// mode) set up in each first.
pub(crate) fn fetch_in_submodules(
    dir: &Path,
    endpoint: Option<&str>,
    jobs: usize,
) -> Result<(), String> {
    let subs = Git::in_dir(dir)
        .run(&["submodule", "foreach", "--quiet", "--recursive", "pwd"])
        .map_err(|e| e.to_string())?;
    for sub in subs.lines() {
        let sub = Path::new(sub);
        if let Some(endpoint) = endpoint {
            super::clone::install_endpoint(sub, endpoint)?;
        }
        fetch_and_checkout(&Git::in_dir(sub), sub, None, jobs)
            .map_err(|e| format!("submodule {}: {e}", sub.display()))?;
    }
    Ok(())
}

/// Fetches the LFS files of HEAD in the repository at `dir` (as [`fetch_refs`]) and writes
/// the work-tree files that are still HEAD's pointers: as their objects are downloaded where
/// it can ([`Mirrors`]), else from the local objects afterwards
/// ([`crate::agent::fetch::CheckoutPlan::apply`]).
pub(crate) fn fetch_and_checkout(
    git: &Git,
    dir: &Path,
    remote: Option<&str>,
    jobs: usize,
) -> Result<(), String> {
    let plan = plan_checkout(git)?;
    let mirrors = plan.as_ref().map(|p| p.mirrors()).unwrap_or_default();
    let head = ["HEAD".to_string()];
    fetch_refs(git, dir, remote, Scope::Trees(&head), jobs, &mirrors)?;
    if let Some(plan) = plan {
        let started = std::time::Instant::now();
        let done = plan.apply(git, dir, &mirrors)?;
        log_checkout(&done, started);
    }
    Ok(())
}

/// Fetches the LFS files `scope` names into the LFS store of the repository `git` is in (at
/// `dir`), writing the work-tree files `mirrors` holds as their objects land; falls back to
/// `git lfs fetch` where the LFS server does not offer xet.
pub(crate) fn fetch_refs(
    git: &Git,
    dir: &Path,
    remote: Option<&str>,
    scope: Scope<'_>,
    jobs: usize,
    mirrors: &Mirrors,
) -> Result<(), String> {
    if let Some(key) = crate::agent::settings::fetch_filter(git) {
        // git-lfs's path lists, applied by git-lfs itself rather than matched again here.
        eprintln!(
            "git-xet: {key} is set; fetching with `git lfs fetch`, which applies it (its \
             downloads still go through git-xet's agent where the server offers it)"
        );
        return git_lfs_fetch(dir, remote, scope);
    }
    let repo = objects::open(git.dir()).map_err(|e| e.to_string())?;
    let wanted = scope.wanted(dir, &repo)?;
    let terminal = std::io::stderr().is_terminal();
    let show = |p: Progress| {
        if terminal {
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\rgit-xet: fetching LFS files: {}/{} ({} of {})",
                p.done,
                p.of,
                format_size(p.bytes),
                format_size(p.of_bytes)
            );
            if p.done == p.of {
                let _ = writeln!(err);
            }
        }
    };
    let started = std::time::Instant::now();
    match fetch_objects(git, remote, &wanted, jobs, mirrors, &show) {
        Ok(report) => {
            tracing::info!(
                fetched = report.fetched,
                bytes = report.bytes,
                present = report.present,
                failed = report.failed.len(),
                millis = started.elapsed().as_millis() as u64,
                peak_rss_kib = crate::agent::transfer::peak_rss_kib().unwrap_or(0),
                "LFS files fetched"
            );
            if report.fetched > 0 || !report.failed.is_empty() {
                eprintln!(
                    "git-xet: {} LFS file{} fetched ({}), {} already here",
                    report.fetched,
                    if report.fetched == 1 { "" } else { "s" },
                    format_size(report.bytes),
                    report.present
                );
            }
            if report.failed.is_empty() {
                return Ok(());
            }
            for (oid, why) in report.failed.iter().take(10) {
                eprintln!("git-xet: cannot fetch {oid}: {why}");
            }
            Err(format!(
                "{} of {} LFS files could not be fetched (see above); run the command again \
                 to retry them (what was downloaded is kept)",
                report.failed.len(),
                report.wanted
            ))
        }
        Err(e @ (FetchError::NotXet { .. } | FetchError::Refused(_))) => {
            match e {
                FetchError::NotXet { remote: lfs } => eprintln!(
                    "git-xet: the LFS server {lfs} does not offer the xet transfer; fetching \
                     with `git lfs fetch`"
                ),
                other => eprintln!(
                    "git-xet: {}; fetching with `git lfs fetch`, which authenticates as git-lfs \
                     does (its downloads still go through git-xet's agent where the server \
                     offers it)",
                    xet_protocol::redact::redact(&other.to_string())
                ),
            }
            git_lfs_fetch(dir, remote, scope)
        }
        Err(e) => Err(xet_protocol::redact::redact(&e.to_string())),
    }
}

/// `git lfs fetch` of what `scope` names from `remote` (default `origin`), in `dir`.
fn git_lfs_fetch(dir: &Path, remote: Option<&str>, scope: Scope<'_>) -> Result<(), String> {
    let mut lfs_fetch = Command::new("git");
    lfs_fetch
        .args(["lfs", "fetch", remote.unwrap_or("origin")])
        .args(scope.lfs_fetch_args())
        .current_dir(dir);
    run_step(&mut lfs_fetch, "git lfs fetch")
}

/// Logs what [`crate::agent::fetch::CheckoutPlan::apply`] did, started at `started`.
pub(crate) fn log_checkout(done: &crate::agent::fetch::CheckedOut, started: std::time::Instant) {
    tracing::info!(
        written = done.copied,
        as_downloaded = done.as_downloaded,
        cloned = done.cloned,
        recorded = done.recorded,
        by_git = done.by_git,
        millis = started.elapsed().as_millis() as u64,
        peak_rss_kib = crate::agent::transfer::peak_rss_kib().unwrap_or(0),
        "LFS files checked out"
    );
}

/// Runs a step with the terminal as its output; an error naming it if it fails.
pub(crate) fn run_step(cmd: &mut Command, name: &str) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status}); see its message above"))
    }
}
